//===- StaticSchedule.cpp - The program table of a static schedule --------===//
//
// A static schedule is a table of (task, tile, stage) entries per worker
// (a constant global); on the GPU each worker first copies its entries into
// shared memory. A worker walks its entries: one tile, or all tiles
// t = (w - k) mod W, t + W, ... of a task spread by formula.
//
//===----------------------------------------------------------------------===//

#include "WorkerEmitter.h"

#include "EventTensor/Conversion/TileSharedMemory.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

using namespace mlir;
using namespace mlir::et;
using namespace mlir::et::workers;
using abi::WorkerError;

LogicalResult WorkerEmitter::buildProgram(ScheduleOp schedule, StaticProgram &program) {
  SmallVector<int32_t> &entries = program.entries, &offsets = program.offsets;
  offsets.assign({0});
  llvm::DenseMap<Operation *, unsigned> taskIds;
  for (auto [i, t] : llvm::enumerate(tasks))
    taskIds[t] = i;
  stagePlans.clear();
  for (TaskOp task : tasks)
    stagePlans.push_back(stagedTasks.contains(task) ? stagePlan(task) : std::nullopt);
  for (WorkerOp worker : schedule.getBody().front().getOps<WorkerOp>()) {
    int64_t position = 0, phases[2] = {0, 0};
    for (RunOp run : worker.getBody().front().getOps<RunOp>()) {
      int32_t task = taskIds.lookup(run.getTaskOp());
      auto add = [&](int32_t tile) {
        int32_t stage = -1;
        if (tile >= 0 && stagePlans[task]) {
          int64_t slot = position % 2;
          stage = static_cast<int32_t>(slot | ((phases[slot]++ % 2) << 1));
          program.anyStaged = true;
        }
        entries.append({task, tile, stage});
        ++position;
      };
      if (std::optional<ArrayRef<int64_t>> tiles = run.getTiles()) {
        for (int64_t tile : *tiles) {
          // The verifiers keep listed tiles below a static tile count of
          // at most 2^31 - 1 (a dynamic count lists none).
          assert(tile >= 0 && tile <= INT32_MAX && "listed tile out of the verified range");
          add(static_cast<int32_t>(tile));
        }
      } else {
        add(static_cast<int32_t>(-1 - *run.getCyclic()));
      }
    }
    // Steps (et.repeat): region r's mbarrier completes phases[r] phases a
    // step, so an entry's parity flips every step when that count is odd
    // (bit 2 of the stage word; decodeStage).
    if (kernel.getRepeat())
      for (size_t e = offsets.back() * 3; e < entries.size(); e += 3)
        if (int32_t &stage = entries[e + 2]; stage >= 0 && phases[stage & 1] % 2)
          stage |= 4;
    offsets.push_back(entries.size() / 3);
  }
  return success();
}

void WorkerEmitter::emitProgramTables(StaticProgram &program) {
  SmallVector<int32_t> &entries = program.entries, &offsets = program.offsets;
  // On the GPU a worker copies its entries into shared memory before its
  // first tile (copyProgramToShared). With the table padded to the same
  // number of rows per worker, the copies' addresses follow from the worker
  // id alone, so they go out together with the load of the worker's entry
  // count: one memory round trip before the first tile instead of two (the
  // range, then the entries). Padding may at most double the table.
  const int64_t workerCount = static_cast<int64_t>(offsets.size()) - 1;
  int64_t &longest = program.longest;
  for (int64_t w = 0; w < workerCount; ++w)
    longest = std::max<int64_t>(longest, offsets[w + 1] - offsets[w]);
  program.sharedFits = target.hasWorkgroupMemory() && longest > 0 && (longest + 1) * 3 * 4 <= tile::kSharedProgramBytes;
  const int64_t rows = static_cast<int64_t>(entries.size() / 3);
  program.padded = program.sharedFits && workerCount * longest <= 2 * rows + workerCount;
  SmallVector<int32_t> counts;
  if (program.padded) {
    SmallVector<int32_t> dense = std::move(entries);
    entries.clear();
    for (int64_t w = 0; w < workerCount; ++w) {
      int64_t n = offsets[w + 1] - offsets[w];
      entries.append(dense.begin() + 3 * offsets[w], dense.begin() + 3 * offsets[w + 1]);
      for (int64_t k = n; k < longest; ++k)
        entries.append({0, 0, -1});
      counts.push_back(static_cast<int32_t>(n));
    }
  }
  if (entries.empty())
    entries.append({0, 0, -1}); // keep the table non-empty
  auto makeTable = [&](StringRef suffix, ArrayRef<int32_t> data,
                       ArrayRef<int64_t> shape) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&container->getRegion(0).front());
    auto type = MemRefType::get(shape, b.getI32Type());
    auto value = DenseIntElementsAttr::get(
        RankedTensorType::get(shape, b.getI32Type()), data);
    return memref::GlobalOp::create(
        b, loc, ("__et_" + kernel.getSymName() + suffix).str(),
        b.getStringAttr("private"), type, value, /*constant=*/true,
        IntegerAttr());
  };
  memref::GlobalOp table =
      makeTable("_program", entries, {static_cast<int64_t>(entries.size() / 3), 3});
  program.table = memref::GetGlobalOp::create(b, loc, table.getType(),
                                              table.getSymName());
  if (program.padded) {
    // Worker w's entries are rows [w * longest, w * longest + counts[w]).
    memref::GlobalOp countTable = makeTable("_counts", counts, {workerCount});
    Value countsMem = memref::GetGlobalOp::create(b, loc, countTable.getType(), countTable.getSymName());
    program.begin = arith::MulIOp::create(b, loc, workerId, idx(longest));
    program.end = arith::AddIOp::create(b, loc, program.begin,
                                        toIndex(memref::LoadOp::create(b, loc, countsMem, ValueRange{workerId})));
  } else {
    memref::GlobalOp starts =
        makeTable("_starts", offsets, {static_cast<int64_t>(offsets.size())});
    Value startsMem = memref::GetGlobalOp::create(b, loc, starts.getType(),
                                                  starts.getSymName());
    program.begin = toIndex(
        memref::LoadOp::create(b, loc, startsMem, ValueRange{workerId}));
    program.end = toIndex(memref::LoadOp::create(
        b, loc, startsMem,
        ValueRange{arith::AddIOp::create(b, loc, workerId, idx(1))}));
  }
}

void WorkerEmitter::copyProgramToShared(StaticProgram &program) {
  int64_t longest = program.longest;
  Value begin = program.begin, end = program.end;
  auto type = MemRefType::get({longest + 1, 3}, b.getI32Type(), MemRefLayoutAttrInterface(),
                              target.getWorkgroupMemorySpace(b.getContext()));
  std::string name = ("__et_" + kernel.getSymName() + "_program_shared").str();
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&container->getRegion(0).front());
    memref::GlobalOp::create(b, loc, name, b.getStringAttr("private"), type, Attribute(),
                             /*constant=*/false, b.getI64IntegerAttr(16));
  }
  Value programShared = memref::GetGlobalOp::create(b, loc, type, name);
  program.shared = programShared;
  Value count = arith::SubIOp::create(b, loc, end, begin);
  {
    auto header = scf::IfOp::create(b, loc, isThread0(), /*withElse=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(header.thenBlock());
    Value toI32[] = {arith::IndexCastOp::create(b, loc, b.getI32Type(), count),
                     arith::IndexCastOp::create(b, loc, b.getI32Type(), begin)};
    for (int64_t f = 0; f < 2; ++f)
      memref::StoreOp::create(b, loc, toI32[f], programShared, ValueRange{idx(0), idx(f)});
  }
  // Padded: all `longest` rows (the pad rows are never read), so that
  // no copy waits for the count.
  Value words = program.padded ? idx(longest * 3) : arith::MulIOp::create(b, loc, count, idx(3)).getResult();
  auto copy = scf::ForOp::create(b, loc, threadId, words, numThreads);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(copy.getBody());
  Value k = copy.getInductionVar();
  Value row = arith::DivUIOp::create(b, loc, k, idx(3));
  Value col = arith::RemUIOp::create(b, loc, k, idx(3));
  Value word = memref::LoadOp::create(b, loc, program.table,
                                      ValueRange{arith::AddIOp::create(b, loc, begin, row), col});
  memref::StoreOp::create(b, loc, word, programShared,
                          ValueRange{arith::AddIOp::create(b, loc, row, idx(1)), col});
}

Value WorkerEmitter::entryCount(const StaticProgram &program) {
  if (!program.shared)
    return program.end;
  return toIndex(memref::LoadOp::create(b, loc, program.shared, ValueRange{idx(0), idx(0)}));
}

Value WorkerEmitter::entryWord(const StaticProgram &program, Value position, int64_t field) {
  if (program.shared)
    return memref::LoadOp::create(b, loc, program.shared,
                                  ValueRange{arith::AddIOp::create(b, loc, position, idx(1)), idx(field)});
  return memref::LoadOp::create(b, loc, program.table, ValueRange{position, idx(field)});
}

void WorkerEmitter::emitStageAhead(const StaticProgram &program, Value i, Value firstPosition) {
  Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, i, firstPosition);
  Value nextI = arith::AddIOp::create(b, loc, i, idx(1));
  Value from = arith::SelectOp::create(b, loc, first, i, nextI);
  Value to = arith::MinUIOp::create(b, loc, arith::AddIOp::create(b, loc, i, idx(2)), entryCount(program));
  auto forOp = scf::ForOp::create(b, loc, from, to, idx(1));
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(forOp.getBody());
  Value j = forOp.getInductionVar();
  // The last thread issues the copies: thread 0 polls the events.
  Value last = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, threadId,
                                     arith::SubIOp::create(b, loc, numThreads, idx(1)));
  emitStageEntry(entryWord(program, j, 2), entryWord(program, j, 0), toIndex(entryWord(program, j, 1)), last);
}

FailureOr<scf::ExecuteRegionOp> WorkerEmitter::emitStaticEntry(Value taskId, Value tileI64) {
  Type indexType = b.getIndexType(), i1Type = b.getI1Type();
  auto [region, top] = openRegion(TypeRange{i1Type}, [&] { return SmallVector<Value>{i1(false)}; });
  Block *entry = b.getInsertionBlock();
  Block *done = newBlock(top);
  b.setInsertionPointToEnd(done);
  scf::YieldOp::create(b, loc, ValueRange{i1(true)});

  // Dispatch on the task id.
  SmallVector<Block *> cases;
  SmallVector<int32_t> caseValues;
  for (unsigned k = 0; k < tasks.size(); ++k) {
    cases.push_back(newBlock(top));
    caseValues.push_back(k);
  }
  Block *badEntry = newBlock(top);
  b.setInsertionPointToEnd(entry);
  Value task32 = arith::IndexCastOp::create(b, loc, b.getI32Type(), taskId);
  cf::SwitchOp::create(b, loc, task32, badEntry, ValueRange{}, caseValues,
                       cases, SmallVector<ValueRange>(cases.size(), ValueRange{}));
  b.setInsertionPointToEnd(badEntry);
  recordError(WorkerError::BadScheduleEntry, taskId, idx(-1), idx(-1),
              idx(-1), idx(-1), idx(-1));
  cf::BranchOp::create(b, loc, top.fail, ValueRange{});

  for (auto [k, task] : llvm::enumerate(tasks)) {
    // ^case: tile >= 0 ? body(tile, once) : cyclic
    Block *cyc = newBlock(top);
    Block *loopHead = newBlock(top, {indexType, indexType});
    Block *bodyEntry = newBlock(top, {indexType, i1Type, indexType});
    b.setInsertionPointToEnd(cases[k]);
    Value isCyclic = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt,
                                           tileI64, i64(0));
    Value single = toIndex(arith::MaxSIOp::create(b, loc, tileI64, i64(0)));
    cf::CondBranchOp::create(b, loc, isCyclic, cyc, ValueRange{}, bodyEntry,
                             ValueRange{single, i1(false), idx(0)});

    // ^cyc: n = tiles; first = (w - k) mod W.
    b.setInsertionPointToEnd(cyc);
    {
      Scope scope{top.region, top.fail, {}};
      FailureOr<Value> n = tileCount(task, scope, /*extents=*/nullptr, /*dispatch=*/true);
      if (failed(n))
        return failure();
      Value offset = toIndex(arith::SubIOp::create(b, loc, i64(-1), tileI64));
      Value shifted = arith::SubIOp::create(
          b, loc, arith::AddIOp::create(b, loc, workerId, idx(numWorkers)),
          offset);
      Value first = arith::RemUIOp::create(b, loc, shifted, idx(numWorkers));
      cf::BranchOp::create(b, loc, loopHead, ValueRange{first, *n});
    }
    b.setInsertionPointToEnd(loopHead);
    {
      Value t = loopHead->getArgument(0), n = loopHead->getArgument(1);
      Value more =
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, t, n);
      cf::CondBranchOp::create(b, loc, more, bodyEntry,
                               ValueRange{t, i1(true), n}, done, ValueRange{});
    }
    b.setInsertionPointToEnd(bodyEntry);
    {
      Scope scope{top.region, top.fail, {}};
      Value t = bodyEntry->getArgument(0);
      if (failed(emitTile(scope, task, k, t)))
        return failure();
      Value next = arith::AddIOp::create(b, loc, t, idx(numWorkers));
      Block *again = newBlock(top);
      cf::CondBranchOp::create(b, loc, bodyEntry->getArgument(1), again,
                               ValueRange{}, done, ValueRange{});
      b.setInsertionPointToEnd(again);
      cf::BranchOp::create(b, loc, loopHead,
                           ValueRange{next, bodyEntry->getArgument(2)});
    }
  }
  return region;
}

LogicalResult WorkerEmitter::emitStatic(ScheduleOp schedule) {
  StaticProgram program;
  if (failed(buildProgram(schedule, program)))
    return failure();
  emitProgramTables(program);
  if (program.sharedFits)
    copyProgramToShared(program);

  if (program.anyStaged)
    initStageBarriers();
  if (program.anyStaged || program.shared)
    barrier();
  FailureOr<Value> ok = emitSteps([&]() { return emitProgramLoop(program); });
  if (failed(ok))
    return failure();
  finishedOk = *ok;
  return success();
}

FailureOr<Value> WorkerEmitter::emitProgramLoop(StaticProgram &program) {
  Type indexType = b.getIndexType(), i1Type = b.getI1Type();
  // The loop walks entries by `position`: the entry's index in the worker's
  // shared copy, or in the global table without one.
  Value firstPosition = program.shared ? idx(0) : program.begin;
  auto loop = scf::WhileOp::create(b, loc, TypeRange{indexType, i1Type},
                                   ValueRange{firstPosition, i1(true)});
  {
    Block *before = b.createBlock(&loop.getBefore(), {}, {indexType, i1Type},
                                  {loc, loc});
    Value more = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult,
                                       before->getArgument(0), entryCount(program));
    Value go = arith::AndIOp::create(b, loc, more, before->getArgument(1));
    scf::ConditionOp::create(b, loc, go, before->getArguments());
  }
  Block *after =
      b.createBlock(&loop.getAfter(), {}, {indexType, i1Type}, {loc, loc});
  Value i = after->getArgument(0);
  Value taskId = toIndex(entryWord(program, i, 0));
  Value tile32 = entryWord(program, i, 1);
  Value tileI64 = arith::ExtSIOp::create(b, loc, b.getI64Type(), tile32);
  if (program.anyStaged) {
    currentStage = entryWord(program, i, 2);
    emitStageAhead(program, i, firstPosition);
  }
  FailureOr<scf::ExecuteRegionOp> region = emitStaticEntry(taskId, tileI64);
  if (failed(region))
    return failure();
  b.setInsertionPointAfter(*region);
  Value nextI = arith::AddIOp::create(b, loc, i, idx(1));
  scf::YieldOp::create(b, loc, ValueRange{nextI, region->getResult(0)});
  b.setInsertionPointAfter(loop);
  currentStage = Value();
  return loop.getResult(1);
}
