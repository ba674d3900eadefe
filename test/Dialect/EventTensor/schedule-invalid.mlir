// RUN: et-opt %s --split-input-file --verify-diagnostics

// One case per verifier branch of et.schedule, et.worker, et.run, the task's
// `max_extents` and the dialect's attributes.

et.kernel @schedule_not_last() {
  %c1 = arith.constant 1 : index
  // expected-error @+1 {{must be the last op of its kernel}}
  et.schedule dynamic workers(1) {
    et.run @a
  }
  et.task @a tiles(%i) in (%c1) {
  }
}

// -----

et.kernel @dynamic_with_worker() {
  %c1 = arith.constant 1 : index
  et.task @a tiles(%i) in (%c1) {
  }
  et.schedule dynamic workers(1) {
    // expected-error @+1 {{is not allowed in a dynamic schedule}}
    et.worker 0 {
    }
  }
}

// -----

et.kernel @dynamic_unknown_task() {
  %c1 = arith.constant 1 : index
  et.task @a tiles(%i) in (%c1) {
  }
  et.schedule dynamic workers(1) {
    et.run @a
    // expected-error @+1 {{'@b' is not a task of kernel @dynamic_unknown_task}}
    et.run @b
  }
}

// -----

et.kernel @dynamic_twice() {
  %c1 = arith.constant 1 : index
  et.task @a tiles(%i) in (%c1) {
  }
  et.schedule dynamic workers(1) {
    et.run @a
    // expected-error @+1 {{task @a appears twice in the queue}}
    et.run @a
  }
}

// -----

et.kernel @dynamic_missing() {
  %c1 = arith.constant 1 : index
  et.task @a tiles(%i) in (%c1) {
  }
  et.task @b tiles(%i) in (%c1) {
  }
  // expected-error @+1 {{does not schedule task @b}}
  et.schedule dynamic workers(1) {
    et.run @a
  }
}

// -----

et.kernel @dynamic_with_tiles() {
  %c1 = arith.constant 1 : index
  et.task @a tiles(%i) in (%c1) {
  }
  et.schedule dynamic workers(1) {
    // expected-error @+1 {{in a dynamic schedule takes no 'tiles' or 'cyclic'}}
    et.run @a tiles [0]
  }
}

// -----

et.kernel @static_with_run() {
  %c1 = arith.constant 1 : index
  et.task @a tiles(%i) in (%c1) {
  }
  et.schedule static workers(1) {
    // expected-error @+1 {{in a dynamic schedule takes no 'tiles' or 'cyclic'}}
    et.run @a tiles [0]
  }
}

// -----

et.kernel @static_with_bare_run() {
  %c1 = arith.constant 1 : index
  et.task @a tiles(%i) in (%c1) {
  }
  et.schedule static workers(1) {
    // expected-error @+1 {{is not allowed in a static schedule (expected 'et.worker')}}
    et.run @a
  }
}

// -----

et.kernel @worker_order() {
  %c2 = arith.constant 2 : index
  et.task @a tiles(%i) in (%c2) {
  }
  et.schedule static workers(2) {
    // expected-error @+1 {{expected worker id 0 (ids are 0..1 in order), got 1}}
    et.worker 1 {
      et.run @a tiles [0]
    }
    et.worker 0 {
      et.run @a tiles [1]
    }
  }
}

// -----

et.kernel @worker_count() {
  %c2 = arith.constant 2 : index
  et.task @a tiles(%i) in (%c2) {
  }
  // expected-error @+1 {{expected 3 'et.worker' ops, got 2}}
  et.schedule static workers(3) {
    et.worker 0 {
      et.run @a tiles [0]
    }
    et.worker 1 {
      et.run @a tiles [1]
    }
  }
}

// -----

et.kernel @worker_foreign_op() {
  %c1 = arith.constant 1 : index
  et.task @a tiles(%i) in (%c1) {
  }
  et.schedule static workers(1) {
    et.worker 0 {
      // expected-error @+1 {{is not allowed in 'et.worker'}}
      %c0 = arith.constant 0 : index
    }
  }
}

// -----

et.kernel @static_unknown_task() {
  %c1 = arith.constant 1 : index
  et.task @a tiles(%i) in (%c1) {
  }
  et.schedule static workers(1) {
    et.worker 0 {
      et.run @a tiles [0]
      // expected-error @+1 {{'@nope' is not a task of kernel @static_unknown_task}}
      et.run @nope tiles [0]
    }
  }
}

// -----

et.kernel @run_both(%n: index) {
  et.task @a tiles(%i) in (%n) {
  }
  et.schedule static workers(1) {
    et.worker 0 {
      // expected-error @+1 {{needs exactly one of 'tiles' or 'cyclic'}}
      et.run @a tiles [0] cyclic 0
    }
  }
}

// -----

et.kernel @run_neither(%n: index) {
  et.task @a tiles(%i) in (%n) {
  }
  et.schedule static workers(1) {
    et.worker 0 {
      // expected-error @+1 {{needs exactly one of 'tiles' or 'cyclic'}}
      et.run @a
    }
  }
}

// -----

et.kernel @run_empty() {
  %c1 = arith.constant 1 : index
  et.task @a tiles(%i) in (%c1) {
  }
  et.schedule static workers(1) {
    et.worker 0 {
      // expected-error @+1 {{has an empty tile list}}
      et.run @a tiles []
    }
  }
}

// -----

et.kernel @cyclic_offset(%n: index) {
  et.task @a tiles(%i) in (%n) {
  }
  et.schedule static workers(2) {
    et.worker 0 {
      // expected-error @+1 {{cyclic offset 2 must be less than the worker count 2}}
      et.run @a cyclic 2
    }
    et.worker 1 {
      et.run @a cyclic 2
    }
  }
}

// -----

et.kernel @cyclic_mismatch(%n: index) {
  et.task @a tiles(%i) in (%n) {
  }
  et.schedule static workers(2) {
    et.worker 0 {
      et.run @a cyclic 0
    }
    et.worker 1 {
      // expected-error @+1 {{cyclic offset 1 of @a differs from the offset 0 on another worker}}
      et.run @a cyclic 1
    }
  }
}

// -----

et.kernel @cyclic_twice(%n: index) {
  et.task @a tiles(%i) in (%n) {
  }
  et.schedule static workers(1) {
    et.worker 0 {
      et.run @a cyclic 0
      // expected-error @+1 {{task @a is cyclic twice on worker 0}}
      et.run @a cyclic 0
    }
  }
}

// -----

et.kernel @cyclic_partial(%n: index) {
  et.task @a tiles(%i) in (%n) {
  }
  // expected-error @+1 {{cyclic task @a is on 1 of 2 workers (it must be on all)}}
  et.schedule static workers(2) {
    et.worker 0 {
      et.run @a cyclic 0
    }
    et.worker 1 {
    }
  }
}

// -----

et.kernel @cyclic_and_tiles() {
  %c2 = arith.constant 2 : index
  et.task @a tiles(%i) in (%c2) {
  }
  // expected-error @+1 {{task @a is both cyclic and listed by tile}}
  et.schedule static workers(1) {
    et.worker 0 {
      et.run @a tiles [0]
      et.run @a cyclic 0
    }
  }
}

// -----

et.kernel @tiles_of_dynamic(%n: index) {
  et.task @a tiles(%i) in (%n) {
  }
  et.schedule static workers(1) {
    et.worker 0 {
      // expected-error @+1 {{lists tiles of @a, whose tile count is only known at run time (use 'cyclic')}}
      et.run @a tiles [0]
    }
  }
}

// -----

et.kernel @tile_out_of_range() {
  %c2 = arith.constant 2 : index
  et.task @a tiles(%i) in (%c2) {
  }
  et.schedule static workers(1) {
    et.worker 0 {
      // expected-error @+1 {{tile 2 of @a is out of range [0, 2)}}
      et.run @a tiles [0, 1, 2]
    }
  }
}

// -----

et.kernel @tile_twice() {
  %c2 = arith.constant 2 : index
  et.task @a tiles(%i) in (%c2) {
  }
  et.schedule static workers(2) {
    et.worker 0 {
      et.run @a tiles [0, 1]
    }
    et.worker 1 {
      // expected-error @+1 {{tile 1 of @a is already scheduled on worker 0}}
      et.run @a tiles [1]
    }
  }
}

// -----

et.kernel @tile_missing() {
  %c3 = arith.constant 3 : index
  et.task @a tiles(%i) in (%c3) {
  }
  // expected-error @+1 {{does not schedule tile 1 of task @a}}
  et.schedule static workers(1) {
    et.worker 0 {
      et.run @a tiles [0, 2]
    }
  }
}

// -----

et.kernel @task_missing() {
  %c1 = arith.constant 1 : index
  et.task @a tiles(%i) in (%c1) {
  }
  et.task @b tiles(%i) in (%c1) {
  }
  // expected-error @+1 {{does not schedule task @b}}
  et.schedule static workers(1) {
    et.worker 0 {
      et.run @a tiles [0]
    }
  }
}

// -----

et.kernel @zero_workers() {
  // expected-error @+1 {{attribute 'workers' failed to satisfy constraint}}
  et.schedule dynamic workers(0) {
  }
}

// -----

et.kernel @bounds_rank(%n: index) {
  // expected-error @+1 {{expected 1 'max_extents' (one per extent), got 2}}
  et.task @a tiles(%i) in (%n) attributes {max_extents = array<i64: 4, 4>} {
  }
}

// -----

et.kernel @bounds_positive(%n: index) {
  // expected-error @+1 {{max_extents #0 must be positive, got 0}}
  et.task @a tiles(%i) in (%n) attributes {max_extents = array<i64: 0>} {
  }
}

// -----

et.kernel @bounds_exceeded() {
  %c8 = arith.constant 8 : index
  // expected-error @+1 {{tile extent #0 (8) exceeds its declared bound 4}}
  et.task @a tiles(%i) in (%c8) attributes {max_extents = array<i64: 4>} {
  }
}

// -----

et.kernel @cost_wrong_type() {
  %c1 = arith.constant 1 : index
  // expected-error @+1 {{'et.cost' must be a #et.cost<bytes = B, flops = F> attribute, got {bytes = 4 : i64}}}
  et.task @a tiles(%i) in (%c1) attributes {et.cost = {bytes = 4}} {
  }
}

// -----

et.kernel @cost_not_on_task() {
  // expected-error @+1 {{'et.cost' is only meaningful on 'et.task'}}
  %e = et.event.create() {et.cost = #et.cost<bytes = 1, flops = 1>} : !et.event<>
}

// -----

et.kernel @unknown_attr() {
  // expected-error @+1 {{unknown et dialect attribute 'et.costs'}}
  %e = et.event.create() {et.costs = 1} : !et.event<>
}

// -----

et.kernel @dynamic_shared_not_alloca() {
  // expected-error @+1 {{'et.dynamic_shared' is only meaningful on a statically shaped workgroup 'memref.alloca'}}
  %e = et.event.create() {et.dynamic_shared} : !et.event<>
}

// -----

et.kernel @dynamic_shared_global_memory() {
  // expected-error @+1 {{'et.dynamic_shared' is only meaningful on a statically shaped workgroup 'memref.alloca'}}
  %a = memref.alloca() {et.dynamic_shared} : memref<16xbf16>
}

// -----

et.kernel @dynamic_shared_owner_not_a_task() {
  // expected-error @+1 {{'et.dynamic_shared_owner' must be a tile op's name ("et.matmul", "et.attention_prefill", "et.attention_split" or "et.linear") on an 'et.task', got "et.matmul"}}
  %e = et.event.create() {et.dynamic_shared_owner = "et.matmul"} : !et.event<>
}

// -----

et.kernel @dynamic_shared_owner_unknown_op() {
  %c1 = arith.constant 1 : index
  // expected-error @+1 {{'et.dynamic_shared_owner' must be a tile op's name ("et.matmul", "et.attention_prefill", "et.attention_split" or "et.linear") on an 'et.task', got "et.rope"}}
  et.task @a tiles(%i) in (%c1) attributes {et.dynamic_shared_owner = "et.rope"} {
  }
}

// -----

et.kernel @dynamic_shared_not_unit() {
  // expected-error @+1 {{'et.dynamic_shared' must be a unit attribute}}
  %a = memref.alloca() {et.dynamic_shared = 1 : i64} : memref<16xbf16, #gpu.address_space<workgroup>>
}

// -----

et.kernel @cost_negative() {
  %c1 = arith.constant 1 : index
  // expected-error @+1 {{cost must be non-negative, got bytes = -1, flops = 0, prologue_bytes = 0}}
  et.task @a tiles(%i) in (%c1) attributes {et.cost = #et.cost<bytes = -1, flops = 0>} {
  }
}

// -----

et.kernel @cost_model_bandwidth(%n: index) {
  et.task @a tiles(%i) in (%n) {
  }
  // expected-error @+1 {{cost model bandwidth and flops must be positive, got bandwidth_gbps = 0, gflops = 1}}
  et.schedule dynamic workers(1) attributes {cost_model = #et.cost_model<bandwidth_gbps = 0, gflops = 1, dispatch_ns = 0, sync_ns = 0>} {
    et.run @a
  }
}

// -----

et.kernel @cost_model_latency(%n: index) {
  et.task @a tiles(%i) in (%n) {
  }
  // expected-error @+1 {{cost model latencies must be non-negative, got dispatch_ns = -5, sync_ns = 0}}
  et.schedule dynamic workers(1) attributes {cost_model = #et.cost_model<bandwidth_gbps = 1, gflops = 1, dispatch_ns = -5, sync_ns = 0>} {
    et.run @a
  }
}

// -----

et.kernel @bad_kind() {
  // expected-error @+1 {{expected 'static' or 'dynamic', got 'eager'}}
  et.schedule eager workers(1) {
  }
}

// -----

et.kernel @prologue_too_large() {
  %c1 = arith.constant 1 : index
  // expected-error @+1 {{prologue_bytes (8) exceeds bytes (4)}}
  et.task @a tiles(%i) in (%c1) attributes {et.cost = #et.cost<bytes = 4, flops = 0, prologue_bytes = 8>} {
  }
}

// -----

// A huge static tile count (found by the fuzz test; the most a task may
// have): the check must not allocate per tile.
et.kernel @huge_tile_count() {
  %big = arith.constant 2147483647 : index
  et.task @a tiles(%i) in (%big) {
  }
  // expected-error @+1 {{does not schedule tile 1 of task @a}}
  et.schedule static workers(1) {
    et.worker 0 {
      et.run @a tiles [0, 2]
    }
  }
}

// -----

et.kernel @outline_not_a_region() {
  %c1 = arith.constant 1 : index
  et.task @a tiles(%i) in (%c1) {
    // expected-error @+1 {{'et.outline' is only meaningful on an 'scf.execute_region' inside an 'et.task'}}
    %x = arith.addi %i, %i {et.outline} : index
  }
}

// -----

func.func @outline_outside_a_task() {
  // expected-error @+1 {{'et.outline' is only meaningful on an 'scf.execute_region' inside an 'et.task'}}
  scf.execute_region {
    scf.yield
  } {et.outline}
  return
}

// -----

et.kernel @outline_not_unit() {
  %c1 = arith.constant 1 : index
  et.task @a tiles(%i) in (%c1) {
    // expected-error @+1 {{'et.outline' must be a unit attribute}}
    scf.execute_region {
      scf.yield
    } {et.outline = 1 : i64}
  }
}

// -----

et.kernel @outline_two_blocks() {
  %c1 = arith.constant 1 : index
  et.task @a tiles(%i) in (%c1) {
    // expected-error @+1 {{'et.outline' needs a region of one block (its code becomes a function's body)}}
    scf.execute_region {
      cf.br ^next
    ^next:
      scf.yield
    } {et.outline}
  }
}
