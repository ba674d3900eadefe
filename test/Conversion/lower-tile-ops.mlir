// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu unroll=2}))" | FileCheck %s --check-prefix=GPU
// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=cpu}))" | FileCheck %s --check-prefix=CPU
// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu prefetch=l2}))" | FileCheck %s --check-prefix=PREFETCH
// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu prefetch=registers}))" | FileCheck %s --check-prefix=REGS
// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu}))" | FileCheck %s --check-prefix=ROWS
// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu prefetch=shared threads=256 prefetch-bytes=32768}))" | FileCheck %s --check-prefix=SHARED
// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu kv-prefetch=shared threads=256 prefetch-bytes=32768}))" | FileCheck %s --check-prefix=KVS
// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu kv-prefetch=shared threads=256 prefetch-bytes=32767}))" | FileCheck %s --check-prefix=KVSMALL
// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu threads=256 kv-mma-bytes=65536}))" | FileCheck %s --check-prefix=MMA
// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu threads=256 kv-mma-bytes=9215}))" | FileCheck %s --check-prefix=MMASMALL

// On the GPU target: a warp per row (rows strided by the number of warps),
// each lane issuing `unroll` 16-byte weight loads per step (K in steps of
// unroll x 256), then a remainder loop of one load per step; then a 5-step
// shuffle butterfly and a lane-0 store per row. On the CPU target: scalar
// loops.
// GPU-LABEL: et.kernel @gemv
// GPU: et.thread_id
// GPU: et.num_threads
// GPU: scf.for
// GPU: scf.for {{.*}} step %c512 iter_args({{.*}}) -> (vector<8xf32>)
// GPU-COUNT-2: vector.load %{{.*}} {alignment = 16 : i64} : memref<4096x1024xbf16>, vector<8xbf16>
// GPU: vector.load %{{.*}} : memref<1x1024xbf16>, vector<8xbf16>
// GPU: vector.fma
// GPU: scf.for {{.*}} step %c256 iter_args({{.*}}) -> (vector<8xf32>)
// GPU: vector.reduction <add>
// GPU-COUNT-5: gpu.shuffle  xor
// GPU: memref.store
// GPU-NOT: et.linear
// CPU-LABEL: et.kernel @gemv
// CPU: scf.for
// CPU: scf.for
// CPU: scf.for {{.*}} iter_args
// CPU: arith.extf
// CPU: arith.mulf
// CPU-NOT: vector.
// CPU-NOT: et.linear
// By default (linear=rows), the per-row loop even where K allows the stream.
// Groups of unroll = 4 chunks (1024 columns), then of 2 chunks (512) while
// whole ones remain, then one chunk (256) per step.
// ROWS-LABEL: et.kernel @gemv
// ROWS-NOT: -> (vector<8xf32>, vector<8xbf16>
// ROWS: %[[MAIN:.*]] = scf.for {{.*}} step %c1024 iter_args({{.*}}) -> (vector<8xf32>)
// ROWS-COUNT-4: vector.load %{{.*}} : memref<4096x1024xbf16>, vector<8xbf16>
// ROWS: %[[HALF:.*]] = scf.for {{.*}} step %c512 iter_args(%{{.*}} = %[[MAIN]]) -> (vector<8xf32>)
// ROWS-COUNT-2: vector.load %{{.*}} : memref<4096x1024xbf16>, vector<8xbf16>
// ROWS: scf.for {{.*}} step %c256 iter_args(%{{.*}} = %[[HALF]]) -> (vector<8xf32>)
et.kernel @gemv(%x: memref<1x1024xbf16>, %w: memref<4096x1024xbf16>, %y: memref<1x4096xf32>) {
  %c32 = arith.constant 32 : index
  %c128 = arith.constant 128 : index
  et.task @rows tiles(%t) in (%c32) {
    %r0 = arith.muli %t, %c128 : index
    et.linear %x, %w, %y rows(%r0, %c128) : memref<1x1024xbf16>, memref<4096x1024xbf16>, memref<1x4096xf32>
  }
}

// RMSNorm: on the GPU a warp per token with a shuffle butterfly and rsqrt;
// SiLU-mul: columns strided by thread, exp.
// GPU-LABEL: et.kernel @norm
// GPU: arith.divui
// GPU: scf.for
// GPU-COUNT-5: gpu.shuffle  xor
// GPU: math.rsqrt
// GPU: math.exp
// CPU-LABEL: et.kernel @norm
// CPU-NOT: gpu.shuffle
// CPU: math.rsqrt
// CPU: math.exp
et.kernel @norm(%x: memref<1x64xbf16>, %w: memref<64xbf16>, %y: memref<1x64xbf16>) {
  %c1 = arith.constant 1 : index
  %c0 = arith.constant 0 : index
  et.task @t tiles(%i) in (%c1) {
    et.rmsnorm %x, %w, %y eps(1.0e-05) : memref<1x64xbf16>, memref<64xbf16>, memref<1x64xbf16>
    et.silu_mul %x, %x, %y cols(%c0, %c1) : memref<1x64xbf16>, memref<1x64xbf16>, memref<1x64xbf16>
  }
}

// With prefetch, thread 0 prefetches the tile's weight rows into L2 before
// the wait (the weights are only read in the kernel); never without a wait.
// PREFETCH-LABEL: et.kernel @gemv
// PREFETCH-NOT: cp.async.bulk.prefetch
// PREFETCH-LABEL: et.kernel @chained
// PREFETCH: et.task @first
// PREFETCH-NOT: cp.async.bulk.prefetch
// PREFETCH: et.task @second
// PREFETCH: scf.if
// PREFETCH: nvvm.cp.async.bulk.prefetch %{{.*}}, %{{.*}} : <1>
// PREFETCH: et.event.wait
// With prefetch=registers, each warp loads its first group of chunks before
// the wait, and its first row starts from them; without, after the wait.
// REGS-LABEL: et.kernel @chained
// REGS: et.task @second
// REGS: %[[PRE:.*]]:4 = scf.if %{{.*}} -> (vector<8xbf16>, vector<8xbf16>, vector<8xbf16>, vector<8xbf16>)
// REGS-COUNT-4: vector.load %{{.*}} : memref<1024x4096xbf16>, vector<8xbf16>
// REGS: et.event.wait
// REGS: arith.extf %[[PRE]]#0
// With prefetch=shared, each thread copies the first P = 32768 / (16 x 256)
// = 8 chunks of its warp's first row into its own slots (j * 256 + tid) of
// a dynamic shared-memory buffer before the wait, and the first row reads
// them back after cp.async.wait_group; never without a wait.
// SHARED-LABEL: et.kernel @gemv
// SHARED-NOT: cp.async
// SHARED-LABEL: et.kernel @chained
// SHARED: et.task @first
// SHARED-NOT: cp.async
// SHARED: et.task @second
// SHARED: %[[SLOTS:.*]] = memref.alloca() {et.dynamic_shared} : memref<16384xbf16, #gpu.address_space<workgroup>>
// SHARED: scf.if
// SHARED: scf.for
// SHARED: arith.muli %{{.*}}, %c256
// SHARED: nvvm.cp.async.shared.global %{{.*}}, %{{.*}}, 16, cache =  cg : !llvm.ptr<3>, !llvm.ptr<1>
// SHARED: nvvm.cp.async.commit.group
// SHARED: et.event.wait
// SHARED: scf.if %{{.*}} -> (vector<8xf32>, index)
// SHARED: nvvm.cp.async.wait.group 0
// SHARED: scf.for {{.*}} step %c4
// SHARED-COUNT-4: vector.load %[[SLOTS]][%{{.*}}] {alignment = 16 : i64} : memref<16384xbf16, #gpu.address_space<workgroup>>, vector<8xbf16>
// SHARED: scf.for {{.*}} iter_args({{.*}}) -> (vector<8xf32>)
// SHARED: vector.load %{{.*}} : memref<1024x4096xbf16>, vector<8xbf16>
// Every copy completes before the tile ends.
// SHARED: nvvm.cp.async.wait.group 0
// SHARED-NEXT: }
// SHARED-LABEL: et.kernel @hoisted
// GPU-LABEL: et.kernel @chained
// GPU: et.task @second
// GPU: et.event.wait
// GPU: scf.for {{.*}} step %c512 iter_args({{.*}}) -> (vector<8xf32>)
et.kernel @chained(%x: memref<1x1024xbf16>, %w: memref<4096x1024xbf16>, %y: memref<1x4096xbf16>,
                   %w2: memref<1024x4096xbf16>, %y2: memref<1x1024xbf16>) {
  %c32 = arith.constant 32 : index
  %c128 = arith.constant 128 : index
  %e = et.event.create() : !et.event<>
  et.task @first tiles(%t) in (%c32) {
    %r0 = arith.muli %t, %c128 : index
    et.linear %x, %w, %y rows(%r0, %c128) : memref<1x1024xbf16>, memref<4096x1024xbf16>, memref<1x4096xbf16>
    et.event.signal %e[] : !et.event<>
  }
  et.task @second tiles(%t) in (%c32) {
    %r0 = arith.muli %t, %c32 : index
    et.event.wait %e[] : !et.event<>
    et.linear %y, %w2, %y2 rows(%r0, %c32) : memref<1x4096xbf16>, memref<1024x4096xbf16>, memref<1x1024xbf16>
  }
}

// Side-effect-free values the early loads need (the layer's weight view,
// row0) move above the wait with them. The L2 prefetch starts at the
// view's own offset (the layer), not at the stacked buffer's base.
// PREFETCH-LABEL: et.kernel @hoisted
// PREFETCH: et.task @second
// PREFETCH: memref.subview
// PREFETCH: memref.extract_strided_metadata %subview
// PREFETCH: memref.extract_aligned_pointer_as_index
// PREFETCH-NEXT: arith.addi %offset
// PREFETCH: nvvm.cp.async.bulk.prefetch
// PREFETCH: et.event.wait
// REGS-LABEL: et.kernel @hoisted
// REGS: et.task @second
// REGS-DAG: arith.muli
// REGS-DAG: memref.subview
// REGS: scf.if %{{.*}} -> (vector<8xbf16>, vector<8xbf16>, vector<8xbf16>, vector<8xbf16>)
// REGS: et.event.wait
et.kernel @hoisted(%x: memref<1x1024xbf16>, %w: memref<2x1024x1024xbf16>, %y: memref<1x1024xf32>) {
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %e = et.event.create() : !et.event<>
  et.task @first tiles(%t) in (%c1) {
    et.event.signal %e[] : !et.event<>
  }
  et.task @second tiles(%t) in (%c8) {
    et.event.wait %e[] : !et.event<>
    %c128 = arith.constant 128 : index
    %r0 = arith.muli %t, %c128 : index
    %wl = memref.subview %w[1, 0, 0] [1, 1024, 1024] [1, 1, 1]
        : memref<2x1024x1024xbf16> to memref<1024x1024xbf16, strided<[1024, 1], offset: 1048576>>
    et.linear %x, %wl, %y rows(%r0, %c128)
        : memref<1x1024xbf16>, memref<1024x1024xbf16, strided<[1024, 1], offset: 1048576>>, memref<1x1024xf32>
  }
}

// K = 136 is not a multiple of 256: the per-row loop with a remainder
// (one load per lane per step).
// GPU-LABEL: et.kernel @odd_k
// GPU-NOT: -> (vector<8xf32>, vector<8xbf16>
// GPU: scf.for {{.*}} iter_args({{.*}}) -> (vector<8xf32>)
// GPU: vector.fma
// GPU-LABEL: et.kernel @batched
et.kernel @odd_k(%x: memref<1x136xbf16>, %w: memref<64x136xbf16>, %y: memref<1x64xf32>) {
  %c4 = arith.constant 4 : index
  %c16 = arith.constant 16 : index
  et.task @rows tiles(%t) in (%c4) {
    %r0 = arith.muli %t, %c16 : index
    et.linear %x, %w, %y rows(%r0, %c16) : memref<1x136xbf16>, memref<64x136xbf16>, memref<1x64xf32>
  }
}

// A runtime batch: each row's loop runs over the M tokens of x. With
// accumulate, y is read and added before the store.
// GPU: memref.dim %{{.*}} : memref<?x1024xbf16>
// GPU: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c1
// GPU: scf.for {{.*}} step %c512 iter_args({{.*}}) -> (vector<8xf32>)
// ROWS-LABEL: et.kernel @batched
// ROWS: memref.dim %{{.*}} : memref<?x1024xbf16>
// ROWS: memref.load %{{.*}} : memref<?x4096xf32>
// ROWS: arith.addf
// ROWS: memref.store %{{.*}} : memref<?x4096xf32>
// CPU-LABEL: et.kernel @batched
// CPU: memref.load %{{.*}} : memref<?x4096xf32>
// CPU: arith.addf
// CPU: memref.store %{{.*}} : memref<?x4096xf32>
et.kernel @batched(%x: memref<?x1024xbf16>, %w: memref<4096x1024xbf16>, %y: memref<?x4096xf32>) {
  %c32 = arith.constant 32 : index
  %c128 = arith.constant 128 : index
  et.task @rows tiles(%t) in (%c32) {
    %r0 = arith.muli %t, %c128 : index
    et.linear %x, %w, %y rows(%r0, %c128) accumulate : memref<?x1024xbf16>, memref<4096x1024xbf16>, memref<?x4096xf32>
  }
}

// Split-KV attention with a static group, GPU target: shared buffers for
// the cross-warp combine at the top of the task (sized for 32 warps, or for
// the threads given; per lane and block, 4 positions (4 heads) at 256
// threads, 1 at 1024), a software-pipelined loop per warp whose state carries
// the next block's K and V, 16-byte loads, the 8-lane dot-product shuffles,
// base-2 exponentials, the warp's partial stored to shared memory, a
// barrier, the combine. With a dynamic group size it falls back to one warp
// per (head, chunk).
// GPU-LABEL: et.kernel @attn
// GPU: et.task @grouped
// GPU-NEXT: memref.alloca() : memref<32x4x64xf32, #gpu.address_space<workgroup>>
// GPU-NEXT: memref.alloca() : memref<32x4x2xf32, #gpu.address_space<workgroup>>
// GPU: vector.load %{{.*}}[{{.*}}] {alignment = 16 : i64} : memref<256x2x64xbf16>, vector<8xbf16>
// GPU: scf.for {{.*}} iter_args({{.*}}) -> (f32, f32, vector<8xf32>, {{.*}}, vector<8xf32>, vector<8xbf16>, vector<8xbf16>)
// GPU: gpu.shuffle  xor
// GPU: math.exp2
// GPU: vector.store %{{.*}}[{{.*}}] {alignment = 16 : i64} : memref<32x4x64xf32, #gpu.address_space<workgroup>>, vector<8xf32>
// GPU: gpu.barrier
// GPU: memref.load %{{.*}} : memref<32x4x2xf32, #gpu.address_space<workgroup>>
// GPU: memref.store %{{.*}} : memref<2x8x64xf32>
// GPU: math.log2
// GPU: gpu.barrier
// GPU: et.task @fallback
// GPU-NOT: vector.store
// GPU-NOT: memref.alloca
// GPU: math.fma
// CPU-LABEL: et.kernel @attn
// CPU-NOT: gpu.shuffle
// kv-mma-bytes=65536 at 256 threads: tensor cores. A ring of 16-position
// blocks per warp (K then V rows of 64 + 8 bf16, 4608 bytes a slot): 7 warps
// with two slots each (the 8th idles), 7 x 2 x 4608 bytes; partials of 7
// warps. The thread id goes through an opaque move. The first block's
// copies and a commit group before the loop; per trip the next block's
// copies, then wait_group 1 and a warp barrier (no CTA barrier), K
// fragments through ldmatrix, q K^T as hi and lo mma.sync pairs, the
// softmax's row maxima over the quad (xor 1, 2), P V through
// ldmatrix.trans; then the warps combine. A dynamic q (@fallback) keeps
// the loops. 9215 bytes (less than two slots for one warp): the CUDA-core
// loop.
// MMA-LABEL: et.kernel @attn
// MMA: et.task @grouped
// MMA: memref.alloca() {et.dynamic_shared} : memref<32256xbf16, #gpu.address_space<workgroup>>
// MMA: memref.alloca() : memref<7x4x64xf32, #gpu.address_space<workgroup>>
// MMA: memref.alloca() : memref<7x4x2xf32, #gpu.address_space<workgroup>>
// MMA: llvm.inline_asm has_side_effects "mov.b64 $0, $1;"
// MMA: nvvm.cp.async.shared.global
// MMA: nvvm.cp.async.commit.group
// MMA: scf.for
// MMA: nvvm.bar.warp.sync
// MMA: nvvm.cp.async.shared.global
// MMA: nvvm.cp.async.commit.group
// MMA-NEXT: nvvm.cp.async.wait.group 1
// MMA-NOT: gpu.barrier
// MMA: nvvm.bar.warp.sync
// MMA: nvvm.ldmatrix {{.*}}layout = #nvvm.mma_layout<row>
// MMA: nvvm.mma.sync
// MMA: nvvm.mma.sync
// MMA: gpu.shuffle  xor {{.*}}, %c1_i32
// MMA: gpu.shuffle  xor {{.*}}, %c2_i32
// MMA: math.exp2
// MMA: nvvm.ldmatrix {{.*}}layout = #nvvm.mma_layout<col>
// MMA: nvvm.mma.sync
// MMA: nvvm.cp.async.wait.group 0
// MMA: gpu.barrier
// MMA: math.log2
// MMA: et.task @fallback
// MMA-NOT: nvvm.mma.sync
// MMA: math.fma
// MMASMALL-LABEL: et.kernel @attn
// MMASMALL-NOT: nvvm.mma.sync
// MMASMALL: scf.for {{.*}} -> ({{.*}}, vector<8xf32>, vector<8xbf16>, vector<8xbf16>
et.kernel @attn(%q: memref<8x64xf32>, %k: memref<256x2x64xbf16>, %o: memref<2x8x64xf32>, %lse: memref<2x8xf32>,
                %qd: memref<?x64xf32>, %od: memref<2x?x64xf32>, %lsed: memref<2x?xf32>, %n: index) {
  %c2 = arith.constant 2 : index
  %c128 = arith.constant 128 : index
  et.task @grouped tiles(%g, %s) in (%c2, %c2) {
    et.attention_split %q, %k, %k, %o, %lse kv_head(%g) split(%s) split_len(%c128) len(%n) scale(0.125)
        : memref<8x64xf32>, memref<256x2x64xbf16>, memref<256x2x64xbf16>, memref<2x8x64xf32>, memref<2x8xf32>
  }
  et.task @fallback tiles(%g, %s) in (%c2, %c2) {
    et.attention_split %qd, %k, %k, %od, %lsed kv_head(%g) split(%s) split_len(%c128) len(%n) scale(0.125)
        : memref<?x64xf32>, memref<256x2x64xbf16>, memref<256x2x64xbf16>, memref<2x?x64xf32>, memref<2x?xf32>
  }
}

// kv-prefetch=shared: the K and V rows of a split below `stable` are copied
// into the dynamic shared memory before the task's wait (32768 bytes: the
// 128 positions of a split, K then V, chunk c of row r at chunk
// c ^ (r mod 8); one byte less and nothing is staged), with what the copies need moved above the wait (the split
// length, defined inside the scf.if). After the wait: the split's rows from
// `stable` on copied in the same way, beside q into shared memory; the
// scores, one thread per position, all from shared memory; a warp per head for the
// softmax; P.V with a lane per (chunk, head) (4 heads x 8 chunks fill a
// warp: no shuffles), summed across warps. The op sits in an scf.if that may not run, so the copies are also
// waited for after it. Without `stable`, or with no wait to overlap, the
// loop without staging.
// KVS-LABEL: et.kernel @kv_staged
// KVS: et.task @staged
// KVS: %[[STAGE:.*]] = memref.alloca() {et.dynamic_shared} : memref<16384xbf16, #gpu.address_space<workgroup>>
// KVS: %[[QS:.*]] = memref.alloca() : memref<4x64xf32, #gpu.address_space<workgroup>>
// KVS: %[[SCORES:.*]] = memref.alloca() : memref<4x128xf32, #gpu.address_space<workgroup>>
// KVS: %[[PART:.*]] = memref.alloca() : memref<8x4x64xf32, #gpu.address_space<workgroup>>
// KVS: arith.constant 128 : index
// KVS: scf.for
// KVS: memref.extract_strided_metadata %arg1
// KVS: arith.xori
// KVS: nvvm.cp.async.shared.global %{{.*}}, %{{.*}}, 16, cache =  cg : !llvm.ptr<3>, !llvm.ptr<1>
// KVS: memref.extract_strided_metadata %arg2
// KVS: nvvm.cp.async.shared.global %{{.*}}, %{{.*}}, 16, cache =  cg : !llvm.ptr<3>, !llvm.ptr<1>
// KVS: nvvm.cp.async.commit.group
// KVS: et.event.wait
// KVS: scf.if
// KVS: scf.for
// KVS: nvvm.cp.async.shared.global %{{.*}}, %{{.*}}, 16, cache =  cg : !llvm.ptr<3>, !llvm.ptr<1>
// KVS: nvvm.cp.async.shared.global %{{.*}}, %{{.*}}, 16, cache =  cg : !llvm.ptr<3>, !llvm.ptr<1>
// KVS: nvvm.cp.async.commit.group
// KVS: memref.store %{{.*}}, %[[QS]]
// KVS: nvvm.cp.async.wait.group 0
// KVS-NEXT: gpu.barrier
// KVS-NOT: vector.load %arg1
// KVS-COUNT-8: vector.load %[[STAGE]]
// KVS: vector.load %[[QS]]
// KVS: memref.store %{{.*}}, %[[SCORES]]
// KVS: gpu.barrier
// KVS: math.exp2
// KVS: gpu.barrier
// KVS-NOT: vector.load %arg2
// KVS: vector.load %[[STAGE]]
// KVS-NOT: gpu.shuffle
// KVS: vector.store %{{.*}}, %[[PART]]
// KVS: gpu.barrier
// KVS: math.log2
// KVS: gpu.barrier
// KVS: nvvm.cp.async.wait.group 0
// KVS-NEXT: et.event.signal
// KVS: et.task @unmarked
// KVS-NOT: cp.async
// KVS: et.task @no_wait
// KVS-NOT: cp.async
// KVS: }
// KVSMALL-LABEL: et.kernel @kv_staged
// KVSMALL-NOT: cp.async
// KVSMALL: et.kernel
et.kernel @kv_staged(%q: memref<8x64xf32>, %k: memref<256x2x64xbf16>, %v: memref<256x2x64xbf16>,
                     %o: memref<2x8x64xf32>, %lse: memref<2x8xf32>, %n: index, %p: index, %live: i1) {
  %c2 = arith.constant 2 : index
  %c1 = arith.constant 1 : index
  %e = et.event.create() : !et.event<>
  %f = et.event.create() : !et.event<>
  et.task @ready tiles(%t) in (%c1) {
    et.event.signal %e[] : !et.event<>
  }
  et.task @staged tiles(%g, %s) in (%c2, %c2) {
    et.event.wait %e[] : !et.event<>
    scf.if %live {
      %c128 = arith.constant 128 : index
      et.attention_split %q, %k, %v, %o, %lse kv_head(%g) split(%s) split_len(%c128) len(%n) stable(%p) scale(0.125)
          : memref<8x64xf32>, memref<256x2x64xbf16>, memref<256x2x64xbf16>, memref<2x8x64xf32>, memref<2x8xf32>
    }
    et.event.signal %f[] : !et.event<>
  }
  et.task @unmarked tiles(%g, %s) in (%c2, %c2) {
    et.event.wait %f[] : !et.event<>
    %c128 = arith.constant 128 : index
    et.attention_split %q, %k, %v, %o, %lse kv_head(%g) split(%s) split_len(%c128) len(%n) scale(0.125)
        : memref<8x64xf32>, memref<256x2x64xbf16>, memref<256x2x64xbf16>, memref<2x8x64xf32>, memref<2x8xf32>
  }
  et.task @no_wait tiles(%g, %s) in (%c2, %c2) {
    %c128 = arith.constant 128 : index
    et.attention_split %q, %k, %v, %o, %lse kv_head(%g) split(%s) split_len(%c128) len(%n) stable(%p) scale(0.125)
        : memref<8x64xf32>, memref<256x2x64xbf16>, memref<256x2x64xbf16>, memref<2x8x64xf32>, memref<2x8xf32>
  }
}

// A split length computed per launch is staged when it has a constant bound
// (a minimum with a constant, 128 here, computed in i32 and cast to index):
// the stage and the score rows are sized for the bound and the copies are
// issued before the wait as above. A computed split length without one is
// not staged.
// KVS-LABEL: et.kernel @kv_staged_bound
// KVS: et.task @bounded
// KVS: memref.alloca() {et.dynamic_shared} : memref<16384xbf16, #gpu.address_space<workgroup>>
// KVS: memref.alloca() : memref<4x128xf32, #gpu.address_space<workgroup>>
// KVS: arith.minui
// KVS: arith.index_cast
// KVS: nvvm.cp.async.shared.global
// KVS: nvvm.cp.async.commit.group
// KVS: et.event.wait
// KVS: et.task @unbounded
// KVS-NOT: cp.async
// KVS: }
// KVSMALL-SAME: @kv_staged_bound
// KVSMALL-NOT: cp.async
// KVSMALL: et.kernel @two_ops
et.kernel @kv_staged_bound(%q: memref<8x64xf32>, %k: memref<256x2x64xbf16>, %v: memref<256x2x64xbf16>,
                           %o: memref<2x8x64xf32>, %lse: memref<2x8xf32>, %n: index, %p: index, %m: index,
                           %m32: i32) {
  %c2 = arith.constant 2 : index
  %c1 = arith.constant 1 : index
  %c128 = arith.constant 128 : i32
  %e = et.event.create() : !et.event<>
  %f = et.event.create() : !et.event<>
  et.task @ready tiles(%t) in (%c1) {
    et.event.signal %e[] : !et.event<>
  }
  et.task @bounded tiles(%g, %s) in (%c2, %c2) {
    %len32 = arith.minui %m32, %c128 : i32
    %len = arith.index_cast %len32 : i32 to index
    et.event.wait %e[] : !et.event<>
    et.attention_split %q, %k, %v, %o, %lse kv_head(%g) split(%s) split_len(%len) len(%n) stable(%p) scale(0.125)
        : memref<8x64xf32>, memref<256x2x64xbf16>, memref<256x2x64xbf16>, memref<2x8x64xf32>, memref<2x8xf32>
    et.event.signal %f[] : !et.event<>
  }
  et.task @unbounded tiles(%g, %s) in (%c2, %c2) {
    %len = arith.minui %m, %n : index
    et.event.wait %f[] : !et.event<>
    et.attention_split %q, %k, %v, %o, %lse kv_head(%g) split(%s) split_len(%len) len(%n) stable(%p) scale(0.125)
        : memref<8x64xf32>, memref<256x2x64xbf16>, memref<256x2x64xbf16>, memref<2x8x64xf32>, memref<2x8xf32>
  }
}

// Consecutive tile ops of a task body split their work between threads
// differently (RoPE by rotation pair, the append by element): on the GPU a
// barrier separates them; the host worker is one thread and needs none.
// GPU-LABEL: et.kernel @two_ops
// GPU: math.cos
// GPU: gpu.barrier
// GPU: et.thread_id
// GPU: arith.truncf
// CPU-LABEL: et.kernel @two_ops
// CPU-NOT: gpu.barrier
// CPU: arith.truncf
et.kernel @two_ops(%x: memref<1x2x32xf32>, %p: memref<1xi32>, %c: memref<8x2x32xbf16>) {
  %c1 = arith.constant 1 : index
  %c0 = arith.constant 0 : index
  et.task @t tiles(%i) in (%c1) {
    et.rope %x, %p theta(1.0e+04) : memref<1x2x32xf32>, memref<1xi32>
    et.kv_append %x, %c, %c0 : memref<1x2x32xf32>, memref<8x2x32xbf16>
  }
}

// The same inside a region (a layered kernel guards each batch row's body
// with an scf.if), and between a tile op and a region holding one.
// GPU-LABEL: et.kernel @two_ops_nested
// GPU: scf.if
// GPU: math.cos
// GPU: gpu.barrier
// GPU: et.thread_id
// GPU: arith.truncf
// GPU: gpu.barrier
// GPU-NEXT: scf.if %arg3
// CPU-LABEL: et.kernel @two_ops_nested
// CPU-NOT: gpu.barrier
// CPU: arith.truncf
et.kernel @two_ops_nested(%x: memref<1x2x32xf32>, %p: memref<1xi32>, %c: memref<8x2x32xbf16>, %live: i1) {
  %c1 = arith.constant 1 : index
  %c0 = arith.constant 0 : index
  et.task @t tiles(%i) in (%c1) {
    scf.if %live {
      et.rope %x, %p theta(1.0e+04) : memref<1x2x32xf32>, memref<1xi32>
      et.kv_append %x, %c, %c0 : memref<1x2x32xf32>, memref<8x2x32xbf16>
    }
    scf.if %live {
      et.kv_append %x, %c, %c1 : memref<1x2x32xf32>, memref<8x2x32xbf16>
    }
  }
}

// A plain load of a tile op's result (the expert that et.router_topk chose
// into the tile's shared memory, read by every thread): a barrier before the
// load on the GPU (lane 0 of one warp stored it); a load of a buffer no tile
// op wrote since the last barrier takes none. The host worker needs none.
// GPU-LABEL: et.kernel @load_after_tile_op
// GPU: memref.store %{{.*}} : memref<1x2xi32, #gpu.address_space<workgroup>>
// GPU: gpu.barrier
// GPU-NEXT: memref.load %{{.*}} : memref<1x2xi32, #gpu.address_space<workgroup>>
// GPU-NOT: gpu.barrier
// GPU: memref.load %{{.*}} : memref<4xi32>
// A tile op writing what those loads read waits for them (a barrier).
// GPU: memref.store %{{.*}} : memref<4xi32>
// GPU-NEXT: gpu.barrier
// The same load in thread 0's part (an scf.if): the barrier goes before
// the scf.if, which every thread reaches, not inside it.
// GPU: gpu.barrier
// GPU-NEXT: scf.if
// GPU-NOT: gpu.barrier
// GPU: memref.load %{{.*}} : memref<1x2xi32, #gpu.address_space<workgroup>>
// GPU: et.event.signal
// CPU-LABEL: et.kernel @load_after_tile_op
// CPU-NOT: gpu.barrier
// CPU: et.event.signal
et.kernel @load_after_tile_op(%s: memref<?x64xf32>, %out: memref<4xi32>, %other: memref<4xi32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %e = et.event.create() : !et.event<>
  et.task @t tiles(%b) in (%c1) {
    %ids = memref.alloca() : memref<1x2xi32, #gpu.address_space<workgroup>>
    %w = memref.alloca() : memref<1x2xf32, #gpu.address_space<workgroup>>
    %row = memref.subview %s[%b, 0] [1, 64] [1, 1] : memref<?x64xf32> to memref<1x64xf32, strided<[64, 1], offset: ?>>
    et.router_topk %row, %ids, %w : memref<1x64xf32, strided<[64, 1], offset: ?>>, memref<1x2xi32, #gpu.address_space<workgroup>>, memref<1x2xf32, #gpu.address_space<workgroup>>
    %e1 = memref.load %ids[%c0, %c1] : memref<1x2xi32, #gpu.address_space<workgroup>>
    %x = memref.load %other[%c0] : memref<4xi32>
    %sum = arith.addi %e1, %x : i32
    memref.store %sum, %out[%c0] : memref<4xi32>
    et.router_topk %row, %ids, %w : memref<1x64xf32, strided<[64, 1], offset: ?>>, memref<1x2xi32, #gpu.address_space<workgroup>>, memref<1x2xf32, #gpu.address_space<workgroup>>
    %tid = et.thread_id
    %first = arith.cmpi eq, %tid, %c0 : index
    scf.if %first {
      %e2 = memref.load %ids[%c0, %c0] : memref<1x2xi32, #gpu.address_space<workgroup>>
      memref.store %e2, %out[%c1] : memref<4xi32>
    }
    et.event.signal %e[] : !et.event<>
  }
}

// et.rope_into with a norm: on the GPU (static D) a warp per (token, head),
// the lane's two pairs of D = 128 loaded together, their squares summed by a
// butterfly, then rotated and stored once each, guarded by the cache row's
// bound. With a dynamic D, two loops over the lane's pairs (the squares,
// then the rotation). On the CPU, loops and no shuffles.
// GPU-LABEL: et.kernel @rope_into_norm
// GPU: scf.for
// GPU-COUNT-4: memref.load %arg0
// GPU-NOT: scf.for
// GPU: gpu.shuffle xor
// GPU: math.rsqrt
// GPU: math.cos
// GPU: memref.store %{{.*}}, %arg2[
// GPU-LABEL: et.kernel @rope_into_dynamic
// GPU: scf.for
// GPU: scf.for
// GPU: gpu.shuffle xor
// GPU: math.rsqrt
// GPU: scf.for
// GPU: math.cos
// CPU-LABEL: et.kernel @rope_into_norm
// CPU-NOT: gpu.shuffle
// CPU: scf.for
// CPU: math.rsqrt
// CPU: scf.for
// CPU: math.cos
// CPU: memref.store
et.kernel @rope_into_norm(%x: memref<1x2x128xf32>, %p: memref<1xi32>, %c: memref<8x2x128xbf16>,
                          %w: memref<128xbf16>, %at: index) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    et.rope_into %x, %p, %c[%at] theta(1.0e+06) norm(%w) eps(1.0e-06)
        : memref<1x2x128xf32>, memref<1xi32>, memref<8x2x128xbf16>, memref<128xbf16>
  }
}
et.kernel @rope_into_dynamic(%x: memref<1x2x?xf32>, %p: memref<1xi32>, %w: memref<?xf32>) {
  %c1 = arith.constant 1 : index
  %c0 = arith.constant 0 : index
  et.task @t tiles(%i) in (%c1) {
    et.rope_into %x, %p, %x[%c0] theta(1.0e+06) norm(%w) eps(1.0e-06)
        : memref<1x2x?xf32>, memref<1xi32>, memref<1x2x?xf32>, memref<?xf32>
  }
}

// One token whose position and norm weights no task writes: the lanes'
// angles and weights come before the task's wait (inside the tile's scf.if
// too); after it, only the head's loads, the norm and the stores.
// GPU-LABEL: et.kernel @rope_into_early
// GPU: memref.load %arg1
// GPU: math.powf
// GPU: math.cos
// GPU: memref.load %arg3
// GPU: et.event.wait
// GPU: scf.if
// GPU-NOT: math.cos
// GPU: gpu.shuffle xor
// GPU-NOT: math.cos
// GPU: memref.store
et.kernel @rope_into_early(%x: memref<1x2x128xf32>, %p: memref<1xi32>, %c: memref<8x2x128xbf16>,
                           %w: memref<128xbf16>, %at: index, %live: i1) {
  %c1 = arith.constant 1 : index
  %e = et.event.create() : !et.event<>
  et.task @t tiles(%i) in (%c1) {
    et.event.wait %e[] : !et.event<>
    scf.if %live {
      et.rope_into %x, %p, %c[%at] theta(1.0e+06) norm(%w) eps(1.0e-06)
          : memref<1x2x128xf32>, memref<1xi32>, memref<8x2x128xbf16>, memref<128xbf16>
    }
  }
}

// A gated et.linear: per row, the gate row's loop and the up row's loop,
// both lanes' sums reduced, and one store of silu(gate) * up (the SiLU's
// approximate exponential and quotient), with no barrier and no load of an
// intermediate; the CPU form the same with loops.
// ROWS-LABEL: et.kernel @linear_gated
// ROWS: scf.for
// ROWS: vector.load %arg1
// ROWS: vector.load %arg3
// ROWS-NOT: gpu.barrier
// ROWS: gpu.shuffle xor
// ROWS: math.exp {{.*}}fastmath<afn>
// ROWS: arith.divf {{.*}}fastmath<afn>
// ROWS: memref.store {{.*}}, %arg2
// ROWS-NOT: memref.load %arg2
// CPU-LABEL: et.kernel @linear_gated
// CPU: memref.load %arg1
// CPU: memref.load %arg3
// CPU: math.exp
// CPU: memref.store {{.*}}, %arg2
et.kernel @linear_gated(%x: memref<1x2048xbf16>, %w: memref<64x2048xbf16>, %y: memref<1x64xbf16>,
                        %u: memref<64x2048xbf16>) {
  %c4 = arith.constant 4 : index
  %c16 = arith.constant 16 : index
  et.task @t tiles(%i) in (%c4) {
    %r0 = arith.muli %i, %c16 : index
    et.linear %x, %w, %y rows(%r0, %c16) gated(%u) : memref<1x2048xbf16>, memref<64x2048xbf16>, memref<1x64xbf16>, memref<64x2048xbf16>
  }
}

// Only dependent tile ops get a barrier: the two linear layers write
// different buffers and read only x and weights (none between them); the
// activation reads both outputs (one barrier before it).
// GPU-LABEL: et.kernel @independent_ops
// GPU-NOT: gpu.barrier
// GPU: memref.store %{{.*}} : memref<1x256xf32>
// GPU-NOT: gpu.barrier
// GPU: memref.store %{{.*}} : memref<1x256xf32>
// GPU: gpu.barrier
// GPU: math.exp
et.kernel @independent_ops(%x: memref<1x256xbf16>, %wg: memref<256x256xbf16>, %wu: memref<256x256xbf16>,
                           %g: memref<1x256xf32>, %u: memref<1x256xf32>, %act: memref<1x256xbf16>) {
  %c1 = arith.constant 1 : index
  %c0 = arith.constant 0 : index
  %c256 = arith.constant 256 : index
  et.task @t tiles(%i) in (%c1) {
    et.linear %x, %wg, %g rows(%c0, %c256) : memref<1x256xbf16>, memref<256x256xbf16>, memref<1x256xf32>
    et.linear %x, %wu, %u rows(%c0, %c256) : memref<1x256xbf16>, memref<256x256xbf16>, memref<1x256xf32>
    et.silu_mul %g, %u, %act cols(%c0, %c256) : memref<1x256xf32>, memref<1x256xf32>, memref<1x256xbf16>
  }
}

// A wide RMSNorm (H >= 512) on the GPU uses every thread for each token, in
// chunks of up to 16 tokens: per-warp partial sums of every token of the
// chunk in a shared buffer, one barrier, then per token a butterfly over
// the warp sums and the scaling; narrow rows keep one warp per row.
// GPU-LABEL: et.kernel @wide_norm
// GPU: et.task @wide
// GPU-NEXT: memref.alloca() : memref<16x32xf32, #gpu.address_space<workgroup>>
// GPU: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c16
// GPU: arith.minui
// GPU: scf.for
// Four columns per thread and iteration, clamped, their loads together.
// GPU: scf.for {{.*}} iter_args
// GPU-COUNT-4: arith.minui
// GPU-COUNT-8: memref.load
// GPU: gpu.shuffle  xor
// GPU: memref.store %{{.*}} : memref<16x32xf32, #gpu.address_space<workgroup>>
// GPU: gpu.barrier
// GPU: scf.for
// GPU: memref.load %{{.*}} : memref<16x32xf32, #gpu.address_space<workgroup>>
// GPU-COUNT-5: gpu.shuffle  xor
// GPU: math.rsqrt
// GPU: gpu.barrier
// GPU: et.task @narrow
// GPU-NOT: memref.alloca
// GPU: math.rsqrt
// CPU-LABEL: et.kernel @wide_norm
// CPU-NOT: memref.alloca
et.kernel @wide_norm(%x: memref<?x2048xbf16>, %w: memref<2048xbf16>, %y: memref<?x2048xbf16>, %r: memref<?x2048xf32>,
                     %xs: memref<16x64xf32>, %ws: memref<64xbf16>) {
  %c1 = arith.constant 1 : index
  et.task @wide tiles(%i) in (%c1) {
    et.rmsnorm %x, %w, %y eps(1.0e-05) residual(%r) : memref<?x2048xbf16>, memref<2048xbf16>, memref<?x2048xbf16>, memref<?x2048xf32>
  }
  et.task @narrow tiles(%i) in (%c1) {
    et.rmsnorm %xs, %ws, %xs eps(1.0e-05) : memref<16x64xf32>, memref<64xbf16>, memref<16x64xf32>
  }
}

// Argmax on the GPU, several rows: a row per warp at a time (rows w, w +
// warps, ...), each warp's lanes loading 8 columns 32 apart per trip before
// comparing them, a butterfly, lane 0 storing, no barrier. One row uses
// every thread: threads stride over the columns (step et.num_threads),
// warps combine with a butterfly of values and indices, the warps' results
// meet in two shared buffers, and warp 0's lane 0 stores; the CPU worker
// scans alone.
// GPU-LABEL: et.kernel @argmax
// GPU: et.task @t
// GPU-NEXT: memref.alloca() : memref<32xf32, #gpu.address_space<workgroup>>
// GPU-NEXT: memref.alloca() : memref<32xi32, #gpu.address_space<workgroup>>
// GPU: %[[NT:.*]] = et.num_threads
// GPU: scf.if
// GPU: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} {
// GPU: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args
// GPU-COUNT-8: memref.load %{{.*}} : memref<2x1000xf32>
// GPU-NOT: memref.load %{{.*}} : memref<2x1000xf32>
// GPU: scf.yield
// GPU-COUNT-10: gpu.shuffle  xor
// GPU-NOT: gpu.barrier
// GPU: memref.store %{{.*}} : memref<2x4xf32>
// GPU: } else {
// GPU: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %[[NT]] iter_args
// GPU-COUNT-10: gpu.shuffle  xor
// GPU: memref.store %{{.*}} : memref<32xf32, #gpu.address_space<workgroup>>
// GPU: gpu.barrier
// GPU: memref.load %{{.*}} : memref<32xf32, #gpu.address_space<workgroup>>
// GPU-COUNT-10: gpu.shuffle  xor
// GPU: memref.store %{{.*}} : memref<2x4xf32>
// GPU: gpu.barrier
// CPU-LABEL: et.kernel @argmax
// CPU-NOT: gpu.shuffle
// CPU: memref.store %{{.*}} : memref<2x4xf32>
et.kernel @argmax(%x: memref<2x1000xf32>, %v: memref<2x4xf32>, %i: memref<2x4xi32>) {
  %c4 = arith.constant 4 : index
  %c250 = arith.constant 250 : index
  et.task @t tiles(%s) in (%c4) {
    %c0 = arith.muli %s, %c250 : index
    et.argmax %x, %v, %i cols(%c0, %c250) slot(%s) : memref<2x1000xf32>, memref<2x4xf32>, memref<2x4xi32>
  }
}

// The router's top-k, on the GPU a warp per token: each lane loads its 2
// of 64 scores once (static experts, few per lane) and sorts them (a NaN
// score offered as nothing), then the maximum (a butterfly of the lanes'
// best values and indices; the winning lane moves on to its next), the
// softmax denominator (a butterfly sum) and one more round for the second
// expert, all on registers; lane 0 stores both; no barrier. A dynamic number of experts: every round scans
// memory. The CPU worker (one lane, 64 scores) scans memory alone.
// GPU-LABEL: et.kernel @router_topk
// GPU: scf.for
// GPU-COUNT-2: memref.load %{{.*}} : memref<?x64xf32>
// GPU-NOT: memref.load %{{.*}} : memref<?x64xf32>
// GPU: arith.cmpf ord
// GPU: arith.cmpf ogt
// GPU-COUNT-10: gpu.shuffle  xor
// GPU: arith.cmpi eq
// GPU: math.exp
// GPU-COUNT-5: gpu.shuffle  xor
// GPU-COUNT-10: gpu.shuffle  xor
// GPU-NOT: gpu.barrier
// GPU: scf.if
// GPU-COUNT-2: memref.store %{{.*}} : memref<?x2xi32>
// GPU-NOT: et.router_topk
// GPU-LABEL: et.kernel @router_topk_dynamic
// GPU: scf.for {{.*}} iter_args
// GPU: memref.load %{{.*}} : memref<?x?xf32>
// GPU-COUNT-10: gpu.shuffle  xor
// GPU: scf.for {{.*}} iter_args
// GPU: math.exp
// GPU: scf.for {{.*}} iter_args
// GPU: memref.load %{{.*}} : memref<?x?xf32>
// CPU-LABEL: et.kernel @router_topk
// CPU-NOT: gpu.shuffle
// CPU: scf.for {{.*}} iter_args
// CPU: math.exp
// CPU: arith.divf
// CPU: memref.store %{{.*}} : memref<?x2xi32>
// CPU-NOT: et.router_topk
et.kernel @router_topk(%s: memref<?x64xf32>, %ids: memref<?x2xi32>, %w: memref<?x2xf32>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%b) in (%c1) {
    et.router_topk %s, %ids, %w normalize : memref<?x64xf32>, memref<?x2xi32>, memref<?x2xf32>
  }
}
et.kernel @router_topk_dynamic(%s: memref<?x?xf32>, %ids: memref<?x2xi32>, %w: memref<?x2xf32>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%b) in (%c1) {
    et.router_topk %s, %ids, %w : memref<?x?xf32>, memref<?x2xi32>, memref<?x2xf32>
  }
}

// et.sample_threshold: the worker's threads add key counts and mass into
// shared bins with atomics between barriers, each warp into its copy of
// the bins (4 copies of 256), folded into copy 0 (four 8-bit levels for
// top-k, four for top-p, after max(y): each thread's in registers, then
// over the warp by shuffles and one atomic max a warp; every pass loads
// eight columns a trip); warp 0 picks the bin, each lane summing 8 bins
// and a scan over the lanes (shuffles up); on the CPU, one thread does the
// same in local buffers, one copy of the bins.
// GPU-LABEL: et.kernel @sample_threshold
// GPU: memref.alloca() {row_scratch = "counts"} : memref<1024xi32, #gpu.address_space<workgroup>>
// GPU: memref.alloca() {row_scratch = "mass"} : memref<1024xf32, #gpu.address_space<workgroup>>
// GPU-COUNT-8: memref.load %{{.*}} : memref<?x1000xbf16>
// GPU: arith.maxui
// GPU: gpu.shuffle xor
// GPU: memref.atomic_rmw maxu
// GPU: memref.atomic_rmw addi
// GPU: arith.addi
// GPU: gpu.shuffle up
// GPU-COUNT-3: memref.atomic_rmw addi
// GPU-COUNT-4: memref.atomic_rmw addf
// GPU: arith.maximumf
// GPU-NOT: et.sample_threshold
// CPU-LABEL: et.kernel @sample_threshold
// ROWS-LABEL: et.kernel @sample_threshold
// CPU: memref.alloca() : memref<256xi32>
// CPU-NOT: gpu.barrier
// CPU-NOT: gpu.shuffle
// CPU: memref.atomic_rmw maxu
et.kernel @sample_threshold(%x: memref<?x1000xbf16>, %t: memref<?xf32>, %k: memref<?xi32>, %p: memref<?xf32>,
                            %mp: memref<?xf32>, %tau: memref<?xf32>, %rows: index) {
  et.task @t tiles(%m) in (%rows) {
    et.sample_threshold %x token(%m) temperature(%t) top_k(%k) top_p(%p) min_p(%mp) into(%tau) : memref<?x1000xbf16>, memref<?xf32>, memref<?xi32>, memref<?xf32>, memref<?xf32>, memref<?xf32>
  }
}

// et.top_logprobs: where the count is not negative, each thread's maximum
// and sum of exponentials (online, eight columns loaded a trip), combined
// by atomics in shared memory;
// with a count above 0 a select by value (four levels of 256 bins), one by
// id where ties need it (three levels), a gathering pass into the list,
// thread 0 ordering it out; on the CPU, one thread, no barrier.
// GPU-LABEL: et.kernel @top_logprobs
// GPU: arith.cmpi sge
// GPU: scf.if
// GPU: scf.for
// GPU-COUNT-8: memref.load %{{.*}} : memref<?x1000xf32>
// GPU: arith.maximumf
// GPU: math.exp
// GPU: memref.atomic_rmw maxu
// GPU: memref.atomic_rmw addf
// GPU: math.log
// GPU: arith.minsi
// GPU-COUNT-4: memref.atomic_rmw addi
// GPU: arith.cmpi slt
// GPU-COUNT-3: memref.atomic_rmw addi
// GPU: memref.atomic_rmw addi
// GPU: memref.store {{.*}} : memref<40x5xi32>
// GPU: memref.store {{.*}} : memref<40x5xf32>
// GPU: memref.store {{.*}} : memref<?xf32>
// GPU: gpu.barrier
// GPU-NOT: et.top_logprobs
// CPU-LABEL: et.kernel @top_logprobs
// ROWS-LABEL: et.kernel @top_logprobs
// CPU: math.log
// CPU-NOT: gpu.barrier
// CPU: memref.store {{.*}} : memref<40x5xi32>
// CPU-NOT: gpu.barrier
et.kernel @top_logprobs(%x: memref<?x1000xf32>, %n: memref<?xi32>, %lse: memref<?xf32>, %ids: memref<40x5xi32>,
                        %v: memref<40x5xf32>, %rows: index) {
  et.task @t tiles(%m) in (%rows) {
    et.top_logprobs %x token(%m) count(%n) into(%lse, %ids, %v) row(%m) : memref<?x1000xf32>, memref<?xi32>, memref<?xf32>, memref<40x5xi32>, memref<40x5xf32>
  }
}

// et.top_candidates: over the chunk's columns (from col0), the maximum and
// two sums of exponentials (at 1 and 1 / T), a select by value, the
// gathering pass, the K entries out on every thread, the stats on thread 0.
// et.top_logprobs and et.sample_threshold with candidates: the row's
// maximum and sums from the chunks' stats, the selects over the
// candidates (an id and a value a candidate); the threshold falls back to
// a scan of the row where the candidates do not decide it.
// GPU-LABEL: et.kernel @candidates
// GPU: et.task @chunk
// GPU: scf.for
// GPU: arith.addi
// GPU: memref.load %{{.*}} : memref<?x1000xf32>
// GPU-COUNT-2: math.exp
// GPU-COUNT-4: memref.atomic_rmw addi
// GPU: memref.store {{.*}} : memref<?x8x16xi32>
// GPU: memref.store {{.*}} : memref<?x8x16xf32>
// GPU-COUNT-4: memref.store {{.*}} : memref<?x8x4xf32>
// GPU: et.task @row
// GPU: memref.load {{.*}} : memref<?x8x4xf32>
// GPU: math.log
// GPU: memref.load {{.*}} : memref<?x8x16xi32>
// GPU: memref.load {{.*}} : memref<?x8x16xf32>
// GPU: memref.load {{.*}} : memref<?x8x4xf32>
// GPU: memref.load {{.*}} : memref<?x8x16xi32>
// GPU: scf.if
// GPU: memref.load %{{.*}} : memref<?x1000xf32>
// GPU-NOT: et.top_candidates
// GPU-NOT: et.top_logprobs
// GPU-NOT: et.sample_threshold
// CPU-LABEL: et.kernel @candidates
// ROWS-LABEL: et.kernel @candidates
// CPU-NOT: gpu.barrier
// CPU: memref.store {{.*}} : memref<?x8x16xi32>
// CPU-NOT: gpu.barrier
et.kernel @candidates(%x: memref<?x1000xf32>, %t: memref<?xf32>, %ci: memref<?x8x16xi32>, %cv: memref<?x8x16xf32>,
                      %cs: memref<?x8x4xf32>, %n: memref<?xi32>, %lse: memref<?xf32>, %ids: memref<40x5xi32>,
                      %v: memref<40x5xf32>, %k: memref<?xi32>, %p: memref<?xf32>, %mp: memref<?xf32>,
                      %tau: memref<?xf32>, %cov: memref<?xi32>, %rows: index) {
  %c125 = arith.constant 125 : index
  %c8 = arith.constant 8 : index
  et.task @chunk tiles(%q) in (%c8) {
    %col0 = arith.muli %q, %c125 : index
    et.top_candidates %x token(%q) cols(%col0, %c125) temperature(%t) into(%ci, %cv, %cs) slot(%q) : memref<?x1000xf32>, memref<?xf32>, memref<?x8x16xi32>, memref<?x8x16xf32>, memref<?x8x4xf32>
  }
  et.task @row tiles(%m) in (%rows) {
    et.top_logprobs %x token(%m) count(%n) into(%lse, %ids, %v) row(%m) candidates(%ci, %cv, %cs : memref<?x8x16xi32>, memref<?x8x16xf32>, memref<?x8x4xf32>) : memref<?x1000xf32>, memref<?xi32>, memref<?xf32>, memref<40x5xi32>, memref<40x5xf32>
    et.sample_threshold %x token(%m) temperature(%t) top_k(%k) top_p(%p) min_p(%mp) into(%tau) candidates(%ci, %cv, %cs, %cov : memref<?x8x16xi32>, memref<?x8x16xf32>, memref<?x8x4xf32>, memref<?xi32>) : memref<?x1000xf32>, memref<?xf32>, memref<?xi32>, memref<?xf32>, memref<?xf32>, memref<?xf32>
  }
}

// et.logit_bias: the worker's threads take the token's entries, adding each
// nonzero value whose id is a column to that logit atomically, then a
// barrier; on the CPU, one thread, no barrier.
// GPU-LABEL: et.kernel @logit_bias
// GPU: scf.for
// GPU-DAG: arith.cmpi sge
// GPU-DAG: arith.cmpi slt
// GPU-DAG: arith.cmpf une
// GPU: scf.if
// GPU: memref.atomic_rmw addf
// GPU: gpu.barrier
// GPU-NOT: et.logit_bias
// CPU-LABEL: et.kernel @logit_bias
// ROWS-LABEL: et.kernel @logit_bias
// CPU: memref.atomic_rmw addf
// CPU-NOT: gpu.barrier
// CPU-LABEL: et.kernel @penalize
et.kernel @logit_bias(%x: memref<?x1000xf32>, %ids: memref<?x8xi32>, %v: memref<?x8xf32>, %rows: index) {
  et.task @t tiles(%m) in (%rows) {
    et.logit_bias %x token(%m) bias(%ids, %v) : memref<?x1000xf32>, memref<?x8xi32>, memref<?x8xf32>
  }
}

// et.penalize: with a penalty on, the worker's threads count the history's
// ids (add for a generated one, or for a prompt one), a barrier, then take
// each count back to zero (exchange) and apply the penalties where it was
// not zero; on the CPU, one thread, no barrier.
// GPU-LABEL: et.kernel @penalize
// GPU: arith.cmpf ogt
// GPU: arith.select
// GPU: arith.cmpf une
// GPU: scf.if
// GPU: scf.for
// GPU: memref.atomic_rmw addi
// GPU: memref.atomic_rmw ori
// GPU: gpu.barrier
// GPU: memref.atomic_rmw assign
// GPU: arith.divf
// GPU: arith.mulf
// GPU: memref.store
// GPU: gpu.barrier
// GPU-NOT: et.penalize
// ROWS-LABEL: et.kernel @penalize
// CPU-NOT: gpu.barrier
// CPU: memref.atomic_rmw assign
// CPU-NOT: gpu.barrier
et.kernel @penalize(%x: memref<?x1000xf32>, %h: memref<4x65xi32>, %from: memref<?xi32>, %r: memref<?xf32>,
                    %f: memref<?xf32>, %p: memref<?xf32>, %counts: memref<?x1000xi32>, %rows: index) {
  %c9 = arith.constant 9 : index
  et.task @t tiles(%m) in (%rows) {
    et.penalize %x token(%m) history(%h, %m, %c9) outputs_from(%from) repetition(%r) frequency(%f) presence(%p) counts(%counts) : memref<?x1000xf32>, memref<4x65xi32>, memref<?xi32>, memref<?xf32>, memref<?xf32>, memref<?xf32>, memref<?x1000xi32>
  }
}

// et.prefetch: on the GPU, thread 0 issues one bulk L2 prefetch of the
// rows (bytes = rows clamped to N, times K x 2); on the CPU, nothing.
// GPU-LABEL: et.kernel @l2_hint
// GPU: arith.minsi
// GPU: scf.if
// GPU: nvvm.cp.async.bulk.prefetch %{{.*}}, %{{.*}} : <1>
// GPU-NOT: et.prefetch
// CPU-LABEL: et.kernel @l2_hint
// CPU-NOT: et.prefetch
// CPU-NOT: cp.async
// CPU: et.event.signal
et.kernel @l2_hint(%w: memref<64x256xbf16, strided<[256, 1], offset: ?>>) {
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %e = et.event.create() : !et.event<>
  et.task @t tiles(%i) in (%c1) {
    %r0 = arith.muli %i, %c16 : index
    et.prefetch %w rows(%r0, %c16) : memref<64x256xbf16, strided<[256, 1], offset: ?>>
    et.event.signal %e[] : !et.event<>
  }
}

// et.attention_merge: one pass over the splits with a running maximum, four
// splits per trip whose lse and o loads go out together (indices past the
// last split clamp to it and weigh nothing: -inf); a split of lse -inf
// (past the count, or marked empty) leaves the weighted sum as it is,
// whatever its o holds; the same loop on both targets.
// GPU-LABEL: et.kernel @merge
// GPU: %[[C4:.*]] = arith.constant 4 : index
// GPU: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %[[C4]]
// GPU-COUNT-4: arith.minui
// GPU: arith.maximumf
// GPU: math.exp
// GPU: math.exp
// GPU-NEXT: arith.addf
// GPU-NEXT: arith.cmpf oeq, %{{.*}}, %cst{{.*}} : f32
// GPU-NEXT: math.fma
// GPU-NEXT: arith.select
// GPU: math.exp
// GPU-NEXT: arith.addf
// GPU-NEXT: arith.cmpf oeq, %{{.*}}, %cst{{.*}} : f32
// GPU-NEXT: math.fma
// GPU-NEXT: arith.select
// GPU: math.exp
// GPU-NEXT: arith.addf
// GPU-NEXT: arith.cmpf oeq, %{{.*}}, %cst{{.*}} : f32
// GPU-NEXT: math.fma
// GPU-NEXT: arith.select
// GPU: math.exp
// GPU-NEXT: arith.addf
// GPU-NEXT: arith.cmpf oeq, %{{.*}}, %cst{{.*}} : f32
// GPU-NEXT: math.fma
// GPU-NEXT: arith.select
// GPU: scf.yield
// GPU: arith.divf
// GPU: memref.store
// GPU-NOT: scf.for
// GPU: }
// CPU-LABEL: et.kernel @merge
// CPU: scf.for %{{.*}} step %{{.*}}
// CPU-COUNT-4: memref.load %arg1
et.kernel @merge(%o: memref<?x4x64xf32>, %lse: memref<?x4xf32>, %out: memref<4x64xbf16>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    et.attention_merge %o, %lse, %out : memref<?x4x64xf32>, memref<?x4xf32>, memref<4x64xbf16>
  }
}

// et.attention_split with `append`: this step's key and value, rotated into
// workgroup buffers by the ops before it. The staged lowering (KVS) takes
// them into its stage after the wait (an scf.if per chunk: the appended
// rows' chunks into the stage and the caches' row, the others by cp.async);
// the others (GPU) write them into the caches first, then a barrier, then
// read them from the caches. On the host (CPU) the workgroup buffers are
// ordinary per-tile memory.
// KVS-LABEL: et.kernel @append
// KVS: nvvm.cp.async.commit.group
// KVS: et.event.wait
// KVS: memref.collapse_shape
// KVS: gpu.barrier
// KVS: scf.if
// KVS-COUNT-8: memref.store %{{.*}}, %arg1[
// KVS: vector.store %{{.*}} : memref<16384xbf16, #gpu.address_space<workgroup>>, vector<8xbf16>
// KVS-COUNT-8: memref.store %{{.*}}, %arg2[
// KVS: vector.store
// KVS: } else {
// KVS: nvvm.cp.async.shared.global
// KVS: nvvm.cp.async.shared.global
// KVS: nvvm.cp.async.commit.group
// GPU-LABEL: et.kernel @append
// GPU: et.event.wait
// GPU: gpu.barrier
// GPU: scf.for
// GPU: memref.load %collapse_shape
// GPU: memref.store %{{.*}}, %arg1[
// GPU: memref.load %collapse_shape
// GPU: memref.store %{{.*}}, %arg2[
// GPU: gpu.barrier
// CPU-LABEL: et.kernel @append
// CPU: memref.alloca() : memref<1x1x64xf32>
// CPU: memref.alloca() : memref<1x1x64xf32>
// CPU-NOT: workgroup
// CPU: memref.store %{{.*}}, %arg1[
// CPU-NOT: workgroup
// CPU: }
et.kernel @append(%q: memref<8x64xf32>, %k: memref<256x2x64xbf16>, %v: memref<256x2x64xbf16>,
                  %o: memref<2x8x64xf32>, %lse: memref<2x8xf32>, %kraw: memref<1x2x64xf32>, %vraw: memref<1x2x64xf32>,
                  %pos: memref<1xi32>, %n: index, %p: index) {
  %c2 = arith.constant 2 : index
  %c1 = arith.constant 1 : index
  %c0 = arith.constant 0 : index
  %e = et.event.create() : !et.event<>
  et.task @ready tiles(%t) in (%c1) {
    et.event.signal %e[] : !et.event<>
  }
  et.task @fresh tiles(%g, %s) in (%c2, %c2) {
    %ks = memref.alloca() : memref<1x1x64xf32, #gpu.address_space<workgroup>>
    %vs = memref.alloca() : memref<1x1x64xf32, #gpu.address_space<workgroup>>
    %c128 = arith.constant 128 : index
    et.event.wait %e[] : !et.event<>
    %kh = memref.subview %kraw[0, %g, 0] [1, 1, 64] [1, 1, 1]
        : memref<1x2x64xf32> to memref<1x1x64xf32, strided<[128, 64, 1], offset: ?>>
    %vh = memref.subview %vraw[0, %g, 0] [1, 1, 64] [1, 1, 1]
        : memref<1x2x64xf32> to memref<1x1x64xf32, strided<[128, 64, 1], offset: ?>>
    et.rope_into %kh, %pos, %ks[%c0] theta(1.0e+04)
        : memref<1x1x64xf32, strided<[128, 64, 1], offset: ?>>, memref<1xi32>, memref<1x1x64xf32, #gpu.address_space<workgroup>>
    et.kv_append %vh, %vs, %c0
        : memref<1x1x64xf32, strided<[128, 64, 1], offset: ?>>, memref<1x1x64xf32, #gpu.address_space<workgroup>>
    %kn = memref.collapse_shape %ks [[0, 1], [2]]
        : memref<1x1x64xf32, #gpu.address_space<workgroup>> into memref<1x64xf32, #gpu.address_space<workgroup>>
    %vn = memref.collapse_shape %vs [[0, 1], [2]]
        : memref<1x1x64xf32, #gpu.address_space<workgroup>> into memref<1x64xf32, #gpu.address_space<workgroup>>
    et.attention_split %q, %k, %v, %o, %lse kv_head(%g) split(%s) split_len(%c128) len(%n) stable(%p)
        append(%kn, %vn) scale(0.125)
        : memref<8x64xf32>, memref<256x2x64xbf16>, memref<256x2x64xbf16>, memref<2x8x64xf32>, memref<2x8xf32>,
          memref<1x64xf32, #gpu.address_space<workgroup>>, memref<1x64xf32, #gpu.address_space<workgroup>>
  }
}

// A wide et.rmsnorm after a wait, with the worker's thread count fixed and
// its weights read-only: each thread's four weights (columns t, t + 256,
// ...) are loaded before the wait, and the scale pass after the barrier
// loads none. Not when the row needs more than one trip per thread (2048
// columns on 256 threads), nor when a tile op writes the weights.
// GPU-LABEL: et.kernel @norm_weights_early
// GPU: et.task @early
// GPU: et.event.wait
// GPU: memref.load %arg1[
et.kernel @norm_weights_early(%x: memref<1x1024xf32>, %w: memref<1024xbf16>, %y: memref<1x1024xbf16>,
                              %xw: memref<1x2048xf32>, %ww: memref<2048xbf16>, %yw: memref<1x2048xbf16>,
                              %w2: memref<1024xbf16>) {
  %c1 = arith.constant 1 : index
  %e = et.event.create() : !et.event<>
  et.task @ready tiles(%t) in (%c1) {
    et.event.signal %e[] : !et.event<>
  }
  et.task @early tiles(%t) in (%c1) {
    et.event.wait %e[] : !et.event<>
    et.rmsnorm %x, %w, %y eps(1.0e-05) : memref<1x1024xf32>, memref<1024xbf16>, memref<1x1024xbf16>
  }
  et.task @wide tiles(%t) in (%c1) {
    et.event.wait %e[] : !et.event<>
    et.rmsnorm %xw, %ww, %yw eps(1.0e-05) : memref<1x2048xf32>, memref<2048xbf16>, memref<1x2048xbf16>
  }
  et.task @written tiles(%t) in (%c1) {
    et.event.wait %e[] : !et.event<>
    et.rmsnorm %x, %w2, %y eps(1.0e-05) : memref<1x1024xf32>, memref<1024xbf16>, memref<1x1024xbf16>
    %c0 = arith.constant 0 : index
    %one = arith.constant 1.0 : bf16
    memref.store %one, %w2[%c0] : memref<1024xbf16>
  }
}
