// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu threads=384 prefetch=registers prefetch-tasks=other}))" | FileCheck %s --check-prefix=ROWS
// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu linear=spread threads=384 unroll=8}))" | FileCheck %s --check-prefix=SPREAD
// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu threads=384}))" | FileCheck %s --check-prefix=NOPRE
// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=cpu}))" | FileCheck %s --check-prefix=CPU

// et.linear ... norm: x is the f32 residual stream, read through an RMSNorm
// with weights %g. @rows: 24 rows of K = 1024 after a wait (one row per
// warp, or spread: 12 warps of two rows per trip); @few: 2 rows per tile
// (spread: K split over the warps); @one: @rows on a static row of x.

// One row per warp: the norm weights go to L2 before the wait (thread 0,
// one bulk prefetch) where the pass prefetches at all; each row's trips
// load x (f32) and the norm weights, multiply (rounding x * g to bf16),
// and sum x's squares beside the products; no pass of its own and no
// barrier; the row's sum is
// scaled by rsqrt(squares / K + eps) before lane 0 stores it.
// ROWS-LABEL: et.task @rows
// ROWS: scf.if
// ROWS: nvvm.cp.async.bulk.prefetch
// ROWS: et.event.wait
// ROWS-NOT: gpu.barrier
// ROWS: scf.for {{.*}} iter_args({{.*}}) -> (vector<8xf32>, vector<8xf32>)
// ROWS: %[[W:.*]] = vector.load %arg2
// ROWS: %[[X:.*]] = vector.load %arg0{{.*}} : memref<?x1024xf32>, vector<8xf32>
// ROWS: %[[G:.*]] = vector.load %arg1{{.*}} : memref<1024xbf16>, vector<8xbf16>
// ROWS: %[[GF:.*]] = arith.extf %[[G]]
// ROWS: %[[XG:.*]] = arith.mulf %[[X]], %[[GF]] : vector<8xf32>
// ROWS: %[[XR:.*]] = arith.truncf %[[XG]] : vector<8xf32> to vector<8xbf16>
// ROWS: %[[XB:.*]] = arith.extf %[[XR]]
// ROWS: vector.fma %{{.*}}, %[[XB]], %{{.*}} : vector<8xf32>
// ROWS: vector.fma %[[X]], %[[X]], %{{.*}} : vector<8xf32>
// ROWS: %[[INV:.*]] = math.rsqrt
// ROWS-NOT: gpu.barrier
// ROWS: scf.if
// ROWS-NEXT: %[[OUT:.*]] = arith.mulf %{{.*}}, %[[INV]] : f32
// ROWS-NEXT: memref.store %[[OUT]], %arg3

// A static single token that fits in shared memory (@one): the worker reads
// x once. Its first weight chunks go out right after the wait; its threads
// store x * g (bf16) into shared memory and meet at one barrier with the
// warps' sums of squares; the rows read x * g from there.
// ROWS-LABEL: et.task @one
// ROWS: %[[XS:.*]] = memref.alloca() : memref<1024xbf16, #gpu.address_space<workgroup>>
// ROWS: et.event.wait
// ROWS: vector.load %arg2
// ROWS: scf.for
// ROWS: vector.store %{{.*}}, %[[XS]][
// ROWS: vector.fma
// ROWS: gpu.barrier
// ROWS: %[[INV1:.*]] = math.rsqrt
// ROWS-NOT: gpu.barrier
// ROWS: vector.load %[[XS]][
// ROWS-NOT: gpu.barrier
// ROWS: arith.mulf %{{.*}}, %[[INV1]] : f32
// ROWS-LABEL: et.task @few

// Spread: @rows' warps take x's squares with each group's sums (no pass,
// no barrier) and scale both rows of a trip; @one stages x * g with its
// one barrier (no weights ahead of it in this layout); @few splits K over
// the warps, so each warp first takes the squares of all of x itself (a
// loop of its own), keeps the inverse RMS in shared memory, and the
// thread that adds a row's parts after the barrier scales them.
// SPREAD-LABEL: et.task @rows
// SPREAD-NOT: gpu.barrier
// SPREAD: vector.fma %[[X0:.*]], %[[X0]], %{{.*}} : vector<8xf32>
// SPREAD: %[[INV0:.*]] = math.rsqrt
// SPREAD-NOT: gpu.barrier
// SPREAD: arith.mulf %{{.*}}, %[[INV0]] : f32
// SPREAD: arith.mulf %{{.*}}, %[[INV0]] : f32
// SPREAD-NOT: gpu.barrier
// SPREAD-LABEL: et.task @one
// SPREAD: gpu.barrier
// SPREAD-NOT: gpu.barrier
// SPREAD-LABEL: et.task @few
// SPREAD: %[[SLOTS:.*]] = memref.alloca() : memref<512xf32, #gpu.address_space<workgroup>>
// SPREAD: scf.for
// SPREAD: %[[X:.*]] = vector.load %arg0
// SPREAD-NEXT: vector.fma %[[X]], %[[X]]
// SPREAD: %[[INV:.*]] = math.rsqrt
// SPREAD: memref.store %[[INV]], %[[SLOTS]][
// SPREAD: gpu.barrier
// SPREAD: %[[R:.*]] = memref.load %[[SLOTS]][
// SPREAD: arith.mulf %{{.*}}, %[[R]] : f32

// Without the prefetch option, nothing before the wait.
// NOPRE-LABEL: et.task @rows
// NOPRE-NOT: nvvm.cp.async.bulk.prefetch
// NOPRE: et.event.wait

// On the host, tokens outer: each token's squares once, then its rows.
// CPU-LABEL: et.task @rows
// CPU: scf.for
// CPU: math.fma
// CPU: %[[INV:.*]] = math.rsqrt
// CPU: scf.for
// CPU: memref.load %arg1
// CPU: arith.mulf %{{.*}}, %[[INV]] : f32
// CPU: memref.store

et.kernel @norm_linear(%h: memref<?x1024xf32>, %g: memref<1024xbf16>, %w: memref<2048x1024xbf16>, %y: memref<?x2048xf32>, %w2: memref<1024x1024xbf16>, %y2: memref<?x1024xf32>) {
  %c2 = arith.constant 2 : index
  %c32 = arith.constant 32 : index
  %c24 = arith.constant 24 : index
  %c86 = arith.constant 86 : index
  %c512 = arith.constant 512 : index
  %e = et.event.create() : !et.event<>
  et.task @rows tiles(%t) in (%c86) {
    %r0 = arith.muli %t, %c24 : index
    et.event.wait %e[] : !et.event<>
    et.linear %h, %w, %y rows(%r0, %c24) norm(%g : memref<1024xbf16>) eps(1.0e-06) : memref<?x1024xf32>, memref<2048x1024xbf16>, memref<?x2048xf32>
  }
  et.task @one tiles(%t) in (%c86) {
    %r0 = arith.muli %t, %c24 : index
    %h1 = memref.subview %h[0, 0] [1, 1024] [1, 1] : memref<?x1024xf32> to memref<1x1024xf32, strided<[1024, 1]>>
    et.event.wait %e[] : !et.event<>
    et.linear %h1, %w, %y rows(%r0, %c24) norm(%g : memref<1024xbf16>) eps(1.0e-06) : memref<1x1024xf32, strided<[1024, 1]>>, memref<2048x1024xbf16>, memref<?x2048xf32>
  }
  et.task @few tiles(%t) in (%c512) {
    %r0 = arith.muli %t, %c2 : index
    et.linear %h, %w2, %y2 rows(%r0, %c2) norm(%g : memref<1024xbf16>) eps(1.0e-06) : memref<?x1024xf32>, memref<1024x1024xbf16>, memref<?x1024xf32>
    et.event.signal %e[] : !et.event<>
  }
}
