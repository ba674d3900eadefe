//===- WorkerEmitter.cpp - Waits, signals and tiles of a worker -----------===//
//
// What every worker does, whatever its schedule: waits (thread 0 polls a
// counter, bounded by the spin limit) and signals on event counters, the
// error record and the trace, the kernel-level values a tile needs, and the
// tile bodies themselves.
//
// Tile bodies are emitted as control-flow graphs inside scf.execute_region
// ops so that a wait can leave them: a wait that times out (or sees another
// worker's abort) branches to the region's failure block, and the worker
// returns.
//
//===----------------------------------------------------------------------===//

#include "WorkerEmitter.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/IR/Matchers.h"

#include <limits>

using namespace mlir;
using namespace mlir::et;
using namespace mlir::et::workers;
using abi::WorkerError;

//===----------------------------------------------------------------------===//
// The trace
//===----------------------------------------------------------------------===//

void WorkerEmitter::recordTile(Value task, Value tile, Value start, Value ready) {
  Value end = now();
  auto first = scf::IfOp::create(b, loc, isThread0(), /*withElse=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(first.thenBlock());
  auto [slot, fits] = target.traceSlot(*this);
  auto store = scf::IfOp::create(b, loc, fits, /*withElse=*/false);
  b.setInsertionPointToStart(store.thenBlock());
  Value base = arith::MulIOp::create(b, loc, slot, idx(abi::kTraceWords));
  Value fields[abi::kTraceWords];
  fields[static_cast<int64_t>(abi::TraceField::Worker)] = toI64(workerId);
  fields[static_cast<int64_t>(abi::TraceField::Task)] = toI64(task);
  fields[static_cast<int64_t>(abi::TraceField::Tile)] = toI64(tile);
  fields[static_cast<int64_t>(abi::TraceField::Start)] = start;
  fields[static_cast<int64_t>(abi::TraceField::Ready)] = ready;
  fields[static_cast<int64_t>(abi::TraceField::End)] = end;
  fields[static_cast<int64_t>(abi::TraceField::Step)] = step ? toI64(step) : i64(0);
  for (int64_t i = 0; i < abi::kTraceWords; ++i)
    memref::StoreOp::create(
        b, loc, fields[i], traceMem,
        ValueRange{arith::AddIOp::create(b, loc, base, idx(i))});
}

//===----------------------------------------------------------------------===//
// Control flow inside an scf.execute_region
//===----------------------------------------------------------------------===//

Block *WorkerEmitter::newBlock(Scope &scope, TypeRange args) {
  Block *block = new Block();
  scope.region->push_back(block);
  for (Type t : args)
    block->addArgument(t, loc);
  return block;
}

std::pair<scf::ExecuteRegionOp, WorkerEmitter::Scope>
WorkerEmitter::openRegion(TypeRange types, function_ref<SmallVector<Value>()> failValues) {
  auto region = scf::ExecuteRegionOp::create(b, loc, types);
  Scope scope;
  scope.region = &region.getRegion();
  Block *entry = new Block();
  scope.region->push_back(entry);
  scope.fail = newBlock(scope);
  b.setInsertionPointToEnd(scope.fail);
  scf::YieldOp::create(b, loc, failValues());
  b.setInsertionPointToEnd(entry);
  return {region, std::move(scope)};
}

void WorkerEmitter::recordError(WorkerError kind, Value task, Value tile, Value event,
                 Value element, Value expected, Value observed,
                 bool localOnly) {
  Value claimed = LLVM::AtomicCmpXchgOp::create(
      b, loc, controlPointer(abi::kControlErrorClaimed), i32(0), i32(1),
      LLVM::AtomicOrdering::acq_rel, LLVM::AtomicOrdering::monotonic,
      target.syncscope(), /*alignment=*/4);
  Value won = LLVM::ExtractValueOp::create(b, loc, claimed, 1);
  auto ifOp = scf::IfOp::create(b, loc, won, /*withElse=*/false);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    Value fields[abi::kErrorWords];
    auto set = [&](abi::ErrorField field, Value v) { fields[static_cast<int64_t>(field)] = v; };
    set(abi::ErrorField::Kind, i64(static_cast<int64_t>(kind)));
    set(abi::ErrorField::Worker, toI64(workerId));
    set(abi::ErrorField::Task, toI64(task));
    set(abi::ErrorField::Tile, toI64(tile));
    set(abi::ErrorField::Event, toI64(event));
    set(abi::ErrorField::Element, toI64(element));
    set(abi::ErrorField::Expected, toI64(expected));
    set(abi::ErrorField::Observed, toI64(observed));
    set(abi::ErrorField::Step, step ? toI64(step) : i64(0));
    for (int64_t i = 0; i < abi::kErrorWords; ++i)
      memref::StoreOp::create(b, loc, fields[i], errorMem,
                              ValueRange{idx(i)});
    LLVM::FenceOp::create(b, loc, LLVM::AtomicOrdering::release,
                          target.syncscope());
  }
  LLVM::StoreOp::create(b, loc, i32(1), controlPointer(abi::kControlAbort),
                        /*alignment=*/4, /*isVolatile=*/false,
                        /*isNonTemporal=*/false, /*isInvariantGroup=*/false,
                        LLVM::AtomicOrdering::release, target.syncscope());
  if (numDevices > 1 && !localOnly)
    for (Value counters : peerCounters)
      LLVM::StoreOp::create(b, loc, i32(1),
                            elementPointer(basePointer(counters), abortWord, b.getI32Type()),
                            /*alignment=*/4, /*isVolatile=*/false, /*isNonTemporal=*/false,
                            /*isInvariantGroup=*/false, LLVM::AtomicOrdering::monotonic,
                            StringRef());
}

void WorkerEmitter::emitSpin(Scope &scope, Value counterIndex, Value expected, Value task,
              Value tile, Value event, Value element,
              StringRef syncscope, bool localOnly, Value orFlag) {
  Type i64Type = b.getI64Type(), i1Type = b.getI1Type();
  Block *spin = newBlock(scope, {i64Type});
  Block *check = newBlock(scope, {i64Type});
  Block *timeout = newBlock(scope, {i64Type});
  Block *record = newBlock(scope);
  Block *sleep = newBlock(scope, {i64Type});
  Block *join = newBlock(scope, {i1Type});
  Block *cont = newBlock(scope);

  Value ptr = counterPointer(counterIndex);
  Value expected32 =
      arith::TruncIOp::create(b, loc, b.getI32Type(), toI64(expected));
  // Thread 0 polls; the watchdog's measure starts here (a poll count, or
  // on the host, one thread per worker, the wait's start time).
  cf::CondBranchOp::create(b, loc, isThread0(), spin, ValueRange{target.waitStart(*this)},
                           join, ValueRange{i1(true)});

  // The abort flag is read before the counter, with no ordering: both
  // loads are in flight together, so a poll costs one L2 round trip (read
  // after a short counter, the flag was a second one per poll, and the
  // wake-up of a waiter after the last signal took up to two).
  b.setInsertionPointToEnd(spin);
  Value abortFlag = LLVM::LoadOp::create(
      b, loc, b.getI32Type(), controlPointer(abi::kControlAbort), /*alignment=*/4,
      false, false, false, false, LLVM::AtomicOrdering::monotonic,
      target.syncscope());
  if (numDevices > 1) {
    // Another device's error (its copy raised the flag in this device's
    // counter buffer).
    Value remote = LLVM::LoadOp::create(
        b, loc, b.getI32Type(), counterPointer(abortWord), /*alignment=*/4, false, false, false,
        false, LLVM::AtomicOrdering::monotonic, StringRef());
    abortFlag = arith::OrIOp::create(b, loc, abortFlag, remote);
  }
  Value observed = LLVM::LoadOp::create(
      b, loc, b.getI32Type(), ptr, /*alignment=*/4, /*isVolatile=*/false,
      /*isNonTemporal=*/false, /*isInvariant=*/false,
      /*isInvariantGroup=*/false, LLVM::AtomicOrdering::acquire,
      syncscope);
  // Reached when the counter is no more than 2^31 - 1 behind: compared by
  // their difference, so that a counter that counts on across the steps of
  // a launch may wrap past 2^31 (and 2^32).
  Value behind = arith::SubIOp::create(b, loc, observed, expected32);
  Value ready = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge,
                                      behind, i32(0));
  if (orFlag) {
    Value flag = LLVM::LoadOp::create(b, loc, b.getI32Type(), orFlag, /*alignment=*/4, false, false, false, false,
                                      LLVM::AtomicOrdering::monotonic, target.syncscope());
    ready = arith::OrIOp::create(b, loc, ready,
                                 arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, flag, i32(0)));
  }
  cf::CondBranchOp::create(b, loc, ready, join, ValueRange{i1(true)}, check,
                           ValueRange{spin->getArgument(0)});

  b.setInsertionPointToEnd(check);
  Value aborted = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne,
                                        abortFlag, i32(0));
  cf::CondBranchOp::create(b, loc, aborted, join, ValueRange{i1(false)},
                           timeout, ValueRange{check->getArgument(0)});

  b.setInsertionPointToEnd(timeout);
  auto [next, expired] = target.waitExpired(*this, timeout->getArgument(0));
  cf::CondBranchOp::create(b, loc, expired, record, ValueRange{}, sleep,
                           ValueRange{next});

  b.setInsertionPointToEnd(record);
  recordError(WorkerError::Timeout, task, tile, event, element, expected,
              observed, localOnly);
  cf::BranchOp::create(b, loc, join, ValueRange{i1(false)});

  b.setInsertionPointToEnd(sleep);
  target.backoff(*this);
  cf::BranchOp::create(b, loc, spin, ValueRange{sleep->getArgument(0)});

  // Every thread's outcome at once (the threads that did not poll bring
  // true): one barrier.
  b.setInsertionPointToEnd(join);
  Value ok = target.allOf(*this, join->getArgument(0));
  cf::CondBranchOp::create(b, loc, ok, cont, ValueRange{}, scope.fail,
                           ValueRange{});
  b.setInsertionPointToEnd(cont);
}

//===----------------------------------------------------------------------===//
// Kernel-level values
//===----------------------------------------------------------------------===//

FailureOr<Value> WorkerEmitter::materialize(Value v, Scope &scope) {
  if (Value m = eager.lookupOrNull(v))
    return m;
  if (Value m = scope.cache.lookupOrNull(v))
    return m;
  Operation *def = v.getDefiningOp();
  if (!def)
    return kernel.emitOpError("cannot materialize a value in the worker");
  if (auto load = dyn_cast<ExtentLoadOp>(def)) {
    if (Value after = load.getAfterEvent()) {
      FailureOr<SmallVector<Value>> coords =
          materializeAll(load.getAfterIndices(), scope);
      if (failed(coords) ||
          failed(emitWait(scope, after, *coords, idx(-1), idx(-1))))
        return failure();
    }
    FailureOr<SmallVector<Value>> indices =
        materializeAll(load.getIndices(), scope);
    FailureOr<Value> source = materialize(load.getSource(), scope);
    if (failed(indices) || failed(source))
      return failure();
    Value raw = memref::LoadOp::create(b, loc, *source, *indices);
    Value result = toIndex(raw);
    scope.cache.map(v, result);
    return result;
  }
  if (def->getNumRegions() != 0)
    return def->emitOpError("kernel-level ops with regions are not "
                            "supported by the worker lowering");
  for (Value operand : def->getOperands()) {
    FailureOr<Value> m = materialize(operand, scope);
    if (failed(m))
      return failure();
    scope.cache.map(operand, *m);
  }
  Operation *clone = b.clone(*def, scope.cache);
  for (auto [from, to] : llvm::zip(def->getResults(), clone->getResults()))
    scope.cache.map(from, to);
  return scope.cache.lookup(v);
}

FailureOr<SmallVector<Value>> WorkerEmitter::materializeAll(ValueRange values, Scope &scope,
                                             const IRMapping *local) {
  SmallVector<Value> out;
  for (Value v : values) {
    if (Value m = local ? local->lookupOrNull(v) : Value()) {
      out.push_back(m);
      continue;
    }
    FailureOr<Value> m = materialize(v, scope);
    if (failed(m))
      return failure();
    out.push_back(*m);
  }
  return out;
}

FailureOr<Value> WorkerEmitter::tileCount(TaskOp task, Scope &scope,
                           SmallVectorImpl<Value> *extents, bool dispatch) {
  FailureOr<SmallVector<Value>> values =
      materializeAll(task.getExtents(), scope);
  if (failed(values))
    return failure();
  // At a dispatch, extents known only at run time (kernel arguments,
  // extent loads) are checked: each in [0, 2^31 - 1] and so their product,
  // as the verifier checks the constant ones (the dynamic schedule numbers
  // tiles in 32 bits, and a wrapped product would silently run fewer
  // tiles). Each factor is at most 2^31 - 1 and so is the product before
  // it: no 64-bit product overflows.
  constexpr int64_t kMaxTiles = std::numeric_limits<int32_t>::max();
  Value n = idx(1), inRange = i1(true);
  bool dynamic = false;
  for (Value e : *values) {
    n = arith::MulIOp::create(b, loc, n, e);
    if (!dispatch || matchPattern(e, m_Constant()))
      continue;
    dynamic = true;
    auto within = [&](Value v) {
      Value low = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, v, idx(0));
      Value high = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sle, v, idx(kMaxTiles));
      return arith::AndIOp::create(b, loc, low, high);
    };
    inRange = arith::AndIOp::create(b, loc, inRange, arith::AndIOp::create(b, loc, within(e), within(n)));
    // Later factors multiply a product known to be in range.
    n = arith::SelectOp::create(b, loc, inRange, n, idx(0));
  }
  if (dynamic) {
    Block *bad = newBlock(scope);
    Block *cont = newBlock(scope);
    cf::CondBranchOp::create(b, loc, inRange, cont, ValueRange{}, bad, ValueRange{});
    b.setInsertionPointToEnd(bad);
    int64_t id = llvm::find(tasks, task) - tasks.begin();
    recordError(WorkerError::TileCount, idx(id), idx(-1), idx(-1), idx(-1), idx(kMaxTiles),
                idx(-1));
    cf::BranchOp::create(b, loc, scope.fail, ValueRange{});
    b.setInsertionPointToEnd(cont);
  }
  if (extents)
    extents->append(values->begin(), values->end());
  return n;
}

//===----------------------------------------------------------------------===//
// Events
//===----------------------------------------------------------------------===//

std::pair<Value, Value> WorkerEmitter::linearize(const EventLayout &layout,
                                  ArrayRef<Value> coords) {
  Value lin = idx(0), inBounds = i1(true);
  for (auto [c, d] : llvm::zip(coords, layout.dims)) {
    Value ge = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, c,
                                     idx(0));
    Value lt =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, c, d);
    inBounds = arith::AndIOp::create(
        b, loc, inBounds, arith::AndIOp::create(b, loc, ge, lt));
    lin = arith::AddIOp::create(b, loc,
                                arith::MulIOp::create(b, loc, lin, d), c);
  }
  return {lin, inBounds};
}

void WorkerEmitter::checkBounds(Scope &scope, Value inBounds, Value task, Value tile,
                 unsigned eventId, Value element) {
  Block *bad = newBlock(scope);
  Block *cont = newBlock(scope);
  cf::CondBranchOp::create(b, loc, inBounds, cont, ValueRange{}, bad,
                           ValueRange{});
  b.setInsertionPointToEnd(bad);
  recordError(WorkerError::IndexOutOfBounds, task, tile, idx(eventId),
              element, idx(-1), idx(-1));
  cf::BranchOp::create(b, loc, scope.fail, ValueRange{});
  b.setInsertionPointToEnd(cont);
}

FailureOr<Value> WorkerEmitter::expectedCount(const EventLayout &layout,
                               ArrayRef<Value> coords, Value lin,
                               Scope &scope) {
  EventInfo &info = *layout.info;
  if (layout.aggregate) {
    // Every signal of the event: one per tile of each signalling site.
    Value total = idx(0);
    for (EventAccess *signal : info.signals) {
      FailureOr<Value> n = tileCount(signal->task, scope);
      if (failed(n))
        return failure();
      total = arith::AddIOp::create(b, loc, total, *n);
    }
    return total;
  }
  if (info.staticCounts) {
    ArrayRef<int64_t> counts = *info.staticCounts;
    if (llvm::all_equal(counts))
      return idx(counts.front());
    memref::GlobalOp table = countTable(layout);
    Value t = memref::GetGlobalOp::create(b, loc, table.getType(),
                                          table.getSymName());
    return toIndex(memref::LoadOp::create(b, loc, t, ValueRange{lin}));
  }
  // A closed form per signalling site, summed.
  Value total = idx(0);
  for (EventAccess *signal : info.signals) {
    FailureOr<Value> term = siteCount(*signal, coords, scope);
    if (failed(term))
      return failure();
    total = arith::AddIOp::create(b, loc, total, *term);
  }
  return total;
}

FailureOr<Value> WorkerEmitter::siteCount(const EventAccess &signal, ArrayRef<Value> coords,
                           Scope &scope) {
  TaskOp task = signal.task;
  FailureOr<SmallVector<Value>> materialized =
      materializeAll(task.getExtents(), scope);
  if (failed(materialized))
    return failure();
  SmallVector<Value> &extents = *materialized;
  auto select = [&](Value cond) {
    return arith::SelectOp::create(b, loc, cond, idx(1), idx(0));
  };
  auto cmp = [&](arith::CmpIPredicate p, Value x, Value y) {
    return arith::CmpIOp::create(b, loc, p, x, y);
  };
  SmallVector<bool> used(task.getNumTileDims(), false);
  Value product = idx(1);
  for (auto [k, expr] : llvm::enumerate(signal.indices)) {
    AffineExpr e = *expr;
    Value ek = coords[k];
    Value factor;
    if (auto c = dyn_cast<AffineConstantExpr>(e)) {
      factor = select(cmp(arith::CmpIPredicate::eq, ek, idx(c.getValue())));
    } else if (auto s = dyn_cast<AffineSymbolExpr>(e)) {
      FailureOr<Value> sv =
          materialize(graph.getSymbols()[s.getPosition()], scope);
      if (failed(sv))
        return failure();
      factor = select(cmp(arith::CmpIPredicate::eq, ek, *sv));
    } else {
      AffineExpr base = e;
      int64_t divisor = 1, multiplier = 1, shift = 0;
      if (auto bin = dyn_cast<AffineBinaryOpExpr>(e)) {
        auto rhs = dyn_cast<AffineConstantExpr>(bin.getRHS());
        // EventGraph only calls counts with these forms symbolic; the
        // others are device counts, which use one aggregate counter.
        assert(rhs && "symbolic count with a non-constant operand");
        base = bin.getLHS();
        if (bin.getKind() == AffineExprKind::Add)
          shift = rhs.getValue();
        else if (bin.getKind() == AffineExprKind::FloorDiv)
          divisor = rhs.getValue();
        else if (bin.getKind() == AffineExprKind::Mul)
          multiplier = rhs.getValue();
        else
          assert(false && "symbolic count of an unsupported form");
      }
      auto dim = cast<AffineDimExpr>(base);
      used[dim.getPosition()] = true;
      Value n = extents[dim.getPosition()];
      if (divisor > 1) {
        // min(c, n - c*e), clamped at 0.
        Value rest = arith::SubIOp::create(
            b, loc, n, arith::MulIOp::create(b, loc, idx(divisor), ek));
        Value m = arith::MinSIOp::create(b, loc, idx(divisor), rest);
        factor = arith::MaxSIOp::create(b, loc, m, idx(0));
      } else if (multiplier > 1) {
        Value divisible = cmp(arith::CmpIPredicate::eq,
                              arith::RemSIOp::create(b, loc, ek,
                                                     idx(multiplier)),
                              idx(0));
        Value q = arith::DivSIOp::create(b, loc, ek, idx(multiplier));
        Value inRange = cmp(arith::CmpIPredicate::slt, q, n);
        factor = select(arith::AndIOp::create(b, loc, divisible, inRange));
      } else {
        Value d = arith::SubIOp::create(b, loc, ek, idx(shift));
        Value inRange = arith::AndIOp::create(
            b, loc, cmp(arith::CmpIPredicate::sge, d, idx(0)),
            cmp(arith::CmpIPredicate::slt, d, n));
        factor = select(inRange);
      }
    }
    product = arith::MulIOp::create(b, loc, product, factor);
  }
  for (auto [d, u] : llvm::enumerate(used))
    if (!u)
      product = arith::MulIOp::create(b, loc, product, extents[d]);
  return product;
}

memref::GlobalOp WorkerEmitter::countTable(const EventLayout &layout) {
  auto it = countTables.find(layout.id);
  if (it != countTables.end())
    return it->second;
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&container->getRegion(0).front());
  SmallVector<int32_t> counts(layout.info->staticCounts->begin(),
                              layout.info->staticCounts->end());
  auto type = MemRefType::get({static_cast<int64_t>(counts.size())},
                              b.getI32Type());
  auto value = DenseIntElementsAttr::get(
      RankedTensorType::get(type.getShape(), b.getI32Type()),
      ArrayRef<int32_t>(counts));
  std::string name = ("__et_" + kernel.getSymName() + "_counts" +
                      Twine(layout.id))
                         .str();
  auto global = memref::GlobalOp::create(
      b, loc, name, b.getStringAttr("private"), type, value,
      /*constant=*/true, /*alignment=*/IntegerAttr());
  countTables[layout.id] = global;
  return global;
}

std::pair<Value, Value> WorkerEmitter::locate(Scope &scope, const EventLayout &layout,
                               ArrayRef<Value> coords, Value task,
                               Value tile) {
  Value lin = idx(0), inBounds = i1(true);
  if (!layout.aggregate)
    std::tie(lin, inBounds) = linearize(layout, coords);
  checkBounds(scope, inBounds, task, tile, layout.id, lin);
  Value counter = arith::AddIOp::create(
      b, loc, bankBase, arith::AddIOp::create(b, loc, layout.offset, lin));
  return {lin, counter};
}

LogicalResult WorkerEmitter::emitWait(Scope &scope, Value event, ArrayRef<Value> coords,
                       Value task, Value tile) {
  EventLayout &layout = layouts[event];
  auto [lin, counter] = locate(scope, layout, coords, task, tile);
  FailureOr<Value> expected = expectedCount(layout, coords, lin, scope);
  if (failed(expected))
    return failure();
  // Counters keep counting across the steps of a launch: step s waits for
  // s + 1 times the count.
  if (step)
    expected = arith::MulIOp::create(b, loc, *expected, arith::AddIOp::create(b, loc, step, idx(1))).getResult();
  emitSpin(scope, counter, *expected, task, tile, idx(layout.id), lin,
           layout.remote ? StringRef() : target.syncscope());
  return success();
}

LogicalResult WorkerEmitter::emitSignal(Scope &scope, Value event, ArrayRef<Value> coords,
                         Value peer, Value task, Value tile) {
  const EventLayout &layout = layouts[event];
  Value counter = locate(scope, layout, coords, task, tile).second;
  // The device whose copy of the event receives the signal.
  Value device = peer && numDevices > 1 ? peerDevice(peer) : Value();
  // Every thread's writes of the tile happen before thread 0's release.
  barrier();
  auto ifOp = scf::IfOp::create(b, loc, isThread0(), /*withElse=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  if (!layout.remote) {
    target.signalCounter(*this, counter);
    return success();
  }
  LLVM::FenceOp::create(b, loc, LLVM::AtomicOrdering::release, StringRef());
  Value base = device ? basePointer(selectCopy(peerCounters, device))
                      : countersBase;
  target.systemAdd(*this, elementPointer(base, counter, b.getI32Type()));
  return success();
}

//===----------------------------------------------------------------------===//
// Tiles
//===----------------------------------------------------------------------===//

SmallVector<Value> WorkerEmitter::delinearize(Value tile, ArrayRef<Value> extents) {
  SmallVector<Value> coords(extents.size());
  Value rest = tile;
  for (int64_t d = extents.size() - 1; d >= 0; --d) {
    coords[d] = arith::RemUIOp::create(b, loc, rest, extents[d]);
    rest = arith::DivUIOp::create(b, loc, rest, extents[d]);
  }
  return coords;
}

LogicalResult WorkerEmitter::emitTile(Scope &scope, TaskOp task, unsigned taskId,
                       Value tile) {
  Value start = target.isProfiled() ? now() : Value();
  SmallVector<Value> extents;
  if (failed(tileCount(task, scope, &extents)))
    return failure();
  SmallVector<Value> coords = delinearize(tile, extents);
  IRMapping map;
  Block &body = task.getBody().front();
  for (auto [arg, c] : llvm::zip(body.getArguments(), coords))
    map.map(arg, c);
  Value taskValue = idx(taskId);
  Value ready = start;
  for (Operation &op : body) {
    if (auto shared = tileShared.lookup(&op)) {
      map.map(op.getResult(0), shared);
      continue;
    }
    if (auto stepOp = dyn_cast<StepOp>(op)) {
      map.map(stepOp.getResult(), step);
      continue;
    }
    if (auto staged = dyn_cast<StagedRowsOp>(op)) {
      if (failed(emitStagedRows(staged, map, scope)))
        return failure();
      continue;
    }
    if (auto wait = dyn_cast<EventWaitOp>(op)) {
      FailureOr<SmallVector<Value>> idxs =
          materializeAll(wait.getIndices(), scope, &map);
      if (failed(idxs) ||
          failed(emitWait(scope, wait.getEvent(), *idxs, taskValue, tile)))
        return failure();
      if (target.isProfiled())
        ready = now();
      continue;
    }
    if (auto signal = dyn_cast<EventSignalOp>(op)) {
      FailureOr<SmallVector<Value>> idxs =
          materializeAll(signal.getIndices(), scope, &map);
      Value peer;
      if (signal.getPeer()) {
        FailureOr<SmallVector<Value>> k =
            materializeAll(signal.getPeer(), scope, &map);
        if (failed(k))
          return failure();
        peer = k->front();
      }
      if (failed(idxs) || failed(emitSignal(scope, signal.getEvent(), *idxs,
                                            peer, taskValue, tile)))
        return failure();
      continue;
    }
    // Values from outside the task (kernel level) used anywhere in `op`.
    WalkResult walk = op.walk([&](Operation *inner) {
      for (Value operand : inner->getOperands()) {
        if (map.contains(operand))
          continue;
        Region *r = operand.getParentRegion();
        if (!r || task->isAncestor(r->getParentOp()))
          continue;
        FailureOr<Value> m = materialize(operand, scope);
        if (failed(m))
          return WalkResult::interrupt();
        map.map(operand, *m);
      }
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return failure();
    Operation *clone = b.clone(op, map);
    // et.step inside the op's regions: the step being emitted.
    clone->walk([&](StepOp nested) {
      nested.getResult().replaceAllUsesWith(step);
      nested.erase();
    });
  }
  // A staged entry's copies are complete before its region is reused
  // (the body may not have waited: its rows may have had no work).
  if (currentStage && stagedTasks.contains(task))
    waitStaged(decodeStage(currentStage));
  // The tile is done on every thread before the next one starts.
  barrier();
  if (target.isProfiled())
    recordTile(taskValue, tile, start, ready);
  return success();
}
