//===- EventTensor.td - EventTensor dialect umbrella -------*- tablegen -*-===//
//
// Includes every .td file of the et dialect. The Python bindings generate their
// op classes from this file.
//
//===----------------------------------------------------------------------===//

#ifndef EVENTTENSOR_DIALECT_EVENTTENSOR_EVENTTENSOR_TD
#define EVENTTENSOR_DIALECT_EVENTTENSOR_EVENTTENSOR_TD

include "EventTensor/Dialect/EventTensor/EventTensorDialect.td"
include "EventTensor/Dialect/EventTensor/EventTensorTypes.td"
include "EventTensor/Dialect/EventTensor/EventTensorAttrs.td"
include "EventTensor/Dialect/EventTensor/EventTensorOps.td"

#endif // EVENTTENSOR_DIALECT_EVENTTENSOR_EVENTTENSOR_TD
