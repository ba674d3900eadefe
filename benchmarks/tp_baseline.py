"""The PyTorch tensor-parallel decode step that benchmarks/tp_decode.py
measures the megakernel against: one process per GPU, Megatron-style
shards (query/KV heads and MLP columns split, o and down row-parallel with
an NCCL all-reduce each, the LM head split by vocabulary with a gathered
argmax), per-operator kernels (cuBLAS matmuls, SDPA over a static KV cache),
the whole step captured in one CUDA graph and replayed.

Random bf16 weights of the model's shapes; the timed step decodes one token
per row at position `context - 1`, attending over `context` cached
positions. NVLink multicast stays off (NCCL_NVLS_ENABLE=0 and the others,
set by `run`)."""

from __future__ import annotations

import os
import statistics

NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def _worker(rank: int, world: int, config: dict, batches: list, context: int, iters: int, port: int, out) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    for k, v in NO_MULTICAST.items():
        os.environ[k] = v
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            device_id=torch.device("cuda", rank))
    dev = torch.device("cuda", rank)
    c = config
    H, I, V, L = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["num_layers"]
    Hq, Hkv, D = c["num_heads"] // world, c["num_kv_heads"] // world, c["head_dim"]
    Il, Vl = I // world, V // world
    eps = c["rms_norm_eps"]
    g = torch.Generator(device=dev).manual_seed(1234 + rank)

    def w(*shape):
        return (torch.randn(*shape, device=dev, generator=g) / shape[-1] ** 0.5).to(torch.bfloat16)

    embed = w(V, H)
    layers = []
    for _ in range(L):
        layers.append(dict(ln1=torch.ones(H, device=dev, dtype=torch.bfloat16), wqkv=w((Hq + 2 * Hkv) * D, H),
                           wo=w(H, Hq * D), ln2=torch.ones(H, device=dev, dtype=torch.bfloat16),
                           wgu=w(2 * Il, H), wd=w(H, Il),
                           qn=torch.ones(D, device=dev, dtype=torch.bfloat16),
                           kn=torch.ones(D, device=dev, dtype=torch.bfloat16)))
    final = torch.ones(H, device=dev, dtype=torch.bfloat16)
    lm_head = w(Vl, H)
    def measure(batch: int) -> float:
        k_cache = torch.randn(L, batch, Hkv, context, D, device=dev, generator=g).to(torch.bfloat16)
        v_cache = torch.randn(L, batch, Hkv, context, D, device=dev, generator=g).to(torch.bfloat16)
        tokens = torch.randint(0, V, (batch,), device=dev, generator=g)
        pos = torch.tensor([context - 1], device=dev)
        inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, D, 2, device=dev, dtype=torch.float32) / D))
        ang = (context - 1) * inv
        cos = torch.cat([ang.cos(), ang.cos()]).to(torch.bfloat16)
        sin = torch.cat([ang.sin(), ang.sin()]).to(torch.bfloat16)
        qk_norm = c["family"] == "qwen3"
        next_token = torch.zeros(batch, dtype=torch.int64, device=dev)
        gathered_val = torch.empty(world, batch, device=dev, dtype=torch.float32)
        gathered_idx = torch.empty(world, batch, device=dev, dtype=torch.int64)

        def rms(x, weight):
            xf = x.float()
            return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight

        def rope(x):
            x1, x2 = x[..., : D // 2], x[..., D // 2:]
            return x * cos + torch.cat([-x2, x1], -1) * sin

        def step():
            h = embed[tokens]
            for l, p in enumerate(layers):
                x = rms(h, p["ln1"])
                qkv = x @ p["wqkv"].T
                q = qkv[:, : Hq * D].view(batch, Hq, D)
                k = qkv[:, Hq * D:(Hq + Hkv) * D].view(batch, Hkv, D)
                v = qkv[:, (Hq + Hkv) * D:].view(batch, Hkv, D)
                if qk_norm:
                    q, k = rms(q, p["qn"]), rms(k, p["kn"])
                q, k = rope(q), rope(k)
                k_cache[l].index_copy_(2, pos, k.unsqueeze(2))
                v_cache[l].index_copy_(2, pos, v.unsqueeze(2))
                a = F.scaled_dot_product_attention(q.unsqueeze(2), k_cache[l], v_cache[l], enable_gqa=True)
                o = a.reshape(batch, Hq * D) @ p["wo"].T
                dist.all_reduce(o)
                h = h + o
                x = rms(h, p["ln2"])
                gu = x @ p["wgu"].T
                d = (F.silu(gu[:, :Il]) * gu[:, Il:]) @ p["wd"].T
                dist.all_reduce(d)
                h = h + d
            logits = rms(h, final) @ lm_head.T
            val, idx = logits.float().max(-1)
            dist.all_gather_into_tensor(gathered_val, val)
            dist.all_gather_into_tensor(gathered_idx, idx + rank * Vl)
            best = gathered_val.argmax(0)
            next_token.copy_(gathered_idx.gather(0, best.unsqueeze(0)).squeeze(0))

        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        torch.cuda.synchronize()
        for _ in range(3):
            graph.replay()
        times = []
        for _ in range(iters):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(10):
                graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 10 * 1e-3)
        return statistics.median(times)

    results = {}
    for batch in batches:
        results[batch] = measure(batch)
        torch.cuda.empty_cache()
    dist.barrier()
    if rank == 0:
        out.put(results)
    dist.destroy_process_group()


def run(config: dict, batches: list, context: int, *, world: int = 2, iters: int = 20, port: int = 29531) -> dict:
    """{batch: seconds per decode step} of the tensor-parallel PyTorch
    baseline on GPUs 0..world-1 (median over `iters` batches of 10 graph
    replays), one process per GPU, the weights made once."""
    import torch.multiprocessing as mp

    for k, v in NO_MULTICAST.items():
        os.environ[k] = v
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, world, config, list(batches), context, iters, port, out))
             for r in range(world)]
    for p in procs:
        p.start()
    import queue

    try:
        # Read before joining: a child that has put a result exits only
        # once it is read.
        seconds = out.get(timeout=540)
    except queue.Empty:
        seconds = None
    for p in procs:
        p.join(timeout=60)
    if seconds is None or any(p.exitcode != 0 for p in procs):
        raise RuntimeError(f"the PyTorch tensor-parallel baseline failed (exit codes {[p.exitcode for p in procs]})")
    return seconds
