"""Timing, bandwidth and random-weight helpers shared by the GPU benchmark
scripts (torch CUDA events; imported from the scripts' own folder)."""

import statistics

import torch


def median_seconds(fn, reps=20, warmup=3):
    """Median time of `fn()` in seconds, between CUDA events, after warm-up."""
    return batched_seconds(fn, inner=1, reps=reps, warmup=warmup)


def batched_seconds(fn, inner=20, reps=7, warmup=3):
    """Median seconds per call of `fn()` when `inner` calls run back to back
    between two CUDA events (the host's launch work overlaps the device's
    instead of adding to every call), over `reps` batches."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3 / inner)
    return statistics.median(times)


def launch_seconds(launch, *args, reps=20, warmup=3, inner=1):
    """Median seconds of one kernel launch: the arguments are packed once
    (`launch.bind`), so no Python work sits between the timing events; then
    the launcher's error check. With `inner` > 1, per launch of `inner`
    launches back to back (see batched_seconds)."""
    seconds = batched_seconds(launch.bind(*args), inner=inner, reps=reps, warmup=warmup)
    launch.check()
    return seconds


def copy_bandwidth(elements=1 << 29):
    """Device copy bandwidth in bytes/s (bytes read plus written), 1 GiB of bf16."""
    src = torch.empty(elements, dtype=torch.bfloat16, device="cuda").normal_()
    dst = torch.empty_like(src)
    seconds = median_seconds(lambda: dst.copy_(src))
    return 2 * src.numel() * src.element_size() / seconds


def kv_bytes(config, batch: int, context: int) -> int:
    """The KV-cache bytes a decode step of `batch` rows reads at `context`
    positions each (K and V, bf16, every layer)."""
    return 2 * config.num_layers * batch * context * config.num_kv_heads * config.head_dim * 2


def random_model_weights(config, seed):
    """Random bf16 weights of a model config on the GPU, under Hugging Face
    names: matrices normal with std 1/sqrt(fan-in), norms around 1 (the
    distribution of event_tensor.model.random_weights, drawn with torch)."""
    from event_tensor.model import hf_tensor_shapes

    g = torch.Generator(device="cuda").manual_seed(seed)
    out = {}
    for name, shape in hf_tensor_shapes(config).items():
        if len(shape) == 1:
            t = 1.0 + 0.1 * torch.randn(shape, device="cuda", generator=g)
        else:
            t = torch.randn(shape, device="cuda", generator=g) / shape[1] ** 0.5
        out[name] = t.to(torch.bfloat16)
    return out


def pack_torch(config, weights):
    """weights.pack with torch tensors (stacked on the GPU)."""
    def stack(suffix):
        return torch.stack([weights[f"model.layers.{i}.{suffix}"] for i in range(config.num_layers)]).contiguous()

    packed = {"embed": weights["model.embed_tokens.weight"], "ln1": stack("input_layernorm.weight"),
              "wq": stack("self_attn.q_proj.weight"), "wk": stack("self_attn.k_proj.weight"),
              "wv": stack("self_attn.v_proj.weight"), "wo": stack("self_attn.o_proj.weight"),
              "ln2": stack("post_attention_layernorm.weight"), "wg": stack("mlp.gate_proj.weight"),
              "wu": stack("mlp.up_proj.weight"), "wd": stack("mlp.down_proj.weight"),
              "final_norm": weights["model.norm.weight"]}
    packed["lm_head"] = packed["embed"] if config.tie_word_embeddings else weights["lm_head.weight"]
    if config.qk_norm:
        packed["q_norm"] = stack("self_attn.q_norm.weight")
        packed["k_norm"] = stack("self_attn.k_norm.weight")
    return packed


#: The packed weights that are vectors per layer (norm weights).
PACKED_NORMS = ("ln1", "ln2", "final_norm", "q_norm", "k_norm")


def random_packed_weights(arguments, seed):
    """Random bf16 weights on the GPU in the kernel's packed layout, for
    the weight arguments among an artifact's `arguments` (metadata), with
    the distribution of random_model_weights (std 1/sqrt(fan-in), the last
    dimension; norms around 1): for models too large to hold twice (under
    Hugging Face names and packed)."""
    from event_tensor.model.weights import MOE_PACKED, PACKED_ORDER

    names = set(PACKED_ORDER) | set(MOE_PACKED) | set(PACKED_NORMS)
    g = torch.Generator(device="cuda").manual_seed(seed)
    out = {}
    for spec in arguments:
        name, shape = spec["name"], spec.get("shape")
        if name not in names or not shape:
            continue
        t = torch.empty(shape, device="cuda", dtype=torch.bfloat16)
        for part in t.view(-1, shape[-1]).split(1 << 14):  # bounded float32 temporaries
            if name in PACKED_NORMS:
                part.copy_(1.0 + 0.1 * torch.randn(part.shape, device="cuda", generator=g))
            else:
                part.copy_(torch.randn(part.shape, device="cuda", generator=g) / shape[-1] ** 0.5)
        out[name] = t
    return out


def to_numpy_bf16(tensors):
    """torch bf16 tensors -> numpy arrays of ml_dtypes.bfloat16 (host)."""
    from event_tensor.model.weights import BF16

    return {k: v.view(torch.int16).cpu().numpy().view(BF16) for k, v in tensors.items()}


def save_trace(trace, out, stem: str, title: str, results: dict, key: str) -> None:
    """A profiled launch's trace: `stem`.trace.json (Chrome) and
    `stem`.gantt.png under `out`, the time per task kind in
    results["breakdown"][key], and a table of it on stdout."""
    from pathlib import Path

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    trace.chrome_trace(out / f"{stem}.trace.json")
    trace.gantt_png(out / f"{stem}.gantt.png", title=title)
    kinds = trace.breakdown()
    total = trace.workers * trace.makespan_ns
    results.setdefault("breakdown", {})[key] = {"makespan_us": trace.makespan_ns / 1e3, "kinds": kinds}
    print(f"  trace: makespan {trace.makespan_ns / 1e3:.1f} us; per task kind (work / wait, % of "
          f"{trace.workers} workers x makespan):")
    for kind, row in sorted(kinds.items(), key=lambda kv: -(kv[1]["wait_ns"] + kv[1]["work_ns"])):
        print(f"    {kind:12s} {row['tiles']:6d} tiles  work {100 * row['work_ns'] / total:5.1f}%  "
              f"wait {100 * row['wait_ns'] / total:5.1f}%")
