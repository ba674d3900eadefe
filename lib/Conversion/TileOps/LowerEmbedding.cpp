//===- LowerEmbedding.cpp - et.embedding and et.kv_append -------------------===//
//
// Row copies: embedding rows gathered by token id, and this step's keys
// and values appended to the caches.
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

/// Embedding gather on the GPU with 16-byte loads: 8 bf16 elements of a
/// row per thread and trip (or 4 f32), `width` trips' loads (ids, then
/// rows) issued before their stores. One element at a time, the prompt's
/// first 8-row tiles took 25 us of their 33 on the H200 (docs/experiments/).
/// Needs H a multiple of the chunk and row-contiguous table and output.
static bool lowerEmbeddingVector(EmbeddingOp op, int64_t width) {
  MemRefType tType = op.getTable().getType(), yType = op.getY().getType();
  int64_t hidden = tType.getDimSize(1);
  Type inType = tType.getElementType(), outType = yType.getElementType();
  int64_t per = 16 / (inType.getIntOrFloatBitWidth() / 8);
  if (ShapedType::isDynamic(hidden) || hidden % per || !rowsOf(tType, hidden) || !rowsOf(yType, hidden))
    return false;
  OpBuilder b(op);
  Location loc = op.getLoc();
  TileBuilder h{b, loc};
  Value vocab = memref::DimOp::create(b, loc, op.getTable(), 0);
  Value m = memref::DimOp::create(b, loc, op.getY(), 0);
  Value perRow = h.idx(hidden / per);
  Value total = arith::MulIOp::create(b, loc, m, perRow);
  auto inVec = VectorType::get({per}, inType), f32Vec = VectorType::get({per}, b.getF32Type()),
       outVec = VectorType::get({per}, outType);
  struct Chunk {
    Value tok, col, id, valid;
  };
  // Chunk c: its token, first column and table row.
  auto chunkAt = [&](OpBuilder &b, Location loc, Value c) {
    Chunk k;
    k.tok = arith::DivUIOp::create(b, loc, c, perRow);
    k.col = arith::MulIOp::create(b, loc, arith::RemUIOp::create(b, loc, c, perRow), h.idx(per));
    k.id = idToIndex(b, loc, memref::LoadOp::create(b, loc, op.getIds(), ValueRange{k.tok}));
    k.valid = arith::AndIOp::create(b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, k.id, h.idx(0)),
                                    arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, k.id, vocab));
    return k;
  };
  // The chunk's row of the table in f32 (zeros for an id outside it).
  auto load = [&](OpBuilder &b, Location loc, const Chunk &k) -> Value {
    auto pick = scf::IfOp::create(b, loc, TypeRange{f32Vec}, k.valid, /*withElse=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(pick.thenBlock());
    auto v = vector::LoadOp::create(b, loc, inVec, op.getTable(), ValueRange{k.id, k.col});
    v.setAlignment(16);
    Value f = v;
    if (!inType.isF32())
      f = arith::ExtFOp::create(b, loc, f32Vec, f);
    scf::YieldOp::create(b, loc, f);
    b.setInsertionPointToStart(pick.elseBlock());
    scf::YieldOp::create(b, loc, ValueRange{arith::ConstantOp::create(
                                     b, loc, f32Vec, DenseElementsAttr::get(f32Vec, b.getF32FloatAttr(0)))});
    return pick.getResult(0);
  };
  auto store = [&](OpBuilder &b, Location loc, const Chunk &k, Value v) {
    if (!outType.isF32())
      v = arith::TruncFOp::create(b, loc, outVec, v);
    auto st = vector::StoreOp::create(b, loc, v, op.getY(), ValueRange{k.tok, k.col});
    st.setAlignment(16);
  };
  // A trip's ids, then its rows, then its stores.
  groupedThreadLoop(b, loc, total, width, [&](OpBuilder &b, Location loc, ArrayRef<Value> cs) {
    SmallVector<Chunk> ks;
    SmallVector<Value> vs;
    for (Value c : cs)
      ks.push_back(chunkAt(b, loc, c));
    for (const Chunk &k : ks)
      vs.push_back(load(b, loc, k));
    for (auto [k, v] : llvm::zip(ks, vs))
      store(b, loc, k, v);
  });
  op.erase();
  return true;
}

static void lowerEmbedding(EmbeddingOp op, bool gpu, int64_t width) {
  if (gpu && lowerEmbeddingVector(op, width))
    return;
  OpBuilder b(op);
  Location loc = op.getLoc();
  TileBuilder h{b, loc};
  Value vocab = memref::DimOp::create(b, loc, op.getTable(), 0);
  Value hidden = memref::DimOp::create(b, loc, op.getTable(), 1);
  Value m = memref::DimOp::create(b, loc, op.getY(), 0);
  Type outType = op.getY().getType().getElementType();
  Value total = arith::MulIOp::create(b, loc, m, hidden);
  threadLoop(b, loc, total, [&](OpBuilder &b, Location loc, Value e) {
    Value tok = arith::DivUIOp::create(b, loc, e, hidden);
    Value j = arith::RemUIOp::create(b, loc, e, hidden);
    Value id = idToIndex(b, loc, memref::LoadOp::create(b, loc, op.getIds(), ValueRange{tok}));
    Value valid = arith::AndIOp::create(
        b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, id, h.idx(0)),
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, id, vocab));
    auto pick = scf::IfOp::create(b, loc, TypeRange{b.getF32Type()}, valid, /*withElse=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(pick.thenBlock());
      Value v = toF32(b, loc, memref::LoadOp::create(b, loc, op.getTable(), ValueRange{id, j}));
      scf::YieldOp::create(b, loc, ValueRange{v});
      b.setInsertionPointToStart(pick.elseBlock());
      scf::YieldOp::create(b, loc, ValueRange{h.f32(0)});
    }
    memref::StoreOp::create(b, loc, fromF32(b, loc, pick.getResult(0), outType), op.getY(),
                            ValueRange{tok, j});
  });
  op.erase();
}

/// KV append: thread-strided elements. With `width` (rows-in-flight) above
/// 1, whole trips of `width` x threads elements load all of theirs before
/// any store (a prompt's 8-row tile appends 8 x 8 x 64 elements per cache on
/// 256 threads: one at a time, 16 dependent round trips), and the rest go
/// one per thread and trip.
static void lowerKVAppend(KVAppendOp op, int64_t width) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  Value src = op.getNewValues(), cache = op.getCache();
  Value m = memref::DimOp::create(b, loc, src, 0);
  Value heads = memref::DimOp::create(b, loc, src, 1);
  Value d = memref::DimOp::create(b, loc, src, 2);
  Value s = memref::DimOp::create(b, loc, cache, 0);
  Value perTok = arith::MulIOp::create(b, loc, heads, d);
  Value total = arith::MulIOp::create(b, loc, m, perTok);
  Type outType = op.getCache().getType().getElementType();
  // Element e: its (token, head, dim) in src, its cache row, whether that
  // row is inside the cache.
  struct Element {
    Value tok, hh, dd, row, inside;
  };
  auto element = [&](OpBuilder &b, Location loc, Value e) {
    Element el;
    el.tok = arith::DivUIOp::create(b, loc, e, perTok);
    Value rest = arith::RemUIOp::create(b, loc, e, perTok);
    el.hh = arith::DivUIOp::create(b, loc, rest, d);
    el.dd = arith::RemUIOp::create(b, loc, rest, d);
    el.row = arith::AddIOp::create(b, loc, op.getPosition(), el.tok);
    el.inside = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, el.row, s);
    return el;
  };
  auto load = [&](OpBuilder &b, Location loc, const Element &el) {
    return toF32(b, loc, memref::LoadOp::create(b, loc, src, ValueRange{el.tok, el.hh, el.dd}));
  };
  auto store = [&](OpBuilder &b, Location loc, const Element &el, Value v) {
    auto guard = scf::IfOp::create(b, loc, el.inside, /*withElse=*/false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(guard.thenBlock());
    memref::StoreOp::create(b, loc, fromF32(b, loc, v, outType), cache, ValueRange{el.row, el.hh, el.dd});
  };
  groupedThreadLoop(b, loc, total, width, [&](OpBuilder &b, Location loc, ArrayRef<Value> es) {
    SmallVector<Element> els;
    SmallVector<Value> vs;
    for (Value e : es) {
      els.push_back(element(b, loc, e));
      vs.push_back(load(b, loc, els.back()));
    }
    for (auto [el, v] : llvm::zip(els, vs))
      store(b, loc, el, v);
  });
  op.erase();
}

namespace {

struct EmbeddingLowering : public TileOpLowering<EmbeddingOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult matchAndRewrite(EmbeddingOp op, PatternRewriter &) const override {
    lowerEmbedding(op, options.gpu, options.rowsInFlight);
    return success();
  }
};

struct KVAppendLowering : public TileOpLowering<KVAppendOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult matchAndRewrite(KVAppendOp op, PatternRewriter &) const override {
    lowerKVAppend(op, options.rowsInFlight);
    return success();
  }
};

} // namespace

void populateEmbeddingLoweringPatterns(RewritePatternSet &patterns, const TileLoweringOptions &options) {
  patterns.add<EmbeddingLowering, KVAppendLowering>(patterns.getContext(), options);
}
} // namespace mlir::et::tile
