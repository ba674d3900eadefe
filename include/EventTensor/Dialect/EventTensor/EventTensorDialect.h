//===- EventTensorDialect.h - EventTensor dialect -----------------*- C++ -*-===//
//
// Declares the et dialect.
//
//===----------------------------------------------------------------------===//

#ifndef EVENTTENSOR_DIALECT_EVENTTENSOR_EVENTTENSORDIALECT_H
#define EVENTTENSOR_DIALECT_EVENTTENSOR_EVENTTENSORDIALECT_H

#include "mlir/IR/Dialect.h"

#include "EventTensor/Dialect/EventTensor/EventTensorOpsDialect.h.inc"

#endif // EVENTTENSOR_DIALECT_EVENTTENSOR_EVENTTENSORDIALECT_H
