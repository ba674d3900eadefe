// RUN: et-opt %s --convert-et-to-nvvm | FileCheck %s
// RUN: et-opt %s --pass-pipeline="builtin.module(et-lower-to-nvvm-pipeline{mode=keep})" | FileCheck %s --check-prefix=PTX

// Weight rows staged across tiles. Each single-tile entry of a staged task
// gets a stage word in the program table's third column: its region (the
// entry's position in the worker's program mod 2) | the parity of that
// region's mbarrier phase << 1. Worker 0: @a 0 in region 0 (phase 0),
// @b 0 in region 1, @a 1 in region 0 again (phase 1: word 2); cyclic
// entries (@d) are not staged (-1), and neither is @c (no
// et.staged_rows); worker 1's @b 1 is its second entry (region 1). The regions follow the tile buffers (none here): two of
// 4096 bytes (the largest task's rows, rounded to 128), 8192 bytes of
// dynamic shared memory in all. Thread 0 initializes the two mbarriers;
// before an entry's waits, the last thread issues the next entry's copies
// (an expect-tx arrive with their bytes, then one bulk copy per op); the
// staged view waits on the entry's mbarrier phase.
// CHECK: memref.global "private" constant @__et_k_program : memref<8x3xi32> = dense<{{\[\[}}0, 0, 0], [1, 0, 1], [0, 1, 2], [3, -1, -1], [2, 0, -1], [1, 1, 1], [2, 1, -1], [3, -1, -1]]>
// CHECK: llvm.mlir.global external constant @__et_dynamic_shared_bytes(8192 : i32)
// CHECK: gpu.func @k({{.*}}workgroup(%{{.*}} : memref<4xi64, #gpu.address_space<workgroup>>, %{{.*}} : memref<2xi64, #gpu.address_space<workgroup>>
// CHECK: nvvm.mbarrier.init
// CHECK: nvvm.mbarrier.init
// CHECK: nvvm.fence.mbarrier.init
// CHECK: scf.while
// CHECK: scf.index_switch
// CHECK: nvvm.mbarrier.arrive.expect_tx
// CHECK: nvvm.cp.async.bulk.shared.cluster.global
// CHECK: nvvm.mbarrier.try_wait.parity
// CHECK: memref.view

// PTX: .visible .global .align 4 .u32 __et_dynamic_shared_bytes = 8192;
// PTX: mbarrier.init.shared.b64
// PTX: mbarrier.arrive.expect_tx.shared.b64
// PTX: cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes
// PTX: mbarrier.try_wait.parity.shared.b64

et.kernel @k(%w: memref<16x512xbf16>, %y: memref<16xf32>, %n: index) {
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %e = et.event.create() : !et.event<>
  et.task @a tiles(%t) in (%c2) {
    %r0 = arith.muli %t, %c4 : index
    %v, %count = et.staged_rows %w rows(%r0, %c4) offset 0 : memref<16x512xbf16> -> memref<4x512xbf16, #gpu.address_space<workgroup>>
    %z = arith.constant 0 : index
    %b = memref.load %v[%z, %z] : memref<4x512xbf16, #gpu.address_space<workgroup>>
    %f = arith.extf %b : bf16 to f32
    memref.store %f, %y[%r0] : memref<16xf32>
    et.event.signal %e[] : !et.event<>
  }
  et.task @b tiles(%t) in (%c2) {
    et.event.wait %e[] : !et.event<>
    %r0 = arith.muli %t, %c4 : index
    %r1 = arith.addi %r0, %c4 : index
    %v, %count = et.staged_rows %w rows(%r1, %c2) offset 2048 : memref<16x512xbf16> -> memref<2x512xbf16, #gpu.address_space<workgroup>>
  }
  et.task @c tiles(%t) in (%c2) {
    et.event.wait %e[] : !et.event<>
  }
  et.task @d tiles(%t) in (%n) {
    %v, %count = et.staged_rows %w rows(%t, %c2) offset 0 : memref<16x512xbf16> -> memref<2x512xbf16, #gpu.address_space<workgroup>>
  }
  et.schedule static workers(2) {
    et.worker 0 {
      et.run @a tiles [0]
      et.run @b tiles [0]
      et.run @a tiles [1]
      et.run @d cyclic 0
    }
    et.worker 1 {
      et.run @c tiles [0]
      et.run @b tiles [1]
      et.run @c tiles [1]
      et.run @d cyclic 0
    }
  }
}
