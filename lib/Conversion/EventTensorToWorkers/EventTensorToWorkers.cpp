//===- EventTensorToWorkers.cpp - Scheduled kernels to worker code --------===//
//
// Lowers a scheduled et.kernel to the code of one persistent worker: a
// gpu.func kernel (one CTA per worker) or a host function (one thread per
// worker). Both targets share one emitter (WorkerEmitter.h); what differs
// between them (how a worker finds its id and its threads, barriers, the
// scope and form of the counter atomics, the backoff, the clock, the
// function that holds the worker) is a WorkerTarget (WorkerTarget.h).
//
// Shape of the generated code:
//
//   entry:   clone the kernel-level index arithmetic that needs no device
//            data; lay out the event counters (two banks, selected by the
//            parity of `epoch`); check the counter buffer is large enough;
//            clear the bank of the next launch (this file).
//   static:  walk this worker's entries of the program table: one tile, or
//            all tiles t = (w - k) mod W, t + W, ... of a runtime-count task;
//            on the GPU, the last thread first issues the copies of the next
//            entry's staged weight rows (et.staged_rows) into one of two
//            shared-memory regions, completing on that region's mbarrier
//            (StaticSchedule.cpp, StagedRows.cpp).
//   dynamic: take tickets from one atomic counter and map each to the
//            (task, tile) of the queue (DynamicSchedule.cpp).
//
// This file holds the passes, the worker function and its parameters, and
// the layout of the counters.
//
//===----------------------------------------------------------------------===//

#include "WorkerEmitter.h"

#include "EventTensor/Conversion/TileSharedMemory.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Utils/Utils.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/RegionUtils.h"

namespace mlir::et {
#define GEN_PASS_DEF_CONVERTEVENTTENSORTONVVMPASS
#define GEN_PASS_DEF_CONVERTEVENTTENSORTOCPUPASS
#include "EventTensor/Conversion/Passes.h.inc"
} // namespace mlir::et

using namespace mlir;
using namespace mlir::et;
using namespace mlir::et::workers;
using abi::WorkerError;

bool workers::inWorkgroupMemory(MemRefType type) {
  auto space = dyn_cast_or_null<gpu::AddressSpaceAttr>(type.getMemorySpace());
  return space && space.getValue() == gpu::AddressSpace::Workgroup;
}

bool workers::isWorkgroupAlloca(Operation *op) {
  auto alloca = dyn_cast<memref::AllocaOp>(op);
  return alloca && alloca.getType().hasStaticShape() && inWorkgroupMemory(alloca.getType());
}

//===----------------------------------------------------------------------===//
// The worker function
//===----------------------------------------------------------------------===//

FailureOr<ScheduleOp> WorkerEmitter::checkKernel() {
  Block &kernelBody = kernel.getBody().front();
  auto schedule =
      kernelBody.empty() ? ScheduleOp() : dyn_cast<ScheduleOp>(kernelBody.back());
  if (!schedule)
    return kernel.emitOpError("must be scheduled before it is lowered (run "
                              "et-static-schedule or et-dynamic-schedule)");
  numWorkers = schedule.getWorkers();
  tasks.assign(kernel.getTasks().begin(), kernel.getTasks().end());
  if (graph.getEdges().size() &&
      llvm::any_of(graph.getEdges(), [](const EventGraph::Edge &e) {
        return e.producer == e.consumer;
      }))
    return kernel.emitOpError("has a task that waits on its own signals; "
                              "the worker lowering does not support it");
  // Workgroup memory exists on the GPU only, and only at a task's top level
  // (where every thread of the worker reaches it).
  for (TaskOp task : tasks) {
    WalkResult walk = task.getBody().walk([&](memref::AllocaOp alloca) {
      if (!inWorkgroupMemory(alloca.getType()))
        return WalkResult::advance();
      if (!target.hasWorkgroupMemory()) {
        alloca.emitOpError("allocates workgroup memory, which the ")
            << target.getLoweringName() << " does not have";
        return WalkResult::interrupt();
      }
      if (!isWorkgroupAlloca(alloca) || alloca->getParentOp() != task) {
        alloca.emitOpError("allocates workgroup memory; it must be statically shaped and at the top level "
                           "of the task body");
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return failure();
  }
  // Weight rows staged across tiles: a region holds the largest task's ops
  // (the tile lowering places a task's ops side by side).
  for (TaskOp task : tasks)
    for (Operation &op : task.getBody().front())
      if (auto staged = dyn_cast<StagedRowsOp>(op)) {
        if (!target.hasWorkgroupMemory())
          return staged.emitOpError("stages weights in shared memory, which the ")
                 << target.getLoweringName()
                 << " does not have (lower et.linear with stage-bytes=0 for the CPU)";
        MemRefType view = staged.getView().getType();
        int64_t end = staged.getOffset() + view.getNumElements() * 2;
        stagedTasks.insert(task);
        stageRegionBytes = std::max<int64_t>(stageRegionBytes, llvm::alignTo(end, 128));
      }
  return schedule;
}

FunctionType WorkerEmitter::workerFunctionType() {
  Type i64Type = b.getI64Type();
  auto dynI32 = MemRefType::get({ShapedType::kDynamic}, b.getI32Type());
  auto dynI64 = MemRefType::get({ShapedType::kDynamic}, i64Type);
  for (unsigned i = 0, e = kernel.getNumArguments(); i < e; ++i)
    if (kernel.isSymmetricArgument(i))
      symmetric.push_back(i);
  SmallVector<Type> inputs;
  for (abi::WorkerParam param : abi::workerParams(target.passesWorkerId(), target.isProfiled(), numDevices > 1)) {
    paramAt[param] = inputs.size();
    switch (param) {
    case abi::WorkerParam::Worker:
      inputs.push_back(b.getIndexType());
      break;
    case abi::WorkerParam::Epoch:
    case abi::WorkerParam::SpinLimit:
    case abi::WorkerParam::Device:
      inputs.push_back(i64Type);
      break;
    case abi::WorkerParam::Counters:
    case abi::WorkerParam::Control:
      inputs.push_back(dynI32);
      break;
    case abi::WorkerParam::Error:
    case abi::WorkerParam::Trace:
      inputs.push_back(dynI64);
      break;
    case abi::WorkerParam::PeerCounters:
      inputs.append(numDevices, dynI32);
      break;
    case abi::WorkerParam::PeerArguments:
      for (unsigned i : symmetric)
        inputs.append(numDevices, kernel.getArgumentTypes()[i]);
      break;
    case abi::WorkerParam::Arguments:
      llvm::append_range(inputs, kernel.getArgumentTypes());
      break;
    }
  }
  return FunctionType::get(kernel.getContext(), inputs, {});
}

FailureOr<Block *> WorkerEmitter::createWorkerFunction(FunctionType type) {
  // Tiles of a worker run one after another (a barrier ends each), so
  // tasks share their static buffers: one workgroup arena of bytes, in
  // which each task lays its buffers out from offset 0 (16-byte aligned);
  // the arena is as large as the largest task's buffers together. (Sharing
  // only buffers of one type left every task's distinct types side by
  // side: 49 KB for Llama-3.1-8B's decode kernel, which with its dynamic
  // shared memory no longer fit an SM.)
  Attribute workgroupSpace = target.getWorkgroupMemorySpace(b.getContext());
  SmallVector<Type> workgroup;
  SmallVector<std::pair<Operation *, int64_t>> allocas;
  int64_t arenaBytes = 0;
  for (TaskOp task : tasks)
    arenaBytes = std::max(arenaBytes, tile::layoutTileBuffers(task, [&](Operation *op, int64_t offset) {
                            allocas.push_back({op, offset});
                          }));
  unsigned arenaAt = workgroup.size();
  if (arenaBytes)
    workgroup.push_back(MemRefType::get({arenaBytes}, b.getI8Type(), MemRefLayoutAttrInterface(), workgroupSpace));
  // The mbarriers of the two staging regions.
  unsigned barriersAt = workgroup.size();
  if (stageRegionBytes)
    workgroup.push_back(MemRefType::get({2}, b.getI64Type(), MemRefLayoutAttrInterface(), workgroupSpace));
  WorkerFunction fn = target.createWorkerFunction(*this, kernel.getSymName(), type, workgroup);
  for (auto [op, offset] : allocas)
    tileShared[op] = memref::ViewOp::create(b, loc, op->getResult(0).getType(), fn.workgroup[arenaAt],
                                            arith::ConstantIndexOp::create(b, loc, offset), ValueRange{});
  if (stageRegionBytes)
    stageBarriers = fn.workgroup[barriersAt];
  if (failed(layoutDynamicShared(fn.op)))
    return failure();
  target.emitWorkerIds(*this, target.passesWorkerId()
                                  ? fn.entry->getArgument(paramAt.lookup(abi::WorkerParam::Worker))
                                  : Value());
  return fn.entry;
}

LogicalResult WorkerEmitter::layoutDynamicShared(Operation *fn) {
  // Allocas marked et.dynamic_shared all start at the beginning of the
  // dynamic shared memory (tiles run one after another); the launch
  // provides its size. The dynamic shared memory is an external,
  // zero-sized workgroup global (PTX `.extern .shared ... []`).
  Attribute workgroupSpace = target.getWorkgroupMemorySpace(kernel.getContext());
  Value dynamicShared;
  auto dynamicSharedGlobal = [&]() {
    if (dynamicShared)
      return dynamicShared;
    auto globalType = MemRefType::get({0}, b.getI8Type(), MemRefLayoutAttrInterface(),
                                      workgroupSpace);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPoint(fn);
      memref::GlobalOp::create(b, loc, "__et_dynamic_shared", b.getStringAttr("public"),
                               globalType, Attribute(), /*constant=*/false,
                               b.getI64IntegerAttr(16));
    }
    dynamicShared = memref::GetGlobalOp::create(b, loc, globalType, "__et_dynamic_shared");
    return dynamicShared;
  };
  for (TaskOp task : tasks)
    for (Operation &op : task.getBody().front()) {
      if (!isWorkgroupAlloca(&op) || !op.hasAttr(kDynamicShared))
        continue;
      auto type = cast<MemRefType>(op.getResult(0).getType());
      int64_t bytes = tile::bytesOf(type);
      auto bytesType = MemRefType::get({bytes}, b.getI8Type(), MemRefLayoutAttrInterface(),
                                       workgroupSpace);
      // Only this buffer's bytes from the start (reinterpret_cast),
      // viewed with its element type.
      Value raw = memref::ReinterpretCastOp::create(b, loc, bytesType, dynamicSharedGlobal(), 0,
                                                    ArrayRef<int64_t>{bytes},
                                                    ArrayRef<int64_t>{1});
      tileShared[&op] = memref::ViewOp::create(b, loc, type, raw,
                                               arith::ConstantIndexOp::create(b, loc, 0),
                                               ValueRange{});
    }
  // The kernel states the dynamic shared memory its tiles need (the
  // largest buffer, since all start at 0; then the two staging regions)
  // in a global the runtime reads before the launch
  // (abi::kDynamicSharedBytesGlobal).
  int64_t need = tile::largestDynamicBuffer(kernel);
  if (stageRegionBytes) {
    stageStart = static_cast<int64_t>(llvm::alignTo(need, 128));
    need = stageStart + 2 * stageRegionBytes;
    if (need > tile::kMaxDynamicShared)
      return kernel.emitOpError("stages weights in two regions of ")
             << stageRegionBytes << " bytes after " << stageStart
             << " bytes of tile buffers: " << need << " bytes of dynamic shared memory, more than "
             << tile::kMaxDynamicShared << " (lower stage-bytes)";
    auto bytesType = MemRefType::get({need}, b.getI8Type(), MemRefLayoutAttrInterface(), workgroupSpace);
    stageShared = memref::ReinterpretCastOp::create(b, loc, bytesType, dynamicSharedGlobal(), 0,
                                                    ArrayRef<int64_t>{need}, ArrayRef<int64_t>{1});
  }
  if (dynamicShared) {
    dynamicSharedBytes = need;
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(fn);
    LLVM::GlobalOp::create(b, loc, b.getI32Type(), /*isConstant=*/true, LLVM::Linkage::External,
                           abi::kDynamicSharedBytesGlobal, b.getI32IntegerAttr(need),
                           /*alignment=*/4, /*addrSpace=*/1);
  }
  return success();
}

Value WorkerEmitter::param(abi::WorkerParam group, unsigned k) {
  return entryBlock->getArgument(paramAt.lookup(group) + k);
}

void WorkerEmitter::bindParameters() {
  epoch = param(abi::WorkerParam::Epoch);
  spinLimit = param(abi::WorkerParam::SpinLimit);
  countersMem = param(abi::WorkerParam::Counters);
  controlMem = param(abi::WorkerParam::Control);
  errorMem = param(abi::WorkerParam::Error);
  if (target.isProfiled()) {
    traceMem = param(abi::WorkerParam::Trace);
    target.setUpProfile(*this);
  }
  for (auto [k, kArg] : llvm::enumerate(kernel.getArguments()))
    eager.map(kArg, param(abi::WorkerParam::Arguments, k));
  bindDeviceParameters();
}

//===----------------------------------------------------------------------===//
// Counters
//===----------------------------------------------------------------------===//

LogicalResult WorkerEmitter::cloneEagerValues() {
  llvm::DenseSet<Operation *> lazy;
  for (Operation &op : kernel.getBody().front()) {
    if (isa<TaskOp, ScheduleOp, EventCreateOp, RepeatOp>(op))
      continue;
    bool isLazy = isa<ExtentLoadOp>(op) || op.getNumRegions() != 0 ||
                  llvm::any_of(op.getOperands(), [&](Value v) {
                    Operation *def = v.getDefiningOp();
                    return def && lazy.contains(def);
                  });
    if (isLazy) {
      lazy.insert(&op);
      continue;
    }
    b.clone(op, eager);
  }
  return success();
}


LogicalResult WorkerEmitter::layoutEvents() {
  Value offset = idx(0);
  for (auto [id, info] : llvm::enumerate(graph.getEvents())) {
    EventLayout layout;
    layout.id = id;
    layout.info = info.get();
    layout.aggregate = info->kind == CountKind::Device;
    EventType type = info->op.getResult().getType();
    unsigned dyn = 0;
    for (int64_t d : type.getShape()) {
      if (!ShapedType::isDynamic(d)) {
        layout.dims.push_back(idx(d));
        continue;
      }
      Value size = info->op.getDynamicSizes()[dyn++];
      Value m = eager.lookupOrNull(size);
      if (!m)
        return info->op.emitOpError(
            "has a size computed from data read on the device, which the "
            "worker lowering does not support (give the event a size "
            "computed from kernel arguments)");
      layout.dims.push_back(m);
    }
    Value size = idx(1);
    if (!layout.aggregate)
      for (Value d : layout.dims)
        size = arith::MulIOp::create(b, loc, size, d);
    layout.size = size;
    layout.offset = offset;
    layout.remote = llvm::any_of(info->signals, [](EventAccess *s) {
      return static_cast<bool>(cast<EventSignalOp>(s->op).getPeer());
    }) && numDevices > 1;
    offset = arith::AddIOp::create(b, loc, offset, size);
    layouts[info->op.getResult()] = layout;
  }
  eventCounters = offset;
  // Several devices: one more counter, where the copies meet at the end.
  totalCounters =
      numDevices > 1 ? arith::AddIOp::create(b, loc, offset, idx(abi::kDeviceBarrierWords)) : offset;
  return success();
}


void WorkerEmitter::emitCapacityCheckAndClear(Block *exit) {
  // Both banks, and on several devices the abort word after them.
  Value needed =
      arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, totalCounters, idx(abi::kCounterBanks)),
                            idx(numDevices > 1 ? abi::kDeviceAbortWords : 0));
  Value have = memref::DimOp::create(b, loc, countersMem, 0);
  Value tooSmall =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, have, needed);
  Block *current = b.getInsertionBlock();
  Block *ok = current->splitBlock(b.getInsertionPoint());
  Block *bad = new Block();
  bad->insertBefore(ok);
  b.setInsertionPointToEnd(current);
  cf::CondBranchOp::create(b, loc, tooSmall, bad, ValueRange{}, ok,
                           ValueRange{});
  b.setInsertionPointToEnd(bad);
  {
    auto first = scf::IfOp::create(
        b, loc,
        isFirstThreadOfWorker0(),
        /*withElse=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(first.thenBlock());
    recordError(WorkerError::CounterCapacity, idx(-1), idx(-1), idx(-1),
                idx(-1), needed, have, /*localOnly=*/true);
  }
  cf::BranchOp::create(b, loc, exit, ValueRange{});
  b.setInsertionPointToStart(ok);

  // Clear the whole other bank (the next launch may use more counters than
  // this one): worker w, thread t clears words w*T + t, + W*T...
  Value other = arith::SubIOp::create(b, loc, idx(1), bank);
  Value otherBase = arith::MulIOp::create(b, loc, other, bankWords);
  Value first = arith::AddIOp::create(
      b, loc, arith::MulIOp::create(b, loc, workerId, numThreads), threadId);
  Value stride =
      arith::MulIOp::create(b, loc, idx(numWorkers), numThreads);
  auto loop = scf::ForOp::create(b, loc, first, bankWords, stride);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value at = arith::AddIOp::create(b, loc, otherBase,
                                     loop.getInductionVar());
    memref::StoreOp::create(b, loc, i32(0), countersMem, ValueRange{at});
  }
  auto clearTicket = scf::IfOp::create(
      b, loc,
      isFirstThreadOfWorker0(),
      /*withElse=*/false);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(clearTicket.thenBlock());
    LLVM::StoreOp::create(b, loc, i64(0), ticketPointer(other), /*alignment=*/8);
  }
}


void WorkerEmitter::layoutBanks() {
  // The banks are halves of the buffer, not of this launch's counters: a
  // launch with more counters than the one before (a larger runtime size)
  // would otherwise find words of that launch's bank in its own, never
  // cleared. The capacity check keeps the counters within a half.
  Value have = memref::DimOp::create(b, loc, countersMem, 0);
  if (numDevices > 1)
    have = arith::SubIOp::create(b, loc, have, idx(abi::kDeviceAbortWords));
  bankWords = arith::DivUIOp::create(b, loc, have, idx(abi::kCounterBanks));
  bankBase = arith::MulIOp::create(b, loc, bank, bankWords);
  if (numDevices > 1)
    abortWord = arith::MulIOp::create(b, loc, bankWords, idx(abi::kCounterBanks));
}

//===----------------------------------------------------------------------===//
// Driver
//===----------------------------------------------------------------------===//

void WorkerEmitter::replaceWorkerOps() {
  entryBlock->getParentOp()->walk([&](Operation *op) {
    if (isa<ThreadIdOp>(op)) {
      op->getResult(0).replaceAllUsesWith(threadId);
      op->erase();
    } else if (isa<NumThreadsOp>(op)) {
      op->getResult(0).replaceAllUsesWith(numThreads);
      op->erase();
    } else if (isa<DeviceIdOp>(op)) {
      op->getResult(0).replaceAllUsesWith(deviceIndex);
      op->erase();
    } else if (auto peer = dyn_cast<PeerOp>(op)) {
      peer.getResult().replaceAllUsesWith(peerCopy(peer));
      op->erase();
    }
  });
}

LogicalResult WorkerEmitter::emit(Operation *containerOp) {
  container = containerOp;
  FailureOr<ScheduleOp> schedule = checkKernel();
  if (failed(schedule))
    return failure();
  numDevices = kernel.getNumDevices();
  FunctionType type = workerFunctionType();
  b.setInsertionPointToEnd(&container->getRegion(0).front());
  FailureOr<Block *> entry = createWorkerFunction(type);
  if (failed(entry))
    return failure();
  entryBlock = *entry;
  bindParameters();

  countersBase = basePointer(countersMem);
  controlBase = basePointer(controlMem);
  bank = toIndex(arith::AndIOp::create(b, loc, epoch, i64(1)));
  if (failed(cloneEagerValues()) || failed(layoutEvents()))
    return failure();
  layoutBanks();

  // The exit block: return.
  Block *exit = new Block();
  entryBlock->getParent()->push_back(exit);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToEnd(exit);
    target.createReturn(*this);
  }
  exitBlock = exit;
  emitCapacityCheckAndClear(exit);
  if (failed(schedule->isStatic() ? emitStatic(*schedule) : emitDynamic(*schedule)))
    return failure();
  if (numDevices > 1)
    emitDeviceBarrier(finishedOk);
  cf::BranchOp::create(b, loc, exit, ValueRange{});
  // Thread ids, the device id and peer buffers in the tile bodies and the
  // kernel-level values.
  replaceWorkerOps();
  if (failed(outlineMarkedRegions()))
    return failure();
  return checkSharedMemory(entryBlock->getParentOp());
}

LogicalResult WorkerEmitter::outlineMarkedRegions() {
  SmallVector<scf::ExecuteRegionOp> marked;
  entryBlock->getParentOp()->walk([&](scf::ExecuteRegionOp op) {
    if (op->hasAttr(EventTensorDialect::getOutlineAttrName()))
      marked.push_back(op);
  });
  IRRewriter rewriter(b);
  SymbolTable symbols(container);
  unsigned next = 0;
  for (scf::ExecuteRegionOp op : marked) {
    Region &region = op.getRegion();
    // Constants are rematerialized in the function rather than passed.
    // Workgroup buffers cross the call as generic memrefs, cast back
    // inside (the function lowering before the GPU module's own maps no
    // GPU address space).
    SetVector<Value> captured;
    getUsedValuesDefinedAbove(region, captured);
    auto inRegion = [&](OpOperand &use) { return region.isAncestor(use.getOwner()->getParentRegion()); };
    for (Value v : captured) {
      Operation *def = v.getDefiningOp();
      auto memref = dyn_cast<MemRefType>(v.getType());
      if (def && def->hasTrait<OpTrait::ConstantLike>()) {
        rewriter.setInsertionPointToStart(&region.front());
        rewriter.replaceUsesWithIf(v, rewriter.clone(*def)->getResult(0), inRegion);
      } else if (memref && inWorkgroupMemory(memref)) {
        rewriter.setInsertionPoint(op);
        auto generic = MemRefType::get(memref.getShape(), memref.getElementType(), memref.getLayout());
        Value passed = memref::MemorySpaceCastOp::create(rewriter, op.getLoc(), generic, v);
        rewriter.setInsertionPointToStart(&region.front());
        rewriter.replaceUsesWithIf(v, memref::MemorySpaceCastOp::create(rewriter, op.getLoc(), memref, passed),
                                   inRegion);
      }
    }
    std::string name;
    do
      name = (kernel.getSymName() + "_outlined_" + Twine(next++)).str();
    while (symbols.lookup(name));
    FailureOr<func::FuncOp> fn = outlineSingleBlockRegion(rewriter, op.getLoc(), region, name);
    if (failed(fn))
      return op.emitOpError("could not be outlined");
    symbols.insert(*fn);
    fn->setPrivate();
    (*fn)->setAttr("passthrough", rewriter.getArrayAttr({rewriter.getStringAttr("noinline")}));
    // The region now holds the call: it takes the region op's place.
    Block &body = region.front();
    SmallVector<Value> results(body.getTerminator()->getOperands());
    rewriter.eraseOp(body.getTerminator());
    rewriter.inlineBlockBefore(&body, op);
    rewriter.replaceOp(op, results);
  }
  return success();
}

LogicalResult WorkerEmitter::checkSharedMemory(Operation *fn) {
  if (!target.hasWorkgroupMemory())
    return success();
  int64_t staticBytes = 0;
  if (auto gpuFn = dyn_cast<gpu::GPUFuncOp>(fn))
    for (BlockArgument a : gpuFn.getWorkgroupAttributions())
      staticBytes +=
          static_cast<int64_t>(llvm::alignTo(tile::bytesOf(cast<MemRefType>(a.getType())), tile::kTileBufferAlign));
  // Workgroup globals other than the dynamic one (the worker's program).
  container->walk([&](memref::GlobalOp global) {
    auto type = global.getType();
    if (type.getMemorySpace() && type.getNumElements() > 0 &&
        type.getMemorySpace() == target.getWorkgroupMemorySpace(kernel.getContext()))
      staticBytes += static_cast<int64_t>(llvm::alignTo(tile::bytesOf(type), tile::kTileBufferAlign));
  });
  if (staticBytes + dynamicSharedBytes <= tile::kMaxSharedPerCTA)
    return success();
  return kernel.emitOpError("needs ")
         << staticBytes + dynamicSharedBytes << " bytes of shared memory per worker (" << staticBytes
         << " static: tile buffers, the program; " << dynamicSharedBytes
         << " dynamic: prefetched and staged weights, tile buffers marked et.dynamic_shared), more than the "
         << tile::kMaxSharedPerCTA << " an SM gives one CTA on sm_90: it could not be launched (lower the tile "
            "lowering's stage-bytes or prefetch-bytes)";
}

//===----------------------------------------------------------------------===//
// Passes
//===----------------------------------------------------------------------===//

WorkerTarget::~WorkerTarget() = default;

// A target without workgroup memory never stages (the pass refuses
// et.staged_rows there before any of these is called).
void WorkerTarget::initStageBarriers(WorkerBuilder &, ArrayRef<Value>) const {
  llvm_unreachable("weights are staged only in workgroup memory");
}
void WorkerTarget::waitStageBarrier(WorkerBuilder &, Value, Value) const {
  llvm_unreachable("weights are staged only in workgroup memory");
}
void WorkerTarget::expectStageBytes(WorkerBuilder &, Value, Value) const {
  llvm_unreachable("weights are staged only in workgroup memory");
}
void WorkerTarget::copyToStage(WorkerBuilder &, Value, Value, Value, Value) const {
  llvm_unreachable("weights are staged only in workgroup memory");
}

Value WorkerTarget::waitStart(WorkerBuilder &w) const { return w.i64(0); }

std::pair<Value, Value> WorkerTarget::waitExpired(WorkerBuilder &w, Value measure) const {
  Value next = arith::AddIOp::create(w.b, w.loc, measure, w.i64(1));
  return {next, arith::CmpIOp::create(w.b, w.loc, arith::CmpIPredicate::sge, next, w.spinLimit)};
}

static LogicalResult lowerKernels(ModuleOp module, const WorkerTarget &target) {
  SmallVector<KernelOp> kernels(module.getOps<KernelOp>());
  if (kernels.empty())
    return success();
  OpBuilder b(module.getContext());
  target.declareRuntimeFunctions(b, module);
  for (KernelOp kernel : kernels) {
    Operation *container = target.createContainer(b, module, kernel);
    WorkerEmitter emitter(kernel, target);
    if (failed(emitter.emit(container)))
      return failure();
    kernel.erase();
  }
  target.finishModule(b, module);
  return success();
}

namespace {
struct ConvertEventTensorToNVVMPass
    : public mlir::et::impl::ConvertEventTensorToNVVMPassBase<
          ConvertEventTensorToNVVMPass> {
  using Base::Base;
  void runOnOperation() override {
    if (threads < 0 || threads > 1024 || threads % 32 != 0) {
      getOperation().emitError("'convert-et-to-nvvm' threads must be 0 or a "
                               "multiple of 32 up to 1024, got ")
          << static_cast<int64_t>(threads);
      return signalPassFailure();
    }
    if (failed(lowerKernels(getOperation(), *createNVVMWorkerTarget(profile, backoffNs, threads))))
      signalPassFailure();
  }
};

struct ConvertEventTensorToCPUPass
    : public mlir::et::impl::ConvertEventTensorToCPUPassBase<
          ConvertEventTensorToCPUPass> {
  using Base::Base;
  void runOnOperation() override {
    if (failed(lowerKernels(getOperation(), *createHostWorkerTarget(profile))))
      signalPassFailure();
  }
};
} // namespace
