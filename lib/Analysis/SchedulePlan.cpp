//===- SchedulePlan.cpp - Schedule plan export ----------------------------===//
//
// Expands a kernel's schedule into concrete tiles for given runtime sizes and
// writes it, with the tile graph and the cost model's durations, as JSON.
//
//===----------------------------------------------------------------------===//

#include "EventTensor/Analysis/TileGraph.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

using namespace mlir;
using namespace mlir::et;

LogicalResult mlir::et::printSchedulePlan(KernelOp kernel,
                                          const SizeBindings &bindings,
                                          raw_ostream &os, std::string &error) {
  Block &body = kernel.getBody().front();
  ScheduleOp schedule =
      body.empty() ? ScheduleOp() : dyn_cast<ScheduleOp>(body.back());
  if (!schedule) {
    error = "kernel @" + kernel.getSymName().str() +
            " is not scheduled (run et-static-schedule or "
            "et-dynamic-schedule first)";
    return failure();
  }
  EventGraph graph(kernel);
  TileGraphOptions options;
  options.bindings = bindings;
  options.useBounds = false;
  Operation *errorOp = nullptr;
  FailureOr<TileGraph> tg = TileGraph::build(graph, options, errorOp, error);
  if (failed(tg))
    return failure();

  int64_t workers = schedule.getWorkers();
  CostModel model = CostModel::get(schedule.getCostModelAttr());
  auto pair = [](unsigned task, int64_t tile) {
    return llvm::json::Array{static_cast<int64_t>(task), tile};
  };

  llvm::json::Array tasks, deps;
  for (auto [ti, t] : llvm::enumerate(tg->getTasks())) {
    tasks.push_back(llvm::json::Object{
        {"name", t.op.getSymName()},
        {"extents", llvm::json::Array(t.extents)},
        {"num_tiles", t.numTiles},
        {"bytes", t.cost.bytes},
        {"flops", t.cost.flops},
        {"tile_ns", model.tileNs(t.cost, workers)},
        {"prologue_ns", model.prologueNs(t.cost, workers)}});
    llvm::json::Array perTile;
    for (int64_t tile = 0; tile < t.numTiles; ++tile) {
      llvm::json::Array list;
      for (TileRef d : tg->getAllDeps(ti, tile))
        list.push_back(pair(d.task, d.tile));
      perTile.push_back(std::move(list));
    }
    deps.push_back(std::move(perTile));
  }

  // Event sizes and every access's element per tile (linear, row-major;
  // null where the index is computed from data).
  llvm::json::Array eventsJson;
  llvm::DenseMap<Value, unsigned> eventIds;
  SmallVector<SmallVector<int64_t>> eventDims;
  for (auto [i, info] : llvm::enumerate(graph.getEvents())) {
    eventIds[info->op.getResult()] = i;
    EventType type = info->op.getResult().getType();
    SmallVector<int64_t> dims;
    unsigned dyn = 0;
    for (int64_t d : type.getShape()) {
      if (!ShapedType::isDynamic(d)) {
        dims.push_back(d);
        continue;
      }
      std::optional<int64_t> v =
          evaluateSize(info->op.getDynamicSizes()[dyn++], bindings);
      dims.push_back(v.value_or(-1));
    }
    int64_t size = 1;
    for (int64_t d : dims)
      size = d < 0 ? -1 : size * d;
    eventsJson.push_back(llvm::json::Object{
        {"name", "event" + std::to_string(i)},
        {"shape", llvm::json::Array(dims)},
        {"size", size}});
    eventDims.push_back(dims);
  }
  auto accessJson = [&](const EventAccess &access, unsigned ti) {
    Value event = access.isSignal ? cast<EventSignalOp>(access.op).getEvent()
                                  : cast<EventWaitOp>(access.op).getEvent();
    unsigned id = eventIds.lookup(event);
    llvm::json::Array elements;
    for (int64_t tile = 0; tile < tg->getTask(ti).numTiles; ++tile) {
      std::optional<SmallVector<int64_t>> idx = tg->evaluateAccess(access, ti, tile);
      if (!idx) {
        elements.push_back(nullptr);
        continue;
      }
      int64_t lin = 0;
      for (auto [v, d] : llvm::zip(*idx, eventDims[id]))
        lin = lin * d + v;
      elements.push_back(lin);
    }
    return llvm::json::Object{{"event", static_cast<int64_t>(id)},
                              {"elements", std::move(elements)}};
  };
  llvm::json::Array accessesJson;
  for (auto [ti, t] : llvm::enumerate(tg->getTasks())) {
    llvm::json::Array waits, signals;
    for (const auto &access : graph.getAccesses()) {
      if (access->task != t.op)
        continue;
      (access->isSignal ? signals : waits)
          .push_back(accessJson(*access, ti));
    }
    accessesJson.push_back(llvm::json::Object{{"waits", std::move(waits)},
                                              {"signals", std::move(signals)}});
  }

  llvm::json::Object root{
      {"kernel", kernel.getSymName()},
      {"events", std::move(eventsJson)},
      {"accesses", std::move(accessesJson)},
      {"mode", stringifyScheduleKind(schedule.getKind())},
      {"workers", workers},
      {"cost_model",
       llvm::json::Object{{"bandwidth_gbps", model.bandwidthGbps},
                          {"gflops", model.gflops},
                          {"tflops", model.gflops / 1000.0},
                          {"dispatch_ns", model.dispatchNs},
                          {"sync_ns", model.syncNs}}},
      {"tasks", std::move(tasks)},
      {"deps", std::move(deps)}};

  Block &sched = schedule.getBody().front();
  if (schedule.isStatic()) {
    llvm::json::Array programs;
    for (WorkerOp worker : sched.getOps<WorkerOp>()) {
      llvm::json::Array program;
      int64_t w = worker.getId();
      for (RunOp run : worker.getBody().front().getOps<RunOp>()) {
        unsigned task = tg->getTaskIndex(run.getTaskOp());
        if (std::optional<ArrayRef<int64_t>> tiles = run.getTiles()) {
          for (int64_t tile : *tiles)
            program.push_back(pair(task, tile));
          continue;
        }
        int64_t offset = static_cast<int64_t>(*run.getCyclic());
        int64_t n = tg->getTask(task).numTiles;
        for (int64_t t = ((w - offset) % workers + workers) % workers; t < n;
             t += workers)
          program.push_back(pair(task, t));
      }
      programs.push_back(std::move(program));
    }
    root["programs"] = std::move(programs);
  } else {
    llvm::json::Array queue;
    for (RunOp run : sched.getOps<RunOp>()) {
      unsigned task = tg->getTaskIndex(run.getTaskOp());
      for (int64_t t = 0, n = tg->getTask(task).numTiles; t < n; ++t)
        queue.push_back(pair(task, t));
    }
    root["queue"] = std::move(queue);
  }
  os << llvm::formatv("{0}", llvm::json::Value(std::move(root)));
  return success();
}
