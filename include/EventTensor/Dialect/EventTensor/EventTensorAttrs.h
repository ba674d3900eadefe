//===- EventTensorAttrs.h - EventTensor attributes ----------------*- C++ -*-===//
//
// Declares the attributes and enums of the et dialect.
//
//===----------------------------------------------------------------------===//

#ifndef EVENTTENSOR_DIALECT_EVENTTENSOR_EVENTTENSORATTRS_H
#define EVENTTENSOR_DIALECT_EVENTTENSOR_EVENTTENSORATTRS_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"

#include "EventTensor/Dialect/EventTensor/EventTensorEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "EventTensor/Dialect/EventTensor/EventTensorAttrs.h.inc"

#endif // EVENTTENSOR_DIALECT_EVENTTENSOR_EVENTTENSORATTRS_H
