//===- HostTarget.cpp - The host worker: one thread per worker ------------===//
//
// The WorkerTarget of convert-et-to-cpu: a func.func `<kernel>_worker` that
// one host thread per worker calls with its worker id. A worker is one
// thread, so it needs no barriers and shares nothing; counter atomics are
// at system scope, a waiting worker yields its thread between polls
// (sched_yield), and the clock is clock_gettime(CLOCK_MONOTONIC). The
// watchdog measures a wait in nanoseconds of that clock (the spin limit is
// a time here): a count of yielding polls stretched with the load, and a
// 2 s limit fired after 208 s with four workers on two cores.
//
//===----------------------------------------------------------------------===//

#include "WorkerTarget.h"

using namespace mlir;
using namespace mlir::et;
using namespace mlir::et::workers;

namespace {

class HostWorkerTarget final : public WorkerTarget {
public:
  explicit HostWorkerTarget(bool profile) : WorkerTarget(profile) {}

  /// sched_yield (the backoff) and clock_gettime (the watchdog, the trace).
  void declareRuntimeFunctions(OpBuilder &b, ModuleOp module) const override {
    auto declare = [&](StringRef name, FunctionType type) {
      if (module.lookupSymbol(name))
        return;
      b.setInsertionPointToStart(module.getBody());
      func::FuncOp::create(b, module.getLoc(), name, type).setPrivate();
    };
    declare("sched_yield", b.getFunctionType({}, {b.getI32Type()}));
    declare("clock_gettime",
            b.getFunctionType({b.getI32Type(),
                               LLVM::LLVMPointerType::get(b.getContext())},
                              {b.getI32Type()}));
  }

  Operation *createContainer(OpBuilder &, ModuleOp module, KernelOp) const override { return module; }
  void finishModule(OpBuilder &, ModuleOp) const override {}

  bool passesWorkerId() const override { return true; }
  bool hasWorkgroupMemory() const override { return false; }
  Attribute getWorkgroupMemorySpace(MLIRContext *) const override { return {}; }
  StringRef getLoweringName() const override { return "host worker lowering"; }

  WorkerFunction createWorkerFunction(WorkerBuilder &w, StringRef kernelName, FunctionType type,
                                      ArrayRef<Type> workgroup) const override {
    assert(workgroup.empty() && "the host worker has no workgroup memory");
    auto fn = func::FuncOp::create(w.b, w.loc, (kernelName + abi::kHostWorkerSuffix).str(), type);
    WorkerFunction result;
    result.op = fn;
    result.entry = fn.addEntryBlock();
    w.b.setInsertionPointToStart(result.entry);
    return result;
  }

  /// The worker id is the parameter; the worker is one thread. The two
  /// words (seconds, nanoseconds) that clock_gettime fills, at the
  /// function's entry (the watchdog reads the clock in every wait).
  void emitWorkerIds(WorkerBuilder &w, Value workerParam) const override {
    w.workerId = workerParam;
    w.threadId = w.idx(0);
    w.numThreads = w.idx(1);
    OpBuilder &b = w.b;
    Value one = LLVM::ConstantOp::create(b, w.loc, b.getI64Type(), b.getI64IntegerAttr(1));
    w.clockBuffer = LLVM::AllocaOp::create(b, w.loc, LLVM::LLVMPointerType::get(b.getContext()),
                                           LLVM::LLVMArrayType::get(b.getI64Type(), 2), one, /*alignment=*/8);
  }

  /// The clock's buffer is there already (emitWorkerIds).
  void setUpProfile(WorkerBuilder &) const override {}

  void createReturn(WorkerBuilder &w) const override { func::ReturnOp::create(w.b, w.loc); }

  void barrier(WorkerBuilder &) const override {}
  Value broadcast(WorkerBuilder &, Value v) const override { return v; }
  Value allOf(WorkerBuilder &, Value pred) const override { return pred; }

  /// System scope.
  StringRef syncscope() const override { return ""; }

  /// A release fence, then a relaxed atomic add.
  void signalCounter(WorkerBuilder &w, Value counter) const override {
    LLVM::FenceOp::create(w.b, w.loc, LLVM::AtomicOrdering::release,
                          syncscope());
    LLVM::AtomicRMWOp::create(w.b, w.loc, LLVM::AtomicBinOp::add,
                              w.counterPointer(counter), w.i32(1),
                              LLVM::AtomicOrdering::monotonic,
                              syncscope(), /*alignment=*/4);
  }

  void systemAdd(WorkerBuilder &w, Value ptr) const override {
    LLVM::AtomicRMWOp::create(w.b, w.loc, LLVM::AtomicBinOp::add, ptr, w.i32(1),
                              LLVM::AtomicOrdering::monotonic, StringRef(),
                              /*alignment=*/4);
  }

  void backoff(WorkerBuilder &w) const override {
    func::CallOp::create(w.b, w.loc, "sched_yield", TypeRange{w.b.getI32Type()},
                         ValueRange{});
  }

  /// A wait's measure is its start time; it has expired once the clock is
  /// the spin limit (nanoseconds) past it.
  Value waitStart(WorkerBuilder &w) const override { return now(w); }
  std::pair<Value, Value> waitExpired(WorkerBuilder &w, Value start) const override {
    Value waited = arith::SubIOp::create(w.b, w.loc, now(w), start);
    return {start, arith::CmpIOp::create(w.b, w.loc, arith::CmpIPredicate::sge, waited, w.spinLimit)};
  }

  /// clock_gettime(CLOCK_MONOTONIC) into the worker's clock buffer.
  Value now(WorkerBuilder &w) const override {
    OpBuilder &b = w.b;
    Location loc = w.loc;
    func::CallOp::create(b, loc, "clock_gettime", TypeRange{b.getI32Type()},
                         ValueRange{w.i32(1), w.clockBuffer});
    Value sec = LLVM::LoadOp::create(b, loc, b.getI64Type(), w.clockBuffer);
    Value nsecPtr = LLVM::GEPOp::create(
        b, loc, LLVM::LLVMPointerType::get(b.getContext()), b.getI64Type(),
        w.clockBuffer, ArrayRef<LLVM::GEPArg>{1});
    Value nsec = LLVM::LoadOp::create(b, loc, b.getI64Type(), nsecPtr);
    return arith::AddIOp::create(
        b, loc, arith::MulIOp::create(b, loc, sec, w.i64(1000000000)), nsec);
  }

  /// The slot comes from the shared cursor.
  std::pair<Value, Value> traceSlot(WorkerBuilder &w) const override {
    OpBuilder &b = w.b;
    Location loc = w.loc;
    Value capacity = arith::DivUIOp::create(
        b, loc, memref::DimOp::create(b, loc, w.traceMem, 0), w.idx(abi::kTraceWords));
    Value slot = w.toIndex(LLVM::AtomicRMWOp::create(
        b, loc, LLVM::AtomicBinOp::add, w.controlPointer(abi::kControlTraceCursor), w.i32(1),
        LLVM::AtomicOrdering::monotonic, syncscope(), 4));
    Value fits = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, slot,
                                       capacity);
    return {slot, fits};
  }
};

} // namespace

std::unique_ptr<WorkerTarget> workers::createHostWorkerTarget(bool profile) {
  return std::make_unique<HostWorkerTarget>(profile);
}
