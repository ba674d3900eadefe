"""Kernels with steps (`et.repeat`) on the CPU target: one launch runs the
tasks step after step, each step's tiles seeing what the step before wrote,
until the step budget or the stop flag that a task sets on the device; the
counters of a launch count on across its steps and the next launch starts
from the other bank."""

import numpy as np
import pytest

import event_tensor as et

# Every step: tile i of @add adds (step + 1) * (i + 1) to acc[i] after reading
# it (what the step before wrote, possibly on another worker); @finish sums
# acc into log[step] and sets the stop flag once the sum reaches limit[0].
KERNEL = """
et.kernel @steps(%n: index, %stop: memref<1xi32>, %acc: memref<8xi64>, %log: memref<64xi64>,
                 %limit: memref<1xi64>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %added = et.event.create() : !et.event<>
  %done = et.event.create() : !et.event<>
  et.repeat %n until %stop after %done : memref<1xi32>, !et.event<>
  et.task @add tiles(%i) in (%c8) {
    %s = et.step
    %s1 = arith.addi %s, %c1 : index
    %i1 = arith.addi %i, %c1 : index
    %inc = arith.muli %s1, %i1 : index
    %inc64 = arith.index_cast %inc : index to i64
    %v = memref.load %acc[%i] : memref<8xi64>
    %w = arith.addi %v, %inc64 : i64
    memref.store %w, %acc[%i] : memref<8xi64>
    et.event.signal %added[] : !et.event<>
  }
  et.task @finish tiles(%j) in (%c1) {
    et.event.wait %added[] : !et.event<>
    %s = et.step
    %zero = arith.constant 0 : i64
    %sum = scf.for %i = %c0 to %c8 step %c1 iter_args(%a = %zero) -> (i64) {
      %v = memref.load %acc[%i] : memref<8xi64>
      %t = arith.addi %a, %v : i64
      scf.yield %t : i64
    }
    memref.store %sum, %log[%s] : memref<64xi64>
    %lim = memref.load %limit[%c0] : memref<1xi64>
    %reached = arith.cmpi sge, %sum, %lim : i64
    scf.if %reached {
      %one = arith.constant 1 : i32
      memref.store %one, %stop[%c0] : memref<1xi32>
    }
    et.event.signal %done[] : !et.event<>
  }
}
"""
POISON = -1


def reference(steps: int, limit: int):
    acc, log = np.zeros(8, np.int64), []
    for s in range(steps):
        acc += (s + 1) * np.arange(1, 9)
        log.append(int(acc.sum()))
        if log[-1] >= limit:
            break
    return acc, log


def run(launch, steps: int, limit: int):
    stop = np.zeros(1, np.int32)
    acc = np.zeros(8, np.int64)
    log = np.full(64, POISON, np.int64)
    launch(steps, stop, acc, log, np.array([limit], np.int64))
    return stop, acc, log


@pytest.mark.parametrize("mode", ["static", "dynamic"])
@pytest.mark.parametrize("workers", [1, 3, 8])
def test_steps_run_until_budget_or_stop(workers, mode, tmp_path):
    launch = et.compile(KERNEL, target="cpu", workers=workers, mode=mode, cache_dir=tmp_path).launcher(
        timeout_s=20)
    for steps, limit in [(10, 1 << 40), (40, 2000), (1, 0), (0, 0), (64, 1 << 40), (5, 36)]:
        stop, acc, log = run(launch, steps, limit)
        want_acc, want_log = reference(steps, limit)
        assert acc.tolist() == want_acc.tolist(), (workers, steps, limit)
        assert log[: len(want_log)].tolist() == want_log, (workers, steps, limit)
        # No step after the one that stopped (nor past the budget) ran.
        assert (log[len(want_log):] == POISON).all(), (workers, steps, limit, log)
        assert stop[0] == int(bool(want_log) and want_log[-1] >= limit)
        # The next launch takes the other counter bank and starts at step 0.

