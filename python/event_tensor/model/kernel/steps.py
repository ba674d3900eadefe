"""The end of a decode step in a kernel that runs many in one launch
(`et.repeat`): `advance` takes each row's greedy token, records it
(and, if the row asks, its log-probability) in the token history (or,
while a row scores a given sequence, that sequence's next token), decides whether the row goes on (stop ids, its budget
of new tokens, the compiled context, a token that is not in the vocabulary)
and, if it does, makes the token and its position the row's input of the
next step. Once every row has finished, or the host asked for the launch
to end (the `interrupt` word, which the host writes while the launch
runs), it raises the stop flag, and the launch ends at the next step's gate
(docs/models.md, "Generation on the device"). On one device it is the end
of the `argmax` tile (no phase of its own); on several devices an `advance`
task, of which every copy runs on the same tokens and signals its end of
the step on every device."""

from __future__ import annotations

from ...dialects import arith, et, memref, scf
from ...ir import InsertionPoint, IntegerType
from ..layout import FINISH_CONTEXT, FINISH_LENGTH, FINISH_NONFINITE, FINISH_STOP, MAX_STOP_IDS

__all__ = ["advance_body", "steps_task"]


def steps_task(ctx) -> None:
    """The kernel's `et.repeat` over the step's last task of the
    `DecodeContext` `ctx`: `argmax` (which ends with `advance_body`) on one
    device, else an `advance` task after it."""
    tp = ctx.options.tp
    if tp > 1:
        # On several devices `advance` ends the step on every device, so
        # that no copy starts the next step before all have finished this
        # one.
        ctx.task("advance", [1], ["argmax"], advance_body(ctx), nbytes=0, flops=0, peers=tp)
    et.RepeatOp(ctx.A["steps"], ctx.A["stop"], ctx.events["advance" if tp > 1 else "argmax"])


def advance_body(ctx):
    """The tile body that advances every row of the `DecodeContext` `ctx`
    by its greedy token (thread 0 of the worker over the rows; it reads
    `next_token` after a barrier where the argmax tile wrote it)."""
    A, const, i32, tp = ctx.A, ctx.const, ctx.i32, ctx.options.tp

    def c32(v: int):
        return arith.ConstantOp(i32, v).result

    def cmp(pred: str, a, b):
        return arith.CmpIOp(getattr(arith.CmpIPredicate, pred), a, b).result

    def select(cond, a, b):
        return arith.SelectOp(cond, a, b).result

    def advance_row(b, all_done):
        """Row b: returns all_done and (this row finished)."""
        running = cmp("eq", memref.LoadOp(A["finished"], [b]).result, c32(0))
        step = scf.IfOp(running, [IntegerType.get_signless(1)], has_else=True)
        with InsertionPoint(step.then_block):
            token = memref.LoadOp(A["next_token"], [b, const(0)]).result
            pos = arith.AddIOp(memref.LoadOp(A["positions"], [b]).result, c32(1)).result
            slot = ctx.slot_of(b)
            forced = None
            if "forced_to" in A:
                # Scoring a given sequence: below position forced_to[b] the
                # next token is the sequence's own, which the host wrote
                # into the slot's history, not the drawn one.
                forced = cmp("slt", pos, memref.LoadOp(A["forced_to"], [b]).result)
                at_given = arith.IndexCastOp(ctx.idx, select(forced, pos, c32(0))).result
                token = select(forced, memref.LoadOp(A["history"], [slot, at_given]).result, token)
            outside = arith.OrIOp(cmp("slt", token, c32(0)), cmp("sge", token, c32(ctx.V))).result
            at = arith.IndexCastOp(ctx.idx, pos).result
            if "logprobs" in A:
                # The token's log-probability (its row asked for them), before
                # the token itself reaches the host.
                def logprob():
                    x = memref.LoadOp(A["logits"], [b, arith.IndexCastOp(ctx.idx, token).result]).result
                    lp = arith.SubFOp(x, memref.LoadOp(A["token_lse"], [b]).result).result
                    memref.StoreOp(lp, A["out_logprobs"], [slot, at])
                asked = cmp("sge", memref.LoadOp(A["logprobs"], [b]).result, c32(0))
                ctx.guarded(arith.AndIOp(asked, arith.XOrIOp(outside, arith.ConstantOp(outside.type, 1).result)
                                         .result).result, logprob)
            memref.StoreOp(token, A["out_tokens"], [slot, at])
            left = arith.SubIOp(memref.LoadOp(A["remaining"], [b]).result, c32(1)).result
            memref.StoreOp(left, A["remaining"], [b])
            stop_hit = c32(0)
            for k in range(MAX_STOP_IDS):
                hit = cmp("eq", memref.LoadOp(A["stop_ids"], [b, const(k)]).result, token)
                stop_hit = arith.OrIOp(stop_hit, arith.ExtUIOp(i32, hit).result).result
            if forced is not None:
                # (A given token stops nothing.)
                stop_hit = select(forced, c32(0), stop_hit)
            # The first reason that applies, most urgent first.
            reason = select(cmp("sge", pos, c32(ctx.S)), c32(FINISH_CONTEXT), c32(0))
            reason = select(cmp("sle", left, c32(0)), c32(FINISH_LENGTH), reason)
            reason = select(cmp("ne", stop_hit, c32(0)), c32(FINISH_STOP), reason)
            reason = select(outside, c32(FINISH_NONFINITE), reason)
            memref.StoreOp(reason, A["finished"], [b])
            goes_on = cmp("eq", reason, c32(0))

            def feed():
                memref.StoreOp(token, A["tokens"], [b])
                memref.StoreOp(pos, A["positions"], [b])
            ctx.guarded(goes_on, feed)
            scf.YieldOp([arith.XOrIOp(goes_on, arith.ConstantOp(goes_on.type, 1).result).result])
        with InsertionPoint(step.else_block):
            scf.YieldOp([arith.ConstantOp(IntegerType.get_signless(1), 1).result])
        return arith.AndIOp(all_done, step.results[0]).result

    def rows():
        i1 = IntegerType.get_signless(1)
        loop = scf.ForOp(const(0), ctx.batch, const(1), [arith.ConstantOp(i1, 1).result])
        with InsertionPoint(loop.body):
            scf.YieldOp([advance_row(loop.induction_variable, loop.inner_iter_args[0])])
        # The host's interrupt, which it writes while the launch runs: an
        # atomic read (a plain load could hit a stale cache line).
        asked = memref.AtomicRMWOp(arith.AtomicRMWKind.addi, c32(0), A["interrupt"], [const(0)]).result
        ends = arith.OrIOp(loop.results[0], cmp("ne", asked, c32(0))).result

        def stop():
            # On several devices every copy decides the same for its rows
            # (the same tokens everywhere), but the host interrupts device
            # 0 only: a copy that ends raises every copy's flag, before
            # its signals of `advance` reach them.
            for k in range(tp):
                flag = A["stop"] if k == 0 else et.peer(A["stop"], const(k))
                memref.StoreOp(c32(1), flag, [const(0)])
        ctx.guarded(ends, stop)

    def body(t):
        # Thread 0 of the worker goes over the rows.
        ctx.guarded(cmp("eq", et.ThreadIdOp(ctx.idx).result, const(0)), rows)
    return body
