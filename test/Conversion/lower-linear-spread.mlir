// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu linear=spread threads=512 unroll=8}))" | FileCheck %s
// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu linear=rows threads=512 unroll=8}))" | FileCheck %s --check-prefix=ROWS
// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu linear=spread threads=512 unroll=8 stage-bytes=16384 stage-tasks=qk}))" | FileCheck %s --check-prefix=STAGED

// linear=spread on 16 warps (512 threads), K = 1024: four chunks of 256
// columns per row.

// 8 rows: each row's K in two parts on two warps (two chunks each), whose
// lane sums meet in shared memory [parity 2][parts 2][mem 1][rows 8]
// [tokens 1]; after a barrier, a thread adds part 1 to part 0 and stores.
// The one-row-per-warp lowering leaves half the warps idle instead.
// CHECK-LABEL: et.task @split
// CHECK: memref.alloca() : memref<32xf32, #gpu.address_space<workgroup>>
// CHECK-COUNT-2: vector.load %arg1[
// CHECK-NOT: vector.load %arg1[
// CHECK: memref.store %{{.*}}, %alloca[
// CHECK: gpu.barrier
// CHECK: %[[P0:.*]] = memref.load %alloca[
// CHECK: %[[P1:.*]] = memref.load %alloca[
// CHECK: %[[SUM:.*]] = arith.addf %[[P0]], %[[P1]] : f32
// CHECK: memref.store %[[SUM]], %arg2[
// ROWS-LABEL: et.task @split
// ROWS-NOT: memref.alloca
// ROWS-NOT: gpu.barrier
// ROWS: et.task @pair

// 32 rows: two rows per warp in one trip of eight loads, the rows warp and
// warp + 16, each x chunk loaded once for both; no barrier.
// CHECK-LABEL: et.task @pair
// CHECK-NOT: gpu.barrier
// CHECK: vector.load %arg3[%[[R0:.*]], %[[K0:.*]]]
// CHECK-NEXT: vector.load %arg3[%[[R1:.*]], %[[K0]]]
// CHECK-COUNT-3: vector.load %arg3[%[[R0]],
// CHECK: vector.load %arg0[
// CHECK: memref.store %{{.*}}, %arg4[%{{.*}}, %[[R0]]]
// CHECK: memref.store %{{.*}}, %arg4[
// CHECK-NOT: gpu.barrier

// A gated row whole in one trip: four chunks of the gate row and four of
// the up row; the warps with a second row (24 rows on 16 warps) take it
// in a loop after the first.
// CHECK-LABEL: et.task @gated
// CHECK: vector.load %arg5[%[[G:.*]], %[[C:.*]]]
// CHECK-NEXT: vector.load %arg6[%[[G]], %[[C]]]
// CHECK-COUNT-3: vector.load %arg6[%[[G]],
// CHECK: arith.negf
// CHECK: scf.for %[[ROW:.*]] = %{{.*}} to %{{.*}} step %c16
// CHECK: vector.load %arg5[%[[ROW]], %[[C2:.*]]]
// CHECK-NEXT: vector.load %arg6[%[[ROW]], %[[C2]]]
// CHECK-COUNT-3: vector.load %arg6[%[[ROW]],

// After the tile's wait, a norm, then q and k: k follows another linear
// op, so its first trip (two chunks of its row part) loads before the
// norm; q's loads stay where q is.
// CHECK-LABEL: et.task @qk
// CHECK: et.event.wait
// CHECK-NEXT: et.thread_id
// CHECK: scf.if %{{.*}} -> (vector<8xbf16>, vector<8xbf16>)
// CHECK-COUNT-2: vector.load %arg13[
// CHECK: memref.load %arg8[
// CHECK: gpu.barrier
// CHECK: vector.load %arg11[
// CHECK-NOT: vector.load %arg13[
// CHECK: memref.store %{{.*}}, %arg14[
// With q's first rows staged (stage-bytes), k starts no loads early: q
// reads those rows from shared memory, and k's loads wait for q's loop.
// STAGED-LABEL: et.task @qk
// STAGED: et.event.wait
// STAGED-NOT: vector.load %arg13[
// STAGED: et.staged_rows %arg11
// STAGED-NOT: vector.load %arg13[
// STAGED: vector.load %arg11[
// STAGED: vector.load %arg13[
// STAGED: memref.store %{{.*}}, %arg14[
et.kernel @spread(%x: memref<?x1024xbf16>, %w8: memref<64x1024xbf16>, %y8: memref<?x64xf32>,
                  %w32: memref<64x1024xbf16>, %y32: memref<?x64xf32>,
                  %wg: memref<48x1024xbf16>, %wu: memref<48x1024xbf16>, %yg: memref<?x48xbf16>,
                  %h: memref<?x1024xf32>, %ln: memref<1024xbf16>, %xn: memref<?x1024xbf16>,
                  %wq: memref<64x1024xbf16>, %yq: memref<?x64xf32>, %wk: memref<16x1024xbf16>, %yk: memref<?x16xf32>) {
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  %c24 = arith.constant 24 : index
  %c32 = arith.constant 32 : index
  et.task @split tiles(%t) in (%c8) {
    %r0 = arith.muli %t, %c8 : index
    et.linear %x, %w8, %y8 rows(%r0, %c8) : memref<?x1024xbf16>, memref<64x1024xbf16>, memref<?x64xf32>
  }
  et.task @pair tiles(%t) in (%c2) {
    %r0 = arith.muli %t, %c32 : index
    et.linear %x, %w32, %y32 rows(%r0, %c32) : memref<?x1024xbf16>, memref<64x1024xbf16>, memref<?x64xf32>
  }
  et.task @gated tiles(%t) in (%c2) {
    %r0 = arith.muli %t, %c24 : index
    et.linear %x, %wg, %yg rows(%r0, %c24) gated(%wu) : memref<?x1024xbf16>, memref<48x1024xbf16>, memref<?x48xbf16>, memref<48x1024xbf16>
  }
  %e = et.event.create() : !et.event<>
  et.task @first tiles(%t) in (%c1) {
    et.event.signal %e[] : !et.event<>
  }
  et.task @qk tiles(%t) in (%c2) {
    et.event.wait %e[] : !et.event<>
    et.rmsnorm %h, %ln, %xn eps(1.0e-06) : memref<?x1024xf32>, memref<1024xbf16>, memref<?x1024xbf16>
    %q0 = arith.muli %t, %c32 : index
    et.linear %xn, %wq, %yq rows(%q0, %c32) : memref<?x1024xbf16>, memref<64x1024xbf16>, memref<?x64xf32>
    %k0 = arith.muli %t, %c8 : index
    et.linear %xn, %wk, %yk rows(%k0, %c8) : memref<?x1024xbf16>, memref<16x1024xbf16>, memref<?x16xf32>
  }
}
