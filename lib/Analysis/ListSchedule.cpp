//===- ListSchedule.cpp - Critical-path list scheduling of tiles ----------===//
//
// listSchedule: nodes (one per tile, or one per task with a runtime tile
// count), their upward ranks, and their placement on workers.
//
//===----------------------------------------------------------------------===//

#include "EventTensor/Analysis/ListSchedule.h"

#include <algorithm>
#include <queue>

using namespace mlir;
using namespace mlir::et;

namespace {

/// A unit of list scheduling: one tile of a task with a compile-time tile
/// count, or all tiles of a task with a runtime count (distributed by
/// formula).
struct Node {
  unsigned task;
  int64_t tile; // -1 for a whole (cyclic) task
  int64_t numTiles = 1;
  double tileNs = 0;
  SmallVector<unsigned, 4> preds, succs;
  double rank = 0;
};

} // namespace

/// The list-scheduling nodes of `tg`'s tasks (a tile's node takes
/// `model`'s time of one tile on one of `workers` workers), each with its
/// predecessors (sorted) and successors.
static SmallVector<Node> buildNodes(const TileGraph &tg, const CostModel &model,
                                    int64_t workers) {
  SmallVector<Node> nodes;
  SmallVector<unsigned> base;
  for (auto [ti, task] : llvm::enumerate(tg.getTasks())) {
    base.push_back(nodes.size());
    double ns = model.tileNs(task.cost, workers);
    if (task.staticCount) {
      for (int64_t tile = 0; tile < task.numTiles; ++tile)
        nodes.push_back({static_cast<unsigned>(ti), tile, 1, ns, {}, {}, 0});
    } else {
      nodes.push_back(
          {static_cast<unsigned>(ti), -1, task.numTiles, ns, {}, {}, 0});
    }
  }
  auto nodeOf = [&](TileRef ref) {
    return tg.getTask(ref.task).staticCount ? base[ref.task] + ref.tile
                                            : base[ref.task];
  };
  for (auto [id, node] : llvm::enumerate(nodes)) {
    const TileGraph::Task &task = tg.getTask(node.task);
    llvm::SmallDenseSet<unsigned, 8> preds;
    auto addDeps = [&](int64_t tile) {
      for (TileRef dep : tg.getAllDeps(node.task, tile)) {
        unsigned p = nodeOf(dep);
        if (p != id)
          preds.insert(p);
      }
    };
    if (node.tile >= 0)
      addDeps(node.tile);
    else
      for (int64_t tile = 0; tile < task.numTiles; ++tile)
        addDeps(tile);
    node.preds.assign(preds.begin(), preds.end());
    std::sort(node.preds.begin(), node.preds.end());
  }
  for (auto [id, node] : llvm::enumerate(nodes))
    for (unsigned p : node.preds)
      nodes[p].succs.push_back(id);
  return nodes;
}

/// Upward ranks over a topological order: a node's duration (a cyclic
/// task's tiles spread over `workers`) plus the largest rank of its
/// successors. Fails when the nodes depend on each other in a cycle.
static LogicalResult rankNodes(MutableArrayRef<Node> nodes, int64_t workers) {
  SmallVector<unsigned> order;
  SmallVector<unsigned> indegree;
  for (Node &n : nodes)
    indegree.push_back(n.preds.size());
  for (auto [id, n] : llvm::enumerate(nodes))
    if (indegree[id] == 0)
      order.push_back(id);
  for (size_t i = 0; i < order.size(); ++i)
    for (unsigned s : nodes[order[i]].succs)
      if (--indegree[s] == 0)
        order.push_back(s);
  if (order.size() != nodes.size())
    return failure();
  auto duration = [&](const Node &n) {
    return n.tile >= 0 ? n.tileNs
                       : n.tileNs * double((n.numTiles + workers - 1) /
                                           workers);
  };
  for (unsigned id : llvm::reverse(order)) {
    double best = 0;
    for (unsigned s : nodes[id].succs)
      best = std::max(best, nodes[s].rank);
    nodes[id].rank = duration(nodes[id]) + best;
  }
  return success();
}

namespace {

/// Where list scheduling has placed the nodes so far: when each worker is
/// free, when each node finishes and on which worker, and each worker's
/// program.
struct ListSchedule {
  MutableArrayRef<Node> nodes;
  int64_t workers;
  double sync;
  SmallVector<double> freeAt;
  SmallVector<double> finish;
  SmallVector<int64_t> placedOn; // -1: all workers
  // Per worker: (task, tile) entries; tile -1 means cyclic.
  SmallVector<SmallVector<std::pair<unsigned, int64_t>>> programs;
  SmallVector<int64_t> cyclicOffset;

  ListSchedule(MutableArrayRef<Node> nodes, int64_t workers, size_t numTasks,
               double sync)
      : nodes(nodes), workers(workers), sync(sync), freeAt(workers, 0.0),
        finish(nodes.size(), 0.0), placedOn(nodes.size(), -1),
        programs(workers), cyclicOffset(numTasks, 0) {}

  /// Node `id`, one tile, onto the worker where it starts first.
  void placeTile(unsigned id) {
    Node &n = nodes[id];
    // Earliest start on each worker; among equal starts, the worker
    // idle longest, so that what a tile does before its waits (weight
    // or KV-cache loads) overlaps them instead of following the
    // worker's previous tile.
    //
    // The start on worker w is max(freeAt[w], finish[p] + sync for the
    // predecessors p on other workers, finish[p] for those on w). Keep
    // the latest finish per worker holding predecessors, and the two
    // latest of those, so that each worker costs O(1).
    llvm::SmallDenseMap<int64_t, double, 8> latestOn;
    double elsewhere = 0; // predecessors spread over all workers
    for (unsigned p : n.preds) {
      if (placedOn[p] < 0) {
        elsewhere = std::max(elsewhere, finish[p] + sync);
        continue;
      }
      auto [it, inserted] = latestOn.try_emplace(placedOn[p], finish[p]);
      if (!inserted)
        it->second = std::max(it->second, finish[p]);
    }
    int64_t firstWorker = -1;
    double first = 0, second = 0; // latest and second latest per worker
    for (auto [w, f] : latestOn) {
      if (firstWorker < 0 || f > first) {
        second = firstWorker < 0 ? second : first;
        first = f;
        firstWorker = w;
      } else {
        second = std::max(second, f);
      }
    }
    double others = std::max(elsewhere, firstWorker < 0 ? 0 : first + sync);
    double othersOfFirst =
        std::max(elsewhere, latestOn.size() > 1 ? second + sync : 0);
    int64_t bestWorker = 0;
    double bestStart = 0;
    for (int64_t w = 0; w < workers; ++w) {
      double start = std::max(freeAt[w], w == firstWorker ? othersOfFirst
                                                          : others);
      auto it = latestOn.find(w);
      if (it != latestOn.end())
        start = std::max(start, it->second);
      if (w == 0 || start < bestStart ||
          (start == bestStart && freeAt[w] < freeAt[bestWorker])) {
        bestStart = start;
        bestWorker = w;
      }
    }
    placedOn[id] = bestWorker;
    finish[id] = bestStart + n.tileNs;
    freeAt[bestWorker] = finish[id];
    programs[bestWorker].push_back({n.task, n.tile});
  }

  /// Node `id`, a whole task with a runtime tile count, onto every worker
  /// (cyclically, from the worker free first).
  void placeCyclic(unsigned id) {
    Node &n = nodes[id];
    double readyAt = 0;
    for (unsigned p : n.preds)
      readyAt = std::max(readyAt, finish[p] + sync);
    int64_t offset = 0;
    for (int64_t w = 1; w < workers; ++w)
      if (freeAt[w] < freeAt[offset])
        offset = w;
    cyclicOffset[n.task] = offset;
    double end = readyAt;
    for (int64_t w = 0; w < workers; ++w) {
      // Tiles t with (t + offset) mod W == w.
      int64_t first = ((w - offset) % workers + workers) % workers;
      int64_t count = n.numTiles > first
                          ? (n.numTiles - first + workers - 1) / workers
                          : 0;
      if (count > 0) {
        freeAt[w] = std::max(freeAt[w], readyAt) + count * n.tileNs;
        end = std::max(end, freeAt[w]);
      }
      programs[w].push_back({n.task, -1});
    }
    finish[id] = end;
  }
};

} // namespace

FailureOr<TileSchedule> mlir::et::listSchedule(const TileGraph &tg, const CostModel &model, int64_t workers) {
  SmallVector<Node> nodes = buildNodes(tg, model, workers);
  if (failed(rankNodes(nodes, workers)))
    return failure();
  TileSchedule result;
  auto lower = [&](unsigned a, unsigned b) {
    // Max-heap: higher rank first, then lower id.
    if (nodes[a].rank != nodes[b].rank)
      return nodes[a].rank < nodes[b].rank;
    return a > b;
  };
  std::priority_queue<unsigned, std::vector<unsigned>, decltype(lower)>
      ready(lower);
  SmallVector<unsigned> waiting;
  for (Node &n : nodes)
    waiting.push_back(n.preds.size());
  for (auto [id, n] : llvm::enumerate(nodes))
    if (n.preds.empty())
      ready.push(id);

  ListSchedule placement(nodes, workers, tg.getTasks().size(),
                         model.syncNs);
  while (!ready.empty()) {
    unsigned id = ready.top();
    ready.pop();
    Node &n = nodes[id];
    if (n.tile >= 0) {
      placement.placeTile(id);
      ++result.numTiles;
    } else {
      placement.placeCyclic(id);
      ++result.numCyclic;
    }
    for (unsigned s : n.succs)
      if (--waiting[s] == 0)
        ready.push(s);
  }
  result.makespanNs = *llvm::max_element(placement.freeAt);
  result.programs = std::move(placement.programs);
  result.cyclicOffset = std::move(placement.cyclicOffset);
  return result;
}
