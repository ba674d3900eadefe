//===- Pipelines.h - End-to-end lowering pipelines ----------------*- C++ -*-===//
//
// et-lower-to-nvvm-pipeline and et-lower-to-cpu-pipeline: their options,
// declared once here (enums for every closed set of values, so a bad value
// is a parse error), and a public function that builds each.
//
//===----------------------------------------------------------------------===//

#ifndef EVENTTENSOR_CONVERSION_PIPELINES_H
#define EVENTTENSOR_CONVERSION_PIPELINES_H

#include "EventTensor/Conversion/Passes.h"

#include "mlir/Pass/PassOptions.h"

namespace mlir::et {

/// How a pipeline schedules each kernel.
enum class ScheduleMode {
  Static,  // et-static-schedule: per-worker lists
  Dynamic, // et-dynamic-schedule: one in-kernel queue
  Keep,    // the kernel is scheduled already
};

/// What gpu-module-to-binary makes of the kernel.
enum class BinaryFormat { Isa, Bin, Fatbin };

/// Options both pipelines take.
template <typename Derived>
struct CommonPipelineOptions : public PassPipelineOptions<Derived> {
  mlir::detail::PassOptions::Option<ScheduleMode> mode{
      *this, "mode", llvm::cl::desc("How each kernel is scheduled"), llvm::cl::init(ScheduleMode::Static),
      llvm::cl::values(clEnumValN(ScheduleMode::Static, "static", "per-worker lists (et-static-schedule)"),
                       clEnumValN(ScheduleMode::Dynamic, "dynamic", "an in-kernel queue (et-dynamic-schedule)"),
                       clEnumValN(ScheduleMode::Keep, "keep", "already scheduled"))};
  mlir::detail::PassOptions::Option<bool> optimize{*this, "optimize", llvm::cl::desc("Run et-optimize-events"),
                                     llvm::cl::init(true)};
  mlir::detail::PassOptions::Option<bool> verify{*this, "verify",
                                   llvm::cl::desc("Run et-verify-event-graph (turn off only to test the "
                                                  "runtime watchdog on a schedule it would reject)"),
                                   llvm::cl::init(true)};
  mlir::detail::PassOptions::Option<bool> profile{*this, "profile",
                                    llvm::cl::desc("Record per-tile timestamps in a trace buffer"),
                                    llvm::cl::init(false)};
};

struct LowerToNVVMPipelineOptions : public CommonPipelineOptions<LowerToNVVMPipelineOptions> {
  PassOptions::Option<std::string> chip{*this, "chip", llvm::cl::desc("GPU architecture"),
                                        llvm::cl::init("sm_90a")};
  PassOptions::Option<std::string> features{*this, "features", llvm::cl::desc("PTX features"),
                                            llvm::cl::init("+ptx80")};
  PassOptions::Option<BinaryFormat> format{
      *this, "format", llvm::cl::desc("Serialization of the kernel"), llvm::cl::init(BinaryFormat::Isa),
      llvm::cl::values(clEnumValN(BinaryFormat::Isa, "isa", "PTX text"),
                       clEnumValN(BinaryFormat::Bin, "bin", "a cubin (needs ptxas)"),
                       clEnumValN(BinaryFormat::Fatbin, "fatbin", "a fatbin (needs ptxas)"))};
  PassOptions::Option<int64_t> workers{*this, "workers", llvm::cl::desc("Persistent workers (CTAs)"),
                                       llvm::cl::init(132)};
  PassOptions::Option<int64_t> threads{*this, "threads",
                                       llvm::cl::desc("Threads per worker fixed at compile time (0: at launch)"),
                                       llvm::cl::init(0)};
  PassOptions::Option<WeightPrefetchMode> tilePrefetch{
      *this, "tile-prefetch", llvm::cl::desc("et.linear weight loads moved above the first wait"),
      llvm::cl::init(WeightPrefetchMode::None), ET_WEIGHT_PREFETCH_MODE_VALUES};
  PassOptions::ListOption<std::string> tilePrefetchTasks{
      *this, "tile-prefetch-tasks", llvm::cl::desc("Tasks whose weights tile-prefetch moves (all when empty)")};
  PassOptions::Option<KVPrefetchMode> tileKvPrefetch{
      *this, "tile-kv-prefetch",
      llvm::cl::desc("K and V cache rows below et.attention_split's `stable` loaded before the first wait"),
      llvm::cl::init(KVPrefetchMode::None), ET_KV_PREFETCH_MODE_VALUES};
  PassOptions::Option<int64_t> tilePrefetchBytes{
      *this, "tile-prefetch-bytes",
      llvm::cl::desc("Dynamic shared memory for tile-prefetch=shared and tile-kv-prefetch=shared (bytes)"),
      llvm::cl::init(131072)};
  PassOptions::Option<int64_t> tileKvMmaBytes{
      *this, "tile-kv-mma-bytes",
      llvm::cl::desc("Dynamic shared memory for the per-warp K and V rings of et.attention_split on tensor "
                     "cores (bytes; 0: CUDA cores)"),
      llvm::cl::init(0)};
  PassOptions::Option<int64_t> tileStageBytes{
      *this, "tile-stage-bytes",
      llvm::cl::desc("Bytes per task of et.linear weight rows a worker may stage in shared memory during the "
                     "tile before (0: off)"),
      llvm::cl::init(0)};
  PassOptions::ListOption<std::string> tileStageTasks{
      *this, "tile-stage-tasks", llvm::cl::desc("Tasks whose weights tile-stage-bytes stages (all when empty)")};
  PassOptions::Option<int> optLevel{*this, "opt-level",
                                    llvm::cl::desc("LLVM optimization level of the NVPTX code generation"),
                                    llvm::cl::init(2)};
  PassOptions::Option<int> ptxasOptLevel{
      *this, "ptxas-opt-level",
      llvm::cl::desc("ptxas optimization level for format=bin and fatbin (independent of opt-level; 3 is what "
                     "the driver uses when it compiles PTX)"),
      llvm::cl::init(3)};
  PassOptions::Option<LinearLayout> tileLinear{*this, "tile-linear", llvm::cl::desc("et.linear on the GPU"),
                                               llvm::cl::init(LinearLayout::Rows), ET_LINEAR_LAYOUT_VALUES};
  PassOptions::Option<MatmulInstructions> tileMma{*this, "tile-mma",
                                                  llvm::cl::desc("et.matmul's tensor-core instructions"),
                                                  llvm::cl::init(MatmulInstructions::WGMMA),
                                                  ET_MATMUL_INSTRUCTIONS_VALUES};
  PassOptions::Option<int64_t> tileUnroll{*this, "tile-unroll",
                                          llvm::cl::desc("16-byte weight loads per lane in flight in tile ops"),
                                          llvm::cl::init(4)};
  PassOptions::Option<int64_t> tileRowsInFlight{
      *this, "tile-rows-in-flight",
      llvm::cl::desc("Rows of et.rmsnorm (elements per thread of et.kv_append) whose loads go out together"),
      llvm::cl::init(1)};
  PassOptions::Option<int64_t> backoffNs{*this, "backoff-ns", llvm::cl::desc("nanosleep between polls"),
                                         llvm::cl::init(64)};
};

struct LowerToCPUPipelineOptions : public CommonPipelineOptions<LowerToCPUPipelineOptions> {
  PassOptions::Option<int64_t> workers{*this, "workers", llvm::cl::desc("Persistent workers (host threads)"),
                                       llvm::cl::init(4)};
};

/// Lower collectives, schedule, optimize the event graph, lower the tile
/// ops and each kernel to one persistent gpu.func, and serialize it to PTX
/// (or a cubin) in a gpu.binary.
void buildLowerToNVVMPipeline(OpPassManager &pm, const LowerToNVVMPipelineOptions &options);

/// The same up to one host worker function per kernel, lowered to the LLVM
/// dialect.
void buildLowerToCPUPipeline(OpPassManager &pm, const LowerToCPUPipelineOptions &options);

/// Registers et-lower-to-nvvm-pipeline and et-lower-to-cpu-pipeline.
void registerEventTensorPipelines();

} // namespace mlir::et

#endif // EVENTTENSOR_CONVERSION_PIPELINES_H
