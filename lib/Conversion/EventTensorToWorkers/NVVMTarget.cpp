//===- NVVMTarget.cpp - The GPU worker: one CTA per worker ----------------===//
//
// The WorkerTarget of convert-et-to-nvvm: a gpu.func kernel in a gpu.module,
// whose CTAs are the workers. Thread 0 of a CTA polls and signals for the
// others, which meet it at CTA barriers and read the values it shares
// through a shared-memory word. Counter atomics are at device scope; the
// signals are written as PTX reductions because NVPTX drops the ordering and
// scope of an atomicrmw. A wait's outcome reaches every thread through one
// barrier with an AND reduction.
//
//===----------------------------------------------------------------------===//

#include "WorkerTarget.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

using namespace mlir;
using namespace mlir::et;
using namespace mlir::et::workers;

namespace {

/// Adds 1 to the i32 at `ptr` with the PTX reduction `red` (for example
/// "red.relaxed.sys.add.u32"), written out because NVPTX drops the ordering
/// and scope of an atomicrmw.
void ptxAddOne(WorkerBuilder &w, Value ptr, StringRef red) {
  LLVM::InlineAsmOp::create(w.b, w.loc, TypeRange{}, ValueRange{ptr, w.i32(1)},
                            (red + " [$0], $1;").str(), "l,r",
                            /*has_side_effects=*/true,
                            /*is_align_stack=*/false,
                            LLVM::tailcallkind::TailCallKind::None,
                            LLVM::AsmDialectAttr(), ArrayAttr());
}

class NVVMWorkerTarget final : public WorkerTarget {
public:
  NVVMWorkerTarget(bool profile, int64_t backoffNs, int64_t threads)
      : WorkerTarget(profile), backoffNs(backoffNs), threads(threads) {}

  void declareRuntimeFunctions(OpBuilder &, ModuleOp) const override {}

  Operation *createContainer(OpBuilder &b, ModuleOp, KernelOp kernel) const override {
    b.setInsertionPoint(kernel);
    return gpu::GPUModuleOp::create(b, kernel.getLoc(), (kernel.getSymName() + "_module").str());
  }

  void finishModule(OpBuilder &b, ModuleOp module) const override {
    module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(), b.getUnitAttr());
  }

  bool passesWorkerId() const override { return false; }
  bool hasWorkgroupMemory() const override { return true; }
  Attribute getWorkgroupMemorySpace(MLIRContext *ctx) const override {
    return gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup);
  }
  StringRef getLoweringName() const override { return "GPU worker lowering"; }

  /// The kernel's workgroup attributions: the word of broadcast, the
  /// buffers asked for, then (profiled) the worker's trace slots.
  WorkerFunction createWorkerFunction(WorkerBuilder &w, StringRef kernelName, FunctionType type,
                                      ArrayRef<Type> workgroup) const override {
    OpBuilder &b = w.b;
    Attribute space = getWorkgroupMemorySpace(b.getContext());
    SmallVector<Type> buffers{MemRefType::get({4}, b.getI64Type(), MemRefLayoutAttrInterface(), space)};
    llvm::append_range(buffers, workgroup);
    // The profile's next slot of this worker's trace region, and its end.
    unsigned traceSlotsAt = buffers.size();
    if (isProfiled())
      buffers.push_back(MemRefType::get({2}, b.getI32Type(), MemRefLayoutAttrInterface(), space));
    auto fn = gpu::GPUFuncOp::create(b, w.loc, kernelName, type, buffers, TypeRange{});
    // 16-byte alignment for vector accesses to the tile buffers.
    for (unsigned i = 1; i < buffers.size(); ++i)
      fn.setWorkgroupAttributionAttr(i, LLVM::LLVMDialect::getAlignAttrName(), b.getI64IntegerAttr(16));
    fn->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
    if (threads > 0)
      fn.setKnownBlockSizeAttr(b.getDenseI32ArrayAttr({static_cast<int32_t>(threads), 1, 1}));
    ArrayRef<BlockArgument> attributions = fn.getWorkgroupAttributions();
    w.sharedScratch = attributions[0];
    if (isProfiled())
      w.traceSlotsMem = attributions[traceSlotsAt];
    WorkerFunction result;
    result.op = fn;
    result.entry = &fn.getBody().front();
    for (unsigned i = 0; i < workgroup.size(); ++i)
      result.workgroup.push_back(attributions[1 + i]);
    b.setInsertionPointToStart(result.entry);
    return result;
  }

  /// The worker is the CTA: its id is the block id.
  void emitWorkerIds(WorkerBuilder &w, Value) const override {
    w.workerId = gpu::BlockIdOp::create(w.b, w.loc, gpu::Dimension::x);
    w.threadId = gpu::ThreadIdOp::create(w.b, w.loc, gpu::Dimension::x);
    w.numThreads = gpu::BlockDimOp::create(w.b, w.loc, gpu::Dimension::x);
  }

  /// The worker's region of the trace: records [worker * per, (worker + 1) *
  /// per) of the capacity / workers per worker (one division, here).
  void setUpProfile(WorkerBuilder &w) const override {
    OpBuilder &b = w.b;
    Location loc = w.loc;
    auto first = scf::IfOp::create(b, loc, w.isThread0(), /*withElse=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(first.thenBlock());
    Value capacity = arith::DivUIOp::create(
        b, loc, memref::DimOp::create(b, loc, w.traceMem, 0), w.idx(abi::kTraceWords));
    Value per = arith::DivUIOp::create(b, loc, capacity,
                                       gpu::GridDimOp::create(b, loc, gpu::Dimension::x));
    Value begin = arith::MulIOp::create(b, loc, w.toIndex(w.workerId), per);
    auto toI32 = [&](Value v) { return arith::IndexCastOp::create(b, loc, b.getI32Type(), v).getResult(); };
    memref::StoreOp::create(b, loc, toI32(begin), w.traceSlotsMem, ValueRange{w.idx(0)});
    memref::StoreOp::create(b, loc, toI32(arith::AddIOp::create(b, loc, begin, per)), w.traceSlotsMem,
                            ValueRange{w.idx(1)});
  }

  void createReturn(WorkerBuilder &w) const override { gpu::ReturnOp::create(w.b, w.loc); }

  void barrier(WorkerBuilder &w) const override { gpu::BarrierOp::create(w.b, w.loc); }

  /// Thread 0 stores the value in the shared-memory word, between two
  /// barriers every thread loads it.
  Value broadcast(WorkerBuilder &w, Value v) const override {
    OpBuilder &b = w.b;
    Location loc = w.loc;
    bool isBool = v.getType().isInteger(1);
    Value wide = isBool ? arith::ExtUIOp::create(b, loc, b.getI64Type(), v)
                        : w.toI64(v);
    auto ifOp = scf::IfOp::create(b, loc, w.isThread0(), /*withElse=*/false);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(ifOp.thenBlock());
      memref::StoreOp::create(b, loc, wide, w.sharedScratch, ValueRange{w.idx(0)});
    }
    barrier(w);
    Value out =
        memref::LoadOp::create(b, loc, w.sharedScratch, ValueRange{w.idx(0)});
    barrier(w);
    if (isBool)
      return arith::TruncIOp::create(b, loc, b.getI1Type(), out);
    return out;
  }

  /// One barrier whose AND reduction carries the predicate.
  Value allOf(WorkerBuilder &w, Value pred) const override {
    Value asI32 = arith::ExtUIOp::create(w.b, w.loc, w.b.getI32Type(), pred);
    auto bar = NVVM::BarrierOp::create(
        w.b, w.loc, w.b.getI32Type(), /*barrierId=*/Value(), /*numberOfThreads=*/Value(),
        NVVM::BarrierReductionAttr::get(w.b.getContext(), NVVM::BarrierReduction::AND), asI32);
    return arith::CmpIOp::create(w.b, w.loc, arith::CmpIPredicate::ne, bar.getRes(), w.i32(0));
  }

  StringRef syncscope() const override { return "device"; }

  /// One release reduction. (A release fence, which NVPTX emits as
  /// fence.acq_rel, also invalidates the SM's L1 after the writes drain; the
  /// release needs only the drain. NVPTX drops the ordering of an atomicrmw,
  /// so the instruction is written out.)
  void signalCounter(WorkerBuilder &w, Value counter) const override {
    ptxAddOne(w, w.counterPointer(counter), "red.release.gpu.global.add.u32");
  }

  void systemAdd(WorkerBuilder &w, Value ptr) const override {
    ptxAddOne(w, ptr, "red.relaxed.sys.add.u32");
  }

  void backoff(WorkerBuilder &w) const override {
    NVVM::NanosleepOp::create(w.b, w.loc, w.i32(backoffNs));
  }

  /// mbarriers of one arrival, and a fence that makes their initialization
  /// visible to the bulk copies (the async proxy).
  void initStageBarriers(WorkerBuilder &w, ArrayRef<Value> barriers) const override {
    for (Value barrier : barriers)
      NVVM::MBarrierInitOp::create(w.b, w.loc, barrier, w.i32(1), Value());
    NVVM::FenceMbarrierInitOp::create(w.b, w.loc);
  }

  void waitStageBarrier(WorkerBuilder &w, Value barrier, Value parity) const override {
    NVVM::MBarrierTryWaitParityOp::create(w.b, w.loc, barrier, parity, w.i32(0));
  }

  void expectStageBytes(WorkerBuilder &w, Value barrier, Value bytes) const override {
    NVVM::MBarrierArriveExpectTxOp::create(w.b, w.loc, Type(), barrier, bytes, NVVM::MemScopeKind::CTA,
                                           /*relaxed=*/false, Value());
  }

  /// One bulk copy to a shared::cluster destination (the CTA's own shared
  /// memory): the shared::cta form needs PTX 8.6.
  void copyToStage(WorkerBuilder &w, Value dst, Value src, Value bytes, Value barrier) const override {
    Value dstCluster =
        LLVM::AddrSpaceCastOp::create(w.b, w.loc, LLVM::LLVMPointerType::get(w.b.getContext(), 7), dst);
    NVVM::CpAsyncBulkGlobalToSharedClusterOp::create(w.b, w.loc, dstCluster, src, barrier, bytes, Value(),
                                                     Value());
  }

  /// The globaltimer.
  Value now(WorkerBuilder &w) const override {
    return NVVM::GlobalTimerOp::create(w.b, w.loc, w.b.getI64Type());
  }

  /// Each worker writes its own region of the buffer (its next slot and the
  /// region's end in two shared-memory words, set at launch) and counts the
  /// record with a reduction whose result nobody waits for: an atomic that
  /// returned the slot would hold thread 0 for an L2 round trip between
  /// every two tiles, time the worker does not spend when it is not
  /// profiled. The runtime finds the records by their nonzero end (the
  /// buffer is cleared before each launch).
  std::pair<Value, Value> traceSlot(WorkerBuilder &w) const override {
    OpBuilder &b = w.b;
    Location loc = w.loc;
    Value k = memref::LoadOp::create(b, loc, w.traceSlotsMem, ValueRange{w.idx(0)});
    Value regionEnd = memref::LoadOp::create(b, loc, w.traceSlotsMem, ValueRange{w.idx(1)});
    memref::StoreOp::create(b, loc, arith::AddIOp::create(b, loc, k, w.i32(1)),
                            w.traceSlotsMem, ValueRange{w.idx(0)});
    LLVM::AtomicRMWOp::create(b, loc, LLVM::AtomicBinOp::add,
                              w.controlPointer(abi::kControlTraceCursor), w.i32(1),
                              LLVM::AtomicOrdering::monotonic,
                              syncscope(), 4);
    Value slot = w.toIndex(k);
    Value fits = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, k, regionEnd);
    return {slot, fits};
  }

private:
  int64_t backoffNs;
  int64_t threads;
};

} // namespace

std::unique_ptr<WorkerTarget> workers::createNVVMWorkerTarget(bool profile, int64_t backoffNs, int64_t threads) {
  return std::make_unique<NVVMWorkerTarget>(profile, backoffNs, threads);
}
