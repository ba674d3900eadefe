//===- Passes.td - EventTensor transformation passes -------*- tablegen -*-===//

#ifndef EVENTTENSOR_TRANSFORMS_PASSES_TD
#define EVENTTENSOR_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

//===----------------------------------------------------------------------===//
// Verification
//===----------------------------------------------------------------------===//

def VerifyEventGraphPass : Pass<"et-verify-event-graph", "KernelOp"> {
  let summary = "checks whole-kernel invariants of the task/event graph";
  let description = [{
    Builds the task/event graph of each `et.kernel` (the `EventGraph`
    analysis) and reports, on the offending op:

    - a wait on an event that no task signals, or on a statically known
      element that no tile signals (a certain deadlock);
    - dependency cycles between tasks (each task on the cycle gets a note),
      unless every tile count is static and the tiles form no cycle: a
      layer loop, where tile (l, t) of one task waits on tile l - 1 of
      another, is valid (it needs `et-static-schedule`);
    - event indices that are statically out of bounds;
    - an explicit `expected` count that disagrees with the derived one.

    Rank mismatches are local and checked by the op verifiers. The pass does
    not change the IR. With `emit-counts`, it also reports each event's
    expected count as a remark: `static` (known at compile time), `symbolic`
    (an expression of runtime sizes; `e0, e1, ...` are the element's
    coordinates) or `device` (known only on the device), for example:

    ```
    remark: expected count: symbolic, arg1
    ```
  }];
  let options = [
    Option<"emitCounts", "emit-counts", "bool", /*default=*/"false",
           "Report each event's derived expected count as a remark">,
  ];
  let statistics = [
    Statistic<"numEvents", "num-events", "Event tensors checked">,
    Statistic<"numEdges", "num-edges", "Producer-consumer task edges">,
  ];
}


//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

def LowerCollectivesPass : Pass<"et-lower-collectives", "KernelOp"> {
  let summary = "turns et.allreduce into signals to every device and a sum task";
  let description = [{
    Lowers each `et.allreduce %partial into %into rows(%rows) after %after
    signal %done block(B)` of an unscheduled kernel on N devices:

    - every signal of `%after` becomes N signals, `peer(0)` .. `peer(N-1)`,
      so each device's `after[e]` counts the producing tiles of all devices
      (its expected count grows N-fold, derived as usual);
    - a task (named by the op's `task`, else `@allreduce_<i>`) over (the
      elements of `%after`, C / B column
      blocks) waits on `after[e]`, adds the N copies of `%partial`
      (`et.peer`, in device order, 4 f32 columns per thread and step) into
      rows 0..rows-1 of its column block of `%into`, and signals `done[e]`.

    Errors: a kernel that is already scheduled (the new task would have no
    place in the schedule), a signal of `%after` that already names a peer,
    and a task name that is taken. The schedulers and the worker lowering see only tasks and events
    afterwards; the lowering pipelines run this pass first.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::scf::SCFDialect",
                           "::mlir::vector::VectorDialect"];
  let statistics = [
    Statistic<"numAllReduces", "num-allreduces", "et.allreduce ops lowered">,
  ];
}

//===----------------------------------------------------------------------===//
// Scheduling
//===----------------------------------------------------------------------===//

def StaticSchedulePass : Pass<"et-static-schedule", "KernelOp"> {
  let summary = "assigns every tile to a persistent worker at compile time";
  let description = [{
    Computes a static schedule of each unscheduled `et.kernel` and records
    it as an `et.schedule static` op: one ordered tile list per worker.

    The schedule comes from critical-path list scheduling on the tile graph:
    tiles are taken in a topological order, highest upward rank first (the
    longest chain of durations from the tile to the end of the kernel), and
    each goes to the worker where it finishes earliest; a dependency on a
    tile of another worker costs the cost model's `sync_ns`. Durations come
    from the cost model: a tile's bytes and flops (its `et.cost` attribute,
    or derived from its body) over a worker's share of bandwidth and flops.

    Tasks whose tile count is only known at run time are scheduled as one
    unit and distributed over all workers by a formula (`et.run @t cyclic
    k`: tile `t` on worker `(t + k) mod W`); their duration is estimated
    from `max_extents`, or from `dynamic-extent` when the count is computed
    from kernel arguments. A task whose count is read on the device
    (`et.extent.load`) needs `max_extents`.

    Each worker's list is a subsequence of the order in which tiles were
    taken, which is topological, so the schedule cannot deadlock.
  }];
  let options = [
    Option<"workers", "workers", "int64_t", /*default=*/"132",
           "Persistent workers (one per SM; 132 on H100 and H200)">,
    Option<"dynamicExtent", "dynamic-extent", "int64_t", /*default=*/"16",
           "Estimated extent of a dimension computed from runtime sizes "
           "that has no max_extents">,
    Option<"bandwidthGbps", "bandwidth-gbps", "int64_t", /*default=*/"4800",
           "Device memory bandwidth in GB/s (cost model)">,
    Option<"gflops", "gflops", "int64_t", /*default=*/"989000",
           "Device peak GFLOP/s (cost model)">,
    Option<"dispatchNs", "dispatch-ns", "int64_t", /*default=*/"300",
           "Per-tile dispatch overhead in ns (cost model)">,
    Option<"syncNs", "sync-ns", "int64_t", /*default=*/"1000",
           "Latency of a cross-worker dependency in ns (cost model)">,
  ];
  let statistics = [
    Statistic<"numTiles", "num-tiles", "Tiles assigned to workers">,
    Statistic<"numCyclic", "num-cyclic-tasks",
              "Tasks distributed by formula (runtime tile count)">,
    Statistic<"makespanNs", "predicted-makespan-ns",
              "Makespan predicted by the cost model (ns)">,
  ];
}

def DynamicSchedulePass : Pass<"et-dynamic-schedule", "KernelOp"> {
  let summary = "makes workers take tiles from a device queue at run time";
  let description = [{
    Records an `et.schedule dynamic` op: the kernel's tasks in a topological
    order (highest upward rank first among ready tasks, then program
    order). At run time every worker repeatedly takes the next ticket of one
    atomic counter; ticket `i` is the `i`-th tile of that order (all tiles
    of the first task in row-major order, then the second task, ...).

    Deadlock freedom: every tile a tile waits on has a smaller ticket, and
    a worker takes a new ticket only after finishing its current tile. The
    unfinished tile with the smallest ticket has all its dependencies
    taken, by induction finished, so it makes progress (the argument is in
    docs/scheduling.md).

    Two-phase dispatch (`two-phase`, on by default): a tile is dispatched
    when its ticket is taken, before its producers finish; its ops before the
    first `et.event.wait` run at once. The pass hoists producer-independent
    work above the first wait: side-effect-free ops and reads of buffers no
    task of the kernel writes (weights), so their loads overlap the wait.
  }];
  let options = [
    Option<"workers", "workers", "int64_t", /*default=*/"132",
           "Persistent workers (one per SM; 132 on H100 and H200)">,
    Option<"twoPhase", "two-phase", "bool", /*default=*/"true",
           "Hoist producer-independent work above each task's first wait">,
    Option<"dynamicExtent", "dynamic-extent", "int64_t", /*default=*/"16",
           "Estimated extent used to rank tasks with runtime tile counts">,
  ];
  let statistics = [
    Statistic<"numHoisted", "num-hoisted-ops",
              "Ops hoisted above a task's first wait">,
  ];
}

//===----------------------------------------------------------------------===//
// Event graph optimization
//===----------------------------------------------------------------------===//

def OptimizeEventsPass : Pass<"et-optimize-events", "KernelOp"> {
  let summary = "removes implied waits, coarsens events, picks sync per edge";
  let description = [{
    Optimizes the event graph of each `et.kernel` on its tile graph. The
    transformations need every tile count to be a compile-time constant;
    kernels (or events) with runtime counts are left as they are.

    - Transitive reduction: a wait is removed when, for every tile, each
      tile it waits on is already waited on, directly or transitively,
      through the task's other waits.
    - Coarsening: when every waiting tile waits on every element of an event
      (for example a merge that waits on each of 8 partial results), the
      event becomes one counter and each task's waits on it become one.
    - Synchronization per edge, in a statically scheduled kernel: a wait
      whose producer tiles all run earlier on the consumer tile's own worker
      is satisfied by program order and removed; other waits keep their
      global counter.
    - Dead events: an event nobody waits on (and no extent load follows)
      loses its signals and is erased.

    With `emit-remarks`, each change is reported as a remark on the op.
  }];
  let options = [
    Option<"transitiveReduction", "transitive-reduction", "bool",
           /*default=*/"true", "Remove waits implied by other waits">,
    Option<"coarsen", "coarsen", "bool", /*default=*/"true",
           "Merge events whose waiters need every element">,
    Option<"selectSync", "select-sync", "bool", /*default=*/"true",
           "Drop waits satisfied by program order in a static schedule">,
    Option<"emitRemarks", "emit-remarks", "bool", /*default=*/"false",
           "Report each change as a remark">,
    Option<"maxTiles", "max-tiles", "int64_t", /*default=*/"16384",
           "Skip kernels with more tiles than this">,
  ];
  let statistics = [
    Statistic<"numRedundantWaits", "num-redundant-waits",
              "Waits removed as implied by other waits">,
    Statistic<"numProgramOrderWaits", "num-program-order-waits",
              "Waits replaced by program order on one worker">,
    Statistic<"numCoarsenedEvents", "num-coarsened-events",
              "Events merged into a single counter">,
    Statistic<"numMergedWaits", "num-merged-waits",
              "Waits removed by coarsening">,
    Statistic<"numDeadEvents", "num-dead-events",
              "Events erased because nobody waits on them">,
    Statistic<"numDeadSignals", "num-dead-signals",
              "Signals erased with their dead events">,
  ];
}

#endif // EVENTTENSOR_TRANSFORMS_PASSES_TD
