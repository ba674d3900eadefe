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
// Tile compute
//===----------------------------------------------------------------------===//

def ET_LinearOp : ET_Op<"linear", [AttrSizedOperandSegments,
    MemoryEffects<[MemRead<DefaultResource>, MemWrite<DefaultResource>]>]> {
  let summary = "a linear-layer tile: rows of y = x * w^T for a few tokens";
  let description = [{
    Computes, for every token `m` of `x` and every output row `n` in
    `[row0, row0 + rows)` that is below N:

    ```
    y[m, n] = sum_k float32(x[m, k]) * float32(w[n, k])
    ```

    `x` is `M x K` bf16 activations (M <= 16 tokens: decode and short
    prompts), `w` is `N x K` bf16 weights in the layout of a PyTorch
    `Linear` (out features x in features), and `y` is `M x N`, f32 or bf16
    (the f32 sum rounded to nearest even). Accumulation is in f32. With
    `accumulate`, the sum is added to what `y` holds (`y[m, n] += ...`, f32
    `y` only): a residual connection in the same pass, with no other tile
    writing those rows. With `accumulate atomic`, each add into `y` is an
    atomic f32 add, so tiles that share rows may add into them at once: a
    split over K, each tile taking a block of x's columns and of w's (a
    view), the partial sums meeting in `y`. The adds then land in the
    order the hardware takes them, so the low bits of `y` may differ from
    run to run. With `gated(%wu)` (`wu` shaped as `w`), a gated MLP's
    activation in the same pass:

    ```
    y[m, n] = silu(sum_k x[m, k] * w[n, k]) * (sum_k x[m, k] * wu[n, k])
    ```

    with `et.silu_mul`'s SiLU, so the result has the bits of two linear
    layers into f32 and `et.silu_mul` after them, without their round trip
    through memory.

    With `norm(%g) eps(e)` (`g` a K-element bf16 vector), x is the f32
    residual stream and the op reads it through an RMSNorm with weights
    `g`, folded into the sums: the inverse RMS of a token is one scalar,
    so it multiplies the finished sums instead of every element of x:

    ```
    r[m] = 1 / sqrt(sum_k x[m, k]^2 / K + eps)
    y[m, n] = r[m] * sum_k bf16(x[m, k] * float32(g[k])) * float32(w[n, k])
    ```

    (both sums of a gated op are scaled by `r[m]` before the activation).
    `x * g` is rounded to bf16 as an activation would be; `et.rmsnorm` into
    a bf16 buffer, then `et.linear`, rounds `x * r * g` instead, so the two
    agree to that rounding. The lowering needs no buffer for the normalized
    rows and at most one barrier (docs/lowering.md). The op runs on all threads of the worker, which
    split the rows and the reduction between them; it sits in an `et.task`
    body, typically with one task tile per block of rows.

    Lowering (`et-lower-tile-ops`): on the GPU, one warp per row, each lane
    reading 16 bytes of the row per load with `unroll` loads in flight, and
    a warp butterfly (`gpu.shuffle xor`) to sum the lanes; a short row (a
    static K of at most 256) instead takes K / 8 lanes (rounded up to a
    power of two), so that a warp covers several rows per load and every
    thread's loads of the tile go out together (before the task's first
    wait where they can). With the pass's
    `linear=stream` and K a multiple of 256, each warp instead streams the
    weights of all its rows as one software-pipelined sequence (the next
    group's loads before the current group's multiply-adds, across row
    ends), tokens in groups of up to four accumulators; it measured slower
    than the default in the decode step. On the CPU, scalar loops.

    Example:

    ```mlir
    %row0 = arith.muli %tile, %c16 : index
    et.linear %x, %w, %y rows(%row0, %c16)
        : memref<1x2048xbf16>, memref<8192x2048xbf16>, memref<1x8192xf32>
    // the residual stream h += attn * wo^T
    et.linear %attn, %wo, %h rows(%row0, %c16) accumulate
        : memref<1x2048xbf16>, memref<2048x2048xbf16>, memref<1x2048xf32>
    // one query head's part of it (split K: every head's tiles add into h)
    et.linear %head, %wo_head, %h rows(%row0, %c128) accumulate atomic
        : memref<1x64xbf16>, memref<2048x64xbf16, strided<[2048, 1], offset: ?>>, memref<1x2048xf32>
    // the gated MLP's activation: silu(x wg^T) * (x wu^T)
    et.linear %x, %wg, %act rows(%row0, %c16) gated(%wu)
        : memref<1x2048xbf16>, memref<8192x2048xbf16>, memref<1x8192xbf16>, memref<8192x2048xbf16>
    // q, k and v rows from the normalized residual stream h
    et.linear %h, %wqkv, %qkv rows(%row0, %c32) norm(%ln1 : memref<1024xbf16>) eps(1.0e-06)
        : memref<1x1024xf32>, memref<4096x1024xbf16>, memref<1x4096xf32>
    ```
  }];
  let arguments = (ins Arg<MemRefRankOf<[BF16, F32], [2]>, "", [MemRead]>:$x,
                       Arg<MemRefRankOf<[BF16], [2]>, "", [MemRead]>:$w,
                       Arg<MemRefRankOf<[BF16, F32], [2]>, "", [MemRead, MemWrite]>:$y,
                       Index:$row0, Index:$rows, UnitAttr:$accumulate, UnitAttr:$atomic,
                       Arg<Optional<MemRefRankOf<[BF16], [2]>>, "", [MemRead]>:$gated,
                       Arg<Optional<MemRefRankOf<[BF16], [1]>>, "", [MemRead]>:$norm,
                       OptionalAttr<F32Attr>:$eps);
  let assemblyFormat = [{
    $x `,` $w `,` $y `rows` `(` $row0 `,` $rows `)` (`accumulate` $accumulate^)? (`atomic` $atomic^)?
    (`gated` `(` $gated^ `)`)? (`norm` `(` $norm^ `:` type($norm) `)`)? (`eps` `(` $eps^ `)`)? attr-dict `:`
    type($x) `,` type($w) `,` type($y) (`,` type($gated)^)?
  }];
  let hasVerifier = 1;
}

def ET_MatmulOp : ET_Op<"matmul", [AttrSizedOperandSegments,
    MemoryEffects<[MemRead<DefaultResource>, MemWrite<DefaultResource>]>]> {
  let summary = "a GEMM tile on tensor cores: a block of y = x * w^T for many tokens";
  let description = [{
    Computes one `BM x BN` block of `y = x * w^T`, `tile = [BM, BN, BK]`:
    for every token `m` in `[m0, m0 + BM)` below M and every output row `n`
    in `[n0, n0 + BN)` below N,

    ```
    y[m, n] = sum_k float32(x[m, k]) * float32(w[n, k])
    ```

    `x` is `M x K` bf16 activations (any number of tokens: prefill), `w` is
    `N x K` bf16 weights in the layout of a PyTorch `Linear`, `y` is `M x N`,
    f32 or bf16 (rounded to nearest even). Accumulation is in f32. With
    `accumulate`, the block is added to what `y` holds (f32 `y` only). K is
    static and a multiple of 8, so every row starts 16-byte aligned.

    With `k(%k0, %k1)` the sum only runs over `k` in `[k0, min(k1, K))`
    (split-K: several tiles each take a part of K, and their partial blocks
    are summed by another task); `k0` and `k1` are multiples of 8 (checked
    when constant), and an empty range gives zeros.

    With `gated(%up)` (an `N x K` weight like `w`), the tile is the gated
    MLP's first half: `BN / 2` output columns `n` in `[n0, n0 + BN / 2)`,

    ```
    y[m, n] = silu(sum_k x[m, k] w[n, k]) * (sum_k x[m, k] up[n, k])
    ```

    with `silu(g) = g / (1 + exp(-g))`: the tile multiplies `BN / 2` rows of
    each weight, and the activation is applied to the f32 accumulators
    before `y` is written (no `accumulate`). The op
    runs on all threads of the worker and sits in an `et.task` body,
    typically with one task tile per block.

    The tile shape is a tuning parameter: `BM` and `BN` multiples of 16 up
    to 256, `BK` a multiple of 16 up to 128; `stages` (1 to 8, default 3)
    is how many `BK`-slices of x and w the ring holds. The warp and
    warpgroup layouts are documented in docs/lowering.md.

    Lowering (`et-lower-tile-ops`): on the GPU, a `stages`-deep ring of
    x and w slices in dynamic shared memory, filled with `cp.async`
    (out-of-range rows and columns zero-filled). With `mma=wgmma` (the
    default) and BK = 64, BM a multiple of 64 and at least 3 stages, each
    warpgroup multiplies a 64-row sub-block with `wgmma.mma_async` straight
    from the (128-byte swizzled) slices; otherwise each warp owns a
    sub-block, reads its operands with `ldmatrix` and multiplies with
    `mma.sync.m16n8k16`. Both accumulate in f32 registers. On the CPU,
    scalar loops.

    Example:

    ```mlir
    %m0 = arith.muli %tm, %c128 : index
    %n0 = arith.muli %tn, %c128 : index
    et.matmul %x, %w, %y at(%m0, %n0) tile [128, 128, 32] stages 4
        : memref<?x2048xbf16>, memref<8192x2048xbf16>, memref<?x8192xbf16>
    // the second quarter of K = 8192, into an f32 partial block
    et.matmul %x, %w, %part at(%m0, %n0) k(%c2048, %c4096) tile [128, 128, 64] stages 4
        : memref<?x8192xbf16>, memref<2048x8192xbf16>, memref<?x2048xf32>
    // silu(x wg^T) * (x wu^T), 128 output columns from 128 rows of each weight
    et.matmul %x, %wg, %act at(%m0, %n0) gated(%wu : memref<8192x2048xbf16>) tile [128, 256, 64] stages 4
        : memref<?x2048xbf16>, memref<8192x2048xbf16>, memref<?x8192xbf16>
    ```
  }];
  let arguments = (ins Arg<MemRefRankOf<[BF16], [2]>, "", [MemRead]>:$x,
                       Arg<MemRefRankOf<[BF16], [2]>, "", [MemRead]>:$w,
                       Arg<MemRefRankOf<[BF16, F32], [2]>, "", [MemRead, MemWrite]>:$y,
                       Index:$m0, Index:$n0, Variadic<Index>:$k_range,
                       Arg<Optional<MemRefRankOf<[BF16], [2]>>, "", [MemRead]>:$up,
                       DenseI64ArrayAttr:$tile,
                       DefaultValuedAttr<I64Attr, "3">:$stages,
                       UnitAttr:$accumulate);
  let assemblyFormat = [{
    $x `,` $w `,` $y `at` `(` $m0 `,` $n0 `)` (`k` `(` $k_range^ `)`)? (`gated` `(` $up^ `:` type($up) `)`)?
    `tile` $tile (`stages` $stages^)? (`accumulate` $accumulate^)?
    attr-dict `:` type($x) `,` type($w) `,` type($y)
  }];
  let hasVerifier = 1;
}

def ET_PrefetchOp : ET_Op<"prefetch", [
    MemoryEffects<[MemRead<DefaultResource>]>]> {
  let summary = "a hint: rows of a matrix will be read soon (L2 prefetch)";
  let description = [{
    Rows `[row0, row0 + rows)` of the row-major matrix `w` (`N x K`, rows
    contiguous: unit inner stride and a row stride of K), clamped to `N`,
    are about to be read by some tile. On the GPU, thread 0 of the worker
    issues one bulk prefetch of those bytes into L2
    (`cp.async.bulk.prefetch.L2`) and nobody waits for it; on the CPU the op
    does nothing. It changes no value: a task of prefetches lets workers
    that would otherwise idle (during a latency-bound phase) start the
    memory traffic of a later bandwidth-bound phase.

    Example:

    ```mlir
    et.prefetch %wg rows(%r0, %c64) : memref<8192x2048xbf16, strided<[2048, 1], offset: ?>>
    ```
  }];
  let arguments = (ins Arg<MemRefRankOf<[BF16, F16, F32], [2]>, "", [MemRead]>:$w,
                       Index:$row0, Index:$rows);
  let assemblyFormat = [{
    $w `rows` `(` $row0 `,` $rows `)` attr-dict `:` type($w)
  }];
  let hasVerifier = 1;
}

def ET_StagedRowsOp : ET_Op<"staged_rows", [
    MemoryEffects<[MemRead<DefaultResource>]>]> {
  let summary = "the first rows of a weight tile, if the worker staged them in shared memory";
  let description = [{
    A tile's weights never depend on earlier tasks, so a worker may copy
    them into its shared memory while it is still busy with the tile before
    (staging across tiles). This op says which of them are there: rows
    `[row0, row0 + count)` of the row-major matrix `w` (`N x K`, rows
    contiguous) are rows `[0, count)` of `view`, complete when the op
    returns. `count` is `min(R, rows, N - row0)` (at least 0), where `R` is
    the leading size of `view`, when the worker's schedule staged this tile;
    otherwise it is 0 and `view` must not be read. The op holds no data of
    its own: the tile reads rows below `count` from `view` and the others
    from `w`.

    `offset` is where the view starts in the worker's staging region
    (bytes, a multiple of 16): the staged ops of one task lie side by side.
    The tile lowering (`et-lower-tile-ops` with `stage-bytes`) creates it
    for `et.linear` on the GPU, at the task's top level, with `w`, `row0`
    and `rows` computed from the tile coordinates alone. The GPU worker
    lowering (`convert-et-to-nvvm`, static schedules) decides which tiles
    are staged: in each worker's program, the entry before a single tile
    issues the tile's copy at its own start, before its own waits, with one
    bulk copy (`cp.async.bulk`) per op completing on an mbarrier, which this
    op waits on. The host worker lowering rejects it (shared memory exists
    on the GPU only). The model's one-row decode kernels stage the rows of
    their `mlp` and `down` tiles (and `qkv` for hidden sizes up to 1024);
    docs/lowering.md, "Weights staged across tiles", has the measurements.

    Example:

    ```mlir
    %view, %count = et.staged_rows %w rows(%row0, %c48) offset 0
        : memref<3072x1024xbf16, strided<[1024, 1], offset: ?>>
          -> memref<48x1024xbf16, #gpu.address_space<workgroup>>
    ```
  }];
  let arguments = (ins Arg<MemRefRankOf<[BF16], [2]>, "", [MemRead]>:$w,
                       Index:$row0, Index:$rows, I64Attr:$offset);
  let results = (outs MemRefRankOf<[BF16], [2]>:$view, Index:$count);
  let assemblyFormat = [{
    $w `rows` `(` $row0 `,` $rows `)` `offset` $offset attr-dict `:` type($w) `->` type($view)
  }];
  let hasVerifier = 1;
}

def ET_SiluMulOp : ET_Op<"silu_mul", [
    MemoryEffects<[MemRead<DefaultResource>, MemWrite<DefaultResource>]>]> {
  let summary = "the gated MLP activation: y = silu(gate) * up";
  let description = [{
    For every token `m` and column `j` in `[col0, col0 + cols)` below H:

    ```
    y[m, j] = silu(gate[m, j]) * up[m, j],   silu(g) = g / (1 + exp(-g))
    ```

    computed in f32 from bf16 or f32 inputs and rounded to `y`'s element
    type. All threads of the worker split the columns.

    Example:

    ```mlir
    et.silu_mul %gate, %up, %y cols(%c0, %c8192) : memref<1x8192xf32>, memref<1x8192xf32>, memref<1x8192xbf16>
    ```
  }];
  let arguments = (ins Arg<MemRefRankOf<[BF16, F32], [2]>, "", [MemRead]>:$gate,
                       Arg<MemRefRankOf<[BF16, F32], [2]>, "", [MemRead]>:$up,
                       Arg<MemRefRankOf<[BF16, F32], [2]>, "", [MemWrite]>:$y,
                       Index:$col0, Index:$cols);
  let assemblyFormat = [{
    $gate `,` $up `,` $y `cols` `(` $col0 `,` $cols `)` attr-dict `:`
    type($gate) `,` type($up) `,` type($y)
  }];
  let hasVerifier = 1;
}

def ET_RMSNormOp : ET_Op<"rmsnorm", [
    MemoryEffects<[MemRead<DefaultResource>, MemWrite<DefaultResource>]>]> {
  let summary = "RMSNorm of token rows, optionally fused with the residual add";
  let description = [{
    For every token `m` of `x` (`M x H`):

    ```
    h = x[m, :] (+ residual[m, :] when `residual` is given; h is then
        stored back into residual, the new residual stream)
    y[m, :] = h / sqrt(mean(h * h) + eps) * w
    ```

    in f32, from bf16 or f32 inputs, rounded to `y`'s element type. `w` is
    the `H` weights. On the GPU one warp handles a token (shuffle-butterfly
    sum of squares); on the CPU, loops.

    Example:

    ```mlir
    et.rmsnorm %x, %w, %y eps(1.0e-05) residual(%res)
        : memref<1x2048xbf16>, memref<2048xbf16>, memref<1x2048xbf16>, memref<1x2048xf32>
    ```
  }];
  let arguments = (ins Arg<MemRefRankOf<[BF16, F32], [2]>, "", [MemRead]>:$x,
                       Arg<MemRefRankOf<[BF16, F32], [1]>, "", [MemRead]>:$w,
                       Arg<MemRefRankOf<[BF16, F32], [2]>, "", [MemWrite]>:$y,
                       Optional<MemRefRankOf<[F32], [2]>>:$residual,
                       F32Attr:$eps);
  let assemblyFormat = [{
    $x `,` $w `,` $y `eps` `(` $eps `)` (`residual` `(` $residual^ `)`)? attr-dict `:`
    type($x) `,` type($w) `,` type($y) (`,` type($residual)^)?
  }];
  let hasVerifier = 1;
}

def ET_EmbeddingOp : ET_Op<"embedding", [
    MemoryEffects<[MemRead<DefaultResource>, MemWrite<DefaultResource>]>]> {
  let summary = "embedding gather: y[m, :] = table[ids[m], :]";
  let description = [{
    Copies the row `ids[m]` of `table` (`V x H`) into row `m` of `y`
    (`M x H`), converting the element type (bf16 or f32). An id outside
    `[0, V)` yields a row of zeros. All threads of the worker split the
    columns.

    Example:

    ```mlir
    et.embedding %table, %ids, %h : memref<128256x2048xbf16>, memref<1xi32>, memref<1x2048xf32>
    ```
  }];
  let arguments = (ins Arg<MemRefRankOf<[BF16, F32], [2]>, "", [MemRead]>:$table,
                       Arg<MemRefRankOf<[I32, I64, Index], [1]>, "", [MemRead]>:$ids,
                       Arg<MemRefRankOf<[BF16, F32], [2]>, "", [MemWrite]>:$y);
  let assemblyFormat = [{
    $table `,` $ids `,` $y attr-dict `:` type($table) `,` type($ids) `,` type($y)
  }];
  let hasVerifier = 1;
}

def ET_KVAppendOp : ET_Op<"kv_append", [
    MemoryEffects<[MemRead<DefaultResource>, MemWrite<DefaultResource>]>]> {
  let summary = "appends the new tokens' keys or values to a KV cache";
  let description = [{
    `cache[position + m, h, d] = new[m, h, d]` for every token `m` of `new`
    (`M x Hkv x D`), into `cache` (`S x Hkv x D`), converting the element
    type. Positions at or past S are not written. All threads split the
    elements.

    Example:

    ```mlir
    et.kv_append %k, %kcache, %pos : memref<1x8x64xf32>, memref<8192x8x64xbf16>
    ```
  }];
  let arguments = (ins Arg<MemRefRankOf<[BF16, F32], [3]>, "", [MemRead]>:$new_values,
                       Arg<MemRefRankOf<[BF16, F32], [3]>, "", [MemWrite]>:$cache,
                       Index:$position);
  let assemblyFormat = [{
    $new_values `,` $cache `,` $position attr-dict `:` type($new_values) `,` type($cache)
  }];
  let hasVerifier = 1;
}

def ET_RoPEOp : ET_Op<"rope", [
    MemoryEffects<[MemRead<DefaultResource>, MemWrite<DefaultResource>]>]> {
  let summary = "rotary position embedding, in place (Llama-3 and Qwen3)";
  let description = [{
    Rotates, in place, every head of `x` (`M x heads x D`, D even) by the
    angle `positions[m] * inv_freq[i]` for the pair (i, i + D/2), the
    "rotate half" form of both families:

    ```
    x[i]       = x[i] * cos - x[i + D/2] * sin
    x[i + D/2] = x[i + D/2] * cos + x[i] * sin
    inv_freq[i] = theta ^ (-2i / D)
    ```

    Qwen3: `theta` (1e6) alone. Llama-3: with `llama3_scaling = [factor,
    low_freq_factor, high_freq_factor, original_max_position]` (32, 1, 4,
    8192 for Llama-3.2), frequencies whose wavelength exceeds
    `original_max_position / low_freq_factor` are divided by `factor`,
    those below `original_max_position / high_freq_factor` are kept, and
    the ones between are interpolated smoothly. Computed in f32.

    Example:

    ```mlir
    et.rope %q, %pos theta(5.0e+05) llama3_scaling([32.0, 1.0, 4.0, 8192.0]) : memref<1x32x64xf32>, memref<1xi32>
    ```
  }];
  let arguments = (ins Arg<MemRefRankOf<[BF16, F32], [3]>, "", [MemRead, MemWrite]>:$x,
                       Arg<MemRefRankOf<[I32, I64, Index], [1]>, "", [MemRead]>:$positions,
                       F32Attr:$theta,
                       OptionalAttr<DenseF32ArrayAttr>:$llama3_scaling);
  let assemblyFormat = [{
    $x `,` $positions `theta` `(` $theta `)` (`llama3_scaling` `(` $llama3_scaling^ `)`)? attr-dict
    `:` type($x) `,` type($positions)
  }];
  let hasVerifier = 1;
}

def ET_RoPEIntoOp : ET_Op<"rope_into", [
    MemoryEffects<[MemRead<DefaultResource>, MemWrite<DefaultResource>]>]> {
  let summary = "per-head RMSNorm (optional) and RoPE of x, stored into a row of out";
  let description = [{
    For every token `m` and head `h` of `x` (`M x heads x D`, D even):

    ```
    v = x[m, h, :]
    v = v / sqrt(mean(v * v) + eps) * w        (with `norm(%w)`)
    out[row + m, h, :] = rope(v, positions[m])  (rows at or past out's first
                                                 dimension are not written)
    ```

    in f32, rounded to `out`'s element type. `rope` is `et.rope`'s rotation
    (same `theta` and `llama3_scaling`). `out` (`S x heads x D`) may be `x`
    itself with `row` 0 (in place), or a KV cache with `row` the token's
    position: the decode step's query heads are normalized and rotated in
    place, and its key head normalized, rotated and appended, each with one
    read of `x` and one write (`et.rmsnorm`, `et.rope` and `et.kv_append`
    one after another take a round trip to memory each). On the GPU one
    warp handles a (token, head), lane l the pairs (i, i + D/2) with
    i = l mod 32; on the CPU, loops.

    Example:

    ```mlir
    // Qwen3's key head of the decode step, appended at position %p
    et.rope_into %k, %pos, %kcache[%p] theta(1.0e+06) norm(%kn) eps(1.0e-06)
        : memref<1x1x128xf32>, memref<1xi32>, memref<4096x1x128xbf16>, memref<128xbf16>
    ```
  }];
  let arguments = (ins Arg<MemRefRankOf<[BF16, F32], [3]>, "", [MemRead]>:$x,
                       Arg<MemRefRankOf<[I32, I64, Index], [1]>, "", [MemRead]>:$positions,
                       Arg<MemRefRankOf<[BF16, F32], [3]>, "", [MemWrite]>:$out,
                       Index:$row,
                       Optional<MemRefRankOf<[BF16, F32], [1]>>:$norm,
                       F32Attr:$theta,
                       OptionalAttr<F32Attr>:$eps,
                       OptionalAttr<DenseF32ArrayAttr>:$llama3_scaling);
  let assemblyFormat = [{
    $x `,` $positions `,` $out `[` $row `]` `theta` `(` $theta `)`
    (`norm` `(` $norm^ `)`)? (`eps` `(` $eps^ `)`)?
    (`llama3_scaling` `(` $llama3_scaling^ `)`)? attr-dict
    `:` type($x) `,` type($positions) `,` type($out) (`,` type($norm)^)?
  }];
  let hasVerifier = 1;
}

def ET_ArgmaxOp : ET_Op<"argmax", [
    MemoryEffects<[MemRead<DefaultResource>, MemWrite<DefaultResource>]>]> {
  let summary = "argmax of a column range of each token row (greedy decoding)";
  let description = [{
    For every token `m`, finds the largest `x[m, j]` over `j` in
    `[col0, col0 + cols)` (below the row length), ties to the smallest `j`,
    and writes its value to `values[m, slot]` and its index to
    `indices[m, slot]`. With `from(%idx)`, the index written is `idx[m, j]`
    instead of `j`: a second argmax over the per-tile results of a first
    one then yields the column of the whole vocabulary.

    Example:

    ```mlir
    // one tile per 4096 columns, then one tile over the partial results
    et.argmax %logits, %pv, %pi cols(%c0, %c4096) slot(%t) : memref<1x128256xf32>, memref<1x32xf32>, memref<1x32xi32>
    et.argmax %pv, %v, %i cols(%z, %c32) slot(%z) from(%pi) : memref<1x32xf32>, memref<1x1xf32>, memref<1x1xi32>, memref<1x32xi32>
    ```
  }];
  let arguments = (ins Arg<MemRefRankOf<[BF16, F32], [2]>, "", [MemRead]>:$x,
                       Arg<MemRefRankOf<[F32], [2]>, "", [MemWrite]>:$values,
                       Arg<MemRefRankOf<[I32], [2]>, "", [MemWrite]>:$indices,
                       Index:$col0, Index:$cols, Index:$slot,
                       Optional<MemRefRankOf<[I32], [2]>>:$from);
  let assemblyFormat = [{
    $x `,` $values `,` $indices `cols` `(` $col0 `,` $cols `)` `slot` `(` $slot `)`
    (`from` `(` $from^ `)`)? attr-dict `:` type($x) `,` type($values) `,` type($indices)
    (`,` type($from)^)?
  }];
  let hasVerifier = 1;
}

def ET_AttentionSplitOp : ET_Op<"attention_split", [AttrSizedOperandSegments,
    MemoryEffects<[MemRead<DefaultResource>, MemWrite<DefaultResource>]>]> {
  let summary = "decode attention of one KV head's query group over one split of the KV cache";
  let description = [{
    Grouped-query decode attention, split along the sequence. `q` is the
    current token's `Hq x D` queries, `k` and `v` the `S x Hkv x D` caches,
    G = Hq / Hkv query heads share KV head `kv_head`. The split covers
    positions `P = [split * split_len, min((split + 1) * split_len, len))`.
    For every query head `h` of the group:

    ```
    s_t = scale * sum_d q[h, d] * k[t, kv_head, d]       (t in P)
    o[split, h, :] = sum_t exp(s_t - max s) * v[t, kv_head, :] / sum_t exp(s_t - max s)
    lse[split, h] = max s + log(sum_t exp(s_t - max s))
    ```

    An empty split writes zeros and `lse = -inf`. With `subsplits = n`, the
    split's positions are further cut into n contiguous chunks of
    `ceildiv(split_len, n)`, and chunk j writes entry `split * n + j` of `o`
    and `lse` (so `o` holds splits * n entries). `et.attention_merge`
    combines all entries. On the GPU, with a static group size, D in {64,
    128, 256} and bf16 caches, one warp handles a chunk for all query heads
    of the group (each KV row read once), D/8 lanes per position with
    16-byte loads, an online softmax per lane and a shuffle merge; otherwise
    one warp per (query head, chunk) with lanes splitting D. More chunks
    keep more warps of a worker busy. On the CPU, loops.

    `stable(%n)` states that no task of the kernel writes the cache
    positions below `n` (the history from earlier kernel launches). It does
    not change the result; with `et-lower-tile-ops{kv-prefetch=shared}` the
    GPU lowering copies the split's K and V rows below `n` into shared
    memory before the task's first wait, so those loads overlap the wait.

    `append(%kn, %vn)` (with `stable`; `kn` and `vn` are `N x D`) gives
    the keys and values of the positions this step adds: position `t` in
    `[stable, min(len, stable + N))` has key `kn[t - stable]` and value
    `vn[t - stable]`, rounded to the caches' element type. The split that
    covers `t` writes them into the caches' row `t` (KV head `kv_head`)
    and attends over them; the other splits do not touch them. A tile can
    then rotate the step's key into shared memory (`et.rope_into` into a
    workgroup `memref.alloca`) and hand it straight to the attention: with
    the staged lowering below, the split that holds the row puts it into
    its stage from there instead of reading back from the cache what it
    has just written. The other lowerings write the rows into the caches
    first (a barrier) and read them from there.

    Example:

    ```mlir
    et.attention_split %q, %kc, %vc, %o, %lse kv_head(%g) split(%s) split_len(%c256) len(%n) scale(0.125)
        : memref<32x64xf32>, memref<8192x8x64xbf16>, memref<8192x8x64xbf16>, memref<?x32x64xf32>, memref<?x32xf32>
    // positions below %p were written before this launch
    et.attention_split %q, %kc, %vc, %o, %lse kv_head(%g) split(%s) split_len(%c256) len(%n) stable(%p) scale(0.125)
        : memref<32x64xf32>, memref<8192x8x64xbf16>, memref<8192x8x64xbf16>, memref<?x32x64xf32>, memref<?x32xf32>
    // and position %p itself is this step's key and value, appended here
    et.attention_split %q, %kc, %vc, %o, %lse kv_head(%g) split(%s) split_len(%c256) len(%n) stable(%p)
        append(%kn, %vn) scale(0.125)
        : memref<32x64xf32>, memref<8192x8x64xbf16>, memref<8192x8x64xbf16>, memref<?x32x64xf32>, memref<?x32xf32>,
          memref<1x64xf32, #gpu.address_space<workgroup>>, memref<1x64xf32, #gpu.address_space<workgroup>>
    ```
  }];
  // k and v are written only with `append`.
  let arguments = (ins Arg<MemRefRankOf<[BF16, F32], [2]>, "", [MemRead]>:$q,
                       Arg<MemRefRankOf<[BF16, F32], [3]>, "", [MemRead, MemWrite]>:$k,
                       Arg<MemRefRankOf<[BF16, F32], [3]>, "", [MemRead, MemWrite]>:$v,
                       Arg<MemRefRankOf<[F32], [3]>, "", [MemWrite]>:$o,
                       Arg<MemRefRankOf<[F32], [2]>, "", [MemWrite]>:$lse,
                       Index:$kv_head, Index:$split, Index:$split_len, Index:$len,
                       Optional<Index>:$stable,
                       Arg<Optional<MemRefRankOf<[BF16, F32], [2]>>, "", [MemRead]>:$new_k,
                       Arg<Optional<MemRefRankOf<[BF16, F32], [2]>>, "", [MemRead]>:$new_v,
                       F32Attr:$scale,
                       DefaultValuedAttr<ConfinedAttr<I64Attr, [IntMinValue<1>]>, "1">:$subsplits);
  let assemblyFormat = [{
    $q `,` $k `,` $v `,` $o `,` $lse `kv_head` `(` $kv_head `)` `split` `(` $split `)`
    `split_len` `(` $split_len `)` `len` `(` $len `)` (`stable` `(` $stable^ `)`)?
    (`append` `(` $new_k^ `,` $new_v `)`)? `scale` `(` $scale `)` attr-dict `:`
    type($q) `,` type($k) `,` type($v) `,` type($o) `,` type($lse) (`,` type($new_k)^ `,` type($new_v))?
  }];
  let hasVerifier = 1;
}

def ET_AttentionPrefillOp : ET_Op<"attention_prefill", [
    MemoryEffects<[MemRead<DefaultResource>, MemWrite<DefaultResource>]>]> {
  let summary = "causal attention of a block of prompt tokens over the KV cache (one KV head)";
  let description = [{
    Grouped-query causal attention for prefill. `q` and `o` are the
    prompt's `T x Hq x D` queries and outputs, `k` and `v` the
    `S x Hkv x D` caches, which already hold the prompt's keys and values
    (`et.kv_append`); token `t` of the prompt is at position `pos0 + t`.
    For the `block` tokens `t` in `[t0, min(t0 + block, T))` and the
    G = Hq / Hkv query heads `h` of KV head `kv_head`:

    ```
    s_j = scale * sum_d q[t, h, d] * k[j, kv_head, d]       (j in [0, pos0 + t])
    o[t, h, :] = sum_j exp(s_j - max s) * v[j, kv_head, :] / sum_j exp(s_j - max s)
    ```

    A task typically has one tile per (block of tokens, KV head). D is
    static and a multiple of 16; `q` (bf16, or f32 as RoPE leaves it; it
    is rounded to bf16 for the tensor cores) and `o` are bf16 or f32.

    Lowering (`et-lower-tile-ops`): on the GPU (D of 64 or 128, bf16
    caches, `block` x G a multiple of 16 that the worker's warps cover),
    flash-attention style on tensor cores: each warp owns 16 (token, head)
    rows; blocks of 64 cache positions of K and V go through shared memory
    (`cp.async`, double-buffered); scores `mma.sync` from q fragments in
    registers and K via `ldmatrix`, the causal mask and an online softmax
    in registers, and P (bf16) times V (`ldmatrix.trans`) into f32
    accumulators. Otherwise, and on the CPU, loops.

    Example:

    ```mlir
    %t0 = arith.muli %tb, %c16 : index
    et.attention_prefill %q, %kc, %vc, %o kv_head(%g) tokens(%t0) pos0(%p0) block(16) scale(0.125)
        : memref<?x32x64xbf16>, memref<8192x8x64xbf16>, memref<8192x8x64xbf16>, memref<?x32x64xbf16>
    ```
  }];
  let arguments = (ins Arg<MemRefRankOf<[BF16, F32], [3]>, "", [MemRead]>:$q,
                       Arg<MemRefRankOf<[BF16], [3]>, "", [MemRead]>:$k,
                       Arg<MemRefRankOf<[BF16], [3]>, "", [MemRead]>:$v,
                       Arg<MemRefRankOf<[BF16, F32], [3]>, "", [MemWrite]>:$o,
                       Index:$kv_head, Index:$t0, Index:$pos0,
                       ConfinedAttr<I64Attr, [IntMinValue<1>]>:$block,
                       F32Attr:$scale);
  let assemblyFormat = [{
    $q `,` $k `,` $v `,` $o `kv_head` `(` $kv_head `)` `tokens` `(` $t0 `)` `pos0` `(` $pos0 `)`
    `block` `(` $block `)` `scale` `(` $scale `)` attr-dict `:`
    type($q) `,` type($k) `,` type($v) `,` type($o)
  }];
  let hasVerifier = 1;
}

def ET_AttentionMergeOp : ET_Op<"attention_merge", [
    MemoryEffects<[MemRead<DefaultResource>, MemWrite<DefaultResource>]>]> {
  let summary = "log-sum-exp combine of split-KV attention partial results";
  let description = [{
    For every head `h` and element `d` of `out` (`Hq x D`), over the splits
    `s` of `o` (`splits x Hq x D`) and `lse` (`splits x Hq`):

    ```
    L = log(sum_s exp(lse[s, h]))
    out[h, d] = sum_s exp(lse[s, h] - L) * o[s, h, d]
    ```

    (zeros when every split is empty). A split whose `lse[s, h]` is -inf is
    empty: its `o[s, h, :]` is not read into the sum, whatever it holds (a
    producer with no positions marks its split so). All threads split the
    elements.

    Example:

    ```mlir
    et.attention_merge %o, %lse, %attn : memref<?x32x64xf32>, memref<?x32xf32>, memref<32x64xbf16>
    ```
  }];
  let arguments = (ins Arg<MemRefRankOf<[F32], [3]>, "", [MemRead]>:$o,
                       Arg<MemRefRankOf<[F32], [2]>, "", [MemRead]>:$lse,
                       Arg<MemRefRankOf<[BF16, F32], [2]>, "", [MemWrite]>:$out);
  let assemblyFormat = [{
    $o `,` $lse `,` $out attr-dict `:` type($o) `,` type($lse) `,` type($out)
  }];
  let hasVerifier = 1;
}

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
