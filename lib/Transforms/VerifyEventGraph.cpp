//===- VerifyEventGraph.cpp - Whole-kernel event graph checks -------------===//
//
// Implements et-verify-event-graph on top of the EventGraph analysis.
//
//===----------------------------------------------------------------------===//

#include "EventTensor/Analysis/EventGraph.h"
#include "EventTensor/Transforms/Passes.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"

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

  /// Reports one dependency cycle between tasks, if any.
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
