"""The end of the decode step: the final norm (in the LM head's tiles with
fused norms), the LM head, and the next token (greedy, or sampled at the
row's temperature, from what its top-k, top-p and min-p filters leave on
one device, after its logit biases and its repetition, frequency and
presence penalties there, which its log-probabilities follow), an argmax in two stages (one tile per
vocabulary chunk, then one over the chunks' candidates; on several devices
every device's candidates are gathered between). On one device the
`argmax` tile then advances the rows to the next step
(`steps.advance_body`)."""

from __future__ import annotations

from ...collectives import gather_candidates
from ...dialects import arith, et, memref
from .linear import linear_body, norm_input
from .steps import advance_body

__all__ = ["head_tasks"]


def head_tasks(ctx, prev: str) -> None:
    """The tasks after the layers of the `DecodeContext` `ctx`; `prev` is
    the event of the last layer's end (per-layer kernels)."""
    A, H, L, V_lm, lay, const = ctx.A, ctx.H, ctx.L, ctx.V_lm, ctx.layout, ctx.const
    layered, tp, task = ctx.options.layered, ctx.options.tp, ctx.task

    def wait_for_layers():
        if layered:
            et.wait(ctx.events[ctx.layer_done], [const(L - 1)])

    lm_body, lm_tiles, lm_bytes, lm_flops = linear_body(ctx, lambda l: A["lm_head"], V_lm, H, ctx.normalized_rows,
                                                       A["logits"])
    if ctx.options.fuse_norms:
        def lm_head_body(t):
            wait_for_layers()
            lm_body(None, t, *norm_input(ctx, A["final_norm"], t, "lm_head"))
        task("lm_head", [lm_tiles], [prev] if not layered else [], lm_head_body, nbytes=lm_bytes,
             flops=lm_flops)
    else:
        def final_norm_body(b):
            wait_for_layers()
            ctx.norm_row(A["final_norm"], b)
        task("final_norm", [ctx.B], [prev] if not layered else [], final_norm_body, nbytes=2 * H, flops=5 * H)
        task("lm_head", [lm_tiles], ["final_norm"], lambda t: lm_body(None, t), nbytes=lm_bytes,
             flops=lm_flops)
    chunk = -(-V_lm // lay.argmax_chunks)
    # On one device a row whose temperature is above 0 samples (Gumbel-max
    # keys from its seed and position) from what its top-k, top-p and min-p
    # filters leave (a tile per row applies the row's logit biases and
    # penalties, then finds the least logit the filters keep); the others
    # take the greedy token.
    sample, before = {}, "lm_head"
    if tp == 1:
        # A tile per row (the compiled batch's rows, or one per argmax_part
        # tile if there are more of those, so that each of them follows a
        # filter tile on its worker: with one filter tile as the only
        # producer, the static schedule stacked argmax_part tiles on its
        # worker); tiles past the launch's batch only signal. Static tile
        # counts keep the layered kernel's tile graph checkable.
        def filter_row(m):
            # The row's input token into its slot's history (every thread
            # stores it, so each reads it back in program order), its logit
            # biases, its penalties over that history, its log-probabilities
            # if it asks, then its filters' threshold.
            pos = arith.IndexCastOp(ctx.idx, memref.LoadOp(A["positions"], [m]).result).result
            slot = ctx.slot_of(m)
            memref.StoreOp(memref.LoadOp(A["tokens"], [m]).result, A["history"], [slot, pos])
            et.logit_bias(A["logits"], m, A["logit_bias_ids"], A["logit_bias_values"])
            et.penalize(A["logits"], m, A["history"], slot, arith.AddIOp(pos, const(1)).result,
                        A["outputs_from"], A["repetition_penalty"], A["frequency_penalty"], A["presence_penalty"],
                        A["penalty_counts"])
            # The log-probabilities of the logits the sampler sees (before
            # temperature and filters): the row's log-sum-exp, and its top
            # ids at the next token's position of its slot.
            at = arith.AddIOp(arith.MulIOp(slot, const(lay.cache_len + 1)).result,
                              arith.AddIOp(pos, const(1)).result).result
            et.top_logprobs(A["logits"], m, A["logprobs"], A["token_lse"], A["out_top_ids"], A["out_top_logprobs"], at)
            et.sample_threshold(A["logits"], m, A["temperature"], A["top_k"], A["top_p"], A["min_p"],
                                A["threshold"])

        def sample_filter_body(m):
            live = arith.CmpIOp(arith.CmpIPredicate.ult, m, ctx.batch).result
            # The row ops, which greedy rows skip, in a function of their
            # own: inline, their code slowed the kernel's other tiles
            # (docs/experiments/2026-12-07-outlined-row-stage.md).
            ctx.guarded(live, lambda: ctx.outlined(lambda: filter_row(m)))
        task("sample_filter", [max(ctx.B, lay.argmax_chunks)], ["lm_head"], sample_filter_body, nbytes=0, flops=0)
        sample = dict(temperature=A["temperature"], seed=A["seed"], counter=A["positions"],
                      threshold=A["threshold"])
        before = "sample_filter"
    else:
        # On several devices, temperature without filters: each device's
        # keys are those its share of the vocabulary has in the whole
        # (key_offset), so the gathered best key is the sample one device
        # would draw.
        sample = dict(temperature=A["temperature"], seed=A["seed"], counter=A["positions"])
    def rows(buf, width, elt):
        # One-row kernels give the argmax a static row, so that its
        # lowering keeps only its one-row path (the whole worker on the row).
        return buf if ctx.B > 1 else ctx.one_row(buf, 0, width, elt)

    def argmax_part(t):
        offset = dict(key_offset=arith.MulIOp(et.device_id(), const(V_lm)).result) if tp > 1 else {}
        et.argmax(rows(A["logits"], V_lm, ctx.f32), rows(A["part_val"], lay.argmax_chunks, ctx.f32),
                  rows(A["part_idx"], lay.argmax_chunks, ctx.i32), arith.MulIOp(t, const(chunk)).result,
                  const(chunk), t, **sample, **offset)
    task("argmax_part", [lay.argmax_chunks], [before], argmax_part, nbytes=4 * chunk, flops=chunk,
         peers=tp if tp > 1 else 0)
    candidates, cand_val, cand_idx = lay.argmax_chunks, A["part_val"], A["part_idx"]
    if tp > 1:
        # Every device's candidates, device by device, with indices
        # into the whole vocabulary.
        task("gather", [1], ["argmax_part"],
             lambda t: gather_candidates(A["part_val"], A["part_idx"], A["all_val"], A["all_idx"], ctx.batch,
                                         lay.argmax_chunks, tp, V_lm),
             nbytes=8 * tp * lay.argmax_chunks, flops=0)
        candidates, cand_val, cand_idx = tp * lay.argmax_chunks, A["all_val"], A["all_idx"]
    advance = advance_body(ctx) if tp == 1 else None

    def final_argmax(t):
        # (On several devices the gathered candidates keep their rows.)
        val, idx = (rows(cand_val, candidates, ctx.f32), rows(cand_idx, candidates, ctx.i32)) if tp == 1 \
            else (cand_val, cand_idx)
        et.argmax(val, rows(A["next_val"], 1, ctx.f32), rows(A["next_token"], 1, ctx.i32), const(0),
                  const(candidates), const(0), from_=idx)
        if advance:
            # One device: the step ends here (a hop and a tile fewer than
            # an `advance` task after it).
            advance(t)
    task("argmax", [1], ["gather" if tp > 1 else "argmax_part"], final_argmax, nbytes=8 * candidates,
         flops=candidates)
