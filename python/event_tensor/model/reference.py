"""A numpy (float32) reference of the Llama-3 / Qwen3 (and Qwen3-MoE) decode step, for
checks in CI. With `bf16_activations=True` it rounds where the megakernel
rounds (linear-layer inputs and the KV cache are bf16), so the two agree
to float32 accumulation-order error; without it, activations stay
float32 throughout. `norm_in_linear` (True, or a list of "qkv", "mlp",
"lm_head", "router") matches kernels whose linear tiles read the residual stream
through their norm (`compile_model(..., norm_in_linear=...)`: `et.linear
... norm`): there the rounded input of those layers is h times the norm
weights, and the inverse RMS scales the result in float32. No MLIR
here."""

from __future__ import annotations

import numpy as np

from .config import ModelConfig
from .layout import cache_shape
from .weights import BF16, pack

__all__ = ["ReferenceModel"]


def _bf16(x: np.ndarray) -> np.ndarray:
    return x.astype(BF16).astype(np.float32)


def _rmsnorm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    x = x.astype(np.float32)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(eps)) * w


def _inv_freq(config: ModelConfig) -> np.ndarray:
    d = config.head_dim
    inv = (config.rope_theta ** (-2.0 * np.arange(d // 2) / d)).astype(np.float64)
    if config.rope_scaling:
        factor, low, high, orig = config.rope_scaling
        wavelen = 2 * np.pi / inv
        smooth = (orig / wavelen - low) / (high - low)
        mid = (1 - smooth) * inv / factor + smooth * inv
        inv = np.where(wavelen < orig / high, inv, np.where(wavelen > orig / low, inv / factor, mid))
    return inv


def _rope(x: np.ndarray, pos: int, inv: np.ndarray) -> np.ndarray:
    """x: heads x D, rotate-half form."""
    d = x.shape[-1]
    ang = pos * inv
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    x1, x2 = x[:, : d // 2], x[:, d // 2:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


class ReferenceModel:
    """Holds float32 weights and a KV cache per sequence; `step` runs one
    decode step for a batch and returns the logits (batch x vocab)."""

    def __init__(self, config: ModelConfig, weights: dict[str, np.ndarray], *, max_batch: int, max_context: int,
                 bf16_activations: bool = True, norm_in_linear=False):
        self.config = config
        self.w = {k: np.asarray(v).astype(np.float32) for k, v in pack(config, weights).items()}
        c = config
        self.max_batch, self.max_context = max_batch, max_context
        self.round = _bf16 if bf16_activations else (lambda x: x.astype(np.float32))
        self.norm_in_linear = norm_in_linear  # read by each step
        shape = cache_shape(c.num_layers, max_batch, max_context, c.num_kv_heads, c.head_dim)
        self.k_cache = np.zeros(shape, np.float32)
        self.v_cache = np.zeros(shape, np.float32)
        self.inv_freq = _inv_freq(c)
        #: With experts: the experts each row of the last step chose, per layer.
        self.routes: dict[int, np.ndarray] = {}

    def _norm(self, h: np.ndarray, w: np.ndarray, kind: str) -> np.ndarray:
        """A linear layer's normalized input: rmsnorm(h) * w rounded, or
        with norm_in_linear (True, or a list naming `kind`) (h * w)
        rounded, times the inverse RMS."""
        nil = self.norm_in_linear
        if not (nil is True or (not isinstance(nil, bool) and kind in nil)):
            return self.round(_rmsnorm(h, w, self.config.rms_norm_eps))
        h = h.astype(np.float32)
        inv = 1 / np.sqrt(np.mean(h * h, axis=-1, keepdims=True) + np.float32(self.config.rms_norm_eps))
        return self.round(h * w) * inv

    def route(self, layer: int, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The experts each row of the router input x goes to, best
        first (ties to the smaller index), and their weights: softmax
        probabilities, renormalized over the chosen with norm_topk_prob."""
        c = self.config
        logits = x @ self.w["router"][layer].T
        p = np.exp(logits - logits.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        ids = np.argsort(-p, axis=-1, kind="stable")[:, :c.num_experts_per_tok]
        weights = np.take_along_axis(p, ids, axis=-1)
        if c.norm_topk_prob:
            weights = weights / weights.sum(axis=-1, keepdims=True)
        return ids, weights.astype(np.float32)

    def _experts(self, layer: int, h: np.ndarray) -> np.ndarray:
        """The MLP of a layer with experts: each row's chosen experts'
        outputs times their weights, added in the router's order. The
        router's input is that of the "router" kind of `norm_in_linear`,
        the experts' the normalized rows, rounded."""
        w, r = self.w, self.round
        ids, weights = self.route(layer, self._norm(h, w["ln2"][layer], "router"))
        x = r(_rmsnorm(h, w["ln2"][layer], self.config.rms_norm_eps))
        self.routes[layer] = ids
        out = np.zeros((x.shape[0], self.config.hidden_size), np.float32)
        for b in range(x.shape[0]):
            for e, weight in zip(ids[b], weights[b]):
                gate, up = x[b] @ w["exp_gate"][layer, e].T, x[b] @ w["exp_up"][layer, e].T
                act = r(gate / (1 + np.exp(-gate)) * up)
                out[b] += weight * (act @ w["exp_down"][layer, e].T)
        return out

    def step(self, tokens, positions, slots=None) -> np.ndarray:
        """One launch's rows: token, position and cache slot per row (slots
        default to 0..n-1). All rows' keys and values are appended before any
        row attends."""
        c, w, r = self.config, self.w, self.round
        tokens = np.asarray(tokens, np.int64)
        positions = np.asarray(positions, np.int64)
        b_count = len(tokens)
        slots = np.arange(b_count) if slots is None else np.asarray(slots, np.int64)
        hq, hkv, d, g = c.num_heads, c.num_kv_heads, c.head_dim, c.group_size
        h = w["embed"][tokens].copy()
        for layer in range(c.num_layers):
            x = self._norm(h, w["ln1"][layer], "qkv")
            q = (x @ w["wq"][layer].T).reshape(b_count, hq, d)
            k = (x @ w["wk"][layer].T).reshape(b_count, hkv, d)
            v = (x @ w["wv"][layer].T).reshape(b_count, hkv, d)
            qs = []
            for b in range(b_count):
                p, s = int(positions[b]), int(slots[b])
                qb, kb = q[b], k[b]
                if c.qk_norm:
                    qb = _rmsnorm(qb, w["q_norm"][layer], c.rms_norm_eps)
                    kb = _rmsnorm(kb, w["k_norm"][layer], c.rms_norm_eps)
                qs.append(_rope(qb, p, self.inv_freq))
                self.k_cache[s, p, layer] = r(_rope(kb, p, self.inv_freq))
                self.v_cache[s, p, layer] = r(v[b])
            attn = np.zeros((b_count, hq, d), np.float32)
            for b in range(b_count):
                p, s = int(positions[b]), int(slots[b])
                keys = self.k_cache[s, : p + 1, layer]  # T x Hkv x D
                vals = self.v_cache[s, : p + 1, layer]
                for head in range(hq):
                    sc = keys[:, head // g] @ qs[b][head] / np.float32(np.sqrt(d))
                    e = np.exp(sc - sc.max())
                    attn[b, head] = e @ vals[:, head // g] / e.sum()
            h = h + r(attn).reshape(b_count, hq * d) @ w["wo"][layer].T
            if c.moe:
                h = h + self._experts(layer, h)
                continue
            x = self._norm(h, w["ln2"][layer], "mlp")
            gate, up = x @ w["wg"][layer].T, x @ w["wu"][layer].T
            act = r(gate / (1 + np.exp(-gate)) * up)
            h = h + act @ w["wd"][layer].T
        x = self._norm(h, w["final_norm"], "lm_head")
        return x @ w["lm_head"].T
