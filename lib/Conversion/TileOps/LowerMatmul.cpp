//===- LowerMatmul.cpp - et.matmul on tensor cores and on the CPU ---------===//
//
// The GEMM tile of prefill (et.matmul), lowered by et-lower-tile-ops:
//
// GPU: the worker's threads fill a ring of `stages` shared-memory slices
// (BM x BK of x, BN x BK of w) with cp.async, `stages - 1` slices ahead of
// the tensor cores. Each warp owns a WM x WN sub-block of the tile, loads
// its operands with ldmatrix and multiplies with mma.sync.m16n8k16 (bf16,
// f32 accumulators in registers). Rows are padded by 16 bytes in shared
// memory so the eight row addresses of an ldmatrix fall in distinct banks.
//
// CPU: scalar loops.
//
//===----------------------------------------------------------------------===//

#include "TileLowering.h"

#include "EventTensor/Dialect/EventTensor/EventTensorDialect.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <algorithm>
#include <cstdlib>

using namespace mlir;
using namespace mlir::et;
using namespace mlir::et::tile;

namespace {

/// How the warps of a worker share a BM x BN tile: warpsM x warpsN warps,
/// each with a WM x WN sub-block.
struct WarpTiling {
  int64_t warpsM = 0, warpsN = 0, wm = 0, wn = 0;
  int64_t used() const { return warpsM * warpsN; }
  int64_t accumulators() const { return wm * wn / kWarp; } // f32 per thread
};

/// f32 accumulators a thread may hold: ptxas gives each thread at most
/// 65536 / threads registers (255 at most), and the operands, addresses and
/// loop state need about half of them.
int64_t accumulatorBudget(int64_t threads) { return threads <= 256 ? 128 : 64; }

/// The warp tiling that keeps the most warps busy within the accumulator
/// budget; among those, the squarest sub-block (the fewest ldmatrix loads
/// per mma), then the taller one. Fails when even all warps together need
/// more accumulators than the budget.
FailureOr<WarpTiling> chooseWarpTiling(int64_t bm, int64_t bn, int64_t threads) {
  int64_t warps = threads / kWarp;
  std::optional<WarpTiling> best;
  for (int64_t wm = 16; wm <= bm; wm += 16) {
    if (bm % wm)
      continue;
    for (int64_t wn = 16; wn <= bn; wn += 16) {
      if (bn % wn)
        continue;
      WarpTiling t{bm / wm, bn / wn, wm, wn};
      if (t.used() > warps || t.accumulators() > accumulatorBudget(threads))
        continue;
      auto key = [](const WarpTiling &t) {
        return std::make_tuple(t.used(), -std::abs(t.wm - t.wn), t.wm);
      };
      if (!best || key(t) > key(*best))
        best = t;
    }
  }
  if (!best)
    return failure();
  return *best;
}

/// The wgmma tiling: groupsM x groupsN warpgroups (128 threads each), each
/// with a 64 x wn sub-block (one m64nXk16 instruction per k16 step).
struct WgmmaTiling {
  int64_t groupsM = 0, groupsN = 0, wn = 0;
  int64_t used() const { return groupsM * groupsN; }
};

/// Where the wgmma path applies: BK a multiple of 64 (a slice is BK / 64
/// blocks of 128-byte swizzle rows), a warpgroup per 64 rows of BM, and at
/// least 3 stages (a slice in flight while the one before is being
/// multiplied). Among the
/// warpgroups left, the most that split BN into multiples of 16 within the
/// accumulator budget.
std::optional<WgmmaTiling> chooseWgmmaTiling(int64_t bm, int64_t bn, int64_t bk, int64_t stages,
                                             int64_t threads) {
  int64_t groups = threads / 128;
  if (bk % 64 != 0 || bm % 64 != 0 || stages < 3 || bm / 64 > groups)
    return std::nullopt;
  int64_t groupsM = bm / 64;
  for (int64_t groupsN = groups / groupsM; groupsN >= 1; --groupsN) {
    int64_t wn = bn / groupsN;
    if (bn % groupsN == 0 && wn % 16 == 0 && wn / 2 <= accumulatorBudget(threads))
      return WgmmaTiling{groupsM, groupsN, wn};
  }
  return std::nullopt;
}

/// The K slices a tile runs over: [first, first + count) slices of `bk`
/// columns, and the columns [lo, hi) that count (the op's k range, or all
/// of K); copies outside [lo, hi) are zero-filled.
struct KSlices {
  Value lo, hi, first, count;
};

KSlices kSlices(OpBuilder &b, Location loc, MatmulOp op, int64_t k, int64_t bk) {
  TileBuilder h{b, loc};
  if (op.getKRange().empty())
    return {h.idx(0), h.idx(k), h.idx(0), h.idx((k + bk - 1) / bk)};
  Value lo = op.getKRange()[0];
  Value hi = arith::MinUIOp::create(b, loc, op.getKRange()[1], h.idx(k));
  Value first = arith::DivUIOp::create(b, loc, lo, h.idx(bk));
  Value end = arith::CeilDivUIOp::create(b, loc, hi, h.idx(bk));
  Value count = arith::SelectOp::create(b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ugt, end, first),
                                        arith::SubIOp::create(b, loc, end, first), h.idx(0));
  return {lo, hi, first, count};
}

/// True when each thread's two adjacent outputs (columns 2c, 2c + 1) can be
/// one vector store: y's rows are contiguous and start at even elements.
bool pairStores(MatmulOp op) {
  MemRefType y = op.getY().getType();
  SmallVector<int64_t> strides;
  int64_t offset;
  if (failed(y.getStridesAndOffset(strides, offset)))
    return false;
  return strides[1] == 1 && !ShapedType::isDynamic(strides[0]) && strides[0] % 2 == 0 &&
         !ShapedType::isDynamic(offset) && offset % 2 == 0;
}

/// `accumulate atomic`: adds the f32 value or vector `v` into y at (`row`,
/// `col` + e) for each element e, an atomic add each.
void addAtomic(OpBuilder &b, Location loc, MatmulOp op, Value v, Value row, Value col) {
  auto vec = dyn_cast<VectorType>(v.getType());
  if (!vec) {
    memref::AtomicRMWOp::create(b, loc, arith::AtomicRMWKind::addf, v, op.getY(), ValueRange{row, col});
    return;
  }
  TileBuilder h{b, loc};
  for (int64_t e = 0; e < vec.getNumElements(); ++e)
    memref::AtomicRMWOp::create(b, loc, arith::AtomicRMWKind::addf, vector::ExtractOp::create(b, loc, v, e),
                                op.getY(), ValueRange{row, arith::AddIOp::create(b, loc, col, h.idx(e))});
}

/// Bounds-checked stores of one thread's accumulator values: `value(i,
/// e)` for n8 block i of the thread's m16 rows (16 * `mTile` + lane / 4,
/// + 8 for e >= 2) and columns 8 * i + 2 * (lane % 4) + e % 2, offset by
/// (`row0`, `col0`); the fragment layout of both mma.sync (m16n8) and
/// wgmma (per warp of the warpgroup). Adjacent columns go out as one
/// 2-element vector store where y's layout allows it (pairStores) and both
/// are below N.
void storeFragments(OpBuilder &b, Location loc, MatmulOp op, Value row0, Value col0, Value lane, Value m,
                    Value n, int64_t mTiles, int64_t nTiles,
                    llvm::function_ref<Value(int64_t mi, int64_t nj, int64_t e)> value) {
  TileBuilder h{b, loc};
  Value rowBase = arith::AddIOp::create(b, loc, row0, arith::DivUIOp::create(b, loc, lane, h.idx(4)));
  Value colBase = arith::AddIOp::create(
      b, loc, col0, arith::MulIOp::create(b, loc, arith::RemUIOp::create(b, loc, lane, h.idx(4)), h.idx(2)));
  Type outType = op.getY().getType().getElementType();
  bool pairs = pairStores(op);
  auto finish = [&](OpBuilder &b, Value v, Value row, Value col) {
    if (op.getAtomic()) {
      addAtomic(b, loc, op, v, row, col);
      return;
    }
    if (op.getAccumulate()) {
      Value old = isa<VectorType>(v.getType())
                      ? vector::LoadOp::create(b, loc, cast<VectorType>(v.getType()), op.getY(), ValueRange{row, col})
                            .getResult()
                      : memref::LoadOp::create(b, loc, op.getY(), ValueRange{row, col}).getResult();
      v = arith::AddFOp::create(b, loc, old, v);
    }
    if (!outType.isF32()) {
      Type to = outType;
      if (auto vec = dyn_cast<VectorType>(v.getType()))
        to = VectorType::get(vec.getShape(), outType);
      v = arith::TruncFOp::create(b, loc, to, v);
    }
    if (isa<VectorType>(v.getType()))
      vector::StoreOp::create(b, loc, v, op.getY(), ValueRange{row, col});
    else
      memref::StoreOp::create(b, loc, v, op.getY(), ValueRange{row, col});
  };
  for (int64_t mi = 0; mi < mTiles; ++mi)
    for (int64_t half = 0; half < 2; ++half) {
      Value row = arith::AddIOp::create(b, loc, rowBase, h.idx(mi * 16 + half * 8));
      Value rowOk = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, row, m);
      for (int64_t nj = 0; nj < nTiles; ++nj) {
        Value col = arith::AddIOp::create(b, loc, colBase, h.idx(nj * 8));
        Value col1 = arith::AddIOp::create(b, loc, col, h.idx(1));
        auto inside = [&](OpBuilder &b, Value c) {
          return arith::AndIOp::create(b, loc, rowOk, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, c, n))
              .getResult();
        };
        if (pairs) {
          // Both columns, else the first alone.
          auto both = scf::IfOp::create(b, loc, inside(b, col1), /*withElse=*/true);
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(both.thenBlock());
          Value vec = vector::FromElementsOp::create(
              b, loc, VectorType::get({2}, b.getF32Type()),
              ValueRange{value(mi, nj, half * 2), value(mi, nj, half * 2 + 1)});
          finish(b, vec, row, col);
          b.setInsertionPointToStart(both.elseBlock());
          auto first = scf::IfOp::create(b, loc, inside(b, col), /*withElse=*/false);
          b.setInsertionPointToStart(first.thenBlock());
          finish(b, value(mi, nj, half * 2), row, col);
          continue;
        }
        for (int64_t e = 0; e < 2; ++e) {
          Value c = e == 0 ? col : col1;
          auto ifOp = scf::IfOp::create(b, loc, inside(b, c), /*withElse=*/false);
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(ifOp.thenBlock());
          finish(b, value(mi, nj, half * 2 + e), row, c);
        }
      }
    }
}

/// The output block staged through shared memory: each thread writes its
/// fragments there (a pair of adjacent columns per store), then the
/// worker's threads copy whole rows out with 16-byte stores. Written
/// straight from the fragments, each warp store touches 8 rows: 8 memory
/// transactions for 128 or 256 bytes, and the epilogue of a 128 x 256 f32
/// block took 13 us of a 35 us tile (K = 2048) on the H200.
struct OutputStage {
  int64_t elementBytes = 0, pitch = 0; // bytes per row: BN elements + 32
};

/// The staging layout when it applies: y's rows contiguous and 16-byte
/// aligned (static row stride and offset), and the block fits in
/// `sharedBytes`. The 32 bytes of padding per row shift the 8 rows a warp's
/// fragment store touches across the banks.
std::optional<OutputStage> outputStage(MatmulOp op, int64_t bm, int64_t bn, int64_t sharedBytes) {
  MemRefType y = op.getY().getType();
  int64_t e = y.getElementType().getIntOrFloatBitWidth() / 8, per = 16 / e;
  SmallVector<int64_t> strides;
  int64_t offset;
  if (failed(y.getStridesAndOffset(strides, offset)) || strides[1] != 1 || ShapedType::isDynamic(strides[0]) ||
      strides[0] % per != 0 || ShapedType::isDynamic(offset) || offset % per != 0)
    return std::nullopt;
  OutputStage stage{e, bn * e + 32};
  if (bm * stage.pitch > sharedBytes)
    return std::nullopt;
  return stage;
}

/// Phase 1: this thread's fragments (as in storeFragments, at tile-local
/// rows and columns) into the stage at `base` (shared pointer), converted
/// to y's element type.
void writeStage(OpBuilder &b, Location loc, MatmulOp op, const OutputStage &stage, Value base, Value row0,
                Value col0, Value lane, int64_t mTiles, int64_t nTiles,
                llvm::function_ref<Value(int64_t mi, int64_t nj, int64_t e)> value) {
  TileBuilder h{b, loc};
  Type outType = op.getY().getType().getElementType();
  Value rowBase = arith::AddIOp::create(b, loc, row0, arith::DivUIOp::create(b, loc, lane, h.idx(4)));
  Value colBase = arith::AddIOp::create(
      b, loc, col0, arith::MulIOp::create(b, loc, arith::RemUIOp::create(b, loc, lane, h.idx(4)), h.idx(2)));
  for (int64_t mi = 0; mi < mTiles; ++mi)
    for (int64_t half = 0; half < 2; ++half) {
      Value row = arith::AddIOp::create(b, loc, rowBase, h.idx(mi * 16 + half * 8));
      Value rowByte = arith::MulIOp::create(b, loc, row, h.idx(stage.pitch));
      for (int64_t nj = 0; nj < nTiles; ++nj) {
        Value col = arith::AddIOp::create(b, loc, colBase, h.idx(nj * 8));
        Value v = vector::FromElementsOp::create(b, loc, VectorType::get({2}, b.getF32Type()),
                                                 ValueRange{value(mi, nj, half * 2), value(mi, nj, half * 2 + 1)});
        if (!outType.isF32())
          v = arith::TruncFOp::create(b, loc, VectorType::get({2}, outType), v);
        Value byte = arith::AddIOp::create(b, loc, rowByte,
                                           arith::MulIOp::create(b, loc, col, h.idx(stage.elementBytes)));
        LLVM::StoreOp::create(b, loc, v, sharedAt(b, loc, base, toI32(b, loc, byte)), 2 * stage.elementBytes);
      }
    }
}

/// Phase 2: every thread copies 16-byte chunks of the stage's rows to y
/// (adding y's values with `accumulate`), rows below M; a chunk that
/// crosses N goes out element by element. With `accumulate`, a thread
/// reads the y values of `kAccumulateGroup` chunks before it adds and
/// stores any of them, so their round trips overlap (one chunk at a time,
/// the accumulating half of a split-K layer ran about 5 us longer than the
/// storing half on the H200: docs/experiments/).
constexpr int64_t kAccumulateGroup = 8;

void copyStageOut(OpBuilder &b, Location loc, MatmulOp op, const OutputStage &stage, Value base, int64_t bm,
                  int64_t bn, int64_t threads, Value tid, Value m, Value n, Value m0, Value n0) {
  TileBuilder h{b, loc};
  Type outType = op.getY().getType().getElementType();
  const int64_t per = 16 / stage.elementBytes, perRow = bn / per, chunks = bm * perRow;
  auto vecType = VectorType::get({per}, outType);
  const int64_t trips = (chunks + threads - 1) / threads;
  // Adds that read y first (accumulate, not atomic).
  const bool readsY = op.getAccumulate() && !op.getAtomic();
  const int64_t group = readsY ? kAccumulateGroup : 1;
  struct Chunk {
    Value row, chunk, gRow, gCol, live, whole;
  };
  auto chunkAt = [&](int64_t i) {
    Chunk k;
    Value c = arith::AddIOp::create(b, loc, tid, h.idx(i * threads));
    k.row = arith::DivUIOp::create(b, loc, c, h.idx(perRow));
    k.chunk = arith::RemUIOp::create(b, loc, c, h.idx(perRow));
    k.gRow = arith::AddIOp::create(b, loc, m0, k.row);
    k.gCol = arith::AddIOp::create(b, loc, n0, arith::MulIOp::create(b, loc, k.chunk, h.idx(per)));
    k.live = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, k.gRow, m);
    if ((i + 1) * threads > chunks)
      k.live = arith::AndIOp::create(b, loc, k.live,
                                     arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, c, h.idx(chunks)));
    k.whole = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ule,
                                    arith::AddIOp::create(b, loc, k.gCol, h.idx(per)), n);
    return k;
  };
  for (int64_t g0 = 0; g0 < trips; g0 += group) {
    const int64_t g1 = std::min(trips, g0 + group);
    SmallVector<Chunk> ks;
    SmallVector<Value> olds;
    for (int64_t i = g0; i < g1; ++i)
      ks.push_back(chunkAt(i));
    if (readsY) {
      // y's values of the group's whole chunks (zeros elsewhere), all in
      // flight before the first store.
      Value zeros = arith::ConstantOp::create(b, loc, vecType, DenseElementsAttr::get(vecType, b.getZeroAttr(outType)));
      for (const Chunk &k : ks) {
        auto loadIf = scf::IfOp::create(b, loc, TypeRange{vecType}, arith::AndIOp::create(b, loc, k.live, k.whole),
                                        /*withElse=*/true);
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(loadIf.thenBlock());
        auto old = vector::LoadOp::create(b, loc, vecType, op.getY(), ValueRange{k.gRow, k.gCol});
        old.setAlignment(16);
        scf::YieldOp::create(b, loc, old.getResult());
        b.setInsertionPointToStart(loadIf.elseBlock());
        scf::YieldOp::create(b, loc, zeros);
        olds.push_back(loadIf.getResult(0));
      }
    }
    for (auto [j, k] : llvm::enumerate(ks)) {
      auto rowIf = scf::IfOp::create(b, loc, k.live, /*withElse=*/false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(rowIf.thenBlock());
      Value byte = arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, k.row, h.idx(stage.pitch)),
                                         arith::MulIOp::create(b, loc, k.chunk, h.idx(16)));
      Value v = LLVM::LoadOp::create(b, loc, vecType, sharedAt(b, loc, base, toI32(b, loc, byte)), 16);
      auto wholeIf = scf::IfOp::create(b, loc, k.whole, /*withElse=*/true);
      b.setInsertionPointToStart(wholeIf.thenBlock());
      if (op.getAtomic()) {
        addAtomic(b, loc, op, v, k.gRow, k.gCol);
      } else {
        Value out = readsY ? arith::AddFOp::create(b, loc, olds[j], v).getResult() : v;
        auto store = vector::StoreOp::create(b, loc, out, op.getY(), ValueRange{k.gRow, k.gCol});
        store.setAlignment(16);
      }
      b.setInsertionPointToStart(wholeIf.elseBlock());
      for (int64_t e = 0; e < per; ++e) {
        Value col = arith::AddIOp::create(b, loc, k.gCol, h.idx(e));
        auto colIf = scf::IfOp::create(b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, col, n),
                                       /*withElse=*/false);
        OpBuilder::InsertionGuard inner(b);
        b.setInsertionPointToStart(colIf.thenBlock());
        Value x = vector::ExtractOp::create(b, loc, v, e);
        if (op.getAtomic()) {
          addAtomic(b, loc, op, x, k.gRow, col);
          continue;
        }
        if (op.getAccumulate())
          x = arith::AddFOp::create(b, loc, memref::LoadOp::create(b, loc, op.getY(), ValueRange{k.gRow, col}), x);
        memref::StoreOp::create(b, loc, x, op.getY(), ValueRange{k.gRow, col});
      }
    }
  }
}

/// The end of both GPU lowerings: `store` (this thread's fragments, into
/// the stage or straight to y) on the warps where `active` holds (all when
/// null), then the stage's rows to y, and a barrier that frees the ring for
/// whatever runs next on the worker. Erases the op.
void finishTile(OpBuilder &b, Location loc, MatmulOp op, Value active, const std::optional<OutputStage> &stage,
                Value stageBase, int64_t bm, int64_t bn, int64_t threads, Value tid, Value m, Value n, Value m0,
                Value n0, llvm::function_ref<void(OpBuilder &)> store) {
  if (active) {
    auto ifOp = scf::IfOp::create(b, loc, active, /*withElse=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    store(b);
  } else {
    store(b);
  }
  if (stage) {
    gpu::BarrierOp::create(b, loc);
    copyStageOut(b, loc, op, *stage, stageBase, bm, bn, threads, tid, m, n, m0, n0);
  }
  gpu::BarrierOp::create(b, loc);
  op.erase();
}

/// K of the product (static: the verifier requires it).
int64_t staticK(MatmulOp op) {
  int64_t k = op.getW().getType().getDimSize(1);
  return ShapedType::isDynamic(k) ? op.getX().getType().getDimSize(1) : k;
}

/// The task whose dynamic shared memory holds the op's ring of `bytes`;
/// fails with a diagnostic when the ring does not fit.
FailureOr<TaskOp> ringInDynamicShared(MatmulOp op, int64_t bytes) {
  ArrayRef<int64_t> tile = op.getTile();
  if (bytes > kMaxDynamicShared)
    return op.emitOpError("tile ")
           << tile[0] << " x " << tile[1] << " x " << tile[2] << " with " << op.getStages() << " stages needs "
           << bytes << " bytes of shared memory, more than " << kMaxDynamicShared;
  // The plan gives every et.matmul its task's dynamic shared memory before
  // any other op (planAttentionOps). The GEMM tiles of a task run one after
  // another, each ending with a barrier that frees the ring (finishTile),
  // so they share it.
  assert(holdsDynamicShared(op) && "the plan gave the op its task's dynamic shared memory");
  return op->getParentOfType<TaskOp>();
}

/// M, N and the global sources of both GPU lowerings: row r of x (or w)
/// starts r * rowStride elements past the view's base.
struct GemmSources {
  Value m, n, xBase, wBase, xStride, wStride;
};

GemmSources gemmSources(OpBuilder &b, Location loc, MatmulOp op) {
  TileBuilder h{b, loc};
  auto xMeta = memref::ExtractStridedMetadataOp::create(b, loc, op.getX());
  auto wMeta = memref::ExtractStridedMetadataOp::create(b, loc, op.getW());
  return {memref::DimOp::create(b, loc, op.getX(), 0), memref::DimOp::create(b, loc, op.getW(), 0),
          elementPointer(b, loc, op.getX(), h.idx(0), 2, 1), elementPointer(b, loc, op.getW(), h.idx(0), 2, 1),
          xMeta.getStrides()[0], wMeta.getStrides()[0]};
}

/// `issue(b, kt, slot)` when slice kt exists (kt < count), then a commit:
/// one group per slice, empty past the end, so the group count stays
/// uniform.
void issueIfAny(OpBuilder &b, Location loc, Value kt, Value slot, Value count,
                llvm::function_ref<void(OpBuilder &, Value, Value)> issue) {
  auto any = scf::IfOp::create(b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, kt, count),
                               /*withElse=*/false);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(any.thenBlock());
    issue(b, kt, slot);
  }
  NVVM::CpAsyncCommitGroupOp::create(b, loc);
}

/// The wgmma path. A slice is BK / 64 column blocks ("atoms") of 64
/// columns, so an atom row is 128 bytes and the ring uses the 128-byte
/// swizzle of the wgmma shared-memory descriptors: 16-byte chunk c of row
/// r sits at chunk c ^ (r % 8) of the row, from a 1024-byte-aligned base. Step kt: wait for slice kt
/// (cp.async), fence it for the async proxy, synchronize; issue slice
/// kt + stages - 2 into the slot of slice kt - 2 (whose multiplies every
/// warpgroup has waited for); then BK / 16 wgmma (k16 each) of slice kt, a
/// commit, and a wait that leaves only those in flight.
LogicalResult lowerMatmulWgmma(MatmulOp op, int64_t threads, const WgmmaTiling &t) {
  ArrayRef<int64_t> tileSizes = op.getTile();
  const int64_t bm = tileSizes[0], bn = tileSizes[1], stages = op.getStages();
  // A slice is BK / 64 column blocks (atoms) of 128-byte rows.
  const int64_t atoms = tileSizes[2] / 64;
  const int64_t sliceA = bm * 128 * atoms, sliceB = bn * 128 * atoms; // bytes
  const int64_t ringBytes = stages * (sliceA + sliceB);
  // The ring plus room to align it to 1024 bytes.
  FailureOr<TaskOp> task = ringInDynamicShared(op, ringBytes + 1024);
  if (failed(task))
    return failure();

  OpBuilder b(op);
  Location loc = op.getLoc();
  TileBuilder h{b, loc};
  MLIRContext *ctx = b.getContext();
  Type i32Type = b.getI32Type(), i64Type = b.getI64Type(), f32 = b.getF32Type();
  KSlices kr = kSlices(b, loc, op, staticK(op), 64 * atoms);

  Value buffer = workgroupBuffer(*task, loc, {ringBytes + 1024}, b.getI8Type());
  buffer.getDefiningOp()->setAttr(EventTensorDialect::getDynamicSharedAttrName(), b.getUnitAttr());
  Value shared = elementPointer(b, loc, buffer, h.idx(0), 1, 3);
  Value sharedAddr = LLVM::PtrToIntOp::create(b, loc, i32Type, shared);
  Value alignedAddr = arith::AndIOp::create(b, loc, arith::AddIOp::create(b, loc, sharedAddr, i32(b, loc, 1023)),
                                            i32(b, loc, ~int64_t(1023)));
  Value ring = sharedAt(b, loc, shared, arith::SubIOp::create(b, loc, alignedAddr, sharedAddr));

  Groups g = h.groups(kWarp);
  GemmSources src = gemmSources(b, loc, op);
  Value m = src.m, n = src.n, m0 = op.getM0(), n0 = op.getN0();
  const bool gated = static_cast<bool>(op.getUp());
  Value upBase, upStride;
  if (gated) {
    upBase = elementPointer(b, loc, op.getUp(), h.idx(0), 2, 1);
    upStride = memref::ExtractStridedMetadataOp::create(b, loc, op.getUp()).getStrides()[0];
  }
  // Output columns of the tile (half of BN when gated).
  const int64_t outBn = gated ? bn / 2 : bn;

  // Copies of slice kt into slot `slot`: chunk c = (row, kc) of the x block,
  // then of the w block, swizzled; chunks past M, N or K zero-filled.
  auto issueSlice = [&](OpBuilder &b, Value kt, Value slot) {
    TileBuilder h{b, loc};
    Value k0 = arith::MulIOp::create(b, loc, arith::AddIOp::create(b, loc, kr.first, kt), h.idx(64 * atoms));
    // Chunk (row, c) of atom c / 8 at 16-byte position (c % 8) ^ (row % 8).
    // `rows` rows from `first` go to the slice rows rowAt(row) of a slice of
    // `sliceRows` rows.
    auto copyBlock = [&](int64_t rows, int64_t sliceRows, Value first, Value limit, Value base, Value rowStride,
                         int64_t sliceBytes, int64_t sliceOffset,
                         llvm::function_ref<Value(OpBuilder &, Value)> rowAt) {
      Value slotBase = arith::AddIOp::create(
          b, loc, h.idx(sliceOffset), arith::MulIOp::create(b, loc, slot, h.idx(sliceBytes)));
      copyChunks(b, loc, g.tid, threads, rows, 8 * atoms, first, limit, k0, kr.lo, kr.hi, base, rowStride, h.idx(0),
                 ring, [&](OpBuilder &b, Value sourceRow, Value chunk) -> Value {
                   TileBuilder h{b, loc};
                   Value row = rowAt ? rowAt(b, sourceRow) : sourceRow;
                   Value atom = arith::DivUIOp::create(b, loc, chunk, h.idx(8));
                   Value swizzled = arith::XOrIOp::create(b, loc, arith::RemUIOp::create(b, loc, chunk, h.idx(8)),
                                                          arith::RemUIOp::create(b, loc, row, h.idx(8)));
                   return arith::AddIOp::create(
                       b, loc,
                       arith::AddIOp::create(b, loc, slotBase,
                                             arith::MulIOp::create(b, loc, atom, h.idx(sliceRows * 128))),
                       arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, row, h.idx(128)),
                                             arith::MulIOp::create(b, loc, swizzled, h.idx(16))));
                 });
    };
    copyBlock(bm, bm, m0, m, src.xBase, src.xStride, sliceA, 0, nullptr);
    if (!gated) {
      copyBlock(bn, bn, n0, n, src.wBase, src.wStride, sliceB, stages * sliceA, nullptr);
      return;
    }
    // Gated: weight row n0 + r of w goes to the first half of warpgroup
    // column r / (wn / 2)'s wn rows, that of `up` to the second half, so
    // each thread holds a gate column and its up column.
    const int64_t half = t.wn / 2;
    for (int64_t second = 0; second < 2; ++second)
      copyBlock(bn / 2, bn, n0, n, second ? upBase : src.wBase, second ? upStride : src.wStride, sliceB,
                stages * sliceA, [&](OpBuilder &b, Value r) -> Value {
                  TileBuilder h{b, loc};
                  return arith::AddIOp::create(
                      b, loc, arith::MulIOp::create(b, loc, arith::DivUIOp::create(b, loc, r, h.idx(half)),
                                                    h.idx(t.wn)),
                      arith::AddIOp::create(b, loc, arith::RemUIOp::create(b, loc, r, h.idx(half)),
                                            h.idx(second * half)));
                });
  };

  // This warpgroup's sub-block, and the constant part of its descriptors:
  // stride 1024 bytes between 8-row groups (bits 32-45, in 16-byte units),
  // leading offset 1 (unused by swizzled K-major operands), 128-byte
  // swizzle (bits 62-63 = 1).
  Value group = arith::DivUIOp::create(b, loc, g.tid, h.idx(128));
  Value groupM = arith::DivUIOp::create(b, loc, group, h.idx(t.groupsN));
  Value groupN = arith::RemUIOp::create(b, loc, group, h.idx(t.groupsN));
  Value active = t.used() < threads / 128
                     ? arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, group, h.idx(t.used())).getResult()
                     : Value();
  Value offA = toI32(b, loc, arith::MulIOp::create(b, loc, groupM, h.idx(64 * 128)));
  Value offB = toI32(b, loc, arith::AddIOp::create(b, loc, h.idx(stages * sliceA),
                                                   arith::MulIOp::create(b, loc, groupN, h.idx(t.wn * 128))));
  const uint64_t descHigh = (uint64_t(1024 / 16) << 32) | (uint64_t(1) << 62) | (uint64_t(1) << 16);
  auto descriptor = [&](OpBuilder &b, Value byteAddr) {
    Value field = arith::AndIOp::create(b, loc, arith::ShRUIOp::create(b, loc, byteAddr, i32(b, loc, 4)),
                                        i32(b, loc, 0x3FFF));
    return arith::OrIOp::create(b, loc, arith::ExtUIOp::create(b, loc, i64Type, field),
                                arith::ConstantIntOp::create(b, loc, i64Type, static_cast<int64_t>(descHigh)))
        .getResult();
  };
  SmallVector<Type> fields(t.wn / 2, f32);
  Type accType = LLVM::LLVMStructType::getLiteral(ctx, fields);
  Value acc0 = LLVM::UndefOp::create(b, loc, accType);
  for (int64_t i = 0; i < t.wn / 2; ++i)
    acc0 = LLVM::InsertValueOp::create(b, loc, acc0, h.f32(0), i);

  auto multiply = [&](OpBuilder &b, Value slot, Value acc) {
    Value slotI32 = toI32(b, loc, slot);
    Value aAddr = arith::AddIOp::create(
        b, loc, alignedAddr,
        arith::AddIOp::create(b, loc, offA, arith::MulIOp::create(b, loc, slotI32, i32(b, loc, sliceA))));
    Value bAddr = arith::AddIOp::create(
        b, loc, alignedAddr,
        arith::AddIOp::create(b, loc, offB, arith::MulIOp::create(b, loc, slotI32, i32(b, loc, sliceB))));
    NVVM::WgmmaFenceAlignedOp::create(b, loc);
    for (int64_t ks = 0; ks < 4 * atoms; ++ks) {
      // Atom ks / 4, 32 bytes per k16 step within its rows.
      Value da = descriptor(b, arith::AddIOp::create(b, loc, aAddr, i32(b, loc, ks / 4 * bm * 128 + ks % 4 * 32)));
      Value db = descriptor(b, arith::AddIOp::create(b, loc, bAddr, i32(b, loc, ks / 4 * bn * 128 + ks % 4 * 32)));
      acc = NVVM::WgmmaMmaAsyncOp::create(
          b, loc, accType, acc, da, db, NVVM::MMAShapeAttr::get(ctx, 64, t.wn, 16), NVVM::WGMMATypes::bf16,
          NVVM::WGMMATypes::bf16, NVVM::WGMMATypes::f32, NVVM::WGMMAScaleOut::one, NVVM::WGMMAScaleIn::one,
          NVVM::WGMMAScaleIn::one, NVVM::MMALayout::row, NVVM::MMALayout::col, NVVM::MMAIntOverflowAttr());
    }
    NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
    NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 1);
    return acc;
  };

  for (int64_t s = 0; s + 2 < stages; ++s)
    issueIfAny(b, loc, h.idx(s), h.idx(s), kr.count, issueSlice);
  auto loop = scf::ForOp::create(
      b, loc, h.idx(0), kr.count, h.idx(1), ValueRange{acc0},
      [&](OpBuilder &b, Location loc, Value kt, ValueRange iter) {
        TileBuilder h{b, loc};
        NVVM::CpAsyncWaitGroupOp::create(b, loc, stages - 3);
        NVVM::FenceProxyOp::create(b, loc, NVVM::ProxyKindAttr::get(b.getContext(), NVVM::ProxyKind::async_shared),
                                   NVVM::SharedSpaceAttr::get(b.getContext(), NVVM::SharedSpace::shared_cta));
        gpu::BarrierOp::create(b, loc);
        Value next = arith::AddIOp::create(b, loc, kt, h.idx(stages - 2));
        issueIfAny(b, loc, next, arith::RemUIOp::create(b, loc, next, h.idx(stages)), kr.count, issueSlice);
        Value slot = arith::RemUIOp::create(b, loc, kt, h.idx(stages));
        Value acc = iter[0];
        if (!active) {
          acc = multiply(b, slot, acc);
        } else {
          auto ifOp = scf::IfOp::create(b, loc, TypeRange{accType}, active, /*withElse=*/true);
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(ifOp.thenBlock());
          scf::YieldOp::create(b, loc, multiply(b, slot, acc));
          b.setInsertionPointToStart(ifOp.elseBlock());
          scf::YieldOp::create(b, loc, acc);
          acc = ifOp.getResult(0);
        }
        scf::YieldOp::create(b, loc, acc);
      });
  NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 0);
  NVVM::CpAsyncWaitGroupOp::create(b, loc, 0);
  Value acc = loop.getResult(0);

  // Warp w of the warpgroup holds rows 16 w .. 16 w + 15 of its 64 rows.
  std::optional<OutputStage> stage = outputStage(op, bm, outBn, ringBytes);
  if (stage) // every warpgroup's multiplies are done before the ring is reused
    gpu::BarrierOp::create(b, loc);
  auto store = [&](OpBuilder &b) {
    TileBuilder h{b, loc};
    Value warpInGroup = arith::RemUIOp::create(b, loc, g.group, h.idx(4));
    Value rowIn = arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, groupM, h.idx(64)),
                                        arith::MulIOp::create(b, loc, warpInGroup, h.idx(16)));
    const int64_t outWn = gated ? t.wn / 2 : t.wn;
    Value colIn = arith::MulIOp::create(b, loc, groupN, h.idx(outWn));
    auto value = [&](int64_t, int64_t nj, int64_t e) -> Value {
      Value v = LLVM::ExtractValueOp::create(b, loc, acc, nj * 4 + e);
      if (!gated)
        return v;
      // silu(gate) * up: the up column is outWn columns on, in this thread.
      Value up = LLVM::ExtractValueOp::create(b, loc, acc, (nj + outWn / 8) * 4 + e);
      return arith::MulFOp::create(b, loc, silu(b, loc, v, arith::FastMathFlags::afn), up);
    };
    if (stage) {
      writeStage(b, loc, op, *stage, ring, rowIn, colIn, g.lane, 1, outWn / 8, value);
      return;
    }
    storeFragments(b, loc, op, arith::AddIOp::create(b, loc, m0, rowIn), arith::AddIOp::create(b, loc, n0, colIn),
                   g.lane, m, n, 1, outWn / 8, value);
  };
  finishTile(b, loc, op, active, stage, ring, bm, outBn, threads, g.tid, m, n, m0, n0, store);
  return success();
}

} // namespace

void tile::copyChunks(OpBuilder &b, Location loc, Value tid, int64_t threads, int64_t rows, int64_t perRow,
                      Value first, Value limit, Value k0, Value kLo, Value kHi, Value base, Value rowStride,
                      Value extra, Value shared,
                      llvm::function_ref<Value(OpBuilder &, Value row, Value chunk)> dstByte) {
  TileBuilder h{b, loc};
  const int64_t chunks = rows * perRow;
  for (int64_t i = 0; i * threads < chunks; ++i) {
    Value c = arith::AddIOp::create(b, loc, tid, h.idx(i * threads));
    auto emit = [&](OpBuilder &b) {
      TileBuilder h{b, loc};
      Value row = arith::DivUIOp::create(b, loc, c, h.idx(perRow));
      Value chunk = arith::RemUIOp::create(b, loc, c, h.idx(perRow));
      Value gRow = arith::AddIOp::create(b, loc, first, row);
      Value gCol = arith::AddIOp::create(b, loc, k0, arith::MulIOp::create(b, loc, chunk, h.idx(8)));
      Value valid = arith::AndIOp::create(
          b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, gRow, limit),
          arith::AndIOp::create(b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::uge, gCol, kLo),
                                arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, gCol, kHi)));
      // Out of range: 0 source bytes (zero fill) from the view's start.
      Value elem = arith::AddIOp::create(
          b, loc, arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, gRow, rowStride), extra), gCol);
      Value offset = arith::SelectOp::create(b, loc, valid, elem, h.idx(0));
      Value src = LLVM::GEPOp::create(b, loc, base.getType(), b.getBF16Type(), base,
                                      ValueRange{arith::IndexCastOp::create(b, loc, b.getI64Type(), offset)});
      Value dst = sharedAt(b, loc, shared, toI32(b, loc, dstByte(b, row, chunk)));
      copyAsync16(b, loc, dst, src, arith::SelectOp::create(b, loc, valid, i32(b, loc, 16), i32(b, loc, 0)));
    };
    if ((i + 1) * threads <= chunks) {
      emit(b);
    } else {
      auto inRange = scf::IfOp::create(
          b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, c, h.idx(chunks)), /*withElse=*/false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(inRange.thenBlock());
      emit(b);
    }
  }
}

namespace {

/// lowerMatmulGPU's steps with mma.sync and the values they share: the
/// tile's shapes, the ring of k-slices in shared memory, this warp's
/// sub-block and ldmatrix offsets.
struct MmaSyncMatmul {
  MatmulOp op;
  OpBuilder &b;
  Location loc;
  TileBuilder h;
  int64_t threads, bm, bn, bk, stages;
  const WarpTiling t;
  // Rows of a slice in shared memory: BK elements and 16 bytes of padding.
  const int64_t stride = bk + 8;
  const int64_t sliceA = bm * stride, sliceB = bn * stride; // elements
  const int64_t mTiles = t.wm / 16, nTiles = t.wn / 8, kSteps = bk / 16;
  const int64_t numAcc = mTiles * nTiles * 4;
  TaskOp task; // where the ring is allocated

  Value buffer, shared;
  Groups g;
  KSlices kr;
  GemmSources src;
  Value m, n, m0, n0;
  Value warpM, warpN, lane, offA, offB, active;

  MmaSyncMatmul(MatmulOp op, OpBuilder &b, int64_t threads, WarpTiling t)
      : op(op), b(b), loc(op.getLoc()), h{b, loc}, threads(threads), bm(op.getTile()[0]), bn(op.getTile()[1]),
        bk(op.getTile()[2]), stages(op.getStages()), t(t) {}

  /// The ring, the thread's warp, the k-slices and the operands.
  void setUp() {
    buffer = workgroupBuffer(task, loc, {stages * (sliceA + sliceB)}, b.getBF16Type());
    buffer.getDefiningOp()->setAttr(EventTensorDialect::getDynamicSharedAttrName(), b.getUnitAttr());
    shared = elementPointer(b, loc, buffer, h.idx(0), 2, 3);

    g = h.groups(kWarp);
    kr = kSlices(b, loc, op, staticK(op), bk);
    src = gemmSources(b, loc, op);
    m = src.m, n = src.n, m0 = op.getM0(), n0 = op.getN0();
  }

  /// The copies of k-slice `kt` into ring slot `slot` (index values): each
  /// thread copies 16-byte chunks tid, tid + threads, ... of the x block
  /// and then of the w block; chunks past M, N or K are zero-filled.
  void issueSlice(OpBuilder &b, Value kt, Value slot) {
    TileBuilder h{b, loc};
    Value k0 = arith::MulIOp::create(b, loc, arith::AddIOp::create(b, loc, kr.first, kt), h.idx(bk));
    // Chunk (row, c) at element row * stride + 8 c of the slot.
    auto copyBlock = [&](int64_t rows, Value first, Value limit, Value base, Value rowStride,
                         int64_t sliceElems, int64_t sliceOffset) {
      Value slotBase = arith::AddIOp::create(
          b, loc, h.idx(sliceOffset), arith::MulIOp::create(b, loc, slot, h.idx(sliceElems)));
      copyChunks(b, loc, g.tid, threads, rows, bk / 8, first, limit, k0, kr.lo, kr.hi, base, rowStride, h.idx(0),
                 shared, [&](OpBuilder &b, Value row, Value chunk) -> Value {
                   TileBuilder h{b, loc};
                   Value elem = arith::AddIOp::create(
                       b, loc, slotBase,
                       arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, row, h.idx(stride)),
                                             arith::MulIOp::create(b, loc, chunk, h.idx(8))));
                   return arith::MulIOp::create(b, loc, elem, h.idx(2));
                 });
    };
    copyBlock(bm, m0, m, src.xBase, src.xStride, sliceA, 0);
    copyBlock(bn, n0, n, src.wBase, src.wStride, sliceB, stages * sliceA);
  }

  /// This warp's sub-block and the per-lane ldmatrix offsets (bytes): for
  /// x, lanes 0-15 address rows 0-15 at k 0, lanes 16-31 the same rows at
  /// k 8 (the four 8x8 matrices of the m16k16 A fragment, in mma order);
  /// for w, lanes 0-7 / 8-15 / 16-23 / 24-31 address rows 0-7 at k 0 / rows
  /// 0-7 at k 8 / rows 8-15 at k 0 / rows 8-15 at k 8 (B fragments of two
  /// n8 tiles).
  void warpOffsets() {
    warpM = arith::DivUIOp::create(b, loc, g.group, h.idx(t.warpsN));
    warpN = arith::RemUIOp::create(b, loc, g.group, h.idx(t.warpsN));
    lane = g.lane;
    Value laneRowA = arith::RemUIOp::create(b, loc, lane, h.idx(16));
    Value laneColA = arith::MulIOp::create(b, loc, arith::DivUIOp::create(b, loc, lane, h.idx(16)), h.idx(8));
    Value laneRowB = arith::AddIOp::create(
        b, loc, arith::RemUIOp::create(b, loc, lane, h.idx(8)),
        arith::MulIOp::create(b, loc, arith::DivUIOp::create(b, loc, lane, h.idx(16)), h.idx(8)));
    Value laneColB = arith::MulIOp::create(
        b, loc,
        arith::RemUIOp::create(b, loc, arith::DivUIOp::create(b, loc, lane, h.idx(8)), h.idx(2)),
        h.idx(8));
    auto offsetOf = [&](Value row, Value col) {
      return toI32(b, loc, arith::MulIOp::create(
                               b, loc,
                               arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, row, h.idx(stride)), col),
                               h.idx(2)));
    };
    offA = offsetOf(arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, warpM, h.idx(t.wm)), laneRowA),
                    laneColA);
    offB = arith::AddIOp::create(
        b, loc, i32(b, loc, stages * sliceA * 2),
        offsetOf(arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, warpN, h.idx(t.wn)), laneRowB),
                 laneColB));
    active = t.used() < threads / kWarp
                 ? arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, g.group, h.idx(t.used())).getResult()
                 : Value();
  }

  /// The multiply-adds of ring slot `slot` into `acc` (mTiles x nTiles x 4).
  SmallVector<Value> compute(OpBuilder &b, Value slot, ValueRange acc) {
    SmallVector<Value> out(acc.begin(), acc.end());
    Value slotI32 = toI32(b, loc, slot);
    Value baseA = sharedAt(b, loc, shared,
                           arith::AddIOp::create(b, loc, offA,
                                                 arith::MulIOp::create(b, loc, slotI32, i32(b, loc, sliceA * 2))));
    Value baseB = sharedAt(b, loc, shared,
                           arith::AddIOp::create(b, loc, offB,
                                                 arith::MulIOp::create(b, loc, slotI32, i32(b, loc, sliceB * 2))));
    for (int64_t ks = 0; ks < kSteps; ++ks) {
      SmallVector<SmallVector<Value, 4>> a, bFrag;
      for (int64_t mi = 0; mi < mTiles; ++mi)
        a.push_back(ldmatrixX4(b, loc, sharedAt(b, loc, baseA, i32(b, loc, (mi * 16 * stride + ks * 16) * 2)), false));
      for (int64_t p = 0; p < nTiles / 2; ++p) {
        SmallVector<Value, 4> r =
            ldmatrixX4(b, loc, sharedAt(b, loc, baseB, i32(b, loc, (p * 16 * stride + ks * 16) * 2)), false);
        bFrag.push_back({r[0], r[1]});
        bFrag.push_back({r[2], r[3]});
      }
      for (int64_t mi = 0; mi < mTiles; ++mi)
        for (int64_t nj = 0; nj < nTiles; ++nj) {
          int64_t at = (mi * nTiles + nj) * 4;
          SmallVector<Value, 4> d = mmaBf16(b, loc, a[mi], bFrag[nj], ArrayRef<Value>(out).slice(at, 4));
          llvm::copy(d, out.begin() + at);
        }
    }
    return out;
  }

  /// Only warps with a sub-block multiply; the others copy and wait.
  SmallVector<Value> computeIfActive(OpBuilder &b, Value slot, ValueRange acc) {
    if (!active)
      return compute(b, slot, acc);
    auto ifOp = scf::IfOp::create(b, loc, TypeRange(acc), active, /*withElse=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(ifOp.thenBlock());
      scf::YieldOp::create(b, loc, compute(b, slot, acc));
      b.setInsertionPointToStart(ifOp.elseBlock());
      scf::YieldOp::create(b, loc, acc);
    }
    return SmallVector<Value>(ifOp.getResults());
  }

  /// The loop over the k-slices: the accumulators after the last, every
  /// copy complete.
  ValueRange kLoop() {
    auto issue = [&](OpBuilder &b, Value kt, Value slot) { issueSlice(b, kt, slot); };
    SmallVector<Value> init(numAcc, h.f32(0));
    scf::ForOp loop;
    if (stages == 1) {
      // No ring: copy, wait, multiply, and wait for every warp before the
      // next copy overwrites the slice.
      loop = scf::ForOp::create(
          b, loc, h.idx(0), kr.count, h.idx(1), init,
          [&](OpBuilder &b, Location loc, Value kt, ValueRange acc) {
            TileBuilder h{b, loc};
            issueSlice(b, kt, h.idx(0));
            NVVM::CpAsyncCommitGroupOp::create(b, loc);
            NVVM::CpAsyncWaitGroupOp::create(b, loc, 0);
            gpu::BarrierOp::create(b, loc);
            SmallVector<Value> out = computeIfActive(b, h.idx(0), acc);
            gpu::BarrierOp::create(b, loc);
            scf::YieldOp::create(b, loc, out);
          });
    } else {
      // Prologue: slices 0 .. stages-2 in flight.
      for (int64_t s = 0; s + 1 < stages; ++s)
        issueIfAny(b, loc, h.idx(s), h.idx(s), kr.count, issue);
      // Step kt: slice kt has landed (at most stages-2 newer groups pending)
      // and every warp is done with slice kt-1, whose slot then takes slice
      // kt + stages - 1; then the multiply-adds of slice kt.
      loop = scf::ForOp::create(
          b, loc, h.idx(0), kr.count, h.idx(1), init,
          [&](OpBuilder &b, Location loc, Value kt, ValueRange acc) {
            TileBuilder h{b, loc};
            NVVM::CpAsyncWaitGroupOp::create(b, loc, stages - 2);
            gpu::BarrierOp::create(b, loc);
            Value next = arith::AddIOp::create(b, loc, kt, h.idx(stages - 1));
            issueIfAny(b, loc, next, arith::RemUIOp::create(b, loc, next, h.idx(stages)), kr.count, issue);
            SmallVector<Value> out =
                computeIfActive(b, arith::RemUIOp::create(b, loc, kt, h.idx(stages)), acc);
            scf::YieldOp::create(b, loc, out);
          });
      NVVM::CpAsyncWaitGroupOp::create(b, loc, 0);
    }
    return loop.getResults();
  }

  /// Epilogue: this warp's WM x WN sub-block, through the ring where it
  /// fits (after every warp's last ldmatrix).
  void epilogue(ValueRange acc, int64_t sharedBytes) {
    std::optional<OutputStage> stage = outputStage(op, bm, bn, sharedBytes);
    if (stage)
      gpu::BarrierOp::create(b, loc);
    auto store = [&](OpBuilder &b) {
      TileBuilder h{b, loc};
      Value rowIn = arith::MulIOp::create(b, loc, warpM, h.idx(t.wm));
      Value colIn = arith::MulIOp::create(b, loc, warpN, h.idx(t.wn));
      auto value = [&](int64_t mi, int64_t nj, int64_t e) { return acc[(mi * nTiles + nj) * 4 + e]; };
      if (stage) {
        writeStage(b, loc, op, *stage, shared, rowIn, colIn, lane, mTiles, nTiles, value);
        return;
      }
      storeFragments(b, loc, op, arith::AddIOp::create(b, loc, m0, rowIn), arith::AddIOp::create(b, loc, n0, colIn),
                     lane, m, n, mTiles, nTiles, value);
    };
    finishTile(b, loc, op, active, stage, shared, bm, bn, threads, g.tid, m, n, m0, n0, store);
  }
};

/// The warps of a `registers` tile: `nSplit` groups of the tile's 8-row
/// blocks of w (`nb` blocks each), each group's `kSplit` warps sharing its
/// 32-column chunks of K; `mb` m16 blocks of x; `unroll` chunks a warp
/// loads before it multiplies.
struct RegisterTiling {
  int64_t nSplit, kSplit, nb, mb, unroll;
  int64_t accumulators() const { return mb * nb * 4; } // f32 per thread
};

/// At most 32 accumulators per thread where splitting the blocks of w
/// between warps allows it (more warps on a block of w would each take
/// fewer chunks of K); about 48 registers of loads in flight per thread.
RegisterTiling chooseRegisterTiling(int64_t bm, int64_t bn, int64_t threads) {
  const int64_t warps = threads / kWarp, mb = bm / 16, blocks = bn / 8;
  int64_t nSplit = 1;
  while (mb * (blocks / nSplit) * 4 > 32 && blocks % (nSplit * 2) == 0 && warps % (nSplit * 2) == 0)
    nSplit *= 2;
  const int64_t nb = blocks / nSplit;
  const int64_t perChunk = nb * 4 + mb * 8; // i32 registers of one chunk's loads
  return {nSplit, warps / nSplit, nb, mb, std::clamp<int64_t>(48 / perChunk, 1, 4)};
}

/// 16 bytes (four i32) of bf16 `base`[`offset`] (elements), 16-byte aligned.
Value load16(OpBuilder &b, Location loc, Value base, Value offset) {
  Value at = LLVM::GEPOp::create(b, loc, base.getType(), b.getBF16Type(), base,
                                 ValueRange{arith::IndexCastOp::create(b, loc, b.getI64Type(), offset)});
  return LLVM::LoadOp::create(b, loc, VectorType::get({4}, b.getI32Type()), at, 16);
}

/// et.matmul ... registers on the GPU: no ring. Lane (g, t) = (lane / 4,
/// lane % 4) of a warp loads, per 32-column chunk of K, columns 8 t .. 8 t
/// + 7 of row g of each of its 8-row blocks of w and of rows g and g + 8
/// of each m16 block of x, 16 bytes each, and multiplies them with two
/// mma.sync.m16n8k16: the chunk's columns 8 t + 4 s .. 8 t + 4 s + 3 are
/// step s's k positions 2 t, 2 t + 1, 2 t + 8, 2 t + 9 in both operands (a
/// permutation of K, which the sum does not see), so each register of a
/// 16-byte load is an operand register as loaded. The warps of a group of
/// blocks take its chunks in turn (chunk c to warp c % kSplit); the
/// partial sums of all but the group's first warp go through dynamic
/// shared memory, and the first adds them in warp order and stores.
LogicalResult lowerMatmulRegisters(MatmulOp op, int64_t threads) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  TileBuilder h{b, loc};
  ArrayRef<int64_t> tileSizes = op.getTile();
  const RegisterTiling t = chooseRegisterTiling(tileSizes[0], tileSizes[1], threads);
  const int64_t numAcc = t.accumulators();
  const int64_t partialBytes = (t.kSplit - 1) * t.nSplit * numAcc * kWarp * 4;
  Value shared;
  if (partialBytes) {
    FailureOr<TaskOp> task = ringInDynamicShared(op, partialBytes);
    if (failed(task))
      return failure();
    Value buffer = workgroupBuffer(*task, loc, {partialBytes / 2}, b.getBF16Type());
    buffer.getDefiningOp()->setAttr(EventTensorDialect::getDynamicSharedAttrName(), b.getUnitAttr());
    shared = elementPointer(b, loc, buffer, h.idx(0), 2, 3);
  }
  Groups g = h.groups(kWarp);
  GemmSources src = gemmSources(b, loc, op);
  const int64_t chunks = staticK(op) / 32, perWarp = (chunks + t.kSplit - 1) / t.kSplit;
  const int64_t unroll = std::min(t.unroll, perWarp);
  Value nPart = arith::RemUIOp::create(b, loc, g.group, h.idx(t.nSplit));
  Value kPart = arith::DivUIOp::create(b, loc, g.group, h.idx(t.nSplit));
  Value lane = g.lane;
  Value laneRow = arith::DivUIOp::create(b, loc, lane, h.idx(4));
  Value laneCol = arith::MulIOp::create(b, loc, arith::RemUIOp::create(b, loc, lane, h.idx(4)), h.idx(8));
  // Element offsets of this lane's rows at column laneCol; rows past N or
  // M read row 0 (their sums are not stored).
  auto rowOffset = [&](Value row, Value limit, Value stride) {
    Value inside = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, row, limit);
    Value safe = arith::SelectOp::create(b, loc, inside, row, h.idx(0));
    return arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, safe, stride), laneCol).getResult();
  };
  Value blockRow0 = arith::AddIOp::create(b, loc, op.getN0(),
                                          arith::MulIOp::create(b, loc, nPart, h.idx(t.nb * 8)));
  SmallVector<Value> wOffsets, xOffsets; // per block of w; per (m16 block, half)
  for (int64_t j = 0; j < t.nb; ++j)
    wOffsets.push_back(rowOffset(
        arith::AddIOp::create(b, loc, arith::AddIOp::create(b, loc, blockRow0, h.idx(j * 8)), laneRow), src.n,
        src.wStride));
  for (int64_t i = 0; i < t.mb; ++i)
    for (int64_t half = 0; half < 2; ++half)
      xOffsets.push_back(rowOffset(arith::AddIOp::create(b, loc, arith::AddIOp::create(b, loc, op.getM0(),
                                                                                       h.idx(i * 16 + half * 8)),
                                                         laneRow),
                                   src.m, src.xStride));
  Value zeros = arith::ConstantOp::create(b, loc, DenseElementsAttr::get(VectorType::get({4}, b.getI32Type()),
                                                                         b.getI32IntegerAttr(0).getValue()));
  SmallVector<Value> init(numAcc, h.f32(0));
  auto trips = scf::ForOp::create(
      b, loc, h.idx(0), h.idx(perWarp), h.idx(unroll), init,
      [&](OpBuilder &b, Location loc, Value it0, ValueRange acc) {
        TileBuilder h{b, loc};
        // Every load of the trip first, then the multiplies.
        SmallVector<SmallVector<Value>> w(unroll), x(unroll);
        for (int64_t u = 0; u < unroll; ++u) {
          Value c = arith::AddIOp::create(
              b, loc, kPart,
              arith::MulIOp::create(b, loc, arith::AddIOp::create(b, loc, it0, h.idx(u)), h.idx(t.kSplit)));
          Value has = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, c, h.idx(chunks));
          // A chunk past K reads chunk 0 and multiplies zeros for w.
          Value col = arith::MulIOp::create(b, loc, arith::SelectOp::create(b, loc, has, c, h.idx(0)), h.idx(32));
          for (Value off : wOffsets)
            w[u].push_back(arith::SelectOp::create(
                b, loc, has, load16(b, loc, src.wBase, arith::AddIOp::create(b, loc, off, col)), zeros));
          for (Value off : xOffsets)
            x[u].push_back(load16(b, loc, src.xBase, arith::AddIOp::create(b, loc, off, col)));
        }
        SmallVector<Value> out(acc.begin(), acc.end());
        auto reg = [&](Value v, int64_t e) {
          return vector::ExtractOp::create(b, loc, v, ArrayRef<int64_t>{e}).getResult();
        };
        for (int64_t u = 0; u < unroll; ++u)
          for (int64_t step = 0; step < 2; ++step)
            for (int64_t i = 0; i < t.mb; ++i) {
              Value lo = x[u][2 * i], hi = x[u][2 * i + 1];
              SmallVector<Value> a{reg(lo, 2 * step), reg(hi, 2 * step), reg(lo, 2 * step + 1),
                                   reg(hi, 2 * step + 1)};
              for (int64_t j = 0; j < t.nb; ++j) {
                int64_t at = (i * t.nb + j) * 4;
                SmallVector<Value, 4> d = mmaBf16(b, loc, a, {reg(w[u][j], 2 * step), reg(w[u][j], 2 * step + 1)},
                                                  ArrayRef<Value>(out).slice(at, 4));
                llvm::copy(d, out.begin() + at);
              }
            }
        scf::YieldOp::create(b, loc, out);
      });
  SmallVector<Value> acc(trips.getResults());
  // Every warp is in a group (nSplit x kSplit = the warps); the first of
  // each group stores.
  Value active = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, kPart, h.idx(0));
  if (partialBytes) {
    // Partial sums at [(kPart - 1) * nSplit + nPart][accumulator][lane].
    auto at = [&](OpBuilder &b, Value part, int64_t e) {
      TileBuilder h{b, loc};
      Value slot = arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, part, h.idx(t.nSplit)), nPart);
      Value element = arith::AddIOp::create(
          b, loc, arith::MulIOp::create(b, loc, slot, h.idx(numAcc * kWarp)), h.idx(e * kWarp));
      element = arith::AddIOp::create(b, loc, element, lane);
      return sharedAt(b, loc, shared, toI32(b, loc, arith::MulIOp::create(b, loc, element, h.idx(4))));
    };
    {
      auto ifOp = scf::IfOp::create(b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, kPart, h.idx(0)),
                                    /*withElse=*/false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(ifOp.thenBlock());
      Value part = arith::SubIOp::create(b, loc, kPart, h.idx(1));
      for (int64_t e = 0; e < numAcc; ++e)
        LLVM::StoreOp::create(b, loc, acc[e], at(b, part, e), 4);
    }
    gpu::BarrierOp::create(b, loc);
    auto ifOp = scf::IfOp::create(b, loc, TypeRange(ValueRange(acc)), active, /*withElse=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(ifOp.thenBlock());
      // A loop over the other warps' sums (unrolled, their loads all went
      // out ahead of the adds and spilled).
      auto parts = scf::ForOp::create(
          b, loc, h.idx(0), h.idx(t.kSplit - 1), h.idx(1), acc,
          [&](OpBuilder &b, Location loc, Value part, ValueRange sum) {
            SmallVector<Value> next;
            for (int64_t e = 0; e < numAcc; ++e)
              next.push_back(arith::AddFOp::create(
                  b, loc, sum[e], LLVM::LoadOp::create(b, loc, b.getF32Type(), at(b, part, e), 4)));
            scf::YieldOp::create(b, loc, next);
          });
      scf::YieldOp::create(b, loc, parts.getResults());
      b.setInsertionPointToStart(ifOp.elseBlock());
      scf::YieldOp::create(b, loc, acc);
    }
    acc.assign(ifOp.getResults().begin(), ifOp.getResults().end());
  }
  {
    auto ifOp = scf::IfOp::create(b, loc, active, /*withElse=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    storeFragments(b, loc, op, op.getM0(), blockRow0, lane, src.m, src.n, t.mb, t.nb,
                   [&](int64_t mi, int64_t nj, int64_t e) { return acc[(mi * t.nb + nj) * 4 + e]; });
  }
  // The partial sums' shared memory is free for the task's next op.
  if (partialBytes)
    gpu::BarrierOp::create(b, loc);
  op.erase();
  return success();
}

} // namespace

LogicalResult tile::lowerMatmulGPU(MatmulOp op, int64_t threads, bool wgmma) {
  ArrayRef<int64_t> tileSizes = op.getTile();
  const int64_t bm = tileSizes[0], bn = tileSizes[1], bk = tileSizes[2];
  const int64_t stages = op.getStages();
  if (threads <= 0)
    return op.emitOpError("on the GPU needs the threads per worker fixed at compile time (the "
                          "pass's `threads` option)");
  if (op.getRegisters())
    return lowerMatmulRegisters(op, threads);
  if (wgmma)
    if (std::optional<WgmmaTiling> groups = chooseWgmmaTiling(bm, bn, bk, stages, threads))
      return lowerMatmulWgmma(op, threads, *groups);
  if (op.getUp())
    return op.emitOpError("gated tile ")
           << bm << " x " << bn << " x " << bk << " with " << stages << " stages on " << threads
           << " threads needs warpgroup MMA (mma=wgmma, BM and BK multiples of 64, at least 3 stages, a "
              "warpgroup per 64 rows)";
  FailureOr<WarpTiling> tiling = chooseWarpTiling(bm, bn, threads);
  if (failed(tiling))
    return op.emitOpError("tile ")
           << bm << " x " << bn << " needs more than " << accumulatorBudget(threads)
           << " f32 accumulators per thread with " << threads << " threads per worker";
  OpBuilder b(op);
  MmaSyncMatmul mm(op, b, threads, *tiling);
  const int64_t sharedBytes = stages * (mm.sliceA + mm.sliceB) * 2;
  FailureOr<TaskOp> task = ringInDynamicShared(op, sharedBytes);
  if (failed(task))
    return failure();
  mm.task = *task;
  mm.setUp();
  mm.warpOffsets();
  ValueRange acc = mm.kLoop();
  mm.epilogue(acc, sharedBytes);
  return success();
}

void tile::lowerMatmulCPU(MatmulOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  TileBuilder h{b, loc};
  Groups threads = h.groups(1);
  ArrayRef<int64_t> tileSizes = op.getTile();
  Value m = memref::DimOp::create(b, loc, op.getX(), 0);
  Value n = memref::DimOp::create(b, loc, op.getW(), 0);
  Value k = memref::DimOp::create(b, loc, op.getW(), 1);
  Value kLo = h.idx(0);
  if (!op.getKRange().empty()) {
    kLo = arith::MinUIOp::create(b, loc, op.getKRange()[0], k);
    k = arith::MaxUIOp::create(b, loc, kLo, arith::MinUIOp::create(b, loc, op.getKRange()[1], k));
  }
  Value mEnd = arith::MinSIOp::create(b, loc, arith::AddIOp::create(b, loc, op.getM0(), h.idx(tileSizes[0])), m);
  Value up = op.getUp();
  Value nEnd = arith::MinSIOp::create(
      b, loc, arith::AddIOp::create(b, loc, op.getN0(), h.idx(up ? tileSizes[1] / 2 : tileSizes[1])), n);
  Type outType = op.getY().getType().getElementType();
  scf::ForOp::create(
      b, loc, arith::AddIOp::create(b, loc, op.getM0(), threads.tid), mEnd, threads.threads, ValueRange{},
      [&](OpBuilder &b, Location loc, Value row, ValueRange) {
        scf::ForOp::create(
            b, loc, op.getN0(), nEnd, h.idx(1), ValueRange{},
            [&](OpBuilder &b, Location loc, Value col, ValueRange) {
              SmallVector<Value> init(up ? 2 : 1, h.f32(0));
              auto sum = scf::ForOp::create(
                  b, loc, kLo, k, h.idx(1), init,
                  [&](OpBuilder &b, Location loc, Value kk, ValueRange acc) {
                    auto product = [&](Value weight, Value a) -> Value {
                      Value xv = arith::ExtFOp::create(
                          b, loc, b.getF32Type(),
                          memref::LoadOp::create(b, loc, op.getX(), ValueRange{row, kk}).getResult());
                      Value wv = arith::ExtFOp::create(
                          b, loc, b.getF32Type(),
                          memref::LoadOp::create(b, loc, weight, ValueRange{col, kk}).getResult());
                      return arith::AddFOp::create(b, loc, a, arith::MulFOp::create(b, loc, xv, wv));
                    };
                    SmallVector<Value> next{product(op.getW(), acc[0])};
                    if (up)
                      next.push_back(product(up, acc[1]));
                    scf::YieldOp::create(b, loc, next);
                  });
              Value out = sum.getResult(0);
              if (up)
                out = arith::MulFOp::create(b, loc, silu(b, loc, out), sum.getResult(1));
              if (op.getAtomic()) {
                addAtomic(b, loc, op, out, row, col);
                scf::YieldOp::create(b, loc);
                return;
              }
              if (op.getAccumulate())
                out = arith::AddFOp::create(b, loc, memref::LoadOp::create(b, loc, op.getY(), ValueRange{row, col}),
                                            out);
              if (!outType.isF32())
                out = arith::TruncFOp::create(b, loc, outType, out);
              memref::StoreOp::create(b, loc, out, op.getY(), ValueRange{row, col});
              scf::YieldOp::create(b, loc);
            });
        scf::YieldOp::create(b, loc);
      });
  op.erase();
}

namespace {

/// et.matmul: tensor cores on the GPU (the op's task takes the dynamic
/// shared memory; a diagnostic when the tile does not fit the worker),
/// scalar loops on the host.
struct MatmulLowering : public TileOpLowering<MatmulOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult matchAndRewrite(MatmulOp op, PatternRewriter &) const override {
    if (!options.gpu) {
      lowerMatmulCPU(op);
      return success();
    }
    return lowerMatmulGPU(op, options.threads, options.wgmma);
  }
};

} // namespace

void tile::populateMatmulLoweringPatterns(RewritePatternSet &patterns, const TileLoweringOptions &options) {
  patterns.add<MatmulLowering>(patterns.getContext(), options);
}
