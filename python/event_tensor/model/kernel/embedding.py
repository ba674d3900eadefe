"""The decode kernel's first task: the embedding rows of the launch's
tokens into the residual stream, h = embed[tokens]."""

from __future__ import annotations

from ...dialects import et

__all__ = ["embedding_task"]


def embedding_task(ctx) -> None:
    """The `embed` task of the `DecodeContext` `ctx` (one tile), which the
    first layer waits on."""
    A = ctx.A
    ctx.task("embed", [1], [], lambda t: et.embedding(A["embed"], A["tokens"], A["h"]),
             nbytes=0, flops=0)
