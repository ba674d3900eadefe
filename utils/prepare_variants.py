"""Compiles decode-step kernels of model presets in several builds, side by
side, for one benchmarks/decode.py call on the GPU machine (which has no
MLIR): each variant is `NAME=JSON`, the JSON holding `compile_model` keyword
arguments (for example `{"split_len": 128}` or `{"tile_prefetch": "shared",
"tile_prefetch_tasks": ["o"]}`); an empty JSON object is the defaults.

    .venv/bin/python utils/prepare_variants.py --out .device/v --models llama-3.2-1b \
        --variant 'base={}' --variant 'split128={"split_len": 128}'

writes .device/v/llama-3.2-1b-base, .device/v/llama-3.2-1b-split128, ...
(`decode.py .device/v` times every artifact under it). `--profiled` also
compiles a profiling build of each (NAME-profiled)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import tempfile
import time
from pathlib import Path


def parse_variant(text: str) -> tuple[str, dict]:
    name, sep, spec = text.partition("=")
    if not sep or not name or not name.replace("-", "").replace("_", "").isalnum():
        raise SystemExit(f"--variant must be NAME=JSON with NAME of letters, digits, '-' and '_', got {text!r}")
    try:
        options = json.loads(spec)
    except json.JSONDecodeError as e:
        raise SystemExit(f"--variant {name}: not JSON: {e}") from None
    if not isinstance(options, dict):
        raise SystemExit(f"--variant {name}: the JSON must be an object of compile_model arguments, got {spec!r}")
    return name, options


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--models", default="llama-3.2-1b,qwen3-0.6b")
    parser.add_argument("--max-batch", type=int, default=1)
    parser.add_argument("--max-context", type=int, default=1024)
    parser.add_argument("--format", choices=("isa", "bin"), default="bin")
    parser.add_argument("--workers", type=int, default=132)
    parser.add_argument("--threads", type=int, default=None, help="threads per worker (default: compile_model's)")
    parser.add_argument("--variant", action="append", required=True, help="NAME=JSON (repeatable)")
    parser.add_argument("--profiled", action="store_true", help="also a profiling build of each variant")
    parser.add_argument("--layers", type=int, default=None,
                        help="only the first N layers of each model (its shapes, fewer layers; names get -Nl)")
    args = parser.parse_args()
    variants = [parse_variant(v) for v in args.variant]
    if len({n for n, _ in variants}) != len(variants):
        raise SystemExit("--variant names must be distinct")

    from event_tensor.model import compile_model, preset

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cache = Path(tempfile.mkdtemp(prefix="et-variants-"))
    try:
        for model in [m for m in args.models.split(",") if m]:
            config = preset(model)
            if args.layers:
                config = dataclasses.replace(config, num_layers=args.layers)
                model = f"{model}-{args.layers}l"
            for name, options in variants:
                for profile in (False, True) if args.profiled else (False,):
                    target = out / f"{model}-{name}{'-profiled' if profile else ''}"
                    if target.exists():
                        shutil.rmtree(target)
                    start = time.perf_counter()
                    compile_model(config, target="cuda", max_batch=args.max_batch, max_context=args.max_context,
                                  workers=args.workers, out_dir=target, cache_dir=cache, format=args.format,
                                  profile=profile,
                                  **({"threads_per_worker": args.threads} if args.threads else {}), **options)
                    took = time.perf_counter() - start
                    meta = target / "metadata.json"  # (kernel variants: one per subdirectory)
                    res = json.loads(meta.read_text()).get("resources") if meta.exists() else None
                    ptxas = f", {res['registers']} registers, {res['frame_bytes']}-byte frame" if res else ""
                    print(f"{target.name}: {took:.1f} s{ptxas}", flush=True)
    finally:
        shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
