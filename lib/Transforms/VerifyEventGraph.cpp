//===- VerifyEventGraph.cpp - Whole-kernel event graph checks -------------===//
//
// Implements et-verify-event-graph on top of the EventGraph analysis.
//
//===----------------------------------------------------------------------===//

#include "EventTensor/Analysis/EventGraph.h"
#include "EventTensor/Analysis/TileGraph.h"
#include "EventTensor/Transforms/Passes.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"

#include <vector>

#define DEBUG_TYPE "et-verify-event-graph"

namespace mlir::et {
#define GEN_PASS_DEF_VERIFYEVENTGRAPHPASS
#include "EventTensor/Transforms/Passes.h.inc"
} // namespace mlir::et

using namespace mlir;
using namespace mlir::et;

static std::string formatIndex(ArrayRef<int64_t> idx) {
  std::string out = "[";
  llvm::raw_string_ostream os(out);
  llvm::interleaveComma(idx, os);
  os << "]";
  return out;
}

namespace {
struct VerifyEventGraphPass
    : public mlir::et::impl::VerifyEventGraphPassBase<VerifyEventGraphPass> {
  using Base::Base;

  void runOnOperation() override {
    KernelOp kernel = getOperation();
    EventGraph graph(kernel);
    numEvents += graph.getEvents().size();
    numEdges += graph.getEdges().size();
    bool failed = false;

    for (const auto &info : graph.getEvents()) {
      if (emitCounts) {
        InFlightDiagnostic remark = info->op.emitRemark()
                                    << "expected count: "
                                    << stringifyCountKind(info->kind) << ", "
                                    << info->countExpr;
        if (!info->deviceReason.empty())
          remark << " (" << info->deviceReason << ")";
      }
      failed |= checkExplicitCount(*info);
    }
    for (const auto &access : graph.getAccesses())
      failed |= checkAccess(graph, *access);
    failed |= checkCycles(graph);
    // On a scheduled kernel et-optimize-events may have dropped waits that
    // program order on a worker implies: the steps' order was checked when
    // it was scheduled.
    Block &body = kernel.getBody().front();
    failed |= mlir::failed(verifySteps(graph, /*checkOrder=*/body.empty() || !isa<ScheduleOp>(body.back())));
    if (!failed)
      failed |= checkSchedule(graph);
    if (failed)
      signalPassFailure();
  }

  /// Out-of-bounds indices and waits on elements nobody signals.
  bool checkAccess(const EventGraph &graph, const EventAccess &access) {
    Value event = access.isSignal
                      ? cast<EventSignalOp>(access.op).getEvent()
                      : cast<EventWaitOp>(access.op).getEvent();
    EventInfo *info = graph.lookup(event);
    EventType type = cast<EventType>(event.getType());
    if (!access.isSignal && info && info->signals.empty()) {
      access.op->emitOpError("waits on an event that no task signals "
                             "(certain deadlock)")
              .attachNote(info->op.getLoc())
          << "event created here";
      return true;
    }
    // Evaluate the access at every tile when everything is static.
    bool reported = false;
    graph.forEachStaticTile(
        access.task, kMaxEnumeratedTiles, [&](ArrayRef<int64_t> tile) {
          if (reported)
            return;
          std::optional<SmallVector<int64_t>> idx =
              graph.evaluate(access, tile);
          if (!idx)
            return;
          for (auto [k, v] : llvm::enumerate(*idx)) {
            int64_t size = type.getShape()[k];
            if (v < 0 || (!ShapedType::isDynamic(size) && v >= size)) {
              access.op->emitOpError("index #")
                  << k << " is out of bounds at tile " << formatIndex(tile)
                  << ": " << v << " not in [0, "
                  << (ShapedType::isDynamic(size) ? std::string("?")
                                                  : std::to_string(size))
                  << ")";
              reported = true;
              return;
            }
          }
          if (access.isSignal || !info || !info->staticCounts)
            return;
          int64_t linear = 0;
          for (auto [v, d] : llvm::zip(*idx, type.getShape()))
            linear = linear * d + v;
          if ((*info->staticCounts)[linear] == 0) {
            InFlightDiagnostic diag =
                access.op->emitOpError("waits on element ")
                << formatIndex(*idx) << " (at tile " << formatIndex(tile)
                << "), which no task signals (certain deadlock)";
            diag.attachNote(info->op.getLoc()) << "event created here";
            reported = true;
          }
        });
    return reported;
  }

  bool checkExplicitCount(const EventInfo &info) {
    EventCreateOp create = info.op;
    std::optional<uint64_t> expected = create.getExpected();
    if (!expected || !info.staticCounts)
      return false;
    EventType type = create.getResult().getType();
    for (auto [linear, count] : llvm::enumerate(*info.staticCounts)) {
      if (count == static_cast<int64_t>(*expected))
        continue;
      SmallVector<int64_t> idx(type.getRank());
      int64_t rest = linear;
      for (int64_t d = type.getRank() - 1; d >= 0; --d) {
        idx[d] = rest % type.getShape()[d];
        rest /= type.getShape()[d];
      }
      create.emitOpError("explicit expected count ")
          << *expected << " disagrees with the derived count " << count
          << " of element " << formatIndex(idx);
      return true;
    }
    return false;
  }

  /// A dynamic schedule must queue producers before consumers; a static
  /// one must order every worker's tiles after their dependencies on that
  /// worker, and must not make workers wait on each other in a cycle.
  bool checkSchedule(const EventGraph &graph) {
    KernelOp kernel = graph.getKernel();
    Block &body = kernel.getBody().front();
    auto schedule = body.empty() ? ScheduleOp() : dyn_cast<ScheduleOp>(body.back());
    if (!schedule)
      return false;
    if (!schedule.isStatic()) {
      // Each run's task looked up once, and each task's producers once (a
      // scan of every edge for every run, each looking its task up by
      // name, made a chain of 1,000 tasks take 19 s here).
      llvm::DenseMap<Operation *, RunOp> position;
      SmallVector<std::pair<RunOp, TaskOp>> runs;
      for (RunOp run : schedule.getBody().front().getOps<RunOp>()) {
        TaskOp task = run.getTaskOp();
        position[task] = run;
        runs.push_back({run, task});
      }
      llvm::DenseMap<Operation *, SmallVector<TaskOp>> producersOf;
      for (const EventGraph::Edge &e : graph.getEdges())
        if (e.producer != e.consumer)
          producersOf[e.consumer].push_back(e.producer);
      for (auto [run, consumer] : runs) {
        auto it = producersOf.find(consumer);
        if (it == producersOf.end())
          continue;
        for (TaskOp producer : it->second) {
          RunOp producerRun = position.lookup(producer);
          if (!producerRun || !run->isBeforeInBlock(producerRun))
            continue;
          InFlightDiagnostic diag =
              run.emitOpError("queues @")
              << consumer.getSymName() << " before @" << producer.getSymName()
              << ", on which it depends: workers holding its tiles may wait "
                 "on tiles nobody has taken (deadlock)";
          diag.attachNote(producerRun.getLoc())
              << "@" << producer.getSymName() << " is queued here";
          return true;
        }
      }
      return false;
    }

    // Static, task level: on each worker, a task spread by formula (cyclic)
    // must come before the tasks that depend on it: which of its tiles land
    // on that worker is only known at run time. (A consumer spread by
    // formula after a producer listed by tile may depend on only some of
    // the producer's tiles; that is checked tile by tile when counts are
    // static.)
    for (WorkerOp worker : schedule.getBody().front().getOps<WorkerOp>()) {
      llvm::DenseMap<Operation *, RunOp> first;
      for (RunOp run : worker.getBody().front().getOps<RunOp>())
        first.try_emplace(run.getTaskOp(), run);
      for (const EventGraph::Edge &e : graph.getEdges()) {
        TaskOp producer = e.producer, consumer = e.consumer;
        RunOp p = first.lookup(producer), c = first.lookup(consumer);
        if (!p || !c || producer == consumer || p->isBeforeInBlock(c))
          continue;
        if (!p.getCyclic())
          continue;
        InFlightDiagnostic diag =
            c.emitOpError("runs @")
            << consumer.getSymName() << " on worker " << worker.getId()
            << " before @" << producer.getSymName()
            << ", on which it depends and which is spread by formula: the "
               "worker may wait on its own later tiles (deadlock)";
        diag.attachNote(p.getLoc())
            << "@" << producer.getSymName() << " is scheduled here";
        return true;
      }
    }

    // Static: tile level, when every tile count is a compile-time constant.
    TileGraphOptions options;
    options.useBounds = false;
    Operation *errorOp;
    std::string error;
    FailureOr<TileGraph> tg = TileGraph::build(graph, options, errorOp, error);
    if (failed(tg) || llvm::any_of(tg->getTasks(), [](const auto &t) {
          return !t.staticCount;
        }))
      return false;
    // Tiles by global id (TileGraph::getGlobalId); worker -1: not scheduled.
    struct Place {
      int64_t worker = -1, pos = 0;
      RunOp run;
    };
    int64_t total = tg->getNumTiles();
    std::vector<Place> where(total);
    SmallVector<SmallVector<int64_t>> programs;
    for (WorkerOp worker : schedule.getBody().front().getOps<WorkerOp>()) {
      auto &program = programs.emplace_back();
      for (RunOp run : worker.getBody().front().getOps<RunOp>()) {
        unsigned task = tg->getTaskIndex(run.getTaskOp());
        SmallVector<int64_t> tiles;
        if (std::optional<ArrayRef<int64_t>> listed = run.getTiles()) {
          tiles.assign(listed->begin(), listed->end());
        } else {
          // A static-count task spread by formula: tile t on worker
          // (t + k) mod W.
          int64_t w = worker.getId(), k = *run.getCyclic();
          int64_t numWorkers = schedule.getWorkers();
          for (int64_t t = ((w - k) % numWorkers + numWorkers) % numWorkers;
               t < tg->getTask(task).numTiles; t += numWorkers)
            tiles.push_back(t);
        }
        for (int64_t tile : tiles) {
          int64_t g = tg->getGlobalId({task, tile});
          where[g] = {worker.getId(), static_cast<int64_t>(program.size()),
                      run};
          program.push_back(g);
        }
      }
    }
    // Each tile's dependencies through its dependency sets (shared by
    // tiles that wait on the same element: an all-to-all wait is one set).
    SmallVector<TileRef> tileOf(total);
    for (auto [ti, task] : llvm::enumerate(tg->getTasks()))
      for (int64_t tile = 0; tile < task.numTiles; ++tile)
        tileOf[tg->getGlobalId({static_cast<unsigned>(ti), tile})] = {static_cast<unsigned>(ti), tile};
    // Same worker: dependencies first.
    for (int64_t g = 0; g < total; ++g) {
      Place &place = where[g];
      if (place.worker < 0)
        continue;
      TileRef key = tileOf[g];
      for (unsigned set : tg->getDepSetsOf(key.task, key.tile))
        for (TileRef dt : tg->getDepSet(set)) {
          Place &dep = where[tg->getGlobalId(dt)];
          if (dep.worker != place.worker || dep.pos < place.pos)
            continue;
          InFlightDiagnostic diag =
              place.run.emitOpError("runs tile ")
              << key.tile << " of @" << tg->getTask(key.task).op.getSymName()
              << " on worker " << place.worker << " before tile " << dt.tile
              << " of @" << tg->getTask(dt.task).op.getSymName()
              << ", which it waits on (certain deadlock)";
          diag.attachNote(dep.run.getLoc())
              << "tile " << dt.tile << " is scheduled here";
          return true;
        }
    }
    // Across workers: program order and dependencies must be acyclic. A
    // tile that waits on a tile no worker runs never becomes ready.
    SmallVector<bool> present(total);
    int64_t placed = 0;
    for (int64_t g = 0; g < total; ++g)
      if ((present[g] = where[g].worker >= 0))
        ++placed;
    SmallVector<std::pair<int64_t, int64_t>> programOrder;
    for (auto &program : programs)
      for (size_t i = 1; i < program.size(); ++i)
        programOrder.push_back({program[i - 1], program[i]});
    SmallVector<int64_t> ran = tg->orderTiles(present, programOrder);
    int64_t done = ran.size();
    if (done == placed)
      return false;
    InFlightDiagnostic diag = schedule.emitOpError(
        "deadlocks: workers wait on each other's tiles in a cycle");
    // Where the first stuck worker blocks: its first unfinished tile.
    SmallVector<bool> finished(total, false);
    for (int64_t g : ran)
      finished[g] = true;
    for (auto &program : programs) {
      auto it = llvm::find_if(program, [&](int64_t g) { return !finished[g]; });
      if (it == program.end())
        continue;
      Place &place = where[*it];
      TileRef key = tileOf[*it];
      diag.attachNote(place.run.getLoc())
          << "worker " << place.worker << " blocks at tile " << key.tile
          << " of @" << tg->getTask(key.task).op.getSymName();
      break;
    }
    return true;
  }

  /// True when every task has a static tile count and no tile depends on
  /// itself through others (Kahn's algorithm over every tile dependency).
  bool tilesAcyclic(const EventGraph &graph) {
    Operation *errorOp = nullptr;
    std::string error;
    TileGraphOptions options;
    options.useBounds = false;
    FailureOr<TileGraph> tg = TileGraph::build(graph, options, errorOp, error);
    if (failed(tg) || llvm::any_of(tg->getTasks(), [](const auto &t) { return !t.staticCount; }))
      return false;
    return tg->topologicalOrder().has_value();
  }

  /// Reports one dependency cycle between tasks whose tiles form a cycle
  /// too (or whose tile counts are not all static), if any.
  bool checkCycles(const EventGraph &graph) {
    KernelOp kernel = graph.getKernel();
    SmallVector<TaskOp> tasks(kernel.getTasks());
    llvm::DenseMap<Operation *, unsigned> id;
    for (auto [i, t] : llvm::enumerate(tasks))
      id[t] = i;
    // successors[i]: (consumer, edge)
    SmallVector<SmallVector<const EventGraph::Edge *>> succ(tasks.size());
    for (const EventGraph::Edge &e : graph.getEdges())
      succ[id[e.producer]].push_back(&e);

    SmallVector<int> state(tasks.size(), 0); // 0 new, 1 on stack, 2 done
    SmallVector<const EventGraph::Edge *> stack;
    SmallVector<const EventGraph::Edge *> cycle;
    std::function<bool(unsigned)> dfs = [&](unsigned u) -> bool {
      state[u] = 1;
      for (const EventGraph::Edge *e : succ[u]) {
        unsigned v = id[e->consumer];
        stack.push_back(e);
        if (state[v] == 1) {
          // The cycle is the suffix of the stack starting at v.
          auto it = llvm::find_if(stack, [&](const EventGraph::Edge *x) {
            return id[x->producer] == v;
          });
          cycle.assign(it, stack.end());
          return true;
        }
        if (state[v] == 0 && dfs(v))
          return true;
        stack.pop_back();
      }
      state[u] = 2;
      return false;
    };
    for (unsigned i = 0; i < tasks.size(); ++i)
      if (state[i] == 0 && dfs(i))
        break;
    if (cycle.empty())
      return false;
    // Tasks may form a cycle whose tiles do not: a layer loop, where tile
    // (l, t) of one task waits on tile l - 1 of another. That is fine when
    // every tile count is static and the tile graph has no cycle.
    if (tilesAcyclic(graph))
      return false;

    std::string path;
    llvm::raw_string_ostream os(path);
    for (const EventGraph::Edge *e : cycle)
      os << "@" << TaskOp(e->producer).getSymName() << " -> ";
    TaskOp first = cycle.front()->producer;
    os << "@" << first.getSymName();
    InFlightDiagnostic diag =
        first.emitOpError("is on a dependency cycle: " + path);
    for (const EventGraph::Edge *e : cycle)
      diag.attachNote(e->wait->getLoc())
          << "@" << TaskOp(e->consumer).getSymName()
          << " waits here on an event signalled by @"
          << TaskOp(e->producer).getSymName();
    return true;
  }
};
} // namespace
