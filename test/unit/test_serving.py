"""Serving on the CPU target: a tiny Hugging Face model directory (config,
random safetensors, a byte-level BPE tokenizer trained here with the
`tokenizers` library, a chat template), the text codec, the engine's
continuous batching against one request at a time, and the OpenAI-
compatible server driven by the official `openai` client."""

import json
import socket
import threading
import time

import httpx
import numpy as np
import pytest

from event_tensor import model
from event_tensor.model import layout as model_layout
from event_tensor.serving import Engine, SamplingParams, StopStrings, TextCodec, TextError, open_model

CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}</s>{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")
CORPUS = ["the quick brown fox jumps over the lazy dog", "a megakernel runs the whole step",
          "tokens stream out of the kernel as they are made", "héllo wörld, ünïcode text"] * 20


def _write_model_dir(root, vocab=320, config=None):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "</s>", "<|user|>", "<|assistant|>",
                                                                   "<|system|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    tok.save(str(root / "tokenizer.json"))
    (root / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>",
                                                            "chat_template": CHAT_TEMPLATE}))
    (root / "generation_config.json").write_text(json.dumps({"eos_token_id": 1}))
    config = config or model.tiny_config("llama", vocab_size=vocab)
    (root / "config.json").write_text(json.dumps(config.to_hf()))
    model.save_weights(root / "model.safetensors", model.random_weights(config, seed=5))
    return config


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny-model")
    _write_model_dir(root)
    # One worker thread: the engine's thread keeps a core of its own to read
    # the tokens while a launch runs (two-core machines).
    s = open_model(root, device="cpu", max_batch=2, max_context=48, workers=1, chunk=64,
                   cache_dir=root / "cache", name="tiny")
    yield s
    s.close()


def test_text_codec(served):
    codec = served.codec
    ids = codec.encode("the lazy fox")
    assert ids[0] == 0 and codec.decode(ids) == "the lazy fox"
    assert codec.eos_ids == [1]
    text = codec.render_chat([{"role": "user", "content": "hi"}])
    assert text == "<|user|>hi</s><|assistant|>"
    assert codec.chat([{"role": "user", "content": "hi"}]) == codec.encode(text, special=False)
    # Streaming decode: pieces that join to the whole decode, a multi-byte
    # character held back until it is complete.
    words = codec.encode("héllo wörld the fox", special=False)
    stream = codec.stream()
    pieces = [stream.push([t]) for t in words]
    assert "".join(pieces) == codec.decode(words)
    assert all("\ufffd" not in p for p in pieces)
    with pytest.raises(TextError, match="refused"):
        bad = TextCodec(served.codec.path)
        bad.chat_template = "{{ raise_exception('no system role') }}"
        bad.render_chat([{"role": "system", "content": "x"}])


def test_stop_strings_hold_back_a_possible_start():
    s = StopStrings(["STOP", "##"])
    assert s.feed("abc S") == ("abc ", False)
    assert s.feed("TO") == ("", False)
    assert s.feed("x") == ("STOx", False)
    assert s.feed("y#") == ("y", False)
    assert s.feed("#tail") == ("", True)
    assert StopStrings([]).feed("STOP") == ("STOP", False)
    t = StopStrings(["end"])
    assert t.feed("the en") == ("the ", False) and t.flush() == "en"


def test_queue_full_and_closed(served):
    """Past `max_waiting` waiting requests `submit` raises QueueFull; a
    closed engine refuses requests (HTTP 503 both)."""
    from event_tensor.serving import EngineClosed, QueueFull

    engine = Engine(served.session, chunk=4, max_waiting=0)
    try:
        with pytest.raises(QueueFull, match="waiting already"):
            engine.submit([1, 2], SamplingParams(max_tokens=2), lambda *a: None)
    finally:
        engine.close()
    with pytest.raises(EngineClosed, match="closed"):
        engine.submit([1, 2], SamplingParams(max_tokens=2), lambda *a: None)


def test_model_dir_errors(tmp_path):
    with pytest.raises(ValueError, match="not a directory"):
        open_model(tmp_path / "missing")
    _write_model_dir(tmp_path)
    (tmp_path / "tokenizer.json").unlink()
    with pytest.raises(TextError, match="no tokenizer.json"):
        open_model(tmp_path)
    _write_model_dir(tmp_path, vocab=256)  # the tokenizer has 300 tokens
    with pytest.raises(ValueError, match="300 tokens"):
        open_model(tmp_path)


@pytest.mark.parametrize("max_batch, batches", [(1, None), (4, [1, 2, 4]), (64, [1, 2, 4, 8, 16, 32, 64])])
def test_served_kernel_variants(tmp_path, monkeypatch, max_batch, batches):
    """On cuda, open_model compiles a kernel per batch bucket of
    specialize=True, the one-row kernel among them (a lone request decodes
    as in a max_batch 1 artifact), into a directory of the cache; the
    compile is stopped here before it starts (no GPU needed)."""
    import event_tensor.serving.model as served_model

    _write_model_dir(tmp_path)
    seen = {}

    def stop(config, **kwargs):
        seen.update(kwargs)
        raise RuntimeError("compile stopped")

    monkeypatch.setattr(served_model, "compile_model", stop)
    with pytest.raises(RuntimeError, match="compile stopped"):
        open_model(tmp_path, device="cuda", max_batch=max_batch, max_context=64, cache_dir=tmp_path / "cache")
    assert seen["linear_tile"] == "auto" and seen["format"] == "bin"
    assert seen.get("specialize", {}).get("batches") == batches
    assert (seen["out_dir"] is None) == (batches is None)


def _collect(engine, prompt, params):
    """Submits and returns a function that waits for (tokens, finish)."""
    out, done = [], threading.Event()
    state = {}

    def on_output(req, tokens, finish):
        out.extend(tokens)
        if finish is not None:
            state["finish"] = finish
            done.set()
    engine.submit(prompt, params, on_output)

    def wait():
        assert done.wait(120)
        return out, state["finish"]
    return wait


def test_engine_batches_requests_as_if_each_ran_alone(served, monkeypatch):
    """Requests of different lengths join and leave the batch (two slots,
    four requests: some wait, some join mid-generation); greedy tokens
    match each request alone, and `DecodeSession.generate`."""
    engine, session = served.engine, served.session
    rows = []
    launch = session.decode_launch

    def counted(slots, *args, **kwargs):
        rows.append(len(slots))
        return launch(slots, *args, **kwargs)
    monkeypatch.setattr(session, "decode_launch", counted)
    prompts = [[5, 6, 7], [9] * 11, [3], list(range(20, 40))]
    limits = [12, 5, 9, 7]
    params = [SamplingParams(max_tokens=m, ignore_eos=True) for m in limits]
    alone = [_collect(engine, p, q)() for p, q in zip(prompts, params)]
    for (tokens, finish), m in zip(alone, limits):
        assert len(tokens) == m and finish == "length"
    assert max(rows) == 1
    waits = [_collect(engine, p, q) for p, q in zip(prompts, params)]
    together = [w() for w in waits]
    assert together == alone
    assert max(rows) == 2  # rows shared launches
    # The same tokens as the one-call generation.
    for p, m, (tokens, _) in zip(prompts, limits, alone):
        gen_tokens = _run_alone(served, lambda: session.generate([p], m).tokens[0])
        assert gen_tokens == tokens
    assert engine.busy == 0


def test_engine_counts_its_decode_steps(served):
    """DecodeStats: a request of 7 new tokens after a 5-token prompt runs 7
    decode steps of one row (the first feeds the prompt's last token: the
    prefill fed the others), which attend over 5 + 6 + ... + 11 cache
    positions; /health reports them."""
    engine = served.engine
    while engine.busy:
        time.sleep(0.01)
    before = engine.decode.to_dict()
    tokens, _ = _collect(engine, [3, 1, 4, 1, 5], SamplingParams(max_tokens=7, ignore_eos=True))()
    run = {k: v - before[k] for k, v in engine.decode.to_dict().items()}
    assert len(tokens) == 7
    assert (run["steps"], run["row_steps"], run["kv_positions"]) == (7, 7, sum(range(5, 12)))
    assert run["launches"] >= 1 and run["seconds"] > 0


def test_engine_reuses_cached_prefixes(served, monkeypatch):
    """A prompt that begins with what a cache slot holds takes those
    positions instead of computing them: in place from the free slot of a
    finished request (a chat's next turn), copied from the slot of a
    running one (submitted from its first tokens). A slot the session
    wrote directly since holds nothing for the engine. Greedy tokens are
    those of each prompt alone; with `reuse_prefixes` off nothing is
    reused."""
    engine, session = served.engine, served.session
    copies = []
    copy = session.copy_positions

    def counted(src, dst, start, end):
        copies.append((src, dst, start, end))
        return copy(src, dst, start, end)
    monkeypatch.setattr(session, "copy_positions", counted)

    def alone(prompt, m):
        return _run_alone(served, lambda: session.generate([prompt], m).tokens[0])
    _run_alone(served, lambda: None)
    start = engine.prompts.to_dict()
    p = [302] + [(11 * i) % 200 + 5 for i in range(1, 12)]  # (first tokens no other test uses)
    a, _ = _collect(engine, p, SamplingParams(max_tokens=6, ignore_eos=True))()
    turn = p + a + [9, 8]  # the next turn: 17 of its positions are cached
    b, _ = _collect(engine, turn, SamplingParams(max_tokens=4, ignore_eos=True))()
    assert engine.prompts.reused - start["reused"] == len(p) + len(a) - 1 and not copies
    assert a == alone(p, 6) and b == alone(turn, 4)
    # Copied from a running request's slot: 10 prompt positions. (On a
    # loaded machine the long request may have finished before the host
    # saw its first tokens: the prefix is then reused in place, and the
    # test tries again with other prompts, up to 5 times.)
    for attempt in range(5):
        q = [303 + attempt] + [(13 * i + attempt) % 200 + 7 for i in range(1, 14)]
        other = q[:10] + [3, 3, 3]
        waits, done = [], threading.Event()

        def on_output(req, tokens, finish):
            if tokens and not waits:
                waits.append(_collect(engine, other, SamplingParams(max_tokens=5, ignore_eos=True)))
            if finish:
                done.set()
        engine.submit(q, SamplingParams(max_tokens=30, ignore_eos=True), on_output)
        assert done.wait(120)
        c, _ = waits[0]()
        assert c == alone(other, 5)
        if copies:
            break
    assert len(copies) == 1 and copies[0][0] != copies[0][1] and copies[0][2:] == (0, 10)
    # Written by the session directly: the engine does not take it.
    before = engine.prompts.reused
    slot = next(s for s in range(session.max_batch) if engine._cached(s)[2] >= len(q))
    _run_alone(served, lambda: session.prefill_part(slot, [2] * 20, 0, 20))
    assert engine._cached(slot)[2] == 0
    engine.reuse_prefixes = False
    try:
        assert _collect(engine, turn, SamplingParams(max_tokens=4, ignore_eos=True))()[0] == b
    finally:
        engine.reuse_prefixes = True
    assert engine.prompts.reused == before


def _run_alone(served, fn):
    """Runs `fn` on the session while the engine is idle (the engine's thread
    owns the session; it waits for work while idle)."""
    while served.engine.busy:
        time.sleep(0.01)
    return fn()


def test_engine_stops_samples_and_checks(served):
    engine = served.engine
    base, _ = _collect(engine, [4, 4, 2], SamplingParams(max_tokens=10, ignore_eos=True))()
    stop = base[4]
    cut, finish = _collect(engine, [4, 4, 2], SamplingParams(max_tokens=10, stop_ids=(stop,)))()
    assert cut == base[: base.index(stop) + 1] and finish == "stop"
    hot = SamplingParams(max_tokens=10, temperature=5.0, seed=7, ignore_eos=True)
    a, _ = _collect(engine, [4, 4, 2], hot)()
    b, _ = _collect(engine, [4, 4, 2], hot)()
    assert a == b and a != base
    # top-k 1 at any temperature: the greedy tokens.
    top1 = SamplingParams(max_tokens=10, temperature=5.0, seed=7, top_k=1, ignore_eos=True)
    assert _collect(engine, [4, 4, 2], top1)()[0] == base
    # Up to the compiled context (48): a 40-token prompt takes 9 new tokens.
    full, finish = _collect(engine, [2] * 40, SamplingParams(max_tokens=None, ignore_eos=True))()
    assert len(full) == 9 and finish == "length"
    for bad, match in [(SamplingParams(max_tokens=0), "max_tokens"), (SamplingParams(temperature=-1), "temperature"),
                       (SamplingParams(seed=-1), "seed"), (SamplingParams(top_p=0), "top_p"),
                       (SamplingParams(max_tokens=1, stop_ids=(320,)), "stop id"),
                       (SamplingParams(max_tokens=1, stop_ids=tuple(range(2, 10))), "at most 8"),
                       (SamplingParams(max_tokens=10), "exceed this model's context")]:
        with pytest.raises(ValueError, match=match):
            engine.submit([1] * 40, bad, lambda *a: None)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        engine.submit([1, 999], SamplingParams(), lambda *a: None)
    with pytest.raises(ValueError, match="empty"):
        engine.submit([], SamplingParams(), lambda *a: None)


def test_engine_penalties_match_generate(served, monkeypatch):
    """Penalized requests running together, the second taking the first's
    20-token prompt prefix (copied: the keys, values and tokens of those
    positions): each gets the tokens of `DecodeSession.generate` with the
    same penalties alone, and other tokens than without them."""
    engine, session = served.engine, served.session
    copies = []
    copy = session.copy_positions

    def counted(*args):
        copies.append(args)
        return copy(*args)
    monkeypatch.setattr(session, "copy_positions", counted)
    shared = [304] + [(17 * i) % 200 + 9 for i in range(1, 20)]
    prompts = [shared + [12, 13], shared + [14]]
    penalties = [dict(frequency_penalty=0.8, presence_penalty=0.3), dict(repetition_penalty=1.7)]
    waits = [_collect(engine, p, SamplingParams(max_tokens=12, ignore_eos=True, **k))
             for p, k in zip(prompts, penalties)]
    together = [w()[0] for w in waits]
    assert copies and copies[0][2:] == (0, 20)
    for p, k, got in zip(prompts, penalties, together):
        assert got == _run_alone(served, lambda: session.generate([p], 12, **k).tokens[0])
        assert got != _collect(engine, p, SamplingParams(max_tokens=12, ignore_eos=True))()[0]
    with pytest.raises(ValueError, match="repetition_penalty must be a finite number > 0"):
        engine.submit([1, 2], SamplingParams(repetition_penalty=0.0), lambda *a: None)


def test_engine_logit_bias(served):
    """A request's logit biases reach the kernel from its first token on:
    +100 on one id makes every token that id, -100 on the greedy first
    token makes it another; a request beside them without biases keeps its
    greedy tokens (rows do not share biases); generate with the same bias
    gives the same tokens; ids outside the vocabulary are refused."""
    engine, session = served.engine, served.session
    prompt = [304, 21, 77, 5]
    plain = _collect(engine, prompt, SamplingParams(max_tokens=6, ignore_eos=True))()[0]
    waits = [_collect(engine, prompt, SamplingParams(max_tokens=6, ignore_eos=True, **k))
             for k in ({"logit_bias": {42: 100.0}}, {"logit_bias": {plain[0]: -100.0}}, {})]
    forced, banned, beside = [w()[0] for w in waits]
    assert forced == [42] * 6
    assert banned[0] != plain[0]
    assert beside == plain
    assert banned == _run_alone(served, lambda: session.generate([prompt], 6, logit_bias={plain[0]: -100.0})
                                .tokens[0])
    with pytest.raises(ValueError, match=r"logit_bias id 100000 is not a token id in \[0, 320\)"):
        engine.submit([1, 2], SamplingParams(logit_bias={100000: 1.0}), lambda *a: None)


def test_engine_logprobs(served):
    """A request's log-probabilities come with its tokens, each in place
    when its token reaches on_output: those of generate() run alone with
    the same count; a request beside it without them has none and both
    keep their greedy tokens; bad counts are refused."""
    engine, session = served.engine, served.session
    prompt = [304, 21, 77, 5]
    plain = _collect(engine, prompt, SamplingParams(max_tokens=6, ignore_eos=True))()[0]
    reqs, aligned = [], []

    def on_output(req, tokens, finish):
        aligned.append(req.logprobs is None or len(req.logprobs) == len(req.tokens))
    for params in (SamplingParams(max_tokens=6, ignore_eos=True, logprobs=3),
                   SamplingParams(max_tokens=6, ignore_eos=True)):
        reqs.append(engine.submit(prompt, params, on_output))
    while any(r.finish is None for r in reqs):
        time.sleep(0.01)
    assert all(aligned) and reqs[0].tokens == reqs[1].tokens == plain
    assert reqs[1].logprobs is None and len(reqs[0].logprobs) == 6
    alone = _run_alone(served, lambda: session.generate([prompt], 6, logprobs=3))
    assert alone.tokens[0] == plain
    for got, want in zip(reqs[0].logprobs, alone.logprobs[0]):
        assert [i for i, _ in got.top] == [i for i, _ in want.top]
        np.testing.assert_allclose([got.logprob, *(v for _, v in got.top)],
                                   [want.logprob, *(v for _, v in want.top)], rtol=1e-5, atol=1e-5)
    assert all(e.top[0][0] == t for e, t in zip(reqs[0].logprobs, plain))  # greedy: the most likely
    with pytest.raises(ValueError, match=r"logprobs must be None \(off\) or an int in \[0, 20\]"):
        engine.submit([1, 2], SamplingParams(logprobs=21), lambda *a: None)


def test_engine_prompt_logprobs(served):
    """prompt_logprobs: decode steps feed the prompt (an end id inside it
    stops nothing), each prompt token after the first gets the Logprob
    score() gives it, in place before the first token or the finish; then
    the same greedy tokens as without; max_tokens 0 scores only; a
    one-token prompt with nothing to do finishes at once."""
    engine, session = served.engine, served.session
    prompt = [304, 21, 1, 77, 5, 9]  # (1: the model's end id)
    plain = _collect(engine, prompt, SamplingParams(max_tokens=4, ignore_eos=True))()[0]
    want = _run_alone(served, lambda: session.score([prompt], logprobs=2)[0])
    seen = []

    def on_output(req, tokens, finish):
        seen.append(len(req.prompt_logprobs))
    reqs = [engine.submit(prompt, SamplingParams(max_tokens=m, ignore_eos=True, prompt_logprobs=2, logprobs=lp),
                          on_output) for m, lp in ((4, 2), (0, None))]
    while any(r.finish is None for r in reqs):
        time.sleep(0.01)
    assert set(seen) == {len(prompt) - 1}
    assert reqs[0].tokens == plain and len(reqs[0].logprobs) == 4 and reqs[0].finish == "length"
    assert reqs[1].tokens == [] and reqs[1].logprobs is None and reqs[1].finish == "length"
    for req in reqs:
        for got, w in zip(req.prompt_logprobs, want, strict=True):
            assert [i for i, _ in got.top] == [i for i, _ in w.top]
            np.testing.assert_allclose(got.logprob, w.logprob, rtol=1e-5, atol=1e-5)
    done = engine.submit([7], SamplingParams(max_tokens=0, prompt_logprobs=0), lambda *a: None)
    assert done.finish == "length" and done.prompt_logprobs == []
    for params, match in ((SamplingParams(max_tokens=0), "max_tokens must be a positive integer, got 0"),
                          (SamplingParams(prompt_logprobs=1, logprobs=2), "must be the same count")):
        with pytest.raises(ValueError, match=match):
            engine.submit([1, 2], params, lambda *a: None)


def test_cancel_frees_the_slot(served):
    """A request cancelled at its first tokens (from its callback, while the
    launch runs) ends the launch early: "abort", fewer tokens than asked,
    its slot free again. (On a loaded machine the host may see the first
    tokens only after the launch made all of them: the request then ends
    with "length", and the test tries again, up to 5 times.)"""
    engine = served.engine
    for _ in range(5):
        finishes = []

        def on_output(req, tokens, finish):
            if tokens:
                engine.cancel(req)
            if finish:
                finishes.append(finish)
        req = engine.submit([7, 8], SamplingParams(max_tokens=40, ignore_eos=True), on_output)
        deadline = time.time() + 60
        while engine.busy and time.time() < deadline:
            time.sleep(0.01)
        assert engine.busy == 0 and len(finishes) == 1 and sorted(engine._free) == [0, 1]
        if finishes == ["length"] and len(req.tokens) == 40:
            continue
        break
    assert finishes == ["abort"] and len(req.tokens) < 40


def test_tokens_stream_out_and_a_launch_ends_when_asked(served):
    """decode_launch hands out each row's tokens while the launch runs
    (read from the token history the kernel writes), and ends after the
    step in flight once asked to; the row then goes on in the next launch
    with the tokens it would have made in one."""
    session, engine = served.session, served.engine
    prompt = [3, 1, 4, 1, 5]

    def launch(**kw):
        return session.decode_launch([1], [prompt[-1]], [len(prompt) - 1], [30], [[-1]], 30, **kw)[0]

    def alone():
        session.prefill_part(1, prompt[:-1], 0, 100)
        full = launch()
        session.prefill_part(1, prompt[:-1], 0, 100)
        pieces = []
        part = launch(on_tokens=lambda b, t: pieces.append((b, t)), interrupt_when=lambda: True)
        pos = len(prompt) - 1 + len(part[0])
        rest = session.decode_launch([1], [part[0][-1]], [pos], [30 - len(part[0])], [[-1]], 30)[0]
        return full, part, pieces, rest
    full, part, pieces, rest = _run_alone(served, alone)
    assert full[1] == model_layout.FINISH_LENGTH and len(full[0]) == 30
    assert part[1] == 0 and 0 < len(part[0]) < 30
    assert [b for b, _ in pieces] == [0] * len(pieces) and sum((t for _, t in pieces), []) == part[0]
    assert part[0] + rest[0] == full[0] and rest[1] == model_layout.FINISH_LENGTH


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(served):
    import uvicorn

    from event_tensor.serving.server import create_app

    port = _free_port()
    srv = uvicorn.Server(uvicorn.Config(create_app(served), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not srv.started and time.time() < deadline:
        time.sleep(0.02)
    assert srv.started
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(30)


def _text(served, prompt, tokens):
    """The text of `tokens` as the server hands it out: a character whose
    bytes are not all there at the end is left out."""
    text = served.codec.stream(prompt).push(tokens)
    assert served.codec.decode(tokens).startswith(text)
    return text


def test_openai_client_completions_chat_and_stream(served, server):
    import openai

    client = openai.OpenAI(base_url=server + "/v1", api_key="unused")
    assert [m.id for m in client.models.list().data] == ["tiny"]
    done = client.completions.create(model="tiny", prompt="the quick brown", max_tokens=6, temperature=0,
                                     extra_body={"ignore_eos": True})
    choice = done.choices[0]
    assert choice.finish_reason == "length" and done.usage.completion_tokens == 6
    prompt_ids = served.codec.encode("the quick brown")
    assert done.usage.prompt_tokens == len(prompt_ids)
    want, _ = _collect(served.engine, prompt_ids, SamplingParams(max_tokens=6, ignore_eos=True))()
    assert choice.text == _text(served, prompt_ids, want)
    # Streamed: the same text in pieces, then the finish reason and usage.
    chunks = list(client.completions.create(model="tiny", prompt="the quick brown", max_tokens=6, temperature=0,
                                            stream=True, stream_options={"include_usage": True},
                                            extra_body={"ignore_eos": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == choice.text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].usage.completion_tokens == 6
    # echo: the prompt's text first (given as text, or as ids), streamed or
    # not; with logprobs (the prompt's) it is refused.
    # A batch of one prompt of token ids: that prompt.
    assert client.completions.create(model="tiny", prompt=[prompt_ids], max_tokens=6, temperature=0,
                                     extra_body={"ignore_eos": True}).choices[0].text == choice.text
    for prompt in ("the quick brown", prompt_ids):
        echo = dict(model="tiny", prompt=prompt, max_tokens=6, temperature=0, echo=True,
                    extra_body={"ignore_eos": True})
        text = "the quick brown" if isinstance(prompt, str) else served.codec.decode(prompt_ids)
        assert client.completions.create(**echo).choices[0].text == text + choice.text
        assert "".join(c.choices[0].text for c in client.completions.create(**echo, stream=True)
                       if c.choices) == text + choice.text
    # Chat: the template's prompt, an assistant message.
    chat = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=5,
                                          temperature=0, extra_body={"ignore_eos": True})
    ids = served.codec.chat([{"role": "user", "content": "hi"}])
    want, _ = _collect(served.engine, ids, SamplingParams(max_tokens=5, ignore_eos=True))()
    assert chat.choices[0].message.role == "assistant"
    assert chat.choices[0].message.content == _text(served, ids, want)
    assert chat.usage.prompt_tokens == len(ids)
    pieces = list(client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                                 max_tokens=5, temperature=0, stream=True,
                                                 extra_body={"ignore_eos": True}))
    assert pieces[0].choices[0].delta.role == "assistant"
    assert "".join(p.choices[0].delta.content or "" for p in pieces) == chat.choices[0].message.content
    # A stop string cuts the text before it.
    text = choice.text
    if len(text) > 2:
        stop = text[1:3]
        cut = client.completions.create(model="tiny", prompt="the quick brown", max_tokens=6, temperature=0,
                                        stop=[stop], extra_body={"ignore_eos": True})
        assert cut.choices[0].text == text[: text.index(stop)] and cut.choices[0].finish_reason == "stop"
        # With logprobs: the entries of the tokens up to the one that ends
        # the stop string (test_stop_string_keeps_the_entries_up_to_it).
        cut = client.completions.create(model="tiny", prompt="the quick brown", max_tokens=6, temperature=0,
                                        stop=[stop], logprobs=1, extra_body={"ignore_eos": True}).choices[0]
        assert cut.text == text[: text.index(stop)]
        assert len("".join(cut.logprobs.tokens)) >= text.index(stop) + len(stop)


def test_stop_string_keeps_the_entries_up_to_it(served):
    """A request's tokens arriving in one batch with their log-probabilities:
    at a stop string's hit, the text before it and the entries of the
    tokens up to the one that ends it."""
    import asyncio
    from types import SimpleNamespace

    from event_tensor.model import Logprob
    from event_tensor.serving.server import _Generation

    codec = served.codec
    tokens = codec.encode("the quick brown fox jumps over")
    ends = next(k for k in range(1, len(tokens) + 1) if "quick" in codec.decode(tokens[:k]))
    assert ends < len(tokens)

    async def pieces():
        gen = object.__new__(_Generation)
        gen.served, gen.prompt, gen.tokens, gen.finish = served, [], 0, None
        gen.queue, gen.text, gen.stops = asyncio.Queue(), codec.stream([]), StopStrings(["quick"])
        gen.req = SimpleNamespace(finish="stop")  # (nothing to cancel)
        gen.queue.put_nowait((tokens, None, None, [(t, Logprob(-1.0, [])) for t in tokens]))
        return [p async for p in gen.pieces()], gen.finish
    got, finish = asyncio.run(pieces())
    assert finish == "stop" and "".join(t for t, _ in got) == codec.decode(tokens).split("quick")[0]
    assert [t for _, e in got for t, _ in e] == tokens[:ends]


def test_openai_client_n_choices(served, server):
    """`n` choices: engine requests of their own, choice i drawing with
    seed + i (the text of n=1 with that seed); the prompt is computed
    once (the second choice waits for the first's prefill and copies it:
    one prefix hit of all but the prompt's last token); streamed, each
    choice's chunks carry its index, its first delta the role, its last the
    finish reason."""
    import openai

    client = openai.OpenAI(base_url=server + "/v1", api_key="unused")
    _run_alone(served, lambda: None)
    prompt = [301] + [(17 * i) % 250 + 3 for i in range(1, 24)]  # (no other test starts with 301)
    before = served.engine.prompts.to_dict()
    hot = dict(max_tokens=4, temperature=1.5, seed=11, extra_body={"ignore_eos": True})
    both = client.completions.create(model="tiny", prompt=prompt, n=2, **hot)
    after = served.engine.prompts.to_dict()
    assert (after["requests"] - before["requests"], after["hits"] - before["hits"],
            after["reused"] - before["reused"]) == (2, 1, len(prompt) - 1)
    assert [c.index for c in both.choices] == [0, 1] and both.usage.prompt_tokens == len(prompt)
    assert both.usage.completion_tokens == 8
    for i in range(2):
        one = client.completions.create(model="tiny", prompt=prompt, n=1, **{**hot, "seed": 11 + i})
        assert one.choices[0].text == both.choices[i].text
    assert both.choices[0].text != both.choices[1].text
    messages = [{"role": "user", "content": "the quick brown fox"}]
    chat = client.chat.completions.create(model="tiny", messages=messages, n=2, **hot)
    chunks = list(client.chat.completions.create(model="tiny", messages=messages, n=2, stream=True, **hot))
    for i in range(2):
        mine = [c.choices[0] for c in chunks if c.choices and c.choices[0].index == i]
        assert mine[0].delta.role == "assistant" and mine[-1].finish_reason == "length"
        assert "".join(c.delta.content or "" for c in mine) == chat.choices[i].message.content


def test_concurrent_http_requests_match_each_alone(served, server):
    import openai

    client = openai.OpenAI(base_url=server + "/v1", api_key="unused")
    prompts = ["the fox", "a megakernel runs the whole step and", "tokens", "héllo wörld the lazy dog"]
    limits = [9, 4, 7, 5]

    def one(p, m):
        return client.completions.create(model="tiny", prompt=p, max_tokens=m, temperature=0,
                                         extra_body={"ignore_eos": True}).choices[0].text
    alone = [one(p, m) for p, m in zip(prompts, limits)]
    results = [None] * len(prompts)

    def worker(i):
        results[i] = one(prompts[i], limits[i])
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert results == alone


def test_http_errors(served, server):
    import openai

    client = openai.OpenAI(base_url=server + "/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError, match="context"):
        client.completions.create(model="tiny", prompt="the fox " * 40, max_tokens=20)
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.completions.create(model="other", prompt="x")
    with pytest.raises(openai.BadRequestError, match=r"top_p must be a number in \(0, 1\]"):
        client.completions.create(model="tiny", prompt="x", top_p=1.5)
    with pytest.raises(openai.BadRequestError, match="top_k must be -1 or 0"):
        client.completions.create(model="tiny", prompt="x", extra_body={"top_k": -2})
    with pytest.raises(openai.BadRequestError, match=r"n must be between 1 and this server's max batch \(2\), got 3"):
        client.completions.create(model="tiny", prompt="x", n=3)
    # Penalties reach the kernel (a greedy completion changes), out of
    # range they are refused.
    texts = [client.completions.create(model="tiny", prompt="the fox", max_tokens=12, temperature=0,
                                       extra_body={"ignore_eos": True}, **k).choices[0].text
             for k in ({}, {"frequency_penalty": 2.0}, {"presence_penalty": 0.0})]
    assert texts[0] != texts[1] and texts[0] == texts[2]
    with pytest.raises(openai.BadRequestError, match=r"frequency_penalty must be in \[-2, 2\], got 2.5"):
        client.completions.create(model="tiny", prompt="x", frequency_penalty=2.5)
    with pytest.raises(openai.BadRequestError, match=r"presence_penalty must be in \[-2, 2\]"):
        client.completions.create(model="tiny", prompt="x", presence_penalty=-3)
    with pytest.raises(openai.BadRequestError, match=r"repetition_penalty must be in \(0, 100\], got 0.0"):
        client.completions.create(model="tiny", prompt="x", extra_body={"repetition_penalty": 0.0})
    # Logit biases reach the kernel (+100 on one id: every token that id);
    # out of range, not ids or named twice they are refused.
    forced = client.completions.create(model="tiny", prompt="the fox", max_tokens=5, temperature=0,
                                       logit_bias={"42": 100}, extra_body={"ignore_eos": True}).choices[0].text
    assert forced == served.codec.decode([42] * 5)
    for bias, message in (({"42": 101}, r"logit_bias values must be in \[-100, 100\], got 101.0 for token 42"),
                          ({"fox": 1}, "logit_bias keys must be token ids, got 'fox'"),
                          ({"7": 1, "07": 2}, "logit_bias names token 7 twice"),
                          ({"100000": 1}, r"logit_bias id 100000 is not a token id")):
        with pytest.raises(openai.BadRequestError, match=message):
            client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x"}],
                                           logit_bias=bias)
    # Fields that would change the output and are not implemented: refused,
    # not ignored; their neutral values pass.
    for batch in (["x", "y"], [[1, 2], [3, 4]]):
        with pytest.raises(openai.BadRequestError, match="one prompt per request, got 2"):
            client.completions.create(model="tiny", prompt=batch)
    with pytest.raises(openai.BadRequestError, match="best_of is not supported"):
        client.completions.create(model="tiny", prompt="x", best_of=2)
    assert client.completions.create(model="tiny", prompt="x", max_tokens=2, logit_bias={},
                                     user="u").choices[0].text is not None
    r = httpx.post(server + "/v1/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "error" in r.json()
    r = httpx.post(server + "/v1/chat/completions", json={"model": "tiny", "messages": [{"role": "wizard"}]})
    assert r.status_code == 400 and "role" in r.json()["error"]["message"]
    r = httpx.post(server + "/v1/completions", json={"model": "tiny", "prompt": "x", "temperature": -1})
    assert r.status_code == 400 and "temperature" in r.json()["error"]["message"]
    health = httpx.get(server + "/health").json()
    assert health["status"] == "ok" and set(health["decode"]) == {"launches", "steps", "row_steps", "kv_positions",
                                                                   "seconds"}
    assert set(health["prompts"]) == {"requests", "hits", "positions", "reused"}


def test_openai_client_logprobs(served, server):
    """Completions' `logprobs` and chat's `logprobs` / `top_logprobs`: each
    token's text and log-probability and the most likely ids' (the
    completions API adds the token's own), streamed or not, those of
    generate(); out of range or top_logprobs without logprobs: 400."""
    import openai

    client = openai.OpenAI(base_url=server + "/v1", api_key="unused", max_retries=0)
    codec, session = served.codec, served.session
    ids = codec.encode("the quick brown")
    want = _run_alone(served, lambda: session.generate([ids], 6, logprobs=2))
    tokens, entries = want.tokens[0], want.logprobs[0]
    plain = dict(model="tiny", prompt="the quick brown", max_tokens=6, temperature=0, logprobs=2,
                 extra_body={"ignore_eos": True})
    done = client.completions.create(**plain).choices[0]
    lp = done.logprobs
    assert lp.tokens == [codec.decode([t]) for t in tokens]
    np.testing.assert_allclose(lp.token_logprobs, [e.logprob for e in entries], rtol=1e-5, atol=1e-5)
    for top, t, e in zip(lp.top_logprobs, tokens, entries):
        assert set(top) == {codec.decode([i]) for i, _ in e.top} | {codec.decode([t])}
    assert lp.text_offset == list(np.cumsum([0, *map(len, lp.tokens[:-1])]))
    chunks = list(client.completions.create(**plain, stream=True))
    assert sum((c.choices[0].logprobs.token_logprobs for c in chunks if c.choices), []) == lp.token_logprobs
    assert sum((c.choices[0].logprobs.text_offset for c in chunks if c.choices), []) == lp.text_offset
    assert client.completions.create(**{**plain, "logprobs": None}).choices[0].logprobs is None
    messages = [{"role": "user", "content": "hi"}]
    chat_ids = codec.chat(messages)
    want = _run_alone(served, lambda: session.generate([chat_ids], 5, logprobs=3))
    chat = dict(model="tiny", messages=messages, max_tokens=5, temperature=0, logprobs=True, top_logprobs=3,
                extra_body={"ignore_eos": True})
    content = client.chat.completions.create(**chat).choices[0].logprobs.content
    assert [c.token for c in content] == [codec.decode([t]) for t in want.tokens[0]]
    for c, e in zip(content, want.logprobs[0]):
        assert c.bytes == list(c.token.encode()) and len(c.top_logprobs) == 3
        assert [x.token for x in c.top_logprobs] == [codec.decode([i]) for i, _ in e.top]
        np.testing.assert_allclose([c.logprob, *(x.logprob for x in c.top_logprobs)],
                                   [e.logprob, *(v for _, v in e.top)], rtol=1e-5, atol=1e-5)
    streamed = [c for ch in client.chat.completions.create(**chat, stream=True) if ch.choices
                for c in (ch.choices[0].logprobs.content if ch.choices[0].logprobs else [])]
    assert [c.logprob for c in streamed] == [c.logprob for c in content]
    assert client.chat.completions.create(**{**chat, "logprobs": False, "top_logprobs": 0}).choices[0].logprobs is None
    for kwargs, message in ((dict(logprobs=True, top_logprobs=21), r"top_logprobs must be in \[0, 20\], got 21"),
                            (dict(top_logprobs=2), "top_logprobs needs logprobs: true")):
        with pytest.raises(openai.BadRequestError, match=message):
            client.chat.completions.create(model="tiny", messages=messages, **kwargs)
    with pytest.raises(openai.BadRequestError, match=r"logprobs must be in \[0, 20\], got 21"):
        client.completions.create(model="tiny", prompt="x", logprobs=21)
    # echo with logprobs: the prompt's tokens first (the first without a
    # log-probability), as score() gives them, then the completion's;
    # max_tokens 0 scores the prompt alone.
    scored = _run_alone(served, lambda: session.score([ids], logprobs=2)[0])
    for max_tokens in (0, 6):
        echo = client.completions.create(**{**plain, "max_tokens": max_tokens, "echo": True}).choices[0]
        lp = echo.logprobs
        assert echo.text == "the quick brown" + ("" if max_tokens == 0 else done.text)
        assert lp.tokens == [codec.decode([t]) for t in ids + (tokens if max_tokens else [])]
        assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
        np.testing.assert_allclose(lp.token_logprobs[1:len(ids)], [e.logprob for e in scored], rtol=1e-5, atol=1e-5)
        if max_tokens:
            np.testing.assert_allclose(lp.token_logprobs[len(ids):], [e.logprob for e in entries], rtol=1e-5,
                                       atol=1e-5)
    streamed = [c.choices[0] for c in client.completions.create(**{**plain, "max_tokens": 0, "echo": True},
                                                                   stream=True) if c.choices]
    assert "".join(c.text for c in streamed) == "the quick brown"
    assert sum((c.logprobs.token_logprobs for c in streamed), []) == lp.token_logprobs[:len(ids)]


def test_client_that_disconnects_frees_its_slot(served, server, monkeypatch):
    """A client that closes its stream after the first event: its request
    ends as "abort" long before its 40 tokens (launches of two steps,
    slowed to 50 ms) and its slot is free again."""
    launch = served.session.decode_launch

    def slow(*args, **kwargs):
        time.sleep(0.05)
        return launch(*args, **kwargs)
    monkeypatch.setattr(served.session, "decode_launch", slow)
    monkeypatch.setattr(served.engine, "chunk", 2)
    aborted = served.engine.finished["abort"]
    body = {"model": "tiny", "prompt": "the fox", "max_tokens": 40, "stream": True, "ignore_eos": True,
            "temperature": 0}
    with httpx.Client(timeout=60) as c:
        with c.stream("POST", server + "/v1/completions", json=body) as r:
            assert r.status_code == 200
            first = next(r.iter_lines())
            assert first.startswith("data: ")
    deadline = time.time() + 60
    while served.engine.busy and time.time() < deadline:
        time.sleep(0.02)
    health = httpx.get(server + "/health").json()
    assert health["requests"] == 0 and health["finished"]["abort"] == aborted + 1
    assert sorted(served.engine._free) == [0, 1]


def test_cli_generate(tmp_path, capsys):
    from event_tensor.cli import main

    _write_model_dir(tmp_path)
    argv = ["generate", str(tmp_path), "--device", "cpu", "--prompt", "the quick", "--max-new-tokens", "5",
            "--max-context", "32", "--max-batch", "1", "--workers", "2", "--cache-dir", str(tmp_path / "cache")]
    assert main(argv) == 0
    out = capsys.readouterr()
    codec = TextCodec(tmp_path)
    assert "ready in" in out.err and out.out.endswith("\n")
    # Paged caches: the same text; a pool below one page (2 MiB of each cache) is an error.
    assert main(argv + ["--kv-memory", "0.01"]) == 0
    assert capsys.readouterr().out == out.out
    assert main(argv + ["--chat"]) == 0
    capsys.readouterr()
    # Penalties: other text (greedy repeats itself here); a bad one is an error.
    assert main(argv + ["--max-new-tokens", "12", "--repetition-penalty", "2", "--frequency-penalty", "1"]) == 0
    penalized = capsys.readouterr().out
    assert main(argv + ["--max-new-tokens", "12"]) == 0
    assert capsys.readouterr().out != penalized
    assert main(argv + ["--repetition-penalty", "0"]) == 2
    assert "repetition_penalty must be a finite number > 0" in capsys.readouterr().err
    # Logit biases: +100 on one id (given as two flags that add up) makes
    # every token that id; a bad flag is an error.
    assert main(argv + ["--logit-bias", "42=60", "--logit-bias", "42=40"]) == 0
    assert capsys.readouterr().out == codec.decode([42] * 5) + "\n"
    with pytest.raises(SystemExit):
        main(argv + ["--logit-bias", "42"])
    assert "expected ID=BIAS" in capsys.readouterr().err
    # Log-probabilities after the text: a line per token, its text first.
    assert main(argv + ["--logprobs", "1"]) == 0
    got = capsys.readouterr().out
    lines = got[len(out.out):].splitlines()
    assert got.startswith(out.out) and len(lines) == 5
    assert all(float(line.split("\t")[1]) <= 0 and float(line.split("\t")[2].rsplit("=", 1)[1]) <= 0
               for line in lines)
    assert main(argv + ["--kv-memory", "0.001"]) == 2
    assert "less than one KV page" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(argv + ["--kv-memory", "-1"])
    assert "expected a positive number" in capsys.readouterr().err
    # A pool from a fraction of the (host's) memory: the same text.
    assert main(argv + ["--gpu-memory-fraction", "1"]) == 0
    assert capsys.readouterr().out == out.out
    for bad in (["--gpu-memory-fraction", "0"], ["--gpu-memory-fraction", "0.5", "--kv-memory", "1"]):
        with pytest.raises(SystemExit):
            main(argv + bad)
    assert "not allowed with argument" in capsys.readouterr().err
    assert main(["generate", str(tmp_path / "nope"), "--device", "cpu", "--prompt", "x"]) == 2
    assert "not a directory" in capsys.readouterr().err
    assert main(["serve", str(tmp_path / "nope"), "--device", "cpu"]) == 2
    assert "not a directory" in capsys.readouterr().err
    # No --max-context: 1024, or the model's max_position_embeddings (256
    # here) where that is smaller.
    i = argv.index("--max-context")
    assert main(argv[:i] + argv[i + 2:]) == 0
    assert f"context {model.tiny_config('llama').max_position_embeddings};" in capsys.readouterr().err
    # More than 16 sequences on the host: the tensor-core tiles' loops.
    assert main(argv[:-4] + ["--max-batch", "20", "--workers", "2", "--cache-dir", str(tmp_path / "cache")]) == 0
    assert "max batch 20" in capsys.readouterr().err
    assert codec.vocab_size == 300


def test_engine_on_two_devices(tmp_path, capsys):
    """open_model(tp=2) (and `generate --tp 2`): the engine serves a model
    split over two devices (groups of host threads here), the prompts
    through the prefill kernel on both, the decode loop on both; requests
    that share launches get the tokens each gets alone, and the session's
    own generation."""
    from event_tensor.cli import main

    _write_model_dir(tmp_path, config=model.tiny_config("llama", vocab_size=300, num_heads=4, num_kv_heads=2))
    served = open_model(tmp_path, device="cpu", max_batch=2, max_context=48, workers=1, chunk=64, prefill_rows=16,
                        cache_dir=tmp_path / "cache", tp=2)
    try:
        session, engine = served.session, served.engine
        assert session.tp == 2 and session.prefill_launcher is not None
        prompts = [[5, 6, 7], list(range(20, 40))]
        params = [SamplingParams(max_tokens=m, ignore_eos=True) for m in (9, 6)]
        alone = [_collect(engine, p, q)() for p, q in zip(prompts, params)]
        waits = [_collect(engine, p, q) for p, q in zip(prompts, params)]
        assert [w() for w in waits] == alone
        for p, (tokens, finish) in zip(prompts, alone):
            assert finish == "length"
            assert _run_alone(served, lambda: session.generate([p], len(tokens)).tokens[0]) == tokens
    finally:
        served.close()
    argv = ["generate", str(tmp_path), "--device", "cpu", "--prompt", "the quick", "--max-new-tokens", "4",
            "--max-context", "32", "--max-batch", "1", "--workers", "2", "--cache-dir", str(tmp_path / "cache"),
            "--tp", "2"]
    assert main(argv) == 0
    assert "on cpu x 2" in capsys.readouterr().err


def test_cli_generate_with_experts(tmp_path, capsys):
    """A Qwen3-MoE model directory through `event-tensor generate`: the
    text of the greedy tokens that the numpy reference chooses."""
    from event_tensor.cli import main

    config = _write_model_dir(tmp_path, config=model.tiny_moe_config(vocab_size=320))
    argv = ["generate", str(tmp_path), "--device", "cpu", "--prompt", "the quick", "--max-new-tokens", "4",
            "--max-context", "32", "--max-batch", "1", "--workers", "2", "--cache-dir", str(tmp_path / "cache")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    codec = TextCodec(tmp_path)
    prompt = codec.encode("the quick")
    ref = model.ReferenceModel(config, model.load_weights(config, [tmp_path]), max_batch=1, max_context=32)
    tokens = []
    for pos, t in enumerate(prompt):
        logits = ref.step([t], [pos])
    for i in range(4):
        token = int(logits[0].argmax())
        if token == 1:  # the end-of-sequence id (generation_config.json) ends it, unprinted
            break
        tokens.append(token)
        logits = ref.step([token], [len(prompt) + i])
    # (An incomplete UTF-8 sequence at the end is held back, not printed.)
    assert out.rstrip("\n") == codec.decode(tokens).rstrip("\ufffd")
