//===- EventGraph.cpp - Task/event graph of an et.kernel ------------------===//
//
// Builds the task/event graph of a kernel and derives expected counts. No IR
// is mutated.
//
//===----------------------------------------------------------------------===//

#include "EventTensor/Analysis/EventGraph.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallBitVector.h"
#include "llvm/Support/JSON.h"

using namespace mlir;
using namespace mlir::et;

StringRef mlir::et::stringifyCountKind(CountKind kind) {
  switch (kind) {
  case CountKind::Static:
    return "static";
  case CountKind::Symbolic:
    return "symbolic";
  case CountKind::Device:
    return "device";
  }
  return "unknown";
}

static std::optional<int64_t> constantIndex(Value v) {
  APInt value;
  if (matchPattern(v, m_ConstantInt(&value)))
    return value.getSExtValue();
  return std::nullopt;
}

static std::string opName(TaskOp task) {
  return ("@" + task.getSymName()).str();
}

//===----------------------------------------------------------------------===//
// Construction
//===----------------------------------------------------------------------===//

EventGraph::EventGraph(KernelOp kernel) : kernel(kernel) {
  for (EventCreateOp create : kernel.getEvents()) {
    auto info = std::make_unique<EventInfo>();
    info->op = create;
    eventMap[create.getResult()] = info.get();
    events.push_back(std::move(info));
  }
  for (TaskOp task : kernel.getTasks()) {
    for (Operation &op : task.getBody().front()) {
      Value event;
      ValueRange indices;
      bool isSignal = false;
      if (auto wait = dyn_cast<EventWaitOp>(op)) {
        event = wait.getEvent();
        indices = wait.getIndices();
      } else if (auto signal = dyn_cast<EventSignalOp>(op)) {
        event = signal.getEvent();
        indices = signal.getIndices();
        isSignal = true;
      } else {
        continue;
      }
      auto access = std::make_unique<EventAccess>();
      access->op = &op;
      access->task = task;
      access->isSignal = isSignal;
      for (Value index : indices)
        access->indices.push_back(trace(index, task));
      if (EventInfo *info = eventMap.lookup(event))
        (isSignal ? info->signals : info->waits).push_back(access.get());
      accesses.push_back(std::move(access));
    }
  }
  // Symbols are complete once every access is traced.
  for (Value s : symbols)
    symbolConstants.push_back(constantIndex(s));
  for (auto &info : events)
    deriveCounts(*info);
  for (auto &info : events)
    for (EventAccess *wait : info->waits)
      for (EventAccess *signal : info->signals)
        edges.push_back(
            {signal->task, wait->task, info->op.getResult(), wait->op});
}

std::optional<AffineExpr> EventGraph::trace(Value value, TaskOp task) {
  MLIRContext *ctx = value.getContext();
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    if (arg.getOwner() == &task.getBody().front())
      return getAffineDimExpr(arg.getArgNumber(), ctx);
  }
  if (std::optional<int64_t> c = constantIndex(value))
    return getAffineConstantExpr(*c, ctx);
  // Values defined outside the task (kernel arguments, kernel-level index
  // arithmetic, runtime extents) are symbols.
  if (!task->isAncestor(value.getParentBlock()->getParentOp())) {
    auto [it, inserted] = symbolIndex.try_emplace(value, symbols.size());
    if (inserted)
      symbols.push_back(value);
    return getAffineSymbolExpr(it->second, ctx);
  }
  Operation *def = value.getDefiningOp();
  if (!def)
    return std::nullopt;
  auto binary = [&](auto combine) -> std::optional<AffineExpr> {
    auto lhs = trace(def->getOperand(0), task);
    auto rhs = trace(def->getOperand(1), task);
    if (!lhs || !rhs)
      return std::nullopt;
    return combine(*lhs, *rhs);
  };
  auto byConstant = [&](auto combine) -> std::optional<AffineExpr> {
    auto lhs = trace(def->getOperand(0), task);
    std::optional<int64_t> rhs = constantIndex(def->getOperand(1));
    if (!lhs || !rhs || *rhs <= 0)
      return std::nullopt;
    return combine(*lhs, *rhs);
  };
  if (isa<arith::AddIOp>(def))
    return binary([](AffineExpr a, AffineExpr b) { return a + b; });
  if (isa<arith::SubIOp>(def))
    return binary([](AffineExpr a, AffineExpr b) { return a - b; });
  if (isa<arith::MulIOp>(def)) {
    auto lhs = trace(def->getOperand(0), task);
    auto rhs = trace(def->getOperand(1), task);
    if (!lhs || !rhs)
      return std::nullopt;
    if (!isa<AffineConstantExpr>(*lhs) && !isa<AffineConstantExpr>(*rhs))
      return std::nullopt;
    return *lhs * *rhs;
  }
  if (isa<arith::FloorDivSIOp, arith::DivSIOp, arith::DivUIOp>(def))
    return byConstant([](AffineExpr a, int64_t c) { return a.floorDiv(c); });
  if (isa<arith::CeilDivSIOp, arith::CeilDivUIOp>(def))
    return byConstant([](AffineExpr a, int64_t c) { return a.ceilDiv(c); });
  if (isa<arith::RemSIOp, arith::RemUIOp>(def))
    return byConstant([](AffineExpr a, int64_t c) { return a % c; });
  if (auto apply = dyn_cast<affine::AffineApplyOp>(def)) {
    AffineMap map = apply.getAffineMap();
    SmallVector<AffineExpr> dims, syms;
    for (auto [i, operand] : llvm::enumerate(apply.getMapOperands())) {
      auto e = trace(operand, task);
      if (!e)
        return std::nullopt;
      (i < map.getNumDims() ? dims : syms).push_back(*e);
    }
    return map.getResult(0).replaceDimsAndSymbols(dims, syms);
  }
  // memref.load and anything else: the index comes from data.
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// Classification of kernel-level values
//===----------------------------------------------------------------------===//

CountKind EventGraph::classify(Value value) const {
  if (constantIndex(value))
    return CountKind::Static;
  if (isa<BlockArgument>(value))
    return CountKind::Symbolic;
  Operation *def = value.getDefiningOp();
  if (isa<ExtentLoadOp, memref::LoadOp>(def))
    return CountKind::Device;
  if (isa<arith::ArithDialect, affine::AffineDialect>(def->getDialect())) {
    CountKind kind = CountKind::Static;
    for (Value operand : def->getOperands())
      kind = std::max(kind, classify(operand));
    return kind;
  }
  return CountKind::Device;
}

std::string EventGraph::describe(Value value) const {
  if (std::optional<int64_t> c = constantIndex(value))
    return std::to_string(*c);
  if (auto arg = dyn_cast<BlockArgument>(value))
    return "arg" + std::to_string(arg.getArgNumber());
  Operation *def = value.getDefiningOp();
  auto bin = [&](StringRef op) {
    return "(" + describe(def->getOperand(0)) + " " + op.str() + " " +
           describe(def->getOperand(1)) + ")";
  };
  auto call = [&](StringRef fn) {
    return fn.str() + "(" + describe(def->getOperand(0)) + ", " +
           describe(def->getOperand(1)) + ")";
  };
  if (isa<arith::AddIOp>(def))
    return bin("+");
  if (isa<arith::SubIOp>(def))
    return bin("-");
  if (isa<arith::MulIOp>(def))
    return bin("*");
  if (isa<arith::DivSIOp, arith::DivUIOp, arith::FloorDivSIOp>(def))
    return call("floordiv");
  if (isa<arith::CeilDivSIOp, arith::CeilDivUIOp>(def))
    return call("ceildiv");
  if (isa<arith::MinSIOp, arith::MinUIOp>(def))
    return call("min");
  if (isa<arith::MaxSIOp, arith::MaxUIOp>(def))
    return call("max");
  if (auto load = dyn_cast<ExtentLoadOp>(def))
    return "load(" + describe(load.getSource()) + ")";
  if (isa<memref::LoadOp>(def))
    return "load(" + describe(def->getOperand(0)) + ")";
  return def->getName().getStringRef().str();
}

//===----------------------------------------------------------------------===//
// Expected counts
//===----------------------------------------------------------------------===//

bool EventGraph::forEachStaticTile(
    TaskOp task, int64_t limit,
    function_ref<void(ArrayRef<int64_t>)> fn) const {
  SmallVector<int64_t> extents;
  int64_t total = 1;
  for (Value e : task.getExtents()) {
    std::optional<int64_t> c = constantIndex(e);
    if (!c || *c < 1)
      return false;
    extents.push_back(*c);
    total *= *c;
    if (total > limit)
      return false;
  }
  SmallVector<int64_t> tile(extents.size(), 0);
  for (int64_t linear = 0; linear < total; ++linear) {
    int64_t rest = linear;
    for (int64_t d = extents.size() - 1; d >= 0; --d) {
      tile[d] = rest % extents[d];
      rest /= extents[d];
    }
    fn(tile);
  }
  return true;
}

std::optional<SmallVector<int64_t>>
EventGraph::evaluate(const EventAccess &access, ArrayRef<int64_t> tile) const {
  SmallVector<int64_t> result;
  for (const std::optional<AffineExpr> &e : access.indices) {
    if (!e)
      return std::nullopt;
    // Refuse expressions over non-constant symbols.
    bool usesDynamicSymbol = false;
    e->walk([&](AffineExpr sub) {
      if (auto s = dyn_cast<AffineSymbolExpr>(sub))
        if (!symbolConstants[s.getPosition()])
          usesDynamicSymbol = true;
    });
    if (usesDynamicSymbol)
      return std::nullopt;
    AffineMap map = AffineMap::get(tile.size(), symbols.size(), *e);
    SmallVector<int64_t> operands(tile.begin(), tile.end());
    for (const std::optional<int64_t> &c : symbolConstants)
      operands.push_back(c.value_or(0));
    SmallVector<Attribute> attrs;
    Builder b(kernel.getContext());
    for (int64_t v : operands)
      attrs.push_back(b.getIndexAttr(v));
    SmallVector<Attribute> folded;
    if (failed(map.constantFold(attrs, folded)) || folded.size() != 1)
      return std::nullopt;
    result.push_back(cast<IntegerAttr>(folded[0]).getInt());
  }
  return result;
}

/// The count contributed by one signal site to element (e0, e1, ...), as
/// text, when each index is a function of at most one tile coordinate and
/// each tile coordinate feeds at most one index ("separable"). Returns
/// nullopt otherwise.
static std::optional<std::string>
separableCount(const EventGraph &graph, const EventAccess &signal) {
  TaskOp task = signal.task;
  unsigned numDims = task.getNumTileDims();
  SmallVector<int> usedBy(numDims, -1);
  SmallVector<std::string> factors;
  for (auto [k, expr] : llvm::enumerate(signal.indices)) {
    AffineExpr e = *expr;
    std::string ek = "e" + std::to_string(k);
    if (auto c = dyn_cast<AffineConstantExpr>(e)) {
      factors.push_back("[" + ek + " == " + std::to_string(c.getValue()) + "]");
      continue;
    }
    if (isa<AffineSymbolExpr>(e)) {
      factors.push_back("[" + ek + " == " +
                        graph.describe(graph.getSymbols()[cast<AffineSymbolExpr>(e).getPosition()]) +
                        "]");
      continue;
    }
    // d, d + c, d floordiv c, d * c.
    AffineExpr base = e;
    int64_t divisor = 1, multiplier = 1;
    if (auto bin = dyn_cast<AffineBinaryOpExpr>(e)) {
      auto rhs = dyn_cast<AffineConstantExpr>(bin.getRHS());
      if (bin.getKind() == AffineExprKind::Add && rhs) {
        base = bin.getLHS();
      } else if (bin.getKind() == AffineExprKind::FloorDiv && rhs) {
        base = bin.getLHS();
        divisor = rhs.getValue();
      } else if (bin.getKind() == AffineExprKind::Mul && rhs) {
        base = bin.getLHS();
        multiplier = rhs.getValue();
      } else {
        return std::nullopt;
      }
    }
    auto dim = dyn_cast<AffineDimExpr>(base);
    if (!dim || usedBy[dim.getPosition()] != -1)
      return std::nullopt;
    usedBy[dim.getPosition()] = k;
    std::string n = graph.describe(task.getExtents()[dim.getPosition()]);
    if (divisor > 1)
      factors.push_back("min(" + std::to_string(divisor) + ", " + n + " - " +
                        std::to_string(divisor) + "*" + ek + ")");
    else if (multiplier > 1)
      factors.push_back("[" + ek + " mod " + std::to_string(multiplier) +
                        " == 0]");
  }
  for (unsigned d = 0; d < numDims; ++d)
    if (usedBy[d] == -1)
      factors.push_back(graph.describe(task.getExtents()[d]));
  if (factors.empty())
    return std::string("1");
  std::string out;
  llvm::raw_string_ostream os(out);
  llvm::interleave(factors, os, " * ");
  return out;
}

void EventGraph::deriveCounts(EventInfo &info) {
  EventType type = info.op.getResult().getType();
  if (info.signals.empty()) {
    info.kind = CountKind::Static;
    info.countExpr = "0";
    return;
  }
  // Data-dependent indices or device-known extents: the device counts.
  CountKind kind = CountKind::Static;
  for (EventAccess *signal : info.signals) {
    if (!signal->isAffine()) {
      info.kind = CountKind::Device;
      info.deviceReason =
          "signal index computed from data in " + opName(signal->task);
      info.countExpr = "?";
      return;
    }
    for (Value extent : signal->task.getExtents())
      kind = std::max(kind, classify(extent));
    for (auto &e : signal->indices)
      e->walk([&](AffineExpr sub) {
        if (auto s = dyn_cast<AffineSymbolExpr>(sub))
          kind = std::max(kind, classify(symbols[s.getPosition()]));
      });
  }
  if (kind == CountKind::Device) {
    info.kind = CountKind::Device;
    info.deviceReason = "a signalling task's extent is read from memory";
  }

  // Exact counts by enumeration when everything is static.
  if (kind == CountKind::Static && type.hasStaticShape()) {
    // (Elements counted up to the enumeration's limit: the product of
    // the dimensions is never formed past it.)
    int64_t numElements = 1;
    bool ok = true;
    for (int64_t d : type.getShape()) {
      ok = ok && d <= kMaxEnumeratedTiles / numElements;
      if (ok)
        numElements *= d;
    }
    SmallVector<int64_t> counts(ok ? numElements : 0, 0);
    for (EventAccess *signal : info.signals) {
      if (!ok)
        break;
      ok = forEachStaticTile(signal->task, kMaxEnumeratedTiles,
                             [&](ArrayRef<int64_t> tile) {
                               auto idx = evaluate(*signal, tile);
                               if (!idx) {
                                 ok = false;
                                 return;
                               }
                               int64_t linear = 0;
                               for (auto [v, d] :
                                    llvm::zip(*idx, type.getShape())) {
                                 if (v < 0 || v >= d)
                                   return; // reported by the verifier
                                 linear = linear * d + v;
                               }
                               ++counts[linear];
                             });
    }
    if (ok) {
      info.kind = CountKind::Static;
      int64_t lo = *llvm::min_element(counts), hi = *llvm::max_element(counts);
      info.countExpr = lo == hi ? std::to_string(lo)
                                : std::to_string(lo) + ".." +
                                      std::to_string(hi) + " (per element)";
      info.staticCounts = std::move(counts);
      return;
    }
  }

  // A closed form in runtime sizes, summed over signal sites.
  SmallVector<std::string> terms;
  for (EventAccess *signal : info.signals) {
    std::optional<std::string> term = separableCount(*this, *signal);
    if (!term) {
      info.kind = CountKind::Device;
      info.deviceReason = "signal indices in " + opName(signal->task) +
                          " have no closed-form count";
      info.countExpr = "?";
      return;
    }
    terms.push_back(*term);
  }
  std::string out;
  llvm::raw_string_ostream os(out);
  llvm::interleave(terms, os, " + ");
  info.countExpr = out;
  if (info.kind != CountKind::Device)
    info.kind = kind == CountKind::Static ? CountKind::Static
                                          : CountKind::Symbolic;
}

//===----------------------------------------------------------------------===//
// Export
//===----------------------------------------------------------------------===//

static std::string eventName(unsigned i) {
  return "event" + std::to_string(i);
}

void EventGraph::printJSON(raw_ostream &os) const {
  llvm::json::Array tasks, eventsJson, edgesJson;
  llvm::DenseMap<Value, unsigned> eventIds;
  for (auto [i, info] : llvm::enumerate(events))
    eventIds[info->op.getResult()] = i;
  for (TaskOp task : kernel.getTasks()) {
    llvm::json::Array extents;
    for (Value e : task.getExtents())
      extents.push_back(llvm::json::Object{
          {"value", describe(e)}, {"kind", stringifyCountKind(classify(e))}});
    tasks.push_back(llvm::json::Object{{"name", task.getSymName()},
                                       {"extents", std::move(extents)}});
  }
  for (auto [i, info] : llvm::enumerate(events)) {
    EventType type = info->op.getResult().getType();
    llvm::json::Array shape, signals, waits;
    unsigned dyn = 0;
    for (int64_t d : type.getShape())
      shape.push_back(ShapedType::isDynamic(d)
                          ? llvm::json::Value(
                                describe(info->op.getDynamicSizes()[dyn++]))
                          : llvm::json::Value(d));
    for (EventAccess *a : info->signals)
      signals.push_back(a->task.getSymName());
    for (EventAccess *a : info->waits)
      waits.push_back(a->task.getSymName());
    llvm::json::Object obj{{"name", eventName(i)},
                           {"shape", std::move(shape)},
                           {"signalled_by", std::move(signals)},
                           {"waited_by", std::move(waits)},
                           {"count_kind", stringifyCountKind(info->kind)},
                           {"count", info->countExpr}};
    if (!info->deviceReason.empty())
      obj["device_reason"] = info->deviceReason;
    if (info->op.getExpected())
      obj["explicit_count"] = static_cast<int64_t>(*info->op.getExpected());
    if (info->staticCounts)
      obj["static_counts"] = llvm::json::Array(*info->staticCounts);
    eventsJson.push_back(std::move(obj));
  }
  for (Edge e : edges)
    edgesJson.push_back(llvm::json::Object{
        {"from", e.producer.getSymName()},
        {"to", e.consumer.getSymName()},
        {"event", eventName(eventIds[e.event])}});
  llvm::json::Object root{{"kernel", kernel.getSymName()},
                          {"tasks", std::move(tasks)},
                          {"events", std::move(eventsJson)},
                          {"edges", std::move(edgesJson)}};
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(root)));
}

void EventGraph::printDOT(raw_ostream &os) const {
  os << "digraph \"" << kernel.getSymName() << "\" {\n  rankdir=LR;\n";
  for (TaskOp task : kernel.getTasks())
    os << "  \"" << task.getSymName() << "\" [shape=box];\n";
  for (auto [i, info] : llvm::enumerate(events)) {
    std::string name = eventName(i);
    os << "  \"" << name << "\" [shape=ellipse, label=\"" << name << "\\n"
       << stringifyCountKind(info->kind) << ": ";
    os.write_escaped(info->countExpr);
    os << "\"];\n";
    for (EventAccess *a : info->signals)
      os << "  \"" << a->task.getSymName() << "\" -> \"" << name << "\";\n";
    for (EventAccess *a : info->waits)
      os << "  \"" << name << "\" -> \"" << a->task.getSymName() << "\";\n";
  }
  os << "}\n";
}

LogicalResult mlir::et::verifySteps(const EventGraph &graph, bool checkOrder) {
  RepeatOp repeat = graph.getKernel().getRepeat();
  if (!repeat)
    return success();
  bool failed = false;
  for (const auto &info : graph.getEvents())
    if (info->kind == CountKind::Device) {
      InFlightDiagnostic diag = info->op.emitOpError("has a count known only on the device (")
                                << info->deviceReason
                                << "), which may change between the steps of an 'et.repeat' kernel";
      diag.attachNote(repeat.getLoc()) << "steps declared here";
      failed = true;
    }
  EventInfo *end = graph.lookup(repeat.getAfter());
  if (!end || end->signals.empty())
    return repeat.emitOpError("'after' event is signalled by no task: no step would end");
  // On N devices a step ends on every device only once every device's
  // tasks have signalled `after` there: then no copy starts step s + 1
  // (and writes into another's symmetric buffers) before every copy has
  // finished step s. So the signals must reach every peer offset.
  int64_t devices = graph.getKernel().getNumDevices();
  if (devices > 1) {
    llvm::SmallBitVector reached(devices);
    for (EventAccess *s : end->signals) {
      Value peer = cast<EventSignalOp>(s->op).getPeer();
      std::optional<int64_t> offset = peer ? getConstantIntValue(peer) : std::optional<int64_t>(0);
      if (!offset)
        return s->op->emitOpError("signals the end of a step (the 'after' event of 'et.repeat') at a peer offset "
                                  "that is not a constant: the verifier cannot tell that every device is reached")
                   .attachNote(repeat.getLoc())
               << "steps declared here";
      reached.set(((*offset % devices) + devices) % devices);
    }
    if (!reached.all()) {
      int64_t missing = reached.find_first_unset();
      return repeat.emitOpError("on ")
             << devices << " devices needs its 'after' event signalled on every device (peer offsets 0.."
             << devices - 1 << "); no signal reaches peer offset " << missing
             << ": a device could start the next step while another still runs this one";
    }
  }
  if (!checkOrder)
    return failure(failed);
  // The tasks that reach a task signalling `after` (backwards over edges).
  llvm::DenseSet<Operation *> reach;
  SmallVector<Operation *> work;
  for (EventAccess *s : end->signals)
    if (reach.insert(s->task).second)
      work.push_back(s->task);
  while (!work.empty()) {
    Operation *consumer = work.pop_back_val();
    for (const EventGraph::Edge &e : graph.getEdges())
      if (e.consumer == consumer && reach.insert(e.producer).second)
        work.push_back(e.producer);
  }
  for (TaskOp task : graph.getKernel().getTasks())
    if (!reach.contains(task)) {
      task.emitOpError("does not precede the end of a step (the 'after' event of 'et.repeat'): "
                       "its tiles could still run when the next step starts")
              .attachNote(repeat.getLoc())
          << "steps declared here";
      failed = true;
    }
  return failure(failed);
}
