//===- StagedRows.cpp - Weights staged across tiles -----------------------===//
//
// et.staged_rows on the GPU: while a worker runs one entry of its static
// program, its last thread issues the bulk copies of the next entry's
// weight rows into one of two shared-memory regions, completing on that
// region's barrier; the entry's tile waits on the barrier before it reads
// the rows (docs/lowering.md, "Weights staged across tiles"). The barriers
// and copies are the target's (WorkerTarget: mbarriers and bulk copies on
// the GPU); this file decides what is copied where, and when.
//
//===----------------------------------------------------------------------===//

#include "WorkerEmitter.h"

#include "EventTensor/Conversion/TileSharedMemory.h"

#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/SetVector.h"

#include <functional>

using namespace mlir;
using namespace mlir::et;
using namespace mlir::et::workers;

Value WorkerEmitter::stageBarrier(Value slot) {
  return tile::elementPointer(b, loc, stageBarriers, slot, 8, 3);
}

std::tuple<Value, Value, Value> WorkerEmitter::decodeStage(Value word) {
  Type i32 = b.getI32Type();
  auto c32 = [&](int64_t v) { return arith::ConstantIntOp::create(b, loc, i32, v); };
  Value staged = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, word, c32(0));
  Value slot = arith::IndexCastOp::create(b, loc, b.getIndexType(), arith::AndIOp::create(b, loc, word, c32(1)));
  Value parity = arith::AndIOp::create(b, loc, arith::ShRUIOp::create(b, loc, word, c32(1)), c32(1));
  if (step) {
    // Bit 2: the region completes an odd number of phases a step, so the
    // parity flips every step (buildProgram).
    Value flips = arith::AndIOp::create(b, loc, arith::ShRUIOp::create(b, loc, word, c32(2)), c32(1));
    Value odd = arith::AndIOp::create(b, loc, arith::IndexCastOp::create(b, loc, i32, step), c32(1));
    parity = arith::XOrIOp::create(b, loc, parity, arith::AndIOp::create(b, loc, flips, odd));
  }
  return {staged, slot, parity};
}

void WorkerEmitter::waitStaged(std::tuple<Value, Value, Value> decoded) {
  auto [staged, slot, parity] = decoded;
  auto ifOp = scf::IfOp::create(b, loc, staged, /*withElse=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  target.waitStageBarrier(*this, stageBarrier(slot), parity);
}

Value WorkerEmitter::stagedCount(StagedRowsOp op, Value w, Value row0, Value rows) {
  int64_t r = op.getView().getType().getDimSize(0);
  Value n = memref::DimOp::create(b, loc, w, 0);
  Value count = arith::MinSIOp::create(b, loc, arith::MinSIOp::create(b, loc, idx(r), rows),
                                       arith::SubIOp::create(b, loc, n, row0));
  return arith::MaxSIOp::create(b, loc, count, idx(0));
}

LogicalResult WorkerEmitter::emitStagedRows(StagedRowsOp op, IRMapping &map, Scope &scope) {
  FailureOr<SmallVector<Value>> operands =
      materializeAll({op.getW(), op.getRow0(), op.getRows()}, scope, &map);
  if (failed(operands))
    return failure();
  Value count = idx(0), shift = idx(stageStart + op.getOffset());
  if (currentStage) {
    auto decoded = decodeStage(currentStage);
    auto [staged, slot, parity] = decoded;
    waitStaged(decoded);
    count = arith::SelectOp::create(b, loc, staged,
                                    stagedCount(op, (*operands)[0], (*operands)[1], (*operands)[2]), idx(0));
    shift = arith::AddIOp::create(b, loc, shift, arith::MulIOp::create(b, loc, slot, idx(stageRegionBytes)));
  }
  Value view = memref::ViewOp::create(b, loc, op.getView().getType(), stageShared, shift, ValueRange{});
  map.map(op.getView(), view);
  map.map(op.getCount(), count);
  return success();
}

std::optional<WorkerEmitter::StagePlan> WorkerEmitter::stagePlan(TaskOp task) {
  StagePlan plan;
  Block &body = task.getBody().front();
  for (Operation &op : body)
    if (auto staged = dyn_cast<StagedRowsOp>(op))
      plan.ops.push_back(staged);
  if (plan.ops.empty() ||
      !llvm::all_of(task.getExtents(), [&](Value e) { return eager.contains(e); }))
    return std::nullopt;
  llvm::SetVector<Operation *> slice;
  bool ok = true;
  std::function<void(Value)> visit = [&](Value v) {
    if (!ok)
      return;
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      ok = arg.getOwner() == &body || eager.contains(v);
      return;
    }
    Operation *def = v.getDefiningOp();
    if (!task->isAncestor(def)) {
      ok = eager.contains(v);
      return;
    }
    if (slice.contains(def))
      return;
    if (def->getBlock() != &body || !isMemoryEffectFree(def) || def->getNumRegions() != 0) {
      ok = false;
      return;
    }
    for (Value operand : def->getOperands())
      visit(operand);
    slice.insert(def); // after what it uses
  };
  for (StagedRowsOp op : plan.ops)
    for (Value v : {Value(op.getW()), Value(op.getRow0()), Value(op.getRows())})
      visit(v);
  if (!ok)
    return std::nullopt;
  plan.slice.assign(slice.begin(), slice.end());
  return plan;
}

void WorkerEmitter::emitStageCopies(TaskOp task, const StagePlan &plan, Value tile, Value slot) {
  SmallVector<Value> extents;
  for (Value e : task.getExtents())
    extents.push_back(eager.lookup(e));
  IRMapping map;
  map.map(task.getBody().front().getArguments(), delinearize(tile, extents));
  auto get = [&](Value v) {
    Value m = map.lookupOrNull(v);
    return m ? m : eager.lookup(v);
  };
  for (Operation *op : plan.slice) {
    for (Value operand : op->getOperands())
      if (!map.contains(operand))
        map.map(operand, get(operand));
    b.clone(*op, map);
  }
  Type i32 = b.getI32Type();
  Value total = arith::ConstantIntOp::create(b, loc, i32, 0);
  SmallVector<std::tuple<Value, Value, Value>> copies; // dst, src, bytes
  Value region = arith::AddIOp::create(b, loc, idx(stageStart),
                                       arith::MulIOp::create(b, loc, slot, idx(stageRegionBytes)));
  for (StagedRowsOp op : plan.ops) {
    Value w = get(op.getW()), row0 = get(op.getRow0());
    int64_t k = op.getView().getType().getDimSize(1);
    Value count = stagedCount(op, w, row0, get(op.getRows()));
    Value bytes = arith::IndexCastOp::create(b, loc, i32, arith::MulIOp::create(b, loc, count, idx(k * 2)));
    total = arith::AddIOp::create(b, loc, total, bytes);
    Value dst = tile::elementPointer(b, loc, stageShared,
                                     arith::AddIOp::create(b, loc, region, idx(op.getOffset())), 1, 3);
    // Row r of w starts at element r * K (rows contiguous).
    Value row0c = arith::MinSIOp::create(b, loc, row0, memref::DimOp::create(b, loc, w, 0));
    Value src = tile::elementPointer(b, loc, w, arith::MulIOp::create(b, loc, row0c, idx(k)), 2, 1);
    copies.push_back({dst, src, bytes});
  }
  Value barrierPtr = stageBarrier(slot);
  target.expectStageBytes(*this, barrierPtr, total);
  for (auto [dst, src, bytes] : copies) {
    Value any = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sgt, bytes,
                                      arith::ConstantIntOp::create(b, loc, i32, 0));
    auto ifOp = scf::IfOp::create(b, loc, any, /*withElse=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    target.copyToStage(*this, dst, src, bytes, barrierPtr);
  }
}

void WorkerEmitter::emitStageEntry(Value word, Value task, Value tile, Value issuer) {
  auto [staged, slot, parity] = decodeStage(word);
  (void)parity;
  Value go = arith::AndIOp::create(b, loc, issuer, staged);
  auto ifOp = scf::IfOp::create(b, loc, go, /*withElse=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  SmallVector<int64_t> cases;
  for (auto [k, plan] : llvm::enumerate(stagePlans))
    if (plan)
      cases.push_back(k);
  auto sw = scf::IndexSwitchOp::create(b, loc, TypeRange{}, toIndex(task), cases, cases.size());
  b.createBlock(&sw.getDefaultRegion());
  scf::YieldOp::create(b, loc);
  for (auto [c, k] : llvm::enumerate(cases)) {
    b.createBlock(&sw.getCaseRegions()[c]);
    emitStageCopies(tasks[k], *stagePlans[k], tile, slot);
    scf::YieldOp::create(b, loc);
  }
}

void WorkerEmitter::initStageBarriers() {
  auto ifOp = scf::IfOp::create(b, loc, isThread0(), /*withElse=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  target.initStageBarriers(*this, {stageBarrier(idx(0)), stageBarrier(idx(1))});
}
