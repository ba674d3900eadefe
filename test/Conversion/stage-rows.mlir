// RUN: et-opt %s --split-input-file --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu stage-bytes=40960}))" | FileCheck %s
// RUN: et-opt %s --split-input-file --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu stage-bytes=40960 stage-tasks=late}))" | FileCheck %s --check-prefix=TASKS
// RUN: et-opt %s --split-input-file --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu}))" | FileCheck %s --check-prefix=OFF
// With the L2 weight prefetch too (in task @l2), which the plan sees.
// RUN: et-opt %s --split-input-file --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu stage-bytes=40960 prefetch=l2 prefetch-tasks=l2}))" | FileCheck %s --check-prefix=L2

// With stage-bytes, each et.linear at a task's top level reads its first
// rows through et.staged_rows, after the wait: the task's ops take the
// bytes in order (16 rows of 1 KiB at offset 0, then 24 of the other op's
// 32 rows in the 40 KiB left). A row below the staged count reads the
// view, the others w. A linear whose row count is not a constant stages
// nothing. stage-tasks limits staging to the tasks it names; without
// stage-bytes, no op stages.
// CHECK-LABEL: et.task @early
// CHECK: et.event.wait
// CHECK: %[[V1:.*]], %[[N1:.*]] = et.staged_rows %arg1 rows(%{{.*}}, %{{.*}}) offset 0 : memref<64x512xbf16> -> memref<16x512xbf16, #gpu.address_space<workgroup>>
// CHECK: arith.cmpi ult, %{{.*}}, %[[N1]] : index
// CHECK: vector.load %[[V1]]
// CHECK: vector.load %arg1
// CHECK: et.staged_rows %arg2 rows(%{{.*}}, %{{.*}}) offset 16384 : memref<128x512xbf16> -> memref<24x512xbf16, #gpu.address_space<workgroup>>
// CHECK-LABEL: et.task @late
// CHECK: et.staged_rows %arg1 rows(%{{.*}}, %{{.*}}) offset 0 : memref<64x512xbf16> -> memref<16x512xbf16, #gpu.address_space<workgroup>>
// CHECK-LABEL: et.task @dynamic_rows
// CHECK-NOT: et.staged_rows
// CHECK: et.event.signal

// TASKS-LABEL: et.task @early
// TASKS-NOT: et.staged_rows
// TASKS-LABEL: et.task @late
// TASKS: et.staged_rows

// OFF-NOT: et.staged_rows
et.kernel @two(%x: memref<1x512xbf16>, %w1: memref<64x512xbf16>, %w2: memref<128x512xbf16>, %y1: memref<1x64xf32>,
               %y2: memref<1x128xf32>, %n: index) {
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c16 = arith.constant 16 : index
  %c32 = arith.constant 32 : index
  %e = et.event.create() : !et.event<>
  et.task @first tiles(%t) in (%c1) {
    et.event.signal %e[] : !et.event<>
  }
  et.task @early tiles(%t) in (%c4) {
    et.event.wait %e[] : !et.event<>
    %r1 = arith.muli %t, %c16 : index
    et.linear %x, %w1, %y1 rows(%r1, %c16) : memref<1x512xbf16>, memref<64x512xbf16>, memref<1x64xf32>
    %r2 = arith.muli %t, %c32 : index
    et.linear %x, %w2, %y2 rows(%r2, %c32) : memref<1x512xbf16>, memref<128x512xbf16>, memref<1x128xf32>
  }
  et.task @late tiles(%t) in (%c4) {
    et.event.wait %e[] : !et.event<>
    %r1 = arith.muli %t, %c16 : index
    et.linear %x, %w1, %y1 rows(%r1, %c16) : memref<1x512xbf16>, memref<64x512xbf16>, memref<1x64xf32>
  }
  et.task @dynamic_rows tiles(%t) in (%c1) {
    et.event.wait %e[] : !et.event<>
    et.linear %x, %w1, %y1 rows(%t, %n) : memref<1x512xbf16>, memref<64x512xbf16>, memref<1x64xf32>
    et.event.signal %e[] : !et.event<>
  }
}

// -----

// A gated et.linear stages the same rows of its gate and up weights, side
// by side: 40 KiB hold 20 rows of 1 KiB of each (gate at offset 0, up at
// 20480); a staged row reads both views, the other rows both weights.
// CHECK-LABEL: et.task @gated
// CHECK: et.event.wait
// CHECK: %[[G:.*]], %[[GN:.*]] = et.staged_rows %arg1 rows(%{{.*}}, %{{.*}}) offset 0 : memref<64x512xbf16> -> memref<20x512xbf16, #gpu.address_space<workgroup>>
// CHECK: %[[U:.*]], %{{.*}} = et.staged_rows %arg2 rows(%{{.*}}, %{{.*}}) offset 20480 : memref<64x512xbf16> -> memref<20x512xbf16, #gpu.address_space<workgroup>>
// CHECK: arith.cmpi ult, %{{.*}}, %[[GN]] : index
// CHECK: vector.load %[[G]]
// CHECK: vector.load %[[U]]
// CHECK: vector.load %arg1
// CHECK: vector.load %arg2
et.kernel @gated_two(%x: memref<1x512xbf16>, %wg: memref<64x512xbf16>, %wu: memref<64x512xbf16>,
                     %y: memref<1x64xbf16>) {
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c32 = arith.constant 32 : index
  %e = et.event.create() : !et.event<>
  et.task @first tiles(%t) in (%c1) {
    et.event.signal %e[] : !et.event<>
  }
  et.task @gated tiles(%t) in (%c2) {
    et.event.wait %e[] : !et.event<>
    %r = arith.muli %t, %c32 : index
    et.linear %x, %wg, %y rows(%r, %c32) gated(%wu) : memref<1x512xbf16>, memref<64x512xbf16>, memref<1x64xbf16>, memref<64x512xbf16>
  }
}

// -----

// The L2 weight prefetch of a tile (the pointer to its rows, read by the
// prefetch) leaves the weights read-only, so the tile stages its first rows
// as well; a task without the prefetch stages as before. (The prefetch's
// pointer once counted as a writer of the weights: the staged op then
// failed its own plan, "et.linear_plan's stage does not fit this op".)
// L2-LABEL: et.kernel @with_l2
// L2: et.task @l2
// L2: nvvm.cp.async.bulk.prefetch
// L2: et.event.wait
// L2: et.staged_rows
// L2: et.task @staged
// L2-NOT: nvvm.cp.async.bulk.prefetch
// L2: et.staged_rows
et.kernel @with_l2(%x: memref<1x512xbf16>, %w: memref<64x512xbf16>, %y: memref<1x64xf32>) {
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c16 = arith.constant 16 : index
  %e = et.event.create() : !et.event<>
  et.task @first tiles(%t) in (%c1) {
    et.event.signal %e[] : !et.event<>
  }
  et.task @l2 tiles(%t) in (%c4) {
    et.event.wait %e[] : !et.event<>
    %r = arith.muli %t, %c16 : index
    et.linear %x, %w, %y rows(%r, %c16) : memref<1x512xbf16>, memref<64x512xbf16>, memref<1x64xf32>
  }
  et.task @staged tiles(%t) in (%c4) {
    et.event.wait %e[] : !et.event<>
    %r = arith.muli %t, %c16 : index
    et.linear %x, %w, %y rows(%r, %c16) : memref<1x512xbf16>, memref<64x512xbf16>, memref<1x64xf32>
  }
}
