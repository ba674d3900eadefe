"""Models with experts (Qwen3-MoE) on CPU workers: the config and weights
of a tiny model that transformers builds and saves, the numpy reference
against transformers in float32, and the compiled kernel (routing and the
chosen experts inside it) against the reference, batched and teacher-forced;
the router's edge cases (every row to one expert, every expert used, ties);
configs the kernel refuses."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from event_tensor import model
from event_tensor.model.config import ConfigError, tp_config
from event_tensor.model.weights import BF16, pack

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from hf_models import hf_model  # noqa: E402


def _rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A tiny Qwen3-MoE checkpoint written by transformers' save_pretrained
    (its config.json and safetensors names), random weights."""
    root = tmp_path_factory.mktemp("qwen3moe")
    ours = model.tiny_moe_config()
    hf_cfg = transformers.Qwen3MoeConfig(**{k: v for k, v in ours.to_hf().items()
                                            if k not in ("architectures", "model_type", "torch_dtype")})
    torch.manual_seed(0)
    hf = transformers.Qwen3MoeForCausalLM(hf_cfg)
    with torch.no_grad():
        for p in hf.parameters():  # norms around 1, matrices scaled as random_weights does
            p.copy_(1 + 0.1 * torch.randn_like(p) if p.dim() == 1 else torch.randn_like(p) / p.shape[-1] ** 0.5)
    hf.to(torch.bfloat16).save_pretrained(root)
    return root


def test_config_and_weights_of_a_transformers_checkpoint(checkpoint):
    config = model.ModelConfig.from_hf(checkpoint)
    assert config.moe and config.num_experts == 8 and config.num_experts_per_tok == 2
    assert config.moe_intermediate_size == 32 and config.norm_topk_prob
    assert config.architecture == "Qwen3MoeForCausalLM"
    weights = model.load_weights(config, [checkpoint])
    packed = pack(config, weights)
    L, E, H, Im = config.num_layers, 8, config.hidden_size, 32
    assert packed["router"].shape == (L, E, H) and packed["exp_gate"].shape == (L, E, Im, H)
    assert packed["exp_down"].shape == (L, E, H, Im) and "wg" not in packed
    e = 5
    assert np.array_equal(packed["exp_up"][1, e], weights[f"model.layers.1.mlp.experts.{e}.up_proj.weight"])
    # The config survives to_hf / from_hf and model.json's dict form.
    assert model.ModelConfig.from_hf(config.to_hf()) == config
    assert model.ModelConfig.from_dict(config.to_dict()) == config


def test_reference_matches_transformers_float32(checkpoint):
    config = model.ModelConfig.from_hf(checkpoint)
    weights = model.load_weights(config, [checkpoint])
    hf = hf_model(config, {k: torch.from_numpy(np.asarray(v).astype(np.float32)) for k, v in weights.items()},
                  device="cpu")
    ref = model.ReferenceModel(config, weights, max_batch=1, max_context=16, bf16_activations=False)
    tokens = [3, 100, 7, 250, 42, 9]
    with torch.no_grad():
        want = hf(torch.tensor([tokens])).logits[0].numpy()
    got = np.stack([ref.step([t], [p])[0] for p, t in enumerate(tokens)])
    assert _rel(got, want) < 1e-4


def test_transformers_model_holds_the_weights_once(checkpoint):
    """hf_model builds the model without storage and gives it the weights'
    own tensors: no random float32 copy beside them (Qwen3-30B-A3B's 61 GB
    and such a copy do not fit one GPU), and no tensor left without data."""
    config = model.ModelConfig.from_hf(checkpoint)
    weights = model.load_weights(config, [checkpoint])
    tensors = {k: torch.from_numpy(np.asarray(v).astype(np.float32)) for k, v in weights.items()}
    name = "model.layers.0.self_attn.q_proj.weight"
    given = tensors[name]
    hf = hf_model(config, tensors, device="cpu")
    assert hf.get_parameter(name).data_ptr() == given.data_ptr()
    assert not any(t.is_meta for t in [*hf.parameters(), *hf.buffers()])


@pytest.fixture(scope="module")
def compiled(checkpoint, tmp_path_factory):
    config = model.ModelConfig.from_hf(checkpoint)
    weights = model.load_weights(config, [checkpoint])
    root = tmp_path_factory.mktemp("moe-kernel")
    path = model.compile_model(config, target="cpu", max_batch=4, max_context=32, workers=3, split_len=8,
                               cache_dir=root / "cache")
    return config, weights, path


def test_kernel_matches_reference_batched_and_teacher_forced(compiled):
    config, weights, path = compiled
    session = model.DecodeSession(path, weights)
    ref = model.ReferenceModel(config, weights, max_batch=4, max_context=32)
    rng = np.random.default_rng(1)
    positions = np.zeros(4, np.int64)
    for step in range(6):
        rows = [4, 3, 1, 4, 2, 4][step]
        tokens = rng.integers(0, config.vocab_size, rows).tolist()
        pos = positions[:rows].tolist()
        got = session.step(tokens, pos)
        want = ref.step(tokens, pos)
        assert _rel(session.last_logits(), want) < 2e-3, step
        top2 = np.sort(want, axis=-1)[:, -2:]
        clear = (top2[:, 1] - top2[:, 0]) > 1e-3 * np.abs(want).max()
        assert np.array_equal(got[clear], want.argmax(-1)[clear])
        positions[:rows] += 1
    session.close()


def test_rows_alone_and_together_give_the_same_tokens(compiled):
    """Rows routed to different experts in one launch compute what each
    computes alone (no row reads another's expert output)."""
    config, weights, path = compiled
    session = model.DecodeSession(path, weights)
    together, _ = session.generate_stepwise([[1, 2, 3], [40, 50, 60], [7, 7, 7]], steps=5)
    for i, prompt in enumerate([[1, 2, 3], [40, 50, 60], [7, 7, 7]]):
        session.reset()
        alone, _ = session.generate_stepwise([prompt], steps=5)
        assert np.array_equal(alone[0], together[i])
    session.close()


def _with_router(config, router):
    weights = model.random_weights(config, seed=5)
    for layer in range(config.num_layers):
        weights[f"model.layers.{layer}.mlp.gate.weight"] = router(layer).astype(BF16)
    return weights


def _router_case(tmp_path, config, router, tokens):
    """The kernel against the reference, one step of `tokens` at position
    0, with the router's weights replaced by `router(layer)` ([E, H]);
    returns the reference and the experts each row chose in layer 0."""
    weights = _with_router(config, router)
    rows = len(tokens)
    path = model.compile_model(config, target="cpu", max_batch=rows, max_context=8, workers=2,
                               cache_dir=tmp_path / "cache")
    session = model.DecodeSession(path, weights)
    ref = model.ReferenceModel(config, weights, max_batch=rows, max_context=8)
    session.step(tokens, [0] * rows)
    assert _rel(session.last_logits(), ref.step(tokens, [0] * rows)) < 2e-3
    session.close()
    return ref, ref.routes[0]


def test_router_edge_cases(tmp_path):
    config = model.tiny_moe_config()
    E, H = config.num_experts, config.hidden_size
    rng = np.random.default_rng(2)
    # Every row to the same two experts (the same token in every row):
    # each of those experts' tiles serves every position.
    _router_case(tmp_path / "one", config, lambda layer: rng.standard_normal((E, H)), [9, 9, 9])
    # Ties: every score equal; the smaller indices win (0 and 1), halves.
    _, ids = _router_case(tmp_path / "ties", config, lambda layer: np.zeros((E, H), np.float32), [5, 6, 7])
    assert ids.tolist() == [[0, 1]] * 3
    # Every expert used: 4 rows x 2 choices over 8 experts (the first
    # router seed whose layer-0 routing of these tokens, by the reference,
    # is a permutation of the experts).
    tokens = [11, 22, 33, 44]
    for seed in range(500):
        router = np.random.default_rng(seed).standard_normal((E, H))
        ref = model.ReferenceModel(config, _with_router(config, lambda layer: router), max_batch=4, max_context=8)
        ref.step(tokens, [0] * 4)
        if sorted(ref.routes[0].ravel().tolist()) == list(range(E)):
            break
    _, ids = _router_case(tmp_path / "all", config, lambda layer: router, tokens)
    assert sorted(ids.ravel().tolist()) == list(range(E))


def test_router_weights_without_renormalizing(tmp_path):
    config = model.tiny_moe_config(norm_topk_prob=False)
    ref, _ = _router_case(tmp_path, config, lambda layer: np.random.default_rng(9).standard_normal(
        (config.num_experts, config.hidden_size)) * 0.3, [3, 4])
    _, w = ref.route(0, np.ones((2, config.hidden_size), np.float32))
    assert (w.sum(axis=-1) < 1).all()


def test_moe_configs_refused(tmp_path):
    hf = model.tiny_moe_config().to_hf()
    for change, match in [({"mlp_only_layers": [1]}, "dense MLP layers"),
                          ({"decoder_sparse_step": 2}, "dense MLP layers"),
                          ({"num_experts_per_tok": 9}, "num_experts_per_tok"),
                          ({"moe_intermediate_size": 12}, "moe_intermediate_size"),
                          ({"shared_expert_intermediate_size": 64}, "shared experts"),
                          ({"num_experts": 0}, "num_experts")]:
        with pytest.raises(ConfigError, match=match):
            model.ModelConfig.from_hf({**hf, **change})
    config = model.tiny_moe_config()
    with pytest.raises(ConfigError, match="tensor parallelism"):
        tp_config(config, 2)
    with pytest.raises(ValueError, match="no prefill kernel"):
        model.compile_model(config, target="cpu", max_batch=1, max_context=8, prefill_rows=4,
                            cache_dir=tmp_path / "cache")
    (tmp_path / "config.json").write_text(json.dumps(hf))
    assert model.ModelConfig.from_hf(tmp_path).moe


@pytest.mark.parametrize("options", [dict(layered=True, o_per_head=True), dict(layered=True, linear_tile="mma"),
                                     dict(layered=True, o_per_head=True, expert_combine=False)])
def test_layered_kernels_match_reference(checkpoint, tmp_path, options):
    """The layered kernel (one task per kind over the layers, as the GPU
    builds it), with o_per_head, tensor-core tiles, or the experts' shares
    added into h by the `exp_down` tiles (no `combine` task, as on cuda)."""
    config = model.ModelConfig.from_hf(checkpoint)
    weights = model.load_weights(config, [checkpoint])
    path = model.compile_model(config, target="cpu", max_batch=3, max_context=16, workers=3, split_len=8,
                               cache_dir=tmp_path / "cache", **options)
    kinds = {t.rstrip("0123456789").rstrip("_") for t in json.loads((path / "metadata.json").read_text())["tasks"]}
    assert ("combine" in kinds) == options.get("expert_combine", True)
    session = model.DecodeSession(path, weights)
    ref = model.ReferenceModel(config, weights, max_batch=3, max_context=16)
    for step, rows in enumerate([3, 2, 3]):
        tokens = [(17 * step + 5 * r) % config.vocab_size for r in range(rows)]
        session.step(tokens, [step] * rows)
        assert _rel(session.last_logits(), ref.step(tokens, [step] * rows)) < 2e-3, step
    session.close()


def test_one_row_kernel_works_on_positions(checkpoint, tmp_path):
    """A kernel of one row: the expert tiles of its K positions, each
    choosing its row's experts itself."""
    config = model.ModelConfig.from_hf(checkpoint)
    weights = model.load_weights(config, [checkpoint])
    path = model.compile_model(config, target="cpu", max_batch=1, max_context=16, workers=3,
                               cache_dir=tmp_path / "cache")
    kinds = {t.rstrip("0123456789").rstrip("_") for t in json.loads((path / "metadata.json").read_text())["tasks"]}
    assert {"moe_norm", "router", "experts", "exp_down", "combine"} <= kinds and "topk" not in kinds
    session = model.DecodeSession(path, weights)
    ref = model.ReferenceModel(config, weights, max_batch=1, max_context=16)
    for step, token in enumerate([3, 99, 250, 7]):
        session.step([token], [step])
        assert _rel(session.last_logits(), ref.step([token], [step])) < 2e-3, step
    session.close()


@pytest.mark.parametrize("rows", [1, 3])
def test_router_through_its_norm_matches_reference(checkpoint, tmp_path, rows):
    """norm_in_linear's "router" kind: the router reads h through its norm
    (no `moe_norm` phase; `topk` writes the experts' rows); the reference
    rounds its input the same way. One-row cuda kernels take it by
    default, kernels of several rows do not; the router's first tile writes
    the experts' rows."""
    config = model.ModelConfig.from_hf(checkpoint)
    weights = model.load_weights(config, [checkpoint])
    path = model.compile_model(config, target="cpu", max_batch=rows, max_context=16, workers=3,
                               norm_in_linear=["router"], cache_dir=tmp_path / "cache")
    kinds = {t.rstrip("0123456789").rstrip("_") for t in json.loads((path / "metadata.json").read_text())["tasks"]}
    assert "moe_norm" not in kinds
    session = model.DecodeSession(path, weights)
    ref = model.ReferenceModel(config, weights, max_batch=rows, max_context=16, norm_in_linear=["router"])
    for step in range(3):
        tokens = [(31 * step + 7 * r) % config.vocab_size for r in range(rows)]
        session.step(tokens, [step] * rows)
        assert _rel(session.last_logits(), ref.step(tokens, [step] * rows)) < 2e-3, step
    session.close()
    out = model.compile_model(config, target="cuda", max_batch=rows, max_context=16, workers=8,
                              out_dir=tmp_path / "cuda", cache_dir=tmp_path / "cache")
    options = model.KernelOptions.from_dict(json.loads((out / "model.json").read_text()))
    assert ("router" in options.norm_tasks) == (rows == 1)
    assert options.expert_combine is False  # cuda: exp_down adds into h


@pytest.mark.parametrize("layered", [False, True])
def test_every_event_count_is_known_before_the_launch(layered):
    """The routing decides which weights the expert tiles read, never how
    many tiles signal: the event graph analysis finds no count that only
    the device knows (docs/models.md, "Mixture of experts")."""
    from event_tensor import analysis
    from event_tensor.ir import Context
    from event_tensor.model.builder import build_decode_kernel, kernel_layout

    config = model.tiny_moe_config()
    layout = kernel_layout(config, max_batch=4, max_context=32, workers=8)
    with Context():
        graph = analysis.event_graph(build_decode_kernel(config, layout, layered=layered))
    kinds = {e["name"]: e["count_kind"] for e in graph["events"]}
    assert kinds and "device" not in kinds.values(), kinds
    tasks = {t["name"].rstrip("0123456789").rstrip("_") for t in graph["tasks"]}
    assert {"router", "experts", "exp_down", "combine"} <= tasks and "topk" not in tasks
