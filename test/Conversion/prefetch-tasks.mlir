// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu prefetch=registers prefetch-tasks=early}))" | FileCheck %s
// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu prefetch=registers}))" | FileCheck %s --check-prefix=ALL

// prefetch-tasks: only @early's weight loads move above its wait; @late
// waits first, then loads. Without the list, both move.
// CHECK-LABEL: et.task @early
// CHECK: vector.load %arg1
// CHECK: et.event.wait
// CHECK-LABEL: et.task @late
// CHECK: et.event.wait
// CHECK: vector.load %arg1
// ALL-LABEL: et.task @early
// ALL: vector.load %arg1
// ALL: et.event.wait
// ALL-LABEL: et.task @late
// ALL: vector.load %arg1
// ALL: et.event.wait
et.kernel @two(%x: memref<1x1024xbf16>, %w: memref<256x1024xbf16>, %y: memref<1x256xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c128 = arith.constant 128 : index
  %e = et.event.create() : !et.event<>
  et.task @first tiles(%t) in (%c1) {
    et.event.signal %e[] : !et.event<>
  }
  et.task @early tiles(%t) in (%c1) {
    et.event.wait %e[] : !et.event<>
    et.linear %x, %w, %y rows(%c0, %c128) : memref<1x1024xbf16>, memref<256x1024xbf16>, memref<1x256xf32>
  }
  et.task @late tiles(%t) in (%c1) {
    et.event.wait %e[] : !et.event<>
    et.linear %x, %w, %y rows(%c128, %c128) : memref<1x1024xbf16>, memref<256x1024xbf16>, memref<1x256xf32>
  }
}
