//===- WorkerTarget.h - What the GPU and the host worker do differently ---===//
//
// The worker code is the same on both targets except where a worker finds
// its id and its threads, how its threads meet and share a value, the scope
// and form of the counter atomics, the backoff between polls, the clock, the
// barriers and copies of weights staged in shared memory, and the function
// and module that hold it. WorkerTarget owns those decisions;
// WorkerEmitter calls it and never asks which target it emits for.
//
//   NVVMTarget.cpp  a gpu.func kernel, one CTA per worker
//   HostTarget.cpp  a func.func that one host thread per worker calls
//
//===----------------------------------------------------------------------===//

#ifndef EVENTTENSOR_LIB_CONVERSION_EVENTTENSORTOWORKERS_WORKERTARGET_H
#define EVENTTENSOR_LIB_CONVERSION_EVENTTENSORTOWORKERS_WORKERTARGET_H

#include "EventTensor/Conversion/Passes.h"
#include "EventTensor/Conversion/RuntimeABI.h"

#include "mlir/IR/Builders.h"

#include <memory>
#include <utility>

namespace mlir::et::workers {

/// The builder of a worker function and the values of it that the emitter
/// and the target both read, with the small builders they share.
struct WorkerBuilder {
  WorkerBuilder(MLIRContext *ctx, Location loc) : b(ctx), loc(loc) {}

  OpBuilder b;
  Location loc;

  /// The worker id, the thread id within the worker and the worker's
  /// threads (index).
  Value workerId, threadId, numThreads;
  /// The launch number and the spin limit (i64).
  Value epoch, spinLimit;
  /// The counter, control and error buffers and, profiled, the trace
  /// buffer (the worker function's parameters).
  Value countersMem, controlMem, errorMem, traceMem;
  /// The base pointers of the counter and control buffers.
  Value countersBase, controlBase;
  /// Set by the target for its own use: a shared-memory word through which
  /// a thread shares a value with the others (GPU); profiled, the worker's
  /// next trace slot and the end of its region of the trace (GPU) or the
  /// buffer that the clock is read into (host).
  Value sharedScratch, traceSlotsMem, clockBuffer;

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
  /// The 64-bit ticket counter of counter bank `bank` (an index).
  Value ticketPointer(Value bank) {
    Value word = arith::AddIOp::create(b, loc, idx(abi::kControlTicket0 / 2), bank);
    return elementPointer(controlBase, word, b.getI64Type());
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
};

/// The worker function as a target created it.
struct WorkerFunction {
  Operation *op = nullptr;
  Block *entry = nullptr;
  /// The workgroup buffers asked for, in order.
  SmallVector<Value> workgroup;
};

/// What the GPU and the host worker do differently, in the style of
/// Triton's TargetInfoBase: one implementation per target, chosen by the pass.
class WorkerTarget {
public:
  explicit WorkerTarget(bool profile) : profile(profile) {}
  virtual ~WorkerTarget();

  /// Whether tiles record a trace (the pass's `profile`).
  bool isProfiled() const { return profile; }

  //===--------------------------------------------------------------------===//
  // The module and the worker function
  //===--------------------------------------------------------------------===//

  /// Declares in `module` the runtime functions that the worker code calls.
  virtual void declareRuntimeFunctions(OpBuilder &b, ModuleOp module) const = 0;
  /// Where the worker of `kernel` goes: `module`, or a new op before the
  /// kernel.
  virtual Operation *createContainer(OpBuilder &b, ModuleOp module, KernelOp kernel) const = 0;
  /// Marks `module` after its kernels were lowered.
  virtual void finishModule(OpBuilder &b, ModuleOp module) const = 0;

  /// Whether the worker id is a parameter of the worker function
  /// (abi::WorkerParam::Worker) rather than found by the worker.
  virtual bool passesWorkerId() const = 0;
  /// Whether a worker has workgroup (shared) memory for its tiles, a copy of
  /// its static program and weights staged across tiles.
  virtual bool hasWorkgroupMemory() const = 0;
  /// The memory space of workgroup memory (where hasWorkgroupMemory()).
  virtual Attribute getWorkgroupMemorySpace(MLIRContext *ctx) const = 0;
  /// The lowering, as diagnostics name it.
  virtual StringRef getLoweringName() const = 0;

  /// Creates the worker function of kernel `kernelName` of `type` at the
  /// insertion point, with the workgroup buffers of types `workgroup`
  /// (aligned to 16 bytes), and sets the insertion point to the start of its
  /// entry block.
  virtual WorkerFunction createWorkerFunction(WorkerBuilder &w, StringRef kernelName, FunctionType type,
                                              ArrayRef<Type> workgroup) const = 0;
  /// Sets the worker id, thread id and thread count (`workerParam`: the
  /// worker id parameter, if passesWorkerId()).
  virtual void emitWorkerIds(WorkerBuilder &w, Value workerParam) const = 0;
  /// Profiled kernels: what the trace and the clock need at the worker's
  /// entry.
  virtual void setUpProfile(WorkerBuilder &w) const = 0;
  /// Returns from the worker function.
  virtual void createReturn(WorkerBuilder &w) const = 0;

  //===--------------------------------------------------------------------===//
  // The threads of a worker
  //===--------------------------------------------------------------------===//

  /// A barrier of the worker's threads.
  virtual void barrier(WorkerBuilder &w) const = 0;
  /// Makes thread 0's value of `v` (i1 or i64) every thread's value.
  virtual Value broadcast(WorkerBuilder &w, Value v) const = 0;
  /// Whether `pred` (i1) holds on every thread of the worker, as every
  /// thread's value (a barrier of the worker's threads).
  virtual Value allOf(WorkerBuilder &w, Value pred) const = 0;

  //===--------------------------------------------------------------------===//
  // Memory order
  //===--------------------------------------------------------------------===//

  /// The syncscope of the atomics on the counters and control words of
  /// one device.
  virtual StringRef syncscope() const = 0;
  /// Signals counter `counter` (index) of the counter buffer: adds 1 with
  /// release semantics at syncscope(), after every write of the thread.
  virtual void signalCounter(WorkerBuilder &w, Value counter) const = 0;
  /// Adds 1 to the i32 at `ptr` with a relaxed system-scope atomic (the
  /// caller has issued the release fence).
  virtual void systemAdd(WorkerBuilder &w, Value ptr) const = 0;
  /// Between two polls of a wait.
  virtual void backoff(WorkerBuilder &w) const = 0;
  /// The watchdog's measure of one wait, against the launch's spin limit:
  /// the i64 a wait starts from, and after a poll that came back short, the
  /// next value and whether the limit is reached. By default it counts
  /// polls (the GPU's polls take a steady time).
  virtual Value waitStart(WorkerBuilder &w) const;
  virtual std::pair<Value, Value> waitExpired(WorkerBuilder &w, Value measure) const;

  //===--------------------------------------------------------------------===//
  // Weights staged across tiles (only where hasWorkgroupMemory())
  //===--------------------------------------------------------------------===//

  /// Thread 0: initializes the staging barriers at `barriers` (workgroup
  /// pointers, one arrival a phase) and makes them visible to the copies.
  virtual void initStageBarriers(WorkerBuilder &w, ArrayRef<Value> barriers) const;
  /// Waits until the phase of `barrier` of parity `parity` (i32) completes.
  virtual void waitStageBarrier(WorkerBuilder &w, Value barrier, Value parity) const;
  /// Arrives on `barrier`, which then completes its phase once `bytes` (i32)
  /// of copies issued with copyToStage have landed.
  virtual void expectStageBytes(WorkerBuilder &w, Value barrier, Value bytes) const;
  /// Starts an asynchronous copy of `bytes` (i32, > 0) from global `src` to
  /// workgroup `dst` that completes on `barrier`.
  virtual void copyToStage(WorkerBuilder &w, Value dst, Value src, Value bytes, Value barrier) const;

  //===--------------------------------------------------------------------===//
  // The trace
  //===--------------------------------------------------------------------===//

  /// Nanoseconds from a monotonic clock (i64).
  virtual Value now(WorkerBuilder &w) const = 0;
  /// Thread 0: the slot (index) of the tile record to write, and whether it
  /// fits in the trace (i1); counts the record in the control word
  /// abi::kControlTraceCursor.
  virtual std::pair<Value, Value> traceSlot(WorkerBuilder &w) const = 0;

private:
  bool profile;
};

/// The GPU worker: a gpu.func kernel in a gpu.module, one CTA of `threads`
/// threads (0: chosen at launch) per worker, `backoffNs` of nanosleep between
/// polls.
std::unique_ptr<WorkerTarget> createNVVMWorkerTarget(bool profile, int64_t backoffNs, int64_t threads);

/// The host worker: a func.func `<kernel>_worker` that one thread per worker
/// calls with its worker id.
std::unique_ptr<WorkerTarget> createHostWorkerTarget(bool profile);

} // namespace mlir::et::workers

#endif // EVENTTENSOR_LIB_CONVERSION_EVENTTENSORTOWORKERS_WORKERTARGET_H
