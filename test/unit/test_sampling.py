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


@pytest.mark.parametrize("chunks", [0, 7])
def test_top_logprobs_match_the_reference(tmp_path, chunks):
    """Each row's log-sum-exp and its most likely ids with their
    log-probabilities, in its list row; rows that are off, and entries
    past a row's count, are left as they were. The same from the
    candidates of 7 chunks (8 each, as many as the list: ties cross the
    chunks' floors)."""
    vocab, entries = 1000, 8
    launch = et.compile(top_logprobs_kernel(vocab, entries, chunks, entries), target="cpu", workers=3,
                        cache_dir=tmp_path).launcher(timeout_s=30)
    x, counts, rows, lists = top_logprobs_case(vocab, entries, np.random.default_rng(5))
    n = len(counts)
    lse = np.full(n, 7.0, np.float32)
    ids = np.full((lists, entries), -7, np.int32)
    values = np.full((lists, entries), 7.0, np.float32)
    extra = () if not chunks else (np.zeros((n, chunks, entries), np.int32), np.zeros((n, chunks, entries), np.float32),
                                   np.zeros((n, chunks, 4), np.float32), np.zeros(n, np.float32))
    launch(x, counts, lse, ids, values, rows, *extra, n)
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


# The threshold from the chunks' candidates against the one over the row.
THRESHOLDS = """
et.kernel @thresholds(%x: memref<?x1000xf32>, %t: memref<?xf32>, %k: memref<?xi32>, %p: memref<?xf32>,
                      %mp: memref<?xf32>, %row: memref<?xf32>, %cand: memref<?xf32>, %ci: memref<?x10x8xi32>,
                      %cv: memref<?x10x8xf32>, %cs: memref<?x10x4xf32>, %cov: memref<?xi32>, %s: memref<?xi64>,
                      %pos: memref<?xi32>, %v1: memref<?x1xf32>, %i1: memref<?x1xi32>, %v2: memref<?x1xf32>,
                      %i2: memref<?x1xi32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c10 = arith.constant 10 : index
  %c100 = arith.constant 100 : index
  %c80 = arith.constant 80 : index
  %c1000 = arith.constant 1000 : index
  %reduced = et.event.create() : !et.event<>
  %found = et.event.create() : !et.event<>
  et.task @chunk tiles(%q) in (%c10) {
    %col0 = arith.muli %q, %c100 : index
    scf.for %m = %c0 to %n step %c1 {
      et.top_candidates %x token(%m) cols(%col0, %c100) temperature(%t) into(%ci, %cv, %cs) slot(%q)
          : memref<?x1000xf32>, memref<?xf32>, memref<?x10x8xi32>, memref<?x10x8xf32>, memref<?x10x4xf32>
    }
    et.event.signal %reduced[] : !et.event<>
  }
  et.task @row tiles(%m) in (%n) {
    et.event.wait %reduced[] : !et.event<>
    et.sample_threshold %x token(%m) temperature(%t) top_k(%k) top_p(%p) min_p(%mp) into(%row)
        : memref<?x1000xf32>, memref<?xf32>, memref<?xi32>, memref<?xf32>, memref<?xf32>, memref<?xf32>
    et.sample_threshold %x token(%m) temperature(%t) top_k(%k) top_p(%p) min_p(%mp) into(%cand)
        candidates(%ci, %cv, %cs, %cov : memref<?x10x8xi32>, memref<?x10x8xf32>, memref<?x10x4xf32>, memref<?xi32>)
        : memref<?x1000xf32>, memref<?xf32>, memref<?xi32>, memref<?xf32>, memref<?xf32>, memref<?xf32>
    et.event.signal %found[] : !et.event<>
  }
  // The draw above the threshold over the row, and over the candidates.
  et.task @draw tiles(%q) in (%c1) {
    et.event.wait %found[] : !et.event<>
    et.argmax %x, %v1, %i1 cols(%c0, %c1000) slot(%c0)
        sample(%t, %s, %pos : memref<?xf32>, memref<?xi64>, memref<?xi32>) above(%cand : memref<?xf32>)
        : memref<?x1000xf32>, memref<?x1xf32>, memref<?x1xi32>
    %flat = memref.collapse_shape %cv [[0], [1, 2]] : memref<?x10x8xf32> into memref<?x80xf32>
    %flat_ids = memref.collapse_shape %ci [[0], [1, 2]] : memref<?x10x8xi32> into memref<?x80xi32>
    et.argmax %flat, %v2, %i2 cols(%c0, %c80) slot(%c0) from(%flat_ids)
        sample(%t, %s, %pos : memref<?xf32>, memref<?xi64>, memref<?xi32>) above(%cand : memref<?xf32>)
        : memref<?x80xf32>, memref<?x1xf32>, memref<?x1xi32>, memref<?x80xi32>
  }
}
"""


def test_thresholds_from_candidates_match_the_row(tmp_path):
    """The filters' threshold from 10 chunks' 8 candidates each is the one
    over the row and keeps what the reference keeps: where the candidates
    decide it (top-k up to 8, nuclei above every chunk's floor, min-p) and
    where the op scans the row instead (top-k 9 and 50, wide nuclei).
    Where it is above every chunk's floor (`covered`) the draw over the
    candidates (et.argmax from their ids) is the draw over the row."""
    launch = et.compile(THRESHOLDS, target="cpu", workers=3, cache_dir=tmp_path).launcher(timeout_s=60)
    rng = np.random.default_rng(11)
    cases = [(t, k, p, mp) for t in (0.5, 1.0) for k in (0, 3, 8, 9, 50) for p in (1.0, 0.05, 0.5, 0.9)
             for mp in (0.0, 0.1)]
    n = len(cases)
    # Peaked rows (small nuclei) and flat ones (wide nuclei), some ties.
    x = (rng.normal(size=(n, 1000)) * rng.choice([0.3, 1.0, 4.0], size=(n, 1))).astype(np.float32)
    x[::7, 10:20] = x[::7, 5:6]
    t, k, p, mp = (np.array(c, dt) for c, dt in zip(zip(*cases), (np.float32, np.int32, np.float32, np.float32)))
    row, cand = np.zeros(n, np.float32), np.zeros(n, np.float32)
    ids, covered = np.zeros((n, 10, 8), np.int32), np.full(n, 7, np.int32)
    by_row, by_cand = np.full((n, 1), -1, np.int32), np.full((n, 1), -2, np.int32)
    launch(x, t, k, p, mp, row, cand, ids, np.zeros((n, 10, 8), np.float32), np.zeros((n, 10, 4), np.float32),
           covered, np.arange(n, dtype=np.int64) * 31 + 5, np.full(n, 9, np.int32), np.zeros((n, 1), np.float32),
           by_row, np.zeros((n, 1), np.float32), by_cand, n)
    decided = 0
    for m, (tm, km, pm, mpm) in enumerate(cases):
        y = x[m].astype(np.float64) / tm
        kept = sampling_filter_probs(x[m], tm, top_k=km, top_p=pm, min_p=mpm) > 0
        # The threshold keeps what the reference keeps.
        np.testing.assert_array_equal(x[m] * np.float32(1 / tm) >= row[m], kept, err_msg=f"case {cases[m]}")
        np.testing.assert_array_equal(cand[m], row[m], err_msg=f"case {cases[m]}")
        # Covered: every kept column is a candidate (and the threshold is
        # above every chunk's floor); rows without a filter are not.
        floors = np.sort(x[m].reshape(10, 100), axis=1)[:, -8] * np.float32(1 / tm)
        assert covered[m] == int(np.isfinite(row[m]) and row[m] > floors.max()), (cases[m], covered[m])
        if covered[m]:
            # Then the draw over the candidates is the draw over the row.
            assert set(np.flatnonzero(kept)) <= set(ids[m].ravel().tolist()), cases[m]
            assert by_cand[m, 0] == by_row[m, 0] and kept[by_row[m, 0]], (cases[m], by_cand[m], by_row[m])
        # Whether the candidates decide it: top-k within them and the
        # nucleus (with top-k's keys under it) above every chunk's floor.
        floor = np.sort(x[m].reshape(10, 100), axis=1)[:, -8].max() / tm
        top_k_y = np.sort(y)[-km] if 0 < km < 1000 else -np.inf
        nucleus_y = y[sampling_filter_probs(x[m], tm, top_k=km, top_p=pm) > 0].min() if 0 < pm < 1 else np.inf
        decided += bool(km <= 8 and (pm >= 1 or (nucleus_y > floor and (km == 0 or top_k_y > floor))))
    assert 10 <= decided <= n - 10, decided
