//===- WorkerEmitter.h - The emitter of the worker code ---------*- C++ -*-===//
//
// The emitter shared by convert-et-to-nvvm and convert-et-to-cpu: it lowers a
// scheduled et.kernel to the code of one persistent worker. Its parts live in
// the files of this directory:
//
//   EventTensorToWorkers.cpp  the passes and the worker function's setup
//   WorkerEmitter.cpp         waits, signals, errors, traces, tile bodies
//   StaticSchedule.cpp        the program table of a static schedule
//   DynamicSchedule.cpp       the ticket queue of a dynamic schedule
//   StagedRows.cpp            weights staged across tiles (et.staged_rows)
//   MultiDevice.cpp           peers and the barrier across devices
//   Steps.cpp                 the loop over the steps of an et.repeat kernel
//   NVVMTarget.cpp            the GPU worker (WorkerTarget.h)
//   HostTarget.cpp            the host worker (WorkerTarget.h)
//   RuntimeABI.cpp            the contract with the runtime, as metadata
//
//===----------------------------------------------------------------------===//

#ifndef EVENTTENSOR_LIB_CONVERSION_EVENTTENSORTOWORKERS_WORKEREMITTER_H
#define EVENTTENSOR_LIB_CONVERSION_EVENTTENSORTOWORKERS_WORKEREMITTER_H

#include "WorkerTarget.h"

#include "EventTensor/Analysis/EventGraph.h"
#include "EventTensor/Conversion/Passes.h"
#include "EventTensor/Conversion/RuntimeABI.h"
#include "EventTensor/Dialect/EventTensor/EventTensorOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

#include <optional>
#include <tuple>

namespace mlir::et::workers {

/// The attribute of a workgroup alloca that lives in the kernel's dynamic
/// shared memory (sized at launch) instead of a static buffer.
constexpr llvm::StringLiteral kDynamicShared = EventTensorDialect::getDynamicSharedAttrName();

/// True for a memref in GPU workgroup (shared) memory.
bool inWorkgroupMemory(MemRefType type);

/// A statically shaped memref.alloca in workgroup memory: per-tile shared
/// memory from the tile lowering.
bool isWorkgroupAlloca(Operation *op);

/// Layout of one event tensor in a counter bank.
struct EventLayout {
  unsigned id = 0;
  EventInfo *info = nullptr;
  /// One counter for the whole event: its counts are only known on the
  /// device, so a wait waits for every signal of the event.
  bool aggregate = false;
  /// Some signal reaches it from another device: its signals and waits use
  /// system scope.
  bool remote = false;
  SmallVector<Value> dims; // index values, in the worker function
  Value offset;            // index, within a bank
  Value size;              // index
};

/// Emits the worker of one scheduled et.kernel for `target`.
class WorkerEmitter : public WorkerBuilder {
public:
  WorkerEmitter(KernelOp kernel, const WorkerTarget &target)
      : WorkerBuilder(kernel.getContext(), kernel.getLoc()), kernel(kernel),
        repeat(kernel.getRepeat()), target(target), graph(kernel) {}

  /// Emits the worker into `container` (a module or a gpu.module).
  LogicalResult emit(Operation *container);

private:
  //===--------------------------------------------------------------------===//
  // Small builders
  //===--------------------------------------------------------------------===//

  /// A barrier of the worker's threads.
  void barrier() { target.barrier(*this); }
  /// Makes thread 0's value of `v` (i1 or i64) every thread's value.
  Value broadcast(Value v) { return target.broadcast(*this, v); }
  /// Nanoseconds from a monotonic clock.
  Value now() { return target.now(*this); }

  /// Appends (worker, task, tile, start, ready, end) to the trace, if it
  /// has room (in the slot WorkerTarget::traceSlot gives).
  void recordTile(Value task, Value tile, Value start, Value ready);

  //===--------------------------------------------------------------------===//
  // Control flow inside an scf.execute_region
  //===--------------------------------------------------------------------===//

  /// The region being emitted into and its failure exit.
  struct Scope {
    Region *region = nullptr;
    Block *fail = nullptr;
    /// Kernel-level values materialized in this scope (they dominate the
    /// rest of the scope only along one straight path; see materialize).
    IRMapping cache;
  };

  /// A new block at the end of `scope`'s region, with arguments of `args`.
  Block *newBlock(Scope &scope, TypeRange args = {});

  /// An scf.execute_region with results `types` at the insertion point and
  /// its scope: an entry block and a failure block that yields
  /// `failValues()` (built there). Continues at the end of the entry.
  std::pair<scf::ExecuteRegionOp, Scope>
  openRegion(TypeRange types, function_ref<SmallVector<Value>()> failValues);

  /// Records an error (first writer wins), raises the abort flag.
  /// On several devices the error also stops the other devices: their
  /// abort word (after both counter banks) is raised too, unless
  /// `localOnly` (the counter buffer may be too small to hold it).
  void recordError(abi::WorkerError kind, Value task, Value tile, Value event,
                   Value element, Value expected, Value observed,
                   bool localOnly = false);

  /// Waits until counter `index` reaches `expected` (i32). Thread 0 spins;
  /// the outcome is shared by the CTA (one barrier). On timeout or abort,
  /// branches to the scope's failure block. Continues in a new current block.
  /// A timeout with `localOnly` stops only this device (see recordError).
  /// With `orFlag` (a pointer to an i32 word), a nonzero word ends the wait
  /// too.
  void emitSpin(Scope &scope, Value counterIndex, Value expected, Value task,
                Value tile, Value event, Value element,
                StringRef syncscope, bool localOnly = false, Value orFlag = {});

  //===--------------------------------------------------------------------===//
  // Kernel-level values
  //===--------------------------------------------------------------------===//

  /// The value of kernel-level `v` at the current point of `scope`.
  FailureOr<Value> materialize(Value v, Scope &scope);

  /// `materialize` of each value; values in `local` (tile-level) first.
  FailureOr<SmallVector<Value>> materializeAll(ValueRange values, Scope &scope,
                                               const IRMapping *local = nullptr);

  /// Product of a task's extents. With `dispatch` (where the count decides
  /// which tiles run: the dynamic queue's prefix sums, a static program's
  /// entry spread by formula), extents known only at run time are checked
  /// there first (a `tile_count` error when out of range); the other uses
  /// (a tile's coordinates, an expected count) follow a dispatch that did.
  FailureOr<Value> tileCount(TaskOp task, Scope &scope,
                             SmallVectorImpl<Value> *extents = nullptr, bool dispatch = false);

  //===--------------------------------------------------------------------===//
  // Events
  //===--------------------------------------------------------------------===//

  /// Linear index of an element; also reports whether it is in bounds.
  std::pair<Value, Value> linearize(const EventLayout &layout,
                                    ArrayRef<Value> coords);

  /// Branches to the failure block, recording an out-of-bounds error, when
  /// `inBounds` is false.
  void checkBounds(Scope &scope, Value inBounds, Value task, Value tile,
                   unsigned eventId, Value element);

  /// The expected count of `element` (coords) of an event, as an index.
  FailureOr<Value> expectedCount(const EventLayout &layout,
                                 ArrayRef<Value> coords, Value lin,
                                 Scope &scope);

  /// How many tiles of a separable signal site signal element `coords`.
  FailureOr<Value> siteCount(const EventAccess &signal, ArrayRef<Value> coords,
                             Scope &scope);

  memref::GlobalOp countTable(const EventLayout &layout);

  /// The linear element an access touches (0 for an aggregate counter),
  /// checked against the event's shape, and its counter in this launch's
  /// bank.
  std::pair<Value, Value> locate(Scope &scope, const EventLayout &layout,
                                 ArrayRef<Value> coords, Value task,
                                 Value tile);

  LogicalResult emitWait(Scope &scope, Value event, ArrayRef<Value> coords,
                         Value task, Value tile);

  /// `peer`: the device offset, already in the worker (or null).
  LogicalResult emitSignal(Scope &scope, Value event, ArrayRef<Value> coords,
                           Value peer, Value task, Value tile);


  //===--------------------------------------------------------------------===//
  // Tiles
  //===--------------------------------------------------------------------===//

  /// The coordinates of linear tile `tile` (index) in `extents`, row-major.
  SmallVector<Value> delinearize(Value tile, ArrayRef<Value> extents);

  /// Emits the body of `task` for linear tile `tile` (index) at the end of
  /// the current block of `scope`; continues in a new current block.
  LogicalResult emitTile(Scope &scope, TaskOp task, unsigned taskId,
                         Value tile);

  //===--------------------------------------------------------------------===//
  // Setup (EventTensorToWorkers.cpp)
  //===--------------------------------------------------------------------===//

  /// Checks that the kernel is scheduled and that this lowering supports it,
  /// and notes its tasks and those that stage weight rows; returns its
  /// schedule.
  FailureOr<ScheduleOp> checkKernel();
  /// The worker function's type: its parameters in the order of
  /// abi::workerParams (paramAt records where each group starts).
  FunctionType workerFunctionType();
  /// The worker function (WorkerTarget::createWorkerFunction) with the
  /// workgroup buffers of the tiles and the staging mbarriers, and the
  /// worker's ids; returns its entry block, where the insertion point is.
  FailureOr<Block *> createWorkerFunction(FunctionType type);
  /// Places the workgroup allocas marked et.dynamic_shared and the staging
  /// regions in the GPU kernel's dynamic shared memory, and states the size
  /// they need in abi::kDynamicSharedBytesGlobal.
  LogicalResult layoutDynamicShared(Operation *fn);
  /// Parameter `k` of group `group` of the worker function.
  Value param(abi::WorkerParam group, unsigned k = 0);
  /// Takes the worker's buffers, the kernel arguments and the device
  /// parameters from the worker function's parameters.
  void bindParameters();
  /// Clones the kernel-level ops that depend on no device data into the entry
  /// of the worker; the others are materialized where they are used.
  LogicalResult cloneEagerValues();
  /// Lays out the counters of the event tensors in a bank.
  LogicalResult layoutEvents();
  /// Fails the launch (before any tile runs) when the counter buffer cannot
  /// hold both banks; otherwise clears the bank the next launch uses.
  void emitCapacityCheckAndClear(Block *exit);
  /// Places the two counter banks in the counter buffer.
  void layoutBanks();
  /// On the GPU: fails when the worker's static and dynamic shared memory
  /// together exceed what an SM gives one CTA (a launch would be refused).
  LogicalResult checkSharedMemory(Operation *fn);
  /// Replaces the et ops that stand for the worker's threads, its device and
  /// its peers' buffers in the tile bodies and the kernel-level values.
  void replaceWorkerOps();
  /// Moves each `scf.execute_region` marked et.outline into a function of
  /// its own that is never inlined, called where the region was.
  LogicalResult outlineMarkedRegions();

  //===--------------------------------------------------------------------===//
  // Schedules (StaticSchedule.cpp, DynamicSchedule.cpp)
  //===--------------------------------------------------------------------===//

  /// The program table of a static schedule, as it is emitted.
  struct StaticProgram {
    /// (task, tile, stage) triples, and where each worker's entries start.
    SmallVector<int32_t> entries, offsets;
    /// Whether an entry stages weight rows.
    bool anyStaged = false;
    /// The longest program of a worker, in entries; whether it fits in
    /// shared memory; whether every worker has `longest` rows in the table.
    int64_t longest = 0;
    bool sharedFits = false, padded = false;
    /// The table, this worker's entries [begin, end) in it (index), and
    /// their copy in shared memory (or null).
    Value table, begin, end, shared;
  };

  /// The worker loop of a static schedule: the worker's entries of the
  /// program table, in order (once per step).
  LogicalResult emitStatic(ScheduleOp schedule);
  /// One pass over the worker's entries; whether they all ran (i1).
  FailureOr<Value> emitProgramLoop(StaticProgram &program);
  /// The entries of every worker, in order: (task, tile, stage) triples; tile
  /// -1 - k is "cyclic k". Stage is -1, or, for a single tile whose weight
  /// rows the worker stages (et.staged_rows), slot | parity << 1: the entry's
  /// region (its index in the worker's program mod 2, so that consecutive
  /// entries, whose copies overlap, use different regions) and the parity of
  /// the region's mbarrier phase that its copies complete.
  LogicalResult buildProgram(ScheduleOp schedule, StaticProgram &program);
  /// The program as constant globals: the entries, and either every
  /// worker's range of them or (padded) every worker's entry count.
  void emitProgramTables(StaticProgram &program);
  /// On the GPU: the worker's entries copied into shared memory once, so
  /// that moving to the next tile reads no global memory: the tables' lines
  /// do not stay in L1 or L2 while the weights stream through, and loads of
  /// the next entry (and of the worker's range, which ptxas reloads rather
  /// than keep in a register) cost the worker memory round trips between
  /// every two tiles. Row 0 holds the worker's entry count and first entry;
  /// row 1 + j its entry j (docs/lowering.md, "The worker's program in shared
  /// memory").
  void copyProgramToShared(StaticProgram &program);
  /// The end of the worker's entries (index): their count in the shared
  /// copy, else their end in the table.
  Value entryCount(const StaticProgram &program);
  /// Word `field` of the entry at `position` (i32).
  Value entryWord(const StaticProgram &program, Value position, int64_t field);
  /// Before the waits of the entry at `i`: the copies of entries [from,
  /// i + 2) of the worker's program, from = i + 1 (at its first entry, i).
  void emitStageAhead(const StaticProgram &program, Value i, Value firstPosition);
  /// One entry of the worker's program: the tile of task `taskId` (index)
  /// that `tileI64` names, or every tile of the task that falls to this
  /// worker, in an scf.execute_region that yields whether they all ran.
  FailureOr<scf::ExecuteRegionOp> emitStaticEntry(Value taskId, Value tileI64);
  /// The worker loop of a dynamic schedule: tickets until the queue is
  /// exhausted.
  LogicalResult emitDynamic(ScheduleOp schedule);

  //===--------------------------------------------------------------------===//
  // Steps (Steps.cpp)
  //===--------------------------------------------------------------------===//

  /// `body` (one step of the worker's program, returning whether its tiles
  /// all ran) once, or, in a kernel with et.repeat, in a loop over steps
  /// (`step` is the step inside it); whether every step's tiles ran (i1).
  /// Step s > 0 first waits for step s - 1's end (the repeat's `after`
  /// event) and stops the loop when the stop flag is set.
  FailureOr<Value> emitSteps(function_ref<FailureOr<Value>()> body);
  /// The step budget of the kernel's et.repeat, in the worker (index).
  FailureOr<Value> stepCount();
  /// At the start of step `s` > 0: waits for every signal of step s - 1 to
  /// the repeat's `after` event, or for the stop flag, then reads the stop
  /// flag. Returns (whether the wait succeeded, whether the step runs), both
  /// i1 for every thread.
  FailureOr<std::pair<Value, Value>> emitStepGate(Value s);

  //===--------------------------------------------------------------------===//
  // Weights staged across tiles (StagedRows.cpp)
  //===--------------------------------------------------------------------===//

  /// What the worker needs to stage a tile of a task: its et.staged_rows ops
  /// and the task-body ops their operands come from (in order).
  struct StagePlan {
    SmallVector<StagedRowsOp> ops;
    SmallVector<Operation *> slice;
  };

  /// An LLVM shared-memory pointer to the mbarrier of region `slot` (index).
  Value stageBarrier(Value slot);

  /// i32 stage word (see emitStatic) -> (staged, slot (index), parity (i32)).
  std::tuple<Value, Value, Value> decodeStage(Value word);

  /// Every thread waits until the copies of a staged entry (a decoded stage
  /// word, see decodeStage) are in shared memory.
  void waitStaged(std::tuple<Value, Value, Value> decoded);

  /// How many rows of an et.staged_rows are staged: min(R, rows, N - row0),
  /// at least 0 (index).
  Value stagedCount(StagedRowsOp op, Value w, Value row0, Value rows);

  /// et.staged_rows in a tile: its view at the entry's region and its
  /// count, after the entry's copies are complete; a count of 0 when the
  /// entry was not staged (or the schedule stages nothing).
  LogicalResult emitStagedRows(StagedRowsOp op, IRMapping &map, Scope &scope);

  /// The plan of `task`, when its staged rows follow from the tile
  /// coordinates and values known at the worker's entry alone (side-effect
  /// free ops of the task's top level, eager kernel-level values, eager
  /// extents); else none, and its tiles are never staged.
  std::optional<StagePlan> stagePlan(TaskOp task);

  /// One thread: the copies of tile `tile` (index) of a task with `plan` into
  /// region `slot` (index): one expect-tx arrive with their bytes on the
  /// region's mbarrier, then one bulk copy per staged op.
  void emitStageCopies(TaskOp task, const StagePlan &plan, Value tile, Value slot);

  /// Thread `issuer` (i1): the copies of the entry (`word`, `task`, `tile`:
  /// i32 stage word, i32 task id, index tile) when its stage word says
  /// staged.
  void emitStageEntry(Value word, Value task, Value tile, Value issuer);

  /// The staging regions' mbarriers: one arrival (the issuing thread's
  /// expect-tx arrive) per phase.
  void initStageBarriers();

  //===--------------------------------------------------------------------===//
  // Several devices (MultiDevice.cpp)
  //===--------------------------------------------------------------------===//


  /// The device (index) at offset `k` (index, any sign) from this one.
  Value peerDevice(Value k);

  /// copies[device] for a dynamic `device`.
  Value selectCopy(ArrayRef<Value> copies, Value device);

  /// Takes this device's number, every device's counter buffer and every
  /// device's copy of each symmetric argument from the parameters (on one
  /// device: the number 0).
  void bindDeviceParameters();
  /// What et.peer stands for: the copy of its buffer on the device at its
  /// offset (on one device: the buffer).
  Value peerCopy(PeerOp peer);
  /// Several devices: a worker that ran all its tiles adds 1 to the barrier
  /// counter of every other device; worker 0 of each device waits until all
  /// workers of the other devices have. So no device starts its next launch
  /// (and signals into the bank that launch uses) before every device has
  /// finished this one, including clearing that bank. A worker that stopped
  /// on an error skips the barrier; the other devices then time out on it.
  void emitDeviceBarrier(Value ok);

  KernelOp kernel;
  /// The kernel's steps (null without et.repeat) and, while a step's tiles
  /// are emitted, the step (index).
  RepeatOp repeat;
  Value step;
  const WorkerTarget &target;
  EventGraph graph;
  Operation *container = nullptr;

  SmallVector<TaskOp> tasks;
  IRMapping eager;
  llvm::DenseMap<Value, EventLayout> layouts;
  llvm::DenseMap<unsigned, memref::GlobalOp> countTables;
  Value totalCounters;

  /// The counter bank of this launch (index) and where it starts.
  Value bank, bankBase;
  /// Words per bank: half of the counter buffer (less the abort word on
  /// several devices), whatever this launch's event tensors need, so that
  /// the banks stay in place when the counts change between launches.
  Value bankWords;
  /// Several devices: the counter (after both banks) that another device's
  /// error raises.
  Value abortWord;
  // Several devices: the number, this device (index), every device's
  // counter buffer, and every device's copy of each symmetric argument
  // (keyed by the worker function's argument for the local copy).
  int64_t numDevices = 1;
  Value deviceIndex;
  SmallVector<Value> peerCounters;
  llvm::DenseMap<Value, SmallVector<Value>> peerCopies;
  /// Counters of the event tensors in a bank (the bank may end with the
  /// counter of the barrier across devices).
  Value eventCounters;
  /// Whether the worker's tiles all ran (the result of the tile loop).
  Value finishedOk;
  /// Workgroup-memory allocas at the top level of task bodies (from the
  /// tile lowering) and the workgroup attribution each one uses.
  llvm::DenseMap<Operation *, Value> tileShared;
  /// Staging across tiles (GPU): the tasks with et.staged_rows; the size of
  /// a region (two of them, used by a worker's
  /// entries in turn) and where region 0 starts in the dynamic shared
  /// memory; that memory as bytes; the regions' two mbarriers (i64
  /// workgroup buffer); the stage word of the entry being emitted (null
  /// when nothing is staged).
  llvm::DenseSet<Operation *> stagedTasks;
  int64_t stageRegionBytes = 0, stageStart = 0;
  /// The dynamic shared memory the worker states it needs (bytes).
  int64_t dynamicSharedBytes = 0;
  Value stageShared, stageBarriers, currentStage;
  /// Tasks' staging plans (by task id).
  SmallVector<std::optional<StagePlan>> stagePlans;
  /// The worker function's entry block and the block that returns.
  Block *entryBlock = nullptr;
  Block *exitBlock = nullptr;
  /// The position of each group of the worker function's parameters, and
  /// the kernel's symmetric arguments.
  llvm::DenseMap<abi::WorkerParam, unsigned> paramAt;
  SmallVector<unsigned> symmetric;
  int64_t numWorkers = 1;
};

} // namespace mlir::et::workers

#endif // EVENTTENSOR_LIB_CONVERSION_EVENTTENSORTOWORKERS_WORKEREMITTER_H
