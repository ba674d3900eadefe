//===- StaticSchedule.cpp - Compile-time tile-to-worker assignment --------===//
//
// Implements et-static-schedule: the tile graph scheduled by critical-path
// list scheduling (listSchedule, lib/Analysis), recorded as an
// `et.schedule static` op.
//
//===----------------------------------------------------------------------===//

#include "EventTensor/Analysis/ListSchedule.h"
#include "EventTensor/Transforms/Passes.h"
#include "EventTensor/Transforms/Scheduling.h"

#include "mlir/IR/Builders.h"


namespace mlir::et {
#define GEN_PASS_DEF_STATICSCHEDULEPASS
#include "EventTensor/Transforms/Passes.h.inc"
} // namespace mlir::et

using namespace mlir;
using namespace mlir::et;

/// Records `placement`'s programs in an `et.schedule static` op at the
/// end of `kernel`: per worker, an et.run of each cyclic task and of each
/// run of consecutive tiles of one task.
static void recordSchedule(KernelOp kernel, const TileGraph &tg,
                           const CostModel &model, int64_t workers,
                           const TileSchedule &placement) {
  OpBuilder b = OpBuilder::atBlockEnd(&kernel.getBody().front());
  auto schedule =
      ScheduleOp::create(b, kernel.getLoc(), ScheduleKind::Static, workers);
  schedule.setCostModelAttr(model.toAttr(kernel.getContext()));
  b.setInsertionPointToStart(&schedule.getBody().front());
  for (int64_t w = 0; w < workers; ++w) {
    auto worker = WorkerOp::create(b, kernel.getLoc(), w);
    OpBuilder wb = OpBuilder::atBlockEnd(&worker.getBody().front());
    ArrayRef<std::pair<unsigned, int64_t>> program = placement.programs[w];
    for (size_t i = 0; i < program.size();) {
      unsigned task = program[i].first;
      auto sym = FlatSymbolRefAttr::get(tg.getTask(task).op.getSymNameAttr());
      if (program[i].second < 0) {
        RunOp::create(wb, kernel.getLoc(), sym, DenseI64ArrayAttr(),
                      wb.getI64IntegerAttr(placement.cyclicOffset[task]));
        ++i;
        continue;
      }
      SmallVector<int64_t> tiles;
      while (i < program.size() && program[i].first == task &&
             program[i].second >= 0)
        tiles.push_back(program[i++].second);
      RunOp::create(wb, kernel.getLoc(), sym,
                    wb.getDenseI64ArrayAttr(tiles), IntegerAttr());
    }
  }
}

namespace {

struct StaticSchedulePass
    : public mlir::et::impl::StaticSchedulePassBase<StaticSchedulePass> {
  using Base::Base;

  void runOnOperation() override {
    KernelOp kernel = getOperation();
    if (failed(checkSchedulable(kernel, workers, dynamicExtent,
                                "et-static-schedule")))
      return signalPassFailure();
    CostModel model;
    model.bandwidthGbps = bandwidthGbps;
    model.gflops = gflops;
    model.dispatchNs = dispatchNs;
    model.syncNs = syncNs;
    if (failed(CostModelAttr::verifyInvariants(
            [&] { return kernel.emitOpError("invalid cost model options: "); },
            model.bandwidthGbps, model.gflops, model.dispatchNs,
            model.syncNs)))
      return signalPassFailure();

    EventGraph graph(kernel);
    if (failed(verifySteps(graph, /*checkOrder=*/true)))
      return signalPassFailure();
    TileGraphOptions options;
    options.defaultExtent = dynamicExtent;
    Operation *errorOp = nullptr;
    std::string error;
    FailureOr<TileGraph> tg = TileGraph::build(graph, options, errorOp, error);
    if (failed(tg)) {
      errorOp->emitOpError("cannot be scheduled statically: ") << error;
      return signalPassFailure();
    }

    FailureOr<TileSchedule> placement = listSchedule(*tg, model, workers);
    if (failed(placement)) {
      kernel.emitOpError("cannot be scheduled statically: its tiles depend "
                         "on each other in a cycle (et-verify-event-graph "
                         "reports the tasks involved)");
      return signalPassFailure();
    }
    numTiles += placement->numTiles;
    numCyclic += placement->numCyclic;
    makespanNs = static_cast<uint64_t>(placement->makespanNs);

    // Record the schedule.
    recordSchedule(kernel, *tg, model, workers, *placement);
  }
};

} // namespace
