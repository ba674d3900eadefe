// A pipeline option outside its set of values is an error, and et-opt fails
// (`not`): the options are enums, parsed before any pass runs.
// RUN: not et-opt %s --pass-pipeline="builtin.module(et-lower-to-cpu-pipeline{mode=bogus})" 2>&1 | FileCheck %s --check-prefix=CPU-MODE
// RUN: not et-opt %s --pass-pipeline="builtin.module(et-lower-to-nvvm-pipeline{mode=bogus})" 2>&1 | FileCheck %s --check-prefix=NVVM-MODE
// RUN: not et-opt %s --pass-pipeline="builtin.module(et-lower-to-nvvm-pipeline{format=ptx})" 2>&1 | FileCheck %s --check-prefix=FORMAT
// RUN: not et-opt %s --pass-pipeline="builtin.module(et-lower-to-nvvm-pipeline{tile-linear=stream})" 2>&1 | FileCheck %s --check-prefix=LINEAR
// RUN: not et-opt %s --pass-pipeline="builtin.module(et-lower-to-nvvm-pipeline{tile-prefetch=dram})" 2>&1 | FileCheck %s --check-prefix=PREFETCH
// RUN: not et-opt %s --pass-pipeline="builtin.module(et-lower-to-nvvm-pipeline{tile-kv-prefetch=l2})" 2>&1 | FileCheck %s --check-prefix=KV
// RUN: not et-opt %s --pass-pipeline="builtin.module(et-lower-to-nvvm-pipeline{tile-mma=wmma})" 2>&1 | FileCheck %s --check-prefix=MMA
// A valid value passes.
// RUN: et-opt %s --pass-pipeline="builtin.module(et-lower-to-cpu-pipeline{mode=dynamic})" | FileCheck %s --check-prefix=OK

// CPU-MODE: for the --mode option: Cannot find option named 'bogus'!
// CPU-MODE: error: failed to add `et-lower-to-cpu-pipeline` with options `mode=bogus`
// NVVM-MODE: for the --mode option: Cannot find option named 'bogus'!
// FORMAT: for the --format option: Cannot find option named 'ptx'!
// LINEAR: for the --tile-linear option: Cannot find option named 'stream'!
// PREFETCH: for the --tile-prefetch option: Cannot find option named 'dram'!
// KV: for the --tile-kv-prefetch option: Cannot find option named 'l2'!
// MMA: for the --tile-mma option: Cannot find option named 'wmma'!
// OK: llvm.func @k_worker
et.kernel @k() {
  %c0 = arith.constant 0 : index
}
