//===- LowerNorms.cpp - et.rmsnorm and et.silu_mul --------------------------===//
//
// Row-wise normalization and the MLP activation.
//
//===----------------------------------------------------------------------===//

#include "TileLowering.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "llvm/ADT/SetVector.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::et;

namespace mlir::et::tile {

/// Elements of silu_mul per thread and trip: their loads go out together.
constexpr int64_t kSiluUnroll = 8;

/// y = silu(gate) * up over the rows and the column range [col0, col0 +
/// cols): the (row, column) elements, flattened, strided by thread,
/// kSiluUnroll per thread and trip with every load of a trip before its
/// stores (y may alias gate or up as far as LLVM and ptxas know, so they
/// would not move a later element's loads above an earlier one's store).
/// One element per trip left the prefill's 128-row tiles latency-bound:
/// 1.9 ms for 128 x 8192 elements on the H200 (docs/experiments/).
static void lowerSiluMul(SiluMulOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  TileBuilder h{b, loc};
  Value tid = ThreadIdOp::create(b, loc, b.getIndexType());
  Value nt = NumThreadsOp::create(b, loc, b.getIndexType());
  Value m = memref::DimOp::create(b, loc, op.getGate(), 0);
  Value cols = memref::DimOp::create(b, loc, op.getGate(), 1);
  Value end = arith::MinSIOp::create(
      b, loc, arith::AddIOp::create(b, loc, op.getCol0(), op.getCols()), cols);
  Value width = arith::MaxSIOp::create(b, loc, arith::SubIOp::create(b, loc, end, op.getCol0()), h.idx(0));
  Value total = arith::MulIOp::create(b, loc, m, width);
  Value last = arith::SubIOp::create(b, loc, total, h.idx(1));
  Value step = arith::MulIOp::create(b, loc, nt, h.idx(kSiluUnroll));
  Type outType = op.getY().getType().getElementType();
  // An approximate quotient and exponential (div.approx, ex2.approx on the
  // GPU; gatedActivation): the result is rounded to bf16 for the next GEMM
  // anyway, and the IEEE division was most of the loop's instructions.
  scf::ForOp::create(
      b, loc, tid, total, step, ValueRange{},
      [&](OpBuilder &b, Location loc, Value base, ValueRange) {
        SmallVector<Value> rows, colsAt, inside, gates, ups;
        Value e = base;
        for (int64_t u = 0; u < kSiluUnroll; ++u) {
          if (u)
            e = arith::AddIOp::create(b, loc, e, nt);
          inside.push_back(arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, e, total));
          Value at = arith::MinUIOp::create(b, loc, e, last);
          rows.push_back(arith::DivUIOp::create(b, loc, at, width));
          colsAt.push_back(
              arith::AddIOp::create(b, loc, op.getCol0(), arith::RemUIOp::create(b, loc, at, width)));
          gates.push_back(memref::LoadOp::create(b, loc, op.getGate(), ValueRange{rows.back(), colsAt.back()}));
          ups.push_back(memref::LoadOp::create(b, loc, op.getUp(), ValueRange{rows.back(), colsAt.back()}));
        }
        for (int64_t u = 0; u < kSiluUnroll; ++u) {
          Value g = toF32(b, loc, gates[u]), up = toF32(b, loc, ups[u]);
          Value y = fromF32(b, loc, gatedActivation(b, loc, g, up), outType);
          // The trip's first element is always inside.
          if (u == 0) {
            memref::StoreOp::create(b, loc, y, op.getY(), ValueRange{rows[u], colsAt[u]});
            continue;
          }
          auto guard = scf::IfOp::create(b, loc, inside[u], /*withElse=*/false);
          OpBuilder::InsertionGuard g2(b);
          b.setInsertionPointToStart(guard.thenBlock());
          memref::StoreOp::create(b, loc, y, op.getY(), ValueRange{rows[u], colsAt[u]});
        }
        scf::YieldOp::create(b, loc);
      });
  op.erase();
}

/// RMSNorm: tokens spread over groups of `lanes` threads (a warp on the GPU,
/// one thread on the CPU); each group sums squares over its lanes, shares the
/// total, then scales.
/// Columns per thread and iteration of RMSNorm's passes: their loads go out
/// together instead of one L2 round trip per column.
constexpr int64_t kThreadUnroll = 4;

/// The columns j0, j0 + step, ... (kThreadUnroll of them) clamped to
/// hidden - 1, and whether each is below hidden.
static void unrolledColumns(OpBuilder &b, Location loc, Value j0, Value step, Value hidden,
                     SmallVectorImpl<Value> &cols, SmallVectorImpl<Value> &ins) {
  Value last = arith::SubIOp::create(b, loc, hidden, arith::ConstantIndexOp::create(b, loc, 1));
  Value j = j0;
  for (int64_t u = 0; u < kThreadUnroll; ++u) {
    if (u)
      j = arith::AddIOp::create(b, loc, j, step);
    cols.push_back(arith::MinUIOp::create(b, loc, j, last));
    ins.push_back(arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, j, hidden));
  }
}

/// RMSNorm's first pass over columns first, first + step, ... of the tokens
/// `toks`: the sum of squares of x (plus the residual, stored back as the new
/// residual stream when there is one), one per token. kThreadUnroll columns
/// per iteration, every token's loads first; columns past hidden clamp and
/// count zero.
static SmallVector<Value> rmsnormSquares(OpBuilder &b, Location loc, RMSNormOp op, ArrayRef<Value> toks, Value first,
                                  Value step, Value hidden) {
  Value residual = op.getResidual();
  Value zero = arith::ConstantFloatOp::create(b, loc, b.getF32Type(), APFloat(0.0f));
  Value stride = arith::MulIOp::create(b, loc, step, arith::ConstantIndexOp::create(b, loc, kThreadUnroll));
  SmallVector<Value> inits(toks.size(), zero);
  auto sum = scf::ForOp::create(
      b, loc, first, hidden, stride, inits,
      [&](OpBuilder &b, Location loc, Value j0, ValueRange acc) {
        SmallVector<Value> cols, ins, vals;
        unrolledColumns(b, loc, j0, step, hidden, cols, ins);
        for (Value tok : toks)
          for (Value c : cols) {
            Value v = toF32(b, loc, memref::LoadOp::create(b, loc, op.getX(), ValueRange{tok, c}));
            if (residual)
              v = arith::AddFOp::create(b, loc, v, memref::LoadOp::create(b, loc, residual, ValueRange{tok, c}));
            vals.push_back(v);
          }
        SmallVector<Value> totals;
        for (auto [t, tok] : llvm::enumerate(toks)) {
          Value total = acc[t];
          for (int64_t u = 0; u < kThreadUnroll; ++u) {
            Value val = vals[t * kThreadUnroll + u];
            if (residual) {
              auto store = scf::IfOp::create(b, loc, ins[u], /*withElse=*/false);
              OpBuilder::InsertionGuard guard(b);
              b.setInsertionPointToStart(store.thenBlock());
              memref::StoreOp::create(b, loc, val, residual, ValueRange{tok, cols[u]});
            }
            Value v = arith::SelectOp::create(b, loc, ins[u], val, zero);
            total = math::FmaOp::create(b, loc, v, v, total);
          }
          totals.push_back(total);
        }
        scf::YieldOp::create(b, loc, totals);
      });
  return SmallVector<Value>(sum.getResults());
}

/// RMSNorm's second pass over the same columns: y = h * inv * w for each of
/// the tokens `toks` with its `invs`, h the residual stream written by the
/// first pass (by the same thread) or x; every load first (w once for all
/// tokens), then the guarded stores.
static void rmsnormScale(OpBuilder &b, Location loc, RMSNormOp op, ArrayRef<Value> toks, Value first, Value step,
                  Value hidden, ArrayRef<Value> invs, ArrayRef<Value> wEarly = {}) {
  Value residual = op.getResidual();
  Type outType = op.getY().getType().getElementType();
  Value stride = arith::MulIOp::create(b, loc, step, arith::ConstantIndexOp::create(b, loc, kThreadUnroll));
  scf::ForOp::create(
      b, loc, first, hidden, stride, ValueRange{},
      [&](OpBuilder &b, Location loc, Value j0, ValueRange) {
        SmallVector<Value> cols, ins;
        unrolledColumns(b, loc, j0, step, hidden, cols, ins);
        // ys[u * tokens + t]: column u of token t.
        SmallVector<Value> ys;
        for (auto [u, c] : llvm::enumerate(cols)) {
          SmallVector<Value> vs;
          for (Value tok : toks)
            vs.push_back(residual ? memref::LoadOp::create(b, loc, residual, ValueRange{tok, c}).getResult()
                                  : toF32(b, loc, memref::LoadOp::create(b, loc, op.getX(), ValueRange{tok, c})));
          Value w = !wEarly.empty() ? wEarly[u]
                                    : toF32(b, loc, memref::LoadOp::create(b, loc, op.getW(), ValueRange{c}));
          for (auto [v, inv] : llvm::zip(vs, invs))
            ys.push_back(arith::MulFOp::create(b, loc, arith::MulFOp::create(b, loc, v, inv), w));
        }
        for (int64_t u = 0; u < kThreadUnroll; ++u) {
          auto store = scf::IfOp::create(b, loc, ins[u], /*withElse=*/false);
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(store.thenBlock());
          for (auto [t, tok] : llvm::enumerate(toks))
            memref::StoreOp::create(b, loc, fromF32(b, loc, ys[u * toks.size() + t], outType), op.getY(),
                                    ValueRange{tok, cols[u]});
        }
        scf::YieldOp::create(b, loc);
      });
}

/// GPU RMSNorm of wide rows (static H >= 512): every thread of the worker
/// works on each token. Threads stride over the columns, warps reduce with
/// shuffles, and the warps' sums meet in shared memory. One warp per row
/// would walk a 2048-wide row in 64 dependent steps (latency-bound); here it
/// is a few loads per thread. Tokens go in chunks of up to kNormChunk: the
/// sums of a whole chunk are taken before one barrier, then each warp adds
/// up a token's warp sums with one shuffle butterfly and scales the row.
/// With `width` (rows-in-flight, a divisor of kNormChunk) above 1, tokens
/// of a chunk go `width` at a time with all their loads in flight together
/// (a prompt's 8-row tiles walked their tokens one after another: two L2
/// round trips per token and pass), then the rest one at a time.
static bool lowerRMSNormBlock(RMSNormOp op, int64_t width, int64_t threads) {
  MemRefType xType = op.getX().getType();
  auto task = op->getParentOfType<TaskOp>();
  if (!task || xType.isDynamicDim(1) || xType.getDimSize(1) < 512)
    return false;
  Location loc = op.getLoc();
  // Weights that no task writes, of a row that each thread covers in one
  // trip of the scale pass (hidden <= threads x kThreadUnroll): thread t's
  // weights (columns t, t + threads, ...) are loaded before the task's
  // first wait, so the scale pass after the barrier does not wait on
  // another L2 round trip for them.
  SmallVector<Value> wEarly;
  if (threads > 0 && xType.getDimSize(1) <= threads * kThreadUnroll && op->getParentOp() == task &&
      isReadOnly(op.getW()))
    if (Operation *at = prefetchPoint(op, {op.getW()}, /*inIf=*/false)) {
      OpBuilder e(at);
      TileBuilder eh{e, loc};
      Value tid = ThreadIdOp::create(e, loc, e.getIndexType());
      for (int64_t u = 0; u < kThreadUnroll; ++u) {
        Value c = arith::MinUIOp::create(e, loc, arith::AddIOp::create(e, loc, tid, eh.idx(u * threads)),
                                         eh.idx(xType.getDimSize(1) - 1));
        wEarly.push_back(toF32(e, loc, memref::LoadOp::create(e, loc, op.getW(), ValueRange{c})));
      }
    }
  OpBuilder b(op);
  TileBuilder h{b, loc};
  Value partials = workgroupBuffer(task, loc, {kNormChunk, kWarp}, b.getF32Type());
  Groups g = h.groups(kWarp);
  Value m = memref::DimOp::create(b, loc, op.getX(), 0);
  Value hidden = h.idx(xType.getDimSize(1));
  // Tokens [0, n) of a chunk: groups of `width` up to `whole`, then one by
  // one; body(is) gets a group's indices within the chunk.
  auto eachGroup = [&](OpBuilder &b, Location loc, Value whole, Value n,
                       function_ref<void(OpBuilder &, Location, ArrayRef<Value>)> body) {
    auto loop = [&](Value lo, Value hi, int64_t size) {
      scf::ForOp::create(b, loc, lo, hi, arith::ConstantIndexOp::create(b, loc, size), ValueRange{},
                         [&](OpBuilder &b, Location loc, Value i0, ValueRange) {
                           SmallVector<Value> is{i0};
                           for (int64_t t = 1; t < size; ++t)
                             is.push_back(arith::AddIOp::create(b, loc, i0, arith::ConstantIndexOp::create(b, loc, t)));
                           body(b, loc, is);
                           scf::YieldOp::create(b, loc);
                         });
    };
    if (width > 1)
      loop(arith::ConstantIndexOp::create(b, loc, 0), whole, width);
    loop(whole, n, 1);
  };
  scf::ForOp::create(
      b, loc, h.idx(0), m, h.idx(kNormChunk), ValueRange{},
      [&](OpBuilder &b, Location loc, Value c0, ValueRange) {
        TileBuilder h{b, loc};
        Value n = arith::MinUIOp::create(b, loc, h.idx(kNormChunk),
                                         arith::SubIOp::create(b, loc, m, c0));
        // [0, whole) in groups of `width`, [whole, n) one by one.
        Value whole = width == 1 ? h.idx(0)
                                 : arith::SubIOp::create(b, loc, n, arith::RemUIOp::create(b, loc, n, h.idx(width)))
                                       .getResult();
        Value isLane0 = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, g.lane, h.idx(0));
        eachGroup(b, loc, whole, n, [&](OpBuilder &b, Location loc, ArrayRef<Value> is) {
          SmallVector<Value> toks;
          for (Value i : is)
            toks.push_back(arith::AddIOp::create(b, loc, c0, i));
          SmallVector<Value> partial = rmsnormSquares(b, loc, op, toks, g.tid, g.threads, hidden);
          SmallVector<Value> warpSums;
          for (Value p : partial)
            warpSums.push_back(butterflySum(b, loc, p, kWarp));
          auto store = scf::IfOp::create(b, loc, isLane0, /*withElse=*/false);
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(store.thenBlock());
          for (auto [i, s] : llvm::zip(is, warpSums))
            memref::StoreOp::create(b, loc, s, partials, ValueRange{i, g.group});
        });
        gpu::BarrierOp::create(b, loc);
        eachGroup(b, loc, whole, n, [&](OpBuilder &b, Location loc, ArrayRef<Value> is) {
          TileBuilder h{b, loc};
          // Lane l holds warp l's sum (warps <= 32), then a butterfly.
          Value has = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, g.lane, g.groups);
          Value safe = arith::SelectOp::create(b, loc, has, g.lane, h.idx(0));
          SmallVector<Value> toks, invs, vs;
          for (Value i : is)
            vs.push_back(arith::SelectOp::create(
                b, loc, has, memref::LoadOp::create(b, loc, partials, ValueRange{i, safe}), h.f32(0)));
          SmallVector<Value> totals;
          for (Value v : vs)
            totals.push_back(butterflySum(b, loc, v, kWarp));
          for (auto [i, total] : llvm::zip(is, totals)) {
            invs.push_back(inverseRMS(b, loc, total, hidden, op.getEps().convertToFloat()));
            toks.push_back(arith::AddIOp::create(b, loc, c0, i));
          }
          // Each thread re-reads only the columns it summed above.
          rmsnormScale(b, loc, op, toks, g.tid, g.threads, hidden, invs, wEarly);
        });
        // The next chunk reuses the partial sums.
        gpu::BarrierOp::create(b, loc);
        scf::YieldOp::create(b, loc);
      });
  op.erase();
  return true;
}

/// Narrow rows (a warp per row on the GPU, a thread on the CPU). On the GPU
/// with `width` (rows-in-flight) above 1, a warp takes `width` rows at a
/// time, all their loads in flight, while every warp has that many left (a
/// prompt tile's per-head norms: 128 rows of 128 on 8 warps), then one at a
/// time.
static void lowerRMSNorm(RMSNormOp op, bool gpu, int64_t width, int64_t threads) {
  if (gpu && lowerRMSNormBlock(op, width, threads))
    return;
  OpBuilder b(op);
  Location loc = op.getLoc();
  TileBuilder h{b, loc};
  int64_t lanes = gpu ? kWarp : 1;
  Groups g = h.groups(lanes);
  Value m = memref::DimOp::create(b, loc, op.getX(), 0);
  Value hidden = memref::DimOp::create(b, loc, op.getX(), 1);
  // Rows tok, tok + groups, ... (`width` of them) of one warp.
  auto rows = [&](OpBuilder &b, Location loc, Value tok, int64_t width) {
    SmallVector<Value> toks{tok};
    for (int64_t t = 1; t < width; ++t)
      toks.push_back(arith::AddIOp::create(b, loc, toks.back(), g.groups));
    SmallVector<Value> invs;
    for (Value sum : rmsnormSquares(b, loc, op, toks, g.lane, h.idx(lanes), hidden))
      invs.push_back(inverseRMS(b, loc, butterflySum(b, loc, sum, lanes), hidden, op.getEps().convertToFloat()));
    rmsnormScale(b, loc, op, toks, g.lane, h.idx(lanes), hidden, invs);
  };
  Value rest = g.group;
  if (gpu && width > 1) {
    // [0, whole): whole rounds of `width` rows for every warp.
    Value round = arith::MulIOp::create(b, loc, g.groups, h.idx(width));
    Value whole = arith::SubIOp::create(b, loc, m, arith::RemUIOp::create(b, loc, m, round));
    scf::ForOp::create(b, loc, g.group, whole, round, ValueRange{},
                       [&](OpBuilder &b, Location loc, Value tok, ValueRange) {
                         rows(b, loc, tok, width);
                         scf::YieldOp::create(b, loc);
                       });
    rest = arith::AddIOp::create(b, loc, whole, g.group);
  }
  scf::ForOp::create(b, loc, rest, m, g.groups, ValueRange{},
                     [&](OpBuilder &b, Location loc, Value tok, ValueRange) {
                       rows(b, loc, tok, 1);
                       scf::YieldOp::create(b, loc);
                     });
  op.erase();
}

namespace {

/// et.rmsnorm: the whole worker on each token's row where the row is wide,
/// else a warp per row (GPU); loops on the host.
struct RMSNormLowering : public TileOpLowering<RMSNormOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult matchAndRewrite(RMSNormOp op, PatternRewriter &) const override {
    lowerRMSNorm(op, options.gpu, options.rowsInFlight, options.threads);
    return success();
  }
};

/// et.silu_mul: elements strided by thread, kSiluUnroll per trip.
struct SiluMulLowering : public TileOpLowering<SiluMulOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult matchAndRewrite(SiluMulOp op, PatternRewriter &) const override {
    lowerSiluMul(op);
    return success();
  }
};

} // namespace

void populateNormLoweringPatterns(RewritePatternSet &patterns, const TileLoweringOptions &options) {
  patterns.add<RMSNormLowering, SiluMulLowering>(patterns.getContext(), options);
}
} // namespace mlir::et::tile
