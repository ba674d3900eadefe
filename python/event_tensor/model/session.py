"""Runs a compiled decode-step megakernel: weights, KV caches and scratch
buffers, batch and context checks, greedy generation, timing. Needs only
the runtime (no MLIR), so it runs where the artifact was copied to."""

from __future__ import annotations

import json
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np

from .. import runtime
from ..runtime.kv_pages import PAGE_BYTES, DevicePages, HostPages, KVPages, memory_info, pool_bytes
from .config import ModelConfig
from .layout import (FINISH_CONTEXT, FINISH_LENGTH, FINISH_NONFINITE, FINISH_REASONS, FINISH_STOP,
                     MAX_LOGIT_BIAS, MAX_STOP_IDS, MAX_TOP_LOGPROBS)
from .options import KernelOptions
from .weights import BF16, MOE_PACKED, PACKED_ORDER, pack, tp_shards

__all__ = ["DecodeSession", "Generation", "GenerationStream", "Logprob", "ModelArtifactError", "NonFiniteLogitsError", "MODEL_JSON", "PREFILL_DIR", "VARIANTS_JSON"]

MODEL_JSON = "model.json"
PREFILL_DIR = "prefill"  # the prefill kernel's subdirectory (compile_model(prefill_rows=...))
# Kernel arguments that are weights (Qwen3 adds the per-head q/k norms).
_WEIGHTS = {*PACKED_ORDER, *MOE_PACKED, "q_norm", "k_norm"}
VARIANTS_JSON = "variants.json"
# The decode kernel's index arguments: the rows of a launch, its step budget.
_SCALARS = ("batch", "steps")
# Buffers the host reads while a launch runs: on a GPU, in host memory
# mapped into the device (the token history and its log-probabilities,
# streamed out per step).
_HOST_VISIBLE = ("out_tokens", "out_logprobs", "out_top_ids", "out_top_logprobs")
# The values of the per-row sampling buffers with which a row's token is
# the greedy one and nothing else is computed (what step() and the prefill
# run with).
_GREEDY_ROWS = {"temperature": 0.0, "repetition_penalty": 1.0, "frequency_penalty": 0.0, "presence_penalty": 0.0,
                "logit_bias_values": 0.0, "logprobs": -1, "forced_to": 0}
# Row buffers whose "off" is not zero: filled with it when allocated.
_OFF_ROWS = {"logprobs": -1}


def _greedy_rows(rows: dict) -> dict:
    """The greedy values of the sampling buffers among `rows`, in their
    shapes and types."""
    return {k: np.full(np.shape(rows[k]), v, np.asarray(rows[k]).dtype) for k, v in _GREEDY_ROWS.items()
            if k in rows}


def _filter_work(rows: dict) -> bool:
    """Whether some row of the sampling rows `rows` has a penalty, a logit
    bias, log-probabilities or a given sequence on (work beyond the greedy
    token)."""
    return any(bool((np.asarray(rows[k]) != v).any()) for k, v in _GREEDY_ROWS.items()
               if k != "temperature" and k in rows)


def _not_greedy(rows: dict | None) -> bool:
    """Whether some row of `rows` samples or has filter-tile work on (its
    tokens all come from the decode kernel)."""
    return rows is not None and (bool((rows["temperature"] > 0).any()) or _filter_work(rows))


class ModelArtifactError(ValueError):
    """A model artifact directory without a usable model.json."""


class NonFiniteLogitsError(RuntimeError):
    """A step whose rows have no greedy token: their logits are NaN (or all
    -inf), from weights or inputs that are not finite. `rows` lists them."""

    def __init__(self, rows: list[int]):
        self.rows = rows
        super().__init__(f"row{'s' if len(rows) > 1 else ''} {', '.join(map(str, rows))} of the last step "
                         "produced no token: the logits are NaN (or all -inf); check the weights and inputs")


class Logprob(NamedTuple):
    """A generated token's log-probability under the logits its row sampled
    from (after logit biases and penalties, before temperature and
    filters), and the row's `top` most likely ids then, (id, log-probability)
    largest first (equal logits in increasing id)."""

    logprob: float
    top: list[tuple[int, float]]


@dataclass
class Generation:
    """What `DecodeSession.generate` returns: per prompt, the new tokens
    (a stop id that ended a row included) and why the row finished ("stop":
    a stop id; "length": `max_new_tokens`; "context": the compiled
    context is full); the seconds of the prefill and of the decoding after
    it (wall clock, host to host), and the decode kernel's launches; with
    `logprobs`, per prompt a `Logprob` per new token (None for rows that
    did not ask)."""

    tokens: list[list[int]]
    finish_reasons: list[str]
    prefill_s: float
    decode_s: float
    launches: int
    logprobs: list[list[Logprob] | None] | None = None


class GenerationStream:
    """A generation handed out as it runs (`DecodeSession.stream`):
    iterating yields each row's new tokens after the prefill and then as
    the kernel makes them; `result` is the `Generation` once the iteration
    ended."""

    def __init__(self, run):
        self._run = run
        self.result: Generation | None = None

    def __iter__(self):
        self.result = yield from self._run
        return self.result


class DecodeSession:
    """One model, one artifact, caches for up to `max_batch` sequences.

    `step(tokens, positions, slots)` runs the kernel once over rows: row
    `b` is token `tokens[b]` at position `positions[b]` (0-based) of the
    sequence in KV-cache slot `slots[b]` (default: slot b). Its keys and
    values are written there and its attention covers positions
    0..positions[b] of that slot, including rows of the same launch, so
    rows of one slot at consecutive positions prefill a prompt chunk in one
    launch. Returns the greedy next token of every row; `last_logits()`
    gives the logits.

    A tensor-parallel artifact (`compile_model(tp=N)`) runs on N devices
    (GPUs 0..N-1, or N groups of host threads): the session shards the
    weights (`weights.tp_shards`) and keeps one set of buffers per device
    (`device_buffers`; `buffers` is device 0's).

    `kernel_options` are the kernel's build choices (`KernelOptions`) that
    model.json records.

    The KV caches are whole by default: every slot holds memory for the
    compiled context. With `kv_memory` (bytes) they are paged
    (`runtime.kv_pages`): pages of `kv_page_bytes` (a multiple of the
    GPU's virtual memory granularity, 2 MiB) from a pool of at most
    `kv_memory` bytes back a slot's positions before a launch writes them,
    and `release(slot)` gives them back; a launch whose positions the pool
    cannot back raises KVCacheFull before it starts. `kv_pages` is the
    pool (None when the caches are whole); on a GPU the paged caches are
    `runtime.Buffer`s of their reserved address range, not tensors.
    `gpu_memory_fraction` (in (0, 1], instead of `kv_memory`) pages them
    with the pool that leaves the memory in use on each device at most
    that fraction of it, once the session's weights and buffers are in
    place (`runtime.kv_pages.pool_bytes`; the host's memory for a cpu
    session)."""

    def __init__(self, artifact_dir: str | Path, weights: dict[str, Any], *, profile_capacity: int | None = None,
                 timeout_s: float = 30.0, kv_memory: int | None = None, kv_page_bytes: int = PAGE_BYTES,
                 gpu_memory_fraction: float | None = None):
        if kv_memory is not None and (isinstance(kv_memory, bool) or not isinstance(kv_memory, (int, np.integer))
                                      or kv_memory < 1):
            raise ValueError(f"kv_memory must be a positive number of bytes or None, got {kv_memory!r}")
        if gpu_memory_fraction is not None and (
                isinstance(gpu_memory_fraction, bool) or not isinstance(gpu_memory_fraction, (int, float))
                or not 0 < gpu_memory_fraction <= 1):
            raise ValueError(f"gpu_memory_fraction must be in (0, 1] or None, got {gpu_memory_fraction!r}")
        if gpu_memory_fraction is not None and kv_memory is not None:
            raise ValueError("give kv_memory or gpu_memory_fraction, not both")
        self._paged = kv_memory is not None or gpu_memory_fraction is not None
        if isinstance(kv_page_bytes, bool) or not isinstance(kv_page_bytes, (int, np.integer)) or kv_page_bytes < 1:
            raise ValueError(f"kv_page_bytes must be a positive number of bytes, got {kv_page_bytes!r}")
        self._kv_page_bytes = int(kv_page_bytes)
        self._kv_backings: list = []
        self._cache_pages: dict[tuple[int, str], DevicePages] = {}  # (device, cache name) -> paged cache
        self.kv_pages: KVPages | None = None
        self.path = Path(artifact_dir)
        try:
            info = json.loads((self.path / MODEL_JSON).read_text())
        except OSError:
            raise ModelArtifactError(f"{self.path}: no {MODEL_JSON} (not a model artifact; compile one with "
                                     "`event-tensor compile`)") from None
        self.config = ModelConfig.from_dict(info["config"])
        self.layout = info["layout"]
        try:
            # The kernel's build choices, as model.json records them.
            self.kernel_options = KernelOptions.from_dict(info)
        except (TypeError, ValueError) as err:
            raise ModelArtifactError(f"{self.path}: {MODEL_JSON} holds kernel options that are not valid: {err}") \
                from None
        self.tp = int(self.kernel_options.tp)
        self.max_batch = int(self.layout["max_batch"])
        options = {"timeout_s": timeout_s}
        if profile_capacity:
            options["trace_capacity"] = profile_capacity
        self.max_context = int(self.layout["max_context"])
        # Kernel variants per (range of batch sizes, context bucket)
        # (compile_model(specialize=..., linear_tile="auto", batch_variants=True)),
        # or the one kernel here.
        variants = info.get("variants") or [{"min_batch": 1, "max_batch": self.max_batch, "dir": "."}]
        self.artifacts = [runtime.load(self.path / v["dir"]) for v in variants]
        self._check_layout(variants)
        self.launchers = [art.launcher(**options) for art in self.artifacts]
        # The choice per launch: for each batch size, the variants serving
        # it as (largest context, index), smallest context first.
        self._variant_of: list[list[tuple[int, int]]] = [[] for _ in range(self.max_batch + 1)]
        for i, v in enumerate(variants):
            for n in range(int(v["min_batch"]), int(v["max_batch"]) + 1):
                self._variant_of[n].append((int(v.get("max_context", self.max_context)), i))
        for n in range(1, self.max_batch + 1):
            self._variant_of[n].sort()
            if not self._variant_of[n] or self._variant_of[n][-1][0] < self.max_context:
                raise ModelArtifactError(f"{self.path}: no kernel variant serves batch {n} at context "
                                         f"{self.max_context}")
        self._variant = 0
        self.artifact = self.artifacts[0]
        self.launcher = self.launchers[0]
        self.device = "cuda" if self.artifact.target == "cuda" else "cpu"
        # Hugging Face names (model.*, lm_head.*) are packed here; packed
        # tensors go as they are.
        hf_named = any(isinstance(k, str) and k.startswith(("model.", "lm_head.")) for k in weights)
        packed = pack(self.config, weights) if hf_named else weights
        shards = tp_shards(self.config, packed, self.tp) if self.tp > 1 else [packed]
        # Per device, per variant: the buffer of each argument. Variants
        # share every buffer of the same name and shape (weights, KV
        # caches, token rows, outputs); scratch of other shapes is their own.
        self.variant_buffers = [self._alloc(shard, d) for d, shard in enumerate(shards)]
        if gpu_memory_fraction is not None:
            kv_memory = self._pool_for(gpu_memory_fraction)
        if kv_memory is not None:
            slots, positions, *row = self.variant_buffers[0][0]["k_cache"].shape
            token_bytes = int(np.prod(row)) * 2
            per_page = self._kv_page_bytes * len(self._kv_backings)
            if kv_memory < per_page:
                raise ValueError(f"kv_memory {kv_memory} is less than one KV page ({per_page} bytes: "
                                 f"{self._kv_page_bytes} of each of {len(self._kv_backings)} caches)")
            self.kv_pages = KVPages(self._kv_backings, slots=slots, positions=positions, token_bytes=token_bytes,
                                    page_bytes=self._kv_page_bytes, budget=kv_memory // per_page)
        self.device_buffers = [per_variant[0] for per_variant in self.variant_buffers]
        self.buffers = self.device_buffers[0]
        self.batch = 0
        self.last_step_s = 0.0
        # Per cache slot: launches, copies and releases that wrote or
        # forgot its positions (a reader of what a slot holds can tell
        # whether it changed since).
        self.slot_writes = np.zeros(self.max_batch, np.int64)
        # The prefill kernel, when compiled: its own row buffers, the
        # decode kernel's weights and caches.
        self.prefill_info = info.get("prefill")
        self.prefill_launcher = None
        if self.prefill_info:
            pre = runtime.load(self.path / self.prefill_info["dir"])
            self.prefill_rows = int(self.prefill_info["rows"])
            self.prefill_launcher = pre.launcher(**options)
            self._prefill_args = pre.metadata["arguments"]
            for d, buffers in enumerate(self.device_buffers):
                for spec in self._prefill_args:
                    name = spec["name"]
                    if name in ("rows", "slot", "pos0") or name in buffers:
                        continue
                    shape = [self.prefill_rows if n == -1 else n for n in spec["shape"]]
                    buffers[name] = self._zeros(shape, spec["dtype"], d)

    # -- buffers -----------------------------------------------------------

    def _to_device(self, array, device: int = 0):
        if self.device == "cpu":
            a = np.ascontiguousarray(array)
            # A read-only array (weights memory-mapped from a file): a copy,
            # since the kernel takes every buffer as writable.
            return a if a.flags.writeable else a.copy()
        import torch

        if isinstance(array, torch.Tensor):
            return array.to(f"cuda:{device}").contiguous()
        a = np.ascontiguousarray(array)
        if a.dtype == BF16:
            return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).to(f"cuda:{device}")
        return torch.from_numpy(a).to(f"cuda:{device}")

    def _check_layout(self, variants: list[dict]) -> None:
        """model.json's layout against what the kernels were compiled for:
        the KV caches' slots and positions (the static shape of `k_cache`)
        and each variant's rows (the static rows of its norm scratch `xs`).
        The session checks rows, slots and positions against the layout,
        so a layout that claims more than the kernels hold (an edited
        model.json) would let a launch write past the caches."""
        lay = self.layout
        slots, length = int(lay.get("cache_batch") or self.max_batch), int(lay.get("cache_context") or self.max_context)
        within = [] if slots >= self.max_batch and length >= self.max_context else [
            f"max_batch {self.max_batch} / max_context {self.max_context} above the caches' "
            f"{slots} slots x {length} positions"]
        for v, art in zip(variants, self.artifacts):
            shapes = {a["name"]: a.get("shape") for a in art.metadata["arguments"]}
            cache, xs = shapes.get("k_cache"), shapes.get("xs")
            problems = []
            if cache and len(cache) == 5 and cache[0] != -1 and (cache[0], cache[1]) != (slots, length):
                problems.append(f"KV caches of {cache[0]} slots x {cache[1]} positions, the layout {slots} x {length}")
            problems += within
            if xs and len(xs) == 3 and xs[1] != -1 and int(v["max_batch"]) > xs[1]:
                problems.append(f"variant {v['dir']!r} serves up to {v['max_batch']} rows, its kernel {xs[1]}")
            if problems:
                raise ModelArtifactError(f"{self.path}: {MODEL_JSON} does not match the compiled kernels "
                                         f"({'; '.join(problems)}): edited or from another build; recompile")

    def _zeros(self, shape, dtype: str, device: int = 0):
        """Zeros of a kernel argument's dtype name (float32, bfloat16, int32)."""
        if self.device == "cpu":
            return np.zeros(shape, BF16 if dtype == "bfloat16" else np.dtype(dtype))
        import torch

        return torch.zeros(shape, dtype=getattr(torch, dtype), device=f"cuda:{device}")

    def _alloc(self, packed: dict[str, np.ndarray], device: int = 0) -> list[dict[str, Any]]:
        """Uploads the weights and allocates every other kernel argument
        (KV caches, token rows, activations) from the artifacts' argument
        shapes, a dynamic first dimension taking `max_batch` rows; the
        buffers of `device`, one dict per kernel variant."""
        if device == 0:
            self._mapped: dict[str, Any] = {}  # runtime.cuda.MappedHost per name
        self._per_row = [[(a["name"], bool(a.get("shape")) and a["shape"][0] == -1)
                          for a in art.metadata["arguments"]] for art in self.artifacts]
        pool: dict[tuple, Any] = {}
        per_variant = []
        for art in self.artifacts:
            buffers: dict[str, Any] = {}
            missing = []
            for spec in art.metadata["arguments"]:
                name = spec["name"]
                if name in _SCALARS:
                    continue
                shape = [self.max_batch if d == -1 else d for d in spec["shape"]]
                if name in packed or name in _WEIGHTS or name in ("k_cache", "v_cache", "history"):
                    # Weights, caches and the slots' token history: one
                    # buffer that every variant takes as is.
                    if name in pool and list(pool[name].shape) != shape:
                        raise ModelArtifactError(f"{self.path}: the kernel variants take '{name}' with different "
                                                 f"shapes ({list(pool[name].shape)} and {shape})")
                    key = name
                else:
                    key = (name, tuple(shape), spec["dtype"])
                if key in pool:
                    buffers[name] = pool[key]
                elif name in ("k_cache", "v_cache") and self._paged:
                    buffers[name] = pool[key] = self._paged_cache(name, shape, device)
                elif name in _HOST_VISIBLE and self.device == "cuda" and device == 0:
                    # The kernel's stores reach the host while it runs.
                    # (The session keeps the allocation: it is freed with it.
                    # On several devices the host reads device 0's.)
                    mapped = self._mapped[name] = self.launchers[0].mapped_host(shape, spec["dtype"])
                    buffers[name] = pool[key] = mapped.buffer
                elif name in packed:
                    array = packed[name]
                    if list(array.shape) != spec["shape"]:
                        raise ValueError(f"weight '{name}' has shape {list(array.shape)}, the artifact expects "
                                         f"{spec['shape']}")
                    buffers[name] = pool[key] = self._to_device(array, device)
                elif name in _WEIGHTS:
                    missing.append(name)
                else:
                    buffers[name] = pool[key] = self._zeros(shape, spec["dtype"], device)
                    if name in _OFF_ROWS:
                        buffers[name][:] = _OFF_ROWS[name]
            if missing:
                raise ValueError(f"no weights for kernel arguments: {', '.join(missing)}")
            per_variant.append(buffers)
        return per_variant

    def _pool_for(self, fraction: float) -> int:
        """kv_memory for `gpu_memory_fraction`: the pages that every memory
        holding caches (each device, or the host) has room for under the
        fraction, times the bytes of a page of every cache."""
        per_memory: dict[int, int] = {}
        for backing in self._kv_backings:
            key = getattr(backing, "device", -1)  # -1: the host
            per_memory[key] = per_memory.get(key, 0) + 1
        pages = None
        for key, caches in per_memory.items():
            free, total = memory_info(self.device, max(key, 0))
            room = pool_bytes(fraction, free, total) // (self._kv_page_bytes * caches)
            if room < 1:
                where = "the host" if key < 0 else f"device {key}"
                raise ValueError(f"gpu_memory_fraction {fraction} leaves no KV page on {where}: "
                                 f"{(total - free) / 2**30:.2f} of {total / 2**30:.2f} GiB are in use")
            pages = room if pages is None else min(pages, room)
        return pages * self._kv_page_bytes * len(self._kv_backings)

    def _paged_cache(self, name: str, shape, device: int):
        """KV cache `name` of `shape` (bf16) whose pages `kv_pages` backs."""
        nbytes = int(np.prod(shape)) * 2
        if self.device == "cpu":
            backing = HostPages(nbytes, self._kv_page_bytes)
            view = backing.array(shape, BF16)
        else:
            backing = DevicePages(device, nbytes, self._kv_page_bytes)
            view = runtime.Buffer(backing.pointer, tuple(shape), "bfloat16", "cuda")
            self._cache_pages[device, name] = backing
        self._kv_backings.append(backing)
        return view

    def _back(self, slots, ends) -> None:
        """Before a launch writes positions [0, ends[i]) of slot slots[i]:
        counts the write (`slot_writes`) and, with paged caches, backs them
        (KVCacheFull if the pool cannot)."""
        self.slot_writes[np.asarray(slots, np.int64)] += 1
        if self.kv_pages is None:
            return
        most: dict[int, int] = {}
        for slot, end in zip(np.asarray(slots).tolist(), np.asarray(ends).tolist()):
            most[slot] = max(most.get(slot, 0), int(end))
        for slot, end in most.items():
            self.kv_pages.ensure(slot, end)

    def _check_slot(self, slot, what: str = "") -> None:
        """A ValueError unless `slot` (`what`: how the message names it) is
        a cache slot's index."""
        if isinstance(slot, bool) or not isinstance(slot, (int, np.integer)) or not 0 <= slot < self.max_batch:
            raise ValueError(f"{what}slot {slot!r} is not a cache slot (max_batch {self.max_batch})")

    def release(self, slot: int, keep: int = 0) -> None:
        """Forgets the sequence in cache slot `slot` past its first `keep`
        positions: with paged caches their pages go back to the pool
        (nothing to do with whole caches; the next sequence in the slot
        overwrites it)."""
        self._check_slot(slot)
        if isinstance(keep, bool) or not isinstance(keep, (int, np.integer)) or not 0 <= keep <= self.max_context:
            raise ValueError(f"keep {keep!r} is not a number of positions in [0, {self.max_context}]")
        self.slot_writes[int(slot)] += 1
        if self.kv_pages is not None:
            self.kv_pages.release(int(slot), int(keep))

    def copy_positions(self, src: int, dst: int, start: int, end: int) -> None:
        """Copies the keys and values of cache positions [start, end) of
        slot `src` into slot `dst` (every layer, on every device; and
        their tokens in the slots' history, which the penalties read): a
        sequence whose first tokens are another's takes their keys and
        values instead of computing them again (the serving engine's prefix
        reuse). Ordered after the launches before it, like a launch. With
        paged caches `src` must hold the positions, and `dst`'s are backed
        first (KVCacheFull if the pool cannot)."""
        self._check_slot(src, "src ")
        self._check_slot(dst, "dst ")
        if src == dst:
            raise ValueError(f"src and dst are the same slot ({src})")
        if not 0 <= start <= end <= self.max_context:
            raise ValueError(f"positions [{start}, {end}) are not within the compiled context {self.max_context}")
        if start == end:
            return
        src, dst, start, end = int(src), int(dst), int(start), int(end)
        if self.kv_pages is not None and self.kv_pages.backed(src) < end:
            raise ValueError(f"slot {src} holds {self.kv_pages.backed(src)} positions, not {end}")
        self._back([dst], [end])
        for device, buffers in enumerate(self.device_buffers):
            # The keys and values, and the tokens at those positions (what
            # the penalties read).
            for name in ("k_cache", "v_cache", "history"):
                if name not in buffers:
                    continue
                cache = buffers[name]
                if self.device == "cpu":
                    cache[dst, start:end] = cache[src, start:end]
                elif (device, name) in self._cache_pages:
                    slots, positions, *row = cache.shape
                    token = int(np.prod(row)) * 2
                    self._cache_pages[device, name].copy((dst * positions + start) * token,
                                                         (src * positions + start) * token, (end - start) * token)
                else:
                    cache[dst, start:end].copy_(cache[src, start:end])

    def kv_pages_for(self, tokens: int) -> int:
        """The most KV pages a sequence of `tokens` positions holds (0 with
        whole caches)."""
        pool = self.kv_pages
        if pool is None:
            return 0
        return max(pool.needed_alone(slot, tokens) for slot in range(pool.slots))

    def reset(self) -> None:
        """Forgets every sequence (clears the KV caches; paged caches give
        every page back)."""
        self.slot_writes += 1
        if self.kv_pages is not None:
            for slot in range(self.kv_pages.slots):
                self.kv_pages.release(slot)
            return
        for buffers in self.device_buffers:
            for name in ("k_cache", "v_cache"):
                self._zero(buffers[name])

    def _zero(self, buf) -> None:
        """Zeroes a session buffer (numpy on the host, torch on a GPU)."""
        if self.device == "cpu":
            buf[...] = 0
        else:
            buf.zero_()

    # -- running -----------------------------------------------------------

    def _arguments(self, batch: int, variant: int | None = None, steps: int = 1) -> list:
        """The arguments of kernel variant `variant` (default: the one the
        last step ran) for `batch` rows and up to `steps` decode steps:
        buffers whose first dimension is dynamic are passed as their first
        `batch` rows (on several devices, each argument a list of every
        device's)."""
        v = self._variant if variant is None else variant
        scalars = {"batch": batch, "steps": steps}

        def one(per_variant):
            buffers = per_variant[v]
            return [scalars[name] if name in scalars else (buffers[name][:batch] if rows else buffers[name])
                    for name, rows in self._per_row[v]]
        return self._per_device(one, self.variant_buffers)

    def _per_device(self, arguments, per_device: list) -> list:
        """A launch's arguments: `arguments(x)` of device 0's entry of
        `per_device` on one device; on several, each argument a list of
        every device's."""
        if self.tp == 1:
            return arguments(per_device[0])
        return [list(a) for a in zip(*[arguments(x) for x in per_device])]

    def _choose(self, batch: int, context: int) -> int:
        """The kernel variant for `batch` rows whose longest context (last
        position + 1) is `context`: of those serving the batch, the one
        with the smallest context bucket that holds it (a few at most)."""
        for bucket, i in self._variant_of[batch]:
            if context <= bucket:
                return i
        raise ValueError(f"context {context} exceeds the compiled context {self.max_context}")

    def _write_rows(self, rows: dict[str, np.ndarray]) -> None:
        """Host values into the first rows of the named buffers."""
        for buffers in self.device_buffers:
            for name, values in rows.items():
                if self.device == "cpu":
                    buffers[name][: len(values)] = values
                else:
                    import torch

                    buffers[name][: len(values)].copy_(torch.from_numpy(values))

    def _check_prompts(self, prompts) -> int:
        """The number of `prompts`, each non-empty, one per cache slot at most."""
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("prompts must be non-empty")
        if len(prompts) > self.max_batch:
            raise ValueError(f"{len(prompts)} prompts exceed the {self.max_batch} cache slots (max_batch)")
        return len(prompts)

    def _check_tokens(self, tokens: np.ndarray) -> None:
        if (tokens < 0).any() or (tokens >= self.config.vocab_size).any():
            bad = int(tokens[(tokens < 0) | (tokens >= self.config.vocab_size)][0])
            raise ValueError(f"token id {bad} is outside the vocabulary [0, {self.config.vocab_size})")

    def _check(self, tokens, positions, slots) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        tokens = np.asarray(tokens, np.int64).reshape(-1)
        positions = np.asarray(positions, np.int64).reshape(-1)
        n = len(tokens)
        slots = np.arange(n) if slots is None else np.asarray(slots, np.int64).reshape(-1)
        if n < 1 or n > self.max_batch:
            raise ValueError(f"batch size {n} is outside [1, {self.max_batch}] (the compiled max_batch)")
        if len(positions) != n or len(slots) != n:
            raise ValueError(f"{n} tokens but {len(positions)} positions and {len(slots)} slots")
        self._check_tokens(tokens)
        if (positions < 0).any() or (positions >= self.max_context).any():
            bad = int(positions[(positions < 0) | (positions >= self.max_context)][0])
            raise ValueError(f"position {bad} is outside the compiled context [0, {self.max_context})")
        if (slots < 0).any() or (slots >= self.max_batch).any():
            bad = int(slots[(slots < 0) | (slots >= self.max_batch)][0])
            raise ValueError(f"cache slot {bad} is outside [0, {self.max_batch})")
        if len(set(zip(slots.tolist(), positions.tolist()))) != n:
            raise ValueError("two rows write the same cache slot and position")
        return tokens.astype(np.int32), positions.astype(np.int32), slots.astype(np.int32)

    def step(self, tokens: Sequence[int], positions: Sequence[int], slots: Sequence[int] | None = None) -> np.ndarray:
        tok, pos, slot = self._check(tokens, positions, slots)
        n = len(tok)
        self._back(slot, pos.astype(np.int64) + 1)
        self._write_rows({"tokens": tok, "positions": pos, "slots": slot})
        self._variant = self._choose(n, int(pos.max()) + 1)
        self.launcher = self.launchers[self._variant]
        start = time.perf_counter()
        self.launcher(*self._arguments(n))
        self.last_step_s = time.perf_counter() - start
        self.batch = n
        return self.next_tokens()

    def next_tokens(self) -> np.ndarray:
        """The greedy token of each row of the last step; raises
        NonFiniteLogitsError for rows without one (the argmax finds no
        logit above -inf and leaves an id outside the vocabulary)."""
        tokens = self._read("next_token", self.batch)[:, 0].astype(np.int64)
        bad = np.flatnonzero((tokens < 0) | (tokens >= self.config.vocab_size))
        if bad.size:
            raise NonFiniteLogitsError(bad.tolist())
        return tokens

    def last_logits(self) -> np.ndarray:
        """The logits of the last step's rows (on several devices, every
        device's share of the vocabulary, in order)."""
        parts = []
        for buffers in self.device_buffers:
            t = buffers["logits"][: self.batch]
            parts.append(np.array(t if self.device == "cpu" else t.cpu().numpy(), dtype=np.float32))
        return np.concatenate(parts, axis=-1)

    @property
    def last_trace(self):
        return getattr(self.launcher, "last_trace", None)

    def prefill(self, prompts: Sequence[Sequence[int]], slots: Sequence[int] | None = None) -> np.ndarray:
        """Feeds the prompts (prompt b into cache slot `slots[b]`, default
        b). With a prefill kernel (compile_model(prefill_rows=...)), each
        prompt in launches of up to `prefill_rows` tokens on the prompt
        tiles; else launches of up to `max_batch` rows of the decode kernel:
        position-major chunks in which the rows of one prompt attend
        causally to each other. Returns the greedy token after each prompt."""
        self._check_prompts(prompts)
        slots = list(range(len(prompts))) if slots is None else [int(s) for s in slots]
        if len(slots) != len(prompts) or len(set(slots)) != len(slots):
            raise ValueError(f"{len(prompts)} prompts need as many distinct cache slots, got {slots}")
        self._back(slots, [len(p) for p in prompts])
        if self.prefill_launcher is not None:
            return np.array([self._prefill_prompt(s, p) for s, p in zip(slots, prompts)], np.int64)
        rows = [(t, b, int(tok)) for b, p in enumerate(prompts) for t, tok in enumerate(p)]
        rows.sort()
        out = np.zeros(len(prompts), np.int64)
        for i in range(0, len(rows), self.max_batch):
            chunk = rows[i:i + self.max_batch]
            nxt = self.step([r[2] for r in chunk], [r[0] for r in chunk], [slots[r[1]] for r in chunk])
            for (t, b, _), token in zip(chunk, nxt):
                if t == len(prompts[b]) - 1:
                    out[b] = token
        return out

    def prefill_part(self, slot: int, prompt: Sequence[int], start: int, budget: int) -> tuple[int, int | None]:
        """Part of one prompt's prefill: one launch feeding the prompt's
        tokens from position `start` on, at most `budget` of them (and at
        most `prefill_rows` with a prefill kernel, `max_batch` without),
        into cache slot `slot`. Returns (positions fed, the greedy token
        after the prompt once its last token was fed, else None): a server
        interleaves these with decode launches so that a long prompt does
        not stall the rows that decode."""
        prompt = np.asarray(prompt, np.int64)
        if not 0 <= start < len(prompt):
            raise ValueError(f"start {start} is not a position of the {len(prompt)}-token prompt")
        if len(prompt) > self.max_context:
            raise ValueError(f"prompt length {len(prompt)} exceeds the compiled context {self.max_context}")
        if budget < 1:
            raise ValueError(f"budget must be at least 1, got {budget}")
        rows = self.prefill_rows if self.prefill_launcher is not None else self.max_batch
        chunk = prompt[start: start + min(budget, rows)]
        last = start + len(chunk) == len(prompt)
        if self.prefill_launcher is not None:
            # (prefill_arguments checks the chunk's tokens.)
            self.prefill_launcher(*self.prefill_arguments(slot, start, chunk))
            self.batch = 1
            token = int(self.next_tokens()[0]) if last else None
        else:
            n = len(chunk)
            out = self.step(chunk, np.arange(start, start + n), [slot] * n)
            token = int(out[-1]) if last else None
        return len(chunk), token

    def _prefill_prompt(self, slot: int, prompt: Sequence[int]) -> int:
        """One prompt through the prefill kernel, in chunks of at most
        `prefill_rows` tokens (a chunk attends to the cache, so later chunks
        see the earlier ones); its greedy next token."""
        prompt = np.asarray(prompt, np.int64)
        if len(prompt) > self.max_context:
            raise ValueError(f"prompt length {len(prompt)} exceeds the compiled context {self.max_context}")
        self._check_tokens(prompt)
        start = time.perf_counter()
        fed, token = 0, None
        while token is None:
            n, token = self.prefill_part(slot, prompt, fed, len(prompt))
            fed += n
        self.last_prefill_s = time.perf_counter() - start
        return token

    def prefill_arguments(self, slot: int, pos0: int, chunk: Sequence[int]) -> list:
        """The prefill kernel's arguments for the tokens `chunk` (at most
        `prefill_rows`) at positions pos0.. of cache slot `slot`; writes the
        tokens and positions into the kernel's buffers."""
        if self.prefill_launcher is None:
            raise ValueError(f"{self.path} has no prefill kernel (compile_model(prefill_rows=...))")
        chunk = np.asarray(chunk, np.int64)
        n = len(chunk)
        if not 0 < n <= self.prefill_rows:
            raise ValueError(f"a prefill chunk takes 1 to {self.prefill_rows} tokens, got {n}")
        self._check_slot(slot)
        if pos0 < 0 or pos0 + n > self.max_context:
            raise ValueError(f"positions {pos0}..{pos0 + n - 1} exceed the compiled context {self.max_context}")
        self._check_tokens(chunk)
        self._back([slot], [pos0 + n])
        self._write_rows({"p_tokens": chunk.astype(np.int32),
                          "p_positions": np.arange(pos0, pos0 + n, dtype=np.int32)})
        scalars = {"rows": n, "slot": slot, "pos0": pos0}

        def one(buffers):
            args = []
            for spec in self._prefill_args:
                name = spec["name"]
                if name in scalars:
                    args.append(scalars[name])
                elif spec.get("shape") and spec["shape"][0] == -1 and name.startswith("p_"):
                    args.append(buffers[name][:n])
                elif spec.get("shape") and spec["shape"][0] == -1:
                    args.append(buffers[name][:1])
                else:
                    args.append(buffers[name])
            return args
        return self._per_device(one, self.device_buffers)

    @property
    def last_prefill_trace(self):
        """The trace of the last prefill launch (kernels compiled with profiling)."""
        return getattr(self.prefill_launcher, "last_trace", None)

    @property
    def steps_on_device(self) -> bool:
        """Whether the decode kernel runs many steps per launch (every
        kernel compiled since steps joined the tensor-parallel ones too)."""
        return all(any(a["name"] == "steps" for a in art.metadata["arguments"]) for art in self.artifacts)

    def stop_rows(self, stop, n: int) -> np.ndarray:
        """The stop ids of `n` rows, checked, as the kernel's row buffer
        [n, MAX_STOP_IDS] (-1 where unused): `stop` is one sequence of ids
        for every row, or one per row."""
        rows = list(stop) if stop is not None else []
        if not rows:
            rows = [[]] * n
        elif all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in rows):
            rows = [rows] * n
        if len(rows) != n:
            raise ValueError(f"stop must be one sequence of token ids or one per prompt ({n}), got {len(rows)}")
        out = np.full((n, MAX_STOP_IDS), -1, np.int32)
        for b, ids in enumerate(rows):
            ids = list(ids)
            if len(ids) > MAX_STOP_IDS:
                raise ValueError(f"at most {MAX_STOP_IDS} stop ids per row, got {len(ids)}")
            for t in ids:
                if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or not 0 <= t < self.config.vocab_size:
                    raise ValueError(f"stop id {t!r} is not a token id in [0, {self.config.vocab_size})")
            out[b, : len(ids)] = ids
        return out

    def _row_values(self, value, n: int, name: str, check) -> list:
        """`value` for each of `n` rows: one for all, or a sequence of n."""
        values = list(value) if isinstance(value, (list, tuple, np.ndarray)) else [value] * n
        if len(values) != n:
            raise ValueError(f"{name} must be one value or one per prompt ({n}), got {len(values)}")
        for v in values:
            check(v)
        return values

    def sampling_rows(self, n: int, *, temperature=0.0, seed=0, top_k=0, top_p=1.0, min_p=0.0,
                      repetition_penalty=1.0, frequency_penalty=0.0, presence_penalty=0.0, outputs_from=0,
                      logit_bias=None, logprobs=None) -> dict:
        """The sampling arguments of `n` rows, checked (each one value for
        all rows or a sequence of one per row), as the kernel's row buffers:
        `temperature` (f32, 0 greedy), `seed` (i64 bits), and the filters
        applied before the draw, in this order: `top_k` (the k most likely
        tokens; 0 off), `top_p` (the fewest most likely tokens that hold
        that share of the probability; 1 off), `min_p` (the tokens at least
        that share as likely as the most likely one; 0 off).

        The penalties come before the filters, greedy rows included, once
        per token id in the row's sequence (`et.penalize`):
        `repetition_penalty` r > 0 (1 off) divides a positive logit of an id
        anywhere in the sequence (prompt or generated) by r and multiplies a
        negative one by it; then `frequency_penalty` f and
        `presence_penalty` p (0 off) subtract c * f + p from the logit of an
        id the row generated c > 0 times, counting the tokens from position
        `outputs_from` (the prompt's length) on.

        Before the penalties, `logit_bias` (None, one mapping of token id to
        a finite number for all rows, or a sequence of one mapping or None
        per row; at most MAX_LOGIT_BIAS ids a row) adds each number to its
        id's logit (`et.logit_bias`): -100 all but bans an id, +100 all but
        forces it.

        `logprobs` (None: off; an int in [0, MAX_TOP_LOGPROBS] for all rows,
        or one int or None per row) asks for each new token's
        log-probability and that many of the most likely ids with theirs
        (`et.top_logprobs`, after the biases and penalties: the distribution
        the row samples from at temperature 1, without filters)."""
        def number(name, ok, what):
            def check(v):
                if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) \
                        or not np.isfinite(v) or not ok(v):
                    raise ValueError(f"{name} must be {what}, got {v!r}")
            return check

        def check_seed(s):
            if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or not 0 <= s < 1 << 64:
                raise ValueError(f"seed must be an int in [0, 2**64), got {s!r}")

        def check_position(p):
            if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or not 0 <= p <= self.max_context:
                raise ValueError(f"outputs_from must be a position in [0, {self.max_context}], got {p!r}")

        def check_top_k(k):
            if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
                raise ValueError(f"top_k must be an int >= 0 (0: off), got {k!r}")
        rows = {
            "temperature": np.array(self._row_values(temperature, n, "temperature", number(
                "temperature", lambda t: t >= 0, "a finite number >= 0 (0: greedy)")), np.float32),
            "seed": np.array([int(s) for s in self._row_values(seed, n, "seed", check_seed)],
                             np.uint64).view(np.int64),
            "top_k": np.array(self._row_values(top_k, n, "top_k", check_top_k), np.int64).clip(0, 2**31 - 1)
                       .astype(np.int32),
            "top_p": np.array(self._row_values(top_p, n, "top_p", number(
                "top_p", lambda p: 0 < p <= 1, "a number in (0, 1] (1: off)")), np.float32),
            "min_p": np.array(self._row_values(min_p, n, "min_p", number(
                "min_p", lambda p: 0 <= p <= 1, "a number in [0, 1] (0: off)")), np.float32),
        }
        if (rows["temperature"] > 0).any() and "temperature" not in self.buffers:
            raise ValueError(f"{self.path}: this kernel does not sample (a tensor-parallel kernel compiled "
                             "before sampling was in it): recompile it")
        filtered = (rows["top_k"] > 0).any() or (rows["top_p"] < 1).any() or (rows["min_p"] > 0).any()
        if filtered and self.tp > 1:
            raise ValueError(f"top_k, top_p and min_p need a kernel on one device; this one runs on {self.tp} "
                             "devices (temperature only)")
        if filtered and "top_k" not in self.buffers:
            raise ValueError(f"{self.path}: this kernel samples without filters (compiled before top_k, top_p "
                             "and min_p were in the kernel): recompile it")
        if "top_k" not in self.buffers:
            rows = {k: rows[k] for k in ("temperature", "seed")}
        penalties = {
            "repetition_penalty": np.array(self._row_values(repetition_penalty, n, "repetition_penalty", number(
                "repetition_penalty", lambda r: r > 0, "a finite number > 0 (1: off)")), np.float32),
            "frequency_penalty": np.array(self._row_values(frequency_penalty, n, "frequency_penalty", number(
                "frequency_penalty", lambda f: True, "a finite number (0: off)")), np.float32),
            "presence_penalty": np.array(self._row_values(presence_penalty, n, "presence_penalty", number(
                "presence_penalty", lambda p: True, "a finite number (0: off)")), np.float32),
        }
        starts = self._row_values(outputs_from, n, "outputs_from", check_position)
        if _filter_work(penalties):
            if self.tp > 1:
                raise ValueError(f"repetition, frequency and presence penalties need a kernel on one device; this "
                                 f"one runs on {self.tp} devices")
            if "history" not in self.buffers:
                raise ValueError(f"{self.path}: this kernel has no penalties (compiled before they were in the "
                                 "kernel): recompile it")
        bias_ids, bias_values = self._logit_bias_rows(logit_bias, n)
        if bias_values.any():
            if self.tp > 1:
                raise ValueError(f"logit biases need a kernel on one device; this one runs on {self.tp} devices")
            if "logit_bias_ids" not in self.buffers:
                raise ValueError(f"{self.path}: this kernel has no logit biases (compiled before they were in the "
                                 "kernel): recompile it")
        if "history" in self.buffers:
            rows.update(penalties, outputs_from=np.array(starts, np.int32))
        if "logit_bias_ids" in self.buffers:
            rows.update(logit_bias_ids=bias_ids, logit_bias_values=bias_values)

        def check_logprobs(k):
            if k is not None and (isinstance(k, bool) or not isinstance(k, (int, np.integer))
                                  or not 0 <= k <= MAX_TOP_LOGPROBS):
                raise ValueError(f"logprobs must be None (off) or an int in [0, {MAX_TOP_LOGPROBS}] (the most likely "
                                 f"ids given with each token), got {k!r}")
        counts = np.array([-1 if k is None else int(k) for k in self._row_values(logprobs, n, "logprobs",
                                                                                  check_logprobs)], np.int32)
        if (counts >= 0).any():
            if self.tp > 1:
                raise ValueError(f"logprobs need a kernel on one device; this one runs on {self.tp} devices")
            if "logprobs" not in self.buffers:
                raise ValueError(f"{self.path}: this kernel has no log-probabilities (compiled before they were in "
                                 "the kernel): recompile it")
        if "logprobs" in self.buffers:
            rows["logprobs"] = counts
        return rows

    def _logit_bias_rows(self, logit_bias, n: int) -> tuple[np.ndarray, np.ndarray]:
        """`sampling_rows`' logit biases of `n` rows as the kernel's rows of
        ids (unused entries -1) and values (unused entries 0)."""
        ids = np.full((n, MAX_LOGIT_BIAS), -1, np.int32)
        values = np.zeros((n, MAX_LOGIT_BIAS), np.float32)
        if logit_bias is None:
            return ids, values
        per_row = list(logit_bias) if isinstance(logit_bias, (list, tuple)) else [logit_bias] * n
        if len(per_row) != n:
            raise ValueError(f"logit_bias must be one mapping or one per prompt ({n}), got {len(per_row)}")
        for b, bias in enumerate(per_row):
            if bias is None:
                continue
            if not isinstance(bias, Mapping):
                raise ValueError(f"logit_bias must map token ids to numbers, got {bias!r}")
            if len(bias) > MAX_LOGIT_BIAS:
                raise ValueError(f"at most {MAX_LOGIT_BIAS} logit biases per row, got {len(bias)}")
            for k, (t, v) in enumerate(bias.items()):
                if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or not 0 <= t < self.config.vocab_size:
                    raise ValueError(f"logit_bias id {t!r} is not a token id in [0, {self.config.vocab_size})")
                if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) \
                        or not np.isfinite(v):
                    raise ValueError(f"logit_bias of id {t} must be a finite number, got {v!r}")
                ids[b, k], values[b, k] = t, v
        return ids, values

    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, *, stop=None,
                 temperature=0.0, seed=0, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0,
                 frequency_penalty=0.0, presence_penalty=0.0, logit_bias=None, logprobs=None) -> Generation:
        """Generation: prefills the prompts (of any lengths, prompt b into
        cache slot b), then decodes them together until each row has
        `max_new_tokens` new tokens, produced a stop id (`stop`: one
        sequence of ids for every row, or one per row) or filled the
        compiled context. The decode runs in the kernel (on every device of
        a tensor-parallel one): one launch runs every step, feeding each
        row's token back on the device, and the host waits once. Returns a
        `Generation`.

        Tokens are greedy, or with `temperature` > 0 (one for all rows, or
        one per row) sampled from softmax(logits / temperature) in the
        kernel, after the `top_k`, `top_p` and `min_p` filters
        (`sampling_rows`): a counter-based generator keyed by the row's
        `seed` and position, so a generation repeats exactly for its seeds,
        whatever the number of workers. The `repetition_penalty`,
        `frequency_penalty` and `presence_penalty` change the logits first
        (greedy rows too; frequency and presence count the generated
        tokens), after the `logit_bias` (`sampling_rows`). Rows that sample
        or have a penalty or bias on take their first token from the decode
        kernel too (their prompt's last token fed there), the others from
        the prefill. With `logprobs` (`sampling_rows`), `Generation.logprobs`
        holds each new token's `Logprob` (those rows' tokens all come from
        the decode kernel)."""
        sampling = dict(temperature=temperature, seed=seed, top_k=top_k, top_p=top_p, min_p=min_p,
                        repetition_penalty=repetition_penalty, frequency_penalty=frequency_penalty,
                        presence_penalty=presence_penalty, logit_bias=logit_bias, logprobs=logprobs)
        run = self._generation(prompts, max_new_tokens, stop, sampling, chunk=None, streamed=False)
        for _ in run:
            pass
        return run.result

    def stream(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, *, stop=None, temperature=0.0,
               seed=0, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0, frequency_penalty=0.0,
               presence_penalty=0.0, logit_bias=None, logprobs=None, chunk: int | None = None) -> "GenerationStream":
        """`generate`, handing the tokens out as they come: iterating yields,
        after the prefill and then as the kernel makes them, each row's new
        tokens since the last item (a list per row, empty for a row with
        none); `.result` is the `Generation` once the iteration ends. The
        launch runs in a thread of its own and the tokens are read from the
        token history while it runs (host memory the GPU writes into): the
        host waits for no launch to end before handing them out. `chunk`
        bounds the decode steps of a launch (default: every step in one);
        a kernel without steps (compiled before they joined it) hands out a step's tokens
        after each launch. With `logprobs`, the items are still tokens: the
        `Logprob`s are in `.result.logprobs`."""
        if chunk is not None and (isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 1):
            raise ValueError(f"chunk must be a positive int (decode steps per launch) or None, got {chunk!r}")
        sampling = dict(temperature=temperature, seed=seed, top_k=top_k, top_p=top_p, min_p=min_p,
                        repetition_penalty=repetition_penalty, frequency_penalty=frequency_penalty,
                        presence_penalty=presence_penalty, logit_bias=logit_bias, logprobs=logprobs)
        return self._generation(prompts, max_new_tokens, stop, sampling, chunk=None if chunk is None else int(chunk),
                                streamed=True)

    def _generation(self, prompts, max_new_tokens, stop, sampling, chunk, streamed) -> "GenerationStream":
        """Checks every argument (before any launch) and returns the
        generation as a stream of launches (`chunk` steps each; None: all),
        handing the tokens out as they are made if `streamed`, else after
        each launch."""
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) \
                or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
        n = self._check_prompts(prompts)
        stop_ids = self.stop_rows(stop, n)
        lengths = np.array([len(p) for p in prompts], np.int64)
        rows = self.sampling_rows(n, **sampling, outputs_from=[int(x) for x in lengths])
        longest = int((lengths + max_new_tokens - 1).max())
        if longest > self.max_context:
            raise ValueError(f"a prompt of {int(lengths[np.argmax(lengths)])} tokens and max_new_tokens "
                             f"{max_new_tokens} need a context of {longest}, past the compiled context "
                             f"{self.max_context}")
        for p in prompts:
            self._check_tokens(np.asarray(p, np.int64))
        return GenerationStream(self._run(prompts, int(max_new_tokens), stop_ids, rows, lengths, chunk, streamed))

    def _run(self, prompts, max_new_tokens, stop_ids, sampling, lengths, chunk, streamed):
        """The generation (see `stream`): yields each row's new tokens after
        the prefill (when every row is greedy), then as they are made
        (`streamed`) or after each launch; returns the `Generation`."""
        n = len(prompts)
        start = time.perf_counter()
        # The rows still running: their last token, its position, the new
        # tokens they may still produce.
        if _not_greedy(sampling):
            # Each prompt's last token goes through the decode kernel, so
            # that the first new token is drawn and penalized like the
            # others (the prefill kernel's is greedy).
            heads = [b for b in range(n) if len(prompts[b]) > 1]
            if heads:
                self.prefill([prompts[b][:-1] for b in heads], slots=heads)
            prefill_s = time.perf_counter() - start
            start = time.perf_counter()
            finished = np.zeros(n, np.int32)
            tokens = [[] for _ in range(n)]
            last = np.array([p[-1] for p in prompts], np.int64)
            pos, left = lengths - 1, np.full(n, max_new_tokens, np.int64)
        else:
            first = self.prefill(prompts)
            prefill_s = time.perf_counter() - start
            start = time.perf_counter()
            stopped = np.array([int(first[b]) in stop_ids[b] for b in range(n)])
            finished = np.where(stopped, FINISH_STOP, np.where(max_new_tokens == 1, FINISH_LENGTH, 0)).astype(np.int32)
            tokens = [[int(t)] for t in first]
            yield [list(t) for t in tokens]
            last, pos, left = first.copy(), lengths.copy(), np.full(n, max_new_tokens - 1, np.int64)
        launches = 0
        asked = sampling.get("logprobs")
        logprobs = [[] if asked is not None and asked[b] >= 0 else None for b in range(n)]
        steps = int(left.max()) if chunk is None or not self.steps_on_device else chunk
        if not self.steps_on_device:
            steps = 1
        while (finished == 0).any():
            live = np.flatnonzero(finished == 0)
            args = (live, last[live], pos[live], left[live], stop_ids[live], steps)
            live_sampling = {k: v[live] for k, v in sampling.items()}
            on_logprobs = (lambda b, got, live=live: logprobs[live[b]].extend(got)) if asked is not None else None
            if streamed:
                rows = yield from self._streamed_launch(n, live, args, live_sampling, on_logprobs)
            else:
                rows = self.decode_launch(*args, sampling=live_sampling, on_logprobs=on_logprobs)
            launches += 1
            new = [[] for _ in range(n)]
            for b, (got, reason) in zip(live, rows):
                new[b] = got
                tokens[b] += got
                finished[b] = reason
                if got:
                    last[b], pos[b], left[b] = got[-1], pos[b] + len(got), left[b] - len(got)
            if not streamed:
                yield new
        decode_s = time.perf_counter() - start
        bad = [b for b in range(n) if finished[b] == FINISH_NONFINITE]
        if bad:
            raise NonFiniteLogitsError(bad)
        return Generation(tokens, [FINISH_REASONS[int(f)] for f in finished], prefill_s, decode_s, launches,
                          logprobs if any(lp is not None for lp in logprobs) else None)

    def score(self, prompts: Sequence[Sequence[int]], logprobs: int = 0) -> list[list[Logprob]]:
        """Each prompt's tokens after its first under the model (prompt b in
        cache slot b): for prompt[i], i >= 1, the `Logprob` of prompt[i]
        given prompt[:i], with the `logprobs` most likely ids at position i
        (as `generate(logprobs=...)` gives them). Decode steps that feed
        each prompt's own tokens compute them (the kernel takes the row's
        next token from the slot's token history below `forced_to`), one
        step a token, every step in one launch: a prompt of n tokens costs
        n - 1 decode steps (the prefill kernel keeps its last position's
        logits only). The slots then hold the prompts' keys and values but
        for their last tokens'."""
        n = self._check_prompts(prompts)
        for p in prompts:
            self._check_tokens(np.asarray(p, np.int64))
        lengths = np.array([len(p) for p in prompts], np.int64)
        if lengths.max() > self.max_context:
            raise ValueError(f"a prompt of {int(lengths.max())} tokens exceeds the compiled context {self.max_context}")
        rows = self.sampling_rows(n, logprobs=logprobs, outputs_from=[int(x) for x in lengths])
        if "forced_to" not in self.buffers or not self.steps_on_device:
            raise ValueError(f"{self.path}: this kernel cannot score given tokens (compiled before it could): "
                             "recompile it")
        rows["forced_to"] = lengths.astype(np.int32)
        out: list[list[Logprob]] = [[] for _ in range(n)]
        live = np.flatnonzero(lengths > 1)
        if not len(live):
            return out
        for b, p in enumerate(prompts):
            self.write_history(b, p)
        sub = {k: v[live] for k, v in rows.items()}
        self.decode_launch(live, [prompts[b][0] for b in live], np.zeros(len(live), np.int64), lengths[live] - 1,
                           np.full((len(live), 1), -1, np.int32), int(lengths.max()) - 1, sampling=sub,
                           on_logprobs=lambda b, got: out[live[b]].extend(got))
        return out

    def write_history(self, slot: int, tokens: Sequence[int]) -> None:
        """Writes `tokens` at the first positions of cache slot `slot`'s
        token history (what a row that scores them takes as its next tokens
        below `forced_to`; `sampling_rows` rows)."""
        self._check_slot(slot)
        row = np.asarray(tokens, np.int32)
        for buffers in self.device_buffers:
            if self.device == "cpu":
                buffers["history"][slot, : len(row)] = row
            else:
                import torch

                buffers["history"][slot, : len(row)].copy_(torch.from_numpy(row))

    def _streamed_launch(self, n: int, live, args, sampling, on_logprobs=None):
        """`decode_launch(*args)` in a thread of its own, yielding each of the
        `n` rows' tokens (row `live[b]` for the launch's row b) as the kernel
        makes them; returns the launch's result. `on_logprobs` is the
        launch's (called from its thread)."""
        items: queue.SimpleQueue = queue.SimpleQueue()
        out: dict = {}

        def run():
            try:
                out["rows"] = self.decode_launch(*args, sampling=sampling, on_logprobs=on_logprobs,
                                                 on_tokens=lambda b, t: items.put((int(live[b]), list(t))))
            except BaseException as err:  # noqa: BLE001 - raised in the caller's thread
                out["error"] = err
            finally:
                items.put(None)
        worker = threading.Thread(target=run, name="event-tensor-stream", daemon=True)
        worker.start()
        done = False
        while not done:
            batch = [items.get()]
            while True:
                try:
                    batch.append(items.get_nowait())
                except queue.Empty:
                    break
            new = [[] for _ in range(n)]
            for item in batch:
                if item is None:
                    done = True
                else:
                    new[item[0]] += item[1]
            if any(new):
                yield new
        worker.join()
        if "error" in out:
            raise out["error"]
        return out["rows"]

    def decode_launch(self, slots, tokens, positions, remaining, stop_ids, steps: int, *, sampling=None,
                      on_tokens=None, on_logprobs=None, interrupt_when=None) -> list[tuple[list[int], int]]:
        """One launch of up to `steps` decode steps over rows (a kernel
        without steps, compiled before they joined it, runs one): row
        b feeds token `tokens[b]` at position `positions[b]` of cache slot
        `slots[b]`, then each token it produces, and stops after
        `remaining[b]` (>= 1) new tokens, a token of `stop_ids[b]` (up to
        MAX_STOP_IDS ids, -1 padding), or the compiled context's end.
        `sampling` (the rows' `sampling_rows`; default greedy) samples. Returns for each row its new tokens and finish code (0:
        it goes on, its last token to be fed at `positions[b]` plus the
        number of new tokens; else a FINISH_* code). The arguments are
        checked by the callers (`generate`, the serving engine).

        While the launch runs (a kernel with steps), `on_tokens(b, new)`
        gets row b's tokens as they are made (read from the token history,
        which the kernel writes into host memory), a prefix of what the
        launch returns; and once `interrupt_when()` is true, the launch
        ends after the step in flight (the rows as after any launch: those
        that go on continue in the next). For rows whose `sampling` asks
        for log-probabilities, `on_logprobs(b, entries)` gets a `Logprob`
        per token, before `on_tokens` gets the same tokens (at the end of
        the launch, for every token, if there is no `on_tokens`)."""
        n = len(slots)
        slots = np.asarray(slots, np.int32)
        tokens = np.asarray(tokens, np.int32)
        positions = np.asarray(positions, np.int64)
        remaining = np.asarray(remaining, np.int64)
        stops = np.full((n, MAX_STOP_IDS), -1, np.int32)
        stops[:, : np.shape(stop_ids)[1] if n else 0] = stop_ids
        sampled = _not_greedy(sampling)
        if sampled:
            self._write_rows(sampling)
        try:
            if not self.steps_on_device:
                out = self._decode_step(slots, tokens, positions, remaining, stops)
                if on_tokens is not None:
                    for b, (new, _) in enumerate(out):
                        on_tokens(b, new)
                return out
            counts = sampling.get("logprobs") if sampled and on_logprobs is not None else None
            return self._decode_steps(slots, tokens, positions, remaining, stops, steps, on_tokens,
                                      interrupt_when, counts, on_logprobs)
        except BaseException:
            if sampled and _filter_work(sampling):
                # A launch that failed may have left a penalty's scratch
                # counts (zero between launches) behind.
                for buffers in self.device_buffers:
                    self._zero(buffers["penalty_counts"])
            raise
        finally:
            if sampled:
                # step() and prefill stay greedy.
                self._write_rows(_greedy_rows(sampling))

    def _decode_steps(self, slots, tokens, positions, remaining, stops, steps, on_tokens,
                      interrupt_when, counts=None, on_logprobs=None) -> list[tuple[list[int], int]]:
        """`decode_launch` on a kernel that runs the steps itself; `counts`
        the rows' top ids asked for with each token (-1: none)."""
        n = len(slots)
        width = steps + 1
        # Each row's new tokens: the history of its slot after its position.
        rows = np.repeat(slots[:, None], width, axis=1)
        cols = np.minimum(positions[:, None] + 1 + np.arange(width), self.max_context)
        # The positions the launch may write: the rows' budgets, the steps.
        self._back(slots, np.minimum(positions + np.minimum(remaining, steps), self.max_context))
        host = self._host_array("out_tokens")
        if host is not None:
            host[rows, cols] = -1  # not yet made
        # Rows that asked for log-probabilities: theirs by position, in the
        # rows `slot * (positions + 1) + position` of the top lists, marked
        # not yet written (NaN) so that a token is handed out with them only
        # once they are in host memory too (the kernel writes a list's last
        # value, then the token's own, then the token).
        asked = np.flatnonzero(counts >= 0) if counts is not None else np.zeros(0, np.int64)
        lists = rows * self.buffers["out_tokens"].shape[1] + cols
        last_id = np.maximum(counts - 1, 0) if counts is not None else None
        logprob_host = {k: self._host_array(k) for k in ("out_logprobs", "out_top_logprobs")} if len(asked) else {}
        if len(asked) and all(a is not None for a in logprob_host.values()):
            logprob_host["out_logprobs"][rows[asked], cols[asked]] = np.nan
            logprob_host["out_top_logprobs"][lists[asked]] = np.nan

        def written(b: int, end: int) -> int:
            """How many of row b's first `end` tokens have their
            log-probabilities in host memory."""
            lp = logprob_host["out_logprobs"][rows[b, :end], cols[b, :end]]
            ready = ~np.isnan(lp)
            if counts[b] > 0:
                ready &= ~np.isnan(logprob_host["out_top_logprobs"][lists[b, :end], last_id[b]])
            return int(np.cumprod(ready).sum())

        def hand_logprobs(b: int, start: int, end: int) -> None:
            """Row b's Logprobs of tokens start..end to on_logprobs."""
            if end <= start or counts is None or counts[b] < 0 or on_logprobs is None:
                return
            k, at = int(counts[b]), lists[b, start:end]
            lp = self._gather("out_logprobs", rows[b:b + 1, start:end], cols[b:b + 1, start:end])[0]
            ids, vals = (self._list_rows(name, at)[:, :k] for name in ("out_top_ids", "out_top_logprobs"))
            on_logprobs(b, [Logprob(float(lp[j]), list(zip(ids[j].tolist(), vals[j].tolist())))
                            for j in range(end - start)])
        self._write_rows({"tokens": tokens, "positions": positions.astype(np.int32), "slots": slots,
                          "remaining": remaining.astype(np.int32), "finished": np.zeros(n, np.int32),
                          "stop_ids": stops,
                          # Raised by the kernel once every row has finished
                          # or the host interrupted; a launch starts with both
                          # down.
                          "stop": np.zeros(1, np.int32), "interrupt": np.zeros(1, np.int32)})
        self._variant = self._choose(n, int((positions + np.minimum(remaining, steps)).max()))
        self.launcher = self.launchers[self._variant]
        self.batch = n
        seen = np.zeros(n, np.int64)
        # The most tokens a row makes (its budget, the steps, the context).
        most = np.minimum(np.minimum(remaining, steps), self.max_context + 1 - (positions + 1))
        interrupted = [False]

        def poll():
            if on_tokens is not None:
                window = host[rows, cols]
                made = np.cumprod((window >= 0) & (window < self.config.vocab_size), axis=1).sum(axis=1)
                made = np.minimum(made, most)
                for b in np.flatnonzero(made > seen):
                    end = int(made[b])
                    if logprob_host and counts[b] >= 0:
                        end = min(end, written(b, end))
                        if end <= seen[b]:
                            continue
                        hand_logprobs(int(b), int(seen[b]), end)
                    on_tokens(int(b), window[b, seen[b]:end].tolist())
                    seen[b] = end
            if interrupt_when is not None and not interrupted[0] and interrupt_when():
                interrupted[0] = True
                self._interrupt()
        watch = host is not None and (on_tokens is not None or interrupt_when is not None)
        self.launcher(*self._arguments(n, steps=steps), **({"poll": poll} if watch else {}))
        finished = self._read("finished", n)
        after = self._read("positions", n)
        window = self._gather("out_tokens", rows, cols)
        out = []
        for b in range(n):
            # A row that goes on has its last token at its position; a
            # finished row's last token is one past it (not fed back).
            count = int(after[b] + (2 if finished[b] else 1) - (positions[b] + 1))
            new = window[b, :count].tolist()
            rest = [t for t in new[seen[b]:] if 0 <= t < self.config.vocab_size]
            hand_logprobs(b, int(seen[b]), int(seen[b]) + len(rest))
            if on_tokens is not None and rest:
                on_tokens(b, rest)
            out.append((new, int(finished[b])))
        return out

    def _interrupt(self) -> None:
        """Asks the running launch to end after its current step."""
        word = self.buffers["interrupt"]
        if self.device == "cpu":
            word[0] = 1
        else:
            self.launcher.write_word(word.data_ptr(), 1)

    def _decode_step(self, slots, tokens, positions, remaining, stops) -> list[tuple[list[int], int]]:
        """`decode_launch` for kernels without steps (compiled before they joined it): one
        step, the host deciding which rows finished."""
        got = self.step(tokens, positions, slots)
        out = []
        for b, t in enumerate(got.tolist()):
            if t in stops[b]:
                reason = FINISH_STOP
            elif remaining[b] <= 1:
                reason = FINISH_LENGTH
            elif positions[b] + 1 >= self.max_context:
                reason = FINISH_CONTEXT
            else:
                reason = 0
            out.append(([t], reason))
        return out

    def _read(self, name: str, n: int) -> np.ndarray:
        """The first `n` rows of buffer `name` on the host."""
        t = self.buffers[name][:n]
        return np.asarray(t if self.device == "cpu" else t.cpu().numpy())

    def _host_array(self, name: str) -> np.ndarray | None:
        """Buffer `name` as a host array the kernel writes into (host
        memory on the CPU target, mapped host memory on a GPU), or None."""
        if name in self._mapped:
            return self._mapped[name].array
        return self.buffers[name] if self.device == "cpu" else None

    def _gather(self, name: str, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """Elements [rows[i, j], cols[i, j]] of 2-D buffer `name` on the host
        (one gather and one copy on a GPU)."""
        host = self._host_array(name)
        if host is not None:
            return np.array(host[rows, cols])
        t = self.buffers[name]
        import torch

        index = [torch.from_numpy(np.ascontiguousarray(a, np.int64)).to(t.device) for a in (rows, cols)]
        return t[index[0], index[1]].cpu().numpy()

    def _list_rows(self, name: str, at: np.ndarray) -> np.ndarray:
        """Rows `at` of 2-D buffer `name` on the host."""
        host = self._host_array(name)
        if host is not None:
            return np.array(host[at])
        import torch

        t = self.buffers[name]
        return t[torch.from_numpy(np.ascontiguousarray(at, np.int64)).to(t.device)].cpu().numpy()

    def generate_stepwise(self, prompts: Sequence[Sequence[int]], steps: int) -> tuple[np.ndarray, list[float]]:
        """Greedy decoding one launch per step (the host feeds each token
        back): the prompts (of one length), then `steps` new tokens per
        sequence. Returns (tokens [batch, steps], seconds per decode
        step). For tests and tools that time or check single steps;
        `generate` is the fast path."""
        if len({len(p) for p in prompts}) != 1:
            raise ValueError("generate_stepwise needs prompts of one length")
        start = len(prompts[0])
        if start + steps > self.max_context:
            raise ValueError(f"prompt length {start} + {steps} steps exceeds the compiled context {self.max_context}")
        nxt = self.prefill(prompts)
        out, times = [], []
        for s in range(steps):
            out.append(nxt)
            if s == steps - 1:
                break
            nxt = self.step(nxt, [start + s] * len(nxt))
            times.append(self.last_step_s)
        return np.stack(out, axis=1), times

    def variant_for(self, batch: int, context: int | None = None) -> str:
        """The kernel directory that runs a launch of `batch` rows whose
        longest context is `context` (default: the compiled context)."""
        return str(self.artifacts[self._choose(batch, context or self.max_context)].path)

    def close(self) -> None:
        for launcher in self.launchers + ([self.prefill_launcher] if self.prefill_launcher else []):
            close = getattr(launcher, "close", None)
            if close:
                close()
        if self.kv_pages is not None:
            self.kv_pages.close()
            self.kv_pages = None
