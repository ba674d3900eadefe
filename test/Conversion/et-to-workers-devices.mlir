// RUN: et-opt %s --split-input-file --et-static-schedule=workers=2 --convert-et-to-nvvm | FileCheck %s
// RUN: et-opt %s --split-input-file --et-static-schedule=workers=2 --convert-et-to-cpu | FileCheck %s --check-prefix=CPU

// A kernel on two devices. The worker takes, after its own buffers, this
// device's number, every device's counters and every device's copy of the
// symmetric inbox; et.peer selects a copy by (device + k) mod 2.
// CHECK-LABEL: gpu.func @push_sum(
// CHECK-SAME: %{{[^:]*}}: i64, %{{[^:]*}}: i64, %{{[^:]*}}: memref<?xi32>, %{{[^:]*}}: memref<?xi32>, %{{[^:]*}}: memref<?xi64>, %[[DEV:[^:]*]]: i64, %[[C0:[^:]*]]: memref<?xi32>, %[[C1:[^:]*]]: memref<?xi32>, %[[IN0:[^:]*]]: memref<2x64xf32>, %[[IN1:[^:]*]]: memref<2x64xf32>, %{{[^:]*}}: memref<64xf32>, %{{[^:]*}}: memref<2x64xf32>)
// CHECK: %[[D:.*]] = arith.index_cast %[[DEV]] : i64 to index
// The push: the inbox copy and the counters of device (d + k) mod 2, a
// system-scope release fence, then a relaxed system-scope add.
// CHECK: arith.select %{{.*}}, %[[IN1]], %[[IN0]] : memref<2x64xf32>
// CHECK: llvm.fence release
// CHECK: arith.select %{{.*}}, %[[C1]], %[[C0]] : memref<?xi32>
// CHECK: llvm.inline_asm has_side_effects "red.relaxed.sys.add.u32 [$0], $1;", "l,r"
// The wait on an event that other devices signal: a system-scope acquire;
// the local event keeps device scope (one release reduction).
// CHECK: llvm.load %{{.*}} atomic acquire {alignment = 4 : i64}
// CHECK: llvm.inline_asm has_side_effects "red.release.gpu.global.add.u32 [$0], $1;", "l,r"
// The barrier at the end: each worker adds 1 on the other device, worker 0
// waits for the 2 workers of the other device.
// CHECK: llvm.fence release
// CHECK: llvm.inline_asm has_side_effects "red.relaxed.sys.add.u32 [$0], $1;", "l,r"
// CHECK: arith.cmpi eq, %{{.*}}, %c0
// CHECK: %[[N:.*]] = arith.constant 2 : index
// CHECK: llvm.load %{{.*}} atomic acquire {alignment = 4 : i64}

// On the host the remote add is an atomicrmw at system scope (no syncscope).
// CPU-LABEL: func.func @push_sum_worker(
// CPU-SAME: %{{[^:]*}}: index, %{{[^:]*}}: i64, %{{[^:]*}}: i64, %{{[^:]*}}: memref<?xi32>, %{{[^:]*}}: memref<?xi32>, %{{[^:]*}}: memref<?xi64>, %{{[^:]*}}: i64, %{{[^:]*}}: memref<?xi32>, %{{[^:]*}}: memref<?xi32>,
// CPU: llvm.fence release
// CPU: llvm.atomicrmw add %{{.*}}, %{{.*}} monotonic
et.kernel @push_sum(%x: memref<64xf32>, %inbox: memref<2x64xf32> {et.symmetric}) attributes {devices = 2} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %got = et.event.create() : !et.event<1>
  %summed = et.event.create() : !et.event<1>
  et.task @push tiles(%k) in (%c2) {
    %remote = et.peer %inbox[%k] : memref<2x64xf32>
    %v = memref.load %x[%c0] : memref<64xf32>
    memref.store %v, %remote[%k, %c0] : memref<2x64xf32>
    et.event.signal %got[%c0] peer(%k) : !et.event<1>
  }
  et.task @sum tiles(%i) in (%c1) {
    et.event.wait %got[%c0] : !et.event<1>
    %d = et.device_id
    %v = memref.load %inbox[%d, %c0] : memref<2x64xf32>
    memref.store %v, %x[%c0] : memref<64xf32>
    et.event.signal %summed[%c0] : !et.event<1>
  }
  et.task @after tiles(%i) in (%c1) {
    et.event.wait %summed[%c0] : !et.event<1>
  }
}

// -----

// On one device (no `devices`) the kernel takes no extra parameters,
// et.device_id is 0 and et.peer is the buffer itself.
// CHECK-LABEL: gpu.func @one_device(
// CHECK-SAME: %{{[^:]*}}: i64, %{{[^:]*}}: i64, %{{[^:]*}}: memref<?xi32>, %{{[^:]*}}: memref<?xi32>, %{{[^:]*}}: memref<?xi64>, %[[BUF:[^:]*]]: memref<2xindex>)
// CHECK-NOT: arith.select
// CHECK-NOT: et.peer
// CHECK: memref.store %c0{{.*}}, %[[BUF]][%c0{{.*}}] : memref<2xindex>
// CHECK-NOT: inline_asm
et.kernel @one_device(%buf: memref<2xindex> {et.symmetric}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    %p = et.peer %buf[%c1] : memref<2xindex>
    %d = et.device_id
    memref.store %d, %p[%c0] : memref<2xindex>
  }
}
