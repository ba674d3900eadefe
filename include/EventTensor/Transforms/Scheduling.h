//===- Scheduling.h - Helpers shared by the scheduling passes -----*- C++ -*-===//

#ifndef EVENTTENSOR_TRANSFORMS_SCHEDULING_H
#define EVENTTENSOR_TRANSFORMS_SCHEDULING_H

#include "EventTensor/Dialect/EventTensor/EventTensorOps.h"

namespace mlir::et {

/// The kernel's schedule, or null when it is not scheduled.
ScheduleOp getSchedule(KernelOp kernel);

/// Reports (and fails) when `workers` is not positive, `kernel` already has
/// a schedule, or `dynamicExtent` (the estimate of runtime extents) is not
/// positive. `pass` names the pass in the diagnostic.
LogicalResult checkSchedulable(KernelOp kernel, int64_t workers,
                               int64_t dynamicExtent, StringRef pass);

} // namespace mlir::et

#endif // EVENTTENSOR_TRANSFORMS_SCHEDULING_H
