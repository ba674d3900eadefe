// RUN: et-opt %s --split-input-file --pass-pipeline="builtin.module(et.kernel(et-lower-collectives))" --verify-diagnostics

// A scheduled kernel has no place for the sum task.
et.kernel @scheduled(%part: memref<4x64xf32> {et.symmetric}, %h: memref<?x64xf32>, %rows: index) attributes {devices = 2} {
  %c1 = arith.constant 1 : index
  %o = et.event.create() : !et.event<1>
  %s = et.event.create() : !et.event<1>
  et.task @o tiles(%t) in (%c1) {
    et.event.signal %o[%t] : !et.event<1>
  }
  // expected-error @+1 {{'et.allreduce' op is in a kernel that is already scheduled; run et-lower-collectives before scheduling}}
  et.allreduce %part into %h rows(%rows) after %o signal %s block(16) : memref<4x64xf32>, memref<?x64xf32>, !et.event<1>
  // expected-note @+1 {{existing schedule}}
  et.schedule static workers(1) {
    et.worker 0 {
      et.run @o tiles [0]
    }
  }
}

// -----

// A producer that already signals another device.
et.kernel @peer_signal(%part: memref<4x64xf32> {et.symmetric}, %h: memref<?x64xf32>, %rows: index) attributes {devices = 2} {
  %c1 = arith.constant 1 : index
  %o = et.event.create() : !et.event<1>
  %s = et.event.create() : !et.event<1>
  et.task @o tiles(%t) in (%c1) {
    // expected-error @+1 {{'et.event.signal' op names a peer, but its event is summed by an et.allreduce, whose lowering sends it to every device}}
    et.event.signal %o[%t] peer(%c1) : !et.event<1>
  }
  // expected-note @+1 {{the et.allreduce}}
  et.allreduce %part into %h rows(%rows) after %o signal %s block(16) : memref<4x64xf32>, memref<?x64xf32>, !et.event<1>
}

// -----

// A task name that is taken.
et.kernel @name_taken(%part: memref<4x64xf32> {et.symmetric}, %h: memref<?x64xf32>, %rows: index) attributes {devices = 2} {
  %c1 = arith.constant 1 : index
  %o = et.event.create() : !et.event<1>
  %s = et.event.create() : !et.event<1>
  // expected-note @+1 {{by this op}}
  et.task @o tiles(%t) in (%c1) {
    et.event.signal %o[%t] : !et.event<1>
  }
  // expected-error @+1 {{'et.allreduce' op task name 'o' is already taken}}
  et.allreduce %part into %h rows(%rows) after %o signal %s block(16) {task = "o"} : memref<4x64xf32>, memref<?x64xf32>, !et.event<1>
}
