"""Tensor-parallel decode on two GPUs: the EventTensor megakernel split over
2 devices (`compile_model(tp=2)`: one kernel, two copies, the all-reduces as
tasks that read the other GPU's partial sums over NVLink) against a PyTorch
tensor-parallel step (benchmarks/tp_baseline.py: per-operator kernels, NCCL
all-reduces, one CUDA graph), in the same run; and the megakernel's logits
against the single-GPU megakernel's, teacher-forced.

    # here: compile into a folder that travels
    python benchmarks/tp_decode.py --prepare .device/tp
    # there (nvidia-h200-x2):
    PYTHONPATH=python:benchmarks python3 benchmarks/tp_decode.py .device/tp --json out.json

Per model (Llama-3.1-8B and Qwen3-8B shapes, random bf16 weights): a
max_batch 1 and a max_batch 16 tensor-parallel artifact and a max_batch 1
single-GPU artifact. Steps decode at position context - 1 over random KV
caches. The aggregate bandwidth floor is weight bytes / (2 x copy
bandwidth), the copy bandwidth measured in the same run on GPU 0. With
--extra also profiled builds, tensor-core tiles from batch 4, and kernels
with a prefill kernel: the time to first token of a 1024-token prompt on two
GPUs and on one, and the two prefills' logits against each other.
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from pathlib import Path

MODELS = ("llama-3.1-8b", "qwen3-8b")
CONTEXT = 1024


# Artifacts per model: tag -> (tp, max_batch, compile options).
CORE = {"tp2-b1": (2, 1, {}), "tp2-b16": (2, 16, {}), "tp1-b1": (1, 1, {})}
# --extra: profiled builds (their traces go to --out), tensor-core tiles
# from batch 4 on two GPUs and on one, timed at every batch, and kernels with
# a prefill kernel of PREFILL_ROWS rows, whose time to first token of a
# CONTEXT-token prompt is timed too (the prompt in CONTEXT / PREFILL_ROWS
# launches).
PREFILL_ROWS = 512
EXTRA = {"tp2-b1-profile": (2, 1, {"profile": True}),
         "tp1-b1-profile": (1, 1, {"profile": True}),
         "tp2-b16-auto": (2, 16, {"linear_tile": "auto"}),
         "tp1-b16-auto": (1, 16, {"linear_tile": "auto"}),
         "tp2-b1-prefill": (2, 1, {"prefill_rows": PREFILL_ROWS}),
         "tp1-b1-prefill": (1, 1, {"prefill_rows": PREFILL_ROWS})}


def prepare(out: Path, models, max_context: int, extra: bool, only: str | None = None,
            prefill_rows: int = PREFILL_ROWS) -> None:
    from event_tensor.model import compile_model, preset
    from event_tensor.testing import ptxas_path

    # Cubins where ptxas is found (no driver compile at load).
    fmt = "bin" if ptxas_path() else "isa"

    for name in models:
        config = preset(name)
        for tag, (tp, max_batch, options) in {**CORE, **(EXTRA if extra else {})}.items():
            if only and tag in EXTRA and not any(part in tag for part in only.split(",")):
                continue
            if "prefill_rows" in options:
                options = dict(options, prefill_rows=prefill_rows)
            start = time.perf_counter()
            compile_model(config, target="cuda", max_batch=max_batch, max_context=max_context, tp=tp,
                          threads_per_worker=512, out_dir=out / name / tag, format=fmt, **options)
            print(f"compiled {name} {tag} in {time.perf_counter() - start:.1f} s")


def run(root: Path, json_out: Path | None, iters: int, batches, peer: bool, steps: int, out: Path | None,
        passes: int = 1, models=()) -> None:
    import numpy as np
    import torch

    import tp_baseline
    from event_tensor.model import DecodeSession
    from gpu_timing import (copy_bandwidth, launch_seconds, median_seconds, pack_torch, random_model_weights,
                            save_trace)

    copy_bw = copy_bandwidth()
    results = {"date": time.strftime("%Y-%m-%d"), "gpus": [torch.cuda.get_device_name(i)
                                                            for i in range(torch.cuda.device_count())],
               "torch": torch.__version__, "copy_bandwidth_tb_s": copy_bw / 1e12, "context": CONTEXT, "rows": [],
               "numerics": []}
    print(f"{results['gpus']}: copy bandwidth {copy_bw / 1e12:.2f} TB/s (GPU 0)")

    def save():
        if json_out:
            json_out.parent.mkdir(parents=True, exist_ok=True)
            json_out.write_text(json.dumps(results, indent=2))

    for name in sorted(p.name for p in root.iterdir() if p.is_dir() and (not models or p.name in models)):
        from event_tensor.model import ModelConfig

        info = json.loads((root / name / "tp2-b1" / "model.json").read_text())
        config = ModelConfig.from_dict(info["config"])
        floor = config.weight_bytes() / (2 * copy_bw)
        weights = random_model_weights(config, seed=11)
        packed = pack_torch(config, weights)
        del weights
        sessions = {}
        extras = [tag for tag in EXTRA if (root / name / tag).is_dir()]
        for tag in [tag for tag in CORE if (root / name / tag).is_dir()] + extras:
            start = time.perf_counter()
            sessions[tag] = DecodeSession(root / name / tag, packed, timeout_s=20)
            for buffers in sessions[tag].device_buffers:
                buffers["k_cache"].normal_()
                buffers["v_cache"].normal_()
            print(f"{name} {tag}: loaded in {time.perf_counter() - start:.1f} s")
        del packed
        torch.cuda.empty_cache()

        # Teacher-forced numerics: the same tokens through two kernels (fresh
        # caches), logits compared every step: TP=2 against one GPU, and
        # the tensor-core variants against the et.linear kernels.
        pairs = [("tp2-b1", "tp1-b1", 1, steps),
                 ("tp2-b16-auto", "tp2-b16", 16, min(steps, 8)), ("tp1-b16-auto", "tp2-b16", 16, min(steps, 8))]
        for got_tag, want_tag, batch, n_steps in pairs:
            if got_tag not in sessions or want_tag not in sessions or not n_steps:
                continue
            tp, one = sessions[got_tag], sessions[want_tag]
            tp.reset()
            one.reset()
            rng = np.random.default_rng(5)
            tokens = rng.integers(0, config.vocab_size, (n_steps, batch))
            worst, agree = 0.0, 0
            for i, t in enumerate(tokens):
                a = one.step(t.tolist(), [i] * batch)
                la = one.last_logits()
                b = tp.step(t.tolist(), [i] * batch)
                lb = tp.last_logits()
                worst = max(worst, float(np.abs(la - lb).max() / np.abs(la).max()))
                agree += int((a == b).sum())
            row = {"model": name, "kernel": got_tag, "against": want_tag, "batch": batch, "steps": n_steps,
                   "worst_relative_logit_error": worst, "greedy_agree": agree, "greedy_total": n_steps * batch}
            if batch == 1 and tp.steps_on_device and one.steps_on_device:
                # Sampling at temperature 1 on both, the same seeds: the
                # devices' keys are those of the whole vocabulary, so the
                # draws agree until rounding flips one.
                prompt = [rng.integers(0, config.vocab_size, 8).tolist()]
                first = []
                for seed in range(4):
                    a_tokens = one.generate(prompt, n_steps, temperature=1.0, seed=seed).tokens[0]
                    b_tokens = tp.generate(prompt, n_steps, temperature=1.0, seed=seed).tokens[0]
                    first.append(next((i for i, (x, y) in enumerate(zip(a_tokens, b_tokens)) if x != y), n_steps))
                row["sampled_agree_prefix"] = first
            results["numerics"].append(row)
            print(f"{name}: {got_tag} vs {want_tag}, batch {batch}, {n_steps} teacher-forced steps: worst relative "
                  f"logit error {worst:.2e}, greedy tokens agree {agree}/{n_steps * batch}"
                  + (f"; sampled (T=1, 4 seeds) agree for the first {row['sampled_agree_prefix']} tokens"
                     if "sampled_agree_prefix" in row else ""))
        for buffers in [b for s in sessions.values() for b in s.device_buffers]:
            buffers["k_cache"].normal_()
            buffers["v_cache"].normal_()

        def timed(session, batch):
            toks = np.arange(batch) % config.vocab_size
            for _ in range(2):
                session.step(toks, [CONTEXT - 1] * batch)
            return launch_seconds(session.launcher, *session._arguments(batch), reps=iters)

        for batch in batches:
            entries = []
            if batch == 1:
                entries += [("megakernel TP=2 (max_batch 1)", "tp2-b1"), ("megakernel, one GPU (max_batch 1)",
                                                                         "tp1-b1")]
            entries.append(("megakernel TP=2 (max_batch 16)", "tp2-b16"))
            entries += [(f"megakernel {tag}", tag) for tag in extras if batch == 1 or "-b16" in tag]
            for pass_ in range(passes):
                for system, tag in entries:
                    if tag not in sessions:
                        continue
                    t = timed(sessions[tag], batch)
                    row = {"model": name, "system": system, "batch": batch, "context": CONTEXT,
                           "ms_per_step": t * 1e3, "aggregate_floor_ms": floor * 1e3, "fraction_of_floor": floor / t,
                           "pass": pass_}
                    results["rows"].append(row)
                    save()
                    print(f"{name} [{system}] batch {batch}: {t * 1e3:.3f} ms per step; aggregate floor "
                          f"{floor * 1e3:.3f} ms ({100 * floor / t:.1f}%)")
        for tag in [tag for tag in sessions if sessions[tag].prefill_launcher is not None]:
            # Time to first token: the prompt's launches of the prefill
            # kernel, back to back, between CUDA events (median of 5).
            session = sessions[tag]
            prompt = np.random.default_rng(9).integers(0, config.vocab_size, CONTEXT).tolist()
            t = median_seconds(lambda: session.prefill([prompt]), reps=5, warmup=1)
            row = {"model": name, "system": f"megakernel {tag} prefill", "prompt": CONTEXT,
                   "prefill_rows": session.prefill_rows, "ms_to_first_token": t * 1e3}
            results["rows"].append(row)
            save()
            print(f"{name} [{tag}] prefill of {CONTEXT} tokens: {row['ms_to_first_token']:.3f} ms (host work "
                  "between launches included)")
        if {"tp2-b1-prefill", "tp1-b1-prefill"} <= set(sessions):
            # The two prefill kernels on the same prompt: next token and logits.
            prompt = np.random.default_rng(10).integers(0, config.vocab_size, CONTEXT).tolist()
            got = []
            for tag in ("tp2-b1-prefill", "tp1-b1-prefill"):
                sessions[tag].reset()
                token = int(sessions[tag].prefill([prompt])[0])
                got.append((token, sessions[tag].last_logits()[0]))
            (t2, l2), (t1, l1) = got
            row = {"model": name, "kernel": "tp2-b1-prefill", "against": "tp1-b1-prefill", "prompt": CONTEXT,
                   "worst_relative_logit_error": float(np.abs(l2 - l1).max() / np.abs(l1).max()),
                   "same_token": t2 == t1}
            results["numerics"].append(row)
            save()
            print(f"{name}: TP=2 prefill against one GPU's: worst relative logit error "
                  f"{row['worst_relative_logit_error']:.2e}, same next token: {row['same_token']}")
        for tag in [tag for tag in sessions if tag.endswith("-profile")] if out is not None else []:
            session = sessions[tag]
            session.step([1], [CONTEXT - 1])
            for d, trace in enumerate(session.launcher.last_traces if session.tp > 1 else [session.last_trace]):
                stem = f"{name}-{tag}-device{d}"
                save_trace(trace, out, stem, f"{name}, {tag}, device {d}, batch 1, context {CONTEXT}", results,
                           stem)
            save()
        for s in sessions.values():
            s.close()
        # (Closures and locals still hold sessions: collect them before
        # the next model's weights.)
        sessions.clear()
        session = tp = one = s = buffers = None
        gc.collect()
        torch.cuda.empty_cache()
        if peer:
            start = time.perf_counter()
            times = tp_baseline.run(config.to_dict(), batches, CONTEXT, iters=iters)
            print(f"{name}: PyTorch baseline ran in {time.perf_counter() - start:.1f} s")
            for batch, t in sorted(times.items()):
                row = {"model": name, "system": "PyTorch TP=2 (NCCL, CUDA graph)", "batch": batch, "context": CONTEXT,
                       "ms_per_step": t * 1e3, "aggregate_floor_ms": floor * 1e3, "fraction_of_floor": floor / t}
                results["rows"].append(row)
                print(f"{name} [PyTorch TP=2] batch {batch}: {t * 1e3:.3f} ms per step ({100 * floor / t:.1f}% of "
                      "the floor)")
            save()
    save()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("root", type=Path, nargs="?", help="prepared artifacts (run mode)")
    parser.add_argument("--prepare", type=Path, help="compile the artifacts into this folder (needs MLIR)")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--max-context", type=int, default=CONTEXT)
    parser.add_argument("--batches", default="1,4,16")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--steps", type=int, default=32, help="teacher-forced steps of the numerics check")
    parser.add_argument("--no-peer", action="store_true", help="skip the PyTorch baseline")
    parser.add_argument("--extra", action="store_true", help="prepare: also the variants in EXTRA")
    parser.add_argument("--only", help="with --extra: only the variants whose tag contains one of these "
                                       "(comma-separated), e.g. mma")
    parser.add_argument("--passes", type=int, default=1, help="time every kernel this many times, in turn")
    parser.add_argument("--prefill-rows", type=int, default=PREFILL_ROWS,
                        help=f"prepare: the rows of the --extra prefill kernels (default {PREFILL_ROWS})")
    parser.add_argument("--out", type=Path, help="folder for the profiled variant's traces")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.prepare:
        prepare(args.prepare, [m for m in args.models.split(",") if m], args.max_context, args.extra, args.only,
                args.prefill_rows)
        return
    if not args.root:
        parser.error("give the prepared folder, or --prepare FOLDER")
    run(args.root, args.json, args.iters, [int(b) for b in args.batches.split(",")], not args.no_peer, args.steps,
        args.out, args.passes, [m for m in args.models.split(",") if m])


if __name__ == "__main__":
    main()
