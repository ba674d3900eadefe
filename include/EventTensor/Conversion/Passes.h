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

/// The closed sets of values of et-lower-tile-ops' options (and of the
/// pipelines' tile-* options that set them). Each ET_*_VALUES macro is the
/// one list of a set's spellings, for llvm::cl::values.
enum class TileTarget { GPU, CPU };
#define ET_TILE_TARGET_VALUES                                                                          \
  ::llvm::cl::values(clEnumValN(::mlir::et::TileTarget::GPU, "gpu", "warps, vector loads, shuffles"),  \
                     clEnumValN(::mlir::et::TileTarget::CPU, "cpu", "scalar loops"))

/// et.linear weight loads moved above the task's first wait.
enum class WeightPrefetchMode { None, Registers, L2, Shared };
#define ET_WEIGHT_PREFETCH_MODE_VALUES                                                                  \
  ::llvm::cl::values(                                                                                   \
      clEnumValN(::mlir::et::WeightPrefetchMode::None, "none", "after the wait"),                     \
      clEnumValN(::mlir::et::WeightPrefetchMode::Registers, "registers", "the first chunks in registers"), \
      clEnumValN(::mlir::et::WeightPrefetchMode::L2, "l2", "a bulk L2 prefetch of the tile's rows"),     \
      clEnumValN(::mlir::et::WeightPrefetchMode::Shared, "shared", "the first chunks in shared memory"))

/// KV-cache history of et.attention_split loaded before the wait.
enum class KVPrefetchMode { None, Shared };
#define ET_KV_PREFETCH_MODE_VALUES                                                                      \
  ::llvm::cl::values(clEnumValN(::mlir::et::KVPrefetchMode::None, "none", "after the wait"),          \
                     clEnumValN(::mlir::et::KVPrefetchMode::Shared, "shared", "into shared memory"))

/// The layout of et.linear on the GPU.
enum class LinearLayout { Rows, Spread };
#define ET_LINEAR_LAYOUT_VALUES                                                                         \
  ::llvm::cl::values(clEnumValN(::mlir::et::LinearLayout::Rows, "rows", "one row per warp at a time"), \
                     clEnumValN(::mlir::et::LinearLayout::Spread, "spread",                            \
                                "rows, except that a tile of few or short rows spreads over every warp"))

/// The tensor-core instructions of et.matmul.
enum class MatmulInstructions { WGMMA, Sync };
#define ET_MATMUL_INSTRUCTIONS_VALUES                                                                   \
  ::llvm::cl::values(clEnumValN(::mlir::et::MatmulInstructions::WGMMA, "wgmma",                        \
                                "Hopper warpgroup MMA where the tile allows it, else mma.sync"),       \
                     clEnumValN(::mlir::et::MatmulInstructions::Sync, "sync", "mma.sync only"))

#define GEN_PASS_DECL
#include "EventTensor/Conversion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "EventTensor/Conversion/Passes.h.inc"

} // namespace mlir::et

#endif // EVENTTENSOR_CONVERSION_PASSES_H
