// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu threads=256 prefetch=registers}))" | FileCheck %s --check-prefix=PRE
// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu threads=256}))" | FileCheck %s --check-prefix=GPU
// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu}))" | FileCheck %s --check-prefix=NOTHREADS
// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=cpu}))" | FileCheck %s --check-prefix=CPU

// One query head's part of an output projection: K = 64 columns of x and
// of w (row stride 2048), 128 rows per tile, every head's tiles adding into
// the same rows of h (split K, `accumulate atomic`).
//
// Short rows: K / 8 = 8 lanes per row, so a warp covers 4 rows per load and
// 256 threads cover 32; each thread's 4 loads of the tile's 128 rows go out
// together, here before the task's wait (prefetch=registers; rows past N
// load the last row). After the wait, one x chunk per thread and token (one
// token here), a
// 3-step butterfly per row over its 8 lanes, and an atomic add from the
// row's first lane.
// PRE-LABEL: et.kernel @head_o
// PRE: et.task @o
// PRE: arith.remui %{{.*}}, %c8
// PRE: arith.divui %{{.*}}, %c8
// PRE-COUNT-4: vector.load %{{.*}} : memref<2048x64xbf16, strided<[2048, 1], offset: ?>>, vector<8xbf16>
// PRE: et.event.wait
// PRE: vector.load %{{.*}} : memref<1x64xbf16, #gpu.address_space<workgroup>>, vector<8xbf16>
// PRE-COUNT-3: gpu.shuffle  xor
// PRE: memref.atomic_rmw addf %{{.*}}, %{{.*}} : (f32, memref<?x2048xf32>) -> f32
// PRE-COUNT-9: gpu.shuffle  xor
// PRE-NOT: gpu.shuffle
// PRE: et.event.signal
// Without a weight prefetch the same loads come after the wait.
// GPU-LABEL: et.kernel @head_o
// GPU: et.event.wait
// GPU-COUNT-4: vector.load %{{.*}} : memref<2048x64xbf16, strided<[2048, 1], offset: ?>>, vector<8xbf16>
// GPU: memref.atomic_rmw addf
// Threads unknown: one warp per row, 8 of its lanes loading; the same atomic add.
// NOTHREADS-LABEL: et.kernel @head_o
// NOTHREADS: et.event.wait
// NOTHREADS-COUNT-5: gpu.shuffle  xor
// NOTHREADS: memref.atomic_rmw addf
// NOTHREADS-NOT: memref.store
// CPU-LABEL: et.kernel @head_o
// CPU: memref.atomic_rmw addf %{{.*}}, %{{.*}} : (f32, memref<?x2048xf32>) -> f32
// CPU-NOT: memref.store
et.kernel @head_o(%w: memref<2048x2048xbf16>, %h: memref<?x2048xf32>) {
  %c16 = arith.constant 16 : index
  %c32 = arith.constant 32 : index
  %c64 = arith.constant 64 : index
  %c128 = arith.constant 128 : index
  %e = et.event.create() : !et.event<>
  et.task @o tiles(%head, %blk) in (%c32, %c16) {
    %x = memref.alloca() : memref<1x64xbf16, #gpu.address_space<workgroup>>
    %k0 = arith.muli %head, %c64 : index
    %r0 = arith.muli %blk, %c128 : index
    %wh = memref.subview %w[0, %k0] [2048, 64] [1, 1] : memref<2048x2048xbf16> to memref<2048x64xbf16, strided<[2048, 1], offset: ?>>
    et.event.wait %e[] : !et.event<>
    et.linear %x, %wh, %h rows(%r0, %c128) accumulate atomic : memref<1x64xbf16, #gpu.address_space<workgroup>>, memref<2048x64xbf16, strided<[2048, 1], offset: ?>>, memref<?x2048xf32>
    et.event.signal %e[] : !et.event<>
  }
}

// `scale(%p)`: an expert's down projection weighted by the router's
// probability, read after the wait; every row's sum is multiplied by it
// before the atomic add (the GPU's from the row's first lane, the CPU's
// scalar loop likewise).
// GPU-LABEL: et.kernel @expert_down
// GPU: et.event.wait
// GPU: %[[P:.*]] = memref.load %{{.*}} : memref<1x8xf32>
// GPU: %[[S:.*]] = arith.mulf %{{.*}}, %[[P]] : f32
// GPU-NEXT: memref.atomic_rmw addf %[[S]]
// CPU-LABEL: et.kernel @expert_down
// CPU: %[[P:.*]] = memref.load %{{.*}} : memref<1x8xf32>
// CPU: %[[S:.*]] = arith.mulf %{{.*}}, %[[P]] : f32
// CPU-NEXT: memref.atomic_rmw addf %[[S]]
et.kernel @expert_down(%act: memref<1x64xbf16>, %wd: memref<2048x64xbf16>, %wts: memref<1x8xf32>, %h: memref<?x2048xf32>) {
  %c0 = arith.constant 0 : index
  %c3 = arith.constant 3 : index
  %c16 = arith.constant 16 : index
  %c128 = arith.constant 128 : index
  %e = et.event.create() : !et.event<>
  et.task @down tiles(%blk) in (%c16) {
    %r0 = arith.muli %blk, %c128 : index
    et.event.wait %e[] : !et.event<>
    %p = memref.load %wts[%c0, %c3] : memref<1x8xf32>
    et.linear %act, %wd, %h rows(%r0, %c128) accumulate atomic scale(%p) : memref<1x64xbf16>, memref<2048x64xbf16>, memref<?x2048xf32>
    et.event.signal %e[] : !et.event<>
  }
}
