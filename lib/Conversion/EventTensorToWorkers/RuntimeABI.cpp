//===- RuntimeABI.cpp - The contract of worker code and runtime as JSON ---===//
//
// Implements the parts of include/EventTensor/Conversion/RuntimeABI.h that
// are not constants: the metadata's `abi` object.
//
//===----------------------------------------------------------------------===//

#include "EventTensor/Conversion/RuntimeABI.h"

#include "llvm/Support/ErrorHandling.h"

using namespace mlir::et;

llvm::StringRef abi::stringifyWorkerParam(WorkerParam param) {
  switch (param) {
  case WorkerParam::Worker:
    return "worker";
  case WorkerParam::Epoch:
    return "epoch";
  case WorkerParam::SpinLimit:
    return "spin_limit";
  case WorkerParam::Counters:
    return "counters";
  case WorkerParam::Control:
    return "control";
  case WorkerParam::Error:
    return "error";
  case WorkerParam::Trace:
    return "trace";
  case WorkerParam::Device:
    return "device";
  case WorkerParam::PeerCounters:
    return "peer_counters";
  case WorkerParam::PeerArguments:
    return "peer_arguments";
  case WorkerParam::Arguments:
    return "arguments";
  }
  llvm_unreachable("unknown worker parameter");
}

llvm::json::Object abi::runtimeABIToJSON(bool hostWorker, bool profile, bool multiDevice) {
  using llvm::json::Array;
  using llvm::json::Object;
  auto kind = [](WorkerError e) { return static_cast<int64_t>(e); };
  Array params, errorFields, traceFields;
  for (WorkerParam p : workerParams(hostWorker, profile, multiDevice))
    params.push_back(stringifyWorkerParam(p));
  for (llvm::StringRef name : kErrorFieldNames)
    errorFields.push_back(name);
  for (llvm::StringRef name : kTraceFieldNames)
    traceFields.push_back(name);
  return Object{
      {"version", kVersion},
      {"control",
       Object{{"words", kControlWords},
              {"ticket0", kControlTicket0},
              {"abort", kControlAbort},
              {"error_claimed", kControlErrorClaimed},
              {"trace_cursor", kControlTraceCursor}}},
      {"error",
       Object{{"words", kErrorWords},
              {"fields", std::move(errorFields)},
              {"kinds", Object{{"timeout", kind(WorkerError::Timeout)},
                               {"counter_capacity", kind(WorkerError::CounterCapacity)},
                               {"index_out_of_bounds", kind(WorkerError::IndexOutOfBounds)},
                               {"bad_schedule_entry", kind(WorkerError::BadScheduleEntry)},
                               {"tile_count", kind(WorkerError::TileCount)}}}}},
      {"trace", Object{{"record_words", kTraceWords},
                       {"fields", std::move(traceFields)}}},
      {"counters", Object{{"banks", kCounterBanks},
                          {"device_barrier_words", kDeviceBarrierWords},
                          {"device_abort_words", kDeviceAbortWords}}},
      {"parameters", std::move(params)},
      {"entry_suffix", hostWorker ? kHostWorkerSuffix.str() : std::string()},
      {"globals", Object{{"dynamic_shared_bytes", kDynamicSharedBytesGlobal}}},
  };
}
