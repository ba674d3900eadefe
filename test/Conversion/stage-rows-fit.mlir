// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu stage-bytes=40960}))" | FileCheck %s

// The staged rows fit beside the kernel's static tile buffers: @big's
// 150 KiB buffer, the worker's own words (at most 4160 bytes) and two
// staging regions of 40 KiB would need 239680 bytes, more than the 232448
// an sm_90 SM gives one CTA; the linear ops are planned and lowered again
// with 4 KiB less per region, and stage 36 rows of 1 KiB instead of 40.
// CHECK-LABEL: et.task @staged
// CHECK: et.staged_rows %arg1 rows(%{{.*}}, %{{.*}}) offset 0 : memref<64x512xbf16> -> memref<36x512xbf16, #gpu.address_space<workgroup>>
// CHECK-NOT: et.staged_rows
et.kernel @fit(%x: memref<1x512xbf16>, %w: memref<64x512xbf16>, %y: memref<1x64xf32>, %z: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %e = et.event.create() : !et.event<>
  et.task @big tiles(%t) in (%c1) {
    %s = memref.alloca() : memref<38400xf32, #gpu.address_space<workgroup>>
    %v = memref.load %z[%c0] : memref<4xf32>
    memref.store %v, %s[%c0] : memref<38400xf32, #gpu.address_space<workgroup>>
    et.event.signal %e[] : !et.event<>
  }
  et.task @staged tiles(%t) in (%c1) {
    et.event.wait %e[] : !et.event<>
    et.linear %x, %w, %y rows(%c0, %c64) : memref<1x512xbf16>, memref<64x512xbf16>, memref<1x64xf32>
  }
}
