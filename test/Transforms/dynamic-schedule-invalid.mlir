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

// expected-error @+1 {{cannot be scheduled dynamically: its tasks depend on each other in a cycle}}
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

// A layer loop: the tasks form a cycle, their tiles do not (tile l of @norm
// waits on element l of %mlp, signalled by tiles (l, *) of @mlp, which wait
// on element l of %norm). A dynamic queue orders whole tasks, so it refuses.
// expected-error @+1 {{a cycle that is acyclic between tiles, like a layer loop, needs et-static-schedule}}
et.kernel @layers() {
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %norm = et.event.create() : !et.event<3>
  %mlp = et.event.create() : !et.event<3>
  et.task @first tiles(%t) in (%c2) {
    %z = arith.constant 0 : index
    et.event.signal %norm[%z] : !et.event<3>
  }
  et.task @norm tiles(%l, %t) in (%c2, %c2) {
    et.event.wait %mlp[%l] : !et.event<3>
    %n = affine.apply affine_map<(d0) -> (d0 + 1)>(%l)
    et.event.signal %norm[%n] : !et.event<3>
  }
  et.task @mlp tiles(%l, %t) in (%c3, %c2) {
    et.event.wait %norm[%l] : !et.event<3>
    et.event.signal %mlp[%l] : !et.event<3>
  }
}
