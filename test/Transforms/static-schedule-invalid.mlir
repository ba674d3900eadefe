// RUN: et-opt %s --split-input-file --et-static-schedule --verify-diagnostics

// A tile count read on the device, with no declared bound.
et.kernel @device_count(%counts: memref<4xindex>) {
  %c0 = arith.constant 0 : index
  %n = et.extent.load %counts[%c0] : memref<4xindex>
  // expected-error @+1 {{cannot be scheduled statically: the tile count of @expert is only known on the device (extent #0 is load(arg0)) and has no declared bound; add 'max_extents' to the task}}
  et.task @expert tiles(%i) in (%n) {
  }
}

// -----

// A kernel that is already scheduled.
// expected-error @+1 {{is already scheduled ('et-static-schedule' needs an unscheduled kernel)}}
et.kernel @scheduled() {
  %c1 = arith.constant 1 : index
  et.task @a tiles(%i) in (%c1) {
  }
  // expected-note @+1 {{existing schedule}}
  et.schedule dynamic workers(1) {
    et.run @a
  }
}

// -----

// A tile-level cycle.
// expected-error @+1 {{cannot be scheduled statically: its tiles depend on each other in a cycle}}
et.kernel @cycle() {
  %c1 = arith.constant 1 : index
  %x = et.event.create() : !et.event<>
  %y = et.event.create() : !et.event<>
  et.task @a tiles(%i) in (%c1) {
    et.event.wait %y[] : !et.event<>
    et.event.signal %x[] : !et.event<>
  }
  et.task @b tiles(%i) in (%c1) {
    et.event.wait %x[] : !et.event<>
    et.event.signal %y[] : !et.event<>
  }
}

// -----

// Test: steps whose tasks do not all precede the end of a step.
et.kernel @repeat_overlapping_steps(%n: index, %stop: memref<1xi32>) {
  %c1 = arith.constant 1 : index
  %done = et.event.create() : !et.event<>
  // expected-note @+1 {{steps declared here}}
  et.repeat %n until %stop after %done : memref<1xi32>, !et.event<>
  et.task @finish tiles(%i) in (%c1) {
    et.event.signal %done[] : !et.event<>
  }
  // expected-error @+1 {{does not precede the end of a step}}
  et.task @straggler tiles(%i) in (%c1) {
  }
}
