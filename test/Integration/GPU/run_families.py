#!/usr/bin/env python3
"""Loads the decode artifact of every dense shape family prepared by
`utils/prepare_gpu_suite.py --parts families` (Llama-3.2-1B/3B,
Llama-3.1-8B, Qwen3-0.6B/1.7B/4B/8B/14B; a kernel per batch of 1, 4 and 16,
tensor-core tiles from their batch, cubins, the default prefill kernel) on a
CUDA machine with no MLIR, with random weights, and runs a decode step of
each kernel, a prompt through the prefill kernel and a short generation:
every kernel must load on this GPU, and every step must give finite logits
and tokens inside the vocabulary.

    PYTHONPATH=python:benchmarks python3 test/Integration/GPU/run_families.py .device/families [--json F]

Exits 1 if any model fails (the others still run; the JSON names what
failed and why).
"""

import argparse
import gc
import json
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import torch

from event_tensor.model import DecodeSession, ModelConfig
from gpu_timing import random_packed_weights


# Prefill kernel against the decode kernel on the same prompt: worst
# logit difference over the largest logit (each is within about 1e-2 of
# float32 transformers).
PREFILL_TOLERANCE = 3e-2


def check_model(path: Path, batches: list[int], context: int) -> dict:
    """One family: load, a step per batch (its own kernel), a generation."""
    info = json.loads((path / "model.json").read_text())
    config = ModelConfig.from_dict(info["config"])
    row = {"model": path.name, "kernels": len(info.get("variants") or [None]), "steps": []}
    start = time.perf_counter()
    first = json.loads((path / (info.get("variants") or [{"dir": "."}])[0]["dir"] / "metadata.json").read_text())
    session = DecodeSession(path, random_packed_weights(first["arguments"], seed=1))
    torch.cuda.synchronize()
    row["load_s"] = time.perf_counter() - start
    rng = np.random.default_rng(0)
    try:
        for batch in batches:
            tokens = rng.integers(0, config.vocab_size, batch).tolist()
            positions = [context // 2 + b for b in range(batch)]
            session.step(tokens, positions)  # the kernel's first launch
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            got = session.step(tokens, positions)
            torch.cuda.synchronize()
            step_ms = 1e3 * (time.perf_counter() - t0)
            logits = session.last_logits()
            ok = bool(np.isfinite(logits).all() and ((got >= 0) & (got < config.vocab_size)).all())
            row["steps"].append({"batch": batch, "kernel": Path(session.variant_for(batch, context)).name,
                                 "step_ms": step_ms, "finite_logits": bool(np.isfinite(logits).all()),
                                 "tokens_in_vocabulary": ok})
        if session.prefill_launcher is not None:
            # A prompt of more than one prefill launch.
            session.reset()
            prompt = rng.integers(0, config.vocab_size, session.prefill_rows + 88).tolist()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            token = int(session.prefill([prompt])[0])
            torch.cuda.synchronize()
            prefill_ms = 1e3 * (time.perf_counter() - t0)
            logits = session.last_logits()[0].copy()
            # The same prompt through the decode kernel (rows of one prompt
            # attend causally to each other within a launch): the two
            # kernels' last logits agree within bf16 rounding.
            session.reset()
            for start in range(0, len(prompt), session.max_batch):
                chunk = prompt[start:start + session.max_batch]
                session.step(chunk, list(range(start, start + len(chunk))), [0] * len(chunk))
            decoded = session.last_logits()[-1]
            error = float(np.abs(logits - decoded).max() / np.abs(decoded).max())
            row["prefill"] = {"prompt": len(prompt), "ms": prefill_ms,
                              "finite_logits": bool(np.isfinite(logits).all()),
                              "token_in_vocabulary": 0 <= token < config.vocab_size,
                              "relative_error_vs_decode": error, "same_token": token == int(decoded.argmax())}
        session.reset()
        g = session.generate([rng.integers(0, config.vocab_size, 16).tolist()], 8)
        row["generation"] = {"tokens": len(g.tokens[0]), "finish": g.finish_reasons[0], "launches": g.launches}
        prefill_ok = "prefill" not in row or (row["prefill"]["finite_logits"] and row["prefill"]["token_in_vocabulary"]
                                              and row["prefill"]["relative_error_vs_decode"] < PREFILL_TOLERANCE)
        row["ok"] = all(s["tokens_in_vocabulary"] for s in row["steps"]) and len(g.tokens[0]) == 8 and prefill_ok
    finally:
        session.close()
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    plan = json.loads((args.root / "families.json").read_text())
    results = {"gpu": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"), "models": []}
    failed = []
    for name in plan["models"]:
        try:
            row = check_model(args.root / name, plan["batches"], plan["context"])
        except Exception as err:  # a model that fails must not hide the others
            row = {"model": name, "ok": False, "error": f"{type(err).__name__}: {err}",
                   "traceback": traceback.format_exc(limit=4)}
        results["models"].append(row)
        if not row["ok"]:
            failed.append(name)
        steps = ", ".join(f"b{s['batch']} {s['kernel']} {s['step_ms']:.2f} ms" for s in row.get("steps", []))
        if "prefill" in row:
            steps += (f"; prefill of {row['prefill']['prompt']} {row['prefill']['ms']:.1f} ms, "
                      f"{row['prefill']['relative_error_vs_decode']:.1e} from the decode kernel")
        print(f"{name}: {'ok' if row['ok'] else 'FAIL'} (load {row.get('load_s', 0):.1f} s; {steps})"
              + (f" {row['error']}" if "error" in row else ""), flush=True)
        gc.collect()
        torch.cuda.empty_cache()
        if args.json:
            args.json.write_text(json.dumps(results, indent=1))
    print(f"families: {len(plan['models']) - len(failed)}/{len(plan['models'])} load and run"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
