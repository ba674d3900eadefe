// The plan of each et.linear (et.linear_plan), written before anything is
// lowered (plan-only) and then emitted as written.
// RUN: et-opt %s --split-input-file --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu linear=spread threads=512 unroll=8 plan-only}))" | FileCheck %s --check-prefix=SPREAD
// RUN: et-opt %s --split-input-file --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu linear=spread threads=512 unroll=8 stage-bytes=20480 stage-tasks=qk plan-only}))" | FileCheck %s --check-prefix=STAGE
// RUN: et-opt %s --split-input-file --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu linear=rows threads=512 prefetch=shared prefetch-tasks=qk plan-only}))" | FileCheck %s --check-prefix=PREFETCH
// The lowering emits a plan written by hand (rows, although linear=spread).
// RUN: et-opt %s --split-input-file --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu linear=spread threads=512 unroll=8}))" | FileCheck %s --check-prefix=KEPT

// Two linear ops after one wait, nothing staged: both spread over the
// warps, and the second issues its first loads right after the wait.
// 20480 bytes of staging (two KiB per row of K = 1024) hold the first op's
// 8 rows and the second's first 2 (offset 16384, after the first op's); a
// staged op takes the rows layout, and the op after a staged one issues no
// early loads. With the shared weight prefetch in the named task only,
// the ops there take the rows layout, and the first its weights before the
// wait in the task's dynamic shared memory (et.dynamic_shared_owner); the
// prefetch slots are one op's, so the second prefetches nothing.
// SPREAD-LABEL: et.kernel @qk
// SPREAD: et.linear {{.*}} {et.linear_plan = {layout = "spread", prefetch = "none"}}
// SPREAD: et.linear {{.*}} {et.linear_plan = {early_loads, layout = "spread", prefetch = "none"}}
// STAGE-LABEL: et.kernel @qk
// STAGE: et.linear {{.*}} {et.linear_plan = {layout = "rows", prefetch = "none", stage = array<i64: 0, 8>}}
// STAGE: et.linear {{.*}} {et.linear_plan = {layout = "rows", prefetch = "none", stage = array<i64: 16384, 2>}}
// PREFETCH-LABEL: et.kernel @qk
// PREFETCH: et.task @other
// PREFETCH: et.linear {{.*}} {et.linear_plan = {layout = "rows", prefetch = "none"}}
// PREFETCH-NOT: et.dynamic_shared_owner
// PREFETCH: et.task @qk {{.*}} attributes {et.dynamic_shared_owner = "et.linear"}
// PREFETCH: et.linear {{.*}} {et.linear_plan = {layout = "rows", prefetch = "shared"}}
// PREFETCH: et.linear {{.*}} {et.linear_plan = {layout = "rows", prefetch = "none"}}
et.kernel @qk(%x: memref<1x1024xbf16>, %wq: memref<64x1024xbf16>, %yq: memref<1x64xf32>,
              %wk: memref<16x1024xbf16>, %yk: memref<1x16xf32>) {
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c8 = arith.constant 8 : index
  %c32 = arith.constant 32 : index
  %e = et.event.create() : !et.event<>
  et.task @other tiles(%t) in (%c2) {
    %r0 = arith.muli %t, %c32 : index
    et.linear %x, %wq, %yq rows(%r0, %c32) : memref<1x1024xbf16>, memref<64x1024xbf16>, memref<1x64xf32>
    et.event.signal %e[] : !et.event<>
  }
  et.task @qk tiles(%t) in (%c2) {
    et.event.wait %e[] : !et.event<>
    %k0 = arith.muli %t, %c8 : index
    et.linear %x, %wk, %yk rows(%k0, %c8) : memref<1x1024xbf16>, memref<16x1024xbf16>, memref<1x16xf32>
    %q0 = arith.muli %t, %c32 : index
    et.linear %x, %wq, %yq rows(%q0, %c32) : memref<1x1024xbf16>, memref<64x1024xbf16>, memref<1x64xf32>
  }
}

// -----

// Short rows (K = 256) take their own layout.
// SPREAD-LABEL: et.kernel @short
// SPREAD: et.linear {{.*}} {et.linear_plan = {layout = "short", prefetch = "none"}}
// A plan that says rows: one warp per row (a shuffle butterfly per row),
// not the spread layout's shared-memory partial sums.
// KEPT-LABEL: et.kernel @kept
// KEPT-NOT: memref.alloca
// KEPT: gpu.shuffle  xor
// KEPT-NOT: gpu.barrier
// KEPT: memref.store
// KEPT-NOT: et.linear
et.kernel @short(%x: memref<1x256xbf16>, %w: memref<64x256xbf16>, %y: memref<1x64xf32>) {
  %c4 = arith.constant 4 : index
  %c16 = arith.constant 16 : index
  et.task @t tiles(%t) in (%c4) {
    %r0 = arith.muli %t, %c16 : index
    et.linear %x, %w, %y rows(%r0, %c16) : memref<1x256xbf16>, memref<64x256xbf16>, memref<1x64xf32>
  }
}

// -----

et.kernel @kept(%x: memref<1x1024xbf16>, %w: memref<64x1024xbf16>, %y: memref<1x64xf32>) {
  %c8 = arith.constant 8 : index
  et.task @t tiles(%t) in (%c8) {
    %r0 = arith.muli %t, %c8 : index
    et.linear %x, %w, %y rows(%r0, %c8) {et.linear_plan = {layout = "rows", prefetch = "none"}} : memref<1x1024xbf16>, memref<64x1024xbf16>, memref<1x64xf32>
  }
}

// -----

// The staging regions go after the largest dynamic shared buffer (here 160
// KiB of an attention stage) and must fit in 200 KiB: 40 KiB are left, so
// each task stages 20 KiB (whole KiB) instead of the 64 KiB asked for: 10
// rows of K = 1024. With 192 KiB taken, less than 16 KiB is left and
// nothing is staged.
// RUN: et-opt %s --split-input-file --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu threads=512 stage-bytes=65536 plan-only}))" | FileCheck %s --check-prefix=BUDGET
// BUDGET-LABEL: et.kernel @budget
// BUDGET: et.linear {{.*}} {et.linear_plan = {layout = "rows", prefetch = "none", stage = array<i64: 0, 10>}}
// BUDGET-LABEL: et.kernel @no_budget
// BUDGET: et.linear {{.*}} {et.linear_plan = {layout = "rows", prefetch = "none"}}
et.kernel @budget(%x: memref<1x1024xbf16>, %w: memref<64x1024xbf16>, %y: memref<1x64xf32>) {
  %c2 = arith.constant 2 : index
  %c32 = arith.constant 32 : index
  %e = et.event.create() : !et.event<>
  et.task @attn tiles(%t) in (%c2) {
    %kv = memref.alloca() {et.dynamic_shared} : memref<81920xbf16, #gpu.address_space<workgroup>>
    et.event.signal %e[] : !et.event<>
  }
  et.task @t tiles(%t) in (%c2) {
    et.event.wait %e[] : !et.event<>
    %r0 = arith.muli %t, %c32 : index
    et.linear %x, %w, %y rows(%r0, %c32) : memref<1x1024xbf16>, memref<64x1024xbf16>, memref<1x64xf32>
  }
}

// -----

et.kernel @no_budget(%x: memref<1x1024xbf16>, %w: memref<64x1024xbf16>, %y: memref<1x64xf32>) {
  %c2 = arith.constant 2 : index
  %c32 = arith.constant 32 : index
  %e = et.event.create() : !et.event<>
  et.task @attn tiles(%t) in (%c2) {
    %kv = memref.alloca() {et.dynamic_shared} : memref<98304xbf16, #gpu.address_space<workgroup>>
    et.event.signal %e[] : !et.event<>
  }
  et.task @t tiles(%t) in (%c2) {
    et.event.wait %e[] : !et.event<>
    %r0 = arith.muli %t, %c32 : index
    et.linear %x, %w, %y rows(%r0, %c32) : memref<1x1024xbf16>, memref<64x1024xbf16>, memref<1x64xf32>
  }
}
