// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu threads=256 mma=sync}))" | FileCheck %s --check-prefix=GPU
// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu threads=512 mma=sync}))" | FileCheck %s --check-prefix=T512
// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=cpu}))" | FileCheck %s --check-prefix=CPU
// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu threads=256}))" | FileCheck %s --check-prefix=WG

// A 64 x 64 x 32 tile, 3 stages, on 8 warps: 2 x 4 warps of 32 x 16 each
// (2 m16 tiles x 2 n8 tiles = 16 accumulators per thread). The ring is
// one dynamic shared-memory buffer: 3 x (64 + 64) rows of 32 + 8 bf16.
// Two slices are issued before the loop (a commit each); every step waits
// for all but the newest group, synchronizes, issues the slice two ahead
// (zero-filling chunks past M, N or K through the source size) and runs
// 2 k16 steps x (2 + 1 ldmatrix.x4, 4 mma.sync). The epilogue stages the
// block in the ring (after a barrier: every warp is done with it): each
// thread writes its fragments as bf16 pairs into rows of 64 + 16 bf16 (32
// bytes of padding), then after a barrier the threads copy 16-byte chunks
// of rows below M to y (element by element where a chunk crosses N). A
// barrier frees the ring.
// GPU-LABEL: et.kernel @gemm
// GPU: memref.alloca() {et.dynamic_shared} : memref<15360xbf16, #gpu.address_space<workgroup>>
// GPU: nvvm.cp.async.shared.global %{{.*}}, %{{.*}}, 16, cache = cg, %{{.*}} : !llvm.ptr<3>, !llvm.ptr<1>, i32
// GPU: nvvm.cp.async.commit.group
// GPU: nvvm.cp.async.commit.group
// GPU: scf.for {{.*}} iter_args({{.*}}) -> (f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32)
// GPU: nvvm.cp.async.wait.group 1
// GPU-NEXT: gpu.barrier
// GPU: nvvm.cp.async.commit.group
// GPU-COUNT-3: nvvm.ldmatrix {{.*}} {eltType = #nvvm.ld_st_matrix_elt_type<b16>, layout = #nvvm.mma_layout<row>, num = 4 : i32, shape = #nvvm.ld_st_matrix_shape<m = 8, n = 8>}
// GPU-COUNT-4: nvvm.mma.sync A[{{.*}}] B[{{.*}}] C[{{.*}}] {layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>, multiplicandAPtxType = #nvvm.mma_type<bf16>, multiplicandBPtxType = #nvvm.mma_type<bf16>, shape = #nvvm.shape<m = 16, n = 8, k = 16>}
// GPU-COUNT-3: nvvm.ldmatrix
// GPU-COUNT-4: nvvm.mma.sync
// GPU-NOT: nvvm.mma.sync
// GPU: scf.yield
// GPU: nvvm.cp.async.wait.group 0
// GPU-NEXT: gpu.barrier
// GPU-COUNT-8: llvm.store %{{.*}}, %{{.*}} {alignment = 4 : i64} : vector<2xbf16>, !llvm.ptr<3>
// GPU-NEXT: gpu.barrier
// GPU: llvm.load %{{.*}} {alignment = 16 : i64} : !llvm.ptr<3> -> vector<8xbf16>
// GPU: vector.store %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] {alignment = 16 : i64} : memref<?x96xbf16>, vector<8xbf16>
// GPU: memref.store %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] : memref<?x96xbf16>
// GPU: gpu.barrier
// GPU-NOT: et.matmul
//
// With 512 threads (16 warps), 4 x 4 warps of 16 x 16: 8 accumulators.
// T512-LABEL: et.kernel @gemm
// T512: scf.for {{.*}} iter_args({{.*}}) -> (f32, f32, f32, f32, f32, f32, f32, f32)
//
// On the CPU target, scalar loops over the rows of the block (strided by
// thread) and its columns.
// CPU-LABEL: et.kernel @gemm
// CPU: scf.for
// CPU: scf.for
// CPU: scf.for {{.*}} iter_args({{.*}}) -> (f32)
// CPU: arith.extf
// CPU: arith.truncf
// CPU-NOT: et.matmul
et.kernel @gemm(%x: memref<?x200xbf16>, %w: memref<96x200xbf16>, %y: memref<?x96xbf16>, %rows: index) {
  %c2 = arith.constant 2 : index
  %c64 = arith.constant 64 : index
  %tm = arith.ceildivsi %rows, %c64 : index
  et.task @gemm tiles(%i, %j) in (%tm, %c2) {
    %m0 = arith.muli %i, %c64 : index
    %n0 = arith.muli %j, %c64 : index
    et.matmul %x, %w, %y at(%m0, %n0) tile [64, 64, 32] stages 3 : memref<?x200xbf16>, memref<96x200xbf16>, memref<?x96xbf16>
  }
}

// One stage: copy, wait for it, multiply, barrier, in every step. Four of
// the eight warps own a 16 x 16 sub-block of the 32 x 32 tile; the others
// only copy (the multiply-adds sit in an scf.if on the warp index).
// GPU-LABEL: et.kernel @one_stage
// GPU-NOT: nvvm.cp.async.commit.group
// GPU: scf.for
// GPU: nvvm.cp.async.commit.group
// GPU-NEXT: nvvm.cp.async.wait.group 0
// GPU-NEXT: gpu.barrier
// GPU: scf.if %{{.*}} -> (f32, f32, f32, f32, f32, f32, f32, f32)
// GPU: nvvm.mma.sync
// GPU: gpu.barrier
// GPU: vector.load %{{.*}} {alignment = 16 : i64} : memref<64x32xf32>, vector<4xf32>
// GPU: arith.addf %{{.*}}, %{{.*}} : vector<4xf32>
// GPU: vector.store %{{.*}} {alignment = 16 : i64} : memref<64x32xf32>, vector<4xf32>
et.kernel @one_stage(%x: memref<64x64xbf16>, %w: memref<32x64xbf16>, %y: memref<64x32xf32>) {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c32 = arith.constant 32 : index
  et.task @gemm tiles(%i) in (%c2) {
    %m0 = arith.muli %i, %c32 : index
    et.matmul %x, %w, %y at(%m0, %c0) tile [32, 32, 64] stages 1 accumulate : memref<64x64xbf16>, memref<32x64xbf16>, memref<64x32xf32>
  }
}

// With mma=wgmma and BK = 64, BM a multiple of 64, 3+ stages: two
// warpgroups of 64 x 128 each. The ring (4 x (128 + 128) rows of 128 bytes,
// plus 1024 bytes to align it) holds swizzled rows: chunk kc of row r at
// chunk kc ^ (r % 8). Two slices go out before the loop; every step waits
// for all but one copy group, fences the copies for the async proxy,
// synchronizes, issues the slice two ahead, and runs four m64n128k16
// wgmma on the loop-carried accumulator struct (64 f32), leaving one group
// in flight. The tiles above (BK = 32, one stage) keep mma.sync.
// WG-LABEL: et.kernel @gemm
// WG: nvvm.mma.sync
// WG-LABEL: et.kernel @one_stage
// WG: nvvm.mma.sync
// WG-LABEL: et.kernel @wgmma
// WG: memref.alloca() {et.dynamic_shared} : memref<132096xi8, #gpu.address_space<workgroup>>
// WG: arith.xori
// WG: nvvm.cp.async.shared.global
// WG: nvvm.cp.async.commit.group
// WG: nvvm.cp.async.commit.group
// WG: scf.for {{.*}} iter_args(%{{.*}} = %{{.*}}) -> (!llvm.struct<(f32, f32,
// WG: nvvm.cp.async.wait.group 1
// WG-NEXT: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// WG-NEXT: gpu.barrier
// WG-NOT: nvvm.mma.sync
// WG: nvvm.wgmma.fence.aligned
// WG-COUNT-4: nvvm.wgmma.mma_async {{.*}}, <m = 64, n = 128, k = 16>, D[<f32>, <one>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>]
// WG: nvvm.wgmma.commit.group.sync.aligned
// WG-NEXT: nvvm.wgmma.wait.group.sync.aligned 1
// WG: nvvm.wgmma.wait.group.sync.aligned 0
// WG-NEXT: nvvm.cp.async.wait.group 0
// WG-NEXT: gpu.barrier
// WG-COUNT-32: llvm.store %{{.*}}, %{{.*}} {alignment = 8 : i64} : vector<2xf32>, !llvm.ptr<3>
// WG: gpu.barrier
// WG: vector.store %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] {alignment = 16 : i64} : memref<?x256xf32>, vector<4xf32>
// WG: gpu.barrier
et.kernel @wgmma(%x: memref<?x512xbf16>, %w: memref<256x512xbf16>, %y: memref<?x256xf32>, %rows: index) {
  %c2 = arith.constant 2 : index
  %c128 = arith.constant 128 : index
  %tm = arith.ceildivsi %rows, %c128 : index
  et.task @gemm tiles(%i, %j) in (%tm, %c2) {
    %m0 = arith.muli %i, %c128 : index
    %n0 = arith.muli %j, %c128 : index
    et.matmul %x, %w, %y at(%m0, %n0) tile [128, 128, 64] stages 4 : memref<?x512xbf16>, memref<256x512xbf16>, memref<?x256xf32>
  }
}

// Rows of 75 f32 are not 16-byte aligned: no stage; each thread stores its
// fragments with bounds checks, one element at a time (no pairs at an odd
// row stride either).
// GPU-LABEL: et.kernel @odd_n
// WG-LABEL: et.kernel @odd_n
// GPU-NOT: llvm.store
// GPU: nvvm.mma.sync
// GPU-NOT: vector.store
// GPU: memref.store %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] : memref<?x75xf32>
et.kernel @odd_n(%x: memref<?x64xbf16>, %w: memref<75x64xbf16>, %y: memref<?x75xf32>, %rows: index) {
  %c0 = arith.constant 0 : index
  %c32 = arith.constant 32 : index
  %tm = arith.ceildivsi %rows, %c32 : index
  et.task @gemm tiles(%i) in (%tm) {
    %m0 = arith.muli %i, %c32 : index
    et.matmul %x, %w, %y at(%m0, %c0) tile [32, 80, 32] : memref<?x64xbf16>, memref<75x64xbf16>, memref<?x75xf32>
  }
}

// A K range: slices from k0 / BK to ceildiv(min(k1, K), BK) (none when
// empty), and only columns in [k0, min(k1, K)) copied (the others
// zero-filled).
// WG-LABEL: et.kernel @k_range
// WG: %[[HI:.*]] = arith.minui %{{.*}}, %c512
// WG: %[[FIRST:.*]] = arith.divui %{{.*}}, %c64
// WG: %[[END:.*]] = arith.ceildivui %[[HI]], %c64
// WG: %[[N:.*]] = arith.subi %[[END]], %[[FIRST]]
// WG: %[[MORE:.*]] = arith.cmpi ugt, %[[END]], %[[FIRST]]
// WG: %[[COUNT:.*]] = arith.select %[[MORE]], %[[N]], %c0
// WG: arith.cmpi uge
// WG: arith.cmpi ult, %{{.*}}, %[[HI]]
// WG: scf.for %{{.*}} = %{{.*}} to %[[COUNT]] step
// CPU-LABEL: et.kernel @k_range
// CPU: arith.minui
// CPU: arith.maxui
et.kernel @k_range(%x: memref<?x512xbf16>, %w: memref<256x512xbf16>, %y: memref<?x256xf32>, %rows: index, %k0: index, %k1: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  et.task @gemm tiles(%i) in (%c1) {
    et.matmul %x, %w, %y at(%c0, %c0) k(%k0, %k1) tile [128, 128, 64] stages 4 : memref<?x512xbf16>, memref<256x512xbf16>, memref<?x256xf32>
  }
}

// Two GEMM tiles in one task share the dynamic shared memory: each has its
// ring (both start at its base), and the first ends with a barrier before
// the second issues its copies.
// GPU-LABEL: et.kernel @two_tiles
// GPU: memref.alloca() {et.dynamic_shared}
// GPU: memref.alloca() {et.dynamic_shared}
// GPU: nvvm.mma.sync
// GPU: nvvm.cp.async.wait.group 0
// GPU: vector.store %{{.*}}, %arg2
// GPU: gpu.barrier
// GPU: nvvm.cp.async.shared.global
// GPU: nvvm.mma.sync
// GPU: vector.store %{{.*}}, %arg3
// GPU: gpu.barrier
et.kernel @two_tiles(%x: memref<?x64xbf16>, %w: memref<64x64xbf16>, %y: memref<?x64xf32>, %z: memref<?x64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    et.matmul %x, %w, %y at(%c0, %c0) tile [16, 64, 64] : memref<?x64xbf16>, memref<64x64xbf16>, memref<?x64xf32>
    et.matmul %x, %w, %z at(%c0, %c0) tile [16, 64, 64] : memref<?x64xbf16>, memref<64x64xbf16>, memref<?x64xf32>
  }
}

// With accumulate, the epilogue reads y's 16-byte chunks in groups of 8
// per thread before it adds and stores any of them (a 128 x 128 f32 block
// on 256 threads: 16 chunks per thread, two groups), so the reads'
// round trips overlap.
// GPU-LABEL: et.kernel @acc_groups
// GPU: gpu.barrier
// GPU-COUNT-8: vector.load %{{.*}} : memref<?x128xf32>, vector<4xf32>
// GPU-NOT: vector.store
// GPU-COUNT-8: vector.store %{{.*}} : memref<?x128xf32>, vector<4xf32>
// GPU-COUNT-8: vector.load %{{.*}} : memref<?x128xf32>, vector<4xf32>
// GPU-NOT: vector.store
// GPU-COUNT-8: vector.store %{{.*}} : memref<?x128xf32>, vector<4xf32>
// GPU-NOT: vector.load %{{.*}} : memref<?x128xf32>
et.kernel @acc_groups(%x: memref<?x256xbf16>, %w: memref<128x256xbf16>, %y: memref<?x128xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  et.task @gemm tiles(%i) in (%c1) {
    et.matmul %x, %w, %y at(%c0, %c0) tile [128, 128, 64] stages 3 accumulate : memref<?x256xbf16>, memref<128x256xbf16>, memref<?x128xf32>
  }
}

// `registers`: no ring. 16 x 16 blocks on 8 warps: the tile's two 8-row
// blocks of w in every warp (8 accumulators), the 8 warps taking the 4
// 32-column chunks of K in turn (one chunk each, half of them none), so the
// loop makes one trip: a 16-byte load (vector<4xi32>) of each block of w
// (zeros past K) and of rows g and g + 8 of x, then 2 k16 steps x 2
// blocks of mma.sync. Warps 1-7 write their partial sums into the dynamic
// shared memory (7 x 8 x 32 f32), warp 0 adds them after a barrier (a loop
// over the 7), stores
// into y (accumulate: y read first), and a barrier frees the memory.
// GPU-LABEL: et.kernel @registers
// GPU: memref.alloca() {et.dynamic_shared} : memref<3584xbf16, #gpu.address_space<workgroup>>
// GPU-NOT: nvvm.cp.async
// GPU: scf.for {{.*}} iter_args({{.*}}) -> (f32, f32, f32, f32, f32, f32, f32, f32)
// GPU-COUNT-4: llvm.load %{{.*}} {alignment = 16 : i64} : !llvm.ptr<1> -> vector<4xi32>
// GPU-COUNT-4: nvvm.mma.sync
// GPU-NOT: nvvm.mma.sync
// GPU: scf.yield
// GPU: scf.if
// GPU-COUNT-8: llvm.store %{{.*}}, %{{.*}} {alignment = 4 : i64} : f32, !llvm.ptr<3>
// GPU: gpu.barrier
// GPU: scf.if %{{.*}} -> (f32, f32, f32, f32, f32, f32, f32, f32)
// GPU: scf.for %{{.*}} = %{{.*}} to %c7{{.*}} iter_args
// GPU-COUNT-8: llvm.load %{{.*}} {alignment = 4 : i64} : !llvm.ptr<3> -> f32
// GPU: vector.load %{{.*}} : memref<?x40xf32>, vector<2xf32>
// GPU: gpu.barrier
// GPU-NOT: et.matmul
// CPU-LABEL: et.kernel @registers
// CPU: scf.for {{.*}} iter_args({{.*}}) -> (f32)
// CPU-NOT: et.matmul
et.kernel @registers(%x: memref<?x128xbf16>, %w: memref<40x128xbf16>, %y: memref<?x40xf32>) {
  %c0 = arith.constant 0 : index
  %c3 = arith.constant 3 : index
  %c16 = arith.constant 16 : index
  et.task @gemm tiles(%j) in (%c3) {
    %n0 = arith.muli %j, %c16 : index
    et.matmul %x, %w, %y at(%c0, %n0) tile [16, 16, 32] registers accumulate : memref<?x128xbf16>, memref<40x128xbf16>, memref<?x40xf32>
  }
}

// `accumulate atomic` (the parts of a split K meeting in y): the epilogue
// adds each element of a staged 16-byte chunk into y with an atomic add,
// and never reads y first; the fragments of a tile without an output
// stage, and the CPU loops, likewise.
// GPU-LABEL: et.kernel @atomic
// GPU: gpu.barrier
// GPU-NOT: vector.load %{{.*}} : memref<?x128xf32>
// GPU-COUNT-4: memref.atomic_rmw addf %{{.*}}, %{{.*}} : (f32, memref<?x128xf32>) -> f32
// GPU-NOT: vector.store %{{.*}} : memref<?x128xf32>
// CPU-LABEL: et.kernel @atomic
// CPU: scf.for {{.*}} iter_args({{.*}}) -> (f32)
// CPU: memref.atomic_rmw addf %{{.*}}, %{{.*}} : (f32, memref<?x128xf32>) -> f32
// CPU-NOT: memref.store
et.kernel @atomic(%x: memref<?x256xbf16>, %w: memref<128x256xbf16>, %y: memref<?x128xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c128 = arith.constant 128 : index
  et.task @gemm tiles(%i) in (%c1) {
    et.matmul %x, %w, %y at(%c0, %c0) k(%c0, %c128) tile [64, 128, 64] stages 3 accumulate atomic : memref<?x256xbf16>, memref<128x256xbf16>, memref<?x128xf32>
  }
}
