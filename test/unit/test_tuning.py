"""The wave-aware latency model and tuning tables (no GPU): fits on
synthetic wave-structured data, the two-stage table, lookups, validation."""

import json

import numpy as np
import pytest

from event_tensor.tuning import (LinearConfig, TableError, TuningTable, WaveModel, build_table, choose_linear,
                                 heuristic_linear, linear_candidates, linear_problem, load_linear_table,
                                 shipped_gpus, shipped_linear_table, table_from_samples, token_passes)

CAPACITY = 132


def _truth(tiles, trips, coef):
    """A piecewise-bilinear latency with the model's structure."""
    tiles, trips = np.asarray(tiles, float), np.asarray(trips, float)
    waves = np.ceil(tiles / CAPACITY)
    u = tiles - (waves - 1) * CAPACITY
    a, b, c, d, e, f = coef
    return (waves - 1) * (a + b * trips) + c + d * trips + e * u + f * u * trips


def _assert_load_fails(tmp_path, cls, data, message):
    """`cls.load` of `data` written to a file raises a TableError matching `message`."""
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(TableError, match=message):
        cls.load(path)


def test_fit_recovers_wave_structured_latency():
    rng = np.random.default_rng(0)
    coef = (4.0, 0.9, 2.5, 0.8, 0.004, 0.0006)
    points = WaveModel.boundary_samples(CAPACITY, max_waves=4, trips=[1, 8, 32, 128])
    samples = [(t, r, float(_truth(t, r, coef)) * (1 + 0.01 * rng.standard_normal())) for t, r in points]
    model = WaveModel(CAPACITY).fit(samples)
    # Predictions away from the sampled points, including a wave count that
    # was not sampled, within a few percent.
    tiles = rng.integers(1, 6 * CAPACITY, 200)
    trips = rng.integers(1, 256, 200)
    pred, true = model.predict(tiles, trips), _truth(tiles, trips, coef)
    assert np.max(np.abs(pred - true) / true) < 0.05
    # The jump at a wave boundary is in the model: one more tile past a full
    # wave costs a new wave.
    full, over = model.predict([CAPACITY, CAPACITY + 1], [64, 64])
    assert over > full + 0.5 * (coef[0] + coef[1] * 64 - coef[4] * CAPACITY - coef[5] * CAPACITY * 64)


def test_fit_rejects_too_few_or_bad_samples():
    with pytest.raises(ValueError, match="at least 6"):
        WaveModel(CAPACITY).fit([(1, 1, 1.0)] * 3)
    with pytest.raises(ValueError, match=">= 1"):
        WaveModel(CAPACITY).fit([(0, 1, 1.0)] * 6)
    with pytest.raises(ValueError, match="not fitted"):
        WaveModel(CAPACITY).predict(1, 1)


def test_linear_problem_counts_tiles_and_trips():
    assert linear_problem(1, 2048, 8192, LinearConfig(16, 1, 4), warps=16) == (128, 8)
    assert linear_problem(4, 2048, 8192, LinearConfig(32, 2, 8), warps=16) == (128, 4 * 2 * 2)
    # With token groups (the GPU lowering): one pass up to M = 2, then one per group.
    assert [token_passes(m, 4) for m in (1, 2, 3, 4, 5, 8, 9, 16)] == [1, 1, 1, 1, 2, 2, 3, 4]
    assert [token_passes(m, None) for m in (1, 2, 3)] == [1, 2, 3]
    assert linear_problem(4, 2048, 8192, LinearConfig(32, 2, 8), warps=16, token_group=4) == (128, 2 * 2)
    assert linear_problem(6, 2048, 8192, LinearConfig(16, 1, 4), warps=16, token_group=2) == (128, 8 * 3)


def _models(coefs):
    models = {}
    rng = np.random.default_rng(1)
    for key, coef in coefs.items():
        points = WaveModel.boundary_samples(CAPACITY, 3, [1, 4, 16, 64, 256])
        models[key] = WaveModel(CAPACITY).fit([(t, r, float(_truth(t, r, coef))) for t, r in points])
    return models


def test_two_stage_table_picks_the_best_configuration_and_round_trips(tmp_path):
    # Three macro families; unroll 8 is a little faster per trip than 4.
    base = (3.0, 1.0, 2.0, 1.0, 0.0, 0.0)
    coefs = {(r, 1, u): tuple(x * (0.9 if u == 8 else 1.0) for x in base) for r in (8, 16, 64) for u in (4, 8)}
    models = _models(coefs)
    table = build_table("Test GPU", CAPACITY, 512, [(2048, 8192)], 16, [(8, 1), (16, 1), (64, 1)], [4, 8], models)
    for m in (1, 7, 16):
        got = table.lookup(2048, 8192, m)
        # Exhaustive search over every configuration with the same models.
        best = min(((r, 1, u) for r in (8, 16, 64) for u in (4, 8)),
                   key=lambda c: float(models[c].predict(*linear_problem(m, 2048, 8192, LinearConfig(*c), 16))))
        assert (got.rows, got.split_k, got.unroll) == best
    # Trips are counted per row group, and a table must be built with the
    # row groups its samples were counted with. With 16 warps, 4- and 16-row
    # tiles take the same trips, so 16 rows (one wave) wins. With one row
    # group, 16 rows take 4x the trips, and 4 rows (cheaper last wave) win.
    flat = {(r, 1, 4): (0.0, 1.0, 0.0, 1.0, 0.1, 0.0) for r in (4, 16)}
    flat_models = _models(flat)
    for warps, rows in ((None, 16), (1, 4)):
        t = build_table("G", CAPACITY, 512, [(2048, 8192)], 2, [(4, 1), (16, 1)], [4], flat_models, warps=warps)
        assert t.lookup(2048, 8192, 1).rows == rows
    table.save(tmp_path / "t.json")
    back = TuningTable.load(tmp_path / "t.json", gpu="Test GPU")
    assert back.lookup(2048, 8192, 5) == table.lookup(2048, 8192, 5)
    config, source = choose_linear(2048, 8192, 5, table=back, workers=CAPACITY)
    assert source == "table Test GPU" and config == table.lookup(2048, 8192, 5)


def test_fallback_is_announced():
    config, source = choose_linear(4096, 4096, 1, table=None, workers=CAPACITY)
    assert config == heuristic_linear(4096, 4096, 1, CAPACITY) and source.startswith("heuristic")
    table = TuningTable("G", CAPACITY, 512, {(2048, 2048): ([(16, 1)], [4])})
    config, source = choose_linear(4096, 4096, 1, table=table, workers=CAPACITY)
    assert "no entry for shape 4096x4096" in source
    config, source = choose_linear(2048, 2048, 3, table=table, workers=CAPACITY)
    assert "M = 3 is outside" in source


@pytest.mark.parametrize("mutate,message", [
    (lambda d: d.update(format=9), "table format 9 is not 1"),
    (lambda d: d.update(gpu=""), "'gpu' must name the GPU"),
    (lambda d: d.update(workers=0), "'workers' must be a positive int"),
    (lambda d: d["linear"].update({"2048by8192": d["linear"]["2048x8192"]}), "is not NxK"),
    (lambda d: d["linear"]["2048x8192"]["micro"].pop(), "one per M from 1"),
    (lambda d: d["linear"]["2048x8192"]["macro"].__setitem__(0, [16]), "macro must be \\[rows, split_k\\]"),
    (lambda d: d["linear"]["2048x8192"]["micro"].__setitem__(1, 0), "unroll must be a positive int"),
    (lambda d: d["linear"]["2048x8192"]["macro"].__setitem__(0, [4096, 1]), "do not fit the shape"),
])
def test_corrupt_tables_get_clear_errors(tmp_path, mutate, message):
    good = {"format": 1, "gpu": "G", "workers": 132, "threads": 512,
            "linear": {"2048x8192": {"macro": [[16, 1], [16, 2]], "micro": [4, 8]}}}
    TuningTable.from_json(json.loads(json.dumps(good)))
    data = json.loads(json.dumps(good))
    mutate(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(TableError, match=message):
        TuningTable.load(path)


def test_unreadable_and_mismatched_tables(tmp_path):
    with pytest.raises(TableError, match="cannot read tuning table"):
        TuningTable.load(tmp_path / "absent.json")
    (tmp_path / "x.json").write_text("{oops")
    with pytest.raises(TableError, match="not valid JSON"):
        TuningTable.load(tmp_path / "x.json")
    TuningTable("NVIDIA H100", 132, 512, {(8, 8): ([(8, 1)], [4])}).save(tmp_path / "h100.json")
    with pytest.raises(TableError, match="the table is for 'NVIDIA H100', this GPU is 'NVIDIA H200'"):
        TuningTable.load(tmp_path / "h100.json", gpu="NVIDIA H200")


def test_sample_points_span_the_shapes():
    from event_tensor.tuner import sample_points

    shapes = [(2048, 2048), (8192, 2048), (151936, 1024)]
    fixed = sample_points(shapes, rows=[8], unrolls=[4], capacity=132, ks=[1024], max_waves=3)
    assert sorted({t for _, _, t, _ in fixed}) == [1, 66, 132, 133, 198, 264, 265, 330, 396]
    auto = sample_points(shapes, rows=[8, 64], unrolls=[4], capacity=132, ks=None, max_waves=None)
    # 8-row tiles of the 151936-row LM head need 144 waves: ends of waves 6, 12, ..., 96 and 144 are sampled.
    eights = sorted({t for r, _, t, _ in auto if r == 8})
    assert [t // 132 for t in eights if t > 396] == [6, 12, 24, 48, 96, 144]
    # 64-row tiles need 18 waves.
    assert max(t for r, _, t, _ in auto if r == 64) == 18 * 132
    # The shapes' own K (two distinct ones here).
    assert sorted({k for *_, k in auto}) == [1024, 2048]
    many = [(64, k) for k in (256, 512, 1024, 2048, 4096)]
    assert sorted({k for *_, k in sample_points(many, rows=[8], unrolls=[4], capacity=4, ks=None,
                                                 max_waves=None)}) == [256, 1024, 4096]


def test_tune_end_to_end_on_host_workers(tmp_path, capsys):
    """`event-tensor tune` on the CPU target: sample kernels built with the
    bindings, measured on host workers, models fitted, the table validated,
    and every entry one of the candidates."""
    from event_tensor.cli import main

    out = tmp_path / "table.json"
    assert main(["tune", "--device", "cpu", "--workers", "2", "--shapes", "64x256,128x512", "--m-max", "4",
                 "--sampling", "waves", "--rows", "8,16", "--ks", "256,1024", "--ms", "1,2", "--waves", "2", "--dir",
                 str(tmp_path / "work"), "-o", str(out)]) == 0
    table = TuningTable.load(out)
    assert table.gpu.startswith("cpu") and set(table.linear) == {(64, 256), (128, 512)}
    for m in range(1, 5):
        cfg = table.lookup(128, 512, m)
        assert cfg.rows in (8, 16) and cfg.split_k == 1 and cfg.unroll in (4, 8)
    samples = json.loads((tmp_path / "work" / "samples.json").read_text())["samples"]
    assert len(samples) == 2 * 2 * 4 * 2 * 2 and all(s["seconds"] > 0 for s in samples)
    # Host workers have one row group: trips counted with warps = 1.
    assert json.loads((tmp_path / "work" / "plan.json").read_text())["warps"] == 1
    s0 = samples[0]
    cfg = LinearConfig(s0["rows"], s0["split_k"], s0["unroll"])
    assert (s0["tiles"], s0["trips"]) == linear_problem(s0["m"], s0["n"], s0["k"], cfg, 1)
    # One step at a time gives the same files; bad shapes are refused.
    assert main(["tune", "--step", "fit", "--dir", str(tmp_path / "work"), "-o", str(tmp_path / "again.json"),
                 "--shapes", "64x256"]) == 0
    assert main(["tune", "--device", "cpu", "--shapes", "64by256", "--dir", str(tmp_path / "w2")]) == 2
    assert main(["tune", "--device", "cpu", "--shapes", "64x256", "--waves", "many", "--dir",
                 str(tmp_path / "w3")]) == 2
    assert "--waves must be positive ints or 'auto', got 'many'" in capsys.readouterr().err
    # Sample regimes and K from the shapes.
    assert main(["tune", "--device", "cpu", "--workers", "2", "--shapes", "64x256", "--m-max", "2", "--rows", "8",
                 "--sampling", "waves", "--ks", "auto", "--ms", "1", "--waves", "auto", "--dir", str(tmp_path / "w4"),
                 "-o",
                 str(tmp_path / "auto.json")]) == 0
    plan = json.loads((tmp_path / "w4" / "plan.json").read_text())
    assert {k["k"] for k in plan["kernels"]} == {256}
    # The table sizes a model's linear tiles at compile time.
    assert main(["compile", "tiny-llama", "-o", str(tmp_path / "art"), "--device", "cpu", "--max-context", "16",
                 "--tuning-table", str(out)]) == 0
    assert main(["compile", "tiny-llama", "-o", str(tmp_path / "art2"), "--device", "cpu",
                 "--tuning-table", str(tmp_path / "missing.json")]) == 2


def test_model_compile_takes_rows_from_a_tuning_table(tmp_path):
    """compile_model(tuning_table=...) sizes every linear layer's tiles from
    the table (M = max_batch) and records where each choice came from."""
    from event_tensor import model

    config = model.tiny_config("llama")
    h, i, d = config.hidden_size, config.intermediate_size, config.head_dim
    table = TuningTable("cpu test", 3, 512, {(h, i): ([(8, 1)] * 2, [4] * 2), (i, h): ([(32, 1)] * 2, [4] * 2)})
    path = model.compile_model(config, target="cpu", max_batch=2, max_context=16, workers=3, tuning_table=table,
                               cache_dir=tmp_path)
    info = json.loads((path / "model.json").read_text())["linear_tiles"]
    assert info[f"{h}x{i}"] == {"rows": 8, "source": "table cpu test"}  # down: 64 rows in tiles of 8
    assert info[f"{i}x{h}"]["rows"] == 32  # gate and up
    assert info[f"{config.num_heads * d}x{h}"]["source"].startswith("heuristic")
    meta = json.loads((path / "metadata.json").read_text())
    assert meta["tasks"].count("down") == 1
    # The kernel still computes the model.
    weights = model.random_weights(config, seed=2)
    session = model.DecodeSession(path, weights)
    ref = model.ReferenceModel(config, weights, max_batch=2, max_context=16)
    session.step([3, 4], [0, 0])
    want = ref.step([3, 4], [0, 0])
    assert np.abs(session.last_logits() - want).max() / np.abs(want).max() < 2e-3


def test_batch_variants_are_chosen_per_launch(tmp_path):
    """With batch_variants, one kernel per range of batch sizes whose table
    choices agree; the session picks one per launch by batch size and all
    of them share the caches."""
    from event_tensor import model

    config = model.tiny_config("qwen3")
    h, i = config.hidden_size, config.intermediate_size
    # gate/up: 16 rows per tile at batch 1, 64 at batch 2 and 3.
    table = TuningTable("cpu test", 3, 512, {(i, h): ([(16, 1), (64, 1), (64, 1)], [4] * 3)})
    out = model.compile_model(config, target="cpu", max_batch=3, max_context=16, workers=3, tuning_table=table,
                              batch_variants=True, out_dir=tmp_path / "art", cache_dir=tmp_path / "cache")
    variants = json.loads((out / "variants.json").read_text())["variants"]
    assert [(v["min_batch"], v["max_batch"]) for v in variants] == [(1, 1), (2, 3)]
    weights = model.random_weights(config, seed=5)
    session = model.DecodeSession(out, weights)
    assert session.variant_for(1) != session.variant_for(2) == session.variant_for(3)
    ref = model.ReferenceModel(config, weights, max_batch=3, max_context=16)
    # Sequences 0 and 1 at batch 2, then sequence 0 alone (the other kernel,
    # same caches), then all three.
    for tokens, positions in [([3, 4], [0, 0]), ([5], [1]), ([6, 7, 8], [2, 1, 0])]:
        session.step(tokens, positions)
        want = ref.step(tokens, positions)
        assert np.abs(session.last_logits() - want).max() / np.abs(want).max() < 2e-3
    with pytest.raises(ValueError, match="batch_variants needs a tuning_table"):
        model.compile_model(config, target="cpu", max_batch=2, max_context=16, batch_variants=True,
                            out_dir=tmp_path / "x")


# -- GEMM configurations -------------------------------------------------------

def test_gemm_problem_counts_part_tiles_and_slices():
    from event_tensor.tuning import GemmConfig, gemm_problem

    cfg = GemmConfig((128, 128, 64), 4, 256)
    assert gemm_problem(4096, 2048, 2048, cfg) == (32 * 16, 32)
    assert gemm_problem(100, 2048, 200, cfg) == (16, 4)  # partial blocks and slices
    # Split-K: S part tiles per block, each over ceil(K / S) rounded up to BK.
    split = GemmConfig((128, 128, 64), 4, 256, split_k=4)
    assert gemm_problem(128, 2048, 8192, split) == (16 * 4, 32)
    assert gemm_problem(128, 2048, 200, split) == (16 * 4, 1)


def test_gemm_models_choose_the_fastest_family_and_round_trip(tmp_path):
    """Two families with known wave-structured latencies: a big tile (few
    tiles, slower per tile) and a small one; the fitted models pick the
    truly faster one at points not sampled, and survive save/load."""
    from event_tensor.tuning import GemmConfig, GemmModels, choose_gemm

    big = GemmConfig((128, 256, 64), 4, 256)
    small = GemmConfig((64, 128, 64), 6, 128)
    truth = {big: (30.0, 0.66, 4.0, 0.66, 0.0, 0.0), small: (8.0, 0.30, 3.0, 0.40, 0.0, 0.0)}
    shapes = [(2048, 2048), (4096, 4096), (2048, 8192), (16384, 2048)]
    samples = {cfg: [] for cfg in truth}
    from event_tensor.tuning import gemm_problem
    for cfg, coef in truth.items():
        for n, k in shapes:
            for m in (128, 256, 512, 1024, 2048, 4096):
                samples[cfg].append((m, n, k, float(_truth(*gemm_problem(m, n, k, cfg), coef))))
    models = GemmModels.fit("H200", CAPACITY, samples)
    for m, n, k in [(384, 3072, 2048), (3000, 6144, 4096), (128, 28672, 4096)]:
        times = {cfg: float(_truth(*gemm_problem(m, n, k, cfg), coef)) for cfg, coef in truth.items()}
        assert models.choose(m, n, k) == min(times, key=times.get)
    models.save(tmp_path / "gemm.json")
    loaded = GemmModels.load(tmp_path / "gemm.json", gpu="H200")
    assert loaded.choose(384, 3072, 2048) == models.choose(384, 3072, 2048)
    assert choose_gemm(384, 3072, 2048, models=loaded, workers=CAPACITY)[1] == "models H200"
    cfg, source = choose_gemm(128, 2048, 8192, models=None, workers=CAPACITY)
    assert source == "heuristic: no GEMM models for this GPU"
    assert cfg == GemmConfig((64, 128, 64), 6, 128, split_k=2)
    with pytest.raises(TableError, match="the models are for 'H200', this GPU is 'H100'"):
        GemmModels.load(tmp_path / "gemm.json", gpu="H100")


def test_gemm_choice_is_memoized_per_block_of_m(monkeypatch):
    """The GEMM choice depends on M only through ceil(M / BM) of each
    configuration: `choose` evaluates the configurations once per block of
    gcd(BM) rows and (N, K), answers every M of the block the same as a
    direct search, and evaluates nothing for an M seen before."""
    from event_tensor.tuning import GemmConfig, GemmModels, WaveModel

    coefs = {GemmConfig((128, 256, 64), 4, 256): [30.0, 0.66, 4.0, 0.66, 0.0, 0.0],
             GemmConfig((64, 128, 64), 6, 128): [8.0, 0.30, 3.0, 0.40, 0.0, 0.0],
             GemmConfig((192, 128, 64), 4, 384): [12.0, 0.5, 3.5, 0.5, 0.0, 0.0]}
    models = GemmModels("H200", CAPACITY, {c: WaveModel(CAPACITY, np.asarray(v)) for c, v in coefs.items()})
    calls = []
    predict = GemmModels.predict
    monkeypatch.setattr(GemmModels, "predict", lambda self, *a: calls.append(a) or predict(self, *a))
    shapes = [(2048, 2048), (28672, 4096), (3072, 2048)]
    for n, k in shapes:
        for m in range(1, 1500, 7):
            direct = min(coefs, key=lambda c: predict(models, m, n, k, c))
            assert models.choose(m, n, k) == direct, (m, n, k)
    blocks = len({(n, k, (m - 1) // 64) for n, k in shapes for m in range(1, 1500, 7)})
    assert len(calls) == blocks * len(coefs)  # gcd(128, 64, 192) = 64 rows per block
    calls.clear()
    assert models.choose(701, 28672, 4096) == models.choose(705, 28672, 4096) and not calls
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match=f"GEMM dimension m must be a positive int, got {bad!r}"):
            models.choose(bad, 2048, 2048)


@pytest.mark.parametrize("mutate,message", [
    (lambda d: d.update(format=7), "format 1"),
    (lambda d: d.update(workers=0), "'workers' must be a positive int"),
    (lambda d: d["models"].update({"128x128-s4-t256-wgmma-auto-k1": [0.0] * 6}), "is not a GEMM configuration"),
    (lambda d: d["models"].update({"128x128x64-s4-t256-wmma-auto-k1": [0.0] * 6}), "out-of-range field"),
    (lambda d: d["models"].update({"128x128x64-s4-t256-wgmma-auto-k1": [0.0] * 5}), "6 finite numbers"),
    (lambda d: d.update(models={}), "no GEMM configurations"),
])
def test_corrupt_gemm_models_get_clear_errors(tmp_path, mutate, message):
    from event_tensor.tuning import GemmConfig, GemmModels

    data = {"format": 1, "gpu": "H200", "workers": 132,
            "models": {GemmConfig((64, 128, 64), 6, 128).key(): [1.0, 0.5, 2.0, 0.4, 0.0, 0.0]}}
    assert GemmModels.from_json(json.loads(json.dumps(data))).choose(128, 2048, 2048).tile == (64, 128, 64)
    mutate(data)
    _assert_load_fails(tmp_path, GemmModels, data, message)


def test_shipped_gemm_models_load_and_choose():
    """The H200 models ship with the package, validate, and choose one of
    their configurations; other GPUs have none (the heuristic applies)."""
    from event_tensor.tuning import GemmModels, shipped_gemm_models

    models = shipped_gemm_models("NVIDIA H200")
    assert isinstance(models, GemmModels) and models.workers == 132 and len(models.models) >= 6
    cfg = models.choose(4096, 4096, 4096)
    assert cfg in models.models and cfg.mma in ("wgmma", "sync")
    assert shipped_gemm_models("NVIDIA A100-SXM4-80GB") is None
    h100 = shipped_gemm_models("NVIDIA H100 80GB HBM3")
    assert h100.gpu == "NVIDIA H100 80GB HBM3" and h100.choose(4096, 4096, 4096) in h100.models


def test_linear_candidates_are_fixed_and_wave_sized():
    # 1024 rows on 132 workers: 0.5, 1, 2, 4 tiles per worker take 16, 8, 4, 2 rows per tile.
    assert linear_candidates(1024, 132) == [2, 4, 8, 16, 32, 64]
    lm_head = linear_candidates(151936, 132)
    assert heuristic_linear(151936, 1024, 1, 132).rows in lm_head and max(lm_head) == 2303  # ceil(151936 / 66)
    assert linear_candidates(20, 132, rows=(8, 16, 32), tiles_per_worker=(1,)) == [1, 8, 16]
    with pytest.raises(ValueError, match="tiles per worker must be positive, got 0"):
        linear_candidates(64, 4, tiles_per_worker=(0,))


def _samples(curves, ms):
    """Samples of (n, k, rows, unroll) -> latency(m) at the given M."""
    return [{"n": n, "k": k, "rows": r, "split_k": 1, "unroll": u, "m": m, "seconds": f(m)}
            for (n, k, r, u), f in curves.items() for m in ms]


def test_table_from_samples_interpolates_in_m():
    # Two configurations whose latencies cross at M = 6: a fixed cost
    # against a steeper growth per token.
    curves = {(256, 512, 8, 4): lambda m: 10.0 + 1.0 * m, (256, 512, 32, 8): lambda m: 4.0 + 2.0 * m,
              (256, 512, 64, 4): lambda m: 20.0 + 2.0 * m}
    table = table_from_samples("gpu x", 4, 512, _samples(curves, [1, 2, 4, 8, 16]), 16)
    picks = [table.lookup(256, 512, m) for m in range(1, 17)]
    assert picks[:5] == [LinearConfig(32, 1, 8)] * 5  # M 1..5, M 3 and 5 interpolated
    assert picks[6:] == [LinearConfig(8, 1, 4)] * 10  # M 7..16
    # Exhaustively, at every M, the pick is the fastest of the true curves.
    for m, cfg in enumerate(picks, start=1):
        assert curves[(256, 512, cfg.rows, cfg.unroll)](m) == min(f(m) for f in curves.values())
    # The measured M must span 1..m_max for every configuration.
    with pytest.raises(ValueError, match=r"shape 256x512, rows 8 / unroll 4: samples at M = \[2, 4\] do not "
                                         r"span 1..4"):
        table_from_samples("gpu x", 4, 512, _samples(curves, [2, 4]), 4)
    with pytest.raises(ValueError, match="no samples"):
        table_from_samples("gpu x", 4, 512, [], 4)


def test_shipped_linear_tables_load_and_cover_the_presets():
    """The H200 and H100 tables ship with the package, validate, hold every
    linear shape of the three presets for M 1..16 (et.linear) and 1..512
    (et.matmul), and choose among the tuner's candidates; a GPU name
    without a table gets a clear error."""
    from event_tensor.tuner import model_shapes

    gpus = shipped_gpus("linear")
    assert {"NVIDIA H200", "NVIDIA H100 80GB HBM3"} <= set(gpus)
    shapes = set(model_shapes(["llama-3.2-1b", "qwen3-0.6b", "llama-3.1-8b"]))
    for gpu in gpus:
        table = shipped_linear_table(gpu)
        assert table.gpu == gpu and set(table.linear) == shapes and table.workers == 132
        for n, k in shapes:
            for m in (1, 7, 16):
                cfg = table.lookup(n, k, m)
                assert cfg.rows in linear_candidates(n, 132) and cfg.unroll in (4, 8) and cfg.split_k == 1
            # et.matmul entries for M 1..512, among the GEMM candidates;
            # the tile of each M is one of the two kinds.
            from event_tensor.tuning import gemm_candidates

            assert len(table.gemm[(n, k)][1]) == 512
            for m in (1, 16, 17, 100, 512):
                assert table.lookup_gemm(n, k, m) in gemm_candidates(n, k)
                kind, cfg = table.lookup_tile(n, k, m)
                assert kind == "gemm" or (m <= 16 and cfg == table.lookup(n, k, m))
    assert load_linear_table("NVIDIA H200").gpu == "NVIDIA H200"
    assert shipped_linear_table("NVIDIA A100-SXM4-80GB") is None
    with pytest.raises(TableError, match="no tuning table file 'NVIDIA A100', and no table ships for a GPU of "
                                         "that name \\(shipped: .*'NVIDIA H200'"):
        load_linear_table("NVIDIA A100")


def test_tune_at_the_shapes_on_host_workers(tmp_path, capsys):
    """`event-tensor tune --sampling shapes` (the default): every candidate
    at the shapes' own N and K, measured at M 1, 2, 4, and a table whose
    entries are the fastest measured candidates at those M."""
    from event_tensor.cli import main

    out = tmp_path / "table.json"
    assert main(["tune", "--device", "cpu", "--workers", "2", "--shapes", "64x256,128x512", "--m-max", "4",
                 "--rows", "8,16", "--tiles-per-worker", "1", "--dir", str(tmp_path / "w"), "-o", str(out)]) == 0
    plan = json.loads((tmp_path / "w" / "plan.json").read_text())
    assert plan["sampling"] == "shapes" and plan["ms"] == [1, 2, 4]
    assert {(k["n"], k["k"], k["rows"]) for k in plan["kernels"]} == {
        (64, 256, 8), (64, 256, 16), (64, 256, 32), (128, 512, 8), (128, 512, 16), (128, 512, 64)}
    samples = json.loads((tmp_path / "w" / "samples.json").read_text())["samples"]
    assert len(samples) == 6 * 2 * 3
    table = TuningTable.load(out)
    for m in (1, 2, 4):
        for n, k in ((64, 256), (128, 512)):
            at = {(s["rows"], s["unroll"]): s["seconds"] for s in samples if (s["n"], s["k"], s["m"]) == (n, k, m)}
            cfg = table.lookup(n, k, m)
            assert at[(cfg.rows, cfg.unroll)] == min(at.values())
    assert main(["tune", "--device", "cpu", "--shapes", "64x256", "--ms", "2,4", "--m-max", "4", "--dir",
                 str(tmp_path / "w2")]) == 2
    assert "the measured M ([2, 4]) must include 1 and reach m_max = 4" in capsys.readouterr().err
    assert main(["tune", "--device", "cpu", "--shapes", "64x256", "--tiles-per-worker", "0", "--dir",
                 str(tmp_path / "w3")]) == 2
    assert "--tiles-per-worker must be positive numbers, got '0'" in capsys.readouterr().err


def test_model_compile_takes_a_shipped_table_by_gpu_name(tmp_path):
    """compile_model(tuning_table="NVIDIA H200") uses the shipped table; a
    tiny model's shapes are not in it, so every layer falls back to the
    heuristic and says so."""
    from event_tensor import model

    config = model.tiny_config("llama")
    path = model.compile_model(config, target="cpu", max_batch=1, max_context=16, workers=3,
                               tuning_table="NVIDIA H200", cache_dir=tmp_path)
    info = json.loads((path / "model.json").read_text())["linear_tiles"]
    assert info and all(v["source"].startswith("heuristic: ") for v in info.values())


# -- tables over M 1..512: et.linear and et.matmul tiles ----------------------

def _gemm_samples(n, k, truths, m_max):
    """GEMM samples at each configuration's block ends (gemm_sample_ms)."""
    from event_tensor.tuning import gemm_sample_ms

    return [{"kind": "gemm", "config": cfg.key(), "n": n, "k": k, "m": m, "seconds": f(m)}
            for cfg, f in truths.items() for m in gemm_sample_ms(cfg, m_max)]


def test_gemm_sample_points_and_curves_follow_the_blocks_of_bm():
    """A GEMM configuration's tiles change only at multiples of BM: it is
    measured at 1 and at each block's end, and predicted per block (linear
    between the measured M inside a block, flat past them); 16-row tiles
    stop at GEMM_SMALL_TILE_M_MAX."""
    from event_tensor.tuning import GEMM_SMALL_TILE_M_MAX, GemmConfig, gemm_curve, gemm_sample_ms

    big, small = GemmConfig((128, 128, 64), 4, 256), GemmConfig((16, 64, 128), 4, 256, "sync")
    assert gemm_sample_ms(big, 512) == [1, 128, 256, 384, 512]
    assert gemm_sample_ms(big, 300) == [1, 128, 256, 300]
    assert gemm_sample_ms(small, 512) == [1, 16, 32, 48, GEMM_SMALL_TILE_M_MAX]
    curve = gemm_curve(big, {1: 2.0, 128: 4.0, 256: 10.0, 300: 12.0}, 300, "here")
    assert len(curve) == 300
    assert curve[0] == 2.0 and curve[127] == 4.0 and curve[63] == pytest.approx(2.0 + 2.0 * 63 / 127)
    assert curve[128:256] == [10.0] * 128 and curve[256:] == [12.0] * 44  # one tile count per block
    with pytest.raises(ValueError, match=r"here: no sample at M = 256, the end of rows 129..256 \(measured at "
                                         r"\[1, 128, 300\]\)"):
        gemm_curve(big, {1: 2.0, 128: 4.0, 300: 12.0}, 300, "here")


def test_table_chooses_between_linear_and_gemm_tiles(tmp_path):
    """With GEMM samples the table covers M 1..m_max: at each M the tile
    predicted fastest, et.linear only up to LINEAR_M_MAX; the choice
    round-trips through JSON and is the argmin of the true curves at every
    M (the truths are flat within a GEMM block, as the hardware is)."""
    from event_tensor.tuning import LINEAR_M_MAX, GemmConfig, choose_tile

    n, k, m_max = 2048, 2048, 200
    lin = {(n, k, 32, 4): lambda m: 5.0 + 1.0 * m, (n, k, 16, 8): lambda m: 3.0 + 0.5 * m}
    g64 = GemmConfig((64, 128, 64), 6, 128)
    g128 = GemmConfig((128, 128, 64), 4, 256)
    g16 = GemmConfig((16, 64, 128), 4, 256, "sync")
    truths = {g64: lambda m: 9.0 + 6.0 * ((m + 63) // 64), g128: lambda m: 20.0 + 2.0 * ((m + 127) // 128),
              g16: lambda m: 4.0 + 2.0 * ((m + 15) // 16)}
    samples = _samples(lin, [1, 2, 4, 8, 16]) + _gemm_samples(n, k, truths, m_max)
    table = table_from_samples("gpu x", CAPACITY, 512, samples, m_max)
    path = tmp_path / "t.json"
    table.save(path)
    loaded = TuningTable.load(path)
    for m in range(1, m_max + 1):
        kind, cfg = loaded.lookup_tile(n, k, m)
        assert (kind, cfg) == table.lookup_tile(n, k, m)
        options = {("gemm", c): f(m) for c, f in truths.items() if m <= (64 if c.tile[0] == 16 else m_max)}
        if m <= LINEAR_M_MAX:
            options.update({("linear", LinearConfig(r, 1, u)): f(m) for (_, _, r, u), f in lin.items()})
        assert options[(kind, cfg)] == min(options.values()), m
    # Where each kind wins: et.linear up to 6 tokens (a tie at 6), 16-row
    # GEMM tiles to their limit of 64, 64-row tiles to 128, then 128-row.
    assert [loaded.lookup_tile(n, k, m)[0] for m in (1, 6, 7)] == ["linear", "linear", "gemm"]
    assert loaded.lookup_tile(n, k, 3) == ("linear", LinearConfig(16, 1, 8))
    assert loaded.lookup_tile(n, k, 10) == loaded.lookup_tile(n, k, 64) == ("gemm", g16)
    assert loaded.lookup_tile(n, k, 65) == loaded.lookup_tile(n, k, 128) == ("gemm", g64)
    assert loaded.lookup_tile(n, k, 129) == ("gemm", g128)
    assert loaded.lookup_gemm(n, k, 3) == g16 and loaded.lookup(n, k, 12) == LinearConfig(16, 1, 8)
    assert choose_tile(n, k, 150, table=loaded, workers=CAPACITY) == ("gemm", g128, "table gpu x")
    kind, cfg, source = choose_tile(n, k, 201, table=loaded, workers=CAPACITY)
    assert kind == "gemm" and "M = 201 is outside the table's range [1, 200] for 2048x2048" in source
    kind, cfg, source = choose_tile(n, k, 4, table=None, workers=CAPACITY)
    assert (kind, cfg) == ("linear", heuristic_linear(n, k, 4, CAPACITY)) and source.startswith("heuristic")
    with pytest.raises(KeyError, match="GEMM range"):
        loaded.lookup_gemm(n, k, 300)
    with pytest.raises(ValueError, match="dimension m must be a positive int, got 0"):
        choose_tile(n, k, 0, table=loaded, workers=CAPACITY)
    # A table past LINEAR_M_MAX needs GEMM samples for every shape.
    with pytest.raises(ValueError, match=r"M up to 40 needs GEMM samples .* none for 2048x2048"):
        table_from_samples("gpu x", CAPACITY, 512, _samples(lin, [1, 2, 4, 8, 16]), 40)


def _good_gemm_table():
    return {"format": 1, "gpu": "G", "workers": 132, "threads": 512,
            "linear": {"2048x8192": {"macro": [[16, 1], [16, 1]], "micro": [4, 8], "seconds": [1e-5, 2e-5]}},
            "gemm": {"2048x8192": {"configs": ["64x128x64-s6-t128-wgmma-auto-k1", "16x64x128-s4-t256-sync-auto-k1"],
                                   "choice": [1, 1, 0], "seconds": [1e-5, 1e-5, 3e-5]}}}


@pytest.mark.parametrize("mutate,message", [
    (lambda d: d.update(gemm=[1]), "'gemm' must map NxK shapes"),
    (lambda d: d["gemm"].update({"2048by8192": d["gemm"]["2048x8192"]}), "GEMM shape '2048by8192' is not NxK"),
    (lambda d: d["gemm"]["2048x8192"].pop("seconds"), "needs 'configs', 'choice' and 'seconds' lists"),
    (lambda d: d["gemm"]["2048x8192"]["configs"].__setitem__(0, "64x128"), "is not a GEMM configuration"),
    (lambda d: d["gemm"]["2048x8192"]["configs"].clear(), "'configs' must be a non-empty list"),
    (lambda d: d["gemm"]["2048x8192"]["choice"].__setitem__(2, 2), r"'choice' must index 'configs' \(0..1\)"),
    (lambda d: d["gemm"]["2048x8192"]["seconds"].pop(), "GEMM 2048x8192: 'seconds' must be 3 positive numbers"),
    (lambda d: d["linear"]["2048x8192"]["seconds"].__setitem__(0, -1.0), "linear 2048x8192: 'seconds' must be 2"),
    (lambda d: d["gemm"]["2048x8192"].update(choice=[0], seconds=[1e-5]), "covers more M than its GEMM entry"),
])
def test_corrupt_gemm_tables_get_clear_errors(tmp_path, mutate, message):
    TuningTable.from_json(_good_gemm_table())
    data = _good_gemm_table()
    mutate(data)
    _assert_load_fails(tmp_path, TuningTable, data, message)


def test_gemm_candidates_fit_the_shape():
    from event_tensor.tuning import gemm_candidates

    cands = gemm_candidates(2048, 8192)
    assert len(cands) == len(set(cands)) == 12
    assert {c.tile[2] for c in cands if c.tile[0] == 16} == {128}
    assert {c.tile[2] for c in gemm_candidates(2048, 1000) if c.tile[0] == 16} == {64}
    # Split K needs N % 4 == 0 and a BK slice per part.
    assert all(c.split_k == 1 for c in gemm_candidates(2050, 8192))
    assert {c.split_k for c in gemm_candidates(2048, 128)} == {1, 2}


def test_tune_with_gemm_on_host_workers(tmp_path, capsys):
    """`event-tensor tune --gemm --m-max 40`: et.linear candidates at M 1..16
    and every GEMM candidate at its block ends, on host workers; the
    table's tile at each measured M is the fastest measured there."""
    from event_tensor.cli import main
    from event_tensor.tuning import GemmConfig, gemm_candidates

    out = tmp_path / "table.json"
    assert main(["tune", "--device", "cpu", "--workers", "2", "--shapes", "64x256", "--m-max", "40", "--gemm",
                 "--rows", "8", "--tiles-per-worker", "1", "--dir", str(tmp_path / "w"), "-o", str(out)]) == 0
    assert "1 shapes x M 1..40 (16 et.linear entries, 40 et.matmul entries)" in capsys.readouterr().out
    plan = json.loads((tmp_path / "w" / "plan.json").read_text())
    gemm = [k for k in plan["kernels"] if k["kind"] == "gemm"]
    assert {k["config"] for k in gemm} == {c.key() for c in gemm_candidates(64, 256)}
    assert plan["ms"] == [1, 2, 4, 8, 16]
    samples = json.loads((tmp_path / "w" / "samples.json").read_text())["samples"]
    table = TuningTable.load(out)
    for m in (1, 40):  # measured for every candidate alive there
        at = {}
        for s in samples:
            if s["m"] == m:
                key = ("gemm", GemmConfig.from_key(s["config"])) if s["kind"] == "gemm" else \
                    ("linear", LinearConfig(s["rows"], 1, s["unroll"]))
                at[key] = s["seconds"]
        assert at[table.lookup_tile(64, 256, m)] == min(at.values())
    assert main(["tune", "--device", "cpu", "--shapes", "64x256", "--m-max", "40", "--dir",
                 str(tmp_path / "w2")]) == 2
    assert "et.linear serves at most 16 tokens: m_max = 40 needs the GEMM candidates too" in capsys.readouterr().err
