// RUN: not et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=tpu}))" 2>&1 | FileCheck %s --check-prefix=TARGET
// RUN: not et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{unroll=0}))" 2>&1 | FileCheck %s --check-prefix=UNROLL
// RUN: not et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{prefetch=dram}))" 2>&1 | FileCheck %s --check-prefix=PREFETCH
// RUN: not et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{linear=columns}))" 2>&1 | FileCheck %s --check-prefix=LINEAR
// RUN: not et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{prefetch=shared prefetch-bytes=1024}))" 2>&1 | FileCheck %s --check-prefix=BYTES
// RUN: not et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{kv-prefetch=shared prefetch-bytes=300000}))" 2>&1 | FileCheck %s --check-prefix=KVBYTES
// RUN: not et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{kv-prefetch=registers}))" 2>&1 | FileCheck %s --check-prefix=KV
// RUN: not et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{mma=wmma}))" 2>&1 | FileCheck %s --check-prefix=MMA
// RUN: not et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{stage-bytes=300000}))" 2>&1 | FileCheck %s --check-prefix=STAGE
// RUN: not et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{rows-in-flight=3}))" 2>&1 | FileCheck %s --check-prefix=ROWS
// RUN: not et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{rows-in-flight=0}))" 2>&1 | FileCheck %s --check-prefix=ROWS0
// RUN: not et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{kv-mma-bytes=300000}))" 2>&1 | FileCheck %s --check-prefix=KVMMA

// The closed sets of values are enums: the option parser rejects another value.
// TARGET: for the --target option: Cannot find option named 'tpu'!
// PREFETCH: for the --prefetch option: Cannot find option named 'dram'!
// LINEAR: for the --linear option: Cannot find option named 'columns'!
// KV: for the --kv-prefetch option: Cannot find option named 'registers'!
// MMA: for the --mma option: Cannot find option named 'wmma'!
// KVMMA: :[[@LINE+7]]:1: error: 'et.kernel' op 'et-lower-tile-ops' kv-mma-bytes must be in [0, 204800], got 300000
// ROWS0: :[[@LINE+6]]:1: error: 'et.kernel' op 'et-lower-tile-ops' rows-in-flight must be 1, 2, 4, 8 or 16, got 0
// ROWS: :[[@LINE+5]]:1: error: 'et.kernel' op 'et-lower-tile-ops' rows-in-flight must be 1, 2, 4, 8 or 16, got 3
// STAGE: :[[@LINE+4]]:1: error: 'et.kernel' op 'et-lower-tile-ops' stage-bytes must be in [0, 204800], got 300000
// KVBYTES: :[[@LINE+3]]:1: error: 'et.kernel' op 'et-lower-tile-ops' prefetch-bytes must be in [16384, 204800] for prefetch=shared or kv-prefetch=shared, got 300000
// BYTES: :[[@LINE+2]]:1: error: 'et.kernel' op 'et-lower-tile-ops' prefetch-bytes must be in [16384, 204800] for prefetch=shared or kv-prefetch=shared, got 1024
// UNROLL: :[[@LINE+1]]:1: error: 'et.kernel' op 'et-lower-tile-ops' needs unroll >= 1, got 0
et.kernel @k() {
  %c0 = arith.constant 0 : index
}
