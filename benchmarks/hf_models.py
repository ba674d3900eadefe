"""Hugging Face transformers models built from an EventTensor ModelConfig and
its random weights, for the GPU benchmark scripts: the float32 reference of
check_transformers.py and the peers of decode.py (transformers eager and
torch.compile with CUDA graphs). Imported from the scripts' own folder."""

import time

import torch

from event_tensor.model import ModelConfig
from event_tensor.model.hf import hf_model  # noqa: F401 (the scripts' import)


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
                           cache_position=torch.arange(context - 1, device=device), use_cache=True,
                           logits_to_keep=1)
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
            # Only the last position's logits, as transformers' generate
            # computes them: at batch 64 and 1024 tokens the full logits of
            # a 128k vocabulary (17-34 GB) ran a Llama-3.1-8B peer out of
            # memory on an H100.
            logits = self.model(input_ids=self.prompts, past_key_values=self.cache,
                                cache_position=torch.arange(self.length, device=self.prompts.device),
                                use_cache=True, logits_to_keep=1).logits
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
