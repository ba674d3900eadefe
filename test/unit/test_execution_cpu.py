"""End-to-end on the CPU target: random task graphs (random DAGs, tilings and
dynamic extents) with computing bodies are compiled with
et-lower-to-cpu-pipeline, run on host worker threads, and must match a
sequential reference; a planted deadlock must raise the watchdog error
within its timeout; bad arguments and artifacts raise errors that name them.

ET_EXEC_SEEDS (default 60) sets the number of random graphs.
"""

import json
import os
import random
import time
from pathlib import Path

import numpy as np
import pytest

import event_tensor as et
from event_tensor import analysis, compiler, ir, runtime
from event_tensor.dag import random_kernel, reference, with_bodies
from event_tensor.testing import planted_deadlock, reference_plan

SEEDS = int(os.environ.get("ET_EXEC_SEEDS", "60"))
POISON = -7777


_reference_plan = reference_plan


def _buffers(rk, plan):
    sizes = [rk.bindings[f"arg{i}"] for i in range(len(rk.args))]
    data = [np.zeros(max(e["size"], 1), np.int64) for e in plan["events"]]
    outs = [np.full(t["num_tiles"], POISON, np.int64) for t in plan["tasks"]]
    return sizes, data, outs


@pytest.mark.parametrize("seed", range(SEEDS))
def test_random_graph_matches_reference(seed, tmp_path):
    rng = random.Random(1000 + seed)
    rk = random_kernel(seed, max_tasks=rng.choice([3, 6, 9]), dynamic=seed % 3 != 0)
    text = with_bodies(rk)
    plan = _reference_plan(text, rk.bindings)
    want_outs, want_data = reference(plan)
    for mode in ("static", "dynamic"):
        workers = rng.choice([1, 2, 3, 5, 8])
        artifact = et.compile(text, target="cpu", workers=workers, mode=mode, cache_dir=tmp_path)
        launch = artifact.launcher(timeout_s=20)
        for launch_index in range(2):  # a second launch reuses the counters (epochs)
            sizes, data, outs = _buffers(rk, plan)
            launch(*sizes, *data, *outs)
            for t, (got, want) in enumerate(zip(outs, want_outs)):
                assert got.tolist() == want, (
                    f"seed {seed}, {mode}, {workers} workers, launch {launch_index}: task "
                    f"{plan['tasks'][t]['name']} differs\n{text}")
            for e, (got, want) in enumerate(zip(data, want_data)):
                assert got[: len(want)].tolist() == want, f"seed {seed}, {mode}: event{e} data differs"


DEADLOCK = planted_deadlock(2)


def test_planted_deadlock_raises_watchdog_error(tmp_path):
    # Every worker runs the consumer before the producer: a deadlock the
    # watchdog must end. The verifier rejects this schedule...
    with pytest.raises(compiler.EventTensorCompileError, match="runs @consumer on worker 0 before @producer"):
        et.compile(DEADLOCK, target="cpu", workers=2, mode="keep", cache_dir=tmp_path)
    # ...so it is planted past it (mode=keep keeps the hand-written schedule).
    art = et.compile(DEADLOCK, target="cpu", workers=2, mode="keep", verify=False, cache_dir=tmp_path)
    launch = art.launcher()
    start = time.monotonic()
    with pytest.raises(runtime.WatchdogError) as info:
        launch(4, timeout_s=0.5)
    elapsed = time.monotonic() - start
    assert elapsed < 10, f"the watchdog took {elapsed:.1f} s for a 0.5 s timeout"
    record = info.value.record
    assert record["task"] == "consumer" and record["event"] == "event0"
    assert record["expected"] == 4 and record["observed"] == 0
    assert "watchdog timeout" in str(info.value)
    # The launcher recovers: state is reset, and a valid kernel still runs.
    with pytest.raises(runtime.WatchdogError):
        launch(4, timeout_s=0.2)


def test_host_watchdog_measures_wall_clock(tmp_path):
    """With more waiting workers than cores the host watchdog still fires
    about its timeout after the wait began: it reads the clock, where a
    count of yielding polls stretched with the load (a 2 s timeout fired
    after 208 s with four workers on two cores)."""
    workers = 4 * (os.cpu_count() or 1)
    art = et.compile(planted_deadlock(workers), target="cpu", workers=workers, mode="keep", verify=False,
                     cache_dir=tmp_path)
    launch = art.launcher()
    start = time.monotonic()
    with pytest.raises(runtime.WatchdogError):
        launch(4, timeout_s=0.5)
    elapsed = time.monotonic() - start
    assert elapsed < 2.0, f"the watchdog took {elapsed:.2f} s for a 0.5 s timeout with {workers} workers"


CHAIN = """
et.kernel @chain(%out: memref<8xi64>, %n: index) {
  %c4 = arith.constant 4 : index
  %e = et.event.create() : !et.event<4>
  et.task @a tiles(%i) in (%c4) {
    %v = arith.index_cast %i : index to i64
    memref.store %v, %out[%i] : memref<8xi64>
    et.event.signal %e[%i] : !et.event<4>
  }
  et.task @b tiles(%i) in (%c4) {
    et.event.wait %e[%i] : !et.event<4>
    %v = memref.load %out[%i] : memref<8xi64>
    %c4_ = arith.constant 4 : index
    %j = arith.addi %i, %c4_ : index
    memref.store %v, %out[%j] : memref<8xi64>
  }
}
"""


def test_cache_and_bad_arguments(tmp_path):
    art = et.compile(CHAIN, target="cpu", workers=2, cache_dir=tmp_path)
    meta = art.metadata
    assert meta["target"] == "cpu" and meta["workers"] == 2 and meta["entry"] == "chain_worker"
    assert [a["name"] for a in meta["arguments"]] == ["arg0", "arg1"]
    assert meta["arguments"][0] == {"name": "arg0", "type": "memref<8xi64>", "kind": "memref",
                                    "dtype": "int64", "shape": [8]}
    # A second compile loads the cached artifact (same directory, not rebuilt).
    stamp = (art.path / "kernel.so").stat().st_mtime_ns
    again = et.compile(CHAIN, target="cpu", workers=2, cache_dir=tmp_path)
    assert again.path == art.path and (again.path / "kernel.so").stat().st_mtime_ns == stamp
    # Loading needs no MLIR and runs.
    out = np.full(8, -1, np.int64)
    runtime.load(art.path).launcher()(out, 3)
    assert out.tolist() == [0, 1, 2, 3, 0, 1, 2, 3]

    launch = art.launcher()
    with pytest.raises(runtime.ArgumentError, match="takes 2 arguments"):
        launch(out)
    with pytest.raises(runtime.ArgumentError, match="expected dtype int64, got int32"):
        launch(np.zeros(8, np.int32), 3)
    with pytest.raises(runtime.ArgumentError, match="dimension 0 must be 8"):
        launch(np.zeros(7, np.int64), 3)
    with pytest.raises(runtime.ArgumentError, match="expected rank 1"):
        launch(np.zeros((8, 1), np.int64), 3)
    with pytest.raises(runtime.ArgumentError, match="expected an int"):
        launch(out, 3.5)
    with pytest.raises(runtime.ArgumentError, match="expected a cpu tensor"):
        launch(runtime.Buffer(0, [8], "int64", device="cuda"), 3)
    # A strided view or a broadcast (stride 0) of an identity-layout memref
    # would be read and written as if dense: refused.
    broadcast = np.lib.stride_tricks.as_strided(np.zeros(1, np.int64), (8,), (0,))
    for strided in (np.full(16, -1, np.int64)[::2], broadcast):
        with pytest.raises(runtime.ArgumentError, match="expected a contiguous row-major array, got strides"):
            launch(strided, 3)
    # A read-only array (np.broadcast_to's, a read-only memory map) would be
    # written: refused.
    read_only = np.full(8, -1, np.int64)
    read_only.setflags(write=False)
    for frozen in (read_only, np.broadcast_to(np.int64(0), (8,))):
        with pytest.raises(runtime.ArgumentError, match=r"argument arg0 \(memref<8xi64>\): a read-only numpy array"):
            launch(frozen, 3)
    # A watchdog timeout that is not a finite positive number of seconds
    # (NaN, inf, 0, a bool, 1e13) is refused before any launch.
    for bad in (float("nan"), float("inf"), 0, -1.0, True, 1e13, "5"):
        with pytest.raises(ValueError, match="timeout_s must be a finite number of seconds"):
            launch(out, 3, timeout_s=bad)
        with pytest.raises(ValueError, match="timeout_s must be a finite number of seconds"):
            art.launcher(timeout_s=bad)
    launch(out, 3, timeout_s=0.5)

    # An artifact from another toolchain version is refused.
    meta_path = art.path / "metadata.json"
    data = json.loads(meta_path.read_text())
    data["toolchain"] = "event_tensor 0.0.1"
    meta_path.write_text(json.dumps(data))
    with pytest.raises(runtime.ArtifactError, match="built by toolchain 'event_tensor 0.0.1'"):
        runtime.load(art.path)
    with pytest.raises(runtime.ArtifactError, match="not an artifact directory"):
        runtime.load(tmp_path / "nowhere")


def test_artifact_binary_is_checked(tmp_path):
    """An artifact's binary must be the one its metadata describes (SHA-256)
    and a file of its own directory; the compile cache recompiles an entry
    that fails to load instead of raising."""
    import shutil

    art = et.compile(CHAIN, target="cpu", workers=2, cache_dir=tmp_path / "cache")
    assert len(art.metadata["binary_sha256"]) == 64
    copy = tmp_path / "copy"
    shutil.copytree(art.path, copy)
    runtime.load(copy)
    binary = copy / art.metadata["binary"]
    binary.write_bytes(binary.read_bytes() + b"\0")
    with pytest.raises(runtime.ArtifactError, match="is not the one its metadata describes"):
        runtime.load(copy)
    meta_path = copy / "metadata.json"
    for bad in ("../kernel.so", "/etc/passwd", "..", ""):
        meta = json.loads(meta_path.read_text())
        meta["binary"] = bad
        meta_path.write_text(json.dumps(meta))
        with pytest.raises(runtime.ArtifactError, match="is not a file name in the artifact directory"):
            runtime.load(copy)
    meta["format"] = 1
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(runtime.ArtifactError, match="artifact format 1 is not supported"):
        runtime.load(copy)
    # A damaged cache entry is compiled again.
    cached = art.path / art.metadata["binary"]
    cached.write_bytes(b"not a shared object")
    again = et.compile(CHAIN, target="cpu", workers=2, cache_dir=tmp_path / "cache")
    assert again.path == art.path and runtime.load(again.path).metadata["binary_sha256"] == art.metadata["binary_sha256"]


def test_compile_errors_carry_diagnostics(tmp_path):
    device_count = """
    et.kernel @dev(%counts: memref<1xindex>) {
      %c0 = arith.constant 0 : index
      %n = et.extent.load %counts[%c0] : memref<1xindex>
      et.task @t tiles(%i) in (%n) {
      }
    }
    """
    with pytest.raises(compiler.EventTensorCompileError) as info:
        et.compile(device_count, target="cpu", mode="static", cache_dir=tmp_path)
    message = str(info.value)
    assert "the tile count of @t is only known on the device" in message
    assert "reproduce with: et-opt --pass-pipeline='builtin.module(et-lower-to-cpu-pipeline" in message
    # The failing op that MLIR attaches to the error is cut short (a model's
    # kernel would print megabytes); the reproducer file has all of it.
    big = device_count.replace("tiles(%i) in (%n) {", "tiles(%i) in (%n) {\n" + "\n".join(
        f"        %x{i} = arith.constant {i} : index" for i in range(200)))
    with pytest.raises(compiler.EventTensorCompileError) as info:
        et.compile(big, target="cpu", mode="static", cache_dir=tmp_path)
    message = str(info.value)
    assert "the tile count of @t is only known on the device" in message
    assert "see current operation" in message and "more lines)" in message
    assert len(message.splitlines()) < 30 and "value = 199" not in message
    repro = message.split("reproduce with: ")[1].split()[-1]
    assert "arith.constant 199" in Path(repro).read_text()
    # The dynamic schedule needs no bound.
    art = et.compile(device_count, target="cpu", mode="dynamic", cache_dir=tmp_path)
    art.launcher()(np.array([5], np.int64))
    with pytest.raises(ValueError, match="target must be 'cpu' or 'cuda'"):
        et.compile(CHAIN, target="tpu", cache_dir=tmp_path)
    with pytest.raises(ValueError, match="workers must be a positive int"):
        et.compile(CHAIN, target="cpu", workers=0, cache_dir=tmp_path)
    with pytest.raises(ValueError, match="mode must be 'static', 'dynamic' or 'keep', got 'eager'"):
        et.compile(CHAIN, target="cpu", mode="eager", cache_dir=tmp_path)
    with pytest.raises(ValueError, match="tile_prefetch must be 'none', 'registers', 'l2' or 'shared', got 'dram'"):
        et.compile(CHAIN, target="cuda", tile_prefetch="dram", cache_dir=tmp_path)
    with pytest.raises(ValueError, match="tile_linear must be 'rows' or 'spread', got 'columns'"):
        et.compile(CHAIN, target="cuda", tile_linear="columns", cache_dir=tmp_path)
    with pytest.raises(ValueError, match="opt_level must be 0, 1, 2 or 3, got 7"):
        et.compile(CHAIN, target="cuda", opt_level=7, cache_dir=tmp_path)
    with pytest.raises(ValueError, match="format must be 'isa', 'bin' or 'fatbin', got 'elf'"):
        et.compile(CHAIN, target="cuda", format="elf", cache_dir=tmp_path)
    with pytest.raises(ValueError, match="threads_per_worker must be a multiple of 32 in \\[32, 1024\\], got 100"):
        et.compile(CHAIN, target="cuda", threads_per_worker=100, cache_dir=tmp_path)


def test_profile_trace(tmp_path):
    """profile=True: every tile leaves one record; a worker's tiles do not
    overlap; a tile ends after every tile it depends on."""
    rk = random_kernel(7, max_tasks=6)
    text = with_bodies(rk)
    plan = _reference_plan(text, rk.bindings)
    art = et.compile(text, target="cpu", workers=3, mode="static", profile=True, cache_dir=tmp_path)
    assert art.metadata["profile"] is True
    launch = art.launcher()
    sizes, data, outs = _buffers(rk, plan)
    launch(*sizes, *data, *outs)
    trace = launch.last_trace
    total = sum(t["num_tiles"] for t in plan["tasks"])
    assert len(trace.records) == total and trace.dropped == 0
    assert sorted((t, tile) for _, t, tile, _, _, _ in trace.records) == sorted(
        (t, i) for t, task in enumerate(plan["tasks"]) for i in range(task["num_tiles"]))
    assert all(s <= r <= e for _, _, _, s, r, e in trace.records)
    end = {(t, tile): e for _, t, tile, _, _, e in trace.records}
    ready = {(t, tile): r for _, t, tile, _, r, _ in trace.records}
    for t, per_task in enumerate(plan["deps"]):
        for i, refs in enumerate(per_task):
            for d in refs:
                assert end[(t, i)] >= end[tuple(d)]
                # The waits are done only after the producer's end.
                assert ready[(t, i)] >= end[tuple(d)]
    for w in range(trace.workers):
        mine = sorted((s, e) for worker, _, _, s, _, e in trace.records if worker == w)
        assert all(a[1] <= b[0] for a, b in zip(mine, mine[1:]))
    kinds = trace.breakdown()
    assert sum(k["tiles"] for k in kinds.values()) == total
    assert all(k["wait_ns"] >= 0 and k["work_ns"] >= 0 for k in kinds.values())
    events = trace.chrome_trace()["traceEvents"]
    assert sum(1 for e in events if e.get("ph") == "X") == total
    pytest.importorskip("matplotlib")
    trace.gantt_png(tmp_path / "trace.png")
    assert (tmp_path / "trace.png").stat().st_size > 0
    # A trace buffer too small keeps the first records, counts the rest and
    # says so.
    small = art.launcher(trace_capacity=4)
    sizes, data, outs = _buffers(rk, plan)
    with pytest.warns(RuntimeWarning, match=f"{total - 4} of {total} tile records did not fit in the buffer of 4 "
                                            "records; pass a larger trace_capacity"):
        small(*sizes, *data, *outs)
    assert len(small.last_trace.records) == 4 and small.last_trace.dropped == total - 4


def test_trace_per_worker_regions():
    """The GPU's trace layout: each worker fills its own region of the buffer
    (capacity / workers slots), the rest stays zero; the records are the
    slots with an end, and the cursor counts every record a worker wrote or
    had no room for."""
    from event_tensor.runtime.trace import RECORD_WORDS, Trace

    capacity, workers = 6, 2
    words = [0] * (capacity * RECORD_WORDS)
    # (worker, task, tile, start, ready, end, step): worker 0 wrote two of its
    # three slots; worker 1 filled its three and dropped a fourth.
    written = {0: [(0, 0, 0, 100, 110, 120, 0), (0, 1, 0, 130, 140, 150, 1)],
               3: [(1, 0, 1, 105, 105, 125, 0), (1, 1, 1, 135, 145, 155, 1), (1, 0, 2, 160, 170, 180, 2)]}
    for base, records in written.items():
        for k, r in enumerate(records):
            words[(base + k) * RECORD_WORDS:(base + k + 1) * RECORD_WORDS] = r
    meta = {"kernel": "k", "workers": workers, "tasks": ["a", "b"]}
    with pytest.warns(RuntimeWarning, match="1 of 6 tile records did not fit in the workers' regions of 3 records"):
        trace = Trace.from_words(meta, words, 6, capacity, per_worker=True)
    assert len(trace.records) == 5 and trace.dropped == 1
    # Relative to the earliest start, in start order.
    assert trace.records[0] == (0, 0, 0, 0, 10, 20)
    assert [r[:3] for r in trace.records] == [(0, 0, 0), (1, 0, 1), (0, 1, 0), (1, 1, 1), (1, 0, 2)]
    assert trace.steps == [0, 0, 1, 1, 2]
    assert [t.step for t in trace.to_result().records] == [0, 0, 1, 1, 2]
    # Read as the host's layout (the first `count` slots), the empty slot
    # and worker 1's records past it would be misread.
    assert len(Trace.from_words(meta, words, 5, capacity).records) == 5
    assert Trace.from_words(meta, words, 5, capacity).records != trace.records


def test_cache_key_follows_the_compiler_build(tmp_path, monkeypatch):
    """A rebuilt compiler (another library fingerprint) never reuses an
    artifact the previous build cached for the same IR and options."""
    from event_tensor import build

    first = et.compile(CHAIN, target="cpu", cache_dir=tmp_path)
    assert et.compile(CHAIN, target="cpu", cache_dir=tmp_path).path == first.path
    assert build._compiler_fingerprint(), "the compiler library was not found"
    monkeypatch.setattr(build, "_compiler_fingerprint", lambda: "another build")
    assert et.compile(CHAIN, target="cpu", cache_dir=tmp_path).path != first.path


def test_host_artifact_records_the_instruction_set(tmp_path, monkeypatch):
    """A host artifact records the CPU's instruction-set extensions it was
    compiled with; a CPU without one of them refuses to load it (instead of
    dying of SIGILL), and the compile cache keeps one artifact per
    instruction set."""
    import shutil

    from event_tensor import build
    from event_tensor.runtime import cpu

    art = et.compile(CHAIN, target="cpu", workers=2, cache_dir=tmp_path / "cache")
    here = cpu.host_isa_flags()
    assert art.metadata["host_isa"] == here
    if here is None:
        pytest.skip("no /proc/cpuinfo: the instruction set is not known here")
    moved = tmp_path / "copied"
    shutil.copytree(art.path, moved)
    meta = json.loads((moved / "metadata.json").read_text())
    meta["host_isa"] = sorted(here + ["avx512_imaginary"])
    (moved / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(runtime.ArtifactError, match="compiled on a CPU with avx512_imaginary, which this CPU "
                                                    "lacks: compile the kernel on this machine"):
        runtime.load(moved).launcher()
    monkeypatch.setattr(build, "host_isa_flags", lambda: here + ["avx512_imaginary"])
    assert et.compile(CHAIN, target="cpu", workers=2, cache_dir=tmp_path / "cache").path != art.path


def test_extent_load_cycle_is_a_compile_error(tmp_path):
    # A task whose tile count is loaded after an event that the task itself
    # signals: the lowerings recursed until the stack overflowed (and the
    # Python process died); the kernel verifier names the cycle.
    cyclic = """
    et.kernel @cyc(%n: memref<1xi32>) {
      %ready = et.event.create() : !et.event<>
      %c0 = arith.constant 0 : index
      %m = et.extent.load %n[%c0] : memref<1xi32> after %ready[] : !et.event<>
      et.task @a tiles(%i) in (%m) {
        et.event.signal %ready[] : !et.event<>
      }
    }
    """
    for mode in ("static", "dynamic"):
        with pytest.raises(compiler.EventTensorCompileError, match="depends on this load's value: a cycle"):
            et.compile(cyclic, target="cpu", mode=mode, cache_dir=tmp_path)


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_runtime_tile_count_out_of_range_is_an_error(mode, tmp_path):
    # Tile extents given at run time are checked there as the verifier
    # checks constant ones: a negative count, or a product above 2^31 - 1
    # (2^62+1 x 4 wrapped and silently ran 4 tiles), is an error record
    # naming the task; no tile of it runs.
    kernel = """
    et.kernel @big(%a: index, %b: index, %out: memref<8xi64>) {
      et.task @t tiles(%i, %j) in (%a, %b) {
        %c0 = arith.constant 0 : index
        %one = arith.constant 1 : i64
        %old = memref.atomic_rmw addi %one, %out[%c0] : (i64, memref<8xi64>) -> i64
      }
    }
    """
    from event_tensor import runtime

    launch = et.compile(kernel, target="cpu", workers=2, mode=mode, cache_dir=tmp_path).launcher(timeout_s=20)
    out = np.zeros(8, np.int64)
    launch(3, 2, out)
    assert out[0] == 6
    for a, b in ((2**31, 1), (2**30, 2), (2**62 + 1, 4)):
        out[:] = 0
        with pytest.raises(runtime.KernelError, match=r"task @t \(computing its tile count\): .*above 2147483647") as info:
            launch(a, b, out)
        assert info.value.record["task"] == "t", (a, b)
        assert out[0] == 0, (a, b)
    launch(1, 5, out)
    assert out[0] == 5
    # An extent loaded on the device may be negative (a dynamic schedule:
    # a static one needs the load's bound).
    if mode == "static":
        return
    loaded = kernel.replace("%a: index", "%n: memref<1xi32>").replace(
        "et.task", "%k0 = arith.constant 0 : index\n      %a = et.extent.load %n[%k0] : memref<1xi32>\n      et.task", 1)
    launch = et.compile(loaded, target="cpu", workers=2, mode=mode, cache_dir=tmp_path).launcher(timeout_s=20)
    out[:] = 0
    launch(np.array([4], np.int32), 2, out)
    assert out[0] == 8
    with pytest.raises(runtime.KernelError, match=r"task @t \(computing its tile count\): .*negative tile count"):
        launch(np.array([-3], np.int32), 2, out)
