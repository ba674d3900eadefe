// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu threads=256 rows-in-flight=4}))" | FileCheck %s
// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu threads=256}))" | FileCheck %s --check-prefix=ONE

// rows-in-flight=4: the row-wise ops of prompt tiles take 4 rows (or 4
// elements per thread) at a time with every load issued before the first
// use, then the rest one at a time. The default (1) keeps one row or
// element per trip.

// Wide rows: chunks of 16 tokens; in each, groups of 4 tokens whose sums of
// squares are carried together (16 loads, then 16 FMAs), then single
// tokens; after the barrier the same two loops scale the rows.
// CHECK-LABEL: et.kernel @norm
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c16
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c4
// CHECK: scf.for {{.*}} -> (f32, f32, f32, f32)
// CHECK-COUNT-16: memref.load %arg0
// CHECK-NOT: memref.load
// CHECK-COUNT-16: math.fma
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c1
// CHECK: scf.for {{.*}} -> (f32) {
// CHECK-COUNT-4: memref.load %arg0
// CHECK: gpu.barrier
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c4
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c1
// CHECK: gpu.barrier
// ONE-LABEL: et.kernel @norm
// ONE-NOT: -> (f32, f32
// ONE: gpu.barrier
et.kernel @norm(%x: memref<?x2048xf32>, %w: memref<2048xbf16>, %y: memref<?x2048xbf16>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    et.rmsnorm %x, %w, %y eps(1.0e-05) : memref<?x2048xf32>, memref<2048xbf16>, memref<?x2048xbf16>
  }
}

// Narrow rows (a warp per row): whole rounds of 4 rows per warp, their
// loads first, then the rest one row per warp.
// CHECK-LABEL: et.kernel @heads
// CHECK: scf.for {{.*}} -> (f32, f32, f32, f32)
// CHECK-COUNT-16: memref.load %arg0
// CHECK-NOT: memref.load
// CHECK-COUNT-16: math.fma
// CHECK: scf.for {{.*}} -> (f32) {
// ONE-LABEL: et.kernel @heads
// ONE-NOT: -> (f32, f32
// ONE: scf.for {{.*}} -> (f32) {
et.kernel @heads(%x: memref<?x128xf32>, %w: memref<128xbf16>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    et.rmsnorm %x, %w, %x eps(1.0e-06) : memref<?x128xf32>, memref<128xbf16>, memref<?x128xf32>
  }
}

// KV append: whole trips of 4 x threads elements load all four before the
// guarded stores (rows past the cache's end are dropped), then the rest
// one element per thread.
// CHECK-LABEL: et.kernel @append
// CHECK: scf.for
// CHECK-COUNT-4: memref.load %arg0
// CHECK-NOT: memref.store
// CHECK-COUNT-4: scf.if
// CHECK: scf.for
// CHECK: memref.load %arg0
// CHECK: scf.if
// ONE-LABEL: et.kernel @append
// ONE: scf.for
// ONE: memref.load %arg0
// ONE-NOT: memref.load
// ONE: memref.store
et.kernel @append(%new: memref<?x8x64xf32>, %cache: memref<64x8x64xbf16>, %at: index) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    et.kv_append %new, %cache, %at : memref<?x8x64xf32>, memref<64x8x64xbf16>
  }
}

// Embedding gather: 16-byte chunks (8 bf16 of a table row, widened to f32)
// per thread and trip; with 4 in flight, a trip loads 4 ids, then 4 rows,
// then stores the 4 chunks; the rest go one chunk per trip. The ids may be
// a strided view (a prompt tile's rows of the token buffer).
// CHECK-LABEL: et.kernel @embed
// CHECK: scf.for
// CHECK-COUNT-4: memref.load %arg0
// CHECK-COUNT-4: vector.load %arg1{{.*}} : memref<1000x2048xbf16>, vector<8xbf16>
// CHECK-NOT: vector.store
// CHECK-COUNT-4: vector.store %{{.*}}, %arg2{{.*}} : memref<?x2048xf32>, vector<8xf32>
// CHECK: scf.for
// CHECK: memref.load %arg0
// CHECK: vector.load %arg1
// CHECK: vector.store
// ONE-LABEL: et.kernel @embed
// ONE: scf.for
// ONE: memref.load %arg0
// ONE: vector.load %arg1{{.*}} vector<8xbf16>
// ONE: vector.store %{{.*}}, %arg2{{.*}} vector<8xf32>
// ONE-NOT: vector.load
et.kernel @embed(%ids: memref<?xi32, strided<[1], offset: ?>>, %table: memref<1000x2048xbf16>, %y: memref<?x2048xf32>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    et.embedding %table, %ids, %y : memref<1000x2048xbf16>, memref<?xi32, strided<[1], offset: ?>>, memref<?x2048xf32>
  }
}
