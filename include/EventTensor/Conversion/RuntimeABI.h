//===- RuntimeABI.h - The contract of worker code and runtime ---*- C++ -*-===//
//
// What the worker code that convert-et-to-nvvm and convert-et-to-cpu emit and
// the runtime that launches it (python/event_tensor/runtime) agree on: the
// control words, the error record and its kinds, the trace record, the
// layout of the counter buffer, the worker function's parameters and the
// names of what the runtime looks up in the binary.
//
// The lowering takes every one of these values from here. The compiler
// writes them into each artifact's metadata (`abi`, see runtimeABIToJSON);
// the runtime, which imports no MLIR, keeps its own copy
// (event_tensor/runtime/abi.py) and refuses an artifact whose copy differs.
// Changing a value here means bumping kVersion and changing that copy.
//
//===----------------------------------------------------------------------===//

#ifndef EVENTTENSOR_CONVERSION_RUNTIMEABI_H
#define EVENTTENSOR_CONVERSION_RUNTIMEABI_H

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/JSON.h"

#include <cstdint>

namespace mlir::et::abi {

/// The version of the contract; bumped with any change of the values below.
constexpr int64_t kVersion = 3;

//===----------------------------------------------------------------------===//
// Control buffer (i32 words)
//===----------------------------------------------------------------------===//

/// Words of the control buffer.
constexpr int64_t kControlWords = 12;
/// The ticket counter of a dynamic schedule for counter bank 0, a 64-bit
/// word at this i32 word (8-byte aligned); bank 1's is the next 64-bit
/// word. 64 bits: with et.repeat the tickets of all steps of a launch are
/// numbered in one sequence (steps x tiles may pass 2^32).
constexpr int64_t kControlTicket0 = 8;
static_assert(kControlTicket0 % 2 == 0 && kControlTicket0 + 4 <= kControlWords);
/// Raised (release store) by the worker that records an error; every other
/// worker sees it in its poll loop and returns.
constexpr int64_t kControlAbort = 2;
/// Claimed (compare-and-swap 0 -> 1) by the worker that writes the error
/// record; nonzero after a launch that failed.
constexpr int64_t kControlErrorClaimed = 3;
/// Profiled launches: the trace records written (the runtime sets it to 0
/// before each launch).
constexpr int64_t kControlTraceCursor = 4;

//===----------------------------------------------------------------------===//
// Error record (i64 words)
//===----------------------------------------------------------------------===//

/// The words of the error record, in order.
enum class ErrorField : int64_t {
  Kind,
  Worker,
  Task,
  Tile,
  Event,
  Element,
  Expected,
  Observed,
  /// The step (et.repeat) the worker was in; 0 without steps.
  Step,
};
/// Words of the error record.
constexpr int64_t kErrorWords = 9;
static_assert(static_cast<int64_t>(ErrorField::Step) + 1 == kErrorWords);
/// The names of the error record's words in the metadata, by ErrorField.
constexpr llvm::StringLiteral kErrorFieldNames[kErrorWords] = {
    "kind", "worker", "task", "tile", "event", "element", "expected", "observed", "step"};

/// Error kinds, written to the first word (ErrorField::Kind) of the record.
enum class WorkerError : int64_t {
  None = 0,
  /// A wait reached the spin limit.
  Timeout = 1,
  /// The counter buffer cannot hold both banks (expected: the words
  /// needed; observed: the words it has). No tile ran.
  CounterCapacity = 2,
  /// A wait or signal on an element outside the event's shape.
  IndexOutOfBounds = 3,
  /// A static program entry names no task.
  BadScheduleEntry = 4,
  /// A task's tile count, from extents known only at run time, is negative
  /// or above 2^31 - 1 (expected: that limit). No tile of the task ran.
  TileCount = 5,
};

//===----------------------------------------------------------------------===//
// Trace record (i64 words)
//===----------------------------------------------------------------------===//

/// The words of one trace record, in order: the tile's dispatch (start), the
/// moment its last wait was satisfied (ready) and its end, in ns; the step
/// (et.repeat; 0 without steps).
enum class TraceField : int64_t { Worker, Task, Tile, Start, Ready, End, Step };
/// Words of one trace record.
constexpr int64_t kTraceWords = 7;
static_assert(static_cast<int64_t>(TraceField::Step) + 1 == kTraceWords);
/// The names of a trace record's words in the metadata, by TraceField.
constexpr llvm::StringLiteral kTraceFieldNames[kTraceWords] = {"worker", "task", "tile", "start",
                                                               "ready",  "end",  "step"};

//===----------------------------------------------------------------------===//
// Counter buffer (i32 words)
//===----------------------------------------------------------------------===//

/// The counter buffer's banks: launch `epoch` uses bank `epoch mod 2` and
/// clears the other one.
constexpr int64_t kCounterBanks = 2;
/// Several devices: counters at the end of each bank's event counters where
/// the devices meet at the end of a launch.
constexpr int64_t kDeviceBarrierWords = 1;
/// Several devices: words after both banks (the abort word that another
/// device's error raises).
constexpr int64_t kDeviceAbortWords = 1;

//===----------------------------------------------------------------------===//
// The worker function
//===----------------------------------------------------------------------===//

/// The parameters of the worker function, a group of them each.
enum class WorkerParam {
  /// Host only: the worker id (index).
  Worker,
  /// The launch number (i64), which picks the counter bank.
  Epoch,
  /// Polls before a wait gives up (i64).
  SpinLimit,
  /// The counter buffer (memref<?xi32>).
  Counters,
  /// The control buffer (memref<?xi32>).
  Control,
  /// The error record (memref<?xi64>).
  Error,
  /// Profiled kernels: the trace buffer (memref<?xi64>).
  Trace,
  /// Several devices: this device's number (i64).
  Device,
  /// Several devices: every device's counter buffer (memref<?xi32> each).
  PeerCounters,
  /// Several devices: every device's copy of each symmetric argument, by
  /// argument.
  PeerArguments,
  /// The kernel's arguments.
  Arguments,
};

/// The groups of parameters of a worker function, in order: the host worker
/// (`hostWorker`) or the GPU kernel, with or without a trace (`profile`), on
/// one device or several (`multiDevice`).
inline llvm::SmallVector<WorkerParam> workerParams(bool hostWorker, bool profile, bool multiDevice) {
  llvm::SmallVector<WorkerParam> params;
  if (hostWorker)
    params.push_back(WorkerParam::Worker);
  params.append({WorkerParam::Epoch, WorkerParam::SpinLimit, WorkerParam::Counters, WorkerParam::Control,
                 WorkerParam::Error});
  if (profile)
    params.push_back(WorkerParam::Trace);
  if (multiDevice)
    params.append({WorkerParam::Device, WorkerParam::PeerCounters, WorkerParam::PeerArguments});
  params.push_back(WorkerParam::Arguments);
  return params;
}

/// The name of a group of parameters in the metadata.
llvm::StringRef stringifyWorkerParam(WorkerParam param);

/// The suffix of the host worker function's name (`<kernel>_worker`); the GPU
/// kernel has the kernel's name.
constexpr llvm::StringLiteral kHostWorkerSuffix = "_worker";

/// The GPU kernel's 32-bit global that states the dynamic shared memory its
/// buffers need, which the runtime reads before the launch.
constexpr llvm::StringLiteral kDynamicSharedBytesGlobal = "__et_dynamic_shared_bytes";

/// The contract as the metadata's `abi` object, for an artifact of the host
/// worker (`hostWorker`) or the GPU kernel, with or without a trace, on one
/// device or several.
llvm::json::Object runtimeABIToJSON(bool hostWorker, bool profile, bool multiDevice);

} // namespace mlir::et::abi

#endif // EVENTTENSOR_CONVERSION_RUNTIMEABI_H
