//===- LowerRoPE.cpp - et.rope and et.rope_into -----------------------------===//
//
// Rotary position embeddings, in place or into the attention's buffers.
//
//===----------------------------------------------------------------------===//

#include "TileLowering.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "llvm/ADT/SetVector.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::et;

namespace mlir::et::tile {

/// cos and sin of the RoPE angle `pos * inv_freq[i]` (f32 `pos`, `i`, `d`):
/// inv_freq[i] = theta ^ (-2i / d), with Llama-3's frequency scaling when
/// `scaling` is given (et.rope's description).
static std::pair<Value, Value> ropeAngle(OpBuilder &b, Location loc, float theta, std::optional<ArrayRef<float>> scaling,
                                  Value pos, Value i, Value d) {
  TileBuilder h{b, loc};
  Value expo = arith::DivFOp::create(b, loc, arith::MulFOp::create(b, loc, h.f32(-2.0), i), d);
  Value inv = math::PowFOp::create(b, loc, h.f32(theta), expo);
  if (scaling) {
    float factor = (*scaling)[0], low = (*scaling)[1], high = (*scaling)[2], orig = (*scaling)[3];
    float lowWavelen = orig / low, highWavelen = orig / high;
    Value wavelen = arith::DivFOp::create(b, loc, h.f32(2.0 * M_PI), inv);
    Value scaled = arith::DivFOp::create(b, loc, inv, h.f32(factor));
    // smooth = (orig / wavelen - low) / (high - low)
    Value smooth = arith::DivFOp::create(
        b, loc, arith::SubFOp::create(b, loc, arith::DivFOp::create(b, loc, h.f32(orig), wavelen), h.f32(low)),
        h.f32(high - low));
    Value mid = arith::AddFOp::create(
        b, loc, arith::MulFOp::create(b, loc, arith::SubFOp::create(b, loc, h.f32(1.0), smooth), scaled),
        arith::MulFOp::create(b, loc, smooth, inv));
    Value isLow = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, wavelen, h.f32(lowWavelen));
    Value isHigh = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, wavelen, h.f32(highWavelen));
    inv = arith::SelectOp::create(b, loc, isHigh, inv, arith::SelectOp::create(b, loc, isLow, scaled, mid));
  }
  Value angle = arith::MulFOp::create(b, loc, pos, inv);
  return {math::CosOp::create(b, loc, angle), math::SinOp::create(b, loc, angle)};
}

/// The RoPE rotation of the pair (x1, x2) = (x[i], x[i + D/2]).
static std::pair<Value, Value> ropeRotate(OpBuilder &b, Location loc, Value x1, Value x2, Value c, Value sn) {
  Value y1 = arith::SubFOp::create(b, loc, arith::MulFOp::create(b, loc, x1, c), arith::MulFOp::create(b, loc, x2, sn));
  Value y2 = arith::AddFOp::create(b, loc, arith::MulFOp::create(b, loc, x2, c), arith::MulFOp::create(b, loc, x1, sn));
  return {y1, y2};
}

/// Heads per trip of RoPE's many-token form: their loads go out together.
constexpr int64_t kRoPEHeadUnroll = 8;

/// RoPE. With a static token count (the decode step's rows) one thread per
/// (token, head, pair) element. With a dynamic one (prompt rows) one per
/// (token, pair): the angle's power, cosine and sine are computed once and
/// applied to every head, kRoPEHeadUnroll heads per trip with their loads
/// first. Per element, the prefill's 8-token tiles were 25 us on the H200,
/// most of it the trigonometry repeated for each of 40 heads.
static void lowerRoPE(RoPEOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  TileBuilder h{b, loc};
  Value x = op.getX();
  Type elt = op.getX().getType().getElementType();
  Value m = memref::DimOp::create(b, loc, x, 0);
  Value heads = memref::DimOp::create(b, loc, x, 1);
  Value d = memref::DimOp::create(b, loc, x, 2);
  Value half = arith::DivUIOp::create(b, loc, d, h.idx(2));
  const bool perPair = ShapedType::isDynamic(op.getX().getType().getDimSize(0));
  Value perTok = perPair ? half : arith::MulIOp::create(b, loc, heads, half).getResult();
  Value total = arith::MulIOp::create(b, loc, m, perTok);
  auto toFloat = [&](OpBuilder &b, Value i) {
    return arith::UIToFPOp::create(b, loc, b.getF32Type(),
                                   arith::IndexCastUIOp::create(b, loc, b.getI64Type(), i));
  };
  // cos and sin of token tok's angle for pair i.
  auto angleOf = [&](OpBuilder &b, Value tok, Value i) -> std::pair<Value, Value> {
    Value pos = toFloat(b, idToIndex(b, loc, memref::LoadOp::create(b, loc, op.getPositions(), ValueRange{tok})));
    return ropeAngle(b, loc, op.getTheta().convertToFloat(), op.getLlama3Scaling(), pos, toFloat(b, i),
                     toFloat(b, d));
  };
  auto rotate = [&](OpBuilder &b, Value x1, Value x2, Value c, Value sn) -> std::pair<Value, Value> {
    auto [y1, y2] = ropeRotate(b, loc, x1, x2, c, sn);
    return {fromF32(b, loc, y1, elt), fromF32(b, loc, y2, elt)};
  };
  threadLoop(b, loc, total, [&](OpBuilder &b, Location loc, Value e) {
    Value tok = arith::DivUIOp::create(b, loc, e, perTok);
    Value rest = arith::RemUIOp::create(b, loc, e, perTok);
    if (!perPair) {
      Value hh = arith::DivUIOp::create(b, loc, rest, half);
      Value i = arith::RemUIOp::create(b, loc, rest, half);
      auto [c, sn] = angleOf(b, tok, i);
      Value j = arith::AddIOp::create(b, loc, i, half);
      Value x1 = toF32(b, loc, memref::LoadOp::create(b, loc, x, ValueRange{tok, hh, i}));
      Value x2 = toF32(b, loc, memref::LoadOp::create(b, loc, x, ValueRange{tok, hh, j}));
      auto [y1, y2] = rotate(b, x1, x2, c, sn);
      memref::StoreOp::create(b, loc, y1, x, ValueRange{tok, hh, i});
      memref::StoreOp::create(b, loc, y2, x, ValueRange{tok, hh, j});
      return;
    }
    Value i = rest;
    auto [c, sn] = angleOf(b, tok, i);
    Value j = arith::AddIOp::create(b, loc, i, half);
    Value lastHead = arith::SubIOp::create(b, loc, heads, h.idx(1));
    scf::ForOp::create(
        b, loc, h.idx(0), heads, h.idx(kRoPEHeadUnroll), ValueRange{},
        [&](OpBuilder &b, Location loc, Value h0, ValueRange) {
          TileBuilder h{b, loc};
          SmallVector<Value> hs, ins, x1s, x2s;
          for (int64_t u = 0; u < kRoPEHeadUnroll; ++u) {
            Value hu = arith::AddIOp::create(b, loc, h0, h.idx(u));
            ins.push_back(arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, hu, heads));
            hs.push_back(arith::MinUIOp::create(b, loc, hu, lastHead));
            x1s.push_back(toF32(b, loc, memref::LoadOp::create(b, loc, x, ValueRange{tok, hs.back(), i})));
            x2s.push_back(toF32(b, loc, memref::LoadOp::create(b, loc, x, ValueRange{tok, hs.back(), j})));
          }
          for (int64_t u = 0; u < kRoPEHeadUnroll; ++u) {
            auto [y1, y2] = rotate(b, x1s[u], x2s[u], c, sn);
            auto guard = scf::IfOp::create(b, loc, ins[u], /*withElse=*/false);
            OpBuilder::InsertionGuard g(b);
            b.setInsertionPointToStart(guard.thenBlock());
            memref::StoreOp::create(b, loc, y1, x, ValueRange{tok, hs[u], i});
            memref::StoreOp::create(b, loc, y2, x, ValueRange{tok, hs[u], j});
          }
          scf::YieldOp::create(b, loc);
        });
  });
  op.erase();
}

/// Pairs per lane up to which et.rope_into keeps a (token, head) in
/// registers on the GPU (D <= 512).
constexpr int64_t kRoPEIntoPairs = 8;

/// et.rope_into: one group of lanes (a warp on the GPU, a thread on the
/// CPU) per (token, head), lane l taking the pairs (i, i + D/2) with
/// i = l mod lanes. On the GPU with a static D the head stays in registers:
/// its loads go out together, the squares are summed by a shuffle
/// butterfly, and each element is written once. Otherwise two loops: the
/// sum of squares, then each pair read again, scaled and rotated.
static void lowerRoPEInto(RoPEIntoOp op, bool gpu) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  TileBuilder h{b, loc};
  Value x = op.getX(), out = op.getOut(), w = op.getNorm();
  Type outType = op.getOut().getType().getElementType();
  int64_t lanes = gpu ? kWarp : 1;
  Groups g = h.groups(lanes);
  Value m = memref::DimOp::create(b, loc, x, 0);
  Value heads = memref::DimOp::create(b, loc, x, 1);
  Value d = memref::DimOp::create(b, loc, x, 2);
  Value half = arith::DivUIOp::create(b, loc, d, h.idx(2));
  Value rows = memref::DimOp::create(b, loc, out, 0);
  int64_t staticDim = op.getX().getType().getDimSize(2);
  int64_t pairs = ShapedType::isDynamic(staticDim) ? 0 : llvm::divideCeil(staticDim / 2, lanes);
  const bool inRegisters = gpu && pairs > 0 && pairs <= kRoPEIntoPairs;
  auto toFloat = [&](OpBuilder &b, Value i) -> Value {
    return arith::UIToFPOp::create(b, loc, b.getF32Type(), arith::IndexCastUIOp::create(b, loc, b.getI64Type(), i));
  };
  float eps = op.getEps() ? op.getEps()->convertToFloat() : 0.0f;
  // One token whose position (and norm weights, if any) no task writes:
  // each lane's angles and weights are computed before the task's first
  // wait, off the critical path (a decode step's position is known at
  // launch; the weights come from memory, not L2).
  struct EarlyPair {
    Value cos, sin, w1, w2;
  };
  SmallVector<EarlyPair> early;
  if (inRegisters && op.getX().getType().getDimSize(0) == 1 && isReadOnly(op.getPositions()) &&
      (!w || isReadOnly(w))) {
    SmallVector<Value> needed{op.getPositions()};
    if (w)
      needed.push_back(w);
    if (Operation *at = prefetchPoint(op, needed, /*inIf=*/true)) {
      OpBuilder e(at);
      TileBuilder eh{e, loc};
      Value lane = arith::RemUIOp::create(e, loc, ThreadIdOp::create(e, loc, e.getIndexType()), eh.idx(lanes));
      Value pos = toFloat(e, idToIndex(e, loc, memref::LoadOp::create(e, loc, op.getPositions(), ValueRange{eh.idx(0)})));
      int64_t halfDim = staticDim / 2;
      for (int64_t k = 0; k < pairs; ++k) {
        Value i = arith::MinUIOp::create(e, loc, arith::AddIOp::create(e, loc, lane, eh.idx(k * lanes)),
                                         eh.idx(halfDim - 1));
        EarlyPair p;
        std::tie(p.cos, p.sin) = ropeAngle(e, loc, op.getTheta().convertToFloat(), op.getLlama3Scaling(), pos,
                                           toFloat(e, i), eh.f32(staticDim));
        if (w) {
          p.w1 = toF32(e, loc, memref::LoadOp::create(e, loc, w, ValueRange{i}));
          p.w2 = toF32(e, loc, memref::LoadOp::create(e, loc, w, ValueRange{arith::AddIOp::create(e, loc, i, eh.idx(halfDim))}));
        }
        early.push_back(p);
      }
    }
  }
  // A lane's sum of squares of its pairs (those `valid`): the first
  // halves, then the second halves, each in the order of i. For D/2 a
  // multiple of the lanes that is et.rmsnorm's order over the columns (a
  // lane's columns in increasing order, fused multiply-adds), so a head
  // normalized here has the bits it has through et.rmsnorm.
  auto squares = [&](OpBuilder &b, ArrayRef<Value> x1s, ArrayRef<Value> x2s, ArrayRef<Value> valid) -> Value {
    TileBuilder h{b, loc};
    Value sum = h.f32(0);
    for (ArrayRef<Value> xs : {x1s, x2s})
      for (auto [x, ok] : llvm::zip(xs, valid)) {
        Value v = arith::SelectOp::create(b, loc, ok, x, h.f32(0));
        sum = math::FmaOp::create(b, loc, v, v, sum);
      }
    return sum;
  };
  // 1 / sqrt(mean + eps) of a head from its lanes' sums of squares.
  auto inverse = [&](OpBuilder &b, Value sum) -> Value {
    TileBuilder h{b, loc};
    Value total = butterflySum(b, loc, sum, lanes);
    return math::RsqrtOp::create(b, loc,
                                 arith::AddFOp::create(b, loc, arith::DivFOp::create(b, loc, total, toFloat(b, d)),
                                                       h.f32(eps)));
  };
  scf::ForOp::create(
      b, loc, g.group, arith::MulIOp::create(b, loc, m, heads), g.groups, ValueRange{},
      [&](OpBuilder &b, Location loc, Value unit, ValueRange) {
        TileBuilder h{b, loc};
        Value tok = arith::DivUIOp::create(b, loc, unit, heads);
        Value hh = arith::RemUIOp::create(b, loc, unit, heads);
        Value pos = toFloat(b, idToIndex(b, loc, memref::LoadOp::create(b, loc, op.getPositions(), ValueRange{tok})));
        Value row = arith::AddIOp::create(b, loc, op.getRow(), tok);
        Value inside = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, row, rows);
        auto load = [&](OpBuilder &b, Value mem, ValueRange idx) {
          return toF32(b, loc, memref::LoadOp::create(b, loc, mem, idx));
        };
        // Scales, rotates and stores the pair i (when `store`), with its
        // angle and weights from before the wait when `e` is given.
        auto finish = [&](OpBuilder &b, Value i, Value x1, Value x2, Value inv, Value store,
                          const EarlyPair *e = nullptr) {
          Value j = arith::AddIOp::create(b, loc, i, half);
          if (w) {
            Value w1 = e ? e->w1 : load(b, w, ValueRange{i}), w2 = e ? e->w2 : load(b, w, ValueRange{j});
            x1 = arith::MulFOp::create(b, loc, arith::MulFOp::create(b, loc, x1, inv), w1);
            x2 = arith::MulFOp::create(b, loc, arith::MulFOp::create(b, loc, x2, inv), w2);
          }
          auto [c, sn] = e ? std::pair<Value, Value>{e->cos, e->sin}
                           : ropeAngle(b, loc, op.getTheta().convertToFloat(), op.getLlama3Scaling(), pos,
                                       toFloat(b, i), toFloat(b, d));
          auto [y1, y2] = ropeRotate(b, loc, x1, x2, c, sn);
          auto guard = scf::IfOp::create(b, loc, store, /*withElse=*/false);
          OpBuilder::InsertionGuard gd(b);
          b.setInsertionPointToStart(guard.thenBlock());
          memref::StoreOp::create(b, loc, fromF32(b, loc, y1, outType), out, ValueRange{row, hh, i});
          memref::StoreOp::create(b, loc, fromF32(b, loc, y2, outType), out, ValueRange{row, hh, j});
        };
        if (inRegisters) {
          // Pair k of this lane: i = lane + k * lanes, clamped for the
          // loads (a lane past D/2 loads a valid pair and stores nothing).
          Value lastPair = arith::SubIOp::create(b, loc, half, h.idx(1));
          SmallVector<Value> is, valid, x1s, x2s;
          for (int64_t k = 0; k < pairs; ++k) {
            Value i = arith::AddIOp::create(b, loc, g.lane, h.idx(k * lanes));
            valid.push_back(arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, i, half));
            is.push_back(arith::MinUIOp::create(b, loc, i, lastPair));
            x1s.push_back(load(b, x, ValueRange{tok, hh, is.back()}));
            x2s.push_back(load(b, x, ValueRange{tok, hh, arith::AddIOp::create(b, loc, is.back(), half)}));
          }
          Value inv = w ? inverse(b, squares(b, x1s, x2s, valid)) : Value();
          for (int64_t k = 0; k < pairs; ++k)
            finish(b, is[k], x1s[k], x2s[k], inv, arith::AndIOp::create(b, loc, valid[k], inside),
                   early.empty() ? nullptr : &early[k]);
          scf::YieldOp::create(b, loc);
          return;
        }
        Value inv;
        if (w) {
          // The first halves' squares, then the second halves' (columns
          // in et.rmsnorm's order).
          Value sum = h.f32(0);
          for (int64_t second = 0; second < 2; ++second) {
            auto loop = scf::ForOp::create(
                b, loc, g.lane, half, h.idx(lanes), ValueRange{sum},
                [&](OpBuilder &b, Location loc, Value i, ValueRange acc) {
                  Value v = load(b, x, ValueRange{tok, hh, second ? arith::AddIOp::create(b, loc, i, half).getResult() : i});
                  scf::YieldOp::create(b, loc, ValueRange{math::FmaOp::create(b, loc, v, v, acc[0])});
                });
            sum = loop.getResult(0);
          }
          inv = inverse(b, sum);
        }
        scf::ForOp::create(b, loc, g.lane, half, h.idx(lanes), ValueRange{},
                           [&](OpBuilder &b, Location loc, Value i, ValueRange) {
                             Value x1 = load(b, x, ValueRange{tok, hh, i});
                             Value x2 = load(b, x, ValueRange{tok, hh, arith::AddIOp::create(b, loc, i, half)});
                             finish(b, i, x1, x2, inv, inside);
                             scf::YieldOp::create(b, loc);
                           });
        scf::YieldOp::create(b, loc);
      });
  op.erase();
}

namespace {

struct RoPELowering : public TileOpLowering<RoPEOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult matchAndRewrite(RoPEOp op, PatternRewriter &) const override {
    lowerRoPE(op);
    return success();
  }
};

struct RoPEIntoLowering : public TileOpLowering<RoPEIntoOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult matchAndRewrite(RoPEIntoOp op, PatternRewriter &) const override {
    lowerRoPEInto(op, options.gpu);
    return success();
  }
};

} // namespace

void populateRoPELoweringPatterns(RewritePatternSet &patterns, const TileLoweringOptions &options) {
  patterns.add<RoPELowering, RoPEIntoLowering>(patterns.getContext(), options);
}
} // namespace mlir::et::tile
