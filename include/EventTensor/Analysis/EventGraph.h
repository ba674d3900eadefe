//===- EventGraph.h - Task/event graph of an et.kernel ------------*- C++ -*-===//
//
// A read-only analysis of one et.kernel: which tasks signal and wait on which
// event tensors, how every event index is computed (an affine function of the
// tile coordinates and kernel values, or data), and the expected signal count
// of every event element: known at compile time (static), an expression of
// runtime sizes (symbolic), or known only on the device.
//
//===----------------------------------------------------------------------===//

#ifndef EVENTTENSOR_ANALYSIS_EVENTGRAPH_H
#define EVENTTENSOR_ANALYSIS_EVENTGRAPH_H

#include "EventTensor/Dialect/EventTensor/EventTensorOps.h"

#include "mlir/IR/AffineExpr.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>

namespace mlir::et {

/// When an expected count (or a value) is known.
enum class CountKind { Static, Symbolic, Device };
StringRef stringifyCountKind(CountKind kind);

/// One et.event.wait or et.event.signal.
struct EventAccess {
  Operation *op = nullptr;
  TaskOp task;
  bool isSignal = false;
  /// Per index: the affine expression over the task's tile coordinates (dims)
  /// and kernel-level values (symbols, see EventGraph::getSymbols), or
  /// nullopt when the index is computed from data.
  SmallVector<std::optional<AffineExpr>> indices;
  bool isAffine() const {
    return llvm::all_of(indices, [](auto &e) { return e.has_value(); });
  }
};

/// One event tensor and what the analysis derived about it.
struct EventInfo {
  EventCreateOp op;
  SmallVector<EventAccess *> signals;
  SmallVector<EventAccess *> waits;
  CountKind kind = CountKind::Static;
  /// The expected count of element (e0, e1, ...) as text, e.g. "4",
  /// "arg1", "min(2, 15 - 2*e0)".
  std::string countExpr;
  /// Why the count is only known on the device.
  std::string deviceReason;
  /// For static counts over a static shape: the count of every element in
  /// row-major order.
  std::optional<SmallVector<int64_t>> staticCounts;
};

class EventGraph {
public:
  explicit EventGraph(KernelOp kernel);

  KernelOp getKernel() const { return kernel; }
  ArrayRef<std::unique_ptr<EventInfo>> getEvents() const { return events; }
  ArrayRef<std::unique_ptr<EventAccess>> getAccesses() const {
    return accesses;
  }
  /// Kernel-level values that appear as affine symbols, by symbol position.
  ArrayRef<Value> getSymbols() const { return symbols; }
  EventInfo *lookup(Value event) const { return eventMap.lookup(event); }

  /// Classifies a kernel-level index value (a task extent, an event size).
  CountKind classify(Value value) const;
  /// A readable description of a kernel-level index value ("64",
  /// "ceildiv(arg0, 64)", "load(arg1)").
  std::string describe(Value value) const;

  /// Producer -> consumer edges between tasks (through events).
  struct Edge {
    TaskOp producer, consumer;
    Value event;
    Operation *wait;
  };
  ArrayRef<Edge> getEdges() const { return edges; }

  /// Enumerates the tile coordinates of `task` when its extents are all
  /// constants and there are at most `limit` tiles; returns false otherwise.
  bool forEachStaticTile(TaskOp task, int64_t limit,
                         function_ref<void(ArrayRef<int64_t>)> fn) const;
  /// Evaluates an access's indices at a tile; nullopt if not affine or if
  /// they use symbols that are not constants.
  std::optional<SmallVector<int64_t>>
  evaluate(const EventAccess &access, ArrayRef<int64_t> tile) const;

  void printJSON(raw_ostream &os) const;
  void printDOT(raw_ostream &os) const;

private:
  std::optional<AffineExpr> trace(Value value, TaskOp task);
  void deriveCounts(EventInfo &info);

  mutable KernelOp kernel;
  SmallVector<std::unique_ptr<EventInfo>> events;
  SmallVector<std::unique_ptr<EventAccess>> accesses;
  llvm::DenseMap<Value, EventInfo *> eventMap;
  SmallVector<Value> symbols;
  llvm::DenseMap<Value, unsigned> symbolIndex;
  /// The constant value of each symbol, if it is a constant.
  SmallVector<std::optional<int64_t>> symbolConstants;
  SmallVector<Edge> edges;
};

/// Limit on the tiles enumerated to compute exact static counts.
constexpr int64_t kMaxEnumeratedTiles = 1 << 20;

/// The rules of a kernel with `et.repeat` (none without one), as
/// diagnostics: no event count read on the device (a wait of step s waits for
/// s + 1 times its count, so counts must not change between steps), a task
/// that signals `after`, and, with `checkOrder` (on a kernel before
/// scheduling), every task preceding `after` through events, so that a step
/// ends only when all of its tiles have.
LogicalResult verifySteps(const EventGraph &graph, bool checkOrder);

} // namespace mlir::et

#endif // EVENTTENSOR_ANALYSIS_EVENTGRAPH_H
