//===- DynamicSchedule.cpp - Run-time tile queue ---------------------------===//
//
// Implements et-dynamic-schedule: orders the kernel's tasks topologically for
// a device ticket queue and hoists producer-independent work above each
// task's first wait (two-phase dispatch).
//
//===----------------------------------------------------------------------===//

#include "EventTensor/Analysis/TileGraph.h"
#include "EventTensor/Transforms/Passes.h"
#include "EventTensor/Transforms/Scheduling.h"

#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::et {
#define GEN_PASS_DEF_DYNAMICSCHEDULEPASS
#include "EventTensor/Transforms/Passes.h.inc"
} // namespace mlir::et

using namespace mlir;
using namespace mlir::et;

/// The buffer a memref value views (through view-like ops).
static Value rootBuffer(Value v) {
  while (Operation *def = v.getDefiningOp()) {
    auto view = dyn_cast<ViewLikeOpInterface>(def);
    if (!view)
      break;
    v = view.getViewSource();
  }
  return v;
}

/// Buffers written by some task of the kernel; nullopt when a task has a
/// write whose target is unknown.
static std::optional<llvm::DenseSet<Value>> writtenBuffers(KernelOp kernel) {
  llvm::DenseSet<Value> written;
  bool unknown = false;
  for (TaskOp task : kernel.getTasks()) {
    task.getBody().walk([&](Operation *op) {
      if (isa<EventWaitOp, EventSignalOp>(op) ||
          op->hasTrait<OpTrait::HasRecursiveMemoryEffects>())
        return;
      auto iface = dyn_cast<MemoryEffectOpInterface>(op);
      if (!iface) {
        unknown = true;
        return;
      }
      SmallVector<MemoryEffects::EffectInstance> effects;
      iface.getEffects(effects);
      for (auto &effect : effects) {
        if (!isa<MemoryEffects::Write>(effect.getEffect()))
          continue;
        if (Value v = effect.getValue())
          written.insert(rootBuffer(v));
        else
          unknown = true;
      }
    });
  }
  if (unknown)
    return std::nullopt;
  return written;
}

/// True when `op` may run before the task's waits: it has no side effects
/// other than reads of buffers no task writes.
static bool isProducerIndependent(Operation *op,
                                  const llvm::DenseSet<Value> *written) {
  if (op->getNumRegions() != 0 || isa<EventWaitOp, EventSignalOp>(op))
    return false;
  if (isMemoryEffectFree(op))
    return true;
  if (!written)
    return false;
  auto iface = dyn_cast<MemoryEffectOpInterface>(op);
  if (!iface)
    return false;
  SmallVector<MemoryEffects::EffectInstance> effects;
  iface.getEffects(effects);
  for (auto &effect : effects) {
    if (!isa<MemoryEffects::Read>(effect.getEffect()) || !effect.getValue())
      return false;
    if (written->contains(rootBuffer(effect.getValue())))
      return false;
  }
  return true;
}

namespace {
struct DynamicSchedulePass
    : public mlir::et::impl::DynamicSchedulePassBase<DynamicSchedulePass> {
  using Base::Base;

  void runOnOperation() override {
    KernelOp kernel = getOperation();
    if (failed(checkSchedulable(kernel, workers, dynamicExtent,
                                "et-dynamic-schedule")))
      return signalPassFailure();
    EventGraph graph(kernel);
    SmallVector<TaskOp> tasks(kernel.getTasks());
    llvm::DenseMap<Operation *, unsigned> index;
    for (auto [i, t] : llvm::enumerate(tasks))
      index[t] = i;

    // Task-level dependencies: events, and the after-events of extent loads.
    std::vector<llvm::SetVector<unsigned>> preds(tasks.size());
    for (const EventGraph::Edge &e : graph.getEdges())
      if (e.producer != e.consumer)
        preds[index[e.consumer]].insert(index[e.producer]);
    for (auto [i, task] : llvm::enumerate(tasks))
      for (ExtentLoadOp load : getExtentLoads(task))
        if (EventInfo *info = graph.lookup(load.getAfterEvent()))
          for (EventAccess *s : info->signals)
            if (s->task != task)
              preds[i].insert(index[s->task]);

    // Estimated work per task, for the ranks.
    CostModel model;
    SmallVector<double> work(tasks.size());
    for (auto [i, task] : llvm::enumerate(tasks)) {
      double tiles = 1;
      std::optional<ArrayRef<int64_t>> bounds = task.getMaxExtents();
      for (auto [d, extent] : llvm::enumerate(task.getExtents())) {
        std::optional<int64_t> c = evaluateSize(extent, {});
        tiles *= c ? *c : bounds ? (*bounds)[d] : dynamicExtent;
      }
      work[i] = model.tileNs(getTaskCost(task), workers) * tiles / workers;
    }

    SmallVector<SmallVector<unsigned>> succs(tasks.size());
    for (auto [i, p] : llvm::enumerate(preds))
      for (unsigned q : p)
        succs[q].push_back(i);
    // Kahn's algorithm, taking among the ready tasks the one with the
    // highest upward rank (its work plus the longest chain of work after
    // it). `byRank` is false for the first pass, which only finds a
    // topological order to compute the ranks on.
    SmallVector<double> rank(tasks.size(), 0);
    auto topologicalOrder = [&](bool byRank) -> std::optional<SmallVector<unsigned>> {
      SmallVector<unsigned> pending, order;
      for (auto &p : preds)
        pending.push_back(p.size());
      SmallVector<bool> done(tasks.size(), false);
      while (order.size() < tasks.size()) {
        int best = -1;
        for (unsigned i = 0; i < tasks.size(); ++i)
          if (!done[i] && pending[i] == 0 &&
              (best < 0 || (byRank && rank[i] > rank[best])))
            best = i;
        if (best < 0)
          return std::nullopt;
        done[best] = true;
        order.push_back(best);
        for (unsigned s : succs[best])
          --pending[s];
      }
      return order;
    };
    std::optional<SmallVector<unsigned>> topo = topologicalOrder(false);
    if (!topo) {
      kernel.emitOpError("cannot be scheduled dynamically: its tasks depend "
                         "on each other in a cycle (a dynamic queue orders "
                         "whole tasks; a cycle that is acyclic between tiles, "
                         "like a layer loop, needs et-static-schedule)");
      return signalPassFailure();
    }
    for (unsigned i : llvm::reverse(*topo)) {
      double after = 0;
      for (unsigned s : succs[i])
        after = std::max(after, rank[s]);
      rank[i] = work[i] + after;
    }
    SmallVector<unsigned> order = *topologicalOrder(true);

    if (twoPhase)
      hoistPrologues(kernel);

    OpBuilder b = OpBuilder::atBlockEnd(&kernel.getBody().front());
    auto schedule =
        ScheduleOp::create(b, kernel.getLoc(), ScheduleKind::Dynamic, workers);
    b.setInsertionPointToStart(&schedule.getBody().front());
    for (unsigned i : order)
      RunOp::create(b, kernel.getLoc(),
                    FlatSymbolRefAttr::get(tasks[i].getSymNameAttr()),
                    DenseI64ArrayAttr(), IntegerAttr());
  }

  /// Moves producer-independent ops above each task's first wait.
  void hoistPrologues(KernelOp kernel) {
    std::optional<llvm::DenseSet<Value>> written = writtenBuffers(kernel);
    for (TaskOp task : kernel.getTasks()) {
      Block &body = task.getBody().front();
      auto waits = task.getWaits();
      if (waits.empty())
        continue;
      Operation *firstWait = *waits.begin();
      llvm::SmallPtrSet<Operation *, 16> early;
      for (Operation &op : body) {
        if (&op == firstWait)
          break;
        early.insert(&op);
      }
      for (Operation &op :
           llvm::make_early_inc_range(llvm::make_range(
               std::next(firstWait->getIterator()), body.end()))) {
        bool operandsReady = llvm::all_of(op.getOperands(), [&](Value v) {
          Operation *def = v.getDefiningOp();
          if (!def)
            return v.getParentBlock() != &body ||
                   isa<BlockArgument>(v); // tile ids or outer values
          return def->getBlock() != &body || early.contains(def);
        });
        if (!operandsReady ||
            !isProducerIndependent(&op, written ? &*written : nullptr))
          continue;
        op.moveBefore(firstWait);
        early.insert(&op);
        ++numHoisted;
      }
    }
  }
};
} // namespace
