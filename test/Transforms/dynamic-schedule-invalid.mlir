// RUN: et-opt %s --split-input-file --et-dynamic-schedule --verify-diagnostics

// expected-error @+1 {{is already scheduled ('et-dynamic-schedule' needs an unscheduled kernel)}}
et.kernel @scheduled(%n: index) {
  et.task @a tiles(%i) in (%n) {
  }
  // expected-note @+1 {{existing schedule}}
  et.schedule dynamic workers(4) {
    et.run @a
  }
}

// -----

// expected-error @+1 {{cannot be scheduled: its tasks depend on each other in a cycle}}
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
