//===- TileSharedMemory.h - A worker's shared memory, as both lowerings see it -*- C++ -*-===//
//
// The contract between et-lower-tile-ops, which sizes the shared memory of
// the tile ops (static tile buffers, the buffers marked et.dynamic_shared,
// the staged weight rows), and the worker lowering (convert-et-to-nvvm),
// which lays it out per worker beside its own words: the limits of an sm_90
// SM, how tile buffers share one arena, and the bytes a worker needs. Both
// take these from here, so that the tile lowering's budgets and the worker
// lowering's layout cannot drift apart.
//
//===----------------------------------------------------------------------===//

#ifndef EVENTTENSOR_CONVERSION_TILESHAREDMEMORY_H
#define EVENTTENSOR_CONVERSION_TILESHAREDMEMORY_H

#include "EventTensor/Dialect/EventTensor/EventTensorOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

namespace mlir::et::tile {

/// Dynamic shared memory a Hopper CTA may have beside the kernel's static
/// buffers (227 KB in all).
constexpr int64_t kMaxDynamicShared = 200 * 1024;
/// Shared memory, static and dynamic together, that an sm_90 SM (H100,
/// H200) gives one CTA.
constexpr int64_t kMaxSharedPerCTA = 227 * 1024;
/// The most shared memory a worker's copy of its static program may take
/// (the worker lowering copies shorter programs into shared memory).
constexpr int64_t kSharedProgramBytes = 4096;
/// What the worker lowering adds to the tiles' static buffers at most: the
/// copy of a worker's program and its small words.
constexpr int64_t kWorkerSharedBytes = kSharedProgramBytes + 64;
/// The alignment of each static tile buffer in the arena the tasks share.
constexpr int64_t kTileBufferAlign = 16;

/// The bytes of a statically shaped memref.
int64_t bytesOf(MemRefType type);

/// The largest buffer marked et.dynamic_shared under `root`: they all start
/// at the beginning of the kernel's dynamic shared memory.
int64_t largestDynamicBuffer(Operation *root);

/// Lays the static workgroup buffers of `task` (the shared memory its tile
/// ops allocate at the top of its body, not marked et.dynamic_shared) out
/// in the arena that every task shares, since a worker's tiles run one
/// after another: each from offset 0, kTileBufferAlign-aligned, calling
/// `place(alloca, offset)` for each. Returns the bytes they take.
int64_t layoutTileBuffers(TaskOp task, function_ref<void(Operation *, int64_t)> place = nullptr);

/// The shared memory one worker of the lowered kernel(s) under `root`
/// needs (GPU): the largest task's static tile buffers (tasks share one
/// arena), the worker lowering's own words, and the dynamic part (the
/// largest buffer marked et.dynamic_shared, then two staging regions), as
/// the worker lowering lays them out.
int64_t sharedBytesPerWorker(Operation *root);

/// An LLVM pointer (address space `space`) to the element `elementOffset`
/// elements past the start of the strided memref `mem` (its own offset
/// included), for ops that take raw addresses.
Value elementPointer(OpBuilder &b, Location loc, Value mem, Value elementOffset, int64_t elementBytes,
                     unsigned space);

} // namespace mlir::et::tile

#endif // EVENTTENSOR_CONVERSION_TILESHAREDMEMORY_H
