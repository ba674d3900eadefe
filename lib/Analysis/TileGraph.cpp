//===- TileGraph.cpp - Tile-level dependencies and costs ------------------===//
//
// Enumerates the tiles of a kernel for given sizes and resolves every wait to
// the tiles that signal the element it waits on. Data-dependent indices are
// resolved conservatively: a signal whose index is computed from data may
// signal any element, a wait whose index is computed from data may wait on
// any element.
//
//===----------------------------------------------------------------------===//

#include "EventTensor/Analysis/TileGraph.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/SetVector.h"

#include <algorithm>
#include <map>

using namespace mlir;
using namespace mlir::et;

//===----------------------------------------------------------------------===//
// Runtime sizes
//===----------------------------------------------------------------------===//

std::string mlir::et::getSizeName(Value value) {
  if (auto arg = dyn_cast<BlockArgument>(value))
    if (isa<KernelOp>(arg.getOwner()->getParentOp()))
      return "arg" + std::to_string(arg.getArgNumber());
  if (auto load = value.getDefiningOp<ExtentLoadOp>()) {
    auto kernel = load->getParentOfType<KernelOp>();
    unsigned k = 0;
    for (ExtentLoadOp other : kernel.getBody().front().getOps<ExtentLoadOp>()) {
      if (other == load)
        return "load" + std::to_string(k);
      ++k;
    }
  }
  return "";
}

SmallVector<ExtentLoadOp> mlir::et::getExtentLoads(TaskOp task) {
  llvm::SetVector<Operation *> loads;
  SmallVector<Value> worklist(task.getExtents());
  while (!worklist.empty()) {
    Operation *def = worklist.pop_back_val().getDefiningOp();
    if (!def)
      continue;
    if (isa<ExtentLoadOp>(def))
      loads.insert(def);
    else
      llvm::append_range(worklist, def->getOperands());
  }
  return llvm::map_to_vector(loads, [](Operation *op) { return cast<ExtentLoadOp>(op); });
}

static int64_t floorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
static int64_t ceilDiv(int64_t a, int64_t b) { return -floorDiv(-a, b); }
static int64_t floorMod(int64_t a, int64_t b) { return a - floorDiv(a, b) * b; }

std::optional<int64_t> mlir::et::evaluateSize(Value value,
                                              const SizeBindings &bindings) {
  APInt constant;
  if (matchPattern(value, m_ConstantInt(&constant)))
    return constant.getSExtValue();
  std::string name = getSizeName(value);
  if (!name.empty()) {
    auto it = bindings.find(name);
    if (it == bindings.end())
      return std::nullopt;
    return it->second;
  }
  Operation *def = value.getDefiningOp();
  if (!def)
    return std::nullopt;
  auto operand = [&](unsigned i) { return evaluateSize(def->getOperand(i), bindings); };
  auto binary = [&](auto fn) -> std::optional<int64_t> {
    std::optional<int64_t> a = operand(0), b = operand(1);
    if (!a || !b)
      return std::nullopt;
    return fn(*a, *b);
  };
  auto divide = [&](auto fn) -> std::optional<int64_t> {
    std::optional<int64_t> a = operand(0), b = operand(1);
    if (!a || !b || *b == 0)
      return std::nullopt;
    return fn(*a, *b);
  };
  if (isa<arith::AddIOp>(def))
    return binary([](int64_t a, int64_t b) { return a + b; });
  if (isa<arith::SubIOp>(def))
    return binary([](int64_t a, int64_t b) { return a - b; });
  if (isa<arith::MulIOp>(def))
    return binary([](int64_t a, int64_t b) { return a * b; });
  if (isa<arith::MinSIOp, arith::MinUIOp>(def))
    return binary([](int64_t a, int64_t b) { return std::min(a, b); });
  if (isa<arith::MaxSIOp, arith::MaxUIOp>(def))
    return binary([](int64_t a, int64_t b) { return std::max(a, b); });
  if (isa<arith::DivSIOp, arith::DivUIOp>(def))
    return divide([](int64_t a, int64_t b) { return a / b; });
  if (isa<arith::FloorDivSIOp>(def))
    return divide(floorDiv);
  if (isa<arith::CeilDivSIOp, arith::CeilDivUIOp>(def))
    return divide(ceilDiv);
  if (isa<arith::RemSIOp, arith::RemUIOp>(def))
    return divide([](int64_t a, int64_t b) { return a % b; });
  if (isa<arith::IndexCastOp, arith::IndexCastUIOp>(def))
    return operand(0);
  if (auto apply = dyn_cast<affine::AffineApplyOp>(def)) {
    AffineMap map = apply.getAffineMap();
    SmallVector<int64_t> dims;
    SmallVector<std::optional<int64_t>> syms;
    for (auto [i, v] : llvm::enumerate(apply.getMapOperands())) {
      std::optional<int64_t> x = evaluateSize(v, bindings);
      if (!x)
        return std::nullopt;
      if (i < map.getNumDims())
        dims.push_back(*x);
      else
        syms.push_back(*x);
    }
    return evaluateAffine(map.getResult(0), dims, syms);
  }
  return std::nullopt;
}

std::optional<int64_t>
mlir::et::evaluateAffine(AffineExpr expr, ArrayRef<int64_t> dims,
                         ArrayRef<std::optional<int64_t>> symbols) {
  if (auto c = dyn_cast<AffineConstantExpr>(expr))
    return c.getValue();
  if (auto d = dyn_cast<AffineDimExpr>(expr)) {
    if (d.getPosition() >= dims.size())
      return std::nullopt;
    return dims[d.getPosition()];
  }
  if (auto s = dyn_cast<AffineSymbolExpr>(expr)) {
    if (s.getPosition() >= symbols.size())
      return std::nullopt;
    return symbols[s.getPosition()];
  }
  auto bin = cast<AffineBinaryOpExpr>(expr);
  std::optional<int64_t> a = evaluateAffine(bin.getLHS(), dims, symbols);
  std::optional<int64_t> b = evaluateAffine(bin.getRHS(), dims, symbols);
  if (!a || !b)
    return std::nullopt;
  switch (bin.getKind()) {
  case AffineExprKind::Add:
    return *a + *b;
  case AffineExprKind::Mul:
    return *a * *b;
  case AffineExprKind::Mod:
    if (*b == 0)
      return std::nullopt;
    return floorMod(*a, *b);
  case AffineExprKind::FloorDiv:
    if (*b == 0)
      return std::nullopt;
    return floorDiv(*a, *b);
  case AffineExprKind::CeilDiv:
    if (*b == 0)
      return std::nullopt;
    return ceilDiv(*a, *b);
  default:
    return std::nullopt;
  }
}

//===----------------------------------------------------------------------===//
// Costs
//===----------------------------------------------------------------------===//

static int64_t elementBytes(Type type) {
  if (type.isIndex())
    return 8;
  if (type.isIntOrFloat())
    return std::max<int64_t>(1, type.getIntOrFloatBitWidth() / 8);
  return 8;
}

/// Elements and bytes of a scalar or vector value type.
static std::pair<int64_t, int64_t> valueSize(Type type) {
  if (auto vec = dyn_cast<VectorType>(type))
    return {vec.getNumElements(),
            vec.getNumElements() * elementBytes(vec.getElementType())};
  return {1, elementBytes(type)};
}

/// Trip count of an scf.for with constant bounds, else 1.
static int64_t tripCount(scf::ForOp loop) {
  APInt lb, ub, step;
  if (!matchPattern(loop.getLowerBound(), m_ConstantInt(&lb)) ||
      !matchPattern(loop.getUpperBound(), m_ConstantInt(&ub)) ||
      !matchPattern(loop.getStep(), m_ConstantInt(&step)) ||
      step.getSExtValue() <= 0)
    return 1;
  return std::max<int64_t>(
      0, ceilDiv(ub.getSExtValue() - lb.getSExtValue(), step.getSExtValue()));
}

static void accumulateCost(Block &block, int64_t multiplier, TileCost &cost,
                           bool &beforeFirstWait) {
  for (Operation &op : block) {
    if (isa<EventWaitOp>(op))
      beforeFirstWait = false;
    int64_t bytes = 0;
    if (auto load = dyn_cast<memref::LoadOp>(op))
      bytes = valueSize(load.getType()).second;
    else if (auto store = dyn_cast<memref::StoreOp>(op))
      bytes = valueSize(store.getValueToStore().getType()).second;
    else if (auto load = dyn_cast<affine::AffineLoadOp>(op))
      bytes = valueSize(load.getType()).second;
    else if (auto store = dyn_cast<affine::AffineStoreOp>(op))
      bytes = valueSize(store.getValueToStore().getType()).second;
    else if (auto load = dyn_cast<vector::LoadOp>(op))
      bytes = valueSize(load.getType()).second;
    else if (auto store = dyn_cast<vector::StoreOp>(op))
      bytes = valueSize(store.getValueToStore().getType()).second;
    else if (auto read = dyn_cast<vector::TransferReadOp>(op))
      bytes = valueSize(read.getType()).second;
    else if (auto write = dyn_cast<vector::TransferWriteOp>(op))
      bytes = valueSize(write.getVector().getType()).second;
    cost.bytes += bytes * multiplier;
    bool isRead = isa<memref::LoadOp, affine::AffineLoadOp, vector::LoadOp,
                      vector::TransferReadOp>(op);
    if (isRead && beforeFirstWait)
      cost.prologueBytes += bytes * multiplier;

    if (isa<arith::AddFOp, arith::SubFOp, arith::MulFOp, arith::DivFOp,
            arith::MaximumFOp, arith::MinimumFOp, arith::MaxNumFOp,
            arith::MinNumFOp, arith::NegFOp, math::ExpOp, math::Exp2Op,
            math::RsqrtOp, math::SqrtOp, math::TanhOp, math::LogOp>(op))
      cost.flops += valueSize(op.getResult(0).getType()).first * multiplier;
    else if (isa<math::FmaOp, vector::FMAOp>(op))
      cost.flops += 2 * valueSize(op.getResult(0).getType()).first * multiplier;

    int64_t inner = multiplier;
    if (auto loop = dyn_cast<scf::ForOp>(op))
      inner *= tripCount(loop);
    for (Region &region : op.getRegions())
      for (Block &b : region)
        accumulateCost(b, inner, cost, beforeFirstWait);
  }
}

TileCost mlir::et::getTaskCost(TaskOp task) {
  if (auto attr = task->getAttrOfType<CostAttr>(
          EventTensorDialect::getCostAttrName())) {
    TileCost cost;
    cost.bytes = attr.getBytes();
    cost.flops = attr.getFlops();
    cost.prologueBytes = attr.getPrologueBytes();
    cost.fromAttribute = true;
    return cost;
  }
  TileCost cost;
  bool beforeFirstWait = true;
  accumulateCost(task.getBody().front(), 1, cost, beforeFirstWait);
  return cost;
}

CostModel CostModel::get(CostModelAttr attr) {
  CostModel model;
  if (!attr)
    return model;
  model.bandwidthGbps = attr.getBandwidthGbps();
  model.gflops = attr.getGflops();
  model.dispatchNs = attr.getDispatchNs();
  model.syncNs = attr.getSyncNs();
  return model;
}

CostModelAttr CostModel::toAttr(MLIRContext *ctx) const {
  return CostModelAttr::get(ctx, bandwidthGbps, gflops, dispatchNs, syncNs);
}

double CostModel::tileNs(const TileCost &cost, int64_t workers) const {
  double memory = double(cost.bytes) * workers / double(bandwidthGbps);
  double compute = double(cost.flops) * workers / double(gflops);
  return dispatchNs + std::max(memory, compute);
}

double CostModel::prologueNs(const TileCost &cost, int64_t workers) const {
  double memory = double(cost.prologueBytes) * workers / double(bandwidthGbps);
  return std::min(memory, tileNs(cost, workers) - dispatchNs);
}

//===----------------------------------------------------------------------===//
// Tile graph
//===----------------------------------------------------------------------===//

SmallVector<int64_t> TileGraph::delinearize(unsigned task,
                                            int64_t tile) const {
  ArrayRef<int64_t> extents = tasks[task].extents;
  SmallVector<int64_t> coords(extents.size());
  for (int64_t d = extents.size() - 1; d >= 0; --d) {
    coords[d] = tile % extents[d];
    tile /= extents[d];
  }
  return coords;
}

SmallVector<unsigned, 4> TileGraph::getDepSetsOf(unsigned task,
                                                 int64_t tile) const {
  const Task &t = tasks[task];
  SmallVector<unsigned, 4> sets;
  if (t.extentSet)
    sets.push_back(*t.extentSet);
  for (const auto &perWait : t.depSets)
    sets.push_back(perWait[tile]);
  return sets;
}

SmallVector<TileRef> TileGraph::getAllDeps(unsigned task, int64_t tile) const {
  SmallVector<TileRef> all;
  for (unsigned set : getDepSetsOf(task, tile))
    all.append(depSets[set].begin(), depSets[set].end());
  // std::sort: llvm::sort would take qsort for this trivially copyable type,
  // several times slower on the short lists here.
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  return all;
}

SmallVector<int64_t>
TileGraph::orderTiles(ArrayRef<bool> present,
                      ArrayRef<std::pair<int64_t, int64_t>> extra) const {
  // Vertices: the tiles (global ids), then the sets. Edges: a set's tiles
  // to the set, the set to each tile that waits on it, and `extra`, each
  // as a compressed row of successors.
  int64_t numSets = depSets.size(), n = totalTiles + numSets;
  SmallVector<int64_t> indegree(n, 0), start(n + 1, 0);
  auto forEachEdge = [&](auto fn) {
    for (auto [s, set] : llvm::enumerate(depSets))
      for (TileRef member : set)
        fn(getGlobalId(member), totalTiles + static_cast<int64_t>(s));
    for (auto [ti, t] : llvm::enumerate(tasks))
      for (int64_t tile = 0; tile < t.numTiles; ++tile) {
        int64_t g = tileBase[ti] + tile;
        if (!present[g])
          continue;
        for (unsigned set : getDepSetsOf(ti, tile))
          fn(totalTiles + static_cast<int64_t>(set), g);
      }
    for (auto [from, to] : extra)
      fn(from, to);
  };
  forEachEdge([&](int64_t from, int64_t to) {
    ++start[from + 1];
    ++indegree[to];
  });
  for (int64_t v = 0; v < n; ++v)
    start[v + 1] += start[v];
  SmallVector<int64_t> succ(start[n]), fill(start.begin(), start.end() - 1);
  forEachEdge([&](int64_t from, int64_t to) { succ[fill[from]++] = to; });

  SmallVector<int64_t> queue;
  for (int64_t v = 0; v < n; ++v)
    if (indegree[v] == 0 && (v >= totalTiles || present[v]))
      queue.push_back(v);
  SmallVector<int64_t> order;
  for (size_t i = 0; i < queue.size(); ++i) {
    int64_t v = queue[i];
    if (v < totalTiles)
      order.push_back(v);
    for (int64_t k = start[v]; k < start[v + 1]; ++k)
      if (--indegree[succ[k]] == 0 && (succ[k] >= totalTiles || present[succ[k]]))
        queue.push_back(succ[k]);
  }
  return order;
}

std::optional<SmallVector<int64_t>> TileGraph::topologicalOrder() const {
  SmallVector<bool> all(totalTiles, true);
  SmallVector<int64_t> order = orderTiles(all);
  if (static_cast<int64_t>(order.size()) != totalTiles)
    return std::nullopt;
  return order;
}

static std::optional<SmallVector<int64_t>>
evaluateIndices(const EventAccess &access, ArrayRef<int64_t> coords,
                ArrayRef<std::optional<int64_t>> symbols) {
  SmallVector<int64_t> out;
  for (const std::optional<AffineExpr> &e : access.indices) {
    if (!e)
      return std::nullopt;
    std::optional<int64_t> v = evaluateAffine(*e, coords, symbols);
    if (!v)
      return std::nullopt;
    out.push_back(*v);
  }
  return out;
}

std::optional<SmallVector<int64_t>>
TileGraph::evaluateAccess(const EventAccess &access, unsigned task,
                          int64_t tile) const {
  return evaluateIndices(access, delinearize(task, tile), symbolValues);
}

namespace {
/// The tiles that signal each element of one event.
struct Signallers {
  std::map<SmallVector<int64_t>, SmallVector<TileRef, 2>> byElement;
  /// Tiles whose signal index is data: they may signal any element.
  SmallVector<TileRef> anywhere;
  /// Every signalling tile.
  SmallVector<TileRef> all;
};
} // namespace

FailureOr<TileGraph> TileGraph::build(const EventGraph &graph,
                                      const TileGraphOptions &options,
                                      Operation *&errorOp,
                                      std::string &error) {
  TileGraph tg;
  KernelOp kernel = graph.getKernel();
  auto fail = [&](Operation *op, std::string message) -> FailureOr<TileGraph> {
    errorOp = op;
    error = std::move(message);
    return failure();
  };

  // Sizes of every task.
  for (TaskOp task : kernel.getTasks()) {
    Task t;
    t.op = task;
    t.numTiles = 1;
    std::optional<ArrayRef<int64_t>> bounds = task.getMaxExtents();
    for (auto [d, extent] : llvm::enumerate(task.getExtents())) {
      APInt constant;
      if (matchPattern(extent, m_ConstantInt(&constant))) {
        t.extents.push_back(constant.getSExtValue());
      } else {
        t.staticCount = false;
        std::optional<int64_t> value = evaluateSize(extent, options.bindings);
        if (!value && options.useBounds && bounds) {
          value = (*bounds)[d];
          t.estimated = true;
        }
        if (!value && options.defaultExtent > 0) {
          if (graph.classify(extent) == CountKind::Device)
            return fail(task, "the tile count of @" + task.getSymName().str() +
                                  " is only known on the device (extent #" +
                                  std::to_string(d) + " is " +
                                  graph.describe(extent) +
                                  ") and has no declared bound; add "
                                  "'max_extents' to the task");
          value = options.defaultExtent;
          t.estimated = true;
        }
        if (!value)
          return fail(task, "no value for extent #" + std::to_string(d) +
                                " of @" + task.getSymName().str() + " (" +
                                graph.describe(extent) + ")");
        if (bounds && *value > (*bounds)[d])
          return fail(task, "extent #" + std::to_string(d) + " of @" +
                                task.getSymName().str() + " is " +
                                std::to_string(*value) +
                                ", above its declared bound " +
                                std::to_string((*bounds)[d]));
        t.extents.push_back(std::max<int64_t>(*value, 0));
      }
      t.numTiles *= t.extents.back();
    }
    tg.tileBase.push_back(tg.totalTiles);
    tg.totalTiles += t.numTiles;
    if (tg.totalTiles > options.maxTiles)
      return fail(task, "the kernel has more than " +
                            std::to_string(options.maxTiles) +
                            " tiles; the tile graph is not built");
    t.cost = getTaskCost(task);
    tg.taskIndex[task] = tg.tasks.size();
    tg.tasks.push_back(std::move(t));
  }

  // Symbol values under the bindings.
  SmallVector<std::optional<int64_t>> symbols;
  for (Value s : graph.getSymbols())
    symbols.push_back(evaluateSize(s, options.bindings));

  tg.symbolValues = symbols;
  auto evalAccess = [&](const EventAccess &access, ArrayRef<int64_t> coords) {
    return evaluateIndices(access, coords, symbols);
  };

  // Signallers of every event.
  llvm::DenseMap<EventInfo *, Signallers> signallers;
  for (const auto &info : graph.getEvents()) {
    Signallers &s = signallers[info.get()];
    for (EventAccess *signal : info->signals) {
      unsigned ti = tg.taskIndex.lookup(signal->task);
      const Task &t = tg.tasks[ti];
      for (int64_t tile = 0; tile < t.numTiles; ++tile) {
        TileRef ref{ti, tile};
        s.all.push_back(ref);
        std::optional<SmallVector<int64_t>> idx =
            evalAccess(*signal, tg.delinearize(ti, tile));
        if (!idx)
          s.anywhere.push_back(ref);
        else
          s.byElement[*idx].push_back(ref);
      }
    }
  }

  // Dependency sets, interned: one per (event, element), one for an
  // event's every signaller, one per extent-load list.
  std::map<std::pair<EventInfo *, SmallVector<int64_t>>, unsigned> byElementSet;
  llvm::DenseMap<EventInfo *, unsigned> allSet;
  auto addSet = [&](SmallVector<TileRef, 2> tiles) {
    std::sort(tiles.begin(), tiles.end());
    tiles.erase(std::unique(tiles.begin(), tiles.end()), tiles.end());
    tg.depSets.push_back(std::move(tiles));
    return static_cast<unsigned>(tg.depSets.size() - 1);
  };
  // The tiles of `event` that may signal element `idx` (every signaller
  // when the element is not known).
  auto setFor = [&](EventInfo *event, const std::optional<SmallVector<int64_t>> &idx) {
    const Signallers &s = signallers[event];
    if (!idx) {
      auto [it, inserted] = allSet.try_emplace(event, 0);
      if (inserted)
        it->second = addSet(SmallVector<TileRef, 2>(s.all.begin(), s.all.end()));
      return it->second;
    }
    auto [it, inserted] = byElementSet.try_emplace({event, *idx}, 0);
    if (inserted) {
      SmallVector<TileRef, 2> tiles;
      auto found = s.byElement.find(*idx);
      if (found != s.byElement.end())
        tiles.append(found->second.begin(), found->second.end());
      tiles.append(s.anywhere.begin(), s.anywhere.end());
      it->second = addSet(std::move(tiles));
    }
    return it->second;
  };

  // Waits.
  for (auto [ti, t] : llvm::enumerate(tg.tasks)) {
    for (const auto &access : graph.getAccesses())
      if (!access->isSignal && access->task == t.op)
        t.waits.push_back(access.get());
    for (const EventAccess *wait : t.waits) {
      EventInfo *event = graph.lookup(cast<EventWaitOp>(wait->op).getEvent());
      auto &perTile = t.depSets.emplace_back();
      perTile.resize(t.numTiles);
      bool exact = signallers[event].anywhere.empty();
      for (int64_t tile = 0; tile < t.numTiles; ++tile) {
        std::optional<SmallVector<int64_t>> idx =
            evalAccess(*wait, tg.delinearize(ti, tile));
        exact &= idx.has_value();
        perTile[tile] = setFor(event, idx);
      }
      t.exact.push_back(exact);
    }
    // Extent loads with `after`: the task's tile count is known only once
    // the after-element is ready.
    SmallVector<TileRef, 2> extentDeps;
    for (ExtentLoadOp load : getExtentLoads(t.op)) {
      if (!load.getAfterEvent())
        continue;
      SmallVector<int64_t> idx;
      bool known = true;
      for (Value v : load.getAfterIndices()) {
        std::optional<int64_t> x = evaluateSize(v, options.bindings);
        if (!x)
          known = false;
        else
          idx.push_back(*x);
      }
      ArrayRef<TileRef> set = tg.depSets[setFor(graph.lookup(load.getAfterEvent()),
                                                known ? std::optional(idx) : std::nullopt)];
      extentDeps.append(set.begin(), set.end());
    }
    if (!extentDeps.empty())
      t.extentSet = addSet(std::move(extentDeps));
  }
  return tg;
}
