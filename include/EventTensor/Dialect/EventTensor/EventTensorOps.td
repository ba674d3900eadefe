//===- EventTensorOps.td - EventTensor ops -----------------*- tablegen -*-===//
//
// Ops of the et dialect, grouped by concept: kernels and tasks, events, and
// runtime extents.
//
//===----------------------------------------------------------------------===//

#ifndef EVENTTENSOR_DIALECT_EVENTTENSOR_EVENTTENSOROPS_TD
#define EVENTTENSOR_DIALECT_EVENTTENSOR_EVENTTENSOROPS_TD

include "EventTensor/Dialect/EventTensor/EventTensorDialect.td"
include "EventTensor/Dialect/EventTensor/EventTensorTypes.td"
include "EventTensor/Dialect/EventTensor/EventTensorAttrs.td"
include "mlir/Interfaces/FunctionInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/OpAsmInterface.td"
include "mlir/IR/SymbolInterfaces.td"

//===----------------------------------------------------------------------===//
// Kernels and tasks
//===----------------------------------------------------------------------===//

def ET_KernelOp : ET_Op<"kernel", [
    IsolatedFromAbove, FunctionOpInterface, SymbolTable, SingleBlock,
    NoTerminator]> {
  let summary = "one persistent kernel: arguments, event tensors and tiled tasks";
  let description = [{
    A kernel holds everything that becomes one persistent GPU kernel (a
    megakernel): its arguments (buffers as memrefs, runtime sizes as `index`
    values), the event tensors that carry dependencies (`et.event.create`),
    the runtime extents read from memory (`et.extent.load`), and the tiled
    tasks (`et.task`). Index arithmetic on the arguments (`arith`, `affine`)
    may appear at kernel level; it computes dynamic extents and event shapes.

    The body is one block without terminator. Tasks are symbols, so schedules
    can refer to them by name. A kernel has no results: it communicates through
    its buffers.

    Example:

    ```mlir
    et.kernel @mlp(%x: memref<?x64xf32>, %y: memref<?x64xf32>, %rows: index) {
      %c16 = arith.constant 16 : index
      %tiles = arith.ceildivsi %rows, %c16 : index
      %h = et.event.create(%tiles) : !et.event<?>
      et.task @up tiles(%i) in (%tiles) {
        ...
        et.event.signal %h[%i] : !et.event<?>
      }
      et.task @down tiles(%i) in (%tiles) {
        et.event.wait %h[%i] : !et.event<?>
        ...
      }
    }
    ```

    Lowering: one `gpu.func` kernel in which every CTA is a persistent worker
    looping over its tiles (and a host function that runs one thread per
    worker on the CPU target).

    **Several devices.** With `devices = N` (default 1) the kernel runs as N
    copies, one per device (GPU, or group of host threads on the CPU
    target), launched together. Every copy runs the same tasks and has its
    own event tensors; `et.device_id` tells a copy which device it runs on.
    A memref argument marked `{et.symmetric}` is allocated on every device
    with the same shape; `et.peer` names another device's copy, and
    `et.event.signal ... peer(%k)` signals an event element on another
    device. A launch ends when every copy has finished it (the copies meet
    at a barrier across devices before they return).

    ```mlir
    et.kernel @allreduce(%x: memref<2x64xf32> {et.symmetric}, ...)
        attributes {devices = 2} { ... }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<FunctionType>:$function_type,
                       OptionalAttr<StrAttr>:$sym_visibility,
                       OptionalAttr<DictArrayAttr>:$arg_attrs,
                       OptionalAttr<DictArrayAttr>:$res_attrs,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntMinValue<1>]>>:$devices);
  let regions = (region SizedRegion<1>:$body);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let skipDefaultBuilders = 1;
  let builders = [OpBuilder<(ins "StringRef":$name, "FunctionType":$type)>];
  let extraClassDeclaration = [{
    ::mlir::Region *getCallableRegion() { return &getBody(); }
    ArrayRef<Type> getArgumentTypes() { return getFunctionType().getInputs(); }
    ArrayRef<Type> getResultTypes() { return getFunctionType().getResults(); }
    bool isDeclaration() { return false; }
    /// The tasks of this kernel, in program order.
    auto getTasks() { return getBody().front().getOps<TaskOp>(); }
    /// The event tensors of this kernel, in program order.
    auto getEvents() { return getBody().front().getOps<EventCreateOp>(); }
    /// The number of devices the kernel runs on (1 without `devices`).
    int64_t getNumDevices() { return getDevices().value_or(1); }
    /// Whether argument `i` is allocated on every device (`et.symmetric`).
    bool isSymmetricArgument(unsigned i);
    /// The kernel's `et.repeat` (its steps), or null.
    RepeatOp getRepeat();
  }];
}

def ET_TaskOp : ET_Op<"task", [
    HasParent<"KernelOp">, Symbol, SingleBlock, NoTerminator,
    RecursiveMemoryEffects, AutomaticAllocationScope]> {
  let summary = "a tiled task: one body instance per tile of an iteration space";
  let description = [{
    A tiled task runs its body once per tile of a rectangular iteration space.
    The space has one dimension per `index` extent operand; each extent is a
    constant, a value computed from the kernel's runtime sizes, or a value
    read from memory on the device (`et.extent.load`). The body's block
    arguments are the tile coordinates.

    The body states the task's dependencies with `et.event.wait` (before the
    tile may run, an element of an event tensor must be ready) and
    `et.event.signal` (after the tile, an element receives one signal). Event
    indices are computed from the tile coordinates (affine expressions such as
    `floordiv` between different tilings) or read from data (for example an
    expert id from a routing buffer). Waits and signals sit directly in the
    body, so each runs exactly once per tile.

    Example:

    ```mlir
    et.task @attn_partial tiles(%head, %split) in (%c8, %num_splits) {
      et.event.wait %kv_ready[%split] : !et.event<?>
      ...
      et.event.signal %partials[%head] : !et.event<8>
    }
    ```

    The body is an allocation scope: a `memref.alloca` in it lives for one
    tile. On the GPU, a statically shaped alloca in workgroup memory at the
    body's top level (as the tile-op lowering emits for shared-memory
    combines, or a frontend for a tile's shared scratch) becomes a
    workgroup buffer of the persistent kernel, reused by every tile of the
    task (tiles of a worker run one after another). On the host, where a
    tile runs on one thread, `et-lower-tile-ops` makes it ordinary per-tile
    memory.

    An optional `max_extents` attribute declares an upper bound of each
    extent. A static schedule needs it for an extent that is only known on
    the device (`et.extent.load`); for extents computed from runtime sizes it
    replaces the scheduler's default estimate.

    An optional `et.cost = #et.cost<bytes = B, flops = F>` attribute states
    the work of one tile; without it, schedulers derive the cost from the
    body.

    Lowering: a case of the persistent worker's task dispatch; the tile
    coordinates are decoded from the linear tile id assigned by the schedule.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, Variadic<Index>:$extents,
                       OptionalAttr<DenseI64ArrayAttr>:$max_extents);
  let regions = (region SizedRegion<1>:$body);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let skipDefaultBuilders = 1;
  let builders = [OpBuilder<(ins "StringRef":$name, "ValueRange":$extents)>];
  let extraClassDeclaration = [{
    /// Number of dimensions of the iteration space.
    unsigned getNumTileDims() { return getExtents().size(); }
    /// The tile coordinates (block arguments of the body).
    Block::BlockArgListType getTileIds() { return getBody().front().getArguments(); }
    /// The waits and signals of this task, in program order.
    auto getWaits() { return getBody().front().getOps<EventWaitOp>(); }
    auto getSignals() { return getBody().front().getOps<EventSignalOp>(); }
  }];
}

//===----------------------------------------------------------------------===//
// Events
//===----------------------------------------------------------------------===//

def ET_EventCreateOp : ET_Op<"event.create", [
    HasParent<"KernelOp">, MemoryEffects<[MemAlloc<DefaultResource>]>]> {
  let summary = "creates an event tensor";
  let description = [{
    Creates an event tensor of the result type. Each dynamic (`?`) dimension
    of the result type takes its extent from one `index` operand, in order.

    The expected count of each element (the number of signals after which
    it is ready) is derived from the tasks that signal it; it is not written
    by hand. An optional `expected` attribute states it explicitly, for
    documentation or as a check: `et-verify-event-graph` reports an element
    whose derived count disagrees.

    Example:

    ```mlir
    %done = et.event.create() : !et.event<16>
    %rows = et.event.create(%num_rows) : !et.event<?x4>
    %acc  = et.event.create() {expected = 4} : !et.event<8>
    ```

    Lowering: a slice of the kernel's counter buffer; the offsets of the
    slices are computed on the device from the dynamic extents. Counters are
    epoch-based, so launches need not clear them.
  }];
  let arguments = (ins Variadic<Index>:$dynamic_sizes,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntMinValue<1>]>>:$expected);
  let results = (outs ET_EventType:$result);
  let assemblyFormat = "`(` $dynamic_sizes `)` attr-dict `:` qualified(type($result))";
  let hasVerifier = 1;
}

def ET_EventWaitOp : ET_Op<"event.wait", [
    HasParent<"TaskOp">,
    MemoryEffects<[MemRead<DefaultResource>, MemWrite<DefaultResource>]>]> {
  let summary = "waits until an element of an event tensor is ready";
  let description = [{
    Blocks the tile until element `indices` of `event` has received its
    expected number of signals. There is one index per dimension of the
    event tensor; each is computed from the tile coordinates, from kernel
    values, or from data.

    Example:

    ```mlir
    %j = affine.apply affine_map<(d0) -> (d0 floordiv 2)>(%i)
    et.event.wait %rows[%j] : !et.event<?>
    ```

    Lowering: a bounded spin on `ld.acquire.gpu` of the counter with
    `nanosleep` backoff (a host atomic acquire load on the CPU target); on
    timeout the watchdog reports the task, tile, event and element.
  }];
  let arguments = (ins ET_EventType:$event, Variadic<Index>:$indices);
  let assemblyFormat = "$event `[` $indices `]` attr-dict `:` qualified(type($event))";
  let hasVerifier = 1;
}

def ET_EventSignalOp : ET_Op<"event.signal", [
    HasParent<"TaskOp">, AttrSizedOperandSegments,
    MemoryEffects<[MemRead<DefaultResource>, MemWrite<DefaultResource>]>]> {
  let summary = "signals one element of an event tensor";
  let description = [{
    Adds one signal to element `indices` of `event` after everything the
    tile wrote before it is visible to the tiles that wait on the element.
    Indices are computed as for `et.event.wait`.

    With `peer(%k)`, in a kernel on several devices, the signal goes to the
    element of the copy of `event` on device `(et.device_id + k) mod N`, and
    everything the tile wrote before it (in any device's memory, through
    `et.peer`) is visible there to the tiles that wait on it. `k` must not
    depend on `et.device_id`: then each tile signals every device exactly
    once across the N copies, so an element's expected count is the same on
    every device and is derived as for a local signal.

    Example:

    ```mlir
    et.event.signal %partials[%head] : !et.event<8>
    et.event.signal %received[%i] peer(%c1) : !et.event<16>
    ```

    Lowering: `fence.acq_rel.gpu` (release) followed by an atomic add on the
    counter (a host release fetch-add on the CPU target). An event that any
    signal reaches from another device uses system scope for all its signals
    and waits (`fence.acq_rel.sys`, `red.relaxed.sys.add`,
    `ld.acquire.sys`).
  }];
  let arguments = (ins ET_EventType:$event, Variadic<Index>:$indices,
                       Optional<Index>:$peer);
  let assemblyFormat = [{
    $event `[` $indices `]` (`peer` `(` $peer^ `)`)? attr-dict `:` qualified(type($event))
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Collectives across devices
//===----------------------------------------------------------------------===//

def ET_AllReduceOp : ET_Op<"allreduce", [HasParent<"KernelOp">, AllTypesMatch<["after", "done"]>,
    MemoryEffects<[MemRead<DefaultResource>, MemWrite<DefaultResource>]>]> {
  let summary = "adds every device's partial sums into a buffer, per event element";
  let description = [{
    A sum across the devices of a multi-device kernel, stated at kernel
    level. `%partial` is a symmetric kernel argument (f32, [R, C]) into which
    the tasks that signal `%after` write partial sums. For each element `e`
    of `%after`, once every device's signals of `after[e]` have arrived,
    `%into[0:rows, 0:C] += partial_0 + ... + partial_{N-1}` (in device
    order, so every device adds the same bits), and element `e` of `%done`
    (an event of the same shape) receives one signal per column block of
    `block` columns. Tasks that need the sum wait on `%done`.

    Example (one all-reduce per layer of a row-parallel `o`):

    ```mlir
    %o = et.event.create() : !et.event<32>
    %o_sum = et.event.create() : !et.event<32>
    et.task @o tiles(%l, %t) in (%c32, %c64) {
      ...                                   // writes its rows of %part_o
      et.event.signal %o[%l] : !et.event<32>
    }
    et.allreduce %part_o into %h rows(%batch) after %o signal %o_sum block(512)
        : memref<16x4096xf32>, memref<?x4096xf32>, !et.event<32>
    et.task @mlp tiles(%l, %t) in (%c32, %c64) {
      et.event.wait %o_sum[%l] : !et.event<32>
      ...
    }
    ```

    `et-lower-collectives` turns it into a task and signals: the signals of
    `%after` go to every device (`peer(k)`, k = 0..N-1), and a task over
    (the elements of `%after`, column blocks) waits on `after[e]`, reads
    every device's `%partial` through `et.peer`, adds into `%into`, and
    signals `done[e]`. On one device it adds the one partial. The task is
    named `task` when given, else `allreduce_<i>`.
  }];
  let arguments = (ins AnyMemRef:$partial, AnyMemRef:$into, Index:$rows, ET_EventType:$after,
                       ET_EventType:$done, ConfinedAttr<I64Attr, [IntPositive]>:$block,
                       OptionalAttr<StrAttr>:$task);
  let assemblyFormat = [{
    $partial `into` $into `rows` `(` $rows `)` `after` $after `signal` $done `block` `(` $block `)` attr-dict `:`
    type($partial) `,` type($into) `,` qualified(type($after))
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Runtime extents
//===----------------------------------------------------------------------===//

def ET_ExtentLoadOp : ET_Op<"extent.load", [
    HasParent<"KernelOp">, AttrSizedOperandSegments,
    MemoryEffects<[MemRead<DefaultResource>]>]> {
  let summary = "reads a tile extent from memory on the device";
  let description = [{
    Reads an integer from `source[indices]` on the device and returns it as
    an `index`, for use as a task extent (for example, the number of tokens
    routed to one expert). With `after`, the value is read only once element
    `after_indices` of the event `after_event` is ready, so a task of the same
    kernel may compute it; without `after`, it is read at kernel start.
    Expected counts that depend on it are known only on the device.

    Example:

    ```mlir
    %n = et.extent.load %counts[%c3] : memref<8xi32> after %routed[] : !et.event<>
    ```

    Lowering: an acquire wait on the event element, then a load, evaluated by
    the worker that enumerates the dependent task's tiles.
  }];
  let arguments = (ins AnyMemRef:$source, Variadic<Index>:$indices,
                       Optional<ET_EventType>:$after_event,
                       Variadic<Index>:$after_indices);
  let results = (outs Index:$result);
  let assemblyFormat = [{
    $source `[` $indices `]` `:` type($source)
    (`after` $after_event^ `[` $after_indices `]` `:` qualified(type($after_event)))?
    attr-dict
  }];
  let hasVerifier = 1;
}


//===----------------------------------------------------------------------===//
// Steps: one launch runs the kernel's tasks many times
//===----------------------------------------------------------------------===//

def ET_RepeatOp : ET_Op<"repeat", [
    HasParent<"KernelOp">, MemoryEffects<[MemRead<DefaultResource>]>]> {
  let summary = "runs the kernel's tasks as a sequence of steps in one launch";
  let description = [{
    With `et.repeat`, one launch runs every task of the kernel `count` times
    at most: steps 0, 1, ..., each step all tiles of every task, as a kernel
    without it runs them once. Every event has one copy per step: a wait in
    step `s` waits for the signals of step `s`. Inside a task body,
    `et.step` is the step that runs.

    Step `s + 1` starts, on every worker, once element `[]` of `after` (a
    rank-0 event) has received all its signals of step `s`; then the launch
    ends instead if the word `stop[0]` is nonzero. So the tasks that signal
    `after` decide, on the device, whether another step runs (a decode step
    that sampled the last token of every sequence). Every task must precede
    `after` through the event graph (`et-verify-event-graph` checks it): a
    step then ends only when all of its tiles have, so nothing of step
    `s + 1` overlaps step `s`, and data that step `s` writes (the sampled
    tokens, advanced positions) is what step `s + 1` reads.

    Example:

    ```mlir
    %done = et.event.create : !et.event<>
    et.repeat %steps until %stop after %done : memref<1xi32>, !et.event<>
    et.task @advance tiles(%i) in (%c1) {
      %s = et.step
      ...
      et.event.signal %done[] : !et.event<>
    }
    ```

    Lowering: a loop over steps around the worker's program (a static
    schedule; a dynamic one numbers its tickets across steps); the counters of a launch keep counting across its steps, and
    a wait of step `s` waits for `s + 1` times the element's count. Event
    counts must not depend on data read on the device.

    On several devices (`devices = N`), `after` must be signalled on every
    device: its signals' peer offsets (constants) cover 0 .. N-1, so a step
    ends on a device only once every device's tasks have signalled it, and
    no copy starts step `s + 1` while another still runs step `s`. Each
    copy reads its own `stop` word; the tasks that signal `after` must make
    every copy read the same value (write the same decision everywhere, or
    write it into the other copies through `et.peer` before signalling).
  }];
  let arguments = (ins Index:$count, MemRefRankOf<[I32], [1]>:$stop, ET_EventType:$after);
  let assemblyFormat = [{
    $count `until` $stop `after` $after attr-dict `:` type($stop) `,` qualified(type($after))
  }];
  let hasVerifier = 1;
}

def ET_StepOp : ET_PureOp<"step"> {
  let summary = "the step of an `et.repeat` kernel that is running";
  let description = [{
    In a task body of a kernel with `et.repeat`, the step (0, 1, ...) whose
    tile is running.

    Example:

    ```mlir
    %s = et.step
    ```
  }];
  let results = (outs Index:$result);
  let assemblyFormat = "attr-dict";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Threads of a worker
//===----------------------------------------------------------------------===//

def ET_ThreadIdOp : ET_PureOp<"thread_id"> {
  let summary = "the calling thread's id within its worker";
  let description = [{
    A tile body runs on every thread of its worker (a CTA on the GPU, one
    host thread on the CPU). `et.thread_id` is the calling thread's id in
    `0 .. et.num_threads - 1`; it is 0 on the CPU target. Side effects that
    must happen once per tile (an atomic update, a store of a reduced value)
    are guarded by `et.thread_id == 0` or partitioned by thread.

    Example:

    ```mlir
    %t = et.thread_id
    %first = arith.cmpi eq, %t, %c0 : index
    scf.if %first { memref.atomic_rmw addi %v, %acc[%i] : (i64, memref<?xi64>) -> i64 }
    ```
  }];
  let results = (outs Index:$result);
  let assemblyFormat = "attr-dict";
  let hasVerifier = 1;
}

def ET_DeviceIdOp : ET_PureOp<"device_id"> {
  let summary = "the device this copy of the kernel runs on";
  let description = [{
    In a kernel with `devices = N`, the device (0 .. N-1) whose copy of the
    kernel is running; 0 in a kernel on one device. It may be used anywhere
    in the kernel: to address data (which slot of a symmetric buffer holds
    which device's contribution) or in event indices (the counts of such an
    event are then only known on the device). A `peer` offset of
    `et.event.signal` must not depend on it.

    Example:

    ```mlir
    %d = et.device_id
    ```

    Lowering: a kernel parameter that the runtime sets per device.
  }];
  let results = (outs Index:$result);
  let assemblyFormat = "attr-dict";
  let hasVerifier = 1;
}

def ET_PeerOp : ET_PureOp<"peer", [AllTypesMatch<["buffer", "result"]>]> {
  let summary = "another device's copy of a symmetric buffer";
  let description = [{
    `et.peer %buf[%k]` is the copy of kernel argument `%buf` (marked
    `{et.symmetric}`) on device `(et.device_id + k) mod N`, with the same
    type, shape and strides. Tile ops read and write it like any memref; the
    accesses go to that device's memory (peer-to-peer on the GPU). Writes
    become visible on that device to the tiles that wait on an event the
    writing tile signals afterwards with `peer(%k)`.

    Example:

    ```mlir
    %remote = et.peer %inbox[%c1] : memref<2x4096xbf16>
    ```

    Lowering: the runtime passes every device's copy of each symmetric
    buffer; the op selects one by the device number.
  }];
  let arguments = (ins AnyMemRef:$buffer, Index:$offset);
  let results = (outs AnyMemRef:$result);
  let assemblyFormat = "$buffer `[` $offset `]` attr-dict `:` type($buffer)";
  let hasVerifier = 1;
}

def ET_NumThreadsOp : ET_PureOp<"num_threads"> {
  let summary = "the number of threads of a worker";
  let description = [{
    The number of threads that run each tile body: the CTA size on the GPU,
    1 on the CPU target.

    Example:

    ```mlir
    %n = et.num_threads
    ```
  }];
  let results = (outs Index:$result);
  let assemblyFormat = "attr-dict";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Tile compute (their own file: the LLM tiles that et-lower-tile-ops lowers)
//===----------------------------------------------------------------------===//

include "EventTensor/Dialect/EventTensor/EventTensorTileOps.td"

//===----------------------------------------------------------------------===//
// Schedules
//===----------------------------------------------------------------------===//

def ET_ScheduleOp : ET_Op<"schedule", [
    HasParent<"KernelOp">, SingleBlock, NoTerminator]> {
  let summary = "assigns the kernel's tiles to persistent workers";
  let description = [{
    The presence of `et.schedule` (the last op of a kernel) makes a kernel
    *scheduled*. It records how the tiles of every task are assigned to
    `workers` persistent workers (one per SM by default), and the cost model
    the assignment was computed with.

    - `static`: the body holds one `et.worker` per worker, in id order; each
      lists, in execution order, the tiles it runs (`et.run`). A task whose
      tile count is known at compile time has its tiles listed; a task whose
      count is known only at run time is distributed by a formula of the
      tile id, the runtime count and the worker count (`cyclic`). Every
      worker's list is a subsequence of one topological order of the tile
      graph, so no worker waits on a tile that is behind it in its own list,
      and no set of workers can wait on each other in a cycle.
    - `dynamic`: the body lists the tasks (`et.run` without tiles) in a
      topological order. Workers take tiles from a device queue in that
      order (all tiles of the first task in row-major order, then the
      second, ...) through one atomic ticket counter.

    Example:

    ```mlir
    et.schedule static workers(2) {
      et.worker 0 {
        et.run @norm tiles [0]
        et.run @proj tiles [0, 2]
        et.run @attn cyclic 0
      }
      et.worker 1 {
        et.run @proj tiles [1, 3]
        et.run @attn cyclic 0
      }
    }
    et.schedule dynamic workers(132) {
      et.run @norm
      et.run @proj
      et.run @attn
    }
    ```
  }];
  let arguments = (ins ET_ScheduleKindAttr:$kind,
                       ConfinedAttr<I64Attr, [IntMinValue<1>]>:$workers,
                       OptionalAttr<ET_CostModelAttr>:$cost_model);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    custom<ScheduleKind>($kind) `workers` `(` $workers `)` attr-dict-with-keyword $body
  }];
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
  let skipDefaultBuilders = 1;
  let builders = [OpBuilder<(ins "ScheduleKind":$kind, "int64_t":$workers)>];
  let extraClassDeclaration = [{
    bool isStatic() { return getKind() == ScheduleKind::Static; }
    KernelOp getKernel() { return cast<KernelOp>((*this)->getParentOp()); }
  }];
}

def ET_WorkerOp : ET_Op<"worker", [
    HasParent<"ScheduleOp">, SingleBlock, NoTerminator]> {
  let summary = "the ordered tile list of one persistent worker";
  let description = [{
    The tiles one worker of a static schedule runs, in order (`et.run` ops).

    Example:

    ```mlir
    et.worker 3 {
      et.run @proj tiles [3, 7]
      et.run @attn cyclic 1
    }
    ```
  }];
  let arguments = (ins ConfinedAttr<I64Attr, [IntNonNegative]>:$id);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$id attr-dict-with-keyword $body";
  let skipDefaultBuilders = 1;
  let builders = [OpBuilder<(ins "int64_t":$id)>];
}

def ET_RunOp : ET_Op<"run", [
    ParentOneOf<["WorkerOp", "ScheduleOp"]>,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "runs tiles of a task in a schedule";
  let description = [{
    One entry of a schedule: tiles of the task `task`.

    - `tiles [t0, t1, ...]` (in `et.worker`): these linear tile ids
      (row-major over the task's extents), in order.
    - `cyclic k` (in `et.worker`): a runtime tile count `n` is split over the
      `W` workers by a formula: worker `w` runs tiles
      `t = (w - k) mod W, t + W, t + 2W, ... < n`, that is, tile `t` runs on
      worker `(t + k) mod W`. Every worker of the schedule has this entry at
      the same place of its order.
    - no tiles (in a `dynamic` `et.schedule`): all tiles of the task, taken
      from the device queue in row-major order.

    Example:

    ```mlir
    et.run @proj tiles [0, 4]
    et.run @attn cyclic 3
    et.run @merge
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$task,
                       OptionalAttr<DenseI64ArrayAttr>:$tiles,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$cyclic);
  let assemblyFormat = [{
    $task (`tiles` $tiles^)? (`cyclic` $cyclic^)? attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The scheduled task (resolved in the enclosing kernel).
    TaskOp getTaskOp();
  }];
}

#endif // EVENTTENSOR_DIALECT_EVENTTENSOR_EVENTTENSOROPS_TD
