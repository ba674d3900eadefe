//===- EventTensorOps.cpp - EventTensor ops -------------------------------===//
//
// Parsers, printers, builders and verifiers of the et dialect's core ops:
// kernels, tasks, events, collectives, extents, threads and schedules (the
// tile compute ops are in EventTensorTileOps.cpp).
//
//===----------------------------------------------------------------------===//

#include "EventTensor/Dialect/EventTensor/EventTensorOps.h"
#include "OpVerification.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/FunctionImplementation.h"

#include <limits>

using namespace mlir;
using namespace mlir::et;

// `static` or `dynamic`, a bare keyword.
static ParseResult parseScheduleKind(OpAsmParser &parser,
                                     ScheduleKindAttr &kind) {
  SMLoc loc = parser.getCurrentLocation();
  StringRef keyword;
  if (parser.parseKeyword(&keyword))
    return failure();
  std::optional<ScheduleKind> value = symbolizeScheduleKind(keyword);
  if (!value)
    return parser.emitError(loc, "expected 'static' or 'dynamic', got '")
           << keyword << "'";
  kind = ScheduleKindAttr::get(parser.getContext(), *value);
  return success();
}

static void printScheduleKind(OpAsmPrinter &p, Operation *,
                              ScheduleKindAttr kind) {
  p << stringifyScheduleKind(kind.getValue());
}

#define GET_OP_CLASSES
#include "EventTensor/Dialect/EventTensor/EventTensorOps.cpp.inc"

//===----------------------------------------------------------------------===//
// KernelOp
//===----------------------------------------------------------------------===//

void KernelOp::build(OpBuilder &builder, OperationState &state, StringRef name,
                     FunctionType type) {
  state.addAttribute(::mlir::SymbolTable::getSymbolAttrName(),
                     builder.getStringAttr(name));
  state.addAttribute(getFunctionTypeAttrName(state.name), TypeAttr::get(type));
  Region *body = state.addRegion();
  Block *block = new Block();
  body->push_back(block);
  for (Type input : type.getInputs())
    block->addArgument(input, state.location);
}

ParseResult KernelOp::parse(OpAsmParser &parser, OperationState &result) {
  auto buildFuncType =
      [](Builder &builder, ArrayRef<Type> argTypes, ArrayRef<Type> results,
         function_interface_impl::VariadicFlag,
         std::string &) { return builder.getFunctionType(argTypes, results); };
  return function_interface_impl::parseFunctionOp(
      parser, result, /*allowVariadic=*/false,
      getFunctionTypeAttrName(result.name), buildFuncType,
      getArgAttrsAttrName(result.name), getResAttrsAttrName(result.name));
}

void KernelOp::print(OpAsmPrinter &p) {
  function_interface_impl::printFunctionOp(
      p, *this, /*isVariadic=*/false, getFunctionTypeAttrName(),
      getArgAttrsAttrName(), getResAttrsAttrName());
}

bool KernelOp::isSymmetricArgument(unsigned i) {
  return static_cast<bool>(
      getArgAttr(i, EventTensorDialect::getSymmetricAttrName()));
}

static LogicalResult verifyExtentLoadCycles(KernelOp kernel);

LogicalResult KernelOp::verify() {
  if (!getFunctionType().getResults().empty())
    return emitOpError("expected no results, got ")
           << getFunctionType().getNumResults();
  // Every device's copy of each symmetric buffer and counter buffer is a
  // parameter of the worker.
  constexpr int64_t kMaxDevices = 64;
  if (getNumDevices() > kMaxDevices)
    return emitOpError("runs on ") << getNumDevices() << " devices, more than the " << kMaxDevices
                                   << " a kernel supports";
  // A memref's static sizes (an argument's, or one made in the kernel):
  // their product in bytes must fit in 64 bits, or its strides and offsets
  // do not (the lowerings compute them as 64-bit integers).
  auto tooLarge = [](Type type) {
    auto memref = dyn_cast<MemRefType>(type);
    if (!memref)
      return false;
    unsigned bits = memref.getElementType().isIntOrFloat()
                        ? memref.getElementType().getIntOrFloatBitWidth()
                        : 64;
    int64_t bytes = std::max<int64_t>(1, bits / 8);
    constexpr int64_t kMaxBytes = std::numeric_limits<int64_t>::max();
    for (int64_t size : memref.getShape()) {
      if (ShapedType::isDynamic(size) || size == 0)
        continue;
      if (bytes > kMaxBytes / size)
        return true;
      bytes *= size;
    }
    return false;
  };
  constexpr StringLiteral kTooLarge = " holds more than 2^63 - 1 bytes (the product of its static sizes and "
                                      "element size), more than 64-bit strides and offsets can address";
  for (auto [i, type] : llvm::enumerate(getArgumentTypes()))
    if (tooLarge(type))
      return emitOpError("argument #") << i << ": " << type << kTooLarge;
  Operation *huge = nullptr;
  getBody().walk([&](Operation *op) {
    if (llvm::any_of(op->getResultTypes(), tooLarge)) {
      huge = op;
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  if (huge) {
    Type type = *llvm::find_if(huge->getResultTypes(), tooLarge);
    return huge->emitOpError("result ") << type << kTooLarge;
  }
  StringRef symmetric = EventTensorDialect::getSymmetricAttrName();
  for (unsigned i = 0, e = getNumArguments(); i < e; ++i) {
    Attribute attr = getArgAttr(i, symmetric);
    if (!attr)
      continue;
    if (!isa<UnitAttr>(attr))
      return emitOpError("argument #") << i << ": '" << symmetric
                                        << "' must be a unit attribute";
    if (!isa<MemRefType>(getArgumentTypes()[i]))
      return emitOpError("argument #")
             << i << ": only a memref can be '" << symmetric << "' (allocated on every device), got "
             << getArgumentTypes()[i];
  }
  // FunctionOpInterface has already checked the entry block against the
  // signature. A schedule, if any, is the last op and is unique.
  Block &body = getBody().front();
  for (ScheduleOp schedule : body.getOps<ScheduleOp>())
    if (schedule.getOperation() != &body.back())
      return schedule.emitOpError(
          "must be the last op of its kernel (a kernel has one schedule)");
  return verifyExtentLoadCycles(*this);
}

/// The et.extent.load ops that the kernel-level value `v` is computed from.
static void extentLoadsOf(Value v, SmallVectorImpl<ExtentLoadOp> &loads,
                          llvm::SmallPtrSetImpl<Operation *> &seen) {
  Operation *def = v.getDefiningOp();
  if (!def || !seen.insert(def).second)
    return;
  if (auto load = dyn_cast<ExtentLoadOp>(def)) {
    loads.push_back(load);
    return;
  }
  for (Value operand : def->getOperands())
    extentLoadsOf(operand, loads, seen);
}

/// An extent load `after` an event waits until the event reaches its
/// count, the tiles that signal it; if those tiles' number depends on the
/// load itself (directly or through other extent loads), neither can be
/// known first. Reports the first such cycle on the load.
static LogicalResult verifyExtentLoadCycles(KernelOp kernel) {
  Block &body = kernel.getBody().front();
  SmallVector<ExtentLoadOp> loads(body.getOps<ExtentLoadOp>());
  if (llvm::none_of(loads, [](ExtentLoadOp load) { return load.getAfterEvent(); }))
    return success();
  // The tasks that signal each event (one walk of the kernel).
  DenseMap<Value, SmallVector<TaskOp>> signallers;
  for (TaskOp task : kernel.getTasks()) {
    llvm::SmallPtrSet<Value, 4> events;
    task.walk([&](EventSignalOp signal) {
      if (events.insert(signal.getEvent()).second)
        signallers[signal.getEvent()].push_back(task);
    });
  }
  // For each load `after` an event: the loads that the event's count
  // depends on, each with the signalling task whose extents read it.
  DenseMap<Operation *, SmallVector<std::pair<ExtentLoadOp, TaskOp>>> dependsOn;
  for (ExtentLoadOp load : loads) {
    if (!load.getAfterEvent())
      continue;
    for (TaskOp task : signallers.lookup(load.getAfterEvent())) {
      SmallVector<ExtentLoadOp> read;
      llvm::SmallPtrSet<Operation *, 8> seen;
      for (Value extent : task.getExtents())
        extentLoadsOf(extent, read, seen);
      for (ExtentLoadOp dep : read)
        dependsOn[load].push_back({dep, task});
    }
  }
  // Whether `from` leads back to `start` (a load merely downstream of
  // another load's cycle is not reported on).
  auto leadsTo = [&](ExtentLoadOp from, ExtentLoadOp start) {
    SmallVector<ExtentLoadOp> stack{from};
    llvm::SmallPtrSet<Operation *, 8> visited;
    while (!stack.empty()) {
      ExtentLoadOp next = stack.pop_back_val();
      if (next == start)
        return true;
      if (visited.insert(next).second)
        for (auto [dep, task] : dependsOn.lookup(next))
          stack.push_back(dep);
    }
    return false;
  };
  for (ExtentLoadOp load : loads)
    for (auto [dep, task] : dependsOn.lookup(load))
      if (leadsTo(dep, load))
        return load.emitOpError("waits for an event whose count (the tiles of task @")
               << task.getSymName()
               << " that signal it) depends on this load's value: a cycle that no worker can resolve";
  return success();
}

//===----------------------------------------------------------------------===//
// TaskOp
//===----------------------------------------------------------------------===//

void TaskOp::build(OpBuilder &builder, OperationState &state, StringRef name,
                   ValueRange extents) {
  state.addAttribute(::mlir::SymbolTable::getSymbolAttrName(),
                     builder.getStringAttr(name));
  state.addOperands(extents);
  Region *body = state.addRegion();
  Block *block = new Block();
  body->push_back(block);
  for (size_t i = 0, e = extents.size(); i < e; ++i)
    block->addArgument(builder.getIndexType(), state.location);
}

// et.task @name tiles(%i, %j) in (%a, %b) attributes {...} { body }
ParseResult TaskOp::parse(OpAsmParser &parser, OperationState &result) {
  StringAttr name;
  if (parser.parseSymbolName(name, ::mlir::SymbolTable::getSymbolAttrName(),
                             result.attributes))
    return failure();

  SmallVector<OpAsmParser::Argument> tileIds;
  SmallVector<OpAsmParser::UnresolvedOperand> extents;
  if (parser.parseKeyword("tiles") ||
      parser.parseArgumentList(tileIds, OpAsmParser::Delimiter::Paren) ||
      parser.parseKeyword("in") ||
      parser.parseOperandList(extents, OpAsmParser::Delimiter::Paren))
    return failure();
  if (tileIds.size() != extents.size())
    return parser.emitError(parser.getCurrentLocation())
           << "expected as many extents as tile coordinates ("
           << tileIds.size() << "), got " << extents.size();

  Type indexType = parser.getBuilder().getIndexType();
  if (parser.resolveOperands(extents, indexType, result.operands))
    return failure();
  for (OpAsmParser::Argument &arg : tileIds)
    arg.type = indexType;

  if (parser.parseOptionalAttrDictWithKeyword(result.attributes))
    return failure();
  Region *body = result.addRegion();
  if (parser.parseRegion(*body, tileIds))
    return failure();
  if (body->empty())
    body->push_back(new Block());
  return success();
}

void TaskOp::print(OpAsmPrinter &p) {
  p << " ";
  p.printSymbolName(getSymName());
  p << " tiles(";
  llvm::interleaveComma(getTileIds(), p,
                        [&](BlockArgument arg) { p.printOperand(arg); });
  p << ") in (";
  p.printOperands(getExtents());
  p << ")";
  p.printOptionalAttrDictWithKeyword((*this)->getAttrs(),
                                     {::mlir::SymbolTable::getSymbolAttrName()});
  p << " ";
  p.printRegion(getBody(), /*printEntryBlockArgs=*/false,
                /*printBlockTerminators=*/false);
}

LogicalResult TaskOp::verify() {
  Block &body = getBody().front();
  if (body.getNumArguments() != getExtents().size())
    return emitOpError("expected ")
           << getExtents().size()
           << " tile coordinates (one per extent), got "
           << body.getNumArguments();
  for (auto [i, arg] : llvm::enumerate(body.getArguments()))
    if (!arg.getType().isIndex())
      return emitOpError("tile coordinate #")
             << i << " must be of type index, got " << arg.getType();
  if (getExtents().empty())
    return emitOpError("expected at least one tile dimension");
  std::optional<ArrayRef<int64_t>> bounds = getMaxExtents();
  if (bounds && bounds->size() != getExtents().size())
    return emitOpError("expected ")
           << getExtents().size() << " 'max_extents' (one per extent), got "
           << bounds->size();
  // The tiles a task can have: the dynamic schedules hand them out as
  // 32-bit tickets. Checked here where the extents (or their declared
  // bounds) are known, without overflowing the product.
  constexpr int64_t kMaxTiles = std::numeric_limits<int32_t>::max();
  int64_t knownTiles = 1;
  for (auto [i, extent] : llvm::enumerate(getExtents())) {
    APInt value;
    bool isConstant = matchPattern(extent, m_ConstantInt(&value));
    if (isConstant && value.getSExtValue() < 1)
      return emitOpError("tile extent #")
             << i << " must be positive, got " << value.getSExtValue();
    std::optional<int64_t> known;
    if (isConstant)
      known = value.getSExtValue();
    if (bounds) {
      int64_t bound = (*bounds)[i];
      if (bound < 1)
        return emitOpError("max_extents #")
               << i << " must be positive, got " << bound;
      if (isConstant && value.getSExtValue() > bound)
        return emitOpError("tile extent #")
               << i << " (" << value.getSExtValue()
               << ") exceeds its declared bound " << bound;
      if (!known)
        known = bound;
    }
    if (!known)
      continue;
    if (*known > kMaxTiles / knownTiles)
      return emitOpError("has more than ")
             << kMaxTiles << " tiles (2^31 - 1, the most a task can have): extent #" << i << " ("
             << *known << ") times the extents before it (" << knownTiles << ")";
    knownTiles *= *known;
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Events
//===----------------------------------------------------------------------===//

LogicalResult EventCreateOp::verify() {
  EventType type = getResult().getType();
  int64_t expected = type.getNumDynamicDims();
  int64_t actual = getDynamicSizes().size();
  if (expected != actual)
    return emitOpError("expected ")
           << expected << " dynamic size operands for " << type << ", got "
           << actual;
  return success();
}

/// Shared by wait and signal: one index per event dimension, and no
/// statically negative index.
static LogicalResult verifyEventAccess(Operation *op, EventType type,
                                       ValueRange indices) {
  if (static_cast<int64_t>(indices.size()) != type.getRank())
    return op->emitOpError("expected ")
           << type.getRank() << " indices for " << type << ", got "
           << indices.size();
  for (auto [i, index] : llvm::enumerate(indices)) {
    APInt value;
    if (!matchPattern(index, m_ConstantInt(&value)))
      continue;
    int64_t v = value.getSExtValue();
    int64_t size = type.getShape()[i];
    if (v < 0 || (!ShapedType::isDynamic(size) && v >= size))
      return op->emitOpError("index #")
             << i << " is out of bounds: " << v << " not in [0, "
             << (ShapedType::isDynamic(size) ? std::string("?")
                                             : std::to_string(size))
             << ")";
  }
  return success();
}

LogicalResult EventWaitOp::verify() {
  return verifyEventAccess(*this, getEvent().getType(), getIndices());
}

/// The et.device_id op `value` is computed from, if any (through the ops
/// that define it, in the kernel).
static Operation *findDeviceId(Value value) {
  SmallVector<Value> work{value};
  llvm::SmallPtrSet<Operation *, 8> seen;
  while (!work.empty()) {
    Operation *def = work.pop_back_val().getDefiningOp();
    if (!def || !seen.insert(def).second)
      continue;
    if (isa<DeviceIdOp>(def))
      return def;
    llvm::append_range(work, def->getOperands());
  }
  return nullptr;
}

LogicalResult EventSignalOp::verify() {
  if (Value peer = getPeer())
    if (Operation *device = findDeviceId(peer)) {
      InFlightDiagnostic diag = emitOpError(
          "peer offset depends on 'et.device_id'; it must be the same on "
          "every device, so that each tile signals each device once");
      diag.attachNote(device->getLoc()) << "device id used here";
      return diag;
    }
  return verifyEventAccess(*this, getEvent().getType(), getIndices());
}

//===----------------------------------------------------------------------===//
// ExtentLoadOp
//===----------------------------------------------------------------------===//

LogicalResult ExtentLoadOp::verify() {
  auto memref = cast<MemRefType>(getSource().getType());
  if (static_cast<int64_t>(getIndices().size()) != memref.getRank())
    return emitOpError("expected ")
           << memref.getRank() << " indices for " << memref << ", got "
           << getIndices().size();
  Type elt = memref.getElementType();
  if (!elt.isIndex() && !elt.isSignlessInteger())
    return emitOpError("expected a memref of integers or index, got ")
           << memref;
  if (getAfterEvent())
    return verifyEventAccess(*this, getAfterEvent().getType(),
                             getAfterIndices());
  if (!getAfterIndices().empty())
    return emitOpError("has 'after' indices but no 'after' event");
  return success();
}

//===----------------------------------------------------------------------===//
// RepeatOp, StepOp
//===----------------------------------------------------------------------===//

LogicalResult RepeatOp::verify() {
  auto kernel = (*this)->getParentOfType<KernelOp>();
  for (RepeatOp other : kernel.getBody().front().getOps<RepeatOp>())
    if (other != *this) {
      if (other->isBeforeInBlock(*this))
        return emitOpError("is the kernel's second 'et.repeat' (a kernel has one)")
                   .attachNote(other.getLoc())
               << "first one here";
      break;
    }
  if (cast<MemRefType>(getStop().getType()).getDimSize(0) != 1)
    return emitOpError("stop flag must be a memref<1xi32>, got ") << getStop().getType();
  if (cast<EventType>(getAfter().getType()).getRank() != 0)
    return emitOpError("'after' must be a rank-0 event (the end of a step), got ")
           << getAfter().getType();
  return success();
}

RepeatOp KernelOp::getRepeat() {
  auto ops = getBody().front().getOps<RepeatOp>();
  return ops.empty() ? RepeatOp() : *ops.begin();
}

LogicalResult StepOp::verify() {
  if (failed(detail::verifyInTask(*this)))
    return failure();
  if (!(*this)->getParentOfType<KernelOp>().getRepeat())
    return emitOpError("in a kernel without 'et.repeat' (it has one step)");
  return success();
}

//===----------------------------------------------------------------------===//
// Schedules
//===----------------------------------------------------------------------===//

/// The number of tiles of `task` when every extent is a constant
/// (saturating at INT64_MAX).
static std::optional<int64_t> staticTileCount(TaskOp task) {
  int64_t total = 1;
  for (Value extent : task.getExtents()) {
    APInt value;
    if (!matchPattern(extent, m_ConstantInt(&value)))
      return std::nullopt;
    int64_t v = value.getSExtValue();
    if (v > 0 && total > INT64_MAX / v)
      total = INT64_MAX;
    else
      total *= v;
  }
  return total;
}

void ScheduleOp::build(OpBuilder &builder, OperationState &state,
                       ScheduleKind kind, int64_t workers) {
  state.addAttribute(getKindAttrName(state.name),
                     ScheduleKindAttr::get(builder.getContext(), kind));
  state.addAttribute(getWorkersAttrName(state.name),
                     builder.getI64IntegerAttr(workers));
  state.addRegion()->push_back(new Block());
}

LogicalResult ScheduleOp::verify() { return success(); }

static LogicalResult unknownTask(RunOp run, KernelOp kernel) {
  return run.emitOpError("'") << run.getTaskAttr()
                              << "' is not a task of kernel @"
                              << kernel.getSymName();
}

LogicalResult ScheduleOp::verifyRegions() {
  Block &body = getBody().front();
  KernelOp kernel = getKernel();
  int64_t numWorkers = getWorkers();
  if (!isStatic()) {
    llvm::SmallDenseSet<Operation *> seen;
    for (Operation &op : body) {
      auto run = dyn_cast<RunOp>(op);
      if (!run)
        return op.emitOpError("is not allowed in a dynamic schedule (expected "
                              "'et.run' entries)");
      TaskOp task = run.getTaskOp();
      if (!task)
        return unknownTask(run, kernel);
      if (!seen.insert(task).second)
        return run.emitOpError("task @")
               << task.getSymName() << " appears twice in the queue";
    }
    for (TaskOp task : kernel.getTasks())
      if (!seen.contains(task))
        return emitOpError("does not schedule task @") << task.getSymName();
    return success();
  }

  // Static: one et.worker per worker, in id order.
  int64_t expectedId = 0;
  // Per task listed by tile: tile -> worker.
  llvm::DenseMap<Operation *, llvm::DenseMap<int64_t, int64_t>> tileOwners;
  llvm::DenseMap<Operation *, int64_t> cyclicOffsets;
  llvm::DenseMap<Operation *, int64_t> cyclicWorkers;
  for (Operation &op : body) {
    auto worker = dyn_cast<WorkerOp>(op);
    if (!worker)
      return op.emitOpError(
          "is not allowed in a static schedule (expected 'et.worker')");
    if (worker.getId() != expectedId)
      return worker.emitOpError("expected worker id ")
             << expectedId << " (ids are 0.." << numWorkers - 1
             << " in order), got " << worker.getId();
    ++expectedId;
    for (Operation &entry : worker.getBody().front()) {
      auto run = dyn_cast<RunOp>(entry);
      if (!run)
        return entry.emitOpError("is not allowed in 'et.worker' (expected "
                                 "'et.run' entries)");
      TaskOp task = run.getTaskOp();
      if (!task)
        return unknownTask(run, kernel);
      if (std::optional<int64_t> offset = run.getCyclic()) {
        if (*offset >= numWorkers)
          return run.emitOpError("cyclic offset ")
                 << *offset << " must be less than the worker count "
                 << numWorkers;
        auto [it, inserted] = cyclicOffsets.try_emplace(task, *offset);
        if (!inserted && it->second != *offset)
          return run.emitOpError("cyclic offset ")
                 << *offset << " of @" << task.getSymName()
                 << " differs from the offset " << it->second
                 << " on another worker";
        if (++cyclicWorkers[task] > expectedId)
          return run.emitOpError("task @")
                 << task.getSymName() << " is cyclic twice on worker "
                 << worker.getId();
        continue;
      }
      std::optional<int64_t> count = staticTileCount(task);
      if (!count)
        return run.emitOpError("lists tiles of @")
               << task.getSymName()
               << ", whose tile count is only known at run time (use "
                  "'cyclic')";
      llvm::DenseMap<int64_t, int64_t> &owners = tileOwners[task];
      ArrayRef<int64_t> tiles = *run.getTiles();
      for (int64_t tile : tiles) {
        if (tile < 0 || tile >= *count)
          return run.emitOpError("tile ")
                 << tile << " of @" << task.getSymName()
                 << " is out of range [0, " << *count << ")";
        auto [it, inserted] = owners.try_emplace(tile, worker.getId());
        if (!inserted)
          return run.emitOpError("tile ")
                 << tile << " of @" << task.getSymName()
                 << " is already scheduled on worker " << it->second;
      }
    }
  }
  if (expectedId != numWorkers)
    return emitOpError("expected ")
           << numWorkers << " 'et.worker' ops, got " << expectedId;
  for (TaskOp task : kernel.getTasks()) {
    if (cyclicOffsets.contains(task)) {
      if (tileOwners.contains(task))
        return emitOpError("task @")
               << task.getSymName() << " is both cyclic and listed by tile";
      if (cyclicWorkers[task] != numWorkers)
        return emitOpError("cyclic task @")
               << task.getSymName() << " is on " << cyclicWorkers[task]
               << " of " << numWorkers << " workers (it must be on all)";
      continue;
    }
    auto it = tileOwners.find(task);
    if (it == tileOwners.end())
      return emitOpError("does not schedule task @") << task.getSymName();
    int64_t count = *staticTileCount(task);
    if (static_cast<int64_t>(it->second.size()) != count) {
      // Tiles are in range and distinct, so one below the count is missing.
      int64_t missing = 0;
      while (it->second.contains(missing))
        ++missing;
      return emitOpError("does not schedule tile ")
             << missing << " of task @" << task.getSymName();
    }
  }
  return success();
}

void WorkerOp::build(OpBuilder &builder, OperationState &state, int64_t id) {
  state.addAttribute(getIdAttrName(state.name),
                     builder.getI64IntegerAttr(id));
  state.addRegion()->push_back(new Block());
}

TaskOp RunOp::getTaskOp() {
  Operation *kernel = (*this)->getParentOfType<KernelOp>();
  if (!kernel)
    return {};
  return dyn_cast_or_null<TaskOp>(
      ::mlir::SymbolTable::lookupSymbolIn(kernel, getTaskAttr()));
}

LogicalResult RunOp::verifySymbolUses(SymbolTableCollection &tables) {
  auto kernel = (*this)->getParentOfType<KernelOp>();
  if (!kernel)
    return emitOpError("must be nested in an 'et.kernel'");
  Operation *sym = tables.lookupSymbolIn(kernel, getTaskAttr());
  if (!sym || !isa<TaskOp>(sym))
    return emitOpError("'") << getTaskAttr() << "' is not a task of kernel @"
                            << kernel.getSymName();
  return success();
}

LogicalResult RunOp::verify() {
  bool inWorker = isa<WorkerOp>((*this)->getParentOp());
  bool hasTiles = getTiles().has_value(), isCyclic = getCyclic().has_value();
  if (inWorker && hasTiles == isCyclic)
    return emitOpError("in 'et.worker' needs exactly one of 'tiles' or "
                       "'cyclic'");
  if (!inWorker && (hasTiles || isCyclic))
    return emitOpError("in a dynamic schedule takes no 'tiles' or 'cyclic' "
                       "(the queue runs all tiles)");
  if (hasTiles && getTiles()->empty())
    return emitOpError("has an empty tile list");
  return success();
}

//===----------------------------------------------------------------------===//
// Threads of a worker
//===----------------------------------------------------------------------===//

LogicalResult mlir::et::detail::verifyInTask(Operation *op) {
  if (!op->getParentOfType<TaskOp>())
    return op->emitOpError("must be nested in an 'et.task' body");
  return success();
}

LogicalResult ThreadIdOp::verify() { return detail::verifyInTask(*this); }

LogicalResult DeviceIdOp::verify() {
  if (!(*this)->getParentOfType<KernelOp>())
    return emitOpError("must be nested in an 'et.kernel'");
  return success();
}

LogicalResult AllReduceOp::verify() {
  auto kernel = (*this)->getParentOfType<KernelOp>();
  auto partial = cast<MemRefType>(getPartial().getType());
  auto into = cast<MemRefType>(getInto().getType());
  auto arg = dyn_cast<BlockArgument>(getPartial());
  if (!arg || arg.getOwner()->getParentOp() != kernel.getOperation() ||
      !kernel.isSymmetricArgument(arg.getArgNumber()))
    return emitOpError("partial must be an argument of the kernel marked '")
           << EventTensorDialect::getSymmetricAttrName() << "' (every device's copy is read)";
  for (auto [what, type] : {std::pair<StringRef, MemRefType>{"partial", partial}, {"into", into}})
    if (type.getRank() != 2 || !type.getElementType().isF32())
      return emitOpError(what) << " must be a 2-d memref of f32, got " << type;
  int64_t cols = partial.getDimSize(1);
  if (ShapedType::isDynamic(cols) || into.getDimSize(1) != cols)
    return emitOpError("partial and into need the same static number of columns, got ")
           << partial << " and " << into;
  int64_t block = getBlock();
  if (cols % block || block % 4)
    return emitOpError("block ") << block << " must divide the " << cols
                                 << " columns and be a multiple of 4";
  if (!getAfter().getDefiningOp<EventCreateOp>() || !getDone().getDefiningOp<EventCreateOp>())
    return emitOpError("after and done must be event tensors created in this kernel");
  if (getAfter() == getDone())
    return emitOpError("after and done must be different event tensors");
  return success();
}

LogicalResult PeerOp::verify() {
  auto arg = dyn_cast<BlockArgument>(getBuffer());
  auto kernel = (*this)->getParentOfType<KernelOp>();
  if (!kernel)
    return emitOpError("must be nested in an 'et.kernel'");
  if (!arg || arg.getOwner()->getParentOp() != kernel.getOperation() ||
      !kernel.isSymmetricArgument(arg.getArgNumber()))
    return emitOpError("buffer must be an argument of the kernel marked '")
           << EventTensorDialect::getSymmetricAttrName()
           << "' (allocated on every device)";
  return success();
}
LogicalResult NumThreadsOp::verify() { return detail::verifyInTask(*this); }
