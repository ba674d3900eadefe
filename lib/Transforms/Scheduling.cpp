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
  if (workers < 1)
    return kernel.emitOpError("'")
           << pass << "' needs a positive worker count, got " << workers;
  if (ScheduleOp schedule = getSchedule(kernel)) {
    InFlightDiagnostic diag = kernel.emitOpError("is already scheduled ('")
                              << pass << "' needs an unscheduled kernel)";
    diag.attachNote(schedule.getLoc()) << "existing schedule";
    return diag;
  }
  if (dynamicExtent < 1)
    return kernel.emitOpError("'")
           << pass << "' needs a positive dynamic-extent, got "
           << dynamicExtent;
  return success();
}
