"""Kernels on several devices, run on the CPU: N groups of worker threads
over separate buffers, one group per simulated device. Remote signals,
symmetric buffers (et.peer), the device id, the barrier at the end of a
launch, argument checks and errors that name the device."""

import ml_dtypes
import numpy as np
import pytest

from event_tensor.build import compile_kernel
from event_tensor.kernels import allreduce_kernel, hop_kernel
from event_tensor.runtime.errors import ArgumentError, WatchdogError
from event_tensor.runtime.launch import TIMEOUT, decode_error, first_cause

DTYPES = {"f32": np.float32, "bf16": ml_dtypes.bfloat16}


@pytest.mark.parametrize("devices", [2, 3])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_allreduce_is_the_sum_in_device_order(devices, dtype):
    rows, cols = 3, 512
    art = compile_kernel(allreduce_kernel(devices, rows, cols, dtype=dtype, block=128), target="cpu", workers=3)
    assert art.metadata["devices"] == devices
    assert [a.get("symmetric", False) for a in art.metadata["arguments"]] == [False, True, False]
    launch = art.launcher(timeout_s=10)
    dt = DTYPES[dtype]
    rng = np.random.default_rng(devices)
    inbox = [np.zeros((devices, rows, cols), dt) for _ in range(devices)]
    ys = [np.zeros((rows, cols), dt) for _ in range(devices)]
    # Several launches with fresh data: the counter banks alternate.
    for _ in range(4):
        xs = [rng.standard_normal((rows, cols)).astype(dt) for _ in range(devices)]
        launch(xs, inbox, ys)
        want = xs[0].astype(np.float32)
        for x in xs[1:]:
            want = want + x.astype(np.float32)
        want = want.astype(dt)
        for d in range(devices):
            np.testing.assert_array_equal(ys[d].astype(np.float32), want.astype(np.float32), err_msg=f"device {d}")


DEVICE_IDS = """
et.kernel @ids(%out: memref<3xindex>, %box: memref<3xindex> {et.symmetric}) attributes {devices = 3} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %got = et.event.create() : !et.event<1>
  // Tile k writes this device's id into slot k of device (d + k) mod 3.
  et.task @send tiles(%k) in (%c3) {
    %d = et.device_id
    %remote = et.peer %box[%k] : memref<3xindex>
    memref.store %d, %remote[%k] : memref<3xindex>
    et.event.signal %got[%c0] peer(%k) : !et.event<1>
  }
  et.task @copy tiles(%i) in (%c1) {
    et.event.wait %got[%c0] : !et.event<1>
    scf.for %j = %c0 to %c3 step %c1 {
      %v = memref.load %box[%j] : memref<3xindex>
      memref.store %v, %out[%j] : memref<3xindex>
    }
  }
}
"""


def test_device_id_and_peer_buffers():
    art = compile_kernel(DEVICE_IDS, target="cpu", workers=2)
    outs = [np.full(3, -1, np.int64) for _ in range(3)]
    boxes = [np.full(3, -1, np.int64) for _ in range(3)]
    art.launcher(timeout_s=10)(outs, boxes)
    for d in range(3):
        # Slot k of device d holds the id of device (d - k) mod 3.
        assert outs[d].tolist() == [(d - k) % 3 for k in range(3)], d


def test_one_device_kernel_with_peer_and_device_id():
    text = DEVICE_IDS.replace("attributes {devices = 3} ", "")
    art = compile_kernel(text, target="cpu", workers=2)
    assert "devices" not in art.metadata
    out, box = np.full(3, -1, np.int64), np.full(3, -1, np.int64)
    art.launcher(timeout_s=10)(out, box)
    # Every peer is the device itself, whose id is 0.
    assert out.tolist() == [0, 0, 0]


def test_hop_chain_runs_and_profiles_every_device():
    art = compile_kernel(hop_kernel(2, 8), target="cpu", workers=2, profile=True)
    launch = art.launcher(timeout_s=10)
    sinks = [np.zeros(1, np.int32), np.zeros(1, np.int32)]
    launch(sinks)
    assert len(launch.last_traces) == 2
    for trace in launch.last_traces:
        assert sorted((art.metadata["tasks"][t], tile) for _, t, tile, *_ in trace.records) == sorted(
            [("start", 0)] + [(k, t) for k in ("ping", "pong") for t in range(8)])
    # One clock, one origin: ping t of one device is ready only after pong
    # t - 1 of the other ended (each tile waits on the other device).
    times = {}
    for d, trace in enumerate(launch.last_traces):
        for _, task, tile, start, ready, end in trace.records:
            times[(d, art.metadata["tasks"][task], tile)] = (ready, end)
    for d in range(2):
        for t in range(1, 8):
            assert times[(d, "ping", t)][0] >= times[(1 - d, "pong", t - 1)][1] - 0


def test_arguments_of_a_multi_device_kernel():
    art = compile_kernel(allreduce_kernel(2, 2, 128, dtype="f32", block=64), target="cpu", workers=1)
    launch = art.launcher(timeout_s=5)
    x = [np.zeros((2, 128), np.float32) for _ in range(2)]
    inbox = [np.zeros((2, 2, 128), np.float32) for _ in range(2)]
    y = [np.zeros((2, 128), np.float32) for _ in range(2)]
    with pytest.raises(ArgumentError, match=r"arg0 .*runs on 2 devices; give a list of 2 buffers"):
        launch(x[0], inbox, y)
    with pytest.raises(ArgumentError, match=r"arg1 .*runs on 2 devices, got 3 values"):
        launch(x, inbox + [inbox[0]], y)
    strided = [inbox[0], np.zeros((2, 2, 256), np.float32)[:, :, ::2]]
    with pytest.raises(ArgumentError, match=r"arg1 .*expected a contiguous row-major array"):
        launch(x, strided, y)
    # Copies of a symmetric buffer of a runtime size must agree.
    dyn = compile_kernel(SYMMETRIC_DYNAMIC, target="cpu", workers=1).launcher(timeout_s=5)
    with pytest.raises(ArgumentError, match=r"arg0 .* is symmetric: every device's copy needs the same shape "
                                            r"and strides \(device 1 differs from device 0\)"):
        dyn([np.zeros(4, np.int64), np.zeros(5, np.int64)])
    dyn([np.zeros(4, np.int64), np.zeros(4, np.int64)])


SYMMETRIC_DYNAMIC = """
et.kernel @dyn(%box: memref<?xi64> {et.symmetric}) attributes {devices = 2} {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
  }
}
"""


WAITS_TOO_LONG = """
et.kernel @uneven(%n: index) attributes {devices = 2} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %got = et.event.create() : !et.event<1>
  et.task @push tiles(%i) in (%n) {
    et.event.signal %got[%c0] peer(%c1) : !et.event<1>
  }
  et.task @sum tiles(%i) in (%c1) {
    et.event.wait %got[%c0] : !et.event<1>
  }
}
"""


def test_watchdog_names_the_device_that_waited():
    art = compile_kernel(WAITS_TOO_LONG, target="cpu", workers=1, mode="dynamic")
    launch = art.launcher(timeout_s=0.3)
    # A scalar given once serves every device.
    launch(2)
    # Device 1 expects 2 signals (its n) but device 0 sends 1: device 1
    # times out on the event, device 0 then at the barrier; the event's
    # timeout is the one reported.
    with pytest.raises(WatchdogError, match=r"device 1, worker 0, task @sum tile 0 waited on .*1 of 2 expected"):
        launch([1, 2])
    # The launcher recovers.
    launch(1)


def test_error_of_the_barrier_and_the_first_cause():
    meta = {"kernel": "k", "devices": 2, "tasks": ["t"], "events": [{"name": "e"}]}
    # (kind, worker, task, tile, event, element, expected, observed, step)
    barrier = [TIMEOUT, 0, -1, -1, 1, 0, 4, 2, 0]
    on_event = [TIMEOUT, 3, 0, 5, 0, 0, 1, 0, 0]
    err = decode_error(meta, barrier, device=0)
    assert isinstance(err, WatchdogError)
    assert "device 0, worker 0 waited at the end of the launch for the workers of the other devices; 2 of 4" \
        in str(err)
    assert err.record["device"] == 0
    assert first_cause({0: barrier, 1: on_event}, meta) == 1
    assert first_cause({0: on_event, 1: [2, 0, -1, -1, -1, -1, 8, 4, 0]}, meta) == 1
    assert first_cause({0: barrier, 1: barrier}, meta) == 0


def test_builder_checks_devices_and_symmetric_arguments():
    from event_tensor.dialects import et
    from event_tensor.ir import Context, F32Type, IndexType, InsertionPoint, Location, MemRefType, Module

    with Context(), Location.unknown():
        module = Module.create()
        with InsertionPoint(module.body):
            buf = MemRefType.get([4], F32Type.get())
            with pytest.raises(ValueError, match="devices must be a positive int, got 0"):
                et.KernelOp("k", [buf], devices=0)
            with pytest.raises(ValueError, match=r"symmetric argument 3 is not an argument index \(0..0\)"):
                et.KernelOp("k", [buf], devices=2, symmetric=[3])
            with pytest.raises(ValueError, match="symmetric argument 0 is a index, not a memref"):
                et.KernelOp("k", [IndexType.get()], devices=2, symmetric=[0])


def test_allreduce_builder_rejects_bad_blocks():
    with pytest.raises(ValueError, match=r"cols \(100\) must be a multiple of block \(64\)"):
        allreduce_kernel(2, 1, 100, block=64)
    with pytest.raises(ValueError, match=r"block \(12\) must be a multiple of 8"):
        allreduce_kernel(2, 1, 96, block=12)


OUT_OF_BOUNDS_ON_ONE = """
et.kernel @oob(%k: index) attributes {devices = 2} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %e = et.event.create() : !et.event<2>
  et.task @a tiles(%i) in (%c1) {
    et.event.signal %e[%k] peer(%c1) : !et.event<2>
  }
  et.task @b tiles(%i) in (%c1) {
    et.event.wait %e[%c0] : !et.event<2>
  }
}
"""


def test_an_error_on_one_device_stops_the_others():
    import time

    from event_tensor.runtime.errors import KernelError

    art = compile_kernel(OUT_OF_BOUNDS_ON_ONE, target="cpu", workers=1)
    launch = art.launcher(timeout_s=6)
    launch(0)
    # Device 1 signals element 5 of a 2-element event: an error there. Device
    # 0 waits for that signal; the error raises its abort word, so it stops
    # at once instead of after its own 6 s watchdog.
    start = time.perf_counter()
    with pytest.raises(KernelError, match=r"device 1, worker 0, task @a tile 0 accessed .* at linear element 5"):
        launch([0, 5])
    assert time.perf_counter() - start < 3
    launch(0)


# Steps on two devices: each device's `work` tiles count into their own
# acc and signal both devices; `finish` ends the step on both. It stops
# the launch at `limit` steps (the same decision on both devices), or when
# `ask` is set, which only device 0's copy holds (as the host's interrupt):
# that copy then raises the other's flag through et.peer before it signals.
STEPS_TWO_DEVICES = """
et.kernel @steps2(%n: index, %stop: memref<1xi32> {et.symmetric}, %acc: memref<2xi64>, %limit: memref<1xi64>,
                  %ask: memref<1xi32>) attributes {devices = 2} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %work = et.event.create() : !et.event<>
  %done = et.event.create() : !et.event<>
  et.repeat %n until %stop after %done : memref<1xi32>, !et.event<>
  et.task @work tiles(%i) in (%c2) {
    %t = et.thread_id
    %first = arith.cmpi eq, %t, %c0 : index
    scf.if %first {
      %v = memref.load %acc[%i] : memref<2xi64>
      %one = arith.constant 1 : i64
      %w = arith.addi %v, %one : i64
      memref.store %w, %acc[%i] : memref<2xi64>
    }
    et.event.signal %work[] peer(%c0) : !et.event<>
    et.event.signal %work[] peer(%c1) : !et.event<>
  }
  et.task @finish tiles(%j) in (%c1) {
    et.event.wait %work[] : !et.event<>
    %t = et.thread_id
    %first = arith.cmpi eq, %t, %c0 : index
    scf.if %first {
      %s = et.step
      %s64 = arith.index_cast %s : index to i64
      %one = arith.constant 1 : i64
      %steps = arith.addi %s64, %one : i64
      %lim = memref.load %limit[%c0] : memref<1xi64>
      %reached = arith.cmpi sge, %steps, %lim : i64
      %a = memref.load %ask[%c0] : memref<1xi32>
      %zero = arith.constant 0 : i32
      %asked = arith.cmpi ne, %a, %zero : i32
      %end = arith.ori %reached, %asked : i1
      scf.if %end {
        %up = arith.constant 1 : i32
        memref.store %up, %stop[%c0] : memref<1xi32>
        %other = et.peer %stop[%c1] : memref<1xi32>
        memref.store %up, %other[%c0] : memref<1xi32>
      }
    }
    et.event.signal %done[] peer(%c0) : !et.event<>
    et.event.signal %done[] peer(%c1) : !et.event<>
  }
}
"""


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_steps_on_two_devices(mode):
    """et.repeat across devices: both copies run the same steps (the end
    of a step signalled on both), stop together at the limit, and stop
    together when only device 0 is asked to (it raises the other's flag)."""
    launch = compile_kernel(STEPS_TWO_DEVICES, target="cpu", workers=3, mode=mode).launcher(timeout_s=20)

    def run(steps, limit, ask0):
        stop = [np.zeros(1, np.int32) for _ in range(2)]
        acc = [np.zeros(2, np.int64) for _ in range(2)]
        launch(steps, stop, acc, [np.array([limit], np.int64)] * 2, [np.array([ask0], np.int32),
                                                                     np.zeros(1, np.int32)])
        return [s[0] for s in stop], [a.tolist() for a in acc]

    assert run(10, 1 << 40, 0) == ([0, 0], [[10, 10], [10, 10]])  # the budget
    assert run(10, 4, 0) == ([1, 1], [[4, 4], [4, 4]])             # the limit, decided on both
    assert run(10, 1 << 40, 1) == ([1, 1], [[1, 1], [1, 1]])       # device 0 asked: both end
    assert run(0, 1, 0) == ([0, 0], [[0, 0], [0, 0]])              # no step
