// RUN: et-opt %s --split-input-file --et-verify-event-graph --verify-diagnostics

// Test: a wait on an event that no task signals.
et.kernel @never_signalled(%n: index) {
  // expected-note @+1 {{event created here}}
  %e = et.event.create() : !et.event<4>
  et.task @t tiles(%i) in (%n) {
    // expected-error @+1 {{'et.event.wait' op waits on an event that no task signals (certain deadlock)}}
    et.event.wait %e[%i] : !et.event<4>
  }
}

// -----

// Test: a wait on an element that no tile signals (only even elements are).
et.kernel @element_never_signalled() {
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  // expected-note @+1 {{event created here}}
  %e = et.event.create() : !et.event<4>
  et.task @even tiles(%i) in (%c2) {
    %j = affine.apply affine_map<(d0) -> (d0 * 2)>(%i)
    et.event.signal %e[%j] : !et.event<4>
  }
  et.task @all tiles(%i) in (%c4) {
    // expected-error @+1 {{'et.event.wait' op waits on element [1] (at tile [1]), which no task signals (certain deadlock)}}
    et.event.wait %e[%i] : !et.event<4>
  }
}

// -----

// Test: a signal whose index leaves the event's static shape.
et.kernel @signal_out_of_bounds() {
  %c8 = arith.constant 8 : index
  %e = et.event.create() : !et.event<4>
  et.task @t tiles(%i) in (%c8) {
    // expected-error @+1 {{'et.event.signal' op index #0 is out of bounds at tile [4]: 4 not in [0, 4)}}
    et.event.signal %e[%i] : !et.event<4>
  }
}

// -----

// Test: a wait whose index goes negative.
et.kernel @wait_negative() {
  %c4 = arith.constant 4 : index
  %c1 = arith.constant 1 : index
  %e = et.event.create() : !et.event<4>
  et.task @p tiles(%i) in (%c4) {
    et.event.signal %e[%i] : !et.event<4>
  }
  et.task @c tiles(%i) in (%c4) {
    %j = arith.subi %i, %c1 : index
    // expected-error @+1 {{'et.event.wait' op index #0 is out of bounds at tile [0]: -1 not in [0, 4)}}
    et.event.wait %e[%j] : !et.event<4>
  }
}

// -----

// Test: an explicit count that disagrees with the one derived from the signals.
et.kernel @explicit_count_mismatch() {
  %c16 = arith.constant 16 : index
  %c4 = arith.constant 4 : index
  // expected-error @+1 {{'et.event.create' op explicit expected count 2 disagrees with the derived count 4 of element [0]}}
  %e = et.event.create() {expected = 2} : !et.event<16>
  et.task @split_k tiles(%n, %k) in (%c16, %c4) {
    et.event.signal %e[%n] : !et.event<16>
  }
}

// -----

// Test: two tasks that wait on each other, tile for tile (a layer loop whose
// tiles form no cycle passes: verify-event-graph.mlir, @layer_loop).
et.kernel @cycle() {
  %c4 = arith.constant 4 : index
  %a = et.event.create() : !et.event<4>
  %b = et.event.create() : !et.event<4>
  // expected-error @+1 {{'et.task' op is on a dependency cycle: @first -> @second -> @first}}
  et.task @first tiles(%i) in (%c4) {
    // expected-note @+1 {{@first waits here on an event signalled by @second}}
    et.event.wait %b[%i] : !et.event<4>
    et.event.signal %a[%i] : !et.event<4>
  }
  et.task @second tiles(%i) in (%c4) {
    // expected-note @+1 {{@second waits here on an event signalled by @first}}
    et.event.wait %a[%i] : !et.event<4>
    et.event.signal %b[%i] : !et.event<4>
  }
}

// -----

// Test: a task that waits on an event it signals itself.
et.kernel @self_cycle() {
  %c4 = arith.constant 4 : index
  %a = et.event.create() : !et.event<4>
  // expected-error @+1 {{'et.task' op is on a dependency cycle: @loop -> @loop}}
  et.task @loop tiles(%i) in (%c4) {
    // expected-note @+1 {{@loop waits here on an event signalled by @loop}}
    et.event.wait %a[%i] : !et.event<4>
    et.event.signal %a[%i] : !et.event<4>
  }
}

// -----

// A hand-written static schedule that runs a consumer before its producer on
// the same worker.
et.kernel @static_backwards() {
  %c2 = arith.constant 2 : index
  %e = et.event.create() : !et.event<2>
  et.task @a tiles(%i) in (%c2) {
    et.event.signal %e[%i] : !et.event<2>
  }
  et.task @b tiles(%i) in (%c2) {
    et.event.wait %e[%i] : !et.event<2>
  }
  et.schedule static workers(2) {
    et.worker 0 {
      // expected-error @+1 {{runs tile 0 of @b on worker 0 before tile 0 of @a, which it waits on (certain deadlock)}}
      et.run @b tiles [0]
      // expected-note @+1 {{tile 0 is scheduled here}}
      et.run @a tiles [0]
    }
    et.worker 1 {
      et.run @a tiles [1]
      et.run @b tiles [1]
    }
  }
}

// -----

// Two workers that each run a consumer of the other's second tile first.
et.kernel @static_cross_cycle() {
  %c2 = arith.constant 2 : index
  %e = et.event.create() : !et.event<2>
  et.task @a tiles(%i) in (%c2) {
    et.event.signal %e[%i] : !et.event<2>
  }
  et.task @b tiles(%i) in (%c2) {
    %j = affine.apply affine_map<(d0) -> (1 - d0)>(%i)
    et.event.wait %e[%j] : !et.event<2>
  }
  // expected-error @+1 {{deadlocks: workers wait on each other's tiles in a cycle}}
  et.schedule static workers(2) {
    et.worker 0 {
      // expected-note @+1 {{worker 0 blocks at tile 0 of @b}}
      et.run @b tiles [0]
      et.run @a tiles [0]
    }
    et.worker 1 {
      et.run @b tiles [1]
      et.run @a tiles [1]
    }
  }
}

// -----

et.kernel @dynamic_backwards(%n: index) {
  %e = et.event.create() : !et.event<>
  et.task @a tiles(%i) in (%n) {
    et.event.signal %e[] : !et.event<>
  }
  et.task @b tiles(%i) in (%n) {
    et.event.wait %e[] : !et.event<>
  }
  et.schedule dynamic workers(4) {
    // expected-error @+1 {{queues @b before @a, on which it depends}}
    et.run @b
    // expected-note @+1 {{@a is queued here}}
    et.run @a
  }
}

// -----

et.kernel @cyclic_backwards(%n: index) {
  %e = et.event.create() : !et.event<>
  et.task @a tiles(%i) in (%n) {
    et.event.signal %e[] : !et.event<>
  }
  et.task @b tiles(%i) in (%n) {
    et.event.wait %e[] : !et.event<>
  }
  et.schedule static workers(1) {
    et.worker 0 {
      // expected-error @+1 {{runs @b on worker 0 before @a, on which it depends and which is spread by formula}}
      et.run @b cyclic 0
      // expected-note @+1 {{@a is scheduled here}}
      et.run @a cyclic 0
    }
  }
}

// -----

// A static-count task spread by formula is checked tile by tile (found by
// the fuzz test): @c tile 0 runs on worker 0 before @p tile 0.
et.kernel @cyclic_static_count() {
  %c4 = arith.constant 4 : index
  %e = et.event.create() : !et.event<4>
  et.task @p tiles(%i) in (%c4) {
    et.event.signal %e[%i] : !et.event<4>
  }
  et.task @c tiles(%i) in (%c4) {
    et.event.wait %e[%i] : !et.event<4>
  }
  et.schedule static workers(2) {
    et.worker 0 {
      // expected-error @+1 {{runs tile 0 of @c on worker 0 before tile 0 of @p, which it waits on (certain deadlock)}}
      et.run @c cyclic 0
      // expected-note @+1 {{tile 0 is scheduled here}}
      et.run @p tiles [0, 1, 2, 3]
    }
    et.worker 1 {
      et.run @c cyclic 0
    }
  }
}

// -----

// Test: a task that does not precede the end of a step.
et.kernel @repeat_task_after_end(%n: index, %stop: memref<1xi32>) {
  %c1 = arith.constant 1 : index
  %done = et.event.create() : !et.event<>
  // expected-note @+1 {{steps declared here}}
  et.repeat %n until %stop after %done : memref<1xi32>, !et.event<>
  et.task @finish tiles(%i) in (%c1) {
    et.event.signal %done[] : !et.event<>
  }
  // expected-error @+1 {{'et.task' op does not precede the end of a step (the 'after' event of 'et.repeat'): its tiles could still run when the next step starts}}
  et.task @straggler tiles(%i) in (%c1) {
    et.event.wait %done[] : !et.event<>
  }
}

// -----

// Test: steps on two devices whose end is signalled on this device only.
et.kernel @repeat_end_local(%n: index, %stop: memref<1xi32>) attributes {devices = 2} {
  %c1 = arith.constant 1 : index
  %done = et.event.create() : !et.event<>
  // expected-error @+1 {{'et.repeat' op on 2 devices needs its 'after' event signalled on every device (peer offsets 0..1); no signal reaches peer offset 1: a device could start the next step while another still runs this one}}
  et.repeat %n until %stop after %done : memref<1xi32>, !et.event<>
  et.task @finish tiles(%i) in (%c1) {
    et.event.signal %done[] : !et.event<>
  }
}

// -----

// Test: steps on two devices whose end is signalled at a computed peer offset.
et.kernel @repeat_end_computed_peer(%n: index, %stop: memref<1xi32>) attributes {devices = 2} {
  %c1 = arith.constant 1 : index
  %done = et.event.create() : !et.event<>
  // expected-note @+1 {{steps declared here}}
  et.repeat %n until %stop after %done : memref<1xi32>, !et.event<>
  et.task @finish tiles(%i) in (%c1) {
    et.event.signal %done[] : !et.event<>
    // expected-error @+1 {{'et.event.signal' op signals the end of a step (the 'after' event of 'et.repeat') at a peer offset that is not a constant: the verifier cannot tell that every device is reached}}
    et.event.signal %done[] peer(%i) : !et.event<>
  }
}

// -----

// Test: steps whose end nobody signals.
et.kernel @repeat_never_ends(%n: index, %stop: memref<1xi32>) {
  %done = et.event.create() : !et.event<>
  // expected-error @+1 {{'et.repeat' op 'after' event is signalled by no task: no step would end}}
  et.repeat %n until %stop after %done : memref<1xi32>, !et.event<>
}

// -----

// Test: an event whose count is read on the device, in a kernel with steps.
et.kernel @repeat_device_count(%n: index, %stop: memref<1xi32>, %counts: memref<1xi32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %m = et.extent.load %counts[%c0] : memref<1xi32>
  // expected-error @+1 {{has a count known only on the device}}
  %e = et.event.create() : !et.event<>
  %done = et.event.create() : !et.event<>
  // expected-note @+1 {{steps declared here}}
  et.repeat %n until %stop after %done : memref<1xi32>, !et.event<>
  et.task @produce tiles(%i) in (%m) {
    et.event.signal %e[] : !et.event<>
  }
  et.task @finish tiles(%i) in (%c1) {
    et.event.wait %e[] : !et.event<>
    et.event.signal %done[] : !et.event<>
  }
}
