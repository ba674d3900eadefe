//===- Steps.cpp - The steps of an et.repeat kernel -----------------------===//
//
// A kernel with et.repeat runs its tasks several times in one launch: the
// worker's program once per step, the counters of the launch counting on
// across steps (a wait of step s waits for s + 1 times its count), and a
// gate between steps where every worker waits for the end of the step before
// and reads the stop flag, so that all workers agree on whether the next
// step runs (docs/lowering.md, "Steps"). A dynamic schedule numbers its
// tickets across steps instead (DynamicSchedule.cpp) and passes the same gate.
//
//===----------------------------------------------------------------------===//

#include "WorkerEmitter.h"

using namespace mlir;
using namespace mlir::et;
using namespace mlir::et::workers;

FailureOr<std::pair<Value, Value>> WorkerEmitter::emitStepGate(Value s) {
  Type i1Type = b.getI1Type();
  auto [region, top] = openRegion(TypeRange{i1Type, i1Type},
                                  [&] { return SmallVector<Value>{i1(false), i1(false)}; });
  Block *gate = newBlock(top);
  Block *run = newBlock(top);
  b.setInsertionPointToEnd(run);
  scf::YieldOp::create(b, loc, ValueRange{i1(true), i1(true)});

  // Step 0 runs without a gate.
  Block *entry = &top.region->front();
  b.setInsertionPointToEnd(entry);
  Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, s, idx(0));
  cf::CondBranchOp::create(b, loc, first, run, ValueRange{}, gate, ValueRange{});

  // Every signal of steps 0 .. s - 1 to `after`, or the stop flag: a step
  // before s - 1 may have stopped the launch (a dynamic schedule hands out
  // tickets of later steps before the earlier ones end), and then step
  // s - 1 never ends. When the flag is up, every ticket of the steps that
  // ran has run: the flag is written by a tile that waits on all the others.
  b.setInsertionPointToEnd(gate);
  EventLayout &layout = layouts[repeat.getAfter()];
  auto [lin, counter] = locate(top, layout, {}, idx(-1), idx(-1));
  // The count of a rank-0 event from kernel arguments (verified: no device
  // counts in a repeat kernel).
  FailureOr<Value> count = expectedCount(layout, {}, lin, top);
  if (failed(count))
    return failure();
  Value expected = arith::MulIOp::create(b, loc, *count, s);
  Value stopPtr = elementPointer(basePointer(eager.lookup(repeat.getStop())), idx(0), b.getI32Type());
  // On several devices `after` is signalled from every device (verified),
  // and the flag may have been written by another device before its
  // signal: both are read at system scope there.
  StringRef scope = layout.remote ? StringRef() : target.syncscope();
  emitSpin(top, counter, expected, idx(-1), idx(-1), idx(layout.id), lin, scope, /*localOnly=*/false, stopPtr);
  // The stop flag, written before those signals: a relaxed load after the
  // acquire (it bypasses a stale L1 line of the last gate). Thread 0's
  // reading decides for the worker.
  Value flag = LLVM::LoadOp::create(b, loc, b.getI32Type(), stopPtr, /*alignment=*/4, false, false, false, false,
                                    LLVM::AtomicOrdering::monotonic, scope);
  Value go = broadcast(arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, flag, i32(0)));
  scf::YieldOp::create(b, loc, ValueRange{i1(true), go});
  b.setInsertionPointAfter(region);
  return std::make_pair(region.getResult(0), region.getResult(1));
}

FailureOr<Value> WorkerEmitter::stepCount() {
  if (Value count = eager.lookupOrNull(repeat.getCount()))
    return count;
  return repeat.emitOpError("step count is computed from data read on the device; the worker lowering "
                            "needs it from the kernel's arguments");
}

FailureOr<Value> WorkerEmitter::emitSteps(function_ref<FailureOr<Value>()> body) {
  if (!repeat)
    return body();
  FailureOr<Value> stepsCount = stepCount();
  if (failed(stepsCount))
    return failure();
  Value count = *stepsCount;
  Type indexType = b.getIndexType(), i1Type = b.getI1Type();
  // (step, every tile so far ran, the step before did not stop)
  auto loop = scf::WhileOp::create(b, loc, TypeRange{indexType, i1Type, i1Type},
                                   ValueRange{idx(0), i1(true), i1(true)});
  {
    Block *before = b.createBlock(&loop.getBefore(), {}, {indexType, i1Type, i1Type}, {loc, loc, loc});
    Value more = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, before->getArgument(0), count);
    Value go = arith::AndIOp::create(
        b, loc, more, arith::AndIOp::create(b, loc, before->getArgument(1), before->getArgument(2)));
    scf::ConditionOp::create(b, loc, go, before->getArguments());
  }
  Block *after = b.createBlock(&loop.getAfter(), {}, {indexType, i1Type, i1Type}, {loc, loc, loc});
  Value s = after->getArgument(0);
  // Errors at the gate and in the tiles name this step.
  step = s;
  FailureOr<std::pair<Value, Value>> gate = emitStepGate(s);
  if (failed(gate))
    return failure();
  auto [gateOk, runs] = *gate;
  auto ifOp = scf::IfOp::create(b, loc, TypeRange{i1Type}, runs, /*withElse=*/true);
  b.setInsertionPointToStart(ifOp.thenBlock());
  FailureOr<Value> ran = body();
  step = Value();
  if (failed(ran))
    return failure();
  b.setInsertionPointToEnd(ifOp.thenBlock());
  scf::YieldOp::create(b, loc, ValueRange{*ran});
  b.setInsertionPointToStart(ifOp.elseBlock());
  scf::YieldOp::create(b, loc, ValueRange{gateOk});
  b.setInsertionPointAfter(ifOp);
  Value next = arith::AddIOp::create(b, loc, s, idx(1));
  scf::YieldOp::create(b, loc, ValueRange{next, ifOp.getResult(0), runs});
  b.setInsertionPointAfter(loop);
  return loop.getResult(1);
}
