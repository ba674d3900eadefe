"""The contract between the worker code and this runtime, as the runtime
expects it: the control words, the error record and its kinds, the trace
record, the layout of the counter buffer, the worker function's parameters
and the names the runtime looks up in the binary.

The compiler declares the contract once (the C++ header
EventTensor/Conversion/RuntimeABI.h) and writes it into each artifact's
metadata (`abi`). The runtime imports no MLIR, so it keeps this copy and
checks the artifact's against it (`check`): an artifact whose contract
differs is refused with an `ArtifactError` naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .errors import ArtifactError

__all__ = ["VERSION", "check", "expected", "parameters"]

VERSION = 3

# Control buffer (i32 words).
CONTROL_WORDS = 12
TICKET0 = 8  # the 64-bit ticket counter of bank 0 at this i32 word (bank 1's follows)
ABORT = 2
ERROR_CLAIMED = 3
TRACE_CURSOR = 4

# Error record (i64 words).
ERROR_WORDS = 9
ERROR_FIELDS = ("kind", "worker", "task", "tile", "event", "element", "expected", "observed", "step")
# Error kinds (the record's first word).
TIMEOUT, CAPACITY, OUT_OF_BOUNDS, BAD_ENTRY, TILE_COUNT = 1, 2, 3, 4, 5

# Trace record (i64 words).
RECORD_WORDS = 7
RECORD_FIELDS = ("worker", "task", "tile", "start", "ready", "end", "step")
RECORD_START, RECORD_END = RECORD_FIELDS.index("start"), RECORD_FIELDS.index("end")

# Counter buffer (i32 words): two banks; on several devices each bank ends
# with the counter where the devices meet, and the abort word follows both.
COUNTER_BANKS = 2
DEVICE_BARRIER_WORDS = 1
DEVICE_ABORT_WORDS = 1

# The host worker function is <kernel>_worker; the GPU kernel is <kernel>.
HOST_WORKER_SUFFIX = "_worker"
# The GPU kernel's global stating the dynamic shared memory it needs.
DYNAMIC_SHARED_BYTES_GLOBAL = "__et_dynamic_shared_bytes"


def parameters(target: str, profile: bool, devices: int) -> list[str]:
    """The groups of the worker function's parameters, in the order in which
    the launchers pass them."""
    params = ["worker"] if target == "cpu" else []
    params += ["epoch", "spin_limit", "counters", "control", "error"]
    if profile:
        params.append("trace")
    if devices > 1:
        params += ["device", "peer_counters", "peer_arguments"]
    return params + ["arguments"]


def expected(target: str, profile: bool, devices: int) -> dict[str, Any]:
    """The metadata's `abi` object this runtime expects of an artifact."""
    return {
        "version": VERSION,
        "control": {"words": CONTROL_WORDS, "ticket0": TICKET0, "abort": ABORT,
                    "error_claimed": ERROR_CLAIMED, "trace_cursor": TRACE_CURSOR},
        "error": {"words": ERROR_WORDS, "fields": list(ERROR_FIELDS),
                  "kinds": {"timeout": TIMEOUT, "counter_capacity": CAPACITY,
                            "index_out_of_bounds": OUT_OF_BOUNDS, "bad_schedule_entry": BAD_ENTRY,
                            "tile_count": TILE_COUNT}},
        "trace": {"record_words": RECORD_WORDS, "fields": list(RECORD_FIELDS)},
        "counters": {"banks": COUNTER_BANKS, "device_barrier_words": DEVICE_BARRIER_WORDS,
                     "device_abort_words": DEVICE_ABORT_WORDS},
        "parameters": parameters(target, profile, devices),
        "entry_suffix": HOST_WORKER_SUFFIX if target == "cpu" else "",
        "globals": {"dynamic_shared_bytes": DYNAMIC_SHARED_BYTES_GLOBAL},
    }


def _mismatch(want: Any, got: Any, where: str) -> str | None:
    """The first field under `where` where `got` differs from `want`."""
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return f"{where}: expected an object, the artifact has {got!r}"
        for key, value in want.items():
            if key not in got:
                return f"{where}.{key}: missing in the artifact (this runtime expects {value!r})"
            problem = _mismatch(value, got[key], f"{where}.{key}")
            if problem:
                return problem
        extra = sorted(set(got) - set(want))
        if extra:
            return f"{where}.{extra[0]}: not known to this runtime"
        return None
    if got != want:
        return f"{where}: the artifact has {got!r}, this runtime expects {want!r}"
    return None


def check(metadata: dict[str, Any], path: Path) -> None:
    """Raises an `ArtifactError` naming the first field where the artifact's
    `abi` differs from what this runtime expects."""
    got = metadata.get("abi")
    if got is None:
        raise ArtifactError(f"{path}: the metadata has no 'abi' (built by a compiler before the runtime ABI "
                            "was recorded); recompile it")
    want = expected(metadata["target"], bool(metadata.get("profile")), int(metadata.get("devices", 1)))
    if isinstance(got, dict) and got.get("version") != want["version"]:
        raise ArtifactError(f"{path}: runtime ABI version {got.get('version')!r} is not supported "
                            f"(this runtime expects {want['version']}); recompile it")
    problem = _mismatch(want, got, "abi")
    if problem:
        raise ArtifactError(f"{path}: the artifact's runtime ABI differs from this runtime's: {problem}; "
                            "recompile it with this version of event_tensor")
