"""Runs a compiled decode-step megakernel: weights, KV caches and scratch
buffers, batch and context checks, greedy generation, timing. Needs only
the runtime (no MLIR), so it runs where the artifact was copied to."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .. import runtime
from .config import ModelConfig
from .weights import BF16, pack

__all__ = ["DecodeSession", "ModelArtifactError", "MODEL_JSON"]

MODEL_JSON = "model.json"


class ModelArtifactError(ValueError):
    """A model artifact directory without a usable model.json."""


class DecodeSession:
    """One model, one artifact, caches for up to `max_batch` sequences.

    `step(tokens, positions)` runs one decode step: token `tokens[b]` of
    sequence `b` is at position `positions[b]` (0-based; its keys and values
    are written there and attention covers positions 0..positions[b]).
    Returns the greedy next tokens; `last_logits()` gives the logits."""

    def __init__(self, artifact_dir: str | Path, weights: dict[str, Any], *, profile_capacity: int | None = None,
                 timeout_s: float = 30.0):
        self.path = Path(artifact_dir)
        try:
            info = json.loads((self.path / MODEL_JSON).read_text())
        except OSError:
            raise ModelArtifactError(f"{self.path}: no {MODEL_JSON} (not a model artifact; compile one with "
                                     "`event-tensor compile`)") from None
        self.config = ModelConfig.from_dict(info["config"])
        self.layout = info["layout"]
        self.artifact = runtime.load(self.path)
        self.device = "cuda" if self.artifact.target == "cuda" else "cpu"
        options = {"timeout_s": timeout_s}
        if profile_capacity:
            options["trace_capacity"] = profile_capacity
        self.launcher = self.artifact.launcher(**options)
        self.max_batch = int(self.layout["max_batch"])
        self.max_context = int(self.layout["max_context"])
        self._alloc(pack(self.config, weights) if "model.embed_tokens.weight" in weights else weights)
        self.batch = 0
        self.last_step_s = 0.0

    # -- buffers -----------------------------------------------------------

    def _to_device(self, array: np.ndarray):
        if self.device == "cpu":
            return np.ascontiguousarray(array)
        import torch

        a = np.ascontiguousarray(array)
        if a.dtype == BF16:
            return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).cuda()
        return torch.from_numpy(a).cuda()

    def _zeros(self, shape, dtype: str):
        if self.device == "cpu":
            return np.zeros(shape, {"f32": np.float32, "bf16": BF16, "i32": np.int32}[dtype])
        import torch

        return torch.zeros(shape, dtype={"f32": torch.float32, "bf16": torch.bfloat16, "i32": torch.int32}[dtype],
                           device="cuda")

    def _alloc(self, packed: dict[str, np.ndarray]) -> None:
        c, lay = self.config, self.layout
        specs = {a["name"]: a for a in self.artifact.metadata["arguments"]}
        self.arg_names = [a["name"] for a in self.artifact.metadata["arguments"]]
        self.buffers: dict[str, Any] = {}
        for name, array in packed.items():
            if name not in specs:
                continue
            want = specs[name]["shape"]
            if list(array.shape) != want:
                raise ValueError(f"weight '{name}' has shape {list(array.shape)}, the artifact expects {want}")
            self.buffers[name] = self._to_device(array)
        missing = [n for n in self.arg_names if n not in self.buffers and n not in self._scratch_names()
                   and n not in ("batch", "tokens", "positions")]
        if missing:
            raise ValueError(f"no weights for kernel arguments: {', '.join(missing)}")
        b, s = self.max_batch, self.max_context
        hq, hkv, d, h, i, v = c.num_heads, c.num_kv_heads, c.head_dim, c.hidden_size, c.intermediate_size, c.vocab_size
        splits, chunks = -(-s // lay["split_len"]), lay["argmax_chunks"]
        cache = (c.num_layers, b, s, hkv, d)
        self.buffers["k_cache"] = self._zeros(cache, "bf16")
        self.buffers["v_cache"] = self._zeros(cache, "bf16")
        shapes = {"tokens": ((b,), "i32"), "positions": ((b,), "i32"), "h": ((b, h), "f32"), "xn": ((b, h), "bf16"),
                  "q": ((b, hq, d), "f32"), "k": ((b, hkv, d), "f32"), "v": ((b, hkv, d), "f32"),
                  "o_part": ((b, splits, hq, d), "f32"), "lse": ((b, splits, hq), "f32"),
                  "attn": ((b, hq, d), "bf16"), "a": ((b, h), "f32"), "g": ((b, i), "f32"), "u": ((b, i), "f32"),
                  "act": ((b, i), "bf16"), "mo": ((b, h), "f32"), "logits": ((b, v), "f32"),
                  "part_val": ((b, chunks), "f32"), "part_idx": ((b, chunks), "i32"),
                  "next_val": ((b, 1), "f32"), "next_token": ((b, 1), "i32")}
        for name, (shape, dtype) in shapes.items():
            self.buffers[name] = self._zeros(shape, dtype)

    @staticmethod
    def _scratch_names() -> set[str]:
        return {"k_cache", "v_cache", "h", "xn", "q", "k", "v", "o_part", "lse", "attn", "a", "g", "u", "act", "mo",
                "logits", "part_val", "part_idx", "next_val", "next_token"}

    def reset(self) -> None:
        """Forgets every sequence (clears the KV caches)."""
        for name in ("k_cache", "v_cache"):
            buf = self.buffers[name]
            if self.device == "cpu":
                buf[...] = 0
            else:
                buf.zero_()

    # -- running -----------------------------------------------------------

    def _arguments(self, batch: int) -> list:
        args = []
        for name in self.arg_names:
            if name == "batch":
                args.append(batch)
                continue
            buf = self.buffers[name]
            spec_shape = next(a["shape"] for a in self.artifact.metadata["arguments"] if a["name"] == name)
            args.append(buf[:batch] if spec_shape and spec_shape[0] == -1 else buf)
        return args

    def _check(self, tokens: Sequence[int], positions: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        tokens = np.asarray(tokens, np.int64).reshape(-1)
        positions = np.asarray(positions, np.int64).reshape(-1)
        n = len(tokens)
        if n < 1 or n > self.max_batch:
            raise ValueError(f"batch size {n} is outside [1, {self.max_batch}] (the compiled max_batch)")
        if len(positions) != n:
            raise ValueError(f"{n} tokens but {len(positions)} positions")
        if (tokens < 0).any() or (tokens >= self.config.vocab_size).any():
            bad = int(tokens[(tokens < 0) | (tokens >= self.config.vocab_size)][0])
            raise ValueError(f"token id {bad} is outside the vocabulary [0, {self.config.vocab_size})")
        if (positions < 0).any() or (positions >= self.max_context).any():
            bad = int(positions[(positions < 0) | (positions >= self.max_context)][0])
            raise ValueError(f"position {bad} is outside the compiled context [0, {self.max_context})")
        return tokens.astype(np.int32), positions.astype(np.int32)

    def step(self, tokens: Sequence[int], positions: Sequence[int]) -> np.ndarray:
        tok, pos = self._check(tokens, positions)
        n = len(tok)
        if self.device == "cpu":
            self.buffers["tokens"][:n] = tok
            self.buffers["positions"][:n] = pos
        else:
            import torch

            self.buffers["tokens"][:n].copy_(torch.from_numpy(tok))
            self.buffers["positions"][:n].copy_(torch.from_numpy(pos))
        start = time.perf_counter()
        self.launcher(*self._arguments(n))
        self.last_step_s = time.perf_counter() - start
        self.batch = n
        return self.next_tokens()

    def next_tokens(self) -> np.ndarray:
        t = self.buffers["next_token"][: self.batch, 0]
        return np.asarray(t if self.device == "cpu" else t.cpu().numpy()).astype(np.int64)

    def last_logits(self) -> np.ndarray:
        t = self.buffers["logits"][: self.batch]
        return np.array(t if self.device == "cpu" else t.cpu().numpy(), dtype=np.float32)

    @property
    def last_trace(self):
        return getattr(self.launcher, "last_trace", None)

    def prefill(self, prompts: Sequence[Sequence[int]]) -> np.ndarray:
        """Feeds each sequence's prompt one position per step (all
        sequences together, decode tiles); returns the greedy token after
        each prompt. Prompts must have the same length."""
        lengths = {len(p) for p in prompts}
        if len(lengths) != 1 or 0 in lengths:
            raise ValueError(f"prompts must be non-empty and of one length, got lengths {sorted(lengths)}")
        prompts = np.asarray(prompts, np.int64)
        out = None
        for t in range(prompts.shape[1]):
            out = self.step(prompts[:, t], [t] * len(prompts))
        return out

    def generate(self, prompts: Sequence[Sequence[int]], steps: int) -> tuple[np.ndarray, list[float]]:
        """Greedy decoding: the prompt, then `steps` new tokens per
        sequence. Returns (tokens [batch, steps], seconds per decode step)."""
        nxt = self.prefill(prompts)
        start = len(prompts[0])
        if start + steps > self.max_context:
            raise ValueError(f"prompt length {start} + {steps} steps exceeds the compiled context {self.max_context}")
        out, times = [], []
        for s in range(steps):
            out.append(nxt)
            if s == steps - 1:
                break
            nxt = self.step(nxt, [start + s] * len(nxt))
            times.append(self.last_step_s)
        return np.stack(out, axis=1), times

    def close(self) -> None:
        close = getattr(self.launcher, "close", None)
        if close:
            close()
