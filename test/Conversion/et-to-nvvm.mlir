// RUN: et-opt %s --convert-et-to-nvvm=backoff-ns=100 | FileCheck %s
// RUN: et-opt %s --convert-et-to-nvvm=threads=256 | FileCheck %s --check-prefix=THREADS
// RUN: et-opt %s --convert-et-to-nvvm | FileCheck %s --check-prefix=SPIN
// RUN: not et-opt %s --convert-et-to-nvvm=threads=100 2>&1 | FileCheck %s --check-prefix=BADTHREADS
// THREADS: known_block_size = array<i32: 256, 1, 1>
// BADTHREADS: error: 'convert-et-to-nvvm' threads must be 0 or a multiple of 32 up to 1024, got 100
// RUN: et-opt %s --pass-pipeline="builtin.module(et-lower-to-nvvm-pipeline{mode=keep})" -o %t
// RUN: FileCheck %s --check-prefix=PTX < %t
// RUN: FileCheck %s --check-prefix=PTX-ACQUIRE < %t
// RUN: FileCheck %s --check-prefix=PTX-SIGNAL < %t
// RUN: FileCheck %s --check-prefix=PTX-BARRIER < %t

// One gpu.func per kernel: worker = block id, a workgroup word to share
// thread 0's results, GPU-scope acquire loads, nanosleep backoff, and each
// signal one GPU-scope release reduction (no separate fence).
// CHECK: module attributes {gpu.container_module}
// CHECK: gpu.module @chain_module
// CHECK: gpu.func @chain(%{{.*}}: i64, %{{.*}}: i64, %{{.*}}: memref<?xi32>, %{{.*}}: memref<?xi32>, %{{.*}}: memref<?xi64>) workgroup(%{{.*}} : memref<4xi64, #gpu.address_space<workgroup>>) kernel
// CHECK: gpu.block_id x
// CHECK: gpu.thread_id x
// CHECK-DAG: llvm.load %{{.*}} atomic syncscope("device") acquire
// CHECK-DAG: nvvm.nanosleep %c100_i32
// CHECK-DAG: gpu.barrier
// CHECK-DAG: llvm.inline_asm has_side_effects "red.release.gpu.global.add.u32 [$0], $1;", "l,r"
// CHECK-NOT: llvm.fence syncscope("device") release

// A poll reads the abort flag (relaxed) before the counter (acquire), in one
// block: both loads are in flight together, one L2 round trip per poll; the
// block that tests the flag loads nothing. The counter is compared with
// its expected value by their difference (a counter may wrap past 2^31
// across the steps of a launch).
// SPIN: %[[FLAG:.*]] = llvm.load %{{.*}} atomic syncscope("device") monotonic
// SPIN-NEXT: %[[OBSERVED:.*]] = llvm.load %{{.*}} atomic syncscope("device") acquire
// SPIN-NEXT: %[[BEHIND:.*]] = arith.subi %[[OBSERVED]], %{{.*}} : i32
// SPIN-NEXT: %[[ZERO:.*]] = arith.constant 0 : i32
// SPIN-NEXT: arith.cmpi sge, %[[BEHIND]], %[[ZERO]]
// SPIN: cf.cond_br
// SPIN-NEXT: ^{{.*}}: // pred
// SPIN-NOT: llvm.load
// SPIN: arith.cmpi ne, %[[FLAG]]
// SPIN: nvvm.nanosleep
// The outcome reaches every thread through one barrier with an AND
// reduction (no word in shared memory, no second barrier).
// SPIN: %[[ALL:.*]] = nvvm.barrier #nvvm.reduction<and> %{{.*}} -> i32
// SPIN: arith.cmpi ne, %[[ALL]]
// SPIN-NEXT: cf.cond_br

// In the PTX text, acquire loads at GPU scope and the release reduction.
// PTX: gpu.binary @chain_module
// PTX-SAME: .target sm_90a
// PTX-ACQUIRE: ld.acquire.gpu.global.b32
// PTX-ACQUIRE-SAME: nanosleep.u32
// PTX-BARRIER: bar.red.and.pred
// PTX-SIGNAL: red.release.gpu.global.add.u32
et.kernel @chain() {
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
      et.run @a tiles [0]
      et.run @b tiles [0]
    }
    et.worker 1 {
      et.run @a tiles [1]
      et.run @b tiles [1]
    }
  }
}
