//===- LinearLowering.h - Shared parts of the et.linear lowerings -*- C++ -*-===//
//
// Internal to lib/Conversion/TileOps: what the one-warp-per-row lowering
// (LowerLinear.cpp) and the spread layout (LowerLinearSpread.cpp) of
// et.linear share: the common values, chunk loads, row stores and the
// norm at the head of a tile.
//
//===----------------------------------------------------------------------===//

#ifndef EVENTTENSOR_LIB_CONVERSION_TILEOPS_LINEARLOWERING_H
#define EVENTTENSOR_LIB_CONVERSION_TILEOPS_LINEARLOWERING_H

#include "TileLowering.h"

#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/BuiltinTypes.h"

namespace mlir::et::tile {

/// bf16 x * g that stageNorm keeps in shared memory (bytes).
constexpr int64_t kStagedNormBytes = 16 * 1024;
/// et.linear's bound on M (tokens).
constexpr int64_t kLinearTokens = 16;
/// Warps of a worker at most.
constexpr int64_t kMaxWarps = 32;

/// What both GPU lowerings of et.linear start from: the types, the warp
/// of each thread, N.
struct LinearCommon {
  MemRefType xType;
  VectorType vecBF16, vecF32;
  Value lane, warp, warps, n, tid;
};

/// et.linear ... norm on the GPU with a static M and K whose x * g fits
/// kStagedNormBytes of shared memory: the worker reads x once (not once per
/// row): its threads stride over x's chunks, store bf16(x * g) into shared
/// memory and sum the squares, the warps' sums meet after one barrier, and
/// every thread adds them up into each token's inverse RMS. The op's rows
/// then read x * g from shared memory. Null `xs` when this does not apply.
struct StagedNorm {
  Value xs;
  SmallVector<Value> scale; // per token
};

/// et.linear ... norm on the GPU (the spread layout with K split over the
/// warps): every warp's inverse RMS of each token, in shared memory at
/// [warp][token] (M <= kLinearTokens). Every warp computes the same values
/// (normPrepass); a thread reads its own warp's slot.
struct NormScales {
  Value slots, warp;
  explicit operator bool() const { return static_cast<bool>(slots); }
  Value slot(OpBuilder &b, Location loc, Value tok) const {
    Value base = arith::MulIOp::create(b, loc, warp, arith::ConstantIndexOp::create(b, loc, kLinearTokens));
    return arith::AddIOp::create(b, loc, base, tok);
  }
  Value get(OpBuilder &b, Location loc, Value tok) const {
    return slots ? memref::LoadOp::create(b, loc, slots, ValueRange{slot(b, loc, tok)}).getResult() : Value();
  }
  void set(OpBuilder &b, Location loc, Value tok, Value r) const {
    memref::StoreOp::create(b, loc, r, slots, ValueRange{slot(b, loc, tok)});
  }
};

LinearCommon linearCommon(OpBuilder &b, Location loc, LinearOp op);

/// The sum of a warp's lane partial sums `acc` (vector<8xf32> per lane):
/// a reduction, then a shuffle butterfly (every lane gets it).
Value rowTotal(OpBuilder &b, Location loc, Value acc);

/// One 16-byte chunk (8 bf16) of the matrix `mem` at (`row`, `col`): the
/// load every GPU lowering of et.linear streams its operands with.
Value loadChunk(OpBuilder &b, Location loc, Value mem, Value row, Value col);

/// y[tok, row] from `sum` (silu(sum) * `up` for a gated op), written by
/// the thread where `store` holds (writeRow). `scale` (et.linear ... norm:
/// the token's inverse RMS) multiplies both sums first.
void storeRow(OpBuilder &b, Location loc, LinearOp op, Value sum, Value store, Value tok, Value row,
              Value up = {}, Value scale = {});

/// et.linear ... norm: the token's inverse RMS from the sum of squares
/// of its row of x.
Value linearInverseRMS(OpBuilder &b, Location loc, LinearOp op, Value sum);

/// The chunk of x that every GPU lowering of et.linear multiplies a weight
/// chunk with (8 elements of token `tok` from column `col`, f32), and the
/// raw chunk: x itself (bf16, widened), or with `norm` normedChunk (`raw`
/// gets the stream's own values), or that product from `staged`
/// (stageNorm's shared memory; no `raw`).
Value loadX(OpBuilder &b, Location loc, LinearOp op, Value tok, Value col, Value *raw = nullptr,
            Value staged = {});

StagedNorm stageNorm(OpBuilder &b, Location loc, LinearOp op, int64_t threads);

/// The staged inverse RMS of token `tok` (a value below M).
Value stagedScale(OpBuilder &b, Location loc, const StagedNorm &sn, Value tok);

NormScales normScales(OpBuilder &b, Location loc, LinearOp op, Value warp);

/// Each warp's pass over x for the inverse RMS of every token (lane
/// `lane` of the warp reads 8 elements every 256), into `scales`.
void normPrepass(OpBuilder &b, Location loc, LinearOp op, const NormScales &scales, Value lane);

/// The spread layout of an et.linear (lowerLinearGPUSpread): warps, rows,
/// chunks, streams, K parts, rows per trip and chunks per trip.
struct SpreadShape {
  int64_t W, R, c, nm, mCount, G, q, P, streams, u;
  bool staticM;
};

/// GPU, `linear=spread`: an et.linear with a constant row count R and a
/// static K of c chunks (256 elements, one 16-byte load per lane), laid out
/// so that every warp has a share of the tile and few dependent trips to
/// memory, where one warp per row would leave warps idle or wait out one
/// short row at a time:
/// - R below the W warps: each row's K splits into G parts (the largest
///   power of two with R x G <= W that divides c), one warp each; the
///   warps' row sums meet in shared memory (a barrier), and the threads add
///   the G parts in order and store.
/// - Otherwise each warp takes P rows per trip (rows warp, warp + W, ...;
///   P x c chunks per lane <= `unroll`, R a multiple of P x W), each x chunk
///   loaded once for all of them.
/// A gated op's row is two streams (gate and up), and one trip holds both
/// rows whole when 2 x c <= `unroll`. A stream accumulates its chunks in
/// order, as the one-row-per-warp lowering does, so without a split K
/// (G = 1) the results keep their bits; with one they are rounded in
/// another order.
///
/// With `afterLinear` (another et.linear of the tile comes before this one
/// since the task's last wait), when no task writes the weights and the
/// op sits at its task's top level, each warp's first trip of weight loads
/// goes out into registers right after that wait (afterWaitPoint): in
/// flight during the linear ops before it (and a fused norm), so the tile
/// has more loads in flight. Without another linear before it, holding
/// those registers through a norm alone measured slower: the megakernel's
/// one register budget spilled elsewhere (docs/experiments/).
///
/// The plan chooses the layout where `spreadShape` gives one (none applies,
/// or the accumulators, streams x tokens, would pass four).
std::optional<SpreadShape> spreadShape(LinearOp op, int64_t unroll, int64_t threads);

void lowerLinearGPUSpread(LinearOp op, const SpreadShape &shape, int64_t threads, bool afterLinear);

} // namespace mlir::et::tile

#endif // EVENTTENSOR_LIB_CONVERSION_TILEOPS_LINEARLOWERING_H
