//===- TileUtils.cpp - Helpers shared by the tile lowerings -----------------===//
//
// What every tile-op lowering builds from: thread groups and butterflies,
// the points before a task's first wait where loads may go, shared-memory
// pointers and copies, and the CTA barriers between dependent tile ops.
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

Value butterflySum(OpBuilder &b, Location loc, Value v, int64_t width) {
  for (int64_t offset = width / 2; offset >= 1; offset /= 2)
    v = arith::AddFOp::create(b, loc, v, shuffleXor(b, loc, v, offset));
  return v;
}

bool isTileOp(Operation *op) {
  return isa<LinearOp, MatmulOp, PrefetchOp, SiluMulOp, RMSNormOp, EmbeddingOp, KVAppendOp, RoPEOp, RoPEIntoOp,
             ArgmaxOp, SampleThresholdOp, TopLogprobsOp, TopCandidatesOp, LogitBiasOp, PenalizeOp, RouterTopKOp, AttentionSplitOp, AttentionMergeOp, AttentionPrefillOp>(op);
}

/// The buffer a memref value views: through subviews, reshapes and casts
/// to a kernel argument or an allocation.
static Value rootBuffer(Value v) {
  while (auto view = v.getDefiningOp<ViewLikeOpInterface>())
    v = view.getViewSource();
  return v;
}

namespace {

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

} // namespace

void insertTileBarriers(TaskOp task) {
  auto holdsTileOps = [](Operation *op) {
    return op->walk([](Operation *inner) {
                return isTileOp(inner) ? WalkResult::interrupt() : WalkResult::advance();
              }).wasInterrupted();
  };
  task.getBody().walk([&](Block *block) {
    TileAccess pending;
    for (Operation &op : *block) {
      if (!holdsTileOps(&op)) {
        // A plain load (here or in the op's regions, such as thread 0's
        // part) of what a tile op wrote since the last barrier: a result
        // that some threads of the worker wrote, read by others. The load
        // then counts as a read for the tile ops after it.
        TileAccess loads;
        op.walk([&](memref::LoadOp load) { loads.reads.insert(rootBuffer(load.getMemRef())); });
        if (loads.conflicts(pending)) {
          OpBuilder b(&op);
          gpu::BarrierOp::create(b, op.getLoc());
          pending = TileAccess();
        }
        pending.reads.insert(loads.reads.begin(), loads.reads.end());
        continue;
      }
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

Value workgroupBuffer(TaskOp task, Location loc, ArrayRef<int64_t> shape, Type elementType) {
  Block &body = task.getBody().front();
  auto at = llvm::find_if(body, [](Operation &op) { return !isa<memref::AllocaOp>(op); });
  OpBuilder b(&body, at);
  auto space = gpu::AddressSpaceAttr::get(task.getContext(), gpu::AddressSpace::Workgroup);
  return memref::AllocaOp::create(b, loc, MemRefType::get(shape, elementType, MemRefLayoutAttrInterface(), space));
}

Value gatedActivation(OpBuilder &b, Location loc, Value g, Value u) {
  return arith::MulFOp::create(b, loc, silu(b, loc, g, arith::FastMathFlags::afn), u);
}

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

Value inverseRMS(OpBuilder &b, Location loc, Value sum, Value k, float eps) {
  Value count = arith::UIToFPOp::create(b, loc, b.getF32Type(),
                                        arith::IndexCastUIOp::create(b, loc, b.getI64Type(), k));
  Value e = arith::ConstantFloatOp::create(b, loc, b.getF32Type(), APFloat(eps));
  return math::RsqrtOp::create(b, loc, arith::AddFOp::create(b, loc, arith::DivFOp::create(b, loc, sum, count), e));
}

bool isReadOnly(Value buffer) {
  for (OpOperand &use : buffer.getUses()) {
    Operation *user = use.getOwner();
    if (isa<memref::LoadOp, vector::LoadOp, memref::DimOp, memref::ExtractAlignedPointerAsIndexOp,
            memref::ExtractStridedMetadataOp, StagedRowsOp>(user))
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

bool moveAbove(TaskOp task, Operation *at, ValueRange needed, bool dryRun) {
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
  if (dryRun)
    return true;
  // `moves` lists every op after what it uses (post-order).
  for (Operation *move : moves)
    move->moveBefore(at);
  return true;
}

Operation *prefetchPoint(Operation *op, ValueRange needed, bool inIf, bool dryRun) {
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
  return moveAbove(task, firstWait, needed, dryRun) ? firstWait : nullptr;
}

/// For `op` at its task's top level: the first op with side effects or
/// regions after the last et.event.wait before `op` (`op` itself at the
/// latest); null when `op` is deeper.
static Operation *firstWorkAfterWait(Operation *op) {
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

Operation *afterWaitPoint(Operation *op, ValueRange needed) {
  Operation *at = firstWorkAfterWait(op);
  return at && moveAbove(op->getParentOfType<TaskOp>(), at, needed) ? at : nullptr;
}

Value elementPointer(OpBuilder &b, Location loc, Value mem, Value elementOffset,
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

Value shuffleXor(OpBuilder &b, Location loc, Value v, int64_t offset) {
  Type i32 = b.getI32Type();
  return gpu::ShuffleOp::create(b, loc, v,
                                arith::ConstantIntOp::create(b, loc, i32, offset),
                                arith::ConstantIntOp::create(b, loc, i32, kWarp),
                                gpu::ShuffleMode::XOR)
      .getShuffleResult();
}

Value sharedAt(OpBuilder &b, Location loc, Value base, Value bytes) {
  return LLVM::GEPOp::create(b, loc, base.getType(), b.getI8Type(), base, ValueRange{bytes});
}

Value silu(OpBuilder &b, Location loc, Value g, arith::FastMathFlags fast) {
  Value ex = math::ExpOp::create(b, loc, arith::NegFOp::create(b, loc, g), fast);
  Value one = arith::ConstantFloatOp::create(b, loc, b.getF32Type(), APFloat(1.0f));
  return arith::DivFOp::create(b, loc, g, arith::AddFOp::create(b, loc, one, ex), fast);
}

void copyAsync16(OpBuilder &b, Location loc, Value dst, Value src, Value srcBytes) {
  NVVM::CpAsyncOp::create(b, loc, dst, src, b.getI32IntegerAttr(16),
                          NVVM::LoadCacheModifierKindAttr::get(b.getContext(), NVVM::LoadCacheModifierKind::CG),
                          srcBytes);
}

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

Value idToIndex(OpBuilder &b, Location loc, Value v) {
  if (v.getType().isIndex())
    return v;
  return arith::IndexCastOp::create(b, loc, b.getIndexType(), v);
}

bool rowsOf(MemRefType t, int64_t cols) {
  SmallVector<int64_t> strides;
  int64_t offset;
  return t.getRank() == 2 && t.getDimSize(1) == cols && succeeded(t.getStridesAndOffset(strides, offset)) &&
         strides[0] == cols && strides[1] == 1;
}

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


int64_t bytesOf(MemRefType type) { return type.getNumElements() * type.getElementTypeBitWidth() / 8; }

/// A statically shaped alloca in workgroup memory.
static bool isWorkgroupBuffer(memref::AllocaOp alloca) {
  auto space = dyn_cast_or_null<gpu::AddressSpaceAttr>(alloca.getType().getMemorySpace());
  return space && space.getValue() == gpu::AddressSpace::Workgroup && alloca.getType().hasStaticShape();
}

int64_t layoutTileBuffers(TaskOp task, function_ref<void(Operation *, int64_t)> place) {
  int64_t offset = 0;
  for (Operation &op : task.getBody().front()) {
    auto alloca = dyn_cast<memref::AllocaOp>(op);
    if (!alloca || !isWorkgroupBuffer(alloca) || alloca->hasAttr(EventTensorDialect::getDynamicSharedAttrName()))
      continue;
    offset = static_cast<int64_t>(llvm::alignTo(offset, kTileBufferAlign));
    if (place)
      place(alloca, offset);
    offset += bytesOf(alloca.getType());
  }
  return offset;
}

int64_t largestDynamicBuffer(Operation *root) {
  int64_t bytes = 0;
  root->walk([&](memref::AllocaOp alloca) {
    if (alloca->hasAttr(EventTensorDialect::getDynamicSharedAttrName()) && alloca.getType().hasStaticShape())
      bytes = std::max(bytes, bytesOf(alloca.getType()));
  });
  return bytes;
}

int64_t sharedBytesPerWorker(Operation *root) {
  int64_t arena = 0, region = 0;
  root->walk([&](TaskOp task) {
    arena = std::max(arena, layoutTileBuffers(task));
    for (StagedRowsOp rows : task.getBody().front().getOps<StagedRowsOp>())
      region = std::max<int64_t>(region, llvm::alignTo(rows.getOffset() + bytesOf(rows.getView().getType()), 128));
  });
  int64_t dynamic = largestDynamicBuffer(root);
  if (region)
    dynamic = static_cast<int64_t>(llvm::alignTo(dynamic, 128)) + 2 * region;
  return arena + kWorkerSharedBytes + dynamic;
}

StringRef dynamicSharedOwner(Operation *task) {
  auto owner = task->getAttrOfType<StringAttr>(EventTensorDialect::getDynamicSharedOwnerAttrName());
  return owner ? owner.getValue() : StringRef();
}

bool dynamicSharedHeld(Operation *task) { return !dynamicSharedOwner(task).empty(); }

LogicalResult takeDynamicShared(Operation *op, StringRef what, bool shareable) {
  // Tile ops are verified to sit in task bodies.
  auto task = op->getParentOfType<TaskOp>();
  StringRef owner = dynamicSharedOwner(task);
  if (!owner.empty() && !(shareable && owner == op->getName().getStringRef()))
    return op->emitOpError() << what << "needs its task's dynamic shared memory, which '"
                             << EventTensorDialect::getDynamicSharedOwnerAttrName() << "' gives to \"" << owner
                             << "\"";
  task->setAttr(EventTensorDialect::getDynamicSharedOwnerAttrName(),
                StringAttr::get(task->getContext(), op->getName().getStringRef()));
  return success();
}

bool holdsDynamicShared(Operation *op) {
  return dynamicSharedOwner(op->getParentOfType<TaskOp>()) == op->getName().getStringRef();
}

StringRef attentionForm(Operation *op) {
  auto plan = op->getAttrOfType<DictionaryAttr>(EventTensorDialect::getAttentionPlanAttrName());
  assert(plan && "an attention op without a plan");
  return plan.getAs<StringAttr>("form").getValue();
}

void setAttentionForm(Operation *op, StringRef form) {
  MLIRContext *ctx = op->getContext();
  op->setAttr(EventTensorDialect::getAttentionPlanAttrName(),
              DictionaryAttr::get(ctx, {NamedAttribute(StringAttr::get(ctx, "form"), StringAttr::get(ctx, form))}));
}

} // namespace mlir::et::tile
