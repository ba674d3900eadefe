"""Hugging Face transformers as a reference: the model of a `ModelConfig`
with given weights (`hf_model`), and a step-by-step reference over it
(`TransformersReference`) for `event-tensor run --check transformers`.

transformers and torch are optional: importing this module does not need
them; building a model does, and says so."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .config import ModelConfig

__all__ = ["TransformersReference", "hf_model"]


def _torch():
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as err:
        raise ImportError("comparing with Hugging Face transformers needs the `torch` and `transformers` "
                          f"packages ({err})") from None
    return torch


def hf_model(config: ModelConfig, weights: dict, *, dtype=None, attn: str = "eager", device: str = "cuda"):
    """transformers' LlamaForCausalLM / Qwen3ForCausalLM / Qwen3MoeForCausalLM
    for `config`, with `weights` (Hugging Face names; torch tensors or numpy
    arrays) cast to `dtype` (default float32); `attn` is the attention
    implementation ("eager", "sdpa"). Checks that both rotate by the same
    RoPE frequencies."""
    torch = _torch()
    import transformers

    dtype = dtype or torch.float32
    hf = config.to_hf()
    arch = hf["architectures"][0]
    cfg_cls = {"LlamaForCausalLM": transformers.LlamaConfig, "Qwen3ForCausalLM": transformers.Qwen3Config,
               "Qwen3MoeForCausalLM": transformers.Qwen3MoeConfig}[arch]
    model_cls = getattr(transformers, arch)
    kwargs = {k: v for k, v in hf.items() if k not in ("architectures", "model_type", "torch_dtype")}
    # Newer transformers take RoPE settings as one `rope_parameters` dict.
    rope = {"rope_type": "default", "rope_theta": config.rope_theta}
    if config.rope_scaling:
        f, lo, hi, orig = config.rope_scaling
        rope.update(rope_type="llama3", factor=f, low_freq_factor=lo, high_freq_factor=hi,
                    original_max_position_embeddings=int(orig))
    if "rope_parameters" in getattr(cfg_cls, "__dataclass_fields__", {}) or hasattr(cfg_cls(), "rope_parameters"):
        kwargs.pop("rope_theta", None)
        kwargs.pop("rope_scaling", None)
        kwargs["rope_parameters"] = rope
    cfg = cfg_cls(**kwargs)
    cfg._attn_implementation = attn
    # Built without storage and given the weights' tensors (`assign`): a
    # model initialized at random in float32 and then overwritten held its
    # size twice over (122 GB for Qwen3-30B-A3B).
    with torch.device("meta"):
        model = model_cls(cfg)

    def tensor(v):
        if not isinstance(v, torch.Tensor):
            v = torch.from_numpy(np.asarray(v).astype(np.float32))
        return v.to(device=device, dtype=dtype)

    state = _fused_experts(model, {k: tensor(v) for k, v in weights.items()})
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    del state
    missing = [m for m in missing if not (m == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise RuntimeError(f"state dict mismatch: missing {missing[:3]}, unexpected {unexpected[:3]}")
    if config.tie_word_embeddings:
        model.tie_weights()
    # The rotary embedding's frequencies, computed at construction (float32:
    # a cast to `dtype` would round them).
    with torch.device(device):
        model.model.rotary_emb = type(model.model.rotary_emb)(cfg)
    left = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if left:
        raise RuntimeError(f"transformers' model has tensors without weights: {left[:3]}")
    # Both must rotate by the same frequencies.
    from .reference import _inv_freq

    inv = model.model.rotary_emb.inv_freq.double().cpu().numpy()
    ours = _inv_freq(config)
    if not np.allclose(inv, ours, rtol=1e-5):
        raise RuntimeError(f"transformers' RoPE frequencies differ from ours: {inv[:4]} vs {ours[:4]}")
    return model.eval()


def _fused_experts(model, state: dict) -> dict:
    """The checkpoint's per-expert tensors (mlp.experts.E.gate_proj, ...) in
    the form of `model`'s parameters, where it holds an expert layer's
    weights as two 3-D tensors (gate_up_proj [E, 2I, H], the gate rows
    first, and down_proj [E, H, I]). Consumes `state`: a layer's
    per-expert tensors are dropped from it once its fused ones are made
    (freed then, unless the caller holds them too)."""
    import torch

    params = dict(model.named_parameters())
    out = state
    for name in params:
        if not name.endswith(".mlp.experts.gate_up_proj"):
            continue
        prefix = name[: -len("gate_up_proj")]
        experts = params[name].shape[0]
        gate = [out.pop(f"{prefix}{e}.gate_proj.weight") for e in range(experts)]
        up = [out.pop(f"{prefix}{e}.up_proj.weight") for e in range(experts)]
        down = [out.pop(f"{prefix}{e}.down_proj.weight") for e in range(experts)]
        out[name] = torch.stack([torch.cat([g, u]) for g, u in zip(gate, up)])
        out[prefix + "down_proj"] = torch.stack(down)
    return out


class TransformersReference:
    """transformers in float32 on the CPU as a decode reference with the
    interface of `ReferenceModel.step`: each row's tokens by position, the
    logits of each row's last token (the whole sequence recomputed every
    step: a check, not a fast path)."""

    def __init__(self, config: ModelConfig, weights: dict, *, max_batch: int):
        self.torch = _torch()
        self.model = hf_model(config, weights, device="cpu")
        self.rows: list[list[int]] = [[] for _ in range(max_batch)]

    def step(self, tokens: Sequence[int], positions: Sequence[int], slots: Sequence[int] | None = None) -> np.ndarray:
        slots = list(range(len(tokens))) if slots is None else list(slots)
        out = []
        with self.torch.no_grad():
            for token, position, slot in zip(tokens, positions, slots):
                row = self.rows[slot][:int(position)]
                if len(row) != int(position):
                    raise ValueError(f"row {slot}: position {position} after {len(self.rows[slot])} tokens")
                row.append(int(token))
                self.rows[slot] = row
                logits = self.model(self.torch.tensor([row])).logits[0, -1]
                out.append(logits.float().numpy())
        return np.stack(out)
