"""Sampling in `et.argmax ... sample(...)` on the CPU target: the
Gumbel-max keys of a counter-based generator give, over many seeds, the
distribution softmax(logits / T) (chi-square), never a column of -inf
logit; a seed and counter repeat a draw; the draw does not depend on how
the columns are split into tiles; a temperature of 0 is the greedy
argmax."""

import numpy as np
import pytest

import event_tensor as et

# One row per draw: stage 1 over `tiles` column blocks of 8 / tiles columns
# each, stage 2 over the blocks' keys.
KERNEL = """
et.kernel @draw(%x: memref<?x8xf32>, %pv: memref<?x{tiles}xf32>, %pi: memref<?x{tiles}xi32>,
                %v: memref<?x1xf32>, %i: memref<?x1xi32>, %t: memref<?xf32>, %s: memref<?xi64>,
                %c: memref<?xi32>) {{
  %c0 = arith.constant 0 : index
  %ct = arith.constant {tiles} : index
  %w = arith.constant {width} : index
  %parts = et.event.create() : !et.event<>
  et.task @part tiles(%k) in (%ct) {{
    %col0 = arith.muli %k, %w : index
    et.argmax %x, %pv, %pi cols(%col0, %w) slot(%k)
        sample(%t, %s, %c : memref<?xf32>, memref<?xi64>, memref<?xi32>)
        : memref<?x8xf32>, memref<?x{tiles}xf32>, memref<?x{tiles}xi32>
    et.event.signal %parts[] : !et.event<>
  }}
  %c1 = arith.constant 1 : index
  et.task @final tiles(%k) in (%c1) {{
    et.event.wait %parts[] : !et.event<>
    et.argmax %pv, %v, %i cols(%c0, %ct) slot(%c0) from(%pi)
        : memref<?x{tiles}xf32>, memref<?x1xf32>, memref<?x1xi32>, memref<?x{tiles}xi32>
  }}
}}
"""
LOGITS = np.array([2.0, 1.0, 0.5, 0.0, -1.0, -np.inf, 3.0, 1.5], np.float32)


@pytest.fixture(scope="module")
def draw(tmp_path_factory):
    cache = tmp_path_factory.mktemp("sampling")
    launchers = {tiles: et.compile(KERNEL.format(tiles=tiles, width=8 // tiles), target="cpu", workers=3,
                                   cache_dir=cache).launcher(timeout_s=30) for tiles in (1, 4)}

    def run(temperature, seeds, counters, tiles=4, logits=LOGITS):
        n = len(seeds)
        x = np.tile(logits, (n, 1)).astype(np.float32)
        out = np.full((n, 1), -1, np.int32)
        launchers[tiles](x, np.zeros((n, tiles), np.float32), np.zeros((n, tiles), np.int32),
                         np.zeros((n, 1), np.float32), out,
                         np.broadcast_to(np.float32(temperature), (n,)).copy(),
                         np.asarray(seeds, np.int64), np.broadcast_to(np.int32(counters), (n,)).copy())
        return out[:, 0]

    return run


def test_draws_follow_the_tempered_softmax(draw):
    n, temperature = 20000, 0.7
    tokens = draw(temperature, np.arange(n) * 7919 + 1, 5)
    counts = np.bincount(tokens, minlength=8)
    assert counts[5] == 0  # a -inf logit is never drawn
    p = np.exp((LOGITS - LOGITS.max()) / temperature)
    p /= p.sum()
    live = p > 0
    chi2 = float((((counts - n * p) ** 2)[live] / (n * p)[live]).sum())
    # 6 degrees of freedom: 22.46 is the 0.1% point.
    assert chi2 < 22.46, (counts.tolist(), (n * p).round(1).tolist(), chi2)


def test_draws_repeat_and_do_not_depend_on_the_tiles(draw):
    seeds = np.arange(2000)
    a = draw(1.3, seeds, 3, tiles=4)
    assert np.array_equal(a, draw(1.3, seeds, 3, tiles=4))
    assert np.array_equal(a, draw(1.3, seeds, 3, tiles=1))
    # Another counter (the next position) draws anew.
    b = draw(1.3, seeds, 4, tiles=4)
    assert (a != b).mean() > 0.3
    assert len(set(a.tolist())) > 4


def test_zero_temperature_is_greedy(draw):
    assert (draw(0.0, np.arange(50), 1) == 6).all()
    assert (draw(-1.0, np.arange(50), 1) == 6).all()
    # A tie goes to the smaller column, as without sample.
    tie = LOGITS.copy()
    tie[1] = 3.0
    assert (draw(0.0, np.arange(10), 1, logits=tie) == 1).all()
