"""What the CPU and CUDA launchers share: the state buffers of a kernel
(event counters in two banks, control words, the error record), the epoch
protocol, and decoding of error records."""

from __future__ import annotations

import functools
import threading
from typing import Any

from .abi import BAD_ENTRY, CAPACITY, ERROR_WORDS, OUT_OF_BOUNDS, TILE_COUNT, TIMEOUT
from .errors import KernelError, WatchdogError

__all__ = ["check_timeout", "decode_error", "first_cause", "locked", "new_lock", "MAX_TIMEOUT_S", "POLL_S"]


def new_lock() -> threading.RLock:
    """A launcher's lock: one launch at a time through it. Its state (the
    launch number that picks the counter bank, the counters, the error
    record) is shared by every call, so two threads launching at once
    through one launcher would mix their launches' counters."""
    return threading.RLock()


def locked(method):
    """`method` of a launcher, holding the launcher's lock (`_lock`)."""
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)
    return run


#: The longest watchdog timeout a launch takes (a day): the kernels count
#: polls in 64-bit words, and far longer bounds mean no watchdog at all.
MAX_TIMEOUT_S = 86400.0

#: Seconds between two calls of a launcher's `poll` while a launch runs.
POLL_S = 1e-4


def check_timeout(timeout_s: Any) -> float:
    """`timeout_s` as a float, or a ValueError naming it unless it is a
    finite number in (0, MAX_TIMEOUT_S]."""
    import math

    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not math.isfinite(timeout_s) \
            or not 0 < timeout_s <= MAX_TIMEOUT_S:
        raise ValueError(f"timeout_s must be a finite number of seconds in (0, {MAX_TIMEOUT_S:g}], got {timeout_s!r}")
    return float(timeout_s)


def _name(names: list[str], index: int, what: str) -> str:
    if 0 <= index < len(names):
        return names[index]
    return f"{what} #{index}"


def decode_error(metadata: dict[str, Any], record: list[int], device: int | None = None) -> KernelError:
    """The exception for an error record written by the kernel (on
    `device`, for a kernel on several devices)."""
    kind, worker, task, tile, event, element, expected, observed, step = record[:ERROR_WORDS]
    tasks = metadata.get("tasks", [])
    events = metadata.get("events", [])
    event_names = [e["name"] for e in events]
    if int(metadata.get("devices", 1)) > 1:
        # The counter after the events': where the devices meet at the end.
        event_names.append("the barrier across devices")
    info = {
        "kind": kind, "worker": worker,
        "task": _name(tasks, task, "task") if task >= 0 else None,
        "tile": tile if tile >= 0 else None,
        "event": _name(event_names, event, "event") if event >= 0 else None,
        "element": element if element >= 0 else None,
        "expected": expected, "observed": observed, "step": step,
    }
    where = f"worker {worker}"
    if metadata.get("steps"):
        # A kernel that runs several steps per launch (et.repeat).
        where = f"step {step}, {where}"
    if device is not None:
        info["device"] = device
        where = f"device {device}, {where}"
    if task >= 0:
        where += f", task @{info['task']}"
        where += f" tile {tile}" if tile >= 0 else " (computing its tile count)"
    if kind == TIMEOUT and int(metadata.get("devices", 1)) > 1 and event == len(events):
        return WatchdogError(
            f"kernel {metadata['kernel']}: watchdog timeout: {where} waited at the end of the launch for the "
            f"workers of the other devices; {observed} of {expected} arrived (a device stopped on an error, or "
            "was not launched); the kernel was stopped",
            info,
        )
    if kind == TIMEOUT:
        return WatchdogError(
            f"kernel {metadata['kernel']}: watchdog timeout: {where} waited on {info['event']}"
            f"[{element}] (linear element), which received {observed} of {expected} expected signals; "
            "the kernel was stopped",
            info,
        )
    if kind == OUT_OF_BOUNDS:
        return KernelError(
            f"kernel {metadata['kernel']}: {where} accessed {info['event']} at linear element {element}, "
            "which is out of bounds",
            info,
        )
    if kind == BAD_ENTRY:
        return KernelError(f"kernel {metadata['kernel']}: {where} read an invalid schedule entry", info)
    if kind == TILE_COUNT:
        return KernelError(
            f"kernel {metadata['kernel']}: {where}: the tile extents given at run time (kernel arguments or "
            f"extent loads) make a negative tile count or one above {expected} (2^31 - 1); no tile of the task ran",
            info,
        )
    if kind == CAPACITY:
        return KernelError(
            f"kernel {metadata['kernel']}: the counter buffer holds {observed} words, {expected} are needed",
            info,
        )
    return KernelError(f"kernel {metadata['kernel']}: unknown error record {record}", info)


def first_cause(records: dict[int, list[int]], metadata: dict[str, Any]) -> int:
    """Of the error records of several devices, the device whose error to
    report: the lowest device with an error other than a watchdog timeout,
    else with a timeout on an event, else (every device timed out at the
    barrier at the end of the launch) the lowest. A timeout is often the
    consequence of an error on another device, and a barrier timeout the
    consequence of a device stuck before it."""
    barrier = len(metadata.get("events", []))

    def rank(d: int) -> tuple[int, int]:
        kind, event = records[d][0], records[d][4]
        if kind != TIMEOUT:
            return (0, d)
        return (2 if event == barrier else 1, d)

    return min(records, key=rank)
