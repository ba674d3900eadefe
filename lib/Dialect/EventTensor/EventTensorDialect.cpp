//===- EventTensorDialect.cpp - EventTensor dialect -----------------------===//
//
// Registers the ops and types of the et dialect.
//
//===----------------------------------------------------------------------===//

#include "EventTensor/Dialect/EventTensor/EventTensorDialect.h"
#include "EventTensor/Dialect/EventTensor/EventTensorOps.h"
#include "EventTensor/Dialect/EventTensor/EventTensorTypes.h"

using namespace mlir;
using namespace mlir::et;

#include "EventTensor/Dialect/EventTensor/EventTensorOpsDialect.cpp.inc"

void EventTensorDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "EventTensor/Dialect/EventTensor/EventTensorOps.cpp.inc"
      >();
  registerTypes();
  registerAttributes();
}
