"""Hugging Face transformers models built from an EventTensor ModelConfig and
its random weights, for the GPU benchmark scripts: the float32 reference of
check_transformers.py and the peers of decode.py (transformers eager and
torch.compile with CUDA graphs). Imported from the scripts' own folder."""

import time

import numpy as np
import torch

from event_tensor.model import ModelConfig


def hf_model(config: ModelConfig, weights: dict, *, dtype=torch.float32, attn: str = "eager",
             device: str = "cuda"):
    """transformers' LlamaForCausalLM / Qwen3ForCausalLM for `config`, with
    `weights` (Hugging Face names) cast to `dtype`; `attn` is the attention
    implementation ("eager", "sdpa")."""
    import transformers

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
    with torch.device(device):
        model = model_cls(cfg)
    # The RoPE frequencies stay float32 (a plain .to(dtype) would round them).
    rotary = model.model.rotary_emb
    kept = {n: b.clone() for n, b in rotary.named_buffers(recurse=False)}
    model = model.to(dtype)
    for n, b in kept.items():
        setattr(rotary, n, b)
    state = _fused_experts(model, {k: v.to(device=device, dtype=dtype) for k, v in weights.items()})
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if not (m == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise RuntimeError(f"state dict mismatch: missing {missing[:3]}, unexpected {unexpected[:3]}")
    if config.tie_word_embeddings:
        model.tie_weights()
    # Both must rotate by the same frequencies.
    from event_tensor.model.reference import _inv_freq

    inv = model.model.rotary_emb.inv_freq.double().cpu().numpy()
    ours = _inv_freq(config)
    if not np.allclose(inv, ours, rtol=1e-5):
        raise RuntimeError(f"transformers' RoPE frequencies differ from ours: {inv[:4]} vs {ours[:4]}")
    return model.eval()


def _fused_experts(model, state: dict) -> dict:
    """The checkpoint's per-expert tensors (mlp.experts.E.gate_proj, ...) in
    the form of `model`'s parameters, where it holds an expert layer's
    weights as two 3-D tensors (gate_up_proj [E, 2I, H], the gate rows
    first, and down_proj [E, H, I])."""
    params = dict(model.named_parameters())
    out = dict(state)
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


class PeerDecoder:
    """One decode step of a transformers model in bf16 with a static KV cache
    of `context` positions, filled by a random prompt of `context - 1` tokens;
    each step decodes the token at position `context - 1` (the same shape as
    the megakernel's timed step). With `compiled`, the forward is
    torch.compile(mode="reduce-overhead", fullgraph=True): CUDA graphs."""

    def __init__(self, config: ModelConfig, weights: dict, *, batch: int, context: int, compiled: bool,
                 device: str = "cuda", seed: int = 0):
        from transformers import StaticCache

        self.model = hf_model(config, weights, dtype=torch.bfloat16, attn="sdpa", device=device)
        self.device = device
        g = torch.Generator(device="cpu").manual_seed(seed)
        self.cache = StaticCache(config=self.model.config, max_cache_len=context)
        with torch.no_grad():
            if context > 1:
                prompt = torch.randint(0, config.vocab_size, (batch, context - 1), generator=g).to(device)
                self.model(input_ids=prompt, past_key_values=self.cache,
                           cache_position=torch.arange(context - 1, device=device), use_cache=True)
        self.ids = torch.randint(0, config.vocab_size, (batch, 1), generator=g).to(device)
        self.position = torch.tensor([context - 1], device=device)
        self.context = context
        self.forward = self.model.forward
        if compiled:
            self.forward = torch.compile(self.model.forward, mode="reduce-overhead", fullgraph=True)

    def rewind(self):
        """Back to position `context - 1`: the static cache counts its
        filled positions itself, so each timed step would otherwise move
        one further (a small kernel; call it outside the timed interval)."""
        for layer in self.cache.layers:
            filled = getattr(layer, "cumulative_length", None)
            if isinstance(filled, torch.Tensor):
                filled.fill_(self.context - 1)

    def step(self):
        with torch.no_grad():
            return self.forward(input_ids=self.ids, past_key_values=self.cache, cache_position=self.position,
                                use_cache=True).logits

    def warm_up(self, calls: int = 3) -> float:
        """Seconds for the first `calls` steps (compilation and CUDA-graph
        capture for a compiled forward)."""
        t0 = time.perf_counter()
        for _ in range(calls):
            self.rewind()
            self.step()
        if self.device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0


class PeerGenerator:
    """Greedy generation with a transformers model in bf16 and a static KV
    cache: the prompt through the eager forward, then one step per new
    token, each feeding its argmax back on the device (no host round trip
    per token). With `compiled`, the step is torch.compile(mode=
    "reduce-overhead", fullgraph=True): CUDA graphs, its inputs updated in
    place."""

    def __init__(self, config: ModelConfig, weights: dict, prompts: torch.Tensor, new_tokens: int, *,
                 compiled: bool, device: str = "cuda"):
        from transformers import StaticCache

        self.model = hf_model(config, weights, dtype=torch.bfloat16, attn="sdpa", device=device)
        self.prompts = prompts.to(device)
        self.new_tokens = new_tokens
        self.length = prompts.shape[1]
        self.cache = StaticCache(config=self.model.config, max_cache_len=self.length + new_tokens)
        self.ids = torch.zeros((prompts.shape[0], 1), dtype=torch.long, device=device)
        self.position = torch.zeros(1, dtype=torch.long, device=device)
        self.forward = self.model.forward
        self.compiled = compiled
        if compiled:
            self.forward = torch.compile(self.model.forward, mode="reduce-overhead", fullgraph=True)

    def generate(self) -> tuple[torch.Tensor, float, float]:
        """(The new tokens [batch, new_tokens], seconds of the prefill,
        seconds of the decode after it), wall clock."""
        with torch.no_grad():
            self.cache.reset()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            logits = self.model(input_ids=self.prompts, past_key_values=self.cache,
                                cache_position=torch.arange(self.length, device=self.prompts.device),
                                use_cache=True).logits
            out = [logits[:, -1].argmax(-1)]
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            self.position.fill_(self.length)
            for _ in range(self.new_tokens - 1):
                self.ids.copy_(out[-1][:, None])
                if self.compiled:
                    torch.compiler.cudagraph_mark_step_begin()
                logits = self.forward(input_ids=self.ids, past_key_values=self.cache, cache_position=self.position,
                                      use_cache=True).logits
                out.append(logits[:, -1].argmax(-1))
                self.position.add_(1)
            tokens = torch.stack(out, 1).cpu()
            t2 = time.perf_counter()
        return tokens, t1 - t0, t2 - t1
