//===- TileGraph.h - Tile-level dependencies and costs ------------*- C++ -*-===//
//
// The tile graph of an et.kernel for concrete (or estimated) runtime sizes:
// every tile of every task, the tiles each tile waits on through each of its
// waits, and a per-tile cost (bytes moved, flops) turned into a duration by a
// cost model. Schedulers, the event-graph optimizer and the schedule
// simulator's plan export are built on it.
//
//===----------------------------------------------------------------------===//

#ifndef EVENTTENSOR_ANALYSIS_TILEGRAPH_H
#define EVENTTENSOR_ANALYSIS_TILEGRAPH_H

#include "EventTensor/Analysis/EventGraph.h"

#include "llvm/ADT/StringMap.h"

namespace mlir::et {

//===----------------------------------------------------------------------===//
// Runtime sizes
//===----------------------------------------------------------------------===//

/// Values of a kernel's runtime sizes, keyed by name: kernel argument `i` is
/// "arg<i>", the `k`-th `et.extent.load` of the kernel (program order) is
/// "load<k>".
using SizeBindings = llvm::StringMap<int64_t>;

/// The binding name of a kernel argument or extent load; empty otherwise.
std::string getSizeName(Value value);

/// The et.extent.load ops a task's extents are computed from (each once).
SmallVector<ExtentLoadOp> getExtentLoads(TaskOp task);

/// Evaluates a kernel-level index value (constants, kernel arguments, extent
/// loads, arith/affine index arithmetic) under `bindings`; nullopt when it
/// depends on something unbound or unsupported.
std::optional<int64_t> evaluateSize(Value value, const SizeBindings &bindings);

//===----------------------------------------------------------------------===//
// Costs
//===----------------------------------------------------------------------===//

/// The work of one tile.
struct TileCost {
  int64_t bytes = 0;
  int64_t flops = 0;
  /// Bytes read before the tile's first wait (producer-independent work that
  /// may overlap the wait).
  int64_t prologueBytes = 0;
  /// True when the cost comes from an `et.cost` attribute.
  bool fromAttribute = false;
};

/// The cost of one tile of `task`: its `et.cost` attribute, or derived from
/// the body (memory accesses and floating-point arithmetic, multiplied by
/// constant loop trip counts).
TileCost getTaskCost(TaskOp task);

/// Turns costs into durations (see #et.cost_model).
struct CostModel {
  int64_t bandwidthGbps = 4800;
  int64_t gflops = 989000;
  int64_t dispatchNs = 300;
  int64_t syncNs = 1000;

  static CostModel get(CostModelAttr attr);
  CostModelAttr toAttr(MLIRContext *ctx) const;
  /// Duration of one tile, in ns, when `workers` share the device.
  double tileNs(const TileCost &cost, int64_t workers) const;
  /// The part of tileNs that may run before the tile's waits are satisfied.
  double prologueNs(const TileCost &cost, int64_t workers) const;
};

//===----------------------------------------------------------------------===//
// Tile graph
//===----------------------------------------------------------------------===//

/// A tile: task position (program order) and linear tile id (row-major).
struct TileRef {
  unsigned task;
  int64_t tile;
  bool operator==(const TileRef &o) const {
    return task == o.task && tile == o.tile;
  }
  bool operator<(const TileRef &o) const {
    return task != o.task ? task < o.task : tile < o.tile;
  }
};

/// How the sizes of a tile graph are chosen.
struct TileGraphOptions {
  /// Runtime sizes, by name (see SizeBindings).
  SizeBindings bindings;
  /// If positive, an extent that `bindings` do not determine and that has
  /// no `max_extents` bound is estimated as this value when it is computed
  /// from kernel arguments. Extents read on the device always need a binding
  /// or a bound.
  int64_t defaultExtent = 0;
  /// Use `max_extents` bounds for extents the bindings do not determine.
  bool useBounds = true;
  /// Refuse graphs with more tiles than this.
  int64_t maxTiles = 1 << 20;
};

class TileGraph {
public:
  struct Task {
    mutable TaskOp op;
    SmallVector<int64_t> extents;
    int64_t numTiles = 0;
    /// True when every extent is a compile-time constant.
    bool staticCount = true;
    /// True when some extent came from a bound or an estimate rather than
    /// from a constant or a binding.
    bool estimated = false;
    TileCost cost;
    /// Waits of this task, in body order (EventGraph accesses).
    SmallVector<const EventAccess *> waits;
    /// depSets[w][tile]: the dependency set (getDepSet) of the tiles that
    /// wait `w` of `tile` may wait on.
    SmallVector<std::vector<unsigned>> depSets;
    /// exact[w]: true when wait w's sets are exact for every tile (the
    /// waited element is known at compile time and every signal index is
    /// too), so the tile certainly waits on each of them; otherwise they
    /// over-approximate.
    SmallVector<bool> exact;
    /// The dependency set of the tiles the whole task depends on before it
    /// knows its tile count (the signallers of the `after` events of its
    /// extent loads); none when empty.
    std::optional<unsigned> extentSet;
  };

  /// Builds the graph. On failure returns the op to report on and a message.
  static FailureOr<TileGraph> build(const EventGraph &graph,
                                    const TileGraphOptions &options,
                                    Operation *&errorOp, std::string &error);

  ArrayRef<Task> getTasks() const { return tasks; }
  const Task &getTask(unsigned i) const { return tasks[i]; }
  /// Position of a task in program order.
  unsigned getTaskIndex(TaskOp task) const { return taskIndex.lookup(task); }
  /// Dependency sets: the tiles (sorted, unique) that a wait may wait on.
  /// The waits that resolve to the same element of an event share one set,
  /// so a wait of every tile of a task on every tile of another (an
  /// all-to-all) costs one set of N tiles, not N lists of N.
  ArrayRef<TileRef> getDepSet(unsigned id) const { return depSets[id]; }
  unsigned getNumDepSets() const { return depSets.size(); }
  /// The tiles that wait `wait` of tile `tile` of task `task` may wait on.
  ArrayRef<TileRef> getDeps(unsigned task, unsigned wait, int64_t tile) const {
    return depSets[tasks[task].depSets[wait][tile]];
  }
  /// The dependency sets tile `tile` of task `task` waits on: one per wait,
  /// and the task's extent set (a set may appear more than once).
  SmallVector<unsigned, 4> getDepSetsOf(unsigned task, int64_t tile) const;
  /// All tiles `tile` of task `task` waits on (every wait), sorted, unique.
  SmallVector<TileRef> getAllDeps(unsigned task, int64_t tile) const;
  int64_t getNumTiles() const { return totalTiles; }
  /// The tile's index among all tiles of the kernel (tasks in program order).
  int64_t getGlobalId(TileRef ref) const { return tileBase[ref.task] + ref.tile; }
  /// Every tile as a global id, each after all tiles it depends on; nullopt
  /// when tiles depend on each other in a cycle.
  std::optional<SmallVector<int64_t>> topologicalOrder() const;
  /// Kahn's algorithm over the tiles for which `present[g]` holds (by global
  /// id), their dependency sets (a set is done once all its tiles are; one
  /// holding an absent tile never is) and the `extra` edges (from, to)
  /// between present tiles. Returns the tiles in an order where each
  /// follows what it depends on, and only those that can run: fewer than
  /// the present ones when some wait in a cycle or on an absent tile.
  /// Memory in the tiles, the sets' sizes and the edges, never in tiles x
  /// tiles.
  SmallVector<int64_t> orderTiles(ArrayRef<bool> present,
                                  ArrayRef<std::pair<int64_t, int64_t>> extra = {}) const;

  /// Decodes a linear tile id into coordinates.
  SmallVector<int64_t> delinearize(unsigned task, int64_t tile) const;

  /// The element an access of task `task` touches at `tile`; nullopt when
  /// its indices are computed from data.
  std::optional<SmallVector<int64_t>>
  evaluateAccess(const EventAccess &access, unsigned task, int64_t tile) const;

private:
  TileGraph() = default;
  SmallVector<std::optional<int64_t>> symbolValues;
  std::vector<Task> tasks;
  std::vector<SmallVector<TileRef, 2>> depSets;
  llvm::DenseMap<Operation *, unsigned> taskIndex;
  SmallVector<int64_t> tileBase; // global id of each task's tile 0
  int64_t totalTiles = 0;
};

/// Evaluates an affine expression over tile coordinates (dims) and symbol
/// values; nullopt if a symbol is unknown or a division by zero occurs.
std::optional<int64_t>
evaluateAffine(AffineExpr expr, ArrayRef<int64_t> dims,
               ArrayRef<std::optional<int64_t>> symbols);

/// Writes the schedule plan of a scheduled kernel for concrete sizes as JSON:
/// tasks with their tile counts and durations under the schedule's cost
/// model, every tile's dependencies, and the schedule expanded into tiles
/// (per-worker programs for a static schedule, the ticket order for a
/// dynamic one). This is the input of the Python schedule simulator. Fails,
/// with a message in `error`, when the kernel is not scheduled or a size is
/// not bound.
LogicalResult printSchedulePlan(KernelOp kernel, const SizeBindings &bindings,
                                raw_ostream &os, std::string &error);

} // namespace mlir::et

#endif // EVENTTENSOR_ANALYSIS_TILEGRAPH_H
