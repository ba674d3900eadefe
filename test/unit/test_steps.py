"""Kernels with steps (`et.repeat`) on the CPU target: one launch runs the
tasks step after step, each step's tiles seeing what the step before wrote,
until the step budget or the stop flag that a task sets on the device; the
counters of a launch count on across its steps and the next launch starts
from the other bank."""

import numpy as np
import pytest

import event_tensor as et
from event_tensor.testing import STEPS_CASES
from event_tensor.testing import STEPS_KERNEL as KERNEL
from event_tensor.testing import steps_reference as reference

POISON = -1


def run(launch, steps: int, limit: int):
    stop = np.zeros(1, np.int32)
    acc = np.zeros(8, np.int64)
    log = np.full(64, POISON, np.int64)
    launch(steps, stop, acc, log, np.array([limit], np.int64))
    return stop, acc, log


@pytest.mark.parametrize("mode", ["static", "dynamic"])
@pytest.mark.parametrize("workers", [1, 3, 8, 24])
def test_steps_run_until_budget_or_stop(workers, mode, tmp_path):
    # 24 workers take the tickets of a dynamic schedule (9 tiles a step)
    # steps ahead: those past a stop must not wait for steps that never run.
    launch = et.compile(KERNEL, target="cpu", workers=workers, mode=mode, cache_dir=tmp_path).launcher(
        timeout_s=20)
    for steps, limit in STEPS_CASES:
        stop, acc, log = run(launch, steps, limit)
        want_acc, want_log = reference(steps, limit)
        assert acc.tolist() == want_acc.tolist(), (workers, steps, limit)
        assert log[: len(want_log)].tolist() == want_log, (workers, steps, limit)
        # No step after the one that stopped (nor past the budget) ran.
        assert (log[len(want_log):] == POISON).all(), (workers, steps, limit, log)
        assert stop[0] == int(bool(want_log) and want_log[-1] >= limit)
        # The next launch takes the other counter bank and starts at step 0.



# Tile 0 of @work spins at step 1 (an LCG loop of spin[0] iterations), so the
# tiles waiting on it (or the gate of step 2) time out during step 1 or at
# the start of step 2.
SLOW = """
et.kernel @slow(%n: index, %stop: memref<1xi32>, %spin: memref<1xi64>, %out: memref<2xi64>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %worked = et.event.create() : !et.event<>
  %done = et.event.create() : !et.event<>
  et.repeat %n until %stop after %done : memref<1xi32>, !et.event<>
  et.task @work tiles(%i) in (%c2) {
    %s = et.step
    %at1 = arith.cmpi eq, %s, %c1 : index
    %first = arith.cmpi eq, %i, %c0 : index
    %slow = arith.andi %at1, %first : i1
    %long = memref.load %spin[%c0] : memref<1xi64>
    %zero = arith.constant 0 : i64
    %iters = arith.select %slow, %long, %zero : i64
    %a = arith.constant 6364136223846793005 : i64
    %one = arith.constant 1 : i64
    %x = scf.for %k = %zero to %iters step %one iter_args(%v = %one) -> (i64) : i64 {
      %m = arith.muli %v, %a : i64
      %y = arith.addi %m, %one : i64
      scf.yield %y : i64
    }
    memref.store %x, %out[%i] : memref<2xi64>
    et.event.signal %worked[] : !et.event<>
  }
  et.task @finish tiles(%j) in (%c1) {
    et.event.wait %worked[] : !et.event<>
    et.event.signal %done[] : !et.event<>
  }
}
"""


def test_watchdog_names_the_step(tmp_path):
    from event_tensor import runtime

    launch = et.compile(SLOW, target="cpu", workers=2, mode="static", cache_dir=tmp_path).launcher()
    stop, out = np.zeros(1, np.int32), np.zeros(2, np.int64)
    launch(3, stop, np.array([0], np.int64), out, timeout_s=5)  # no spin: all three steps run
    with pytest.raises(runtime.WatchdogError) as info:
        launch(3, stop, np.array([1_000_000_000], np.int64), out, timeout_s=0.2)
    assert info.value.record["step"] in (1, 2), info.value.record
    assert f"step {info.value.record['step']}, worker" in str(info.value)


def test_trace_records_the_steps(tmp_path):
    """A profiled launch of several steps: each tile record carries its
    step, a step's tiles start after every tile of the step before started
    (they all precede its end, which the gate waits for), and the Chrome
    trace and the Gantt chart show the steps."""
    launch = et.compile(KERNEL, target="cpu", workers=3, mode="static", profile=True,
                        cache_dir=tmp_path).launcher(timeout_s=20)
    run(launch, 3, 1 << 40)
    trace = launch.last_trace
    assert sorted(set(trace.steps)) == [0, 1, 2] and len(trace.records) == 3 * 9
    for s in (1, 2):
        before = [r[3] for r, step in zip(trace.records, trace.steps) if step == s - 1]
        starts = [r[3] for r, step in zip(trace.records, trace.steps) if step == s]
        assert min(starts) >= max(before)
    chrome = trace.chrome_trace()
    assert {e["args"]["step"] for e in chrome["traceEvents"] if e.get("ph") == "X"} == {0, 1, 2}
    pytest.importorskip("matplotlib")
    trace.gantt_png(tmp_path / "steps.png")
    assert (tmp_path / "steps.png").stat().st_size > 0
