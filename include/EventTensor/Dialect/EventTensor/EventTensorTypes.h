//===- EventTensorTypes.h - EventTensor types ---------------------*- C++ -*-===//
//
// Declares the types of the et dialect.
//
//===----------------------------------------------------------------------===//

#ifndef EVENTTENSOR_DIALECT_EVENTTENSOR_EVENTTENSORTYPES_H
#define EVENTTENSOR_DIALECT_EVENTTENSOR_EVENTTENSORTYPES_H

#include "mlir/IR/BuiltinTypeInterfaces.h"
#include "mlir/IR/Types.h"

#define GET_TYPEDEF_CLASSES
#include "EventTensor/Dialect/EventTensor/EventTensorOpsTypes.h.inc"

#endif // EVENTTENSOR_DIALECT_EVENTTENSOR_EVENTTENSORTYPES_H
