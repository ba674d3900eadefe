//===- LowerArgmax.cpp - et.argmax ------------------------------------------===//
//
// The greedy token of each row: a scan per thread, then butterflies; with
// `sample`, the scan adds Gumbel noise from a counter-based generator
// (Philox4x32-10) to the tempered logits of the rows that sample, leaving
// out those below the row's threshold (`above`). et.sample_threshold: the
// threshold of the top-k, top-p and min-p filters, by radix selects;
// et.top_logprobs: a row's log-sum-exp and its most likely ids, by the same
// selects; et.top_candidates: a chunk of a row reduced to its largest
// entries and sums, over which the two others can run instead of the row.
// et.penalize: repetition, frequency and presence penalties, once per id
// of the token's history.
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

#include <array>
#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::et;

namespace mlir::et::tile {

/// Whether (v, i) beats (bv, bi) in an argmax: v > bv, or equal with a
/// smaller index; a NaN beats every number (and a NaN of a larger index),
/// so that a row with a NaN anywhere ends on a NaN, which storeArgmax
/// turns into no token (a NaN that never won left the row's token to the
/// other columns, silently).
/// The index of no column: what a row reads when no column won, or a NaN did.
static Value noIndex(OpBuilder &b, Location loc) {
  return arith::ConstantIntOp::create(b, loc, b.getI32Type(), std::numeric_limits<int32_t>::max());
}

static Value argmaxBetter(OpBuilder &b, Location loc, Value v, Value i, Value bv, Value bi) {
  Value gt = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, v, bv);
  Value eq = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, v, bv);
  Value smaller = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, i, bi);
  Value numbers = arith::OrIOp::create(b, loc, gt, arith::AndIOp::create(b, loc, eq, smaller));
  Value vNaN = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNO, v, v);
  Value bvNumber = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::ORD, bv, bv);
  // v NaN: wins over a number, or over a NaN of a larger index; v a number:
  // the comparison above (false against a NaN).
  Value nanWins = arith::OrIOp::create(b, loc, bvNumber, smaller);
  return arith::SelectOp::create(b, loc, vNaN, nanWins, numbers);
}

/// The best (value, index) over each aligned group of `width` lanes, in
/// every lane of the group (no shuffles for width 1).
static std::pair<Value, Value> argmaxButterfly(OpBuilder &b, Location loc, Value bv, Value bi, int64_t width) {
  for (int64_t offset = width / 2; offset >= 1; offset /= 2) {
    Value ov = shuffleXor(b, loc, bv, offset);
    Value oi = shuffleXor(b, loc, bi, offset);
    Value take = argmaxBetter(b, loc, ov, oi, bv, bi);
    bv = arith::SelectOp::create(b, loc, take, ov, bv);
    bi = arith::SelectOp::create(b, loc, take, oi, bi);
  }
  return {bv, bi};
}

/// Word 0 of Philox4x32-10 (Salmon et al., SC 2011) of `counter` (4 x i32)
/// under `key` (2 x i32).
static Value philox(OpBuilder &b, Location loc, std::array<Value, 4> c, std::array<Value, 2> k) {
  Type i32 = b.getI32Type();
  auto c32 = [&](uint32_t v) { return arith::ConstantIntOp::create(b, loc, i32, static_cast<int32_t>(v)); };
  Value m0 = c32(0xD2511F53u), m1 = c32(0xCD9E8D57u), w0 = c32(0x9E3779B9u), w1 = c32(0xBB67AE85u);
  for (int round = 0; round < 10; ++round) {
    auto p0 = arith::MulUIExtendedOp::create(b, loc, m0, c[0]);
    auto p1 = arith::MulUIExtendedOp::create(b, loc, m1, c[2]);
    Value x0 = arith::XOrIOp::create(b, loc, arith::XOrIOp::create(b, loc, p1.getHigh(), c[1]), k[0]);
    Value x2 = arith::XOrIOp::create(b, loc, arith::XOrIOp::create(b, loc, p0.getHigh(), c[3]), k[1]);
    c = {x0, p1.getLow(), x2, p0.getLow()};
    if (round < 9) {
      k[0] = arith::AddIOp::create(b, loc, k[0], w0);
      k[1] = arith::AddIOp::create(b, loc, k[1], w1);
    }
  }
  return c[0];
}

/// What a sampling row's scan needs: 1 / temperature and the generator's
/// key and counter word.
struct SampleRow {
  Value invT;
  std::array<Value, 2> key;
  Value counter;
  Value threshold; // the least x / T kept (et.sample_threshold), or null
  Value keyOffset; // i32 added to the column in the counter (key_offset), or null
};

/// x / T + Gumbel noise of column `j` (i32): u from the top 24 bits of
/// Philox, in (0, 1), and -log(-log(u)).
static Value sampleKey(OpBuilder &b, Location loc, const SampleRow &row, Value x, Value j) {
  Type i32 = b.getI32Type(), f32 = b.getF32Type();
  Value zero = arith::ConstantIntOp::create(b, loc, i32, 0);
  if (row.keyOffset)
    j = arith::AddIOp::create(b, loc, j, row.keyOffset);
  Value bits = philox(b, loc, {j, row.counter, zero, zero}, row.key);
  Value top = arith::ShRUIOp::create(b, loc, bits, arith::ConstantIntOp::create(b, loc, i32, 8));
  Value u = arith::MulFOp::create(
      b, loc,
      arith::AddFOp::create(b, loc, arith::UIToFPOp::create(b, loc, f32, top),
                            arith::ConstantFloatOp::create(b, loc, b.getF32Type(), APFloat(0.5f))),
      arith::ConstantFloatOp::create(b, loc, b.getF32Type(), APFloat(std::ldexp(1.0f, -24))));
  Value gumbel = arith::NegFOp::create(
      b, loc, math::LogOp::create(b, loc, arith::NegFOp::create(b, loc, math::LogOp::create(b, loc, u))));
  Value y = arith::MulFOp::create(b, loc, x, row.invT);
  Value key = arith::AddFOp::create(b, loc, y, gumbel);
  if (!row.threshold)
    return key;
  Value below = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, y, row.threshold);
  Value negInf = arith::ConstantFloatOp::create(b, loc, b.getF32Type(),
                                                APFloat(-std::numeric_limits<float>::infinity()));
  return arith::SelectOp::create(b, loc, below, negInf, key);
}

/// Columns per lane and trip of a warp's scan of one row (warp-per-row
/// argmax): their loads go out together.
constexpr int64_t kArgmaxUnroll = 8;

/// The best (value, index) of token `tok`'s columns first, first + step,
/// ... below `end` (the index from `from` when the op has it); with
/// `sample`, of the sampling keys (sampleKey). With `unroll` above 1, a
/// trip loads `unroll` columns (step apart) before it compares them.
static std::pair<Value, Value> argmaxScan(OpBuilder &b, Location loc, ArgmaxOp op, Value tok, Value first, Value end,
                                   Value step, const SampleRow *sample = nullptr, int64_t unroll = 1) {
  Type i32 = b.getI32Type();
  Value negInf = arith::ConstantFloatOp::create(b, loc, b.getF32Type(),
                                                APFloat(-std::numeric_limits<float>::infinity()));
  Value none = noIndex(b, loc);
  auto element = [&](OpBuilder &b, Location loc, Value j) -> std::pair<Value, Value> {
    Value v = toF32(b, loc, memref::LoadOp::create(b, loc, op.getX(), ValueRange{tok, j}));
    Value idx = op.getFrom() ? memref::LoadOp::create(b, loc, op.getFrom(), ValueRange{tok, j}).getResult()
                             : arith::IndexCastOp::create(b, loc, i32, j).getResult();
    return {v, idx};
  };
  Value tripStep = unroll == 1 ? step : arith::MulIOp::create(b, loc, step, arith::ConstantIndexOp::create(b, loc, unroll));
  auto scan = scf::ForOp::create(
      b, loc, first, end, tripStep, ValueRange{negInf, none},
      [&](OpBuilder &b, Location loc, Value j, ValueRange best) {
        // Every load of the trip (a column past `end` reads column j), then
        // the comparisons in column order.
        SmallVector<std::pair<Value, Value>> got;
        SmallVector<Value> inside;
        Value col = j;
        for (int64_t u = 0; u < unroll; ++u) {
          if (u) {
            col = arith::AddIOp::create(b, loc, col, step);
            inside.push_back(arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, col, end));
            got.push_back(element(b, loc, arith::SelectOp::create(b, loc, inside.back(), col, j)));
          } else {
            inside.push_back(Value());
            got.push_back(element(b, loc, j));
          }
        }
        Value bv = best[0], bi = best[1];
        for (int64_t u = 0; u < unroll; ++u) {
          auto [v, idx] = got[u];
          if (sample)
            v = sampleKey(b, loc, *sample, v, idx);
          if (inside[u]) {
            v = arith::SelectOp::create(b, loc, inside[u], v, negInf);
            idx = arith::SelectOp::create(b, loc, inside[u], idx, none);
          }
          Value take = argmaxBetter(b, loc, v, idx, bv, bi);
          bv = arith::SelectOp::create(b, loc, take, v, bv);
          bi = arith::SelectOp::create(b, loc, take, idx, bi);
        }
        scf::YieldOp::create(b, loc, ValueRange{bv, bi});
      });
  return {scan.getResult(0), scan.getResult(1)};
}

/// The scan of token `tok` (argmaxScan); with `sample`, the sampling scan
/// where the token's temperature is above 0, the greedy one elsewhere (a
/// branch per token, so greedy rows pay nothing for the generator).
static std::pair<Value, Value> tokenScan(OpBuilder &b, Location loc, ArgmaxOp op, Value tok, Value first, Value end,
                                  Value step, int64_t unroll = 1) {
  if (!op.getTemperature())
    return argmaxScan(b, loc, op, tok, first, end, step, nullptr, unroll);
  Type i32 = b.getI32Type();
  FloatType f32 = b.getF32Type();
  Value t = memref::LoadOp::create(b, loc, op.getTemperature(), ValueRange{tok});
  Value sampled = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, t,
                                        arith::ConstantFloatOp::create(b, loc, f32, APFloat(0.0f)));
  auto branch = scf::IfOp::create(b, loc, TypeRange{f32, i32}, sampled, /*withElse=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(branch.thenBlock());
    Value seed = memref::LoadOp::create(b, loc, op.getSeed(), ValueRange{tok});
    SampleRow row;
    row.invT = arith::DivFOp::create(b, loc, arith::ConstantFloatOp::create(b, loc, f32, APFloat(1.0f)), t);
    row.key = {arith::TruncIOp::create(b, loc, i32, seed),
               arith::TruncIOp::create(b, loc, i32,
                                       arith::ShRUIOp::create(b, loc, seed,
                                                              arith::ConstantIntOp::create(b, loc, b.getI64Type(), 32)))};
    row.counter = memref::LoadOp::create(b, loc, op.getCounter(), ValueRange{tok});
    if (op.getThreshold())
      row.threshold = memref::LoadOp::create(b, loc, op.getThreshold(), ValueRange{tok});
    if (Value offset = op.getKeyOffset())
      row.keyOffset = arith::IndexCastOp::create(b, loc, i32, offset);
    auto [v, i] = argmaxScan(b, loc, op, tok, first, end, step, &row, unroll);
    scf::YieldOp::create(b, loc, ValueRange{v, i});
    b.setInsertionPointToStart(branch.elseBlock());
    auto [gv, gi] = argmaxScan(b, loc, op, tok, first, end, step, nullptr, unroll);
    scf::YieldOp::create(b, loc, ValueRange{gv, gi});
  }
  return {branch.getResult(0), branch.getResult(1)};
}

/// Where `cond` holds, token `tok`'s result: `value` into values[tok, slot]
/// and `index` into indices[tok, slot].
static void storeArgmax(OpBuilder &b, Location loc, ArgmaxOp op, Value cond, Value tok, Value value, Value index) {
  auto ifOp = scf::IfOp::create(b, loc, cond, /*withElse=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  // A NaN won: no token (the index a row reads when no column won).
  Value nan = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNO, value, value);
  index = arith::SelectOp::create(b, loc, nan, noIndex(b, loc), index);
  memref::StoreOp::create(b, loc, value, op.getValues(), ValueRange{tok, op.getSlot()});
  memref::StoreOp::create(b, loc, index, op.getIndices(), ValueRange{tok, op.getSlot()});
}

/// Argmax: `lanes` threads (warp 0 on the GPU, thread 0 on the CPU) stride
/// over the columns, keep (value, index) with ties to the smaller index,
/// then combine with a shuffle butterfly.
static void lowerArgmax(ArgmaxOp op, bool gpu) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  TileBuilder h{b, loc};
  int64_t lanes = gpu ? kWarp : 1;
  Groups g = h.groups(lanes);
  Value lane = g.lane;
  Value inGroup = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, g.group, h.idx(0));
  Value m = memref::DimOp::create(b, loc, op.getX(), 0);
  Value width = memref::DimOp::create(b, loc, op.getX(), 1);
  Value end = arith::MinSIOp::create(
      b, loc, arith::AddIOp::create(b, loc, op.getCol0(), op.getCols()), width);
  Value first = arith::AddIOp::create(b, loc, op.getCol0(), lane);
  auto guard = scf::IfOp::create(b, loc, inGroup, /*withElse=*/false);
  b.setInsertionPointToStart(guard.thenBlock());
  scf::ForOp::create(
      b, loc, h.idx(0), m, h.idx(1), ValueRange{},
      [&](OpBuilder &b, Location loc, Value tok, ValueRange) {
        auto [sv, si] = tokenScan(b, loc, op, tok, first, end, h.idx(lanes));
        auto [bv, bi] = argmaxButterfly(b, loc, sv, si, lanes);
        storeArgmax(b, loc, op, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, lane, h.idx(0)), tok,
                    bv, bi);
        scf::YieldOp::create(b, loc);
      });
  op.erase();
}

/// GPU argmax of a row per warp at a time (rows w, w + warps, ... on warp
/// w): the warp's lanes stride over the row's columns, kArgmaxUnroll loads
/// in flight each, and combine with a butterfly; no barrier.
static void argmaxWarpRows(OpBuilder &b, Location loc, ArgmaxOp op, const Groups &g, Value m, Value end) {
  TileBuilder h{b, loc};
  Value first = arith::AddIOp::create(b, loc, op.getCol0(), g.lane);
  Value isLane0 = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, g.lane, h.idx(0));
  scf::ForOp::create(b, loc, g.group, m, g.groups, ValueRange{},
                     [&](OpBuilder &b, Location loc, Value tok, ValueRange) {
                       TileBuilder h{b, loc};
                       auto [sv, si] = tokenScan(b, loc, op, tok, first, end, h.idx(kWarp), kArgmaxUnroll);
                       auto [bv, bi] = argmaxButterfly(b, loc, sv, si, kWarp);
                       storeArgmax(b, loc, op, isLane0, tok, bv, bi);
                       scf::YieldOp::create(b, loc);
                     });
}

/// GPU argmax with every thread of the worker: one row (a step's single
/// token) has all of them, threads striding over the columns, each warp
/// combining its lanes with a butterfly, the warps' results meeting in
/// shared memory and warp 0 combining them (one warp scanning a
/// 1000-column chunk took one L2 round trip per 32 columns). Several rows
/// go a row per warp at a time (argmaxWarpRows): a row after another on
/// the whole worker, two barriers each, took 22 us for 16 rows of a
/// 1018-column chunk on the H100.
static void lowerArgmaxBlock(ArgmaxOp op) {
  auto task = op->getParentOfType<TaskOp>();
  OpBuilder b(op);
  Location loc = op.getLoc();
  TileBuilder h{b, loc};
  Type i32 = b.getI32Type();
  Value vals = workgroupBuffer(task, loc, {kWarp}, b.getF32Type());
  Value idxs = workgroupBuffer(task, loc, {kWarp}, i32);
  Groups g = h.groups(kWarp);
  Value m = memref::DimOp::create(b, loc, op.getX(), 0);
  Value width = memref::DimOp::create(b, loc, op.getX(), 1);
  Value end = arith::MinSIOp::create(
      b, loc, arith::AddIOp::create(b, loc, op.getCol0(), op.getCols()), width);
  Value first = arith::AddIOp::create(b, loc, op.getCol0(), g.tid);
  Value negInf = h.f32(-std::numeric_limits<float>::infinity());
  Value none = noIndex(b, loc);
  Value isLane0 = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, g.lane, h.idx(0));
  auto rows = scf::IfOp::create(b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ugt, m, h.idx(1)),
                                /*withElse=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(rows.thenBlock());
    argmaxWarpRows(b, loc, op, g, m, end);
  }
  b.setInsertionPointToStart(rows.elseBlock());
  scf::ForOp::create(
      b, loc, h.idx(0), m, h.idx(1), ValueRange{},
      [&](OpBuilder &b, Location loc, Value tok, ValueRange) {
        auto [sv, si] = tokenScan(b, loc, op, tok, first, end, g.threads);
        auto [wv, wi] = argmaxButterfly(b, loc, sv, si, kWarp);
        auto publish = scf::IfOp::create(b, loc, isLane0, /*withElse=*/false);
        {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(publish.thenBlock());
          memref::StoreOp::create(b, loc, wv, vals, ValueRange{g.group});
          memref::StoreOp::create(b, loc, wi, idxs, ValueRange{g.group});
        }
        gpu::BarrierOp::create(b, loc);
        // Lane l of every warp reads warp l's result; warp 0 stores.
        Value has = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, g.lane, g.groups);
        Value safe = arith::SelectOp::create(b, loc, has, g.lane, h.idx(0));
        Value v = arith::SelectOp::create(b, loc, has, memref::LoadOp::create(b, loc, vals, ValueRange{safe}),
                                          negInf);
        Value i = arith::SelectOp::create(b, loc, has, memref::LoadOp::create(b, loc, idxs, ValueRange{safe}),
                                          none);
        auto [tv, ti] = argmaxButterfly(b, loc, v, i, kWarp);
        Value store = arith::AndIOp::create(
            b, loc, isLane0, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, g.group, h.idx(0)));
        storeArgmax(b, loc, op, store, tok, tv, ti);
        // The next token reuses the shared results.
        gpu::BarrierOp::create(b, loc);
        scf::YieldOp::create(b, loc);
      });
  op.erase();
}

static Value i32c(OpBuilder &b, Location loc, int64_t v) {
  return arith::ConstantIntOp::create(b, loc, b.getI32Type(), v);
}

/// The order-preserving unsigned key of an f32 (as i32): larger floats
/// have larger keys (-inf's is above 0, NaN's at the ends).
static Value orderedKey(OpBuilder &b, Location loc, Value f) {
  Type i32 = b.getI32Type();
  Value bits = arith::BitcastOp::create(b, loc, i32, f);
  Value negative = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, bits, i32c(b, loc, 0));
  Value flipped = arith::XOrIOp::create(b, loc, bits, i32c(b, loc, -1));
  Value marked = arith::OrIOp::create(b, loc, bits, i32c(b, loc, std::numeric_limits<int32_t>::min()));
  return arith::SelectOp::create(b, loc, negative, flipped, marked);
}

/// The f32 of an orderedKey.
static Value fromOrderedKey(OpBuilder &b, Location loc, Value key) {
  Value high = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, key, i32c(b, loc, 0)); // top bit set
  Value positive = arith::AndIOp::create(b, loc, key, i32c(b, loc, std::numeric_limits<int32_t>::max()));
  Value negative = arith::XOrIOp::create(b, loc, key, i32c(b, loc, -1));
  return arith::BitcastOp::create(b, loc, b.getF32Type(), arith::SelectOp::create(b, loc, high, positive, negative));
}

namespace {

/// The worker's threads on one token's entries (all of them on the GPU, one
/// on the host) and the scratch of its radix selects: a count and a mass
/// per key range of 8 bits, and words the threads share, in shared memory
/// (a local buffer on the host). The entries are columns of the token's
/// row of x, or the candidates that et.top_candidates wrote for the row's
/// chunks.
struct RowWorker {
  static constexpr int64_t kBins = 256;
  /// Copies of the bins on the GPU (warp w adds into copy w mod 4), folded
  /// into copy 0 after each count: with one copy, the keys of a row's
  /// logits fall into a few first-level bins and the threads' atomic adds
  /// queued on them (a first level over 128K logits took about 270 us on
  /// one SM). Few copies: the scratch is static shared memory beside the
  /// kernels' staging and rings. 16 copies a row op took 64 KB and a
  /// long-split test kernel no longer fit; with one scratch for the tile's
  /// row ops 16 copies take 32 KB and every test kernel fits, but their
  /// cost to greedy steps is not measured (filtered rows: top-p 0.9 +29% a
  /// token with 16, +41% with 4, H100, two calls).
  static constexpr int64_t kCopies = 4;
  int64_t copies = 1;

  /// What a column brings to a select: its key (order-preserving i32),
  /// whether it is in play, and (for a select by mass) its y, whose
  /// weight is exp(y - max y).
  struct Column {
    Value key, inPlay, y;
  };

  OpBuilder &b;
  Location loc;
  TaskOp task;
  bool gpu;
  TileBuilder h{b, loc};
  Value tid, threads, isFirst;
  // [0] the max key, [1] the chosen bin, [2] the count left (by count),
  // [3] free for the op; fwords[0]: the mass left (by mass), [1] free.
  Value counts, mass, words, fwords;

  // The token's row: row `row` of x, `width` columns.
  Value x, row, width;
  // The entries scanned: `count` of them; columns from `first` on, or
  // (candIds set) candidate e = (e / candK, e mod candK) of the row.
  Value first, count;
  Value candIds, candVals;
  int64_t candK = 0;

  RowWorker(OpBuilder &b, Location loc, Operation *op, bool gpu, Value x, Value row)
      : b(b), loc(loc), task(op->getParentOfType<TaskOp>()), gpu(gpu), x(x), row(row) {
    width = memref::DimOp::create(b, loc, x, 1);
    first = h.idx(0);
    count = width;
    Type i32 = b.getI32Type(), f32 = b.getF32Type(), indexType = b.getIndexType();
    copies = gpu ? kCopies : 1;
    counts = scratch(copies * kBins, i32, "counts");
    mass = scratch(copies * kBins, f32, "mass");
    words = scratch(4, i32, "words");
    fwords = scratch(2, f32, "fwords");
    tid = gpu ? ThreadIdOp::create(b, loc, indexType).getResult() : h.idx(0);
    threads = gpu ? NumThreadsOp::create(b, loc, indexType).getResult() : h.idx(1);
    isFirst = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, tid, h.idx(0));
  }

  /// Scan the columns [from, from + n) of the row (n within it).
  void overRow(Value from, Value n) {
    candIds = candVals = Value();
    first = from;
    count = n;
  }
  /// Scan the candidates `ids` / `vals` (tokens x chunks x K) of the row.
  void overCandidates(Value ids, Value vals) {
    auto t = cast<MemRefType>(ids.getType());
    candIds = ids;
    candVals = vals;
    candK = t.getDimSize(2);
    count = h.idx(t.getDimSize(1) * candK);
  }

  /// A scratch buffer of n `t`s: on the GPU in the task's shared memory,
  /// the one of that `name` that an earlier row op of the task made (the
  /// row ops of a tile run one after another, each ending on a barrier);
  /// on the host a local buffer.
  Value scratch(int64_t n, Type t, StringRef name) {
    if (!gpu)
      return memref::AllocaOp::create(b, loc, MemRefType::get({n}, t));
    StringRef key = "row_scratch";
    for (auto alloca : task.getBody().front().getOps<memref::AllocaOp>())
      if (auto tag = alloca->getAttrOfType<StringAttr>(key))
        if (tag.getValue() == name && alloca.getType().getElementType() == t &&
            alloca.getType().getShape() == ArrayRef<int64_t>{n})
          return alloca;
    Value buffer = workgroupBuffer(task, loc, {n}, t);
    buffer.getDefiningOp()->setAttr(key, b.getStringAttr(name));
    return buffer;
  }
  void barrier() {
    if (gpu)
      gpu::BarrierOp::create(b, loc);
  }
  void onFirst(function_ref<void()> body) {
    auto ifOp = scf::IfOp::create(b, loc, isFirst, /*withElse=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    body();
  }
  Value word(int64_t i) { return memref::LoadOp::create(b, loc, words, ValueRange{h.idx(i)}); }
  void setWord(Value v, int64_t i) { memref::StoreOp::create(b, loc, v, words, ValueRange{h.idx(i)}); }
  /// A scan's loads: kUnroll entries a trip per thread, all issued before
  /// any is used. One SM scans the row, from L2: with a load at a time a
  /// pass over 128K logits took about 100 us, with eight about 35 us
  /// (H100), still far from what the SM can take.
  static constexpr int64_t kUnroll = 8;

  /// Entry `e` (inside the entries): its column id (index), its value
  /// (f32) and whether it is one (a candidate past its chunk's columns is
  /// not).
  std::tuple<Value, Value, Value> entry(OpBuilder &b, Value e) {
    if (!candIds) {
      Value col = arith::AddIOp::create(b, loc, first, e);
      return {col, toF32(b, loc, memref::LoadOp::create(b, loc, x, ValueRange{row, col})),
              arith::ConstantIntOp::create(b, loc, b.getI1Type(), 1)};
    }
    Value k = arith::ConstantIndexOp::create(b, loc, candK);
    Value chunk = arith::DivUIOp::create(b, loc, e, k), at = arith::RemUIOp::create(b, loc, e, k);
    Value id = memref::LoadOp::create(b, loc, candIds, ValueRange{row, chunk, at});
    Value v = memref::LoadOp::create(b, loc, candVals, ValueRange{row, chunk, at});
    Value is = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, id, i32c(b, loc, 0));
    Value safe = arith::MaxSIOp::create(b, loc, id, i32c(b, loc, 0));
    return {arith::IndexCastOp::create(b, loc, b.getIndexType(), safe), v, is};
  }

  /// Each thread's entries, `threads` apart: every load of a trip first,
  /// then `use` of each entry in order with its column id, its value (f32)
  /// and whether it is an entry (one past the end reads the trip's first,
  /// and `use` must not count it). Returns the loop's results (`init`
  /// carried through `use`'s return values; none by default).
  ValueRange overColumns(function_ref<SmallVector<Value>(OpBuilder &, Value, Value, Value, ValueRange)> use,
                         ValueRange init = {}) {
    Value step = arith::MulIOp::create(b, loc, threads, h.idx(kUnroll));
    auto loop = scf::ForOp::create(
        b, loc, tid, count, step, init, [&](OpBuilder &b, Location loc, Value e, ValueRange acc) {
          SmallVector<std::tuple<Value, Value, Value>> got;
          SmallVector<Value> inside;
          for (int64_t u = 0; u < kUnroll; ++u) {
            Value at = u ? arith::AddIOp::create(b, loc, e, arith::MulIOp::create(b, loc, threads, h.idx(u)))
                               .getResult()
                         : e;
            Value in = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, at, count);
            inside.push_back(in);
            got.push_back(entry(b, arith::SelectOp::create(b, loc, in, at, e)));
          }
          SmallVector<Value> carried(acc.begin(), acc.end());
          for (int64_t u = 0; u < kUnroll; ++u) {
            auto [id, v, is] = got[u];
            carried = use(b, id, v, arith::AndIOp::create(b, loc, inside[u], is), carried);
          }
          scf::YieldOp::create(b, loc, carried);
        });
    return loop.getResults();
  }
  /// `overColumns` with side effects only: `use` runs where the entry is
  /// one.
  void forColumns(function_ref<void(OpBuilder &, Value, Value)> use) {
    overColumns([&](OpBuilder &b, Value j, Value v, Value inside, ValueRange) {
      auto ifOp = scf::IfOp::create(b, loc, inside, /*withElse=*/false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(ifOp.thenBlock());
      use(b, j, v);
      return SmallVector<Value>{};
    });
  }
  /// Where the thread is its warp's first lane (every thread on the host).
  void onLane0(function_ref<void()> body) {
    if (!gpu)
      return body();
    Value lane0 = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                        arith::RemUIOp::create(b, loc, tid, h.idx(kWarp)), h.idx(0));
    auto ifOp = scf::IfOp::create(b, loc, lane0, /*withElse=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    body();
  }
  /// The largest of the threads' `key`s (order-preserving i32), in every
  /// thread: over each warp by shuffles, then one atomic max a warp into
  /// word 0 between barriers (one a thread, 512 on one word, took about
  /// 6 us).
  Value maxOverThreads(Value key) {
    if (gpu)
      for (int64_t offset = 1; offset < kWarp; offset *= 2)
        key = arith::MaxUIOp::create(b, loc, key, shuffleXor(b, loc, key, offset));
    onFirst([&] { setWord(i32c(b, loc, 0), 0); });
    barrier();
    onLane0([&] {
      memref::AtomicRMWOp::create(b, loc, arith::AtomicRMWKind::maxu, key, words, ValueRange{h.idx(0)});
    });
    barrier();
    return word(0);
  }
  /// The sum of the threads' `v`s (f32), in every thread: over each warp
  /// by shuffles, then atomic adds into fwords[i] between barriers.
  Value sumOverThreads(Value v, int64_t i) {
    if (gpu)
      v = butterflySum(b, loc, v, kWarp);
    onFirst([&] { memref::StoreOp::create(b, loc, h.f32(0.0), fwords, ValueRange{h.idx(i)}); });
    barrier();
    onLane0([&] {
      memref::AtomicRMWOp::create(b, loc, arith::AtomicRMWKind::addf, v, fwords, ValueRange{h.idx(i)});
    });
    barrier();
    Value sum = memref::LoadOp::create(b, loc, fwords, ValueRange{h.idx(i)});
    // Every thread has read it before another op writes it.
    barrier();
    return sum;
  }

  /// Copy 0's bin `i` of `bins` summed with the others' (after a barrier).
  void foldCopies(Value bins, bool byMass) {
    if (copies == 1)
      return;
    scf::ForOp::create(b, loc, tid, h.idx(kBins), threads, ValueRange{},
                       [&](OpBuilder &b, Location loc, Value i, ValueRange) {
                         Value sum = memref::LoadOp::create(b, loc, bins, ValueRange{i});
                         for (int64_t c = 1; c < copies; ++c) {
                           Value v = memref::LoadOp::create(
                               b, loc, bins, ValueRange{arith::AddIOp::create(b, loc, i, h.idx(c * kBins))});
                           sum = byMass ? arith::AddFOp::create(b, loc, sum, v).getResult()
                                        : arith::AddIOp::create(b, loc, sum, v).getResult();
                         }
                         memref::StoreOp::create(b, loc, sum, bins, ValueRange{i});
                         scf::YieldOp::create(b, loc);
                       });
  }

  void zeroBins() {
    scf::ForOp::create(b, loc, tid, h.idx(copies * kBins), threads, ValueRange{},
                       [&](OpBuilder &b, Location loc, Value i, ValueRange) {
                         memref::StoreOp::create(b, loc, i32c(b, loc, 0), counts, ValueRange{i});
                         memref::StoreOp::create(b, loc, arith::ConstantFloatOp::create(b, loc, b.getF32Type(),
                                                                                        APFloat(0.0f)),
                                                 mass, ValueRange{i});
                         scf::YieldOp::create(b, loc);
                       });
  }

  /// The bin of a level of a select (see `select`), from the top bin
  /// down: the first whose running total reaches the level's target (the
  /// lowest non-empty one if rounding never gets there), into word 1, and
  /// what is left of the target inside it into word 2 (by count) or
  /// fwords[0] (by mass). The first level's target is `target` (by count)
  /// or `target` times the mass of the bins, or `total` where it is not
  /// negative (by mass); a later level's is what the level before left.
  /// On the host thread 0 goes over the bins; on the GPU warp 0, each lane
  /// over 8 bins with a scan over the lanes between (thread 0 alone going
  /// over 256 bins took longer than a pass over a chunk of logits).
  void chooseBin(bool firstLevel, bool byMass, Value target, Value total) {
    Type i32 = b.getI32Type();
    Value zero = byMass ? h.f32(0.0) : i32c(b, loc, 0);
    Value bins = byMass ? mass : counts;
    auto add = [&](OpBuilder &b, Value a, Value c) -> Value {
      return byMass ? arith::AddFOp::create(b, loc, a, c).getResult() : arith::AddIOp::create(b, loc, a, c).getResult();
    };
    auto reaches = [&](OpBuilder &b, Value sum, Value w) -> Value {
      return byMass ? arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGE, sum, w).getResult()
                    : arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, sum, w).getResult();
    };
    auto nonEmpty = [&](OpBuilder &b, Value v) -> Value {
      return byMass ? arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, v, h.f32(0.0)).getResult()
                    : arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sgt, v, i32c(b, loc, 0)).getResult();
    };
    auto sub = [&](OpBuilder &b, Value a, Value c) -> Value {
      return byMass ? arith::SubFOp::create(b, loc, a, c).getResult() : arith::SubIOp::create(b, loc, a, c).getResult();
    };
    auto binAt = [&](OpBuilder &b, Value rank) { // rank r: bin kBins - 1 - r
      return memref::LoadOp::create(b, loc, bins, ValueRange{arith::SubIOp::create(b, loc, h.idx(kBins - 1), rank)})
          .getResult();
    };
    // Walks ranks [r0, r0 + n) from `before` (the total above r0): the
    // chosen rank (-1 if none reaches) and what is left of w inside it,
    // and the lowest non-empty rank seen (-1 if none).
    auto walk = [&](OpBuilder &b, Value r0, int64_t n, Value before, Value w) {
      Value none = i32c(b, loc, -1);
      Value sum = before, chosen = none, left = w, lowest = none;
      for (int64_t i = 0; i < n; ++i) {
        Value r = arith::AddIOp::create(b, loc, r0, h.idx(i));
        Value v = binAt(b, r);
        Value next = add(b, sum, v);
        Value open = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, chosen, none);
        Value take = arith::AndIOp::create(b, loc, open, reaches(b, next, w));
        Value rI32 = arith::IndexCastOp::create(b, loc, i32, r);
        chosen = arith::SelectOp::create(b, loc, take, rI32, chosen);
        left = arith::SelectOp::create(b, loc, take, sub(b, w, sum), left);
        lowest = arith::SelectOp::create(b, loc, nonEmpty(b, v), rI32, lowest);
        sum = next;
      }
      return std::make_tuple(chosen, left, lowest);
    };
    auto store = [&](OpBuilder &b, Value chosenRank, Value lowestRank, Value left, Value w) {
      // The chosen bin, else the lowest non-empty one with all of w left.
      Value found = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, chosenRank, i32c(b, loc, 0));
      Value rank = arith::SelectOp::create(b, loc, found, chosenRank,
                                           arith::MaxSIOp::create(b, loc, lowestRank, i32c(b, loc, 0)));
      setWord(arith::SubIOp::create(b, loc, i32c(b, loc, kBins - 1), rank), 1);
      Value rest = arith::SelectOp::create(b, loc, found, left, w);
      if (byMass)
        memref::StoreOp::create(b, loc, rest, fwords, ValueRange{h.idx(0)});
      else
        setWord(rest, 2);
    };
    Value none = i32c(b, loc, -1);
    auto wantHere = [&](OpBuilder &b, Value sumOfBins) -> Value {
      if (!firstLevel)
        return byMass ? memref::LoadOp::create(b, loc, fwords, ValueRange{h.idx(0)}).getResult() : word(2);
      if (!byMass)
        return target;
      Value useTotal = total ? arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGE, total, h.f32(0.0)).getResult()
                             : Value();
      return arith::MulFOp::create(b, loc, target,
                                   useTotal ? arith::SelectOp::create(b, loc, useTotal, total, sumOfBins).getResult()
                                            : sumOfBins);
    };
    if (!gpu) {
      Value totalBins = scf::ForOp::create(b, loc, h.idx(0), h.idx(kBins), h.idx(1), ValueRange{zero},
                                           [&](OpBuilder &b, Location loc, Value r, ValueRange acc) {
                                             scf::YieldOp::create(b, loc, ValueRange{add(b, acc[0], binAt(b, r))});
                                           })
                            .getResult(0);
      Value w = wantHere(b, totalBins);
      // Rank by rank, carrying (the total above, chosen, left, lowest).
      auto loop = scf::ForOp::create(
          b, loc, h.idx(0), h.idx(kBins), h.idx(1), ValueRange{zero, none, w, none},
          [&](OpBuilder &b, Location loc, Value r, ValueRange st) {
            Value v = binAt(b, r);
            Value next = add(b, st[0], v);
            Value open = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, st[1], none);
            Value take = arith::AndIOp::create(b, loc, open, reaches(b, next, w));
            Value rI32 = arith::IndexCastOp::create(b, loc, i32, r);
            scf::YieldOp::create(b, loc,
                                 ValueRange{next, arith::SelectOp::create(b, loc, take, rI32, st[1]),
                                            arith::SelectOp::create(b, loc, take, sub(b, w, st[0]), st[2]),
                                            arith::SelectOp::create(b, loc, nonEmpty(b, v), rI32, st[3])});
          });
      store(b, loop.getResult(1), loop.getResult(3), loop.getResult(2), w);
      return;
    }
    constexpr int64_t kPerLane = kBins / kWarp;
    Value lane = tid;
    auto warp0 = scf::IfOp::create(b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, tid, h.idx(kWarp)),
                                   /*withElse=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(warp0.thenBlock());
    Value r0 = arith::MulIOp::create(b, loc, lane, h.idx(kPerLane));
    Value mine = zero;
    for (int64_t i = 0; i < kPerLane; ++i)
      mine = add(b, mine, binAt(b, arith::AddIOp::create(b, loc, r0, h.idx(i))));
    Value all = mine;
    if (firstLevel && byMass)
      for (int64_t offset = 1; offset < kWarp; offset *= 2)
        all = arith::AddFOp::create(b, loc, all, shuffleXor(b, loc, all, offset));
    Value w = wantHere(b, all);
    // The lanes' inclusive totals from the top (a scan over the lanes).
    Value laneI32 = arith::IndexCastOp::create(b, loc, i32, lane);
    Value incl = mine;
    for (int64_t offset = 1; offset < kWarp; offset *= 2) {
      Value up = gpu::ShuffleOp::create(b, loc, incl, i32c(b, loc, offset), i32c(b, loc, kWarp), gpu::ShuffleMode::UP)
                     .getShuffleResult();
      Value has = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, laneI32, i32c(b, loc, offset));
      incl = arith::SelectOp::create(b, loc, has, add(b, incl, up), incl);
    }
    Value prev = gpu::ShuffleOp::create(b, loc, incl, i32c(b, loc, 1), i32c(b, loc, kWarp), gpu::ShuffleMode::UP)
                     .getShuffleResult();
    Value excl = arith::SelectOp::create(
        b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, laneI32, i32c(b, loc, 1)), prev, zero);
    // The first lane whose total reaches w, and each lane's walk.
    Value firstLane = arith::SelectOp::create(b, loc, reaches(b, incl, w), laneI32, i32c(b, loc, kWarp));
    for (int64_t offset = 1; offset < kWarp; offset *= 2)
      firstLane = arith::MinSIOp::create(b, loc, firstLane, shuffleXor(b, loc, firstLane, offset));
    auto [chosen, left, lowest] = walk(b, r0, kPerLane, excl, w);
    for (int64_t offset = 1; offset < kWarp; offset *= 2)
      lowest = arith::MaxSIOp::create(b, loc, lowest, shuffleXor(b, loc, lowest, offset));
    // The first lane that reaches stores (lane 0 if none does: the lowest
    // non-empty bin).
    Value reached = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, firstLane, i32c(b, loc, kWarp));
    Value storer = arith::SelectOp::create(b, loc, reached, firstLane, i32c(b, loc, 0));
    auto mineToStore = scf::IfOp::create(b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, laneI32, storer),
                                         /*withElse=*/false);
    b.setInsertionPointToStart(mineToStore.thenBlock());
    store(b, arith::SelectOp::create(b, loc, reached, chosen, none), lowest, left, w);
  }

  /// One radix select where `on`, over the in-play entries, 8 bits a level
  /// from bit `topShift` + 7 down: the key whose range holds the target,
  /// counted from the largest key down (by count: `target` entries, an
  /// i32; by mass: the fraction `target` (f32) of the in-play mass, or of
  /// `total` if given, each entry weighing exp(y - maxY)). Returns the key
  /// (0 where `on` is false). After it, by count, word(2) is what is left
  /// of the target among the entries of that key, and counts[word(1)] how
  /// many in-play entries have it.
  Value select(Value on, int topShift, function_ref<Column(OpBuilder &, Value, Value)> column, Value target,
               bool byMass, Value maxY = Value(), Value total = Value()) {
    Type i32 = b.getI32Type();
    auto ifOp = scf::IfOp::create(b, loc, TypeRange{i32}, on, /*withElse=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifOp.elseBlock());
    scf::YieldOp::create(b, loc, ValueRange{i32c(b, loc, 0)});
    b.setInsertionPointToStart(ifOp.thenBlock());
    Value prefix = i32c(b, loc, 0);
    for (int shift = topShift; shift >= 0; shift -= 8) {
      int32_t highMask = shift == topShift ? 0 : static_cast<int32_t>(0xFFFFFFFFu << (shift + 8));
      zeroBins();
      barrier();
      forColumns([&](OpBuilder &b, Value j, Value v) {
        Column c = column(b, j, v);
        Value inRange = arith::CmpIOp::create(
            b, loc, arith::CmpIPredicate::eq, arith::AndIOp::create(b, loc, c.key, i32c(b, loc, highMask)), prefix);
        auto add = scf::IfOp::create(b, loc, arith::AndIOp::create(b, loc, inRange, c.inPlay), false);
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(add.thenBlock());
        Value bin = arith::IndexCastOp::create(
            b, loc, b.getIndexType(),
            arith::AndIOp::create(b, loc, arith::ShRUIOp::create(b, loc, c.key, i32c(b, loc, shift)),
                                  i32c(b, loc, kBins - 1)));
        if (copies > 1) {
          Value copy = arith::RemUIOp::create(b, loc, arith::DivUIOp::create(b, loc, tid, h.idx(kWarp)),
                                              h.idx(copies));
          bin = arith::AddIOp::create(b, loc, bin, arith::MulIOp::create(b, loc, copy, h.idx(kBins)));
        }
        if (byMass)
          memref::AtomicRMWOp::create(b, loc, arith::AtomicRMWKind::addf,
                                      math::ExpOp::create(b, loc, arith::SubFOp::create(b, loc, c.y, maxY)), mass,
                                      ValueRange{bin});
        else
          memref::AtomicRMWOp::create(b, loc, arith::AtomicRMWKind::addi, i32c(b, loc, 1), counts, ValueRange{bin});
      });
      barrier();
      if (copies > 1) {
        foldCopies(byMass ? mass : counts, byMass);
        barrier();
      }
      chooseBin(shift == topShift, byMass, target, total);
      barrier();
      Value chosen = word(1);
      prefix = arith::OrIOp::create(b, loc, prefix, arith::ShLIOp::create(b, loc, chosen, i32c(b, loc, shift)));
      // Every thread has read the words before the next level writes them.
      barrier();
    }
    scf::YieldOp::create(b, loc, ValueRange{prefix});
    return ifOp.getResult(0);
  }

  /// The `take` largest values of the entries (take > 0; equal values in
  /// increasing id) into `listIds` / `listVals` (in no order), on every
  /// thread after it: a select by count for the key of the take-th, one
  /// over 24 bits of (2^24 - 1 - id) among the entries of that key when
  /// more of them tie than are left to take, and a pass that gathers them.
  /// Returns the key of the take-th largest.
  Value takeLargest(Value take, Value listIds, Value listVals) {
    Type i32 = b.getI32Type(), indexType = b.getIndexType();
    Value yes = arith::ConstantIntOp::create(b, loc, b.getI1Type(), 1);
    Value keyN = select(
        yes, 24, [&](OpBuilder &b, Value, Value v) { return Column{orderedKey(b, loc, v), yes, Value()}; }, take,
        /*byMass=*/false);
    // Of the `take`, `left` have the key of the take-th; `tied` entries
    // have it.
    Value left = word(2);
    Value tied = memref::LoadOp::create(b, loc, counts,
                                        ValueRange{arith::IndexCastOp::create(b, loc, indexType, word(1))});
    // Every thread has read them before the next select writes them.
    barrier();
    Value idTop = i32c(b, loc, (1 << 24) - 1);
    auto idKey = [&](OpBuilder &b, Value j) {
      return arith::SubIOp::create(b, loc, idTop, arith::IndexCastOp::create(b, loc, i32, j)).getResult();
    };
    Value keyId = select(
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, left, tied), 16,
        [&](OpBuilder &b, Value j, Value v) {
          Value equal = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, orderedKey(b, loc, v), keyN);
          return Column{idKey(b, j), equal, Value()};
        },
        left, /*byMass=*/false);
    // The ids taken into the list, in the order their threads come.
    onFirst([&] { setWord(i32c(b, loc, 0), 3); });
    barrier();
    forColumns([&](OpBuilder &b, Value j, Value v) {
      Value key = orderedKey(b, loc, v);
      Value above = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ugt, key, keyN);
      Value atKey = arith::AndIOp::create(
          b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, key, keyN),
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::uge, idKey(b, j), keyId));
      auto taken = scf::IfOp::create(b, loc, arith::OrIOp::create(b, loc, above, atKey), /*withElse=*/false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(taken.thenBlock());
      Value slot = memref::AtomicRMWOp::create(b, loc, arith::AtomicRMWKind::addi, i32c(b, loc, 1), words,
                                               ValueRange{h.idx(3)});
      auto fits = scf::IfOp::create(b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, slot, take),
                                    /*withElse=*/false);
      b.setInsertionPointToStart(fits.thenBlock());
      Value at = arith::IndexCastOp::create(b, loc, indexType, slot);
      memref::StoreOp::create(b, loc, arith::IndexCastOp::create(b, loc, i32, j), listIds, ValueRange{at});
      memref::StoreOp::create(b, loc, v, listVals, ValueRange{at});
    });
    barrier();
    return keyN;
  }
};

} // namespace

/// Each thread's maximum and sums of exp((x - maximum) * s) for each
/// scale s of `scales` over the worker's entries (online), then over the
/// threads: (the maximum, the sums rescaled to it), on every thread.
static std::pair<Value, SmallVector<Value>> maxAndSums(RowWorker &w, ArrayRef<Value> scales) {
  OpBuilder &b = w.b;
  Location loc = w.loc;
  TileBuilder &h = w.h;
  Value zero = h.f32(0.0), one = h.f32(1.0);
  Value negInf = h.f32(-std::numeric_limits<float>::infinity());
  SmallVector<Value> init{negInf};
  for (size_t i = 0; i < scales.size(); ++i)
    init.push_back(zero);
  ValueRange scan = w.overColumns(
      [&](OpBuilder &b, Value, Value x, Value inside, ValueRange st) {
        Value v = arith::SelectOp::create(b, loc, inside, x, negInf);
        Value hi = arith::MaximumFOp::create(b, loc, st[0], v);
        Value lo = arith::MinimumFOp::create(b, loc, st[0], v);
        Value none = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, hi, negInf);
        Value up = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, v, st[0]);
        SmallVector<Value> next{hi};
        for (size_t i = 0; i < scales.size(); ++i) {
          // exp((lo - hi) * s), 0 where both are -inf (no mass yet, none
          // added).
          Value e = arith::SelectOp::create(
              b, loc, none, zero,
              math::ExpOp::create(b, loc,
                                  arith::MulFOp::create(b, loc, arith::SubFOp::create(b, loc, lo, hi), scales[i])));
          next.push_back(arith::SelectOp::create(
              b, loc, up, arith::AddFOp::create(b, loc, arith::MulFOp::create(b, loc, st[1 + i], e), one),
              arith::AddFOp::create(b, loc, st[1 + i], e)));
        }
        return next;
      },
      init);
  Value rowMax = fromOrderedKey(b, loc, w.maxOverThreads(orderedKey(b, loc, scan[0])));
  SmallVector<Value> sums;
  for (size_t i = 0; i < scales.size(); ++i) {
    Value scaled = arith::MulFOp::create(
        b, loc, scan[1 + i],
        math::ExpOp::create(b, loc,
                            arith::MulFOp::create(b, loc, arith::SubFOp::create(b, loc, scan[0], rowMax), scales[i])));
    Value mine = arith::SelectOp::create(
        b, loc, arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, scan[1 + i], zero), scaled, zero);
    sums.push_back(w.sumOverThreads(mine, 0));
  }
  return {rowMax, sums};
}

/// The row's maximum and sum of exp((x - maximum) * s) from the stats of
/// its chunks (et.top_candidates): stat 0 each chunk's maximum, stat
/// `which` its sum at that scale; on every thread.
static std::pair<Value, Value> maxAndSumOfChunks(RowWorker &w, Value stats, int64_t which, Value scale) {
  OpBuilder &b = w.b;
  Location loc = w.loc;
  TileBuilder &h = w.h;
  Value chunks = h.idx(cast<MemRefType>(stats.getType()).getDimSize(1));
  Value zero = h.f32(0.0);
  auto stat = [&](OpBuilder &b, Value c, int64_t i) {
    return memref::LoadOp::create(b, loc, stats, ValueRange{w.row, c, h.idx(i)}).getResult();
  };
  Value key = scf::ForOp::create(b, loc, w.tid, chunks, w.threads, ValueRange{i32c(b, loc, 0)},
                                 [&](OpBuilder &b, Location loc, Value c, ValueRange acc) {
                                   Value k = orderedKey(b, loc, stat(b, c, 0));
                                   scf::YieldOp::create(b, loc, ValueRange{arith::MaxUIOp::create(b, loc, acc[0], k)});
                                 })
                  .getResult(0);
  Value rowMax = fromOrderedKey(b, loc, w.maxOverThreads(key));
  Value mine = scf::ForOp::create(
                   b, loc, w.tid, chunks, w.threads, ValueRange{zero},
                   [&](OpBuilder &b, Location loc, Value c, ValueRange acc) {
                     Value s = stat(b, c, which);
                     Value scaled = arith::MulFOp::create(
                         b, loc, s,
                         math::ExpOp::create(
                             b, loc,
                             arith::MulFOp::create(b, loc, arith::SubFOp::create(b, loc, stat(b, c, 0), rowMax),
                                                   scale)));
                     Value add = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, s, zero);
                     scf::YieldOp::create(b, loc, ValueRange{arith::SelectOp::create(
                                                      b, loc, add, arith::AddFOp::create(b, loc, acc[0], scaled),
                                                      acc[0])});
                   })
                   .getResult(0);
  return {rowMax, w.sumOverThreads(mine, 0)};
}

/// The largest floor of the row's chunks (et.top_candidates' stat 3) as a
/// key of y = floor * invT: entries above it are all candidates.
static Value floorKeyOfChunks(RowWorker &w, Value stats, Value invT) {
  OpBuilder &b = w.b;
  Location loc = w.loc;
  TileBuilder &h = w.h;
  Value chunks = h.idx(cast<MemRefType>(stats.getType()).getDimSize(1));
  Value key = scf::ForOp::create(
                  b, loc, w.tid, chunks, w.threads, ValueRange{i32c(b, loc, 0)},
                  [&](OpBuilder &b, Location loc, Value c, ValueRange acc) {
                    Value f = memref::LoadOp::create(b, loc, stats, ValueRange{w.row, c, h.idx(3)});
                    Value k = orderedKey(b, loc, arith::MulFOp::create(b, loc, f, invT));
                    scf::YieldOp::create(b, loc, ValueRange{arith::MaxUIOp::create(b, loc, acc[0], k)});
                  })
                  .getResult(0);
  return w.maxOverThreads(key);
}

/// et.sample_threshold: radix selects over the keys of y = x / T (RowWorker),
/// by count for top-k, then by mass for top-p among the keys top-k keeps;
/// with candidates, over them first, and over the row where they cannot
/// decide.
static void lowerSampleThreshold(SampleThresholdOp op, bool gpu) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  Value m = op.getToken();
  RowWorker w(b, loc, op, gpu, op.getX(), m);
  TileBuilder &h = w.h;
  Type i32 = b.getI32Type(), f32 = b.getF32Type();
  Value width = w.width;
  Value t = memref::LoadOp::create(b, loc, op.getTemperature(), ValueRange{m});
  Value k = memref::LoadOp::create(b, loc, op.getTopK(), ValueRange{m});
  Value p = memref::LoadOp::create(b, loc, op.getTopP(), ValueRange{m});
  Value minP = memref::LoadOp::create(b, loc, op.getMinP(), ValueRange{m});
  Value zero = h.f32(0.0), one = h.f32(1.0);
  Value negInf = h.f32(-std::numeric_limits<float>::infinity());
  Value widthI32 = arith::IndexCastOp::create(b, loc, i32, width);
  Value kOn = arith::AndIOp::create(b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sgt, k, i32c(b, loc, 0)),
                                    arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, k, widthI32));
  Value pOn = arith::AndIOp::create(b, loc, arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, p, zero),
                                    arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, p, one));
  Value minOn = arith::AndIOp::create(b, loc, arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, minP, zero),
                                      arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLE, minP, one));
  Value sampled = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, t, zero);
  Value any = arith::AndIOp::create(b, loc, sampled,
                                    arith::OrIOp::create(b, loc, kOn, arith::OrIOp::create(b, loc, pOn, minOn)));
  // Greedy tokens and tokens without a filter: -inf (not covered),
  // nothing read.
  auto work = scf::IfOp::create(b, loc, TypeRange{f32, i32}, any, /*withElse=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(work.elseBlock());
    scf::YieldOp::create(b, loc, ValueRange{negInf, i32c(b, loc, 0)});
  }
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(work.thenBlock());
  Value invT = arith::DivFOp::create(b, loc, one, t);
  auto yOf = [&](OpBuilder &b, Value v) { return arith::MulFOp::create(b, loc, v, invT).getResult(); };
  auto columnAbove = [&](Value floor) {
    return [&, floor](OpBuilder &b, Value, Value v) {
      Value y = yOf(b, v);
      Value key = orderedKey(b, loc, y);
      return RowWorker::Column{key, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::uge, key, floor), y};
    };
  };
  // The threshold of the keys top-k and top-p chose, and min-p's.
  auto tauOf = [&](Value keyK, Value keyP, Value maxY) {
    Value key = arith::MaxUIOp::create(b, loc, keyK, keyP);
    Value tau = arith::SelectOp::create(
        b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, key, i32c(b, loc, 0)), negInf,
        fromOrderedKey(b, loc, key));
    Value tauMin = arith::SelectOp::create(
        b, loc, minOn, arith::AddFOp::create(b, loc, maxY, math::LogOp::create(b, loc, minP)), negInf);
    return arith::MaximumFOp::create(b, loc, tau, tauMin).getResult();
  };
  // Over every column of the row: the largest key, max(y), each thread's
  // in registers, then over the threads; top-k, then top-p over the keys
  // at or above its key.
  auto overRow = [&] {
    w.overRow(h.idx(0), width);
    Value mine = w.overColumns(
        [&](OpBuilder &b, Value, Value v, Value inside, ValueRange best) {
          Value key = arith::SelectOp::create(b, loc, inside, orderedKey(b, loc, yOf(b, v)), i32c(b, loc, 0));
          return SmallVector<Value>{arith::MaxUIOp::create(b, loc, best[0], key)};
        },
        ValueRange{i32c(b, loc, 0)})[0];
    Value maxY = fromOrderedKey(b, loc, w.maxOverThreads(mine));
    Value keyK = w.select(kOn, 24, columnAbove(i32c(b, loc, 0)), k, /*byMass=*/false);
    Value keyP = w.select(pOn, 24, columnAbove(keyK), p, /*byMass=*/true, maxY);
    return tauOf(keyK, keyP, maxY);
  };
  if (!op.getCandIds()) {
    scf::YieldOp::create(b, loc, ValueRange{overRow(), i32c(b, loc, 0)});
  } else {
    // Over the candidates, with the row's maximum and mass from the
    // chunks' stats: top-k decides if k <= K (each chunk's K largest hold
    // its share of the k largest); top-p if its key, and top-k's under
    // it, are above every chunk's floor (every entry above the floors is
    // a candidate, so the mass above the key is all there).
    auto ids = cast<MemRefType>(op.getCandIds().getType());
    Value stats = op.getCandStats();
    auto [maxX, massT] = maxAndSumOfChunks(w, stats, 2, invT);
    Value maxY = yOf(b, maxX);
    Value floorKey = floorKeyOfChunks(w, stats, invT);
    w.overCandidates(op.getCandIds(), op.getCandVals());
    Value kFits = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sle, k, i32c(b, loc, ids.getDimSize(2)));
    Value keyK = w.select(arith::AndIOp::create(b, loc, kOn, kFits), 24, columnAbove(i32c(b, loc, 0)), k,
                          /*byMass=*/false);
    // Without top-k, the mass in play is the row's (from the stats); with
    // it, that of the candidates it keeps (-1: the bins').
    Value total = arith::SelectOp::create(b, loc, kOn, h.f32(-1.0), massT);
    Value keyP = w.select(pOn, 24, columnAbove(keyK), p, /*byMass=*/true, maxY, total);
    auto above = [&](Value key) { return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ugt, key, floorKey); };
    Value notK = arith::XOrIOp::create(b, loc, kOn, arith::ConstantIntOp::create(b, loc, b.getI1Type(), 1));
    Value notP = arith::XOrIOp::create(b, loc, pOn, arith::ConstantIntOp::create(b, loc, b.getI1Type(), 1));
    Value kDecides = arith::OrIOp::create(b, loc, notK, kFits);
    Value pDecides = arith::OrIOp::create(
        b, loc, notP,
        arith::AndIOp::create(b, loc, above(keyP), arith::OrIOp::create(b, loc, notK, above(keyK))));
    auto decided = scf::IfOp::create(b, loc, TypeRange{f32}, arith::AndIOp::create(b, loc, kDecides, pDecides),
                                     /*withElse=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(decided.thenBlock());
      scf::YieldOp::create(b, loc, ValueRange{tauOf(keyK, keyP, maxY)});
      b.setInsertionPointToStart(decided.elseBlock());
      scf::YieldOp::create(b, loc, ValueRange{overRow()});
    }
    // Covered: the threshold above every floor, so every column kept is
    // a candidate.
    Value tauKey = orderedKey(b, loc, decided.getResult(0));
    Value covered = arith::ExtUIOp::create(
        b, loc, i32, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ugt, tauKey, floorKey));
    scf::YieldOp::create(b, loc, ValueRange{decided.getResult(0), covered});
  }
  b.setInsertionPointAfter(work);
  w.onFirst([&] {
    memref::StoreOp::create(b, loc, work.getResult(0), op.getThreshold(), ValueRange{m});
    if (Value covered = op.getCovered())
      memref::StoreOp::create(b, loc, work.getResult(1), covered, ValueRange{m});
  });
  // Every thread has read the shared words (min-p alone reads the maximum
  // last) before another row op of the tile, sharing them, writes them;
  // and the threshold is stored before the tile's threads read it.
  w.barrier();
  op.erase();
}

/// Writes the `take` entries of `listIds` / `listVals` (thread 0), largest
/// first (a selection sort), as ids into row `row` of `ids` and values
/// minus `offset` into that of `values`.
static void writeSorted(RowWorker &w, Value take, Value listIds, Value listVals, Value ids, Value values, Value row,
                        Value offset) {
  OpBuilder &b = w.b;
  Location loc = w.loc;
  TileBuilder &h = w.h;
  w.onFirst([&] {
    Value count = arith::IndexCastOp::create(b, loc, b.getIndexType(), take);
    scf::ForOp::create(
        b, loc, h.idx(0), count, h.idx(1), ValueRange{}, [&](OpBuilder &b, Location loc, Value i, ValueRange) {
          Value iv = memref::LoadOp::create(b, loc, listVals, ValueRange{i});
          Value ii = memref::LoadOp::create(b, loc, listIds, ValueRange{i});
          auto best = scf::ForOp::create(
              b, loc, arith::AddIOp::create(b, loc, i, h.idx(1)), count, h.idx(1), ValueRange{iv, ii, i},
              [&](OpBuilder &b, Location loc, Value k, ValueRange st) {
                Value kv = memref::LoadOp::create(b, loc, listVals, ValueRange{k});
                Value ki = memref::LoadOp::create(b, loc, listIds, ValueRange{k});
                Value better = argmaxBetter(b, loc, kv, ki, st[0], st[1]);
                scf::YieldOp::create(b, loc,
                                     ValueRange{arith::SelectOp::create(b, loc, better, kv, st[0]),
                                                arith::SelectOp::create(b, loc, better, ki, st[1]),
                                                arith::SelectOp::create(b, loc, better, k, st[2])});
              });
          Value at = best.getResult(2);
          memref::StoreOp::create(b, loc, iv, listVals, ValueRange{at});
          memref::StoreOp::create(b, loc, ii, listIds, ValueRange{at});
          memref::StoreOp::create(b, loc, best.getResult(1), ids, ValueRange{row, i});
          memref::StoreOp::create(b, loc, arith::SubFOp::create(b, loc, best.getResult(0), offset), values,
                                  ValueRange{row, i});
          scf::YieldOp::create(b, loc);
        });
  });
}

/// et.top_logprobs (RowWorker): the row's maximum and sum of exponentials
/// (per thread, online, then over the threads; with candidates, from the
/// chunks' stats), then with n > 0 the n largest (RowWorker::takeLargest,
/// over the candidates if there are) and thread 0 writing them out,
/// largest first.
static void lowerTopLogprobs(TopLogprobsOp op, bool gpu) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  Value m = op.getToken(), row = op.getRow();
  RowWorker w(b, loc, op, gpu, op.getX(), m);
  TileBuilder &h = w.h;
  Type i32 = b.getI32Type(), f32 = b.getF32Type();
  int64_t entries = op.getIds().getType().getDimSize(1);
  Value listIds = w.scratch(entries, i32, "list_ids"), listVals = w.scratch(entries, f32, "list_values");
  Value widthI32 = arith::IndexCastOp::create(b, loc, i32, w.width);
  Value n = memref::LoadOp::create(b, loc, op.getCount(), ValueRange{m});
  auto work = scf::IfOp::create(b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, n, i32c(b, loc, 0)),
                                /*withElse=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(work.thenBlock());
  Value one = h.f32(1.0);
  Value rowMax, sum;
  if (op.getCandIds()) {
    std::tie(rowMax, sum) = maxAndSumOfChunks(w, op.getCandStats(), 1, one);
    w.overCandidates(op.getCandIds(), op.getCandVals());
  } else {
    auto [top, sums] = maxAndSums(w, {one});
    rowMax = top;
    sum = sums[0];
  }
  Value lse = arith::AddFOp::create(b, loc, rowMax, math::LogOp::create(b, loc, sum));
  // The n largest (at most the list's entries and the row's width).
  Value take = arith::MinSIOp::create(b, loc, arith::MinSIOp::create(b, loc, n, i32c(b, loc, entries)), widthI32);
  auto some = scf::IfOp::create(b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sgt, take, i32c(b, loc, 0)),
                                /*withElse=*/false);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(some.thenBlock());
    w.takeLargest(take, listIds, listVals);
    writeSorted(w, take, listIds, listVals, op.getIds(), op.getValues(), row, lse);
  }
  w.onFirst([&] { memref::StoreOp::create(b, loc, lse, op.getLse(), ValueRange{m}); });
  // The threads have read the shared words before another op writes them.
  w.barrier();
  op.erase();
}

/// et.top_candidates (RowWorker over the chunk's columns): the maximum and
/// the sums of exponentials at 1 and 1 / T (online), the K largest
/// (RowWorker::takeLargest), then the list out on every thread and the
/// stats on thread 0.
static void lowerTopCandidates(TopCandidatesOp op, bool gpu) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  Value m = op.getToken(), slot = op.getSlot();
  RowWorker w(b, loc, op, gpu, op.getX(), m);
  TileBuilder &h = w.h;
  Type i32 = b.getI32Type(), f32 = b.getF32Type();
  int64_t k = op.getIds().getType().getDimSize(2);
  Value listIds = w.scratch(k, i32, "list_ids"), listVals = w.scratch(k, f32, "list_values");
  Value end = arith::MinSIOp::create(b, loc, arith::AddIOp::create(b, loc, op.getCol0(), op.getCols()), w.width);
  Value n = arith::MaxSIOp::create(b, loc, arith::SubIOp::create(b, loc, end, op.getCol0()), h.idx(0));
  w.overRow(op.getCol0(), n);
  Value zero = h.f32(0.0), one = h.f32(1.0);
  Value negInf = h.f32(-std::numeric_limits<float>::infinity());
  Value t = memref::LoadOp::create(b, loc, op.getTemperature(), ValueRange{m});
  Value sampled = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, t, zero);
  Value invT = arith::SelectOp::create(b, loc, sampled, arith::DivFOp::create(b, loc, one, t), one);
  auto [top, sums] = maxAndSums(w, {one, invT});
  Value nI32 = arith::IndexCastOp::create(b, loc, i32, n);
  Value take = arith::MinSIOp::create(b, loc, nI32, i32c(b, loc, k));
  auto some = scf::IfOp::create(b, loc, TypeRange{i32},
                                arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sgt, take, i32c(b, loc, 0)),
                                /*withElse=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(some.thenBlock());
    scf::YieldOp::create(b, loc, ValueRange{w.takeLargest(take, listIds, listVals)});
    b.setInsertionPointToStart(some.elseBlock());
    scf::YieldOp::create(b, loc, ValueRange{i32c(b, loc, 0)});
  }
  threadLoop(b, loc, h.idx(k), [&](OpBuilder &b, Location loc, Value i) {
    Value in = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, arith::IndexCastOp::create(b, loc, i32, i),
                                     take);
    Value safe = arith::SelectOp::create(b, loc, in, i, h.idx(0));
    Value id = arith::SelectOp::create(b, loc, in, memref::LoadOp::create(b, loc, listIds, ValueRange{safe}),
                                       i32c(b, loc, -1));
    Value v = arith::SelectOp::create(b, loc, in, memref::LoadOp::create(b, loc, listVals, ValueRange{safe}), negInf);
    memref::StoreOp::create(b, loc, id, op.getIds(), ValueRange{m, slot, i});
    memref::StoreOp::create(b, loc, v, op.getVals(), ValueRange{m, slot, i});
  });
  Value more = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sgt, nI32, i32c(b, loc, k));
  Value floor = arith::SelectOp::create(b, loc, more, fromOrderedKey(b, loc, some.getResult(0)), negInf);
  Value massT = arith::SelectOp::create(b, loc, sampled, sums[1], zero);
  w.onFirst([&] {
    Value values[] = {top, sums[0], massT, floor};
    for (int64_t i = 0; i < 4; ++i)
      memref::StoreOp::create(b, loc, values[i], op.getStats(), ValueRange{m, slot, h.idx(i)});
  });
  // The threads have read the list and the words before another op
  // writes them.
  w.barrier();
  op.erase();
}

/// et.logit_bias: the worker's threads take the token's entries (one each
/// per trip), adding each nonzero value to its id's logit atomically.
static void lowerLogitBias(LogitBiasOp op, bool gpu) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  TileBuilder h{b, loc};
  Value m = op.getToken(), x = op.getX(), ids = op.getIds(), values = op.getValues();
  Value width = arith::IndexCastOp::create(b, loc, b.getI32Type(), memref::DimOp::create(b, loc, x, 1));
  Value entries = memref::DimOp::create(b, loc, ids, 1);
  threadLoop(b, loc, entries, [&](OpBuilder &b, Location loc, Value k) {
    Value id = memref::LoadOp::create(b, loc, ids, ValueRange{m, k});
    Value v = memref::LoadOp::create(b, loc, values, ValueRange{m, k});
    Value inside =
        arith::AndIOp::create(b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, id, i32c(b, loc, 0)),
                              arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, id, width));
    Value add = arith::AndIOp::create(
        b, loc, inside, arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNE, v, h.f32(0.0)));
    auto ifOp = scf::IfOp::create(b, loc, add, /*withElse=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    memref::AtomicRMWOp::create(b, loc, arith::AtomicRMWKind::addf, v, x,
                                ValueRange{m, arith::IndexCastOp::create(b, loc, b.getIndexType(), id)});
  });
  // The ops after it read the logits on every thread.
  if (gpu)
    gpu::BarrierOp::create(b, loc);
  op.erase();
}

/// et.penalize: the worker's threads count each id of the token's history
/// into its row of `counts` (generated occurrences in the low 31 bits, the
/// top bit for one in the prompt), then take the counts back to zero; the
/// thread that takes an id's nonzero count applies that id's penalties, so
/// each id's logit changes once.
static void lowerPenalize(PenalizeOp op, bool gpu) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  TileBuilder h{b, loc};
  Type i32 = b.getI32Type(), indexType = b.getIndexType();
  Value m = op.getToken(), x = op.getX(), counts = op.getCounts(), history = op.getHistory();
  Value slot = op.getSlot();
  Value r = memref::LoadOp::create(b, loc, op.getRepetition(), ValueRange{m});
  Value f = memref::LoadOp::create(b, loc, op.getFrequency(), ValueRange{m});
  Value p = memref::LoadOp::create(b, loc, op.getPresence(), ValueRange{m});
  Value from = arith::IndexCastOp::create(
      b, loc, indexType, memref::LoadOp::create(b, loc, op.getOutputsFrom(), ValueRange{m}));
  Value zero = h.f32(0.0), one = h.f32(1.0);
  auto une = [&](Value a, Value c) { return arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNE, a, c); };
  // r <= 0 (a zeroed row) is off, as 1 is.
  r = arith::SelectOp::create(b, loc, arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, r, zero), r, one);
  Value on = arith::OrIOp::create(b, loc, une(r, one), arith::OrIOp::create(b, loc, une(f, zero), une(p, zero)));
  auto work = scf::IfOp::create(b, loc, on, /*withElse=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(work.thenBlock());
  Value width = arith::IndexCastOp::create(b, loc, i32, memref::DimOp::create(b, loc, x, 1));
  // Over the history: each position's id, if it is a column of x.
  auto overIds = [&](function_ref<void(OpBuilder &, Value, Value)> body) {
    threadLoop(b, loc, op.getLength(), [&](OpBuilder &b, Location loc, Value i) {
      Value id = memref::LoadOp::create(b, loc, history, ValueRange{slot, i});
      Value inside =
          arith::AndIOp::create(b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, id, i32c(b, loc, 0)),
                                arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, id, width));
      auto ifOp = scf::IfOp::create(b, loc, inside, /*withElse=*/false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(ifOp.thenBlock());
      body(b, i, arith::IndexCastOp::create(b, loc, b.getIndexType(), id));
    });
  };
  auto barrier = [&] {
    if (gpu)
      gpu::BarrierOp::create(b, loc);
  };
  overIds([&](OpBuilder &b, Value i, Value id) {
    Value generated = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::uge, i, from);
    auto ifOp = scf::IfOp::create(b, loc, generated, /*withElse=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    memref::AtomicRMWOp::create(b, loc, arith::AtomicRMWKind::addi, i32c(b, loc, 1), counts, ValueRange{m, id});
    b.setInsertionPointToStart(ifOp.elseBlock());
    memref::AtomicRMWOp::create(b, loc, arith::AtomicRMWKind::ori,
                                i32c(b, loc, std::numeric_limits<int32_t>::min()), counts, ValueRange{m, id});
  });
  barrier();
  overIds([&](OpBuilder &b, Value, Value id) {
    Value word = memref::AtomicRMWOp::create(b, loc, arith::AtomicRMWKind::assign, i32c(b, loc, 0), counts,
                                             ValueRange{m, id});
    auto ifOp = scf::IfOp::create(
        b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, word, i32c(b, loc, 0)), false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    Value c = arith::AndIOp::create(b, loc, word, i32c(b, loc, std::numeric_limits<int32_t>::max()));
    Value v = memref::LoadOp::create(b, loc, x, ValueRange{m, id});
    Value positive = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, v, zero);
    v = arith::SelectOp::create(b, loc, positive, arith::DivFOp::create(b, loc, v, r),
                                arith::MulFOp::create(b, loc, v, r));
    Value any = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sgt, c, i32c(b, loc, 0));
    Value fc = arith::MulFOp::create(b, loc, f, arith::SIToFPOp::create(b, loc, b.getF32Type(), c));
    v = arith::SubFOp::create(b, loc, v, arith::AddFOp::create(b, loc, fc, arith::SelectOp::create(b, loc, any, p, zero)));
    memref::StoreOp::create(b, loc, v, x, ValueRange{m, id});
  });
  barrier();
  op.erase();
}

namespace {

/// A row op (et.sample_threshold, et.top_logprobs, et.top_candidates,
/// et.logit_bias, et.penalize): all threads of the worker on the GPU, one
/// on the host.
template <typename OpTy, void (*lower)(OpTy, bool)>
struct RowOpLowering : public TileOpLowering<OpTy> {
  using TileOpLowering<OpTy>::TileOpLowering;
  LogicalResult matchAndRewrite(OpTy op, PatternRewriter &) const override {
    lower(op, this->options.gpu);
    return success();
  }
};

/// et.argmax: the whole worker on each row inside a task on the GPU, else a
/// thread per row.
struct ArgmaxLowering : public TileOpLowering<ArgmaxOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult matchAndRewrite(ArgmaxOp op, PatternRewriter &) const override {
    if (options.gpu && op->getParentOfType<TaskOp>())
      lowerArgmaxBlock(op);
    else
      lowerArgmax(op, options.gpu);
    return success();
  }
};

} // namespace

void populateArgmaxLoweringPatterns(RewritePatternSet &patterns, const TileLoweringOptions &options) {
  patterns.add<ArgmaxLowering, RowOpLowering<SampleThresholdOp, lowerSampleThreshold>,
               RowOpLowering<TopLogprobsOp, lowerTopLogprobs>, RowOpLowering<TopCandidatesOp, lowerTopCandidates>,
               RowOpLowering<LogitBiasOp, lowerLogitBias>, RowOpLowering<PenalizeOp, lowerPenalize>>(
      patterns.getContext(), options);
}
} // namespace mlir::et::tile
