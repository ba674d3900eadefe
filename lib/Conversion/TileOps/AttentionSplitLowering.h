//===- AttentionSplitLowering.h - Shared parts of et.attention_split -*- C++ -*-===//
//
// Internal to lib/Conversion/TileOps: what the forms of et.attention_split
// share (LowerAttentionSplit.cpp: the loops, one warp per query group, the
// tensor cores and the plan; LowerAttentionSplitStaged.cpp: the staged
// form).
//
//===----------------------------------------------------------------------===//

#ifndef EVENTTENSOR_LIB_CONVERSION_TILEOPS_ATTENTIONSPLITLOWERING_H
#define EVENTTENSOR_LIB_CONVERSION_TILEOPS_ATTENTIONSPLITLOWERING_H

#include "TileLowering.h"

namespace mlir::et::tile {

/// The positions [start, end) of an attention split: start = split x
/// split_len, end = min(start + split_len, len, cache length). `end` may be
/// below `start` (an empty split).
std::pair<Value, Value> splitRange(OpBuilder &b, Location loc, AttentionSplitOp op);

/// The positions [lo, hi) of an op's `append` rows that fall in its split's
/// range [start, end) (splitRange); empty when hi <= lo.
std::pair<Value, Value> appendRange(OpBuilder &b, Location loc, AttentionSplitOp op, Value start, Value end);

/// Element `d` of position `t`'s appended key (`which` = 0) or value (1):
/// read from the op's new_k / new_v, rounded to the cache's element type,
/// stored into the cache's row `t`; returns the stored value.
Value appendElement(OpBuilder &b, Location loc, AttentionSplitOp op, int64_t which, Value t, Value d);

/// Whether the staged form (lowerAttentionSplitStaged) applies to `op` for
/// a worker of `threads` threads (0: at launch) and `stageBytes` of dynamic
/// shared memory, the task's dynamic shared memory aside. Changes nothing.
bool stagedSplitFits(AttentionSplitOp op, int64_t threads, int64_t stageBytes);

/// GPU split-KV attention with the split's K and V rows staged in shared
/// memory (kv-prefetch=shared): for an op with a `stable` operand, a static
/// split length whose K and V rows fit in stageBytes, and D in {64, 128},
/// its K and V rows in [start, min(end, stable)) are copied into the
/// kernel's dynamic shared memory with `cp.async` before the task's first
/// wait (prefetchPoint; the op may sit in an scf.if), 16-byte chunk c of
/// row r at chunk c ^ (r mod 8), so that neither the row-per-lane reads of
/// the scores nor the chunk-per-lane reads of P.V conflict on banks. After
/// the wait, in shared memory:
///   1. the split's other rows (from `stable` on) copied in the same way,
///      and q of the group's heads, scaled by scale * log2(e);
///   2. the scores, one thread per (head, position), each reading the
///      whole K row (no shuffles);
///   3. per head, one warp takes the maximum, turns the scores into
///      exp2(s - max) and sums them;
///   4. P.V, a lane per (16-byte chunk of D, head) and warps taking
///      positions in turn, the warps summed through shared memory and
///      divided by the sum; lse = (max + log2(sum)) ln 2.
/// The op must fit (stagedSplitFits), and its plan holds its task's
/// dynamic shared memory.
void lowerAttentionSplitStaged(AttentionSplitOp op, int64_t threads);

} // namespace mlir::et::tile

#endif // EVENTTENSOR_LIB_CONVERSION_TILEOPS_ATTENTIONSPLITLOWERING_H
