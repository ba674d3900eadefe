//===- Passes.h - EventTensor transformation passes ---------------*- C++ -*-===//

#ifndef EVENTTENSOR_TRANSFORMS_PASSES_H
#define EVENTTENSOR_TRANSFORMS_PASSES_H

#include "EventTensor/Dialect/EventTensor/EventTensorOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::et {

#define GEN_PASS_DECL
#include "EventTensor/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "EventTensor/Transforms/Passes.h.inc"

} // namespace mlir::et

#endif // EVENTTENSOR_TRANSFORMS_PASSES_H
