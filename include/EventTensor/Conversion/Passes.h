//===- Passes.h - Conversions out of the et dialect ---------------*- C++ -*-===//

#ifndef EVENTTENSOR_CONVERSION_PASSES_H
#define EVENTTENSOR_CONVERSION_PASSES_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "EventTensor/Dialect/EventTensor/EventTensorOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::et {

#define GEN_PASS_DECL
#include "EventTensor/Conversion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "EventTensor/Conversion/Passes.h.inc"

/// Error kinds written to the first word of the error record.
enum class WorkerError : int64_t {
  None = 0,
  Timeout = 1,
  CounterCapacity = 2,
  IndexOutOfBounds = 3,
  BadScheduleEntry = 4,
};

} // namespace mlir::et

#endif // EVENTTENSOR_CONVERSION_PASSES_H
