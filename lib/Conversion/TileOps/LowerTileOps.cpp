//===- LowerTileOps.cpp - et-lower-tile-ops: tile compute ops to loops ---===//
//
// Implements et-lower-tile-ops: rewrites et.linear and the other tile
// compute ops into loops over the worker's threads, for the GPU (warps,
// vector loads, shuffles, tensor cores) or the CPU (scalar loops), with the
// patterns of each op family (populate*LoweringPatterns, one file each).
// The pass checks its options once, inserts the barriers between dependent
// tile ops, plans which op takes each task's dynamic shared memory
// (et.dynamic_shared_owner), the attention ops (et.attention_plan: the
// lowered form) and the linear ops (et.linear_plan: layouts, weights before
// the wait, staging budgets, which ops share a run), and applies the
// patterns op by op in a fixed order; the lowerings emit what the plans say.
//
//===----------------------------------------------------------------------===//

#include "EventTensor/Conversion/Passes.h"
#include "TileLowering.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Rewrite/FrozenRewritePatternSet.h"
#include "mlir/Rewrite/PatternApplicator.h"

namespace mlir::et {
#define GEN_PASS_DEF_LOWERTILEOPSPASS
#include "EventTensor/Conversion/Passes.h.inc"
} // namespace mlir::et

using namespace mlir;
using namespace mlir::et;
using namespace mlir::et::tile;

namespace {

/// A rewriter for the pass's own driver (the patterns lower one op each).
struct TileRewriter : public PatternRewriter {
  using PatternRewriter::PatternRewriter;
};

struct LowerTileOpsPass
    : public mlir::et::impl::LowerTileOpsPassBase<LowerTileOpsPass> {
  using Base::Base;

  /// The options, checked (a diagnostic and failure otherwise; the option
  /// parser has checked the enums).
  FailureOr<TileLoweringOptions> checkedOptions() {
    if ((prefetch == WeightPrefetchMode::Shared || kvPrefetch == KVPrefetchMode::Shared) &&
        (prefetchBytes < 16 * 1024 || prefetchBytes > kMaxDynamicShared)) {
      getOperation().emitOpError("'et-lower-tile-ops' prefetch-bytes must be in [16384, ")
          << kMaxDynamicShared << "] for prefetch=shared or kv-prefetch=shared, got "
          << static_cast<int64_t>(prefetchBytes);
      return failure();
    }
    if (kvMmaBytes < 0 || kvMmaBytes > kMaxDynamicShared) {
      getOperation().emitOpError("'et-lower-tile-ops' kv-mma-bytes must be in [0, ")
          << kMaxDynamicShared << "], got " << static_cast<int64_t>(kvMmaBytes);
      return failure();
    }
    if (stageBytes < 0 || stageBytes > kMaxDynamicShared) {
      getOperation().emitOpError("'et-lower-tile-ops' stage-bytes must be in [0, ")
          << kMaxDynamicShared << "], got " << static_cast<int64_t>(stageBytes);
      return failure();
    }
    if (unroll < 1) {
      getOperation().emitOpError("'et-lower-tile-ops' needs unroll >= 1, got ")
          << static_cast<int64_t>(unroll);
      return failure();
    }
    if (rowsInFlight < 1 || kNormChunk % rowsInFlight) {
      getOperation().emitOpError("'et-lower-tile-ops' rows-in-flight must be 1, 2, 4, 8 or 16, got ")
          << static_cast<int64_t>(rowsInFlight);
      return failure();
    }
    TileLoweringOptions options;
    options.gpu = target == TileTarget::GPU;
    options.threads = threads;
    options.unroll = unroll;
    options.rowsInFlight = options.gpu ? static_cast<int64_t>(rowsInFlight) : 1;
    options.weights = prefetch == WeightPrefetchMode::Registers ? WeightPrefetch::Registers
                      : prefetch == WeightPrefetchMode::Shared  ? WeightPrefetch::Shared
                                                                : WeightPrefetch::None;
    options.weightsL2 = prefetch == WeightPrefetchMode::L2;
    options.normsL2 = prefetch != WeightPrefetchMode::None;
    options.prefetchTasks.assign(prefetchTasks.begin(), prefetchTasks.end());
    options.prefetchBytes = prefetchBytes;
    options.kvPrefetchBytes = kvPrefetch == KVPrefetchMode::Shared ? static_cast<int64_t>(prefetchBytes) : 0;
    options.kvMmaBytes = kvMmaBytes;
    options.stageBytes = stageBytes;
    options.stageTasks.assign(stageTasks.begin(), stageTasks.end());
    options.spread = linear == LinearLayout::Spread;
    options.wgmma = mma == MatmulInstructions::WGMMA;
    return options;
  }

  void runOnOperation() override {
    FailureOr<TileLoweringOptions> checked = checkedOptions();
    if (failed(checked))
      return signalPassFailure();
    const TileLoweringOptions &options = *checked;
    // On the GPU, which op takes each task's dynamic shared memory and the
    // attention ops' forms are planned first, before anything is lowered.
    if (options.gpu && failed(planAttentionOps(getOperation(), options)))
      return signalPassFailure();
    if (planOnly) {
      if (options.gpu && failed(planLinearOps(getOperation(), options, largestDynamicBuffer(getOperation()))))
        signalPassFailure();
      return;
    }
    SmallVector<Operation *> ops;
    SmallVector<MatmulOp> matmuls;
    getOperation().walk([&](Operation *op) {
      if (auto matmul = dyn_cast<MatmulOp>(op))
        matmuls.push_back(matmul);
      else if (isTileOp(op) && !isa<LinearOp>(op)) // linear ops go last, below
        ops.push_back(op);
    });
    bool gpu = options.gpu;
    // On the host a tile runs on one thread, so a task's workgroup buffers
    // (per-tile shared memory on the GPU) are ordinary per-tile memory:
    // the memory space goes from every value that views them.
    if (!gpu)
      getOperation().walk([](TaskOp task) {
        task.getBody().walk([](Operation *op) {
          for (Value v : op->getResults()) {
            auto type = dyn_cast<MemRefType>(v.getType());
            if (type && isa_and_nonnull<gpu::AddressSpaceAttr>(type.getMemorySpace()))
              v.setType(MemRefType::get(type.getShape(), type.getElementType(), type.getLayout()));
          }
        });
      });
    // Each tile op splits its work between the worker's threads in its own
    // way, so one op's results may be read by other threads in the next:
    // on the GPU, a CTA barrier goes before a tile op that touches a buffer
    // which a tile op since the last barrier writes (or writes one it
    // reads), and before a plain memref.load of such a buffer (a tile op's
    // result that the body itself reads, as an index, say), in every block
    // of a task body. An op holding tile ops in its
    // regions (an scf.if over the live batch rows, say) counts as one.
    // Every thread must reach a tile op anyway (they synchronize inside),
    // so the barrier is reached wherever the ops are.
    if (gpu)
      getOperation().walk([&](TaskOp task) { insertTileBarriers(task); });
    RewritePatternSet patterns(&getContext());
    populateMatmulLoweringPatterns(patterns, options);
    populateAttentionLoweringPatterns(patterns, options);
    populateAttentionPrefillLoweringPatterns(patterns, options);
    populateNormLoweringPatterns(patterns, options);
    populateEmbeddingLoweringPatterns(patterns, options);
    populateRoPELoweringPatterns(patterns, options);
    populateArgmaxLoweringPatterns(patterns, options);
    populateRouterLoweringPatterns(patterns, options);
    populateLinearLoweringPatterns(patterns, options);
    FrozenRewritePatternSet frozen(std::move(patterns));
    PatternApplicator applicator(frozen);
    applicator.applyDefaultCostModel();
    TileRewriter rewriter(&getContext());
    // Every tile op has a pattern, and only et.matmul's and those that
    // follow a plan (one that does not fit) can fail, with a diagnostic.
    auto lower = [&](Operation *op) {
      rewriter.setInsertionPoint(op);
      return applicator.matchAndRewrite(op, rewriter);
    };
    // et.matmul first, then the others in walk order: the order in which
    // the ops add their buffers to a task (workgroupBuffer) sets the
    // kernel's shared-memory layout.
    for (MatmulOp op : matmuls)
      if (failed(lower(op)))
        return signalPassFailure();
    for (Operation *op : ops)
      if (failed(lower(op)))
        return signalPassFailure();
    // The linear ops last: the other tile ops are lowered by now, and the
    // barriers between dependent ops remain. On the GPU, when the kernel
    // then needs more shared memory than an SM gives one CTA (its static
    // tile buffers are only known once lowered), they are planned and
    // lowered again, from a copy taken here, with a staging budget smaller
    // by what was too much (two staging regions).
    Operation *root = getOperation();
    bool refit = gpu && options.stageBytes > 0;
    OwningOpRef<Operation *> before(refit ? root->clone() : nullptr);
    TileLoweringOptions linearOptions = options;
    int64_t dynamicShared = largestDynamicBuffer(getOperation());
    for (;;) {
      SmallVector<LinearOp> linears;
      root->walk([&](LinearOp op) { linears.push_back(op); });
      // The L2 prefetches move what they need above the tasks' first
      // waits, which the plan then sees.
      if (gpu && options.weightsL2)
        for (LinearOp op : linears)
          if (inNamedTask(op, options.prefetchTasks))
            prefetchWeightsL2(op);
      if (gpu && options.normsL2)
        for (LinearOp op : linears)
          prefetchNormL2(op);
      if (gpu && failed(planLinearOps(root, linearOptions, dynamicShared)))
        return signalPassFailure();
      for (LinearOp op : linears)
        if (failed(lower(op)))
          return signalPassFailure();
      int64_t over = refit ? sharedBytesPerWorker(root) - kMaxSharedPerCTA : 0;
      if (over <= 0 || linearOptions.stageBytes == 0)
        break;
      linearOptions.stageBytes = std::max<int64_t>(
          0, linearOptions.stageBytes - static_cast<int64_t>(llvm::alignTo((over + 1) / 2, 1024)));
      OwningOpRef<Operation *> copy((*before)->clone());
      root->getRegion(0).takeBody(copy.get()->getRegion(0));
    }
  }
};

} // namespace
