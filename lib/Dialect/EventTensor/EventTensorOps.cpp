//===- EventTensorOps.cpp - EventTensor ops -------------------------------===//
//
// Verifiers, builders and folders of the et dialect's ops.
//
//===----------------------------------------------------------------------===//

#include "EventTensor/Dialect/EventTensor/EventTensorOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace mlir::et;

#define GET_OP_CLASSES
#include "EventTensor/Dialect/EventTensor/EventTensorOps.cpp.inc"

//===----------------------------------------------------------------------===//
// EventCreateOp
//===----------------------------------------------------------------------===//

LogicalResult EventCreateOp::verify() {
  EventType type = getResult().getType();
  int64_t expected = type.getNumDynamicDims();
  int64_t actual = getDynamicSizes().size();
  if (expected != actual)
    return emitOpError("expected ")
           << expected << " dynamic size operands for " << type << ", got "
           << actual;
  return success();
}
