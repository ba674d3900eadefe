"""The model frontend on CPU workers: tiny Llama-3 and Qwen3 configs with
generated safetensors files, compiled into one decode-step kernel, against
the numpy reference; config, weight and runtime errors; the CLI."""

import json
import re

import numpy as np
import pytest

from event_tensor import model
from event_tensor.build import PREFETCH_BYTES
from event_tensor.model.layout import SAMPLE_CANDIDATES
from event_tensor.reference import logit_bias, penalize, sampling_filter_probs, top_logprobs
from event_tensor.model.weights import read_safetensors, write_safetensors
from event_tensor.model.cli import Progress


def _hf(family, **over):
    cfg = model.tiny_config(family)
    hf = cfg.to_hf()
    hf.update(over)
    return hf


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def compiled(request, tmp_path_factory):
    family = request.param
    root = tmp_path_factory.mktemp(family)
    (root / "config.json").write_text(json.dumps(_hf(family)))
    config = model.ModelConfig.from_hf(root)
    model.save_weights(root / "model.safetensors", model.random_weights(config, seed=3))
    weights = model.load_weights(config, [root])
    # Splits of 8 positions: attention over 4 splits and their merge.
    path = model.compile_model(config, target="cpu", max_batch=2, max_context=32, workers=3, split_len=8,
                               cache_dir=root / "cache")
    return config, weights, path


def _rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def test_decode_matches_reference_with_runtime_batch_and_positions(compiled):
    config, weights, path = compiled
    session = model.DecodeSession(path, weights)
    ref = model.ReferenceModel(config, weights, max_batch=2, max_context=32)
    # Batch 2, then batch 1, then batch 2 with different positions per
    # sequence: one artifact for all of them.
    steps = [([5, 9], [0, 0]), ([17, 200], [1, 1]), ([33], [2]), ([7, 8], [3, 2]), ([1, 2], [4, 3])]
    for tokens, positions in steps:
        got = session.step(tokens, positions)
        want = ref.step(tokens, positions)
        logits = session.last_logits()
        assert logits.shape == want.shape
        # Same rounding points: only float32 summation order and the odd bf16
        # rounding flip it causes differ.
        assert _rel(logits, want) < 2e-3, (tokens, positions)
        # Greedy tokens agree wherever the reference's top-2 margin is clear.
        top2 = np.sort(want, axis=-1)[:, -2:]
        clear = (top2[:, 1] - top2[:, 0]) > 1e-3 * np.abs(want).max()
        assert np.array_equal(got[clear], want.argmax(-1)[clear])
    session.close()


def test_greedy_generation_is_deterministic(compiled):
    config, weights, path = compiled
    session = model.DecodeSession(path, weights)
    a, times = session.generate_stepwise([[1, 2, 3], [4, 5, 6]], steps=4)
    session.reset()
    b, _ = session.generate_stepwise([[1, 2, 3], [4, 5, 6]], steps=4)
    assert a.shape == (2, 4) and np.array_equal(a, b) and len(times) == 3
    assert ((0 <= a) & (a < config.vocab_size)).all()


def _stepwise(session, monkeypatch, *args, **kwargs):
    """`generate` through the host loop of one-step launches."""
    with monkeypatch.context() as m:
        m.setattr(type(session), "steps_on_device", property(lambda self: False))
        session.reset()
        return session.generate(*args, **kwargs)


def test_generate_on_device_matches_host_loop(compiled, monkeypatch):
    """One launch runs every decode step (the kernel feeds each row's token
    back): the same greedy tokens as one launch per step, for prompts of
    different lengths, each row stopping on its own (a stop id, its budget,
    the compiled context)."""
    config, weights, path = compiled
    session = model.DecodeSession(path, weights)
    assert session.steps_on_device
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8, 9, 10]]
    session.reset()
    got = session.generate(prompts, 8)
    want = _stepwise(session, monkeypatch, prompts, 8)
    assert got.launches == 1 and want.launches == 7
    assert got.tokens == want.tokens and got.finish_reasons == want.finish_reasons == ["length", "length"]
    assert all(len(t) == 8 for t in got.tokens)
    assert all(0 <= t < config.vocab_size for row in got.tokens for t in row)
    # The same as step() by step(): row 1's tokens fed back one launch each.
    session.reset()
    session.prefill([prompts[1]])
    nxt, pos, chain = got.tokens[1][0], len(prompts[1]), [got.tokens[1][0]]
    for _ in range(7):
        nxt = int(session.step([nxt], [pos], [0])[0])
        chain.append(nxt)
        pos += 1
    assert chain == got.tokens[1]
    # A stop id ends row 0 at its first occurrence (included); row 1 goes on.
    stop_at = got.tokens[0][3]
    session.reset()
    cut = session.generate(prompts, 8, stop=[[stop_at], []])
    first = got.tokens[0].index(stop_at)
    assert cut.tokens[0] == got.tokens[0][: first + 1] and cut.finish_reasons[0] == "stop"
    assert cut.tokens[1] == got.tokens[1] and cut.finish_reasons[1] == "length"
    assert cut.tokens == _stepwise(session, monkeypatch, prompts, 8, stop=[[stop_at], []]).tokens
    # Up to the last position of the compiled context (32): a 30-token
    # prompt takes 3 new tokens, the last one past position 31.
    session.reset()
    full = session.generate([[5] * 30], 3)
    assert len(full.tokens[0]) == 3 and full.tokens == _stepwise(session, monkeypatch, [[5] * 30], 3).tokens
    session.close()


def test_generate_samples_in_the_kernel(compiled, monkeypatch):
    """temperature > 0 samples in the kernel: a generation repeats exactly
    for its seeds, one launch for all steps draws what one launch per step
    draws (the generator is keyed by seed and position), other seeds draw
    other tokens, and step() stays greedy afterwards."""
    config, weights, path = compiled
    session = model.DecodeSession(path, weights)
    prompts = [[1, 2, 3], [4, 5, 6, 7]]
    session.reset()
    greedy = session.generate(prompts, 10)
    session.reset()
    hot = session.generate(prompts, 10, temperature=[4.0, 0.0], seed=[11, 12])
    assert hot.tokens[1] == greedy.tokens[1]  # temperature 0: greedy
    assert hot.tokens[0] != greedy.tokens[0]
    session.reset()
    assert session.generate(prompts, 10, temperature=[4.0, 0.0], seed=[11, 12]).tokens == hot.tokens
    assert _stepwise(session, monkeypatch, prompts, 10, temperature=[4.0, 0.0], seed=[11, 12]).tokens == hot.tokens
    session.reset()
    assert session.generate(prompts, 10, temperature=4.0, seed=2**64 - 1).tokens[0] != hot.tokens[0]
    session.reset()
    session.prefill([prompts[0]])
    after = session.step([greedy.tokens[0][0]], [3], [0])
    assert int(after[0]) == greedy.tokens[0][1]
    # Filters that keep only the most likely token draw the greedy tokens
    # at any temperature; looser ones draw others, repeatably.
    for filters in (dict(top_k=1), dict(top_p=1e-6), dict(min_p=1.0)):
        session.reset()
        assert session.generate(prompts, 10, temperature=4.0, seed=[11, 12], **filters).tokens == greedy.tokens
    session.reset()
    loose = session.generate(prompts, 10, temperature=[4.0, 0.0], seed=[11, 12], top_k=50, top_p=0.9, min_p=0.01)
    session.reset()
    assert loose.tokens == session.generate(prompts, 10, temperature=[4.0, 0.0], seed=[11, 12], top_k=50,
                                            top_p=0.9, min_p=0.01).tokens
    assert loose.tokens[1] == greedy.tokens[1] and loose.tokens[0] != greedy.tokens[0]
    for bad, match in ((dict(top_k=-1), "top_k must be an int >= 0"), (dict(top_k=1.5), "top_k must be an int"),
                       (dict(top_p=0.0), r"top_p must be a number in \(0, 1\]"), (dict(top_p=1.5), "top_p"),
                       (dict(min_p=-0.1), r"min_p must be a number in \[0, 1\]"), (dict(min_p=float("nan")), "min_p"),
                       (dict(top_k=[1, 2, 3]), "top_k must be one value or one per prompt")):
        with pytest.raises(ValueError, match=match):
            session.generate(prompts, 2, temperature=1.0, **bad)
    session.close()


def _replayed(session, prompt, tokens):
    """Each of `tokens` (generated after `prompt`) with the sequence before
    it and the raw logits one greedy step() gives there, the session's slot
    0 fed again from the prompt."""
    session.reset()
    if len(prompt) > 1:
        session.prefill([prompt[:-1]])
    seq = list(prompt)
    for token in tokens:
        session.step([seq[-1]], [len(seq) - 1], [0])
        yield token, list(seq), session.last_logits()[0]
        seq.append(token)


def test_filtered_rows_the_candidates_miss_draw_inside_their_filters(compiled):
    """A filtered row whose kept columns the candidates do not hold (the
    tiny vocabulary of 256 is one chunk of 64 candidates; top-p 0.6 at
    temperature 2 keeps about 100 columns) draws over the row: every token
    is one the filter keeps, by the reference's filter over the logits of
    one step() at a time (a draw that ignored the threshold lands outside
    with probability about 0.4 a token), and the draws are not the greedy
    tokens."""
    config, weights, path = compiled
    session = model.DecodeSession(path, weights)
    prompts, temperature, top_p = [[1, 2, 3], [4, 5, 6, 7]], 2.0, 0.6
    greedy = session.generate(prompts, 12)
    session.reset()
    got = session.generate(prompts, 12, temperature=temperature, seed=[11, 12], top_p=top_p)
    assert got.tokens != greedy.tokens
    for b, prompt in enumerate(prompts):
        for token, seq, logits in _replayed(session, prompt, got.tokens[b]):
            assert (sampling_filter_probs(logits, temperature, top_p=top_p) > 0).sum() > SAMPLE_CANDIDATES
            # (0.01 of slack for float32 sums at the nucleus' edge.)
            assert sampling_filter_probs(logits, temperature, top_p=top_p + 0.01)[token] > 0, (b, seq, token)
    session.close()


def test_penalties_follow_the_reference_token_by_token(compiled, monkeypatch):
    """Repetition, frequency and presence penalties in the kernel: every
    generated token is the argmax of the raw logits (one step() at a time)
    after the reference's penalties over the prompt and the tokens before
    it; the host loop of one-step launches draws the same; a sampled row
    repeats for its seed; step() is unpenalized afterwards."""
    config, weights, path = compiled
    session = model.DecodeSession(path, weights)
    prompts = [[1, 2, 3, 2, 1], [4, 5, 6, 7]]
    penalties = dict(repetition_penalty=[1.8, 1.0], frequency_penalty=[0.0, 0.9], presence_penalty=[0.0, 0.4])
    session.reset()
    greedy = session.generate(prompts, 10)
    session.reset()
    got = session.generate(prompts, 10, **penalties)
    assert got.tokens != greedy.tokens
    assert got.tokens == _stepwise(session, monkeypatch, prompts, 10, **penalties).tokens
    for b, prompt in enumerate(prompts):
        for token, seq, logits in _replayed(session, prompt, got.tokens[b]):
            want = penalize(logits, seq, len(prompt),
                            *(penalties[k][b] for k in ("repetition_penalty", "frequency_penalty", "presence_penalty")))
            assert token == int(np.argmax(want)), (b, seq)
    # Penalties off through the same path: the greedy tokens.
    session.reset()
    assert session.generate(prompts, 10, repetition_penalty=1.0, temperature=[0.0, 1e-9],
                            seed=1).tokens[0] == greedy.tokens[0]
    session.reset()
    hot = session.generate(prompts, 10, temperature=3.0, seed=[7, 8], **penalties)
    session.reset()
    assert session.generate(prompts, 10, temperature=3.0, seed=[7, 8], **penalties).tokens == hot.tokens
    for bad, match in ((dict(repetition_penalty=0.0), "repetition_penalty must be a finite number > 0"),
                       (dict(repetition_penalty=float("nan")), "repetition_penalty"),
                       (dict(frequency_penalty=float("inf")), "frequency_penalty must be a finite number"),
                       (dict(presence_penalty="high"), "presence_penalty must be a finite number"),
                       (dict(presence_penalty=[0.1, 0.2, 0.3]), "presence_penalty must be one value or one per")):
        with pytest.raises(ValueError, match=match):
            session.generate(prompts, 2, **bad)
    # A launch that fails leaves no scratch counts behind.
    with monkeypatch.context() as m:
        def failing(*args):
            session.buffers["penalty_counts"][0, 5] = 3
            raise RuntimeError("watchdog")
        m.setattr(session, "_decode_steps", failing)
        with pytest.raises(RuntimeError, match="watchdog"):
            session.generate(prompts, 4, **penalties)
    assert not np.asarray(session.buffers["penalty_counts"]).any()
    session.close()


def test_logit_bias_follows_the_reference_token_by_token(compiled, monkeypatch):
    """Logit biases in the kernel, one mapping per row, beside penalties:
    every generated token is the argmax of the raw logits (one step() at a
    time) after the reference's biases, then its penalties; the host loop
    of one-step launches draws the same; step() is unbiased afterwards;
    bad biases are refused by name."""
    config, weights, path = compiled
    session = model.DecodeSession(path, weights)
    prompts = [[1, 2, 3, 2, 1], [4, 5, 6, 7]]
    session.reset()
    greedy = session.generate(prompts, 8)
    bias = [{greedy.tokens[0][0]: -100.0, 9: 2.5, 11: 3.0}, None]
    penalties = dict(frequency_penalty=[0.7, 0.0])
    session.reset()
    got = session.generate(prompts, 8, logit_bias=bias, **penalties)
    assert got.tokens[0] != greedy.tokens[0] and got.tokens[1] == greedy.tokens[1]
    assert got.tokens == _stepwise(session, monkeypatch, prompts, 8, logit_bias=bias, **penalties).tokens
    ids, values = list(bias[0]), list(bias[0].values())
    for token, seq, logits in _replayed(session, prompts[0], got.tokens[0]):
        want = penalize(logit_bias(logits, ids, values), seq, len(prompts[0]),
                        frequency=penalties["frequency_penalty"][0])
        assert token == int(np.argmax(want)), seq
    session.reset()
    assert session.generate(prompts, 8).tokens == greedy.tokens
    vocab = config.vocab_size
    for bad, match in (({vocab: 1.0}, rf"logit_bias id {vocab} is not a token id in \[0, {vocab}\)"),
                       ({-1: 1.0}, "logit_bias id -1 is not a token id"),
                       ({3: float("nan")}, "logit_bias of id 3 must be a finite number"),
                       ([{3: 1.0}] * 3, "logit_bias must be one mapping or one per prompt"),
                       ("3:1", "logit_bias must map token ids to numbers"),
                       ({t: 1.0 for t in range(257)}, "at most 256 logit biases per row")):
        with pytest.raises(ValueError, match=match):
            session.generate(prompts, 2, logit_bias=bad)
    session.close()


def test_logprobs_follow_the_reference_token_by_token(compiled):
    """Each new token's log-probability and the row's most likely ids, in
    the kernel (et.top_logprobs after the biases and penalties): those of
    the reference over the raw logits of one step() at a time, the biases
    and penalties applied; greedy tokens unchanged by asking, sampled ones
    at their own log-probability; stream() gives the same; a row that
    did not ask has none; bad counts are refused by name."""
    config, weights, path = compiled
    session = model.DecodeSession(path, weights)
    prompts = [[1, 2, 3, 2, 1], [4, 5, 6, 7]]
    session.reset()
    greedy = session.generate(prompts, 6)
    assert greedy.logprobs is None
    bias = {9: 1.5, 11: -2.0}
    cases = [dict(logprobs=[3, None]),
             dict(logprobs=[0, 5], logit_bias=bias, frequency_penalty=0.7),
             dict(logprobs=4, temperature=1.5, seed=[3, 4])]
    for kwargs in cases:
        session.reset()
        got = session.generate(prompts, 6, **kwargs)
        if "temperature" not in kwargs and "logit_bias" not in kwargs:
            assert got.tokens == greedy.tokens
        session.reset()
        streamed = session.stream(prompts, 6, chunk=4, **kwargs)
        for _ in streamed:
            pass
        assert streamed.result.tokens == got.tokens and streamed.result.logprobs == got.logprobs
        counts = kwargs["logprobs"] if isinstance(kwargs["logprobs"], list) else [kwargs["logprobs"]] * 2
        for b, k in enumerate(counts):
            if k is None:
                assert got.logprobs[b] is None
                continue
            assert len(got.logprobs[b]) == len(got.tokens[b])
            for (token, seq, logits), entry in zip(_replayed(session, prompts[b], got.tokens[b]), got.logprobs[b]):
                x = logits.astype(np.float64)
                if "logit_bias" in kwargs:
                    x = logit_bias(x, list(bias), list(bias.values()))
                x = penalize(x, seq, len(prompts[b]), frequency=kwargs.get("frequency_penalty", 0.0))
                lse, ids, values = top_logprobs(x, k)
                np.testing.assert_allclose(entry.logprob, x[token] - lse, rtol=1e-4, atol=1e-4)
                assert [i for i, _ in entry.top] == ids.tolist(), (kwargs, seq)
                np.testing.assert_allclose([v for _, v in entry.top], values, rtol=1e-4, atol=1e-4)
    session.reset()
    for bad in (21, -1, True, "3", [1, 2, 3]):
        with pytest.raises(ValueError, match="logprobs must be|logprobs must be one value"):
            session.generate(prompts, 2, logprobs=bad)
    session.close()


def test_score_gives_each_prompt_token_its_logprob(compiled):
    """score(): each token after the first under the tokens before it, by
    decode steps that feed the prompt's own tokens: the reference's
    log-softmax over the raw logits of one step() at a time; a prompt and
    the greedy tokens generate() made after it score as generate() gave
    them (stop ids in a given sequence stop nothing); one-token prompts
    score nothing; a row's next generation is unaffected."""
    config, weights, path = compiled
    session = model.DecodeSession(path, weights)
    prompts = [[1, 2, 3, 2, 1, 7, 9], [4, 5]]
    session.reset()
    got = session.score(prompts, logprobs=2)
    assert [len(g) for g in got] == [6, 1]
    assert session.score([[6], [7, 8]])[0] == []
    for b, p in enumerate(prompts):
        session.reset()
        for i in range(1, len(p)):
            session.step([p[i - 1]], [i - 1], [0])
            x = session.last_logits()[0].astype(np.float64)
            lse, ids, values = top_logprobs(x, 2)
            np.testing.assert_allclose(got[b][i - 1].logprob, x[p[i]] - lse, rtol=1e-4, atol=1e-4)
            assert [t for t, _ in got[b][i - 1].top] == ids.tolist()
            np.testing.assert_allclose([v for _, v in got[b][i - 1].top], values, rtol=1e-4, atol=1e-4)
    session.reset()
    gen = session.generate(prompts[:1], 5, logprobs=3)
    whole = prompts[0] + gen.tokens[0]
    session.reset()
    scored = session.score([whole], logprobs=3)[0]
    # (A stop id among the given tokens stops nothing.)
    assert len(scored) == len(whole) - 1
    for want, entry in zip(gen.logprobs[0], scored[len(prompts[0]) - 1:]):
        np.testing.assert_allclose(entry.logprob, want.logprob, rtol=1e-5, atol=1e-5)
        assert [t for t, _ in entry.top] == [t for t, _ in want.top]
    session.reset()
    assert session.generate(prompts[:1], 5).tokens == gen.tokens
    for bad, match in (([[]], "prompts must be non-empty"), ([[config.vocab_size]], "token"),
                       ([[1] * 40], "exceeds the compiled context 32")):
        with pytest.raises(ValueError, match=match):
            session.score(bad)
    with pytest.raises(ValueError, match="logprobs must be"):
        session.score([[1, 2]], logprobs=21)
    session.close()


def test_stream_hands_out_the_tokens_of_generate(compiled, monkeypatch):
    """stream() yields the prefill's tokens, then the tokens as the kernel
    makes them (read while each launch of up to `chunk` steps runs):
    together the tokens of generate(), greedy or sampled, with each row
    stopping on its own."""
    config, weights, path = compiled
    session = model.DecodeSession(path, weights)
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8]]
    for kwargs in ({}, {"temperature": 3.0, "seed": [5, 6]}):
        session.reset()
        want = session.generate(prompts, 9, **kwargs)
        for chunk, launches in ((3, 3), (None, 1)):
            session.reset()
            stream = session.stream(prompts, 9, chunk=chunk, **kwargs)
            items = list(stream)
            # At least an item per launch; how many more depends on when the
            # host reads the history.
            # Greedy rows: the prefill's token first; sampled ones take
            # theirs from the decode kernel.
            assert len(items) >= (0 if kwargs else 1) + launches and all(len(item) == 2 for item in items)
            if not kwargs:
                assert items[0] == [[t[0]] for t in want.tokens]
            assert [sum((item[b] for item in items), []) for b in range(2)] == want.tokens
            assert stream.result.tokens == want.tokens and stream.result.launches == launches
    # A row that stops early gets nothing from the later launches.
    stop_at = want.tokens[0][2]
    session.reset()
    items = list(session.stream(prompts, 9, chunk=2, stop=[[stop_at], []], temperature=3.0, seed=[5, 6]))
    row0 = sum((item[0] for item in items), [])
    assert row0 == want.tokens[0][: want.tokens[0].index(stop_at) + 1]
    # One launch per step on the host: the same stream, a launch per item.
    session.reset()
    with monkeypatch.context() as m:
        m.setattr(type(session), "steps_on_device", property(lambda self: False))
        host = list(session.stream(prompts, 9, chunk=3, temperature=3.0, seed=[5, 6]))
    assert len(host) == 9 and [sum((i[b] for i in host), []) for b in range(2)] == want.tokens
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="chunk must be a positive int"):
            session.stream(prompts, 4, chunk=bad)
    # An error in the launch's thread reaches the caller's.
    with monkeypatch.context() as m:
        m.setattr(session, "decode_launch", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("launch failed")))
        session.reset()
        with pytest.raises(RuntimeError, match="launch failed"):
            list(session.stream(prompts, 4))
    session.close()


def test_generate_rejects_bad_input_before_any_launch(compiled):
    config, weights, path = compiled
    session = model.DecodeSession(path, weights)
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="max_new_tokens must be a positive int"):
            session.generate([[1]], bad)
    with pytest.raises(ValueError, match="need a context of 33, past the compiled context 32"):
        session.generate([[1] * 30], 4)
    with pytest.raises(ValueError, match=rf"stop id {config.vocab_size} is not a token id"):
        session.generate([[1]], 2, stop=[config.vocab_size])
    with pytest.raises(ValueError, match="stop id -1 is not a token id"):
        session.generate([[1], [2]], 2, stop=[[3], [-1]])
    with pytest.raises(ValueError, match="at most 8 stop ids per row"):
        session.generate([[1]], 2, stop=list(range(9)))
    with pytest.raises(ValueError, match=r"one per prompt \(2\), got 3"):
        session.generate([[1], [2]], 2, stop=[[1], [2], [3]])
    with pytest.raises(ValueError, match="3 prompts exceed the 2 cache slots"):
        session.generate([[1], [2], [3]], 2)
    for bad in (-0.5, float("nan"), float("inf"), "hot", True):
        with pytest.raises(ValueError, match="temperature must be a finite number >= 0"):
            session.generate([[1]], 2, temperature=bad)
    for bad in (-1, 2**64, 1.5, True):
        with pytest.raises(ValueError, match=r"seed must be an int in \[0, 2\*\*64\)"):
            session.generate([[1]], 2, temperature=1.0, seed=bad)
    with pytest.raises(ValueError, match=r"temperature must be one value or one per prompt \(2\), got 3"):
        session.generate([[1], [2]], 2, temperature=[1.0, 1.0, 1.0])
    session.close()


def test_batch_context_and_token_limits(compiled):
    config, weights, path = compiled
    session = model.DecodeSession(path, weights)
    with pytest.raises(ValueError, match=r"batch size 3 is outside \[1, 2\]"):
        session.step([1, 2, 3], [0, 0, 0])
    with pytest.raises(ValueError, match=r"position 32 is outside the compiled context \[0, 32\)"):
        session.step([1], [32])
    with pytest.raises(ValueError, match=r"token id 256 is outside the vocabulary"):
        session.step([256], [0])
    with pytest.raises(ValueError, match="2 tokens but 1 positions"):
        session.step([1, 2], [0])
    with pytest.raises(ValueError, match="exceeds the compiled context 32"):
        session.generate_stepwise([[1] * 30], steps=8)


def test_nan_logits_raise_instead_of_a_token(compiled):
    """NaN logits leave the argmax without a token: the step raises and
    names the rows, never returns an id outside the vocabulary."""
    config, weights, path = compiled
    poisoned = dict(weights)
    poisoned["model.norm.weight"] = np.full_like(weights["model.norm.weight"], np.nan)
    session = model.DecodeSession(path, poisoned)
    with pytest.raises(model.NonFiniteLogitsError, match="rows 0, 1 of the last step produced no token") as err:
        session.step([3, 4], [0, 0])
    assert err.value.rows == [0, 1]
    session.close()
    # One NaN logit among finite ones (the LM head's row of token 7): no
    # token either, greedy or sampled (the NaN was skipped, and the row
    # decoded on as if the logits were sound).
    head = "lm_head.weight" if "lm_head.weight" in weights else "model.embed_tokens.weight"
    one = dict(weights)
    one[head] = np.array(weights[head])
    one[head][7] = np.nan
    session = model.DecodeSession(path, one)
    with pytest.raises(model.NonFiniteLogitsError, match="rows 0, 1 of the last step produced no token"):
        session.step([3, 4], [0, 0])
    session.reset()
    with pytest.raises(model.NonFiniteLogitsError):
        session.generate([[3, 4]], 4, temperature=1.0, seed=1)
    session.close()
    session = model.DecodeSession(path, weights)
    assert ((session.step([3, 4], [0, 0]) >= 0) & (session.step([3, 4], [1, 1]) < config.vocab_size)).all()
    session.close()


def test_reference_without_bf16_rounding_stays_close(compiled):
    """The float32 reference without the kernel's bf16 rounding points:
    the kernel stays within bf16 tolerance of it."""
    config, weights, path = compiled
    session = model.DecodeSession(path, weights)
    ref = model.ReferenceModel(config, weights, max_batch=2, max_context=32, bf16_activations=False)
    for t in range(4):
        session.step([3, 4], [t, t])
        want = ref.step([3, 4], [t, t])
        assert _rel(session.last_logits(), want) < 3e-2


def test_config_reader_fuzz():
    """Random edits of a valid config.json (values of every JSON kind, keys
    dropped, rope_scaling fields changed): each is accepted or a
    ConfigError, never another exception."""
    import copy
    import random

    base = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
            "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
            "head_dim": 32, "vocab_size": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
            "tie_word_embeddings": False, "max_position_embeddings": 128, "hidden_act": "silu",
            "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 64}}
    model.ModelConfig.from_hf(base)
    values = [None, True, False, 0, -1, 1, 2**70, 1.5, float("nan"), float("inf"), "", "x", "8", [], [1], {},
              {"a": 1}, ["x"], 1e300, -0.0]
    rng = random.Random(0)
    scaling_keys = ["rope_scaling." + k for k in base["rope_scaling"]]
    for _ in range(3000):
        d = copy.deepcopy(base)
        for _ in range(rng.randint(1, 3)):
            key, v = rng.choice(list(d) + scaling_keys + ["new"]), rng.choice(values)
            if key.startswith("rope_scaling."):
                if isinstance(d.get("rope_scaling"), dict):
                    d["rope_scaling"][key.split(".")[1]] = v
            elif rng.random() < 0.15:
                d.pop(key, None)
            else:
                d[key] = v
        try:
            model.ModelConfig.from_hf(d)
        except model.ConfigError:
            pass
    bad_scaling = dict(base["rope_scaling"], high_freq_factor=1.0)
    with pytest.raises(model.ConfigError, match=r"'high_freq_factor' \(1\) must exceed 'low_freq_factor' \(1\)"):
        model.ModelConfig.from_hf({**base, "rope_scaling": bad_scaling})
    with pytest.raises(model.ConfigError, match="rope_scaling 'factor' must be a positive finite number, got 'x'"):
        model.ModelConfig.from_hf({**base, "rope_scaling": dict(base["rope_scaling"], factor="x")})
    with pytest.raises(model.ConfigError, match="unsupported architecture"):
        model.ModelConfig.from_hf({k: v for k, v in {**base, "model_type": ["x"]}.items() if k != "architectures"})


def test_config_errors(tmp_path):
    bad = {
        "arch": (_hf("llama", architectures=["GPT2LMHeadModel"]), "unsupported architecture"),
        "heads": (_hf("llama", num_key_value_heads=3, num_attention_heads=2), "not a multiple of"),
        "missing": ({k: v for k, v in _hf("llama").items() if k != "vocab_size"}, "missing 'vocab_size'"),
        "negative": (_hf("qwen3", hidden_size=-4), "'hidden_size' must be a positive integer, got -4"),
        "rope": (_hf("llama", rope_scaling={"rope_type": "yarn", "factor": 2.0}), "unsupported rope_scaling"),
        "bias": (_hf("qwen3", attention_bias=True), "'attention_bias' = true is not supported"),
        "act": (_hf("llama", hidden_act="gelu"), "hidden_act 'gelu'"),
        "sliding": (_hf("qwen3", use_sliding_window=True), "'use_sliding_window' = true is not supported"),
        "layer_types": (_hf("qwen3", layer_types=["full_attention", "sliding_attention"]),
                        r"'layer_types' \['sliding_attention'\] are not supported"),
        "tie_string": (_hf("llama", tie_word_embeddings="false"), "'tie_word_embeddings' must be a JSON boolean"),
        "bias_string": (_hf("qwen3", attention_bias="no"), "'attention_bias' must be a JSON boolean"),
        "eps_nan": (_hf("llama", rms_norm_eps=float("nan")), "'rms_norm_eps' must be a positive finite number"),
        "theta_inf": (_hf("qwen3", rope_theta=float("inf")), "'rope_theta' must be a positive finite number"),
        "theta_one": (_hf("llama", rope_theta=1.0), "rope_theta must be greater than 1"),
        "head_dim": (_hf("qwen3", head_dim=80), "head_dim must be a multiple of 32"),
        "vocab_huge": (_hf("llama", vocab_size=10**12), r"vocab_size must be in \[1, 2147483646\]"),
        "vocab_marker": (_hf("llama", vocab_size=2**31 - 1), "2147483647 marks a row without a token"),
        "hidden_huge": (_hf("llama", hidden_size=2**24, num_attention_heads=2**19),
                        "hidden_size must be at most 1048576"),
        "no_arch": ({k: v for k, v in _hf("llama").items() if k not in ("architectures", "model_type")},
                    "unsupported architecture"),
        "scaling_list": (_hf("llama", rope_scaling=[1, 2]), "'rope_scaling' must be an object or null"),
    }
    for name, (hf, msg) in bad.items():
        with pytest.raises(model.ConfigError, match=msg):
            model.ModelConfig.from_hf(hf)
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(model.ConfigError, match="a config must be a JSON object, got list"):
        model.ModelConfig.from_hf(tmp_path)
    # What transformers accepts for these architectures: a config without
    # `architectures` (save_pretrained of a bare config), SiLU named
    # "swish", rope_scaling of the "default" type (no scaling).
    plain = model.ModelConfig.from_hf(_hf("qwen3"))
    bare = {k: v for k, v in _hf("qwen3").items() if k != "architectures"}
    assert model.ModelConfig.from_hf({**bare, "model_type": "qwen3"}) == plain
    assert model.ModelConfig.from_hf(_hf("qwen3", hidden_act="swish")) == plain
    assert model.ModelConfig.from_hf(_hf("qwen3", rope_scaling={"rope_type": "default"})) == plain
    assert model.ModelConfig.from_hf(_hf("qwen3", use_sliding_window=False, sliding_window=None,
                                         layer_types=["full_attention"] * 2)) == plain
    assert model.ModelConfig.from_hf(_hf("qwen3", tie_word_embeddings=True)).tie_word_embeddings
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(model.ConfigError, match="not valid JSON"):
        model.ModelConfig.from_hf(tmp_path)
    with pytest.raises(model.ConfigError, match="cannot read"):
        model.ModelConfig.from_hf(tmp_path / "absent.json")


def test_weight_errors(tmp_path):
    config = model.tiny_config("qwen3")
    w = model.random_weights(config)
    missing = dict(w)
    del missing["model.layers.1.self_attn.k_norm.weight"]
    write_safetensors(tmp_path / "a.safetensors", missing)
    with pytest.raises(model.WeightError, match="missing tensors: model.layers.1.self_attn.k_norm.weight"):
        model.load_weights(config, [tmp_path / "a.safetensors"])
    shaped = dict(w)
    shaped["model.layers.0.mlp.up_proj.weight"] = w["model.layers.0.mlp.up_proj.weight"][:, :32]
    write_safetensors(tmp_path / "b.safetensors", shaped)
    with pytest.raises(model.WeightError, match=r"'model.layers.0.mlp.up_proj.weight' has shape \[128, 32\], "
                                                r"expected \[128, 64\]"):
        model.load_weights(config, [tmp_path / "b.safetensors"])
    extra = dict(w)
    extra["model.layers.9.mlp.up_proj.weight"] = w["model.layers.0.mlp.up_proj.weight"]
    write_safetensors(tmp_path / "c.safetensors", extra)
    with pytest.raises(model.WeightError, match="unexpected tensors"):
        model.load_weights(config, [tmp_path / "c.safetensors"])
    (tmp_path / "d.safetensors").write_bytes(b"\xff" * 16)
    with pytest.raises(model.WeightError, match="header length"):
        read_safetensors(tmp_path / "d.safetensors")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(model.WeightError, match="no .safetensors files"):
        model.load_weights(config, [empty])


def _safetensors(path, header, data: bytes):
    import struct

    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path


@pytest.mark.parametrize("header, data, match", [
    ([1, 2], b"", "the header is a JSON list, not an object of tensors"),
    ({"w": "F32"}, b"", "tensor 'w' is a JSON str, not an object"),
    ({"w": {"dtype": "F32", "shape": [2]}}, b"\0" * 8, r"data_offsets None, not \[start, end\]"),
    ({"w": {"dtype": "F32", "shape": ["2"], "data_offsets": [0, 8]}}, b"\0" * 8, "shape \\['2'\\], not a list"),
    ({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, b"\0" * 8, "not a list of non-negative"),
    ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [-8, 0]}}, b"\0" * 8, "0 <= start <= end"),
    ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 4, r"\(4 bytes\) for float32 \[2\]"),
    ({"w": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8, "bfloat16 \\[2\\] \\(4 bytes\\)"),
    ({"w": {"dtype": "I8", "shape": [2], "data_offsets": [0, 2]}}, b"\0" * 2, "unsupported dtype 'I8'"),
    # Byte sizes past 64 bits (an int64 product wrapped to 0 bytes).
    ({"w": {"dtype": "BF16", "shape": [2**32, 2**32], "data_offsets": [0, 0]}}, b"", "36893488147419103232 bytes"),
    ({"w": {"dtype": "F32", "shape": [2**70], "data_offsets": [0, 0]}}, b"", r"float32 \[1180591620717411303424\]"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, b"\0" * 12, "'b' .* overlaps the tensor"),
    ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8, "leaves bytes 0..4 unused"),
    ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 8, "take 4 bytes but the data section"),
    ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"", "take 4 bytes but the data section has 0"),
    ({"__metadata__": {"format": 1}}, b"", "__metadata__ must map strings to strings"),
])
def test_safetensors_reader_refuses_bad_files(tmp_path, header, data, match):
    """Like the format's reference reader: every entry checked, the data
    section tiled exactly; a WeightError naming the tensor, no traceback."""
    with pytest.raises(model.WeightError, match=match):
        read_safetensors(_safetensors(tmp_path / "bad.safetensors", header, data))


def test_safetensors_reader_names_an_index_file(tmp_path):
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {"total_size": 8}, "weight_map": {"w": "model.safetensors"}}))
    with pytest.raises(model.WeightError, match="a JSON file, not a .safetensors file"):
        read_safetensors(index)
    # Random bytes anywhere in a valid file's header give a WeightError too.
    rng = np.random.default_rng(0)
    good = _safetensors(tmp_path / "good.safetensors",
                        {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8).read_bytes()
    for _ in range(200):
        raw = bytearray(good)
        raw[rng.integers(8, len(raw) - 8)] = int(rng.integers(0, 256))
        (tmp_path / "fuzz.safetensors").write_bytes(bytes(raw))
        try:
            read_safetensors(tmp_path / "fuzz.safetensors")
        except model.WeightError:
            pass


def test_safetensors_round_trip(tmp_path):
    w = model.random_weights(model.tiny_config("llama"), seed=5)
    write_safetensors(tmp_path / "w.safetensors", w)
    back = read_safetensors(tmp_path / "w.safetensors")
    assert set(back) == set(w)
    for name in w:
        assert back[name].dtype == w[name].dtype and np.array_equal(back[name].view(np.uint16),
                                                                   w[name].view(np.uint16))


def test_session_rejects_a_non_model_artifact(tmp_path):
    with pytest.raises(model.ModelArtifactError, match="no model.json"):
        model.DecodeSession(tmp_path, {})


def test_kernel_options_round_trip_and_defaults(tmp_path):
    """compile_model's build choices are one KernelOptions: checked once,
    the defaults of the target and batch resolved per kernel, written to
    model.json and read back by the session (keys that name no option
    ignored)."""
    opts = model.KernelOptions(norm_in_linear=["qkv"], qk_heads=2)
    assert opts.norm_in_linear == ("qkv",) and opts.to_dict()["norm_in_linear"] == ["qkv"]
    assert model.KernelOptions.from_dict({**opts.to_dict(), "config": {}, "l2_prefetch": 0.0}) == opts
    assert not opts.resolved
    qwen = model.preset("qwen3-0.6b")
    one = model.KernelOptions().resolve(qwen, target="cuda", max_batch=1)
    assert (one.layered, one.o_per_head, one.norm_in_linear, one.norm_scratch) == (True, True, True, "shared")
    assert one.resolved
    many = model.KernelOptions(o_per_head=False).resolve(qwen, target="cuda", max_batch=4, mode="dynamic")
    assert (many.layered, many.o_per_head, many.norm_in_linear, many.norm_scratch) == (False, False, False, "global")
    with pytest.raises(ValueError, match="o_per_head needs tp 1 and linear_tile 'rows'"):
        model.KernelOptions(o_per_head=True, linear_tile="mma")
    # With "auto", the tile kind of each kernel variant is checked when it is known.
    model.KernelOptions(o_per_head=True, linear_tile="auto")
    config = model.tiny_config("llama")
    path = model.compile_model(config, target="cpu", max_batch=1, max_context=16, workers=3, cache_dir=tmp_path)
    info = json.loads((path / "model.json").read_text())
    session = model.DecodeSession(path, model.random_weights(config, seed=1))
    assert session.kernel_options == model.KernelOptions.from_dict(info) == \
        model.KernelOptions().resolve(config, target="cpu", max_batch=1)
    session.close()
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "model.json").write_text(json.dumps({**info, "linear_tile": "wide"}))
    with pytest.raises(model.ModelArtifactError, match="linear_tile must be 'rows', 'mma' or 'auto', got 'wide'"):
        model.DecodeSession(bad, {})


def test_kernel_layout_limits():
    from event_tensor.model.builder import kernel_layout

    config = model.tiny_config("llama")
    with pytest.raises(ValueError, match=r"max_batch must be an int in \[1, 64\]"):
        kernel_layout(config, max_batch=65, max_context=32, workers=4)
    with pytest.raises(ValueError, match="exceeds the model's max_position_embeddings"):
        kernel_layout(config, max_batch=1, max_context=10_000, workers=4)
    for bad in (0, 3, True):
        with pytest.raises(ValueError, match=r"min_batch must be an int in \[1, max_batch 2\]"):
            kernel_layout(config, max_batch=2, max_context=32, workers=4, min_batch=bad)


def test_default_split_length_makes_one_wave_of_attention_tiles():
    """The default split length: a power of two (at least 256, 128 for
    one-row kernels, at most the context) giving about one tile per worker
    at the geometric middle of the batches the kernel serves; the bests
    measured on the H200."""
    from event_tensor.model.builder import kernel_layout

    llama = model.preset("llama-3.2-1b")  # 8 KV heads

    def split(b, c, lo=1):
        return kernel_layout(llama, max_batch=b, max_context=c, workers=132, min_batch=lo).split_len

    assert [split(1, 1024), split(1, 2048), split(1, 8192), split(1, 128)] == [128, 128, 512, 128]
    assert [split(2, 1024), split(2, 2048)] == [256, 256]
    assert [split(2, 8192, 2), split(4, 8192, 4), split(8, 1024, 8), split(8, 8192, 8)] == [1024, 2048, 512, 4096]
    assert [split(16, 1024, 16), split(16, 4096, 16), split(16, 8192, 16)] == [1024, 4096, 8192]
    # A single kernel for batches 1-16 aims at batch 4.
    assert split(16, 8192) == 2048


def test_attention_splits_follow_the_launch(tmp_path):
    """Each row's attention splits are chosen per launch: about one wave of
    tiles (workers // (KV heads x batch) splits per row), at most one per
    256 positions and no more than the kernel's tiles per row, balanced in
    whole 16s and never longer than the kernel's split length. Here 8
    workers and 2 KV heads, a kernel of 2 splits of 512: a row of 700
    positions runs as 352 + 348 (statically 512 + 188), one of 300 at batch
    2 as 160 + 140 (statically one split). The reference checks that the
    splits cover every position once and that the merge reads them all."""
    from event_tensor.model.builder import kernel_layout

    c = model.tiny_config("qwen3", max_position_embeddings=1024)
    # One-row kernels keep the static split (their staged KV path measured
    # slower with a computed one), and so do kernels of one split per row or
    # of splits of MIN_SPLIT_LEN (the launch cannot add tiles there).
    def runtime(b, split):
        return kernel_layout(c, max_batch=b, max_context=1024, workers=8, split_len=split).runtime_splits

    assert [runtime(1, 512), runtime(2, 512), runtime(2, 1024), runtime(2, 256)] == [False, True, False, False]
    w = model.random_weights(c, seed=5)
    path = model.compile_model(c, target="cpu", max_batch=2, max_context=1024, workers=8, split_len=512,
                               cache_dir=tmp_path)
    session = model.DecodeSession(path, w)
    ref = model.ReferenceModel(c, w, max_batch=2, max_context=1024)
    rng = np.random.default_rng(7)
    for name in ("k_cache", "v_cache"):
        history = rng.standard_normal(getattr(ref, name).shape).astype(np.float32)
        session.buffers[name][...] = history.astype(session.buffers[name].dtype)
        getattr(ref, name)[...] = np.asarray(session.buffers[name], np.float32)
    for tokens, positions in (([11], [699]), ([12, 13], [700, 299]), ([14, 15], [300, 700])):
        session.step(tokens, positions)
        want = ref.step(tokens, positions)
        assert _rel(session.last_logits(), want) < 2e-3, positions
    session.close()


def test_cli_compile_run_bench_trace(tmp_path, capsys):
    from event_tensor.cli import main

    art = tmp_path / "art"
    assert main(["compile", "tiny-qwen3", "-o", str(art), "--device", "cpu", "--max-batch", "2",
                 "--max-context", "16", "--workers", "2", "--profile", "--per-layer"]) == 0
    assert (art / "model.json").exists()
    assert main(["run", str(art), "--random-weights", "--steps", "3", "--check", "--batch", "2", "--prompt", "3 4"]) == 0
    out = capsys.readouterr().out
    assert "greedy tokens agree" in out and "sequence 1:" in out
    assert main(["bench", str(art), "--iters", "3", "--warmup", "1"]) == 0
    assert "ms per step" in capsys.readouterr().out
    assert main(["trace", str(art), "-o", str(tmp_path / "t" / "step")]) == 0
    assert (tmp_path / "t" / "step.trace.json").exists()
    assert "where the time went" in capsys.readouterr().out
    # Bad input: a clear message and exit code 2.
    assert main(["run", str(tmp_path), "--steps", "1"]) == 2
    assert "no model.json" in capsys.readouterr().err
    assert main(["run", str(art), "--random-weights", "--prompt", "1, x"]) == 2
    assert "--prompt must be token ids" in capsys.readouterr().err
    assert main(["run", str(art), "--random-weights", "--batch", "3", "--steps", "1"]) == 2
    assert "3 prompts exceed the 2 cache slots" in capsys.readouterr().err
    # Sampling and stop ids; a generation repeats for its seed.
    sample = ["run", str(art), "--random-weights", "--max-new-tokens", "5", "--temperature", "2.5", "--seed", "7", "--prompt", "3 4"]
    assert main(sample) == 0
    first = capsys.readouterr().out
    assert "sequence 0: [" in first and "(length)" in first and "1 launch)" in first
    assert main(sample) == 0 and capsys.readouterr().out.splitlines()[1:2] == first.splitlines()[1:2]
    stop_at = first.split("sequence 0: [")[1].split(",")[0]
    assert main(["run", str(art), "--random-weights", "--max-new-tokens", "5", "--temperature", "2.5", "--seed", "7",
                 "--prompt", "3 4", "--stop", stop_at]) == 0
    assert f"sequence 0: [{stop_at}] (stop)" in capsys.readouterr().out
    assert main(["run", str(art), "--random-weights", "--temperature", "-1"]) == 2
    assert "temperature must be a finite number >= 0" in capsys.readouterr().err
    # Log-probabilities: a line per token after the sequence, its id and
    # log-probability first, then the 2 most likely ids' (greedy: its own
    # first).
    assert main(["run", str(art), "--random-weights", "--max-new-tokens", "3", "--prompt", "3 4",
                 "--logprobs", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("sequence 0: "))
    tokens = json.loads(lines[at].split(": ", 1)[1].split(" (")[0])
    rows = [line.split("\t") for line in lines[at + 1:at + 4]]
    assert [int(r[0]) for r in rows] == tokens and all(float(r[1]) <= 0 for r in rows)
    assert all(len(r[2].split()) == 2 and r[2].split()[0].split("=")[0] == r[0].strip() for r in rows)
    assert main(["run", str(art), "--random-weights", "--logprobs", "21"]) == 2
    assert "logprobs must be None (off) or an int in [0, 20]" in capsys.readouterr().err
    assert main(["run", str(art), "--random-weights", "--stop", "3, x"]) == 2
    assert "--stop must be token ids separated by commas or spaces, got '3, x'" in capsys.readouterr().err
    assert main(["run", str(art), "--random-weights", "--stop", "99999"]) == 2
    assert "stop id 99999 is not a token id" in capsys.readouterr().err
    # No --max-context: 1024, or the model's max_position_embeddings where
    # that is smaller (256 for the tiny presets).
    assert main(["compile", "tiny-llama", "-o", str(tmp_path / "default-context"), "--device", "cpu"]) == 0
    assert f"max context {model.tiny_config('llama').max_position_embeddings}," in capsys.readouterr().out
    assert main(["compile", str(tmp_path / "nope.json"), "-o", str(art), "--device", "cpu"]) == 2
    assert "nope.json: neither a config.json, a directory holding one, nor a preset (demo, tiny-llama" \
        in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["compile", "tiny-qwen3", "-o", str(art), "--device", "cpu", "--workers", "0"])
    assert exit_info.value.code == 2 and "must be a positive integer, got 0" in capsys.readouterr().err
    # run needs weights or --random-weights; bench says out loud that it
    # takes random ones; a check that fails exits 1.
    assert main(["run", str(art), "--steps", "1"]) == 2
    assert "or --random-weights to run with random bf16 weights" in capsys.readouterr().err
    for argv in (["--iters", "0"], ["--warmup", "-1"], ["--batch", "0"]):
        with pytest.raises(SystemExit) as exit_info:
            main(["bench", str(art), *argv])
        assert exit_info.value.code == 2 and "must be a" in capsys.readouterr().err
    assert main(["bench", str(art), "--iters", "1", "--warmup", "0"]) == 0
    assert "no --weights given: random bf16 weights" in capsys.readouterr().err
    import event_tensor.model.cli as model_cli

    tolerance = model_cli.CHECK_TOLERANCE
    model_cli.CHECK_TOLERANCE = -1.0
    try:
        assert main(["run", str(art), "--random-weights", "--steps", "2", "--check", "--prompt", "3"]) == 1
        assert "-> MISMATCH" in capsys.readouterr().out
        assert main(["run", str(art), "--random-weights", "--steps", "2", "--check", "transformers",
                     "--prompt", "3"]) == 1
        assert "-> MISMATCH" in capsys.readouterr().out
    finally:
        model_cli.CHECK_TOLERANCE = tolerance
    # Against transformers in float32: the same model, teacher-forced.
    assert main(["run", str(art), "--random-weights", "--steps", "4", "--check", "transformers", "--batch", "2",
                 "--prompt", "3 4"]) == 0
    out = capsys.readouterr().out
    assert "against transformers: max relative logit error" in out and "-> OK" in out
    # cuda kernels add the query heads' shares atomically unless --deterministic;
    # a prefill kernel of up to 512 rows (here the context's 16) by default.
    for flag, atomic in (([], True), (["--deterministic"], False)):
        cu = tmp_path / f"cu{len(flag)}"
        assert main(["compile", "tiny-qwen3", "-o", str(cu), "--device", "cuda", "--max-context", "16",
                     "--workers", "8", *flag]) == 0
        assert json.loads((cu / "model.json").read_text())["o_per_head"] is atomic
        assert ("merge" in json.loads((cu / "metadata.json").read_text())["tasks"]) is not atomic
        assert json.loads((cu / "model.json").read_text())["prefill"]["rows"] == 16
    assert "a prefill kernel of 16 rows" in capsys.readouterr().out
    moe = tmp_path / "moe"
    assert main(["compile", "tiny-qwen3-moe", "-o", str(moe), "--device", "cuda", "--max-context", "16",
                 "--workers", "8", "--format", "isa"]) == 0
    assert "prefill" not in json.loads((moe / "model.json").read_text())
    # --tp: one kernel over two (simulated) devices; run checks it against
    # the numpy model; a split that does not divide is a clear error.
    tp_art = tmp_path / "tp"
    assert main(["compile", "tiny-qwen3", "-o", str(tp_art), "--device", "cpu", "--max-batch", "2",
                 "--max-context", "16", "--workers", "2", "--tp", "2"]) == 0
    assert "for cpu x 2" in capsys.readouterr().out
    assert json.loads((tp_art / "metadata.json").read_text())["devices"] == 2
    assert main(["run", str(tp_art), "--random-weights", "--steps", "3", "--check", "--batch", "2", "--prompt", "3 4"]) == 0
    assert "greedy tokens agree" in capsys.readouterr().out
    assert main(["compile", "tiny-qwen3", "-o", str(tmp_path / "tp3"), "--device", "cpu", "--max-context", "16",
                 "--tp", "3"]) == 2
    assert "needs num_kv_heads (2) divisible by 3" in capsys.readouterr().err
    # A kernel per shape bucket: run and bench go through the session's choice.
    spec = tmp_path / "spec"
    assert main(["compile", "tiny-llama", "-o", str(spec), "--device", "cpu", "--max-batch", "2",
                 "--max-context", "16", "--workers", "2", "--specialize"]) == 0
    assert [v["max_batch"] for v in json.loads((spec / "model.json").read_text())["variants"]] == [1, 2]
    assert main(["run", str(spec), "--random-weights", "--steps", "3", "--check", "--batch", "2", "--prompt", "3 4"]) == 0
    out = capsys.readouterr().out
    assert "greedy tokens agree 8/8" in out, out
    assert main(["bench", str(spec), "--iters", "2", "--warmup", "1", "--batch", "1"]) == 0
    assert "ms per step" in capsys.readouterr().out
    # Compiling for CUDA needs no GPU (PTX, or a cubin by default where
    # ptxas is found); --prefill-rows adds the prefill kernel.
    cuda_art = tmp_path / "cuda"
    assert main(["compile", "tiny-llama", "-o", str(cuda_art), "--device", "cuda", "--max-context", "16",
                 "--workers", "8", "--threads", "128", "--format", "isa", "--prefill-rows", "16"]) == 0
    meta = json.loads((cuda_art / "metadata.json").read_text())
    assert meta["target"] == "cuda" and meta["binary"] == "kernel.ptx"
    assert json.loads((cuda_art / "model.json").read_text())["prefill"]["rows"] == 16
    assert (cuda_art / "prefill" / "metadata.json").exists()
    assert main(["compile", "tiny-llama", "-o", str(cuda_art), "--device", "cpu", "--prefill-rows", "-1"]) == 2
    assert "--prefill-rows must be >= 0" in capsys.readouterr().err
    from event_tensor.testing import ptxas_path

    if ptxas_path():
        bin_art = tmp_path / "cubin"
        assert main(["compile", "tiny-llama", "-o", str(bin_art), "--device", "cuda", "--max-context", "16",
                     "--workers", "8", "--threads", "128"]) == 0
        meta = json.loads((bin_art / "metadata.json").read_text())
        assert meta["binary"] == "kernel.cubin" and (bin_art / meta["binary"]).read_bytes()[:4] == b"\x7fELF"


def test_cli_compile_defaults_are_the_measured_best(tmp_path, capsys):
    """`event-tensor compile --device cuda` builds, unless told otherwise, a
    kernel per shape bucket and tensor-core tiles where the batch reaches
    them (default_shape_options); one kernel where the shape has one
    bucket, for experts or a tuning table; --no-specialize and
    --linear-tile opt out. Host workers: the available cores, at least 4."""
    import os

    from event_tensor.cli import main
    from event_tensor.model.compile import default_shape_options, default_workers

    c = model.tiny_config("llama")
    assert default_shape_options(c, "cuda", 1, 1024) == {"specialize": True, "linear_tile": "rows"}
    assert default_shape_options(c, "cuda", 16, 8192) == {"specialize": True, "linear_tile": "auto"}
    assert default_shape_options(c, "cuda", 1, 16)["specialize"] is False
    assert default_shape_options(c, "cpu", 16, 8192) == {"specialize": False, "linear_tile": "rows"}
    assert default_shape_options(c, "cuda", 16, 8192, "NVIDIA H200")["specialize"] is False
    assert default_shape_options(model.tiny_moe_config(), "cuda", 16, 8192)["specialize"] is False
    assert default_workers("cuda") == 132 and default_workers("cpu") == max(4, len(os.sched_getaffinity(0)))
    art = tmp_path / "spec"
    assert main(["compile", "tiny-llama", "-o", str(art), "--device", "cuda", "--max-batch", "4", "--max-context", "256",
                 "--workers", "8", "--format", "isa", "--prefill-rows", "0"]) == 0
    variants = json.loads((art / "model.json").read_text())["variants"]
    assert [v["max_batch"] for v in variants] == [1, 2, 4]
    plain = tmp_path / "plain"
    assert main(["compile", "tiny-llama", "-o", str(plain), "--device", "cuda", "--max-batch", "4", "--max-context", "256",
                 "--workers", "8", "--format", "isa", "--prefill-rows", "0", "--no-specialize"]) == 0
    assert not json.loads((plain / "model.json").read_text()).get("variants")
    assert (plain / "metadata.json").exists()


def test_cli_demo_runs_and_checks(tmp_path, capsys, monkeypatch):
    from event_tensor.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--device", "cpu", "--steps", "3", "--context", "16", "--workers", "2"]) == 0
    out = capsys.readouterr().out
    assert "-> OK" in out and "tokens/s" in out and "where the time went" in out
    assert (tmp_path / "event-tensor-demo" / "demo.trace.json").exists()
    # Bad values are errors that name them, before anything is compiled.
    for argv, message in ((["--prompt", "1,x"], "--prompt must be token ids"),
                          (["--prompt", "99999"], "--prompt token 99999 is outside the vocabulary"),
                          (["--steps", "200"], "prompt (4) + steps (200) exceed the context 64"),
                          (["--context", "100000"], "max_context 100000 exceeds the model's max_position_embeddings")):
        assert main(["demo", "--device", "cpu", *argv]) == 2, argv
        assert message in capsys.readouterr().err
    for argv in (["--steps", "0"], ["--batch", "0"], ["--seed", "-1"]):
        with pytest.raises(SystemExit) as exit_info:
            main(["demo", "--device", "cpu", *argv])
        assert exit_info.value.code == 2 and "must be a" in capsys.readouterr().err


def test_progress_bar_counts(capsys):
    p = Progress(3, "work")
    for _ in range(3):
        p.update()
    p.done()
    assert "work: 3/3" in capsys.readouterr().err


def test_prefill_rows_of_one_sequence_in_one_launch(compiled):
    """Rows of one cache slot at consecutive positions attend causally to
    each other within a launch: a 2-token prompt chunk gives the same
    logits as feeding its tokens one launch at a time."""
    config, weights, path = compiled
    chunked = model.DecodeSession(path, weights)
    ref = model.ReferenceModel(config, weights, max_batch=2, max_context=32)
    chunked.step([11, 12], [0, 1], slots=[1, 1])
    want = ref.step([11, 12], [0, 1], slots=[1, 1])
    assert _rel(chunked.last_logits(), want) < 2e-3
    one_by_one = model.DecodeSession(path, weights)
    one_by_one.step([11], [0])
    one_by_one.step([12], [1])
    assert _rel(chunked.last_logits()[1], one_by_one.last_logits()[0]) < 2e-3
    # prefill() packs two prompts of different lengths into launches of
    # max_batch rows; the greedy token after each prompt matches the
    # reference fed the same way.
    chunked.reset()
    prompts = [[1, 2, 3], [4, 5]]
    got = chunked.prefill(prompts)
    seq_ref = model.ReferenceModel(config, weights, max_batch=2, max_context=32)
    last = {}
    for t in range(3):
        rows = [(b, p[t]) for b, p in enumerate(prompts) if t < len(p)]
        logits = seq_ref.step([tok for _, tok in rows], [t] * len(rows), slots=[b for b, _ in rows])
        for (b, _), lg in zip(rows, logits):
            if t == len(prompts[b]) - 1:
                top2 = np.sort(lg)[-2:]
                last[b] = (int(lg.argmax()), top2[1] - top2[0] > 1e-3 * np.abs(lg).max())
    for b, (token, clear) in last.items():
        if clear:
            assert got[b] == token
    with pytest.raises(ValueError, match="two rows write the same cache slot and position"):
        chunked.step([1, 2], [3, 3], slots=[0, 0])
    with pytest.raises(ValueError, match=r"cache slot 2 is outside \[0, 2\)"):
        chunked.step([1], [0], slots=[2])


def test_dynamic_schedule_matches_reference(tmp_path):
    """The same model through the dynamic scheduler (tickets from an
    in-kernel queue, binary search over the queue's tile ranges)."""
    config = model.tiny_config("qwen3")
    weights = model.random_weights(config, seed=2)
    path = model.compile_model(config, target="cpu", max_batch=2, max_context=32, workers=3, split_len=8,
                               mode="dynamic", cache_dir=tmp_path)
    session = model.DecodeSession(path, weights)
    ref = model.ReferenceModel(config, weights, max_batch=2, max_context=32)
    for t in range(4):
        session.step([3 + t, 9 * t], [t, t])
        assert _rel(session.last_logits(), ref.step([3 + t, 9 * t], [t, t])) < 2e-3


@pytest.mark.parametrize("family,fuse_norms", [("llama", True), ("qwen3", True), ("llama", False)])
def test_layered_kernel_matches_reference(family, fuse_norms, tmp_path):
    """One task per kind over (layer, tile), events indexed by layer: the
    task graph has a cycle (qkv -> ... -> down -> qkv) that its tiles do
    not. Batch tiles past the runtime batch only signal. With fuse_norms
    the linear tiles normalize their inputs; without, one-tile norm tasks
    do."""
    config = model.tiny_config(family)
    weights = model.random_weights(config, seed=4)
    path = model.compile_model(config, target="cpu", max_batch=2, max_context=32, workers=3, split_len=8,
                               layered=True, cache_dir=tmp_path, fuse_norms=fuse_norms)
    info = json.loads((path / "model.json").read_text())
    assert info["layered"] is True and info["fuse_norms"] is fuse_norms
    tasks = json.loads((path / "metadata.json").read_text())["tasks"]
    assert "qkv" in tasks and "qkv_1" not in tasks
    assert ("norm1" in tasks and "norm2" in tasks) is not fuse_norms
    session = model.DecodeSession(path, weights)
    ref = model.ReferenceModel(config, weights, max_batch=2, max_context=32)
    for tokens, positions in [([5, 9], [0, 0]), ([17, 200], [1, 1]), ([33], [2]), ([7, 8], [3, 2])]:
        session.step(tokens, positions)
        assert _rel(session.last_logits(), ref.step(tokens, positions)) < 2e-3


def test_layered_kernel_needs_the_static_schedule(tmp_path):
    from event_tensor.compiler import EventTensorCompileError

    with pytest.raises(EventTensorCompileError, match="like a layer loop, needs et-static-schedule"):
        model.compile_model(model.tiny_config("llama"), target="cpu", max_batch=1, max_context=16, workers=2,
                            layered=True, mode="dynamic", cache_dir=tmp_path)


def test_session_names_missing_or_misshaped_weights(compiled):
    config, weights, path = compiled
    from event_tensor.model.weights import pack

    packed = pack(config, weights)
    del packed["wd"]
    with pytest.raises(ValueError, match="no weights for kernel arguments: wd"):
        model.DecodeSession(path, packed)
    packed = pack(config, weights)
    packed["ln2"] = packed["ln2"][:, :8]
    with pytest.raises(ValueError, match=r"weight 'ln2' has shape \[2, 8\], the artifact expects \[2, 64\]"):
        model.DecodeSession(path, packed)
    # Checkpoint names: the missing tensor named, the embedding's too.
    for name in ("model.embed_tokens.weight", "model.layers.1.mlp.down_proj.weight"):
        with pytest.raises(ValueError, match=f"no tensor '{re.escape(name)}' among the"):
            model.DecodeSession(path, {k: v for k, v in weights.items() if k != name})


def test_cuda_model_stages_kv_when_a_split_fits(tmp_path):
    """On CUDA, kernels for one sequence stage the KV history in shared
    memory, and copy the `o` tiles' first weight rows there before their
    wait: the buffer is the larger of one split's K and V rows and the
    weight prefetch's default; kernels for larger batches do neither (no
    dynamic shared memory, no copies), and splits above the lowering's
    maximum are not staged. Kernels for more than 4 rows use unroll 4.
    One-row kernels also stage the `mlp` and `down` tiles' first weight
    rows across tiles (bulk copies; with a hidden size up to 1024 the `qkv`
    tiles' too), as much as the dynamic shared memory leaves after the tile
    buffers, or none; tensor-parallel ones do not."""
    from event_tensor.model import compile as model_compile

    cfg = model.tiny_config("llama", head_dim=64, num_heads=4, num_kv_heads=2, hidden_size=256,
                            max_position_embeddings=4096)
    small = model.compile_model(cfg, target="cuda", max_batch=1, max_context=512, workers=8,
                                out_dir=tmp_path / "small", cache_dir=tmp_path / "cache")
    meta = json.loads((small / "metadata.json").read_text())
    split_len = json.loads((small / "model.json").read_text())["layout"]["split_len"]
    assert meta["options"]["tile_kv_prefetch"] == "shared"
    assert meta["options"]["tile_prefetch"] == "shared" and meta["options"]["tile_prefetch_tasks"] == ["o"]
    assert meta["dynamic_shared_bytes"] == max(PREFETCH_BYTES, 4 * 64 * split_len)
    ptx = (small / "kernel.ptx").read_text()
    assert "cp.async.cg.shared.global" in ptx
    assert meta["options"]["tile_stage_bytes"] == model_compile.MODEL_STAGE_BYTES
    # A hidden size up to 1024 stages the `qkv` tiles too.
    assert meta["options"]["tile_stage_tasks"] == ["qkv", "qkv_first", "mlp", "down"]
    assert "cp.async.bulk.shared" in ptx
    assert model_compile.model_stage_tasks(cfg, 4) == ("mlp", "down")
    assert model_compile.model_stage_tasks(model.preset("llama-3.2-1b"), 1) == ("mlp", "down")
    assert model_compile.model_stage_tasks(model.preset("qwen3-0.6b"), 1) == ("qkv", "qkv_first", "mlp", "down")
    large = model.compile_model(cfg, target="cuda", max_batch=1, max_context=4096, workers=8, split_len=768,
                                out_dir=tmp_path / "large", cache_dir=tmp_path / "cache")
    meta = json.loads((large / "metadata.json").read_text())
    assert meta["options"]["tile_kv_prefetch"] == "shared" and meta["dynamic_shared_bytes"] == 4 * 64 * 768
    # 192 KiB of KV rows leave no room for two staging regions of 16 KiB:
    # the tile lowering's plan stages nothing (the options keep the request).
    assert meta["options"]["tile_stage_bytes"] == model_compile.MODEL_STAGE_BYTES
    assert "cp.async.bulk.shared" not in (large / "kernel.ptx").read_text()
    batched = model.compile_model(cfg, target="cuda", max_batch=4, max_context=512, workers=8,
                                  out_dir=tmp_path / "batched", cache_dir=tmp_path / "cache")
    meta = json.loads((batched / "metadata.json").read_text())
    assert meta["dynamic_shared_bytes"] == 0 and meta["options"]["tile_unroll"] == 8
    assert "tile_stage_bytes" not in meta["options"]
    # Tensor-parallel kernels (not measured on several GPUs) stage nothing unless asked.
    tp2 = model.compile_model(cfg, target="cuda", max_batch=1, max_context=512, workers=8, tp=2,
                              out_dir=tmp_path / "tp2", cache_dir=tmp_path / "cache")
    assert "tile_stage_bytes" not in json.loads((tp2 / "metadata.json").read_text())["options"]
    wide = model.compile_model(cfg, target="cuda", max_batch=8, max_context=512, workers=8,
                               out_dir=tmp_path / "wide", cache_dir=tmp_path / "cache")
    assert json.loads((wide / "metadata.json").read_text())["options"]["tile_unroll"] == 4
    big = model.compile_model(cfg, target="cuda", max_batch=1, max_context=4096, workers=8, split_len=1024,
                              out_dir=tmp_path / "big", cache_dir=tmp_path / "cache")
    meta = json.loads((big / "metadata.json").read_text())
    assert meta["options"].get("tile_kv_prefetch", "none") == "none"
    assert meta["dynamic_shared_bytes"] == PREFETCH_BYTES  # the weight prefetch's only
    plain = model.compile_model(cfg, target="cuda", max_batch=1, max_context=4096, workers=8, split_len=1024,
                                tile_prefetch="none", tile_stage_bytes=0, out_dir=tmp_path / "plain",
                                cache_dir=tmp_path / "cache")
    meta = json.loads((plain / "metadata.json").read_text())
    assert meta["options"].get("tile_kv_prefetch", "none") == "none" and meta["dynamic_shared_bytes"] == 0
    assert "cp.async" not in (plain / "kernel.ptx").read_text()


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_prefill_kernel_matches_the_decode_prefill(family, tmp_path):
    """compile_model(prefill_rows=24): prompts go through the prefill kernel
    (et.matmul, et.attention_prefill) in chunks of 24 tokens (two row blocks of
    16, the second partial, then dead in the 16-token chunk), later chunks
    attending to earlier ones through the cache. With the gated MLP in one
    GEMM tile (the default; its SiLU reads the f32 accumulators, as the
    decode kernel's does): same KV caches, same last logits and same greedy
    tokens as feeding the prompts through the decode kernel. With separate
    gate and up tasks: the same in f32, within bf16 rounding in bf16."""
    from event_tensor import model

    c = model.tiny_config(family)
    w = model.random_weights(c, seed=3)
    plain = model.DecodeSession(model.compile_model(c, target="cpu", max_batch=2, max_context=64,
                                                    cache_dir=tmp_path), w)
    fast = model.DecodeSession(model.compile_model(c, target="cpu", max_batch=2, max_context=64, prefill_rows=24,
                                                   cache_dir=tmp_path, out_dir=tmp_path / "out"), w)
    assert fast.prefill_launcher is not None and plain.prefill_launcher is None
    rng = np.random.default_rng(1)
    prompt = rng.integers(0, c.vocab_size, 40).tolist()
    assert plain.prefill([prompt]).tolist() == fast.prefill([prompt]).tolist()
    np.testing.assert_allclose(fast.last_logits()[0], plain.last_logits()[-1], rtol=1e-4, atol=1e-4)
    for name in ("k_cache", "v_cache"):
        ref = np.asarray(plain.buffers[name], np.float32)[0, :40]
        got = np.asarray(fast.buffers[name], np.float32)[0, :40]
        assert np.abs(ref).max() > 0
        np.testing.assert_allclose(got, ref, rtol=1e-2, atol=1e-2)
    # Both record the prompt in the slot's token history (the penalties'
    # input), and penalized generations agree.
    for session in (plain, fast):
        assert np.asarray(session.buffers["history"])[0, :40].tolist() == prompt
    prompts = [prompt, rng.integers(0, c.vocab_size, 40).tolist()]
    assert plain.generate(prompts, 4).tokens == fast.generate(prompts, 4).tokens
    assert plain.generate(prompts, 6, repetition_penalty=1.5, frequency_penalty=0.5).tokens == \
        fast.generate(prompts, 6, repetition_penalty=1.5, frequency_penalty=0.5).tokens
    with pytest.raises(ValueError, match="exceeds the compiled context 64"):
        fast.prefill([[1] * 65])
    plain.prefill([prompt])
    ref = plain.last_logits()[-1]
    for gate_up, (lo, hi) in (("f32", (0, 1e-5)), ("bf16", (1e-6, 2e-2))):
        split = model.DecodeSession(model.compile_model(
            c, target="cpu", max_batch=2, max_context=64, prefill_rows=24, prefill_tiles={"gate_up": gate_up},
            cache_dir=tmp_path, out_dir=tmp_path / gate_up), w)
        assert "p_g" in split.buffers and "p_g" not in fast.buffers
        split.prefill([prompt])
        err = np.linalg.norm(split.last_logits()[0] - ref) / np.linalg.norm(ref)
        assert lo <= err < hi, (gate_up, err)
    # o and down with K split in two (the second half through p_part and the
    # next norm's residual form), and the last layer on every row: the same
    # caches and logits up to f32 summation order (h + lower + upper half
    # rounds differently from h + the whole sum, and bf16 activations
    # carry it on: 3.8e-4 in Qwen3's logits with o split).
    for i, opts in enumerate(({"split_k": 2}, {"split_k": {"down": 2}, "last_layer": "full"},
                              {"last_layer": "full"})):
        other = model.DecodeSession(model.compile_model(
            c, target="cpu", max_batch=2, max_context=64, prefill_rows=24, prefill_tiles=opts,
            cache_dir=tmp_path, out_dir=tmp_path / f"opts{i}"), w)
        assert ("p_part" in other.buffers) == (opts.get("split_k", 1) != 1), opts
        assert other.prefill([prompt]).tolist() == plain.prefill([prompt]).tolist()
        err = np.linalg.norm(other.last_logits()[0] - ref) / np.linalg.norm(ref)
        assert err < 2e-3, (opts, err)
        for name in ("k_cache", "v_cache"):
            np.testing.assert_allclose(np.asarray(other.buffers[name], np.float32)[0, :40],
                                       np.asarray(plain.buffers[name], np.float32)[0, :40], rtol=1e-2, atol=1e-2)


def test_kernel_variants_share_one_prefill_kernel(tmp_path):
    """Kernel variants with prefill_rows: one prefill kernel for the caches'
    storage layout beside them; prompts through it give the decode-kernel
    prefill's token, caches and generation, in any slot."""
    import json

    c = model.tiny_config("llama")
    w = model.random_weights(c, seed=3)
    out = model.compile_model(c, target="cpu", max_batch=2, max_context=64, specialize={"batches": [1]},
                              prefill_rows=24, out_dir=tmp_path / "art", cache_dir=tmp_path / "cache")
    info = json.loads((out / "model.json").read_text())
    assert len(info["variants"]) == 2 and info["prefill"]["rows"] == 24 and (out / "prefill").is_dir()
    fast = model.DecodeSession(out, w)
    plain = model.DecodeSession(model.compile_model(c, target="cpu", max_batch=2, max_context=64,
                                                    cache_dir=tmp_path / "cache"), w)
    prompt = np.random.default_rng(2).integers(0, c.vocab_size, 40).tolist()
    assert fast.prefill([prompt], slots=[1]).tolist() == plain.prefill([prompt], slots=[1]).tolist()
    for name in ("k_cache", "v_cache"):
        np.testing.assert_allclose(np.asarray(fast.buffers[name], np.float32)[1, :40],
                                   np.asarray(plain.buffers[name], np.float32)[1, :40], rtol=1e-2, atol=1e-2)
    prompts = [prompt, prompt[:7]]
    assert fast.generate(prompts, 4).tokens == plain.generate(prompts, 4).tokens


def test_tensor_core_kernels_take_up_to_64_rows(tmp_path):
    """Above 16 rows the decode kernel needs tensor-core tiles, whose row
    block covers the batch (32 rows for max_batch 24): 20 rows match the
    reference; row tiles and more than 64 rows are refused."""
    config = model.tiny_config("qwen3")
    weights = model.random_weights(config, seed=9)
    path = model.compile_model(config, target="cpu", max_batch=24, max_context=32, workers=3, split_len=8,
                               linear_tile="mma", cache_dir=tmp_path)
    session = model.DecodeSession(path, weights)
    ref = model.ReferenceModel(config, weights, max_batch=24, max_context=32)
    rng = np.random.default_rng(4)
    for pos in range(2):
        tokens = rng.integers(0, config.vocab_size, 20)
        session.step(tokens, [pos] * 20)
        assert _rel(session.last_logits(), ref.step(tokens, [pos] * 20)) < 2e-3
    with pytest.raises(ValueError, match="max_batch 24 needs tensor-core tiles"):
        model.compile_model(config, target="cpu", max_batch=24, max_context=32, cache_dir=tmp_path)
    with pytest.raises(ValueError, match=r"max_batch must be an int in \[1, 64\], got 65"):
        model.compile_model(config, target="cpu", max_batch=65, max_context=32, linear_tile="mma",
                            cache_dir=tmp_path)


def test_merge_tiles_take_a_row_beyond_one_wave():
    """The merge tiles: one per (row, KV head) while those fit one wave of
    the workers, else one per row (every KV head; the reference tests run
    both: `compiled`'s Qwen3 kernel has 2 rows x 2 KV heads for 3
    workers)."""
    from event_tensor.ir import Context
    from event_tensor.model.builder import build_decode_kernel, kernel_layout

    config = model.tiny_config("qwen3")  # 2 KV heads
    for batch, workers, tiles in [(1, 3, 2), (2, 4, 2), (2, 3, 1), (24, 48, 2), (24, 40, 1)]:
        layout = kernel_layout(config, max_batch=batch, max_context=32, workers=workers, split_len=8)
        opts = model.KernelOptions(linear_tile="mma" if batch > 16 else "rows")
        with Context():
            text = str(build_decode_kernel(config, layout, opts.resolve(config, target="cpu", max_batch=batch)))
        task = text[text.index("et.task @merge "):].splitlines()[0]
        extents = re.findall(r"%c(\d+)(?:_\d+)?", task[task.index(" in ("):task.index(")", task.index(" in ("))])
        assert extents == [str(config.num_layers), str(batch), str(tiles)], (batch, task)


def test_qkv_tensor_core_tiles_take_one_block_for_q_k_and_v():
    """The qkv task's q, k and v tiles share the workers, so their BN is
    chosen for the three together (kernel.tiles.mma_tiling): Llama-3.2-1B
    at 16 and 64 rows takes 96 tiles of 32 rows of w, where q, k and v
    chosen one by one took 16 rows each, 192 tiles for 132 workers."""
    from event_tensor.ir import Context
    from event_tensor.model.builder import build_decode_kernel, kernel_layout
    from event_tensor.model.kernel.tiles import mma_block, mma_qkv_block

    llama = model.preset("llama-3.2-1b")
    for bm in (16, 64):
        assert mma_block(2048, 2048, bm, 132) == 16 and mma_block(512, 2048, bm, 132) == 16
        assert mma_qkv_block(llama, bm, 132) == 32
    # Llama-3.1-8B: 96 tiles of 64 rows instead of 128 + 64 + 64.
    assert mma_qkv_block(model.preset("llama-3.1-8b"), 64, 132) == 64
    # The kernel: q (64 rows), k and v (32 rows each) of the tiny model in
    # blocks of one BN, the task's tiles to match.
    config = model.tiny_config("llama")
    layout = kernel_layout(config, max_batch=24, max_context=32, workers=3, split_len=8)
    q, kv = config.num_heads * config.head_dim, config.num_kv_heads * config.head_dim
    bn = mma_qkv_block(config, 32, 3)
    with Context():
        text = str(build_decode_kernel(config, layout, model.KernelOptions(linear_tile="mma").resolve(
            config, target="cpu", max_batch=24)))
    task = text[text.index("et.task @qkv "):]
    task = task[:task.index("et.task", 1)]
    tiles = -(-q // bn) + 2 * -(-kv // bn)
    assert re.match(rf"et.task @qkv tiles\(%\w+, %\w+\) in \(%c2, %c{tiles}\)", task), task[:80]
    matmuls = [line for line in task.splitlines() if "et.matmul" in line]
    assert len(matmuls) == 3 and all(f"tile [32, {bn}, " in line for line in matmuls), matmuls


def test_split_k_tiles_add_their_parts_atomically(tmp_path):
    """split_k: the tensor-core tiles of o and down take a part of K each
    (kernel.tiles.mma_split) and add it into h with `accumulate atomic`;
    the logits match the reference and the unsplit kernel. On by default
    for one cuda device's tensor-core tiles only."""
    from dataclasses import replace

    from event_tensor.ir import Context
    from event_tensor.model.builder import build_decode_kernel, kernel_layout
    from event_tensor.model.kernel.tiles import mma_split

    # Llama-3.2-1B at 64 rows: down (K 8192) and o (K 2048) in quarters of
    # 64-row blocks; a K of fewer than two 128-column slices stays whole.
    assert mma_split(2048, 8192, 64, 132) == (64, 4) and mma_split(2048, 2048, 64, 132) == (64, 4)
    assert mma_split(2048, 192, 64, 132)[1] == 1
    config = replace(model.tiny_config("llama"), intermediate_size=512)
    weights = model.random_weights(config, seed=9)
    layout = kernel_layout(config, max_batch=24, max_context=32, workers=3, split_len=8)
    with Context():
        text = str(build_decode_kernel(config, layout, model.KernelOptions(linear_tile="mma", split_k=True).resolve(
            config, target="cpu", max_batch=24)))
    split = [line for line in text.splitlines() if "accumulate atomic" in line and "et.matmul" in line]
    assert len(split) == 1 and "k(" in split[0] and "tile [32, 64, 128]" in split[0]  # down: K 512 in halves
    sessions = [model.DecodeSession(model.compile_model(
        config, target="cpu", max_batch=24, max_context=32, workers=3, split_len=8, linear_tile="mma",
        split_k=split_k, cache_dir=tmp_path), weights) for split_k in (True, False)]
    ref = model.ReferenceModel(config, weights, max_batch=24, max_context=32)
    rng = np.random.default_rng(4)
    for pos in range(2):
        tokens = rng.integers(0, config.vocab_size, 20)
        for s in sessions:
            s.step(tokens, [pos] * 20)
        logits = [s.last_logits() for s in sessions]
        assert _rel(logits[0], ref.step(tokens, [pos] * 20)) < 2e-3 and _rel(logits[0], logits[1]) < 1e-3
    qwen = model.preset("qwen3-0.6b")
    assert model.KernelOptions(linear_tile="mma").resolve(qwen, target="cuda", max_batch=16).split_k is True
    assert model.KernelOptions(linear_tile="mma").resolve(qwen, target="cpu", max_batch=16).split_k is False
    assert model.KernelOptions(linear_tile="mma", tp=2).resolve(qwen, target="cuda", max_batch=16).split_k is False
    assert model.KernelOptions().resolve(qwen, target="cuda", max_batch=1).split_k is False
    with pytest.raises(ValueError, match="split_k must be a bool or None, got 1"):
        model.KernelOptions(linear_tile="mma", split_k=1)
    for bad in (dict(), dict(linear_tile="mma", tp=2)):
        with pytest.raises(ValueError, match=r"split_k needs linear_tile 'mma' \(or 'auto'\) and tp 1"):
            model.KernelOptions(split_k=True, **bad)
    # With "auto" the tensor-core variants split, the row-tile variant has nothing to split.
    out = model.compile_model(config, target="cpu", max_batch=24, max_context=32, workers=3, linear_tile="auto",
                              split_k=True, out_dir=tmp_path / "auto", cache_dir=tmp_path)
    variants = json.loads((out / "variants.json").read_text())["variants"]
    assert {v["linear_tile"]: json.loads((out / v["dir"] / "model.json").read_text())["split_k"]
            for v in variants} == {"rows": False, "mma": True}


def test_prefill_last_layer_runs_the_last_row_alone(tmp_path):
    """last_layer="row" (the default): the last layer's o, MLP and down
    are one-row tasks over the output rows, its every-row tasks stop a
    layer early, and only the last row's attention block runs there: the
    other rows of the last layer's residual stream are left as the layer
    before wrote them (with "full" they are the last layer's)."""
    from event_tensor import model

    c = model.tiny_config("llama")
    w = model.random_weights(c, seed=3)
    prompt = np.random.default_rng(2).integers(0, c.vocab_size, 20).tolist()
    runs = {}
    for tail in ("row", "full"):
        out = model.compile_model(c, target="cpu", max_batch=1, max_context=32, prefill_rows=24,
                                  prefill_tiles={"last_layer": tail}, cache_dir=tmp_path, out_dir=tmp_path / tail)
        tasks = set(json.loads((out / "prefill" / "metadata.json").read_text())["tasks"])
        assert ({"o_last", "norm2_last", "mlp_last", "down_last"} <= tasks) == (tail == "row"), tasks
        s = model.DecodeSession(out, w)
        token = s.prefill([prompt])[0]
        runs[tail] = (token, np.asarray(s.buffers["p_h"], np.float32)[:20].copy(), s.last_logits()[0])
    assert runs["row"][0] == runs["full"][0]
    np.testing.assert_allclose(runs["row"][2], runs["full"][2], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(runs["row"][1][-1], runs["full"][1][-1], rtol=1e-4, atol=1e-4)
    assert not np.allclose(runs["row"][1][:-1], runs["full"][1][:-1], rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("heads,kv_heads", [(6, 2), (10, 2)])
def test_prefill_kernel_with_odd_query_groups(heads, kv_heads, tmp_path):
    """Query groups of 3 and 5 heads: the prefill kernel's attention tiles
    hold fewer tokens than their rows would (whole groups only), on the CPU
    the same tokens and logits as the decode kernel's prefill; the CUDA
    build compiles."""
    c = model.tiny_config("llama", num_heads=heads, num_kv_heads=kv_heads, head_dim=32,
                          hidden_size=heads * 32)
    w = model.random_weights(c, seed=5)
    plain = model.DecodeSession(model.compile_model(c, target="cpu", max_batch=1, max_context=64,
                                                    cache_dir=tmp_path), w)
    fast = model.DecodeSession(model.compile_model(c, target="cpu", max_batch=1, max_context=64, prefill_rows=24,
                                                   cache_dir=tmp_path, out_dir=tmp_path / "cpu"), w)
    prompt = np.random.default_rng(2).integers(0, c.vocab_size, 40).tolist()
    assert plain.prefill([prompt]).tolist() == fast.prefill([prompt]).tolist()
    # Within bf16 rounding (the GEMM tiles sum K in another order than the
    # decode kernel's rows: 1.6e-3 here, about as much as a group of one
    # head at this hidden size; a wrong attention row is off by far more).
    ref = plain.last_logits()[-1]
    assert np.abs(fast.last_logits()[0] - ref).max() / np.abs(ref).max() < 5e-3
    for name in ("k_cache", "v_cache"):
        np.testing.assert_allclose(np.asarray(fast.buffers[name], np.float32)[0, :40],
                                   np.asarray(plain.buffers[name], np.float32)[0, :40], rtol=1e-2, atol=1e-2)
    gpu = model.tiny_config("llama", num_heads=heads, num_kv_heads=kv_heads, head_dim=64, hidden_size=heads * 64)
    out = model.compile_model(gpu, target="cuda", max_batch=1, max_context=256, workers=8, prefill_rows=128,
                              out_dir=tmp_path / "cuda", cache_dir=tmp_path / "cache")
    tiles = json.loads((out / "model.json").read_text())["prefill"]["tiles"]
    assert tiles["attn_block"] == {3: 32, 5: 16}[heads // kv_heads]


def test_compile_model_validates_a_config_built_in_python(tmp_path):
    # A ModelConfig made in Python skips from_hf's checks: compile_model
    # makes them (a head_dim of 16 was an MLIR op dump from the verifier).
    from event_tensor.model import ConfigError

    c = model.tiny_config("llama", num_heads=6, num_kv_heads=2, head_dim=16, hidden_size=96)
    with pytest.raises(ConfigError, match=r"compile_model: head_dim must be a multiple of 32 .*got 16"):
        model.compile_model(c, target="cpu", max_batch=1, max_context=64, cache_dir=tmp_path)


def test_prefill_tiles_choices_and_bad_values():
    """PrefillTiles: the cuda defaults (gated 128 x 256 tiles while they fill
    the workers, q/k/v in one wave of 128 x 256, the models' choice for the
    rest) and a ValueError naming each bad value."""
    from event_tensor.model import preset
    from event_tensor.model.prefill import PrefillTiles

    c = preset("llama-3.2-1b")
    t = PrefillTiles(c, max_rows=1024)
    assert (t.row_block, t.row_tile, t.attn_block, t.threads) == (128, 8, 32, 256)
    assert t.gemm["gate_up"] == (256, 64, 4) and t.sources["gate_up"] == "gated rule"
    assert t.gemm["q"] == (256, 64, 4) and t.sources["k"] == "one-wave rule"
    assert "gate" not in t.gemm
    # o and down: K in two halves of 128 x 256 tiles (8 x 8 x 2 = 128 of
    # 132 workers); Qwen3-0.6B's N = 1024 fills the workers with 128 x 128.
    assert t.split_k == {"o": 2, "down": 2} and t.gemm["down"] == (256, 64, 4) and t.sources["o"] == "split rule"
    q3 = PrefillTiles(preset("qwen3-0.6b"), max_rows=1024)
    assert q3.split_k == {"o": 2, "down": 2} and q3.gemm["o"] == (128, 64, 4)
    # Gated tiles by waves: Qwen3-0.6B's 2 x 3072 rows in 256 tiles of 192
    # (two waves) rather than 192 tiles of 256 (1.5 waves).
    assert q3.gemm["gate_up"] == (192, 64, 4) and q3.sources["gate_up"] == "gated rule"
    # 128 rows: 16 split tiles are too few, so the models choose unsplit tiles.
    short = PrefillTiles(c, max_rows=128)
    assert short.split_k == {"o": 1, "down": 1} and short.sources["down"].startswith("models")
    given = PrefillTiles(c, max_rows=1024, split_k={"down": 1}, gemm={"o": (128, 64, 6)})
    assert given.split_k == {"o": 1, "down": 1} and given.sources["o"] == "given"
    assert PrefillTiles(c, max_rows=1024, split_k=2, gemm={"o": (128, 64, 6)}).split_k["o"] == 2
    assert t.last_layer == "row" and t.to_dict()["split_k"] == {"o": 2, "down": 2}
    # 128 rows: 64 gated tiles do not fill 132 workers, so the models choose.
    assert PrefillTiles(c, max_rows=128).sources["gate_up"].startswith("models")
    split = PrefillTiles(c, max_rows=1024, gate_up="bf16", gemm={"down": (128, 64, 6)})
    assert "gate_up" not in split.gemm and split.gemm["down"] == (128, 64, 6) and split.sources["down"] == "given"
    cpu = PrefillTiles(c, max_rows=64, target="cpu")
    assert cpu.row_block == 16 and cpu.gemm["gate_up"] == (32, 16, 1)
    # Query groups of 3 and 5 heads (Llama-3.2-3B, Qwen3-14B) do not divide
    # an attention tile's 128 rows: the most tokens whose groups fill whole
    # warps (96 and 80 rows; the prefill kernel of the default build was a
    # ValueError for them).
    assert PrefillTiles(preset("llama-3.2-3b"), max_rows=512).attn_block == 32
    assert PrefillTiles(preset("qwen3-14b"), max_rows=512).attn_block == 16
    assert PrefillTiles(preset("qwen3-14b"), max_rows=64, target="cpu").attn_block == 8
    # Rows in flight in the row-wise ops and the LM head's unroll: 4 and 8
    # on cuda (one row at a time on the CPU), recorded in model.json.
    assert (t.rows_in_flight, t.lm_unroll, cpu.rows_in_flight) == (4, 8, 1)
    assert t.to_dict()["rows_in_flight"] == 4 and t.to_dict()["lm_unroll"] == 8
    for kwargs, match in (({"max_rows": 0}, "max_rows"), ({"max_rows": 64, "row_tile": 3}, "row_tile"),
                          ({"max_rows": 64, "row_block": 40}, "row_block"), ({"max_rows": 64, "act_cols": 0}, "act_cols"),
                          ({"max_rows": 64, "gate_up": "f16"}, "gate_up"), ({"max_rows": 64, "attn_block": 48}, "attn_block"),
                          ({"max_rows": 64, "gemm": {"gate_up": (48, 64, 4)}}, "gated tile's BN"),
                          ({"max_rows": 64, "rows_in_flight": 3}, "rows_in_flight must be 1, 2, 4, 8 or 16, got 3"),
                          ({"max_rows": 64, "rows_in_flight": True}, "rows_in_flight"),
                          ({"max_rows": 64, "lm_unroll": 0}, "lm_unroll must be a positive int, got 0"),
                          ({"max_rows": 64, "split_k": 4}, "split_k of o must be 1 or 2, got 4"),
                          ({"max_rows": 64, "split_k": {"down": True}}, "split_k of down"),
                          ({"max_rows": 64, "split_k": {"q": 2}}, r"split_k applies to o, down, got \['q'\]"),
                          ({"max_rows": 64, "last_layer": "rows"}, "last_layer must be 'row' or 'full'")):
        with pytest.raises(ValueError, match=match):
            PrefillTiles(c, **kwargs)


def test_prefill_arguments_bad_values(tmp_path):
    """DecodeSession.prefill_arguments names the bad chunk, slot or position,
    and a session without a prefill kernel says so."""
    from event_tensor import model

    c = model.tiny_config("llama")
    w = model.random_weights(c, seed=1)
    s = model.DecodeSession(model.compile_model(c, target="cpu", max_batch=2, max_context=32, prefill_rows=16,
                                                cache_dir=tmp_path, out_dir=tmp_path / "a"), w)
    args = s.prefill_arguments(1, 4, [1, 2, 3])
    assert args[:3] == [3, 1, 4]
    with pytest.raises(ValueError, match="1 to 16 tokens, got 17"):
        s.prefill_arguments(0, 0, [1] * 17)
    with pytest.raises(ValueError, match="1 to 16 tokens, got 0"):
        s.prefill_arguments(0, 0, [])
    with pytest.raises(ValueError, match="slot 2 is not a cache slot"):
        s.prefill_arguments(2, 0, [1])
    with pytest.raises(ValueError, match="positions 30..32 exceed the compiled context 32"):
        s.prefill_arguments(0, 30, [1, 2, 3])
    with pytest.raises(ValueError, match=f"token id {c.vocab_size} is outside the vocabulary"):
        s.prefill_arguments(0, 0, [1, c.vocab_size])
    plain = model.DecodeSession(model.compile_model(c, target="cpu", max_batch=2, max_context=32, cache_dir=tmp_path), w)
    with pytest.raises(ValueError, match="has no prefill kernel"):
        plain.prefill_arguments(0, 0, [1])


def test_specialized_kernels_share_the_caches(tmp_path):
    """specialize: one kernel per (batch range, context bucket), each for its
    own shape; the session picks one per launch from the batch and the
    longest context, and a sequence moves between kernels on one cache."""
    import json

    config = model.tiny_config("llama")
    out = model.compile_model(config, target="cpu", max_batch=4, max_context=32, workers=3, split_len=8,
                              specialize={"batches": [1, 2], "contexts": [16]}, out_dir=tmp_path / "art",
                              cache_dir=tmp_path / "cache")
    info = json.loads((out / "model.json").read_text())
    assert [(v["min_batch"], v["max_batch"], v["max_context"]) for v in info["variants"]] == \
        [(1, 1, 16), (1, 1, 32), (2, 2, 16), (2, 2, 32), (3, 4, 16), (3, 4, 32)]
    assert (info["layout"]["max_batch"], info["layout"]["max_context"]) == (4, 32)
    for v in info["variants"]:
        layout = json.loads((out / v["dir"] / "model.json").read_text())["layout"]
        assert (layout["max_batch"], layout["max_context"]) == (v["max_batch"], v["max_context"])
        assert (layout["cache_batch"], layout["cache_context"]) == (4, 32)
    weights = model.random_weights(config, seed=3)
    session = model.DecodeSession(out, weights)
    assert session.variant_for(1, 16).endswith("batch1-1-context16-rows")
    assert session.variant_for(1, 17).endswith("batch1-1-context32-rows")
    assert session.variant_for(3).endswith("batch3-4-context32-rows")
    # Weights and caches are one buffer for all kernels; scratch is per kernel.
    per_variant = session.variant_buffers[0]
    assert all(b["k_cache"] is per_variant[0]["k_cache"] and b["wq"] is per_variant[0]["wq"] for b in per_variant)
    assert per_variant[0]["xs"] is not per_variant[-1]["xs"]
    ref = model.ReferenceModel(config, weights, max_batch=4, max_context=32)
    # Sequence 0 alone, then with others, past the context bucket of 16, in
    # slots the batch-1 kernel does not use by itself.
    steps = [([3], [0], [2]), ([4, 5], [1, 0], [2, 0])] + \
        [([6 + t, 9], [2 + t, 1 + t], [2, 0]) for t in range(15)] + [([7, 8, 1], [17, 16, 0], [2, 0, 3]), ([2], [18], [2])]
    used = set()
    for tokens, positions, slots in steps:
        session.step(tokens, positions, slots)
        used.add(session._variant)
        want = ref.step(tokens, positions, slots)
        assert np.abs(session.last_logits() - want).max() / np.abs(want).max() < 2e-3
    assert used == {0, 1, 2, 3, 5}
    with pytest.raises(ValueError, match="context 40 exceeds"):
        session._choose(1, 40)
    session.close()


def test_specialize_keeps_the_context_buckets_that_change_the_tiles(tmp_path):
    """specialize=True compiles a context bucket only where its kernel's live
    attention tiles differ from the next larger kept bucket's: a one-row
    kernel keeps the buckets whose split length differs (512: splits of 128;
    1024: 256) and drops 256 (splits of 128, as 512's); the two-row kernel
    for 1024 positions chooses its split per launch and serves every
    context. The kept kernels compute the step at contexts below their own."""
    import json

    from event_tensor.model.compile import context_buckets

    config = model.tiny_config("llama", max_position_embeddings=1024, num_kv_heads=1, num_heads=4)
    assert context_buckets(config, 1, 1, [256, 512, 1024], workers=4) == [512, 1024]
    assert context_buckets(config, 2, 2, [256, 512, 1024], workers=4) == [1024]
    # One split per row at every bucket: the largest serves them all.
    wide = model.tiny_config("llama", max_position_embeddings=1024, num_kv_heads=2, num_heads=4)
    assert context_buckets(wide, 1, 1, [256, 512, 1024], workers=2) == [1024]
    out = model.compile_model(config, target="cpu", max_batch=2, max_context=1024, workers=4, specialize=True,
                              out_dir=tmp_path / "art", cache_dir=tmp_path / "cache")
    info = json.loads((out / "model.json").read_text())
    assert [(v["min_batch"], v["max_batch"], v["max_context"]) for v in info["variants"]] == \
        [(1, 1, 512), (1, 1, 1024), (2, 2, 1024)]
    weights = model.random_weights(config, seed=5)
    session = model.DecodeSession(out, weights)
    ref = model.ReferenceModel(config, weights, max_batch=2, max_context=1024)
    used = set()
    for tokens, positions, slots in (([3], [0], [0]), ([4, 5], [1, 0], [0, 1]), ([6], [2], [0])):
        session.step(tokens, positions, slots)
        used.add(session.variant_for(len(tokens), max(positions) + 1).rsplit("/", 1)[-1])
        want = ref.step(tokens, positions, slots)
        assert np.abs(session.last_logits() - want).max() / np.abs(want).max() < 2e-3
    assert used == {"batch1-1-context512-rows", "batch2-2-context1024-rows"}
    session.close()


def test_kernel_variant_errors_reach_the_caller(tmp_path):
    """The variants compile in two processes; an error in one of them is
    raised in the caller as itself."""
    config = model.tiny_config("llama")
    with pytest.raises(ValueError, match="opt_level must be 0, 1, 2 or 3, got 7"):
        model.compile_model(config, target="cpu", max_batch=2, max_context=16, workers=2,
                            specialize={"batches": [1]}, jobs=2, opt_level=7, out_dir=tmp_path / "art",
                            cache_dir=tmp_path / "cache")


def test_specialize_errors(tmp_path):
    from event_tensor.model.compile import shape_buckets

    assert shape_buckets(16, 8192, True) == ([1, 2, 4, 8, 16], [256, 512, 1024, 2048, 4096, 8192])
    assert shape_buckets(3, 200, True) == ([1, 2, 3], [200])
    assert shape_buckets(64, 256, True) == ([1, 2, 4, 8, 16, 32, 64], [256])
    assert shape_buckets(4, 64, {"contexts": [16]}) == ([4], [16, 64])
    config = model.tiny_config("llama")
    for bad in ({"batches": [2, 1]}, {"batches": [0]}, {"contexts": [64]}, {"sizes": [1]}, "yes"):
        with pytest.raises(ValueError, match="specialize"):
            shape_buckets(4, 32, bad)
    with pytest.raises(ValueError, match="need an out_dir"):
        model.compile_model(config, target="cpu", max_batch=2, max_context=16, specialize=True,
                            cache_dir=tmp_path)
    with pytest.raises(ValueError, match="cache_batch must be an int of at least 2"):
        model.compile_model(config, target="cpu", max_batch=2, max_context=16, cache_batch=1, cache_dir=tmp_path)
    with pytest.raises(ValueError, match="cache_batch / cache_context are set by the kernel variants"):
        model.compile_model(config, target="cpu", max_batch=2, max_context=16, specialize=True, cache_batch=4,
                            out_dir=tmp_path / "x", cache_dir=tmp_path)


def test_specialized_cuda_kernels_take_their_own_defaults(tmp_path):
    """Each kernel variant takes the defaults of its own max_batch (they
    were once taken from the artifact's max_batch for all of them): weight
    loads in flight (tile_unroll), the KV staging and the spread linear
    tiles of max_batch 1."""
    from event_tensor.model.compile import MODEL_KV_PREFETCH, MODEL_TILE_LINEAR, MODEL_TILE_UNROLL

    config = model.tiny_config("llama", head_dim=64, num_heads=4, num_kv_heads=2, hidden_size=256,
                               intermediate_size=512)
    out = model.compile_model(config, target="cuda", max_batch=8, max_context=64, workers=8, threads_per_worker=128,
                              specialize={"batches": [1]}, out_dir=tmp_path / "art", cache_dir=tmp_path / "cache")
    info = json.loads((out / "model.json").read_text())
    options = {v["max_batch"]: json.loads((out / v["dir"] / "metadata.json").read_text())["options"]
               for v in info["variants"]}
    assert options[1]["tile_unroll"] == MODEL_TILE_UNROLL and options[8]["tile_unroll"] == 4
    assert options[1].get("tile_kv_prefetch") == MODEL_KV_PREFETCH and "tile_kv_prefetch" not in options[8]
    assert options[1]["tile_linear"] == MODEL_TILE_LINEAR and options[8]["tile_linear"] == "rows"


def test_wide_models_keep_the_plain_one_row_tiles(tmp_path):
    """One-row cuda kernels of models of hidden size >= WIDE_HIDDEN take
    row tiles, no o_per_head and no weight staging (measured faster there);
    narrower ones keep the spread tiles, o_per_head and staging; kernels of
    more rows are unchanged."""
    from event_tensor.model.compile import MODEL_STAGE_BYTES, MODEL_TILE_LINEAR, MODEL_WEIGHT_PREFETCH_BELOW_HIDDEN
    from event_tensor.model.options import WIDE_HIDDEN

    def build(hidden, max_batch):
        config = model.tiny_config("llama", hidden_size=hidden, intermediate_size=512, num_heads=4, num_kv_heads=2,
                                   head_dim=64, num_layers=1)
        out = model.compile_model(config, target="cuda", max_batch=max_batch, max_context=64, workers=8,
                                  out_dir=tmp_path / f"h{hidden}-b{max_batch}", cache_dir=tmp_path / "cache")
        options = json.loads((out / "metadata.json").read_text())["options"]
        info = json.loads((out / "model.json").read_text())
        return (options.get("tile_linear", "rows"), options.get("tile_stage_bytes", 0), info["o_per_head"],
                options.get("tile_prefetch", "none"))

    assert build(WIDE_HIDDEN, 1) == ("rows", 0, False, "shared")
    assert build(2048, 1) == (MODEL_TILE_LINEAR, MODEL_STAGE_BYTES, True, "shared")  # Llama-3.2-1B, Qwen3-1.7B
    assert build(WIDE_HIDDEN, 4) == ("rows", 0, True, "none")
    # From hidden size 4096 (the 8B models) one-row kernels prefetch no
    # `o` weights either.
    assert build(MODEL_WEIGHT_PREFETCH_BELOW_HIDDEN, 1) == ("rows", 0, False, "none")


def test_wide_query_groups_take_the_tensor_core_attention(tmp_path):
    """Models of 8 or more query heads per KV head get tile_kv_mma_bytes by
    default on cuda; narrower groups keep the CUDA-core tile, except in
    kernels of 4 rows or more of models with heads up to 64 wide (larger
    rings)."""
    from event_tensor.model.compile import MODEL_KV_MMA_BATCH_BYTES, MODEL_KV_MMA_BYTES

    for heads, dim, rows, want in ((8, 64, 2, MODEL_KV_MMA_BYTES), (4, 64, 2, None), (4, 64, 3, None),
                                   (4, 64, 4, MODEL_KV_MMA_BATCH_BYTES), (4, 64, 16, MODEL_KV_MMA_BATCH_BYTES),
                                   (4, 128, 16, None)):
        config = model.tiny_config("qwen3", num_heads=heads, num_kv_heads=1, head_dim=dim)
        out = model.compile_model(config, target="cuda", max_batch=rows, max_context=64, workers=8,
                                  out_dir=tmp_path / f"g{heads}-{dim}-{rows}", cache_dir=tmp_path / "cache")
        options = json.loads((out / "metadata.json").read_text())["options"]
        assert options.get("tile_kv_mma_bytes") == want, (heads, dim, rows)


def test_cuda_prefill_kernel_options(tmp_path):
    """On CUDA the prefill kernel's row-wise ops take 4 rows in flight and
    its LM head unrolls 8 loads per lane (model.json records both); the
    decode kernel beside it keeps the lowering's defaults (one row at a
    time)."""
    cfg = model.tiny_config("qwen3", head_dim=64, num_heads=4, num_kv_heads=2, hidden_size=256)
    out = model.compile_model(cfg, target="cuda", max_batch=1, max_context=256, workers=8, prefill_rows=128,
                              out_dir=tmp_path / "a", cache_dir=tmp_path / "cache")
    prefill = json.loads((out / "prefill" / "metadata.json").read_text())["options"]
    assert prefill["tile_rows_in_flight"] == 4 and prefill["tile_unroll"] == 8
    tiles = json.loads((out / "model.json").read_text())["prefill"]["tiles"]
    assert (tiles["rows_in_flight"], tiles["lm_unroll"]) == (4, 8)
    assert "tile_rows_in_flight" not in json.loads((out / "metadata.json").read_text())["options"]
    one = model.compile_model(cfg, target="cuda", max_batch=1, max_context=256, workers=8, prefill_rows=128,
                              prefill_tiles={"rows_in_flight": 1}, out_dir=tmp_path / "b", cache_dir=tmp_path / "cache")
    assert "tile_rows_in_flight" not in json.loads((one / "prefill" / "metadata.json").read_text())["options"]


def _compare_with_reference(kernels, ref, steps, tol=3e-3):
    """Steps the sessions `kernels[True]` (the option on) and `kernels[False]`
    and the reference through `steps` ((tokens, positions) pairs): the
    option's logits are within `tol` of both at every step. Closes them."""
    for tokens, positions in steps:
        want = ref.step(tokens, positions)
        for session in kernels.values():
            session.step(tokens, positions)
        got = kernels[True].last_logits()
        assert _rel(got, kernels[False].last_logits()) < tol, positions
        assert _rel(got, want) < tol, positions
    for session in kernels.values():
        session.close()


@pytest.mark.parametrize("family,layered,mode,workers", [("llama", True, "static", 3), ("qwen3", True, "static", 8),
                                                         ("qwen3", False, "dynamic", 8)])
def test_o_per_head_matches_reference(family, layered, mode, workers, tmp_path):
    """o_per_head drops the `merge` task: an `o` tile per (query head, block of
    rows of h) merges its head's splits for every row of the batch at once
    (over the longest row's splits; a shorter row's later attention tiles
    mark theirs empty) and adds its head's part of the projection into h with
    atomic adds (tiles on other host threads add into the same rows). Batch
    2, then rows of different lengths over splits of 8: the logits are the reference's and
    those of the `merge` task's kernel within the bf16 rounding (the f32
    summation order differs, which flips the odd bf16 rounding). Off by
    default."""
    config = model.tiny_config(family)
    weights = model.random_weights(config, seed=11)
    ref = model.ReferenceModel(config, weights, max_batch=2, max_context=32)
    kernels = {}
    for per_head in (True, False):
        path = model.compile_model(config, target="cpu", max_batch=2, max_context=32, workers=workers,
                                   split_len=8, layered=layered, mode=mode, o_per_head=per_head,
                                   cache_dir=tmp_path)
        tasks = json.loads((path / "metadata.json").read_text())["tasks"]
        has_merge = any(t == "merge" or t.startswith("merge_") for t in tasks)
        assert has_merge is not per_head
        assert json.loads((path / "model.json").read_text())["o_per_head"] is per_head
        kernels[per_head] = model.DecodeSession(path, weights)
    steps = [([5, 9], [0, 0]), ([17, 200], [1, 1]), ([33], [2])]
    steps += [([t % 50 + 1, t % 7 + 3], [t, t - 3]) for t in range(3, 21)]
    _compare_with_reference(kernels, ref, steps)


@pytest.mark.parametrize("family,layered", [("llama", True), ("qwen3", True), ("qwen3", False)])
def test_norm_in_linear_matches_reference(family, layered, tmp_path):
    """norm_in_linear: the qkv, mlp and LM head tiles read h through their
    norms (`et.linear ... norm`, no scratch): the reference that rounds h
    times the norm weights and scales by the inverse RMS after, within f32
    summation order, at batch 2 and 1; model.json says so."""
    config = model.tiny_config(family)
    weights = model.random_weights(config, seed=21)
    path = model.compile_model(config, target="cpu", max_batch=2, max_context=32, workers=3, split_len=8,
                               layered=layered, norm_in_linear=True, cache_dir=tmp_path)
    info = json.loads((path / "model.json").read_text())
    assert info["norm_in_linear"] is True and info["norm_scratch"] == "global"
    session = model.DecodeSession(path, weights)
    ref = model.ReferenceModel(config, weights, max_batch=2, max_context=32, norm_in_linear=True)
    for tokens, positions in [([5, 9], [0, 0]), ([17, 200], [1, 1]), ([33], [2]), ([7, 8], [3, 2])]:
        session.step(tokens, positions)
        assert _rel(session.last_logits(), ref.step(tokens, positions)) < 2e-3, positions
    session.close()


def test_norm_in_linear_per_task_and_default(tmp_path):
    """A list names the tasks whose linear op reads h through its norm (the
    others normalize into the scratch); the reference rounds each layer's
    input as its kernel does. By default only one-row cuda kernels of
    hidden sizes up to 1024 take it (all three tasks): their PTX stages h
    times the norm weights in shared memory (a bf16 store), the others'
    does not; the host's kernels never."""
    from event_tensor.model import compile as model_compile

    config = model.tiny_config("qwen3")
    weights = model.random_weights(config, seed=22)
    path = model.compile_model(config, target="cpu", max_batch=1, max_context=32, workers=3, split_len=8,
                               norm_in_linear=["qkv"], cache_dir=tmp_path)
    assert json.loads((path / "model.json").read_text())["norm_in_linear"] == ["qkv"]
    session = model.DecodeSession(path, weights)
    ref = model.ReferenceModel(config, weights, max_batch=1, max_context=32, norm_in_linear=["qkv"])
    for t in range(4):
        session.step([3 + 7 * t], [t])
        assert _rel(session.last_logits(), ref.step([3 + 7 * t], [t])) < 2e-3, t
    session.close()
    host = model.compile_model(config, target="cpu", max_batch=1, max_context=32, cache_dir=tmp_path)
    assert json.loads((host / "model.json").read_text())["norm_in_linear"] is False
    assert config.hidden_size <= model_compile.NORM_IN_LINEAR_MAX_HIDDEN
    kinds = {}
    for name, mb in (("one", 1), ("two", 2)):
        art = model.compile_model(config, target="cuda", max_batch=mb, max_context=32, workers=8,
                                  threads_per_worker=128, out_dir=tmp_path / name, cache_dir=tmp_path)
        info = json.loads((art / "model.json").read_text())
        # x * g goes to shared memory 16 bytes (8 bf16) at a time.
        kinds[name] = (info["norm_in_linear"], "st.shared.v4.b32" in (art / "kernel.ptx").read_text())
    assert kinds["one"] == (True, True) and kinds["two"] == (False, False)
    # The one-row kernel's bulk L2 prefetches are the norm weights of the
    # tiles that read h through their norms: none with norm_in_linear off.
    bulk = lambda art: (art / "kernel.ptx").read_text().count("cp.async.bulk.prefetch.L2")
    off = model.compile_model(config, target="cuda", max_batch=1, max_context=32, workers=8, threads_per_worker=128,
                              norm_in_linear=False, out_dir=tmp_path / "off", cache_dir=tmp_path)
    assert bulk(tmp_path / "one") > 0 and bulk(off) == 0
    wide = model.tiny_config("llama")
    wide = type(wide).from_dict({**wide.to_dict(), "hidden_size": 2048, "intermediate_size": 256})
    art = model.compile_model(wide, target="cuda", max_batch=1, max_context=32, workers=8, threads_per_worker=128,
                              out_dir=tmp_path / "wide", cache_dir=tmp_path)
    assert json.loads((art / "model.json").read_text())["norm_in_linear"] is False


def test_norm_options_are_checked(tmp_path):
    config = model.tiny_config("llama")
    for bad, msg in ((dict(norm_in_linear=True, linear_tile="mma"), "norm_in_linear needs fuse_norms"),
                     (dict(norm_in_linear=True, fuse_norms=False), "norm_in_linear needs fuse_norms"),
                     (dict(norm_in_linear=1), "norm_in_linear must be a bool or a list"),
                     (dict(norm_in_linear=["o"]), "norm_in_linear must be a bool or a list"),
                     (dict(norm_scratch="l1"), "norm_scratch must be 'global' or 'shared', got 'l1'"),
                     (dict(norm_scratch="shared", fuse_norms=False), "norm_scratch='shared' needs fuse_norms")):
        with pytest.raises(ValueError, match=msg):
            model.compile_model(config, target="cpu", max_batch=1, max_context=16, cache_dir=tmp_path, **bad)


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_norm_scratch_in_shared_memory_keeps_the_bits(family, tmp_path):
    """norm_scratch="shared" (the default of max_batch 1 kernels of
    et.linear tiles) normalizes into each tile's own workgroup memory: the
    same logits bit for bit as the global scratch, step after step."""
    config = model.tiny_config(family)
    weights = model.random_weights(config, seed=5)
    sessions = {}
    for where in ("shared", "global"):
        path = model.compile_model(config, target="cpu", max_batch=1, max_context=32, workers=3, split_len=8,
                                   norm_scratch=where, cache_dir=tmp_path)
        assert json.loads((path / "model.json").read_text())["norm_scratch"] == where
        sessions[where] = model.DecodeSession(path, weights)
    default = model.compile_model(config, target="cpu", max_batch=1, max_context=32, workers=3, split_len=8,
                                  cache_dir=tmp_path)
    assert json.loads((default / "model.json").read_text())["norm_scratch"] == "shared"
    batched = model.compile_model(config, target="cpu", max_batch=2, max_context=32, workers=3, split_len=8,
                                  cache_dir=tmp_path)
    assert json.loads((batched / "model.json").read_text())["norm_scratch"] == "global"
    for t in range(6):
        for s in sessions.values():
            s.step([3 + 5 * t], [t])
        assert np.array_equal(sessions["shared"].last_logits(), sessions["global"].last_logits()), t
    for s in sessions.values():
        s.close()


def test_o_per_head_default(tmp_path):
    """By default cuda kernels split `o` over the query heads (no `merge`
    task; the PTX adds into h with f32 atomics), at any max_batch; the host's
    kernels and tensor-core tiles keep the `merge` task, and False turns it
    off."""
    config = model.tiny_config("qwen3", head_dim=64, num_heads=4, num_kv_heads=2, hidden_size=256)

    def build(**kw):
        path = model.compile_model(config, max_context=64, workers=8, cache_dir=tmp_path, **kw)
        tasks = json.loads((path / "metadata.json").read_text())["tasks"]
        return json.loads((path / "model.json").read_text())["o_per_head"], "merge" in tasks, path

    on, merge, path = build(target="cuda", max_batch=1)
    assert on and not merge
    assert re.search(r"(atom|red)\.global(\.\w+)*\.add\.f32", (path / "kernel.ptx").read_text())
    assert build(target="cuda", max_batch=1, o_per_head=False)[:2] == (False, True)
    assert build(target="cuda", max_batch=4)[:2] == (True, False)
    assert build(target="cuda", max_batch=4, linear_tile="mma")[:2] == (False, True)
    assert build(target="cpu", max_batch=1)[:2] == (False, True)


def test_o_per_head_errors(tmp_path):
    config = model.tiny_config("llama")
    with pytest.raises(ValueError, match="o_per_head must be a bool, got 1"):
        model.compile_model(config, target="cpu", max_batch=1, max_context=16, o_per_head=1, cache_dir=tmp_path)
    with pytest.raises(ValueError, match="o_per_head needs tp 1 and linear_tile 'rows'"):
        model.compile_model(config, target="cpu", max_batch=1, max_context=16, o_per_head=True,
                            linear_tile="mma", cache_dir=tmp_path)


def _qk_extents(config, max_batch, **kw):
    """The extents of the layered kernel's qk task: (layers, rows, tiles)."""
    import re

    from event_tensor.ir import Context
    from event_tensor.model.builder import build_decode_kernel, kernel_layout

    layout = kernel_layout(config, max_batch=max_batch, max_context=min(1024, config.max_position_embeddings),
                           workers=132)
    with Context():
        text = str(build_decode_kernel(config, layout, layered=True, **kw))
    line = next(line for line in text.splitlines() if "et.task @qk " in line)
    return tuple(int(n) for n in re.findall(r"%c(\d+)", line.split(" in (")[1].split(")")[0]))


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_qk_tiles_over_several_kv_heads(family, tmp_path):
    """qk_heads=2: each qk tile rotates and appends two KV heads (and their
    query heads), with the bits of one head per tile, at batch 2 (its
    per-row tiles) and batch 1."""
    config = model.tiny_config(family, num_heads=4, num_kv_heads=2)
    weights = model.random_weights(config, seed=10)
    runs = {}
    for heads in (1, 2):
        path = model.compile_model(config, target="cpu", max_batch=2, max_context=32, workers=3, split_len=8,
                                   qk_heads=heads, cache_dir=tmp_path)
        runs[heads] = model.DecodeSession(path, weights)
    ref = model.ReferenceModel(config, weights, max_batch=2, max_context=32)
    for tokens, positions in [([5, 9], [0, 0]), ([17, 200], [1, 1]), ([33], [2]), ([7, 8], [3, 2])]:
        for session in runs.values():
            session.step(tokens, positions)
        assert np.array_equal(runs[1].last_logits(), runs[2].last_logits())
        assert _rel(runs[2].last_logits(), ref.step(tokens, positions)) < 2e-3
    for session in runs.values():
        session.close()
    assert _qk_extents(config, 2, qk_heads=2)[1:] == (2, 1)
    for bad in (3, 0, True, "2"):
        with pytest.raises(ValueError, match=r"qk_heads must be a positive divisor of the 2 KV heads"):
            model.compile_model(config, target="cpu", max_batch=1, max_context=16, qk_heads=bad, cache_dir=tmp_path)


def test_default_qk_tiles_fill_the_workers_qkv_leaves_idle():
    """On 132 workers the qkv task of both presets has 128 tiles: a one-row
    kernel's qk task gets 4 tiles of two KV heads; a kernel of four rows,
    for which no block of heads within QK_TILE_WARPS makes 4 tiles, one
    tile per row and KV head."""
    for name in ("llama-3.2-1b", "qwen3-0.6b"):
        config = model.preset(name)
        assert _qk_extents(config, 1) == (config.num_layers, 1, 4)
        assert _qk_extents(config, 4) == (config.num_layers, 4, 8)
    # The bound follows the worker's warps: Qwen3-0.6B's 384-thread kernel
    # (12 warps) still fits two KV heads (2 x 3 warps) per tile; with 5
    # warps, Llama-3.2-1B's block of two heads (2 x 5 warps) no longer fits.
    assert _qk_extents(model.preset("qwen3-0.6b"), 1, warps=12) == (28, 1, 4)
    assert _qk_extents(model.preset("llama-3.2-1b"), 1, warps=5) == (16, 1, 8)
    with pytest.raises(ValueError, match="warps must be a positive int, got 0"):
        _qk_extents(model.preset("llama-3.2-1b"), 1, warps=0)


def _same_logits(config, seed, tmp_path, builds, workers):
    """Compiles a CPU decode kernel (max_batch 2) per dict of compile_model
    arguments in `builds`, steps them all at batch 2 and 1, and asserts
    their logits equal bit for bit; returns the artifact paths."""
    weights = model.random_weights(config, seed=seed)
    paths = [model.compile_model(config, target="cpu", max_batch=2, max_context=32, workers=workers, split_len=8,
                                 cache_dir=tmp_path, **build) for build in builds]
    runs = [model.DecodeSession(path, weights) for path in paths]
    for tokens, positions in [([5, 9], [0, 0]), ([17, 200], [1, 1]), ([33], [2])]:
        for session in runs:
            session.step(tokens, positions)
        for session in runs[1:]:
            assert np.array_equal(runs[0].last_logits(), session.last_logits())
    for session in runs:
        session.close()
    return paths


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_gated_mlp_keeps_the_bits(family, tmp_path):
    """The default mlp tile (one et.linear ... gated) and gated_mlp=False
    (gate and up into g and u, then et.silu_mul): the same logits, bit for
    bit, at batch 2 and 1."""
    config = model.tiny_config(family)
    paths = _same_logits(config, 12, tmp_path, [{"gated_mlp": True}, {"gated_mlp": False}], workers=3)
    for path, gated in zip(paths, (True, False)):
        assert json.loads((path / "model.json").read_text())["gated_mlp"] is gated
    with pytest.raises(ValueError, match="gated_mlp must be a bool, got 1"):
        model.compile_model(config, target="cpu", max_batch=1, max_context=16, gated_mlp=1, cache_dir=tmp_path)


def _qkv_linears(config, max_batch, workers, **kw):
    """The et.linear ops in the first layer's qkv task of the decode kernel."""
    from event_tensor.ir import Context
    from event_tensor.model.builder import build_decode_kernel, kernel_layout

    layout = kernel_layout(config, max_batch=max_batch, max_context=32, workers=workers)
    with Context():
        text = str(build_decode_kernel(config, layout, **kw))
    body = text.split("et.task @qkv_1 ")[1].split("et.task @")[0]
    return body.count("et.linear ")


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_qkv_by_matrix_keeps_the_bits(family, tmp_path):
    """qkv tiles that take rows of one of q, k and v (one et.linear whose
    weights, output and first row the tile picks) and tiles with q, k and v
    rows together: the same logits, bit for bit, at batch 2 and 1."""
    config = model.tiny_config(family)
    _same_logits(config, 14, tmp_path, [{"qkv_by_matrix": True}, {"qkv_by_matrix": False}], workers=4)
    assert _qkv_linears(config, 2, 4, qkv_by_matrix=True) == 1
    assert _qkv_linears(config, 2, 4, qkv_by_matrix=False) == 3


def test_qkv_by_matrix_default_and_errors(tmp_path):
    """By default a one-row kernel takes qkv tiles by matrix where the rows
    per tile divide q, k and v (Qwen3-0.6B on 132 workers: 32 rows) and a
    kernel of more rows does not; Llama-3.2-1B's 24 rows per tile do not
    divide its 512 k rows, and asking for it names them."""
    qwen, llama = model.preset("qwen3-0.6b"), model.preset("llama-3.2-1b")
    assert _qkv_linears(qwen, 1, 132) == 1
    assert _qkv_linears(qwen, 2, 132) == 3
    assert _qkv_linears(llama, 1, 132) == 3
    with pytest.raises(ValueError, match=r"qkv_by_matrix needs rows per tile \(24\) that divide the 2048 q and "
                                         r"512 k and v rows"):
        _qkv_linears(llama, 1, 132, qkv_by_matrix=True)
    with pytest.raises(ValueError, match="qkv_by_matrix must be a bool or None, got 1"):
        model.compile_model(model.tiny_config(), target="cpu", max_batch=1, max_context=16, qkv_by_matrix=1,
                            cache_dir=tmp_path)


def test_cuda_threads_per_worker_default(tmp_path):
    """Without threads_per_worker, a cuda decode kernel takes model_threads:
    384 for one row of a model with a hidden size up to 1024, else 512; an
    explicit value wins."""
    from event_tensor.model.compile import model_threads

    assert model_threads(model.preset("qwen3-0.6b"), 1) == 384
    assert model_threads(model.preset("qwen3-0.6b"), 4) == 512
    assert model_threads(model.preset("llama-3.2-1b"), 1) == 512
    cfg = model.tiny_config("qwen3")
    threads = {}
    for max_batch, given in ((1, None), (2, None), (1, 256)):
        extra = {"threads_per_worker": given} if given else {}
        path = model.compile_model(cfg, target="cuda", max_batch=max_batch, max_context=32, workers=8,
                                   out_dir=tmp_path / f"b{max_batch}-{given}", cache_dir=tmp_path / "cache", **extra)
        threads[(max_batch, given)] = json.loads((path / "metadata.json").read_text())["threads_per_worker"]
    assert threads == {(1, None): 384, (2, None): 512, (1, 256): 256}


@pytest.mark.parametrize("max_batch,registers", [(16, {"qkv"}), (64, set())])
def test_tensor_core_tiles_of_16_rows_take_registers(max_batch, registers):
    """Decode et.matmul tiles of 16 rows of x and 16 of w take the
    `registers` lowering (Llama-3.2-1B with 16 query and 4 KV heads: q, k
    and v, 1536 rows in all, take 96 tiles of 16 rows at up to 16 rows of
    x; o and down split K in 64-row blocks of w, `split_k`); gate/up and the
    LM head (64 rows of w) keep the ring of slices, and so does every tile
    of a 64-row kernel. The norms are tasks of a tile per row."""
    from dataclasses import replace

    from event_tensor.ir import Context
    from event_tensor.model.builder import build_decode_kernel, kernel_layout

    config = replace(model.preset("llama-3.2-1b"), num_heads=16, num_kv_heads=4)
    layout = kernel_layout(config, max_batch=max_batch, max_context=1024, workers=132)
    with Context():
        options = model.KernelOptions(linear_tile="mma").resolve(config, target="cuda", max_batch=max_batch)
        text = str(build_decode_kernel(config, layout, options))
    tasks, task = {}, None
    for line in text.splitlines():
        if "et.task @" in line:
            task = line.split("et.task @")[1].split()[0]
        if "et.matmul" in line:
            tasks.setdefault(task, set()).add("registers" in line)
    assert {t for t, kinds in tasks.items() if True in kinds} == registers
    assert {"mlp", "lm_head"} <= {t for t, kinds in tasks.items() if False in kinds}
    assert "et.task @norm1 " in text and "et.task @final_norm " in text


def test_edited_model_json_layout_is_refused(tmp_path):
    """A model.json whose layout claims more rows, slots or positions than
    the kernels were compiled for is refused at load (the session checks
    rows and slots against it: a launch would write past the KV caches);
    claiming fewer rows is harmless."""
    import shutil

    config = model.tiny_config("llama")
    weights = model.random_weights(config, seed=1)
    path = model.compile_model(config, target="cpu", max_batch=2, max_context=32, workers=2,
                               cache_dir=tmp_path / "cache", out_dir=tmp_path / "a")
    cases = [({"max_batch": 4, "cache_batch": 4}, r"KV caches of 2 slots x 32 positions, the layout 4 x 32"),
             ({"max_batch": 4}, r"max_batch 4 / max_context 32 above the caches' 2 slots x 32 positions"),
             ({"max_context": 64}, r"max_context 64 above the caches' 2 slots x 32 positions")]
    for i, (edit, match) in enumerate(cases):
        copy = tmp_path / f"edited{i}"
        shutil.copytree(path, copy)
        info = json.loads((copy / "model.json").read_text())
        info["layout"].update(edit)
        (copy / "model.json").write_text(json.dumps(info))
        with pytest.raises(model.ModelArtifactError, match=match):
            model.DecodeSession(copy, weights)
    fewer = tmp_path / "fewer"
    shutil.copytree(path, fewer)
    info = json.loads((fewer / "model.json").read_text())
    info["layout"]["max_batch"] = 1
    (fewer / "model.json").write_text(json.dumps(info))
    assert model.DecodeSession(fewer, weights).max_batch == 1


@pytest.mark.parametrize("o_per_head", [True, False])
def test_attention_work_items_follow_the_launch_rows(o_per_head, tmp_path):
    """The attention tiles of a several-row kernel take the launch's work
    items (split, row < batch, KV head): launches of 1-4 rows of uneven
    lengths (some splits empty) match the reference, with the merge task
    and with the merge inside the `o` tiles (whose empty splits mark their
    lse -inf)."""
    config = model.tiny_config("llama")
    weights = model.random_weights(config, seed=3)
    path = model.compile_model(config, target="cpu", max_batch=4, max_context=64, workers=3, split_len=8,
                               o_per_head=o_per_head, cache_dir=tmp_path)
    session = model.DecodeSession(path, weights)
    ref = model.ReferenceModel(config, weights, max_batch=4, max_context=64)
    rng = np.random.default_rng(0)
    lengths = [0, 0, 0, 0]
    for step in range(12):
        n = [4, 2, 3, 1][step % 4]
        tokens, positions = rng.integers(0, config.vocab_size, n).tolist(), lengths[:n]
        session.step(tokens, positions)
        assert _rel(session.last_logits(), ref.step(tokens, positions)) < 5e-3, f"step {step}, {n} rows"
        lengths = [length + (b < n) for b, length in enumerate(lengths)]


def test_wider_checkpoints_are_rounded_with_a_warning(tmp_path):
    # A float32 or float16 checkpoint: rounded to bf16, and said so.
    c = model.tiny_config("llama")
    weights = model.random_weights(c, seed=3)
    model.save_weights(tmp_path / "bf16.safetensors", weights)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.load_weights(c, [tmp_path / "bf16.safetensors"])
    wide = {n: np.asarray(v, np.float32) for n, v in weights.items()}
    wide["model.norm.weight"] = wide["model.norm.weight"].astype(np.float16)
    model.save_weights(tmp_path / "f32.safetensors", wide)
    with pytest.warns(UserWarning, match=rf"{len(wide)} of {len(wide)} tensors are float16 and float32: they are "
                                         "rounded to bfloat16"):
        got = model.load_weights(c, [tmp_path / "f32.safetensors"])
    session = model.DecodeSession(model.compile_model(c, target="cpu", max_batch=1, max_context=16,
                                                      cache_dir=tmp_path), got)
    session.step([1], [0])


def test_load_weights_reads_a_sharded_checkpoint_through_its_index(tmp_path):
    # model.safetensors.index.json: the shards of its weight_map, each
    # checked to hold what the index places in it.
    c = model.tiny_config("qwen3")
    weights = model.random_weights(c, seed=4)
    names = sorted(weights)
    half = len(names) // 2
    shards = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
    for shard, part in shards.items():
        model.save_weights(tmp_path / shard, {n: weights[n] for n in part})
    index = tmp_path / "model.safetensors.index.json"
    weight_map = {n: shard for shard, part in shards.items() for n in part}
    index.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    got = model.load_weights(c, [index])
    assert sorted(got) == names and all(np.array_equal(got[n], weights[n]) for n in names)
    wrong = dict(weight_map, **{names[0]: "model-00002-of-00002.safetensors"})
    index.write_text(json.dumps({"weight_map": wrong}))
    with pytest.raises(model.WeightError, match=f"places tensor '{names[0]}' in this file, which does not hold it"):
        model.load_weights(c, [index])
    for bad, match in (({"weight_map": {"a": "../x.safetensors"}}, "not a file beside the index"),
                       ({"weight_map": []}, "needs a 'weight_map' object"), ([], "needs a 'weight_map' object")):
        index.write_text(json.dumps(bad))
        with pytest.raises(model.WeightError, match=match):
            model.load_weights(c, [index])
    index.write_text("{")
    with pytest.raises(model.WeightError, match="cannot read the index"):
        model.load_weights(c, [index])


def test_filter_row_ops_are_outlined():
    """The row ops that greedy rows skip sit in regions marked et.outline,
    so that the worker conversion gives them functions of their own
    (docs/lowering.md): the sample_filter task's biases and penalties, the
    argmax_part tiles' candidates and the sample task's log-probabilities,
    threshold and draw; no other task is outlined."""
    from event_tensor.ir import Context
    from event_tensor.model.builder import build_decode_kernel, kernel_layout

    config = model.tiny_config("llama")
    layout = kernel_layout(config, max_batch=2, max_context=32, workers=3, split_len=8)
    with Context():
        text = str(build_decode_kernel(config, layout, model.KernelOptions().resolve(
            config, target="cpu", max_batch=2)))
    tasks = {m.group(1): m.start() for m in re.finditer(r"et.task @(\w+) ", text)}
    starts = sorted(tasks.values()) + [len(text)]
    body = {name: text[at:starts[starts.index(at) + 1]] for name, at in tasks.items()}
    outlined = [name for name, t in body.items() if "et.outline" in t]
    assert outlined == ["sample_filter", "argmax_part", "sample"], outlined
    want = {"sample_filter": ("et.logit_bias", "et.penalize"), "argmax_part": ("et.top_candidates",),
            "sample": ("et.top_logprobs", "et.sample_threshold", "et.argmax")}
    for name, ops in want.items():
        region = body[name]
        region = region[region.index("scf.execute_region"):region.index("et.outline")]
        for op in ops:
            assert op in region, (name, op)
