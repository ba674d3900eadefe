"""Runs a CUDA artifact through the driver API (cuda-bindings): loads the PTX
or cubin, keeps the kernel's counter/control/error buffers on the device,
and launches one CTA per worker."""

from __future__ import annotations

import ctypes
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .args import Buffer, flatten_arguments, flatten_device_arguments
from .artifact import Artifact
from .errors import ArtifactError, DeviceError
from . import abi
from .abi import CAPACITY, CONTROL_WORDS, ERROR_CLAIMED, ERROR_WORDS, RECORD_WORDS, TRACE_CURSOR
from .launch import POLL_S, check_timeout, decode_error, first_cause, locked, new_lock
from .trace import Trace

__all__ = ["CUDALauncher", "MultiDeviceCUDALauncher"]

_CTYPES = {"ptr": ctypes.c_void_p, "i64": ctypes.c_int64, "i32": ctypes.c_int32,
           "f32": ctypes.c_float, "f64": ctypes.c_double}
# A waiting CTA polls about once per (backoff + load latency).
POLL_OVERHEAD_NS = 200


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError:
        try:
            from cuda import cuda as driver  # older cuda-python layout
        except ImportError:
            raise DeviceError("the CUDA runtime needs cuda-bindings (pip install cuda-bindings)") from None
    return driver


def _check(result, what: str):
    err = result[0]
    if int(err) != 0:
        driver = _driver()
        _, name = driver.cuGetErrorName(err)
        raise DeviceError(f"{what} failed: {name.decode() if isinstance(name, bytes) else name}")
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


def signals_events(metadata: dict) -> bool:
    """Whether any of the kernel's events is signalled (an expected count
    other than a constant 0): such a kernel depends on the launch number
    packed at each launch, and its waits depend on other workers' tiles."""
    return any(str(e.get("count")) != "0" for e in metadata.get("events", []))


def residency_error(metadata: dict, signalled: bool, per_sm: int, sms: int) -> str | None:
    """Why the kernel cannot run on a GPU of `sms` SMs that holds `per_sm` of
    its workers each, or None. A worker's tiles wait on tiles of other
    workers; in a static schedule (or one the kernel keeps) the tiles are
    assigned to workers in advance, so every worker must be resident at
    once, or a wait may be for a worker that never starts. (A dynamic queue
    hands tiles only to running workers, in an order that puts every
    tile's producers first.) Several devices meet at a barrier at the end
    of each launch, which every worker must reach."""
    workers = int(metadata["workers"])
    devices = int(metadata.get("devices", 1))
    needs_all = (signalled and metadata.get("mode", "static") != "dynamic") or devices > 1
    if not needs_all or workers <= per_sm * sms:
        return None
    return (f"kernel {metadata['kernel']} has {workers} workers, but this GPU holds {per_sm * sms} of them at once "
            f"({per_sm} per SM x {sms} SMs at {metadata.get('threads_per_worker')} threads per worker with the "
            f"kernel's registers and shared memory); its tiles wait on other workers' tiles, so every worker must "
            f"be resident: compile it with workers <= {per_sm * sms}, or mode='dynamic'")


@dataclass(eq=False)
class MappedHost:
    """Host memory mapped into the device (`CUDALauncher.mapped_host`):
    `array` on the host, `buffer` for kernel arguments, `host` its host
    address."""

    array: np.ndarray
    buffer: Buffer
    host: int


class CUDALauncher:
    """Launches a CUDA artifact on `device`; `timeout_s` bounds every wait."""

    def __init__(self, artifact: Artifact, *, device: int = 0, timeout_s: float = 10.0,
                 trace_capacity: int = 1 << 16, threads: int | None = None, _part_of_group: bool = False):
        if artifact.target != "cuda":
            raise ArtifactError(f"{artifact.path}: a {artifact.target} artifact cannot run on the CUDA launcher")
        if int(artifact.metadata.get("devices", 1)) > 1 and not _part_of_group:
            raise ArtifactError(f"{artifact.path}: kernel {artifact.kernel} runs on "
                                f"{artifact.metadata['devices']} devices; use MultiDeviceCUDALauncher "
                                "(artifact.launcher() picks it)")
        abi.check(artifact.metadata, artifact.path)
        self.artifact = artifact
        self.metadata = artifact.metadata
        self.timeout_s = check_timeout(timeout_s)
        self._lock = new_lock()
        drv = self.driver = _driver()
        _check(drv.cuInit(0), "cuInit")
        dev = _check(drv.cuDeviceGet(device), "cuDeviceGet")
        self.context = _check(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        _check(drv.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
        image = artifact.binary_path.read_bytes()
        if artifact.binary_path.suffix == ".ptx":
            image += b"\0"
        self._image = ctypes.create_string_buffer(image, len(image))
        self.module = _check(drv.cuModuleLoadData(ctypes.addressof(self._image)), "cuModuleLoadData")
        self.function = _check(drv.cuModuleGetFunction(self.module, self.metadata["entry"].encode()),
                               "cuModuleGetFunction")
        self.workers = int(self.metadata["workers"])
        # Threads per worker (CTA size) are fixed when the artifact is compiled
        # (ptxas budgets registers for it).
        self.threads = int(self.metadata["threads_per_worker"])
        # Dynamic shared memory (weights or KV rows loaded before a wait,
        # the operand ring of GEMM tiles): the budget the artifact was
        # compiled with, or what the kernel states it needs in its global
        # (abi.DYNAMIC_SHARED_BYTES_GLOBAL), whichever is larger. Static and dynamic
        # shared memory above 48 KB in all need the function to opt in, so
        # any dynamic size is declared.
        self.dynamic_shared = max(int(self.metadata.get("dynamic_shared_bytes") or 0),
                                  self._module_word(abi.DYNAMIC_SHARED_BYTES_GLOBAL))
        if self.dynamic_shared > 0:
            _check(drv.cuFuncSetAttribute(
                self.function, drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                self.dynamic_shared), "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")
        if threads is not None and threads != self.threads:
            raise ValueError(f"{artifact.path}: compiled for {self.threads} threads per worker, got {threads}")
        self._buffers: dict[str, tuple[int, int]] = {}
        self._generation = 0
        self._side = None  # the stream of write_word
        self.profile = bool(self.metadata.get("profile"))
        self.last_trace: Trace | None = None
        self.signals_events = signals_events(self.metadata)
        per_sm = _check(drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(self.function, self.threads,
                                                                         self.dynamic_shared),
                        "cuOccupancyMaxActiveBlocksPerMultiprocessor")
        sms = _check(drv.cuDeviceGetAttribute(
            drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev), "cuDeviceGetAttribute")
        problem = residency_error(self.metadata, self.signals_events, int(per_sm), int(sms))
        if problem:
            drv.cuModuleUnload(self.module)
            raise ArtifactError(f"{artifact.path}: {problem}")
        if self.profile:
            self._alloc("trace", trace_capacity * RECORD_WORDS, 8)
        self._reset(int(self.metadata.get("counter_words") or 64))

    def _module_word(self, name: str) -> int:
        """The 32-bit global `name` of the loaded module, 0 if it has none."""
        result = self.driver.cuModuleGetGlobal(self.module, name.encode())
        if int(result[0]) != 0:
            return 0
        ptr, size = result[1], result[2]
        if int(size) != 4:
            raise ArtifactError(f"{self.artifact.path}: {name} has {int(size)} bytes, expected 4")
        host = ctypes.c_int32()
        _check(self.driver.cuMemcpyDtoH(ctypes.addressof(host), ptr, 4), "cuMemcpyDtoH")
        return host.value

    # -- device buffers --------------------------------------------------
    def _alloc(self, name: str, words: int, word_bytes: int) -> None:
        self._current()
        drv = self.driver
        if name in self._buffers:
            _check(drv.cuMemFree(self._buffers[name][0]), "cuMemFree")
        ptr = _check(drv.cuMemAlloc(words * word_bytes), "cuMemAlloc")
        _check(drv.cuMemsetD8(ptr, 0, words * word_bytes), "cuMemsetD8")
        self._buffers[name] = (int(ptr), words)

    def _reset(self, counter_words: int) -> None:
        # (The trace buffer is kept: each launch restarts its cursor.)
        self._generation += 1  # invalidates packed parameters (bind)
        self._alloc("counters", max(counter_words, 2), 4)
        self._alloc("control", CONTROL_WORDS, 4)
        self._alloc("error", ERROR_WORDS, 8)
        self.epoch = 0

    def _read(self, name: str, word_bytes: int, ctype) -> list[int]:
        self._current()
        ptr, words = self._buffers[name]
        host = (ctype * words)()
        _check(self.driver.cuMemcpyDtoH(ctypes.addressof(host), ptr, words * word_bytes), "cuMemcpyDtoH")
        return list(host)

    def _descriptor(self, name: str) -> list[tuple[str, int]]:
        ptr, words = self._buffers[name]
        return [("ptr", ptr), ("ptr", ptr), ("i64", 0), ("i64", words), ("i64", 1)]

    # -- launching -------------------------------------------------------
    def launch_async(self, *args: Any, timeout_s: float | None = None, stream: int = 0) -> None:
        """Enqueues one launch on `stream` without waiting or checking errors
        (for timing); `check()` synchronizes and raises a kernel error."""
        flat, _ = flatten_arguments(self.metadata, args, "cuda")
        self._enqueue(flat, timeout_s, stream)

    def _enqueue(self, flat, timeout_s, stream) -> None:
        self._launch_packed(self._pack(flat, timeout_s), stream)

    def _pack(self, flat, timeout_s):
        """The kernel's parameters as ctypes values and the pointer array the
        driver takes (kernelParams); the epoch (first value) is set per launch.
        `flat`: the parameters after the launcher's own buffers."""
        timeout = self.timeout_s if timeout_s is None else check_timeout(timeout_s)
        backoff = int(self.metadata["options"].get("backoff_ns", 64))
        spin_limit = max(1, int(timeout * 1e9 / (backoff + POLL_OVERHEAD_NS)))
        params = [("i64", 0), ("i64", spin_limit), *self._descriptor("counters"),
                  *self._descriptor("control"), *self._descriptor("error")]
        if self.profile:
            params += self._descriptor("trace")
        params += flat
        holders = [_CTYPES[t](v) for t, v in params]
        pointers = (ctypes.c_void_p * len(holders))(*[ctypes.addressof(h) for h in holders])
        return holders, pointers

    def _current(self) -> None:
        """Makes this launcher's context current (stream 0 and the module
        belong to it; another launcher, for another GPU, may have switched)."""
        _check(self.driver.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    def _launch_packed(self, packed, stream) -> None:
        self._current()
        if stream and self.signals_events:
            # A CUDA graph would replay the launch number it captured: every
            # replay would use the same counter bank, which no launch clears,
            # and waits would pass on the counts of earlier replays.
            status = _check(self.driver.cuStreamIsCapturing(stream), "cuStreamIsCapturing")
            if int(status) != 0:
                raise DeviceError(f"kernel {self.metadata['kernel']} signals events and cannot be captured into a "
                                  "CUDA graph: each launch passes its launch number, which picks the counter bank; "
                                  "launch it outside the capture")
        holders, pointers = packed
        self.epoch += 1
        holders[0].value = self.epoch
        if self.profile:
            # The trace cursor restarts at 0 for every launch, and the records
            # are cleared: each worker writes its own region of the buffer, and
            # a record is found by its nonzero end.
            cursor = self._buffers["control"][0] + 4 * TRACE_CURSOR
            _check(self.driver.cuMemsetD32Async(cursor, 0, 1, stream), "cuMemsetD32Async")
            trace, words = self._buffers["trace"]
            _check(self.driver.cuMemsetD32Async(trace, 0, 2 * words, stream), "cuMemsetD32Async")
        _check(self.driver.cuLaunchKernel(self.function, self.workers, 1, 1, self.threads, 1, 1, self.dynamic_shared, stream,
                                          ctypes.addressof(pointers), 0), "cuLaunchKernel")

    def bind(self, *args: Any, timeout_s: float | None = None, stream: int = 0):
        """Checks and packs `args` once; returns a function that enqueues a
        launch with them (no Python argument work per launch; `check()`
        reports errors). The tensors must stay alive while it is used."""
        flat, keep = flatten_arguments(self.metadata, args, "cuda")
        state = {"generation": None, "packed": None, "keep": keep}

        def launch() -> None:
            # Packed again only when the launcher's own buffers were replaced
            # (after an error or a counter-buffer resize).
            with self._lock:
                if state["generation"] != self._generation:
                    state["packed"] = self._pack(flat, timeout_s)
                    state["generation"] = self._generation
                self._launch_packed(state["packed"], stream)

        return launch

    @locked
    def check(self, stream: int = 0) -> None:
        """Waits for `stream` and raises the error the kernel recorded, if any."""
        self._current()
        _check(self.driver.cuStreamSynchronize(stream), "cuStreamSynchronize")
        control = self._read("control", 4, ctypes.c_int32)
        if not control[ERROR_CLAIMED]:
            return
        record = self._read("error", 8, ctypes.c_int64)
        if record[0] == CAPACITY:
            # No tile ran. A bound launch cannot be retried here (it was
            # enqueued with others); the buffer grows so that the next one runs.
            self._reset(record[6])
            raise _capacity_error(self.metadata, record)
        self._reset(self._buffers["counters"][1])
        raise decode_error(self.metadata, record)

    @locked
    def __call__(self, *args: Any, timeout_s: float | None = None, stream: int = 0,
                 poll: Callable[[], None] | None = None) -> None:
        """Launches and waits; `poll` (optional) is called from this thread
        about every POLL_S while the launch runs (to read mapped host
        memory the kernel writes, or to `write_word` into it)."""
        flat, keep = flatten_arguments(self.metadata, args, "cuda")
        for attempt in range(2):
            self._enqueue(flat, timeout_s, stream)
            self._current()
            if poll is not None:
                self._poll_while_running(stream, poll)
            _check(self.driver.cuStreamSynchronize(stream), "cuStreamSynchronize")
            control = self._read("control", 4, ctypes.c_int32)
            if not control[ERROR_CLAIMED]:
                if self.profile:
                    words = self._read("trace", 8, ctypes.c_int64)
                    self.last_trace = Trace.from_words(self.metadata, words, control[TRACE_CURSOR],
                                                       self._buffers["trace"][1] // RECORD_WORDS, per_worker=True)
                return
            record = self._read("error", 8, ctypes.c_int64)
            if record[0] == CAPACITY and attempt == 0:
                self._reset(record[6])
                continue
            self._reset(self._buffers["counters"][1])
            raise decode_error(self.metadata, record)
        del keep

    def _poll_while_running(self, stream: int, poll: Callable[[], None]) -> None:
        """Calls `poll` about every POLL_S until this device's `stream` has
        finished its work (see `__call__`)."""
        self._current()
        not_ready = self.driver.CUresult.CUDA_ERROR_NOT_READY
        while self.driver.cuStreamQuery(stream)[0] == not_ready:
            poll()
            time.sleep(POLL_S)

    def mapped_host(self, shape: Sequence[int], dtype: str = "int32") -> "MappedHost":
        """Page-locked host memory the kernel can read and write (mapped
        into the device's address space): a numpy view for the host, a
        `Buffer` for the kernel's arguments. A kernel's stores to it reach
        the host while the launch runs (see `__call__`'s `poll`). The
        memory is freed with the returned object: keep it while the view or
        the buffer is in use."""
        self._current()
        array = np.zeros(shape, np.dtype(dtype))
        nbytes = max(array.nbytes, 4)
        flags = self.driver.CU_MEMHOSTALLOC_DEVICEMAP | self.driver.CU_MEMHOSTALLOC_PORTABLE
        host = int(_check(self.driver.cuMemHostAlloc(nbytes, flags), "cuMemHostAlloc"))
        # With unified addressing (every 64-bit platform CUDA supports) the
        # device reaches the allocation at its host address.
        device = host
        view = np.frombuffer((ctypes.c_char * nbytes).from_address(host), dtype=array.dtype,
                             count=array.size).reshape(array.shape)
        view[...] = 0
        mapped = MappedHost(view, Buffer(device, tuple(array.shape), str(array.dtype), "cuda"), host)
        weakref.finalize(mapped, self.driver.cuMemFreeHost, host)
        return mapped

    def write_word(self, pointer: int, value: int) -> None:
        """Writes the 32-bit `value` to device address `pointer` with a copy
        on a stream of its own, which does not wait for a running launch
        (a kernel that polls the word sees it change)."""
        self._current()
        if self._side is None:
            self._side = _check(self.driver.cuStreamCreate(int(self.driver.CUstream_flags.CU_STREAM_NON_BLOCKING)),
                                "cuStreamCreate")
            self._word = self.mapped_host((1,), "int32")
        self._word.array[0] = value
        _check(self.driver.cuMemcpyHtoDAsync(pointer, self._word.host, 4, self._side), "cuMemcpyHtoDAsync")
        _check(self.driver.cuStreamSynchronize(self._side), "cuStreamSynchronize")

    def counters_descriptor(self) -> list[tuple[str, int]]:
        """The memref descriptor of this device's counter buffer."""
        return self._descriptor("counters")

    def close(self) -> None:
        self._current()
        for ptr, _ in self._buffers.values():
            self.driver.cuMemFree(ptr)
        if self._side is not None:
            self.driver.cuStreamDestroy(self._side)
            self._side = None
        self._buffers.clear()
        if getattr(self, "module", None) is not None:
            self.driver.cuModuleUnload(self.module)
            self.module = None


def _capacity_error(metadata: dict, record: list[int], device: int | None = None) -> Exception:
    """The error of a launch that found the counter buffer too small, after
    `check()` grew the buffer: the launch did nothing and the next one runs."""
    err = decode_error(metadata, record, device=device)
    err.args = (f"{err.args[0]}; the launch did nothing, and the buffer now holds {record[6]} words: "
                "launch again",) + err.args[1:]
    return err


class MultiDeviceCUDALauncher:
    """Launches a kernel compiled for N devices (metadata "devices") on N
    GPUs, one copy per GPU, with peer-to-peer access enabled between them.

    Each kernel argument is a list of N values, one per device (a scalar may
    be given once); every copy of a symmetric argument must have the same
    shape and strides. `devices` lists the CUDA device ordinals (default
    0 .. N-1). The copies are launched together and meet at the end of each
    launch, so a launch waits for all of them."""

    def __init__(self, artifact: Artifact, *, devices: list[int] | None = None, timeout_s: float = 10.0,
                 trace_capacity: int = 1 << 16, threads: int | None = None):
        n = int(artifact.metadata.get("devices", 1))
        ordinals = list(range(n)) if devices is None else list(devices)
        if len(ordinals) != n or len(set(ordinals)) != n:
            raise ValueError(f"{artifact.path}: kernel {artifact.kernel} runs on {n} devices; "
                             f"got device ordinals {ordinals}")
        self.artifact = artifact
        self.metadata = artifact.metadata
        self._lock = new_lock()
        self.ordinals = ordinals
        self.devices = n
        self.launchers = [CUDALauncher(artifact, device=o, timeout_s=timeout_s, trace_capacity=trace_capacity,
                                       threads=threads, _part_of_group=True) for o in ordinals]
        drv = self.driver = self.launchers[0].driver
        count = _check(drv.cuDeviceGetCount(), "cuDeviceGetCount")
        if max(ordinals) >= int(count):
            raise DeviceError(f"kernel {artifact.kernel} needs devices {ordinals}; this machine has {int(count)}")
        handles = [_check(drv.cuDeviceGet(o), "cuDeviceGet") for o in ordinals]
        for i, li in enumerate(self.launchers):
            li._current()
            for j, lj in enumerate(self.launchers):
                if i == j:
                    continue
                can = _check(drv.cuDeviceCanAccessPeer(handles[i], handles[j]), "cuDeviceCanAccessPeer")
                if not int(can):
                    raise DeviceError(f"device {ordinals[i]} cannot access the memory of device {ordinals[j]} "
                                      "(no peer-to-peer path)")
                err = drv.cuCtxEnablePeerAccess(lj.context, 0)[0]
                if int(err) not in (0, int(drv.CUresult.CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)):
                    _check((err,), "cuCtxEnablePeerAccess")
        self.last_traces: list[Trace] = []

    @property
    def last_trace(self) -> Trace | None:
        return self.last_traces[0] if self.last_traces else None

    def _params(self, per_device: list[list]) -> list[list]:
        """Each device's parameters after its own buffers: its number, every
        device's counters, then the flattened arguments."""
        counters = [p for l in self.launchers for p in l.counters_descriptor()]
        return [[("i64", d), *counters, *flat] for d, flat in enumerate(per_device)]

    def _reset_all(self, words: int | None = None) -> None:
        """New buffers on every device (`words` counters, else as many as
        now), so that the epochs stay in step."""
        words = words or max(l._buffers["counters"][1] for l in self.launchers)
        for l in self.launchers:
            l._reset(words)

    def _launch(self, packed: list, stream: int) -> None:
        # Counters are cleared for the next launch by the kernel itself; all
        # copies must run at once (they wait on each other), so every launch
        # is enqueued before any is waited on.
        for l, p in zip(self.launchers, packed):
            l._launch_packed(p, stream)

    def bind(self, *args: Any, timeout_s: float | None = None, stream: int = 0):
        """Checks and packs `args` once; returns a function that enqueues a
        launch on every device (`check()` reports errors)."""
        per_device, keep = flatten_device_arguments(self.metadata, args, "cuda")
        state = {"generation": None, "packed": None, "keep": keep}

        def launch() -> None:
            with self._lock:
                generation = tuple(l._generation for l in self.launchers)
                if state["generation"] != generation:
                    state["packed"] = [l._pack(p, timeout_s)
                                       for l, p in zip(self.launchers, self._params(per_device))]
                    state["generation"] = generation
                self._launch(state["packed"], stream)

        return launch

    def synchronize(self, stream: int = 0) -> None:
        for l in self.launchers:
            l._current()
            _check(self.driver.cuStreamSynchronize(stream), "cuStreamSynchronize")

    def _errors(self) -> dict[int, list[int]]:
        records = {}
        for d, l in enumerate(self.launchers):
            if l._read("control", 4, ctypes.c_int32)[ERROR_CLAIMED]:
                records[d] = l._read("error", 8, ctypes.c_int64)
        return records

    @locked
    def check(self, stream: int = 0) -> None:
        """Waits for every device and raises the error a copy recorded."""
        self.synchronize(stream)
        records = self._errors()
        if records:
            d = first_cause(records, self.metadata)
            if all(r[0] == CAPACITY for r in records.values()):
                self._reset_all(max(r[6] for r in records.values()))
                raise _capacity_error(self.metadata, records[d], device=d)
            self._reset_all()
            raise decode_error(self.metadata, records[d], device=d)

    @locked
    def __call__(self, *args: Any, timeout_s: float | None = None, stream: int = 0,
                 poll: Callable[[], None] | None = None) -> None:
        """Launches on every device and waits; `poll` as in
        `CUDALauncher.__call__` (called while device 0's launch runs)."""
        per_device, keep = flatten_device_arguments(self.metadata, args, "cuda")
        for attempt in range(2):
            packed = [l._pack(p, timeout_s) for l, p in zip(self.launchers, self._params(per_device))]
            self._launch(packed, stream)
            if poll is not None:
                self.launchers[0]._poll_while_running(stream, poll)
            self.synchronize(stream)
            records = self._errors()
            if not records:
                if self.launchers[0].profile:
                    self.last_traces = []
                    for l in self.launchers:
                        control = l._read("control", 4, ctypes.c_int32)
                        words = l._read("trace", 8, ctypes.c_int64)
                        self.last_traces.append(Trace.from_words(self.metadata, words, control[TRACE_CURSOR],
                                                                 l._buffers["trace"][1] // RECORD_WORDS,
                                                                 per_worker=True))
                return
            if all(r[0] == CAPACITY for r in records.values()) and attempt == 0:
                self._reset_all(max(r[6] for r in records.values()))
                continue
            self._reset_all()
            d = first_cause(records, self.metadata)
            raise decode_error(self.metadata, records[d], device=d)
        del keep

    def mapped_host(self, shape: Sequence[int], dtype: str = "int32") -> "MappedHost":
        """`CUDALauncher.mapped_host` of device 0 (portable: every device's
        copy could reach it, though a kernel's arguments pass it to device
        0 only)."""
        return self.launchers[0].mapped_host(shape, dtype)

    def write_word(self, pointer: int, value: int) -> None:
        """`CUDALauncher.write_word` on device 0 (`pointer` in its memory)."""
        self.launchers[0].write_word(pointer, value)

    def close(self) -> None:
        for l in self.launchers:
            l.close()
