"""The end of the decode step: the final norm (in the LM head's tiles with
fused norms), the LM head, and the next token (greedy, or sampled at the
row's temperature, from what its top-k, top-p and min-p filters leave on
one device, after its logit biases and its repetition, frequency and
presence penalties there, which its log-probabilities follow), an argmax in two stages (one tile per
vocabulary chunk, then one over the chunks' candidates; on several devices
every device's candidates are gathered between). On one device the rows
that ask for log-probabilities or filters have each chunk reduced to its
largest logits and sums first (a tile per chunk), and a tile per row
finds the filters' threshold and the log-probabilities from those. On one device the
`argmax` tile then advances the rows to the next step
(`steps.advance_body`)."""

from __future__ import annotations

from ...collectives import gather_candidates
from ...dialects import arith, et, memref, scf
from ...ir import InsertionPoint, IntegerType
from ..layout import SAMPLE_CANDIDATES
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
    C = lay.argmax_chunks
    # On one device a row whose temperature is above 0 samples (Gumbel-max
    # keys from its seed and position), the others take the greedy token.
    # A tile per row first applies the row's logit biases and penalties;
    # the argmax_part tile of each chunk then takes its best key, and for a
    # row that asks for log-probabilities or filters also reduces the chunk
    # to its largest logits and sums (et.top_candidates); a tile per row
    # then finds the row's log-probabilities and the least logit its top-k,
    # top-p and min-p filters keep from those, and draws a filtered row's
    # token above it: over the candidates where they hold every column it
    # keeps, else over the row.
    sample, before = {}, "lm_head"
    if tp == 1:
        def per_row(body, when=None):
            # The row ops, which most rows skip, in a function of their
            # own: inline, their code slowed the kernel's other tiles
            # (docs/experiments/2026-12-07-outlined-row-stage.md).
            def tile(m):
                live = arith.CmpIOp(arith.CmpIPredicate.ult, m, ctx.batch).result
                if when is not None:
                    live = arith.AndIOp(live, when(m)).result
                ctx.guarded(live, lambda: ctx.outlined(lambda: body(m)))
            return tile

        def filter_row(m):
            # The row's input token into its slot's history (every thread
            # stores it, so each reads it back in program order), its logit
            # biases and its penalties over that history.
            pos = arith.IndexCastOp(ctx.idx, memref.LoadOp(A["positions"], [m]).result).result
            slot = ctx.slot_of(m)
            memref.StoreOp(memref.LoadOp(A["tokens"], [m]).result, A["history"], [slot, pos])
            et.logit_bias(A["logits"], m, A["logit_bias_ids"], A["logit_bias_values"])
            et.penalize(A["logits"], m, A["history"], slot, arith.AddIOp(pos, const(1)).result,
                        A["outputs_from"], A["repetition_penalty"], A["frequency_penalty"], A["presence_penalty"],
                        A["penalty_counts"])
        # A tile per row (the compiled batch's rows, or one per argmax_part
        # tile if there are more of those, so that each of them follows a
        # filter tile on its worker: with one filter tile as the only
        # producer, the static schedule stacked argmax_part tiles on its
        # worker); tiles past the launch's batch only signal. Static tile
        # counts keep the layered kernel's tile graph checkable.
        task("sample_filter", [max(ctx.B, C)], ["lm_head"], per_row(filter_row), nbytes=0, flops=0)
        sample = dict(temperature=A["temperature"], seed=A["seed"], counter=A["positions"])
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

    def load(name, m):
        return memref.LoadOp(A[name], [m]).result

    def cmpf(pred, a, v):
        return arith.CmpFOp(getattr(arith.CmpFPredicate, pred), a, arith.ConstantOp(ctx.f32, v).result).result

    def cmpi(pred, a, v):
        return arith.CmpIOp(getattr(arith.CmpIPredicate, pred), a, arith.ConstantOp(ctx.i32, v).result).result

    def asks(m):
        # Whether row m wants log-probabilities, or samples with a filter
        # (the row tile's ops then read its candidates).
        filters = arith.OrIOp(cmpi("sgt", load("top_k", m), 0),
                              arith.OrIOp(cmpf("OLT", load("top_p", m), 1.0), cmpf("OGT", load("min_p", m), 0.0))
                              .result).result
        sampled = arith.AndIOp(cmpf("OGT", load("temperature", m), 0.0), filters).result
        return arith.OrIOp(cmpi("sge", load("logprobs", m), 0), sampled).result

    def argmax_part(t):
        offset = dict(key_offset=arith.MulIOp(et.device_id(), const(V_lm)).result) if tp > 1 else {}
        col0 = arith.MulIOp(t, const(chunk)).result
        et.argmax(rows(A["logits"], V_lm, ctx.f32), rows(A["part_val"], C, ctx.f32),
                  rows(A["part_idx"], C, ctx.i32), col0, const(chunk), t, **sample, **offset)
        if tp == 1:
            # Each asking row's chunk: its SAMPLE_CANDIDATES largest logits
            # and its sums.
            loop = scf.ForOp(const(0), ctx.batch, const(1))
            with InsertionPoint(loop.body):
                m = loop.induction_variable
                ctx.guarded(asks(m), lambda: ctx.outlined(lambda: et.top_candidates(
                    A["logits"], m, col0, const(chunk), A["temperature"], A["cand_ids"], A["cand_vals"],
                    A["cand_stats"], t)))
                scf.YieldOp([])
    task("argmax_part", [C], [before], argmax_part, nbytes=4 * chunk, flops=chunk, peers=tp if tp > 1 else 0)
    candidates, cand_val, cand_idx = C, A["part_val"], A["part_idx"]
    last = "argmax_part"
    if tp > 1:
        # Every device's candidates, device by device, with indices
        # into the whole vocabulary.
        task("gather", [1], ["argmax_part"],
             lambda t: gather_candidates(A["part_val"], A["part_idx"], A["all_val"], A["all_idx"], ctx.batch,
                                         C, tp, V_lm),
             nbytes=8 * tp * C, flops=0)
        candidates, cand_val, cand_idx = tp * C, A["all_val"], A["all_idx"]
        last = "gather"
    else:
        def draw(m):
            # A filtered row's token, drawn above its threshold into its
            # chunk 0 candidate (the other chunks' to -inf): over the
            # candidates if they hold every column it keeps, else over
            # the whole row.
            sampling = dict(temperature=ctx.entry(A["temperature"], m, ctx.f32),
                            seed=ctx.entry(A["seed"], m, IntegerType.get_signless(64)),
                            counter=ctx.entry(A["positions"], m, ctx.i32),
                            threshold=ctx.entry(A["threshold"], m, ctx.f32))
            out = (ctx.one_row(A["part_val"], m, C, ctx.f32), ctx.one_row(A["part_idx"], m, C, ctx.i32))
            n = C * SAMPLE_CANDIDATES
            covered = cmpi("ne", load("sample_covered", m), 0)
            choice = scf.IfOp(covered, [], has_else=True)
            with InsertionPoint(choice.then_block):
                et.argmax(ctx.one_row(ctx.collapse(A["cand_vals"], n), m, n, ctx.f32), *out, const(0), const(n),
                          const(0), from_=ctx.one_row(ctx.collapse(A["cand_ids"], n), m, n, ctx.i32), **sampling)
                scf.YieldOp([])
            with InsertionPoint(choice.else_block):
                et.argmax(ctx.one_row(A["logits"], m, V_lm, ctx.f32), *out, const(0), const(V_lm), const(0),
                          **sampling)
                scf.YieldOp([])
            tid, threads = et.ThreadIdOp(ctx.idx).result, et.NumThreadsOp(ctx.idx).result
            fill = scf.ForOp(arith.AddIOp(tid, const(1)).result, const(C), threads)
            with InsertionPoint(fill.body):
                memref.StoreOp(arith.ConstantOp(ctx.f32, float("-inf")).result, A["part_val"],
                               [m, fill.induction_variable])
                scf.YieldOp([])

        def sample_row(m):
            # The log-probabilities of the logits the sampler sees (before
            # temperature and filters: the row's log-sum-exp, and its top
            # ids at the next token's position of its slot), its filters'
            # threshold, then a filtered row's draw.
            pos = arith.IndexCastOp(ctx.idx, load("positions", m)).result
            at = arith.AddIOp(arith.MulIOp(ctx.slot_of(m), const(lay.cache_len + 1)).result,
                              arith.AddIOp(pos, const(1)).result).result
            cands = dict(cand_ids=A["cand_ids"], cand_vals=A["cand_vals"], cand_stats=A["cand_stats"])
            et.top_logprobs(A["logits"], m, A["logprobs"], A["token_lse"], A["out_top_ids"], A["out_top_logprobs"], at,
                            **cands)
            et.sample_threshold(A["logits"], m, A["temperature"], A["top_k"], A["top_p"], A["min_p"],
                                A["threshold"], covered=A["sample_covered"], **cands)
            ctx.guarded(cmpf("OGT", load("threshold", m), float("-inf")), lambda: draw(m))
        task("sample", [ctx.B], ["argmax_part"], per_row(sample_row, when=asks), nbytes=0, flops=0)
        last = "sample"
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
    task("argmax", [1], [last], final_argmax, nbytes=8 * candidates, flops=candidates)
