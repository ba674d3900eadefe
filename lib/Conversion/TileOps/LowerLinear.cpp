//===- LowerLinear.cpp - et.linear and et.prefetch --------------------------===//
//
// et.linear on the CPU (scalar loops) and the GPU: one warp per row
// (weights before the wait in registers or shared memory, or staged across
// tiles), short rows several per warp, and the spread layout; the L2 hints
// of et.prefetch and of the norm weights.
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

/// y[tok, row] = `out` (f32), the way every lowering of et.linear ends a
/// row: times the op's `scale`, added to y with `accumulate` (a relaxed f32
/// atomic add with `atomic`: tiles that share rows add into them at once,
/// ordered before the task's signal by its release fence), rounded to y's
/// element type.
static void writeRow(OpBuilder &b, Location loc, LinearOp op, Value out, Value tok, Value row) {
  if (Value s = op.getScale())
    out = arith::MulFOp::create(b, loc, out, s);
  if (op.getAtomic()) {
    memref::AtomicRMWOp::create(b, loc, arith::AtomicRMWKind::addf, out, op.getY(), ValueRange{tok, row});
    return;
  }
  if (op.getAccumulate())
    out = arith::AddFOp::create(b, loc, memref::LoadOp::create(b, loc, op.getY(), ValueRange{tok, row}), out);
  Type outType = op.getY().getType().getElementType();
  if (!outType.isF32())
    out = arith::TruncFOp::create(b, loc, outType, out);
  memref::StoreOp::create(b, loc, out, op.getY(), ValueRange{tok, row});
}

/// y[m, n] for the rows of this thread group, CPU: scalar loops over rows
/// strided by thread.
static void lowerLinearCPU(LinearOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  TileBuilder h{b, loc};
  Groups threads = h.groups(1);
  Value tid = threads.tid, nt = threads.threads;
  Value n = memref::DimOp::create(b, loc, op.getW(), 0);
  Value k = memref::DimOp::create(b, loc, op.getW(), 1);
  Value m = memref::DimOp::create(b, loc, op.getX(), 0);
  Value end = arith::MinSIOp::create(
      b, loc, arith::AddIOp::create(b, loc, op.getRow0(), op.getRows()), n);
  Value first = arith::AddIOp::create(b, loc, op.getRow0(), tid);
  Type f32 = b.getF32Type();
  // Row `row` of token `tok` (with `norm`, `scale` is the token's inverse RMS).
  auto rowOf = [&](OpBuilder &b, Location loc, Value row, Value tok, Value scale) {
    auto dot = [&](Value w) {
      return scf::ForOp::create(
                 b, loc, h.idx(0), k, h.idx(1), ValueRange{h.f32(0)},
                 [&](OpBuilder &b, Location loc, Value kk, ValueRange acc) {
                   Value xf = toF32(b, loc, memref::LoadOp::create(b, loc, op.getX(), ValueRange{tok, kk}));
                   if (Value g = op.getNorm())
                     xf = arith::ExtFOp::create(
                         b, loc, f32,
                         arith::TruncFOp::create(
                             b, loc, b.getBF16Type(),
                             arith::MulFOp::create(b, loc, xf,
                                                   toF32(b, loc, memref::LoadOp::create(b, loc, g, ValueRange{kk}))))
                             .getResult());
                   Value wf = toF32(b, loc, memref::LoadOp::create(b, loc, w, ValueRange{row, kk}));
                   Value p = arith::MulFOp::create(b, loc, xf, wf);
                   scf::YieldOp::create(b, loc, ValueRange{arith::AddFOp::create(b, loc, acc[0], p)});
                 })
          .getResult(0);
    };
    Value out = dot(op.getW());
    Value up = op.getGated() ? dot(op.getGated()) : Value();
    if (scale) {
      out = arith::MulFOp::create(b, loc, out, scale);
      if (up)
        up = arith::MulFOp::create(b, loc, up, scale);
    }
    writeRow(b, loc, op, up ? gatedActivation(b, loc, out, up) : out, tok, row);
  };
  auto rows = [&](OpBuilder &b, Location loc, Value tok, Value scale) {
    scf::ForOp::create(b, loc, first, end, nt, ValueRange{},
                       [&](OpBuilder &b, Location loc, Value row, ValueRange) {
                         rowOf(b, loc, row, tok, scale);
                         scf::YieldOp::create(b, loc);
                       });
  };
  if (op.getNorm()) {
    // Tokens outer: each token's inverse RMS once, then its rows.
    float eps = op.getEps()->convertToFloat();
    scf::ForOp::create(
        b, loc, h.idx(0), m, h.idx(1), ValueRange{}, [&](OpBuilder &b, Location loc, Value tok, ValueRange) {
          TileBuilder h{b, loc};
          auto squares = scf::ForOp::create(
              b, loc, h.idx(0), k, h.idx(1), ValueRange{h.f32(0)},
              [&](OpBuilder &b, Location loc, Value kk, ValueRange acc) {
                Value x = memref::LoadOp::create(b, loc, op.getX(), ValueRange{tok, kk});
                scf::YieldOp::create(b, loc, ValueRange{math::FmaOp::create(b, loc, x, x, acc[0]).getResult()});
              });
          rows(b, loc, tok, inverseRMS(b, loc, squares.getResult(0), k, eps));
          scf::YieldOp::create(b, loc);
        });
  } else {
    scf::ForOp::create(b, loc, first, end, nt, ValueRange{},
                       [&](OpBuilder &b, Location loc, Value row, ValueRange) {
                         scf::ForOp::create(b, loc, h.idx(0), m, h.idx(1), ValueRange{},
                                            [&](OpBuilder &b, Location loc, Value tok, ValueRange) {
                                              rowOf(b, loc, row, tok, Value());
                                              scf::YieldOp::create(b, loc);
                                            });
                         scf::YieldOp::create(b, loc);
                       });
  }
  op.erase();
}

/// The prefetch point of an et.linear at its task's top level that reads
/// weights no task writes: its weights and rows (row0, rows) are known
/// before the first wait.
static Operation *weightPrefetchPoint(LinearOp op, bool dryRun = false) {
  if (op->getParentOp() != op->getParentOfType<TaskOp>() || !isReadOnly(op.getW()))
    return nullptr;
  return prefetchPoint(op, {op.getW(), op.getRow0(), op.getRows()}, /*inIf=*/false, dryRun);
}

void prefetchWeightsL2(LinearOp op) {
  Operation *firstWait = weightPrefetchPoint(op);
  if (!firstWait)
    return;
  OpBuilder b(firstWait);
  prefetchRowsL2(b, op.getLoc(), op.getW(), op.getRow0(), op.getRows());
}

void prefetchNormL2(LinearOp op) {
  Value g = op.getNorm();
  if (!g || !isReadOnly(g))
    return;
  Operation *firstWait = prefetchPoint(op, {g}, /*inIf=*/true);
  if (!firstWait)
    return;
  OpBuilder b(firstWait);
  Location loc = op.getLoc();
  TileBuilder h{b, loc};
  auto go = scf::IfOp::create(
      b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, ThreadIdOp::create(b, loc, b.getIndexType()),
                                    h.idx(0)),
      /*withElse=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(go.thenBlock());
  Value bytes = arith::MulIOp::create(b, loc, memref::DimOp::create(b, loc, g, 0), h.idx(2));
  NVVM::CpAsyncBulkPrefetchOp::create(b, loc, elementPointer(b, loc, g, h.idx(0), 2, 1),
                                      arith::IndexCastOp::create(b, loc, b.getI32Type(), bytes), Value());
}

/// et.prefetch: thread 0 issues one bulk L2 prefetch of the rows on the
/// GPU; nothing on the CPU.
static void lowerPrefetch(PrefetchOp op, bool gpu) {
  if (gpu) {
    OpBuilder b(op);
    prefetchRowsL2(b, op.getLoc(), op.getW(), op.getRow0(), op.getRows());
  }
  op.erase();
}

LinearCommon linearCommon(OpBuilder &b, Location loc, LinearOp op) {
  TileBuilder h{b, loc};
  Groups warpsOf = h.groups(kWarp);
  return {op.getX().getType(), VectorType::get({kVector}, b.getBF16Type()),
          VectorType::get({kVector}, b.getF32Type()), warpsOf.lane, warpsOf.group, warpsOf.groups,
          memref::DimOp::create(b, loc, op.getW(), 0), warpsOf.tid};
}

Value rowTotal(OpBuilder &b, Location loc, Value acc) {
  return butterflySum(b, loc, vector::ReductionOp::create(b, loc, vector::CombiningKind::ADD, acc), kWarp);
}

Value loadChunk(OpBuilder &b, Location loc, Value mem, Value row, Value col) {
  auto load = vector::LoadOp::create(b, loc, VectorType::get({kVector}, b.getBF16Type()), mem,
                                     ValueRange{row, col});
  load.setAlignment(16);
  return load.getResult();
}

void storeRow(OpBuilder &b, Location loc, LinearOp op, Value sum, Value store, Value tok, Value row,
              Value up, Value scale) {
  auto ifOp = scf::IfOp::create(b, loc, store, /*withElse=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  if (scale) {
    sum = arith::MulFOp::create(b, loc, sum, scale);
    if (up)
      up = arith::MulFOp::create(b, loc, up, scale);
  }
  writeRow(b, loc, op, up ? gatedActivation(b, loc, sum, up) : sum, tok, row);
}

/// y[tok, row] from a warp's lane partial sums `acc`: both GPU lowerings of
/// et.linear end each row with it.
static void storeRowSum(OpBuilder &b, Location loc, LinearOp op, Value acc, Value store, Value tok, Value row) {
  storeRow(b, loc, op, rowTotal(b, loc, acc), store, tok, row);
}

Value linearInverseRMS(OpBuilder &b, Location loc, LinearOp op, Value sum) {
  return inverseRMS(b, loc, sum, memref::DimOp::create(b, loc, op.getW(), 1), op.getEps()->convertToFloat());
}

/// et.linear ... norm: 8 elements of token `tok`'s row of x (the f32
/// residual stream) from column `col`, times the norm weights, rounded to
/// bf16 as an activation would be; `raw` gets x's own values (for the sum
/// of squares).
static Value normedChunk(OpBuilder &b, Location loc, LinearOp op, Value tok, Value col, Value *raw) {
  VectorType vecF32 = VectorType::get({kVector}, b.getF32Type());
  auto x = vector::LoadOp::create(b, loc, vecF32, op.getX(), ValueRange{tok, col});
  x.setAlignment(16);
  auto g = vector::LoadOp::create(b, loc, VectorType::get({kVector}, b.getBF16Type()), op.getNorm(),
                                  ValueRange{col});
  g.setAlignment(16);
  if (raw)
    *raw = x.getResult();
  Value xg = arith::MulFOp::create(b, loc, x.getResult(), arith::ExtFOp::create(b, loc, vecF32, g.getResult()));
  return arith::TruncFOp::create(b, loc, VectorType::get({kVector}, b.getBF16Type()), xg);
}

Value loadX(OpBuilder &b, Location loc, LinearOp op, Value tok, Value col, Value *raw,
            Value staged) {
  VectorType vecF32 = VectorType::get({kVector}, b.getF32Type());
  VectorType vecBF16 = VectorType::get({kVector}, b.getBF16Type());
  if (staged) {
    // x * g staged in shared memory, [token][K] bf16 (stageNorm).
    Value k = arith::ConstantIndexOp::create(b, loc, op.getW().getType().getDimSize(1));
    auto x = vector::LoadOp::create(b, loc, vecBF16, staged,
                                    ValueRange{arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, tok, k),
                                                                     col)});
    x.setAlignment(16);
    return arith::ExtFOp::create(b, loc, vecF32, x.getResult());
  }
  if (!op.getNorm()) {
    Value x = arith::ExtFOp::create(b, loc, vecF32, loadChunk(b, loc, op.getX(), tok, col));
    if (raw)
      *raw = x;
    return x;
  }
  return arith::ExtFOp::create(b, loc, vecF32, normedChunk(b, loc, op, tok, col, raw));
}

/// Whether stageNorm applies to `op` at `threads` per worker.
static bool canStageNorm(LinearOp op, int64_t threads) {
  MemRefType xType = op.getX().getType();
  int64_t k = op.getW().getType().getDimSize(1);
  return op.getNorm() && op->getParentOfType<TaskOp>() && threads > 0 && threads % kWarp == 0 &&
         !xType.isDynamicDim(0) && !ShapedType::isDynamic(k) && k % kVector == 0 &&
         xType.getDimSize(0) * k * 2 <= kStagedNormBytes;
}

StagedNorm stageNorm(OpBuilder &b, Location loc, LinearOp op, int64_t threads) {
  if (!canStageNorm(op, threads))
    return {};
  auto task = op->getParentOfType<TaskOp>();
  const int64_t k = op.getW().getType().getDimSize(1), m = op.getX().getType().getDimSize(0), w = threads / kWarp;
  TileBuilder h{b, loc};
  VectorType vecF32 = VectorType::get({kVector}, b.getF32Type());
  Value xs = workgroupBuffer(task, loc, {m * k}, b.getBF16Type());
  Value parts = workgroupBuffer(task, loc, {kMaxWarps * m}, b.getF32Type());
  Groups g = h.groups(kWarp);
  Value isLane0 = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, g.lane, h.idx(0));
  Value zero = arith::ConstantOp::create(b, loc, vecF32, DenseElementsAttr::get(vecF32, APFloat(0.0f)));
  for (int64_t t = 0; t < m; ++t) {
    Value tok = h.idx(t);
    auto loop = scf::ForOp::create(
        b, loc, arith::MulIOp::create(b, loc, g.tid, h.idx(kVector)), h.idx(k),
        arith::MulIOp::create(b, loc, g.threads, h.idx(kVector)), ValueRange{zero},
        [&](OpBuilder &b, Location loc, Value col, ValueRange acc) {
          TileBuilder h{b, loc};
          Value raw;
          Value xg = normedChunk(b, loc, op, tok, col, &raw);
          auto store = vector::StoreOp::create(b, loc, xg, xs,
                                               ValueRange{arith::AddIOp::create(b, loc, h.idx(t * k), col)});
          store.setAlignment(16);
          scf::YieldOp::create(b, loc, ValueRange{vector::FMAOp::create(b, loc, raw, raw, acc[0]).getResult()});
        });
    Value sum = rowTotal(b, loc, loop.getResult(0));
    auto ifOp = scf::IfOp::create(b, loc, isLane0, /*withElse=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    memref::StoreOp::create(b, loc, sum, parts,
                            ValueRange{arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, g.group, h.idx(m)),
                                                             h.idx(t))});
  }
  gpu::BarrierOp::create(b, loc);
  StagedNorm out{xs, {}};
  for (int64_t t = 0; t < m; ++t) {
    Value sum = h.f32(0);
    for (int64_t i = 0; i < w; ++i)
      sum = arith::AddFOp::create(b, loc, sum, memref::LoadOp::create(b, loc, parts, ValueRange{h.idx(i * m + t)}));
    out.scale.push_back(linearInverseRMS(b, loc, op, sum));
  }
  return out;
}

Value stagedScale(OpBuilder &b, Location loc, const StagedNorm &sn, Value tok) {
  Value r = sn.scale.back();
  for (int64_t t = static_cast<int64_t>(sn.scale.size()) - 2; t >= 0; --t)
    r = arith::SelectOp::create(
        b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, tok, arith::ConstantIndexOp::create(b, loc, t)),
        sn.scale[t], r);
  return r;
}

NormScales normScales(OpBuilder &b, Location loc, LinearOp op, Value warp) {
  if (!op.getNorm())
    return {};
  auto task = op->getParentOfType<TaskOp>();
  return {workgroupBuffer(task, loc, {kMaxWarps * kLinearTokens}, b.getF32Type()), warp};
}

void normPrepass(OpBuilder &b, Location loc, LinearOp op, const NormScales &scales, Value lane) {
  TileBuilder h{b, loc};
  VectorType vecF32 = VectorType::get({kVector}, b.getF32Type());
  Value k = memref::DimOp::create(b, loc, op.getW(), 1);
  Value m = memref::DimOp::create(b, loc, op.getX(), 0);
  Value laneK = arith::MulIOp::create(b, loc, lane, h.idx(kVector));
  scf::ForOp::create(
      b, loc, h.idx(0), m, h.idx(1), ValueRange{}, [&](OpBuilder &b, Location loc, Value tok, ValueRange) {
        TileBuilder h{b, loc};
        Value zero = arith::ConstantOp::create(b, loc, vecF32, DenseElementsAttr::get(vecF32, APFloat(0.0f)));
        auto sum = scf::ForOp::create(
            b, loc, laneK, k, h.idx(kWarp * kVector), ValueRange{zero},
            [&](OpBuilder &b, Location loc, Value col, ValueRange acc) {
              auto x = vector::LoadOp::create(b, loc, vecF32, op.getX(), ValueRange{tok, col});
              x.setAlignment(16);
              scf::YieldOp::create(b, loc, ValueRange{vector::FMAOp::create(b, loc, x, x, acc[0]).getResult()});
            });
        scales.set(b, loc, tok, linearInverseRMS(b, loc, op, rowTotal(b, loc, sum.getResult(0))));
        scf::YieldOp::create(b, loc);
      });
}

namespace {

/// The rows of an et.linear that the worker may have staged in shared
/// memory (et.staged_rows), and how many of them are there.
struct StagedRows {
  Value view, count;
  /// A gated op's up rows (the same rows of its `gated` weights).
  Value upView;
};

} // namespace

/// The bytes of one staged row of `op` (both weights of a gated op), when
/// its rows can be staged: `op` is at its task's top level, reads weights
/// no task writes with rows contiguous and a static K, has a constant row
/// count, and its weights and rows can be known before the task's first
/// wait. 0 otherwise. A gated op stages the same rows of its gate and up
/// weights (two et.staged_rows, side by side), when both are laid out
/// alike.
static int64_t stagedRowBytes(LinearOp op) {
  auto task = op->getParentOfType<TaskOp>();
  if (!task || op->getParentOp() != task)
    return 0;
  MemRefType w = op.getW().getType();
  if (Value up = op.getGated())
    if (up.getType() != w)
      return 0;
  int64_t k = w.getDimSize(1);
  SmallVector<int64_t> strides;
  int64_t offset;
  if (ShapedType::isDynamic(k) || (k * 2) % 16 != 0 ||
      failed(w.getStridesAndOffset(strides, offset)) || strides[0] != k || strides[1] != 1)
    return 0;
  std::optional<int64_t> rows = getConstantIntValue(op.getRows());
  if (!rows || *rows < 1 || !weightPrefetchPoint(op, /*dryRun=*/true))
    return 0;
  return (op.getGated() ? 2 : 1) * k * 2;
}

/// The et.staged_rows of the plan's `rows` first rows of `op` at byte
/// `offset` of its task's staging region (the gated op's up rows after
/// them); its weights and rows move above the task's first wait.
static StagedRows stageRows(LinearOp op, int64_t offset, int64_t rows) {
  weightPrefetchPoint(op);
  int64_t k = op.getW().getType().getDimSize(1);
  OpBuilder b(op);
  auto workgroup = gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup);
  auto viewType = MemRefType::get({rows, k}, b.getBF16Type(), MemRefLayoutAttrInterface(), workgroup);
  auto staged = StagedRowsOp::create(b, op.getLoc(), viewType, b.getIndexType(), op.getW(),
                                     op.getRow0(), op.getRows(), b.getI64IntegerAttr(offset));
  StagedRows out{staged.getView(), staged.getCount(), Value()};
  if (Value up = op.getGated())
    out.upView = StagedRowsOp::create(b, op.getLoc(), viewType, b.getIndexType(), up, op.getRow0(), op.getRows(),
                                      b.getI64IntegerAttr(offset + rows * k * 2))
                     .getView();
  return out;
}

namespace {

/// lowerLinearGPU's steps and the values they share: the op's shapes and
/// indices (set up where the weights' prefetch goes out, or at the op),
/// the chunks of the first row loaded before the wait, the staged norm.
struct LinearRowsGPU {
  LinearOp op;
  OpBuilder &b;
  Location loc;
  TileBuilder h;
  int64_t unroll, slotThreads, pMax;
  TaskOp task;
  bool registerPrefetch, sharedPrefetch;
  StagedRows staged;

  MemRefType xType;
  VectorType vecBF16, vecF32;
  Value lane, warp, warps, n, tid, k, end, first, laneK;
  int64_t step = kWarp * kVector; // elements one warp covers per load
  Value big, kMain;
  bool staticM;
  int64_t mCount;
  // The prefetch of the first row's first `unroll` chunks (before the wait).
  SmallVector<Value> pre;
  Value preValid, preChunks, slots;
  StagedNorm sn;

  LinearRowsGPU(LinearOp op, OpBuilder &b, int64_t unroll, int64_t slotThreads, int64_t pMax, TaskOp task,
                bool registerPrefetch, bool sharedPrefetch, StagedRows staged)
      : op(op), b(b), loc(op.getLoc()), h{b, loc}, unroll(unroll), slotThreads(slotThreads), pMax(pMax),
        task(task), registerPrefetch(registerPrefetch), sharedPrefetch(sharedPrefetch), staged(staged) {}

  Value loadRaw(OpBuilder &b, Value mem, Value r, Value c) { return loadChunk(b, loc, mem, r, c); }
  Value loadVec(OpBuilder &b, Value mem, Value r, Value c) {
    return arith::ExtFOp::create(b, loc, vecF32, loadRaw(b, mem, r, c));
  }

  /// The rows of the worker's warps and the bounds of the unrolled loop.
  void setUp() {
    LinearCommon c = linearCommon(b, loc, op);
    xType = c.xType;
    vecBF16 = c.vecBF16, vecF32 = c.vecF32;
    lane = c.lane, warp = c.warp, warps = c.warps, n = c.n, tid = c.tid;
    k = memref::DimOp::create(b, loc, op.getW(), 1);
    end = arith::MinSIOp::create(
        b, loc, arith::AddIOp::create(b, loc, op.getRow0(), op.getRows()), n);
    first = arith::AddIOp::create(b, loc, op.getRow0(), warp);
    laneK = arith::MulIOp::create(b, loc, lane, h.idx(kVector));
    // The unrolled part: K rounded down to a multiple of step * unroll.
    big = h.idx(step * unroll);
    kMain = arith::MulIOp::create(
        b, loc, arith::DivUIOp::create(b, loc, k, big), big);

    // Tokens: unrolled accumulators when M is static, else one at a time.
    staticM = !xType.isDynamicDim(0);
    mCount = staticM ? xType.getDimSize(0) : 1;
  }

  /// `Shared`: P chunks of the warp's first row, thread-private slots
  /// j * threads + tid, copied with cp.async.
  void prefetchShared() {
    slots = workgroupBuffer(task, loc, {pMax * slotThreads * kVector}, b.getBF16Type());
    slots.getDefiningOp()->setAttr(EventTensorDialect::getDynamicSharedAttrName(), b.getUnitAttr());
    preChunks = arith::MinUIOp::create(b, loc, h.idx(pMax),
                                       arith::DivUIOp::create(b, loc, kMain, h.idx(step)));
    preValid = arith::AndIOp::create(
        b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, first, end),
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ugt, preChunks, h.idx(0)));
    auto ifOp = scf::IfOp::create(b, loc, preValid, /*withElse=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    auto meta = memref::ExtractStridedMetadataOp::create(b, loc, op.getW());
    Value rowStart = arith::AddIOp::create(
        b, loc, arith::MulIOp::create(b, loc, first, meta.getStrides()[0]), laneK);
    scf::ForOp::create(
        b, loc, h.idx(0), preChunks, h.idx(1), ValueRange{},
        [&](OpBuilder &b, Location loc, Value j, ValueRange) {
          TileBuilder h{b, loc};
          Value src = elementPointer(
              b, loc, op.getW(),
              arith::AddIOp::create(b, loc, rowStart, arith::MulIOp::create(b, loc, j, h.idx(step))),
              2, 1);
          Value slot = arith::AddIOp::create(
              b, loc, arith::MulIOp::create(b, loc, j, h.idx(slotThreads)), tid);
          Value dst = elementPointer(b, loc, slots,
                                     arith::MulIOp::create(b, loc, slot, h.idx(kVector)), 2, 3);
          copyAsync16(b, loc, dst, src);
          scf::YieldOp::create(b, loc);
        });
    NVVM::CpAsyncCommitGroupOp::create(b, loc);
  }

  /// `Registers`: the first `unroll` chunks of the warp's first row (zeros
  /// for a warp without rows); then back to the op.
  void prefetchRegisters() {
    preValid = arith::AndIOp::create(
        b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, first, end),
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sgt, kMain, h.idx(0)));
    auto ifOp = scf::IfOp::create(b, loc, SmallVector<Type>(unroll, vecBF16), preValid,
                                  /*withElseRegion=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(ifOp.thenBlock());
      SmallVector<Value> ws;
      for (int64_t u = 0; u < unroll; ++u)
        ws.push_back(loadRaw(b, op.getW(), first,
                             arith::AddIOp::create(b, loc, laneK, h.idx(u * step))));
      scf::YieldOp::create(b, loc, ws);
      b.setInsertionPointToStart(ifOp.elseBlock());
      Value zero = arith::ConstantOp::create(
          b, loc, vecBF16, DenseElementsAttr::get(vecBF16, APFloat::getZero(APFloat::BFloat())));
      scf::YieldOp::create(b, loc, SmallVector<Value>(unroll, zero));
    }
    pre.assign(ifOp.getResults().begin(), ifOp.getResults().end());
    b.setInsertionPoint(op);
  }

  /// One pass of rowSums: y's row `row` (token `tokBase` of a runtime M),
  /// weight row `wRow` of each of `mems`, and the accumulators: nm x
  /// mCount sums, then with `norm` nq squares, from `init`, with the main
  /// loop from column `mainStart`.
  struct RowPass {
    Value row, tokBase, wRow;
    ArrayRef<Value> mems;
    int64_t nm, nq;
    SmallVector<Value> init;
    Value mainStart;
  };

  /// Token i's x chunk at `col` times the weight chunks `wvs` (one per
  /// mem) into `next`, and its squares.
  void addX(OpBuilder &b, const RowPass &p, SmallVectorImpl<Value> &next, int64_t i, ArrayRef<Value> wvs,
            Value col) {
    Value raw;
    Value xv = loadX(b, loc, op, staticM ? h.idx(i) : p.tokBase, col, &raw, sn.xs);
    for (auto [m, wv] : llvm::enumerate(wvs))
      next[m * mCount + i] = vector::FMAOp::create(b, loc, wv, xv, next[m * mCount + i]);
    if (p.nq)
      next[p.nm * mCount + i] = vector::FMAOp::create(b, loc, raw, raw, next[p.nm * mCount + i]);
  }

  /// The first row starts from the chunks loaded before the wait: `body`
  /// adds them to the accumulators and returns the next column.
  void firstRowFrom(RowPass &p, function_ref<Value(SmallVector<Value> &)> body) {
    Value usePre = arith::AndIOp::create(
        b, loc, preValid, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, p.row, first));
    SmallVector<Type> types(p.init.size(), vecF32);
    types.push_back(b.getIndexType());
    auto ifOp = scf::IfOp::create(b, loc, types, usePre, /*withElseRegion=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(ifOp.thenBlock());
      SmallVector<Value> accs(p.init);
      Value next = body(accs);
      accs.push_back(next);
      scf::YieldOp::create(b, loc, accs);
      b.setInsertionPointToStart(ifOp.elseBlock());
      SmallVector<Value> plain(p.init);
      plain.push_back(laneK);
      scf::YieldOp::create(b, loc, plain);
    }
    p.init.assign(ifOp.getResults().begin(), ifOp.getResults().begin() + p.init.size());
    p.mainStart = ifOp.getResults().back();
  }

  /// The first row's chunks from the thread's shared-memory slots.
  Value firstRowShared(const RowPass &p, SmallVector<Value> &accs) {
    NVVM::CpAsyncWaitGroupOp::create(b, loc, 0);
    auto loop = scf::ForOp::create(
        b, loc, h.idx(0), preChunks, h.idx(unroll), p.init,
        [&](OpBuilder &b, Location loc, Value j0, ValueRange sums) {
          TileBuilder h{b, loc};
          SmallVector<Value> ws, cols;
          for (int64_t u = 0; u < unroll; ++u) {
            Value j = arith::AddIOp::create(b, loc, j0, h.idx(u));
            cols.push_back(arith::AddIOp::create(
                b, loc, laneK, arith::MulIOp::create(b, loc, j, h.idx(step))));
            Value slot = arith::AddIOp::create(
                b, loc, arith::MulIOp::create(b, loc, j, h.idx(slotThreads)), tid);
            auto load = vector::LoadOp::create(
                b, loc, vecBF16, slots,
                ValueRange{arith::MulIOp::create(b, loc, slot, h.idx(kVector))});
            load.setAlignment(16);
            ws.push_back(arith::ExtFOp::create(b, loc, vecF32, load.getResult()));
          }
          SmallVector<Value> next(sums.begin(), sums.end());
          for (int64_t u = 0; u < unroll; ++u)
            for (int64_t i = 0; i < mCount; ++i)
              addX(b, p, next, i, {ws[u]}, cols[u]);
          scf::YieldOp::create(b, loc, next);
        });
    accs.assign(loop.getResults().begin(), loop.getResults().end());
    return arith::AddIOp::create(b, loc, laneK, arith::MulIOp::create(b, loc, preChunks, h.idx(step)));
  }

  /// The first row's chunks from the registers loaded before the wait.
  Value firstRowRegisters(const RowPass &p, SmallVector<Value> &accs) {
    for (int64_t u = 0; u < unroll; ++u) {
      Value col = arith::AddIOp::create(b, loc, laneK, h.idx(u * step));
      Value wv = arith::ExtFOp::create(b, loc, vecF32, pre[u]);
      for (int64_t i = 0; i < mCount; ++i)
        addX(b, p, accs, i, {wv}, col);
    }
    return arith::AddIOp::create(b, loc, laneK, big);
  }

  /// Loops of `u` independent 16-byte loads of w per lane, then the FMAs
  /// with every token: u = `unroll` up to kMain, then halved while whole
  /// groups of u chunks remain (so a K below unroll x 256 still gets
  /// loads in flight).
  scf::ForOp unrolledLoop(const RowPass &p, int64_t u, Value from, Value to, Value stepU, ValueRange accs0) {
    return scf::ForOp::create(
        b, loc, from, to, stepU, accs0,
        [&](OpBuilder &b, Location loc, Value k0, ValueRange accs) {
          SmallVector<Value> ws, cols;
          for (int64_t j = 0; j < u; ++j) {
            Value col = arith::AddIOp::create(b, loc, k0, h.idx(j * step));
            cols.push_back(col);
            for (Value mem : p.mems)
              ws.push_back(loadVec(b, mem, p.wRow, col));
          }
          SmallVector<Value> next(accs.begin(), accs.end());
          for (int64_t j = 0; j < u; ++j)
            for (int64_t i = 0; i < mCount; ++i)
              addX(b, p, next, i, ArrayRef<Value>(ws).slice(j * p.nm, p.nm), cols[j]);
          scf::YieldOp::create(b, loc, next);
        });
  }

  /// The rest of the row from `mainStart`: the main loop (`top` chunks per
  /// trip), the tail loops halving from there, the remainder.
  SmallVector<Value> restOfRow(const RowPass &p, int64_t top) {
    // The main loop's chunks per trip; the tail loops halve from there.
    Value bigTop = top == unroll ? big : h.idx(step * top);
    Value kTop = top == unroll ? kMain
                               : arith::MulIOp::create(b, loc, arith::DivUIOp::create(b, loc, k, bigTop), bigTop)
                                     .getResult();
    auto mainLoop = unrolledLoop(p, top, p.mainStart, kTop, bigTop, p.init);
    SmallVector<Value> accs(mainLoop.getResults());
    Value done = kTop; // columns covered so far (a multiple of step)
    for (int64_t u = top / 2; u >= 2; u /= 2) {
      Value bigU = h.idx(step * u);
      Value upTo = arith::AddIOp::create(
          b, loc, done,
          arith::MulIOp::create(
              b, loc, arith::DivUIOp::create(b, loc, arith::SubIOp::create(b, loc, k, done), bigU), bigU));
      auto loop = unrolledLoop(p, u, arith::AddIOp::create(b, loc, done, laneK), upTo, bigU, accs);
      accs.assign(loop.getResults().begin(), loop.getResults().end());
      done = upTo;
    }
    // Remainder: one load per lane per step.
    Value restStart = arith::AddIOp::create(b, loc, done, laneK);
    auto restLoop = scf::ForOp::create(
        b, loc, restStart, k, h.idx(step), accs,
        [&](OpBuilder &b, Location loc, Value col, ValueRange accs) {
          SmallVector<Value> wvs;
          for (Value mem : p.mems)
            wvs.push_back(loadVec(b, mem, p.wRow, col));
          SmallVector<Value> next(accs.begin(), accs.end());
          for (int64_t i = 0; i < mCount; ++i)
            addX(b, p, next, i, wvs, col);
          scf::YieldOp::create(b, loc, next);
        });
    return SmallVector<Value>(restLoop.getResults());
  }

  /// The lanes' partial sums of the rows of `mems` (`wMem`, or a gated
  /// op's two, streamed together: each x chunk loaded once for both, and
  /// `top` chunks per lane and trip of each), mem-major, one per token
  /// each. Only a lone `wMem` starts from chunks loaded before the wait.
  SmallVector<Value> rowSums(Value row, Value tokBase, Value wRow, ArrayRef<Value> mems, int64_t top) {
    RowPass p{row, tokBase, wRow, mems, static_cast<int64_t>(mems.size()), 0, {}, Value()};
    // With `norm`, x's squares too (one accumulator per token after the
    // sums): the row's lanes load all of x, so each row takes its own
    // inverse RMS, with no pass of its own.
    p.nq = op.getNorm() && !sn.xs ? mCount : 0;
    Value zero = arith::ConstantOp::create(
        b, loc, vecF32, DenseElementsAttr::get(vecF32, APFloat(0.0f)));
    p.init.assign(mCount * p.nm + p.nq, zero);
    p.mainStart = laneK;
    if (sharedPrefetch)
      firstRowFrom(p, [&](SmallVector<Value> &accs) { return firstRowShared(p, accs); });
    if (registerPrefetch)
      firstRowFrom(p, [&](SmallVector<Value> &accs) { return firstRowRegisters(p, accs); });
    return restOfRow(p, top);
  }

  /// `row` of y from row `wRow` of the weights in `wMem` (w, or the staged
  /// view; a gated op's up row from the same row of `upMem`: its `gated`
  /// weights, or their staged view).
  void rowBody(Value row, Value tokBase, Value wMem, Value wRow, Value upMem) {
    // A gated op streams its gate and up rows together, half the chunks of
    // each per trip (the same weight loads in flight), each x chunk loaded
    // once for both.
    SmallVector<Value> sums, ups(mCount), scale(mCount);
    // Token i's inverse RMS from the squares after the sums (norm).
    auto scales = [&](ArrayRef<Value> res, int64_t nm) {
      if (!op.getNorm())
        return;
      if (sn.xs) {
        scale.assign(sn.scale.begin(), sn.scale.end());
        return;
      }
      for (int64_t i = 0; i < mCount; ++i)
        scale[i] = linearInverseRMS(b, loc, op, rowTotal(b, loc, res[nm * mCount + i]));
    };
    if (Value wu = upMem) {
      // As many chunks per trip over both rows as the plain op's longest
      // trip over one row (a K under unroll x 256 has shorter ones), so the
      // gated loop holds no more loads in registers than a plain one.
      int64_t top = unroll;
      int64_t kStatic = op.getW().getType().getDimSize(1);
      if (!ShapedType::isDynamic(kStatic))
        while (top > 1 && top * step > kStatic)
          top /= 2;
      SmallVector<Value> both = rowSums(row, tokBase, wRow, {wMem, wu}, std::max<int64_t>(1, top / 2));
      for (int64_t i = 0; i < mCount; ++i) {
        sums.push_back(rowTotal(b, loc, both[i]));
        ups[i] = rowTotal(b, loc, both[mCount + i]);
      }
      scales(both, 2);
    } else {
      SmallVector<Value> one = rowSums(row, tokBase, wRow, {wMem}, unroll);
      for (int64_t i = 0; i < mCount; ++i)
        sums.push_back(rowTotal(b, loc, one[i]));
      scales(one, 1);
    }
    Value isLane0 =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, lane, h.idx(0));
    for (int64_t i = 0; i < mCount; ++i) {
      Value tok = staticM ? h.idx(i) : tokBase;
      storeRow(b, loc, op, sums[i], isLane0, tok, row, ups[i], scale[i]);
    }
  }

  /// The warps' loop over the rows, each from the staged view or from w.
  void rowLoop() {
    scf::ForOp::create(
        b, loc, first, end, warps, ValueRange{},
        [&](OpBuilder &b, Location loc, Value row, ValueRange) {
          auto rowFrom = [&](OpBuilder &b, Value wMem, Value wRow, Value upMem) {
            if (staticM) {
              rowBody(row, Value(), wMem, wRow, upMem);
            } else {
              Value m = memref::DimOp::create(b, loc, op.getX(), 0);
              scf::ForOp::create(
                  b, loc, h.idx(0), m, h.idx(1), ValueRange{},
                  [&](OpBuilder &b, Location loc, Value t, ValueRange) {
                    rowBody(row, t, wMem, wRow, upMem);
                    scf::YieldOp::create(b, loc);
                  });
            }
          };
          if (staged.view) {
            // Rows below the staged count from shared memory (one branch per
            // warp: a warp's lanes share the row).
            Value local = arith::SubIOp::create(b, loc, row, op.getRow0());
            Value inStage = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, local, staged.count);
            auto ifOp = scf::IfOp::create(b, loc, inStage, /*withElse=*/true);
            OpBuilder::InsertionGuard guard(b);
            b.setInsertionPointToStart(ifOp.thenBlock());
            rowFrom(b, staged.view, local, staged.upView);
            b.setInsertionPointToStart(ifOp.elseBlock());
            rowFrom(b, op.getW(), row, op.getGated());
          } else {
            rowFrom(b, op.getW(), row, op.getGated());
          }
          scf::YieldOp::create(b, loc);
        });
  }
};

} // namespace

/// GPU: one warp per row; each lane accumulates vector<8xf32> partial sums
/// of 16-byte chunks (`unroll` loads in flight), then the warp sums lanes
/// with a shuffle butterfly and lane 0 stores. With `norm`, each row also
/// sums the squares of the x chunks it loads (all of x: a row's lanes
/// cover K) and scales its sums by the token's inverse RMS.
///
/// Weights before the task's first wait (weightPrefetchPoint), so those
/// loads are in flight while the worker waits:
/// - `Registers`: each warp loads the first `unroll` chunks of its first
///   row into registers;
/// - `Shared`: each thread copies the first P chunks of its first row
///   into its own 16-byte slots of a dynamic shared-memory buffer with
///   `cp.async` (P = `sharedBytes` / (16 x threads), a multiple of
///   `unroll`, at most the row), and reads them back after the wait. A
///   thread only reads what it copied itself, so `cp.async.wait_group`
///   is the only synchronization. The plan gives the buffer to one linear
///   op of a task, where no other op holds it (planLinearOps).
///
/// With `staged` (from stageRows), a row below the staged count reads its
/// weights from the staged view instead, and no other prefetch applies.
static void lowerLinearGPU(LinearOp op, int64_t unroll, WeightPrefetch mode, int64_t sharedBytes = 0,
                    int64_t threads = 0, StagedRows staged = {}) {
  // A gated op streams both rows from memory (no weights before the wait,
  // no staged rows).
  if (staged.view || op.getGated())
    mode = WeightPrefetch::None;
  // With a staged norm (stageNorm), the first row's first chunks go out
  // into registers at the op, ahead of the norm's pass over x.
  bool normAhead = canStageNorm(op, threads) && mode == WeightPrefetch::None && !staged.view &&
                   !op.getGated() && isReadOnly(op.getW());
  if (normAhead)
    mode = WeightPrefetch::Registers;
  int64_t slotThreads = threads > 0 ? threads : 1024;
  int64_t pMax = sharedBytes / (slotThreads * 16);
  pMax -= pMax % unroll;
  auto task = op->getParentOfType<TaskOp>();
  if (mode == WeightPrefetch::Shared && (pMax < unroll || !task))
    mode = WeightPrefetch::None;
  Operation *prefetchAt = normAhead                    ? op.getOperation()
                          : mode != WeightPrefetch::None ? weightPrefetchPoint(op)
                                                         : nullptr;
  bool registerPrefetch = prefetchAt && mode == WeightPrefetch::Registers;
  bool sharedPrefetch = prefetchAt && mode == WeightPrefetch::Shared;
  OpBuilder b(prefetchAt ? prefetchAt : op.getOperation());
  LinearRowsGPU l(op, b, unroll, slotThreads, pMax, task, registerPrefetch, sharedPrefetch, staged);
  l.setUp();
  if (sharedPrefetch)
    l.prefetchShared();
  if (sharedPrefetch)
    b.setInsertionPoint(op);
  if (registerPrefetch)
    l.prefetchRegisters();

  l.sn = stageNorm(b, l.loc, op, threads);
  l.rowLoop();
  // Every copy is complete before the tile ends (a thread whose rows had
  // no token to compute never waited), so the next tile may reuse the slots.
  if (sharedPrefetch)
    NVVM::CpAsyncWaitGroupOp::create(b, l.loc, 0);
  op.erase();
}

/// GPU: an et.linear with short rows (a static K of at most 256 that is a
/// multiple of 8) and a constant row count R. One warp per row would leave
/// lanes idle and take the rows one round trip at a time; here a row's c =
/// K / 8 16-byte chunks go to Lr consecutive lanes (c rounded up to a power
/// of two; lanes past c load their row's last chunk again and add nothing),
/// and a thread's rows are row0 + tid / Lr + i x (threads / Lr). Its n =
/// ceil(R x Lr / threads) loads go out together, in passes of at most
/// kShortChunks: with one pass and `prefetch`, before the task's first wait
/// where the weights and rows are known there (weightPrefetchPoint). Then,
/// per token, each thread loads its one x chunk and multiplies, the Lr lanes
/// of a row sum with a butterfly, and the first of them stores. Threads past
/// the last row load the last row again and store nothing. `shortRows`
/// says where this applies (a gated op or one with `norm` takes the
/// one-row-per-warp layout).
static bool shortRows(LinearOp op, int64_t threads) {
  int64_t k = op.getW().getType().getDimSize(1);
  std::optional<int64_t> rowsConst = getConstantIntValue(op.getRows());
  return !op.getGated() && !op.getNorm() && threads > 0 && threads % kWarp == 0 && !ShapedType::isDynamic(k) &&
         k <= kWarp * kVector && k % kVector == 0 && rowsConst && *rowsConst >= 1;
}

static void lowerLinearGPUShort(LinearOp op, int64_t threads, bool prefetch) {
  constexpr int64_t kShortChunks = 16;
  int64_t k = op.getW().getType().getDimSize(1);
  std::optional<int64_t> rowsConst = getConstantIntValue(op.getRows());
  const int64_t c = k / kVector, lr = static_cast<int64_t>(llvm::PowerOf2Ceil(c)), R = *rowsConst;
  const int64_t n = llvm::divideCeil(R * lr, threads);
  const int64_t perPass = std::min(n, kShortChunks), passes = llvm::divideCeil(n, perPass);
  const int64_t stride = threads / lr; // rows between a thread's rows
  Operation *at = prefetch && passes == 1 ? weightPrefetchPoint(op) : nullptr;
  OpBuilder b(at ? at : op.getOperation());
  Location loc = op.getLoc();
  TileBuilder h{b, loc};
  Groups g = h.groups(lr);
  VectorType vecF32 = VectorType::get({kVector}, b.getF32Type());
  Value rowsN = memref::DimOp::create(b, loc, op.getW(), 0);
  Value end = arith::MinSIOp::create(b, loc, arith::AddIOp::create(b, loc, op.getRow0(), op.getRows()), rowsN);
  Value lastRow = arith::SubIOp::create(b, loc, rowsN, h.idx(1));
  Value live = c == lr ? Value() : arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, g.lane, h.idx(c));
  Value col = arith::MulIOp::create(b, loc, arith::MinUIOp::create(b, loc, g.lane, h.idx(c - 1)), h.idx(kVector));
  Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, g.lane, h.idx(0));
  // The rows and weight chunks of slots [base, base + perPass).
  auto load = [&](OpBuilder &b, Value base, SmallVector<Value> &rows, SmallVector<Value> &ws) {
    TileBuilder h{b, loc};
    Value firstRow = arith::AddIOp::create(
        b, loc, op.getRow0(), arith::AddIOp::create(b, loc, g.group, arith::MulIOp::create(b, loc, base,
                                                                                           h.idx(stride))));
    for (int64_t i = 0; i < perPass; ++i) {
      Value row = arith::AddIOp::create(b, loc, firstRow, h.idx(i * stride));
      rows.push_back(row);
      ws.push_back(loadChunk(b, loc, op.getW(), arith::MinUIOp::create(b, loc, row, lastRow), col));
    }
  };
  auto compute = [&](OpBuilder &b, ArrayRef<Value> rows, ArrayRef<Value> ws) {
    TileBuilder h{b, loc};
    auto token = [&](OpBuilder &b, Value tok) {
      Value xv = arith::ExtFOp::create(b, loc, vecF32, loadChunk(b, loc, op.getX(), tok, col));
      for (auto [row, w] : llvm::zip(rows, ws)) {
        Value prod = arith::MulFOp::create(b, loc, arith::ExtFOp::create(b, loc, vecF32, w), xv);
        Value part = vector::ReductionOp::create(b, loc, vector::CombiningKind::ADD, prod);
        if (live)
          part = arith::SelectOp::create(b, loc, live, part, h.f32(0));
        Value sum = butterflySum(b, loc, part, lr);
        Value store = arith::AndIOp::create(
            b, loc, first, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, row, end));
        storeRow(b, loc, op, sum, store, tok, row);
      }
    };
    MemRefType xType = op.getX().getType();
    if (!xType.isDynamicDim(0)) {
      for (int64_t m = 0; m < xType.getDimSize(0); ++m)
        token(b, h.idx(m));
      return;
    }
    scf::ForOp::create(b, loc, h.idx(0), memref::DimOp::create(b, loc, op.getX(), 0), h.idx(1), ValueRange{},
                       [&](OpBuilder &b, Location loc, Value tok, ValueRange) {
                         token(b, tok);
                         scf::YieldOp::create(b, loc);
                       });
  };
  if (passes == 1) {
    SmallVector<Value> rows, ws;
    load(b, h.idx(0), rows, ws);
    b.setInsertionPoint(op);
    compute(b, rows, ws);
  } else {
    scf::ForOp::create(b, loc, h.idx(0), h.idx(passes * perPass), h.idx(perPass), ValueRange{},
                       [&](OpBuilder &b, Location loc, Value base, ValueRange) {
                         SmallVector<Value> rows, ws;
                         load(b, base, rows, ws);
                         compute(b, rows, ws);
                         scf::YieldOp::create(b, loc);
                       });
  }
  op.erase();
}

bool inNamedTask(Operation *op, ArrayRef<std::string> names) {
  if (names.empty())
    return true;
  auto task = op->getParentOfType<TaskOp>();
  return task && llvm::is_contained(names, task.getSymName().str());
}

/// Bytes of dynamic shared memory the shared weight prefetch of `op` takes
/// if the plan lets it (lowerLinearGPU: P chunks of 16 bytes per thread).
static int64_t sharedPrefetchBytes(LinearOp op, const TileLoweringOptions &options) {
  int64_t slotThreads = options.threads > 0 ? options.threads : 1024;
  int64_t pMax = options.prefetchBytes / (slotThreads * 16);
  pMax -= pMax % options.unroll;
  if (op.getGated() || pMax < options.unroll)
    return 0;
  return pMax * slotThreads * 16;
}

LogicalResult planLinearOps(Operation *root, const TileLoweringOptions &options, int64_t dynamicShared) {
  MLIRContext *ctx = root->getContext();
  StringRef planName = EventTensorDialect::getLinearPlanAttrName();
  // Linear ops after another one in the same block since its last wait:
  // the spread layout starts their loads early, during the ones before.
  // Each op's run, and whether it is not the run's first.
  llvm::DenseMap<Operation *, std::pair<int64_t, bool>> runOf;
  int64_t runs = 0;
  root->walk([&](Block *block) {
    bool seen = false;
    for (Operation &op : *block) {
      if (isa<EventWaitOp>(op)) {
        seen = false;
      } else if (isa<LinearOp>(op)) {
        if (!seen)
          ++runs;
        runOf[&op] = {runs, seen};
        seen = true;
      }
    }
  });
  auto str = [&](StringRef v) { return StringAttr::get(ctx, v); };
  // Plans every op without one, staging up to `stageBytes` per task; the
  // largest region a task takes (the worker lowering's regions), and the
  // dynamic shared memory the shared weight prefetch may take.
  SmallVector<LinearOp> planned;
  auto prefetchName = [](WeightPrefetch w) -> StringRef {
    return w == WeightPrefetch::Registers ? "registers" : w == WeightPrefetch::Shared ? "shared" : "none";
  };
  auto plan = [&](int64_t stageBytes, int64_t &region, int64_t &prefetchShared) {
    // Staged bytes taken per task, in the order of its ops; runs with a
    // staged op, whose later ops issue no early loads (their rows come from
    // shared memory, and early loads would only hold registers through
    // them).
    llvm::DenseMap<Operation *, int64_t> stageUsed;
    llvm::DenseSet<int64_t> stagedRuns;
    region = prefetchShared = 0;
    // The tasks whose dynamic shared memory an op's shared weight prefetch
    // takes (the first such op of a task whose memory no other op holds).
    llvm::DenseSet<Operation *> prefetching;
    for (LinearOp op : planned) {
      SmallVector<NamedAttribute> plan;
      WeightPrefetch weights = inNamedTask(op, options.prefetchTasks) ? options.weights : WeightPrefetch::None;
      // Short rows (K of at most 256) take their own layout, their weights
      // before the wait unless the prefetch is off.
      if (shortRows(op, options.threads)) {
        plan.emplace_back(str("prefetch"), str(prefetchName(weights)));
        plan.emplace_back(str("layout"), str("short"));
        op->setAttr(planName, DictionaryAttr::get(ctx, plan));
        continue;
      }
      bool staged = false;
      if (int64_t rowBytes = stageBytes > 0 && inNamedTask(op, options.stageTasks) ? stagedRowBytes(op) : 0) {
        auto task = op->getParentOfType<TaskOp>();
        int64_t used = stageUsed.lookup(task);
        int64_t fit = std::min(*getConstantIntValue(op.getRows()), (stageBytes - used) / rowBytes);
        if (fit >= 1) {
          staged = true;
          plan.emplace_back(str("stage"), DenseI64ArrayAttr::get(ctx, {used, fit}));
          stageUsed[task] = used + fit * rowBytes;
          region = std::max<int64_t>(region, llvm::alignTo(stageUsed[task], 128));
        }
      }
      auto run = runOf.find(op);
      bool inRun = run != runOf.end();
      if (staged && inRun)
        stagedRuns.insert(run->second.first);
      // The spread layout takes no weights before the wait.
      if (options.spread && !staged && weights == WeightPrefetch::None &&
          spreadShape(op, options.unroll, options.threads)) {
        plan.emplace_back(str("layout"), str("spread"));
        if (inRun && run->second.second && !stagedRuns.contains(run->second.first))
          plan.emplace_back(str("early_loads"), UnitAttr::get(ctx));
      } else {
        plan.emplace_back(str("layout"), str("rows"));
        // The shared prefetch needs the task's dynamic shared memory, its
        // slots and its weights before the wait; where any is missing the
        // op prefetches nothing.
        if (weights == WeightPrefetch::Shared) {
          auto task = op->getParentOfType<TaskOp>();
          int64_t bytes = sharedPrefetchBytes(op, options);
          if (!staged && bytes > 0 && !dynamicSharedHeld(task) && !prefetching.contains(task) &&
              weightPrefetchPoint(op, /*dryRun=*/true)) {
            prefetching.insert(task);
            prefetchShared = std::max(prefetchShared, bytes);
          } else {
            weights = WeightPrefetch::None;
          }
        }
      }
      plan.emplace_back(str("prefetch"), str(prefetchName(weights)));
      op->setAttr(planName, DictionaryAttr::get(ctx, plan));
    }
  };
  root->walk([&](LinearOp op) {
    if (!op->hasAttr(planName))
      planned.push_back(op);
  });
  int64_t region, prefetchShared;
  plan(options.stageBytes, region, prefetchShared);
  // The worker lowering puts two staging regions after the largest dynamic
  // shared buffer: where they do not fit, each task stages what does (whole
  // KiB), or nothing below kMinStageBytes.
  int64_t start = llvm::alignTo(std::max(dynamicShared, prefetchShared), 128);
  if (region && start + 2 * region > kMaxDynamicShared) {
    int64_t fit = (kMaxDynamicShared - start) / 2 / 1024 * 1024;
    plan(fit >= kMinStageBytes ? fit : 0, region, prefetchShared);
  }
  // Every op whose plan (this one's, or one from the input) prefetches into
  // shared memory takes its task's dynamic shared memory, one op per task
  // (the prefetch slots of two would overlap).
  llvm::DenseSet<Operation *> sharedPrefetchTasks;
  WalkResult result = root->walk([&](LinearOp op) {
    auto plan = op->getAttrOfType<DictionaryAttr>(planName);
    if (!plan || plan.getAs<StringAttr>("prefetch").getValue() != "shared" ||
        plan.getAs<StringAttr>("layout").getValue() != "rows" || plan.contains("stage"))
      return WalkResult::advance();
    StringRef what = "et.linear_plan's shared prefetch ";
    auto task = op->getParentOfType<TaskOp>();
    if (!sharedPrefetchTasks.insert(task).second) {
      op.emitOpError() << what << "needs its task's dynamic shared memory, which another et.linear's "
                       << "shared prefetch takes";
      return WalkResult::interrupt();
    }
    return failed(takeDynamicShared(op, what, /*shareable=*/true)) ? WalkResult::interrupt() : WalkResult::advance();
  });
  return failure(result.wasInterrupted());
}

namespace {

/// et.prefetch: one bulk L2 prefetch on the GPU, nothing on the host.
struct PrefetchLowering : public TileOpLowering<PrefetchOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult matchAndRewrite(PrefetchOp op, PatternRewriter &) const override {
    lowerPrefetch(op, options.gpu);
    return success();
  }
};

/// et.linear: scalar loops on the host; on the GPU what its plan
/// (et.linear_plan, planLinearOps) says.
struct LinearLowering : public TileOpLowering<LinearOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult matchAndRewrite(LinearOp op, PatternRewriter &) const override {
    if (!options.gpu) {
      lowerLinearCPU(op);
      return success();
    }
    // The pass plans every et.linear before this pattern runs.
    auto plan = op->getAttrOfType<DictionaryAttr>(EventTensorDialect::getLinearPlanAttrName());
    assert(plan && "an et.linear without a plan");
    StringRef layout = plan.getAs<StringAttr>("layout").getValue();
    StringRef prefetch = plan.getAs<StringAttr>("prefetch").getValue();
    WeightPrefetch weights = prefetch == "registers" ? WeightPrefetch::Registers
                             : prefetch == "shared"  ? WeightPrefetch::Shared
                                                     : WeightPrefetch::None;
    if (layout == "short") {
      if (!shortRows(op, options.threads))
        return op.emitOpError("et.linear_plan's short layout does not fit this op or worker");
      lowerLinearGPUShort(op, options.threads, weights != WeightPrefetch::None);
      return success();
    }
    if (layout == "spread") {
      std::optional<SpreadShape> shape = spreadShape(op, options.unroll, options.threads);
      if (!shape)
        return op.emitOpError("et.linear_plan's spread layout does not fit this op or worker");
      lowerLinearGPUSpread(op, *shape, options.threads, plan.contains("early_loads"));
      return success();
    }
    StagedRows staged;
    if (auto stage = plan.getAs<DenseI64ArrayAttr>("stage")) {
      if (!stagedRowBytes(op) || stage[1] > *getConstantIntValue(op.getRows()))
        return op.emitOpError("et.linear_plan's stage does not fit this op");
      staged = stageRows(op, stage[0], stage[1]);
    }
    assert((weights != WeightPrefetch::Shared || staged.view || holdsDynamicShared(op)) &&
           "the plan gave the op its task's dynamic shared memory");
    lowerLinearGPU(op, options.unroll, weights, options.prefetchBytes, options.threads, staged);
    return success();
  }
};

} // namespace

void populateLinearLoweringPatterns(RewritePatternSet &patterns, const TileLoweringOptions &options) {
  patterns.add<PrefetchLowering>(patterns.getContext(), options);
  patterns.add<LinearLowering>(patterns.getContext(), options);
}
} // namespace mlir::et::tile
