//===- LowerAttentionSplit.cpp - et.attention_split and et.attention_merge ---===//
//
// Split-KV decode attention: the loops (CPU, and GPU tiles no other form
// takes), one warp per query group, the tensor-core form, the merge of the
// splits, and the plan that picks a form per op (the staged form, which
// copies the history into shared memory before the wait, is in
// LowerAttentionSplitStaged.cpp).
//
//===----------------------------------------------------------------------===//

#include "AttentionSplitLowering.h"

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

std::pair<Value, Value> splitRange(OpBuilder &b, Location loc, AttentionSplitOp op) {
  Value start = arith::MulIOp::create(b, loc, op.getSplit(), op.getSplitLen());
  Value end = arith::MinSIOp::create(
      b, loc, arith::MinSIOp::create(b, loc, arith::AddIOp::create(b, loc, start, op.getSplitLen()), op.getLen()),
      memref::DimOp::create(b, loc, op.getK(), 0));
  return {start, end};
}

namespace {

/// Chunk `chunk` of a split of `subsplits` output entries: its positions
/// [start, end) (empty when end <= start) and its entry, split x
/// subsplits + chunk. `splitStart` and `splitEnd` are the split's range
/// (splitRange).
struct SplitChunk {
  Value start, end, entry;
};

} // namespace

static SplitChunk splitChunk(OpBuilder &b, Location loc, AttentionSplitOp op, Value splitStart, Value splitEnd,
                      Value chunk) {
  TileBuilder h{b, loc};
  int64_t subsplits = op.getSubsplits();
  Value len = arith::CeilDivUIOp::create(b, loc, op.getSplitLen(), h.idx(subsplits));
  Value start = arith::MinSIOp::create(
      b, loc, arith::AddIOp::create(b, loc, splitStart, arith::MulIOp::create(b, loc, chunk, len)), splitEnd);
  Value end = arith::MinSIOp::create(b, loc, arith::AddIOp::create(b, loc, start, len), splitEnd);
  Value entry = arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, op.getSplit(), h.idx(subsplits)), chunk);
  return {start, end, entry};
}

std::pair<Value, Value> appendRange(OpBuilder &b, Location loc, AttentionSplitOp op, Value start, Value end) {
  Value stable = op.getStable();
  Value rows = memref::DimOp::create(b, loc, op.getNewK(), 0);
  Value lo = arith::MaxSIOp::create(b, loc, stable, start);
  Value hi = arith::MinSIOp::create(b, loc, end, arith::AddIOp::create(b, loc, stable, rows));
  return {lo, hi};
}

Value appendElement(OpBuilder &b, Location loc, AttentionSplitOp op, int64_t which, Value t, Value d) {
  Value src = which ? op.getNewV() : op.getNewK(), cache = which ? op.getV() : op.getK();
  Value r = arith::SubIOp::create(b, loc, t, op.getStable());
  Value x = toF32(b, loc, memref::LoadOp::create(b, loc, src, ValueRange{r, d}));
  Value y = fromF32(b, loc, x, cast<MemRefType>(cache.getType()).getElementType());
  memref::StoreOp::create(b, loc, y, cache, ValueRange{t, op.getKvHead(), d});
  return y;
}

/// An op's `append` rows, for the lowerings that read this step's rows
/// from the caches: the split writes the rows of its range into the caches
/// (one element per thread and trip, rounded to the caches' type), a
/// barrier on the GPU, and the op loses its `append` operands.
static void appendToCaches(AttentionSplitOp op, bool gpu) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  TileBuilder h{b, loc};
  Value start, end;
  std::tie(start, end) = splitRange(b, loc, op);
  auto [lo, hi] = appendRange(b, loc, op, start, end);
  Value rows = arith::MaxSIOp::create(b, loc, arith::SubIOp::create(b, loc, hi, lo), h.idx(0));
  int64_t dim = op.getQ().getType().getDimSize(1);
  threadLoop(b, loc, arith::MulIOp::create(b, loc, rows, h.idx(dim)), [&](OpBuilder &b, Location loc, Value e) {
    TileBuilder h{b, loc};
    Value t = arith::AddIOp::create(b, loc, lo, arith::DivUIOp::create(b, loc, e, h.idx(dim)));
    Value d = arith::RemUIOp::create(b, loc, e, h.idx(dim));
    for (int64_t which = 0; which < 2; ++which)
      appendElement(b, loc, op, which, t, d);
  });
  if (gpu)
    gpu::BarrierOp::create(b, loc);
  op.getNewKMutable().clear();
  op.getNewVMutable().clear();
}

/// Split-KV decode attention: a group of `lanes` threads (a warp on the GPU,
/// one thread on the CPU) per query head; lanes split the head dimension;
/// online softmax over the split's positions.
static void lowerAttentionSplit(AttentionSplitOp op, bool gpu) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  TileBuilder h{b, loc};
  int64_t lanes = gpu ? kWarp : 1;
  int64_t dim = op.getQ().getType().getDimSize(1);
  int64_t per = dim / lanes;
  Groups gr = h.groups(lanes);
  Value lane = gr.lane, group = gr.group, groups = gr.groups;
  Value hq = memref::DimOp::create(b, loc, op.getQ(), 0);
  Value hkv = memref::DimOp::create(b, loc, op.getK(), 1);
  Value gsize = arith::DivUIOp::create(b, loc, hq, hkv);
  Value start, end;
  std::tie(start, end) = splitRange(b, loc, op);
  int64_t subsplits = op.getSubsplits();
  float scale = op.getScale().convertToFloat();
  Value negInf = h.f32(-std::numeric_limits<float>::infinity());
  auto col = [&](OpBuilder &b, int64_t r) {
    return arith::AddIOp::create(b, loc, lane, h.idx(r * lanes));
  };
  // Work items: (query head of the group, chunk of the split).
  Value items = arith::MulIOp::create(b, loc, gsize, h.idx(subsplits));
  scf::ForOp::create(
      b, loc, group, items, groups, ValueRange{},
      [&](OpBuilder &b, Location loc, Value item, ValueRange) {
        Value w = arith::RemUIOp::create(b, loc, item, gsize);
        Value chunk = arith::DivUIOp::create(b, loc, item, gsize);
        SplitChunk range = splitChunk(b, loc, op, start, end, chunk);
        Value cstart = range.start, cend = range.end, entry = range.entry;
        Value empty = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sle, cend, cstart);
        Value qh = arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, op.getKvHead(), gsize), w);
        SmallVector<Value> qv;
        for (int64_t r = 0; r < per; ++r)
          qv.push_back(arith::MulFOp::create(
              b, loc, toF32(b, loc, memref::LoadOp::create(b, loc, op.getQ(), ValueRange{qh, col(b, r)})),
              h.f32(scale)));
        SmallVector<Value> init{negInf, h.f32(0)};
        for (int64_t r = 0; r < per; ++r)
          init.push_back(h.f32(0));
        auto loop = scf::ForOp::create(
            b, loc, cstart, cend, h.idx(1), init,
            [&](OpBuilder &b, Location loc, Value t, ValueRange st) {
              Value partial = h.f32(0);
              for (int64_t r = 0; r < per; ++r) {
                Value kv = toF32(b, loc, memref::LoadOp::create(b, loc, op.getK(),
                                                                ValueRange{t, op.getKvHead(), col(b, r)}));
                partial = math::FmaOp::create(b, loc, qv[r], kv, partial);
              }
              Value dot = butterflySum(b, loc, partial, lanes);
              Value mNew = arith::MaximumFOp::create(b, loc, st[0], dot);
              Value c = math::ExpOp::create(b, loc, arith::SubFOp::create(b, loc, st[0], mNew));
              Value p = math::ExpOp::create(b, loc, arith::SubFOp::create(b, loc, dot, mNew));
              SmallVector<Value> next{mNew, arith::AddFOp::create(b, loc, arith::MulFOp::create(b, loc, st[1], c), p)};
              for (int64_t r = 0; r < per; ++r) {
                Value vv = toF32(b, loc, memref::LoadOp::create(b, loc, op.getV(),
                                                                ValueRange{t, op.getKvHead(), col(b, r)}));
                next.push_back(math::FmaOp::create(b, loc, p, vv,
                                                   arith::MulFOp::create(b, loc, st[2 + r], c)));
              }
              scf::YieldOp::create(b, loc, next);
            });
        Value m = loop.getResult(0), l = loop.getResult(1);
        Value safeL = arith::SelectOp::create(b, loc, empty, h.f32(1), l);
        for (int64_t r = 0; r < per; ++r) {
          Value out = arith::DivFOp::create(b, loc, loop.getResult(2 + r), safeL);
          out = arith::SelectOp::create(b, loc, empty, h.f32(0), out);
          memref::StoreOp::create(b, loc, out, op.getO(), ValueRange{entry, qh, col(b, r)});
        }
        Value lse = arith::AddFOp::create(b, loc, m, math::LogOp::create(b, loc, safeL));
        lse = arith::SelectOp::create(b, loc, empty, negInf, lse);
        Value isLane0 = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, lane, h.idx(0));
        auto store = scf::IfOp::create(b, loc, isLane0, /*withElse=*/false);
        {
          OpBuilder::InsertionGuard g(b);
          b.setInsertionPointToStart(store.thenBlock());
          memref::StoreOp::create(b, loc, lse, op.getLse(), ValueRange{entry, qh});
        }
        scf::YieldOp::create(b, loc);
      });
  op.erase();
}

/// Combines the partial results of the warps of one output entry of
/// et.attention_split: warp w left the running maximum and sum of head g
/// (base 2) in ml[w, g, 0 / 1] and its unnormalized output in acc[w, g, :]
/// (a warp with no positions: a maximum of -1e30 and zeros). One thread
/// per (head, d) writes o[entry, headBase + g, d] and lse[entry, headBase + g].
static void combineWarps(OpBuilder &b, Location loc, AttentionSplitOp op, Value smemAcc, Value smemML, Value warps,
                  int64_t groupSize, int64_t dim, Value entry, Value headBase) {
  TileBuilder h{b, loc};
  Value floor = h.f32(-1e30);
  Value negInf = h.f32(-std::numeric_limits<float>::infinity());
  auto exp2Diff = [&](OpBuilder &b, Value a, Value m) -> Value {
    return math::Exp2Op::create(b, loc, arith::SubFOp::create(b, loc, a, m));
  };
  threadLoop(b, loc, h.idx(groupSize * dim), [&](OpBuilder &b, Location loc, Value e) {
    Value g = arith::DivUIOp::create(b, loc, e, h.idx(dim));
    Value d = arith::RemUIOp::create(b, loc, e, h.idx(dim));
    auto mx = scf::ForOp::create(
        b, loc, h.idx(0), warps, h.idx(1), ValueRange{floor},
        [&](OpBuilder &b, Location loc, Value w, ValueRange a) {
          Value mw = memref::LoadOp::create(b, loc, smemML, ValueRange{w, g, h.idx(0)});
          scf::YieldOp::create(b, loc, ValueRange{arith::MaximumFOp::create(b, loc, a[0], mw)});
        });
    Value big = mx.getResult(0);
    auto sums = scf::ForOp::create(
        b, loc, h.idx(0), warps, h.idx(1), ValueRange{h.f32(0), h.f32(0)},
        [&](OpBuilder &b, Location loc, Value w, ValueRange a) {
          Value mw = memref::LoadOp::create(b, loc, smemML, ValueRange{w, g, h.idx(0)});
          Value lw = memref::LoadOp::create(b, loc, smemML, ValueRange{w, g, h.idx(1)});
          Value ow = memref::LoadOp::create(b, loc, smemAcc, ValueRange{w, g, d});
          Value f = exp2Diff(b, mw, big);
          scf::YieldOp::create(b, loc, ValueRange{math::FmaOp::create(b, loc, f, lw, a[0]),
                                                  math::FmaOp::create(b, loc, f, ow, a[1])});
        });
    Value total = sums.getResult(0);
    Value empty = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLE, total, h.f32(0));
    Value safeL = arith::SelectOp::create(b, loc, empty, h.f32(1), total);
    Value out = arith::SelectOp::create(b, loc, empty, h.f32(0),
                                        arith::DivFOp::create(b, loc, sums.getResult(1), safeL));
    Value head = arith::AddIOp::create(b, loc, headBase, g);
    memref::StoreOp::create(b, loc, out, op.getO(), ValueRange{entry, head, d});
    Value isD0 = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, d, h.idx(0));
    auto storeLse = scf::IfOp::create(b, loc, isD0, /*withElse=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(storeLse.thenBlock());
    Value lse = arith::MulFOp::create(
        b, loc, arith::AddFOp::create(b, loc, big, math::Log2Op::create(b, loc, safeL)),
        h.f32(M_LN2));
    lse = arith::SelectOp::create(b, loc, empty, negInf, lse);
    memref::StoreOp::create(b, loc, lse, op.getLse(), ValueRange{entry, head});
  });
}

/// Positions per block of the tensor-core split-KV attention, and slots of
/// a warp's ring: one block in flight while the warp computes the other.
/// (Three and four slots, and blocks of 32 positions, were 8-14 points of
/// copy bandwidth slower at 4k-8k context; docs/experiments/.)
constexpr int64_t kMmaBlock = 16;

constexpr int64_t kMmaSlots = 2;

namespace {

/// The tensor-core pieces of split-KV attention (mma.sync m16n8k16, bf16
/// in, f32 accumulators) that do not depend on where a block's K and V
/// rows come from: the group's query heads are the rows of a 16-row tile (rows past the group hold zero
/// q and are never stored; with 8 heads or fewer the upper half is not
/// carried), and a warp folds blocks of 16 positions into its running
/// state (O, then m and l per half of the rows) with an online softmax in
/// base 2. q and P go to the tensor cores as bf16 pairs hi + lo (lo = the
/// rounding error of hi), so the products keep about 16 bits of their f32
/// values: bf16 alone (8 bits) would lose more than the CUDA-core path's
/// error.
struct MmaSplitTile {
  AttentionSplitOp op;
  Location loc;
  int64_t groupSize, dim, halves, kSteps, dTiles;
  Value lane, warp, quad, quarter, headBase;
  Value zero, floor, negInf, zeroPair;
  SmallVector<SmallVector<Value, 4>> qHi, qLo;

  static bool fits(AttentionSplitOp op) {
    MemRefType qType = op.getQ().getType(), kType = op.getK().getType();
    if (qType.isDynamicDim(0) || kType.isDynamicDim(1))
      return false;
    int64_t dim = qType.getDimSize(1), group = qType.getDimSize(0) / kType.getDimSize(1);
    Type qElem = qType.getElementType();
    return (dim == 64 || dim == 128) && group >= 1 && group <= 16 && kType.getElementType().isBF16() &&
           op.getV().getType().getElementType().isBF16() && (qElem.isF32() || qElem.isBF16());
  }

  /// Thread values (from `tid`) and the q fragments of this thread.
  MmaSplitTile(OpBuilder &b, AttentionSplitOp op, Value tid) : op(op), loc(op.getLoc()) {
    TileBuilder h{b, loc};
    MemRefType qType = op.getQ().getType();
    dim = qType.getDimSize(1);
    groupSize = qType.getDimSize(0) / op.getK().getType().getDimSize(1);
    halves = groupSize > 8 ? 2 : 1;
    kSteps = dim / 16;
    dTiles = dim / 8;
    lane = arith::RemUIOp::create(b, loc, tid, h.idx(kWarp));
    warp = arith::DivUIOp::create(b, loc, tid, h.idx(kWarp));
    quad = arith::DivUIOp::create(b, loc, lane, h.idx(4));
    quarter = arith::RemUIOp::create(b, loc, lane, h.idx(4));
    headBase = arith::MulIOp::create(b, loc, op.getKvHead(), h.idx(groupSize));
    zero = h.f32(0);
    floor = h.f32(-1e30);
    negInf = h.f32(-std::numeric_limits<float>::infinity());
    zeroPair = i32(b, loc, 0);
    // For k16 step ks: a0 / a1 = rows quad / quad + 8 at columns
    // 16 ks + 2 quarter (+1), a2 / a3 the same rows 8 columns on; row r is
    // head headBase + r, scaled by scale * log2(e).
    const float scaleLog2 = op.getScale().convertToFloat() * static_cast<float>(M_LOG2E);
    Type f32 = b.getF32Type(), bf16 = b.getBF16Type();
    auto qPair = [&](int64_t half, Value col) -> std::pair<Value, Value> {
      if (half >= halves)
        return {zeroPair, zeroPair};
      Value row = arith::AddIOp::create(b, loc, quad, h.idx(half * 8));
      Value live = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, row, h.idx(groupSize));
      Value head = arith::AddIOp::create(b, loc, headBase, arith::MinUIOp::create(b, loc, row, h.idx(groupSize - 1)));
      Value v[2], lo[2];
      for (int64_t e = 0; e < 2; ++e) {
        Value x = toF32(b, loc, memref::LoadOp::create(b, loc, op.getQ(),
                                                       ValueRange{head, arith::AddIOp::create(b, loc, col, h.idx(e))}));
        v[e] = arith::SelectOp::create(b, loc, live, arith::MulFOp::create(b, loc, x, h.f32(scaleLog2)), zero);
        Value hi = arith::ExtFOp::create(b, loc, f32, arith::TruncFOp::create(b, loc, bf16, v[e]).getResult());
        lo[e] = arith::SubFOp::create(b, loc, v[e], hi);
      }
      return {packBf16(b, loc, v[0], v[1]), packBf16(b, loc, lo[0], lo[1])};
    };
    for (int64_t ks = 0; ks < kSteps; ++ks) {
      Value col = arith::AddIOp::create(b, loc, h.idx(ks * 16), arith::MulIOp::create(b, loc, quarter, h.idx(2)));
      Value col8 = arith::AddIOp::create(b, loc, col, h.idx(8));
      auto [a0, b0] = qPair(0, col);
      auto [a1, b1] = qPair(1, col);
      auto [a2, b2] = qPair(0, col8);
      auto [a3, b3] = qPair(1, col8);
      qHi.push_back({a0, a1, a2, a3});
      qLo.push_back({b0, b1, b2, b3});
    }
  }

  /// The state's size: O (dTiles x halves x 2 f32), then m and l per half.
  int64_t stateO() const { return dTiles * 2 * halves; }
  SmallVector<Value> initState() const {
    SmallVector<Value> init(stateO(), zero);
    for (int64_t half = 0; half < halves; ++half)
      init.append({floor, zero});
    return init;
  }

  /// The state after the block of positions p0 .. p0 + 15 (those from
  /// `end` on masked), whose K and V rows this lane gives ldmatrix at the
  /// shared addresses kAt and vAt (16 bf16 of a row further for each k16
  /// step of K and d16 step of V): S = q K^T, the online softmax (row
  /// maxima over a row's four lanes), O = alpha O + P V.
  SmallVector<Value> update(OpBuilder &b, ValueRange st, Value p0, Value end, Value kAt, Value vAt) const {
    TileBuilder h{b, loc};
    Type f32 = b.getF32Type(), bf16 = b.getBF16Type();
    const int64_t nO = stateO();
    SmallVector<SmallVector<Value, 4>> s(2, SmallVector<Value, 4>(4, zero));
    for (int64_t ks = 0; ks < kSteps; ++ks) {
      SmallVector<Value, 4> r = ldmatrixX4(b, loc, sharedAt(b, loc, kAt, i32(b, loc, ks * 32)), false);
      for (int64_t nt = 0; nt < 2; ++nt) {
        s[nt] = mmaBf16(b, loc, qHi[ks], {r[2 * nt], r[2 * nt + 1]}, s[nt]);
        s[nt] = mmaBf16(b, loc, qLo[ks], {r[2 * nt], r[2 * nt + 1]}, s[nt]);
      }
    }
    Value pq = arith::AddIOp::create(b, loc, p0, arith::MulIOp::create(b, loc, quarter, h.idx(2)));
    for (int64_t nt = 0; nt < 2; ++nt)
      for (int64_t e = 0; e < 2 * halves; ++e) {
        Value pos = arith::AddIOp::create(b, loc, pq, h.idx(nt * 8 + e % 2));
        Value ok = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, pos, end);
        s[nt][e] = arith::SelectOp::create(b, loc, ok, s[nt][e], negInf);
      }
    SmallVector<Value> out(st.begin(), st.end());
    Value alpha[2];
    for (int64_t half = 0; half < halves; ++half) {
      Value mx = floor;
      for (int64_t nt = 0; nt < 2; ++nt)
        for (int64_t e = 2 * half; e < 2 * half + 2; ++e)
          mx = arith::MaximumFOp::create(b, loc, mx, s[nt][e]);
      for (int64_t off : {1, 2})
        mx = arith::MaximumFOp::create(b, loc, mx, shuffleXor(b, loc, mx, off));
      Value mOld = st[nO + 2 * half];
      Value mNew = arith::MaximumFOp::create(b, loc, mOld, mx);
      alpha[half] = math::Exp2Op::create(b, loc, arith::SubFOp::create(b, loc, mOld, mNew));
      Value sum = zero;
      for (int64_t nt = 0; nt < 2; ++nt)
        for (int64_t e = 2 * half; e < 2 * half + 2; ++e) {
          s[nt][e] = math::Exp2Op::create(b, loc, arith::SubFOp::create(b, loc, s[nt][e], mNew));
          sum = arith::AddFOp::create(b, loc, sum, s[nt][e]);
        }
      out[nO + 2 * half] = mNew;
      out[nO + 2 * half + 1] =
          arith::AddFOp::create(b, loc, arith::MulFOp::create(b, loc, st[nO + 2 * half + 1], alpha[half]), sum);
    }
    // P as the A operand (rows x 16 positions), hi and lo.
    auto packAt = [&](int64_t nt, int64_t half, bool low) -> Value {
      if (half >= halves)
        return zeroPair;
      Value x = s[nt][2 * half], y = s[nt][2 * half + 1];
      if (!low)
        return packBf16(b, loc, x, y);
      auto lo = [&](Value p) -> Value {
        Value hi = arith::ExtFOp::create(b, loc, f32, arith::TruncFOp::create(b, loc, bf16, p).getResult());
        return arith::SubFOp::create(b, loc, p, hi);
      };
      return packBf16(b, loc, lo(x), lo(y));
    };
    SmallVector<Value, 4> aHi = {packAt(0, 0, false), packAt(0, 1, false), packAt(1, 0, false), packAt(1, 1, false)};
    SmallVector<Value, 4> aLo = {packAt(0, 0, true), packAt(0, 1, true), packAt(1, 0, true), packAt(1, 1, true)};
    for (int64_t dp = 0; dp < dim / 16; ++dp) {
      SmallVector<Value, 4> r = ldmatrixX4(b, loc, sharedAt(b, loc, vAt, i32(b, loc, dp * 32)), true);
      for (int64_t t = 0; t < 2; ++t) {
        int64_t nt = 2 * dp + t;
        SmallVector<Value, 4> c;
        for (int64_t e = 0; e < 4; ++e)
          c.push_back(e / 2 < halves
                          ? arith::MulFOp::create(b, loc, st[(nt * halves + e / 2) * 2 + e % 2], alpha[e / 2]).getResult()
                          : zero);
        c = mmaBf16(b, loc, aHi, {r[2 * t], r[2 * t + 1]}, c);
        c = mmaBf16(b, loc, aLo, {r[2 * t], r[2 * t + 1]}, c);
        for (int64_t e = 0; e < 2 * halves; ++e)
          out[(nt * halves + e / 2) * 2 + e % 2] = c[e];
      }
    }
    return out;
  }

  /// This warp's partials (the final state `res`) into acc[warp] and
  /// ml[warp] for the live rows, when `active`: l summed over a row's four
  /// lanes; m and l from the lane of quarter 0.
  void storePartials(OpBuilder &b, ValueRange res, Value active, Value smemAcc, Value smemML) const {
    TileBuilder h{b, loc};
    const int64_t nO = stateO();
    Value isQ0 = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, quarter, h.idx(0));
    for (int64_t half = 0; half < halves; ++half) {
      Value l = res[nO + 2 * half + 1];
      for (int64_t off : {1, 2})
        l = arith::AddFOp::create(b, loc, l, shuffleXor(b, loc, l, off));
      Value row = arith::AddIOp::create(b, loc, quad, h.idx(half * 8));
      Value live = arith::AndIOp::create(
          b, loc, active, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, row, h.idx(groupSize)));
      auto store = scf::IfOp::create(b, loc, live, false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(store.thenBlock());
      TileBuilder hh{b, loc};
      for (int64_t nt = 0; nt < dTiles; ++nt)
        for (int64_t e = 0; e < 2; ++e) {
          Value d = arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, quarter, hh.idx(2)), hh.idx(nt * 8 + e));
          memref::StoreOp::create(b, loc, res[(nt * halves + half) * 2 + e], smemAcc, ValueRange{warp, row, d});
        }
      auto first = scf::IfOp::create(b, loc, isQ0, false);
      b.setInsertionPointToStart(first.thenBlock());
      memref::StoreOp::create(b, loc, res[nO + 2 * half], smemML, ValueRange{warp, row, hh.idx(0)});
      memref::StoreOp::create(b, loc, l, smemML, ValueRange{warp, row, hh.idx(1)});
    }
  }
};

} // namespace

/// Shared memory for the warps' partial results of the CUDA-core split
/// form (each warp's accumulator and (m, l) per query head of the group).
constexpr int64_t kWarpCombineBytes = 40 * 1024;

/// The warps of a worker of `threads` threads that the CUDA-core split form
/// computes with: all of them, or as many as have room for their partial
/// results in kWarpCombineBytes (the others idle: Qwen3-30B-A3B's 8 query
/// heads of 128 per KV head leave room for 9 of 16).
static int64_t splitWarps(int64_t threads, int64_t groupSize, int64_t dim) {
  int64_t maxWarps = (threads > 0 ? threads : 1024) / kWarp;
  return std::min(maxWarps, kWarpCombineBytes / (groupSize * (dim + 2) * 4));
}

/// Whether the form with every warp of the worker on each chunk
/// (lowerAttentionSplitGPU) applies to `op` for a worker of `threads`
/// threads (0: at launch): a static group size, D in {64, 128, 256}, a bf16
/// cache, and the warps' partial results within 40 KiB of shared memory.
static bool warpSplitFits(AttentionSplitOp op, int64_t threads) {
  MemRefType qType = op.getQ().getType(), kType = op.getK().getType();
  int64_t dim = qType.getDimSize(1);
  if (qType.isDynamicDim(0) || kType.isDynamicDim(1) || (dim != 64 && dim != 128 && dim != 256) ||
      !kType.getElementType().isBF16() || !op.getV().getType().getElementType().isBF16())
    return false;
  auto task = op->getParentOfType<TaskOp>();
  if (!task)
    return false;
  int64_t groupSize = qType.getDimSize(0) / kType.getDimSize(1);
  return splitWarps(threads, groupSize, dim) >= 1;
}

/// GPU split-KV attention for a static group size and D in {64, 128, 256}.
/// Every warp of the worker takes part in each chunk (one output entry):
/// the chunk's positions are cut into blocks of `steps` x (32 / P) positions,
/// P = D / 8 lanes per position (each lane loads 16 bytes of K and of V),
/// dealt to the warps in turn. A warp's loop is software-pipelined: the next
/// block's K and V are loaded into registers before the current block is
/// computed, so loads stay in flight while the warp does its arithmetic.
/// Per block, the scores of all query heads of the group come first (dot
/// products reduced over the P lanes of a position), then one online-softmax
/// update per head (one rescale per block, not per position), in base 2 with
/// log2(e) folded into q. The position slots of a warp combine with
/// shuffles; the warps combine through shared memory (a workgroup alloca at
/// the task's top level, which the worker lowering turns into a workgroup
/// buffer), the warps past those it has room for (splitWarps) idle. The
/// shapes must fit (warpSplitFits).
static void lowerAttentionSplitGPU(AttentionSplitOp op, int64_t threads) {
  MemRefType qType = op.getQ().getType(), kType = op.getK().getType();
  int64_t dim = qType.getDimSize(1);
  auto task = op->getParentOfType<TaskOp>();
  int64_t groupSize = qType.getDimSize(0) / kType.getDimSize(1);
  int64_t maxWarps = splitWarps(threads, groupSize, dim);
  int64_t perPos = dim / kVector, slots = kWarp / perPos;
  // Positions per lane per block: more hide more latency but need more
  // registers (K and V of two blocks, q and the accumulator of each head);
  // a thread has 64 registers at 1024 threads, 128 at 512, 255 at 256.
  int64_t steps = groupSize <= 2 ? 4 : groupSize <= 4 ? 2 : 1;
  if (maxWarps > 16)
    steps = std::max<int64_t>(1, steps / 2);
  else if (maxWarps <= 8)
    steps *= 2;
  int64_t blockLen = steps * slots;

  OpBuilder b(op);
  Location loc = op.getLoc();
  TileBuilder h{b, loc};
  Type f32 = b.getF32Type();
  auto vecF32 = VectorType::get({kVector}, f32);
  auto vecBF16 = VectorType::get({kVector}, b.getBF16Type());
  Value negInf = h.f32(-std::numeric_limits<float>::infinity());
  // The running maximum starts at a finite floor below any score, so
  // exp2(x - m) needs no special case: masked scores are -inf and give 0,
  // and exp2(floor - floor) = 1 only ever scales zero sums.
  Value floor = h.f32(-1e30);
  Value zeroVec = arith::ConstantOp::create(b, loc, vecF32, DenseElementsAttr::get(vecF32, APFloat(0.0f)));
  // Scores in base 2: exp(x) = exp2(x * log2(e)).
  float scale = op.getScale().convertToFloat() * static_cast<float>(M_LOG2E);
  int64_t subsplits = op.getSubsplits();

  // Shared memory for the cross-warp combine, at the task's top level.
  Value smemAcc = workgroupBuffer(task, loc, {maxWarps, groupSize, dim}, f32);
  Value smemML = workgroupBuffer(task, loc, {maxWarps, groupSize, 2}, f32);

  Groups warpsOf = h.groups(kWarp);
  Value lane = warpsOf.lane, warp = warpsOf.group;
  Value warps = arith::MinUIOp::create(b, loc, warpsOf.groups, h.idx(maxWarps));
  Value working = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, warp, warps);
  Value slot = arith::DivUIOp::create(b, loc, lane, h.idx(perPos));
  Value d0 = arith::MulIOp::create(b, loc, arith::RemUIOp::create(b, loc, lane, h.idx(perPos)), h.idx(kVector));
  Value cacheLen = memref::DimOp::create(b, loc, op.getK(), 0);
  Value start, end;
  std::tie(start, end) = splitRange(b, loc, op);
  Value headBase = arith::MulIOp::create(b, loc, op.getKvHead(), h.idx(groupSize));
  Value lastRow = arith::SubIOp::create(b, loc, cacheLen, h.idx(1));

  auto load = [&](OpBuilder &b, Value mem, ValueRange idx, VectorType type) -> Value {
    auto l = vector::LoadOp::create(b, loc, type, mem, idx);
    l.setAlignment(16);
    return l;
  };
  auto ext = [&](OpBuilder &b, Value v) -> Value {
    if (cast<VectorType>(v.getType()).getElementType().isF32())
      return v;
    return arith::ExtFOp::create(b, loc, vecF32, v);
  };
  // exp2(a - m); m is finite (at least `floor`).
  auto exp2Diff = [&](OpBuilder &b, Value a, Value m) -> Value {
    return math::Exp2Op::create(b, loc, arith::SubFOp::create(b, loc, a, m));
  };
  auto bcast = [&](OpBuilder &b, Value s) { return vector::BroadcastOp::create(b, loc, vecF32, s); };
  // The dot product of two vector<8xf32> as a chain of FMAs.
  auto dot8 = [&](OpBuilder &b, Value x, Value y) -> Value {
    Value acc;
    for (int64_t e = 0; e < kVector; ++e) {
      Value xe = vector::ExtractOp::create(b, loc, x, ArrayRef<int64_t>{e});
      Value ye = vector::ExtractOp::create(b, loc, y, ArrayRef<int64_t>{e});
      acc = acc ? math::FmaOp::create(b, loc, xe, ye, acc).getResult() : arith::MulFOp::create(b, loc, xe, ye).getResult();
    }
    return acc;
  };

  // q of every head of the group, pre-scaled.
  SmallVector<Value> qv;
  for (int64_t g = 0; g < groupSize; ++g) {
    Value head = arith::AddIOp::create(b, loc, headBase, h.idx(g));
    Type qElt = qType.getElementType();
    Value v = ext(b, load(b, op.getQ(), ValueRange{head, d0}, qElt.isF32() ? vecF32 : vecBF16));
    qv.push_back(arith::MulFOp::create(b, loc, v, bcast(b, h.f32(scale))));
  }

  scf::ForOp::create(
      b, loc, h.idx(0), h.idx(subsplits), h.idx(1), ValueRange{},
      [&](OpBuilder &b, Location loc, Value chunk, ValueRange) {
        SplitChunk range = splitChunk(b, loc, op, start, end, chunk);
        Value cstart = range.start, cend = range.end, entry = range.entry;
        Value last = arith::MinSIOp::create(
            b, loc, arith::MaxSIOp::create(b, loc, arith::SubIOp::create(b, loc, cend, h.idx(1)), cstart), lastRow);
        Value blocks = arith::CeilDivUIOp::create(
            b, loc, arith::MaxSIOp::create(b, loc, arith::SubIOp::create(b, loc, cend, cstart), h.idx(0)),
            h.idx(blockLen));
        // Position of step u of block `blk` for this lane.
        auto position = [&](OpBuilder &b, Value blk, int64_t u) -> Value {
          Value base = arith::AddIOp::create(b, loc, cstart, arith::MulIOp::create(b, loc, blk, h.idx(blockLen)));
          return arith::AddIOp::create(b, loc, base, arith::AddIOp::create(b, loc, slot, h.idx(u * slots)));
        };
        // K and V of a block (rows clamped into the cache).
        auto loadBlock = [&](OpBuilder &b, Value blk) {
          SmallVector<Value> kv;
          for (int64_t u = 0; u < steps; ++u) {
            Value t = arith::MinSIOp::create(b, loc, position(b, blk, u), last);
            kv.push_back(load(b, op.getK(), ValueRange{t, op.getKvHead(), d0}, vecBF16));
            kv.push_back(load(b, op.getV(), ValueRange{t, op.getKvHead(), d0}, vecBF16));
          }
          return kv;
        };
        // Loop state: per head m, l, acc; then the prefetched block.
        SmallVector<Value> init;
        for (int64_t g = 0; g < groupSize; ++g)
          init.append({floor, h.f32(0), zeroVec});
        llvm::append_range(init, loadBlock(b, warp));
        int64_t nState = 3 * groupSize;
        // An idle warp starts past the last block.
        Value first = arith::SelectOp::create(b, loc, working, warp, blocks);
        auto loop = scf::ForOp::create(
            b, loc, first, blocks, warps, init,
            [&](OpBuilder &b, Location loc, Value blk, ValueRange st) {
              SmallVector<Value> next = loadBlock(b, arith::AddIOp::create(b, loc, blk, warps));
              SmallVector<Value> ks, vs, valid;
              for (int64_t u = 0; u < steps; ++u) {
                ks.push_back(ext(b, st[nState + 2 * u]));
                vs.push_back(ext(b, st[nState + 2 * u + 1]));
                valid.push_back(
                    arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, position(b, blk, u), cend));
              }
              SmallVector<Value> out;
              for (int64_t g = 0; g < groupSize; ++g) {
                Value m = st[3 * g], l = st[3 * g + 1], acc = st[3 * g + 2];
                SmallVector<Value> s;
                Value mNew = m;
                for (int64_t u = 0; u < steps; ++u) {
                  Value sc = butterflySum(b, loc, dot8(b, ks[u], qv[g]), perPos);
                  s.push_back(arith::SelectOp::create(b, loc, valid[u], sc, negInf));
                  mNew = arith::MaximumFOp::create(b, loc, mNew, s.back());
                }
                Value c = exp2Diff(b, m, mNew);
                Value lNew = arith::MulFOp::create(b, loc, l, c);
                Value accNew = arith::MulFOp::create(b, loc, acc, bcast(b, c));
                for (int64_t u = 0; u < steps; ++u) {
                  Value p = exp2Diff(b, s[u], mNew);
                  lNew = arith::AddFOp::create(b, loc, lNew, p);
                  accNew = vector::FMAOp::create(b, loc, bcast(b, p), vs[u], accNew);
                }
                out.append({mNew, lNew, accNew});
              }
              llvm::append_range(out, next);
              scf::YieldOp::create(b, loc, out);
            });
        // Combine the position slots of the warp, then publish per warp.
        Value isSlot0 = arith::AndIOp::create(
            b, loc, working, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, slot, h.idx(0)));
        Value isLane0 = arith::AndIOp::create(
            b, loc, working, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, lane, h.idx(0)));
        for (int64_t g = 0; g < groupSize; ++g) {
          Value m = loop.getResult(3 * g), l = loop.getResult(3 * g + 1), acc = loop.getResult(3 * g + 2);
          for (int64_t off = perPos; off < kWarp; off *= 2) {
            Value mo = shuffleXor(b, loc, m, off), lo = shuffleXor(b, loc, l, off);
            Value ao = acc;
            for (int64_t e = 0; e < kVector; ++e) {
              Value x = vector::ExtractOp::create(b, loc, acc, ArrayRef<int64_t>{e});
              ao = vector::InsertOp::create(b, loc, shuffleXor(b, loc, x, off), ao, ArrayRef<int64_t>{e});
            }
            Value mNew = arith::MaximumFOp::create(b, loc, m, mo);
            Value a = exp2Diff(b, m, mNew), c = exp2Diff(b, mo, mNew);
            l = arith::AddFOp::create(b, loc, arith::MulFOp::create(b, loc, l, a), arith::MulFOp::create(b, loc, lo, c));
            acc = arith::AddFOp::create(b, loc, arith::MulFOp::create(b, loc, acc, bcast(b, a)),
                                        arith::MulFOp::create(b, loc, ao, bcast(b, c)));
            m = mNew;
          }
          auto storeAcc = scf::IfOp::create(b, loc, isSlot0, /*withElse=*/false);
          {
            OpBuilder::InsertionGuard guard(b);
            b.setInsertionPointToStart(storeAcc.thenBlock());
            auto st = vector::StoreOp::create(b, loc, acc, smemAcc, ValueRange{warp, h.idx(g), d0});
            st.setAlignment(16);
          }
          auto storeML = scf::IfOp::create(b, loc, isLane0, /*withElse=*/false);
          {
            OpBuilder::InsertionGuard guard(b);
            b.setInsertionPointToStart(storeML.thenBlock());
            memref::StoreOp::create(b, loc, m, smemML, ValueRange{warp, h.idx(g), h.idx(0)});
            memref::StoreOp::create(b, loc, l, smemML, ValueRange{warp, h.idx(g), h.idx(1)});
          }
        }
        gpu::BarrierOp::create(b, loc);
        // Combine the warps.
        combineWarps(b, loc, op, smemAcc, smemML, warps, groupSize, dim, entry, headBase);
        // The next chunk reuses the shared buffers.
        gpu::BarrierOp::create(b, loc);
        scf::YieldOp::create(b, loc);
      });
  op.erase();
}

/// Whether the tensor-core form (lowerAttentionSplitMMA) applies to `op`
/// for a worker of `threads` threads (fixed) and `mmaBytes` of dynamic
/// shared memory, the task's dynamic shared memory aside: MmaSplitTile
/// fits, and at least one warp has a ring, with the warps' partial results
/// within 40 KiB of shared memory.
namespace {

/// The K and V rings of the tensor-core split for `threads` and `mmaBytes`:
/// what mmaSplitFits checks and lowerAttentionSplitMMA lays out.
struct MmaRings {
  int64_t dim, groupSize;
  int64_t pitch;             // bf16 elements per shared row
  int64_t rowsBytes;         // one block of K (or V) rows
  int64_t slotBytes;         // a slot: K then V rows
  int64_t depth = kMmaSlots; // slots per ring
  int64_t used;              // warps with a ring

  MmaRings(AttentionSplitOp op, int64_t threads, int64_t mmaBytes)
      : dim(op.getQ().getType().getDimSize(1)),
        groupSize(op.getQ().getType().getDimSize(0) / op.getK().getType().getDimSize(1)), pitch(dim + 8),
        rowsBytes(kMmaBlock * pitch * 2), slotBytes(2 * rowsBytes),
        // As many warps as have a ring of kMmaSlots slots in the bytes.
        used(std::min(threads / kWarp, mmaBytes / (depth * slotBytes))) {}
};

} // namespace

static bool mmaSplitFits(AttentionSplitOp op, int64_t threads, int64_t mmaBytes) {
  auto task = op->getParentOfType<TaskOp>();
  if (mmaBytes <= 0 || threads < kWarp || !task || !MmaSplitTile::fits(op))
    return false;
  MmaRings r(op, threads, mmaBytes);
  return r.used >= 1 && r.used * r.groupSize * (r.dim + 2) * 4 <= kWarpCombineBytes;
}

/// GPU split-KV attention on tensor cores (MmaSplitTile), for `threads`
/// fixed and `mmaBytes` of dynamic shared memory: each warp takes blocks of
/// 16 positions in turn and keeps its own ring of them (kMmaSlots slots of
/// K then V rows, each padded by 16 bytes so that ldmatrix does not
/// conflict on banks; as many warps as the bytes give a ring, the others
/// idle). Its lanes copy a block with cp.async, one block ahead
/// of the one it computes, and wait for it with cp.async.wait_group and a
/// warp barrier (no CTA barrier in the loop). The warps' partial results
/// combine through shared memory as on the CUDA cores. The op and the
/// worker must fit (mmaSplitFits), and its plan holds its task's dynamic
/// shared memory.
static void lowerAttentionSplitMMA(AttentionSplitOp op, int64_t threads, int64_t mmaBytes) {
  auto task = op->getParentOfType<TaskOp>();
  const MmaRings rings(op, threads, mmaBytes);
  const int64_t dim = rings.dim, groupSize = rings.groupSize, pitch = rings.pitch, rowsBytes = rings.rowsBytes,
                slotBytes = rings.slotBytes, depth = rings.depth, used = rings.used;
  const int64_t chunks = dim / kVector;

  OpBuilder b(op);
  Location loc = op.getLoc();
  TileBuilder h{b, loc};
  Type f32 = b.getF32Type(), bf16 = b.getBF16Type(), i64 = b.getI64Type();
  Value ring = workgroupBuffer(task, loc, {used * depth * slotBytes / 2}, bf16);
  ring.getDefiningOp()->setAttr(EventTensorDialect::getDynamicSharedAttrName(), b.getUnitAttr());
  Value smemAcc = workgroupBuffer(task, loc, {used, groupSize, dim}, f32);
  Value smemML = workgroupBuffer(task, loc, {used, groupSize, 2}, f32);
  MmaSplitTile t(b, op, opaqueThreadId(b, loc));
  Value lane = t.lane, warp = t.warp;
  Value active = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, warp, h.idx(used));
  Value ringWarp = arith::MinUIOp::create(b, loc, warp, h.idx(used - 1));
  Value ringAt = elementPointer(b, loc, ring, arith::MulIOp::create(b, loc, ringWarp, h.idx(depth * slotBytes / 2)),
                                2, 3);
  // ldmatrix lane offsets in a slot (bytes): K, then V after the K rows.
  Value kLane, vLane;
  std::tie(kLane, vLane) = ldmatrixLaneOffsets(b, loc, lane, pitch);
  vLane = arith::AddIOp::create(b, loc, vLane, i32(b, loc, rowsBytes));
  // The copies: lane l takes 16-byte chunk l % chunks of rows l / chunks,
  // l / chunks + 32 / chunks, ... of a block: its column of row 0 of the KV
  // head in K and V (element pointers, cacheAt), the row strides, and its
  // first chunk's byte offset in a slot (copyLane).
  Value copyRow = arith::DivUIOp::create(b, loc, lane, h.idx(chunks));
  Value copyCol = arith::MulIOp::create(b, loc, arith::RemUIOp::create(b, loc, lane, h.idx(chunks)), h.idx(kVector));
  Value copyLane = toI32(
      b, loc,
      arith::MulIOp::create(b, loc, arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, copyRow, h.idx(pitch)),
                                                           copyCol),
                            h.idx(2)));
  SmallVector<Value> cacheAt, cacheStride;
  for (Value cache : {op.getK(), op.getV()}) {
    auto meta = memref::ExtractStridedMetadataOp::create(b, loc, cache);
    cacheStride.push_back(meta.getStrides()[0]);
    cacheAt.push_back(elementPointer(
        b, loc, cache,
        arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, op.getKvHead(), meta.getStrides()[1]), copyCol), 2,
        1));
  }
  Value lastRow = arith::SubIOp::create(b, loc, memref::DimOp::create(b, loc, op.getK(), 0), h.idx(1));
  Value start, end;
  std::tie(start, end) = splitRange(b, loc, op);
  int64_t subsplits = op.getSubsplits();

  scf::ForOp::create(
      b, loc, h.idx(0), h.idx(subsplits), h.idx(1), ValueRange{},
      [&](OpBuilder &b, Location loc, Value chunk, ValueRange) {
        TileBuilder h{b, loc};
        SplitChunk range = splitChunk(b, loc, op, start, end, chunk);
        Value cstart = range.start, cend = range.end, entry = range.entry;
        Value blocks = arith::CeilDivUIOp::create(
            b, loc, arith::MaxSIOp::create(b, loc, arith::SubIOp::create(b, loc, cend, cstart), h.idx(0)),
            h.idx(kMmaBlock));
        Value trips = arith::SelectOp::create(
            b, loc, active,
            arith::CeilDivUIOp::create(
                b, loc, arith::MaxSIOp::create(b, loc, arith::SubIOp::create(b, loc, blocks, warp), h.idx(0)),
                h.idx(used)),
            h.idx(0));
        auto blockStart = [&](OpBuilder &b, Value trip) -> Value {
          TileBuilder h{b, loc};
          Value blk = arith::AddIOp::create(b, loc, warp, arith::MulIOp::create(b, loc, trip, h.idx(used)));
          return arith::AddIOp::create(b, loc, cstart, arith::MulIOp::create(b, loc, blk, h.idx(kMmaBlock)));
        };
        auto slotOf = [&](OpBuilder &b, Value trip) {
          TileBuilder h{b, loc};
          return toI32(b, loc,
                       arith::MulIOp::create(b, loc, arith::RemUIOp::create(b, loc, trip, h.idx(depth)),
                                             h.idx(slotBytes)));
        };
        // The copies of trip `trip`'s block into its slot (rows past the
        // cache clamped to its last; their scores are masked), then a
        // commit group, empty past the last trip.
        auto issue = [&](OpBuilder &b, Value trip) {
          TileBuilder h{b, loc};
          auto inRange = scf::IfOp::create(
              b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, trip, trips), false);
          {
            OpBuilder::InsertionGuard guard(b);
            b.setInsertionPointToStart(inRange.thenBlock());
            Value p0 = blockStart(b, trip);
            Value laneDst = sharedAt(b, loc, ringAt, arith::AddIOp::create(b, loc, slotOf(b, trip), copyLane));
            for (int64_t i = 0; i < kMmaBlock * chunks / kWarp; ++i) {
              Value pos = arith::MinSIOp::create(
                  b, loc,
                  arith::AddIOp::create(b, loc, p0, arith::AddIOp::create(b, loc, copyRow, h.idx(i * kWarp / chunks))),
                  lastRow);
              for (int64_t which = 0; which < 2; ++which) {
                Value src = LLVM::GEPOp::create(
                    b, loc, cacheAt[which].getType(), bf16, cacheAt[which],
                    ValueRange{arith::IndexCastOp::create(b, loc, i64,
                                                          arith::MulIOp::create(b, loc, pos, cacheStride[which]))});
                Value dst = sharedAt(b, loc, laneDst, i32(b, loc, i * kWarp / chunks * pitch * 2 + which * rowsBytes));
                copyAsync16(b, loc, dst, src);
              }
            }
          }
          NVVM::CpAsyncCommitGroupOp::create(b, loc);
        };
        // The first depth - 1 blocks.
        for (int64_t p = 0; p + 1 < depth; ++p)
          issue(b, h.idx(p));
        auto loop = scf::ForOp::create(
            b, loc, h.idx(0), trips, h.idx(1), t.initState(),
            [&](OpBuilder &b, Location loc, Value trip, ValueRange st) {
              TileBuilder h{b, loc};
              NVVM::SyncWarpOp::create(b, loc, i32(b, loc, -1));
              issue(b, arith::AddIOp::create(b, loc, trip, h.idx(depth - 1)));
              NVVM::CpAsyncWaitGroupOp::create(b, loc, depth - 1);
              NVVM::SyncWarpOp::create(b, loc, i32(b, loc, -1));
              Value slotAt = slotOf(b, trip);
              Value kAt = sharedAt(b, loc, ringAt, arith::AddIOp::create(b, loc, slotAt, kLane));
              Value vAt = sharedAt(b, loc, ringAt, arith::AddIOp::create(b, loc, slotAt, vLane));
              scf::YieldOp::create(b, loc, t.update(b, st, blockStart(b, trip), cend, kAt, vAt));
            });
        NVVM::CpAsyncWaitGroupOp::create(b, loc, 0);
        t.storePartials(b, loop.getResults(), active, smemAcc, smemML);
        gpu::BarrierOp::create(b, loc);
        combineWarps(b, loc, op, smemAcc, smemML, h.idx(used), groupSize, dim, entry, t.headBase);
        // The next chunk reuses the shared buffers.
        gpu::BarrierOp::create(b, loc);
        scf::YieldOp::create(b, loc);
      });
  op.erase();
}

/// Splits per trip of the attention merge: their loads go out together.
constexpr int64_t kMergeUnroll = 4;

/// out[h, d] = sum_s exp(lse[s, h] - L) * o[s, h, d], L = log sum_s
/// exp(lse[s, h]). One pass with a running maximum, kMergeUnroll splits per
/// trip (indices past the last clamp to it and weigh nothing), so that a
/// thread's loads of a trip are in flight together: the merge runs on the
/// decode step's critical path, and a loop of one split per trip cost an
/// L2 round trip per split.
static void lowerAttentionMerge(AttentionMergeOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  TileBuilder h{b, loc};
  Value splits = memref::DimOp::create(b, loc, op.getO(), 0);
  Value heads = memref::DimOp::create(b, loc, op.getO(), 1);
  Value dim = memref::DimOp::create(b, loc, op.getO(), 2);
  Type outType = op.getOut().getType().getElementType();
  Value negInf = h.f32(-std::numeric_limits<float>::infinity());
  Value last = arith::SubIOp::create(b, loc, splits, h.idx(1));
  threadLoop(b, loc, arith::MulIOp::create(b, loc, heads, dim), [&](OpBuilder &b, Location loc, Value e) {
    TileBuilder h{b, loc};
    Value hh = arith::DivUIOp::create(b, loc, e, dim);
    Value d = arith::RemUIOp::create(b, loc, e, dim);
    // (running maximum, sum of weights, weighted sum of o)
    auto loop = scf::ForOp::create(
        b, loc, h.idx(0), splits, h.idx(kMergeUnroll), ValueRange{negInf, h.f32(0), h.f32(0)},
        [&](OpBuilder &b, Location loc, Value s0, ValueRange acc) {
          TileBuilder h{b, loc};
          SmallVector<Value> ls, os;
          for (int64_t k = 0; k < kMergeUnroll; ++k) {
            Value s = arith::AddIOp::create(b, loc, s0, h.idx(k));
            Value in = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, s, splits);
            Value at = arith::MinUIOp::create(b, loc, s, last);
            Value l = memref::LoadOp::create(b, loc, op.getLse(), ValueRange{at, hh});
            ls.push_back(arith::SelectOp::create(b, loc, in, l, negInf));
            os.push_back(memref::LoadOp::create(b, loc, op.getO(), ValueRange{at, hh, d}));
          }
          Value m = acc[0];
          for (Value l : ls)
            m = arith::MaximumFOp::create(b, loc, m, l);
          // exp(x - m) with m = -inf (nothing seen yet) taken as 0.
          Value none = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, m, negInf);
          Value base = arith::SelectOp::create(b, loc, none, h.f32(0), m);
          auto weight = [&](Value x) -> Value {
            return math::ExpOp::create(b, loc, arith::SubFOp::create(b, loc, x, base));
          };
          Value keep = weight(acc[0]);
          Value den = arith::MulFOp::create(b, loc, acc[1], keep);
          Value num = arith::MulFOp::create(b, loc, acc[2], keep);
          for (auto [l, o] : llvm::zip(ls, os)) {
            Value w = weight(l);
            den = arith::AddFOp::create(b, loc, den, w);
            // A split of lse -inf holds nothing (past the split count, or
            // a split its producer marked empty): its o is not read into
            // the sum, whatever the buffer holds there.
            Value empty = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, l, negInf);
            num = arith::SelectOp::create(b, loc, empty, num, math::FmaOp::create(b, loc, w, o, num));
          }
          scf::YieldOp::create(b, loc, ValueRange{m, den, num});
        });
    Value none = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLE, loop.getResult(1), h.f32(0));
    Value den = arith::SelectOp::create(b, loc, none, h.f32(1), loop.getResult(1));
    Value out = arith::SelectOp::create(b, loc, none, h.f32(0), arith::DivFOp::create(b, loc, loop.getResult(2), den));
    memref::StoreOp::create(b, loc, fromF32(b, loc, out, outType), op.getOut(), ValueRange{hh, d});
  });
  op.erase();
}

/// The lowered forms of et.attention_split on the GPU, as et.attention_plan
/// names them.
enum class SplitForm { Staged, MMA, Warps, Loops };

static StringRef formName(SplitForm form) {
  switch (form) {
  case SplitForm::Staged:
    return "staged";
  case SplitForm::MMA:
    return "mma";
  case SplitForm::Warps:
    return "warps";
  case SplitForm::Loops:
    break;
  }
  return "loops";
}

/// The form of `op`'s et.attention_plan.
static SplitForm plannedForm(AttentionSplitOp op) {
  StringRef form = attentionForm(op);
  return form == "staged" ? SplitForm::Staged
         : form == "mma"  ? SplitForm::MMA
         : form == "warps" ? SplitForm::Warps
                           : SplitForm::Loops;
}

/// Whether `form` takes the task's dynamic shared memory.
static bool takesDynamicShared(SplitForm form) { return form == SplitForm::Staged || form == SplitForm::MMA; }

/// Whether `form` applies to `op` with the pass's options (GPU), the task's
/// dynamic shared memory aside.
static bool splitFormFits(AttentionSplitOp op, SplitForm form, const TileLoweringOptions &options) {
  switch (form) {
  case SplitForm::Staged:
    return stagedSplitFits(op, options.threads, options.kvPrefetchBytes);
  case SplitForm::MMA:
    return mmaSplitFits(op, options.threads, options.kvMmaBytes);
  case SplitForm::Warps:
    return warpSplitFits(op, options.threads);
  case SplitForm::Loops:
    break;
  }
  return true;
}

/// The first form that applies: staged, tensor cores, one warp per query
/// group, loops; the first two only where `sharedFree` (no op holds the
/// task's dynamic shared memory).
static SplitForm chooseSplitForm(AttentionSplitOp op, const TileLoweringOptions &options, bool sharedFree) {
  for (SplitForm form : {SplitForm::Staged, SplitForm::MMA, SplitForm::Warps})
    if ((sharedFree || !takesDynamicShared(form)) && splitFormFits(op, form, options))
      return form;
  return SplitForm::Loops;
}

LogicalResult planAttentionOp(AttentionSplitOp op, const TileLoweringOptions &options) {
  if (!op->hasAttr(EventTensorDialect::getAttentionPlanAttrName()))
    setAttentionForm(op, formName(chooseSplitForm(op, options, !dynamicSharedHeld(op->getParentOfType<TaskOp>()))));
  SplitForm form = plannedForm(op);
  if (!takesDynamicShared(form))
    return success();
  return takeDynamicShared(op, ("et.attention_plan's " + formName(form) + " form ").str());
}

LogicalResult planAttentionOps(Operation *root, const TileLoweringOptions &options) {
  WalkResult result = root->walk([&](MatmulOp op) {
    // The GEMM tiles of a task share their ring.
    return failed(takeDynamicShared(op, "", /*shareable=*/true)) ? WalkResult::interrupt() : WalkResult::advance();
  });
  if (result.wasInterrupted())
    return failure();
  result = root->walk([&](Operation *op) {
    if (auto prefill = dyn_cast<AttentionPrefillOp>(op))
      return failed(planAttentionPrefillOp(prefill, options)) ? WalkResult::interrupt() : WalkResult::advance();
    if (auto split = dyn_cast<AttentionSplitOp>(op))
      return failed(planAttentionOp(split, options)) ? WalkResult::interrupt() : WalkResult::advance();
    return WalkResult::advance();
  });
  return failure(result.wasInterrupted());
}

namespace {

/// et.attention_split: loops on the host; on the GPU the form its plan
/// (et.attention_plan, planAttentionOp) says. The staged form takes the
/// `append` rows into its stage; the others write them to the caches
/// first.
struct AttentionSplitLowering : public TileOpLowering<AttentionSplitOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult matchAndRewrite(AttentionSplitOp op, PatternRewriter &) const override {
    bool gpu = options.gpu;
    if (!gpu) {
      if (op.getNewK())
        appendToCaches(op, gpu);
      lowerAttentionSplit(op, gpu);
      return success();
    }
    // The pass plans every attention op before any tile op is lowered.
    SplitForm form = plannedForm(op);
    if (!splitFormFits(op, form, options))
      return op.emitOpError("et.attention_plan's ") << formName(form) << " form does not fit this op or worker";
    assert((!takesDynamicShared(form) || holdsDynamicShared(op)) &&
           "the plan gave the op its task's dynamic shared memory");
    if (form == SplitForm::Staged) {
      lowerAttentionSplitStaged(op, options.threads);
      return success();
    }
    if (op.getNewK())
      appendToCaches(op, gpu);
    if (form == SplitForm::MMA)
      lowerAttentionSplitMMA(op, options.threads, options.kvMmaBytes);
    else if (form == SplitForm::Warps)
      lowerAttentionSplitGPU(op, options.threads);
    else
      lowerAttentionSplit(op, gpu);
    return success();
  }
};

struct AttentionMergeLowering : public TileOpLowering<AttentionMergeOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult matchAndRewrite(AttentionMergeOp op, PatternRewriter &) const override {
    lowerAttentionMerge(op);
    return success();
  }
};

} // namespace

void populateAttentionLoweringPatterns(RewritePatternSet &patterns, const TileLoweringOptions &options) {
  patterns.add<AttentionSplitLowering, AttentionMergeLowering>(patterns.getContext(), options);
}
} // namespace mlir::et::tile
