"""A Hugging Face model directory made ready to serve: its config compiled
into a decode kernel (into the compile cache on first use, so a second
start is warm), its safetensors weights loaded into a `DecodeSession`, its
tokenizer, and the engine that batches requests over the session."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from ..model import compile_model
from ..model.config import ModelConfig
from ..model.layout import default_context
from ..model.session import DecodeSession
from ..model.weights import load_weights
from .engine import Engine
from .text import TextCodec

__all__ = ["ServedModel", "open_model"]


@dataclass
class ServedModel:
    """What `open_model` returns: the session, the text codec, the engine
    (already running), and the seconds its start took (compile or cache
    hit, weights, tokenizer)."""

    name: str
    config: ModelConfig
    session: DecodeSession
    codec: TextCodec
    engine: Engine
    start_s: float

    def close(self) -> None:
        self.engine.close()
        self.session.close()


def open_model(model_dir: str | Path, *, device: str = "cpu", max_batch: int = 4, max_context: int | None = None,
               workers: int | None = None, prefill_rows: int | None = None, chunk: int = 256,
               cache_dir: str | Path | None = None, name: str | None = None,
               timeout_s: float = 30.0, tp: int = 1, kv_memory: int | None = None,
               gpu_memory_fraction: float | None = None, reuse_prefixes: bool = True) -> ServedModel:
    """Compiles (or finds in the cache) the decode kernel of the model in
    `model_dir` for `device` ("cpu" or "cuda"), `max_batch` concurrent
    sequences and `max_context` tokens each (default
    `model.layout.default_context`: 1024, or the model's
    max_position_embeddings where that is smaller), and starts an `Engine`
    on it.
    `prefill_rows` (default `model.compile.default_prefill_rows`: 512 on
    cuda, none on cpu or for a model with experts) adds the prefill kernel that feeds prompts in launches of
    that many positions. `tp` > 1 splits the model over that many GPUs
    (tensor parallelism; on cpu, groups of worker threads). `kv_memory`
    (bytes) or `gpu_memory_fraction` pages the KV caches
    (`DecodeSession(kv_memory=...)`, `DecodeSession(gpu_memory_fraction=...)`).
    `reuse_prefixes` is the engine's (`Engine`: a prompt takes the keys and
    values of its first tokens from a cache slot that holds them).
    Raises ConfigError, WeightError or TextError (ValueErrors) naming what
    is wrong with the directory."""
    start = time.perf_counter()
    path = Path(model_dir)
    if not path.is_dir():
        raise ValueError(f"{path}: not a directory (a Hugging Face model directory: config.json, *.safetensors, "
                         "tokenizer.json)")
    config = ModelConfig.from_hf(path)
    if max_context is None:
        max_context = default_context(config)
    codec = TextCodec(path)
    if codec.vocab_size > config.vocab_size:
        raise ValueError(f"{path}: the tokenizer has {codec.vocab_size} tokens, the model's vocabulary "
                         f"{config.vocab_size}")
    weights = load_weights(config, [path])
    if prefill_rows is None:
        from ..model.compile import default_prefill_rows  # (MLIR: the engine and server run without it)


        prefill_rows = default_prefill_rows(config, device, max_context)
    options, out_dir = {}, None
    if device != "cuda" and max_batch > 16:
        # More rows than the et.linear row tiles take: the tensor-core
        # tiles' loops on the host.
        options = {"linear_tile": "mma"}
    if device == "cuda":
        # Cubins (no driver compile at load); tensor-core tiles for the
        # batches where they win, as kernel variants in a directory of
        # the cache (each variant's kernel itself comes from the compile
        # cache when its IR is unchanged).
        from ..build import default_cache_dir
        from ..model.compile import shape_buckets

        options = {"format": "bin", "linear_tile": "auto"}
        if max_batch > 1:
            # A kernel per batch bucket of `specialize=True` (the one-row
            # kernel among them: a lone request decodes as fast as in a
            # max_batch 1 artifact), one context bucket (every kernel of
            # several rows chooses its split length per launch).
            batches, _ = shape_buckets(max_batch, max_context, True)
            options["specialize"] = {"batches": batches}
            root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
            out_dir = root / "models" / (f"{path.resolve().name}-b{max_batch}-c{max_context}-p{prefill_rows}"
                                         f"-w{workers or 'default'}" + (f"-tp{tp}" if tp > 1 else ""))
    artifact = compile_model(config, target=device, max_batch=max_batch, max_context=max_context, workers=workers,
                             prefill_rows=prefill_rows, cache_dir=cache_dir, out_dir=out_dir, tp=tp, **options)
    session = DecodeSession(artifact, weights, timeout_s=timeout_s, kv_memory=kv_memory,
                            gpu_memory_fraction=gpu_memory_fraction)
    engine = Engine(session, eos_ids=codec.eos_ids, chunk=chunk, reuse_prefixes=reuse_prefixes)
    return ServedModel(name or path.resolve().name, config, session, codec, engine, time.perf_counter() - start)
