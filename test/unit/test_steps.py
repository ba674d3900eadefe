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



# @finish waits on element `step` of an event of two: at step 2 the index is
# out of bounds, and the kernel's error record names the step.
OUT_OF_BOUNDS = """
et.kernel @oob(%n: index, %stop: memref<1xi32>) {
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %e = et.event.create() : !et.event<2>
  %done = et.event.create() : !et.event<>
  et.repeat %n until %stop after %done : memref<1xi32>, !et.event<>
  et.task @work tiles(%i) in (%c2) {
    et.event.signal %e[%i] : !et.event<2>
  }
  et.task @finish tiles(%j) in (%c1) {
    %s = et.step
    et.event.wait %e[%s] : !et.event<2>
    et.event.signal %done[] : !et.event<>
  }
}
"""


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_error_records_name_the_step(mode, tmp_path):
    """Every error record of a kernel with steps carries the step (the
    watchdog's, the bounds check's: one record); its message begins with
    it."""
    from event_tensor import runtime

    launch = et.compile(OUT_OF_BOUNDS, target="cpu", workers=2, mode=mode, cache_dir=tmp_path).launcher()
    launch(2, np.zeros(1, np.int32))  # steps 0 and 1 wait on elements 0 and 1
    with pytest.raises(runtime.KernelError) as info:
        launch(3, np.zeros(1, np.int32))
    assert info.value.record["step"] == 2 and info.value.record["task"] == "finish"
    assert str(info.value).startswith("kernel oob: step 2, worker ")
    # A watchdog timeout's report names the step the same way.
    from event_tensor.runtime.abi import TIMEOUT
    from event_tensor.runtime.launch import decode_error

    meta = {"kernel": "k", "steps": True, "tasks": ["t"], "events": [{"name": "e"}]}
    err = decode_error(meta, [TIMEOUT, 1, 0, 3, 0, 0, 8, 7, 5])
    assert isinstance(err, runtime.WatchdogError) and err.record["step"] == 5
    assert "watchdog timeout: step 5, worker 1, task @t tile 3 waited on e[0]" in str(err)


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


def test_one_launcher_from_several_threads(tmp_path):
    """A launcher called from several Python threads at once launches one
    at a time (its counters and launch number are shared): every launch's
    results are right."""
    import threading

    launch = et.compile(KERNEL, target="cpu", workers=3, mode="static", cache_dir=tmp_path).launcher(timeout_s=20)
    wrong, errors = [], []

    def client(k: int):
        try:
            for i in range(40):
                steps, limit = STEPS_CASES[(k + i) % len(STEPS_CASES)]
                _, acc, log = run(launch, steps, limit)
                want_acc, want_log = reference(steps, limit)
                if acc.tolist() != want_acc.tolist() or log[: len(want_log)].tolist() != want_log:
                    wrong.append((k, i))
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and not wrong, (errors[:1], wrong[:5])
