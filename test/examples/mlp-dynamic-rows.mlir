// RUN: et-opt %s --et-verify-event-graph=emit-counts --verify-diagnostics --verify-roundtrip | FileCheck %s
// RUN: et-opt %s --et-optimize-events --et-static-schedule=workers=2 --verify-roundtrip | FileCheck %s --check-prefix=STATIC
// RUN: et-opt %s --et-dynamic-schedule=workers=2 --verify-roundtrip | FileCheck %s --check-prefix=DYNAMIC

// A 2-layer MLP over a dynamic number of rows: up-projection (split-K over 4
// chunks of the hidden input), then down-projection of each 64-row block,
// which needs the two 32-row blocks the up-projection produced.
// CHECK-LABEL: et.kernel @mlp2
et.kernel @mlp2(%x: memref<?x512xbf16>, %w1: memref<512x1024xbf16>, %w2: memref<1024x512xbf16>,
                %h: memref<?x1024xf32>, %y: memref<?x512xf32>, %rows: index) {
  %c32 = arith.constant 32 : index
  %c64 = arith.constant 64 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %up_tiles = arith.ceildivsi %rows, %c32 : index
  %down_tiles = arith.ceildivsi %rows, %c64 : index
  // expected-remark @+1 {{expected count: symbolic, 4}}
  %h_part = et.event.create(%up_tiles) : !et.event<?>
  // expected-remark @+1 {{expected count: symbolic, min(2, ceildiv(arg5, 32) - 2*e0)}}
  %h_ready = et.event.create(%down_tiles) : !et.event<?>
  // expected-remark @+1 {{expected count: static, 0}}
  %y_ready = et.event.create(%down_tiles) : !et.event<?>
  // CHECK: et.task @up tiles
  et.task @up tiles(%r, %k) in (%up_tiles, %c4) attributes {et.cost = #et.cost<bytes = 270336, flops = 8388608, prologue_bytes = 270336>} {
    et.event.signal %h_part[%r] : !et.event<?>
  }
  et.task @up_reduce tiles(%r) in (%up_tiles) attributes {et.cost = #et.cost<bytes = 524288, flops = 131072>} {
    et.event.wait %h_part[%r] : !et.event<?>
    %d = affine.apply affine_map<(d0) -> (d0 floordiv 2)>(%r)
    et.event.signal %h_ready[%d] : !et.event<?>
  }
  et.task @down tiles(%r, %n) in (%down_tiles, %c8) attributes {et.cost = #et.cost<bytes = 393216, flops = 8388608, prologue_bytes = 131072>} {
    et.event.wait %h_ready[%r] : !et.event<?>
  }
}

// The optimizer erases the event nobody waits on (%y_ready); the row counts
// are runtime sizes, so every task is spread by formula.
// STATIC-LABEL: et.kernel @mlp2
// STATIC-COUNT-2: et.event.create
// STATIC-NOT: et.event.create
// STATIC: et.schedule static workers(2)
// STATIC-NEXT: et.worker 0 {
// STATIC-NEXT: et.run @up cyclic
// STATIC-NEXT: et.run @up_reduce cyclic
// STATIC-NEXT: et.run @down cyclic
// STATIC-NEXT: }
// STATIC-NEXT: et.worker 1 {

// DYNAMIC-LABEL: et.kernel @mlp2
// DYNAMIC: et.schedule dynamic workers(2) {
// DYNAMIC-NEXT: et.run @up
// DYNAMIC-NEXT: et.run @up_reduce
// DYNAMIC-NEXT: et.run @down
// DYNAMIC-NEXT: }
