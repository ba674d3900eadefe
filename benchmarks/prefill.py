#!/usr/bin/env python3
"""Time to first token on a CUDA machine: the EventTensor prefill megakernel
against Hugging Face transformers eager and torch.compile(mode=
"reduce-overhead") with a static cache (CUDA graphs), in the same run (no
MLIR; artifacts from utils/prepare_gpu_suite.py --parts models
--prefill-rows R).

For each artifact with a prefill kernel: random bf16 weights, a random
prompt of --prompt tokens (at most the kernel's rows per launch), then

- numerics: the kernel's greedy token and last-row logits against
  transformers in float32 on the same (upcast) weights, relative error
  ||ours - ref|| / ||ref||, beside transformers in bf16 against the same
  reference; tolerance the larger of 1e-2 and 1.5x the bf16 model's error;
  the token must agree when the reference's top-1/top-2 margin exceeds
  twice the largest logit difference;
- time to first token: the prompt in one launch of the prefill kernel (its
  arguments packed beforehand; it writes the KV cache and the greedy next
  token), CUDA events around the launch, median of --iters;
- the peers: the same prompt through the model's forward with a static
  cache of the prompt's length (and, as a lower bound, without a cache), logits of the last position only
  (as generation does) and the argmax on the device,
  timed the same way, each in a process of its own (a failing peer cannot
  take the CUDA context of the others with it). Their warm-up is the time of
  the first three calls (compilation and graph capture).

For an artifact whose prefill kernel was compiled with profiling, writes
the launch's trace (Chrome JSON, Gantt PNG) and the time per task kind.

    PYTHONPATH=python:benchmarks python3 benchmarks/prefill.py .device/models --json results.json --out DIR
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from event_tensor.model import DecodeSession, ModelConfig
from gpu_timing import launch_seconds, median_seconds, random_model_weights, save_trace, to_numpy_bf16

TOLERANCE = 1e-2


def model_logits(config, weights, prompt, dtype) -> np.ndarray:
    """transformers' logits after the prompt, the model in `dtype`."""
    from hf_models import hf_model

    model = hf_model(config, weights, dtype=dtype, attn="sdpa")
    with torch.no_grad():
        out = model(input_ids=torch.tensor([prompt], device="cuda"), logits_to_keep=1).logits[0, -1]
    logits = out.double().cpu().numpy()
    del model
    torch.cuda.empty_cache()
    return logits


def rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


def check_numerics(got_token: int, got: np.ndarray, ref: np.ndarray, bf16: np.ndarray) -> dict:
    """Against the float32 reference `ref`; `bf16` (transformers in bf16)
    is the yardstick: a bf16 model's error grows with the prompt, so the
    tolerance is the larger of TOLERANCE and 1.5x the bf16 model's error."""
    err = rel_err(got, ref)
    bf16_err = rel_err(bf16, ref)
    top2 = np.sort(ref)[-2:]
    margin = float(top2[1] - top2[0])
    worst = float(np.abs(got - ref).max())
    decisive = margin > 2 * worst
    ref_token = int(np.argmax(ref))
    ok = err <= max(TOLERANCE, 1.5 * bf16_err) and (not decisive or got_token == ref_token)
    return {"rel_err": err, "bf16_transformers_rel_err": bf16_err, "token": got_token, "ref_token": ref_token, "decisive": decisive, "ok": ok}


def time_peer(config, weights, prompt, peer: str, iters: int) -> dict:
    """`peer`: "eager" or "compiled", with a static KV cache that the
    prompt fills; "-nocache" variants keep no KV cache (less work than a
    real prefill, which must leave the cache for decoding: a lower bound)."""
    from transformers import StaticCache

    from hf_models import hf_model

    compiled, use_cache = peer.startswith("compiled"), not peer.endswith("-nocache")
    t0 = time.perf_counter()
    model = hf_model(config, weights, dtype=torch.bfloat16, attn="sdpa")
    cache = StaticCache(config=model.config, max_cache_len=len(prompt)) if use_cache else None
    ids = torch.tensor([prompt], device="cuda")
    positions = torch.arange(len(prompt), device="cuda")

    def first_token(ids, positions):
        """The base model over the prompt, the LM head on the last position
        only (as generation does) and the greedy token, on the device."""
        hidden = model.model(input_ids=ids, past_key_values=cache, cache_position=positions,
                             use_cache=use_cache).last_hidden_state
        return torch.argmax(model.lm_head(hidden[:, -1]), dim=-1)

    forward = first_token
    if compiled:
        forward = torch.compile(first_token, mode="reduce-overhead", fullgraph=True)
    setup_s = time.perf_counter() - t0

    def rewind():
        for layer in cache.layers if cache is not None else []:
            filled = getattr(layer, "cumulative_length", None)
            if isinstance(filled, torch.Tensor):
                filled.fill_(0)

    def ttft():
        with torch.no_grad():
            return forward(ids, positions)

    t0 = time.perf_counter()
    for _ in range(3):
        rewind()
        ttft()
    torch.cuda.synchronize()
    warm_s = time.perf_counter() - t0
    times = []
    for _ in range(iters):
        rewind()
        times.append(median_seconds(ttft, reps=1, warmup=0))
    rewind()
    token = int(ttft())
    import transformers

    return {"transformers": transformers.__version__, "seconds": float(np.median(times)), "warmup_s": warm_s, "setup_s": setup_s, "token": token}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("--prompt", type=int, default=1024, help="prompt tokens")
    parser.add_argument("--peers", default="eager,compiled,compiled-nocache",
                        help="peers to run ('' for none): eager, compiled, eager-nocache, compiled-nocache")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json")
    parser.add_argument("--out", help="directory for traces of profiled artifacts")
    parser.add_argument("--peer", help=argparse.SUPPRESS)  # one peer on the artifact `root` (a subprocess)
    args = parser.parse_args()
    if args.peer:
        info = json.loads((Path(args.root) / "model.json").read_text())
        config = ModelConfig.from_dict(info["config"])
        weights = random_model_weights(config, args.seed)
        prompt = np.random.default_rng(args.seed).integers(0, config.vocab_size, args.prompt).tolist()
        print(json.dumps(time_peer(config, weights, prompt, args.peer, args.iters)))
        return
    results = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"),
               "torch": torch.__version__, "prompt": args.prompt, "rows": []}
    print(f"{results['device']}: prompt of {args.prompt} tokens")

    def save():
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2))

    peers = [p for p in args.peers.split(",") if p]
    unknown = set(peers) - {"eager", "compiled", "eager-nocache", "compiled-nocache"}
    if unknown:
        parser.error(f"unknown peers: {', '.join(sorted(unknown))}")
    peers_done = set()
    for path in sorted(p for p in Path(args.root).iterdir() if (p / "model.json").exists()):
        info = json.loads((path / "model.json").read_text())
        if not info.get("prefill"):
            continue
        config = ModelConfig.from_dict(info["config"])
        weights = random_model_weights(config, args.seed)
        rng = np.random.default_rng(args.seed)
        prompt = rng.integers(0, config.vocab_size, args.prompt).tolist()
        t0 = time.perf_counter()
        session = DecodeSession(path, to_numpy_bf16(weights))
        load_s = time.perf_counter() - t0
        if args.prompt > session.prefill_rows:
            print(f"{path.name}: the prefill kernel takes {session.prefill_rows} rows per launch; skipped")
            continue
        profiled = bool(info["prefill"].get("profile"))
        token = int(session.prefill([prompt])[0])
        logits = session.last_logits()[0].astype(np.float64)
        if profiled and args.out and session.last_prefill_trace is not None:
            save_trace(session.last_prefill_trace, args.out, f"{path.name}.prefill", f"{path.name}: one prefill launch",
                       results, path.name)
        launch_args = session.prefill_arguments(0, 0, prompt)
        t = launch_seconds(session.prefill_launcher, *launch_args, reps=args.iters)
        session.close()
        del session
        torch.cuda.empty_cache()
        row = {"model": path.name, "system": "eventtensor", "profiled": profiled, "prompt": args.prompt,
               "ttft_ms": t * 1e3, "load_s": load_s, "compile_s_here": info["prefill"].get("compile_s"),
               "tiles": info["prefill"].get("tiles")}
        if not profiled:
            row["numerics"] = check_numerics(token, logits, model_logits(config, weights, prompt, torch.float32),
                                             model_logits(config, weights, prompt, torch.bfloat16))
        results["rows"].append(row)
        save()
        num = row.get("numerics")
        print(f"{path.name} [eventtensor{' profiled' if profiled else ''}]: TTFT {t * 1e3:.3f} ms"
              + (f"; logits rel err {num['rel_err']:.2e} (transformers bf16: "
                 f"{num['bf16_transformers_rel_err']:.2e}), token {num['token']} (ref {num['ref_token']}, "
                 f"{'decisive' if num['decisive'] else 'not decisive'}) {'ok' if num['ok'] else 'FAILED'}"
                 if num else ""))
        key = json.dumps(info["config"], sort_keys=True)
        if profiled or key in peers_done:
            continue
        peers_done.add(key)
        for peer in peers:
            cmd = [sys.executable, __file__, str(path), "--peer", peer, "--prompt", str(args.prompt),
                   "--iters", str(args.iters), "--seed", str(args.seed)]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if args.out:  # the peer's whole output, for failures
                Path(args.out).mkdir(parents=True, exist_ok=True)
                (Path(args.out) / f"{path.name}.{peer}.log").write_text(done.stdout + done.stderr)
            lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
            if done.returncode or not lines:
                tail = (done.stdout + done.stderr)[-3000:]
                print(f"{path.name} [{peer}]: failed (exit {done.returncode}):\n{tail}")
                results.setdefault("peer_errors", []).append({"model": path.name, "system": peer, "error": tail})
                save()
                continue
            r = json.loads(lines[-1])
            results["rows"].append({"model": path.name, "system": f"transformers-{peer}", "prompt": args.prompt,
                                    "ttft_ms": r["seconds"] * 1e3, "warmup_s": r["warmup_s"],
                                    "setup_s": r["setup_s"], "token": r["token"],
                                    "transformers": r["transformers"]})
            save()
            print(f"{path.name} [transformers-{peer}]: TTFT {r['seconds'] * 1e3:.3f} ms (token {r['token']}); "
                  f"warm-up (first 3 calls) {r['warmup_s']:.1f} s")
        del weights
        torch.cuda.empty_cache()
    save()


if __name__ == "__main__":
    main()
