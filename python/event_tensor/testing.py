"""Test helpers shared by the pytest suite and the Python lit tests."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess

__all__ = ["STEPS_CASES", "STEPS_KERNEL", "cuda_available", "cuda_skip_reason", "logit_ops_kernel", "planted_deadlock",
           "top_logprobs_case", "top_logprobs_kernel",
           "ptxas_path", "reference_plan", "run", "steps_reference"]


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


#: A kernel with steps (`et.repeat`), for the CPU tests and the GPU suite:
#: every step, tile i of @add adds (step + 1) * (i + 1) to acc[i] after
#: reading it (what the step before wrote, possibly on another worker);
#: @finish sums acc into log[step] and raises the stop flag once the sum
#: reaches limit[0]. Thread 0 of a worker does the memory work.
STEPS_KERNEL = """
et.kernel @steps(%n: index, %stop: memref<1xi32>, %acc: memref<8xi64>, %log: memref<64xi64>,
                 %limit: memref<1xi64>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %added = et.event.create() : !et.event<>
  %done = et.event.create() : !et.event<>
  et.repeat %n until %stop after %done : memref<1xi32>, !et.event<>
  et.task @add tiles(%i) in (%c8) {
    %s = et.step
    %t = et.thread_id
    %first = arith.cmpi eq, %t, %c0 : index
    scf.if %first {
      %s1 = arith.addi %s, %c1 : index
      %i1 = arith.addi %i, %c1 : index
      %inc = arith.muli %s1, %i1 : index
      %inc64 = arith.index_cast %inc : index to i64
      %v = memref.load %acc[%i] : memref<8xi64>
      %w = arith.addi %v, %inc64 : i64
      memref.store %w, %acc[%i] : memref<8xi64>
    }
    et.event.signal %added[] : !et.event<>
  }
  et.task @finish tiles(%j) in (%c1) {
    et.event.wait %added[] : !et.event<>
    %s = et.step
    %t = et.thread_id
    %first = arith.cmpi eq, %t, %c0 : index
    scf.if %first {
      %zero = arith.constant 0 : i64
      %sum = scf.for %i = %c0 to %c8 step %c1 iter_args(%a = %zero) -> (i64) {
        %v = memref.load %acc[%i] : memref<8xi64>
        %u = arith.addi %a, %v : i64
        scf.yield %u : i64
      }
      memref.store %sum, %log[%s] : memref<64xi64>
      %lim = memref.load %limit[%c0] : memref<1xi64>
      %reached = arith.cmpi sge, %sum, %lim : i64
      scf.if %reached {
        %one = arith.constant 1 : i32
        memref.store %one, %stop[%c0] : memref<1xi32>
      }
    }
    et.event.signal %done[] : !et.event<>
  }
}
"""

def logit_ops_kernel(vocab: int, entries: int, slots: int, length: int) -> str:
    """A kernel of a row tile per token, as the decode kernel's filter tile
    orders them: the row's logit biases (`entries` a row; et.logit_bias),
    its penalties over its slot's history (`slots` x `length`;
    et.penalize), then its greedy token (et.argmax) over `vocab` logits.
    Arguments: x, ids, values, history, slots, lengths, outputs_from,
    repetition, frequency, presence, counts, the token's value and id, the
    number of rows."""
    x, h = f"memref<?x{vocab}xf32>", f"memref<{slots}x{length}xi32>"
    row = f"memref<1x{vocab}xf32, strided<[{vocab}, 1], offset: ?>>"
    return f"""
et.kernel @logit_ops(%x: {x}, %ids: memref<?x{entries}xi32>, %vals: memref<?x{entries}xf32>, %hist: {h},
                     %slots: memref<?xi32>, %lengths: memref<?xi32>, %from: memref<?xi32>, %r: memref<?xf32>,
                     %f: memref<?xf32>, %p: memref<?xf32>, %counts: memref<?x{vocab}xi32>, %v: memref<?x1xf32>,
                     %i: memref<?x1xi32>, %n: index) {{
  %c0 = arith.constant 0 : index
  %cv = arith.constant {vocab} : index
  et.task @row tiles(%m) in (%n) {{
    et.logit_bias %x token(%m) bias(%ids, %vals) : {x}, memref<?x{entries}xi32>, memref<?x{entries}xf32>
    %s32 = memref.load %slots[%m] : memref<?xi32>
    %s = arith.index_cast %s32 : i32 to index
    %l32 = memref.load %lengths[%m] : memref<?xi32>
    %l = arith.index_cast %l32 : i32 to index
    et.penalize %x token(%m) history(%hist, %s, %l) outputs_from(%from) repetition(%r) frequency(%f)
        presence(%p) counts(%counts)
        : {x}, {h}, memref<?xi32>, memref<?xf32>, memref<?xf32>, memref<?xf32>, memref<?x{vocab}xi32>
    %row = memref.subview %x[%m, 0] [1, {vocab}] [1, 1] : {x} to {row}
    %vr = memref.subview %v[%m, 0] [1, 1] [1, 1] : memref<?x1xf32> to memref<1x1xf32, strided<[1, 1], offset: ?>>
    %ir = memref.subview %i[%m, 0] [1, 1] [1, 1] : memref<?x1xi32> to memref<1x1xi32, strided<[1, 1], offset: ?>>
    et.argmax %row, %vr, %ir cols(%c0, %cv) slot(%c0)
        : {row}, memref<1x1xf32, strided<[1, 1], offset: ?>>, memref<1x1xi32, strided<[1, 1], offset: ?>>
  }}
}}
"""


def top_logprobs_kernel(vocab: int, entries: int, chunks: int = 0, per_chunk: int = 0) -> str:
    """A kernel of a row tile per token: its log-sum-exp and its most
    likely ids (up to `entries`) over `vocab` logits (et.top_logprobs),
    into row `rows[m]` of the lists. Arguments: x, counts, lse, ids,
    values (one list per row of `rows`), rows, the number of tokens. With
    `chunks`, a tile per chunk of the vocabulary first reduces every row's
    chunk to its `per_chunk` largest logits (et.top_candidates), which the
    row tiles read; the candidates' ids, values and stats and the rows'
    temperatures are then arguments after rows."""
    x, lists = f"memref<?x{vocab}xf32>", f"memref<?x{entries}x"
    if not chunks:
        return f"""
et.kernel @top_logprobs(%x: {x}, %count: memref<?xi32>, %lse: memref<?xf32>, %ids: {lists}i32>,
                        %vals: {lists}f32>, %rows: memref<?xi32>, %n: index) {{
  et.task @row tiles(%m) in (%n) {{
    %r32 = memref.load %rows[%m] : memref<?xi32>
    %r = arith.index_cast %r32 : i32 to index
    et.top_logprobs %x token(%m) count(%count) into(%lse, %ids, %vals) row(%r)
        : {x}, memref<?xi32>, memref<?xf32>, {lists}i32>, {lists}f32>
  }}
}}
"""
    cand, stats = f"memref<?x{chunks}x{per_chunk}x", f"memref<?x{chunks}x4xf32>"
    types = f"{cand}i32>, {cand}f32>, {stats}"
    return f"""
et.kernel @top_logprobs(%x: {x}, %count: memref<?xi32>, %lse: memref<?xf32>, %ids: {lists}i32>,
                        %vals: {lists}f32>, %rows: memref<?xi32>, %ci: {cand}i32>, %cv: {cand}f32>,
                        %cs: {stats}, %t: memref<?xf32>, %n: index) {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %chunks = arith.constant {chunks} : index
  %width = arith.constant {-(-vocab // chunks)} : index
  %reduced = et.event.create() : !et.event<>
  et.task @chunk tiles(%q) in (%chunks) {{
    %col0 = arith.muli %q, %width : index
    scf.for %m = %c0 to %n step %c1 {{
      et.top_candidates %x token(%m) cols(%col0, %width) temperature(%t) into(%ci, %cv, %cs) slot(%q)
          : {x}, memref<?xf32>, {types}
    }}
    et.event.signal %reduced[] : !et.event<>
  }}
  et.task @row tiles(%m) in (%n) {{
    et.event.wait %reduced[] : !et.event<>
    %r32 = memref.load %rows[%m] : memref<?xi32>
    %r = arith.index_cast %r32 : i32 to index
    et.top_logprobs %x token(%m) count(%count) into(%lse, %ids, %vals) row(%r) candidates(%ci, %cv, %cs : {types})
        : {x}, memref<?xi32>, memref<?xf32>, {lists}i32>, {lists}f32>
  }}
}}
"""


def top_logprobs_case(vocab: int, entries: int, rng):
    """Rows of logits and counts for et.top_logprobs: off (-1), the
    log-sum-exp alone (0), one id, several, all the list holds and more,
    ties across the n-th logit (the smallest ids win), -inf logits; each
    row writes into a list row of its own, out of order. (x, counts,
    rows, lists)."""
    import numpy as np

    counts = np.array([-1, 0, 1, 5, entries, entries + 7, 4, 3], np.int32)
    n = len(counts)
    x = rng.normal(size=(n, vocab)).astype(np.float32) * 3
    # Row 6: one logit above ten equal ones (at ids all over the row), of
    # which the list takes the three with the smallest ids.
    x[6] = np.minimum(x[6], 2.0)
    x[6, vocab // 2] = 5.0
    x[6, rng.choice(vocab, 10, replace=False)] = 4.0
    x[6, vocab // 2] = 5.0
    # Row 7: most of the row -inf, ties at the top.
    x[7, : vocab - 4] = -np.inf
    x[7, vocab - 4:] = [1.0, 1.0, -2.0, 1.0]
    rows = rng.permutation(n + 2)[:n].astype(np.int32)
    return x, counts, rows, n + 2


#: (step budget, limit) pairs that STEPS_KERNEL is run with: the budget
#: reached, the stop flag after a few steps, one step, none.
STEPS_CASES = [(10, 1 << 40), (40, 2000), (1, 0), (0, 0), (64, 1 << 40), (5, 36)]


def steps_reference(steps: int, limit: int):
    """What STEPS_KERNEL leaves for a step budget and limit: (acc, the logged
    sums of the steps that ran)."""
    import numpy as np

    acc, log = np.zeros(8, np.int64), []
    for s in range(steps):
        acc += (s + 1) * np.arange(1, 9)
        log.append(int(acc.sum()))
        if log[-1] >= limit:
            break
    return acc, log
