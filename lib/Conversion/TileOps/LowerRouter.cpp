//===- LowerRouter.cpp - et.router_topk -------------------------------------===//
//
// A mixture-of-experts router's choice per token: the softmax's maximum and
// denominator, then K rounds of an argmax. With each lane's scores in
// registers (a static number of experts, up to kRouterRegisters per lane),
// the lane sorts its own first and offers its best not yet taken to each
// round, whose winner moves on to its next; scanned from memory, every
// round skips what the rounds before took. A group of lanes per token: a
// warp on the GPU (butterflies over the lanes), the one thread on the host
// (the same code, no shuffles).
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

/// Experts per lane up to which each lane loads its share of a token's
/// scores once and the rounds run on registers (a static number of
/// experts); beyond it, or for a dynamic number, every round scans memory.
/// (Each scan is a chain of loads: 7.6 us per token for 128 experts in 8
/// rounds on an H100, against about 1 us from registers.)
constexpr int64_t kRouterRegisters = 16;

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
  const int64_t staticExperts = op.getLogits().getType().getDimSize(1);
  const int64_t perLane = ShapedType::isDynamic(staticExperts) ? 0 : (staticExperts + lanes - 1) / lanes;
  const bool inRegisters = perLane >= 1 && perLane <= kRouterRegisters;

  // (v, i) of `here` where it ranks after `prev` (not taken yet), else
  // nothing.
  auto after = [&](OpBuilder &b, Location loc, const Ranked *prev, Ranked here) -> Ranked {
    if (!prev)
      return here;
    Value later = ranksBefore(b, loc, *prev, here);
    return {arith::SelectOp::create(b, loc, later, here.v, negInf),
            arith::SelectOp::create(b, loc, later, here.i, noIndex)};
  };

  scf::ForOp::create(b, loc, g.group, tokens, g.groups, ValueRange{}, [&](OpBuilder &b, Location loc, Value m,
                                                                          ValueRange) {
    // In registers: this lane's experts lane, lane + lanes, ... (past the
    // last: nothing).
    // `mine` keeps the scores for the softmax; `queue` the experts a lane
    // still offers, best first (a NaN score ranks nowhere: never offered).
    SmallVector<Ranked> mine, queue;
    if (inRegisters) {
      for (int64_t j = 0; j < perLane; ++j) {
        Value e = arith::AddIOp::create(b, loc, g.lane, h.idx(j * lanes));
        Value inside = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, e, experts);
        Value at = arith::SelectOp::create(b, loc, inside, e, h.idx(0));
        Value v = memref::LoadOp::create(b, loc, logits, ValueRange{m, at});
        mine.push_back({arith::SelectOp::create(b, loc, inside, v, negInf),
                        arith::SelectOp::create(b, loc, inside, arith::IndexCastOp::create(b, loc, i32, e),
                                                noIndex)});
        Value offered = arith::AndIOp::create(
            b, loc, inside, arith::CmpFOp::create(b, loc, arith::CmpFPredicate::ORD, v, v));
        queue.push_back({arith::SelectOp::create(b, loc, offered, v, negInf),
                         arith::SelectOp::create(b, loc, offered, mine.back().i, noIndex)});
      }
      // Odd-even transposition sort, best first.
      for (int64_t r = 0; r < perLane; ++r)
        for (int64_t j = r % 2; j + 1 < perLane; j += 2) {
          Value keep = ranksBefore(b, loc, queue[j], queue[j + 1]);
          Ranked first{arith::SelectOp::create(b, loc, keep, queue[j].v, queue[j + 1].v),
                       arith::SelectOp::create(b, loc, keep, queue[j].i, queue[j + 1].i)};
          Ranked second{arith::SelectOp::create(b, loc, keep, queue[j + 1].v, queue[j].v),
                        arith::SelectOp::create(b, loc, keep, queue[j + 1].i, queue[j].i)};
          queue[j] = first;
          queue[j + 1] = second;
        }
    }
    // The best expert of this lane's share that ranks after `prev` (all of
    // them when null), then the group's best. From registers: the head of
    // the lane's queue, and the lane whose head won moves on to its next
    // (the winner's index is unique; a lane with nothing left offers
    // nothing either way).
    auto round = [&](const Ranked *prev) -> Ranked {
      if (inRegisters) {
        Ranked best = butterflyBest(b, loc, queue.front(), lanes);
        Value won = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, queue.front().i, best.i);
        for (int64_t j = 0; j < perLane; ++j) {
          Ranked next = j + 1 < perLane ? queue[j + 1] : Ranked{negInf, noIndex};
          queue[j] = {arith::SelectOp::create(b, loc, won, next.v, queue[j].v),
                      arith::SelectOp::create(b, loc, won, next.i, queue[j].i)};
        }
        return best;
      }
      auto scan = scf::ForOp::create(
          b, loc, g.lane, experts, h.idx(lanes), ValueRange{negInf, noIndex},
          [&](OpBuilder &b, Location loc, Value e, ValueRange acc) {
            Ranked here{memref::LoadOp::create(b, loc, logits, ValueRange{m, e}),
                        arith::IndexCastOp::create(b, loc, i32, e)};
            Ranked r = better(b, loc, after(b, loc, prev, here), {acc[0], acc[1]});
            scf::YieldOp::create(b, loc, ValueRange{r.v, r.i});
          });
      return butterflyBest(b, loc, {scan.getResult(0), scan.getResult(1)}, lanes);
    };
    SmallVector<Ranked> picks{round(nullptr)};
    Value top = picks.front().v;
    // The softmax denominator: sum of exp(x - max) over every expert.
    auto term = [&](OpBuilder &b, Location loc, Value x) {
      return math::ExpOp::create(b, loc, arith::SubFOp::create(b, loc, x, top));
    };
    Value partial = h.f32(0.0);
    if (inRegisters) {
      for (Ranked here : mine)
        partial = arith::AddFOp::create(b, loc, partial, term(b, loc, here.v));
    } else {
      auto sum = scf::ForOp::create(b, loc, g.lane, experts, h.idx(lanes), ValueRange{partial},
                                    [&](OpBuilder &b, Location loc, Value e, ValueRange acc) {
                                      Value x = memref::LoadOp::create(b, loc, logits, ValueRange{m, e});
                                      scf::YieldOp::create(b, loc,
                                                           ValueRange{arith::AddFOp::create(b, loc, acc[0],
                                                                                            term(b, loc, x))});
                                    });
      partial = sum.getResult(0);
    }
    Value denominator = butterflySum(b, loc, partial, lanes);
    for (int64_t j = 1; j < k; ++j)
      picks.push_back(round(&picks.back()));
    SmallVector<Value> probs;
    Value chosen = h.f32(0.0);
    for (Ranked r : picks) {
      Value p = arith::DivFOp::create(b, loc, term(b, loc, r.v), denominator);
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
