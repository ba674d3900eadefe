// RUN: et-opt %s --split-input-file --convert-et-to-cpu --verify-diagnostics

// expected-error @+1 {{must be scheduled before it is lowered (run et-static-schedule or et-dynamic-schedule)}}
et.kernel @unscheduled(%n: index) {
  et.task @a tiles(%i) in (%n) {
  }
}

// -----

// expected-error @+1 {{has a task that waits on its own signals; the worker lowering does not support it}}
et.kernel @self_wait() {
  %c2 = arith.constant 2 : index
  %e = et.event.create() : !et.event<2>
  et.task @a tiles(%i) in (%c2) {
    et.event.wait %e[%i] : !et.event<2>
    et.event.signal %e[%i] : !et.event<2>
  }
  et.schedule dynamic workers(1) {
    et.run @a
  }
}

// -----

et.kernel @device_sized_event(%counts: memref<1xindex>) {
  %c0 = arith.constant 0 : index
  %n = et.extent.load %counts[%c0] : memref<1xindex>
  // expected-error @+1 {{has a size computed from data read on the device, which the worker lowering does not support}}
  %e = et.event.create(%n) : !et.event<?>
  et.task @a tiles(%i) in (%n) {
    et.event.signal %e[%i] : !et.event<?>
  }
  et.schedule dynamic workers(1) {
    et.run @a
  }
}

// -----

et.kernel @region_at_kernel_level(%counts: memref<1xindex>, %flag: i1) {
  %c1 = arith.constant 1 : index
  %c0 = arith.constant 0 : index
  %m = et.extent.load %counts[%c0] : memref<1xindex>
  // expected-error @+1 {{kernel-level ops with regions are not supported by the worker lowering}}
  %x = scf.if %flag -> index {
    scf.yield %m : index
  } else {
    scf.yield %c1 : index
  }
  et.task @a tiles(%i) in (%x) {
  }
  et.schedule dynamic workers(1) {
    et.run @a
  }
}

// -----

et.kernel @host_shared() {
  %c1 = arith.constant 1 : index
  et.task @a tiles(%i) in (%c1) {
    // expected-error @+1 {{allocates workgroup memory, which the host worker lowering does not have}}
    %s = memref.alloca() : memref<32xf32, #gpu.address_space<workgroup>>
  }
  et.schedule static workers(1) {
    et.worker 0 {
      et.run @a tiles [0]
    }
  }
}

// -----

// Staged weight rows live in shared memory, which host workers do not have.
et.kernel @staged_on_cpu(%w: memref<64x64xbf16>) {
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  et.task @a tiles(%i) in (%c1) {
    // expected-error @+1 {{stages weights in shared memory, which the host worker lowering does not have (lower et.linear with stage-bytes=0 for the CPU)}}
    %v, %n = et.staged_rows %w rows(%i, %c8) offset 0 : memref<64x64xbf16> -> memref<8x64xbf16, #gpu.address_space<workgroup>>
  }
  et.schedule static workers(1) {
    et.worker 0 {
      et.run @a tiles [0]
    }
  }
}

// -----

// The worker lowering takes a launch's step count from the kernel's arguments,
// not from data the kernel reads.
et.kernel @device_step_count(%counts: memref<1xindex>, %stop: memref<1xi32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = et.extent.load %counts[%c0] : memref<1xindex>
  %done = et.event.create() : !et.event<>
  // expected-error @+1 {{step count is computed from data read on the device; the worker lowering needs it from the kernel's arguments}}
  et.repeat %n until %stop after %done : memref<1xi32>, !et.event<>
  et.task @a tiles(%i) in (%c1) {
    et.event.signal %done[] : !et.event<>
  }
  et.schedule dynamic workers(1) {
    et.run @a
  }
}
