//===- EventTensorOps.h - EventTensor ops -------------------------*- C++ -*-===//
//
// Declares the ops of the et dialect.
//
//===----------------------------------------------------------------------===//

#ifndef EVENTTENSOR_DIALECT_EVENTTENSOR_EVENTTENSOROPS_H
#define EVENTTENSOR_DIALECT_EVENTTENSOR_EVENTTENSOROPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "EventTensor/Dialect/EventTensor/EventTensorAttrs.h"
#include "EventTensor/Dialect/EventTensor/EventTensorDialect.h"
#include "EventTensor/Dialect/EventTensor/EventTensorTypes.h"

#define GET_OP_CLASSES
#include "EventTensor/Dialect/EventTensor/EventTensorOps.h.inc"

#endif // EVENTTENSOR_DIALECT_EVENTTENSOR_EVENTTENSOROPS_H
