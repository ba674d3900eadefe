"""float64 numpy references of the tile compute ops, shared by the CPU tests
and the GPU suite (no MLIR, numpy only)."""

from __future__ import annotations

import numpy as np

__all__ = ["attention", "head_rmsnorm", "logit_bias", "penalize", "prefill_attention", "rope", "sampling_filter_probs",
           "top_logprobs"]


def rope(x, positions, theta, llama3_scaling=None):
    """Rotary embedding (rotate-half form) of `x` (M x heads x D)."""
    d = x.shape[-1]
    inv = theta ** (-2.0 * np.arange(d // 2) / d)
    if llama3_scaling:
        factor, low, high, orig = llama3_scaling
        wavelen = 2 * np.pi / inv
        smooth = (orig / wavelen - low) / (high - low)
        mid = (1 - smooth) * inv / factor + smooth * inv
        inv = np.where(wavelen < orig / high, inv, np.where(wavelen > orig / low, inv / factor, mid))
    ang = np.asarray(positions, np.float64)[:, None, None] * inv[None, None, :]
    x1 = x[..., : d // 2].astype(np.float64)
    x2 = x[..., d // 2:].astype(np.float64)
    return np.concatenate([x1 * np.cos(ang) - x2 * np.sin(ang), x2 * np.cos(ang) + x1 * np.sin(ang)], axis=-1)


def head_rmsnorm(x, w, eps):
    """RMSNorm of each head (the last axis) of `x` with weights `w`."""
    x = np.asarray(x, np.float64)
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * np.asarray(w, np.float64)


def attention(q, k, v, length):
    """Grouped-query decode attention of `q` (Hq x D) over the first `length`
    positions of the caches (S x Hkv x D), scale 1/sqrt(D)."""
    hq, d = q.shape
    group = hq // k.shape[1]
    out = np.zeros((hq, d))
    for h in range(hq):
        kk = k[:length, h // group].astype(np.float64)
        s = kk @ q[h].astype(np.float64) / np.sqrt(d)
        p = np.exp(s - s.max())
        out[h] = p @ v[:length, h // group].astype(np.float64) / p.sum()
    return out


def prefill_attention(q, k, v, pos0):
    """Causal grouped-query attention of the prompt queries `q` (T x Hq x D),
    token t at position pos0 + t, over the caches (S x Hkv x D) that already
    hold the prompt's keys and values; scale 1/sqrt(D)."""
    return np.stack([attention(q[t], k, v, pos0 + t + 1) for t in range(q.shape[0])])


def sampling_filter_probs(logits, temperature, top_k=0, top_p=1.0, min_p=0.0):
    """The distribution that sampling at `temperature` after the top-k,
    top-p and min-p filters draws from, as Hugging Face transformers'
    warpers compute it (in that order; ties at the k-th value kept)."""
    y = np.asarray(logits, np.float64) / temperature
    keep = np.isfinite(y)
    if 0 < top_k < len(y):
        keep &= y >= np.sort(y)[-top_k]
    if 0 < top_p < 1:
        w = np.where(keep, np.exp(y - y[keep].max()), 0.0)
        w /= w.sum()
        order = np.argsort(-y, kind="stable")
        above = np.concatenate([[0.0], np.cumsum(w[order])[:-1]])
        nucleus = np.zeros_like(keep)
        nucleus[order] = above < top_p
        keep &= nucleus
    if min_p > 0:
        keep &= y >= y[np.isfinite(y)].max() + np.log(min_p)
    w = np.where(keep, np.exp(y - y[keep].max()), 0.0)
    return w / w.sum()


def logit_bias(logits, ids, values):
    """The logits with `values[k]` added to the logit of id `ids[k]` for each
    k whose id is in the vocabulary (`et.logit_bias`; entries of one id add
    up)."""
    x = np.array(logits, np.float64)
    ids, values = np.asarray(ids, np.int64), np.asarray(values, np.float64)
    inside = (ids >= 0) & (ids < len(x))
    np.add.at(x, ids[inside], values[inside])
    return x


def penalize(logits, tokens, outputs_from, repetition=1.0, frequency=0.0, presence=0.0):
    """The logits after the repetition, frequency and presence penalties of
    a sequence `tokens` whose tokens from index `outputs_from` on were
    generated (`et.penalize`): each id in the sequence has its logit x
    divided by `repetition` if x > 0, else multiplied by it; then each id
    generated c times loses c * frequency + presence."""
    x = np.array(logits, np.float64)
    tokens = np.asarray(tokens, np.int64)
    seen = np.unique(tokens[(tokens >= 0) & (tokens < len(x))])
    x[seen] = np.where(x[seen] > 0, x[seen] / repetition, x[seen] * repetition)
    generated = tokens[outputs_from:]
    counts = np.bincount(generated[(generated >= 0) & (generated < len(x))], minlength=len(x))
    return x - counts * frequency - (counts > 0) * presence


def top_logprobs(logits, n: int):
    """(log-sum-exp, ids, log-probabilities) of a row of logits: its `n`
    most likely ids, largest logit first, equal logits in increasing id
    (`et.top_logprobs`)."""
    x = np.asarray(logits, np.float64)
    top = x.max()
    lse = top + np.log(np.exp(x - top).sum())
    order = np.lexsort((np.arange(len(x)), -x))[:n]
    return lse, order, x[order] - lse
