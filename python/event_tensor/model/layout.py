"""The compile-time shape of a decode kernel (`KernelLayout`): its batch
and context, attention split length, argmax chunks, workers and KV-cache
storage, which model.json records for the runtime. No MLIR here."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .config import ModelConfig

__all__ = ["KernelLayout", "MAX_TOP_LOGPROBS", "MIN_SPLIT_LEN", "MIN_SPLIT_LEN_ONE_ROW", "SAMPLE_CANDIDATES", "cache_shape",
           "kernel_layout"]

#: The shortest attention split the defaults choose, at compile time and at
#: run time: a tile has a fixed cost of a few us, so shorter splits cost
#: more than they spread.
MIN_SPLIT_LEN = 256
#: The same for kernels of one row (max_batch 1): there a row's attention
#: tiles are the only ones, and with the merge per KV head, 128 positions
#: (8 tiles per KV head at 1k context) measured 1-3% faster than 256 on
#: the H200 (docs/experiments/2026-11-25-attention-chain-shortened.md).
MIN_SPLIT_LEN_ONE_ROW = 128


def cache_shape(layers: int, slots: int, positions: int, kv_heads: int, head_dim: int) -> list[int]:
    """The KV caches' shape: [slot, position, layer, KV head, D]. A slot's
    rows of one position, over all layers, are contiguous, and so are its
    first n positions: the session backs a slot's memory page by page as
    its sequence grows (`runtime.kv_pages`)."""
    return [slots, positions, layers, kv_heads, head_dim]


#: Stop ids per row of a kernel that runs many steps per launch (EOS and the
#: user's; unused entries are -1).
MAX_STOP_IDS = 8
#: Logit bias entries per row (et.logit_bias: one per thread of a worker in
#: one trip; the OpenAI API's requests carry up to 300, most a handful).
MAX_LOGIT_BIAS = 256
#: The most likely ids a row may ask for with each token's log-probability
#: (et.top_logprobs; the OpenAI API's chat completions allow 20).
MAX_TOP_LOGPROBS = 20
#: Candidates per vocabulary chunk (et.top_candidates) of a row that asks
#: for log-probabilities or filters: the row's threshold and top ids come
#: from them. At least MAX_TOP_LOGPROBS; top-k up to it is decided there
#: (50, a common top-k, included), a larger one scans the whole row.
SAMPLE_CANDIDATES = 64
#: A row's `finished` word in such a kernel: 0 while it runs, else why it
#: stopped (kernel/steps.py writes it, the session reads it): a stop id, its
#: budget of new tokens, the compiled context, a token outside the
#: vocabulary (NaN logits).
FINISH_STOP, FINISH_LENGTH, FINISH_CONTEXT, FINISH_NONFINITE = 1, 2, 3, 4
FINISH_REASONS = {FINISH_STOP: "stop", FINISH_LENGTH: "length", FINISH_CONTEXT: "context",
                  FINISH_NONFINITE: "nonfinite"}


@dataclass(frozen=True)
class KernelLayout:
    """Compile-time shape choices of a decode kernel; the runtime needs them
    to allocate buffers (stored in the artifact's model.json)."""

    max_batch: int
    max_context: int
    split_len: int
    argmax_chunks: int
    workers: int
    #: The KV caches' slots and positions (storage), at least max_batch and
    #: max_context; 0 means equal to them.
    cache_batch: int = 0
    cache_context: int = 0

    @property
    def splits(self) -> int:
        return -(-self.max_context // self.split_len)

    @property
    def runtime_splits(self) -> bool:
        """Whether the attention split length is chosen per launch (see
        `Attention.split_of` in model/kernel/attention.py): for kernels of
        several rows whose rows have several splits longer than
        MIN_SPLIT_LEN, where the launch's choice can add tiles. With splits of MIN_SPLIT_LEN it can
        only rebalance splits already as short as is worth it (measured
        1-2% slower on the H200), with one split per row there is nothing
        to choose, and a one-row kernel's static split already makes about
        one wave at its full context (its staged KV path measured 1-5%
        slower with a computed split length). docs/experiments/2026-11-25-split-per-launch.md."""
        return self.max_batch > 1 and self.splits > 1 and self.split_len > MIN_SPLIT_LEN

    @property
    def cache_slots(self) -> int:
        return self.cache_batch or self.max_batch

    @property
    def cache_len(self) -> int:
        return self.cache_context or self.max_context

    def to_dict(self) -> dict:
        return dict(max_batch=self.max_batch, max_context=self.max_context, split_len=self.split_len,
                    argmax_chunks=self.argmax_chunks, workers=self.workers, cache_batch=self.cache_slots,
                    cache_context=self.cache_len)


#: The most rows of a decode kernel (the tensor-core tiles' kernels; the
#: `et.linear` row tiles take up to MAX_LINEAR_ROWS).
MAX_BATCH = 64
MAX_LINEAR_ROWS = 16


#: The context a kernel is compiled for where none is given.
DEFAULT_CONTEXT = 1024


def default_context(config: ModelConfig) -> int:
    """DEFAULT_CONTEXT, or the model's max_position_embeddings where that is
    smaller (the most `kernel_layout` takes)."""
    return min(DEFAULT_CONTEXT, config.max_position_embeddings)


def kernel_layout(config: ModelConfig, *, max_batch: int, max_context: int, workers: int,
                  split_len: int | None = None, cache_batch: int | None = None,
                  cache_context: int | None = None, min_batch: int = 1) -> KernelLayout:
    """The layout of a kernel for up to `max_batch` rows and `max_context`
    positions. `cache_batch` / `cache_context` (default: the same) give the
    KV caches a larger storage shape, shared with other kernels.
    `min_batch` is the smallest batch the kernel is meant for (a kernel
    variant's range starts there); it only steers the default split
    length."""
    if isinstance(max_batch, bool) or not isinstance(max_batch, int) or not 1 <= max_batch <= MAX_BATCH:
        raise ValueError(f"max_batch must be an int in [1, {MAX_BATCH}], got {max_batch!r}")
    if isinstance(max_context, bool) or not isinstance(max_context, int) or max_context < 1:
        raise ValueError(f"max_context must be a positive int, got {max_context!r}")
    if max_context > config.max_position_embeddings:
        raise ValueError(f"max_context {max_context} exceeds the model's max_position_embeddings "
                         f"{config.max_position_embeddings}")
    if isinstance(min_batch, bool) or not isinstance(min_batch, int) or not 1 <= min_batch <= max_batch:
        raise ValueError(f"min_batch must be an int in [1, max_batch {max_batch}], got {min_batch!r}")
    if split_len is None:
        # About one wave of attention tiles (rows x KV heads x splits, one
        # tile per worker) at full context, for the geometric middle of the
        # batches the kernel serves; a power of two, and at least 256
        # positions (128 for one-row kernels): a tile has a fixed cost of a
        # few us, so short splits cost more than they spread. Measured on
        # the H200 (docs/experiments/2026-11-24-split-length-follows-batch.md): the best split at every (batch,
        # context) of Llama-3.2-1B
        # and Qwen3-0.6B tried, but one within 1.3%; at batch 1 and 1k
        # context 256 then, 128 since the merge per KV head.
        rows = math.sqrt(min_batch * max_batch)
        least = MIN_SPLIT_LEN_ONE_ROW if max_batch == 1 else MIN_SPLIT_LEN
        split_len = max(least, math.ceil(max_context * config.num_kv_heads * rows / workers))
        split_len = 1 << (split_len - 1).bit_length()
        split_len = min(split_len, max(16, -(-max_context // 16) * 16))
    if split_len < 1:
        raise ValueError(f"split_len must be positive, got {split_len}")
    chunks = max(1, min(workers, -(-config.vocab_size // 1024)))
    for name, value, least in (("cache_batch", cache_batch, max_batch), ("cache_context", cache_context, max_context)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
            raise ValueError(f"{name} must be an int of at least {least}, got {value!r}")
    return KernelLayout(max_batch, max_context, split_len, chunks, workers, cache_batch or 0, cache_context or 0)
