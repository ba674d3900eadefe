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
  /// What the node waits on: groups (dependency sets of the tile graph, as
  /// nodes) and single predecessors (a group that holds the node itself,
  /// without it).
  SmallVector<unsigned, 2> groups, preds;
  /// Single successors, and the groups the node belongs to.
  SmallVector<unsigned, 2> succs, memberOf;
  double rank = 0;
};

/// A dependency set of the tile graph as nodes (sorted, unique), and the
/// nodes that wait on it. Tiles that wait on the same element share one:
/// an all-to-all wait costs the tiles, not tiles x tiles.
struct Group {
  SmallVector<unsigned, 2> members;
  SmallVector<unsigned, 2> waiters;
};

struct NodeGraph {
  SmallVector<Node> nodes;
  SmallVector<Group> groups;
};

} // namespace

/// The list-scheduling nodes of `tg`'s tasks (a tile's node takes
/// `model`'s time of one tile on one of `workers` workers), with what each
/// waits on and what waits on it.
static NodeGraph buildNodes(const TileGraph &tg, const CostModel &model,
                            int64_t workers) {
  NodeGraph ng;
  SmallVector<Node> &nodes = ng.nodes;
  SmallVector<unsigned> base;
  for (auto [ti, task] : llvm::enumerate(tg.getTasks())) {
    base.push_back(nodes.size());
    double ns = model.tileNs(task.cost, workers);
    if (task.staticCount) {
      for (int64_t tile = 0; tile < task.numTiles; ++tile)
        nodes.push_back({static_cast<unsigned>(ti), tile, 1, ns, {}, {}, {}, {}, 0});
    } else {
      nodes.push_back(
          {static_cast<unsigned>(ti), -1, task.numTiles, ns, {}, {}, {}, {}, 0});
    }
  }
  auto nodeOf = [&](TileRef ref) {
    return tg.getTask(ref.task).staticCount ? base[ref.task] + ref.tile
                                            : base[ref.task];
  };
  // Each dependency set as nodes, made when first waited on.
  SmallVector<int64_t> groupOf(tg.getNumDepSets(), -1);
  auto groupFor = [&](unsigned set) {
    if (groupOf[set] < 0) {
      SmallVector<unsigned, 2> members;
      for (TileRef ref : tg.getDepSet(set))
        members.push_back(nodeOf(ref));
      std::sort(members.begin(), members.end());
      members.erase(std::unique(members.begin(), members.end()), members.end());
      groupOf[set] = ng.groups.size();
      ng.groups.push_back({std::move(members), {}});
    }
    return static_cast<unsigned>(groupOf[set]);
  };
  for (auto [id, node] : llvm::enumerate(nodes)) {
    const TileGraph::Task &task = tg.getTask(node.task);
    llvm::SmallDenseSet<unsigned, 4> groups, preds;
    auto addDeps = [&](int64_t tile) {
      for (unsigned set : tg.getDepSetsOf(node.task, tile)) {
        unsigned g = groupFor(set);
        ArrayRef<unsigned> members = ng.groups[g].members;
        if (members.empty())
          continue; // nobody signals: nothing to wait for here
        if (!std::binary_search(members.begin(), members.end(), unsigned(id))) {
          groups.insert(g);
          continue;
        }
        // A node does not wait on itself (a whole task's tiles on each
        // other): the rest of the group, one by one.
        for (unsigned p : members)
          if (p != id)
            preds.insert(p);
      }
    };
    if (node.tile >= 0)
      addDeps(node.tile);
    else
      for (int64_t tile = 0; tile < task.numTiles; ++tile)
        addDeps(tile);
    node.groups.assign(groups.begin(), groups.end());
    std::sort(node.groups.begin(), node.groups.end());
    node.preds.assign(preds.begin(), preds.end());
    std::sort(node.preds.begin(), node.preds.end());
  }
  for (auto [id, node] : llvm::enumerate(nodes)) {
    for (unsigned p : node.preds)
      nodes[p].succs.push_back(id);
    for (unsigned g : node.groups)
      ng.groups[g].waiters.push_back(id);
  }
  for (auto [g, group] : llvm::enumerate(ng.groups))
    for (unsigned m : group.members)
      nodes[m].memberOf.push_back(g);
  return ng;
}

/// Upward ranks over a topological order: a node's duration (a cyclic
/// task's tiles spread over `workers`) plus the largest rank of what waits
/// on it. Fails when the nodes depend on each other in a cycle.
static LogicalResult rankNodes(NodeGraph &ng, int64_t workers) {
  // Kahn over nodes [0, N) and groups [N, N + G).
  MutableArrayRef<Node> nodes = ng.nodes;
  size_t numNodes = nodes.size();
  SmallVector<unsigned> order, indegree;
  for (Node &n : nodes)
    indegree.push_back(n.preds.size() + n.groups.size());
  for (Group &g : ng.groups)
    indegree.push_back(g.members.size());
  for (auto [v, d] : llvm::enumerate(indegree))
    if (d == 0)
      order.push_back(v);
  auto release = [&](unsigned v) {
    if (--indegree[v] == 0)
      order.push_back(v);
  };
  for (size_t i = 0; i < order.size(); ++i) {
    unsigned v = order[i];
    if (v >= numNodes) {
      for (unsigned w : ng.groups[v - numNodes].waiters)
        release(w);
      continue;
    }
    for (unsigned s : nodes[v].succs)
      release(s);
    for (unsigned g : nodes[v].memberOf)
      release(numNodes + g);
  }
  if (order.size() != indegree.size())
    return failure();
  auto duration = [&](const Node &n) {
    return n.tile >= 0 ? n.tileNs
                       : n.tileNs * double((n.numTiles + workers - 1) /
                                           workers);
  };
  SmallVector<double> groupRank(ng.groups.size(), 0.0);
  for (unsigned v : llvm::reverse(order)) {
    double best = 0;
    if (v >= numNodes) {
      for (unsigned w : ng.groups[v - numNodes].waiters)
        best = std::max(best, nodes[w].rank);
      groupRank[v - numNodes] = best;
      continue;
    }
    for (unsigned s : nodes[v].succs)
      best = std::max(best, nodes[s].rank);
    for (unsigned g : nodes[v].memberOf)
      best = std::max(best, groupRank[g]);
    nodes[v].rank = duration(nodes[v]) + best;
  }
  return success();
}

namespace {

/// Where list scheduling has placed the nodes so far: when each worker is
/// free, when each node finishes and on which worker, and each worker's
/// program.
struct ListSchedule {
  const NodeGraph &ng;
  ArrayRef<Node> nodes;
  int64_t workers;
  double sync;
  SmallVector<double> freeAt;
  SmallVector<double> finish;
  SmallVector<int64_t> placedOn; // -1: all workers
  // Per worker: (task, tile) entries; tile -1 means cyclic.
  SmallVector<SmallVector<std::pair<unsigned, int64_t>>> programs;
  SmallVector<int64_t> cyclicOffset;

  /// Where a set of predecessors finished: the latest finish per worker
  /// and, plus the sync, of those spread over all workers.
  struct Finished {
    llvm::SmallDenseMap<int64_t, double, 8> latestOn;
    double elsewhere = 0;
    void add(int64_t worker, double at, double sync) {
      if (worker < 0) {
        elsewhere = std::max(elsewhere, at + sync);
        return;
      }
      auto [it, inserted] = latestOn.try_emplace(worker, at);
      if (!inserted)
        it->second = std::max(it->second, at);
    }
  };
  /// Each group's, once all its members are placed (made when first
  /// needed): a node waiting on an all-to-all group merges at most one
  /// entry per worker instead of reading every member.
  std::vector<std::optional<Finished>> groupFinished;

  ListSchedule(const NodeGraph &ng, int64_t workers, size_t numTasks,
               double sync)
      : ng(ng), nodes(ng.nodes), workers(workers), sync(sync), freeAt(workers, 0.0),
        finish(nodes.size(), 0.0), placedOn(nodes.size(), -1),
        programs(workers), cyclicOffset(numTasks, 0), groupFinished(ng.groups.size()) {}

  /// Where the predecessors of node `id` finished.
  Finished predecessorsOf(unsigned id) {
    Finished all;
    const Node &n = nodes[id];
    for (unsigned g : n.groups) {
      std::optional<Finished> &group = groupFinished[g];
      if (!group) {
        group.emplace();
        for (unsigned p : ng.groups[g].members)
          group->add(placedOn[p], finish[p], sync);
      }
      all.elsewhere = std::max(all.elsewhere, group->elsewhere);
      for (auto [w, at] : group->latestOn)
        all.add(w, at, sync);
    }
    for (unsigned p : n.preds)
      all.add(placedOn[p], finish[p], sync);
    return all;
  }

  /// Node `id`, one tile, onto the worker where it starts first.
  void placeTile(unsigned id) {
    const Node &n = nodes[id];
    // Earliest start on each worker; among equal starts, the worker
    // idle longest, so that what a tile does before its waits (weight
    // or KV-cache loads) overlaps them instead of following the
    // worker's previous tile.
    //
    // The start on worker w is max(freeAt[w], finish[p] + sync for the
    // predecessors p on other workers, finish[p] for those on w). Keep
    // the latest finish per worker holding predecessors, and the two
    // latest of those, so that each worker costs O(1).
    Finished preds = predecessorsOf(id);
    const auto &latestOn = preds.latestOn;
    double elsewhere = preds.elsewhere; // predecessors spread over all workers
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
    const Node &n = nodes[id];
    double readyAt = 0;
    Finished preds = predecessorsOf(id);
    readyAt = preds.elsewhere;
    for (auto [w, at] : preds.latestOn)
      readyAt = std::max(readyAt, at + sync);
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
  NodeGraph ng = buildNodes(tg, model, workers);
  if (failed(rankNodes(ng, workers)))
    return failure();
  ArrayRef<Node> nodes = ng.nodes;
  TileSchedule result;
  auto lower = [&](unsigned a, unsigned b) {
    // Max-heap: higher rank first, then lower id.
    if (nodes[a].rank != nodes[b].rank)
      return nodes[a].rank < nodes[b].rank;
    return a > b;
  };
  std::priority_queue<unsigned, std::vector<unsigned>, decltype(lower)>
      ready(lower);
  // A node is ready once its single predecessors and its groups are done;
  // a group once its members are.
  SmallVector<unsigned> waiting, groupWaiting;
  for (const Node &n : nodes)
    waiting.push_back(n.preds.size() + n.groups.size());
  for (const Group &g : ng.groups)
    groupWaiting.push_back(g.members.size());
  for (auto [id, n] : llvm::enumerate(nodes))
    if (waiting[id] == 0)
      ready.push(id);

  ListSchedule placement(ng, workers, tg.getTasks().size(), model.syncNs);
  while (!ready.empty()) {
    unsigned id = ready.top();
    ready.pop();
    const Node &n = nodes[id];
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
    for (unsigned g : n.memberOf)
      if (--groupWaiting[g] == 0)
        for (unsigned w : ng.groups[g].waiters)
          if (--waiting[w] == 0)
            ready.push(w);
  }
  result.makespanNs = *llvm::max_element(placement.freeAt);
  result.programs = std::move(placement.programs);
  result.cyclicOffset = std::move(placement.cyclicOffset);
  return result;
}
