"""The decode kernel's arguments: the token rows, the weights and KV caches
it shares with the prefill kernel, and its activation buffers, with the
sizing of the norm scratch `xs` and the choice of `qkv` tiles by matrix
that it depends on."""

from __future__ import annotations

from ..layout import MAX_LOGIT_BIAS, MAX_STOP_IDS, MAX_TOP_LOGPROBS, SAMPLE_CANDIDATES
from .moe import expert_buffers
from .tiles import norm_scratch_rows
from ...ir import IntegerType
from .views import DYN, model_arguments, mr

__all__ = ["decode_arguments", "plan_scratch"]


def plan_scratch(ctx) -> tuple[int, int, bool]:
    """(rows of the norm scratch `xs`, rows per `qkv` tile of q, k and v
    together, whether the `qkv` tiles go by matrix) of the `DecodeContext`
    `ctx`: `options.qkv_by_matrix`, or when None the builder's choice."""
    c, lay, options = ctx.c, ctx.layout, ctx.options
    norm_in_linear, mma, rows_for = options.norm_tasks, ctx.mma, ctx.rows_for
    # Tiles that normalize into the global scratch (fuse_norms): qkv,
    # gate/up, LM head, unless they read h through their norms or keep
    # their rows in shared memory.
    global_xs = options.fuse_norms and options.norm_scratch == "global" and \
        not {"qkv", "mlp", "lm_head"} <= set(norm_in_linear)
    xs_rows = norm_scratch_rows(ctx.config, lay.workers, tp=options.tp, linear_tile=options.linear_tile,
                                rows_for=rows_for, max_batch=lay.max_batch) if global_xs else 1
    # qkv tiles by matrix: the rows per tile of q, k and v together.
    qkv_total = (c.num_heads + 2 * c.num_kv_heads) * c.head_dim
    qkv_rows = rows_for(qkv_total, c.hidden_size)
    divides = (c.num_heads * c.head_dim) % qkv_rows == 0 and (c.num_kv_heads * c.head_dim) % qkv_rows == 0
    qkv_by_matrix = options.qkv_by_matrix
    if qkv_by_matrix is None:
        q_tiles = -(-(c.num_heads * c.head_dim) // rows_for(c.num_heads * c.head_dim, c.hidden_size))
        qkv_by_matrix = (not mma and lay.max_batch == 1 and divides and qkv_total // qkv_rows <= q_tiles)
    if qkv_by_matrix and not mma:
        if not divides:
            raise ValueError(f"qkv_by_matrix needs rows per tile ({qkv_rows}) that divide the "
                             f"{c.num_heads * c.head_dim} q and {c.num_kv_heads * c.head_dim} k and v rows")
        if global_xs and "qkv" not in norm_in_linear:
            xs_rows = max(xs_rows, qkv_total // qkv_rows)
    scratch_rows = options.scratch_rows
    if scratch_rows is not None:
        if scratch_rows < xs_rows:
            raise ValueError(f"scratch_rows {scratch_rows} is below the {xs_rows} tiles that normalize into it")
        xs_rows = scratch_rows
    return xs_rows, qkv_rows, qkv_by_matrix


def decode_arguments(ctx) -> tuple[list, tuple]:
    """(The kernel's arguments as (name, type), in order; the names of the
    symmetric ones) of the `DecodeContext` `ctx`. The session passes them
    by the names the artifact's metadata lists."""
    lay, tp = ctx.layout, ctx.options.tp
    H, I, Hq, Hkv, D, V_lm, B = ctx.H, ctx.I, ctx.Hq, ctx.Hkv, ctx.D, ctx.V_lm, ctx.B
    bf16, f32, i32, idx = ctx.bf16, ctx.f32, ctx.i32, ctx.idx
    args = [("batch", idx), ("tokens", mr([DYN], i32)), ("positions", mr([DYN], i32)), ("slots", mr([DYN], i32))]
    args += [(n, mr([V_lm, H], bf16) if n == "lm_head" else t) for n, t in model_arguments(ctx.c, lay)]
    args += [("h", mr([DYN, H], f32)), ("xn", mr([DYN, H], bf16)),
             ("xs", mr([ctx.xs_rows, B, H], bf16)),
             ("q", mr([DYN, Hq, D], f32)), ("k", mr([DYN, Hkv, D], f32)), ("v", mr([DYN, Hkv, D], f32)),
             ("o_part", mr([DYN, lay.splits, Hq, D], f32)), ("lse", mr([DYN, lay.splits, Hq], f32)),
             ("attn", mr([DYN, Hq, D], bf16)),
             *(expert_buffers(ctx) if ctx.c.moe else
               [("g", mr([DYN, I], f32)), ("u", mr([DYN, I], f32)), ("act", mr([DYN, I], bf16))]),
             ("logits", mr([DYN, V_lm], f32)),
             ("part_val", mr([DYN, lay.argmax_chunks], f32)), ("part_idx", mr([DYN, lay.argmax_chunks], i32)),
             ("next_val", mr([DYN, 1], f32)), ("next_token", mr([DYN, 1], i32))]
    symmetric = ()
    # Sampling (a row's temperature, 0 for greedy, and seed; on one device
    # also the filters and the threshold they give: et.sample_threshold).
    i64 = IntegerType.get_signless(64)
    args += [("temperature", mr([DYN], ctx.f32)), ("seed", mr([DYN], i64))]
    if tp == 1:
        args += [("top_k", mr([DYN], i32)), ("top_p", mr([DYN], f32)), ("min_p", mr([DYN], f32)),
                 ("threshold", mr([DYN], f32))]
        # The penalties (et.penalize): a row's repetition, frequency and
        # presence penalties and the position of its first generated token;
        # every cache slot's tokens by position on the device (the filter
        # tiles and the prefill kernel record them), and the scratch counts.
        args += [("repetition_penalty", mr([DYN], f32)), ("frequency_penalty", mr([DYN], f32)),
                 ("presence_penalty", mr([DYN], f32)), ("outputs_from", mr([DYN], i32)),
                 ("history", mr([lay.cache_slots, lay.cache_len], i32)), ("penalty_counts", mr([DYN, V_lm], i32))]
        # A row's logit biases (et.logit_bias, before the penalties): token
        # ids and the values added to their logits (0: none).
        args += [("logit_bias_ids", mr([DYN, MAX_LOGIT_BIAS], i32)),
                 ("logit_bias_values", mr([DYN, MAX_LOGIT_BIAS], f32))]
        # Log-probabilities (et.top_logprobs, after the penalties): how many
        # of the most likely ids a row asks for with each token's (-1: none,
        # 0: the token's alone), its log-sum-exp, and per cache slot and
        # position the token's log-probability and the top ids with theirs
        # (rows slot * (positions + 1) + position), beside `out_tokens`.
        lists = lay.cache_slots * (lay.cache_len + 1)
        # A row that scores a given sequence takes its tokens, from the
        # slot's history, below position `forced_to` (0: none).
        args += [("logprobs", mr([DYN], i32)), ("token_lse", mr([DYN], f32)), ("forced_to", mr([DYN], i32)),
                 ("out_logprobs", mr([lay.cache_slots, lay.cache_len + 1], f32)),
                 ("out_top_ids", mr([lists, MAX_TOP_LOGPROBS], i32)),
                 ("out_top_logprobs", mr([lists, MAX_TOP_LOGPROBS], f32))]
        # Each asking row's chunks reduced to their largest logits (ids and
        # values) and their sums (et.top_candidates), which the row's
        # threshold and log-probabilities read.
        C, K = lay.argmax_chunks, SAMPLE_CANDIDATES
        # Whether a filtered row's kept columns are all among them.
        args += [("cand_ids", mr([DYN, C, K], i32)), ("cand_vals", mr([DYN, C, K], f32)),
                 ("cand_stats", mr([DYN, C, 4], f32)), ("sample_covered", mr([DYN], i32))]
    # Steps in one launch (`kernel.steps`): the step budget, the stop flag,
    # the host's request to end the launch after the current step, each
    # row's budget of new tokens, stop ids and finish reason, and every
    # cache slot's tokens by position (the caches' storage shape, so that
    # every kernel variant shares them).
    args += [("steps", idx), ("stop", mr([1], i32)), ("interrupt", mr([1], i32)), ("remaining", mr([DYN], i32)),
             ("stop_ids", mr([DYN, MAX_STOP_IDS], i32)), ("finished", mr([DYN], i32)),
             ("out_tokens", mr([lay.cache_slots, lay.cache_len + 1], i32))]
    if tp > 1:
        # Partial sums of the row-parallel layers, read by every device;
        # every device's argmax candidates, gathered into all_val/all_idx;
        # the stop flag, which any copy raises on all.
        args += [("part_o", mr([B, H], f32)), ("part_d", mr([B, H], f32)),
                 ("all_val", mr([DYN, tp * lay.argmax_chunks], f32)),
                 ("all_idx", mr([DYN, tp * lay.argmax_chunks], i32))]
        symmetric = ("part_o", "part_d", "part_val", "part_idx", "stop")
    return args, symmetric
