"""One artifact for every batch size and context against kernels compiled
for each shape, in the same run.

The artifact is `compile_model(max_batch=16, max_context=8192,
linear_tile="auto", specialize=True)`: one kernel per (batch range,
context bucket), each compiled for its own largest shape, sharing the
weights and KV caches; the session picks one per launch. The per-shape
kernels are single kernels compiled for exactly one (batch, context), with
`et.linear` row tiles below the model's `mma_from_batch` and tensor-core
tiles from it, and both kinds at the batches of the sweep on either side of
it; the best of them is the per-shape best the artifact is held to (issue
goal: within 10%).

    # here: compile into a folder that travels
    .venv/bin/python benchmarks/one_artifact.py --prepare .device/one --models llama-3.2-1b
    # there:
    PYTHONPATH=python:benchmarks python3 benchmarks/one_artifact.py .device/one --json out.json

(one model per call keeps what travels under the device tool's limit.)

Steps decode at position context - 1 of every row (each row its own cache
slot) over random KV caches, with random bf16 weights; the time is CUDA
events around one launch whose arguments were packed beforehand, median of
--iters.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

MODELS = ("llama-3.2-1b", "qwen3-0.6b")
MAX_BATCH, MAX_CONTEXT = 16, 8192
BATCHES = (1, 2, 3, 4, 6, 8, 12, 16)
# Bucket edges (1024, 8192) and contexts just past an edge (the worst case
# of a bucket: 1100 runs in the 2048 bucket, 4200 in the 8192 one).
CONTEXTS = (128, 1024, 1100, 4200, 8192)
ARTIFACT = "artifact"


def per_shape(batches, contexts, mma_from: int):
    """(tag, batch, context, linear tile) of every per-shape kernel: row
    tiles below `mma_from` and at the first batch from it, tensor-core tiles
    from it and at the last batch below it."""
    below = [b for b in batches if b < mma_from]
    above = [b for b in batches if b >= mma_from]
    rows = set(below + above[:1])
    mma = set(above + below[-1:])
    return [(f"b{b}-c{c}-{tile}", b, c, tile) for b in batches for c in contexts for tile in ("rows", "mma")
            if b in (rows if tile == "rows" else mma)]


def prepare(out: Path, models, batches, contexts) -> None:
    from event_tensor.model import compile_model, preset
    from event_tensor.model.compile import mma_from_batch

    for name in models:
        config = preset(name)
        start = time.perf_counter()
        compile_model(config, target="cuda", max_batch=MAX_BATCH, max_context=MAX_CONTEXT, linear_tile="auto",
                      specialize=True, threads_per_worker=512, format="bin", out_dir=out / name / ARTIFACT)
        print(f"compiled {name} {ARTIFACT} in {time.perf_counter() - start:.1f} s")
        for tag, b, c, tile in per_shape(batches, contexts, mma_from_batch(config)):
            start = time.perf_counter()
            # min_batch=b: a kernel for exactly this batch (its split length too).
            compile_model(config, target="cuda", max_batch=b, min_batch=b, max_context=c, linear_tile=tile,
                          threads_per_worker=512, format="bin", out_dir=out / name / tag)
            print(f"compiled {name} {tag} in {time.perf_counter() - start:.1f} s")


def run(root: Path, json_out: Path | None, iters: int, batches, contexts) -> None:
    import numpy as np
    import torch

    from event_tensor.model import DecodeSession, ModelConfig
    from gpu_timing import copy_bandwidth, launch_seconds, pack_torch, random_model_weights

    copy_bw = copy_bandwidth()
    results = {"date": time.strftime("%Y-%m-%d"), "device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "copy_bandwidth_tb_s": copy_bw / 1e12, "rows": [], "summary": []}
    print(f"{results['device']}: copy bandwidth {copy_bw / 1e12:.2f} TB/s")

    def save():
        if json_out:
            json_out.parent.mkdir(parents=True, exist_ok=True)
            json_out.write_text(json.dumps(results, indent=2))

    for name in sorted(p.name for p in root.iterdir() if (p / ARTIFACT).is_dir()):
        info = json.loads((root / name / ARTIFACT / "model.json").read_text())
        config = ModelConfig.from_dict(info["config"])
        packed = pack_torch(config, random_model_weights(config, seed=5))
        torch.cuda.synchronize()

        def timed(session, batch, context):
            tokens = np.arange(batch) % config.vocab_size
            for _ in range(2):
                session.step(tokens, [context - 1] * batch)
            return launch_seconds(session.launcher, *session._arguments(batch), reps=iters)

        def open_session(tag):
            start = time.perf_counter()
            session = DecodeSession(root / name / tag, packed, timeout_s=20)
            for b in session.device_buffers:
                b["k_cache"].normal_()
                b["v_cache"].normal_()
            return session, time.perf_counter() - start

        session, load_s = open_session(ARTIFACT)
        results.setdefault("load_s", {})[name] = load_s
        print(f"{name}: artifact of {len(info['variants'])} kernels, compiled in {info['compile_s']} s here, "
              f"loaded in {load_s:.2f} s")
        art = {}
        for c in contexts:
            for b in batches:
                t = timed(session, b, c)
                art[(b, c)] = t
                variant = Path(session.variant_for(b, c)).name
                results["rows"].append({"model": name, "kernel": ARTIFACT, "variant": variant, "batch": b,
                                        "context": c, "ms_per_step": t * 1e3})
                print(f"{name} artifact [{variant}] batch {b}, context {c}: {t * 1e3:.3f} ms")
        save()
        session.close()
        del session
        best = {}
        compiled = [(f"b{b}-c{c}-{tile}", b, c, tile) for b in batches for c in contexts for tile in ("rows", "mma")]
        for tag, b, c, tile in compiled:
            if not (root / name / tag).is_dir():  # only those that prepare compiled
                continue
            session, _ = open_session(tag)
            t = timed(session, b, c)
            session.close()
            del session
            torch.cuda.empty_cache()
            results["rows"].append({"model": name, "kernel": tag, "linear_tile": tile, "batch": b, "context": c,
                                    "ms_per_step": t * 1e3})
            print(f"{name} {tag}: {t * 1e3:.3f} ms")
            if (b, c) not in best or t < best[(b, c)][0]:
                best[(b, c)] = (t, tag)
            save()
        ratios = []
        for (b, c), (t, tag) in sorted(best.items()):
            r = art[(b, c)] / t
            ratios.append(r)
            results["summary"].append({"model": name, "batch": b, "context": c, "artifact_ms": art[(b, c)] * 1e3,
                                       "best_ms": t * 1e3, "best_kernel": tag, "ratio": r})
            print(f"{name} batch {b}, context {c}: artifact {art[(b, c)] * 1e3:.3f} ms, best per-shape {t * 1e3:.3f} "
                  f"ms ({tag}): {r:.3f}")
        if ratios:
            print(f"{name}: artifact / best per shape: worst {max(ratios):.3f}, geometric mean "
                  f"{float(np.exp(np.mean(np.log(ratios)))):.3f}")
        save()
        packed = None
        torch.cuda.empty_cache()
    save()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root")
    parser.add_argument("--prepare", action="store_true", help="compile the artifacts into ROOT (here)")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--batches", default=",".join(map(str, BATCHES)))
    parser.add_argument("--contexts", default=",".join(map(str, CONTEXTS)))
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--json")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    contexts = [int(c) for c in args.contexts.split(",")]
    if args.prepare:
        prepare(Path(args.root), [m for m in args.models.split(",") if m], batches, contexts)
    else:
        run(Path(args.root), Path(args.json) if args.json else None, args.iters, batches, contexts)


if __name__ == "__main__":
    main()
