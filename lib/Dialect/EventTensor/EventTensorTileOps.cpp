//===- EventTensorTileOps.cpp - The et dialect's tile compute ops ---------===//
//
// Verifiers of the tile compute ops (et.linear, et.matmul, the attention,
// norm, RoPE, embedding, KV-append, argmax and router tiles, et.prefetch and
// et.staged_rows), declared in EventTensorTileOps.td and lowered by
// et-lower-tile-ops.
//
//===----------------------------------------------------------------------===//

#include "EventTensor/Dialect/EventTensor/EventTensorOps.h"
#include "OpVerification.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/Matchers.h"

using namespace mlir;
using namespace mlir::et;
using mlir::et::detail::verifyInTask;

/// y = x * w^T shapes (M x K, N x K, M x N) agree where static.
static LogicalResult verifyProductShapes(Operation *op, MemRefType x, MemRefType w, MemRefType y) {
  auto match = [](int64_t a, int64_t b) {
    return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
  };
  if (!match(x.getDimSize(1), w.getDimSize(1)))
    return op->emitOpError("x has K = ") << x.getDimSize(1) << " but w has K = " << w.getDimSize(1);
  if (!match(x.getDimSize(0), y.getDimSize(0)))
    return op->emitOpError("x has ") << x.getDimSize(0) << " tokens but y has " << y.getDimSize(0);
  if (!match(w.getDimSize(0), y.getDimSize(1)))
    return op->emitOpError("w has N = ") << w.getDimSize(0) << " rows but y has " << y.getDimSize(1)
                                         << " columns";
  return success();
}

/// Two dimensions that agree: equal, or either dynamic.
static bool sameDim(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

LogicalResult LinearOp::verify() {
  if (failed(verifyInTask(*this)))
    return failure();
  auto x = getX().getType(), w = getW().getType(), y = getY().getType();
  if (failed(verifyProductShapes(getOperation(), x, w, y)))
    return failure();
  if (!ShapedType::isDynamic(x.getDimSize(0)) && x.getDimSize(0) > 16)
    return emitOpError("supports at most 16 tokens, x has ")
           << x.getDimSize(0);
  if (!ShapedType::isDynamic(x.getDimSize(1)) && x.getDimSize(1) % 8 != 0)
    return emitOpError("needs K to be a multiple of 8 (16-byte loads), got ")
           << x.getDimSize(1);
  if (getAccumulate() && !y.getElementType().isF32())
    return emitOpError("with accumulate needs an f32 y, got ") << y;
  if (getAtomic() && !getAccumulate())
    return emitOpError("atomic needs accumulate (it makes the adds into y atomic)");
  if (Value wu = getGated()) {
    auto u = cast<MemRefType>(wu.getType());
    if (!sameDim(u.getDimSize(0), w.getDimSize(0)) || !sameDim(u.getDimSize(1), w.getDimSize(1)))
      return emitOpError("gated weights must have w's shape ") << w << ", got " << u;
    if (getAccumulate())
      return emitOpError("cannot both accumulate and be gated");
  }
  Type xElt = x.getElementType();
  if (Value g = getNorm()) {
    if (!getEps())
      return emitOpError("with norm needs eps");
    if (getEps()->convertToFloat() < 0.0f)
      return emitOpError("eps must be non-negative, got ") << getEps()->convertToFloat();
    if (!xElt.isF32())
      return emitOpError("with norm reads the f32 residual stream: x must be f32, got ") << x;
    int64_t n = cast<MemRefType>(g.getType()).getDimSize(0);
    if (!sameDim(n, x.getDimSize(1)))
      return emitOpError("norm weights must have K = ") << x.getDimSize(1) << " elements, got " << n;
  } else {
    if (getEps())
      return emitOpError("eps without norm");
    if (!xElt.isBF16())
      return emitOpError("needs a bf16 x (an f32 x only with norm), got ") << x;
  }
  return success();
}

LogicalResult MatmulOp::verify() {
  if (failed(verifyInTask(*this)))
    return failure();
  auto x = getX().getType(), w = getW().getType(), y = getY().getType();
  if (failed(verifyProductShapes(getOperation(), x, w, y)))
    return failure();
  int64_t k = w.getDimSize(1);
  if (ShapedType::isDynamic(k))
    k = x.getDimSize(1);
  if (ShapedType::isDynamic(k) || k % 8 != 0)
    return emitOpError("needs a static K that is a multiple of 8 (16-byte "
                       "aligned rows), got ")
           << (ShapedType::isDynamic(k) ? std::string("?") : std::to_string(k));
  ArrayRef<int64_t> tile = getTile();
  if (tile.size() != 3)
    return emitOpError("tile must be [BM, BN, BK], got ")
           << tile.size() << " sizes";
  if (tile[0] < 16 || tile[0] > 256 || tile[0] % 16 != 0 || tile[1] < 16 ||
      tile[1] > 256 || tile[1] % 16 != 0)
    return emitOpError("tile BM and BN must be multiples of 16 in [16, 256], "
                       "got ")
           << tile[0] << " x " << tile[1];
  if (tile[2] < 16 || tile[2] > 128 || tile[2] % 16 != 0)
    return emitOpError("tile BK must be a multiple of 16 in [16, 128], got ")
           << tile[2];
  if (getStages() < 1 || getStages() > 8)
    return emitOpError("stages must be in [1, 8], got ") << getStages();
  if (getAccumulate() && !y.getElementType().isF32())
    return emitOpError("with accumulate needs an f32 y, got ") << y;
  if (getAtomic() && !getAccumulate())
    return emitOpError("atomic needs accumulate (it makes the adds into y atomic)");
  if (Value up = getUp()) {
    auto u = cast<MemRefType>(up.getType());
    for (int d = 0; d < 2; ++d)
      if (!ShapedType::isDynamic(u.getDimSize(d)) && !ShapedType::isDynamic(w.getDimSize(d)) &&
          u.getDimSize(d) != w.getDimSize(d))
        return emitOpError("gated up weight must have the shape of w, got ") << u << " and " << w;
    if (getAccumulate())
      return emitOpError("gated tiles cannot accumulate (the activation applies to the whole sum)");
  }
  if (getRegisters()) {
    if (tile[0] > 64)
      return emitOpError("registers tiles take BM up to 64, got ") << tile[0];
    if (tile[2] != 32)
      return emitOpError("registers tiles take BK 32 (a warp's 16-byte loads cover 32 columns), got ") << tile[2];
    if (k % 32 != 0)
      return emitOpError("registers tiles need K a multiple of 32, got ") << k;
    if (getUp() || !getKRange().empty())
      return emitOpError("registers tiles take the whole K of one weight (no k range, not gated)");
  }
  if (!getKRange().empty()) {
    if (getKRange().size() != 2)
      return emitOpError("k range takes two bounds (k0, k1), got ") << getKRange().size();
    for (Value bound : getKRange())
      if (std::optional<int64_t> c = getConstantIntValue(bound); c && (*c < 0 || *c % 8 != 0))
        return emitOpError("k range bounds must be non-negative multiples of 8, got ") << *c;
  }
  return success();
}

/// A 2-D memref whose rows are contiguous: strides [K, 1] (a dynamic row
/// stride or K passes).
static bool hasContiguousRows(MemRefType w) {
  SmallVector<int64_t> strides;
  int64_t offset;
  return succeeded(w.getStridesAndOffset(strides, offset)) && strides[1] == 1 &&
         (ShapedType::isDynamic(w.getDimSize(1)) || ShapedType::isDynamic(strides[0]) ||
          strides[0] == w.getDimSize(1));
}

LogicalResult PrefetchOp::verify() {
  if (failed(verifyInTask(*this)))
    return failure();
  MemRefType w = getW().getType();
  if (!hasContiguousRows(w))
    return emitOpError("w must hold its rows contiguously (strides [K, 1]), got ") << w;
  if (!ShapedType::isDynamic(w.getDimSize(1)) &&
      (w.getDimSize(1) * w.getElementTypeBitWidth() / 8) % 16 != 0)
    return emitOpError("a row of w must be a multiple of 16 bytes (bulk prefetch granule), got ") << w;
  return success();
}

LogicalResult StagedRowsOp::verify() {
  if (!isa_and_nonnull<TaskOp>(getOperation()->getParentOp()))
    return emitOpError("must be at the top level of an et.task body");
  MemRefType w = getW().getType(), view = getView().getType();
  if (!hasContiguousRows(w))
    return emitOpError("w must hold its rows contiguously (strides [K, 1]), got ") << w;
  int64_t k = w.getDimSize(1);
  if (ShapedType::isDynamic(k) || (k * 2) % 16 != 0)
    return emitOpError("needs a static K whose rows are a multiple of 16 bytes (bulk copy granule), got ")
           << w;
  auto space = dyn_cast_or_null<gpu::AddressSpaceAttr>(view.getMemorySpace());
  if (!view.getLayout().isIdentity() || !view.hasStaticShape() || !space ||
      space.getValue() != gpu::AddressSpace::Workgroup)
    return emitOpError("view must be a statically shaped, identity-layout memref in workgroup memory, got ")
           << view;
  if (view.getDimSize(0) < 1 || view.getDimSize(1) != k)
    return emitOpError("view must be R x K with R >= 1 and the K of w (") << k << "), got " << view;
  if (getOffset() < 0 || getOffset() % 16 != 0)
    return emitOpError("offset must be a non-negative multiple of 16 bytes, got ") << getOffset();
  return success();
}

LogicalResult SiluMulOp::verify() {
  if (failed(verifyInTask(*this)))
    return failure();
  auto g = getGate().getType(), u = getUp().getType(), y = getY().getType();
  for (int d = 0; d < 2; ++d)
    if (!sameDim(g.getDimSize(d), u.getDimSize(d)) ||
        !sameDim(g.getDimSize(d), y.getDimSize(d)))
      return emitOpError("gate, up and y must have the same shape, got ")
             << g << ", " << u << " and " << y;
  return success();
}

LogicalResult RMSNormOp::verify() {
  if (failed(verifyInTask(*this)))
    return failure();
  auto x = getX().getType(), y = getY().getType();
  auto w = getW().getType();
  for (int d = 0; d < 2; ++d)
    if (!sameDim(x.getDimSize(d), y.getDimSize(d)))
      return emitOpError("x and y must have the same shape, got ")
             << x << " and " << y;
  if (!sameDim(x.getDimSize(1), w.getDimSize(0)))
    return emitOpError("w has ")
           << w.getDimSize(0) << " weights but rows have " << x.getDimSize(1)
           << " elements";
  if (Value r = getResidual()) {
    auto rt = cast<MemRefType>(r.getType());
    for (int d = 0; d < 2; ++d)
      if (!sameDim(x.getDimSize(d), rt.getDimSize(d)))
        return emitOpError("residual must have x's shape, got ") << rt;
  }
  if (getEps().convertToFloat() < 0)
    return emitOpError("eps must be non-negative, got ")
           << getEps().convertToFloat();
  return success();
}

LogicalResult EmbeddingOp::verify() {
  if (failed(verifyInTask(*this)))
    return failure();
  auto t = getTable().getType(), y = getY().getType();
  auto ids = getIds().getType();
  if (!sameDim(t.getDimSize(1), y.getDimSize(1)))
    return emitOpError("table rows have ")
           << t.getDimSize(1) << " elements but y rows have " << y.getDimSize(1);
  if (!sameDim(ids.getDimSize(0), y.getDimSize(0)))
    return emitOpError("has ") << ids.getDimSize(0) << " ids but y has "
                               << y.getDimSize(0) << " rows";
  return success();
}

LogicalResult KVAppendOp::verify() {
  if (failed(verifyInTask(*this)))
    return failure();
  auto n = getNewValues().getType(), c = getCache().getType();
  for (int d = 1; d < 3; ++d)
    if (!sameDim(n.getDimSize(d), c.getDimSize(d)))
      return emitOpError("new values ")
             << n << " and cache " << c << " differ in dimension " << d;
  return success();
}

/// The checks et.rope and et.rope_into share: an even head dimension, a
/// position per token, theta and the Llama-3 scaling.
static LogicalResult verifyRotation(Operation *op, MemRefType x, MemRefType p, float theta,
                                    std::optional<ArrayRef<float>> scaling) {
  if (!x.isDynamicDim(2) && x.getDimSize(2) % 2 != 0)
    return op->emitOpError("head dimension must be even, got ") << x.getDimSize(2);
  if (!sameDim(x.getDimSize(0), p.getDimSize(0)))
    return op->emitOpError("has ") << p.getDimSize(0) << " positions for "
                                   << x.getDimSize(0) << " tokens";
  if (theta <= 1.0f)
    return op->emitOpError("theta must be greater than 1, got ") << theta;
  if (scaling) {
    if (scaling->size() != 4)
      return op->emitOpError("llama3_scaling needs [factor, low_freq_factor, "
                             "high_freq_factor, original_max_position], got ")
             << scaling->size() << " values";
    if ((*scaling)[0] <= 0 || (*scaling)[1] <= 0 || (*scaling)[2] <= (*scaling)[1] || (*scaling)[3] <= 0)
      return op->emitOpError("llama3_scaling needs factor > 0, 0 < "
                             "low_freq_factor < high_freq_factor and "
                             "original_max_position > 0");
  }
  return success();
}

LogicalResult RoPEOp::verify() {
  if (failed(verifyInTask(*this)))
    return failure();
  return verifyRotation(*this, getX().getType(), getPositions().getType(),
                        getTheta().convertToFloat(), getLlama3Scaling());
}

LogicalResult RoPEIntoOp::verify() {
  if (failed(verifyInTask(*this)))
    return failure();
  auto x = getX().getType(), out = getOut().getType();
  if (failed(verifyRotation(*this, x, getPositions().getType(), getTheta().convertToFloat(),
                            getLlama3Scaling())))
    return failure();
  for (int d = 1; d < 3; ++d)
    if (!sameDim(x.getDimSize(d), out.getDimSize(d)))
      return emitOpError("x ") << x << " and out " << out << " differ in dimension " << d;
  if (Value w = getNorm()) {
    auto wt = cast<MemRefType>(w.getType());
    if (!sameDim(wt.getDimSize(0), x.getDimSize(2)))
      return emitOpError("norm has ") << wt.getDimSize(0) << " weights but heads have "
                                      << x.getDimSize(2) << " elements";
    if (!getEps())
      return emitOpError("norm needs eps");
    if (getEps()->convertToFloat() < 0)
      return emitOpError("eps must be non-negative, got ") << getEps()->convertToFloat();
  } else if (getEps()) {
    return emitOpError("eps without norm");
  }
  return success();
}

LogicalResult ArgmaxOp::verify() {
  if (failed(verifyInTask(*this)))
    return failure();
  auto x = getX().getType(), v = getValues().getType(), i = getIndices().getType();
  if (!sameDim(x.getDimSize(0), v.getDimSize(0)) ||
      !sameDim(v.getDimSize(0), i.getDimSize(0)) ||
      !sameDim(v.getDimSize(1), i.getDimSize(1)))
    return emitOpError("x, values and indices must agree on the tokens, and "
                       "values and indices on the slots, got ")
           << x << ", " << v << " and " << i;
  if (Value f = getFrom())
    if (cast<MemRefType>(f.getType()).getShape() != x.getShape())
      return emitOpError("from must have x's shape, got ") << f.getType();
  if (getThreshold() && !getTemperature())
    return emitOpError("above (a sampling threshold) needs sample");
  if (getKeyOffset() && !getTemperature())
    return emitOpError("key_offset (the noise's column offset) needs sample");
  if (!getTemperature())
    return success();
  if (!getSeed() || !getCounter())
    return emitOpError("sample needs a temperature, a seed and a counter per token");
  for (Value perToken : {getTemperature(), getSeed(), getCounter()})
    if (!sameDim(cast<MemRefType>(perToken.getType()).getDimSize(0), x.getDimSize(0)))
      return emitOpError("sample's temperature, seed and counter must have one entry per token of x, got ")
             << perToken.getType() << " for " << x;
  if (Value t = getThreshold())
    if (!sameDim(cast<MemRefType>(t.getType()).getDimSize(0), x.getDimSize(0)))
      return emitOpError("above's threshold must have one entry per token of x, got ") << t.getType() << " for "
                                                                                        << x;
  return success();
}

/// Shapes of a chunked candidate list (et.top_candidates and the ops that
/// read one).
static LogicalResult verifyCandidateShapes(Operation *op, MemRefType x, MemRefType ids, MemRefType vals,
                                           MemRefType stats, int64_t minK) {
  int64_t chunks = ids.getDimSize(1), k = ids.getDimSize(2);
  if (ShapedType::isDynamic(chunks) || ShapedType::isDynamic(k) || chunks < 1 || k < 1 ||
      vals.getDimSize(1) != chunks || vals.getDimSize(2) != k)
    return op->emitOpError("candidate ids and values need the same static chunks and entries (C x K >= 1), got ")
           << ids << " and " << vals;
  if (k < minK)
    return op->emitOpError("candidates must hold at least ") << minK << " entries a chunk, got " << ids;
  if (stats.getDimSize(1) != chunks || stats.getDimSize(2) != 4)
    return op->emitOpError("candidate stats need 4 values per chunk of the candidates, got ") << stats << " for "
                                                                                              << ids;
  for (MemRefType t : {ids, vals, stats})
    if (!sameDim(t.getDimSize(0), x.getDimSize(0)))
      return op->emitOpError("candidates must have one row per token of x, got ") << t << " for " << x;
  return success();
}

/// The candidates of `et.top_candidates` that `op` reads (`ids`, `vals`:
/// one row per token of `x`, C chunks of K; `stats`: C chunks of 4), if it
/// has them; `minK` is the least K the op needs.
static LogicalResult verifyCandidates(Operation *op, MemRefType x, Value idsV, Value valsV, Value statsV,
                                      int64_t minK = 1) {
  if (!idsV)
    return success();
  auto ids = cast<MemRefType>(idsV.getType()), vals = cast<MemRefType>(valsV.getType()),
       stats = cast<MemRefType>(statsV.getType());
  return verifyCandidateShapes(op, x, ids, vals, stats, minK);
}

LogicalResult SampleThresholdOp::verify() {
  if (failed(verifyInTask(*this)))
    return failure();
  auto x = getX().getType();
  for (Value perToken : {getTemperature(), getTopK(), getTopP(), getMinP(), getThreshold()})
    if (!sameDim(cast<MemRefType>(perToken.getType()).getDimSize(0), x.getDimSize(0)))
      return emitOpError("temperature, top_k, top_p, min_p and threshold must have one entry per token of x, "
                         "got ")
             << perToken.getType() << " for " << x;
  if (Value covered = getCovered())
    if (!sameDim(cast<MemRefType>(covered.getType()).getDimSize(0), x.getDimSize(0)))
      return emitOpError("covered must have one entry per token of x, got ") << covered.getType() << " for " << x;
  return verifyCandidates(*this, x, getCandIds(), getCandVals(), getCandStats());
}

LogicalResult LogitBiasOp::verify() {
  if (failed(verifyInTask(*this)))
    return failure();
  auto x = getX().getType(), ids = getIds().getType(), values = getValues().getType();
  int64_t k = ids.getDimSize(1);
  if (ShapedType::isDynamic(k) || k < 1 || values.getDimSize(1) != k)
    return emitOpError("ids and values need the same static number of entries per token (K >= 1), got ")
           << ids << " and " << values;
  if (!sameDim(ids.getDimSize(0), x.getDimSize(0)) || !sameDim(values.getDimSize(0), x.getDimSize(0)))
    return emitOpError("ids and values must have one row per token of x, got ") << ids << " and " << values
                                                                                 << " for " << x;
  return success();
}

LogicalResult TopLogprobsOp::verify() {
  if (failed(verifyInTask(*this)))
    return failure();
  auto x = getX().getType(), ids = getIds().getType(), values = getValues().getType();
  for (Value perToken : {getCount(), getLse()})
    if (!sameDim(cast<MemRefType>(perToken.getType()).getDimSize(0), x.getDimSize(0)))
      return emitOpError("count and lse must have one entry per token of x, got ") << perToken.getType() << " for "
                                                                                   << x;
  int64_t n = ids.getDimSize(1);
  if (ShapedType::isDynamic(n) || n < 1 || values.getDimSize(1) != n)
    return emitOpError("ids and values need the same static number of entries per row (N >= 1), got ")
           << ids << " and " << values;
  if (!sameDim(ids.getDimSize(0), values.getDimSize(0)))
    return emitOpError("ids and values must have the same rows, got ") << ids << " and " << values;
  // The selects among equal logits go over 24 bits of the id.
  if (!ShapedType::isDynamic(x.getDimSize(1)) && x.getDimSize(1) > (int64_t{1} << 24))
    return emitOpError("rows of x must have at most 2^24 columns, got ") << x;
  return verifyCandidates(*this, x, getCandIds(), getCandVals(), getCandStats(), n);
}

LogicalResult TopCandidatesOp::verify() {
  if (failed(verifyInTask(*this)))
    return failure();
  auto x = getX().getType();
  if (!sameDim(getTemperature().getType().getDimSize(0), x.getDimSize(0)))
    return emitOpError("temperature must have one entry per token of x, got ") << getTemperature().getType()
                                                                                 << " for " << x;
  // The select among equal logits goes over 24 bits of the id.
  if (!ShapedType::isDynamic(x.getDimSize(1)) && x.getDimSize(1) > (int64_t{1} << 24))
    return emitOpError("rows of x must have at most 2^24 columns, got ") << x;
  return verifyCandidateShapes(*this, x, getIds().getType(), getVals().getType(), getStats().getType(), 1);
}

LogicalResult PenalizeOp::verify() {
  if (failed(verifyInTask(*this)))
    return failure();
  auto x = getX().getType(), counts = getCounts().getType();
  for (Value perToken : {getOutputsFrom(), getRepetition(), getFrequency(), getPresence()})
    if (!sameDim(cast<MemRefType>(perToken.getType()).getDimSize(0), x.getDimSize(0)))
      return emitOpError("outputs_from, repetition, frequency and presence must have one entry per token of x, "
                         "got ")
             << perToken.getType() << " for " << x;
  if (!sameDim(counts.getDimSize(0), x.getDimSize(0)) || !sameDim(counts.getDimSize(1), x.getDimSize(1)))
    return emitOpError("counts must have the shape of x, got ") << counts << " for " << x;
  return success();
}

LogicalResult RouterTopKOp::verify() {
  if (failed(verifyInTask(*this)))
    return failure();
  auto x = getLogits().getType(), ids = getIds().getType(), w = getWeights().getType();
  int64_t k = ids.getDimSize(1);
  if (ShapedType::isDynamic(k) || k < 1 || w.getDimSize(1) != k)
    return emitOpError("ids and weights need the same static number of experts per token (K >= 1), got ")
           << ids << " and " << w;
  if (!sameDim(x.getDimSize(0), ids.getDimSize(0)) || !sameDim(x.getDimSize(0), w.getDimSize(0)))
    return emitOpError("logits, ids and weights must have one row per token, got ") << x << ", " << ids
                                                                                      << " and " << w;
  int64_t e = x.getDimSize(1);
  if (!ShapedType::isDynamic(e) && e < k)
    return emitOpError("chooses ") << k << " experts of " << e;
  return success();
}

LogicalResult AttentionSplitOp::verify() {
  if (failed(verifyInTask(*this)))
    return failure();
  auto q = getQ().getType(), k = getK().getType(), v = getV().getType();
  auto o = getO().getType(), lse = getLse().getType();
  if (k.getShape() != v.getShape())
    return emitOpError("k and v caches must have the same shape, got ")
           << k << " and " << v;
  int64_t d = q.getDimSize(1);
  if (ShapedType::isDynamic(d) || d % 32 != 0)
    return emitOpError("needs a static head dimension that is a multiple of "
                       "32, got ")
           << q;
  if (!sameDim(d, k.getDimSize(2)) || !sameDim(d, o.getDimSize(2)))
    return emitOpError("q, k and o must have the same head dimension, got ")
           << q << ", " << k << " and " << o;
  int64_t hq = q.getDimSize(0), hkv = k.getDimSize(1);
  if (!ShapedType::isDynamic(hq) && !ShapedType::isDynamic(hkv) &&
      (hkv == 0 || hq % hkv != 0))
    return emitOpError("query heads (")
           << hq << ") must be a multiple of KV heads (" << hkv << ")";
  if (!sameDim(hq, o.getDimSize(1)) || !sameDim(hq, lse.getDimSize(1)) ||
      !sameDim(o.getDimSize(0), lse.getDimSize(0)))
    return emitOpError("o must be splits x Hq x D and lse splits x Hq, got ")
           << o << " and " << lse;
  if (getScale().convertToFloat() <= 0)
    return emitOpError("scale must be positive, got ")
           << getScale().convertToFloat();
  if (getNewK()) {
    if (!getStable())
      return emitOpError("append needs stable: the appended rows start at it");
    auto kn = getNewK().getType(), vn = getNewV().getType();
    if (kn.getShape() != vn.getShape())
      return emitOpError("appended keys and values must have the same shape, got ") << kn << " and " << vn;
    if (!sameDim(d, kn.getDimSize(1)))
      return emitOpError("appended rows must be N x D with q's head dimension, got ") << kn << " and " << q;
  }
  return success();
}

LogicalResult AttentionPrefillOp::verify() {
  if (failed(verifyInTask(*this)))
    return failure();
  auto q = getQ().getType(), k = getK().getType(), v = getV().getType(), o = getO().getType();
  if (k.getShape() != v.getShape())
    return emitOpError("k and v caches must have the same shape, got ") << k << " and " << v;
  int64_t d = q.getDimSize(2);
  if (ShapedType::isDynamic(d) || d % 16 != 0)
    return emitOpError("needs a static head dimension that is a multiple of 16, got ") << q;
  if (!sameDim(d, k.getDimSize(2)) || !sameDim(d, o.getDimSize(2)))
    return emitOpError("q, k and o must have the same head dimension, got ")
           << q << ", " << k << " and " << o;
  if (!sameDim(q.getDimSize(0), o.getDimSize(0)) || !sameDim(q.getDimSize(1), o.getDimSize(1)))
    return emitOpError("o must have q's shape (T x Hq x D), got ") << q << " and " << o;
  int64_t hq = q.getDimSize(1), hkv = k.getDimSize(1);
  if (ShapedType::isDynamic(hq) || ShapedType::isDynamic(hkv) || hkv == 0 || hq % hkv != 0)
    return emitOpError("query heads (")
           << hq << ") must be a static multiple of KV heads (" << hkv << ")";
  if (getScale().convertToFloat() <= 0)
    return emitOpError("scale must be positive, got ") << getScale().convertToFloat();
  return success();
}

LogicalResult AttentionMergeOp::verify() {
  if (failed(verifyInTask(*this)))
    return failure();
  auto o = getO().getType(), lse = getLse().getType(), out = getOut().getType();
  if (!sameDim(o.getDimSize(0), lse.getDimSize(0)) ||
      !sameDim(o.getDimSize(1), lse.getDimSize(1)) ||
      !sameDim(o.getDimSize(1), out.getDimSize(0)) ||
      !sameDim(o.getDimSize(2), out.getDimSize(1)))
    return emitOpError("o (splits x H x D), lse (splits x H) and out (H x D) "
                       "disagree, got ")
           << o << ", " << lse << " and " << out;
  return success();
}
