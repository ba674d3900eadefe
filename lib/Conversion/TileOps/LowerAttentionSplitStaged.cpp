//===- LowerAttentionSplitStaged.cpp - et.attention_split, staged ---------===//
//
// The staged form of split-KV decode attention on the GPU: the split's K
// and V rows copied into shared memory before the task's first wait, then
// scores, softmax and P.V as phases through shared memory
// (AttentionSplitLowering.h has the contract).
//
//===----------------------------------------------------------------------===//

#include "AttentionSplitLowering.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Builders.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::et;

namespace mlir::et::tile {

namespace {

/// lowerAttentionSplitStaged's phases and the values they share: the
/// shapes, the stage and the split's range (from before the wait), and
/// the shared buffers and thread values of the phases after it.
struct StagedSplit {
  AttentionSplitOp op;
  Location loc;
  TaskOp task;
  int64_t groupSize, dim, splitLen, maxWarps, chunks, stageRows;
  Type f32, bf16;
  VectorType vecF32, vecBF16;
  Value stage, start, stageCount, end;
  Value qs, scores, ml, part, floor, zeroVec, count, headBase;
  Value lane, warp, warps;

  StagedSplit(AttentionSplitOp op, TaskOp task, int64_t groupSize, int64_t dim, int64_t splitLen, int64_t maxWarps,
              int64_t chunks, int64_t stageRows)
      : op(op), loc(op.getLoc()), task(task), groupSize(groupSize), dim(dim), splitLen(splitLen),
        maxWarps(maxWarps), chunks(chunks), stageRows(stageRows), f32(Float32Type::get(op.getContext())),
        bf16(BFloat16Type::get(op.getContext())), vecF32(VectorType::get({kVector}, f32)),
        vecBF16(VectorType::get({kVector}, bf16)) {}

  /// Element offset of chunk `c` of staged row `r` (K when which = 0, V when 1).
  Value stagedOffset(OpBuilder &b, Value r, Value c, int64_t which) {
    TileBuilder h{b, loc};
    Value swz = arith::XOrIOp::create(b, loc, c, arith::AndIOp::create(b, loc, r, h.idx(7)));
    return arith::AddIOp::create(
        b, loc,
        arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, r, h.idx(dim)),
                              arith::MulIOp::create(b, loc, swz, h.idx(kVector))),
        h.idx(which * stageRows * dim));
  }

  /// Copies rows [from, to) of the split (K and V) into their stage slots
  /// with cp.async, one 16-byte chunk per thread and trip, and commits them.
  /// With `appendEnd`, a row below it is one of the op's `append` rows
  /// (this step's): its chunk comes from the op's new_k / new_v instead,
  /// rounded to bf16, into the stage and into the cache's row.
  void copyRows(OpBuilder &b, Value from, Value to, Value appendEnd) {
    TileBuilder h{b, loc};
    Value n = arith::MaxSIOp::create(b, loc, arith::SubIOp::create(b, loc, to, from), h.idx(0));
    threadLoop(b, loc, arith::MulIOp::create(b, loc, n, h.idx(chunks)), [&](OpBuilder &b, Location loc, Value i) {
      TileBuilder h{b, loc};
      Value r = arith::AddIOp::create(b, loc, from, arith::DivUIOp::create(b, loc, i, h.idx(chunks)));
      Value c = arith::RemUIOp::create(b, loc, i, h.idx(chunks));
      Value t = arith::AddIOp::create(b, loc, start, r);
      Value caches[] = {op.getK(), op.getV()};
      auto fromCaches = [&](OpBuilder &b) {
        for (auto [which, mem] : llvm::enumerate(caches)) {
          auto meta = memref::ExtractStridedMetadataOp::create(b, loc, mem);
          Value element = arith::AddIOp::create(
              b, loc,
              arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, t, meta.getStrides()[0]),
                                    arith::MulIOp::create(b, loc, op.getKvHead(), meta.getStrides()[1])),
              arith::MulIOp::create(b, loc, c, h.idx(kVector)));
          Value src = elementPointer(b, loc, mem, element, 2, 1);
          Value dst = elementPointer(b, loc, stage, stagedOffset(b, r, c, which), 2, 3);
          copyAsync16(b, loc, dst, src);
        }
      };
      if (!appendEnd) {
        fromCaches(b);
        return;
      }
      Value appended = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, t, appendEnd);
      auto pick = scf::IfOp::create(b, loc, appended, /*withElse=*/true);
      {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(pick.thenBlock());
        Value d0 = arith::MulIOp::create(b, loc, c, h.idx(kVector));
        for (int64_t which = 0; which < 2; ++which) {
          Value chunk = arith::ConstantOp::create(b, loc, vecBF16, cast<TypedAttr>(b.getZeroAttr(vecBF16)));
          for (int64_t e = 0; e < kVector; ++e) {
            Value y = appendElement(b, loc, op, which, t, arith::AddIOp::create(b, loc, d0, h.idx(e)));
            chunk = vector::InsertOp::create(b, loc, y, chunk, ArrayRef<int64_t>{e});
          }
          auto st = vector::StoreOp::create(b, loc, chunk, stage, ValueRange{stagedOffset(b, r, c, which)});
          st.setAlignment(16);
        }
      }
      {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(pick.elseBlock());
        fromCaches(b);
      }
    });
    NVVM::CpAsyncCommitGroupOp::create(b, loc);
  }

  /// Before the wait: the copies.
  /// The split's range (computed before the wait, used after it too).
  void stageBeforeWait(Operation *stageAt) {
    OpBuilder b(stageAt);
    TileBuilder h{b, loc};
    stage = workgroupBuffer(task, loc, {2 * stageRows * dim}, bf16);
    stage.getDefiningOp()->setAttr(EventTensorDialect::getDynamicSharedAttrName(), b.getUnitAttr());
    std::tie(start, end) = splitRange(b, loc, op);
    stageCount = arith::MaxSIOp::create(
        b, loc,
        arith::MinSIOp::create(
            b, loc, arith::SubIOp::create(b, loc, arith::MinSIOp::create(b, loc, end, op.getStable()), start),
            h.idx(stageRows)),
        h.idx(0));
    copyRows(b, h.idx(0), stageCount, Value());
    // An op inside an scf.if may not run: no copy outlives the task.
    Operation *top = task.getBody().front().findAncestorOpInBlock(*op);
    if (top != op.getOperation()) {
      OpBuilder after(top->getContext());
      after.setInsertionPointAfter(top);
      NVVM::CpAsyncWaitGroupOp::create(after, loc, 0);
    }
  }

  /// At the op: the buffers of the phases and the split's position count.
  void allocate(OpBuilder &b) {
    TileBuilder h{b, loc};
    qs = workgroupBuffer(task, loc, {groupSize, dim}, f32);
    scores = workgroupBuffer(task, loc, {groupSize, splitLen}, f32);
    ml = workgroupBuffer(task, loc, {groupSize, 2}, f32);
    part = workgroupBuffer(task, loc, {maxWarps, groupSize, dim}, f32);
    floor = h.f32(-1e30);
    zeroVec = arith::ConstantOp::create(b, loc, vecF32, DenseElementsAttr::get(vecF32, APFloat(0.0f)));
    count = arith::MaxSIOp::create(b, loc, arith::SubIOp::create(b, loc, end, start), h.idx(0));
    headBase = arith::MulIOp::create(b, loc, op.getKvHead(), h.idx(groupSize));
  }

  Value load(OpBuilder &b, Value mem, ValueRange idx, VectorType type) {
    auto l = vector::LoadOp::create(b, loc, type, mem, idx);
    l.setAlignment(16);
    return l;
  }
  Value ext(OpBuilder &b, Value v) { return arith::ExtFOp::create(b, loc, vecF32, v); }
  /// Chunks `cs` of row i of K (which = 0) or V (1), from the stage.
  SmallVector<Value> rowChunks(OpBuilder &b, Value i, ArrayRef<Value> cs, int64_t which) {
    SmallVector<Value> vals;
    for (Value c : cs)
      vals.push_back(load(b, stage, ValueRange{stagedOffset(b, i, c, which)}, vecBF16));
    return vals;
  }

  /// The rows at or past `stable` (this step's, written by the task waited
  /// for) join the stage, their copies in flight with the loads of q of the
  /// group's heads (scaled, base 2); then every phase reads shared memory
  /// only. (Read from the cache in the phases, the one row of a decode step
  /// cost the split that holds it two more L2 round trips, and that split
  /// ends last.)
  void stageRest(OpBuilder &b) {
    TileBuilder h{b, loc};
    Value appendEnd;
    if (op.getNewK())
      appendEnd = appendRange(b, loc, op, start, end).second;
    copyRows(b, stageCount, count, appendEnd);
    float scale = op.getScale().convertToFloat() * static_cast<float>(M_LOG2E);
    threadLoop(b, loc, h.idx(groupSize * dim), [&](OpBuilder &b, Location loc, Value e) {
      TileBuilder h{b, loc};
      Value g = arith::DivUIOp::create(b, loc, e, h.idx(dim));
      Value d = arith::RemUIOp::create(b, loc, e, h.idx(dim));
      Value qv = toF32(b, loc, memref::LoadOp::create(b, loc, op.getQ(),
                                                      ValueRange{arith::AddIOp::create(b, loc, headBase, g), d}));
      memref::StoreOp::create(b, loc, arith::MulFOp::create(b, loc, qv, h.f32(scale)), qs, ValueRange{g, d});
    });
    NVVM::CpAsyncWaitGroupOp::create(b, loc, 0);
    gpu::BarrierOp::create(b, loc);
  }

  /// Scores: one thread per (head, position), consecutive threads on
  /// consecutive positions of one head: their q reads are one broadcast and
  /// their K reads (swizzled rows) do not conflict. (With one thread per
  /// position for every head, q of all heads is loop-invariant and LLVM
  /// hoisted it into registers, 256 floats for Llama's group; with the head
  /// varying fastest, the q reads of a warp conflicted 4-way on banks and
  /// took 4.5 us for 256 positions.)
  void computeScores(OpBuilder &b) {
    TileBuilder h{b, loc};
    threadLoop(b, loc, arith::MulIOp::create(b, loc, count, h.idx(groupSize)),
               [&](OpBuilder &b, Location loc, Value item) {
                 TileBuilder h{b, loc};
                 Value g = arith::DivUIOp::create(b, loc, item, count);
                 Value i = arith::RemUIOp::create(b, loc, item, count);
                 SmallVector<Value> cs;
                 for (int64_t c = 0; c < chunks; ++c)
                   cs.push_back(h.idx(c));
                 SmallVector<Value> kRow = rowChunks(b, i, cs, 0);
                 Value acc;
                 for (int64_t c = 0; c < chunks; ++c) {
                   Value kc = ext(b, kRow[c]);
                   Value qc = load(b, qs, ValueRange{g, h.idx(c * kVector)}, vecF32);
                   acc = acc ? vector::FMAOp::create(b, loc, kc, qc, acc).getResult()
                             : arith::MulFOp::create(b, loc, kc, qc).getResult();
                 }
                 memref::StoreOp::create(b, loc, vector::ReductionOp::create(b, loc, vector::CombiningKind::ADD, acc),
                                         scores, ValueRange{g, i});
               });
    gpu::BarrierOp::create(b, loc);
  }

  /// Softmax: a warp per head.
  void softmax(OpBuilder &b) {
    TileBuilder h{b, loc};
    Groups warpsOf = h.groups(kWarp);
    lane = warpsOf.lane, warp = warpsOf.group, warps = warpsOf.groups;
    scf::ForOp::create(
        b, loc, warp, h.idx(groupSize), warps, ValueRange{},
        [&](OpBuilder &b, Location loc, Value g, ValueRange) {
          TileBuilder h{b, loc};
          auto mx = scf::ForOp::create(
              b, loc, lane, count, h.idx(kWarp), ValueRange{floor},
              [&](OpBuilder &b, Location loc, Value j, ValueRange a) {
                Value s = memref::LoadOp::create(b, loc, scores, ValueRange{g, j});
                scf::YieldOp::create(b, loc, ValueRange{arith::MaximumFOp::create(b, loc, a[0], s)});
              });
          Value m = mx.getResult(0);
          for (int64_t off = 1; off < kWarp; off *= 2)
            m = arith::MaximumFOp::create(b, loc, m, shuffleXor(b, loc, m, off));
          auto sum = scf::ForOp::create(
              b, loc, lane, count, h.idx(kWarp), ValueRange{h.f32(0)},
              [&](OpBuilder &b, Location loc, Value j, ValueRange a) {
                Value p = math::Exp2Op::create(
                    b, loc,
                    arith::SubFOp::create(b, loc, memref::LoadOp::create(b, loc, scores, ValueRange{g, j}), m));
                memref::StoreOp::create(b, loc, p, scores, ValueRange{g, j});
                scf::YieldOp::create(b, loc, ValueRange{arith::AddFOp::create(b, loc, a[0], p)});
              });
          Value l = butterflySum(b, loc, sum.getResult(0), kWarp);
          Value isLane0 = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, lane, h.idx(0));
          auto store = scf::IfOp::create(b, loc, isLane0, /*withElse=*/false);
          {
            OpBuilder::InsertionGuard guard(b);
            b.setInsertionPointToStart(store.thenBlock());
            memref::StoreOp::create(b, loc, m, ml, ValueRange{g, h.idx(0)});
            memref::StoreOp::create(b, loc, l, ml, ValueRange{g, h.idx(1)});
          }
          scf::YieldOp::create(b, loc);
        });
    gpu::BarrierOp::create(b, loc);
  }

  /// P.V: lane (chunk c, head slot r) of a warp, r = lane / chunks in
  /// [0, 32 / chunks): with G up to 32 / chunks heads, the lanes of a
  /// position cover every (chunk, head) pair and `subs` positions go side
  /// by side; with more heads, a lane takes heads r, r + 32 / chunks, ...
  /// Warps take positions in turn. No shuffles unless subs > 1.
  void weighValues(OpBuilder &b) {
    TileBuilder h{b, loc};
    int64_t headSlots = kWarp / chunks;
    int64_t subs = headSlots / std::min(groupSize, headSlots);
    int64_t perLane = groupSize > headSlots ? groupSize / headSlots : 1;
    Value c = arith::RemUIOp::create(b, loc, lane, h.idx(chunks));
    Value r = arith::DivUIOp::create(b, loc, lane, h.idx(chunks));
    Value gBase = subs > 1 ? arith::RemUIOp::create(b, loc, r, h.idx(groupSize)).getResult() : r;
    Value sub = subs > 1 ? arith::DivUIOp::create(b, loc, r, h.idx(groupSize)).getResult() : h.idx(0);
    SmallVector<Value> heads;
    for (int64_t k = 0; k < perLane; ++k)
      heads.push_back(arith::AddIOp::create(b, loc, gBase, h.idx(k * headSlots)));
    Value first = arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, warp, h.idx(subs)), sub);
    SmallVector<Value> init(perLane, zeroVec);
    auto pv = scf::ForOp::create(
        b, loc, first, count, arith::MulIOp::create(b, loc, warps, h.idx(subs)), init,
        [&](OpBuilder &b, Location loc, Value i, ValueRange acc) {
          Value v = ext(b, rowChunks(b, i, {c}, 1)[0]);
          SmallVector<Value> next;
          for (int64_t k = 0; k < perLane; ++k) {
            Value p = memref::LoadOp::create(b, loc, scores, ValueRange{heads[k], i});
            next.push_back(vector::FMAOp::create(b, loc, vector::BroadcastOp::create(b, loc, vecF32, p), v, acc[k]));
          }
          scf::YieldOp::create(b, loc, next);
        });
    SmallVector<Value> acc(pv.getResults());
    for (int64_t off = chunks * groupSize; off < kWarp; off *= 2)
      for (int64_t k = 0; k < perLane; ++k) {
        Value other = acc[k];
        for (int64_t e = 0; e < kVector; ++e) {
          Value x = vector::ExtractOp::create(b, loc, acc[k], ArrayRef<int64_t>{e});
          other = vector::InsertOp::create(b, loc, shuffleXor(b, loc, x, off), other, ArrayRef<int64_t>{e});
        }
        acc[k] = arith::AddFOp::create(b, loc, acc[k], other);
      }
    Value publish = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, sub, h.idx(0));
    auto pub = scf::IfOp::create(b, loc, publish, /*withElse=*/false);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(pub.thenBlock());
      Value d0 = arith::MulIOp::create(b, loc, c, h.idx(kVector));
      for (int64_t k = 0; k < perLane; ++k) {
        auto st = vector::StoreOp::create(b, loc, acc[k], part, ValueRange{warp, heads[k], d0});
        st.setAlignment(16);
      }
    }
    gpu::BarrierOp::create(b, loc);
  }

  /// Sum the warps, divide, store o and lse.
  void store(OpBuilder &b) {
    TileBuilder h{b, loc};
    Value negInf = h.f32(-std::numeric_limits<float>::infinity());
    threadLoop(b, loc, h.idx(groupSize * dim), [&](OpBuilder &b, Location loc, Value e) {
      TileBuilder h{b, loc};
      Value g = arith::DivUIOp::create(b, loc, e, h.idx(dim));
      Value d = arith::RemUIOp::create(b, loc, e, h.idx(dim));
      auto total = scf::ForOp::create(
          b, loc, h.idx(0), warps, h.idx(1), ValueRange{h.f32(0)},
          [&](OpBuilder &b, Location loc, Value w, ValueRange a) {
            scf::YieldOp::create(b, loc,
                                 ValueRange{arith::AddFOp::create(
                                     b, loc, a[0], memref::LoadOp::create(b, loc, part, ValueRange{w, g, d}))});
          });
      Value m = memref::LoadOp::create(b, loc, ml, ValueRange{g, h.idx(0)});
      Value l = memref::LoadOp::create(b, loc, ml, ValueRange{g, h.idx(1)});
      Value empty = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLE, l, h.f32(0));
      Value safeL = arith::SelectOp::create(b, loc, empty, h.f32(1), l);
      Value out = arith::SelectOp::create(b, loc, empty, h.f32(0),
                                          arith::DivFOp::create(b, loc, total.getResult(0), safeL));
      Value head = arith::AddIOp::create(b, loc, headBase, g);
      memref::StoreOp::create(b, loc, out, op.getO(), ValueRange{op.getSplit(), head, d});
      Value isD0 = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, d, h.idx(0));
      auto storeLse = scf::IfOp::create(b, loc, isD0, /*withElse=*/false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(storeLse.thenBlock());
      Value lse = arith::MulFOp::create(
          b, loc, arith::AddFOp::create(b, loc, m, math::Log2Op::create(b, loc, safeL)), h.f32(M_LN2));
      lse = arith::SelectOp::create(b, loc, empty, negInf, lse);
      memref::StoreOp::create(b, loc, lse, op.getLse(), ValueRange{op.getSplit(), head});
    });
  }
};

} // namespace

bool stagedSplitFits(AttentionSplitOp op, int64_t threads, int64_t stageBytes) {
  MemRefType qType = op.getQ().getType(), kType = op.getK().getType();
  int64_t dim = qType.getDimSize(1);
  if (stageBytes <= 0 || !op.getStable() || op.getSubsplits() != 1 || qType.isDynamicDim(0) ||
      kType.isDynamicDim(1) || (dim != 64 && dim != 128) || !kType.getElementType().isBF16() ||
      !op.getV().getType().getElementType().isBF16())
    return false;
  auto task = op->getParentOfType<TaskOp>();
  // The stage and the score rows are sized for the longest split the op
  // can take: a constant split length, or a bound of a computed one.
  std::optional<int64_t> splitLen = constantUpperBound(op.getSplitLen());
  if (!task || !splitLen || *splitLen < 1)
    return false;
  int64_t groupSize = qType.getDimSize(0) / kType.getDimSize(1);
  int64_t maxWarps = (threads > 0 ? threads : 1024) / kWarp;
  int64_t chunks = dim / kVector; // 16-byte chunks per row: 8 or 16
  int64_t staticBytes =
      4 * (groupSize * dim + groupSize * *splitLen + 2 * groupSize + maxWarps * groupSize * dim);
  // The whole split must fit: every row of it goes into the stage. (An
  // earlier version read the rows past the budget from the cache, a whole
  // row per thread, at half the speed of the pipelined loop: split length
  // 1024 in a 128 KB budget.)
  int64_t stageRows = *splitLen;
  if (stageBytes < 4 * dim * stageRows)
    return false;
  // P.V puts (chunk, head) pairs on a warp's lanes: G must divide 32 /
  // chunks or be a multiple of it.
  int64_t slots = kWarp / chunks;
  bool headsFit = groupSize <= slots ? slots % groupSize == 0 : groupSize % slots == 0;
  if (maxWarps < 1 || groupSize < 1 || groupSize > 16 || !headsFit || staticBytes > 48 * 1024)
    return false;
  return prefetchPoint(op,
                       {op.getK(), op.getV(), op.getKvHead(), op.getSplit(), op.getSplitLen(), op.getLen(),
                        op.getStable()},
                       /*inIf=*/true, /*dryRun=*/true) != nullptr;
}

void lowerAttentionSplitStaged(AttentionSplitOp op, int64_t threads) {
  MemRefType qType = op.getQ().getType(), kType = op.getK().getType();
  int64_t dim = qType.getDimSize(1);
  auto task = op->getParentOfType<TaskOp>();
  std::optional<int64_t> splitLen = constantUpperBound(op.getSplitLen());
  int64_t groupSize = qType.getDimSize(0) / kType.getDimSize(1);
  int64_t maxWarps = (threads > 0 ? threads : 1024) / kWarp;
  int64_t chunks = dim / kVector; // 16-byte chunks per row: 8 or 16
  int64_t stageRows = *splitLen;
  Operation *stageAt = prefetchPoint(op,
                                     {op.getK(), op.getV(), op.getKvHead(), op.getSplit(), op.getSplitLen(),
                                      op.getLen(), op.getStable()},
                                     /*inIf=*/true);
  assert(stageAt && "the staged form checked its stage point");
  StagedSplit s(op, task, groupSize, dim, *splitLen, maxWarps, chunks, stageRows);
  s.stageBeforeWait(stageAt);

  OpBuilder b(op);
  s.allocate(b);
  s.stageRest(b);
  s.computeScores(b);
  s.softmax(b);
  s.weighValues(b);
  s.store(b);
  // Later ops reuse the shared buffers.
  gpu::BarrierOp::create(b, s.loc);
  op.erase();
}

} // namespace mlir::et::tile
