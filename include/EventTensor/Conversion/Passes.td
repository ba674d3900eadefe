//===- Passes.td - Conversions out of the et dialect -------*- tablegen -*-===//

#ifndef EVENTTENSOR_CONVERSION_PASSES_TD
#define EVENTTENSOR_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def ConvertEventTensorToNVVMPass : Pass<"convert-et-to-nvvm", "ModuleOp"> {
  let summary = "lowers scheduled et.kernels to one persistent gpu.func each";
  let description = [{
    Turns every scheduled `et.kernel` into a `gpu.module` holding one
    `gpu.func` kernel: every CTA is a persistent worker (worker id =
    `blockIdx.x`) that runs its part of the schedule. The result goes
    through the upstream GPU-to-NVVM lowering (`et-lower-to-nvvm-pipeline`).
    Each `scf.execute_region` marked `et.outline` in a tile body becomes a
    private `noinline` `func.func` beside it (`<kernel>_outlined_<k>`),
    called where the region was; workgroup buffers cross the call as
    generic memrefs.

    Kernel parameters, in order: `epoch` (i64, the launch number: counters
    alternate between two banks by its parity, and each launch clears the
    bank the next one uses), `spin_limit` (i64, the watchdog: spins of one
    wait before it gives up), `counters` (memref<?xi32>), `control`
    (memref<?xi32>: tickets, abort and error flags), `error`
    (memref<?xi64>: the error record), then the kernel's own arguments.

    Synchronization: a wait is thread 0 spinning on an acquire load at GPU
    scope (`ld.acquire.gpu`) with `nanosleep` backoff, then one CTA barrier
    whose AND reduction carries the outcome (`bar.red.and`); a signal is a
    CTA barrier, then thread 0's release reduction at GPU scope
    (`red.release.gpu`, written out because LLVM 22's NVPTX backend drops
    the ordering of `atomicrmw`). Every spin is bounded by `spin_limit`; on
    timeout the worker records (kind, worker, task, tile, event, element,
    expected, observed) in `error`, raises the abort flag that stops every
    other worker, and exits.

    Weights staged across tiles (`et.staged_rows`, static schedules): the
    program table's third column marks each single-tile entry whose task
    stages rows with its region (two regions after the tiles' dynamic
    shared buffers, used by a worker's entries in turn) and the parity of
    that region's mbarrier phase. Before an entry's waits, the worker's
    last thread issues the next entry's copies (one expect-tx arrive, one
    `cp.async.bulk` per op); the staged view waits on the mbarrier phase.
    The mbarrier wait is not bounded by `spin_limit`: a copy always
    completes unless it faults, which ends the launch with an error.

  }];
  let options = [
    Option<"backoffNs", "backoff-ns", "int64_t", /*default=*/"64",
           "nanosleep between two polls of a counter (ns)">,
    Option<"profile", "profile", "bool", /*default=*/"false",
           "Record each tile's worker, task, tile, start and end time "
           "(globaltimer, ns) in a trace buffer (an extra parameter after "
           "`error`)">,
    Option<"threads", "threads", "int64_t", /*default=*/"0",
           "Threads per worker, fixed at compile time (the kernel's "
           "known_block_size, so ptxas can budget registers for it); 0 "
           "leaves it to the launch">,
  ];
  let dependentDialects = ["::mlir::gpu::GPUDialect", "::mlir::LLVM::LLVMDialect",
                           "::mlir::NVVM::NVVMDialect", "::mlir::scf::SCFDialect",
                           "::mlir::func::FuncDialect",
                           "::mlir::cf::ControlFlowDialect", "::mlir::memref::MemRefDialect",
                           "::mlir::arith::ArithDialect"];
}

def ConvertEventTensorToCPUPass : Pass<"convert-et-to-cpu", "ModuleOp"> {
  let summary = "lowers scheduled et.kernels to one host worker function each";
  let description = [{
    Turns every scheduled `et.kernel` into a `func.func @<kernel>_worker`
    that one host thread per worker calls with its worker id as the first
    argument; the other parameters are those of `convert-et-to-nvvm`.
    Counters are host atomics with the same acquire/release meaning (system
    scope); a waiting worker yields its thread (`sched_yield`) between polls.
    With `profile`, tile times come from `clock_gettime(CLOCK_MONOTONIC)`.
    Regions marked `et.outline` become functions as in `convert-et-to-nvvm`.
  }];
  let options = [
    Option<"profile", "profile", "bool", /*default=*/"false",
           "Record each tile's worker, task, tile, start and end time (ns) "
           "in a trace buffer (an extra parameter after `error`)">,
  ];
  let dependentDialects = ["::mlir::func::FuncDialect", "::mlir::LLVM::LLVMDialect",
                           "::mlir::scf::SCFDialect", "::mlir::cf::ControlFlowDialect",
                           "::mlir::memref::MemRefDialect", "::mlir::arith::ArithDialect"];
}

def LowerTileOpsPass : Pass<"et-lower-tile-ops", "KernelOp"> {
  let summary = "lowers tile compute ops (et.linear, ...) to loops for a target";
  let description = [{
    Rewrites the tile compute ops of every task body into scf, vector,
    memref and arith code that splits the work between the worker's threads
    (`et.thread_id`, `et.num_threads`). With `target=gpu` it uses warps: one
    warp per output row of `et.linear`, 16-byte loads with `unroll`
    independent loads per lane in flight, and a `gpu.shuffle xor` butterfly
    for the lane sums; with `target=cpu` it emits scalar loops. With
    `linear=spread` and `threads` fixed, an `et.linear` with a constant row
    count and a static K that would leave warps idle or wait out short rows
    one at a time spreads over every warp instead: K split between warps
    (their sums meet in shared memory) for fewer rows than warps, several
    short rows per trip, a gated row whole in one trip; a linear op after
    another one in the same tile loads its first trip into registers right
    after the task's last wait. With `threads` fixed, whatever `linear`
    says, an `et.linear` whose rows are short (a static K of at most 256)
    and whose row count is constant puts each row on K / 8 lanes and issues
    all of a thread's loads together (before the task's first wait when the
    weight prefetch is on: a split-K tile such as one query head's share of
    the attention projection). `accumulate atomic` makes the adds into y
    relaxed f32 atomics (every lowering).

    The choices that span several et.linear ops are made first, by a plan
    written on each op as `et.linear_plan` (a dictionary; `plan-only` stops
    there, so the plan can be read and tested): `layout` (short, spread or
    rows), `prefetch` (none, registers or shared), `stage` (byte offset and
    rows of the op's staged rows in its task's region, each task's
    `stage-bytes` taken in op order) and `early_loads` (a spread op after
    another linear op of its run with no staged op before it). The lowering
    emits what the plan says; an op that already has a plan keeps it.

    On the GPU, weights never depend on the previous task, so their first
    loads may move above the task's first wait: `prefetch=registers` has
    each warp load the first `unroll` 16-byte chunks of its first row into
    registers before the wait; `prefetch=l2` has thread 0 issue one bulk L2
    prefetch (`cp.async.bulk.prefetch`) of the tile's weight rows;
    `prefetch=shared` has each thread copy the first chunks of its warp's
    first row into its own slots of the kernel's dynamic shared memory
    (`cp.async`, `prefetch-bytes` in all, which the launch must provide) and
    read them back after the wait, for the first such linear op of each
    task. All three only apply when no task writes the weights and the rows
    are known before the wait. docs/experiments/ has the measurements
    behind the default.

    Split-KV attention on the GPU (bf16 cache, D in 64/128/256) uses every
    warp of the worker for each output entry, with a software-pipelined
    loop per warp and a combine through shared memory: a workgroup
    `memref.alloca` at the top level of the task, sized for `threads`
    threads (1024 when 0), which the worker lowering turns into a workgroup
    buffer. With `kv-mma-bytes` > 0, `threads` fixed, D of 64 or 128 and
    up to 16 query heads per KV head, the tile runs on tensor cores instead
    (`mma.sync` m16n8k16, q and P as bf16 hi + lo pairs): each warp streams
    blocks of 16 positions through its own ring in the dynamic shared
    memory (`cp.async`, two slots: as many warps as the bytes give a ring;
    deeper rings measured slower), reads them with `ldmatrix`, and the warps combine through shared
    memory (a task whose dynamic shared memory another op took keeps the
    CUDA cores). With `kv-prefetch=shared`, an `et.attention_split` with a
    `stable` operand, a constant split length whose K and V rows fit in
    `prefetch-bytes` and D in {64, 128} copies its split's rows below
    `stable` into the dynamic shared memory (`cp.async`) before the task's
    first wait, then computes from there: scores, softmax and P.V as three
    phases through shared memory. One op per task (an et.linear of the same
    task then keeps to global memory).

    Which of these forms an `et.attention_split` takes (GPU), and whether an
    `et.attention_prefill` runs on tensor cores, is planned before any tile
    op is lowered, as `et.attention_plan = {form = ...}` on the op: for a
    split "staged", "mma", "warps" (every warp on each output entry) or
    "loops", for a prefill "mma" or "loops", the first that applies. A
    task's dynamic shared memory has one user, recorded on the task as
    `et.dynamic_shared_owner`: every `et.matmul` first, then in walk order
    the attention ops whose form needs it (staged, mma), then the first
    `et.linear` planned with the shared weight prefetch; an op whose task's
    memory is held takes a form without it. The lowering emits the planned
    form; an op that already has a plan keeps it, a plan whose form does not
    apply to the op or the worker is an error, and so is one that needs
    memory another op holds.

    With `stage-bytes` > 0, each `et.linear` on the GPU at a task's top level
    whose weights no task writes, with a static K, a constant row count and
    rows known from the tile coordinates, reads its first rows through an
    `et.staged_rows` op: up to `stage-bytes` per task, given to the task's
    linear ops in order. Rows the worker staged (during the tile before this
    one, see `convert-et-to-nvvm`) come from shared memory, the others from
    global memory; a staged op takes no other weight prefetch.

    `et.matmul` (GPU, `threads` fixed) keeps a ring of operand slices in the
    dynamic shared memory, filled with `cp.async`; with `mma=wgmma` and a
    tile of BK = 64, BM a multiple of 64 and at least 3 stages, warpgroups
    multiply from 128-byte-swizzled slices with `wgmma.mma_async`;
    otherwise warps use `ldmatrix` and `mma.sync`.

    With `rows-in-flight` R > 1 on the GPU, `et.rmsnorm` takes R rows at a
    time (every thread of a wide row's worker, or every lane of a warp per
    narrow row) with all their loads in flight before the sums, and
    `et.kv_append` gives each thread R elements per trip, loads first; rows
    and elements past the last whole group go one at a time. The prompt
    tiles' 8-row norms and appends are latency-bound one row at a time; a
    decode step keeps 1 (its megakernel's registers are shared by every
    task, and the wider code raised them). Runs
    before `convert-et-to-nvvm` / `convert-et-to-cpu` (the pipelines do).
  }];
  let options = [
    Option<"target", "target", "mlir::et::TileTarget", /*default=*/"mlir::et::TileTarget::GPU",
           "gpu or cpu", "ET_TILE_TARGET_VALUES">,
    Option<"planOnly", "plan-only", "bool", /*default=*/"false",
           "Only plan: write each et.linear's et.linear_plan, each attention "
           "op's et.attention_plan and the tasks' et.dynamic_shared_owner (gpu) "
           "and lower nothing">,
    Option<"unroll", "unroll", "int64_t", /*default=*/"4",
           "Independent 16-byte weight loads per lane in flight (gpu)">,
    Option<"rowsInFlight", "rows-in-flight", "int64_t", /*default=*/"1",
           "Rows of et.rmsnorm (and elements per thread of et.kv_append) "
           "whose loads go out together: 1, 2, 4, 8 or 16 (gpu)">,
    Option<"prefetch", "prefetch", "mlir::et::WeightPrefetchMode",
           /*default=*/"mlir::et::WeightPrefetchMode::None",
           "Weight loads of et.linear moved above the task's first wait: "
           "none, registers, l2 or shared (gpu); any but none also "
           "prefetches the norm weights of `et.linear ... norm` into L2 there",
           "ET_WEIGHT_PREFETCH_MODE_VALUES">,
    ListOption<"prefetchTasks", "prefetch-tasks", "std::string",
               "Tasks whose et.linear weights `prefetch` moves (all when empty)">,
    Option<"kvPrefetch", "kv-prefetch", "mlir::et::KVPrefetchMode",
           /*default=*/"mlir::et::KVPrefetchMode::None",
           "K and V cache rows of et.attention_split below its `stable` "
           "operand loaded before the task's first wait: none or shared (gpu)",
           "ET_KV_PREFETCH_MODE_VALUES">,
    Option<"kvMmaBytes", "kv-mma-bytes", "int64_t", /*default=*/"0",
           "Dynamic shared memory for the per-warp K and V rings of "
           "et.attention_split on tensor cores (bytes, gpu; 0 = CUDA cores)">,
    Option<"prefetchBytes", "prefetch-bytes", "int64_t", /*default=*/"131072",
           "Dynamic shared memory for prefetch=shared and kv-prefetch=shared "
           "(bytes, gpu)">,
    Option<"threads", "threads", "int64_t", /*default=*/"0",
           "Threads per worker when fixed at compile time, else 0 (gpu)">,
    Option<"stageBytes", "stage-bytes", "int64_t", /*default=*/"0",
           "Bytes per task of et.linear weight rows that the worker may stage "
           "in shared memory during the tile before (et.staged_rows); 0 = off "
           "(gpu)">,
    ListOption<"stageTasks", "stage-tasks", "std::string",
               "Tasks whose et.linear weights stage-bytes stages (all when empty)">,
    Option<"linear", "linear", "mlir::et::LinearLayout", /*default=*/"mlir::et::LinearLayout::Rows",
           "et.linear on the GPU: rows (one row per warp at a time), spread "
           "(rows, except that a tile of few or short rows spreads over every "
           "warp: K split between warps, or several rows per trip)",
           "ET_LINEAR_LAYOUT_VALUES">,
    Option<"mma", "mma", "mlir::et::MatmulInstructions",
           /*default=*/"mlir::et::MatmulInstructions::WGMMA",
           "Tensor-core instructions of et.matmul on the GPU: wgmma (Hopper "
           "warpgroup MMA, where the tile allows it; else sync) or sync "
           "(mma.sync, any GPU since Ampere)", "ET_MATMUL_INSTRUCTIONS_VALUES">,
  ];
  let dependentDialects = ["::mlir::gpu::GPUDialect", "::mlir::scf::SCFDialect",
                           "::mlir::vector::VectorDialect", "::mlir::memref::MemRefDialect",
                           "::mlir::arith::ArithDialect", "::mlir::math::MathDialect",
                           "::mlir::LLVM::LLVMDialect", "::mlir::NVVM::NVVMDialect"];
}

#endif // EVENTTENSOR_CONVERSION_PASSES_TD
