"""Test helpers shared by the pytest suite and the Python lit tests."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess

__all__ = ["cuda_available", "cuda_skip_reason", "planted_deadlock", "ptxas_path", "reference_plan", "run"]


@functools.lru_cache(maxsize=None)
def cuda_skip_reason() -> str | None:
    """None when a CUDA GPU is usable here, else why GPU tests are skipped."""
    if os.environ.get("ET_DISABLE_CUDA"):
        return "ET_DISABLE_CUDA is set"
    if shutil.which("nvidia-smi") is None:
        return "no CUDA GPU on this machine (nvidia-smi not found)"
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"nvidia-smi failed: {err}"
    if out.returncode != 0 or "GPU" not in out.stdout:
        return "no CUDA GPU listed by nvidia-smi"
    return None


def ptxas_path() -> str | None:
    """ptxas on PATH, under $CUDA_HOME/bin, or under /usr/local/cuda/bin."""
    found = shutil.which("ptxas")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if root and os.path.exists(os.path.join(root, "bin", "ptxas")):
            return os.path.join(root, "bin", "ptxas")
    return None


def cuda_available() -> bool:
    return cuda_skip_reason() is None


def run(f):
    """Decorator for Python lit tests: prints a label and runs `f` in a fresh
    Context with an unknown Location."""
    from .ir import Context, Location

    print(f"\nTEST: {f.__name__}")
    with Context(), Location.unknown():
        f()
    return f


def reference_plan(text: str, bindings: dict) -> dict:
    """The schedule plan of the kernel in `text` for `bindings`, scheduled on
    one worker: its `deps`, `accesses` and `events` describe the original
    graph, as `event_tensor.dag.reference` and the dependency checks use it."""
    from . import analysis, compiler
    from .ir import Context

    with Context():
        module = compiler.parse(text)
        compiler.run_pipeline(module, "builtin.module(et.kernel(et-dynamic-schedule{workers=1}))")
        return analysis.schedule_plan(module, bindings)


def planted_deadlock(workers: int) -> str:
    """A kernel whose static schedule deadlocks: every worker runs the
    consumer (waiting on all producer tiles) before the producer. The
    verifier rejects it; compiled with verify=False it tests the watchdog.
    Its one argument is the tile count of both tasks."""
    entries = "".join(
        f"    et.worker {w} {{\n      et.run @consumer cyclic 0\n      et.run @producer cyclic 0\n    }}\n"
        for w in range(workers))
    return f"""
et.kernel @deadlock(%n: index) {{
  %e = et.event.create() : !et.event<>
  et.task @producer tiles(%i) in (%n) {{
    et.event.signal %e[] : !et.event<>
  }}
  et.task @consumer tiles(%i) in (%n) {{
    et.event.wait %e[] : !et.event<>
  }}
  et.schedule static workers({workers}) {{
{entries}  }}
}}
"""
