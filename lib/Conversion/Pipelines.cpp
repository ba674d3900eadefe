//===- Pipelines.cpp - End-to-end lowering pipelines ----------------------===//
//
// buildLowerToNVVMPipeline and buildLowerToCPUPipeline, and their
// registration as et-lower-to-nvvm-pipeline and et-lower-to-cpu-pipeline.
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
  if (options.mode != ScheduleMode::Keep) {
    if (options.optimize)
      kernels.addPass(createOptimizeEventsPass());
    if (options.mode == ScheduleMode::Static) {
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
} // namespace

void mlir::et::buildLowerToNVVMPipeline(OpPassManager &pm, const LowerToNVVMPipelineOptions &options) {
  addScheduling(pm, options);
  LowerTileOpsPassOptions tile;
  tile.target = TileTarget::GPU;
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
  nvvm.cubinFormat = options.format == BinaryFormat::Isa   ? "isa"
                     : options.format == BinaryFormat::Bin ? "bin"
                                                           : "fatbin";
  nvvm.optLevel = options.optLevel;
  // ptxas would otherwise run at opt-level too: the model kernels'
  // LLVM -O1 made -O1 cubins with spills, 21% slower than the same
  // PTX compiled by the driver
  // (docs/experiments/2026-11-24-one-artifact-per-shape.md). The option
  // given last wins.
  nvvm.cmdOptions = "--opt-level " + std::to_string(options.ptxasOptLevel);
  gpu::buildLowerToNVVMPassPipeline(pm, nvvm);
}

/// The canonicalizer after the host worker conversion, without the two
/// region-branch patterns that walk every branch point of a region op on
/// each application: the dynamic schedule's worker is one region op with a
/// block per task, and a chain of 400 one-tile tasks spent 11 of its 12.6 s
/// of compile time there (87%, getAllRegionBranchPoints); what they remove
/// (duplicate or dead successor inputs) LLVM removes as well.
static std::unique_ptr<Pass> createWorkerCanonicalizerPass() {
  static const std::string disabled[] = {"(anonymous namespace)::RemoveDuplicateSuccessorInputUses",
                                         "(anonymous namespace)::RemoveDeadRegionBranchOpSuccessorInputs"};
  return createCanonicalizerPass(GreedyRewriteConfig(), {disabled[0], disabled[1]});
}

void mlir::et::buildLowerToCPUPipeline(OpPassManager &pm, const LowerToCPUPipelineOptions &options) {
  addScheduling(pm, options);
  LowerTileOpsPassOptions tile;
  tile.target = TileTarget::CPU;
  pm.nest<KernelOp>().addPass(createLowerTileOpsPass(tile));
  ConvertEventTensorToCPUPassOptions o;
  o.profile = options.profile;
  pm.addPass(createConvertEventTensorToCPUPass(o));
  pm.addPass(createWorkerCanonicalizerPass());
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
}

void mlir::et::registerEventTensorPipelines() {
  PassPipelineRegistration<LowerToNVVMPipelineOptions>(
      "et-lower-to-nvvm-pipeline",
      "Schedules et kernels and lowers each to one persistent GPU kernel "
      "(PTX or cubin in a gpu.binary)",
      buildLowerToNVVMPipeline);
  PassPipelineRegistration<LowerToCPUPipelineOptions>(
      "et-lower-to-cpu-pipeline",
      "Schedules et kernels and lowers each to a host worker function in "
      "the LLVM dialect",
      buildLowerToCPUPipeline);
}
