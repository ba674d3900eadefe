"""Sampling in `et.argmax ... sample(...)` on the CPU target: the
Gumbel-max keys of a counter-based generator give, over many seeds, the
distribution softmax(logits / T) (chi-square), never a column of -inf
logit; a seed and counter repeat a draw; the draw does not depend on how
the columns are split into tiles; a temperature of 0 is the greedy
argmax. `et.logit_bias` and `et.penalize` change the logits as the numpy
reference does."""

import numpy as np
import pytest

import event_tensor as et
from event_tensor.reference import logit_bias, penalize, sampling_filter_probs, top_logprobs
from event_tensor.testing import logit_ops_kernel, top_logprobs_case, top_logprobs_kernel

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


# The row's columns as two shares (a vocabulary over two devices): each
# share's tile draws with `key_offset` at its first column.
SHARDS = """
et.kernel @draw_shards(%x0: memref<?x4xf32>, %x1: memref<?x4xf32>, %pv: memref<?x2xf32>, %pi: memref<?x2xi32>,
                       %t: memref<?xf32>, %s: memref<?xi64>, %c: memref<?xi32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  et.task @part tiles(%k) in (%c1) {
    et.argmax %x0, %pv, %pi cols(%c0, %c4) slot(%c0)
        sample(%t, %s, %c : memref<?xf32>, memref<?xi64>, memref<?xi32>) key_offset(%c0)
        : memref<?x4xf32>, memref<?x2xf32>, memref<?x2xi32>
    et.argmax %x1, %pv, %pi cols(%c0, %c4) slot(%c1)
        sample(%t, %s, %c : memref<?xf32>, memref<?xi64>, memref<?xi32>) key_offset(%c4)
        : memref<?x4xf32>, memref<?x2xf32>, memref<?x2xi32>
  }
}
"""


def test_shares_of_a_row_draw_the_whole_rows_sample(draw, tmp_path):
    """With key_offset, each share of the columns draws the noise its
    columns have in the whole row: the best key of the shares' candidates
    is the whole row's sample, seed for seed (what a tensor-parallel
    kernel's devices gather); without it the shares would reuse the same
    noise."""
    launch = et.compile(SHARDS, target="cpu", workers=2, cache_dir=tmp_path).launcher(timeout_s=30)
    n = 3000
    seeds = np.arange(n) * 31 + 7
    x = np.tile(LOGITS, (n, 1)).astype(np.float32)
    pv, pi = np.zeros((n, 2), np.float32), np.zeros((n, 2), np.int32)
    launch(np.ascontiguousarray(x[:, :4]), np.ascontiguousarray(x[:, 4:]), pv, pi,
           np.full(n, 0.9, np.float32), seeds.astype(np.int64), np.full(n, 2, np.int32))
    share = (pv[:, 1] > pv[:, 0]).astype(np.int64)  # a tie keeps the first share
    got = pi[np.arange(n), share] + 4 * share
    assert np.array_equal(got, draw(0.9, seeds, 2, tiles=1))


def test_zero_temperature_is_greedy(draw):
    assert (draw(0.0, np.arange(50), 1) == 6).all()
    assert (draw(-1.0, np.arange(50), 1) == 6).all()
    # A tie goes to the smaller column, as without sample.
    tie = LOGITS.copy()
    tie[1] = 3.0
    assert (draw(0.0, np.arange(10), 1, logits=tie) == 1).all()


# The filters: a threshold tile per row, then the two stages sampling above it.
FILTERED = """
et.kernel @draw_filtered(%x: memref<?x8xf32>, %pv: memref<?x4xf32>, %pi: memref<?x4xi32>,
                         %v: memref<?x1xf32>, %i: memref<?x1xi32>, %t: memref<?xf32>, %s: memref<?xi64>,
                         %c: memref<?xi32>, %k: memref<?xi32>, %p: memref<?xf32>, %mp: memref<?xf32>,
                         %tau: memref<?xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %filtered = et.event.create() : !et.event<>
  et.task @filter tiles(%m) in (%n) {
    et.sample_threshold %x token(%m) temperature(%t) top_k(%k) top_p(%p) min_p(%mp) into(%tau)
        : memref<?x8xf32>, memref<?xf32>, memref<?xi32>, memref<?xf32>, memref<?xf32>, memref<?xf32>
    et.event.signal %filtered[] : !et.event<>
  }
  %parts = et.event.create() : !et.event<>
  et.task @part tiles(%q) in (%c4) {
    et.event.wait %filtered[] : !et.event<>
    %col0 = arith.muli %q, %c2 : index
    et.argmax %x, %pv, %pi cols(%col0, %c2) slot(%q)
        sample(%t, %s, %c : memref<?xf32>, memref<?xi64>, memref<?xi32>) above(%tau : memref<?xf32>)
        : memref<?x8xf32>, memref<?x4xf32>, memref<?x4xi32>
    et.event.signal %parts[] : !et.event<>
  }
  et.task @final tiles(%q) in (%c1) {
    et.event.wait %parts[] : !et.event<>
    et.argmax %pv, %v, %i cols(%c0, %c4) slot(%c0) from(%pi)
        : memref<?x4xf32>, memref<?x1xf32>, memref<?x1xi32>, memref<?x4xi32>
  }
}
"""


@pytest.fixture(scope="module")
def draw_filtered(tmp_path_factory):
    launch = et.compile(FILTERED, target="cpu", workers=3,
                        cache_dir=tmp_path_factory.mktemp("filtered")).launcher(timeout_s=30)

    def run(temperature, seeds, top_k=0, top_p=1.0, min_p=0.0, logits=LOGITS):
        n = len(seeds)
        x = np.tile(logits, (n, 1)).astype(np.float32)
        out = np.full((n, 1), -1, np.int32)
        tau = np.zeros(n, np.float32)
        full = lambda v, dt: np.full(n, v, dt)  # noqa: E731
        launch(x, np.zeros((n, 4), np.float32), np.zeros((n, 4), np.int32), np.zeros((n, 1), np.float32), out,
               full(temperature, np.float32), np.asarray(seeds, np.int64), full(5, np.int32),
               full(top_k, np.int32), full(top_p, np.float32), full(min_p, np.float32), tau, n)
        return out[:, 0], tau

    return run


@pytest.mark.parametrize("filters", [dict(top_k=3), dict(top_p=0.8), dict(min_p=0.2),
                                     dict(top_k=4, top_p=0.9), dict(top_k=5, top_p=0.95, min_p=0.1)])
def test_filtered_draws_follow_the_filtered_softmax(draw_filtered, filters):
    """Over many seeds the draws follow the distribution the filters leave
    (chi-square), and a token they drop is never drawn."""
    n, temperature = 12000, 0.7
    tokens, tau = draw_filtered(temperature, np.arange(n) * 7919 + 1, **filters)
    want = sampling_filter_probs(LOGITS, temperature, **filters)
    counts = np.bincount(tokens, minlength=8)
    assert (counts[want == 0] == 0).all(), (counts.tolist(), want.round(3).tolist())
    live = want > 0
    assert live.sum() >= 2
    chi2 = float((((counts - n * want) ** 2)[live] / (n * want)[live]).sum())
    # The 0.1% points of chi-square with 1..6 degrees of freedom.
    assert chi2 < [10.83, 13.82, 16.27, 18.47, 20.52, 22.46][live.sum() - 2], (counts.tolist(), chi2)
    # The threshold is the least kept y.
    kept = (LOGITS / temperature)[live]
    np.testing.assert_allclose(tau, kept.min() if "min_p" not in filters else tau[0], rtol=1e-6)
    assert (tau <= kept.min() + 1e-6).all()


def test_filters_off_or_greedy_leave_no_threshold(draw_filtered):
    seeds = np.arange(4000)
    plain, tau = draw_filtered(0.7, seeds, top_k=8, top_p=1.0, min_p=0.0)
    assert np.isneginf(tau).all()
    assert len(set(plain.tolist())) >= 6  # every token with a finite logit
    greedy, tau = draw_filtered(0.0, seeds[:50], top_k=3, top_p=0.5)
    assert np.isneginf(tau).all() and (greedy == 6).all()
    # top-k 1, a tiny top-p and min-p 1 keep only the most likely token.
    for filters in (dict(top_k=1), dict(top_p=1e-4), dict(min_p=1.0)):
        tokens, _ = draw_filtered(3.0, seeds[:500], **filters)
        assert (tokens == 6).all(), filters
    # Ties at the k-th value are kept.
    tie = LOGITS.copy()
    tie[0] = 3.0
    tokens, tau = draw_filtered(1.0, seeds, top_k=1, logits=tie)
    assert set(tokens.tolist()) == {0, 6} and np.allclose(tau, 3.0)


# The penalties and logit biases: a tile per row biases its logits, penalizes
# them from its slot's history, then takes the greedy token.
LOGIT_OPS = logit_ops_kernel(vocab=8, entries=4, slots=3, length=6)


def test_penalties_change_each_seen_id_once(tmp_path):
    """Rows of different slots, histories with repeats, ids outside the
    vocabulary, prompt and generated parts: the penalized logits are the
    reference's, the greedy token follows them, the counts are zero again,
    and a row with every penalty off (a repetition penalty of 0 is off, as
    in a zeroed row) keeps its logits."""
    launch = et.compile(LOGIT_OPS, target="cpu", workers=3, cache_dir=tmp_path).launcher(timeout_s=30)
    history = np.array([[6, 6, 0, 6, 1, -1],
                        [3, 6, 9, 6, 6, 2],
                        [99, -5, 7, 7, 7, 7]], np.int32)
    #         slot, length, outputs_from, repetition, frequency, presence
    rows = [(0, 5, 2, 1.3, 0.0, 0.0),
            (0, 5, 2, 1.0, 0.5, 0.25),
            (1, 6, 1, 2.0, 0.4, 1.0),
            (2, 6, 4, 1.5, 0.3, 0.0),
            (1, 6, 0, 0.0, 0.0, 0.0),
            (2, 0, 0, 3.0, 1.0, 1.0)]
    n = len(rows)
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(n, 8)).astype(np.float32) * 2
    logits[:, 6] = 3.0
    x = logits.copy()
    counts = np.zeros((n, 8), np.int32)
    col = lambda k, dt: np.array([r[k] for r in rows], dt)  # noqa: E731
    tokens = np.full((n, 1), -1, np.int32)
    no_bias = np.zeros((n, 4), np.int32), np.zeros((n, 4), np.float32)
    launch(x, *no_bias, history, col(0, np.int32), col(1, np.int32), col(2, np.int32), col(3, np.float32),
           col(4, np.float32), col(5, np.float32), counts, np.zeros((n, 1), np.float32), tokens, n)
    for b, (slot, length, start, r, f, p) in enumerate(rows):
        want = penalize(logits[b], history[slot, :length], start, r if r > 0 else 1.0, f, p)
        np.testing.assert_allclose(x[b], want, rtol=1e-6, atol=1e-6, err_msg=str(rows[b]))
        assert tokens[b, 0] == int(np.argmax(want.astype(np.float32)))
    assert not counts.any()
    np.testing.assert_array_equal(x[4], logits[4])
    np.testing.assert_array_equal(x[5], logits[5])  # an empty history
    # The most likely id (6), penalized, loses the greedy choice.
    assert tokens[4, 0] == 6 and tokens[1, 0] != 6


def test_logit_biases_add_to_their_ids(tmp_path):
    """Entries of ids inside and outside the vocabulary, a repeated id (its
    values add up), zero values (nothing read or written) and a row of
    none: the biased logits are the reference's and the greedy token
    follows them; -100 takes the most likely id out, +100 makes one
    certain."""
    launch = et.compile(LOGIT_OPS, target="cpu", workers=3, cache_dir=tmp_path).launcher(timeout_s=30)
    ids = np.array([[6, 2, -1, 8],
                    [1, 1, 6, 99],
                    [0, 0, 0, 0],
                    [6, 3, 3, -7]], np.int32)
    values = np.array([[-100.0, 0.5, 5.0, 5.0],
                       [2.0, 3.0, 0.0, 1.0],
                       [0.0, 0.0, 0.0, 0.0],
                       [-100.0, 100.0, -1.5, 1.0]], np.float32)
    n = len(ids)
    rng = np.random.default_rng(4)
    logits = rng.normal(size=(n, 8)).astype(np.float32)
    logits[:, 6] = 3.0
    x = logits.copy()
    tokens = np.full((n, 1), -1, np.int32)
    # Penalties off: no history, repetition 1, frequency and presence 0.
    zeros = lambda dt: np.zeros(n, dt)  # noqa: E731
    launch(x, ids, values, np.zeros((3, 6), np.int32), zeros(np.int32), zeros(np.int32), zeros(np.int32),
           np.ones(n, np.float32), zeros(np.float32), zeros(np.float32), np.zeros((n, 8), np.int32),
           np.zeros((n, 1), np.float32), tokens, n)
    for b in range(n):
        want = logit_bias(logits[b], ids[b], values[b])
        np.testing.assert_allclose(x[b], want, rtol=1e-6, atol=1e-6, err_msg=f"row {b}")
        assert tokens[b, 0] == int(np.argmax(want.astype(np.float32)))
    np.testing.assert_array_equal(x[2], logits[2])
    assert tokens[0, 0] != 6 and tokens[1, 0] == 1 and tokens[2, 0] == 6 and tokens[3, 0] == 3


def test_top_logprobs_match_the_reference(tmp_path):
    """Each row's log-sum-exp and its most likely ids with their
    log-probabilities, in its list row; rows that are off, and entries
    past a row's count, are left as they were."""
    vocab, entries = 1000, 8
    launch = et.compile(top_logprobs_kernel(vocab, entries), target="cpu", workers=3,
                        cache_dir=tmp_path).launcher(timeout_s=30)
    x, counts, rows, lists = top_logprobs_case(vocab, entries, np.random.default_rng(5))
    n = len(counts)
    lse = np.full(n, 7.0, np.float32)
    ids = np.full((lists, entries), -7, np.int32)
    values = np.full((lists, entries), 7.0, np.float32)
    launch(x, counts, lse, ids, values, rows, n)
    for m in range(n):
        r = rows[m]
        if counts[m] < 0:
            assert lse[m] == 7.0 and (ids[r] == -7).all() and (values[r] == 7.0).all()
            continue
        take = min(int(counts[m]), entries)
        want_lse, want_ids, want_values = top_logprobs(x[m], take)
        np.testing.assert_allclose(lse[m], want_lse, rtol=1e-5, err_msg=f"row {m}")
        np.testing.assert_array_equal(ids[r, :take], want_ids, err_msg=f"row {m}")
        np.testing.assert_allclose(values[r, :take], want_values, rtol=1e-5, atol=1e-5, err_msg=f"row {m}")
        assert (ids[r, take:] == -7).all() and (values[r, take:] == 7.0).all()
    # The ties: 5.0 first, then the three smallest ids of logit 4.0.
    tied = np.flatnonzero(x[6] == 4.0)
    assert ids[rows[6]].tolist()[:4] == [vocab // 2, *tied[:3]]
    assert ids[rows[7]].tolist()[:3] == [vocab - 4, vocab - 3, vocab - 1]
