#!/usr/bin/env python3
"""Causal prefill attention tiles (et.attention_prefill on tensor cores)
against torch's scaled_dot_product_attention (flash backend) in the same
run, on a CUDA machine without MLIR (kernels from
`utils/prepare_gpu_suite.py --parts prefill`).

For the attention shapes of Llama-3.2-1B, Qwen3-0.6B and Llama-3.1-8B and
prompts of 1k-8k tokens at position 0: the kernel's time (the prompt's keys
and values already in the cache) and SDPA's (q, k, v of the prompt, causal,
grouped-query heads), each the median over batches of back-to-back
launches. Throughput counts the causal half: 2 * 2 * T^2 / 2 * D * Hq
flops. First the numerics cases against float64 references; every timed
output is also compared with SDPA's.

    PYTHONPATH=python:benchmarks python3 benchmarks/prefill_attention.py .device/prefill --json out.json
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from event_tensor import runtime
from gpu_timing import batched_seconds

TOKENS = (1024, 2048, 4096, 8192)


def numerics(root: Path, count: int) -> list[dict]:
    rows = []
    for i in range(count):
        case = np.load(root / f"numerics{i}" / "case.npz")
        k, v = (torch.from_numpy(case[n].copy()).view(torch.bfloat16).cuda() for n in ("k", "v"))
        q = torch.from_numpy(case["q"].copy())
        q = (q if q.dtype == torch.float32 else q.view(torch.bfloat16)).cuda()
        bf16 = str(case["out"]) == "bf16"
        o = torch.full(q.shape, float("nan"), device="cuda", dtype=torch.bfloat16 if bf16 else torch.float32)
        art = runtime.load(root / f"numerics{i}")
        art.launcher(timeout_s=5)(q, k, v, o, q.shape[0], int(case["pos0"]))
        got, ref = o.double().cpu().numpy(), case["ref"]
        err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
        ok = not np.isnan(got).any() and err < 1e-2
        print(f"numerics {i}: q {str(q.dtype).split('.')[-1]} T={q.shape[0]} Hq={q.shape[1]} Hkv={k.shape[1]} D={q.shape[2]} pos0={int(case['pos0'])} "
              f"out={case['out']} threads={art.metadata['options']['threads_per_worker']}: relative error "
              f"{err:.2e} ({'ok' if ok else 'FAIL'})")
        rows.append({"case": i, "rel_err": err, "ok": ok})
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("--json")
    parser.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    args = parser.parse_args()
    root = Path(args.root)
    info = json.loads((root / "prefill.json").read_text())
    results = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"),
               "numerics": numerics(root, info["numerics"]), "rows": []}
    cache = info["cache"]
    print(f"{'model':>14} {'block/thr':>10} {'T':>6} {'us':>9} {'TFLOP/s':>8} {'SDPA us':>9} {'SDPA TF/s':>9} "
          f"{'ratio':>6} {'err':>8}")
    for name, hq, hkv, d, block, threads in info["shapes"]:
        launch = runtime.load(root / f"prefill-{name}-b{block}-t{threads}").launcher(timeout_s=10)
        kc = torch.randn(cache, hkv, d, device="cuda").to(torch.bfloat16)
        vc = torch.randn(cache, hkv, d, device="cuda").to(torch.bfloat16)
        for t in (int(x) for x in args.tokens.split(",")):
            if t > cache:
                continue
            q = torch.randn(t, hq, d, device="cuda").to(torch.bfloat16)
            o = torch.empty(t, hq, d, device="cuda", dtype=torch.bfloat16)
            qs = q.transpose(0, 1).unsqueeze(0)                        # 1 x Hq x T x D
            ks = kc[:t].transpose(0, 1).unsqueeze(0)                   # 1 x Hkv x T x D
            vs = vc[:t].transpose(0, 1).unsqueeze(0)
            ks_r = ks.repeat_interleave(hq // hkv, dim=1).contiguous()  # grouped heads, repeated
            vs_r = vs.repeat_interleave(hq // hkv, dim=1).contiguous()
            qs = qs.contiguous()
            with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
                ref = F.scaled_dot_product_attention(qs, ks_r, vs_r, is_causal=True)
                sdpa_t = batched_seconds(lambda: F.scaled_dot_product_attention(qs, ks_r, vs_r, is_causal=True))
            launch(q, kc, vc, o, t, 0)
            got = o.transpose(0, 1).unsqueeze(0).float()
            err = float(((got - ref.float()).norm() / ref.float().norm()).item())
            our_t = batched_seconds(launch.bind(q, kc, vc, o, t, 0))
            launch.check()
            flops = 2 * 2 * t * t / 2 * d * hq
            row = {"model": name, "hq": hq, "hkv": hkv, "d": d, "block": block, "threads": threads, "tokens": t,
                   "time_us": our_t * 1e6, "tflops": flops / our_t / 1e12, "sdpa_us": sdpa_t * 1e6,
                   "sdpa_tflops": flops / sdpa_t / 1e12, "fraction_of_sdpa": sdpa_t / our_t,
                   "rel_err_vs_sdpa": err, "correct": err < 2e-2}
            results["rows"].append(row)
            print(f"{name:>14} {block:>4}/{threads:<5} {t:>6} {our_t * 1e6:>9.1f} {row['tflops']:>8.1f} "
                  f"{sdpa_t * 1e6:>9.1f} {row['sdpa_tflops']:>9.1f} {row['fraction_of_sdpa']:>6.2f} {err:>8.1e}"
                  f"{'' if row['correct'] else '  WRONG'}")
        launch.close()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
