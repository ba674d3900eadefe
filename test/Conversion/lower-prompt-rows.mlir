// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu threads=256}))" | FileCheck %s

// The row-wise ops over prompt rows (the prefill kernel's tiles) keep
// several elements' loads in flight.

// SiLU: the (row, column) elements flattened over the threads, 8 per trip
// with all 16 loads first, an approximate exp and quotient, then the
// stores (the trip's first element is always in range, the others
// guarded).
// CHECK-LABEL: et.kernel @silu
// CHECK: scf.for
// CHECK-COUNT-16: memref.load
// CHECK-NOT: memref.store
// CHECK: math.exp %{{.*}} fastmath<afn>
// CHECK: arith.divf %{{.*}}, %{{.*}} fastmath<afn>
// CHECK: memref.store
// CHECK-NOT: memref.load
// CHECK-COUNT-7: scf.if
et.kernel @silu(%g: memref<?x256xbf16>, %u: memref<?x256xbf16>, %y: memref<?x256xbf16>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c256 = arith.constant 256 : index
  et.task @t tiles(%i) in (%c1) {
    et.silu_mul %g, %u, %y cols(%c0, %c256) : memref<?x256xbf16>, memref<?x256xbf16>, memref<?x256xbf16>
  }
}

// RoPE over a dynamic number of rows: one thread per (token, pair), the
// angle's power, cosine and sine once, then the heads 8 per trip, their
// loads first and the stores guarded (4 heads here: the last 4 clamp).
// CHECK-LABEL: et.kernel @rope_rows
// CHECK: math.powf
// CHECK: math.cos
// CHECK: math.sin
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c8
// CHECK-NOT: math.
// CHECK-COUNT-16: memref.load %{{.*}} : memref<?x4x8xf32>
// CHECK: scf.if
// CHECK-NEXT: memref.store
// CHECK-NEXT: memref.store
et.kernel @rope_rows(%x: memref<?x4x8xf32>, %p: memref<?xi32>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    et.rope %x, %p theta(1.0e+04) : memref<?x4x8xf32>, memref<?xi32>
  }
}

// A static row count (the decode step) keeps one thread per element: no
// head loop.
// CHECK-LABEL: et.kernel @rope_step
// CHECK: scf.for
// CHECK: math.powf
// CHECK-NOT: scf.for
// CHECK: memref.store
// CHECK: memref.store
// CHECK-NOT: scf.for
et.kernel @rope_step(%x: memref<1x4x8xf32>, %p: memref<1xi32>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    et.rope %x, %p theta(1.0e+04) : memref<1x4x8xf32>, memref<1xi32>
  }
}
