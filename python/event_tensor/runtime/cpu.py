"""Runs a host artifact: one thread per worker, each calling the worker
function of the shared object (ctypes releases the GIL during the call)."""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import numpy as np

from .args import flatten_arguments
from .artifact import Artifact
from .errors import ArtifactError
from .launch import CAPACITY, CONTROL_WORDS, ERROR_CLAIMED, ERROR_WORDS, TRACE_CURSOR, decode_error
from .trace import RECORD_WORDS, Trace

__all__ = ["CPULauncher"]

_CTYPES = {"ptr": ctypes.c_void_p, "i64": ctypes.c_int64, "i32": ctypes.c_int32,
           "f32": ctypes.c_float, "f64": ctypes.c_double}
# A waiting host worker yields its thread between polls: roughly this many
# polls per second.
POLLS_PER_SECOND = 1_000_000


def _descriptor(array: np.ndarray) -> list[tuple[str, int]]:
    ptr = array.ctypes.data
    return [("ptr", ptr), ("ptr", ptr), ("i64", 0), ("i64", array.shape[0]), ("i64", 1)]


class CPULauncher:
    """Launches a host artifact; `timeout_s` bounds every wait (watchdog)."""

    def __init__(self, artifact: Artifact, *, timeout_s: float = 10.0, trace_capacity: int = 1 << 16):
        if artifact.target != "cpu":
            raise ArtifactError(f"{artifact.path}: a {artifact.target} artifact cannot run on the CPU launcher")
        self.artifact = artifact
        self.metadata = artifact.metadata
        self.timeout_s = timeout_s
        try:
            self._lib = ctypes.CDLL(str(artifact.binary_path))
            self._fn = getattr(self._lib, self.metadata["entry"])
        except (OSError, AttributeError) as err:
            raise ArtifactError(f"{artifact.path}: cannot load the worker function: {err}") from None
        self._fn.restype = None
        self.workers = int(self.metadata["workers"])
        self.profile = bool(self.metadata.get("profile"))
        self.trace_buffer = np.zeros(trace_capacity * RECORD_WORDS if self.profile else 1, np.int64)
        self.last_trace: Trace | None = None
        self._reset(int(self.metadata.get("counter_words") or 64))

    def _reset(self, counter_words: int) -> None:
        self.counters = np.zeros(max(counter_words, 2), np.int32)
        self.control = np.zeros(CONTROL_WORDS, np.int32)
        self.error = np.zeros(ERROR_WORDS, np.int64)
        self.epoch = 0

    def __call__(self, *args: Any, timeout_s: float | None = None) -> None:
        flat, keep = flatten_arguments(self.metadata, args, "cpu")
        timeout = self.timeout_s if timeout_s is None else timeout_s
        spin_limit = max(1, int(timeout * POLLS_PER_SECOND))
        for attempt in range(2):
            self.epoch += 1
            self.control[TRACE_CURSOR] = 0
            params = [("i64", self.epoch), ("i64", spin_limit), *_descriptor(self.counters),
                      *_descriptor(self.control), *_descriptor(self.error)]
            if self.profile:
                params += _descriptor(self.trace_buffer)
            params += flat
            self._fn.argtypes = [ctypes.c_int64] + [_CTYPES[t] for t, _ in params]
            values = [v for _, v in params]
            threads = [threading.Thread(target=self._fn, args=(w, *values)) for w in range(self.workers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if not self.control[ERROR_CLAIMED]:
                if self.profile:
                    self.last_trace = Trace.from_words(
                        self.metadata, self.trace_buffer.tolist(), int(self.control[TRACE_CURSOR]),
                        self.trace_buffer.shape[0] // RECORD_WORDS)
                return
            record = [int(x) for x in self.error]
            if record[0] == CAPACITY and attempt == 0:
                # The first launch found the counter buffer too small (no tile
                # ran): grow it and launch again.
                self._reset(record[6])
                continue
            self._reset(self.counters.shape[0])
            raise decode_error(self.metadata, record)
        del keep
