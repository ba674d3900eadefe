//===- LowerRouter.cpp - et.router_topk -------------------------------------===//
//
// A mixture-of-experts router's choice per token: the softmax's maximum and
// denominator, then K rounds of an argmax that each skip what the rounds
// before took. A group of lanes per token: a warp on the GPU (butterflies
// over the lanes), the one thread on the host (the same loops, no shuffles).
//
//===----------------------------------------------------------------------===//

#include "TileLowering.h"

#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"

#include <limits>

using namespace mlir;
using namespace mlir::et;

namespace mlir::et::tile {
namespace {

/// (value, index) pairs ordered as the router ranks experts: higher value
/// first, then the smaller index; a NaN value ranks nowhere.
struct Ranked {
  Value v, i;
};

/// Whether `a` ranks before `b`.
static Value ranksBefore(OpBuilder &b, Location loc, Ranked a, Ranked c) {
  Value gt = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, a.v, c.v);
  Value eq = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, a.v, c.v);
  Value smaller = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, a.i, c.i);
  return arith::OrIOp::create(b, loc, gt, arith::AndIOp::create(b, loc, eq, smaller));
}

static Ranked better(OpBuilder &b, Location loc, Ranked a, Ranked c) {
  Value take = ranksBefore(b, loc, a, c);
  return {arith::SelectOp::create(b, loc, take, a.v, c.v), arith::SelectOp::create(b, loc, take, a.i, c.i)};
}

/// The best over each group of `width` lanes, in every lane of the group.
static Ranked butterflyBest(OpBuilder &b, Location loc, Ranked r, int64_t width) {
  for (int64_t offset = width / 2; offset >= 1; offset /= 2)
    r = better(b, loc, {shuffleXor(b, loc, r.v, offset), shuffleXor(b, loc, r.i, offset)}, r);
  return r;
}

void lowerRouterTopK(RouterTopKOp op, bool gpu) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  TileBuilder h{b, loc};
  const int64_t lanes = gpu ? kWarp : 1;
  const int64_t k = op.getIds().getType().getDimSize(1);
  Value logits = op.getLogits();
  Type i32 = b.getI32Type();
  Value negInf = h.f32(-std::numeric_limits<float>::infinity());
  Value noIndex = arith::ConstantIntOp::create(b, loc, i32, std::numeric_limits<int32_t>::max());
  Groups g = h.groups(lanes);
  Value tokens = memref::DimOp::create(b, loc, logits, 0);
  Value experts = memref::DimOp::create(b, loc, logits, 1);

  scf::ForOp::create(b, loc, g.group, tokens, g.groups, ValueRange{}, [&](OpBuilder &b, Location loc, Value m,
                                                                          ValueRange) {
    // The best expert of this lane's share that ranks after `prev` (all of
    // them when null), then the group's best.
    auto round = [&](const Ranked *prev) -> Ranked {
      auto scan = scf::ForOp::create(
          b, loc, g.lane, experts, h.idx(lanes), ValueRange{negInf, noIndex},
          [&](OpBuilder &b, Location loc, Value e, ValueRange best) {
            Ranked here{memref::LoadOp::create(b, loc, logits, ValueRange{m, e}),
                        arith::IndexCastOp::create(b, loc, i32, e)};
            if (prev) {
              // Taken already: ranks before prev, or is prev.
              Value after = ranksBefore(b, loc, *prev, here);
              here = {arith::SelectOp::create(b, loc, after, here.v, negInf),
                      arith::SelectOp::create(b, loc, after, here.i, noIndex)};
            }
            Ranked r = better(b, loc, here, {best[0], best[1]});
            scf::YieldOp::create(b, loc, ValueRange{r.v, r.i});
          });
      return butterflyBest(b, loc, {scan.getResult(0), scan.getResult(1)}, lanes);
    };
    SmallVector<Ranked> picks{round(nullptr)};
    Value top = picks.front().v;
    // The softmax denominator: sum of exp(x - max) over every expert.
    auto sum = scf::ForOp::create(b, loc, g.lane, experts, h.idx(lanes), ValueRange{h.f32(0.0)},
                                  [&](OpBuilder &b, Location loc, Value e, ValueRange acc) {
                                    Value x = memref::LoadOp::create(b, loc, logits, ValueRange{m, e});
                                    Value p = math::ExpOp::create(b, loc, arith::SubFOp::create(b, loc, x, top));
                                    scf::YieldOp::create(b, loc, ValueRange{arith::AddFOp::create(b, loc, acc[0], p)});
                                  });
    Value denominator = butterflySum(b, loc, sum.getResult(0), lanes);
    for (int64_t j = 1; j < k; ++j)
      picks.push_back(round(&picks.back()));
    SmallVector<Value> probs;
    Value chosen = h.f32(0.0);
    for (Ranked r : picks) {
      Value p = arith::DivFOp::create(b, loc, math::ExpOp::create(b, loc, arith::SubFOp::create(b, loc, r.v, top)),
                                      denominator);
      probs.push_back(p);
      chosen = arith::AddFOp::create(b, loc, chosen, p);
    }
    Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, g.lane, h.idx(0));
    auto write = scf::IfOp::create(b, loc, first, /*withElseRegion=*/false);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(write.thenBlock());
      for (auto [j, r] : llvm::enumerate(picks)) {
        Value w = op.getNormalize() ? arith::DivFOp::create(b, loc, probs[j], chosen).getResult() : probs[j];
        memref::StoreOp::create(b, loc, r.i, op.getIds(), ValueRange{m, h.idx(j)});
        memref::StoreOp::create(b, loc, w, op.getWeights(), ValueRange{m, h.idx(j)});
      }
    }
    scf::YieldOp::create(b, loc);
  });
  op.erase();
}

/// et.router_topk: a warp per token on the GPU, the one thread on the host.
struct RouterTopKLowering : public TileOpLowering<RouterTopKOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult matchAndRewrite(RouterTopKOp op, PatternRewriter &) const override {
    lowerRouterTopK(op, options.gpu);
    return success();
  }
};

} // namespace

void populateRouterLoweringPatterns(RewritePatternSet &patterns, const TileLoweringOptions &options) {
  patterns.add<RouterTopKLowering>(patterns.getContext(), options);
}

} // namespace mlir::et::tile
