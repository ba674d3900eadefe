//===- LowerAttentionPrefill.cpp - causal prefill attention ---------------===//
//
// et.attention_prefill, lowered by et-lower-tile-ops:
//
// GPU (tensor cores, flash-attention style): each warp owns 16 rows, a row
// being one (token, query head) pair of the tile's block of tokens and its
// KV head's query group. Its q fragments stay in registers. Blocks of 64
// cache positions of K and V go through shared memory (cp.async, three
// slots, two blocks in flight). Per block: scores S = q K^T with mma.sync
// (K fragments through ldmatrix), the causal mask, an online softmax (row
// maxima across the four lanes of a row with shuffles), and O += P V with
// P in bf16 taken straight from the score registers and V fragments
// through ldmatrix.trans. At the end O / l goes to `o`.
//
// Loops (the CPU, and tiles the GPU path does not take): one (token, head)
// row per thread at a time, three passes over the positions.
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

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::et;
using namespace mlir::et::tile;

namespace {

constexpr int64_t kKvBlock = 64; // cache positions per shared-memory block
constexpr int64_t kSlots = 3;    // blocks in shared memory: two in flight

struct PrefillShape {
  int64_t heads, kvHeads, group, dim, block;
};

PrefillShape prefillShape(AttentionPrefillOp op) {
  MemRefType q = op.getQ().getType(), k = op.getK().getType();
  int64_t hq = q.getDimSize(1), hkv = k.getDimSize(1);
  return {hq, hkv, hq / hkv, q.getDimSize(2), static_cast<int64_t>(op.getBlock())};
}

Value negInf(OpBuilder &b, Location loc) {
  return arith::ConstantFloatOp::create(b, loc, b.getF32Type(),
                                        APFloat(-std::numeric_limits<float>::infinity()));
}

} // namespace

SmallVector<Value, 4> tile::ldmatrixX4(OpBuilder &b, Location loc, Value at, bool trans) {
  MLIRContext *ctx = b.getContext();
  Type i32Type = b.getI32Type();
  Type quadType = LLVM::LLVMStructType::getLiteral(ctx, {i32Type, i32Type, i32Type, i32Type});
  Value v = NVVM::LdMatrixOp::create(b, loc, quadType, at, 4, trans ? NVVM::MMALayout::col : NVVM::MMALayout::row,
                                     NVVM::LdStMatrixShapeAttr::get(ctx, 8, 8), NVVM::LdStMatrixEltType::B16);
  SmallVector<Value, 4> regs;
  for (int64_t i = 0; i < 4; ++i)
    regs.push_back(LLVM::ExtractValueOp::create(b, loc, v, i));
  return regs;
}

SmallVector<Value, 4> tile::mmaBf16(OpBuilder &b, Location loc, ArrayRef<Value> a, ArrayRef<Value> bFrag,
                                    ArrayRef<Value> c) {
  Type f32 = b.getF32Type();
  Type mmaType = LLVM::LLVMStructType::getLiteral(b.getContext(), {f32, f32, f32, f32});
  Value d = NVVM::MmaOp::create(b, loc, mmaType, a, bFrag, c, {16, 8, 16}, std::nullopt, std::nullopt,
                                std::array<NVVM::MMATypes, 2>{NVVM::MMATypes::bf16, NVVM::MMATypes::bf16},
                                std::array<NVVM::MMALayout, 2>{NVVM::MMALayout::row, NVVM::MMALayout::col});
  SmallVector<Value, 4> out;
  for (int64_t e = 0; e < 4; ++e)
    out.push_back(LLVM::ExtractValueOp::create(b, loc, d, e));
  return out;
}

std::pair<Value, Value> tile::ldmatrixLaneOffsets(OpBuilder &b, Location loc, Value lane, int64_t pitch) {
  TileBuilder h{b, loc};
  Value l8 = arith::RemUIOp::create(b, loc, lane, h.idx(8));
  Value l16 = arith::DivUIOp::create(b, loc, lane, h.idx(16));
  Value l8m2 = arith::RemUIOp::create(b, loc, arith::DivUIOp::create(b, loc, lane, h.idx(8)), h.idx(2));
  auto offset = [&](Value row, Value col) {
    return toI32(b, loc, arith::MulIOp::create(
                             b, loc, arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, row, h.idx(pitch)), col),
                             h.idx(2)));
  };
  Value k = offset(arith::AddIOp::create(b, loc, l8, arith::MulIOp::create(b, loc, l16, h.idx(8))),
                   arith::MulIOp::create(b, loc, l8m2, h.idx(8)));
  Value v = offset(arith::AddIOp::create(b, loc, l8, arith::MulIOp::create(b, loc, l8m2, h.idx(8))),
                   arith::MulIOp::create(b, loc, l16, h.idx(8)));
  return {k, v};
}

Value tile::packBf16(OpBuilder &b, Location loc, Value lo, Value hi) {
  Type f32 = b.getF32Type();
  Value v = vector::FromElementsOp::create(b, loc, VectorType::get({2}, f32), ValueRange{lo, hi});
  v = arith::TruncFOp::create(b, loc, VectorType::get({2}, b.getBF16Type()), v);
  return LLVM::BitcastOp::create(b, loc, b.getI32Type(), v).getResult();
}

void tile::lowerAttentionPrefillLoops(AttentionPrefillOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  TileBuilder h{b, loc};
  PrefillShape sh = prefillShape(op);
  Type f32 = b.getF32Type();
  Groups th = h.groups(1);
  Value tokens = memref::DimOp::create(b, loc, op.getQ(), 0);
  Value rows = h.idx(sh.block * sh.group);
  Value scale = h.f32(op.getScale().convertToFloat());
  Type outType = op.getO().getType().getElementType();
  auto accType = MemRefType::get({sh.dim}, f32);
  scf::ForOp::create(
      b, loc, th.tid, rows, th.threads, ValueRange{}, [&](OpBuilder &b, Location loc, Value r, ValueRange) {
        TileBuilder h{b, loc};
        Value t = arith::AddIOp::create(b, loc, op.getT0(), arith::DivUIOp::create(b, loc, r, h.idx(sh.group)));
        Value head = arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, op.getKvHead(), h.idx(sh.group)),
                                           arith::RemUIOp::create(b, loc, r, h.idx(sh.group)));
        auto live = scf::IfOp::create(b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, t, tokens),
                                      /*withElse=*/false);
        {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(live.thenBlock());
          Value end = arith::AddIOp::create(b, loc, arith::AddIOp::create(b, loc, op.getPos0(), t), h.idx(1));
          auto score = [&](OpBuilder &b, Value j) {
            TileBuilder h{b, loc};
            auto dot = scf::ForOp::create(
                b, loc, h.idx(0), h.idx(sh.dim), h.idx(1), ValueRange{h.f32(0)},
                [&](OpBuilder &b, Location loc, Value d, ValueRange acc) {
                  Value qv = memref::LoadOp::create(b, loc, op.getQ(), ValueRange{t, head, d});
                  if (!qv.getType().isF32())
                    qv = arith::ExtFOp::create(b, loc, f32, qv);
                  Value kv = arith::ExtFOp::create(
                      b, loc, f32,
                      memref::LoadOp::create(b, loc, op.getK(), ValueRange{j, op.getKvHead(), d}).getResult());
                  scf::YieldOp::create(b, loc,
                                       ValueRange{arith::AddFOp::create(b, loc, acc[0],
                                                                        arith::MulFOp::create(b, loc, qv, kv))});
                });
            return arith::MulFOp::create(b, loc, dot.getResult(0), scale).getResult();
          };
          // Pass 1: the maximum score; pass 2: the softmax denominator.
          auto maxLoop = scf::ForOp::create(b, loc, h.idx(0), end, h.idx(1), ValueRange{negInf(b, loc)},
                                            [&](OpBuilder &b, Location loc, Value j, ValueRange m) {
                                              scf::YieldOp::create(
                                                  b, loc, ValueRange{arith::MaximumFOp::create(b, loc, m[0],
                                                                                               score(b, j))});
                                            });
          Value mx = maxLoop.getResult(0);
          auto sumLoop = scf::ForOp::create(
              b, loc, h.idx(0), end, h.idx(1), ValueRange{h.f32(0)},
              [&](OpBuilder &b, Location loc, Value j, ValueRange l) {
                Value e = math::ExpOp::create(b, loc, arith::SubFOp::create(b, loc, score(b, j), mx));
                scf::YieldOp::create(b, loc, ValueRange{arith::AddFOp::create(b, loc, l[0], e)});
              });
          Value inv = arith::DivFOp::create(b, loc, h.f32(1), sumLoop.getResult(0));
          // Pass 3: o = sum_j p_j v_j, accumulated in a private row.
          Value acc = memref::AllocaOp::create(b, loc, accType);
          scf::ForOp::create(b, loc, h.idx(0), h.idx(sh.dim), h.idx(1), ValueRange{},
                             [&](OpBuilder &b, Location loc, Value d, ValueRange) {
                               memref::StoreOp::create(b, loc, TileBuilder{b, loc}.f32(0), acc, ValueRange{d});
                               scf::YieldOp::create(b, loc);
                             });
          scf::ForOp::create(
              b, loc, h.idx(0), end, h.idx(1), ValueRange{}, [&](OpBuilder &b, Location loc, Value j, ValueRange) {
                TileBuilder h{b, loc};
                Value p = arith::MulFOp::create(
                    b, loc, math::ExpOp::create(b, loc, arith::SubFOp::create(b, loc, score(b, j), mx)), inv);
                scf::ForOp::create(
                    b, loc, h.idx(0), h.idx(sh.dim), h.idx(1), ValueRange{},
                    [&](OpBuilder &b, Location loc, Value d, ValueRange) {
                      Value vv = arith::ExtFOp::create(
                          b, loc, f32,
                          memref::LoadOp::create(b, loc, op.getV(), ValueRange{j, op.getKvHead(), d}).getResult());
                      Value old = memref::LoadOp::create(b, loc, acc, ValueRange{d});
                      memref::StoreOp::create(b, loc, arith::AddFOp::create(b, loc, old, arith::MulFOp::create(b, loc, p, vv)),
                                              acc, ValueRange{d});
                      scf::YieldOp::create(b, loc);
                    });
                scf::YieldOp::create(b, loc);
              });
          scf::ForOp::create(b, loc, h.idx(0), h.idx(sh.dim), h.idx(1), ValueRange{},
                             [&](OpBuilder &b, Location loc, Value d, ValueRange) {
                               Value v = memref::LoadOp::create(b, loc, acc, ValueRange{d});
                               if (!outType.isF32())
                                 v = arith::TruncFOp::create(b, loc, outType, v);
                               memref::StoreOp::create(b, loc, v, op.getO(), ValueRange{t, head, d});
                               scf::YieldOp::create(b, loc);
                             });
        }
        scf::YieldOp::create(b, loc);
      });
  op.erase();
}

namespace {

/// lowerAttentionPrefillGPU's steps and the values they share: the shapes,
/// the shared-memory slots and the copies into them, this thread's two
/// rows and their q fragments.
struct PrefillGPU {
  AttentionPrefillOp op;
  OpBuilder &b;
  Location loc;
  TileBuilder h;
  TaskOp task;
  PrefillShape sh;
  int64_t threads;
  int64_t dim, pitch; // bf16 elements per shared row
  int64_t blockBytes;
  int64_t warpsUsed, kSteps, dTiles;
  float scaleLog2;
  Type f32, i32Type, i64Type;

  Value buffer, shared;
  Groups g;
  Value lane, warp, tokens, cacheLen, t0, pos0, kvHead, lastToken, positions, kvBlocks;
  memref::ExtractStridedMetadataOp kMeta, vMeta, qMeta;
  Value kBase, vBase;
  Value quad, quarter, activeWarp, rowWarp;
  Value rowTok[2], rowHead[2], rowLive[2], rowLimit[2];
  Type qElem;
  Value qBase;
  SmallVector<SmallVector<Value, 4>> qFrag;
  Value kLane, vLane;

  PrefillGPU(AttentionPrefillOp op, OpBuilder &b, TaskOp task, PrefillShape sh, int64_t threads)
      : op(op), b(b), loc(op.getLoc()), h{b, loc}, task(task), sh(sh), threads(threads), dim(sh.dim),
        pitch(dim + 8), blockBytes(kKvBlock * pitch * 2), warpsUsed(sh.block * sh.group / 16), kSteps(dim / 16),
        dTiles(dim / 8), scaleLog2(op.getScale().convertToFloat() * static_cast<float>(M_LOG2E)),
        f32(b.getF32Type()), i32Type(b.getI32Type()), i64Type(b.getI64Type()) {}

  /// The slots, the thread's warp, the cache positions the block's tokens
  /// see, and the bases of K and V.
  void setUp() {
    // kSlots slots, each a K block then a V block.
    buffer = workgroupBuffer(task, loc, {kSlots * 2 * kKvBlock * pitch}, b.getBF16Type());
    buffer.getDefiningOp()->setAttr(EventTensorDialect::getDynamicSharedAttrName(), b.getUnitAttr());
    shared = elementPointer(b, loc, buffer, h.idx(0), 2, 3);

    g = h.groups(kWarp);
    lane = g.lane, warp = g.group;
    tokens = memref::DimOp::create(b, loc, op.getQ(), 0);
    cacheLen = memref::DimOp::create(b, loc, op.getK(), 0);
    t0 = op.getT0(), pos0 = op.getPos0(), kvHead = op.getKvHead();
    // Positions the block's last token sees, and their 64-position blocks.
    lastToken = arith::SubIOp::create(
        b, loc, arith::MinSIOp::create(b, loc, arith::AddIOp::create(b, loc, t0, h.idx(sh.block)), tokens), h.idx(1));
    positions = arith::MinSIOp::create(
        b, loc, arith::AddIOp::create(b, loc, arith::AddIOp::create(b, loc, pos0, lastToken), h.idx(1)), cacheLen);
    kvBlocks = arith::CeilDivSIOp::create(b, loc, positions, h.idx(kKvBlock));

    kMeta = memref::ExtractStridedMetadataOp::create(b, loc, op.getK());
    vMeta = memref::ExtractStridedMetadataOp::create(b, loc, op.getV());
    kBase = elementPointer(b, loc, op.getK(), h.idx(0), 2, 1);
    vBase = elementPointer(b, loc, op.getV(), h.idx(0), 2, 1);
  }

  /// The copies of KV block jb into slot `slot`: row r (position jb*64 + r)
  /// of K and of V, 16-byte chunks; positions past `positions` zero-filled
  /// (their scores are masked, and zeros keep P V finite).
  void issueBlock(OpBuilder &b, Value jb, Value slot) {
    TileBuilder h{b, loc};
    for (int part = 0; part < 2; ++part) {
      auto meta = part == 0 ? kMeta : vMeta;
      Value slotBase = arith::AddIOp::create(
          b, loc, arith::MulIOp::create(b, loc, slot, h.idx(2 * blockBytes)), h.idx(part * blockBytes));
      copyChunks(b, loc, g.tid, threads, kKvBlock, dim / 8, arith::MulIOp::create(b, loc, jb, h.idx(kKvBlock)),
                 positions, h.idx(0), h.idx(0), h.idx(dim), part == 0 ? kBase : vBase, meta.getStrides()[0],
                 arith::MulIOp::create(b, loc, kvHead, meta.getStrides()[1]), shared,
                 [&](OpBuilder &b, Value row, Value chunk) -> Value {
                   TileBuilder h{b, loc};
                   return arith::AddIOp::create(
                       b, loc, slotBase,
                       arith::MulIOp::create(
                           b, loc,
                           arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, row, h.idx(pitch)),
                                                 arith::MulIOp::create(b, loc, chunk, h.idx(8))),
                           h.idx(2)));
                 });
    }
  }

  /// This thread's two rows (lane / 4 and lane / 4 + 8 of its warp's 16):
  /// token and query head. Rows past the last token load no q (zeros),
  /// see position pos0 only, and are not stored.
  void threadRows() {
    quad = arith::DivUIOp::create(b, loc, lane, h.idx(4));
    quarter = arith::RemUIOp::create(b, loc, lane, h.idx(4));
    activeWarp = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, warp, h.idx(warpsUsed));
    rowWarp = arith::MinUIOp::create(b, loc, warp, h.idx(warpsUsed - 1));
    qMeta = memref::ExtractStridedMetadataOp::create(b, loc, op.getQ());
    for (int half = 0; half < 2; ++half) {
      Value r = arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, rowWarp, h.idx(16)),
                                      arith::AddIOp::create(b, loc, quad, h.idx(half * 8)));
      Value t = arith::AddIOp::create(b, loc, t0, arith::DivUIOp::create(b, loc, r, h.idx(sh.group)));
      rowLive[half] = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, t, tokens);
      rowTok[half] = arith::SelectOp::create(b, loc, rowLive[half], t, h.idx(0));
      rowHead[half] = arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, kvHead, h.idx(sh.group)),
                                            arith::RemUIOp::create(b, loc, r, h.idx(sh.group)));
      // Positions <= pos0 + token are visible.
      rowLimit[half] = arith::AddIOp::create(b, loc, pos0, rowTok[half]);
    }
  }

  /// The bf16 pair of q at column `col` of row `half` (zeros for a row
  /// past the last token).
  Value loadPair(int half, Value col) {
    Value tok = rowTok[half], head = rowHead[half];
    auto live = scf::IfOp::create(b, loc, TypeRange{i32Type}, rowLive[half], /*withElse=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(live.elseBlock());
    scf::YieldOp::create(b, loc, ValueRange{i32(b, loc, 0)});
    b.setInsertionPointToStart(live.thenBlock());
    Value elem = arith::AddIOp::create(
        b, loc,
        arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, tok, qMeta.getStrides()[0]),
                              arith::MulIOp::create(b, loc, head, qMeta.getStrides()[1])),
        col);
    Value ptr = LLVM::GEPOp::create(b, loc, qBase.getType(), qElem, qBase,
                                    ValueRange{arith::IndexCastOp::create(b, loc, i64Type, elem)});
    Value pair;
    if (qElem.isF32()) {
      // Two f32 (8 bytes) rounded to a bf16 pair.
      Value two = LLVM::LoadOp::create(b, loc, VectorType::get({2}, f32), ptr, 8);
      pair = LLVM::BitcastOp::create(b, loc, i32Type,
                                     arith::TruncFOp::create(b, loc, VectorType::get({2}, b.getBF16Type()), two));
    } else {
      pair = LLVM::LoadOp::create(b, loc, i32Type, ptr, 4);
    }
    scf::YieldOp::create(b, loc, ValueRange{pair});
    return live.getResult(0);
  }

  /// q fragments: for k16 step ks, a0 / a1 = rows 0 / 8 at columns
  /// 16 ks + 2 (lane % 4) (+1), a2 / a3 the same 8 columns on (an f32 q is
  /// rounded to bf16 here).
  void loadQ() {
    qElem = op.getQ().getType().getElementType();
    qBase = elementPointer(b, loc, op.getQ(), h.idx(0), qElem.getIntOrFloatBitWidth() / 8, 1);
    for (int64_t ks = 0; ks < kSteps; ++ks) {
      Value col = arith::AddIOp::create(b, loc, h.idx(ks * 16), arith::MulIOp::create(b, loc, quarter, h.idx(2)));
      Value col8 = arith::AddIOp::create(b, loc, col, h.idx(8));
      qFrag.push_back({loadPair(0, col), loadPair(1, col), loadPair(0, col8), loadPair(1, col8)});
    }
  }

  /// The scores of block jb, `s` (S = q K^T), scaled (log2 units) and
  /// masked: 32 results. A block whose last position the tile's first
  /// token already sees needs no mask (every block but the last few of a
  /// long prompt).
  scf::IfOp scaleAndMask(OpBuilder &b, Value jb, ArrayRef<SmallVector<Value, 4>> s) {
    TileBuilder h{b, loc};
    Value colBase = arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, jb, h.idx(kKvBlock)),
                                          arith::MulIOp::create(b, loc, quarter, h.idx(2)));
    Value whole = arith::CmpIOp::create(
        b, loc, arith::CmpIPredicate::ule,
        arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, jb, h.idx(kKvBlock)), h.idx(kKvBlock - 1)),
        arith::AddIOp::create(b, loc, pos0, t0));
    SmallVector<Type> scoreTypes(32, f32);
    auto maskIf = scf::IfOp::create(b, loc, scoreTypes, whole, /*withElse=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      for (int masked = 0; masked < 2; ++masked) {
        b.setInsertionPointToStart(masked ? maskIf.elseBlock() : maskIf.thenBlock());
        SmallVector<Value> scores;
        for (int64_t nt = 0; nt < 8; ++nt)
          for (int64_t e = 0; e < 4; ++e) {
            Value scaled = arith::MulFOp::create(b, loc, s[nt][e], h.f32(scaleLog2));
            if (masked) {
              Value pos = arith::AddIOp::create(b, loc, colBase, h.idx(nt * 8 + e % 2));
              Value ok = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ule, pos, rowLimit[e / 2]);
              scaled = arith::SelectOp::create(b, loc, ok, scaled, negInf(b, loc));
            }
            scores.push_back(scaled);
          }
        scf::YieldOp::create(b, loc, scores);
      }
    }
    return maskIf;
  }

  /// An active warp's step over block jb (K at byte `slotByte` of the
  /// slots, V after it): the scores, the online softmax, O += P V; the
  /// state after it.
  SmallVector<Value> blockStep(OpBuilder &b, Value jb, Value slotByte, ValueRange state) {
    TileBuilder h{b, loc};
    Value kAt = sharedAt(b, loc, shared, arith::AddIOp::create(b, loc, slotByte, kLane));
    Value vAt = sharedAt(b, loc, shared,
                         arith::AddIOp::create(b, loc, arith::AddIOp::create(b, loc, slotByte, i32(b, loc, blockBytes)),
                                               vLane));
    // S = q K^T over the 64 positions: 8 n8 tiles.
    SmallVector<SmallVector<Value, 4>> s(8, SmallVector<Value, 4>(4, h.f32(0)));
    for (int64_t ks = 0; ks < kSteps; ++ks)
      for (int64_t p = 0; p < 4; ++p) {
        SmallVector<Value, 4> r =
            ldmatrixX4(b, loc, sharedAt(b, loc, kAt, i32(b, loc, (p * 16 * pitch + ks * 16) * 2)), false);
        s[2 * p] = mmaBf16(b, loc, qFrag[ks], {r[0], r[1]}, s[2 * p]);
        s[2 * p + 1] = mmaBf16(b, loc, qFrag[ks], {r[2], r[3]}, s[2 * p + 1]);
      }
    auto maskIf = scaleAndMask(b, jb, s);
    Value rowMax[2] = {negInf(b, loc), negInf(b, loc)};
    for (int64_t nt = 0; nt < 8; ++nt)
      for (int64_t e = 0; e < 4; ++e) {
        s[nt][e] = maskIf.getResult(nt * 4 + e);
        rowMax[e / 2] = arith::MaximumFOp::create(b, loc, rowMax[e / 2], s[nt][e]);
      }
    SmallVector<Value> out(state.begin(), state.end());
    Value alpha[2], mUse[2];
    for (int half = 0; half < 2; ++half) {
      Value mx = rowMax[half];
      for (int64_t off : {1, 2})
        mx = arith::MaximumFOp::create(b, loc, mx, shuffleXor(b, loc, mx, off));
      Value mOld = state[dTiles * 4 + half];
      Value mNew = arith::MaximumFOp::create(b, loc, mOld, mx);
      // A row with nothing visible yet keeps -inf; exponents use 0.
      Value none = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, mNew, negInf(b, loc));
      mUse[half] = arith::SelectOp::create(b, loc, none, h.f32(0), mNew);
      alpha[half] = math::Exp2Op::create(b, loc, arith::SubFOp::create(b, loc, mOld, mUse[half]));
      out[dTiles * 4 + half] = mNew;
    }
    Value rowSum[2] = {h.f32(0), h.f32(0)};
    for (int64_t nt = 0; nt < 8; ++nt)
      for (int64_t e = 0; e < 4; ++e) {
        s[nt][e] = math::Exp2Op::create(b, loc, arith::SubFOp::create(b, loc, s[nt][e], mUse[e / 2]));
        rowSum[e / 2] = arith::AddFOp::create(b, loc, rowSum[e / 2], s[nt][e]);
      }
    for (int half = 0; half < 2; ++half)
      out[dTiles * 4 + 2 + half] = arith::AddFOp::create(
          b, loc, arith::MulFOp::create(b, loc, state[dTiles * 4 + 2 + half], alpha[half]), rowSum[half]);
    SmallVector<SmallVector<Value, 4>> o(dTiles);
    for (int64_t nt = 0; nt < dTiles; ++nt)
      for (int64_t e = 0; e < 4; ++e)
        o[nt].push_back(arith::MulFOp::create(b, loc, state[nt * 4 + e], alpha[e / 2]));
    // O += P V, P from the score registers (bf16), 16 positions per step.
    for (int64_t kk = 0; kk < 4; ++kk) {
      SmallVector<Value, 4> a = {packBf16(b, loc, s[2 * kk][0], s[2 * kk][1]),
                                 packBf16(b, loc, s[2 * kk][2], s[2 * kk][3]),
                                 packBf16(b, loc, s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                 packBf16(b, loc, s[2 * kk + 1][2], s[2 * kk + 1][3])};
      for (int64_t dp = 0; dp < dim / 16; ++dp) {
        SmallVector<Value, 4> r =
            ldmatrixX4(b, loc, sharedAt(b, loc, vAt, i32(b, loc, (kk * 16 * pitch + dp * 16) * 2)), true);
        o[2 * dp] = mmaBf16(b, loc, a, {r[0], r[1]}, o[2 * dp]);
        o[2 * dp + 1] = mmaBf16(b, loc, a, {r[2], r[3]}, o[2 * dp + 1]);
      }
    }
    for (int64_t nt = 0; nt < dTiles; ++nt)
      for (int64_t e = 0; e < 4; ++e)
        out[nt * 4 + e] = o[nt][e];
    return out;
  }

  /// State carried over the KV blocks: O (dTiles x 4 f32), then the running
  /// max and (this thread's partial) sum of each of the two rows. Blocks 0
  /// and 1 go out before the loop; one commit group per block (empty past
  /// the last), so `wait_group 1` leaves only the newest in flight. The
  /// state after the last block, every copy complete.
  ValueRange kvLoop() {
    SmallVector<Value> init(dTiles * 4, h.f32(0));
    init.append({negInf(b, loc), negInf(b, loc), h.f32(0), h.f32(0)});
    for (int64_t first = 0; first < 2; ++first) {
      {
        auto any = scf::IfOp::create(
            b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, h.idx(first), kvBlocks), false);
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(any.thenBlock());
        issueBlock(b, h.idx(first), h.idx(first));
      }
      NVVM::CpAsyncCommitGroupOp::create(b, loc);
    }
    auto loop = scf::ForOp::create(
        b, loc, h.idx(0), kvBlocks, h.idx(1), init, [&](OpBuilder &b, Location loc, Value jb, ValueRange state) {
          TileBuilder h{b, loc};
          NVVM::CpAsyncWaitGroupOp::create(b, loc, 1);
          gpu::BarrierOp::create(b, loc);
          // Block jb + 2 into the slot of block jb - 1 (done: the barrier).
          Value next = arith::AddIOp::create(b, loc, jb, h.idx(2));
          {
            auto more = scf::IfOp::create(
                b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, next, kvBlocks), false);
            OpBuilder::InsertionGuard guard(b);
            b.setInsertionPointToStart(more.thenBlock());
            issueBlock(b, next, arith::RemUIOp::create(b, loc, next, h.idx(kSlots)));
          }
          NVVM::CpAsyncCommitGroupOp::create(b, loc);
          Value slotByte = toI32(b, loc,
                                 arith::MulIOp::create(b, loc, arith::RemUIOp::create(b, loc, jb, h.idx(kSlots)),
                                                       h.idx(2 * blockBytes)));
          auto step = scf::IfOp::create(b, loc, TypeRange(state), activeWarp, /*withElse=*/true);
          {
            OpBuilder::InsertionGuard guard(b);
            b.setInsertionPointToStart(step.elseBlock());
            scf::YieldOp::create(b, loc, state);
            b.setInsertionPointToStart(step.thenBlock());
            scf::YieldOp::create(b, loc, blockStep(b, jb, slotByte, state));
          }
          scf::YieldOp::create(b, loc, step.getResults());
        });
    NVVM::CpAsyncWaitGroupOp::create(b, loc, 0);
    return loop.getResults();
  }

  /// o = O / l (the row's sum over its four lanes), rows of live tokens.
  void storeO(ValueRange state) {
    Type outType = op.getO().getType().getElementType();
    auto store = scf::IfOp::create(b, loc, activeWarp, false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(store.thenBlock());
    for (int half = 0; half < 2; ++half) {
      Value l = state[dTiles * 4 + 2 + half];
      for (int64_t off : {1, 2})
        l = arith::AddFOp::create(b, loc, l, shuffleXor(b, loc, l, off));
      Value inv = arith::DivFOp::create(b, loc, h.f32(1), l);
      auto live = scf::IfOp::create(b, loc, rowLive[half], false);
      OpBuilder::InsertionGuard inner(b);
      b.setInsertionPointToStart(live.thenBlock());
      TileBuilder hh{b, loc};
      for (int64_t nt = 0; nt < dTiles; ++nt)
        for (int64_t e = 0; e < 2; ++e) {
          Value d = arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, quarter, hh.idx(2)),
                                          hh.idx(nt * 8 + e));
          Value v = arith::MulFOp::create(b, loc, state[nt * 4 + half * 2 + e], inv);
          if (!outType.isF32())
            v = arith::TruncFOp::create(b, loc, outType, v);
          memref::StoreOp::create(b, loc, v, op.getO(), ValueRange{rowTok[half], rowHead[half], d});
        }
    }
  }
};

} // namespace

bool tile::attentionPrefillGPUFits(AttentionPrefillOp op, int64_t threads) {
  PrefillShape sh = prefillShape(op);
  const int64_t rowsTotal = sh.block * sh.group;
  return !(threads <= 0 || (sh.dim != 64 && sh.dim != 128) || rowsTotal % 16 != 0 ||
           rowsTotal / 16 > threads / kWarp || !op->getParentOfType<TaskOp>());
}

void tile::lowerAttentionPrefillGPU(AttentionPrefillOp op, int64_t threads) {
  PrefillShape sh = prefillShape(op);
  auto task = op->getParentOfType<TaskOp>();

  OpBuilder b(op);
  PrefillGPU p(op, b, task, sh, threads);
  p.setUp();
  p.threadRows();
  p.loadQ();

  // ldmatrix lane offsets (bytes): K as w in et.matmul, V transposed.
  std::tie(p.kLane, p.vLane) = ldmatrixLaneOffsets(b, p.loc, p.lane, p.pitch);

  ValueRange state = p.kvLoop();
  p.storeO(state);
  gpu::BarrierOp::create(b, p.loc);
  op.erase();
}

LogicalResult tile::planAttentionPrefillOp(AttentionPrefillOp op, const TileLoweringOptions &options) {
  if (!op->hasAttr(EventTensorDialect::getAttentionPlanAttrName())) {
    bool mma = !dynamicSharedHeld(op->getParentOfType<TaskOp>()) && attentionPrefillGPUFits(op, options.threads);
    setAttentionForm(op, mma ? "mma" : "loops");
  }
  if (attentionForm(op) != "mma")
    return success();
  return takeDynamicShared(op, "et.attention_plan's mma form ");
}

namespace {

/// et.attention_prefill: loops on the host; on the GPU the form its plan
/// (et.attention_plan, planAttentionPrefillOp) says: tensor cores in the
/// task's dynamic shared memory, or loops.
struct AttentionPrefillLowering : public TileOpLowering<AttentionPrefillOp> {
  using TileOpLowering::TileOpLowering;
  LogicalResult matchAndRewrite(AttentionPrefillOp op, PatternRewriter &) const override {
    if (!options.gpu) {
      lowerAttentionPrefillLoops(op);
      return success();
    }
    // The pass plans every attention op before any tile op is lowered.
    if (attentionForm(op) != "mma") {
      lowerAttentionPrefillLoops(op);
      return success();
    }
    if (!attentionPrefillGPUFits(op, options.threads))
      return op.emitOpError("et.attention_plan's mma form does not fit this op or worker");
    assert(holdsDynamicShared(op) && "the plan gave the op its task's dynamic shared memory");
    lowerAttentionPrefillGPU(op, options.threads);
    return success();
  }
};

} // namespace

void tile::populateAttentionPrefillLoweringPatterns(RewritePatternSet &patterns,
                                                    const TileLoweringOptions &options) {
  patterns.add<AttentionPrefillLowering>(patterns.getContext(), options);
}
