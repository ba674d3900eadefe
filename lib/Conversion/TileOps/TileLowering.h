//===- TileLowering.h - The tile-op lowerings' shared parts ---*- C++ -*-===//
//
// Internal to lib/Conversion/TileOps: the options of et-lower-tile-ops, its
// plans (the ops' et.*_plan attributes and the tasks' dynamic shared memory
// owner), one populate function per op family (each family's patterns live
// in its own file), and the helpers they build from. What the worker
// lowering shares with it is in the public TileSharedMemory.h.
//
//===----------------------------------------------------------------------===//

#ifndef EVENTTENSOR_LIB_CONVERSION_TILEOPS_TILELOWERING_H
#define EVENTTENSOR_LIB_CONVERSION_TILEOPS_TILELOWERING_H

#include "EventTensor/Conversion/TileSharedMemory.h"
#include "EventTensor/Dialect/EventTensor/EventTensorOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/PatternMatch.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

#include <string>

namespace mlir::et::tile {

constexpr int64_t kWarp = 32;
/// bf16 elements per 16-byte load.
constexpr int64_t kVector = 8;

/// Where the weight loads of an et.linear may start before its task's
/// first wait (GPU).
enum class WeightPrefetch { None, Registers, Shared };

/// Tokens of et.rmsnorm whose sums go before one barrier (GPU); the
/// rows-in-flight option divides it.
constexpr int64_t kNormChunk = 16;

//===----------------------------------------------------------------------===//
// The pass's options, its plans, and the patterns
//===----------------------------------------------------------------------===//

/// What et-lower-tile-ops decided from its options, once, for every
/// lowering (the pass checks the options before it builds this).
struct TileLoweringOptions {
  bool gpu = true;
  /// Threads per worker fixed at compile time (0: at launch).
  int64_t threads = 0;
  /// 16-byte weight loads per lane in flight (et.linear).
  int64_t unroll = 4;
  /// Rows of et.rmsnorm (elements of et.kv_append, et.embedding) per thread
  /// whose loads go out together; 1 on the host.
  int64_t rowsInFlight = 1;
  /// et.linear weights before the task's first wait, in the tasks named in
  /// `prefetchTasks` (all when empty).
  WeightPrefetch weights = WeightPrefetch::None;
  /// Those weights hinted into L2 instead (prefetch=l2).
  bool weightsL2 = false;
  /// Any weight prefetch at all: the norm weights of et.linear ... norm are
  /// then hinted into L2 too.
  bool normsL2 = false;
  SmallVector<std::string> prefetchTasks;
  /// Dynamic shared memory of the shared weight prefetch (bytes).
  int64_t prefetchBytes = 0;
  /// Dynamic shared memory for the KV history of et.attention_split before
  /// the wait (kv-prefetch=shared), else 0.
  int64_t kvPrefetchBytes = 0;
  /// Dynamic shared memory of the tensor-core attention's rings (0: off).
  int64_t kvMmaBytes = 0;
  /// Bytes per task of et.linear weight rows staged across tiles, in the
  /// tasks named in `stageTasks` (all when empty).
  int64_t stageBytes = 0;
  SmallVector<std::string> stageTasks;
  /// et.linear laid out over every warp where it applies (linear=spread).
  bool spread = false;
  /// Warpgroup MMA for et.matmul where the tile allows it (mma=wgmma).
  bool wgmma = true;
};

/// Whether an op holds `task`'s dynamic shared memory (its
/// et.dynamic_shared_owner). One op per task (the GEMM tiles of a task
/// share their ring): the plans give it in a fixed order (every et.matmul,
/// then in walk order et.attention_prefill on tensor cores and
/// et.attention_split staged or on tensor cores, then the first et.linear
/// planned with the shared weight prefetch), each where nothing holds it
/// yet. In the IR, so that the lowering, and a lowering redone from a copy
/// of the kernel (the linear ops' refit), reads what the plans decided.
bool dynamicSharedHeld(Operation *task);

/// The name of the op kind holding `task`'s dynamic shared memory; empty
/// when none does.
StringRef dynamicSharedOwner(Operation *task);

/// `op` takes its task's dynamic shared memory (et.dynamic_shared_owner):
/// holds it if it is free (or held by the same op kind, when `shareable`),
/// else a diagnostic that its `what` (a prefix such as "et.attention_plan's
/// mma form ") needs it and who holds it.
LogicalResult takeDynamicShared(Operation *op, StringRef what, bool shareable = false);

/// Whether `op`'s task's et.dynamic_shared_owner names the op's kind (what
/// the lowering of an op planned to use that memory asserts).
bool holdsDynamicShared(Operation *op);

/// A pattern that lowers one tile op with the pass's options.
template <typename OpTy>
struct TileOpLowering : public OpRewritePattern<OpTy> {
  TileOpLowering(MLIRContext *context, const TileLoweringOptions &options)
      : OpRewritePattern<OpTy>(context), options(options) {}

protected:
  const TileLoweringOptions &options;
};

/// Staging budgets below this are not worth a region (bytes per task).
constexpr int64_t kMinStageBytes = 16 * 1024;

/// Plans every et.linear under `root` that has no et.linear_plan yet (GPU
/// options): its layout, weights before the wait, the rows it stages
/// across tiles (each task's budget taken in op order) and early loads.
/// The staging budget shrinks (whole KiB, or to nothing below
/// kMinStageBytes) where the two staging regions would not fit after the
/// largest dynamic shared buffer: `dynamicShared` bytes taken by the
/// tile ops lowered so far, or the shared weight prefetch.
/// The shared weight prefetch takes the task's dynamic shared memory
/// (et.dynamic_shared_owner): the first op of a task planned with it where
/// no other op holds that memory; the others prefetch nothing. Fails with
/// a diagnostic where plans in the input give it to two ops of a task or
/// to an op whose task's memory another op holds.
LogicalResult planLinearOps(Operation *root, const TileLoweringOptions &options, int64_t dynamicShared);

/// Plans `op` (GPU options) unless it has an et.attention_plan already:
/// the first of its forms that applies (staged, tensor cores, one warp per
/// query group, loops), the forms that take the task's dynamic shared
/// memory (staged, tensor cores) only where no op holds it yet; a staged
/// or tensor-core form then holds it. Fails with a diagnostic when a plan
/// in the input takes memory that another op holds.
LogicalResult planAttentionOp(AttentionSplitOp op, const TileLoweringOptions &options);

/// Plans `op` (GPU options) unless it has an et.attention_plan already:
/// tensor cores ("mma", which hold the task's dynamic shared memory) where
/// the op and the worker allow them and no op holds that memory yet, else
/// loops. Fails like planAttentionOp.
LogicalResult planAttentionPrefillOp(AttentionPrefillOp op, const TileLoweringOptions &options);

/// The form of `op`'s et.attention_plan (the pass planned every attention
/// op; the dialect has checked the form).
StringRef attentionForm(Operation *op);

/// Gives `op` the et.attention_plan of form `form`.
void setAttentionForm(Operation *op, StringRef form);

/// The pass's first step on the GPU, before any tile op is lowered: which
/// op holds each task's dynamic shared memory (et.dynamic_shared_owner) and
/// the form of every attention op (et.attention_plan), in a fixed order:
/// every et.matmul (their ring), then in walk order et.attention_prefill
/// and et.attention_split. The linear ops are planned after the others are
/// lowered (planLinearOps: their budgets need the tile buffers' sizes) and
/// take what is left.
LogicalResult planAttentionOps(Operation *root, const TileLoweringOptions &options);

/// True when `names` is empty or names the task that holds `op`.
bool inNamedTask(Operation *op, ArrayRef<std::string> names);

/// The lowering patterns of each op family. They lower one op each (the
/// pass applies them to its ops in a fixed order: et.matmul first, whose
/// tasks' dynamic shared memory holds the GEMM ring, then the others, then
/// et.linear, whose early loads and staging follow the lowered rest), and
/// choose the op's form for the target in `options`.
void populateMatmulLoweringPatterns(RewritePatternSet &patterns, const TileLoweringOptions &options);
void populateAttentionLoweringPatterns(RewritePatternSet &patterns, const TileLoweringOptions &options);
void populateAttentionPrefillLoweringPatterns(RewritePatternSet &patterns, const TileLoweringOptions &options);
void populateNormLoweringPatterns(RewritePatternSet &patterns, const TileLoweringOptions &options);
void populateEmbeddingLoweringPatterns(RewritePatternSet &patterns, const TileLoweringOptions &options);
void populateRoPELoweringPatterns(RewritePatternSet &patterns, const TileLoweringOptions &options);
void populateArgmaxLoweringPatterns(RewritePatternSet &patterns, const TileLoweringOptions &options);
void populateRouterLoweringPatterns(RewritePatternSet &patterns, const TileLoweringOptions &options);
void populateLinearLoweringPatterns(RewritePatternSet &patterns, const TileLoweringOptions &options);

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

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

/// A loop over [0, n) strided by the worker's threads. (Four elements per
/// thread and iteration, as in RMSNorm, made the RoPE of the decode step
/// 2.5x slower on the H200: docs/experiments/.)
template <typename Fn>
void threadLoop(OpBuilder &b, Location loc, Value n, Fn body) {
  Value tid = ThreadIdOp::create(b, loc, b.getIndexType());
  Value nt = NumThreadsOp::create(b, loc, b.getIndexType());
  scf::ForOp::create(b, loc, tid, n, nt, ValueRange{},
                     [&](OpBuilder &b, Location loc, Value i, ValueRange) {
                       body(b, loc, i);
                       scf::YieldOp::create(b, loc);
                     });
}

/// Elements [0, total) strided by the worker's threads: while whole trips
/// of `width` per thread remain, `body` gets a trip's `width` indices (so it
/// can issue all their loads before any store), then one index per thread
/// and trip for the rest.
template <typename Fn>
void groupedThreadLoop(OpBuilder &b, Location loc, Value total, int64_t width, Fn body) {
  TileBuilder h{b, loc};
  Value tid = ThreadIdOp::create(b, loc, b.getIndexType());
  Value nt = NumThreadsOp::create(b, loc, b.getIndexType());
  Value first = tid;
  if (width > 1) {
    Value trip = arith::MulIOp::create(b, loc, nt, h.idx(width));
    Value bulk = arith::SubIOp::create(b, loc, total, arith::RemUIOp::create(b, loc, total, trip));
    first = arith::AddIOp::create(b, loc, bulk, tid);
    scf::ForOp::create(b, loc, tid, bulk, trip, ValueRange{},
                       [&](OpBuilder &b, Location loc, Value e0, ValueRange) {
                         SmallVector<Value> es{e0};
                         for (int64_t u = 1; u < width; ++u)
                           es.push_back(arith::AddIOp::create(b, loc, es.back(), nt));
                         body(b, loc, ArrayRef<Value>(es));
                         scf::YieldOp::create(b, loc);
                       });
  }
  scf::ForOp::create(b, loc, first, total, nt, ValueRange{},
                     [&](OpBuilder &b, Location loc, Value e, ValueRange) {
                       body(b, loc, ArrayRef<Value>{e});
                       scf::YieldOp::create(b, loc);
                     });
}

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
/// tile allows it, else mma.sync, its ring in the task's dynamic shared
/// memory (which planAttentionOps gave it). Emits a diagnostic and fails when the tile
/// does not fit the worker (registers, shared memory) or `threads` is not
/// fixed.
LogicalResult lowerMatmulGPU(MatmulOp op, int64_t threads, bool wgmma);

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

/// et.attention_prefill on the GPU with tensor cores, in its task's
/// dynamic shared memory: the op and the worker must allow it
/// (attentionPrefillGPUFits).
void lowerAttentionPrefillGPU(AttentionPrefillOp op, int64_t threads);

/// Whether the op and the worker allow lowerAttentionPrefillGPU (D of 64 or
/// 128, block x G rows a multiple of 16 that the warps cover, `threads`
/// fixed, the op in a task).
bool attentionPrefillGPUFits(AttentionPrefillOp op, int64_t threads);

/// et.attention_prefill as loops (the CPU, and GPU tiles the tensor-core
/// path does not take): each thread a (token, head) row at a time.
void lowerAttentionPrefillLoops(AttentionPrefillOp op);

/// The sum of `v` over each aligned group of `width` lanes, in every lane of
/// the group (no shuffles for width 1).
Value butterflySum(OpBuilder &b, Location loc, Value v, int64_t width);

/// True for the tile compute ops this pass lowers.
bool isTileOp(Operation *op);

/// Barriers between dependent tile ops of `task` (see runOnOperation).
/// Buffers are told apart by their root: distinct kernel arguments are
/// taken to be distinct memory (docs/lowering.md).
void insertTileBarriers(TaskOp task);

/// silu(g) * u in f32, et.silu_mul's form (approximate quotient and
/// exponential): the gated et.linear and et.silu_mul give the same bits.
Value gatedActivation(OpBuilder &b, Location loc, Value g, Value u);

/// f32 value of a bf16 or f32 element.
Value toF32(OpBuilder &b, Location loc, Value v);

Value fromF32(OpBuilder &b, Location loc, Value v, Type t);

/// 1 / sqrt(sum / k + eps) (f32 `sum`, index `k`).
Value inverseRMS(OpBuilder &b, Location loc, Value sum, Value k, float eps);

/// True when nothing in `kernel` writes `buffer` (every use is a read).
bool isReadOnly(Value buffer);

/// Moves the side-effect-free ops of `task` that compute `needed` (and
/// what they use) above `at`, an op of the task's top-level block, when
/// every value can be known there; false (nothing moved) otherwise. Tile
/// ids and kernel-level values are known everywhere; an op inside a region
/// (a constant in an scf.if) runs there only conditionally, so it moves up
/// only if it cannot trap. With `dryRun`, only says whether it could.
bool moveAbove(TaskOp task, Operation *at, ValueRange needed, bool dryRun = false);

/// The first et.event.wait of `op`'s task when `op` comes after it (at the
/// task's top level, or with `inIf` also inside scf.if ops there) and the
/// values `needed` can be known before that wait; else null. Values
/// computed after the wait by side-effect-free ops (a subview, row0 = tile
/// x rows) are moved above it, with what they need. Loads of data that no
/// task writes before `op` runs may then start before the wait.
Operation *prefetchPoint(Operation *op, ValueRange needed, bool inIf, bool dryRun = false);

/// firstWorkAfterWait(op), with the side-effect-free ops that compute
/// `needed` moved above it; null when `op` is deeper or a value cannot be known there.
/// Loads of data that no task writes may start there, ahead of the tile's
/// other work before `op` (a fused norm, say), without leaving the wait.
Operation *afterWaitPoint(Operation *op, ValueRange needed);

/// Thread 0 prefetches rows [row0, row0 + rows) of the row-major matrix
/// `w` (clamped to its N rows) into L2 with one bulk prefetch, at `b`'s
/// insertion point; the pointer starts from the view's own offset (a layer
/// of stacked weights).
void prefetchRowsL2(OpBuilder &b, Location loc, Value w, Value row0, Value rows);

/// Before the first wait of the op's task, thread 0 prefetches the tile's
/// weight rows [row0, row0 + rows) into L2 with one bulk prefetch.
void prefetchWeightsL2(LinearOp op);

/// et.linear ... norm: the norm weights (which every warp of the tile
/// reads whole) into L2 before the task's first wait, thread 0 with one
/// bulk prefetch, when no task writes them (unless the pass's prefetch is
/// none). They are a few KiB that the step has not read before: without
/// it, the tile's first trip waits on DRAM for them after the wait.
void prefetchNormL2(LinearOp op);

/// Converts an integer id (i32, i64 or index) to index.
Value idToIndex(OpBuilder &b, Location loc, Value v);

/// Whether rows of `t` are contiguous with a static row stride of `cols`
/// elements (row views of a [rows, cols] buffer), so 16-byte chunks of a
/// row stay 16-byte aligned.
bool rowsOf(MemRefType t, int64_t cols);

/// A constant upper bound of a non-negative integer or index value (a
/// length): a constant, an index cast of a value with a bound, or the
/// minimum (arith.minui, arith.minsi) of values one of which has a bound.
/// For values that are not negative, signed and unsigned minima and casts
/// agree.
std::optional<int64_t> constantUpperBound(Value v);

/// The thread id through an opaque move (inline PTX with side effects), so
/// that no per-thread value derived from it is hoisted out of the worker's
/// loop over tiles, where it would hold registers through every task.
Value opaqueThreadId(OpBuilder &b, Location loc);

} // namespace mlir::et::tile

#endif // EVENTTENSOR_LIB_CONVERSION_TILEOPS_TILELOWERING_H
