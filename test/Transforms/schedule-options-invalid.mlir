// Bad pass options: each is reported on the kernel.
// RUN: not et-opt %s --et-static-schedule=workers=0 2>&1 | FileCheck %s --check-prefix=STATIC-WORKERS
// RUN: not et-opt %s --et-dynamic-schedule=workers=-3 2>&1 | FileCheck %s --check-prefix=DYNAMIC-WORKERS
// RUN: not et-opt %s --et-static-schedule=dynamic-extent=0 2>&1 | FileCheck %s --check-prefix=STATIC-EXTENT
// RUN: not et-opt %s --et-dynamic-schedule=dynamic-extent=0 2>&1 | FileCheck %s --check-prefix=DYNAMIC-EXTENT
// RUN: not et-opt %s --et-static-schedule=workers=9223372036854775807 2>&1 | FileCheck %s --check-prefix=STATIC-HUGE
// RUN: not et-opt %s --et-dynamic-schedule=dynamic-extent=9223372036854775807 2>&1 | FileCheck %s --check-prefix=DYNAMIC-HUGE
// RUN: not et-opt %s --et-static-schedule=bandwidth-gbps=0 2>&1 | FileCheck %s --check-prefix=BANDWIDTH
// RUN: not et-opt %s --et-static-schedule=sync-ns=-1 2>&1 | FileCheck %s --check-prefix=SYNC

// STATIC-WORKERS: :19:1: error: 'et.kernel' op 'et-static-schedule' needs a worker count in [1, 1048576], got 0
// DYNAMIC-WORKERS: :19:1: error: 'et.kernel' op 'et-dynamic-schedule' needs a worker count in [1, 1048576], got -3
// STATIC-EXTENT: :19:1: error: 'et.kernel' op 'et-static-schedule' needs a dynamic-extent in [1, 2147483648], got 0
// DYNAMIC-EXTENT: :19:1: error: 'et.kernel' op 'et-dynamic-schedule' needs a dynamic-extent in [1, 2147483648], got 0
// STATIC-HUGE: :19:1: error: 'et.kernel' op 'et-static-schedule' needs a worker count in [1, 1048576], got 9223372036854775807
// DYNAMIC-HUGE: :19:1: error: 'et.kernel' op 'et-dynamic-schedule' needs a dynamic-extent in [1, 2147483648], got 9223372036854775807
// BANDWIDTH: :19:1: error: 'et.kernel' op invalid cost model options: cost model bandwidth and flops must be positive, got bandwidth_gbps = 0, gflops = 989000
// SYNC: :19:1: error: 'et.kernel' op invalid cost model options: cost model latencies must be non-negative, got dispatch_ns = 300, sync_ns = -1
et.kernel @k(%n: index) {
  et.task @a tiles(%i) in (%n) {
  }
}
