//===- EventTensorToWorkers.cpp - Scheduled kernels to worker code --------===//
//
// Lowers a scheduled et.kernel to the code of one persistent worker: a
// gpu.func kernel (one CTA per worker) or a host function (one thread per
// worker). Both targets share this emitter; they differ in how a worker
// finds its id and its threads, in barriers, and in the scope and backoff of
// the counter atomics (the `Target` hooks below).
//
// Shape of the generated code:
//
//   entry:   clone the kernel-level index arithmetic that needs no device
//            data; lay out the event counters (two banks, selected by the
//            parity of `epoch`); check the counter buffer is large enough;
//            clear the bank of the next launch.
//   static:  walk this worker's entries of the program table: one tile, or
//            all tiles t = (w - k) mod W, t + W, ... of a runtime-count task;
//            on the GPU, the last thread first issues the copies of the next
//            entry's staged weight rows (et.staged_rows) into one of two
//            shared-memory regions, completing on that region's mbarrier.
//   dynamic: take tickets from one atomic counter and map each to the
//            (task, tile) of the queue.
//
// Tile bodies are emitted as control-flow graphs inside scf.execute_region
// ops so that a wait can leave them: a wait that times out (or sees another
// worker's abort) branches to the region's failure block, and the worker
// returns.
//
//===----------------------------------------------------------------------===//

#include "EventTensor/Analysis/EventGraph.h"
#include "EventTensor/Analysis/TileGraph.h"
#include "EventTensor/Conversion/Passes.h"
#include "EventTensor/Conversion/RuntimeABI.h"
#include "EventTensor/Dialect/EventTensor/EventTensorOps.h"

#include "../TileOps/TileLowering.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/SetVector.h"

#include <functional>
#include "mlir/IR/Matchers.h"
#include "mlir/IR/SymbolTable.h"

namespace mlir::et {
#define GEN_PASS_DEF_CONVERTEVENTTENSORTONVVMPASS
#define GEN_PASS_DEF_CONVERTEVENTTENSORTOCPUPASS
#include "EventTensor/Conversion/Passes.h.inc"
} // namespace mlir::et

using namespace mlir;
using namespace mlir::et;
using abi::WorkerError;

namespace {

// The most shared memory a worker's copy of its static program may take.
constexpr int64_t kSharedProgramBytes = 4096;

/// True for a memref in GPU workgroup (shared) memory.
bool inWorkgroupMemory(MemRefType type) {
  auto space = dyn_cast_or_null<gpu::AddressSpaceAttr>(type.getMemorySpace());
  return space && space.getValue() == gpu::AddressSpace::Workgroup;
}

/// A statically shaped memref.alloca in workgroup memory: per-tile shared
/// memory from the tile lowering.
bool isWorkgroupAlloca(Operation *op) {
  auto alloca = dyn_cast<memref::AllocaOp>(op);
  return alloca && alloca.getType().hasStaticShape() && inWorkgroupMemory(alloca.getType());
}

/// The attribute of a workgroup alloca that lives in the kernel's dynamic
/// shared memory (sized at launch) instead of a static buffer.
constexpr llvm::StringLiteral kDynamicShared = EventTensorDialect::getDynamicSharedAttrName();

/// What differs between the GPU and the host worker.
struct Target {
  bool gpu = false;
  bool profile = false;
  int64_t backoffNs = 64;
  int64_t threads = 0; // fixed CTA size, 0 if chosen at launch
  StringRef syncscope() const { return gpu ? "device" : ""; }
};

/// Layout of one event tensor in a counter bank.
struct EventLayout {
  unsigned id = 0;
  EventInfo *info = nullptr;
  /// One counter for the whole event: its counts are only known on the
  /// device, so a wait waits for every signal of the event.
  bool aggregate = false;
  /// Some signal reaches it from another device: its signals and waits use
  /// system scope.
  bool remote = false;
  SmallVector<Value> dims; // index values, in the worker function
  Value offset;            // index, within a bank
  Value size;              // index
};

class WorkerEmitter {
public:
  WorkerEmitter(KernelOp kernel, Target target)
      : kernel(kernel), target(target), graph(kernel), b(kernel.getContext()),
        loc(kernel.getLoc()) {}

  /// Emits the worker into `container` (a module or a gpu.module).
  LogicalResult emit(Operation *container);

private:
  //===--------------------------------------------------------------------===//
  // Small builders
  //===--------------------------------------------------------------------===//

  Value idx(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }
  Value i32(int64_t v) {
    return arith::ConstantIntOp::create(b, loc, b.getI32Type(), v);
  }
  Value i64(int64_t v) {
    return arith::ConstantIntOp::create(b, loc, b.getI64Type(), v);
  }
  Value i1(bool v) {
    return arith::ConstantIntOp::create(b, loc, b.getI1Type(), v);
  }
  Value toI64(Value v) {
    if (v.getType().isIndex())
      return arith::IndexCastOp::create(b, loc, b.getI64Type(), v);
    if (v.getType().getIntOrFloatBitWidth() < 64)
      return arith::ExtSIOp::create(b, loc, b.getI64Type(), v);
    return v;
  }
  Value toIndex(Value v) {
    if (v.getType().isIndex())
      return v;
    return arith::IndexCastOp::create(b, loc, b.getIndexType(), v);
  }
  /// The base pointer of a memref (aligned pointer) as an !llvm.ptr.
  Value basePointer(Value memref) {
    Value asIndex =
        memref::ExtractAlignedPointerAsIndexOp::create(b, loc, memref);
    Value asInt = arith::IndexCastOp::create(b, loc, b.getI64Type(), asIndex);
    return LLVM::IntToPtrOp::create(b, loc,
                                    LLVM::LLVMPointerType::get(b.getContext()),
                                    asInt);
  }
  Value elementPointer(Value base, Value index, Type elementType) {
    return LLVM::GEPOp::create(
        b, loc, LLVM::LLVMPointerType::get(b.getContext()), elementType, base,
        ValueRange{toI64(index)});
  }
  Value counterPointer(Value index) {
    return elementPointer(countersBase, index, b.getI32Type());
  }
  Value controlPointer(int64_t word) {
    return elementPointer(controlBase, idx(word), b.getI32Type());
  }
  Value isThread0() {
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, threadId,
                                 idx(0));
  }
  /// Thread 0 of worker 0: does the once-per-launch work.
  Value isFirstThreadOfWorker0() {
    return arith::AndIOp::create(
        b, loc, isThread0(),
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, workerId,
                              idx(0)));
  }
  void barrier() {
    if (!target.gpu)
      return;
    gpu::BarrierOp::create(b, loc);
  }
  /// Makes thread 0's value of `v` (i1 or i64) every thread's value.
  Value broadcast(Value v) {
    if (!target.gpu)
      return v;
    bool isBool = v.getType().isInteger(1);
    Value wide = isBool ? arith::ExtUIOp::create(b, loc, b.getI64Type(), v)
                        : toI64(v);
    auto ifOp = scf::IfOp::create(b, loc, isThread0(), /*withElse=*/false);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(ifOp.thenBlock());
      memref::StoreOp::create(b, loc, wide, sharedScratch, ValueRange{idx(0)});
    }
    barrier();
    Value out =
        memref::LoadOp::create(b, loc, sharedScratch, ValueRange{idx(0)});
    barrier();
    if (isBool)
      return arith::TruncIOp::create(b, loc, b.getI1Type(), out);
    return out;
  }

  /// Nanoseconds from a monotonic clock (globaltimer on the GPU).
  Value now() {
    if (target.gpu)
      return NVVM::GlobalTimerOp::create(b, loc, b.getI64Type());
    func::CallOp::create(b, loc, "clock_gettime", TypeRange{b.getI32Type()},
                         ValueRange{i32(1), clockBuffer});
    Value sec = LLVM::LoadOp::create(b, loc, b.getI64Type(), clockBuffer);
    Value nsecPtr = LLVM::GEPOp::create(
        b, loc, LLVM::LLVMPointerType::get(b.getContext()), b.getI64Type(),
        clockBuffer, ArrayRef<LLVM::GEPArg>{1});
    Value nsec = LLVM::LoadOp::create(b, loc, b.getI64Type(), nsecPtr);
    return arith::AddIOp::create(
        b, loc, arith::MulIOp::create(b, loc, sec, i64(1000000000)), nsec);
  }

  /// Appends (worker, task, tile, start, ready, end) to the trace, if it
  /// has room. On the GPU each worker writes its own region of the buffer
  /// (capacity / workers records; its next slot and the region's end in two
  /// shared-memory words, set at launch) and counts the record with a
  /// reduction whose result nobody waits for: an
  /// atomic that returned the slot would hold thread 0 for an L2 round
  /// trip between every two tiles, time the worker does not spend when it
  /// is not profiled. The host finds the records by their nonzero end
  /// (the buffer is cleared before each launch). On the host the slot
  /// comes from the shared cursor.
  void recordTile(Value task, Value tile, Value start, Value ready) {
    Value end = now();
    auto first = scf::IfOp::create(b, loc, isThread0(), /*withElse=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(first.thenBlock());
    Value slot, fits;
    if (target.gpu) {
      Value k = memref::LoadOp::create(b, loc, traceSlotsMem, ValueRange{idx(0)});
      Value regionEnd = memref::LoadOp::create(b, loc, traceSlotsMem, ValueRange{idx(1)});
      memref::StoreOp::create(b, loc, arith::AddIOp::create(b, loc, k, i32(1)),
                              traceSlotsMem, ValueRange{idx(0)});
      LLVM::AtomicRMWOp::create(b, loc, LLVM::AtomicBinOp::add,
                                controlPointer(abi::kControlTraceCursor), i32(1),
                                LLVM::AtomicOrdering::monotonic,
                                target.syncscope(), 4);
      slot = toIndex(k);
      fits = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, k, regionEnd);
    } else {
      Value capacity = arith::DivUIOp::create(
          b, loc, memref::DimOp::create(b, loc, traceMem, 0), idx(abi::kTraceWords));
      slot = toIndex(LLVM::AtomicRMWOp::create(
          b, loc, LLVM::AtomicBinOp::add, controlPointer(abi::kControlTraceCursor), i32(1),
          LLVM::AtomicOrdering::monotonic, target.syncscope(), 4));
      fits = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, slot,
                                   capacity);
    }
    auto store = scf::IfOp::create(b, loc, fits, /*withElse=*/false);
    b.setInsertionPointToStart(store.thenBlock());
    Value base = arith::MulIOp::create(b, loc, slot, idx(abi::kTraceWords));
    Value fields[abi::kTraceWords];
    fields[static_cast<int64_t>(abi::TraceField::Worker)] = toI64(workerId);
    fields[static_cast<int64_t>(abi::TraceField::Task)] = toI64(task);
    fields[static_cast<int64_t>(abi::TraceField::Tile)] = toI64(tile);
    fields[static_cast<int64_t>(abi::TraceField::Start)] = start;
    fields[static_cast<int64_t>(abi::TraceField::Ready)] = ready;
    fields[static_cast<int64_t>(abi::TraceField::End)] = end;
    for (int64_t i = 0; i < abi::kTraceWords; ++i)
      memref::StoreOp::create(
          b, loc, fields[i], traceMem,
          ValueRange{arith::AddIOp::create(b, loc, base, idx(i))});
  }

  //===--------------------------------------------------------------------===//
  // Control flow inside an scf.execute_region
  //===--------------------------------------------------------------------===//

  /// The region being emitted into and its failure exit.
  struct Scope {
    Region *region = nullptr;
    Block *fail = nullptr;
    /// Kernel-level values materialized in this scope (they dominate the
    /// rest of the scope only along one straight path; see materialize).
    IRMapping cache;
  };

  Block *newBlock(Scope &scope, TypeRange args = {}) {
    Block *block = new Block();
    scope.region->push_back(block);
    for (Type t : args)
      block->addArgument(t, loc);
    return block;
  }

  /// An scf.execute_region with results `types` at the insertion point and
  /// its scope: an entry block and a failure block that yields
  /// `failValues()` (built there). Continues at the end of the entry.
  std::pair<scf::ExecuteRegionOp, Scope>
  openRegion(TypeRange types, function_ref<SmallVector<Value>()> failValues) {
    auto region = scf::ExecuteRegionOp::create(b, loc, types);
    Scope scope;
    scope.region = &region.getRegion();
    Block *entry = new Block();
    scope.region->push_back(entry);
    scope.fail = newBlock(scope);
    b.setInsertionPointToEnd(scope.fail);
    scf::YieldOp::create(b, loc, failValues());
    b.setInsertionPointToEnd(entry);
    return {region, std::move(scope)};
  }

  /// Records an error (first writer wins), raises the abort flag.
  /// On several devices the error also stops the other devices: their
  /// abort word (after both counter banks) is raised too, unless
  /// `localOnly` (the counter buffer may be too small to hold it).
  void recordError(WorkerError kind, Value task, Value tile, Value event,
                   Value element, Value expected, Value observed,
                   bool localOnly = false) {
    Value claimed = LLVM::AtomicCmpXchgOp::create(
        b, loc, controlPointer(abi::kControlErrorClaimed), i32(0), i32(1),
        LLVM::AtomicOrdering::acq_rel, LLVM::AtomicOrdering::monotonic,
        target.syncscope(), /*alignment=*/4);
    Value won = LLVM::ExtractValueOp::create(b, loc, claimed, 1);
    auto ifOp = scf::IfOp::create(b, loc, won, /*withElse=*/false);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(ifOp.thenBlock());
      Value fields[abi::kErrorWords];
      auto set = [&](abi::ErrorField field, Value v) { fields[static_cast<int64_t>(field)] = v; };
      set(abi::ErrorField::Kind, i64(static_cast<int64_t>(kind)));
      set(abi::ErrorField::Worker, toI64(workerId));
      set(abi::ErrorField::Task, toI64(task));
      set(abi::ErrorField::Tile, toI64(tile));
      set(abi::ErrorField::Event, toI64(event));
      set(abi::ErrorField::Element, toI64(element));
      set(abi::ErrorField::Expected, toI64(expected));
      set(abi::ErrorField::Observed, toI64(observed));
      for (int64_t i = 0; i < abi::kErrorWords; ++i)
        memref::StoreOp::create(b, loc, fields[i], errorMem,
                                ValueRange{idx(i)});
      LLVM::FenceOp::create(b, loc, LLVM::AtomicOrdering::release,
                            target.syncscope());
    }
    LLVM::StoreOp::create(b, loc, i32(1), controlPointer(abi::kControlAbort),
                          /*alignment=*/4, /*isVolatile=*/false,
                          /*isNonTemporal=*/false, /*isInvariantGroup=*/false,
                          LLVM::AtomicOrdering::release, target.syncscope());
    if (numDevices > 1 && !localOnly)
      for (Value counters : peerCounters)
        LLVM::StoreOp::create(b, loc, i32(1),
                              elementPointer(basePointer(counters), abortWord, b.getI32Type()),
                              /*alignment=*/4, /*isVolatile=*/false, /*isNonTemporal=*/false,
                              /*isInvariantGroup=*/false, LLVM::AtomicOrdering::monotonic,
                              StringRef());
  }

  /// Waits until counter `index` reaches `expected` (i32). Thread 0 spins;
  /// the outcome is shared by the CTA. On timeout or abort, branches to the
  /// scope's failure block. Continues in a new current block.
  /// A timeout with `localOnly` stops only this device (see recordError).
  void emitSpin(Scope &scope, Value counterIndex, Value expected, Value task,
                Value tile, Value event, Value element,
                StringRef syncscope, bool localOnly = false) {
    Type i64Type = b.getI64Type(), i1Type = b.getI1Type();
    Block *spin = newBlock(scope, {i64Type});
    Block *check = newBlock(scope, {i64Type});
    Block *timeout = newBlock(scope, {i64Type});
    Block *record = newBlock(scope);
    Block *sleep = newBlock(scope, {i64Type});
    Block *join = newBlock(scope, {i1Type});
    Block *cont = newBlock(scope);

    Value ptr = counterPointer(counterIndex);
    Value expected32 =
        arith::TruncIOp::create(b, loc, b.getI32Type(), toI64(expected));
    cf::CondBranchOp::create(b, loc, isThread0(), spin, ValueRange{i64(0)},
                             join, ValueRange{i1(true)});

    // The abort flag is read before the counter, with no ordering: both
    // loads are in flight together, so a poll costs one L2 round trip (read
    // after a short counter, the flag was a second one per poll, and the
    // wake-up of a waiter after the last signal took up to two).
    b.setInsertionPointToEnd(spin);
    Value abortFlag = LLVM::LoadOp::create(
        b, loc, b.getI32Type(), controlPointer(abi::kControlAbort), /*alignment=*/4,
        false, false, false, false, LLVM::AtomicOrdering::monotonic,
        target.syncscope());
    if (numDevices > 1) {
      // Another device's error (its copy raised the flag in this device's
      // counter buffer).
      Value remote = LLVM::LoadOp::create(
          b, loc, b.getI32Type(), counterPointer(abortWord), /*alignment=*/4, false, false, false,
          false, LLVM::AtomicOrdering::monotonic, StringRef());
      abortFlag = arith::OrIOp::create(b, loc, abortFlag, remote);
    }
    Value observed = LLVM::LoadOp::create(
        b, loc, b.getI32Type(), ptr, /*alignment=*/4, /*isVolatile=*/false,
        /*isNonTemporal=*/false, /*isInvariant=*/false,
        /*isInvariantGroup=*/false, LLVM::AtomicOrdering::acquire,
        syncscope);
    Value ready = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge,
                                        observed, expected32);
    cf::CondBranchOp::create(b, loc, ready, join, ValueRange{i1(true)}, check,
                             ValueRange{spin->getArgument(0)});

    b.setInsertionPointToEnd(check);
    Value aborted = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne,
                                          abortFlag, i32(0));
    cf::CondBranchOp::create(b, loc, aborted, join, ValueRange{i1(false)},
                             timeout, ValueRange{check->getArgument(0)});

    b.setInsertionPointToEnd(timeout);
    Value next =
        arith::AddIOp::create(b, loc, timeout->getArgument(0), i64(1));
    Value expired = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge,
                                          next, spinLimit);
    cf::CondBranchOp::create(b, loc, expired, record, ValueRange{}, sleep,
                             ValueRange{next});

    b.setInsertionPointToEnd(record);
    recordError(WorkerError::Timeout, task, tile, event, element, expected,
                observed, localOnly);
    cf::BranchOp::create(b, loc, join, ValueRange{i1(false)});

    b.setInsertionPointToEnd(sleep);
    if (target.gpu)
      NVVM::NanosleepOp::create(b, loc, i32(target.backoffNs));
    else
      func::CallOp::create(b, loc, "sched_yield", TypeRange{b.getI32Type()},
                           ValueRange{});
    cf::BranchOp::create(b, loc, spin, ValueRange{sleep->getArgument(0)});

    b.setInsertionPointToEnd(join);
    Value ok = broadcast(join->getArgument(0));
    cf::CondBranchOp::create(b, loc, ok, cont, ValueRange{}, scope.fail,
                             ValueRange{});
    b.setInsertionPointToEnd(cont);
  }

  //===--------------------------------------------------------------------===//
  // Kernel-level values
  //===--------------------------------------------------------------------===//

  /// The value of kernel-level `v` at the current point of `scope`.
  FailureOr<Value> materialize(Value v, Scope &scope) {
    if (Value m = eager.lookupOrNull(v))
      return m;
    if (Value m = scope.cache.lookupOrNull(v))
      return m;
    Operation *def = v.getDefiningOp();
    if (!def)
      return kernel.emitOpError("cannot materialize a value in the worker");
    if (auto load = dyn_cast<ExtentLoadOp>(def)) {
      if (Value after = load.getAfterEvent()) {
        FailureOr<SmallVector<Value>> coords =
            materializeAll(load.getAfterIndices(), scope);
        if (failed(coords) ||
            failed(emitWait(scope, after, *coords, idx(-1), idx(-1))))
          return failure();
      }
      FailureOr<SmallVector<Value>> indices =
          materializeAll(load.getIndices(), scope);
      FailureOr<Value> source = materialize(load.getSource(), scope);
      if (failed(indices) || failed(source))
        return failure();
      Value raw = memref::LoadOp::create(b, loc, *source, *indices);
      Value result = toIndex(raw);
      scope.cache.map(v, result);
      return result;
    }
    if (def->getNumRegions() != 0)
      return def->emitOpError("kernel-level ops with regions are not "
                              "supported by the worker lowering");
    for (Value operand : def->getOperands()) {
      FailureOr<Value> m = materialize(operand, scope);
      if (failed(m))
        return failure();
      scope.cache.map(operand, *m);
    }
    Operation *clone = b.clone(*def, scope.cache);
    for (auto [from, to] : llvm::zip(def->getResults(), clone->getResults()))
      scope.cache.map(from, to);
    return scope.cache.lookup(v);
  }

  /// `materialize` of each value; values in `local` (tile-level) first.
  FailureOr<SmallVector<Value>> materializeAll(ValueRange values, Scope &scope,
                                               const IRMapping *local = nullptr) {
    SmallVector<Value> out;
    for (Value v : values) {
      if (Value m = local ? local->lookupOrNull(v) : Value()) {
        out.push_back(m);
        continue;
      }
      FailureOr<Value> m = materialize(v, scope);
      if (failed(m))
        return failure();
      out.push_back(*m);
    }
    return out;
  }

  /// Product of a task's extents.
  FailureOr<Value> tileCount(TaskOp task, Scope &scope,
                             SmallVectorImpl<Value> *extents = nullptr) {
    FailureOr<SmallVector<Value>> values =
        materializeAll(task.getExtents(), scope);
    if (failed(values))
      return failure();
    Value n = idx(1);
    for (Value e : *values)
      n = arith::MulIOp::create(b, loc, n, e);
    if (extents)
      extents->append(values->begin(), values->end());
    return n;
  }

  //===--------------------------------------------------------------------===//
  // Events
  //===--------------------------------------------------------------------===//

  /// Linear index of an element; also reports whether it is in bounds.
  std::pair<Value, Value> linearize(const EventLayout &layout,
                                    ArrayRef<Value> coords) {
    Value lin = idx(0), inBounds = i1(true);
    for (auto [c, d] : llvm::zip(coords, layout.dims)) {
      Value ge = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, c,
                                       idx(0));
      Value lt =
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, c, d);
      inBounds = arith::AndIOp::create(
          b, loc, inBounds, arith::AndIOp::create(b, loc, ge, lt));
      lin = arith::AddIOp::create(b, loc,
                                  arith::MulIOp::create(b, loc, lin, d), c);
    }
    return {lin, inBounds};
  }

  /// Branches to the failure block, recording an out-of-bounds error, when
  /// `inBounds` is false.
  void checkBounds(Scope &scope, Value inBounds, Value task, Value tile,
                   unsigned eventId, Value element) {
    Block *bad = newBlock(scope);
    Block *cont = newBlock(scope);
    cf::CondBranchOp::create(b, loc, inBounds, cont, ValueRange{}, bad,
                             ValueRange{});
    b.setInsertionPointToEnd(bad);
    recordError(WorkerError::IndexOutOfBounds, task, tile, idx(eventId),
                element, idx(-1), idx(-1));
    cf::BranchOp::create(b, loc, scope.fail, ValueRange{});
    b.setInsertionPointToEnd(cont);
  }

  /// The expected count of `element` (coords) of an event, as an index.
  FailureOr<Value> expectedCount(const EventLayout &layout,
                                 ArrayRef<Value> coords, Value lin,
                                 Scope &scope) {
    EventInfo &info = *layout.info;
    if (layout.aggregate) {
      // Every signal of the event: one per tile of each signalling site.
      Value total = idx(0);
      for (EventAccess *signal : info.signals) {
        FailureOr<Value> n = tileCount(signal->task, scope);
        if (failed(n))
          return failure();
        total = arith::AddIOp::create(b, loc, total, *n);
      }
      return total;
    }
    if (info.staticCounts) {
      ArrayRef<int64_t> counts = *info.staticCounts;
      if (llvm::all_equal(counts))
        return idx(counts.front());
      memref::GlobalOp table = countTable(layout);
      Value t = memref::GetGlobalOp::create(b, loc, table.getType(),
                                            table.getSymName());
      return toIndex(memref::LoadOp::create(b, loc, t, ValueRange{lin}));
    }
    // A closed form per signalling site, summed.
    Value total = idx(0);
    for (EventAccess *signal : info.signals) {
      FailureOr<Value> term = siteCount(*signal, coords, scope);
      if (failed(term))
        return failure();
      total = arith::AddIOp::create(b, loc, total, *term);
    }
    return total;
  }

  /// How many tiles of a separable signal site signal element `coords`.
  FailureOr<Value> siteCount(const EventAccess &signal, ArrayRef<Value> coords,
                             Scope &scope) {
    TaskOp task = signal.task;
    FailureOr<SmallVector<Value>> materialized =
        materializeAll(task.getExtents(), scope);
    if (failed(materialized))
      return failure();
    SmallVector<Value> &extents = *materialized;
    auto select = [&](Value cond) {
      return arith::SelectOp::create(b, loc, cond, idx(1), idx(0));
    };
    auto cmp = [&](arith::CmpIPredicate p, Value x, Value y) {
      return arith::CmpIOp::create(b, loc, p, x, y);
    };
    SmallVector<bool> used(task.getNumTileDims(), false);
    Value product = idx(1);
    for (auto [k, expr] : llvm::enumerate(signal.indices)) {
      AffineExpr e = *expr;
      Value ek = coords[k];
      Value factor;
      if (auto c = dyn_cast<AffineConstantExpr>(e)) {
        factor = select(cmp(arith::CmpIPredicate::eq, ek, idx(c.getValue())));
      } else if (auto s = dyn_cast<AffineSymbolExpr>(e)) {
        FailureOr<Value> sv =
            materialize(graph.getSymbols()[s.getPosition()], scope);
        if (failed(sv))
          return failure();
        factor = select(cmp(arith::CmpIPredicate::eq, ek, *sv));
      } else {
        AffineExpr base = e;
        int64_t divisor = 1, multiplier = 1, shift = 0;
        if (auto bin = dyn_cast<AffineBinaryOpExpr>(e)) {
          auto rhs = dyn_cast<AffineConstantExpr>(bin.getRHS());
          // EventGraph only calls counts with these forms symbolic; the
          // others are device counts, which use one aggregate counter.
          assert(rhs && "symbolic count with a non-constant operand");
          base = bin.getLHS();
          if (bin.getKind() == AffineExprKind::Add)
            shift = rhs.getValue();
          else if (bin.getKind() == AffineExprKind::FloorDiv)
            divisor = rhs.getValue();
          else if (bin.getKind() == AffineExprKind::Mul)
            multiplier = rhs.getValue();
          else
            assert(false && "symbolic count of an unsupported form");
        }
        auto dim = cast<AffineDimExpr>(base);
        used[dim.getPosition()] = true;
        Value n = extents[dim.getPosition()];
        if (divisor > 1) {
          // min(c, n - c*e), clamped at 0.
          Value rest = arith::SubIOp::create(
              b, loc, n, arith::MulIOp::create(b, loc, idx(divisor), ek));
          Value m = arith::MinSIOp::create(b, loc, idx(divisor), rest);
          factor = arith::MaxSIOp::create(b, loc, m, idx(0));
        } else if (multiplier > 1) {
          Value divisible = cmp(arith::CmpIPredicate::eq,
                                arith::RemSIOp::create(b, loc, ek,
                                                       idx(multiplier)),
                                idx(0));
          Value q = arith::DivSIOp::create(b, loc, ek, idx(multiplier));
          Value inRange = cmp(arith::CmpIPredicate::slt, q, n);
          factor = select(arith::AndIOp::create(b, loc, divisible, inRange));
        } else {
          Value d = arith::SubIOp::create(b, loc, ek, idx(shift));
          Value inRange = arith::AndIOp::create(
              b, loc, cmp(arith::CmpIPredicate::sge, d, idx(0)),
              cmp(arith::CmpIPredicate::slt, d, n));
          factor = select(inRange);
        }
      }
      product = arith::MulIOp::create(b, loc, product, factor);
    }
    for (auto [d, u] : llvm::enumerate(used))
      if (!u)
        product = arith::MulIOp::create(b, loc, product, extents[d]);
    return product;
  }

  memref::GlobalOp countTable(const EventLayout &layout) {
    auto it = countTables.find(layout.id);
    if (it != countTables.end())
      return it->second;
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&container->getRegion(0).front());
    SmallVector<int32_t> counts(layout.info->staticCounts->begin(),
                                layout.info->staticCounts->end());
    auto type = MemRefType::get({static_cast<int64_t>(counts.size())},
                                b.getI32Type());
    auto value = DenseIntElementsAttr::get(
        RankedTensorType::get(type.getShape(), b.getI32Type()),
        ArrayRef<int32_t>(counts));
    std::string name = ("__et_" + kernel.getSymName() + "_counts" +
                        Twine(layout.id))
                           .str();
    auto global = memref::GlobalOp::create(
        b, loc, name, b.getStringAttr("private"), type, value,
        /*constant=*/true, /*alignment=*/IntegerAttr());
    countTables[layout.id] = global;
    return global;
  }

  /// The linear element an access touches (0 for an aggregate counter),
  /// checked against the event's shape, and its counter in this launch's
  /// bank.
  std::pair<Value, Value> locate(Scope &scope, const EventLayout &layout,
                                 ArrayRef<Value> coords, Value task,
                                 Value tile) {
    Value lin = idx(0), inBounds = i1(true);
    if (!layout.aggregate)
      std::tie(lin, inBounds) = linearize(layout, coords);
    checkBounds(scope, inBounds, task, tile, layout.id, lin);
    Value counter = arith::AddIOp::create(
        b, loc, bankBase, arith::AddIOp::create(b, loc, layout.offset, lin));
    return {lin, counter};
  }

  LogicalResult emitWait(Scope &scope, Value event, ArrayRef<Value> coords,
                         Value task, Value tile) {
    EventLayout &layout = layouts[event];
    auto [lin, counter] = locate(scope, layout, coords, task, tile);
    FailureOr<Value> expected = expectedCount(layout, coords, lin, scope);
    if (failed(expected))
      return failure();
    emitSpin(scope, counter, *expected, task, tile, idx(layout.id), lin,
             layout.remote ? StringRef() : target.syncscope());
    return success();
  }

  /// `peer`: the device offset, already in the worker (or null).
  LogicalResult emitSignal(Scope &scope, Value event, ArrayRef<Value> coords,
                           Value peer, Value task, Value tile) {
    const EventLayout &layout = layouts[event];
    Value counter = locate(scope, layout, coords, task, tile).second;
    // The device whose copy of the event receives the signal.
    Value device = peer && numDevices > 1 ? peerDevice(peer) : Value();
    // Every thread's writes of the tile happen before thread 0's release.
    barrier();
    auto ifOp = scf::IfOp::create(b, loc, isThread0(), /*withElse=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    if (!layout.remote) {
      if (target.gpu) {
        // One release reduction. (A release fence, which NVPTX emits as
        // fence.acq_rel, also invalidates the SM's L1 after the writes
        // drain; the release needs only the drain. NVPTX drops the ordering
        // of an atomicrmw, so the instruction is written out.)
        ptxAddOne(counterPointer(counter), "red.release.gpu.global.add.u32");
        return success();
      }
      LLVM::FenceOp::create(b, loc, LLVM::AtomicOrdering::release,
                            target.syncscope());
      LLVM::AtomicRMWOp::create(b, loc, LLVM::AtomicBinOp::add,
                                counterPointer(counter), i32(1),
                                LLVM::AtomicOrdering::monotonic,
                                target.syncscope(), /*alignment=*/4);
      return success();
    }
    LLVM::FenceOp::create(b, loc, LLVM::AtomicOrdering::release, StringRef());
    Value base = device ? basePointer(selectCopy(peerCounters, device))
                        : countersBase;
    systemAdd(elementPointer(base, counter, b.getI32Type()));
    return success();
  }

  /// GPU: adds 1 to the i32 at `ptr` with the PTX reduction `red` (for
  /// example "red.relaxed.sys.add.u32"), written out because NVPTX drops
  /// the ordering and scope of an atomicrmw.
  void ptxAddOne(Value ptr, StringRef red) {
    LLVM::InlineAsmOp::create(b, loc, TypeRange{}, ValueRange{ptr, i32(1)},
                              (red + " [$0], $1;").str(), "l,r",
                              /*has_side_effects=*/true,
                              /*is_align_stack=*/false,
                              LLVM::tailcallkind::TailCallKind::None,
                              LLVM::AsmDialectAttr(), ArrayAttr());
  }

  /// Adds 1 to the i32 at `ptr` with a relaxed system-scope atomic (the
  /// caller has issued the release fence).
  void systemAdd(Value ptr) {
    if (target.gpu) {
      ptxAddOne(ptr, "red.relaxed.sys.add.u32");
      return;
    }
    LLVM::AtomicRMWOp::create(b, loc, LLVM::AtomicBinOp::add, ptr, i32(1),
                              LLVM::AtomicOrdering::monotonic, StringRef(),
                              /*alignment=*/4);
  }

  /// The device (index) at offset `k` (index, any sign) from this one.
  Value peerDevice(Value k) {
    Value n = idx(numDevices);
    Value r = arith::RemSIOp::create(b, loc, k, n);
    Value nonNegative = arith::AddIOp::create(b, loc, r, n);
    return arith::RemUIOp::create(
        b, loc, arith::AddIOp::create(b, loc, deviceIndex, nonNegative), n);
  }

  /// copies[device] for a dynamic `device`.
  Value selectCopy(ArrayRef<Value> copies, Value device) {
    Value chosen = copies[0];
    for (int64_t d = 1; d < static_cast<int64_t>(copies.size()); ++d)
      chosen = arith::SelectOp::create(
          b, loc,
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, device,
                                idx(d)),
          copies[d], chosen);
    return chosen;
  }

  //===--------------------------------------------------------------------===//
  // Tiles
  //===--------------------------------------------------------------------===//

  /// The coordinates of linear tile `tile` (index) in `extents`, row-major.
  SmallVector<Value> delinearize(Value tile, ArrayRef<Value> extents) {
    SmallVector<Value> coords(extents.size());
    Value rest = tile;
    for (int64_t d = extents.size() - 1; d >= 0; --d) {
      coords[d] = arith::RemUIOp::create(b, loc, rest, extents[d]);
      rest = arith::DivUIOp::create(b, loc, rest, extents[d]);
    }
    return coords;
  }

  /// Emits the body of `task` for linear tile `tile` (index) at the end of
  /// the current block of `scope`; continues in a new current block.
  LogicalResult emitTile(Scope &scope, TaskOp task, unsigned taskId,
                         Value tile) {
    Value start = target.profile ? now() : Value();
    SmallVector<Value> extents;
    if (failed(tileCount(task, scope, &extents)))
      return failure();
    SmallVector<Value> coords = delinearize(tile, extents);
    IRMapping map;
    Block &body = task.getBody().front();
    for (auto [arg, c] : llvm::zip(body.getArguments(), coords))
      map.map(arg, c);
    Value taskValue = idx(taskId);
    Value ready = start;
    for (Operation &op : body) {
      if (auto shared = tileShared.lookup(&op)) {
        map.map(op.getResult(0), shared);
        continue;
      }
      if (auto staged = dyn_cast<StagedRowsOp>(op)) {
        if (failed(emitStagedRows(staged, map, scope)))
          return failure();
        continue;
      }
      if (auto wait = dyn_cast<EventWaitOp>(op)) {
        FailureOr<SmallVector<Value>> idxs =
            materializeAll(wait.getIndices(), scope, &map);
        if (failed(idxs) ||
            failed(emitWait(scope, wait.getEvent(), *idxs, taskValue, tile)))
          return failure();
        if (target.profile)
          ready = now();
        continue;
      }
      if (auto signal = dyn_cast<EventSignalOp>(op)) {
        FailureOr<SmallVector<Value>> idxs =
            materializeAll(signal.getIndices(), scope, &map);
        Value peer;
        if (signal.getPeer()) {
          FailureOr<SmallVector<Value>> k =
              materializeAll(signal.getPeer(), scope, &map);
          if (failed(k))
            return failure();
          peer = k->front();
        }
        if (failed(idxs) || failed(emitSignal(scope, signal.getEvent(), *idxs,
                                              peer, taskValue, tile)))
          return failure();
        continue;
      }
      // Values from outside the task (kernel level) used anywhere in `op`.
      WalkResult walk = op.walk([&](Operation *inner) {
        for (Value operand : inner->getOperands()) {
          if (map.contains(operand))
            continue;
          Region *r = operand.getParentRegion();
          if (!r || task->isAncestor(r->getParentOp()))
            continue;
          FailureOr<Value> m = materialize(operand, scope);
          if (failed(m))
            return WalkResult::interrupt();
          map.map(operand, *m);
        }
        return WalkResult::advance();
      });
      if (walk.wasInterrupted())
        return failure();
      b.clone(op, map);
    }
    // A staged entry's copies are complete before its region is reused
    // (the body may not have waited: its rows may have had no work).
    if (currentStage && stagedTasks.contains(task))
      waitStaged(decodeStage(currentStage));
    // The tile is done on every thread before the next one starts.
    barrier();
    if (target.profile)
      recordTile(taskValue, tile, start, ready);
    return success();
  }

  //===--------------------------------------------------------------------===//
  // Weights staged across tiles (et.staged_rows)
  //===--------------------------------------------------------------------===//

  /// An LLVM shared-memory pointer to the mbarrier of region `slot` (index).
  Value stageBarrier(Value slot) {
    return tile::elementPointer(b, loc, stageBarriers, slot, 8, 3);
  }

  /// i32 stage word (see emitStatic) -> (staged, slot (index), parity (i32)).
  std::tuple<Value, Value, Value> decodeStage(Value word) {
    Type i32 = b.getI32Type();
    auto c32 = [&](int64_t v) { return arith::ConstantIntOp::create(b, loc, i32, v); };
    Value staged = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, word, c32(0));
    Value slot = arith::IndexCastOp::create(b, loc, b.getIndexType(), arith::AndIOp::create(b, loc, word, c32(1)));
    Value parity = arith::AndIOp::create(b, loc, arith::ShRUIOp::create(b, loc, word, c32(1)), c32(1));
    return {staged, slot, parity};
  }

  /// Every thread waits until the copies of a staged entry (a decoded stage
  /// word, see decodeStage) are in shared memory.
  void waitStaged(std::tuple<Value, Value, Value> decoded) {
    auto [staged, slot, parity] = decoded;
    auto ifOp = scf::IfOp::create(b, loc, staged, /*withElse=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    NVVM::MBarrierTryWaitParityOp::create(b, loc, stageBarrier(slot), parity,
                                          arith::ConstantIntOp::create(b, loc, b.getI32Type(), 0));
  }

  /// How many rows of an et.staged_rows are staged: min(R, rows, N - row0),
  /// at least 0 (index).
  Value stagedCount(StagedRowsOp op, Value w, Value row0, Value rows) {
    int64_t r = op.getView().getType().getDimSize(0);
    Value n = memref::DimOp::create(b, loc, w, 0);
    Value count = arith::MinSIOp::create(b, loc, arith::MinSIOp::create(b, loc, idx(r), rows),
                                         arith::SubIOp::create(b, loc, n, row0));
    return arith::MaxSIOp::create(b, loc, count, idx(0));
  }

  /// et.staged_rows in a tile: its view at the entry's region and its
  /// count, after the entry's copies are complete; a count of 0 when the
  /// entry was not staged (or the schedule stages nothing).
  LogicalResult emitStagedRows(StagedRowsOp op, IRMapping &map, Scope &scope) {
    FailureOr<SmallVector<Value>> operands =
        materializeAll({op.getW(), op.getRow0(), op.getRows()}, scope, &map);
    if (failed(operands))
      return failure();
    Value count = idx(0), shift = idx(stageStart + op.getOffset());
    if (currentStage) {
      auto decoded = decodeStage(currentStage);
      auto [staged, slot, parity] = decoded;
      waitStaged(decoded);
      count = arith::SelectOp::create(b, loc, staged,
                                      stagedCount(op, (*operands)[0], (*operands)[1], (*operands)[2]), idx(0));
      shift = arith::AddIOp::create(b, loc, shift, arith::MulIOp::create(b, loc, slot, idx(stageRegionBytes)));
    }
    Value view = memref::ViewOp::create(b, loc, op.getView().getType(), stageShared, shift, ValueRange{});
    map.map(op.getView(), view);
    map.map(op.getCount(), count);
    return success();
  }

  /// What the worker needs to stage a tile of a task: its et.staged_rows ops
  /// and the task-body ops their operands come from (in order).
  struct StagePlan {
    SmallVector<StagedRowsOp> ops;
    SmallVector<Operation *> slice;
  };

  /// The plan of `task`, when its staged rows follow from the tile
  /// coordinates and values known at the worker's entry alone (side-effect
  /// free ops of the task's top level, eager kernel-level values, eager
  /// extents); else none, and its tiles are never staged.
  std::optional<StagePlan> stagePlan(TaskOp task) {
    StagePlan plan;
    Block &body = task.getBody().front();
    for (Operation &op : body)
      if (auto staged = dyn_cast<StagedRowsOp>(op))
        plan.ops.push_back(staged);
    if (plan.ops.empty() ||
        !llvm::all_of(task.getExtents(), [&](Value e) { return eager.contains(e); }))
      return std::nullopt;
    llvm::SetVector<Operation *> slice;
    bool ok = true;
    std::function<void(Value)> visit = [&](Value v) {
      if (!ok)
        return;
      if (auto arg = dyn_cast<BlockArgument>(v)) {
        ok = arg.getOwner() == &body || eager.contains(v);
        return;
      }
      Operation *def = v.getDefiningOp();
      if (!task->isAncestor(def)) {
        ok = eager.contains(v);
        return;
      }
      if (slice.contains(def))
        return;
      if (def->getBlock() != &body || !isMemoryEffectFree(def) || def->getNumRegions() != 0) {
        ok = false;
        return;
      }
      for (Value operand : def->getOperands())
        visit(operand);
      slice.insert(def); // after what it uses
    };
    for (StagedRowsOp op : plan.ops)
      for (Value v : {Value(op.getW()), Value(op.getRow0()), Value(op.getRows())})
        visit(v);
    if (!ok)
      return std::nullopt;
    plan.slice.assign(slice.begin(), slice.end());
    return plan;
  }

  /// One thread: the copies of tile `tile` (index) of a task with `plan` into
  /// region `slot` (index): one expect-tx arrive with their bytes on the
  /// region's mbarrier, then one bulk copy per staged op.
  void emitStageCopies(TaskOp task, const StagePlan &plan, Value tile, Value slot) {
    SmallVector<Value> extents;
    for (Value e : task.getExtents())
      extents.push_back(eager.lookup(e));
    IRMapping map;
    map.map(task.getBody().front().getArguments(), delinearize(tile, extents));
    auto get = [&](Value v) {
      Value m = map.lookupOrNull(v);
      return m ? m : eager.lookup(v);
    };
    for (Operation *op : plan.slice) {
      for (Value operand : op->getOperands())
        if (!map.contains(operand))
          map.map(operand, get(operand));
      b.clone(*op, map);
    }
    Type i32 = b.getI32Type();
    Value total = arith::ConstantIntOp::create(b, loc, i32, 0);
    SmallVector<std::tuple<Value, Value, Value>> copies; // dst, src, bytes
    Value region = arith::AddIOp::create(b, loc, idx(stageStart),
                                         arith::MulIOp::create(b, loc, slot, idx(stageRegionBytes)));
    for (StagedRowsOp op : plan.ops) {
      Value w = get(op.getW()), row0 = get(op.getRow0());
      int64_t k = op.getView().getType().getDimSize(1);
      Value count = stagedCount(op, w, row0, get(op.getRows()));
      Value bytes = arith::IndexCastOp::create(b, loc, i32, arith::MulIOp::create(b, loc, count, idx(k * 2)));
      total = arith::AddIOp::create(b, loc, total, bytes);
      Value dst = tile::elementPointer(b, loc, stageShared,
                                       arith::AddIOp::create(b, loc, region, idx(op.getOffset())), 1, 3);
      // Row r of w starts at element r * K (rows contiguous).
      Value row0c = arith::MinSIOp::create(b, loc, row0, memref::DimOp::create(b, loc, w, 0));
      Value src = tile::elementPointer(b, loc, w, arith::MulIOp::create(b, loc, row0c, idx(k)), 2, 1);
      copies.push_back({dst, src, bytes});
    }
    Value barrierPtr = stageBarrier(slot);
    NVVM::MBarrierArriveExpectTxOp::create(b, loc, Type(), barrierPtr, total, NVVM::MemScopeKind::CTA,
                                           /*relaxed=*/false, Value());
    for (auto [dst, src, bytes] : copies) {
      Value any = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sgt, bytes,
                                        arith::ConstantIntOp::create(b, loc, i32, 0));
      auto ifOp = scf::IfOp::create(b, loc, any, /*withElse=*/false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(ifOp.thenBlock());
      // A shared::cluster destination (the CTA's own shared memory): the
      // shared::cta form needs PTX 8.6.
      Value dstCluster = LLVM::AddrSpaceCastOp::create(
          b, loc, LLVM::LLVMPointerType::get(b.getContext(), 7), dst);
      NVVM::CpAsyncBulkGlobalToSharedClusterOp::create(b, loc, dstCluster, src, barrierPtr, bytes, Value(),
                                                       Value());
    }
  }

  /// Thread `issuer` (i1): the copies of the entry (`word`, `task`, `tile`:
  /// i32 stage word, i32 task id, index tile) when its stage word says
  /// staged.
  void emitStageEntry(Value word, Value task, Value tile, Value issuer) {
    auto [staged, slot, parity] = decodeStage(word);
    (void)parity;
    Value go = arith::AndIOp::create(b, loc, issuer, staged);
    auto ifOp = scf::IfOp::create(b, loc, go, /*withElse=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    SmallVector<int64_t> cases;
    for (auto [k, plan] : llvm::enumerate(stagePlans))
      if (plan)
        cases.push_back(k);
    auto sw = scf::IndexSwitchOp::create(b, loc, TypeRange{}, toIndex(task), cases, cases.size());
    b.createBlock(&sw.getDefaultRegion());
    scf::YieldOp::create(b, loc);
    for (auto [c, k] : llvm::enumerate(cases)) {
      b.createBlock(&sw.getCaseRegions()[c]);
      emitStageCopies(tasks[k], *stagePlans[k], tile, slot);
      scf::YieldOp::create(b, loc);
    }
  }


  //===--------------------------------------------------------------------===//
  // Setup
  //===--------------------------------------------------------------------===//

  LogicalResult cloneEagerValues();
  LogicalResult layoutEvents();
  void emitCapacityCheckAndClear(Block *exit);
  LogicalResult emitStatic(ScheduleOp schedule);
  LogicalResult emitDynamic(ScheduleOp schedule);
  void emitDeviceBarrier(Value ok);

  KernelOp kernel;
  Target target;
  EventGraph graph;
  OpBuilder b;
  Location loc;
  Operation *container = nullptr;

  SmallVector<TaskOp> tasks;
  IRMapping eager;
  llvm::DenseMap<Value, EventLayout> layouts;
  llvm::DenseMap<unsigned, memref::GlobalOp> countTables;
  Value totalCounters;

  // Worker function values.
  Value workerId, threadId, numThreads, epoch, spinLimit;
  Value countersMem, controlMem, errorMem, traceMem, clockBuffer;
  /// GPU profile: the worker's next trace slot and the end of its region
  /// of the buffer (two shared-memory words, set at launch).
  Value traceSlotsMem;
  Value countersBase, controlBase;
  Value bank, bankBase;
  /// Words per bank: half of the counter buffer (less the abort word on
  /// several devices), whatever this launch's event tensors need, so that
  /// the banks stay in place when the counts change between launches.
  Value bankWords;
  /// Several devices: the counter (after both banks) that another device's
  /// error raises.
  Value abortWord;
  Value sharedScratch;
  // Several devices: the number, this device (index), every device's
  // counter buffer, and every device's copy of each symmetric argument
  // (keyed by the worker function's argument for the local copy).
  int64_t numDevices = 1;
  Value deviceIndex;
  SmallVector<Value> peerCounters;
  llvm::DenseMap<Value, SmallVector<Value>> peerCopies;
  /// Counters of the event tensors in a bank (the bank may end with the
  /// counter of the barrier across devices).
  Value eventCounters;
  /// Whether the worker's tiles all ran (the result of the tile loop).
  Value finishedOk;
  /// Workgroup-memory allocas at the top level of task bodies (from the
  /// tile lowering) and the workgroup attribution each one uses.
  llvm::DenseMap<Operation *, Value> tileShared;
  /// Staging across tiles (GPU): the tasks with et.staged_rows; the size of
  /// a region (two of them, used by a worker's
  /// entries in turn) and where region 0 starts in the dynamic shared
  /// memory; that memory as bytes; the regions' two mbarriers (i64
  /// workgroup buffer); the stage word of the entry being emitted (null
  /// when nothing is staged).
  llvm::DenseSet<Operation *> stagedTasks;
  int64_t stageRegionBytes = 0, stageStart = 0;
  Value stageShared, stageBarriers, currentStage;
  /// Tasks' staging plans (by task id).
  SmallVector<std::optional<StagePlan>> stagePlans;
  /// The block that returns.
  Block *exitBlock = nullptr;
  int64_t numWorkers = 1;
};

} // namespace

//===----------------------------------------------------------------------===//
// Setup
//===----------------------------------------------------------------------===//

/// Clones the kernel-level ops that depend on no device data into the entry
/// of the worker; the others are materialized where they are used.
LogicalResult WorkerEmitter::cloneEagerValues() {
  llvm::DenseSet<Operation *> lazy;
  for (Operation &op : kernel.getBody().front()) {
    if (isa<TaskOp, ScheduleOp, EventCreateOp>(op))
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

/// Fails the launch (before any tile runs) when the counter buffer cannot
/// hold both banks; otherwise clears the bank the next launch uses.
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
    Value word = arith::AddIOp::create(b, loc, idx(abi::kControlTicket0), other);
    memref::StoreOp::create(b, loc, i32(0), controlMem, ValueRange{word});
  }
}

//===----------------------------------------------------------------------===//
// Static schedules
//===----------------------------------------------------------------------===//

LogicalResult WorkerEmitter::emitStatic(ScheduleOp schedule) {
  // The program table: (task, tile, stage) triples; tile -1 - k is "cyclic
  // k". Stage is -1, or, for a single tile whose weight rows the worker
  // stages (et.staged_rows), slot | parity << 1: the entry's region (its
  // index in the worker's program mod 2, so that consecutive entries,
  // whose copies overlap, use different regions) and the parity of the
  // region's mbarrier phase that its copies complete.
  SmallVector<int32_t> entries, offsets{0};
  llvm::DenseMap<Operation *, unsigned> taskIds;
  for (auto [i, t] : llvm::enumerate(tasks))
    taskIds[t] = i;
  stagePlans.clear();
  for (TaskOp task : tasks)
    stagePlans.push_back(stagedTasks.contains(task) ? stagePlan(task) : std::nullopt);
  bool anyStaged = false;
  for (WorkerOp worker : schedule.getBody().front().getOps<WorkerOp>()) {
    int64_t position = 0, phases[2] = {0, 0};
    for (RunOp run : worker.getBody().front().getOps<RunOp>()) {
      int32_t task = taskIds.lookup(run.getTaskOp());
      auto add = [&](int32_t tile) {
        int32_t stage = -1;
        if (tile >= 0 && stagePlans[task]) {
          int64_t slot = position % 2;
          stage = static_cast<int32_t>(slot | ((phases[slot]++ % 2) << 1));
          anyStaged = true;
        }
        entries.append({task, tile, stage});
        ++position;
      };
      if (std::optional<ArrayRef<int64_t>> tiles = run.getTiles()) {
        for (int64_t tile : *tiles) {
          if (tile > INT32_MAX)
            return run.emitOpError("tile id does not fit in 32 bits");
          add(static_cast<int32_t>(tile));
        }
      } else {
        add(static_cast<int32_t>(-1 - *run.getCyclic()));
      }
    }
    offsets.push_back(entries.size() / 3);
  }
  // On the GPU a worker copies its entries into shared memory before its
  // first tile (below). With the table padded to the same number of rows
  // per worker, the copies' addresses follow from the worker id alone, so
  // they go out together with the load of the worker's entry count: one
  // memory round trip before the first tile instead of two (the range,
  // then the entries). Padding may at most double the table.
  const int64_t workerCount = static_cast<int64_t>(offsets.size()) - 1;
  int64_t longest = 0;
  for (int64_t w = 0; w < workerCount; ++w)
    longest = std::max<int64_t>(longest, offsets[w + 1] - offsets[w]);
  const bool sharedFits = target.gpu && longest > 0 && (longest + 1) * 3 * 4 <= kSharedProgramBytes;
  const int64_t rows = static_cast<int64_t>(entries.size() / 3);
  const bool padded = sharedFits && workerCount * longest <= 2 * rows + workerCount;
  SmallVector<int32_t> counts;
  if (padded) {
    SmallVector<int32_t> dense = std::move(entries);
    entries.clear();
    for (int64_t w = 0; w < workerCount; ++w) {
      int64_t n = offsets[w + 1] - offsets[w];
      entries.append(dense.begin() + 3 * offsets[w], dense.begin() + 3 * offsets[w + 1]);
      for (int64_t k = n; k < longest; ++k)
        entries.append({0, 0, -1});
      counts.push_back(static_cast<int32_t>(n));
    }
  }
  if (entries.empty())
    entries.append({0, 0, -1}); // keep the table non-empty
  auto makeTable = [&](StringRef suffix, ArrayRef<int32_t> data,
                       ArrayRef<int64_t> shape) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&container->getRegion(0).front());
    auto type = MemRefType::get(shape, b.getI32Type());
    auto value = DenseIntElementsAttr::get(
        RankedTensorType::get(shape, b.getI32Type()), data);
    return memref::GlobalOp::create(
        b, loc, ("__et_" + kernel.getSymName() + suffix).str(),
        b.getStringAttr("private"), type, value, /*constant=*/true,
        IntegerAttr());
  };
  memref::GlobalOp program =
      makeTable("_program", entries, {static_cast<int64_t>(entries.size() / 3), 3});
  Value programMem = memref::GetGlobalOp::create(b, loc, program.getType(),
                                                 program.getSymName());
  Value begin, end;
  if (padded) {
    // Worker w's entries are rows [w * longest, w * longest + counts[w]).
    memref::GlobalOp countTable = makeTable("_counts", counts, {workerCount});
    Value countsMem = memref::GetGlobalOp::create(b, loc, countTable.getType(), countTable.getSymName());
    begin = arith::MulIOp::create(b, loc, workerId, idx(longest));
    end = arith::AddIOp::create(b, loc, begin,
                                toIndex(memref::LoadOp::create(b, loc, countsMem, ValueRange{workerId})));
  } else {
    memref::GlobalOp starts =
        makeTable("_starts", offsets, {static_cast<int64_t>(offsets.size())});
    Value startsMem = memref::GetGlobalOp::create(b, loc, starts.getType(),
                                                  starts.getSymName());
    begin = toIndex(
        memref::LoadOp::create(b, loc, startsMem, ValueRange{workerId}));
    end = toIndex(memref::LoadOp::create(
        b, loc, startsMem,
        ValueRange{arith::AddIOp::create(b, loc, workerId, idx(1))}));
  }

  // On the GPU the worker's entries are copied into shared memory once, so
  // that moving to the next tile reads no global memory: the tables' lines
  // do not stay in L1 or L2 while the weights stream through, and loads of
  // the next entry (and of the worker's range, which ptxas reloads rather
  // than keep in a register) cost the worker memory round trips between
  // every two tiles. Row 0 holds the worker's entry count and first entry;
  // row 1 + j its entry j (docs/lowering.md, "The worker's program in
  // shared memory").
  Value programShared;
  if (sharedFits) {
    auto type = MemRefType::get({longest + 1, 3}, b.getI32Type(), MemRefLayoutAttrInterface(),
                                gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup));
    std::string name = ("__et_" + kernel.getSymName() + "_program_shared").str();
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&container->getRegion(0).front());
      memref::GlobalOp::create(b, loc, name, b.getStringAttr("private"), type, Attribute(),
                               /*constant=*/false, b.getI64IntegerAttr(16));
    }
    programShared = memref::GetGlobalOp::create(b, loc, type, name);
    Value count = arith::SubIOp::create(b, loc, end, begin);
    {
      auto header = scf::IfOp::create(b, loc, isThread0(), /*withElse=*/false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(header.thenBlock());
      Value toI32[] = {arith::IndexCastOp::create(b, loc, b.getI32Type(), count),
                       arith::IndexCastOp::create(b, loc, b.getI32Type(), begin)};
      for (int64_t f = 0; f < 2; ++f)
        memref::StoreOp::create(b, loc, toI32[f], programShared, ValueRange{idx(0), idx(f)});
    }
    // Padded: all `longest` rows (the pad rows are never read), so that
    // no copy waits for the count.
    Value words = padded ? idx(longest * 3) : arith::MulIOp::create(b, loc, count, idx(3)).getResult();
    auto copy = scf::ForOp::create(b, loc, threadId, words, numThreads);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(copy.getBody());
    Value k = copy.getInductionVar();
    Value row = arith::DivUIOp::create(b, loc, k, idx(3));
    Value col = arith::RemUIOp::create(b, loc, k, idx(3));
    Value word = memref::LoadOp::create(b, loc, programMem,
                                        ValueRange{arith::AddIOp::create(b, loc, begin, row), col});
    memref::StoreOp::create(b, loc, word, programShared,
                            ValueRange{arith::AddIOp::create(b, loc, row, idx(1)), col});
  }
  // The loop below walks entries by `position`: the entry's index in the
  // worker's shared copy, or in the global table without one.
  auto sharedHeader = [&](int64_t field) -> Value {
    return toIndex(memref::LoadOp::create(b, loc, programShared, ValueRange{idx(0), idx(field)}));
  };
  // Word `field` of the entry at `position`.
  auto entryWord = [&](Value position, int64_t field) -> Value {
    if (programShared)
      return memref::LoadOp::create(b, loc, programShared,
                                    ValueRange{arith::AddIOp::create(b, loc, position, idx(1)), idx(field)});
    return memref::LoadOp::create(b, loc, programMem, ValueRange{position, idx(field)});
  };

  Type indexType = b.getIndexType(), i1Type = b.getI1Type();
  if (anyStaged) {
    // The staging regions' mbarriers: one arrival (the issuing thread's
    // expect-tx arrive) per phase.
    auto ifOp = scf::IfOp::create(b, loc, isThread0(), /*withElse=*/false);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(ifOp.thenBlock());
      for (int64_t slot = 0; slot < 2; ++slot)
        NVVM::MBarrierInitOp::create(b, loc, stageBarrier(idx(slot)),
                                     arith::ConstantIntOp::create(b, loc, b.getI32Type(), 1), Value());
      NVVM::FenceMbarrierInitOp::create(b, loc);
    }
  }
  if (anyStaged || programShared)
    barrier();
  Value firstPosition = programShared ? idx(0) : begin;
  auto loop = scf::WhileOp::create(b, loc, TypeRange{indexType, i1Type},
                                   ValueRange{firstPosition, i1(true)});
  {
    Block *before = b.createBlock(&loop.getBefore(), {}, {indexType, i1Type},
                                  {loc, loc});
    Value more = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult,
                                       before->getArgument(0),
                                       programShared ? sharedHeader(0) : end);
    Value go = arith::AndIOp::create(b, loc, more, before->getArgument(1));
    scf::ConditionOp::create(b, loc, go, before->getArguments());
  }
  Block *after =
      b.createBlock(&loop.getAfter(), {}, {indexType, i1Type}, {loc, loc});
  Value i = after->getArgument(0);
  Value taskId = toIndex(entryWord(i, 0));
  Value tile32 = entryWord(i, 1);
  Value tileI64 = arith::ExtSIOp::create(b, loc, b.getI64Type(), tile32);
  if (anyStaged) {
    currentStage = entryWord(i, 2);
    // Before this entry's waits: the copies of entries [from, i + 2) of
    // the worker's program, from = i + 1 (at its first entry, i).
    Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, i, firstPosition);
    Value nextI = arith::AddIOp::create(b, loc, i, idx(1));
    Value from = arith::SelectOp::create(b, loc, first, i, nextI);
    Value to = arith::MinUIOp::create(b, loc, arith::AddIOp::create(b, loc, i, idx(2)),
                                      programShared ? sharedHeader(0) : end);
    auto forOp = scf::ForOp::create(b, loc, from, to, idx(1));
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(forOp.getBody());
    Value j = forOp.getInductionVar();
    // The last thread issues the copies: thread 0 polls the events.
    Value last = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, threadId,
                                       arith::SubIOp::create(b, loc, numThreads, idx(1)));
    emitStageEntry(entryWord(j, 2), entryWord(j, 0), toIndex(entryWord(j, 1)), last);
  }

  auto [region, top] = openRegion(TypeRange{i1Type}, [&] { return SmallVector<Value>{i1(false)}; });
  Block *entry = b.getInsertionBlock();
  Block *done = newBlock(top);
  b.setInsertionPointToEnd(done);
  scf::YieldOp::create(b, loc, ValueRange{i1(true)});

  // Dispatch on the task id.
  SmallVector<Block *> cases;
  SmallVector<int32_t> caseValues;
  for (unsigned k = 0; k < tasks.size(); ++k) {
    cases.push_back(newBlock(top));
    caseValues.push_back(k);
  }
  Block *badEntry = newBlock(top);
  b.setInsertionPointToEnd(entry);
  Value task32 = arith::IndexCastOp::create(b, loc, b.getI32Type(), taskId);
  cf::SwitchOp::create(b, loc, task32, badEntry, ValueRange{}, caseValues,
                       cases, SmallVector<ValueRange>(cases.size(), ValueRange{}));
  b.setInsertionPointToEnd(badEntry);
  recordError(WorkerError::BadScheduleEntry, taskId, idx(-1), idx(-1),
              idx(-1), idx(-1), idx(-1));
  cf::BranchOp::create(b, loc, top.fail, ValueRange{});

  for (auto [k, task] : llvm::enumerate(tasks)) {
    // ^case: tile >= 0 ? body(tile, once) : cyclic
    Block *cyc = newBlock(top);
    Block *loopHead = newBlock(top, {indexType, indexType});
    Block *bodyEntry = newBlock(top, {indexType, i1Type, indexType});
    b.setInsertionPointToEnd(cases[k]);
    Value isCyclic = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt,
                                           tileI64, i64(0));
    Value single = toIndex(arith::MaxSIOp::create(b, loc, tileI64, i64(0)));
    cf::CondBranchOp::create(b, loc, isCyclic, cyc, ValueRange{}, bodyEntry,
                             ValueRange{single, i1(false), idx(0)});

    // ^cyc: n = tiles; first = (w - k) mod W.
    b.setInsertionPointToEnd(cyc);
    {
      Scope scope{top.region, top.fail, {}};
      FailureOr<Value> n = tileCount(task, scope);
      if (failed(n))
        return failure();
      Value offset = toIndex(arith::SubIOp::create(b, loc, i64(-1), tileI64));
      Value shifted = arith::SubIOp::create(
          b, loc, arith::AddIOp::create(b, loc, workerId, idx(numWorkers)),
          offset);
      Value first = arith::RemUIOp::create(b, loc, shifted, idx(numWorkers));
      cf::BranchOp::create(b, loc, loopHead, ValueRange{first, *n});
    }
    b.setInsertionPointToEnd(loopHead);
    {
      Value t = loopHead->getArgument(0), n = loopHead->getArgument(1);
      Value more =
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, t, n);
      cf::CondBranchOp::create(b, loc, more, bodyEntry,
                               ValueRange{t, i1(true), n}, done, ValueRange{});
    }
    b.setInsertionPointToEnd(bodyEntry);
    {
      Scope scope{top.region, top.fail, {}};
      Value t = bodyEntry->getArgument(0);
      if (failed(emitTile(scope, task, k, t)))
        return failure();
      Value next = arith::AddIOp::create(b, loc, t, idx(numWorkers));
      Block *again = newBlock(top);
      cf::CondBranchOp::create(b, loc, bodyEntry->getArgument(1), again,
                               ValueRange{}, done, ValueRange{});
      b.setInsertionPointToEnd(again);
      cf::BranchOp::create(b, loc, loopHead,
                           ValueRange{next, bodyEntry->getArgument(2)});
    }
  }
  b.setInsertionPointAfter(region);
  Value nextI = arith::AddIOp::create(b, loc, i, idx(1));
  scf::YieldOp::create(b, loc, ValueRange{nextI, region.getResult(0)});
  b.setInsertionPointAfter(loop);
  finishedOk = loop.getResult(1);
  currentStage = Value();
  return success();
}

//===----------------------------------------------------------------------===//
// Dynamic schedules
//===----------------------------------------------------------------------===//

LogicalResult WorkerEmitter::emitDynamic(ScheduleOp schedule) {
  llvm::DenseMap<Operation *, unsigned> taskIds;
  for (auto [i, t] : llvm::enumerate(tasks))
    taskIds[t] = i;
  SmallVector<TaskOp> queue;
  for (RunOp run : schedule.getBody().front().getOps<RunOp>())
    queue.push_back(run.getTaskOp());

  Type i1Type = b.getI1Type();
  auto loop = scf::WhileOp::create(b, loc, TypeRange{i1Type, i1Type},
                                   ValueRange{i1(true), i1(false)});
  {
    Block *before =
        b.createBlock(&loop.getBefore(), {}, {i1Type, i1Type}, {loc, loc});
    Value notDone = arith::XOrIOp::create(b, loc, before->getArgument(1),
                                          i1(true));
    Value go = arith::AndIOp::create(b, loc, before->getArgument(0), notDone);
    scf::ConditionOp::create(b, loc, go, before->getArguments());
  }
  b.createBlock(&loop.getAfter(), {}, {i1Type, i1Type}, {loc, loc});
  // Thread 0 takes the ticket; the CTA shares it.
  Value ticketWord = arith::AddIOp::create(b, loc, idx(abi::kControlTicket0), bank);
  auto take = scf::IfOp::create(b, loc, TypeRange{b.getI64Type()},
                                isThread0(), /*withElse=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(take.thenBlock());
    Value old = LLVM::AtomicRMWOp::create(
        b, loc, LLVM::AtomicBinOp::add,
        elementPointer(controlBase, ticketWord, b.getI32Type()), i32(1),
        LLVM::AtomicOrdering::monotonic, target.syncscope(), 4);
    scf::YieldOp::create(b, loc, ValueRange{toI64(old)});
    b.setInsertionPointToStart(take.elseBlock());
    scf::YieldOp::create(b, loc, ValueRange{i64(0)});
  }
  Value ticket = toIndex(broadcast(take.getResult(0)));

  auto [region, top] =
      openRegion(TypeRange{i1Type, i1Type}, [&] { return SmallVector<Value>{i1(false), i1(true)}; });
  Block *entry = b.getInsertionBlock();
  Block *exhausted = newBlock(top);
  b.setInsertionPointToEnd(exhausted);
  scf::YieldOp::create(b, loc, ValueRange{i1(true), i1(true)});

  // The queue's prefix sums of tile counts (constants when the counts
  // are static), then a balanced binary search for the task whose range
  // holds the ticket: O(log tasks) compares per ticket.
  b.setInsertionPointToEnd(entry);
  SmallVector<Value> bases{idx(0)};
  for (TaskOp task : queue) {
    Scope scope{top.region, top.fail, {}};
    FailureOr<Value> n = tileCount(task, scope);
    if (failed(n))
      return failure();
    bases.push_back(arith::AddIOp::create(b, loc, bases.back(), *n));
  }
  SmallVector<Block *> runs;
  for (size_t k = 0; k < queue.size(); ++k)
    runs.push_back(newBlock(top));
  // Blocks that pick among tasks [lo, hi), given bases[lo] <= ticket <
  // bases[hi]: the largest k with bases[k] <= ticket, whose range is then
  // non-empty.
  std::function<Block *(size_t, size_t)> node = [&](size_t lo, size_t hi) -> Block * {
    if (hi - lo == 1)
      return runs[lo];
    size_t mid = (lo + hi) / 2;
    Block *left = node(lo, mid), *right = node(mid, hi);
    Block *here = newBlock(top);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToEnd(here);
    Value below = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, ticket, bases[mid]);
    cf::CondBranchOp::create(b, loc, below, left, ValueRange{}, right, ValueRange{});
    return here;
  };
  if (queue.empty()) {
    cf::BranchOp::create(b, loc, exhausted, ValueRange{});
  } else {
    Block *root = node(0, queue.size());
    Value inQueue = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, ticket, bases.back());
    cf::CondBranchOp::create(b, loc, inQueue, root, ValueRange{}, exhausted, ValueRange{});
  }
  for (auto [k, task] : llvm::enumerate(queue)) {
    b.setInsertionPointToEnd(runs[k]);
    Value tile = arith::SubIOp::create(b, loc, ticket, bases[k]);
    Scope bodyScope{top.region, top.fail, {}};
    if (failed(emitTile(bodyScope, task, taskIds.lookup(task), tile)))
      return failure();
    scf::YieldOp::create(b, loc, ValueRange{i1(true), i1(false)});
  }
  b.setInsertionPointAfter(region);
  scf::YieldOp::create(b, loc, region.getResults());
  b.setInsertionPointAfter(loop);
  finishedOk = loop.getResult(0);
  return success();
}

//===----------------------------------------------------------------------===//
// The barrier across devices
//===----------------------------------------------------------------------===//

/// Several devices: a worker that ran all its tiles adds 1 to the barrier
/// counter of every other device; worker 0 of each device waits until all
/// workers of the other devices have. So no device starts its next launch
/// (and signals into the bank that launch uses) before every device has
/// finished this one, including clearing that bank. A worker that stopped
/// on an error skips the barrier; the other devices then time out on it.
void WorkerEmitter::emitDeviceBarrier(Value ok) {
  auto ifOk = scf::IfOp::create(b, loc, ok, /*withElse=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(ifOk.thenBlock());
  Value word = arith::AddIOp::create(b, loc, bankBase, eventCounters);
  {
    auto first = scf::IfOp::create(b, loc, isThread0(), /*withElse=*/false);
    OpBuilder::InsertionGuard inner(b);
    b.setInsertionPointToStart(first.thenBlock());
    LLVM::FenceOp::create(b, loc, LLVM::AtomicOrdering::release, StringRef());
    for (int64_t k = 1; k < numDevices; ++k) {
      Value copy = selectCopy(peerCounters, peerDevice(idx(k)));
      systemAdd(elementPointer(basePointer(copy), word, b.getI32Type()));
    }
  }
  auto worker0 = scf::IfOp::create(
      b, loc,
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, workerId, idx(0)),
      /*withElse=*/false);
  b.setInsertionPointToStart(worker0.thenBlock());
  auto [region, scope] = openRegion(TypeRange{}, [] { return SmallVector<Value>{}; });
  // Reported as a wait of no task on the event after the last one. A
  // timeout here is the consequence of another device's trouble, which
  // that device reports: it stops only this device, so it cannot cut the
  // other device short before it records the cause.
  emitSpin(scope, word, idx((numDevices - 1) * numWorkers), idx(-1), idx(-1),
           idx(layouts.size()), idx(0), StringRef(), /*localOnly=*/true);
  scf::YieldOp::create(b, loc);
}

//===----------------------------------------------------------------------===//
// Driver
//===----------------------------------------------------------------------===//

LogicalResult WorkerEmitter::emit(Operation *containerOp) {
  container = containerOp;
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
      if (!target.gpu) {
        alloca.emitOpError("allocates workgroup memory, which the host worker lowering does not have");
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
        if (!target.gpu)
          return staged.emitOpError("stages weights in shared memory, which the host worker lowering does "
                                    "not have (lower et.linear with stage-bytes=0 for the CPU)");
        MemRefType view = staged.getView().getType();
        int64_t end = staged.getOffset() + view.getNumElements() * 2;
        stagedTasks.insert(task);
        stageRegionBytes = std::max<int64_t>(stageRegionBytes, llvm::alignTo(end, 128));
      }

  // The signature, in the order of abi::workerParams.
  MLIRContext *ctx = kernel.getContext();
  Type i64Type = b.getI64Type();
  auto dynI32 = MemRefType::get({ShapedType::kDynamic}, b.getI32Type());
  auto dynI64 = MemRefType::get({ShapedType::kDynamic}, i64Type);
  numDevices = kernel.getNumDevices();
  SmallVector<unsigned> symmetric;
  for (unsigned i = 0, e = kernel.getNumArguments(); i < e; ++i)
    if (kernel.isSymmetricArgument(i))
      symmetric.push_back(i);
  SmallVector<Type> inputs;
  // The position of each group's first parameter.
  llvm::DenseMap<abi::WorkerParam, unsigned> paramAt;
  for (abi::WorkerParam param : abi::workerParams(!target.gpu, target.profile, numDevices > 1)) {
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
  unsigned firstKernelArg = paramAt.lookup(abi::WorkerParam::Arguments);
  auto fnType = FunctionType::get(ctx, inputs, {});

  b.setInsertionPointToEnd(&container->getRegion(0).front());
  Block *entry;
  if (target.gpu) {
    auto smemType = MemRefType::get(
        {4}, i64Type, MemRefLayoutAttrInterface(),
        gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup));
    // Tiles of a worker run one after another (a barrier ends each), so
    // tasks share buffers: the j-th alloca of a type in any task uses the
    // j-th buffer of that type.
    SmallVector<Type> workgroup{smemType};
    SmallVector<std::pair<Operation *, unsigned>> allocas;
    llvm::DenseMap<Type, SmallVector<unsigned>> pool;
    for (TaskOp task : tasks) {
      llvm::DenseMap<Type, unsigned> used;
      for (Operation &op : task.getBody().front()) {
        if (!isWorkgroupAlloca(&op) || op.hasAttr(kDynamicShared))
          continue;
        Type type = op.getResult(0).getType();
        unsigned j = used[type]++;
        SmallVector<unsigned> &buffers = pool[type];
        if (j == buffers.size()) {
          buffers.push_back(workgroup.size());
          workgroup.push_back(type);
        }
        allocas.push_back({&op, buffers[j]});
      }
    }
    // The mbarriers of the two staging regions.
    unsigned barriersAt = workgroup.size();
    if (stageRegionBytes)
      workgroup.push_back(MemRefType::get({2}, i64Type, MemRefLayoutAttrInterface(),
                                          gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup)));
    // The profile's next slot of this worker's trace region, and its end.
    unsigned traceSlotsAt = workgroup.size();
    if (target.profile)
      workgroup.push_back(MemRefType::get({2}, b.getI32Type(), MemRefLayoutAttrInterface(),
                                          gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup)));
    auto fn = gpu::GPUFuncOp::create(b, loc, kernel.getSymName(), fnType,
                                     workgroup, TypeRange{});
    for (auto [op, i] : allocas)
      tileShared[op] = fn.getWorkgroupAttributions()[i];
    if (stageRegionBytes)
      stageBarriers = fn.getWorkgroupAttributions()[barriersAt];
    if (target.profile)
      traceSlotsMem = fn.getWorkgroupAttributions()[traceSlotsAt];
    // 16-byte alignment for vector accesses to the tile buffers.
    for (unsigned i = 1; i < workgroup.size(); ++i)
      fn.setWorkgroupAttributionAttr(i, LLVM::LLVMDialect::getAlignAttrName(),
                                     b.getI64IntegerAttr(16));
    fn->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
    if (target.threads > 0)
      fn.setKnownBlockSizeAttr(b.getDenseI32ArrayAttr(
          {static_cast<int32_t>(target.threads), 1, 1}));
    entry = &fn.getBody().front();
    sharedScratch = fn.getWorkgroupAttributions()[0];
    b.setInsertionPointToStart(entry);
    // Allocas marked et.dynamic_shared all start at the beginning of the
    // dynamic shared memory (tiles run one after another); the launch
    // provides its size. The dynamic shared memory is an external,
    // zero-sized workgroup global (PTX `.extern .shared ... []`).
    auto workgroupSpace = gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup);
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
        int64_t bytes = type.getNumElements() * type.getElementTypeBitWidth() / 8;
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
    // in a global the runtime reads before the launch:
    // __et_dynamic_shared_bytes.
    int64_t need = 0;
    for (auto &[op, view] : tileShared)
      if (op->hasAttr(kDynamicShared)) {
        auto type = cast<MemRefType>(op->getResult(0).getType());
        need = std::max<int64_t>(need, type.getNumElements() * type.getElementTypeBitWidth() / 8);
      }
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
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPoint(fn);
      LLVM::GlobalOp::create(b, loc, b.getI32Type(), /*isConstant=*/true, LLVM::Linkage::External,
                             abi::kDynamicSharedBytesGlobal, b.getI32IntegerAttr(need),
                             /*alignment=*/4, /*addrSpace=*/1);
    }
    workerId = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    threadId = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    numThreads = gpu::BlockDimOp::create(b, loc, gpu::Dimension::x);
  } else {
    auto fn = func::FuncOp::create(b, loc,
                                   (kernel.getSymName() + abi::kHostWorkerSuffix).str(),
                                   fnType);
    entry = fn.addEntryBlock();
    b.setInsertionPointToStart(entry);
    workerId = entry->getArgument(paramAt.lookup(abi::WorkerParam::Worker));
    threadId = idx(0);
    numThreads = idx(1);
  }
  auto param = [&](abi::WorkerParam p) { return entry->getArgument(paramAt.lookup(p)); };
  epoch = param(abi::WorkerParam::Epoch);
  spinLimit = param(abi::WorkerParam::SpinLimit);
  countersMem = param(abi::WorkerParam::Counters);
  controlMem = param(abi::WorkerParam::Control);
  errorMem = param(abi::WorkerParam::Error);
  if (target.profile)
    traceMem = param(abi::WorkerParam::Trace);
  if (target.profile && target.gpu) {
    // The worker's region: records [worker * per, (worker + 1) * per) of
    // the capacity / workers per worker (one division, here).
    auto first = scf::IfOp::create(b, loc, isThread0(), /*withElse=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(first.thenBlock());
    Value capacity = arith::DivUIOp::create(
        b, loc, memref::DimOp::create(b, loc, traceMem, 0), idx(abi::kTraceWords));
    Value per = arith::DivUIOp::create(b, loc, capacity,
                                       gpu::GridDimOp::create(b, loc, gpu::Dimension::x));
    Value begin = arith::MulIOp::create(b, loc, toIndex(workerId), per);
    auto toI32 = [&](Value v) { return arith::IndexCastOp::create(b, loc, b.getI32Type(), v).getResult(); };
    memref::StoreOp::create(b, loc, toI32(begin), traceSlotsMem, ValueRange{idx(0)});
    memref::StoreOp::create(b, loc, toI32(arith::AddIOp::create(b, loc, begin, per)), traceSlotsMem,
                            ValueRange{idx(1)});
  }
  if (target.profile && !target.gpu) {
    Value one = LLVM::ConstantOp::create(b, loc, b.getI64Type(),
                                         b.getI64IntegerAttr(1));
    clockBuffer = LLVM::AllocaOp::create(
        b, loc, LLVM::LLVMPointerType::get(b.getContext()),
        LLVM::LLVMArrayType::get(b.getI64Type(), 2), one, /*alignment=*/8);
  }
  for (auto [kArg, fArg] :
       llvm::zip(kernel.getArguments(),
                 entry->getArguments().drop_front(firstKernelArg)))
    eager.map(kArg, fArg);
  if (numDevices > 1) {
    deviceIndex = toIndex(param(abi::WorkerParam::Device));
    unsigned next = paramAt.lookup(abi::WorkerParam::PeerCounters);
    for (int64_t d = 0; d < numDevices; ++d)
      peerCounters.push_back(entry->getArgument(next++));
    next = paramAt.lookup(abi::WorkerParam::PeerArguments);
    for (unsigned i : symmetric) {
      SmallVector<Value> &copies =
          peerCopies[entry->getArgument(firstKernelArg + i)];
      for (int64_t d = 0; d < numDevices; ++d)
        copies.push_back(entry->getArgument(next++));
    }
  } else {
    deviceIndex = idx(0);
  }

  countersBase = basePointer(countersMem);
  controlBase = basePointer(controlMem);
  bank = toIndex(arith::AndIOp::create(b, loc, epoch, i64(1)));

  if (failed(cloneEagerValues()) || failed(layoutEvents()))
    return failure();
  // The banks are halves of the buffer, not of this launch's counters: a
  // launch with more counters than the one before (a larger runtime size)
  // would otherwise find words of that launch's bank in its own, never
  // cleared. The capacity check below keeps the counters within a half.
  {
    Value have = memref::DimOp::create(b, loc, countersMem, 0);
    if (numDevices > 1)
      have = arith::SubIOp::create(b, loc, have, idx(abi::kDeviceAbortWords));
    bankWords = arith::DivUIOp::create(b, loc, have, idx(abi::kCounterBanks));
  }
  bankBase = arith::MulIOp::create(b, loc, bank, bankWords);
  if (numDevices > 1)
    abortWord = arith::MulIOp::create(b, loc, bankWords, idx(abi::kCounterBanks));

  // The exit block: return.
  Block *exit = new Block();
  entry->getParent()->push_back(exit);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToEnd(exit);
    if (target.gpu)
      gpu::ReturnOp::create(b, loc);
    else
      func::ReturnOp::create(b, loc);
  }
  exitBlock = exit;
  emitCapacityCheckAndClear(exit);
  if (failed(schedule.isStatic() ? emitStatic(schedule)
                                 : emitDynamic(schedule)))
    return failure();
  if (numDevices > 1)
    emitDeviceBarrier(finishedOk);
  cf::BranchOp::create(b, loc, exit, ValueRange{});

  // Thread ids, the device id and peer buffers in the tile bodies and the
  // kernel-level values.
  entry->getParentOp()->walk([&](Operation *op) {
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
      Value replacement = peer.getBuffer();
      if (numDevices > 1) {
        // The verifier makes the buffer a symmetric kernel argument, which
        // is now the worker's argument for the local copy.
        auto it = peerCopies.find(peer.getBuffer());
        assert(it != peerCopies.end() && "et.peer of a non-symmetric buffer");
        b.setInsertionPoint(peer);
        replacement = selectCopy(it->second, peerDevice(peer.getOffset()));
      }
      peer.getResult().replaceAllUsesWith(replacement);
      op->erase();
    }
  });
  return success();
}

//===----------------------------------------------------------------------===//
// Passes
//===----------------------------------------------------------------------===//

static LogicalResult lowerKernels(ModuleOp module, Target target) {
  SmallVector<KernelOp> kernels(module.getOps<KernelOp>());
  OpBuilder b(module.getContext());
  auto declare = [&](StringRef name, FunctionType type) {
    if (module.lookupSymbol(name))
      return;
    b.setInsertionPointToStart(module.getBody());
    func::FuncOp::create(b, module.getLoc(), name, type).setPrivate();
  };
  if (!target.gpu && !kernels.empty()) {
    declare("sched_yield", b.getFunctionType({}, {b.getI32Type()}));
    if (target.profile)
      declare("clock_gettime",
              b.getFunctionType({b.getI32Type(),
                                 LLVM::LLVMPointerType::get(b.getContext())},
                                {b.getI32Type()}));
  }
  for (KernelOp kernel : kernels) {
    Operation *container = module;
    if (target.gpu) {
      b.setInsertionPoint(kernel);
      auto gpuModule = gpu::GPUModuleOp::create(
          b, kernel.getLoc(), (kernel.getSymName() + "_module").str());
      container = gpuModule;
    }
    WorkerEmitter emitter(kernel, target);
    if (failed(emitter.emit(container)))
      return failure();
    kernel.erase();
  }
  if (target.gpu && !kernels.empty())
    module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                    b.getUnitAttr());
  return success();
}

namespace {
struct ConvertEventTensorToNVVMPass
    : public mlir::et::impl::ConvertEventTensorToNVVMPassBase<
          ConvertEventTensorToNVVMPass> {
  using Base::Base;
  void runOnOperation() override {
    Target target;
    target.gpu = true;
    target.backoffNs = backoffNs;
    target.profile = profile;
    target.threads = threads;
    if (threads < 0 || threads > 1024 || threads % 32 != 0) {
      getOperation().emitError("'convert-et-to-nvvm' threads must be 0 or a "
                               "multiple of 32 up to 1024, got ")
          << static_cast<int64_t>(threads);
      return signalPassFailure();
    }
    if (failed(lowerKernels(getOperation(), target)))
      signalPassFailure();
  }
};

struct ConvertEventTensorToCPUPass
    : public mlir::et::impl::ConvertEventTensorToCPUPassBase<
          ConvertEventTensorToCPUPass> {
  using Base::Base;
  void runOnOperation() override {
    Target target;
    target.profile = profile;
    if (failed(lowerKernels(getOperation(), target)))
      signalPassFailure();
  }
};
} // namespace
