//===- LowerTileOps.cpp - Tile compute ops to loops -----------------------===//
//
// Implements et-lower-tile-ops: rewrites et.linear (and the other tile
// compute ops) into loops over the worker's threads, for the GPU (warps,
// vector loads, shuffles) or the CPU (scalar loops).
//
//===----------------------------------------------------------------------===//

#include "EventTensor/Conversion/Passes.h"

#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Builders.h"

namespace mlir::et {
#define GEN_PASS_DEF_LOWERTILEOPSPASS
#include "EventTensor/Conversion/Passes.h.inc"
} // namespace mlir::et

using namespace mlir;
using namespace mlir::et;

namespace {

constexpr int64_t kWarp = 32;
constexpr int64_t kVector = 8; // bf16 elements per 16-byte load

struct Builder {
  OpBuilder &b;
  Location loc;
  Value idx(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }
  Value f32(double v) {
    return arith::ConstantFloatOp::create(b, loc, b.getF32Type(),
                                          APFloat(static_cast<float>(v)));
  }
};

/// y[m, n] for the rows of this thread group, CPU: scalar loops over rows
/// strided by thread.
void lowerLinearCPU(LinearOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  Builder h{b, loc};
  Value tid = ThreadIdOp::create(b, loc, b.getIndexType());
  Value nt = NumThreadsOp::create(b, loc, b.getIndexType());
  Value n = memref::DimOp::create(b, loc, op.getW(), 0);
  Value k = memref::DimOp::create(b, loc, op.getW(), 1);
  Value m = memref::DimOp::create(b, loc, op.getX(), 0);
  Value end = arith::MinSIOp::create(
      b, loc, arith::AddIOp::create(b, loc, op.getRow0(), op.getRows()), n);
  Value first = arith::AddIOp::create(b, loc, op.getRow0(), tid);
  Type outType = op.getY().getType().getElementType();
  scf::ForOp::create(
      b, loc, first, end, nt, ValueRange{},
      [&](OpBuilder &b, Location loc, Value row, ValueRange) {
        scf::ForOp::create(
            b, loc, h.idx(0), m, h.idx(1), ValueRange{},
            [&](OpBuilder &b, Location loc, Value tok, ValueRange) {
              auto sum = scf::ForOp::create(
                  b, loc, h.idx(0), k, h.idx(1), ValueRange{h.f32(0)},
                  [&](OpBuilder &b, Location loc, Value kk, ValueRange acc) {
                    Value xv = memref::LoadOp::create(b, loc, op.getX(),
                                                      ValueRange{tok, kk});
                    Value wv = memref::LoadOp::create(b, loc, op.getW(),
                                                      ValueRange{row, kk});
                    Value xf = arith::ExtFOp::create(b, loc, b.getF32Type(), xv);
                    Value wf = arith::ExtFOp::create(b, loc, b.getF32Type(), wv);
                    Value p = arith::MulFOp::create(b, loc, xf, wf);
                    scf::YieldOp::create(
                        b, loc, ValueRange{arith::AddFOp::create(b, loc, acc[0], p)});
                  });
              Value out = sum.getResult(0);
              if (!outType.isF32())
                out = arith::TruncFOp::create(b, loc, outType, out);
              memref::StoreOp::create(b, loc, out, op.getY(),
                                      ValueRange{tok, row});
              scf::YieldOp::create(b, loc);
            });
        scf::YieldOp::create(b, loc);
      });
  op.erase();
}

/// GPU: one warp per row; each lane accumulates vector<8xf32> partial sums
/// of 16-byte chunks (`unroll` loads in flight), then the warp sums lanes
/// with a shuffle butterfly and lane 0 stores.
void lowerLinearGPU(LinearOp op, int64_t unroll) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  Builder h{b, loc};
  MemRefType xType = op.getX().getType();
  Type f32 = b.getF32Type();
  auto vecBF16 = VectorType::get({kVector}, b.getBF16Type());
  auto vecF32 = VectorType::get({kVector}, f32);
  Type outType = op.getY().getType().getElementType();

  Value tid = ThreadIdOp::create(b, loc, b.getIndexType());
  Value nt = NumThreadsOp::create(b, loc, b.getIndexType());
  Value lane = arith::RemUIOp::create(b, loc, tid, h.idx(kWarp));
  Value warp = arith::DivUIOp::create(b, loc, tid, h.idx(kWarp));
  Value warps = arith::MaxUIOp::create(
      b, loc, arith::DivUIOp::create(b, loc, nt, h.idx(kWarp)), h.idx(1));
  Value n = memref::DimOp::create(b, loc, op.getW(), 0);
  Value k = memref::DimOp::create(b, loc, op.getW(), 1);
  Value end = arith::MinSIOp::create(
      b, loc, arith::AddIOp::create(b, loc, op.getRow0(), op.getRows()), n);
  Value first = arith::AddIOp::create(b, loc, op.getRow0(), warp);
  Value laneK = arith::MulIOp::create(b, loc, lane, h.idx(kVector));
  int64_t step = kWarp * kVector; // elements one warp covers per load
  // The unrolled part: K rounded down to a multiple of step * unroll.
  Value big = h.idx(step * unroll);
  Value kMain = arith::MulIOp::create(
      b, loc, arith::DivUIOp::create(b, loc, k, big), big);

  // Tokens: unrolled accumulators when M is static, else one at a time.
  bool staticM = !xType.isDynamicDim(0);
  int64_t mCount = staticM ? xType.getDimSize(0) : 1;

  auto loadVec = [&](OpBuilder &b, Value mem, Value r, Value c) {
    auto load = vector::LoadOp::create(b, loc, vecBF16, mem, ValueRange{r, c});
    load.setAlignment(16);
    return arith::ExtFOp::create(b, loc, vecF32, load.getResult());
  };

  auto rowBody = [&](OpBuilder &b, Value row, Value tokBase) {
    Value zero = arith::ConstantOp::create(
        b, loc, vecF32, DenseElementsAttr::get(vecF32, APFloat(0.0f)));
    SmallVector<Value> init(mCount, zero);
    auto tok = [&](int64_t i) {
      return staticM ? h.idx(i) : tokBase;
    };
    // Main loop: `unroll` independent 16-byte loads of w per lane, then the
    // FMAs with every token.
    auto mainLoop = scf::ForOp::create(
        b, loc, laneK, kMain, big, init,
        [&](OpBuilder &b, Location loc, Value k0, ValueRange accs) {
          SmallVector<Value> ws, cols;
          for (int64_t u = 0; u < unroll; ++u) {
            Value col = arith::AddIOp::create(b, loc, k0, h.idx(u * step));
            cols.push_back(col);
            ws.push_back(loadVec(b, op.getW(), row, col));
          }
          SmallVector<Value> next(accs.begin(), accs.end());
          for (int64_t u = 0; u < unroll; ++u)
            for (int64_t i = 0; i < mCount; ++i) {
              Value xv = loadVec(b, op.getX(), tok(i), cols[u]);
              next[i] = vector::FMAOp::create(b, loc, ws[u], xv, next[i]);
            }
          scf::YieldOp::create(b, loc, next);
        });
    // Remainder: one load per lane per step.
    Value restStart = arith::AddIOp::create(b, loc, kMain, laneK);
    auto restLoop = scf::ForOp::create(
        b, loc, restStart, k, h.idx(step), mainLoop.getResults(),
        [&](OpBuilder &b, Location loc, Value col, ValueRange accs) {
          Value wv = loadVec(b, op.getW(), row, col);
          SmallVector<Value> next(accs.begin(), accs.end());
          for (int64_t i = 0; i < mCount; ++i) {
            Value xv = loadVec(b, op.getX(), tok(i), col);
            next[i] = vector::FMAOp::create(b, loc, wv, xv, next[i]);
          }
          scf::YieldOp::create(b, loc, next);
        });
    Value isLane0 =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, lane, h.idx(0));
    for (int64_t i = 0; i < mCount; ++i) {
      Value s = vector::ReductionOp::create(b, loc, vector::CombiningKind::ADD,
                                            restLoop.getResult(i));
      for (int64_t offset = kWarp / 2; offset >= 1; offset /= 2) {
        auto shuffle = gpu::ShuffleOp::create(
            b, loc, s, arith::ConstantIntOp::create(b, loc, b.getI32Type(), offset),
            arith::ConstantIntOp::create(b, loc, b.getI32Type(), kWarp),
            gpu::ShuffleMode::XOR);
        s = arith::AddFOp::create(b, loc, s, shuffle.getShuffleResult());
      }
      auto store = scf::IfOp::create(b, loc, isLane0, /*withElse=*/false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(store.thenBlock());
      Value out = s;
      if (!outType.isF32())
        out = arith::TruncFOp::create(b, loc, outType, out);
      memref::StoreOp::create(b, loc, out, op.getY(), ValueRange{tok(i), row});
    }
  };

  scf::ForOp::create(
      b, loc, first, end, warps, ValueRange{},
      [&](OpBuilder &b, Location loc, Value row, ValueRange) {
        if (staticM) {
          rowBody(b, row, Value());
        } else {
          Value m = memref::DimOp::create(b, loc, op.getX(), 0);
          scf::ForOp::create(
              b, loc, h.idx(0), m, h.idx(1), ValueRange{},
              [&](OpBuilder &b, Location loc, Value t, ValueRange) {
                rowBody(b, row, t);
                scf::YieldOp::create(b, loc);
              });
        }
        scf::YieldOp::create(b, loc);
      });
  op.erase();
}

/// f32 value of a bf16 or f32 element.
Value toF32(OpBuilder &b, Location loc, Value v) {
  if (v.getType().isF32())
    return v;
  return arith::ExtFOp::create(b, loc, b.getF32Type(), v);
}
Value fromF32(OpBuilder &b, Location loc, Value v, Type t) {
  if (t.isF32())
    return v;
  return arith::TruncFOp::create(b, loc, t, v);
}

/// y = silu(gate) * up, columns strided by thread.
void lowerSiluMul(SiluMulOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  Builder h{b, loc};
  Value tid = ThreadIdOp::create(b, loc, b.getIndexType());
  Value nt = NumThreadsOp::create(b, loc, b.getIndexType());
  Value m = memref::DimOp::create(b, loc, op.getGate(), 0);
  Value cols = memref::DimOp::create(b, loc, op.getGate(), 1);
  Value end = arith::MinSIOp::create(
      b, loc, arith::AddIOp::create(b, loc, op.getCol0(), op.getCols()), cols);
  Value first = arith::AddIOp::create(b, loc, op.getCol0(), tid);
  Type outType = op.getY().getType().getElementType();
  scf::ForOp::create(
      b, loc, h.idx(0), m, h.idx(1), ValueRange{},
      [&](OpBuilder &b, Location loc, Value tok, ValueRange) {
        scf::ForOp::create(
            b, loc, first, end, nt, ValueRange{},
            [&](OpBuilder &b, Location loc, Value j, ValueRange) {
              Value g = toF32(b, loc, memref::LoadOp::create(b, loc, op.getGate(), ValueRange{tok, j}));
              Value u = toF32(b, loc, memref::LoadOp::create(b, loc, op.getUp(), ValueRange{tok, j}));
              Value e = math::ExpOp::create(b, loc, arith::NegFOp::create(b, loc, g));
              Value den = arith::AddFOp::create(b, loc, h.f32(1.0), e);
              Value silu = arith::DivFOp::create(b, loc, g, den);
              Value y = arith::MulFOp::create(b, loc, silu, u);
              memref::StoreOp::create(b, loc, fromF32(b, loc, y, outType), op.getY(), ValueRange{tok, j});
              scf::YieldOp::create(b, loc);
            });
        scf::YieldOp::create(b, loc);
      });
  op.erase();
}

/// RMSNorm: tokens spread over groups of `lanes` threads (a warp on the GPU,
/// one thread on the CPU); each group sums squares over its lanes, shares the
/// total, then scales.
void lowerRMSNorm(RMSNormOp op, bool gpu) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  Builder h{b, loc};
  Value tid = ThreadIdOp::create(b, loc, b.getIndexType());
  Value nt = NumThreadsOp::create(b, loc, b.getIndexType());
  int64_t lanes = gpu ? kWarp : 1;
  Value lane = gpu ? arith::RemUIOp::create(b, loc, tid, h.idx(kWarp)).getResult() : h.idx(0);
  Value group = gpu ? arith::DivUIOp::create(b, loc, tid, h.idx(kWarp)).getResult() : tid;
  Value groups = gpu ? arith::MaxUIOp::create(b, loc, arith::DivUIOp::create(b, loc, nt, h.idx(kWarp)),
                                              h.idx(1)).getResult()
                     : nt;
  Value m = memref::DimOp::create(b, loc, op.getX(), 0);
  Value hidden = memref::DimOp::create(b, loc, op.getX(), 1);
  Type outType = op.getY().getType().getElementType();
  Value residual = op.getResidual();
  float eps = op.getEps().convertToFloat();
  scf::ForOp::create(
      b, loc, group, m, groups, ValueRange{},
      [&](OpBuilder &b, Location loc, Value tok, ValueRange) {
        auto sum = scf::ForOp::create(
            b, loc, lane, hidden, h.idx(lanes), ValueRange{h.f32(0)},
            [&](OpBuilder &b, Location loc, Value j, ValueRange acc) {
              Value v = toF32(b, loc, memref::LoadOp::create(b, loc, op.getX(), ValueRange{tok, j}));
              if (residual) {
                Value r = memref::LoadOp::create(b, loc, residual, ValueRange{tok, j});
                v = arith::AddFOp::create(b, loc, v, r);
                memref::StoreOp::create(b, loc, v, residual, ValueRange{tok, j});
              }
              Value sq = arith::MulFOp::create(b, loc, v, v);
              scf::YieldOp::create(b, loc, ValueRange{arith::AddFOp::create(b, loc, acc[0], sq)});
            });
        Value total = sum.getResult(0);
        if (gpu)
          for (int64_t offset = kWarp / 2; offset >= 1; offset /= 2) {
            auto shuffle = gpu::ShuffleOp::create(
                b, loc, total, arith::ConstantIntOp::create(b, loc, b.getI32Type(), offset),
                arith::ConstantIntOp::create(b, loc, b.getI32Type(), kWarp), gpu::ShuffleMode::XOR);
            total = arith::AddFOp::create(b, loc, total, shuffle.getShuffleResult());
          }
        Value count = arith::UIToFPOp::create(
            b, loc, b.getF32Type(), arith::IndexCastUIOp::create(b, loc, b.getI64Type(), hidden));
        Value mean = arith::DivFOp::create(b, loc, total, count);
        Value inv = math::RsqrtOp::create(b, loc, arith::AddFOp::create(b, loc, mean, h.f32(eps)));
        scf::ForOp::create(
            b, loc, lane, hidden, h.idx(lanes), ValueRange{},
            [&](OpBuilder &b, Location loc, Value j, ValueRange) {
              Value v = residual ? memref::LoadOp::create(b, loc, residual, ValueRange{tok, j}).getResult()
                                 : toF32(b, loc, memref::LoadOp::create(b, loc, op.getX(), ValueRange{tok, j}));
              Value w = toF32(b, loc, memref::LoadOp::create(b, loc, op.getW(), ValueRange{j}));
              Value y = arith::MulFOp::create(b, loc, arith::MulFOp::create(b, loc, v, inv), w);
              memref::StoreOp::create(b, loc, fromF32(b, loc, y, outType), op.getY(), ValueRange{tok, j});
              scf::YieldOp::create(b, loc);
            });
        scf::YieldOp::create(b, loc);
      });
  op.erase();
}

struct LowerTileOpsPass
    : public mlir::et::impl::LowerTileOpsPassBase<LowerTileOpsPass> {
  using Base::Base;
  void runOnOperation() override {
    if (target != "gpu" && target != "cpu") {
      getOperation().emitOpError("'et-lower-tile-ops' target must be gpu or "
                                 "cpu, got '")
          << target << "'";
      return signalPassFailure();
    }
    if (unroll < 1) {
      getOperation().emitOpError("'et-lower-tile-ops' needs unroll >= 1, got ")
          << static_cast<int64_t>(unroll);
      return signalPassFailure();
    }
    SmallVector<Operation *> ops;
    getOperation().walk([&](Operation *op) {
      if (isa<SiluMulOp, RMSNormOp>(op))
        ops.push_back(op);
    });
    for (Operation *op : ops) {
      if (auto silu = dyn_cast<SiluMulOp>(op))
        lowerSiluMul(silu);
      else
        lowerRMSNorm(cast<RMSNormOp>(op), target == "gpu");
    }
    SmallVector<LinearOp> linears;
    getOperation().walk([&](LinearOp op) { linears.push_back(op); });
    for (LinearOp op : linears) {
      if (target == "gpu")
        lowerLinearGPU(op, unroll);
      else
        lowerLinearCPU(op);
    }
  }
};
} // namespace
