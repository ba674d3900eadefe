"""The build choices of a decode kernel (`KernelOptions`), declared, checked,
given their target- and batch-dependent defaults, and written to and read
from the artifact's model.json, each in one place. No MLIR here:
`DecodeSession` reads them back."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

__all__ = ["KernelOptions", "NORM_IN_LINEAR_MAX_HIDDEN", "NORM_TASKS", "WIDE_HIDDEN", "wide_one_row"]

#: The tasks whose linear tiles read the normalized residual stream, and so
#: can fold its norm into their linear op (`norm_in_linear`).
NORM_TASKS = ("qkv", "mlp", "lm_head", "router")

#: The hidden sizes whose one-row cuda kernels read h through their norms by
#: default (norm_in_linear): Qwen3-0.6B's 1024; Llama-3.2-1B's 2048 spills.
NORM_IN_LINEAR_MAX_HIDDEN = 1024

#: Models of at least this hidden size (Qwen3-4B, Llama-3.2-3B and up) are
#: wide: their one-row cuda kernels keep the plainer tiles that the
#: defaults of narrower models replaced (`wide_one_row`).
WIDE_HIDDEN = 2560


def wide_one_row(config, max_batch: int) -> bool:
    """A one-row kernel of a wide model (hidden size >= WIDE_HIDDEN). Such
    kernels take `tile_linear="rows"`, no `o_per_head` and no weight
    staging across tiles: the choices measured faster for models of hidden
    size 1024-2048 (Qwen3-0.6B, Llama-3.2-1B, Qwen3-1.7B) were each slower
    from 2560 (their kernels spill: 512-536-byte stack frames against 96).
    With all three, on the H200, Llama-3.1-8B's step took 4.49 ms against
    5.48, Llama-3.2-3B's 2.43 against 3.69 and Qwen3-4B's 3.17 against
    4.43; on the H100 Llama-3.1-8B 5.94 against 6.94 and Qwen3-8B 6.11
    against 7.21; on two GPUs (`tp=2`, which never took `o_per_head` or
    staging) the row tiles alone made Llama-3.1-8B's step 2.93 against
    3.05 ms on the H200 (docs/experiments/2026-11-28-wide-models.md)."""
    return max_batch == 1 and config.hidden_size >= WIDE_HIDDEN


@dataclass(frozen=True)
class KernelOptions:
    """How `build_decode_kernel` builds a decode step; `compile_model` takes
    the same names as keywords and records them in model.json.

    A field left None (and `linear_tile="auto"`) is chosen for the kernel:
    `resolve` gives `layered`, `o_per_head`, `norm_in_linear` and
    `norm_scratch` the defaults of a target and batch (`compile_model`
    resolves them per kernel, so each batch variant takes those of its own
    max_batch, and picks the tile kind of each variant for "auto");
    `qkv_by_matrix` and `qk_heads` are chosen by the builder, from the
    rows per tile and the workers. See `build_decode_kernel` for what each
    does."""

    #: One task per kind over (layer, tile) instead of one per layer; None:
    #: layered unless the schedule is dynamic.
    layered: bool | None = None
    #: Devices the model is split over (tensor parallelism).
    tp: int = 1
    #: "rows" (et.linear), "mma" (et.matmul tensor-core tiles), or "auto"
    #: (both, as kernel variants by batch).
    linear_tile: str = "rows"
    gated_mlp: bool = True
    qkv_by_matrix: bool | None = None
    o_per_head: bool | None = None
    #: True, False, or a tuple of names from NORM_TASKS.
    norm_in_linear: bool | tuple | None = None
    #: "global" or "shared".
    norm_scratch: str | None = None
    #: Each linear tile normalizes its own input (True), or one tile per
    #: row normalizes it once per norm (False); None: chosen by `resolve`.
    fuse_norms: bool | None = None
    #: KV heads per `qk` tile.
    qk_heads: int | None = None
    #: Rows of the norm scratch `xs` (at least what the kernel's tiles need).
    scratch_rows: int | None = None
    #: With experts: a `combine` tile per row adds the experts' outputs into
    #: h in the router's order (the same bits every run), or (False) each
    #: `exp_down` tile adds its share, times the router's weight, into h
    #: with atomic adds (one phase fewer per layer).
    expert_combine: bool | None = None
    #: The tensor-core tiles of the layers that add into h (`o`, `down`)
    #: split K over several tiles whose partial sums meet in h through
    #: atomic adds (`kernel.tiles.mma_split`; one device only, whose `o`
    #: and `down` add into h); False keeps one tile per block of h, whose
    #: sums keep their bits from run to run.
    split_k: bool | None = None

    def __post_init__(self):
        # A choice that the tile kind rules out is checked once the kind is
        # known ("auto" is resolved per kernel variant).
        mma = self.linear_tile == "mma"
        if self.fuse_norms is not None and not isinstance(self.fuse_norms, bool):
            raise ValueError(f"fuse_norms must be a bool or None, got {self.fuse_norms!r}")
        unfused = self.fuse_norms is False
        if self.tp != 1 and self.layered is not None and not self.layered:
            raise ValueError("tensor parallelism (tp > 1) needs the layered kernel")
        if self.linear_tile not in ("rows", "mma", "auto"):
            raise ValueError(f"linear_tile must be 'rows', 'mma' or 'auto', got {self.linear_tile!r}")
        if self.qkv_by_matrix is not None and not isinstance(self.qkv_by_matrix, bool):
            raise ValueError(f"qkv_by_matrix must be a bool or None, got {self.qkv_by_matrix!r}")
        if not isinstance(self.gated_mlp, bool):
            raise ValueError(f"gated_mlp must be a bool, got {self.gated_mlp!r}")
        if self.o_per_head is not None and not isinstance(self.o_per_head, bool):
            raise ValueError(f"o_per_head must be a bool, got {self.o_per_head!r}")
        if self.o_per_head and (self.tp != 1 or mma):
            raise ValueError("o_per_head needs tp 1 and linear_tile 'rows'")
        if self.expert_combine is not None and not isinstance(self.expert_combine, bool):
            raise ValueError(f"expert_combine must be a bool or None, got {self.expert_combine!r}")
        if self.split_k is not None and not isinstance(self.split_k, bool):
            raise ValueError(f"split_k must be a bool or None, got {self.split_k!r}")
        if self.split_k and (self.linear_tile == "rows" or self.tp != 1):
            raise ValueError("split_k needs linear_tile 'mma' (or 'auto') and tp 1")
        norm_in_linear = self.norm_in_linear
        if isinstance(norm_in_linear, list):
            norm_in_linear = tuple(norm_in_linear)
            object.__setattr__(self, "norm_in_linear", norm_in_linear)
        if norm_in_linear is not None and not isinstance(norm_in_linear, bool) and (
                not isinstance(norm_in_linear, tuple) or not set(norm_in_linear) <= set(NORM_TASKS)):
            raise ValueError(f"norm_in_linear must be a bool or a list of {', '.join(NORM_TASKS)}, "
                             f"got {norm_in_linear!r}")
        if self.norm_tasks and (mma or unfused):
            raise ValueError("norm_in_linear needs fuse_norms and linear_tile 'rows'")
        if self.norm_scratch not in (None, "global", "shared"):
            raise ValueError(f"norm_scratch must be 'global' or 'shared', got {self.norm_scratch!r}")
        if self.norm_scratch == "shared" and (mma or unfused):
            raise ValueError("norm_scratch='shared' needs fuse_norms and linear_tile 'rows'")

    @property
    def norm_tasks(self) -> tuple:
        """The tasks whose linear op reads h through its norm (`norm_in_linear`)."""
        if isinstance(self.norm_in_linear, bool) or self.norm_in_linear is None:
            return NORM_TASKS if self.norm_in_linear else ()
        return self.norm_in_linear

    @property
    def resolved(self) -> bool:
        """Whether every choice that `resolve` makes is made (what
        `build_decode_kernel` needs)."""
        return None not in (self.layered, self.o_per_head, self.norm_in_linear, self.norm_scratch,
                            self.fuse_norms, self.expert_combine, self.split_k) and \
            self.linear_tile != "auto"

    def check(self, num_kv_heads: int) -> None:
        """The checks that need the model: `qk_heads` divides the KV heads
        (`num_kv_heads`, of all devices)."""
        q = self.qk_heads
        if q is not None and (isinstance(q, bool) or not isinstance(q, int) or q < 1 or num_kv_heads // self.tp % q):
            raise ValueError(f"qk_heads must be a positive divisor of the {num_kv_heads // self.tp} KV heads, "
                             f"got {q!r}")

    def resolve(self, config, *, target: str, max_batch: int, mode: str | None = None) -> "KernelOptions":
        """These options with the defaults of a kernel for `target` and
        `max_batch` rows of `config` in the fields left None:

        - `layered`: unless `mode` is "dynamic" (it needs the static
          schedule);
        - `o_per_head`: on cuda, for the `et.linear` tiles of one device,
          where it measured faster at every batch (H100, context 1024: 4-6%
          at batch 1, 1-3% at batches 2-16; docs/experiments/2026-11-26-o-per-head.md), except one-row kernels of
          wide models (`wide_one_row`); the host's kernels keep the merge
          task, whose results keep their bits from run to run;
        - `norm_in_linear`: for one-row cuda kernels of `et.linear` tiles
          and a hidden size up to NORM_IN_LINEAR_MAX_HIDDEN (Qwen3-0.6B:
          2.8-3% faster on the H200, 1-4% on the H100; Llama-3.2-1B's
          kernel, at 512 threads, spills; docs/experiments/2026-11-26-norm-in-linear.md);
          the `router` of a model with experts in every one-row cuda
          kernel (Qwen3-30B-A3B: 5-7% faster on the H100, one norm phase
          fewer per layer; with 16 rows 2-3% slower, every router tile
          then normalizing every row; docs/experiments/2026-11-28-qwen3-moe.md);
        - `norm_scratch`: "shared" for one-row kernels of `et.linear` tiles
          (1-3% faster there, same values), else "global";
        - `expert_combine`: off on cuda, where each `exp_down` tile adds
          its share into h atomically (Qwen3-30B-A3B one-row kernel on the
          H100: 2.5-6% faster; docs/experiments/2026-12-06-moe-phases.md),
          on for the host, whose results keep their bits from run to run;
        - `split_k`: for the tensor-core tiles of one cuda device
          (Llama-3.2-1B on the H100: the 16-row kernel 6-8% faster at
          batches 1-16, the 64-row kernel 9-13% at 32 and 64; Llama-3.1-8B's
          64-row kernel 6-7% with the tensor-core attention;
          docs/experiments/2026-12-06-split-k.md); the host's kernels keep
          whole K, whose results keep their bits from run to run;
        - `fuse_norms`: for `et.linear` tiles; the tensor-core tiles take
          a norm task of a tile per row instead, on one device or several
          (every one of their tiles normalized all the rows it multiplies:
          Llama-3.2-1B on the H100 at batch 16, 2004 LM-head tiles of 36 us
          each; docs/experiments/2026-11-28-norm-once-mma.md).

        `linear_tile="auto"` stays (compile_model picks it per variant)."""
        rows = self.linear_tile == "rows"
        fuse = self.fuse_norms if self.fuse_norms is not None else rows
        one_row = max_batch == 1 and rows and fuse
        norm_in_linear = target == "cuda" and one_row and config.hidden_size <= NORM_IN_LINEAR_MAX_HIDDEN
        if not norm_in_linear and target == "cuda" and one_row and config.moe:
            norm_in_linear = ("router",)
        o_per_head = target == "cuda" and self.tp == 1 and rows and not wide_one_row(config, max_batch)
        chosen = dict(fuse_norms=fuse, layered=mode != "dynamic", o_per_head=o_per_head,
                      norm_in_linear=norm_in_linear, norm_scratch="shared" if one_row else "global",
                      expert_combine=target != "cuda",
                      split_k=target == "cuda" and self.tp == 1 and self.linear_tile == "mma")
        return replace(self, **{k: v for k, v in chosen.items() if getattr(self, k) is None})

    def to_dict(self) -> dict[str, Any]:
        """The options by name, as `compile_model` takes them (model.json)."""
        d = asdict(self)
        if isinstance(self.norm_in_linear, tuple):
            d["norm_in_linear"] = list(self.norm_in_linear)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "KernelOptions":
        """The options of a model.json (or any dict naming them): keys that
        name no option (the artifact's config and layout, timings, options
        of earlier versions) are ignored, missing ones take the defaults."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})
