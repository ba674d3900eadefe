//===- DynamicSchedule.cpp - The ticket queue of a dynamic schedule -------===//
//
// A dynamic schedule is a queue of tasks: a worker takes tickets from one
// atomic counter and maps each to the (task, tile) of the queue by a
// balanced binary search over the prefix sums of the tasks' tile counts.
//
//===----------------------------------------------------------------------===//

#include "WorkerEmitter.h"

#include <functional>

using namespace mlir;
using namespace mlir::et;
using namespace mlir::et::workers;

LogicalResult WorkerEmitter::emitDynamic(ScheduleOp schedule) {
  llvm::DenseMap<Operation *, unsigned> taskIds;
  for (auto [i, t] : llvm::enumerate(tasks))
    taskIds[t] = i;
  SmallVector<TaskOp> queue;
  for (RunOp run : schedule.getBody().front().getOps<RunOp>())
    queue.push_back(run.getTaskOp());

  // The loop carries (every tile ran, the queue is exhausted) and, with
  // steps, the last step whose gate this worker passed.
  Type i1Type = b.getI1Type(), indexType = b.getIndexType();
  SmallVector<Type> carried{i1Type, i1Type};
  SmallVector<Value> init{i1(true), i1(false)};
  if (repeat) {
    carried.push_back(indexType);
    init.push_back(idx(0));
  }
  SmallVector<Location> locs(carried.size(), loc);
  auto loop = scf::WhileOp::create(b, loc, carried, init);
  {
    Block *before = b.createBlock(&loop.getBefore(), {}, carried, locs);
    Value notDone = arith::XOrIOp::create(b, loc, before->getArgument(1),
                                          i1(true));
    Value go = arith::AndIOp::create(b, loc, before->getArgument(0), notDone);
    scf::ConditionOp::create(b, loc, go, before->getArguments());
  }
  Block *after = b.createBlock(&loop.getAfter(), {}, carried, locs);
  Value gated = repeat ? after->getArgument(2) : Value();
  auto results = [&](bool ok, bool done, Value g) {
    SmallVector<Value> r{i1(ok), i1(done)};
    if (repeat)
      r.push_back(g ? g : idx(0));
    return r;
  };
  // Thread 0 takes the ticket (a 64-bit counter); the CTA shares it.
  auto take = scf::IfOp::create(b, loc, TypeRange{b.getI64Type()},
                                isThread0(), /*withElse=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(take.thenBlock());
    Value old = LLVM::AtomicRMWOp::create(
        b, loc, LLVM::AtomicBinOp::add, ticketPointer(bank), i64(1),
        LLVM::AtomicOrdering::monotonic, target.syncscope(), 8);
    scf::YieldOp::create(b, loc, ValueRange{old});
    b.setInsertionPointToStart(take.elseBlock());
    scf::YieldOp::create(b, loc, ValueRange{i64(0)});
  }
  Value ticket = toIndex(broadcast(take.getResult(0)));

  auto [region, top] = openRegion(carried, [&] { return results(false, true, Value()); });
  Block *entry = b.getInsertionBlock();
  Block *exhausted = newBlock(top);
  b.setInsertionPointToEnd(exhausted);
  scf::YieldOp::create(b, loc, results(true, true, gated));

  // The queue's prefix sums of tile counts (constants when the counts
  // are static), then a balanced binary search for the task whose range
  // holds the ticket: O(log tasks) compares per ticket.
  b.setInsertionPointToEnd(entry);
  SmallVector<Value> bases{idx(0)};
  for (TaskOp task : queue) {
    Scope scope{top.region, top.fail, {}};
    FailureOr<Value> n = tileCount(task, scope, /*extents=*/nullptr, /*dispatch=*/true);
    if (failed(n))
      return failure();
    bases.push_back(arith::AddIOp::create(b, loc, bases.back(), *n));
  }
  if (repeat) {
    // Steps: ticket k is tile k mod T of step k / T (T tiles a step); a
    // ticket of a later step waits at that step's gate first.
    FailureOr<Value> stepsCount = stepCount();
    if (failed(stepsCount))
      return failure();
    Value perStep = bases.back();
    Value empty = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, perStep, idx(0));
    Value divisor = arith::SelectOp::create(b, loc, empty, idx(1), perStep);
    Value s = arith::DivUIOp::create(b, loc, ticket, divisor);
    Value past = arith::OrIOp::create(
        b, loc, empty, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::uge, s, *stepsCount));
    Block *inBudget = newBlock(top);
    cf::CondBranchOp::create(b, loc, past, exhausted, ValueRange{}, inBudget, ValueRange{});
    b.setInsertionPointToEnd(inBudget);
    Value later = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ugt, s, gated);
    step = s;
    auto gate = scf::IfOp::create(b, loc, TypeRange{i1Type, i1Type}, later, /*withElse=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(gate.thenBlock());
      FailureOr<std::pair<Value, Value>> opened = emitStepGate(s);
      if (failed(opened))
        return failure();
      scf::YieldOp::create(b, loc, ValueRange{opened->first, opened->second});
      b.setInsertionPointToStart(gate.elseBlock());
      scf::YieldOp::create(b, loc, ValueRange{i1(true), i1(true)});
    }
    Block *passed = newBlock(top), *checkRun = newBlock(top);
    cf::CondBranchOp::create(b, loc, gate.getResult(0), checkRun, ValueRange{}, top.fail, ValueRange{});
    b.setInsertionPointToEnd(checkRun);
    cf::CondBranchOp::create(b, loc, gate.getResult(1), passed, ValueRange{}, exhausted, ValueRange{});
    b.setInsertionPointToEnd(passed);
    gated = s;
    ticket = arith::RemUIOp::create(b, loc, ticket, divisor);
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
    scf::YieldOp::create(b, loc, results(true, false, gated));
  }
  step = Value();
  b.setInsertionPointAfter(region);
  scf::YieldOp::create(b, loc, region.getResults());
  b.setInsertionPointAfter(loop);
  finishedOk = loop.getResult(0);
  return success();
}
