//===- TileLowering.h - Helpers shared by the tile-op lowerings -*- C++ -*-===//
//
// Internal to lib/Conversion: what et-lower-tile-ops (LowerTileOps.cpp) and
// the tensor-core GEMM lowering (LowerMatmul.cpp) build their loops from.
//
//===----------------------------------------------------------------------===//

#ifndef EVENTTENSOR_LIB_CONVERSION_TILELOWERING_H
#define EVENTTENSOR_LIB_CONVERSION_TILELOWERING_H

#include "EventTensor/Dialect/EventTensor/EventTensorOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"

namespace mlir::et::tile {

constexpr int64_t kWarp = 32;
// Dynamic shared memory a Hopper CTA may have beside the kernel's static
// buffers (227 KB in all).
constexpr int64_t kMaxDynamicShared = 200 * 1024;

/// The worker's threads cut into groups of `lanes` consecutive threads (a
/// warp on the GPU, a single thread on the CPU).
struct Groups {
  Value tid, threads; // et.thread_id, et.num_threads
  Value lane;         // tid mod lanes
  Value group;        // tid / lanes
  Value groups;       // max(threads / lanes, 1)
};

/// Constants and thread groups at one insertion point.
struct TileBuilder {
  OpBuilder &b;
  Location loc;
  Value idx(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }
  Value f32(double v) {
    return arith::ConstantFloatOp::create(b, loc, b.getF32Type(),
                                          APFloat(static_cast<float>(v)));
  }
  Groups groups(int64_t lanes) {
    Groups g;
    g.tid = ThreadIdOp::create(b, loc, b.getIndexType());
    g.threads = NumThreadsOp::create(b, loc, b.getIndexType());
    g.lane = arith::RemUIOp::create(b, loc, g.tid, idx(lanes));
    g.group = arith::DivUIOp::create(b, loc, g.tid, idx(lanes));
    g.groups = arith::MaxUIOp::create(
        b, loc, arith::DivUIOp::create(b, loc, g.threads, idx(lanes)), idx(1));
    return g;
  }
};

/// An i32 constant.
inline Value i32(OpBuilder &b, Location loc, int64_t v) {
  return arith::ConstantIntOp::create(b, loc, b.getI32Type(), v);
}

/// An index value as i32 (shared-memory byte offsets).
inline Value toI32(OpBuilder &b, Location loc, Value index) {
  return arith::IndexCastOp::create(b, loc, b.getI32Type(), index);
}

/// `v` from the lane `offset` away in a butterfly (xor) over the warp.
Value shuffleXor(OpBuilder &b, Location loc, Value v, int64_t offset);

/// `base` (an LLVM pointer) plus `bytes` (i32).
Value sharedAt(OpBuilder &b, Location loc, Value base, Value bytes);

/// silu(g) = g / (1 + exp(-g)) of an f32 `g`; `fast` goes on the exp and
/// the division (`afn`: ex2.approx and div.approx on the GPU).
Value silu(OpBuilder &b, Location loc, Value g, arith::FastMathFlags fast = arith::FastMathFlags::none);

/// A per-tile shared-memory buffer: a workgroup alloca at the top of the
/// task body, after the ones already there (the worker lowering turns each
/// into a workgroup buffer).
Value workgroupBuffer(TaskOp task, Location loc, ArrayRef<int64_t> shape, Type elementType);

/// An LLVM pointer (address space `space`) to the element `elementOffset`
/// elements past the start of the strided memref `mem` (its own offset
/// included), for ops that take raw addresses.
Value elementPointer(OpBuilder &b, Location loc, Value mem, Value elementOffset,
                     int64_t elementBytes, unsigned space);

/// One 16-byte `cp.async` from global `src` to shared `dst`, cached in L2
/// only (`.cg`); `srcBytes` (i32, optional) below 16 zero-fills the rest.
void copyAsync16(OpBuilder &b, Location loc, Value dst, Value src, Value srcBytes = Value());

/// 16-byte `cp.async` copies of a block of `rows` rows of `perRow` chunks
/// (8 bf16 each): thread `tid` takes chunks tid, tid + threads, ...; chunk
/// c is row c / perRow (global row first + row, copied when below `limit`)
/// at column k0 + 8 (c % perRow) (copied when in [kLo, kHi)); the others
/// are zero-filled. Source element: base + row * rowStride + extra +
/// column; destination: `dstByte(row, chunk)` bytes past `shared`.
void copyChunks(OpBuilder &b, Location loc, Value tid, int64_t threads, int64_t rows, int64_t perRow, Value first,
                Value limit, Value k0, Value kLo, Value kHi, Value base, Value rowStride, Value extra, Value shared,
                llvm::function_ref<Value(OpBuilder &, Value row, Value chunk)> dstByte);

/// et.matmul on the GPU (tensor cores) for a worker of `threads` threads
/// (fixed at compile time): with warpgroup MMA (`wgmma`, Hopper) where the
/// tile allows it, else mma.sync. The op's task takes the dynamic shared
/// memory (`sharedTaken`). Emits a diagnostic and fails when the tile does
/// not fit the worker (registers, shared memory) or `threads` is not fixed.
LogicalResult lowerMatmulGPU(MatmulOp op, int64_t threads, bool wgmma,
                             llvm::DenseSet<Operation *> &sharedTaken);

/// et.matmul on the CPU: scalar loops over the block, rows strided by thread.
void lowerMatmulCPU(MatmulOp op);

/// ldmatrix .x4 of 8x8 bf16 matrices (`trans` for .trans) at the shared
/// address `at` (this lane's row): the four 32-bit registers.
SmallVector<Value, 4> ldmatrixX4(OpBuilder &b, Location loc, Value at, bool trans);

/// Byte offsets, in a tile of bf16 rows `pitch` elements apart, of the row
/// this lane gives ldmatrix .x4 for a 16 x 16 block: first as the B operand
/// of two n8 tiles (rows lane % 8 + 8 (lane / 16), column 8 ((lane / 8) %
/// 2): K in attention), then transposed (rows lane % 8 + 8 ((lane / 8) %
/// 2), column 8 (lane / 16): V).
std::pair<Value, Value> ldmatrixLaneOffsets(OpBuilder &b, Location loc, Value lane, int64_t pitch);

/// mma.sync m16n8k16, bf16 inputs (A row-major, B column-major), f32
/// accumulators: d = a * b + c (4, 2 and 4 registers in, 4 out).
SmallVector<Value, 4> mmaBf16(OpBuilder &b, Location loc, ArrayRef<Value> a, ArrayRef<Value> bFrag,
                              ArrayRef<Value> c);

/// Two f32 rounded to bf16 and packed in an i32 (`lo` in the low half).
Value packBf16(OpBuilder &b, Location loc, Value lo, Value hi);

/// et.attention_prefill on the GPU with tensor cores, when the op and the
/// worker allow it (D of 64 or 128, block x G rows a multiple of 16 that
/// the warps cover, `threads` fixed); the op's task takes the dynamic
/// shared memory. Returns false (op untouched) otherwise.
bool lowerAttentionPrefillGPU(AttentionPrefillOp op, int64_t threads, llvm::DenseSet<Operation *> &sharedTaken);

/// et.attention_prefill as loops (the CPU, and GPU tiles the tensor-core
/// path does not take): each thread a (token, head) row at a time.
void lowerAttentionPrefillLoops(AttentionPrefillOp op);

} // namespace mlir::et::tile

#endif // EVENTTENSOR_LIB_CONVERSION_TILELOWERING_H
