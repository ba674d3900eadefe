//===- LowerLinearSpread.cpp - et.linear spread over every warp ---------===//
//
// The spread layout of et.linear on the GPU (linear=spread): a tile of few
// or short rows spread over every warp, K split between warps or several
// rows per trip.
//
//===----------------------------------------------------------------------===//

#include "LinearLowering.h"

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

std::optional<SpreadShape> spreadShape(LinearOp op, int64_t unroll, int64_t threads) {
  constexpr int64_t step = kWarp * kVector; // elements of one chunk
  constexpr int64_t kMaxAccumulators = 4;
  auto task = op->getParentOfType<TaskOp>();
  int64_t k = op.getW().getType().getDimSize(1);
  std::optional<int64_t> rowsConst = getConstantIntValue(op.getRows());
  if (!task || threads <= 0 || threads % kWarp || !rowsConst || *rowsConst < 1 || ShapedType::isDynamic(k) ||
      k % step)
    return std::nullopt;
  MemRefType xType = op.getX().getType();
  bool staticM = !xType.isDynamicDim(0);
  const int64_t W = threads / kWarp, R = *rowsConst, c = k / step, nm = op.getGated() ? 2 : 1;
  const int64_t mCount = staticM ? xType.getDimSize(0) : 1;
  int64_t G = 1;
  while (R * G * 2 <= W && c % (G * 2) == 0)
    G *= 2;
  const int64_t q = c / G; // chunks per (row, part)
  int64_t P = 1;
  if (G == 1)
    while (2 * P * q * nm <= unroll && R % (2 * P * W) == 0 && 2 * P * nm * mCount <= kMaxAccumulators)
      P *= 2;
  bool gatedWhole = nm == 2 && q > 1 && q * nm <= unroll;
  if ((G == 1 && P == 1 && !gatedWhole) || P * nm * mCount > kMaxAccumulators)
    return std::nullopt;
  const int64_t streams = P * nm;
  // Chunks per stream and trip.
  const int64_t u = std::min<int64_t>(q, std::max<int64_t>(1, unroll / streams));
  return SpreadShape{W, R, c, nm, mCount, G, q, P, streams, u, staticM};
}

namespace {

/// lowerLinearGPUSpread's steps and the values they share: the layout
/// (SpreadShape), where the warp works, the first trip's early loads, the
/// staged norm.
struct SpreadLinearGPU : SpreadShape {
  static constexpr int64_t step = kWarp * kVector; // elements of one chunk
  LinearOp op;
  OpBuilder &b;
  Location loc;
  TileBuilder h;
  TaskOp task;
  SmallVector<Value> mems;
  VectorType vecBF16, vecF32;
  LinearCommon lc;
  Value laneK, end;
  Value base, local, part, row, mine, col0;
  SmallVector<Value> firstRows, firstOuts, firstValid;
  SmallVector<Value> pre;
  bool hasEarly = false;
  StagedNorm sn;
  Value isLane0;

  SpreadLinearGPU(LinearOp op, const SpreadShape &shape, OpBuilder &b, TaskOp task, ArrayRef<Value> mems)
      : SpreadShape(shape), op(op), b(b), loc(op.getLoc()), h{b, loc}, task(task), mems(mems) {}

  Value loadRaw(OpBuilder &b, Value mem, Value r, Value col) { return loadChunk(b, loc, mem, r, col); }
  Value ext(OpBuilder &b, Value v) { return arith::ExtFOp::create(b, loc, vecF32, v); }

  /// Where the warp works. G = 1: its first rows (base, then base + p x W,
  /// a row past `end` reading `base`); G > 1: its row and part.
  void setUp() {
    vecBF16 = VectorType::get({kVector}, b.getBF16Type());
    vecF32 = VectorType::get({kVector}, b.getF32Type());
    lc = linearCommon(b, loc, op);
    laneK = arith::MulIOp::create(b, loc, lc.lane, h.idx(kVector));
    end = arith::MinSIOp::create(b, loc, arith::AddIOp::create(b, loc, op.getRow0(), op.getRows()), lc.n);
    if (G == 1) {
      base = arith::AddIOp::create(b, loc, op.getRow0(), lc.warp);
      mine = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, base, end);
      col0 = laneK;
      for (int64_t p = 0; p < P; ++p) {
        Value r = arith::AddIOp::create(b, loc, base, h.idx(p * W));
        Value valid = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, r, end);
        firstValid.push_back(valid);
        firstOuts.push_back(r);
        firstRows.push_back(p == 0 ? r : arith::SelectOp::create(b, loc, valid, r, base).getResult());
      }
    } else {
      local = arith::RemUIOp::create(b, loc, lc.warp, h.idx(R));
      part = arith::DivUIOp::create(b, loc, lc.warp, h.idx(R));
      row = arith::AddIOp::create(b, loc, op.getRow0(), local);
      mine = arith::AndIOp::create(b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, part, h.idx(G)),
                                   arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, row, end));
      col0 = arith::AddIOp::create(b, loc, laneK, arith::MulIOp::create(b, loc, part, h.idx(q * step)));
      firstRows.push_back(row);
    }
  }

  /// The first trip's weights, (chunk, row, mem)-major, loaded early into
  /// registers (zeros for a warp without rows).
  void loadEarly() {
    auto ifOp = scf::IfOp::create(b, loc, SmallVector<Type>(u * streams, vecBF16), mine,
                                  /*withElseRegion=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    SmallVector<Value> ws;
    for (int64_t j = 0; j < u; ++j) {
      Value col = arith::AddIOp::create(b, loc, col0, h.idx(j * step));
      for (Value r : firstRows)
        for (Value mem : mems)
          ws.push_back(loadRaw(b, mem, r, col));
    }
    scf::YieldOp::create(b, loc, ws);
    b.setInsertionPointToStart(ifOp.elseBlock());
    Value zero = arith::ConstantOp::create(
        b, loc, vecBF16, DenseElementsAttr::get(vecBF16, APFloat::getZero(APFloat::BFloat())));
    scf::YieldOp::create(b, loc, SmallVector<Value>(u * streams, zero));
    pre.assign(ifOp.getResults().begin(), ifOp.getResults().end());
  }

  /// At the op: the staged norm (stageNorm) and the lane that stores.
  void atOp(int64_t threads) {
    b.setInsertionPoint(op);
    sn = stageNorm(b, loc, op, threads);
    isLane0 = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, lc.lane, h.idx(0));
  }

  /// Lane sums of `rows` (each over every mem) from column `from` on, q
  /// chunks, for the tokens `toks`: stream-major (row, mem), then token.
  /// With `first`, the first trip's weights are those loaded early. With
  /// `squares` (norm), then the lane sums of x's squares, one per token.
  SmallVector<Value> streamSums(OpBuilder &b, ArrayRef<Value> rows, Value from, ArrayRef<Value> toks, bool first,
                                bool squares = false) {
    TileBuilder h{b, loc};
    int64_t nt = toks.size();
    Value zero = arith::ConstantOp::create(b, loc, vecF32, DenseElementsAttr::get(vecF32, APFloat(0.0f)));
    SmallVector<Value> accs((streams + (squares ? 1 : 0)) * nt, zero);
    // One trip: `n` chunks of every stream from column `col`.
    auto trip = [&](OpBuilder &b, Value col, int64_t n, ValueRange in, ArrayRef<Value> loaded) {
      TileBuilder h{b, loc};
      SmallVector<Value> ws, cols;
      for (int64_t j = 0; j < n; ++j) {
        Value cj = arith::AddIOp::create(b, loc, col, h.idx(j * step));
        cols.push_back(cj);
        for (Value r : rows)
          for (Value mem : mems)
            ws.push_back(ws.size() < loaded.size() ? loaded[ws.size()] : loadRaw(b, mem, r, cj));
      }
      SmallVector<Value> next(in.begin(), in.end());
      for (int64_t j = 0; j < n; ++j)
        for (int64_t t = 0; t < nt; ++t) {
          Value raw;
          Value xv = loadX(b, loc, op, toks[t], cols[j], &raw, sn.xs);
          for (int64_t s = 0; s < streams; ++s)
            next[s * nt + t] = vector::FMAOp::create(b, loc, ext(b, ws[j * streams + s]), xv, next[s * nt + t]);
          if (squares)
            next[streams * nt + t] = vector::FMAOp::create(b, loc, raw, raw, next[streams * nt + t]);
        }
      return next;
    };
    int64_t trips = q / u, rest = q % u, done = 0;
    if (first) {
      accs = trip(b, from, u, accs, pre);
      done = 1;
    }
    if (trips - done == 1) {
      accs = trip(b, arith::AddIOp::create(b, loc, from, h.idx(done * u * step)), u, accs, {});
    } else if (trips - done > 1) {
      auto loop = scf::ForOp::create(
          b, loc, h.idx(done), h.idx(trips), h.idx(1), accs,
          [&](OpBuilder &b, Location loc, Value i, ValueRange in) {
            TileBuilder h{b, loc};
            Value col = arith::AddIOp::create(b, loc, from, arith::MulIOp::create(b, loc, i, h.idx(u * step)));
            scf::YieldOp::create(b, loc, trip(b, col, u, in, {}));
          });
      accs.assign(loop.getResults().begin(), loop.getResults().end());
    }
    if (rest)
      accs = trip(b, arith::AddIOp::create(b, loc, from, h.idx(trips * u * step)), rest, accs, {});
    return accs;
  }

  /// The tokens of one pass: all of a static M, else token `t` of a loop
  /// (with its parity).
  void forTokens(OpBuilder &b, function_ref<void(OpBuilder &, ArrayRef<Value>, Value)> body) {
    TileBuilder h{b, loc};
    if (staticM) {
      SmallVector<Value> toks;
      for (int64_t i = 0; i < mCount; ++i)
        toks.push_back(h.idx(i));
      body(b, toks, h.idx(0));
      return;
    }
    Value m = memref::DimOp::create(b, loc, op.getX(), 0);
    scf::ForOp::create(b, loc, h.idx(0), m, h.idx(1), ValueRange{},
                       [&](OpBuilder &b, Location loc, Value t, ValueRange) {
                         TileBuilder h{b, loc};
                         body(b, Value(t), arith::RemUIOp::create(b, loc, t, h.idx(2)));
                         scf::YieldOp::create(b, loc);
                       });
  }

  /// G = 1: a group of P rows: `rows` to read (in range), `outs` to store
  /// where `valid`.
  void rowGroup(OpBuilder &b, ArrayRef<Value> rows, ArrayRef<Value> outs, ArrayRef<Value> valid, bool first) {
    forTokens(b, [&](OpBuilder &b, ArrayRef<Value> toks, Value) {
      bool squares = op.getNorm() && !sn.xs;
      SmallVector<Value> accs = streamSums(b, rows, col0, toks, first, squares);
      int64_t nt = toks.size();
      SmallVector<Value> scale(nt);
      for (int64_t t = 0; sn.xs && t < nt; ++t)
        scale[t] = stagedScale(b, loc, sn, toks[t]);
      for (int64_t t = 0; squares && t < nt; ++t)
        scale[t] = linearInverseRMS(b, loc, op, rowTotal(b, loc, accs[streams * nt + t]));
      for (int64_t p = 0; p < P; ++p)
        for (int64_t t = 0; t < nt; ++t) {
          Value sum = rowTotal(b, loc, accs[(p * nm) * nt + t]);
          Value up = nm == 2 ? rowTotal(b, loc, accs[(p * nm + 1) * nt + t]) : Value();
          Value store = p == 0 ? isLane0 : arith::AndIOp::create(b, loc, isLane0, valid[p]).getResult();
          storeRow(b, loc, op, sum, store, toks[t], outs[p], up, scale[t]);
        }
    });
  }

  /// G = 1: the first group (with the early loads), then the others.
  void wholeRows() {
    {
      auto ifOp = scf::IfOp::create(b, loc, mine, /*withElse=*/false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(ifOp.thenBlock());
      rowGroup(b, firstRows, firstOuts, firstValid, hasEarly);
    }
    if (R > W * P)
      scf::ForOp::create(
          b, loc, arith::AddIOp::create(b, loc, base, h.idx(W * P)), end, h.idx(W * P), ValueRange{},
          [&](OpBuilder &b, Location loc, Value first, ValueRange) {
            TileBuilder h{b, loc};
            SmallVector<Value> rows{first}, outs{first};
            SmallVector<Value> valid{arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, first, end)};
            for (int64_t p = 1; p < P; ++p) {
              Value r = arith::AddIOp::create(b, loc, first, h.idx(p * W));
              valid.push_back(arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, r, end));
              outs.push_back(r);
              rows.push_back(arith::SelectOp::create(b, loc, valid.back(), r, first));
            }
            rowGroup(b, rows, outs, valid, false);
            scf::YieldOp::create(b, loc);
          });
  }

  /// G parts per row: warp w < R x G takes row w mod R, part w / R. Its sums
  /// go to shared memory [parity][part][mem][row][token] (the parity of a
  /// runtime token alternates, so one barrier per token suffices).
  void splitRows() {
    NormScales scales = sn.xs ? NormScales{} : normScales(b, loc, op, lc.warp);
    if (scales)
      normPrepass(b, loc, op, scales, lc.lane);
    Value partials = workgroupBuffer(task, loc, {2 * G * nm * R * mCount}, b.getF32Type());
    auto slot = [&](OpBuilder &b, Value parity, Value p, int64_t m, Value r, int64_t t) -> Value {
      TileBuilder h{b, loc};
      Value i = arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, parity, h.idx(G)), p);
      i = arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, i, h.idx(nm)), h.idx(m));
      i = arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, i, h.idx(R)), r);
      return arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, i, h.idx(mCount)), h.idx(t));
    };
    forTokens(b, [&](OpBuilder &b, ArrayRef<Value> toks, Value parity) {
      int64_t nt = toks.size();
      {
        auto ifOp = scf::IfOp::create(b, loc, mine, /*withElse=*/false);
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(ifOp.thenBlock());
        SmallVector<Value> accs = streamSums(b, {row}, col0, toks, hasEarly);
        for (int64_t m = 0; m < nm; ++m)
          for (int64_t t = 0; t < nt; ++t) {
            Value sum = rowTotal(b, loc, accs[m * nt + t]);
            auto store = scf::IfOp::create(b, loc, isLane0, /*withElse=*/false);
            OpBuilder::InsertionGuard guard(b);
            b.setInsertionPointToStart(store.thenBlock());
            memref::StoreOp::create(b, loc, sum, partials, ValueRange{slot(b, parity, part, m, local, t)});
          }
      }
      gpu::BarrierOp::create(b, loc);
      TileBuilder h{b, loc};
      threadLoop(b, loc, h.idx(R * nt), [&](OpBuilder &b, Location loc, Value e) {
        TileBuilder h{b, loc};
        Value r = arith::RemUIOp::create(b, loc, e, h.idx(R));
        Value t = arith::DivUIOp::create(b, loc, e, h.idx(R));
        Value out = arith::AddIOp::create(b, loc, op.getRow0(), r);
        auto inRange = scf::IfOp::create(b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, out, end),
                                         /*withElse=*/false);
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(inRange.thenBlock());
        // Token t of this pass: static tokens are 0..M-1; a runtime token is
        // the loop's own (nt = 1).
        Value tok = staticM ? t : toks[0];
        SmallVector<Value> totals;
        for (int64_t m = 0; m < nm; ++m) {
          Value at0 = slot(b, parity, h.idx(0), m, r, 0);
          if (staticM)
            at0 = arith::AddIOp::create(b, loc, at0, t);
          Value sum = memref::LoadOp::create(b, loc, partials, ValueRange{at0});
          for (int64_t p = 1; p < G; ++p) {
            Value atP = arith::AddIOp::create(b, loc, at0, h.idx(p * nm * R * mCount));
            sum = arith::AddFOp::create(b, loc, sum, memref::LoadOp::create(b, loc, partials, ValueRange{atP}));
          }
          totals.push_back(sum);
        }
        storeRow(b, loc, op, totals[0], arith::ConstantIntOp::create(b, loc, b.getI1Type(), 1), tok, out,
                 nm == 2 ? totals[1] : Value(), sn.xs ? stagedScale(b, loc, sn, tok) : scales.get(b, loc, tok));
      });
    });
  }
};

} // namespace

void lowerLinearGPUSpread(LinearOp op, const SpreadShape &shape, int64_t threads, bool afterLinear) {
  auto task = op->getParentOfType<TaskOp>();

  SmallVector<Value> mems{op.getW()};
  if (Value wu = op.getGated())
    mems.push_back(wu);

  // Where the warp's rows and first column are known, and its first
  // trip's loads (the op itself when they cannot go earlier).
  bool early = afterLinear && llvm::all_of(mems, isReadOnly);
  Operation *at = early ? afterWaitPoint(op, {op.getW(), op.getRow0(), op.getRows()}) : nullptr;
  if (at && op.getGated() && !moveAbove(task, at, op.getGated()))
    at = nullptr;
  OpBuilder b(at ? at : op.getOperation());
  SpreadLinearGPU l(op, shape, b, task, mems);
  l.setUp();
  if (at)
    l.loadEarly();
  l.hasEarly = at != nullptr;
  l.atOp(threads);

  // With `norm`: the inverse RMS of every token. The warps of a whole K
  // (G = 1) load all of x for each group of rows, and take its squares
  // with the sums (no pass of their own); split K first takes them in a
  // pass of each warp's own (normPrepass).
  if (shape.G == 1)
    l.wholeRows();
  else
    l.splitRows();
  op.erase();
}

} // namespace mlir::et::tile
