"""Runs a host artifact: one thread per worker, each calling the worker
function of the shared object (ctypes releases the GIL during the call)."""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import numpy as np

from .args import flatten_arguments, flatten_device_arguments
from .artifact import Artifact
from .errors import ArtifactError
from . import abi
from .abi import CAPACITY, CONTROL_WORDS, ERROR_CLAIMED, ERROR_WORDS, RECORD_START, RECORD_WORDS, TRACE_CURSOR
from .launch import POLL_S, check_timeout, decode_error, first_cause, locked, new_lock
from .trace import Trace

__all__ = ["CPULauncher", "host_isa_flags"]

# The instruction-set extensions of /proc/cpuinfo's flags that compiled code
# may use (the host compiler targets the CPU it runs on).
_ISA_PREFIXES = ("sse", "ssse", "avx", "fma", "f16c", "bmi", "amx", "popcnt", "lzcnt", "abm", "movbe", "sha",
                 "aes", "pclmul", "vaes", "vpclmul", "gfni", "adx", "rdrand", "rdseed")


def host_isa_flags() -> list[str] | None:
    """The instruction-set extensions this CPU has, sorted (from
    /proc/cpuinfo), or None where that is not known (not Linux)."""
    try:
        text = open("/proc/cpuinfo", encoding="ascii", errors="replace").read()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return sorted(f for f in value.split() if f.startswith(_ISA_PREFIXES))
    return None

_CTYPES = {"ptr": ctypes.c_void_p, "i64": ctypes.c_int64, "i32": ctypes.c_int32,
           "f32": ctypes.c_float, "f64": ctypes.c_double}
# A waiting host worker yields its thread between polls and measures its
# wait on the monotonic clock: the spin limit is the timeout in nanoseconds.
NS_PER_SECOND = 1_000_000_000


def _descriptor(array: np.ndarray) -> list[tuple[str, int]]:
    ptr = array.ctypes.data
    return [("ptr", ptr), ("ptr", ptr), ("i64", 0), ("i64", array.shape[0]), ("i64", 1)]


class CPULauncher:
    """Launches a host artifact; `timeout_s` bounds every wait (watchdog).

    A kernel compiled for N devices (metadata "devices") runs as N groups of
    worker threads over separate buffers, one group per simulated device;
    each argument is then a list of N values (see
    `args.flatten_device_arguments`)."""

    def __init__(self, artifact: Artifact, *, timeout_s: float = 10.0, trace_capacity: int = 1 << 16):
        if artifact.target != "cpu":
            raise ArtifactError(f"{artifact.path}: a {artifact.target} artifact cannot run on the CPU launcher")
        abi.check(artifact.metadata, artifact.path)
        self.artifact = artifact
        self.metadata = artifact.metadata
        self.timeout_s = check_timeout(timeout_s)
        self._lock = new_lock()
        # Code compiled for extensions this CPU lacks would die of SIGILL.
        built, here = self.metadata.get("host_isa"), host_isa_flags()
        if built is not None and here is not None and set(built) - set(here):
            missing = sorted(set(built) - set(here))
            raise ArtifactError(f"{artifact.path}: compiled on a CPU with {', '.join(missing[:6])}"
                                f"{' and more' if len(missing) > 6 else ''}, which this CPU lacks: compile the "
                                "kernel on this machine (or one with the same instruction set)")
        try:
            self._lib = ctypes.CDLL(str(artifact.binary_path))
            self._fn = getattr(self._lib, self.metadata["entry"])
        except (OSError, AttributeError) as err:
            raise ArtifactError(f"{artifact.path}: cannot load the worker function: {err}") from None
        self._fn.restype = None
        self.workers = int(self.metadata["workers"])
        self.devices = int(self.metadata.get("devices", 1))
        self.profile = bool(self.metadata.get("profile"))
        self._traces = [np.zeros(trace_capacity * RECORD_WORDS if self.profile else 1, np.int64)
                        for _ in range(self.devices)]
        self.trace_buffer = self._traces[0]
        self.last_trace: Trace | None = None
        # Several devices: the trace of each (last_trace is device 0's).
        self.last_traces: list[Trace] = []
        self._reset(int(self.metadata.get("counter_words") or 64))

    def _reset(self, counter_words: int) -> None:
        n = self.devices
        self._counters = [np.zeros(max(counter_words, 2), np.int32) for _ in range(n)]
        self._control = [np.zeros(CONTROL_WORDS, np.int32) for _ in range(n)]
        self._error = [np.zeros(ERROR_WORDS, np.int64) for _ in range(n)]
        self.epoch = 0

    @property
    def counters(self) -> np.ndarray:
        return self._counters[0]

    @property
    def control(self) -> np.ndarray:
        return self._control[0]

    @property
    def error(self) -> np.ndarray:
        return self._error[0]

    @locked
    def __call__(self, *args: Any, timeout_s: float | None = None, poll=None) -> None:
        """Launches and waits; `poll` (optional) is called from this thread
        once as the launch starts, then about every POLL_S while the workers
        run."""
        if self.devices == 1:
            flat, keep = flatten_arguments(self.metadata, args, "cpu")
            per_device = [flat]
        else:
            per_device, keep = flatten_device_arguments(self.metadata, args, "cpu")
        timeout = self.timeout_s if timeout_s is None else check_timeout(timeout_s)
        spin_limit = max(1, int(timeout * NS_PER_SECOND))
        for attempt in range(2):
            self.epoch += 1
            threads = []
            for d, flat in enumerate(per_device):
                self._control[d][TRACE_CURSOR] = 0
                params = [("i64", self.epoch), ("i64", spin_limit), *_descriptor(self._counters[d]),
                          *_descriptor(self._control[d]), *_descriptor(self._error[d])]
                if self.profile:
                    params += _descriptor(self._traces[d])
                if self.devices > 1:
                    # This device, then every device's counters.
                    params.append(("i64", d))
                    for counters in self._counters:
                        params += _descriptor(counters)
                params += flat
                self._fn.argtypes = [ctypes.c_int64] + [_CTYPES[t] for t, _ in params]
                values = [v for _, v in params]
                threads += [threading.Thread(target=self._fn, args=(w, *values)) for w in range(self.workers)]
            if poll is not None:
                # Once before the workers start: on a machine with fewer
                # cores than workers, they may run to the end before this
                # thread runs again.
                poll()
            for t in threads:
                t.start()
            for t in threads:
                while poll is not None and t.is_alive():
                    poll()
                    t.join(POLL_S)
                t.join()
            failed = [d for d in range(self.devices) if self._control[d][ERROR_CLAIMED]]
            if not failed:
                if self.profile:
                    # One host clock: every device's times from the same origin.
                    starts = [int(buf[RECORD_START + RECORD_WORDS * i]) for buf, control in zip(self._traces, self._control)
                              for i in range(min(int(control[TRACE_CURSOR]), buf.shape[0] // RECORD_WORDS))]
                    self.last_traces = [
                        Trace.from_words(self.metadata, buf.tolist(), int(control[TRACE_CURSOR]),
                                         buf.shape[0] // RECORD_WORDS, origin=min(starts, default=0))
                        for buf, control in zip(self._traces, self._control)]
                    self.last_trace = self.last_traces[0]
                return
            records = {d: [int(x) for x in self._error[d]] for d in failed}
            if all(r[0] == CAPACITY for r in records.values()) and attempt == 0:
                # The first launch found the counter buffer too small (no tile
                # ran): grow it and launch again.
                self._reset(max(r[6] for r in records.values()))
                continue
            self._reset(self._counters[0].shape[0])
            d = first_cause(records, self.metadata)
            raise decode_error(self.metadata, records[d], device=d if self.devices > 1 else None)
        del keep

