//===- Pipelines.cpp - End-to-end lowering pipelines ----------------------===//
//
// et-lower-to-nvvm-pipeline: lower collectives, schedule, optimize the event
// graph, lower to one persistent gpu.func per kernel, and serialize it to
// PTX (or a cubin).
// et-lower-to-cpu-pipeline: the same up to one host worker function per
// kernel, lowered to the LLVM dialect.
//
//===----------------------------------------------------------------------===//

#include "EventTensor/Conversion/Pipelines.h"

#include "EventTensor/Conversion/Passes.h"
#include "EventTensor/Transforms/Passes.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/GPU/Pipelines/Passes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;
using namespace mlir::et;

namespace {
template <typename Options>
void addScheduling(OpPassManager &pm, const Options &options) {
  OpPassManager &kernels = pm.nest<KernelOp>();
  // Collectives become tasks before anything looks at the task graph.
  kernels.addPass(createLowerCollectivesPass());
  if (options.mode != "keep") {
    if (options.optimize)
      kernels.addPass(createOptimizeEventsPass());
    if (options.mode == "static") {
      StaticSchedulePassOptions o;
      o.workers = options.workers;
      kernels.addPass(createStaticSchedulePass(o));
      if (options.optimize)
        kernels.addPass(createOptimizeEventsPass());
    } else {
      DynamicSchedulePassOptions o;
      o.workers = options.workers;
      kernels.addPass(createDynamicSchedulePass(o));
    }
  }
  if (options.verify)
    kernels.addPass(createVerifyEventGraphPass());
}

/// Options both pipelines take.
template <typename Derived>
struct CommonPipelineOptions : public PassPipelineOptions<Derived> {
  mlir::detail::PassOptions::Option<std::string> mode{
      *this, "mode",
      llvm::cl::desc("static, dynamic, or keep (already scheduled)"),
      llvm::cl::init("static")};
  mlir::detail::PassOptions::Option<bool> optimize{
      *this, "optimize", llvm::cl::desc("Run et-optimize-events"),
      llvm::cl::init(true)};
  mlir::detail::PassOptions::Option<bool> verify{
      *this, "verify",
      llvm::cl::desc("Run et-verify-event-graph (turn off only to test the "
                     "runtime watchdog on a schedule it would reject)"),
      llvm::cl::init(true)};
  mlir::detail::PassOptions::Option<bool> profile{
      *this, "profile",
      llvm::cl::desc("Record per-tile timestamps in a trace buffer"),
      llvm::cl::init(false)};
};

struct NVVMPipelineOptions
    : public CommonPipelineOptions<NVVMPipelineOptions> {
  PassOptions::Option<std::string> chip{*this, "chip",
                                        llvm::cl::desc("GPU architecture"),
                                        llvm::cl::init("sm_90a")};
  PassOptions::Option<std::string> features{
      *this, "features", llvm::cl::desc("PTX features"),
      llvm::cl::init("+ptx80")};
  PassOptions::Option<std::string> format{
      *this, "format",
      llvm::cl::desc("Serialization: isa (PTX text), bin (cubin, needs "
                     "ptxas) or fatbin"),
      llvm::cl::init("isa")};
  PassOptions::Option<int64_t> workers{
      *this, "workers", llvm::cl::desc("Persistent workers (CTAs)"),
      llvm::cl::init(132)};
  PassOptions::Option<int64_t> threads{
      *this, "threads",
      llvm::cl::desc("Threads per worker fixed at compile time (0: at launch)"),
      llvm::cl::init(0)};
  PassOptions::Option<std::string> tilePrefetch{
      *this, "tile-prefetch",
      llvm::cl::desc("Weight loads moved above the first wait: none, "
                     "registers, l2 or shared"),
      llvm::cl::init("none")};
  PassOptions::ListOption<std::string> tilePrefetchTasks{
      *this, "tile-prefetch-tasks",
      llvm::cl::desc("Tasks whose weights tile-prefetch moves (all when empty)")};
  PassOptions::Option<std::string> tileKvPrefetch{
      *this, "tile-kv-prefetch",
      llvm::cl::desc("K and V cache rows below et.attention_split's `stable` "
                     "loaded before the first wait: none or shared"),
      llvm::cl::init("none")};
  PassOptions::Option<int64_t> tilePrefetchBytes{
      *this, "tile-prefetch-bytes",
      llvm::cl::desc("Dynamic shared memory for tile-prefetch=shared and "
                     "tile-kv-prefetch=shared (bytes)"),
      llvm::cl::init(131072)};
  PassOptions::Option<int64_t> tileKvMmaBytes{
      *this, "tile-kv-mma-bytes",
      llvm::cl::desc("Dynamic shared memory for the per-warp K and V rings "
                     "of et.attention_split on tensor cores (bytes; 0: CUDA "
                     "cores)"),
      llvm::cl::init(0)};
  PassOptions::Option<int64_t> tileStageBytes{
      *this, "tile-stage-bytes",
      llvm::cl::desc("Bytes per task of et.linear weight rows a worker may "
                     "stage in shared memory during the tile before (0: off)"),
      llvm::cl::init(0)};
  PassOptions::ListOption<std::string> tileStageTasks{
      *this, "tile-stage-tasks",
      llvm::cl::desc("Tasks whose weights tile-stage-bytes stages (all when empty)")};
  PassOptions::Option<int> optLevel{
      *this, "opt-level",
      llvm::cl::desc("LLVM optimization level of the NVPTX code generation"),
      llvm::cl::init(2)};
  PassOptions::Option<int> ptxasOptLevel{
      *this, "ptxas-opt-level",
      llvm::cl::desc("ptxas optimization level for format=bin and fatbin "
                     "(independent of opt-level; 3 is what the driver uses "
                     "when it compiles PTX)"),
      llvm::cl::init(3)};
  PassOptions::Option<std::string> tileLinear{
      *this, "tile-linear",
      llvm::cl::desc("et.linear on the GPU: rows or spread"),
      llvm::cl::init("rows")};
  PassOptions::Option<std::string> tileMma{
      *this, "tile-mma",
      llvm::cl::desc("et.matmul on tensor cores: wgmma (Hopper, where the "
                     "tile allows it) or sync (mma.sync)"),
      llvm::cl::init("wgmma")};
  PassOptions::Option<int64_t> tileUnroll{
      *this, "tile-unroll",
      llvm::cl::desc("16-byte weight loads per lane in flight in tile ops"),
      llvm::cl::init(4)};
  PassOptions::Option<int64_t> tileRowsInFlight{
      *this, "tile-rows-in-flight",
      llvm::cl::desc("Rows of et.rmsnorm (elements per thread of "
                     "et.kv_append) whose loads go out together"),
      llvm::cl::init(1)};
  PassOptions::Option<int64_t> backoffNs{
      *this, "backoff-ns", llvm::cl::desc("nanosleep between polls"),
      llvm::cl::init(64)};
};

struct CPUPipelineOptions
    : public CommonPipelineOptions<CPUPipelineOptions> {
  PassOptions::Option<int64_t> workers{
      *this, "workers", llvm::cl::desc("Persistent workers (host threads)"),
      llvm::cl::init(4)};
};
} // namespace

static LogicalResult checkMode(StringRef mode) {
  if (mode == "static" || mode == "dynamic" || mode == "keep")
    return success();
  llvm::errs() << "error: mode must be static, dynamic or keep, got '" << mode
               << "'\n";
  return failure();
}

void mlir::et::registerEventTensorPipelines() {
  PassPipelineRegistration<NVVMPipelineOptions>(
      "et-lower-to-nvvm-pipeline",
      "Schedules et kernels and lowers each to one persistent GPU kernel "
      "(PTX or cubin in a gpu.binary)",
      [](OpPassManager &pm, const NVVMPipelineOptions &options) {
        if (failed(checkMode(options.mode)))
          return;
        addScheduling(pm, options);
        LowerTileOpsPassOptions tile;
        tile.target = "gpu";
        tile.unroll = options.tileUnroll;
        tile.rowsInFlight = options.tileRowsInFlight;
        tile.prefetch = options.tilePrefetch;
        tile.prefetchTasks.assign(options.tilePrefetchTasks.begin(), options.tilePrefetchTasks.end());
        tile.kvPrefetch = options.tileKvPrefetch;
        tile.prefetchBytes = options.tilePrefetchBytes;
        tile.kvMmaBytes = options.tileKvMmaBytes;
        tile.stageBytes = options.tileStageBytes;
        tile.stageTasks.assign(options.tileStageTasks.begin(), options.tileStageTasks.end());
        tile.threads = options.threads;
        tile.linear = options.tileLinear;
        tile.mma = options.tileMma;
        pm.nest<KernelOp>().addPass(createLowerTileOpsPass(tile));
        ConvertEventTensorToNVVMPassOptions o;
        o.backoffNs = options.backoffNs;
        o.profile = options.profile;
        o.threads = options.threads;
        pm.addPass(createConvertEventTensorToNVVMPass(o));
        pm.addPass(createCanonicalizerPass());
        gpu::GPUToNVVMPipelineOptions nvvm;
        nvvm.cubinChip = options.chip;
        nvvm.cubinFeatures = options.features;
        nvvm.cubinFormat = options.format;
        nvvm.optLevel = options.optLevel;
        // ptxas would otherwise run at opt-level too: the model kernels'
        // LLVM -O1 made -O1 cubins with spills, 21% slower than the same
        // PTX compiled by the driver (docs/experiments/). The option
        // given last wins.
        nvvm.cmdOptions = "--opt-level " + std::to_string(options.ptxasOptLevel);
        gpu::buildLowerToNVVMPassPipeline(pm, nvvm);
      });
  PassPipelineRegistration<CPUPipelineOptions>(
      "et-lower-to-cpu-pipeline",
      "Schedules et kernels and lowers each to a host worker function in "
      "the LLVM dialect",
      [](OpPassManager &pm, const CPUPipelineOptions &options) {
        if (failed(checkMode(options.mode)))
          return;
        addScheduling(pm, options);
        LowerTileOpsPassOptions tile;
        tile.target = "cpu";
        pm.nest<KernelOp>().addPass(createLowerTileOpsPass(tile));
        ConvertEventTensorToCPUPassOptions o;
        o.profile = options.profile;
        pm.addPass(createConvertEventTensorToCPUPass(o));
        pm.addPass(createCanonicalizerPass());
        pm.addPass(createLowerAffinePass());
        pm.addPass(createSCFToControlFlowPass());
        // bf16 <-> f32 as integer arithmetic: no libgcc bf16 helpers needed.
        arith::ArithExpandOpsPassOptions expand;
        expand.includeBf16 = true;
        pm.addPass(arith::createArithExpandOpsPass(expand));
        pm.addPass(memref::createExpandStridedMetadataPass());
        // Subview offsets become affine.apply ops.
        pm.addPass(createLowerAffinePass());
        // Vector code in task bodies (built by hand, not by the tile
        // lowering, which emits scalars for the CPU).
        pm.addPass(createConvertVectorToLLVMPass());
        pm.addPass(createFinalizeMemRefToLLVMConversionPass());
        pm.addPass(createConvertMathToLLVMPass());
        pm.addPass(createArithToLLVMConversionPass());
        pm.addPass(createConvertIndexToLLVMPass());
        pm.addPass(createConvertControlFlowToLLVMPass());
        pm.addPass(createConvertFuncToLLVMPass());
        pm.addPass(createReconcileUnrealizedCastsPass());
        pm.addPass(createCanonicalizerPass());
      });
}
