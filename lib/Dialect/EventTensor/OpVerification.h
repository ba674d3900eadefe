//===- OpVerification.h - Checks shared by the et op verifiers -*- C++ -*-===//
//
// Internal to lib/Dialect/EventTensor.
//
//===----------------------------------------------------------------------===//

#ifndef EVENTTENSOR_LIB_DIALECT_EVENTTENSOR_OPVERIFICATION_H
#define EVENTTENSOR_LIB_DIALECT_EVENTTENSOR_OPVERIFICATION_H

#include "mlir/IR/Operation.h"

namespace mlir::et::detail {

/// Fails with a diagnostic unless `op` is inside an et.task (the ops that
/// run on a worker's threads).
LogicalResult verifyInTask(Operation *op);

} // namespace mlir::et::detail

#endif // EVENTTENSOR_LIB_DIALECT_EVENTTENSOR_OPVERIFICATION_H
