//===- OptimizeEvents.cpp - Event graph optimization ----------------------===//
//
// Implements et-optimize-events: transitive reduction of waits, coarsening of
// events whose waiters need every element, program-order synchronization on
// one worker of a static schedule, and dead-event elimination. Each step
// works on the tile graph, rebuilt after the steps that change the IR.
//
//===----------------------------------------------------------------------===//

#include "EventTensor/Analysis/TileGraph.h"
#include "EventTensor/Transforms/Passes.h"
#include "EventTensor/Transforms/Scheduling.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/BitVector.h"

#include <map>
#include <memory>
#include <optional>
#include <set>

namespace mlir::et {
#define GEN_PASS_DEF_OPTIMIZEEVENTSPASS
#include "EventTensor/Transforms/Passes.h.inc"
} // namespace mlir::et

using namespace mlir;
using namespace mlir::et;

namespace {
struct OptimizeEventsPass
    : public mlir::et::impl::OptimizeEventsPassBase<OptimizeEventsPass> {
  using Base::Base;

  void runOnOperation() override {
    KernelOp kernel = getOperation();
    // The graphs of the kernel as it stands, built when a step needs them
    // and again only after a step that changed the IR.
    std::unique_ptr<EventGraph> graph;
    std::optional<TileGraph> tiles;
    bool stale = true;
    auto withTileGraph =
        [&](function_ref<bool(const EventGraph &, const TileGraph &)> fn) {
          if (stale) {
            graph = std::make_unique<EventGraph>(kernel);
            tiles = buildTileGraph(*graph);
            stale = false;
          }
          if (tiles && fn(*graph, *tiles))
            stale = true;
        };
    if (selectSync)
      if (ScheduleOp schedule = getSchedule(kernel);
          schedule && schedule.isStatic())
        withTileGraph([&](const EventGraph &g, const TileGraph &tg) {
          return programOrderWaits(schedule, g, tg);
        });
    if (transitiveReduction)
      withTileGraph([&](const EventGraph &g, const TileGraph &tg) {
        return reduce(g, tg);
      });
    if (coarsen)
      withTileGraph([&](const EventGraph &g, const TileGraph &tg) {
        return coarsenEvents(kernel, g, tg);
      });
    removeDeadEvents(kernel);
  }

  /// The tile graph when every tile count is a compile-time constant and
  /// the kernel is small enough; otherwise none (the steps do nothing).
  std::optional<TileGraph> buildTileGraph(const EventGraph &graph) {
    TileGraphOptions options;
    options.useBounds = false;
    options.maxTiles = maxTiles;
    Operation *errorOp;
    std::string error;
    FailureOr<TileGraph> tg = TileGraph::build(graph, options, errorOp, error);
    if (failed(tg))
      return std::nullopt;
    for (const TileGraph::Task &t : tg->getTasks())
      if (!t.staticCount)
        return std::nullopt;
    return std::move(*tg);
  }

  /// A wait on an event that some signal reaches from another device
  /// (`peer`). The tile graph projects every device's copy onto one, so
  /// neither program order on a worker nor paths through other waits say
  /// anything about such a wait: it is never removed and never used to
  /// remove another.
  static bool isRemoteWait(const EventAccess *wait) {
    Value event = cast<EventWaitOp>(wait->op).getEvent();
    return llvm::any_of(event.getUsers(), [](Operation *user) {
      auto signal = dyn_cast<EventSignalOp>(user);
      return signal && signal.getPeer();
    });
  }

  /// A wait whose tiles certainly wait on every tile of its dependency
  /// list (exact and local): the only evidence transitive reduction uses.
  static bool certainWait(const TileGraph::Task &t, size_t w) {
    return t.exact[w] && !isRemoteWait(t.waits[w]);
  }

  void remark(Operation *op, const Twine &message) {
    if (emitRemarks)
      op->emitRemark(message);
  }

  //===--------------------------------------------------------------------===//
  // Program order on one worker
  //===--------------------------------------------------------------------===//

  /// Returns whether it removed a wait.
  bool programOrderWaits(ScheduleOp schedule, const EventGraph &graph,
                         const TileGraph &tg) {
    // (worker, position) of every tile.
    std::map<std::pair<unsigned, int64_t>, std::pair<int64_t, int64_t>> where;
    for (WorkerOp worker : schedule.getBody().front().getOps<WorkerOp>()) {
      int64_t pos = 0;
      for (RunOp run : worker.getBody().front().getOps<RunOp>()) {
        if (!run.getTiles())
          return false; // cyclic entries: positions unknown at compile time
        unsigned task = tg.getTaskIndex(run.getTaskOp());
        ArrayRef<int64_t> tiles = *run.getTiles();
        for (int64_t tile : tiles)
          where[{task, tile}] = {worker.getId(), pos++};
      }
    }
    SmallVector<Operation *> erase;
    for (auto [ti, task] : llvm::enumerate(tg.getTasks())) {
      for (auto [wi, wait] : llvm::enumerate(task.waits)) {
        if (isRemoteWait(wait))
          continue;
        bool local = true;
        for (int64_t tile = 0; tile < task.numTiles && local; ++tile) {
          auto [worker, pos] = where.at({static_cast<unsigned>(ti), tile});
          ArrayRef<TileRef> deps = tg.getDeps(ti, wi, tile);
          if (deps.empty())
            local = false; // nobody signals: leave it to the verifier
          for (TileRef d : deps) {
            auto [dw, dp] = where.at({d.task, d.tile});
            if (dw != worker || dp >= pos)
              local = false;
          }
        }
        if (!local)
          continue;
        remark(wait->op, "wait satisfied by program order on one worker; "
                         "removed");
        erase.push_back(wait->op);
      }
    }
    for (Operation *op : erase)
      op->erase();
    numProgramOrderWaits += erase.size();
    return !erase.empty();
  }

  //===--------------------------------------------------------------------===//
  // Transitive reduction
  //===--------------------------------------------------------------------===//

  /// Returns whether it removed a wait.
  bool reduce(const EventGraph &graph, const TileGraph &tg) {
    // A wait can only be implied by another wait of its task that is exact
    // and local: without a task of two local waits one of which is exact,
    // no ancestor sets are needed (a model's decode kernel has none, and
    // its ancestor sets are tiles x tiles bits).
    auto reducible = [](const TileGraph::Task &t) {
      auto waits = llvm::seq<size_t>(0, t.waits.size());
      return llvm::count_if(waits, [&](size_t w) { return !isRemoteWait(t.waits[w]); }) > 1 &&
             llvm::any_of(waits, [&](size_t w) { return certainWait(t, w); });
    };
    if (llvm::none_of(tg.getTasks(), reducible))
      return false;
    int64_t n = tg.getNumTiles();
    auto gid = [&](TileRef r) { return tg.getGlobalId(r); };

    // Certain predecessors: exact waits only.
    SmallVector<SmallVector<int64_t, 4>> certain(n);
    for (auto [ti, t] : llvm::enumerate(tg.getTasks()))
      for (int64_t tile = 0; tile < t.numTiles; ++tile)
        for (size_t wi = 0; wi < t.waits.size(); ++wi)
          if (certainWait(t, wi))
            for (TileRef d : tg.getDeps(ti, wi, tile))
              certain[gid({static_cast<unsigned>(ti), tile})].push_back(gid(d));
    std::optional<SmallVector<int64_t>> order = tg.topologicalOrder();
    if (!order)
      return false; // a cycle: et-verify-event-graph reports it
    // Certain ancestors (including the tile itself).
    std::vector<llvm::BitVector> anc(n, llvm::BitVector(n));
    for (int64_t g : *order) {
      anc[g].set(g);
      for (int64_t p : certain[g])
        anc[g] |= anc[p];
    }

    SmallVector<Operation *> erase;
    for (auto [ti, t] : llvm::enumerate(tg.getTasks())) {
      SmallVector<bool> removed(t.waits.size(), false);
      for (size_t wi = 0; wi < t.waits.size(); ++wi) {
        bool redundant = t.waits.size() > 1 && !isRemoteWait(t.waits[wi]);
        for (int64_t tile = 0; tile < t.numTiles && redundant; ++tile) {
          if (tg.getDeps(ti, wi, tile).empty()) {
            redundant = false;
            break;
          }
          llvm::BitVector covered(n);
          for (size_t wj = 0; wj < t.waits.size(); ++wj) {
            if (wj == wi || removed[wj] || !certainWait(t, wj))
              continue;
            for (TileRef d : tg.getDeps(ti, wj, tile))
              covered |= anc[gid(d)];
          }
          for (TileRef d : tg.getDeps(ti, wi, tile))
            if (!covered.test(gid(d)))
              redundant = false;
        }
        if (!redundant)
          continue;
        removed[wi] = true;
        remark(t.waits[wi]->op, "wait implied by the task's other waits; "
                                "removed");
        erase.push_back(t.waits[wi]->op);
      }
    }
    for (Operation *op : erase)
      op->erase();
    numRedundantWaits += erase.size();
    return !erase.empty();
  }

  //===--------------------------------------------------------------------===//
  // Coarsening
  //===--------------------------------------------------------------------===//

  /// Returns whether it coarsened an event.
  bool coarsenEvents(KernelOp kernel, const EventGraph &graph,
                     const TileGraph &tg) {
    bool changed = false;
    for (const auto &info : graph.getEvents()) {
      EventType type = info->op.getResult().getType();
      if (!type.hasStaticShape() || info->waits.empty() ||
          info->op.getExpected())
        continue;
      int64_t numElements = 1;
      for (int64_t d : type.getShape())
        numElements *= d;
      if (numElements < 2)
        continue;
      bool usedByLoad = llvm::any_of(info->op->getUsers(), [](Operation *u) {
        return isa<ExtentLoadOp>(u);
      });
      if (usedByLoad)
        continue;
      // Every waiting tile must wait on every element.
      llvm::MapVector<Operation *, SmallVector<EventAccess *>> byTask;
      for (EventAccess *w : info->waits)
        byTask[w->task].push_back(w);
      bool full = true;
      for (auto &[taskOp, waits] : byTask) {
        unsigned ti = tg.getTaskIndex(cast<TaskOp>(taskOp));
        for (int64_t tile = 0; tile < tg.getTask(ti).numTiles && full;
             ++tile) {
          std::set<SmallVector<int64_t>> seen;
          for (EventAccess *w : waits) {
            auto idx = tg.evaluateAccess(*w, ti, tile);
            if (!idx) {
              full = false;
              break;
            }
            seen.insert(*idx);
          }
          full &= static_cast<int64_t>(seen.size()) == numElements;
        }
        if (!full)
          break;
      }
      if (!full)
        continue;

      // One counter receives every signal; each task waits on it once.
      OpBuilder b(info->op);
      b.setInsertionPointAfter(info->op);
      auto coarse = EventCreateOp::create(
          b, info->op.getLoc(), EventType::get(kernel.getContext(), {}),
          ValueRange(), IntegerAttr());
      remark(coarse, "event coarsened into one counter: every waiting tile "
                     "needs all " +
                         Twine(numElements) + " elements");
      for (EventAccess *s : info->signals) {
        b.setInsertionPoint(s->op);
        EventSignalOp::create(b, s->op->getLoc(), coarse, ValueRange(),
                              cast<EventSignalOp>(s->op).getPeer());
        s->op->erase();
      }
      for (auto &[taskOp, waits] : byTask) {
        b.setInsertionPoint(waits.front()->op);
        EventWaitOp::create(b, waits.front()->op->getLoc(), coarse,
                            ValueRange());
        for (EventAccess *w : waits)
          w->op->erase();
        numMergedWaits += waits.size() - 1;
      }
      info->op->erase();
      ++numCoarsenedEvents;
      changed = true;
    }
    return changed;
  }

  //===--------------------------------------------------------------------===//
  // Dead events
  //===--------------------------------------------------------------------===//

  void removeDeadEvents(KernelOp kernel) {
    for (EventCreateOp create :
         llvm::make_early_inc_range(kernel.getEvents())) {
      bool live = llvm::any_of(create->getUsers(), [](Operation *u) {
        return !isa<EventSignalOp>(u);
      });
      if (live)
        continue;
      remark(create, "nobody waits on this event; erased with its signals");
      for (Operation *user : llvm::make_early_inc_range(create->getUsers())) {
        user->erase();
        ++numDeadSignals;
      }
      create->erase();
      ++numDeadEvents;
    }
  }
};
} // namespace
