//===- Scheduling.cpp - Helpers shared by the scheduling passes -----------===//

#include "EventTensor/Transforms/Scheduling.h"

using namespace mlir;
using namespace mlir::et;

ScheduleOp mlir::et::getSchedule(KernelOp kernel) {
  Block &body = kernel.getBody().front();
  if (body.empty())
    return {};
  return dyn_cast<ScheduleOp>(body.back());
}

LogicalResult mlir::et::checkSchedulable(KernelOp kernel, int64_t workers,
                                         int64_t dynamicExtent,
                                         StringRef pass) {
  // Workers are CTAs or host threads, all resident at once; tile ids are
  // 32-bit words in the program table.
  constexpr int64_t kMaxWorkers = int64_t(1) << 20, kMaxExtent = int64_t(1) << 31;
  if (workers < 1 || workers > kMaxWorkers)
    return kernel.emitOpError("'")
           << pass << "' needs a worker count in [1, " << kMaxWorkers << "], got " << workers;
  if (ScheduleOp schedule = getSchedule(kernel)) {
    InFlightDiagnostic diag = kernel.emitOpError("is already scheduled ('")
                              << pass << "' needs an unscheduled kernel)";
    diag.attachNote(schedule.getLoc()) << "existing schedule";
    return diag;
  }
  if (dynamicExtent < 1 || dynamicExtent > kMaxExtent)
    return kernel.emitOpError("'")
           << pass << "' needs a dynamic-extent in [1, " << kMaxExtent << "], got " << dynamicExtent;
  return success();
}
