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
