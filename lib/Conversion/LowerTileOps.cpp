//===- LowerTileOps.cpp - Tile compute ops to loops -----------------------===//
//
// Implements et-lower-tile-ops: rewrites et.linear (and the other tile
// compute ops) into loops over the worker's threads, for the GPU (warps,
// vector loads, shuffles) or the CPU (scalar loops).
//
//===----------------------------------------------------------------------===//

#include "EventTensor/Conversion/Passes.h"
#include "TileLowering.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Builders.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "llvm/ADT/SetVector.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Interfaces/ViewLikeInterface.h"

#include <cmath>
#include <limits>

namespace mlir::et {
#define GEN_PASS_DEF_LOWERTILEOPSPASS
#include "EventTensor/Conversion/Passes.h.inc"
} // namespace mlir::et

using namespace mlir;
using namespace mlir::et;
using namespace mlir::et::tile;

namespace {

constexpr int64_t kVector = 8; // bf16 elements per 16-byte load


/// The sum of `v` over each aligned group of `width` lanes, in every lane of
/// the group (no shuffles for width 1).
Value butterflySum(OpBuilder &b, Location loc, Value v, int64_t width) {
  for (int64_t offset = width / 2; offset >= 1; offset /= 2)
    v = arith::AddFOp::create(b, loc, v, shuffleXor(b, loc, v, offset));
  return v;
}

/// True for the tile compute ops this pass lowers.
bool isTileOp(Operation *op) {
  return isa<LinearOp, MatmulOp, PrefetchOp, SiluMulOp, RMSNormOp, EmbeddingOp, KVAppendOp, RoPEOp, RoPEIntoOp,
             ArgmaxOp, AttentionSplitOp, AttentionMergeOp, AttentionPrefillOp>(op);
}

/// The buffer a memref value views: through subviews, reshapes and casts
/// to a kernel argument or an allocation.
Value rootBuffer(Value v) {
  while (auto view = v.getDefiningOp<ViewLikeOpInterface>())
    v = view.getViewSource();
  return v;
}

/// The buffers the tile ops in `op` (itself or nested) read and write.
struct TileAccess {
  llvm::SmallPtrSet<Value, 8> reads, writes;
  void add(Operation *op) {
    op->walk([&](Operation *inner) {
      if (!isTileOp(inner))
        return;
      auto effects = cast<MemoryEffectOpInterface>(inner);
      for (Value v : inner->getOperands()) {
        if (!isa<MemRefType>(v.getType()))
          continue;
        if (effects.getEffectOnValue<MemoryEffects::Write>(v))
          writes.insert(rootBuffer(v));
        if (effects.getEffectOnValue<MemoryEffects::Read>(v))
          reads.insert(rootBuffer(v));
      }
    });
  }
  bool conflicts(const TileAccess &other) const {
    auto meets = [](const llvm::SmallPtrSet<Value, 8> &a, const llvm::SmallPtrSet<Value, 8> &b) {
      return llvm::any_of(a, [&](Value v) { return b.contains(v); });
    };
    return meets(writes, other.reads) || meets(writes, other.writes) || meets(reads, other.writes);
  }
};

/// Barriers between dependent tile ops of `task` (see runOnOperation).
/// Buffers are told apart by their root: distinct kernel arguments are
/// taken to be distinct memory (docs/lowering.md).
void insertTileBarriers(TaskOp task) {
  auto holdsTileOps = [](Operation *op) {
    return op->walk([](Operation *inner) {
                return isTileOp(inner) ? WalkResult::interrupt() : WalkResult::advance();
              }).wasInterrupted();
  };
  task.getBody().walk([&](Block *block) {
    TileAccess pending;
    for (Operation &op : *block) {
      if (!holdsTileOps(&op))
        continue;
      TileAccess access;
      access.add(&op);
      if (access.conflicts(pending)) {
        OpBuilder b(&op);
        gpu::BarrierOp::create(b, op.getLoc());
        pending = TileAccess();
      }
      pending.reads.insert(access.reads.begin(), access.reads.end());
      pending.writes.insert(access.writes.begin(), access.writes.end());
    }
  });
}

} // namespace

/// A per-tile shared-memory buffer: a workgroup alloca at the top of the
/// task body, after the ones already there (the worker lowering turns each
/// into a workgroup buffer).
Value tile::workgroupBuffer(TaskOp task, Location loc, ArrayRef<int64_t> shape, Type elementType) {
  Block &body = task.getBody().front();
  auto at = llvm::find_if(body, [](Operation &op) { return !isa<memref::AllocaOp>(op); });
  OpBuilder b(&body, at);
  auto space = gpu::AddressSpaceAttr::get(task.getContext(), gpu::AddressSpace::Workgroup);
  return memref::AllocaOp::create(b, loc, MemRefType::get(shape, elementType, MemRefLayoutAttrInterface(), space));
}

namespace {


/// silu(g) * u in f32, et.silu_mul's form (approximate quotient and
/// exponential): the gated et.linear and et.silu_mul give the same bits.
Value gatedActivation(OpBuilder &b, Location loc, Value g, Value u) {
  return arith::MulFOp::create(b, loc, silu(b, loc, g, arith::FastMathFlags::afn), u);
}

/// f32 value of a bf16 or f32 element.
Value toF32(OpBuilder &b, Location loc, Value v) {
  if (v.getType().isF32())
    return v;
  return arith::ExtFOp::create(b, loc, b.getF32Type(), v);
}
Value fromF32(OpBuilder &b, Location loc, Value v, Type t) {
  if (t.isF32())
    return v;
  return arith::TruncFOp::create(b, loc, t, v);
}

/// 1 / sqrt(sum / k + eps) (f32 `sum`, index `k`).
Value inverseRMS(OpBuilder &b, Location loc, Value sum, Value k, float eps) {
  Value count = arith::UIToFPOp::create(b, loc, b.getF32Type(),
                                        arith::IndexCastUIOp::create(b, loc, b.getI64Type(), k));
  Value e = arith::ConstantFloatOp::create(b, loc, b.getF32Type(), APFloat(eps));
  return math::RsqrtOp::create(b, loc, arith::AddFOp::create(b, loc, arith::DivFOp::create(b, loc, sum, count), e));
}

/// y[tok, row] = `out` (f32), the way every lowering of et.linear ends a
/// row: added to y with `accumulate` (a relaxed f32 atomic add with
/// `atomic`: tiles that share rows add into them at once, ordered before
/// the task's signal by its release fence), rounded to y's element type.
void writeRow(OpBuilder &b, Location loc, LinearOp op, Value out, Value tok, Value row) {
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
void lowerLinearCPU(LinearOp op) {
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

/// True when nothing in `kernel` writes `buffer` (every use is a read).
bool isReadOnly(Value buffer) {
  for (OpOperand &use : buffer.getUses()) {
    Operation *user = use.getOwner();
    if (isa<memref::LoadOp, vector::LoadOp, memref::DimOp,
            memref::ExtractAlignedPointerAsIndexOp, StagedRowsOp>(user))
      continue;
    if (auto linear = dyn_cast<LinearOp>(user))
      if ((use.get() == linear.getW() || use.get() == linear.getGated() || use.get() == linear.getNorm()) &&
          linear.getY() != buffer && linear.getX() != buffer)
        continue;
    if (auto matmul = dyn_cast<MatmulOp>(user))
      if (matmul.getY() != buffer)
        continue;
    if (auto rope = dyn_cast<RoPEIntoOp>(user))
      if (rope.getOut() != buffer)
        continue;
    if (auto norm = dyn_cast<RMSNormOp>(user))
      if (norm.getY() != buffer && norm.getResidual() != buffer && norm.getX() != buffer)
        continue;
    return false;
  }
  return true;
}

/// Moves the side-effect-free ops of `task` that compute `needed` (and
/// what they use) above `at`, an op of the task's top-level block, when
/// every value can be known there; false (nothing moved) otherwise. Tile
/// ids and kernel-level values are known everywhere; an op inside a region
/// (a constant in an scf.if) runs there only conditionally, so it moves up
/// only if it cannot trap.
bool moveAbove(TaskOp task, Operation *at, ValueRange needed) {
  llvm::SetVector<Operation *> moves;
  Block *topBlock = at->getBlock();
  std::function<bool(Value)> available = [&](Value v) -> bool {
    Operation *def = v.getDefiningOp();
    if (!def) // tile ids and kernel arguments, not a nested region's
      return !task->isProperAncestor(cast<BlockArgument>(v).getOwner()->getParentOp());
    if (!task->isAncestor(def))
      return true; // kernel level
    if (moves.contains(def) || (def->getBlock() == topBlock && def->isBeforeInBlock(at)))
      return true;
    if (!isMemoryEffectFree(def) || def->getNumRegions() != 0)
      return false;
    if (def->getBlock() != topBlock && !isSpeculatable(def))
      return false;
    if (!llvm::all_of(def->getOperands(), available))
      return false;
    moves.insert(def);
    return true;
  };
  if (!llvm::all_of(needed, available))
    return false;
  // `moves` lists every op after what it uses (post-order).
  for (Operation *move : moves)
    move->moveBefore(at);
  return true;
}

/// The first et.event.wait of `op`'s task when `op` comes after it (at the
/// task's top level, or with `inIf` also inside scf.if ops there) and the
/// values `needed` can be known before that wait; else null. Values
/// computed after the wait by side-effect-free ops (a subview, row0 = tile
/// x rows) are moved above it, with what they need. Loads of data that no
/// task writes before `op` runs may then start before the wait.
Operation *prefetchPoint(Operation *op, ValueRange needed, bool inIf) {
  auto task = op->getParentOfType<TaskOp>();
  if (!task)
    return nullptr;
  for (Operation *parent = op->getParentOp(); parent != task; parent = parent->getParentOp())
    if (!inIf || !isa<scf::IfOp>(parent))
      return nullptr;
  auto waits = task.getWaits();
  if (waits.empty())
    return nullptr;
  Operation *firstWait = *waits.begin();
  Operation *top = firstWait->getBlock()->findAncestorOpInBlock(*op);
  if (!top || !firstWait->isBeforeInBlock(top))
    return nullptr;
  return moveAbove(task, firstWait, needed) ? firstWait : nullptr;
}

/// For `op` at its task's top level: the first op with side effects or
/// regions after the last et.event.wait before `op` (`op` itself at the
/// latest); null when `op` is deeper.
Operation *firstWorkAfterWait(Operation *op) {
  auto task = op->getParentOfType<TaskOp>();
  if (!task || op->getParentOp() != task)
    return nullptr;
  Operation *at = nullptr;
  for (Operation &o : *op->getBlock()) {
    if (&o == op)
      break;
    if (isa<EventWaitOp>(o))
      at = nullptr;
    else if (!at && (!isMemoryEffectFree(&o) || o.getNumRegions() != 0))
      at = &o;
  }
  return at ? at : op;
}

/// firstWorkAfterWait(op), with the side-effect-free ops that compute
/// `needed` moved above it; null when `op` is deeper or a value cannot be known there.
/// Loads of data that no task writes may start there, ahead of the tile's
/// other work before `op` (a fused norm, say), without leaving the wait.
Operation *afterWaitPoint(Operation *op, ValueRange needed) {
  Operation *at = firstWorkAfterWait(op);
  return at && moveAbove(op->getParentOfType<TaskOp>(), at, needed) ? at : nullptr;
}

/// The prefetch point of an et.linear at its task's top level that reads
/// weights no task writes: its weights and rows (row0, rows) are known
/// before the first wait.
Operation *weightPrefetchPoint(LinearOp op) {
  if (op->getParentOp() != op->getParentOfType<TaskOp>() || !isReadOnly(op.getW()))
    return nullptr;
  return prefetchPoint(op, {op.getW(), op.getRow0(), op.getRows()}, /*inIf=*/false);
}

} // namespace

/// An LLVM pointer (address space `space`) to the element `elementOffset`
/// elements past the start of the strided memref `mem` (its own offset
/// included), for ops that take raw addresses.
Value tile::elementPointer(OpBuilder &b, Location loc, Value mem, Value elementOffset,
                     int64_t elementBytes, unsigned space) {
  TileBuilder h{b, loc};
  auto meta = memref::ExtractStridedMetadataOp::create(b, loc, mem);
  Value base = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, meta.getBaseBuffer());
  Value element = arith::AddIOp::create(b, loc, meta.getOffset(), elementOffset);
  Value addr = arith::AddIOp::create(
      b, loc, base, arith::MulIOp::create(b, loc, element, h.idx(elementBytes)));
  Value addr64 = arith::IndexCastOp::create(b, loc, b.getI64Type(), addr);
  return LLVM::IntToPtrOp::create(b, loc, LLVM::LLVMPointerType::get(b.getContext(), space), addr64);
}

/// One 16-byte `cp.async` from global `src` to shared `dst`, cached in L2
/// only (`.cg`): the shared-memory prefetches of et.linear weights and of
/// et.attention_split's KV rows.
Value tile::shuffleXor(OpBuilder &b, Location loc, Value v, int64_t offset) {
  Type i32 = b.getI32Type();
  return gpu::ShuffleOp::create(b, loc, v,
                                arith::ConstantIntOp::create(b, loc, i32, offset),
                                arith::ConstantIntOp::create(b, loc, i32, kWarp),
                                gpu::ShuffleMode::XOR)
      .getShuffleResult();
}

Value tile::sharedAt(OpBuilder &b, Location loc, Value base, Value bytes) {
  return LLVM::GEPOp::create(b, loc, base.getType(), b.getI8Type(), base, ValueRange{bytes});
}

Value tile::silu(OpBuilder &b, Location loc, Value g, arith::FastMathFlags fast) {
  Value ex = math::ExpOp::create(b, loc, arith::NegFOp::create(b, loc, g), fast);
  Value one = arith::ConstantFloatOp::create(b, loc, b.getF32Type(), APFloat(1.0f));
  return arith::DivFOp::create(b, loc, g, arith::AddFOp::create(b, loc, one, ex), fast);
}

void tile::copyAsync16(OpBuilder &b, Location loc, Value dst, Value src, Value srcBytes) {
  NVVM::CpAsyncOp::create(b, loc, dst, src, b.getI32IntegerAttr(16),
                          NVVM::LoadCacheModifierKindAttr::get(b.getContext(), NVVM::LoadCacheModifierKind::CG),
                          srcBytes);
}

namespace {

/// Thread 0 prefetches rows [row0, row0 + rows) of the row-major matrix
/// `w` (clamped to its N rows) into L2 with one bulk prefetch, at `b`'s
/// insertion point; the pointer starts from the view's own offset (a layer
/// of stacked weights).
void prefetchRowsL2(OpBuilder &b, Location loc, Value w, Value row0, Value rows) {
  TileBuilder h{b, loc};
  int64_t eltBytes = cast<MemRefType>(w.getType()).getElementTypeBitWidth() / 8;
  Value n = memref::DimOp::create(b, loc, w, 0);
  Value k = memref::DimOp::create(b, loc, w, 1);
  Value start = arith::MinSIOp::create(b, loc, row0, n);
  Value end = arith::MinSIOp::create(b, loc, arith::AddIOp::create(b, loc, row0, rows), n);
  Value rowBytes = arith::MulIOp::create(b, loc, k, h.idx(eltBytes));
  Value bytes = arith::MulIOp::create(
      b, loc, arith::SubIOp::create(b, loc, end, start), rowBytes);
  Value tid = ThreadIdOp::create(b, loc, b.getIndexType());
  Value go = arith::AndIOp::create(
      b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, tid, h.idx(0)),
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sgt, bytes, h.idx(0)));
  auto ifOp = scf::IfOp::create(b, loc, go, /*withElse=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  auto meta = memref::ExtractStridedMetadataOp::create(b, loc, w);
  Value ptr = elementPointer(b, loc, w, arith::MulIOp::create(b, loc, start, meta.getStrides()[0]), eltBytes, 1);
  Value size = arith::IndexCastOp::create(b, loc, b.getI32Type(), bytes);
  NVVM::CpAsyncBulkPrefetchOp::create(b, loc, ptr, size, Value());
}

/// Before the first wait of the op's task, thread 0 prefetches the tile's
/// weight rows [row0, row0 + rows) into L2 with one bulk prefetch.
void prefetchWeightsL2(LinearOp op) {
  Operation *firstWait = weightPrefetchPoint(op);
  if (!firstWait)
    return;
  OpBuilder b(firstWait);
  prefetchRowsL2(b, op.getLoc(), op.getW(), op.getRow0(), op.getRows());
}

/// et.linear ... norm: the norm weights (which every warp of the tile
/// reads whole) into L2 before the task's first wait, thread 0 with one
/// bulk prefetch, when no task writes them (unless the pass's prefetch is
/// none). They are a few KiB that the step has not read before: without
/// it, the tile's first trip waits on DRAM for them after the wait.
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
void lowerPrefetch(PrefetchOp op, bool gpu) {
  if (gpu) {
    OpBuilder b(op);
    prefetchRowsL2(b, op.getLoc(), op.getW(), op.getRow0(), op.getRows());
  }
  op.erase();
}

/// What both GPU lowerings of et.linear start from: the types, the warp
/// of each thread, N.
struct LinearCommon {
  MemRefType xType;
  VectorType vecBF16, vecF32;
  Value lane, warp, warps, n, tid;
};

LinearCommon linearCommon(OpBuilder &b, Location loc, LinearOp op) {
  TileBuilder h{b, loc};
  Groups warpsOf = h.groups(kWarp);
  return {op.getX().getType(), VectorType::get({kVector}, b.getBF16Type()),
          VectorType::get({kVector}, b.getF32Type()), warpsOf.lane, warpsOf.group, warpsOf.groups,
          memref::DimOp::create(b, loc, op.getW(), 0), warpsOf.tid};
}

/// The sum of a warp's lane partial sums `acc` (vector<8xf32> per lane):
/// a reduction, then a shuffle butterfly (every lane gets it).
Value rowTotal(OpBuilder &b, Location loc, Value acc) {
  return butterflySum(b, loc, vector::ReductionOp::create(b, loc, vector::CombiningKind::ADD, acc), kWarp);
}

/// One 16-byte chunk (8 bf16) of the matrix `mem` at (`row`, `col`): the
/// load every GPU lowering of et.linear streams its operands with.
Value loadChunk(OpBuilder &b, Location loc, Value mem, Value row, Value col) {
  auto load = vector::LoadOp::create(b, loc, VectorType::get({kVector}, b.getBF16Type()), mem,
                                     ValueRange{row, col});
  load.setAlignment(16);
  return load.getResult();
}

/// y[tok, row] from `sum` (silu(sum) * `up` for a gated op), written by
/// the thread where `store` holds (writeRow). `scale` (et.linear ... norm:
/// the token's inverse RMS) multiplies both sums first.
void storeRow(OpBuilder &b, Location loc, LinearOp op, Value sum, Value store, Value tok, Value row,
              Value up = {}, Value scale = {}) {
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
void storeRowSum(OpBuilder &b, Location loc, LinearOp op, Value acc, Value store, Value tok, Value row) {
  storeRow(b, loc, op, rowTotal(b, loc, acc), store, tok, row);
}

/// et.linear ... norm: the token's inverse RMS from the sum of squares
/// of its row of x.
Value linearInverseRMS(OpBuilder &b, Location loc, LinearOp op, Value sum) {
  return inverseRMS(b, loc, sum, memref::DimOp::create(b, loc, op.getW(), 1), op.getEps()->convertToFloat());
}

/// et.linear ... norm: 8 elements of token `tok`'s row of x (the f32
/// residual stream) from column `col`, times the norm weights, rounded to
/// bf16 as an activation would be; `raw` gets x's own values (for the sum
/// of squares).
Value normedChunk(OpBuilder &b, Location loc, LinearOp op, Value tok, Value col, Value *raw) {
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

/// The chunk of x that every GPU lowering of et.linear multiplies a weight
/// chunk with (8 elements of token `tok` from column `col`, f32), and the
/// raw chunk: x itself (bf16, widened), or with `norm` normedChunk (`raw`
/// gets the stream's own values), or that product from `staged`
/// (stageNorm's shared memory; no `raw`).
Value loadX(OpBuilder &b, Location loc, LinearOp op, Value tok, Value col, Value *raw = nullptr,
            Value staged = {}) {
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

constexpr int64_t kStagedNormBytes = 16 * 1024; // bf16 x * g staged by stageNorm
constexpr int64_t kLinearTokens = 16;           // et.linear's bound on M
constexpr int64_t kMaxWarps = 32;

/// Whether stageNorm applies to `op` at `threads` per worker.
bool canStageNorm(LinearOp op, int64_t threads) {
  MemRefType xType = op.getX().getType();
  int64_t k = op.getW().getType().getDimSize(1);
  return op.getNorm() && op->getParentOfType<TaskOp>() && threads > 0 && threads % kWarp == 0 &&
         !xType.isDynamicDim(0) && !ShapedType::isDynamic(k) && k % kVector == 0 &&
         xType.getDimSize(0) * k * 2 <= kStagedNormBytes;
}
/// et.linear ... norm on the GPU with a static M and K whose x * g fits
/// kStagedNormBytes of shared memory: the worker reads x once (not once per
/// row): its threads stride over x's chunks, store bf16(x * g) into shared
/// memory and sum the squares, the warps' sums meet after one barrier, and
/// every thread adds them up into each token's inverse RMS. The op's rows
/// then read x * g from shared memory. Null `xs` when this does not apply.
struct StagedNorm {
  Value xs;
  SmallVector<Value> scale; // per token
};

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

/// The staged inverse RMS of token `tok` (a value below M).
Value stagedScale(OpBuilder &b, Location loc, const StagedNorm &sn, Value tok) {
  Value r = sn.scale.back();
  for (int64_t t = static_cast<int64_t>(sn.scale.size()) - 2; t >= 0; --t)
    r = arith::SelectOp::create(
        b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, tok, arith::ConstantIndexOp::create(b, loc, t)),
        sn.scale[t], r);
  return r;
}

/// et.linear ... norm on the GPU (the spread layout with K split over the
/// warps): every warp's inverse RMS of each token, in shared memory at
/// [warp][token] (M <= kLinearTokens). Every warp computes the same values
/// (normPrepass); a thread reads its own warp's slot.
struct NormScales {
  Value slots, warp;
  explicit operator bool() const { return static_cast<bool>(slots); }
  Value slot(OpBuilder &b, Location loc, Value tok) const {
    Value base = arith::MulIOp::create(b, loc, warp, arith::ConstantIndexOp::create(b, loc, kLinearTokens));
    return arith::AddIOp::create(b, loc, base, tok);
  }
  Value get(OpBuilder &b, Location loc, Value tok) const {
    return slots ? memref::LoadOp::create(b, loc, slots, ValueRange{slot(b, loc, tok)}).getResult() : Value();
  }
  void set(OpBuilder &b, Location loc, Value tok, Value r) const {
    memref::StoreOp::create(b, loc, r, slots, ValueRange{slot(b, loc, tok)});
  }
};

NormScales normScales(OpBuilder &b, Location loc, LinearOp op, Value warp) {
  if (!op.getNorm())
    return {};
  auto task = op->getParentOfType<TaskOp>();
  return {workgroupBuffer(task, loc, {kMaxWarps * kLinearTokens}, b.getF32Type()), warp};
}

/// Each warp's pass over x for the inverse RMS of every token (lane
/// `lane` of the warp reads 8 elements every 256), into `scales`.
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

/// Where the weight loads of an et.linear may start before its task's
/// first wait (GPU).
enum class WeightPrefetch { None, Registers, Shared };

/// The rows of an et.linear that the worker may have staged in shared
/// memory (et.staged_rows), and how many of them are there.
struct StagedRows {
  Value view, count;
  /// A gated op's up rows (the same rows of its `gated` weights).
  Value upView;
};

/// With `stageBytes` > 0: an et.staged_rows for the first rows of `op`,
/// when `op` is at its task's top level, reads weights no task writes with
/// rows contiguous and a static K, has a constant row count, its weights
/// and rows are known before the task's first wait (moved above it), and
/// the task has room left for at least one row (`stageUsed`: bytes taken
/// by the task's earlier linear ops). Otherwise null values. A gated op
/// stages the same rows of its gate and up weights (two et.staged_rows,
/// side by side), when both are laid out alike.
StagedRows stageRows(LinearOp op, int64_t stageBytes,
                     llvm::DenseMap<Operation *, int64_t> &stageUsed) {
  auto task = op->getParentOfType<TaskOp>();
  if (stageBytes <= 0 || !task || op->getParentOp() != task)
    return {};
  MemRefType w = op.getW().getType();
  if (Value up = op.getGated())
    if (up.getType() != w)
      return {};
  int64_t k = w.getDimSize(1);
  SmallVector<int64_t> strides;
  int64_t offset;
  if (ShapedType::isDynamic(k) || (k * 2) % 16 != 0 ||
      failed(w.getStridesAndOffset(strides, offset)) || strides[0] != k || strides[1] != 1)
    return {};
  std::optional<int64_t> rows = getConstantIntValue(op.getRows());
  int64_t used = stageUsed.lookup(task);
  if (!rows || *rows < 1)
    return {};
  int64_t mats = op.getGated() ? 2 : 1;
  int64_t fit = std::min(*rows, (stageBytes - used) / (mats * k * 2));
  if (fit < 1 || !weightPrefetchPoint(op))
    return {};
  OpBuilder b(op);
  auto workgroup = gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup);
  auto viewType = MemRefType::get({fit, k}, b.getBF16Type(), MemRefLayoutAttrInterface(), workgroup);
  auto staged = StagedRowsOp::create(b, op.getLoc(), viewType, b.getIndexType(), op.getW(),
                                     op.getRow0(), op.getRows(), b.getI64IntegerAttr(used));
  StagedRows out{staged.getView(), staged.getCount(), Value()};
  if (Value up = op.getGated())
    out.upView = StagedRowsOp::create(b, op.getLoc(), viewType, b.getIndexType(), up, op.getRow0(), op.getRows(),
                                      b.getI64IntegerAttr(used + fit * k * 2))
                     .getView();
  stageUsed[task] = used + mats * fit * k * 2;
  return out;
}

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
///   is the only synchronization. Only one linear op of a task uses the
///   buffer (`sharedTaken`).
///
/// With `staged` (from stageRows), a row below the staged count reads its
/// weights from the staged view instead, and no other prefetch applies.
void lowerLinearGPU(LinearOp op, int64_t unroll, WeightPrefetch mode, int64_t sharedBytes = 0,
                    int64_t threads = 0, llvm::DenseSet<Operation *> *sharedTaken = nullptr,
                    StagedRows staged = {}) {
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
  if (mode == WeightPrefetch::Shared && (pMax < unroll || !task || sharedTaken->contains(task)))
    mode = WeightPrefetch::None;
  Operation *prefetchAt = normAhead                    ? op.getOperation()
                          : mode != WeightPrefetch::None ? weightPrefetchPoint(op)
                                                         : nullptr;
  bool registerPrefetch = prefetchAt && mode == WeightPrefetch::Registers;
  bool sharedPrefetch = prefetchAt && mode == WeightPrefetch::Shared;
  if (sharedPrefetch)
    sharedTaken->insert(task);
  OpBuilder b(prefetchAt ? prefetchAt : op.getOperation());
  Location loc = op.getLoc();
  TileBuilder h{b, loc};
  LinearCommon c = linearCommon(b, loc, op);
  MemRefType xType = c.xType;
  VectorType vecBF16 = c.vecBF16, vecF32 = c.vecF32;
  Value lane = c.lane, warp = c.warp, warps = c.warps, n = c.n;
  Value k = memref::DimOp::create(b, loc, op.getW(), 1);
  Value end = arith::MinSIOp::create(
      b, loc, arith::AddIOp::create(b, loc, op.getRow0(), op.getRows()), n);
  Value first = arith::AddIOp::create(b, loc, op.getRow0(), warp);
  Value laneK = arith::MulIOp::create(b, loc, lane, h.idx(kVector));
  int64_t step = kWarp * kVector; // elements one warp covers per load
  // The unrolled part: K rounded down to a multiple of step * unroll.
  Value big = h.idx(step * unroll);
  Value kMain = arith::MulIOp::create(
      b, loc, arith::DivUIOp::create(b, loc, k, big), big);

  // Tokens: unrolled accumulators when M is static, else one at a time.
  bool staticM = !xType.isDynamicDim(0);
  int64_t mCount = staticM ? xType.getDimSize(0) : 1;

  auto loadRaw = [&](OpBuilder &b, Value mem, Value r, Value c) { return loadChunk(b, loc, mem, r, c); };
  auto loadVec = [&](OpBuilder &b, Value mem, Value r, Value c) {
    return arith::ExtFOp::create(b, loc, vecF32, loadRaw(b, mem, r, c));
  };

  // The prefetch of the first row's first `unroll` chunks (before the wait).
  SmallVector<Value> pre;
  Value preValid, preChunks, slots;
  if (sharedPrefetch) {
    // P chunks of the warp's first row, thread-private slots j * threads + tid.
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
              b, loc, arith::MulIOp::create(b, loc, j, h.idx(slotThreads)), c.tid);
          Value dst = elementPointer(b, loc, slots,
                                     arith::MulIOp::create(b, loc, slot, h.idx(kVector)), 2, 3);
          copyAsync16(b, loc, dst, src);
          scf::YieldOp::create(b, loc);
        });
    NVVM::CpAsyncCommitGroupOp::create(b, loc);
  }
  if (sharedPrefetch)
    b.setInsertionPoint(op);
  if (registerPrefetch) {
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

  StagedNorm sn = stageNorm(b, loc, op, threads);

  // `row` of y from row `wRow` of the weights in `wMem` (w, or the staged
  // view; a gated op's up row from the same row of `upMem`: its `gated`
  // weights, or their staged view).
  auto rowBody = [&](OpBuilder &b, Value row, Value tokBase, Value wMem, Value wRow, Value upMem) {
   // The lanes' partial sums of the rows of `mems` (`wMem`, or a gated
   // op's two, streamed together: each x chunk loaded once for both, and
   // `top` chunks per lane and trip of each), mem-major, one per token
   // each. Only a lone `wMem` starts from chunks loaded before the wait.
   auto rowSums = [&](ArrayRef<Value> mems, int64_t top) -> SmallVector<Value> {
    const int64_t nm = mems.size();
    // With `norm`, x's squares too (one accumulator per token after the
    // sums): the row's lanes load all of x, so each row takes its own
    // inverse RMS, with no pass of its own.
    const int64_t nq = op.getNorm() && !sn.xs ? mCount : 0;
    Value zero = arith::ConstantOp::create(
        b, loc, vecF32, DenseElementsAttr::get(vecF32, APFloat(0.0f)));
    SmallVector<Value> init(mCount * nm + nq, zero);
    auto tok = [&](int64_t i) {
      return staticM ? h.idx(i) : tokBase;
    };
    // Token i's x chunk at `col` times the weight chunks `wvs` (one per
    // mem) into `next`, and its squares.
    auto addX = [&](OpBuilder &b, SmallVectorImpl<Value> &next, int64_t i, ArrayRef<Value> wvs, Value col) {
      Value raw;
      Value xv = loadX(b, loc, op, tok(i), col, &raw, sn.xs);
      for (auto [m, wv] : llvm::enumerate(wvs))
        next[m * mCount + i] = vector::FMAOp::create(b, loc, wv, xv, next[m * mCount + i]);
      if (nq)
        next[nm * mCount + i] = vector::FMAOp::create(b, loc, raw, raw, next[nm * mCount + i]);
    };
    Value mainStart = laneK;
    // The first row starts from the chunks loaded before the wait: `body`
    // adds them to the accumulators and returns the next column.
    auto firstRowFrom = [&](function_ref<Value(SmallVector<Value> &)> body) {
      Value usePre = arith::AndIOp::create(
          b, loc, preValid, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, row, first));
      SmallVector<Type> types(init.size(), vecF32);
      types.push_back(b.getIndexType());
      auto ifOp = scf::IfOp::create(b, loc, types, usePre, /*withElseRegion=*/true);
      {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(ifOp.thenBlock());
        SmallVector<Value> accs(init);
        Value next = body(accs);
        accs.push_back(next);
        scf::YieldOp::create(b, loc, accs);
        b.setInsertionPointToStart(ifOp.elseBlock());
        SmallVector<Value> plain(init);
        plain.push_back(laneK);
        scf::YieldOp::create(b, loc, plain);
      }
      init.assign(ifOp.getResults().begin(), ifOp.getResults().begin() + init.size());
      mainStart = ifOp.getResults().back();
    };
    if (sharedPrefetch)
      firstRowFrom([&](SmallVector<Value> &accs) -> Value {
        NVVM::CpAsyncWaitGroupOp::create(b, loc, 0);
        auto loop = scf::ForOp::create(
            b, loc, h.idx(0), preChunks, h.idx(unroll), init,
            [&](OpBuilder &b, Location loc, Value j0, ValueRange sums) {
              TileBuilder h{b, loc};
              SmallVector<Value> ws, cols;
              for (int64_t u = 0; u < unroll; ++u) {
                Value j = arith::AddIOp::create(b, loc, j0, h.idx(u));
                cols.push_back(arith::AddIOp::create(
                    b, loc, laneK, arith::MulIOp::create(b, loc, j, h.idx(step))));
                Value slot = arith::AddIOp::create(
                    b, loc, arith::MulIOp::create(b, loc, j, h.idx(slotThreads)), c.tid);
                auto load = vector::LoadOp::create(
                    b, loc, vecBF16, slots,
                    ValueRange{arith::MulIOp::create(b, loc, slot, h.idx(kVector))});
                load.setAlignment(16);
                ws.push_back(arith::ExtFOp::create(b, loc, vecF32, load.getResult()));
              }
              SmallVector<Value> next(sums.begin(), sums.end());
              for (int64_t u = 0; u < unroll; ++u)
                for (int64_t i = 0; i < mCount; ++i)
                  addX(b, next, i, {ws[u]}, cols[u]);
              scf::YieldOp::create(b, loc, next);
            });
        accs.assign(loop.getResults().begin(), loop.getResults().end());
        return arith::AddIOp::create(b, loc, laneK, arith::MulIOp::create(b, loc, preChunks, h.idx(step)));
      });
    if (registerPrefetch)
      firstRowFrom([&](SmallVector<Value> &accs) -> Value {
        for (int64_t u = 0; u < unroll; ++u) {
          Value col = arith::AddIOp::create(b, loc, laneK, h.idx(u * step));
          Value wv = arith::ExtFOp::create(b, loc, vecF32, pre[u]);
          for (int64_t i = 0; i < mCount; ++i)
            addX(b, accs, i, {wv}, col);
        }
        return arith::AddIOp::create(b, loc, laneK, big);
      });
    // Loops of `u` independent 16-byte loads of w per lane, then the FMAs
    // with every token: u = `unroll` up to kMain, then halved while whole
    // groups of u chunks remain (so a K below unroll x 256 still gets
    // loads in flight).
    auto unrolledLoop = [&](int64_t u, Value from, Value to, Value stepU, ValueRange accs0) {
      return scf::ForOp::create(
          b, loc, from, to, stepU, accs0,
          [&](OpBuilder &b, Location loc, Value k0, ValueRange accs) {
            SmallVector<Value> ws, cols;
            for (int64_t j = 0; j < u; ++j) {
              Value col = arith::AddIOp::create(b, loc, k0, h.idx(j * step));
              cols.push_back(col);
              for (Value mem : mems)
                ws.push_back(loadVec(b, mem, wRow, col));
            }
            SmallVector<Value> next(accs.begin(), accs.end());
            for (int64_t j = 0; j < u; ++j)
              for (int64_t i = 0; i < mCount; ++i)
                addX(b, next, i, ArrayRef<Value>(ws).slice(j * nm, nm), cols[j]);
            scf::YieldOp::create(b, loc, next);
          });
    };
    // The main loop's chunks per trip; the tail loops halve from there.
    Value bigTop = top == unroll ? big : h.idx(step * top);
    Value kTop = top == unroll ? kMain
                               : arith::MulIOp::create(b, loc, arith::DivUIOp::create(b, loc, k, bigTop), bigTop)
                                     .getResult();
    auto mainLoop = unrolledLoop(top, mainStart, kTop, bigTop, init);
    SmallVector<Value> accs(mainLoop.getResults());
    Value done = kTop; // columns covered so far (a multiple of step)
    for (int64_t u = top / 2; u >= 2; u /= 2) {
      Value bigU = h.idx(step * u);
      Value upTo = arith::AddIOp::create(
          b, loc, done,
          arith::MulIOp::create(
              b, loc, arith::DivUIOp::create(b, loc, arith::SubIOp::create(b, loc, k, done), bigU), bigU));
      auto loop = unrolledLoop(u, arith::AddIOp::create(b, loc, done, laneK), upTo, bigU, accs);
      accs.assign(loop.getResults().begin(), loop.getResults().end());
      done = upTo;
    }
    // Remainder: one load per lane per step.
    Value restStart = arith::AddIOp::create(b, loc, done, laneK);
    auto restLoop = scf::ForOp::create(
        b, loc, restStart, k, h.idx(step), accs,
        [&](OpBuilder &b, Location loc, Value col, ValueRange accs) {
          SmallVector<Value> wvs;
          for (Value mem : mems)
            wvs.push_back(loadVec(b, mem, wRow, col));
          SmallVector<Value> next(accs.begin(), accs.end());
          for (int64_t i = 0; i < mCount; ++i)
            addX(b, next, i, wvs, col);
          scf::YieldOp::create(b, loc, next);
        });
    return SmallVector<Value>(restLoop.getResults());
   };
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
      SmallVector<Value> both = rowSums({wMem, wu}, std::max<int64_t>(1, top / 2));
      for (int64_t i = 0; i < mCount; ++i) {
        sums.push_back(rowTotal(b, loc, both[i]));
        ups[i] = rowTotal(b, loc, both[mCount + i]);
      }
      scales(both, 2);
    } else {
      SmallVector<Value> one = rowSums({wMem}, unroll);
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
  };

  scf::ForOp::create(
      b, loc, first, end, warps, ValueRange{},
      [&](OpBuilder &b, Location loc, Value row, ValueRange) {
        auto rowFrom = [&](OpBuilder &b, Value wMem, Value wRow, Value upMem) {
          if (staticM) {
            rowBody(b, row, Value(), wMem, wRow, upMem);
          } else {
            Value m = memref::DimOp::create(b, loc, op.getX(), 0);
            scf::ForOp::create(
                b, loc, h.idx(0), m, h.idx(1), ValueRange{},
                [&](OpBuilder &b, Location loc, Value t, ValueRange) {
                  rowBody(b, row, t, wMem, wRow, upMem);
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
  // Every copy is complete before the tile ends (a thread whose rows had
  // no token to compute never waited), so the next tile may reuse the slots.
  if (sharedPrefetch)
    NVVM::CpAsyncWaitGroupOp::create(b, loc, 0);
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
/// the last row load the last row again and store nothing. Returns false
/// (nothing changed) when this does not apply (a gated op or one with
/// `norm` takes the one-row-per-warp layout).
bool lowerLinearGPUShort(LinearOp op, int64_t threads, bool prefetch) {
  constexpr int64_t kShortChunks = 16;
  int64_t k = op.getW().getType().getDimSize(1);
  std::optional<int64_t> rowsConst = getConstantIntValue(op.getRows());
  if (op.getGated() || op.getNorm() || threads <= 0 || threads % kWarp || ShapedType::isDynamic(k) ||
      k > kWarp * kVector || k % kVector || !rowsConst || *rowsConst < 1)
    return false;
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
  return true;
}

/// Elements of silu_mul per thread and trip: their loads go out together.
constexpr int64_t kSiluUnroll = 8;

/// y = silu(gate) * up over the rows and the column range [col0, col0 +
/// cols): the (row, column) elements, flattened, strided by thread,
/// kSiluUnroll per thread and trip with every load of a trip before its
/// stores (y may alias gate or up as far as LLVM and ptxas know, so they
/// would not move a later element's loads above an earlier one's store).
/// One element per trip left the prefill's 128-row tiles latency-bound:
/// 1.9 ms for 128 x 8192 elements on the H200 (docs/benchmarks.md).
void lowerSiluMul(SiluMulOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  TileBuilder h{b, loc};
  Value tid = ThreadIdOp::create(b, loc, b.getIndexType());
  Value nt = NumThreadsOp::create(b, loc, b.getIndexType());
  Value m = memref::DimOp::create(b, loc, op.getGate(), 0);
  Value cols = memref::DimOp::create(b, loc, op.getGate(), 1);
  Value end = arith::MinSIOp::create(
      b, loc, arith::AddIOp::create(b, loc, op.getCol0(), op.getCols()), cols);
  Value width = arith::MaxSIOp::create(b, loc, arith::SubIOp::create(b, loc, end, op.getCol0()), h.idx(0));
  Value total = arith::MulIOp::create(b, loc, m, width);
  Value last = arith::SubIOp::create(b, loc, total, h.idx(1));
  Value step = arith::MulIOp::create(b, loc, nt, h.idx(kSiluUnroll));
  Type outType = op.getY().getType().getElementType();
  // An approximate quotient and exponential (div.approx, ex2.approx on the
  // GPU; gatedActivation): the result is rounded to bf16 for the next GEMM
  // anyway, and the IEEE division was most of the loop's instructions.
  scf::ForOp::create(
      b, loc, tid, total, step, ValueRange{},
      [&](OpBuilder &b, Location loc, Value base, ValueRange) {
        SmallVector<Value> rows, colsAt, inside, gates, ups;
        Value e = base;
        for (int64_t u = 0; u < kSiluUnroll; ++u) {
          if (u)
            e = arith::AddIOp::create(b, loc, e, nt);
          inside.push_back(arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, e, total));
          Value at = arith::MinUIOp::create(b, loc, e, last);
          rows.push_back(arith::DivUIOp::create(b, loc, at, width));
          colsAt.push_back(
              arith::AddIOp::create(b, loc, op.getCol0(), arith::RemUIOp::create(b, loc, at, width)));
          gates.push_back(memref::LoadOp::create(b, loc, op.getGate(), ValueRange{rows.back(), colsAt.back()}));
          ups.push_back(memref::LoadOp::create(b, loc, op.getUp(), ValueRange{rows.back(), colsAt.back()}));
        }
        for (int64_t u = 0; u < kSiluUnroll; ++u) {
          Value g = toF32(b, loc, gates[u]), up = toF32(b, loc, ups[u]);
          Value y = fromF32(b, loc, gatedActivation(b, loc, g, up), outType);
          // The trip's first element is always inside.
          if (u == 0) {
            memref::StoreOp::create(b, loc, y, op.getY(), ValueRange{rows[u], colsAt[u]});
            continue;
          }
          auto guard = scf::IfOp::create(b, loc, inside[u], /*withElse=*/false);
          OpBuilder::InsertionGuard g2(b);
          b.setInsertionPointToStart(guard.thenBlock());
          memref::StoreOp::create(b, loc, y, op.getY(), ValueRange{rows[u], colsAt[u]});
        }
        scf::YieldOp::create(b, loc);
      });
  op.erase();
}

/// RMSNorm: tokens spread over groups of `lanes` threads (a warp on the GPU,
/// one thread on the CPU); each group sums squares over its lanes, shares the
/// total, then scales.
/// Columns per thread and iteration of RMSNorm's passes: their loads go out
/// together instead of one L2 round trip per column.
constexpr int64_t kThreadUnroll = 4;

/// The columns j0, j0 + step, ... (kThreadUnroll of them) clamped to
/// hidden - 1, and whether each is below hidden.
void unrolledColumns(OpBuilder &b, Location loc, Value j0, Value step, Value hidden,
                     SmallVectorImpl<Value> &cols, SmallVectorImpl<Value> &ins) {
  Value last = arith::SubIOp::create(b, loc, hidden, arith::ConstantIndexOp::create(b, loc, 1));
  Value j = j0;
  for (int64_t u = 0; u < kThreadUnroll; ++u) {
    if (u)
      j = arith::AddIOp::create(b, loc, j, step);
    cols.push_back(arith::MinUIOp::create(b, loc, j, last));
    ins.push_back(arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, j, hidden));
  }
}

/// RMSNorm's first pass over columns first, first + step, ... of the tokens
/// `toks`: the sum of squares of x (plus the residual, stored back as the new
/// residual stream when there is one), one per token. kThreadUnroll columns
/// per iteration, every token's loads first; columns past hidden clamp and
/// count zero.
SmallVector<Value> rmsnormSquares(OpBuilder &b, Location loc, RMSNormOp op, ArrayRef<Value> toks, Value first,
                                  Value step, Value hidden) {
  Value residual = op.getResidual();
  Value zero = arith::ConstantFloatOp::create(b, loc, b.getF32Type(), APFloat(0.0f));
  Value stride = arith::MulIOp::create(b, loc, step, arith::ConstantIndexOp::create(b, loc, kThreadUnroll));
  SmallVector<Value> inits(toks.size(), zero);
  auto sum = scf::ForOp::create(
      b, loc, first, hidden, stride, inits,
      [&](OpBuilder &b, Location loc, Value j0, ValueRange acc) {
        SmallVector<Value> cols, ins, vals;
        unrolledColumns(b, loc, j0, step, hidden, cols, ins);
        for (Value tok : toks)
          for (Value c : cols) {
            Value v = toF32(b, loc, memref::LoadOp::create(b, loc, op.getX(), ValueRange{tok, c}));
            if (residual)
              v = arith::AddFOp::create(b, loc, v, memref::LoadOp::create(b, loc, residual, ValueRange{tok, c}));
            vals.push_back(v);
          }
        SmallVector<Value> totals;
        for (auto [t, tok] : llvm::enumerate(toks)) {
          Value total = acc[t];
          for (int64_t u = 0; u < kThreadUnroll; ++u) {
            Value val = vals[t * kThreadUnroll + u];
            if (residual) {
              auto store = scf::IfOp::create(b, loc, ins[u], /*withElse=*/false);
              OpBuilder::InsertionGuard guard(b);
              b.setInsertionPointToStart(store.thenBlock());
              memref::StoreOp::create(b, loc, val, residual, ValueRange{tok, cols[u]});
            }
            Value v = arith::SelectOp::create(b, loc, ins[u], val, zero);
            total = math::FmaOp::create(b, loc, v, v, total);
          }
          totals.push_back(total);
        }
        scf::YieldOp::create(b, loc, totals);
      });
  return SmallVector<Value>(sum.getResults());
}

/// RMSNorm's second pass over the same columns: y = h * inv * w for each of
/// the tokens `toks` with its `invs`, h the residual stream written by the
/// first pass (by the same thread) or x; every load first (w once for all
/// tokens), then the guarded stores.
void rmsnormScale(OpBuilder &b, Location loc, RMSNormOp op, ArrayRef<Value> toks, Value first, Value step,
                  Value hidden, ArrayRef<Value> invs, ArrayRef<Value> wEarly = {}) {
  Value residual = op.getResidual();
  Type outType = op.getY().getType().getElementType();
  Value stride = arith::MulIOp::create(b, loc, step, arith::ConstantIndexOp::create(b, loc, kThreadUnroll));
  scf::ForOp::create(
      b, loc, first, hidden, stride, ValueRange{},
      [&](OpBuilder &b, Location loc, Value j0, ValueRange) {
        SmallVector<Value> cols, ins;
        unrolledColumns(b, loc, j0, step, hidden, cols, ins);
        // ys[u * tokens + t]: column u of token t.
        SmallVector<Value> ys;
        for (auto [u, c] : llvm::enumerate(cols)) {
          SmallVector<Value> vs;
          for (Value tok : toks)
            vs.push_back(residual ? memref::LoadOp::create(b, loc, residual, ValueRange{tok, c}).getResult()
                                  : toF32(b, loc, memref::LoadOp::create(b, loc, op.getX(), ValueRange{tok, c})));
          Value w = !wEarly.empty() ? wEarly[u]
                                    : toF32(b, loc, memref::LoadOp::create(b, loc, op.getW(), ValueRange{c}));
          for (auto [v, inv] : llvm::zip(vs, invs))
            ys.push_back(arith::MulFOp::create(b, loc, arith::MulFOp::create(b, loc, v, inv), w));
        }
        for (int64_t u = 0; u < kThreadUnroll; ++u) {
          auto store = scf::IfOp::create(b, loc, ins[u], /*withElse=*/false);
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(store.thenBlock());
          for (auto [t, tok] : llvm::enumerate(toks))
            memref::StoreOp::create(b, loc, fromF32(b, loc, ys[u * toks.size() + t], outType), op.getY(),
                                    ValueRange{tok, cols[u]});
        }
        scf::YieldOp::create(b, loc);
      });
}

/// GPU RMSNorm of wide rows (static H >= 512): every thread of the worker
/// works on each token. Threads stride over the columns, warps reduce with
/// shuffles, and the warps' sums meet in shared memory. One warp per row
/// would walk a 2048-wide row in 64 dependent steps (latency-bound); here it
/// is a few loads per thread. Tokens go in chunks of up to kNormChunk: the
/// sums of a whole chunk are taken before one barrier, then each warp adds
/// up a token's warp sums with one shuffle butterfly and scales the row.
/// With `width` (rows-in-flight, a divisor of kNormChunk) above 1, tokens
/// of a chunk go `width` at a time with all their loads in flight together
/// (a prompt's 8-row tiles walked their tokens one after another: two L2
/// round trips per token and pass), then the rest one at a time.
constexpr int64_t kNormChunk = 16;

bool lowerRMSNormBlock(RMSNormOp op, int64_t width, int64_t threads) {
  MemRefType xType = op.getX().getType();
  auto task = op->getParentOfType<TaskOp>();
  if (!task || xType.isDynamicDim(1) || xType.getDimSize(1) < 512)
    return false;
  Location loc = op.getLoc();
  // Weights that no task writes, of a row that each thread covers in one
  // trip of the scale pass (hidden <= threads x kThreadUnroll): thread t's
  // weights (columns t, t + threads, ...) are loaded before the task's
  // first wait, so the scale pass after the barrier does not wait on
  // another L2 round trip for them.
  SmallVector<Value> wEarly;
  if (threads > 0 && xType.getDimSize(1) <= threads * kThreadUnroll && op->getParentOp() == task &&
      isReadOnly(op.getW()))
    if (Operation *at = prefetchPoint(op, {op.getW()}, /*inIf=*/false)) {
      OpBuilder e(at);
      TileBuilder eh{e, loc};
      Value tid = ThreadIdOp::create(e, loc, e.getIndexType());
      for (int64_t u = 0; u < kThreadUnroll; ++u) {
        Value c = arith::MinUIOp::create(e, loc, arith::AddIOp::create(e, loc, tid, eh.idx(u * threads)),
                                         eh.idx(xType.getDimSize(1) - 1));
        wEarly.push_back(toF32(e, loc, memref::LoadOp::create(e, loc, op.getW(), ValueRange{c})));
      }
    }
  OpBuilder b(op);
  TileBuilder h{b, loc};
  Value partials = workgroupBuffer(task, loc, {kNormChunk, kWarp}, b.getF32Type());
  Groups g = h.groups(kWarp);
  Value m = memref::DimOp::create(b, loc, op.getX(), 0);
  Value hidden = h.idx(xType.getDimSize(1));
  // Tokens [0, n) of a chunk: groups of `width` up to `whole`, then one by
  // one; body(is) gets a group's indices within the chunk.
  auto eachGroup = [&](OpBuilder &b, Location loc, Value whole, Value n,
                       function_ref<void(OpBuilder &, Location, ArrayRef<Value>)> body) {
    auto loop = [&](Value lo, Value hi, int64_t size) {
      scf::ForOp::create(b, loc, lo, hi, arith::ConstantIndexOp::create(b, loc, size), ValueRange{},
                         [&](OpBuilder &b, Location loc, Value i0, ValueRange) {
                           SmallVector<Value> is{i0};
                           for (int64_t t = 1; t < size; ++t)
                             is.push_back(arith::AddIOp::create(b, loc, i0, arith::ConstantIndexOp::create(b, loc, t)));
                           body(b, loc, is);
                           scf::YieldOp::create(b, loc);
                         });
    };
    if (width > 1)
      loop(arith::ConstantIndexOp::create(b, loc, 0), whole, width);
    loop(whole, n, 1);
  };
  scf::ForOp::create(
      b, loc, h.idx(0), m, h.idx(kNormChunk), ValueRange{},
      [&](OpBuilder &b, Location loc, Value c0, ValueRange) {
        TileBuilder h{b, loc};
        Value n = arith::MinUIOp::create(b, loc, h.idx(kNormChunk),
                                         arith::SubIOp::create(b, loc, m, c0));
        // [0, whole) in groups of `width`, [whole, n) one by one.
        Value whole = width == 1 ? h.idx(0)
                                 : arith::SubIOp::create(b, loc, n, arith::RemUIOp::create(b, loc, n, h.idx(width)))
                                       .getResult();
        Value isLane0 = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, g.lane, h.idx(0));
        eachGroup(b, loc, whole, n, [&](OpBuilder &b, Location loc, ArrayRef<Value> is) {
          SmallVector<Value> toks;
          for (Value i : is)
            toks.push_back(arith::AddIOp::create(b, loc, c0, i));
          SmallVector<Value> partial = rmsnormSquares(b, loc, op, toks, g.tid, g.threads, hidden);
          SmallVector<Value> warpSums;
          for (Value p : partial)
            warpSums.push_back(butterflySum(b, loc, p, kWarp));
          auto store = scf::IfOp::create(b, loc, isLane0, /*withElse=*/false);
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(store.thenBlock());
          for (auto [i, s] : llvm::zip(is, warpSums))
            memref::StoreOp::create(b, loc, s, partials, ValueRange{i, g.group});
        });
        gpu::BarrierOp::create(b, loc);
        eachGroup(b, loc, whole, n, [&](OpBuilder &b, Location loc, ArrayRef<Value> is) {
          TileBuilder h{b, loc};
          // Lane l holds warp l's sum (warps <= 32), then a butterfly.
          Value has = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, g.lane, g.groups);
          Value safe = arith::SelectOp::create(b, loc, has, g.lane, h.idx(0));
          SmallVector<Value> toks, invs, vs;
          for (Value i : is)
            vs.push_back(arith::SelectOp::create(
                b, loc, has, memref::LoadOp::create(b, loc, partials, ValueRange{i, safe}), h.f32(0)));
          SmallVector<Value> totals;
          for (Value v : vs)
            totals.push_back(butterflySum(b, loc, v, kWarp));
          for (auto [i, total] : llvm::zip(is, totals)) {
            invs.push_back(inverseRMS(b, loc, total, hidden, op.getEps().convertToFloat()));
            toks.push_back(arith::AddIOp::create(b, loc, c0, i));
          }
          // Each thread re-reads only the columns it summed above.
          rmsnormScale(b, loc, op, toks, g.tid, g.threads, hidden, invs, wEarly);
        });
        // The next chunk reuses the partial sums.
        gpu::BarrierOp::create(b, loc);
        scf::YieldOp::create(b, loc);
      });
  op.erase();
  return true;
}

/// Narrow rows (a warp per row on the GPU, a thread on the CPU). On the GPU
/// with `width` (rows-in-flight) above 1, a warp takes `width` rows at a
/// time, all their loads in flight, while every warp has that many left (a
/// prompt tile's per-head norms: 128 rows of 128 on 8 warps), then one at a
/// time.
void lowerRMSNorm(RMSNormOp op, bool gpu, int64_t width, int64_t threads) {
  if (gpu && lowerRMSNormBlock(op, width, threads))
    return;
  OpBuilder b(op);
  Location loc = op.getLoc();
  TileBuilder h{b, loc};
  int64_t lanes = gpu ? kWarp : 1;
  Groups g = h.groups(lanes);
  Value m = memref::DimOp::create(b, loc, op.getX(), 0);
  Value hidden = memref::DimOp::create(b, loc, op.getX(), 1);
  // Rows tok, tok + groups, ... (`width` of them) of one warp.
  auto rows = [&](OpBuilder &b, Location loc, Value tok, int64_t width) {
    SmallVector<Value> toks{tok};
    for (int64_t t = 1; t < width; ++t)
      toks.push_back(arith::AddIOp::create(b, loc, toks.back(), g.groups));
    SmallVector<Value> invs;
    for (Value sum : rmsnormSquares(b, loc, op, toks, g.lane, h.idx(lanes), hidden))
      invs.push_back(inverseRMS(b, loc, butterflySum(b, loc, sum, lanes), hidden, op.getEps().convertToFloat()));
    rmsnormScale(b, loc, op, toks, g.lane, h.idx(lanes), hidden, invs);
  };
  Value rest = g.group;
  if (gpu && width > 1) {
    // [0, whole): whole rounds of `width` rows for every warp.
    Value round = arith::MulIOp::create(b, loc, g.groups, h.idx(width));
    Value whole = arith::SubIOp::create(b, loc, m, arith::RemUIOp::create(b, loc, m, round));
    scf::ForOp::create(b, loc, g.group, whole, round, ValueRange{},
                       [&](OpBuilder &b, Location loc, Value tok, ValueRange) {
                         rows(b, loc, tok, width);
                         scf::YieldOp::create(b, loc);
                       });
    rest = arith::AddIOp::create(b, loc, whole, g.group);
  }
  scf::ForOp::create(b, loc, rest, m, g.groups, ValueRange{},
                     [&](OpBuilder &b, Location loc, Value tok, ValueRange) {
                       rows(b, loc, tok, 1);
                       scf::YieldOp::create(b, loc);
                     });
  op.erase();
}

/// Converts an integer id (i32, i64 or index) to index.
Value idToIndex(OpBuilder &b, Location loc, Value v) {
  if (v.getType().isIndex())
    return v;
  return arith::IndexCastOp::create(b, loc, b.getIndexType(), v);
}

/// A loop over [0, n) strided by the worker's threads. (Four elements per
/// thread and iteration, as in RMSNorm, made the RoPE of the decode step
/// 2.5x slower on the H200: docs/benchmarks.md.)
template <typename Fn>
void threadLoop(OpBuilder &b, Location loc, Value n, Fn body) {
  Value tid = ThreadIdOp::create(b, loc, b.getIndexType());
  Value nt = NumThreadsOp::create(b, loc, b.getIndexType());
  scf::ForOp::create(b, loc, tid, n, nt, ValueRange{},
                     [&](OpBuilder &b, Location loc, Value i, ValueRange) {
                       body(b, loc, i);
                       scf::YieldOp::create(b, loc);
                     });
}

/// Elements [0, total) strided by the worker's threads: while whole trips
/// of `width` per thread remain, `body` gets a trip's `width` indices (so it
/// can issue all their loads before any store), then one index per thread
/// and trip for the rest.
template <typename Fn>
void groupedThreadLoop(OpBuilder &b, Location loc, Value total, int64_t width, Fn body) {
  TileBuilder h{b, loc};
  Value tid = ThreadIdOp::create(b, loc, b.getIndexType());
  Value nt = NumThreadsOp::create(b, loc, b.getIndexType());
  Value first = tid;
  if (width > 1) {
    Value trip = arith::MulIOp::create(b, loc, nt, h.idx(width));
    Value bulk = arith::SubIOp::create(b, loc, total, arith::RemUIOp::create(b, loc, total, trip));
    first = arith::AddIOp::create(b, loc, bulk, tid);
    scf::ForOp::create(b, loc, tid, bulk, trip, ValueRange{},
                       [&](OpBuilder &b, Location loc, Value e0, ValueRange) {
                         SmallVector<Value> es{e0};
                         for (int64_t u = 1; u < width; ++u)
                           es.push_back(arith::AddIOp::create(b, loc, es.back(), nt));
                         body(b, loc, ArrayRef<Value>(es));
                         scf::YieldOp::create(b, loc);
                       });
  }
  scf::ForOp::create(b, loc, first, total, nt, ValueRange{},
                     [&](OpBuilder &b, Location loc, Value e, ValueRange) {
                       body(b, loc, ArrayRef<Value>{e});
                       scf::YieldOp::create(b, loc);
                     });
}

/// Whether rows of `t` are contiguous with a static row stride of `cols`
/// elements (row views of a [rows, cols] buffer), so 16-byte chunks of a
/// row stay 16-byte aligned.
bool rowsOf(MemRefType t, int64_t cols) {
  SmallVector<int64_t> strides;
  int64_t offset;
  return t.getRank() == 2 && t.getDimSize(1) == cols && succeeded(t.getStridesAndOffset(strides, offset)) &&
         strides[0] == cols && strides[1] == 1;
}

/// Embedding gather on the GPU with 16-byte loads: 8 bf16 elements of a
/// row per thread and trip (or 4 f32), `width` trips' loads (ids, then
/// rows) issued before their stores. One element at a time, the prompt's
/// first 8-row tiles took 25 us of their 33 on the H200 (docs/benchmarks.md).
/// Needs H a multiple of the chunk and row-contiguous table and output.
bool lowerEmbeddingVector(EmbeddingOp op, int64_t width) {
  MemRefType tType = op.getTable().getType(), yType = op.getY().getType();
  int64_t hidden = tType.getDimSize(1);
  Type inType = tType.getElementType(), outType = yType.getElementType();
  int64_t per = 16 / (inType.getIntOrFloatBitWidth() / 8);
  if (ShapedType::isDynamic(hidden) || hidden % per || !rowsOf(tType, hidden) || !rowsOf(yType, hidden))
    return false;
  OpBuilder b(op);
  Location loc = op.getLoc();
  TileBuilder h{b, loc};
  Value vocab = memref::DimOp::create(b, loc, op.getTable(), 0);
  Value m = memref::DimOp::create(b, loc, op.getY(), 0);
  Value perRow = h.idx(hidden / per);
  Value total = arith::MulIOp::create(b, loc, m, perRow);
  auto inVec = VectorType::get({per}, inType), f32Vec = VectorType::get({per}, b.getF32Type()),
       outVec = VectorType::get({per}, outType);
  struct Chunk {
    Value tok, col, id, valid;
  };
  // Chunk c: its token, first column and table row.
  auto chunkAt = [&](OpBuilder &b, Location loc, Value c) {
    Chunk k;
    k.tok = arith::DivUIOp::create(b, loc, c, perRow);
    k.col = arith::MulIOp::create(b, loc, arith::RemUIOp::create(b, loc, c, perRow), h.idx(per));
    k.id = idToIndex(b, loc, memref::LoadOp::create(b, loc, op.getIds(), ValueRange{k.tok}));
    k.valid = arith::AndIOp::create(b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, k.id, h.idx(0)),
                                    arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, k.id, vocab));
    return k;
  };
  // The chunk's row of the table in f32 (zeros for an id outside it).
  auto load = [&](OpBuilder &b, Location loc, const Chunk &k) -> Value {
    auto pick = scf::IfOp::create(b, loc, TypeRange{f32Vec}, k.valid, /*withElse=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(pick.thenBlock());
    auto v = vector::LoadOp::create(b, loc, inVec, op.getTable(), ValueRange{k.id, k.col});
    v.setAlignment(16);
    Value f = v;
    if (!inType.isF32())
      f = arith::ExtFOp::create(b, loc, f32Vec, f);
    scf::YieldOp::create(b, loc, f);
    b.setInsertionPointToStart(pick.elseBlock());
    scf::YieldOp::create(b, loc, ValueRange{arith::ConstantOp::create(
                                     b, loc, f32Vec, DenseElementsAttr::get(f32Vec, b.getF32FloatAttr(0)))});
    return pick.getResult(0);
  };
  auto store = [&](OpBuilder &b, Location loc, const Chunk &k, Value v) {
    if (!outType.isF32())
      v = arith::TruncFOp::create(b, loc, outVec, v);
    auto st = vector::StoreOp::create(b, loc, v, op.getY(), ValueRange{k.tok, k.col});
    st.setAlignment(16);
  };
  // A trip's ids, then its rows, then its stores.
  groupedThreadLoop(b, loc, total, width, [&](OpBuilder &b, Location loc, ArrayRef<Value> cs) {
    SmallVector<Chunk> ks;
    SmallVector<Value> vs;
    for (Value c : cs)
      ks.push_back(chunkAt(b, loc, c));
    for (const Chunk &k : ks)
      vs.push_back(load(b, loc, k));
    for (auto [k, v] : llvm::zip(ks, vs))
      store(b, loc, k, v);
  });
  op.erase();
  return true;
}

void lowerEmbedding(EmbeddingOp op, bool gpu, int64_t width) {
  if (gpu && lowerEmbeddingVector(op, width))
    return;
  OpBuilder b(op);
  Location loc = op.getLoc();
  TileBuilder h{b, loc};
  Value vocab = memref::DimOp::create(b, loc, op.getTable(), 0);
  Value hidden = memref::DimOp::create(b, loc, op.getTable(), 1);
  Value m = memref::DimOp::create(b, loc, op.getY(), 0);
  Type outType = op.getY().getType().getElementType();
  Value total = arith::MulIOp::create(b, loc, m, hidden);
  threadLoop(b, loc, total, [&](OpBuilder &b, Location loc, Value e) {
    Value tok = arith::DivUIOp::create(b, loc, e, hidden);
    Value j = arith::RemUIOp::create(b, loc, e, hidden);
    Value id = idToIndex(b, loc, memref::LoadOp::create(b, loc, op.getIds(), ValueRange{tok}));
    Value valid = arith::AndIOp::create(
        b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, id, h.idx(0)),
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, id, vocab));
    auto pick = scf::IfOp::create(b, loc, TypeRange{b.getF32Type()}, valid, /*withElse=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(pick.thenBlock());
      Value v = toF32(b, loc, memref::LoadOp::create(b, loc, op.getTable(), ValueRange{id, j}));
      scf::YieldOp::create(b, loc, ValueRange{v});
      b.setInsertionPointToStart(pick.elseBlock());
      scf::YieldOp::create(b, loc, ValueRange{h.f32(0)});
    }
    memref::StoreOp::create(b, loc, fromF32(b, loc, pick.getResult(0), outType), op.getY(),
                            ValueRange{tok, j});
  });
  op.erase();
}

/// KV append: thread-strided elements. With `width` (rows-in-flight) above
/// 1, whole trips of `width` x threads elements load all of theirs before
/// any store (a prompt's 8-row tile appends 8 x 8 x 64 elements per cache on
/// 256 threads: one at a time, 16 dependent round trips), and the rest go
/// one per thread and trip.
void lowerKVAppend(KVAppendOp op, int64_t width) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  Value src = op.getNewValues(), cache = op.getCache();
  Value m = memref::DimOp::create(b, loc, src, 0);
  Value heads = memref::DimOp::create(b, loc, src, 1);
  Value d = memref::DimOp::create(b, loc, src, 2);
  Value s = memref::DimOp::create(b, loc, cache, 0);
  Value perTok = arith::MulIOp::create(b, loc, heads, d);
  Value total = arith::MulIOp::create(b, loc, m, perTok);
  Type outType = op.getCache().getType().getElementType();
  // Element e: its (token, head, dim) in src, its cache row, whether that
  // row is inside the cache.
  struct Element {
    Value tok, hh, dd, row, inside;
  };
  auto element = [&](OpBuilder &b, Location loc, Value e) {
    Element el;
    el.tok = arith::DivUIOp::create(b, loc, e, perTok);
    Value rest = arith::RemUIOp::create(b, loc, e, perTok);
    el.hh = arith::DivUIOp::create(b, loc, rest, d);
    el.dd = arith::RemUIOp::create(b, loc, rest, d);
    el.row = arith::AddIOp::create(b, loc, op.getPosition(), el.tok);
    el.inside = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, el.row, s);
    return el;
  };
  auto load = [&](OpBuilder &b, Location loc, const Element &el) {
    return toF32(b, loc, memref::LoadOp::create(b, loc, src, ValueRange{el.tok, el.hh, el.dd}));
  };
  auto store = [&](OpBuilder &b, Location loc, const Element &el, Value v) {
    auto guard = scf::IfOp::create(b, loc, el.inside, /*withElse=*/false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(guard.thenBlock());
    memref::StoreOp::create(b, loc, fromF32(b, loc, v, outType), cache, ValueRange{el.row, el.hh, el.dd});
  };
  groupedThreadLoop(b, loc, total, width, [&](OpBuilder &b, Location loc, ArrayRef<Value> es) {
    SmallVector<Element> els;
    SmallVector<Value> vs;
    for (Value e : es) {
      els.push_back(element(b, loc, e));
      vs.push_back(load(b, loc, els.back()));
    }
    for (auto [el, v] : llvm::zip(els, vs))
      store(b, loc, el, v);
  });
  op.erase();
}

/// cos and sin of the RoPE angle `pos * inv_freq[i]` (f32 `pos`, `i`, `d`):
/// inv_freq[i] = theta ^ (-2i / d), with Llama-3's frequency scaling when
/// `scaling` is given (et.rope's description).
std::pair<Value, Value> ropeAngle(OpBuilder &b, Location loc, float theta, std::optional<ArrayRef<float>> scaling,
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
std::pair<Value, Value> ropeRotate(OpBuilder &b, Location loc, Value x1, Value x2, Value c, Value sn) {
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
void lowerRoPE(RoPEOp op) {
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
void lowerRoPEInto(RoPEIntoOp op, bool gpu) {
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

/// Whether (v, i) beats (bv, bi) in an argmax: v > bv, or equal with a
/// smaller index (NaN never wins).
Value argmaxBetter(OpBuilder &b, Location loc, Value v, Value i, Value bv, Value bi) {
  Value gt = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, v, bv);
  Value eq = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, v, bv);
  Value smaller = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, i, bi);
  return arith::OrIOp::create(b, loc, gt, arith::AndIOp::create(b, loc, eq, smaller));
}

/// The best (value, index) over each aligned group of `width` lanes, in
/// every lane of the group (no shuffles for width 1).
std::pair<Value, Value> argmaxButterfly(OpBuilder &b, Location loc, Value bv, Value bi, int64_t width) {
  for (int64_t offset = width / 2; offset >= 1; offset /= 2) {
    Value ov = shuffleXor(b, loc, bv, offset);
    Value oi = shuffleXor(b, loc, bi, offset);
    Value take = argmaxBetter(b, loc, ov, oi, bv, bi);
    bv = arith::SelectOp::create(b, loc, take, ov, bv);
    bi = arith::SelectOp::create(b, loc, take, oi, bi);
  }
  return {bv, bi};
}

/// The best (value, index) of token `tok`'s columns first, first + step,
/// ... below `end` (the index from `from` when the op has it).
std::pair<Value, Value> argmaxScan(OpBuilder &b, Location loc, ArgmaxOp op, Value tok, Value first, Value end,
                                   Value step) {
  Type i32 = b.getI32Type();
  Value negInf = arith::ConstantFloatOp::create(b, loc, b.getF32Type(),
                                                APFloat(-std::numeric_limits<float>::infinity()));
  Value noIndex = arith::ConstantIntOp::create(b, loc, i32, std::numeric_limits<int32_t>::max());
  auto scan = scf::ForOp::create(
      b, loc, first, end, step, ValueRange{negInf, noIndex},
      [&](OpBuilder &b, Location loc, Value j, ValueRange best) {
        Value v = toF32(b, loc, memref::LoadOp::create(b, loc, op.getX(), ValueRange{tok, j}));
        Value idx = op.getFrom()
                        ? memref::LoadOp::create(b, loc, op.getFrom(), ValueRange{tok, j}).getResult()
                        : arith::IndexCastOp::create(b, loc, i32, j).getResult();
        Value take = argmaxBetter(b, loc, v, idx, best[0], best[1]);
        scf::YieldOp::create(b, loc,
                             ValueRange{arith::SelectOp::create(b, loc, take, v, best[0]),
                                        arith::SelectOp::create(b, loc, take, idx, best[1])});
      });
  return {scan.getResult(0), scan.getResult(1)};
}

/// Where `cond` holds, token `tok`'s result: `value` into values[tok, slot]
/// and `index` into indices[tok, slot].
void storeArgmax(OpBuilder &b, Location loc, ArgmaxOp op, Value cond, Value tok, Value value, Value index) {
  auto ifOp = scf::IfOp::create(b, loc, cond, /*withElse=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  memref::StoreOp::create(b, loc, value, op.getValues(), ValueRange{tok, op.getSlot()});
  memref::StoreOp::create(b, loc, index, op.getIndices(), ValueRange{tok, op.getSlot()});
}

/// Argmax: `lanes` threads (warp 0 on the GPU, thread 0 on the CPU) stride
/// over the columns, keep (value, index) with ties to the smaller index,
/// then combine with a shuffle butterfly.
void lowerArgmax(ArgmaxOp op, bool gpu) {
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
        auto [sv, si] = argmaxScan(b, loc, op, tok, first, end, h.idx(lanes));
        auto [bv, bi] = argmaxButterfly(b, loc, sv, si, lanes);
        storeArgmax(b, loc, op, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, lane, h.idx(0)), tok,
                    bv, bi);
        scf::YieldOp::create(b, loc);
      });
  op.erase();
}

/// GPU argmax with every thread of the worker: threads stride over the
/// columns, each warp combines its lanes with a butterfly, the warps'
/// results meet in shared memory, and warp 0 combines them (one warp
/// scanning a 1000-column chunk took one L2 round trip per 32 columns).
void lowerArgmaxBlock(ArgmaxOp op) {
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
  Value noIndex = arith::ConstantIntOp::create(b, loc, i32, std::numeric_limits<int32_t>::max());
  Value isLane0 = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, g.lane, h.idx(0));
  scf::ForOp::create(
      b, loc, h.idx(0), m, h.idx(1), ValueRange{},
      [&](OpBuilder &b, Location loc, Value tok, ValueRange) {
        auto [sv, si] = argmaxScan(b, loc, op, tok, first, end, g.threads);
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
                                          noIndex);
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

/// The positions [start, end) of an attention split: start = split x
/// split_len, end = min(start + split_len, len, cache length). `end` may be
/// below `start` (an empty split).
std::pair<Value, Value> splitRange(OpBuilder &b, Location loc, AttentionSplitOp op) {
  Value start = arith::MulIOp::create(b, loc, op.getSplit(), op.getSplitLen());
  Value end = arith::MinSIOp::create(
      b, loc, arith::MinSIOp::create(b, loc, arith::AddIOp::create(b, loc, start, op.getSplitLen()), op.getLen()),
      memref::DimOp::create(b, loc, op.getK(), 0));
  return {start, end};
}

/// Chunk `chunk` of a split of `subsplits` output entries: its positions
/// [start, end) (empty when end <= start) and its entry, split x
/// subsplits + chunk. `splitStart` and `splitEnd` are the split's range
/// (splitRange).
struct SplitChunk {
  Value start, end, entry;
};
SplitChunk splitChunk(OpBuilder &b, Location loc, AttentionSplitOp op, Value splitStart, Value splitEnd,
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

/// The positions [lo, hi) of an op's `append` rows that fall in its split's
/// range [start, end) (splitRange); empty when hi <= lo.
std::pair<Value, Value> appendRange(OpBuilder &b, Location loc, AttentionSplitOp op, Value start, Value end) {
  Value stable = op.getStable();
  Value rows = memref::DimOp::create(b, loc, op.getNewK(), 0);
  Value lo = arith::MaxSIOp::create(b, loc, stable, start);
  Value hi = arith::MinSIOp::create(b, loc, end, arith::AddIOp::create(b, loc, stable, rows));
  return {lo, hi};
}

/// Element `d` of position `t`'s appended key (`which` = 0) or value (1):
/// read from the op's new_k / new_v, rounded to the cache's element type,
/// stored into the cache's row `t`; returns the stored value.
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
void appendToCaches(AttentionSplitOp op, bool gpu) {
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
void lowerAttentionSplit(AttentionSplitOp op, bool gpu) {
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

/// A constant upper bound of a non-negative integer or index value (a
/// length): a constant, an index cast of a value with a bound, or the
/// minimum (arith.minui, arith.minsi) of values one of which has a bound.
/// For values that are not negative, signed and unsigned minima and casts
/// agree.
std::optional<int64_t> constantUpperBound(Value v) {
  if (std::optional<int64_t> c = getConstantIntValue(v))
    return c;
  Operation *def = v.getDefiningOp();
  if (isa_and_nonnull<arith::IndexCastOp, arith::IndexCastUIOp>(def))
    return constantUpperBound(def->getOperand(0));
  if (!def || !isa<arith::MinUIOp, arith::MinSIOp>(def))
    return std::nullopt;
  std::optional<int64_t> lhs = constantUpperBound(def->getOperand(0));
  std::optional<int64_t> rhs = constantUpperBound(def->getOperand(1));
  if (lhs && rhs)
    return std::min(*lhs, *rhs);
  return lhs ? lhs : rhs;
}

/// Combines the partial results of the warps of one output entry of
/// et.attention_split: warp w left the running maximum and sum of head g
/// (base 2) in ml[w, g, 0 / 1] and its unnormalized output in acc[w, g, :]
/// (a warp with no positions: a maximum of -1e30 and zeros). One thread
/// per (head, d) writes o[entry, headBase + g, d] and lse[entry, headBase + g].
void combineWarps(OpBuilder &b, Location loc, AttentionSplitOp op, Value smemAcc, Value smemML, Value warps,
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
/// copy bandwidth slower at 4k-8k context; docs/benchmarks.md.)
constexpr int64_t kMmaBlock = 16;
constexpr int64_t kMmaSlots = 2;

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

/// The thread id through an opaque move (inline PTX with side effects), so
/// that no per-thread value derived from it is hoisted out of the worker's
/// loop over tiles, where it would hold registers through every task.
Value opaqueThreadId(OpBuilder &b, Location loc) {
  Type i64 = b.getI64Type();
  Value tid = ThreadIdOp::create(b, loc, b.getIndexType());
  Value moved = LLVM::InlineAsmOp::create(b, loc, i64, ValueRange{arith::IndexCastOp::create(b, loc, i64, tid)},
                                          "mov.b64 $0, $1;", "=l,l", /*has_side_effects=*/true,
                                          /*is_align_stack=*/false, LLVM::tailcallkind::TailCallKind::None,
                                          LLVM::AsmDialectAttr(), ArrayAttr())
                    .getResult(0);
  return arith::IndexCastOp::create(b, loc, b.getIndexType(), moved);
}

/// GPU split-KV attention with the split's K and V rows staged in shared
/// memory (kv-prefetch=shared): for an op with a `stable` operand, a static
/// split length whose K and V rows fit in stageBytes, and D in {64, 128},
/// its K and V rows in [start, min(end, stable)) are copied into the
/// kernel's dynamic shared memory with `cp.async` before the task's first
/// wait (prefetchPoint; the op may sit in an scf.if), 16-byte chunk c of
/// row r at chunk c ^ (r mod 8), so that neither the row-per-lane reads of
/// the scores nor the chunk-per-lane reads of P.V conflict on banks. After
/// the wait, in shared memory:
///   1. the split's other rows (from `stable` on) copied in the same way,
///      and q of the group's heads, scaled by scale * log2(e);
///   2. the scores, one thread per (head, position), each reading the
///      whole K row (no shuffles);
///   3. per head, one warp takes the maximum, turns the scores into
///      exp2(s - max) and sums them;
///   4. P.V, a lane per (16-byte chunk of D, head) and warps taking
///      positions in turn, the warps summed through shared memory and
///      divided by the sum; lse = (max + log2(sum)) ln 2.
/// Returns false (and changes nothing) when it does not apply; the op is
/// then lowered without staging.
bool lowerAttentionSplitStaged(AttentionSplitOp op, int64_t threads, int64_t stageBytes,
                               llvm::DenseSet<Operation *> &sharedTaken) {
  MemRefType qType = op.getQ().getType(), kType = op.getK().getType();
  int64_t dim = qType.getDimSize(1);
  if (stageBytes <= 0 || !op.getStable() || op.getSubsplits() != 1 || qType.isDynamicDim(0) ||
      kType.isDynamicDim(1) || (dim != 64 && dim != 128) || !kType.getElementType().isBF16() ||
      !op.getV().getType().getElementType().isBF16())
    return false;
  auto task = op->getParentOfType<TaskOp>();
  // The stage and the score rows are sized for the longest split the op
  // can take: a constant split length, or a bound of a computed one.
  std::optional<int64_t> splitLen = constantUpperBound(op.getSplitLen());
  if (!task || sharedTaken.contains(task) || !splitLen || *splitLen < 1)
    return false;
  int64_t groupSize = qType.getDimSize(0) / kType.getDimSize(1);
  int64_t maxWarps = (threads > 0 ? threads : 1024) / kWarp;
  int64_t chunks = dim / kVector; // 16-byte chunks per row: 8 or 16
  int64_t staticBytes =
      4 * (groupSize * dim + groupSize * *splitLen + 2 * groupSize + maxWarps * groupSize * dim);
  // The whole split must fit: every row of it goes into the stage. (An
  // earlier version read the rows past the budget from the cache, a whole
  // row per thread, at half the speed of the pipelined loop: split length
  // 1024 in a 128 KB budget.)
  int64_t stageRows = *splitLen;
  if (stageBytes < 4 * dim * stageRows)
    return false;
  // P.V puts (chunk, head) pairs on a warp's lanes: G must divide 32 /
  // chunks or be a multiple of it.
  int64_t slots = kWarp / chunks;
  bool headsFit = groupSize <= slots ? slots % groupSize == 0 : groupSize % slots == 0;
  if (maxWarps < 1 || groupSize < 1 || groupSize > 16 || !headsFit || staticBytes > 48 * 1024)
    return false;
  Operation *stageAt = prefetchPoint(op,
                                     {op.getK(), op.getV(), op.getKvHead(), op.getSplit(), op.getSplitLen(),
                                      op.getLen(), op.getStable()},
                                     /*inIf=*/true);
  if (!stageAt)
    return false;
  sharedTaken.insert(task);
  Location loc = op.getLoc();
  Type f32 = Float32Type::get(op.getContext()), bf16 = BFloat16Type::get(op.getContext());
  auto vecF32 = VectorType::get({kVector}, f32);
  auto vecBF16 = VectorType::get({kVector}, bf16);

  // Element offset of chunk `c` of staged row `r` (K when which = 0, V when 1).
  auto stagedOffset = [&](OpBuilder &b, Value r, Value c, int64_t which) -> Value {
    TileBuilder h{b, loc};
    Value swz = arith::XOrIOp::create(b, loc, c, arith::AndIOp::create(b, loc, r, h.idx(7)));
    return arith::AddIOp::create(
        b, loc,
        arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, r, h.idx(dim)),
                              arith::MulIOp::create(b, loc, swz, h.idx(kVector))),
        h.idx(which * stageRows * dim));
  };

  // Copies rows [from, to) of the split (K and V) into their stage slots
  // with cp.async, one 16-byte chunk per thread and trip, and commits them.
  // With `appendEnd`, a row below it is one of the op's `append` rows
  // (this step's): its chunk comes from the op's new_k / new_v instead,
  // rounded to bf16, into the stage and into the cache's row.
  Value stage, start;
  auto copyRows = [&](OpBuilder &b, Value from, Value to, Value appendEnd) {
    TileBuilder h{b, loc};
    Value n = arith::MaxSIOp::create(b, loc, arith::SubIOp::create(b, loc, to, from), h.idx(0));
    threadLoop(b, loc, arith::MulIOp::create(b, loc, n, h.idx(chunks)), [&](OpBuilder &b, Location loc, Value i) {
      TileBuilder h{b, loc};
      Value r = arith::AddIOp::create(b, loc, from, arith::DivUIOp::create(b, loc, i, h.idx(chunks)));
      Value c = arith::RemUIOp::create(b, loc, i, h.idx(chunks));
      Value t = arith::AddIOp::create(b, loc, start, r);
      Value caches[] = {op.getK(), op.getV()};
      auto fromCaches = [&](OpBuilder &b) {
        for (auto [which, mem] : llvm::enumerate(caches)) {
          auto meta = memref::ExtractStridedMetadataOp::create(b, loc, mem);
          Value element = arith::AddIOp::create(
              b, loc,
              arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, t, meta.getStrides()[0]),
                                    arith::MulIOp::create(b, loc, op.getKvHead(), meta.getStrides()[1])),
              arith::MulIOp::create(b, loc, c, h.idx(kVector)));
          Value src = elementPointer(b, loc, mem, element, 2, 1);
          Value dst = elementPointer(b, loc, stage, stagedOffset(b, r, c, which), 2, 3);
          copyAsync16(b, loc, dst, src);
        }
      };
      if (!appendEnd) {
        fromCaches(b);
        return;
      }
      Value appended = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, t, appendEnd);
      auto pick = scf::IfOp::create(b, loc, appended, /*withElse=*/true);
      {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(pick.thenBlock());
        Value d0 = arith::MulIOp::create(b, loc, c, h.idx(kVector));
        for (int64_t which = 0; which < 2; ++which) {
          Value chunk = arith::ConstantOp::create(b, loc, vecBF16, cast<TypedAttr>(b.getZeroAttr(vecBF16)));
          for (int64_t e = 0; e < kVector; ++e) {
            Value y = appendElement(b, loc, op, which, t, arith::AddIOp::create(b, loc, d0, h.idx(e)));
            chunk = vector::InsertOp::create(b, loc, y, chunk, ArrayRef<int64_t>{e});
          }
          auto st = vector::StoreOp::create(b, loc, chunk, stage, ValueRange{stagedOffset(b, r, c, which)});
          st.setAlignment(16);
        }
      }
      {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(pick.elseBlock());
        fromCaches(b);
      }
    });
    NVVM::CpAsyncCommitGroupOp::create(b, loc);
  };

  // Before the wait: the copies.
  // The split's range (computed before the wait, used after it too).
  Value stageCount, end;
  {
    OpBuilder b(stageAt);
    TileBuilder h{b, loc};
    stage = workgroupBuffer(task, loc, {2 * stageRows * dim}, bf16);
    stage.getDefiningOp()->setAttr(EventTensorDialect::getDynamicSharedAttrName(), b.getUnitAttr());
    std::tie(start, end) = splitRange(b, loc, op);
    stageCount = arith::MaxSIOp::create(
        b, loc,
        arith::MinSIOp::create(
            b, loc, arith::SubIOp::create(b, loc, arith::MinSIOp::create(b, loc, end, op.getStable()), start),
            h.idx(stageRows)),
        h.idx(0));
    copyRows(b, h.idx(0), stageCount, Value());
    // An op inside an scf.if may not run: no copy outlives the task.
    Operation *top = task.getBody().front().findAncestorOpInBlock(*op);
    if (top != op.getOperation()) {
      OpBuilder after(top->getContext());
      after.setInsertionPointAfter(top);
      NVVM::CpAsyncWaitGroupOp::create(after, loc, 0);
    }
  }

  OpBuilder b(op);
  TileBuilder h{b, loc};
  Value qs = workgroupBuffer(task, loc, {groupSize, dim}, f32);
  Value scores = workgroupBuffer(task, loc, {groupSize, *splitLen}, f32);
  Value ml = workgroupBuffer(task, loc, {groupSize, 2}, f32);
  Value part = workgroupBuffer(task, loc, {maxWarps, groupSize, dim}, f32);
  Value floor = h.f32(-1e30);
  Value zeroVec = arith::ConstantOp::create(b, loc, vecF32, DenseElementsAttr::get(vecF32, APFloat(0.0f)));
  Value count = arith::MaxSIOp::create(b, loc, arith::SubIOp::create(b, loc, end, start), h.idx(0));
  Value headBase = arith::MulIOp::create(b, loc, op.getKvHead(), h.idx(groupSize));
  auto load = [&](OpBuilder &b, Value mem, ValueRange idx, VectorType type) -> Value {
    auto l = vector::LoadOp::create(b, loc, type, mem, idx);
    l.setAlignment(16);
    return l;
  };
  auto ext = [&](OpBuilder &b, Value v) -> Value { return arith::ExtFOp::create(b, loc, vecF32, v); };
  // Chunks `cs` of row i of K (which = 0) or V (1), from the stage.
  auto rowChunks = [&](OpBuilder &b, Value i, ArrayRef<Value> cs, int64_t which) -> SmallVector<Value> {
    SmallVector<Value> vals;
    for (Value c : cs)
      vals.push_back(load(b, stage, ValueRange{stagedOffset(b, i, c, which)}, vecBF16));
    return vals;
  };

  // The rows at or past `stable` (this step's, written by the task waited
  // for) join the stage, their copies in flight with the loads of q of the
  // group's heads (scaled, base 2); then every phase reads shared memory
  // only. (Read from the cache in the phases, the one row of a decode step
  // cost the split that holds it two more L2 round trips, and that split
  // ends last.)
  Value appendEnd;
  if (op.getNewK())
    appendEnd = appendRange(b, loc, op, start, end).second;
  copyRows(b, stageCount, count, appendEnd);
  float scale = op.getScale().convertToFloat() * static_cast<float>(M_LOG2E);
  threadLoop(b, loc, h.idx(groupSize * dim), [&](OpBuilder &b, Location loc, Value e) {
    TileBuilder h{b, loc};
    Value g = arith::DivUIOp::create(b, loc, e, h.idx(dim));
    Value d = arith::RemUIOp::create(b, loc, e, h.idx(dim));
    Value qv = toF32(b, loc, memref::LoadOp::create(b, loc, op.getQ(),
                                                    ValueRange{arith::AddIOp::create(b, loc, headBase, g), d}));
    memref::StoreOp::create(b, loc, arith::MulFOp::create(b, loc, qv, h.f32(scale)), qs, ValueRange{g, d});
  });
  NVVM::CpAsyncWaitGroupOp::create(b, loc, 0);
  gpu::BarrierOp::create(b, loc);

  // Scores: one thread per (head, position), consecutive threads on
  // consecutive positions of one head: their q reads are one broadcast and
  // their K reads (swizzled rows) do not conflict. (With one thread per
  // position for every head, q of all heads is loop-invariant and LLVM
  // hoisted it into registers, 256 floats for Llama's group; with the head
  // varying fastest, the q reads of a warp conflicted 4-way on banks and
  // took 4.5 us for 256 positions.)
  threadLoop(b, loc, arith::MulIOp::create(b, loc, count, h.idx(groupSize)),
             [&](OpBuilder &b, Location loc, Value item) {
               TileBuilder h{b, loc};
               Value g = arith::DivUIOp::create(b, loc, item, count);
               Value i = arith::RemUIOp::create(b, loc, item, count);
               SmallVector<Value> cs;
               for (int64_t c = 0; c < chunks; ++c)
                 cs.push_back(h.idx(c));
               SmallVector<Value> kRow = rowChunks(b, i, cs, 0);
               Value acc;
               for (int64_t c = 0; c < chunks; ++c) {
                 Value kc = ext(b, kRow[c]);
                 Value qc = load(b, qs, ValueRange{g, h.idx(c * kVector)}, vecF32);
                 acc = acc ? vector::FMAOp::create(b, loc, kc, qc, acc).getResult()
                           : arith::MulFOp::create(b, loc, kc, qc).getResult();
               }
               memref::StoreOp::create(b, loc, vector::ReductionOp::create(b, loc, vector::CombiningKind::ADD, acc),
                                       scores, ValueRange{g, i});
             });
  gpu::BarrierOp::create(b, loc);

  // Softmax: a warp per head.
  Groups warpsOf = h.groups(kWarp);
  Value lane = warpsOf.lane, warp = warpsOf.group, warps = warpsOf.groups;
  scf::ForOp::create(
      b, loc, warp, h.idx(groupSize), warps, ValueRange{},
      [&](OpBuilder &b, Location loc, Value g, ValueRange) {
        TileBuilder h{b, loc};
        auto mx = scf::ForOp::create(
            b, loc, lane, count, h.idx(kWarp), ValueRange{floor},
            [&](OpBuilder &b, Location loc, Value j, ValueRange a) {
              Value s = memref::LoadOp::create(b, loc, scores, ValueRange{g, j});
              scf::YieldOp::create(b, loc, ValueRange{arith::MaximumFOp::create(b, loc, a[0], s)});
            });
        Value m = mx.getResult(0);
        for (int64_t off = 1; off < kWarp; off *= 2)
          m = arith::MaximumFOp::create(b, loc, m, shuffleXor(b, loc, m, off));
        auto sum = scf::ForOp::create(
            b, loc, lane, count, h.idx(kWarp), ValueRange{h.f32(0)},
            [&](OpBuilder &b, Location loc, Value j, ValueRange a) {
              Value p = math::Exp2Op::create(
                  b, loc, arith::SubFOp::create(b, loc, memref::LoadOp::create(b, loc, scores, ValueRange{g, j}), m));
              memref::StoreOp::create(b, loc, p, scores, ValueRange{g, j});
              scf::YieldOp::create(b, loc, ValueRange{arith::AddFOp::create(b, loc, a[0], p)});
            });
        Value l = butterflySum(b, loc, sum.getResult(0), kWarp);
        Value isLane0 = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, lane, h.idx(0));
        auto store = scf::IfOp::create(b, loc, isLane0, /*withElse=*/false);
        {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(store.thenBlock());
          memref::StoreOp::create(b, loc, m, ml, ValueRange{g, h.idx(0)});
          memref::StoreOp::create(b, loc, l, ml, ValueRange{g, h.idx(1)});
        }
        scf::YieldOp::create(b, loc);
      });
  gpu::BarrierOp::create(b, loc);

  // P.V: lane (chunk c, head slot r) of a warp, r = lane / chunks in
  // [0, 32 / chunks): with G up to 32 / chunks heads, the lanes of a
  // position cover every (chunk, head) pair and `subs` positions go side
  // by side; with more heads, a lane takes heads r, r + 32 / chunks, ...
  // Warps take positions in turn. No shuffles unless subs > 1.
  int64_t headSlots = kWarp / chunks;
  int64_t subs = headSlots / std::min(groupSize, headSlots);
  int64_t perLane = groupSize > headSlots ? groupSize / headSlots : 1;
  Value c = arith::RemUIOp::create(b, loc, lane, h.idx(chunks));
  Value r = arith::DivUIOp::create(b, loc, lane, h.idx(chunks));
  Value gBase = subs > 1 ? arith::RemUIOp::create(b, loc, r, h.idx(groupSize)).getResult() : r;
  Value sub = subs > 1 ? arith::DivUIOp::create(b, loc, r, h.idx(groupSize)).getResult() : h.idx(0);
  SmallVector<Value> heads;
  for (int64_t k = 0; k < perLane; ++k)
    heads.push_back(arith::AddIOp::create(b, loc, gBase, h.idx(k * headSlots)));
  Value first = arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, warp, h.idx(subs)), sub);
  SmallVector<Value> init(perLane, zeroVec);
  auto pv = scf::ForOp::create(
      b, loc, first, count, arith::MulIOp::create(b, loc, warps, h.idx(subs)), init,
      [&](OpBuilder &b, Location loc, Value i, ValueRange acc) {
        Value v = ext(b, rowChunks(b, i, {c}, 1)[0]);
        SmallVector<Value> next;
        for (int64_t k = 0; k < perLane; ++k) {
          Value p = memref::LoadOp::create(b, loc, scores, ValueRange{heads[k], i});
          next.push_back(vector::FMAOp::create(b, loc, vector::BroadcastOp::create(b, loc, vecF32, p), v, acc[k]));
        }
        scf::YieldOp::create(b, loc, next);
      });
  SmallVector<Value> acc(pv.getResults());
  for (int64_t off = chunks * groupSize; off < kWarp; off *= 2)
    for (int64_t k = 0; k < perLane; ++k) {
      Value other = acc[k];
      for (int64_t e = 0; e < kVector; ++e) {
        Value x = vector::ExtractOp::create(b, loc, acc[k], ArrayRef<int64_t>{e});
        other = vector::InsertOp::create(b, loc, shuffleXor(b, loc, x, off), other, ArrayRef<int64_t>{e});
      }
      acc[k] = arith::AddFOp::create(b, loc, acc[k], other);
    }
  Value publish = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, sub, h.idx(0));
  auto pub = scf::IfOp::create(b, loc, publish, /*withElse=*/false);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(pub.thenBlock());
    Value d0 = arith::MulIOp::create(b, loc, c, h.idx(kVector));
    for (int64_t k = 0; k < perLane; ++k) {
      auto st = vector::StoreOp::create(b, loc, acc[k], part, ValueRange{warp, heads[k], d0});
      st.setAlignment(16);
    }
  }
  gpu::BarrierOp::create(b, loc);

  // Sum the warps, divide, store o and lse.
  Value negInf = h.f32(-std::numeric_limits<float>::infinity());
  threadLoop(b, loc, h.idx(groupSize * dim), [&](OpBuilder &b, Location loc, Value e) {
    TileBuilder h{b, loc};
    Value g = arith::DivUIOp::create(b, loc, e, h.idx(dim));
    Value d = arith::RemUIOp::create(b, loc, e, h.idx(dim));
    auto total = scf::ForOp::create(
        b, loc, h.idx(0), warps, h.idx(1), ValueRange{h.f32(0)},
        [&](OpBuilder &b, Location loc, Value w, ValueRange a) {
          scf::YieldOp::create(b, loc, ValueRange{arith::AddFOp::create(
                                           b, loc, a[0], memref::LoadOp::create(b, loc, part, ValueRange{w, g, d}))});
        });
    Value m = memref::LoadOp::create(b, loc, ml, ValueRange{g, h.idx(0)});
    Value l = memref::LoadOp::create(b, loc, ml, ValueRange{g, h.idx(1)});
    Value empty = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLE, l, h.f32(0));
    Value safeL = arith::SelectOp::create(b, loc, empty, h.f32(1), l);
    Value out = arith::SelectOp::create(b, loc, empty, h.f32(0),
                                        arith::DivFOp::create(b, loc, total.getResult(0), safeL));
    Value head = arith::AddIOp::create(b, loc, headBase, g);
    memref::StoreOp::create(b, loc, out, op.getO(), ValueRange{op.getSplit(), head, d});
    Value isD0 = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, d, h.idx(0));
    auto storeLse = scf::IfOp::create(b, loc, isD0, /*withElse=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(storeLse.thenBlock());
    Value lse = arith::MulFOp::create(
        b, loc, arith::AddFOp::create(b, loc, m, math::Log2Op::create(b, loc, safeL)), h.f32(M_LN2));
    lse = arith::SelectOp::create(b, loc, empty, negInf, lse);
    memref::StoreOp::create(b, loc, lse, op.getLse(), ValueRange{op.getSplit(), head});
  });
  // Later ops reuse the shared buffers.
  gpu::BarrierOp::create(b, loc);
  op.erase();
  return true;
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
/// buffer). Returns false (and changes nothing) when the shapes do not fit.
bool lowerAttentionSplitGPU(AttentionSplitOp op, int64_t threads) {
  MemRefType qType = op.getQ().getType(), kType = op.getK().getType();
  int64_t dim = qType.getDimSize(1);
  if (qType.isDynamicDim(0) || kType.isDynamicDim(1) || (dim != 64 && dim != 128 && dim != 256) ||
      !kType.getElementType().isBF16() || !op.getV().getType().getElementType().isBF16())
    return false;
  auto task = op->getParentOfType<TaskOp>();
  if (!task)
    return false;
  int64_t groupSize = qType.getDimSize(0) / kType.getDimSize(1);
  int64_t maxWarps = (threads > 0 ? threads : 1024) / kWarp;
  if (maxWarps < 1 || maxWarps * groupSize * (dim + 2) * 4 > 40 * 1024)
    return false;
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
  Value lane = warpsOf.lane, warp = warpsOf.group, warps = warpsOf.groups;
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
        auto loop = scf::ForOp::create(
            b, loc, warp, blocks, warps, init,
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
        Value isSlot0 = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, slot, h.idx(0));
        Value isLane0 = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, lane, h.idx(0));
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
  return true;
}

/// GPU split-KV attention on tensor cores (MmaSplitTile), for `threads`
/// fixed and `mmaBytes` of dynamic shared memory: each warp takes blocks of
/// 16 positions in turn and keeps its own ring of them (kMmaSlots slots of
/// K then V rows, each padded by 16 bytes so that ldmatrix does not
/// conflict on banks; as many warps as the bytes give a ring, the others
/// idle). Its lanes copy a block with cp.async, one block ahead
/// of the one it computes, and wait for it with cp.async.wait_group and a
/// warp barrier (no CTA barrier in the loop). The warps' partial results
/// combine through shared memory as on the CUDA cores. Returns false (op
/// untouched) when the op or the worker does not fit.
bool lowerAttentionSplitMMA(AttentionSplitOp op, int64_t threads, int64_t mmaBytes,
                            llvm::DenseSet<Operation *> &sharedTaken) {
  auto task = op->getParentOfType<TaskOp>();
  if (mmaBytes <= 0 || threads < kWarp || !task || sharedTaken.contains(task) || !MmaSplitTile::fits(op))
    return false;
  int64_t dim = op.getQ().getType().getDimSize(1);
  int64_t groupSize = op.getQ().getType().getDimSize(0) / op.getK().getType().getDimSize(1);
  const int64_t pitch = dim + 8; // bf16 elements per shared row
  const int64_t rowsBytes = kMmaBlock * pitch * 2, slotBytes = 2 * rowsBytes;
  const int64_t warps = threads / kWarp;
  // As many warps as have a ring of kMmaSlots slots in the bytes.
  const int64_t depth = kMmaSlots;
  const int64_t used = std::min(warps, mmaBytes / (depth * slotBytes));
  if (used < 1 || used * groupSize * (dim + 2) * 4 > 40 * 1024)
    return false;
  sharedTaken.insert(task);
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
  return true;
}

/// Splits per trip of the attention merge: their loads go out together.
constexpr int64_t kMergeUnroll = 4;

/// out[h, d] = sum_s exp(lse[s, h] - L) * o[s, h, d], L = log sum_s
/// exp(lse[s, h]). One pass with a running maximum, kMergeUnroll splits per
/// trip (indices past the last clamp to it and weigh nothing), so that a
/// thread's loads of a trip are in flight together: the merge runs on the
/// decode step's critical path, and a loop of one split per trip cost an
/// L2 round trip per split.
void lowerAttentionMerge(AttentionMergeOp op) {
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

/// GPU, `linear=spread`: an et.linear with a constant row count R and a
/// static K of c chunks (256 elements, one 16-byte load per lane), laid out
/// so that every warp has a share of the tile and few dependent trips to
/// memory, where one warp per row would leave warps idle or wait out one
/// short row at a time:
/// - R below the W warps: each row's K splits into G parts (the largest
///   power of two with R x G <= W that divides c), one warp each; the
///   warps' row sums meet in shared memory (a barrier), and the threads add
///   the G parts in order and store.
/// - Otherwise each warp takes P rows per trip (rows warp, warp + W, ...;
///   P x c chunks per lane <= `unroll`, R a multiple of P x W), each x chunk
///   loaded once for all of them.
/// A gated op's row is two streams (gate and up), and one trip holds both
/// rows whole when 2 x c <= `unroll`. A stream accumulates its chunks in
/// order, as the one-row-per-warp lowering does, so without a split K
/// (G = 1) the results keep their bits; with one they are rounded in
/// another order.
///
/// With `afterLinear` (another et.linear of the tile comes before this one
/// since the task's last wait), when no task writes the weights and the
/// op sits at its task's top level, each warp's first trip of weight loads
/// goes out into registers right after that wait (afterWaitPoint): in
/// flight during the linear ops before it (and a fused norm), so the tile
/// has more loads in flight. Without another linear before it, holding
/// those registers through a norm alone measured slower: the megakernel's
/// one register budget spilled elsewhere (docs/benchmarks.md).
///
/// Returns false (nothing changed) when none of this applies, or when the
/// accumulators (streams x tokens) would pass four.
bool lowerLinearGPUSpread(LinearOp op, int64_t unroll, int64_t threads, bool afterLinear) {
  constexpr int64_t step = kWarp * kVector; // elements of one chunk
  constexpr int64_t kMaxAccumulators = 4;
  auto task = op->getParentOfType<TaskOp>();
  int64_t k = op.getW().getType().getDimSize(1);
  std::optional<int64_t> rowsConst = getConstantIntValue(op.getRows());
  if (!task || threads <= 0 || threads % kWarp || !rowsConst || *rowsConst < 1 || ShapedType::isDynamic(k) ||
      k % step)
    return false;
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
    return false;
  const int64_t streams = P * nm;
  // Chunks per stream and trip.
  const int64_t u = std::min<int64_t>(q, std::max<int64_t>(1, unroll / streams));

  SmallVector<Value> mems{op.getW()};
  if (Value wu = op.getGated())
    mems.push_back(wu);
  Location loc = op.getLoc();
  auto loadRaw = [&](OpBuilder &b, Value mem, Value r, Value col) { return loadChunk(b, loc, mem, r, col); };

  // Where the warp's rows and first column are known, and its first
  // trip's loads (the op itself when they cannot go earlier).
  bool early = afterLinear && llvm::all_of(mems, isReadOnly);
  Operation *at = early ? afterWaitPoint(op, {op.getW(), op.getRow0(), op.getRows()}) : nullptr;
  if (at && op.getGated() && !moveAbove(task, at, op.getGated()))
    at = nullptr;
  OpBuilder b(at ? at : op.getOperation());
  TileBuilder h{b, loc};
  VectorType vecBF16 = VectorType::get({kVector}, b.getBF16Type());
  VectorType vecF32 = VectorType::get({kVector}, b.getF32Type());
  // Where the warp works. G = 1: its first rows (base, then base + p x W,
  // a row past `end` reading `base`); G > 1: its row and part.
  LinearCommon lc = linearCommon(b, loc, op);
  Value laneK = arith::MulIOp::create(b, loc, lc.lane, h.idx(kVector));
  Value end = arith::MinSIOp::create(b, loc, arith::AddIOp::create(b, loc, op.getRow0(), op.getRows()), lc.n);
  Value base, local, part, row, mine, col0;
  SmallVector<Value> firstRows, firstOuts, firstValid;
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
  // The first trip's weights, (chunk, row, mem)-major, loaded early into
  // registers (zeros for a warp without rows).
  SmallVector<Value> pre;
  if (at) {
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
  bool hasEarly = at != nullptr;
  b.setInsertionPoint(op);
  StagedNorm sn = stageNorm(b, loc, op, threads);
  Value isLane0 = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, lc.lane, h.idx(0));

  auto ext = [&](OpBuilder &b, Value v) -> Value { return arith::ExtFOp::create(b, loc, vecF32, v); };
  // Lane sums of `rows` (each over every mem) from column `from` on, q
  // chunks, for the tokens `toks`: stream-major (row, mem), then token.
  // With `first`, the first trip's weights are those loaded early. With
  // `squares` (norm), then the lane sums of x's squares, one per token.
  auto streamSums = [&](OpBuilder &b, ArrayRef<Value> rows, Value from, ArrayRef<Value> toks, bool first,
                        bool squares = false) -> SmallVector<Value> {
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
  };
  // The tokens of one pass: all of a static M, else token `t` of a loop
  // (with its parity).
  auto forTokens = [&](OpBuilder &b, function_ref<void(OpBuilder &, ArrayRef<Value>, Value)> body) {
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
  };

  // With `norm`: the inverse RMS of every token. The warps of a whole K
  // (G = 1) load all of x for each group of rows, and take its squares
  // with the sums (no pass of their own); split K first takes them in a
  // pass of each warp's own (normPrepass).
  if (G == 1) {
    // A group of P rows: `rows` to read (in range), `outs` to store where
    // `valid`.
    auto group = [&](OpBuilder &b, ArrayRef<Value> rows, ArrayRef<Value> outs, ArrayRef<Value> valid,
                     bool first) {
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
    };
    // The first group (with the early loads), then the others.
    {
      auto ifOp = scf::IfOp::create(b, loc, mine, /*withElse=*/false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(ifOp.thenBlock());
      group(b, firstRows, firstOuts, firstValid, hasEarly);
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
            group(b, rows, outs, valid, false);
            scf::YieldOp::create(b, loc);
          });
    op.erase();
    return true;
  }

  // G parts per row: warp w < R x G takes row w mod R, part w / R. Its sums
  // go to shared memory [parity][part][mem][row][token] (the parity of a
  // runtime token alternates, so one barrier per token suffices).
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
  op.erase();
  return true;
}

struct LowerTileOpsPass
    : public mlir::et::impl::LowerTileOpsPassBase<LowerTileOpsPass> {
  using Base::Base;
  void runOnOperation() override {
    if (target != "gpu" && target != "cpu") {
      getOperation().emitOpError("'et-lower-tile-ops' target must be gpu or "
                                 "cpu, got '")
          << target << "'";
      return signalPassFailure();
    }
    if (prefetch != "none" && prefetch != "l2" && prefetch != "registers" &&
        prefetch != "shared") {
      getOperation().emitOpError("'et-lower-tile-ops' prefetch must be none, "
                                 "l2, registers or shared, got '")
          << prefetch << "'";
      return signalPassFailure();
    }
    if (kvPrefetch != "none" && kvPrefetch != "shared") {
      getOperation().emitOpError("'et-lower-tile-ops' kv-prefetch must be none or shared, got '")
          << kvPrefetch << "'";
      return signalPassFailure();
    }
    if ((prefetch == "shared" || kvPrefetch == "shared") &&
        (prefetchBytes < 16 * 1024 || prefetchBytes > kMaxDynamicShared)) {
      getOperation().emitOpError("'et-lower-tile-ops' prefetch-bytes must be in [16384, ")
          << kMaxDynamicShared << "] for prefetch=shared or kv-prefetch=shared, got "
          << static_cast<int64_t>(prefetchBytes);
      return signalPassFailure();
    }
    if (linear != "rows" && linear != "spread") {
      getOperation().emitOpError("'et-lower-tile-ops' linear must be rows or spread, got '")
          << linear << "'";
      return signalPassFailure();
    }
    if (mma != "wgmma" && mma != "sync") {
      getOperation().emitOpError("'et-lower-tile-ops' mma must be wgmma or sync, got '") << mma << "'";
      return signalPassFailure();
    }
    if (kvMmaBytes < 0 || kvMmaBytes > kMaxDynamicShared) {
      getOperation().emitOpError("'et-lower-tile-ops' kv-mma-bytes must be in [0, ")
          << kMaxDynamicShared << "], got " << static_cast<int64_t>(kvMmaBytes);
      return signalPassFailure();
    }
    if (stageBytes < 0 || stageBytes > kMaxDynamicShared) {
      getOperation().emitOpError("'et-lower-tile-ops' stage-bytes must be in [0, ")
          << kMaxDynamicShared << "], got " << static_cast<int64_t>(stageBytes);
      return signalPassFailure();
    }
    if (unroll < 1) {
      getOperation().emitOpError("'et-lower-tile-ops' needs unroll >= 1, got ")
          << static_cast<int64_t>(unroll);
      return signalPassFailure();
    }
    if (rowsInFlight < 1 || kNormChunk % rowsInFlight) {
      getOperation().emitOpError("'et-lower-tile-ops' rows-in-flight must be 1, 2, 4, 8 or 16, got ")
          << static_cast<int64_t>(rowsInFlight);
      return signalPassFailure();
    }
    SmallVector<Operation *> ops;
    SmallVector<MatmulOp> matmuls;
    getOperation().walk([&](Operation *op) {
      if (auto matmul = dyn_cast<MatmulOp>(op))
        matmuls.push_back(matmul);
      else if (isTileOp(op) && !isa<LinearOp>(op)) // linear ops go last, below
        ops.push_back(op);
    });
    bool gpu = target == "gpu";
    // On the host a tile runs on one thread, so a task's workgroup buffers
    // (per-tile shared memory on the GPU) are ordinary per-tile memory:
    // the memory space goes from every value that views them.
    if (!gpu)
      getOperation().walk([](TaskOp task) {
        task.getBody().walk([](Operation *op) {
          for (Value v : op->getResults()) {
            auto type = dyn_cast<MemRefType>(v.getType());
            if (type && isa_and_nonnull<gpu::AddressSpaceAttr>(type.getMemorySpace()))
              v.setType(MemRefType::get(type.getShape(), type.getElementType(), type.getLayout()));
          }
        });
      });
    // Each tile op splits its work between the worker's threads in its own
    // way, so one op's results may be read by other threads in the next:
    // on the GPU, a CTA barrier goes before a tile op that touches a buffer
    // which a tile op since the last barrier writes (or writes one it
    // reads), in every block of a task body. An op holding tile ops in its
    // regions (an scf.if over the live batch rows, say) counts as one.
    // Every thread must reach a tile op anyway (they synchronize inside),
    // so the barrier is reached wherever the ops are.
    if (gpu)
      getOperation().walk([&](TaskOp task) { insertTileBarriers(task); });
    // Tasks whose dynamic shared memory an op took (one per task).
    llvm::DenseSet<Operation *> sharedTaken;
    // GEMM tiles first: their tasks' dynamic shared memory holds the
    // operand ring, so no prefetch in those tasks may take it.
    for (MatmulOp op : matmuls) {
      if (!gpu)
        lowerMatmulCPU(op);
      else if (failed(lowerMatmulGPU(op, threads, mma == "wgmma", sharedTaken)))
        return signalPassFailure();
    }
    for (Operation *op : ops) {
      if (auto silu = dyn_cast<SiluMulOp>(op))
        lowerSiluMul(silu);
      else if (auto prefetch = dyn_cast<PrefetchOp>(op))
        lowerPrefetch(prefetch, gpu);
      else if (auto norm = dyn_cast<RMSNormOp>(op))
        lowerRMSNorm(norm, gpu, gpu ? rowsInFlight : 1, threads);
      else if (auto emb = dyn_cast<EmbeddingOp>(op))
        lowerEmbedding(emb, gpu, gpu ? rowsInFlight : 1);
      else if (auto kv = dyn_cast<KVAppendOp>(op))
        lowerKVAppend(kv, gpu ? rowsInFlight : 1);
      else if (auto rope = dyn_cast<RoPEOp>(op))
        lowerRoPE(rope);
      else if (auto rope = dyn_cast<RoPEIntoOp>(op))
        lowerRoPEInto(rope, gpu);
      else if (auto attn = dyn_cast<AttentionSplitOp>(op)) {
        // The staged lowering takes `append` rows into its stage; the
        // others read them from the caches, written first.
        if (gpu && lowerAttentionSplitStaged(attn, threads, kvPrefetch == "shared" ? prefetchBytes : 0, sharedTaken))
          continue;
        if (attn.getNewK())
          appendToCaches(attn, gpu);
        if (!gpu || (!lowerAttentionSplitMMA(attn, threads, kvMmaBytes, sharedTaken) &&
                     !lowerAttentionSplitGPU(attn, threads)))
          lowerAttentionSplit(attn, gpu);
      }
      else if (auto merge = dyn_cast<AttentionMergeOp>(op))
        lowerAttentionMerge(merge);
      else if (auto prefill = dyn_cast<AttentionPrefillOp>(op)) {
        if (!gpu || !lowerAttentionPrefillGPU(prefill, threads, sharedTaken))
          lowerAttentionPrefillLoops(prefill);
      }
      else if (gpu && op->getParentOfType<TaskOp>())
        lowerArgmaxBlock(cast<ArgmaxOp>(op));
      else
        lowerArgmax(cast<ArgmaxOp>(op), gpu);
    }
    SmallVector<LinearOp> linears;
    getOperation().walk([&](LinearOp op) { linears.push_back(op); });
    // Linear ops after another one in the same block since its last wait
    // (the spread layout starts their loads early, during the ones
    // before): each linear op's run of such ops, and whether it is not
    // the run's first. Not after a staged op of its run (below): those
    // rows come from shared memory, and early loads would only hold
    // registers through them.
    llvm::DenseMap<Operation *, std::pair<int64_t, bool>> runOf;
    if (gpu && linear == "spread") {
      int64_t runs = 0;
      getOperation().walk([&](Block *block) {
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
    }
    llvm::DenseSet<int64_t> stagedRuns;
    auto earlyLoads = [&](LinearOp op) {
      auto it = runOf.find(op);
      return it != runOf.end() && it->second.second && !stagedRuns.contains(it->second.first);
    };
    // The weight prefetch applies to the tasks named in prefetch-tasks, or
    // to all when none are named.
    auto prefetched = [&](LinearOp op) {
      if (prefetchTasks.empty())
        return true;
      auto task = op->getParentOfType<TaskOp>();
      return task && llvm::is_contained(prefetchTasks, task.getSymName().str());
    };
    if (gpu && prefetch == "l2")
      for (LinearOp op : linears)
        if (prefetched(op))
          prefetchWeightsL2(op);
    if (gpu && prefetch != "none")
      for (LinearOp op : linears)
        prefetchNormL2(op);
    WeightPrefetch weights = prefetch == "registers" ? WeightPrefetch::Registers
                             : prefetch == "shared"  ? WeightPrefetch::Shared
                                                     : WeightPrefetch::None;
    // Staged bytes taken per task (stage-bytes), in the order of its ops.
    llvm::DenseMap<Operation *, int64_t> stageUsed;
    for (LinearOp op : linears) {
      if (target == "gpu") {
        bool on = prefetched(op);
        auto task = op->getParentOfType<TaskOp>();
        bool stageOn = stageTasks.empty() ||
                       (task && llvm::is_contained(stageTasks, task.getSymName().str()));
        // Short rows (K of at most 256) take their own layout, their
        // weights before the wait unless the prefetch is off.
        if (lowerLinearGPUShort(op, threads, on && weights != WeightPrefetch::None))
          continue;
        StagedRows staged = stageOn ? stageRows(op, stageBytes, stageUsed) : StagedRows{};
        if (staged.view && runOf.count(op))
          stagedRuns.insert(runOf.lookup(op).first);
        // The spread layout takes no weights before the wait.
        if (linear == "spread" && !staged.view && (!on || weights == WeightPrefetch::None) &&
            lowerLinearGPUSpread(op, unroll, threads, earlyLoads(op)))
          continue;
        lowerLinearGPU(op, unroll, on ? weights : WeightPrefetch::None, prefetchBytes, threads,
                       &sharedTaken, staged);
      }
      else
        lowerLinearCPU(op);
    }
  }
};
} // namespace
