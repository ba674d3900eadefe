"""Compiles a fixed set of model kernels and writes what the compiler made of
them (PTX for cuda, the object file of the host worker for cpu), so that a change
meant to keep behaviour can be checked byte for byte against a snapshot taken
before it:

    .venv/bin/python utils/kernel_snapshot.py --out /tmp/before     # on the old tree
    .venv/bin/python utils/kernel_snapshot.py --out /tmp/after --compare /tmp/before

The set: Llama-3.2-1B and Qwen3-0.6B decode kernels for batch 1 and 16 (the
defaults, and batch 16 with tensor-core linear tiles; batch 1 also at 4k
context), their prefill kernels, and the tiny presets on the host target. `--only SUBSTRING` keeps the cases
whose name contains it. Exits 1 when `--compare` finds a difference."""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

# name -> (preset, target, compile_model keyword arguments)
CASES = {
    "llama-3.2-1b-b1": ("llama-3.2-1b", "cuda", {"max_batch": 1, "prefill_rows": 64}),
    "llama-3.2-1b-b16": ("llama-3.2-1b", "cuda", {"max_batch": 16, "prefill_rows": 64}),
    # A long split's KV stage leaves the staged weights less shared memory.
    "llama-3.2-1b-b1-4k": ("llama-3.2-1b", "cuda", {"max_batch": 1, "max_context": 4096}),
    "qwen3-0.6b-b1-4k": ("qwen3-0.6b", "cuda", {"max_batch": 1, "max_context": 4096}),
    "llama-3.2-1b-b16-mma": ("llama-3.2-1b", "cuda", {"max_batch": 16, "linear_tile": "mma"}),
    "qwen3-0.6b-b1": ("qwen3-0.6b", "cuda", {"max_batch": 1, "prefill_rows": 64}),
    "qwen3-0.6b-b16": ("qwen3-0.6b", "cuda", {"max_batch": 16, "prefill_rows": 64}),
    "qwen3-0.6b-b16-mma": ("qwen3-0.6b", "cuda", {"max_batch": 16, "linear_tile": "mma"}),
    "tiny-llama-cpu": ("tiny-llama", "cpu", {"max_batch": 2, "prefill_rows": 8}),
    "tiny-qwen3-cpu": ("tiny-qwen3", "cpu", {"max_batch": 2, "prefill_rows": 8}),
}


def _outputs(artifact: Path) -> dict[str, bytes]:
    """The generated code of an artifact and of its prefill kernel, by name."""
    found = {}
    for sub, tag in ((artifact, "decode"), (artifact / "prefill", "prefill")):
        for name in ("kernel.ptx", "kernel.o"):
            if (sub / name).exists():
                found[f"{tag}.{name.split('.')[1]}"] = (sub / name).read_bytes()
        meta = sub / "metadata.json"
        if meta.exists():
            data = json.loads(meta.read_text())
            # The hash keys the compile cache by the compiler's build; the
            # rest of the metadata is what the runtime reads.
            data.pop("ir_hash", None)
            found[f"{tag}.metadata.json"] = json.dumps(data, indent=1, sort_keys=True).encode()
    return found


def snapshot(out: Path, only: str | None) -> None:
    from event_tensor.model import compile_model, preset

    out.mkdir(parents=True, exist_ok=True)
    cache = Path(tempfile.mkdtemp(prefix="et-snapshot-"))
    manifest = {}
    try:
        for name, (model, target, kwargs) in CASES.items():
            if only and only not in name:
                continue
            start = time.perf_counter()
            options = {"format": "isa"} if target == "cuda" else {}
            kwargs = {"max_context": 1024 if target == "cuda" else 64, **kwargs}
            art = compile_model(preset(model), target=target, cache_dir=cache, out_dir=cache / name, **kwargs,
                                **options)
            for part, data in _outputs(Path(art)).items():
                (out / f"{name}.{part}").write_bytes(data)
                manifest[f"{name}.{part}"] = hashlib.sha256(data).hexdigest()
            print(f"{name}: {time.perf_counter() - start:.1f} s", flush=True)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))


def compare(new: Path, old: Path) -> int:
    a = json.loads((old / "manifest.json").read_text())
    b = json.loads((new / "manifest.json").read_text())
    differ = 0
    for key in sorted(set(a) & set(b)):
        if a[key] == b[key]:
            continue
        differ += 1
        old_lines = (old / key).read_text(errors="replace").splitlines()
        new_lines = (new / key).read_text(errors="replace").splitlines()
        diff = list(difflib.unified_diff(old_lines, new_lines, str(old / key), str(new / key), n=1, lineterm=""))
        print(f"DIFFERS {key}: {len(diff)} diff lines")
        print("\n".join(diff[:40]))
    for key in sorted(set(a) ^ set(b)):
        print(f"ONLY IN {'old' if key in a else 'new'}: {key}")
    same = len(set(a) & set(b)) - differ
    print(f"{same} identical, {differ} different, {len(set(a) ^ set(b))} unmatched")
    return 1 if differ or set(a) ^ set(b) else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--compare", type=Path, help="a snapshot to compare against")
    parser.add_argument("--only", help="cases whose name contains this")
    args = parser.parse_args()
    snapshot(args.out, args.only)
    if args.compare:
        sys.exit(compare(args.out, args.compare))


if __name__ == "__main__":
    main()
