"""Tensor parallelism: one decode kernel split over N devices
(compile_model(tp=N)), run on the CPU as N groups of worker threads, against
the float64 reference and the single-device kernel (teacher-forced logits
within bf16 tolerance for 32 steps)."""

import json

import numpy as np
import pytest

from event_tensor import model
from event_tensor.model import ConfigError
from event_tensor.model.weights import pack, tp_shards


def _rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def _config(family):
    # Two KV heads, so that each of 2 devices holds one.
    return model.tiny_config(family, num_heads=4, num_kv_heads=2)


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_tp2_matches_one_device_for_32_teacher_forced_steps(family, tmp_path):
    config = _config(family)
    weights = model.random_weights(config, seed=7)
    one = model.DecodeSession(model.compile_model(config, target="cpu", max_batch=2, max_context=64, workers=3,
                                                  split_len=16, cache_dir=tmp_path), weights)
    path = model.compile_model(config, target="cpu", max_batch=2, max_context=64, workers=3, split_len=16,
                               tp=2, cache_dir=tmp_path)
    info = json.loads((path / "model.json").read_text())
    meta = json.loads((path / "metadata.json").read_text())
    assert info["tp"] == 2 and meta["devices"] == 2
    assert sorted(a["name"] for a in meta["arguments"] if a.get("symmetric")) == \
        ["part_d", "part_idx", "part_o", "part_val", "stop"]
    assert {"sum_o", "sum_d", "gather"} <= set(meta["tasks"])
    tp = model.DecodeSession(path, weights)
    assert len(tp.device_buffers) == 2
    ref = model.ReferenceModel(config, weights, max_batch=2, max_context=64)
    rng = np.random.default_rng(3)
    tokens = rng.integers(0, config.vocab_size, (32, 2))
    for i, row in enumerate(tokens):
        # Two sequences at different positions (slot 1 starts later).
        positions = [i, max(0, i - 3)] if i >= 3 else [i]
        toks = row[:len(positions)].tolist()
        a, b = one.step(toks, positions), tp.step(toks, positions)
        la, lb = one.last_logits(), tp.last_logits()
        assert lb.shape == la.shape == (len(positions), config.vocab_size)
        assert _rel(lb, la) < 1e-2, i
        want = ref.step(toks, positions)
        assert _rel(lb, want) < 1e-2, i
        # Greedy tokens agree wherever the reference's top-2 margin is clear.
        top2 = np.sort(want, axis=-1)[:, -2:]
        clear = (top2[:, 1] - top2[:, 0]) > 1e-2 * np.abs(want).max()
        assert np.array_equal(b[clear], want.argmax(-1)[clear]), i
        assert np.array_equal(a[clear], b[clear]), i
    # The residual stream is identical on both devices.
    np.testing.assert_array_equal(tp.device_buffers[0]["h"], tp.device_buffers[1]["h"])
    tp.close()
    one.close()


def test_tp2_generates_on_the_device(tmp_path):
    """A tensor-parallel kernel runs the decode loop itself on every device
    (et.repeat across devices): one launch makes every token, the same
    tokens as a launch per step, with stop ids and budgets decided on the
    device; both devices end in the same state; an interrupt written on
    device 0 ends every device's launch after the step in flight."""
    config = _config("llama")
    weights = model.random_weights(config, seed=7)
    path = model.compile_model(config, target="cpu", max_batch=2, max_context=64, workers=3, split_len=16,
                               tp=2, cache_dir=tmp_path)
    tp = model.DecodeSession(path, weights)
    assert tp.steps_on_device
    prompts = [[1, 2, 3, 4], [9, 8, 7, 6]]
    want, _ = tp.generate_stepwise(prompts, 12)
    got = tp.generate(prompts, 12)
    assert got.launches == 1
    assert got.tokens == want.tolist() and got.finish_reasons == ["length", "length"]
    for name in ("finished", "positions", "remaining", "tokens"):
        np.testing.assert_array_equal(tp.device_buffers[0][name][:2], tp.device_buffers[1][name][:2])
    # Row 0 stops at its fifth token; row 1 goes on to its budget.
    stop = int(want[0, 4])
    got = tp.generate(prompts, 12, stop=[[stop], []])
    assert got.tokens[0] == want[0, : want[0].tolist().index(stop) + 1].tolist()
    assert got.finish_reasons == ["stop", "length"] and got.tokens[1] == want[1].tolist()
    # The host interrupts device 0 only; every device's launch ends after
    # the step in flight (a device going on alone would wait for the other
    # until the watchdog), and the row goes on in the next launch with the
    # tokens it would have made in one.
    from event_tensor.model import layout as model_layout

    def launch(**kw):
        return tp.decode_launch([0], [prompts[0][-1]], [len(prompts[0]) - 1], [40], [[-1]], 40, **kw)[0]
    tp.prefill([prompts[0]])
    full = launch()
    for _ in range(5):  # (a launch may end before the host's first poll)
        tp.prefill([prompts[0]])
        part = launch(interrupt_when=lambda: True)
        if len(part[0]) < 40:
            break
    assert part[1] == 0 and 0 < len(part[0]) < 40
    np.testing.assert_array_equal(tp.device_buffers[0]["positions"][:1], tp.device_buffers[1]["positions"][:1])
    pos = len(prompts[0]) - 1 + len(part[0])
    rest = tp.decode_launch([0], [part[0][-1]], [pos], [40 - len(part[0])], [[-1]], 40)[0]
    assert part[0] + rest[0] == full[0] and rest[1] == model_layout.FINISH_LENGTH
    tp.close()


def test_tp2_samples_as_one_device_does(tmp_path):
    """With a temperature, each device draws the keys its share of the
    vocabulary has in the whole (et.argmax key_offset): the generation
    repeats for a seed, both devices end with the same tokens, and the
    tokens are one device's for the same seed (the logits differ in
    rounding only, so at a high temperature near ties are rare: 32 of 32
    here; with the devices' own column numbers as keys, 4). The filters
    are refused by name."""
    config = _config("qwen3")
    weights = model.random_weights(config, seed=5)
    one = model.DecodeSession(model.compile_model(config, target="cpu", max_batch=2, max_context=64, workers=3,
                                                  split_len=16, cache_dir=tmp_path), weights)
    tp = model.DecodeSession(model.compile_model(config, target="cpu", max_batch=2, max_context=64, workers=3,
                                                 split_len=16, tp=2, cache_dir=tmp_path), weights)
    prompts = [[5, 6, 7], [8, 9, 10]]
    a = tp.generate(prompts, 16, temperature=1.5, seed=[3, 4])
    assert a.tokens == tp.generate(prompts, 16, temperature=1.5, seed=[3, 4]).tokens
    assert a.tokens != tp.generate(prompts, 16, temperature=1.5, seed=[5, 6]).tokens
    np.testing.assert_array_equal(tp.device_buffers[0]["tokens"][:2], tp.device_buffers[1]["tokens"][:2])
    # Free-running: once a draw differs, the row goes its own way.
    b = one.generate(prompts, 16, temperature=1.5, seed=[3, 4])
    agree = sum(x == y for ra, rb in zip(a.tokens, b.tokens) for x, y in zip(ra, rb))
    assert agree >= 28, (a.tokens, b.tokens)
    with pytest.raises(ValueError, match="top_k, top_p and min_p need a kernel on one device; this one runs on 2"):
        tp.generate(prompts, 4, temperature=1.0, top_k=5)
    with pytest.raises(ValueError, match="presence penalties need a kernel on one device; this one runs on 2"):
        tp.generate(prompts, 4, repetition_penalty=1.2)
    tp.close()
    one.close()


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_tp2_prefill_kernel_matches_the_decode_prefill(family, tmp_path):
    """compile_model(tp=2, prefill_rows=24): the prefill kernel runs on both
    devices too (o and down as partial sums and a per-layer all-reduce,
    every device's argmax candidates gathered): the same next token, last
    logits and KV caches (each device its heads) as feeding the prompt
    through the tensor-parallel decode kernel, and the same generation."""
    config = _config(family)
    weights = model.random_weights(config, seed=3)
    common = dict(target="cpu", max_batch=2, max_context=64, workers=3, split_len=16, tp=2, cache_dir=tmp_path)
    plain = model.DecodeSession(model.compile_model(config, **common), weights)
    path = model.compile_model(config, prefill_rows=24, out_dir=tmp_path / "fast", **common)
    meta = json.loads((path / "prefill" / "metadata.json").read_text())
    assert meta["devices"] == 2 and {"sum_o", "sum_d", "gather"} <= set(meta["tasks"])
    fast = model.DecodeSession(path, weights)
    assert fast.prefill_launcher is not None
    rng = np.random.default_rng(1)
    prompt = rng.integers(0, config.vocab_size, 40).tolist()
    assert fast.prefill([prompt]).tolist() == plain.prefill([prompt]).tolist()
    want = plain.last_logits()[-1]
    assert _rel(fast.last_logits()[0], want) < 2e-3
    for d in range(2):
        for name in ("k_cache", "v_cache"):
            ref = np.asarray(plain.device_buffers[d][name], np.float32)[0, :40]
            got = np.asarray(fast.device_buffers[d][name], np.float32)[0, :40]
            assert np.abs(ref).max() > 0
            np.testing.assert_allclose(got, ref, rtol=1e-2, atol=1e-2, err_msg=f"device {d} {name}")
    np.testing.assert_array_equal(fast.device_buffers[0]["p_h"], fast.device_buffers[1]["p_h"])
    prompts = [prompt, rng.integers(0, config.vocab_size, 30).tolist()]
    assert fast.generate(prompts, 6).tokens == plain.generate(prompts, 6).tokens
    fast.close()
    plain.close()
    with pytest.raises(ValueError, match="a prefill kernel on several devices needs split_k 1 and last_layer 'full'"):
        model.compile_model(config, prefill_rows=24, prefill_tiles={"last_layer": "row"}, **common)


def test_tp_shards_split_heads_columns_and_vocabulary():
    config = _config("llama")
    packed = pack(config, model.random_weights(config, seed=1))
    shards = tp_shards(config, packed, 2)
    D, H = config.head_dim, config.hidden_size
    for d, shard in enumerate(shards):
        assert shard["wq"].shape == (config.num_layers, 2 * D, H)
        np.testing.assert_array_equal(shard["wq"], packed["wq"][:, d * 2 * D:(d + 1) * 2 * D])
        np.testing.assert_array_equal(shard["wk"], packed["wk"][:, d * D:(d + 1) * D])
        np.testing.assert_array_equal(shard["wo"], packed["wo"][:, :, d * 2 * D:(d + 1) * 2 * D])
        half = config.intermediate_size // 2
        np.testing.assert_array_equal(shard["wd"], packed["wd"][:, :, d * half:(d + 1) * half])
        v = config.vocab_size // 2
        np.testing.assert_array_equal(shard["lm_head"], packed["lm_head"][d * v:(d + 1) * v])
        assert shard["embed"] is packed["embed"] and shard["ln1"] is packed["ln1"]


def test_tp_rejects_what_it_cannot_split(tmp_path):
    config = _config("llama")
    with pytest.raises(ConfigError, match=r"needs num_kv_heads \(2\) divisible by 3"):
        model.compile_model(config, target="cpu", max_batch=1, max_context=32, tp=3, cache_dir=tmp_path)
    with pytest.raises(ConfigError, match="tp must be a positive int, got 0"):
        model.compile_model(config, target="cpu", max_batch=1, max_context=32, tp=0, cache_dir=tmp_path)
    with pytest.raises(ValueError, match=r"tensor parallelism \(tp > 1\) needs the layered kernel"):
        model.compile_model(config, target="cpu", max_batch=1, max_context=32, tp=2, layered=False,
                            cache_dir=tmp_path)
    with pytest.raises(ValueError, match="tp > 1 is not supported with batch_variants"):
        model.compile_model(config, target="cpu", max_batch=1, max_context=32, tp=2, batch_variants=True,
                            tuning_table="NVIDIA H200", cache_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"needs num_kv_heads \(1\) divisible by 2"):
        tp_shards(model.tiny_config("llama"), {}, 2)


@pytest.mark.parametrize("tp,fuse_norms", [(1, None), (1, True), (2, None), (2, True)])
def test_tensor_core_linear_tiles_match_reference(tp, fuse_norms, tmp_path):
    """linear_tile="mma": every linear layer as et.matmul tiles of 16 rows
    (q, k and v blocks as tiles of their own, two GEMM tiles and the SiLU
    in one mlp tile), at batch 1 to 4, on one device and split over two.
    The norms are tasks of a tile per row by default (rows past the
    launch's batch only signal), on two devices after the all-reduce;
    fused on request."""
    config = _config("qwen3")
    weights = model.random_weights(config, seed=9)
    path = model.compile_model(config, target="cpu", max_batch=4, max_context=32, workers=3, split_len=8,
                               tp=tp, linear_tile="mma", fuse_norms=fuse_norms, cache_dir=tmp_path)
    info = json.loads((path / "model.json").read_text())
    fused = bool(fuse_norms)
    assert info["linear_tile"] == "mma" and info["fuse_norms"] is fused
    tasks = json.loads((path / "metadata.json").read_text())["tasks"]
    assert ("norm1" in tasks and "norm2" in tasks and "final_norm" in tasks) is not fused
    session = model.DecodeSession(path, weights)
    ref = model.ReferenceModel(config, weights, max_batch=4, max_context=32)
    for tokens, positions in [([5, 9, 3, 7], [0, 0, 0, 0]), ([17, 200, 1, 2], [1, 1, 1, 1]), ([33], [2]),
                              ([7, 8], [3, 2])]:
        session.step(tokens, positions)
        assert _rel(session.last_logits(), ref.step(tokens, positions)) < 2e-3


def test_linear_tile_choice_is_checked(tmp_path):
    config = _config("llama")
    with pytest.raises(ValueError, match="linear_tile must be 'rows', 'mma' or 'auto', got 'wide'"):
        model.compile_model(config, target="cpu", max_batch=1, max_context=32, linear_tile="wide",
                            cache_dir=tmp_path)
    with pytest.raises(ValueError, match="fuse_norms must be a bool or None, got 'yes'"):
        model.compile_model(config, target="cpu", max_batch=1, max_context=32, linear_tile="mma",
                            fuse_norms="yes", cache_dir=tmp_path)


@pytest.mark.parametrize("tp", [1, 2])
def test_auto_linear_tiles_pick_a_kernel_per_batch(tp, tmp_path, monkeypatch):
    """linear_tile="auto": et.linear kernels below mma_from_batch (4 here),
    tensor-core tiles from it, as batch variants sharing one set of buffers."""
    from event_tensor.model import compile as model_compile

    assert model_compile.mma_from_batch(model.preset("llama-3.2-1b")) == 4
    assert model_compile.mma_from_batch(model.preset("qwen3-0.6b")) == 8
    # The tiny config's hidden size is narrow: take the wide models' rule.
    monkeypatch.setattr(model_compile, "MMA_FROM_BATCH_NARROW", 4)
    config = _config("llama")
    weights = model.random_weights(config, seed=12)
    path = model.compile_model(config, target="cpu", max_batch=5, max_context=32, workers=3, split_len=8, tp=tp,
                               linear_tile="auto", out_dir=tmp_path / "auto", cache_dir=tmp_path / "cache",
                               jobs=1)
    info = json.loads((path / "model.json").read_text())
    assert info["linear_tile"] == "auto" and info["tp"] == tp
    assert [(v["min_batch"], v["max_batch"], v["linear_tile"]) for v in info["variants"]] == \
        [(1, 3, "rows"), (4, 5, "mma")]
    session = model.DecodeSession(path, weights)
    assert session.variant_for(3).endswith("batch1-3-context32-rows")
    assert session.variant_for(4).endswith("batch4-5-context32-mma")
    ref = model.ReferenceModel(config, weights, max_batch=5, max_context=32)
    for tokens, positions in [([5, 9, 3, 7, 1], [0] * 5), ([17], [1]), ([7, 8, 2, 4], [1, 1, 1, 1])]:
        session.step(tokens, positions)
        assert _rel(session.last_logits(), ref.step(tokens, positions)) < 2e-3
    # Below mma_from_batch there is nothing to choose: one et.linear kernel.
    small = model.compile_model(config, target="cpu", max_batch=2, max_context=32, workers=3, split_len=8, tp=tp,
                                linear_tile="auto", out_dir=tmp_path / "small", cache_dir=tmp_path / "cache")
    assert json.loads((small / "model.json").read_text())["linear_tile"] == "rows"
    with pytest.raises(ValueError, match=r"linear_tile='auto', batch_variants\) need an out_dir"):
        model.compile_model(config, target="cpu", max_batch=5, max_context=32, linear_tile="auto",
                            cache_dir=tmp_path / "cache")
