"""Decoder-only model configurations (Llama-3 and Qwen3 families, Qwen3's
mixture-of-experts form among them) read from
Hugging Face `config.json` files, with the checks that keep a wrong config
from compiling into a silently wrong kernel. No MLIR here."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

__all__ = ["ConfigError", "ModelConfig", "ARCHITECTURES", "PRESETS", "tiny_config", "tiny_moe_config", "demo_config",
           "preset", "tp_config"]

#: Hugging Face architectures and the family each belongs to.
ARCHITECTURES = {"LlamaForCausalLM": "llama", "Qwen3ForCausalLM": "qwen3", "Qwen3MoeForCausalLM": "qwen3"}

#: The architecture of a config that names none, by its `model_type` (what
#: `PretrainedConfig.save_pretrained` writes without a model class).
MODEL_TYPES = {"llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM"}

#: `hidden_act` values that are SiLU in transformers' activation table.
SILU_NAMES = ("silu", "swish")

#: The head dimensions the decode attention tiles serve: a multiple of the
#: 32 lanes of a warp (et.attention_split's verifier).
HEAD_DIM_MULTIPLE = 32


#: The largest vocabulary: token ids are int32, and 2^31 - 1 is the id a
#: row without a token reads (its logits were not finite).
MAX_VOCAB_SIZE = 2**31 - 2
#: The largest hidden / intermediate size, layer and head count accepted
#: (far above any model; a bound so that sizes derived from them fit the
#: kernels' 64-bit buffer sizes).
MAX_DIMENSION = 2**20


class ConfigError(ValueError):
    """A model config that cannot be compiled (names the field and value)."""


@dataclass(frozen=True)
class ModelConfig:
    family: str  # "llama" or "qwen3"
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    rms_norm_eps: float
    rope_theta: float
    #: Llama-3 frequency scaling: (factor, low_freq_factor, high_freq_factor,
    #: original_max_position_embeddings), or None.
    rope_scaling: tuple[float, float, float, float] | None = None
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 8192
    architecture: str = field(default="", compare=False)
    #: Mixture of experts (Qwen3-MoE): every layer's MLP is `num_experts`
    #: gated MLPs of `moe_intermediate_size`, of which a router picks
    #: `num_experts_per_tok` per token, weighted by their softmax
    #: probabilities (renormalized over the chosen with
    #: `norm_topk_prob`). 0 experts: a dense MLP of `intermediate_size`.
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    norm_topk_prob: bool = False

    @property
    def group_size(self) -> int:
        return self.num_heads // self.num_kv_heads

    @property
    def moe(self) -> bool:
        """Whether the MLPs are mixtures of experts."""
        return self.num_experts > 0

    @property
    def qk_norm(self) -> bool:
        """Qwen3 normalizes each query and key head before RoPE."""
        return self.family == "qwen3"

    def weight_bytes(self, experts: int | None = None) -> int:
        """bf16 bytes of the weights one decode step reads (the embedding row
        gather excluded; the LM head counted once even when tied). With
        experts, `experts` distinct ones per layer (default: one token's
        `num_experts_per_tok`) and the router."""
        h, i, d = self.hidden_size, self.intermediate_size, self.head_dim
        mlp = 3 * h * i
        if self.moe:
            used = self.num_experts_per_tok if experts is None else experts
            mlp = self.num_experts * h + used * 3 * h * self.moe_intermediate_size
        per_layer = h * d * (self.num_heads * 2 + self.num_kv_heads * 2) + mlp + 2 * h
        if self.qk_norm:
            per_layer += 2 * d
        return 2 * (self.num_layers * per_layer + self.vocab_size * h + h)

    def linear_shapes(self) -> list[tuple[int, int]]:
        """The (N, K) of every linear layer of a decode step, sorted."""
        h, i, d = self.hidden_size, self.intermediate_size, self.head_dim
        if self.moe:
            i = self.moe_intermediate_size
        mlp = {(i, h), (h, i)} | ({(self.num_experts, h)} if self.moe else set())
        return sorted({(self.num_heads * d, h), (self.num_kv_heads * d, h), (h, self.num_heads * d),
                       (self.vocab_size, h)} | mlp)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["rope_scaling"] = list(self.rope_scaling) if self.rope_scaling else None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ModelConfig":
        d = dict(d)
        if d.get("rope_scaling") is not None:
            d["rope_scaling"] = tuple(d["rope_scaling"])
        return cls(**d)

    @classmethod
    def from_hf(cls, source: str | Path | dict[str, Any]) -> "ModelConfig":
        """Reads a Hugging Face `config.json` (a path, a directory holding
        one, or the parsed dict) and validates it."""
        if isinstance(source, dict):
            hf, where = source, "config"
        else:
            path = Path(source)
            if path.is_dir():
                path = path / "config.json"
            try:
                hf = json.loads(path.read_text())
            except OSError as err:
                raise ConfigError(f"cannot read {path}: {err.strerror}") from None
            except json.JSONDecodeError as err:
                raise ConfigError(f"{path} is not valid JSON: {err}") from None
            where = str(path)
        if not isinstance(hf, dict):
            raise ConfigError(f"{where}: a config must be a JSON object, got {type(hf).__name__}")
        archs = hf.get("architectures")
        if archs is None and isinstance(hf.get("model_type"), str) and hf["model_type"] in MODEL_TYPES:
            archs = [MODEL_TYPES[hf["model_type"]]]
        if not isinstance(archs, list):
            archs = [archs] if archs else []
        known = [a for a in archs if isinstance(a, str) and a in ARCHITECTURES]
        if not known:
            raise ConfigError(f"{where}: unsupported architecture {archs or hf.get('model_type')!r}; "
                              f"supported: {', '.join(ARCHITECTURES)}")
        arch = known[0]

        def get(name: str, kind=int, default=None):
            value = hf.get(name, default)
            if value is None:
                raise ConfigError(f"{where}: missing '{name}'")
            if kind is int and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(f"{where}: '{name}' must be a positive integer, got {value!r}")
            if kind is float and (isinstance(value, bool) or not isinstance(value, (int, float)) or
                                  not math.isfinite(value) or value <= 0):
                raise ConfigError(f"{where}: '{name}' must be a positive finite number, got {value!r}")
            return kind(value)

        def flag(name: str, default: bool = False) -> bool:
            value = hf.get(name, default)
            if value is None:
                return default
            if not isinstance(value, bool):
                raise ConfigError(f"{where}: '{name}' must be a JSON boolean (true or false), got {value!r}")
            return value

        # Attention over a window of recent positions is not built: refuse it
        # rather than compute full attention.
        if flag("use_sliding_window"):
            raise ConfigError(f"{where}: 'use_sliding_window' = true is not supported (sliding-window attention)")
        layer_types = hf.get("layer_types")
        if layer_types is not None:
            if not isinstance(layer_types, list) or not all(isinstance(t, str) for t in layer_types):
                raise ConfigError(f"{where}: 'layer_types' must be a list of strings, got {layer_types!r}")
            other = sorted(set(layer_types) - {"full_attention"})
            if other:
                raise ConfigError(f"{where}: 'layer_types' {other} are not supported (only 'full_attention')")

        hidden = get("hidden_size")
        heads = get("num_attention_heads")
        kv_heads = get("num_key_value_heads", int, heads)
        head_dim = hf.get("head_dim")
        if head_dim is None:
            if hidden % heads:
                raise ConfigError(f"{where}: hidden_size {hidden} is not a multiple of num_attention_heads {heads} "
                                  "and no head_dim is given")
            head_dim = hidden // heads
        scaling = None
        rs = hf.get("rope_scaling")
        rp = hf.get("rope_parameters")  # the newer form: theta and scaling in one dict
        if isinstance(rp, dict):
            if "rope_theta" in rp:
                hf = {**hf, "rope_theta": rp["rope_theta"]}
            if rp.get("rope_type", "default") != "default":
                rs = rp
        if rs is not None and not isinstance(rs, dict):
            raise ConfigError(f"{where}: 'rope_scaling' must be an object or null, got {rs!r}")
        if rs and rs.get("rope_type", rs.get("type")) == "default":
            rs = None  # transformers' name for no scaling
        if rs:
            kind = rs.get("rope_type", rs.get("type"))
            if kind != "llama3":
                raise ConfigError(f"{where}: unsupported rope_scaling type {kind!r} (only 'llama3')")
            fields = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
            for field in fields:
                if field not in rs:
                    raise ConfigError(f"{where}: rope_scaling lacks {field!r}")
                v = rs[field]
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                    raise ConfigError(f"{where}: rope_scaling {field!r} must be a positive finite number, got {v!r}")
            scaling = tuple(float(rs[field]) for field in fields)
            if scaling[2] <= scaling[1]:
                raise ConfigError(f"{where}: rope_scaling 'high_freq_factor' ({scaling[2]:g}) must exceed "
                                  f"'low_freq_factor' ({scaling[1]:g})")
        for name in ("attention_bias", "mlp_bias"):
            if flag(name):
                raise ConfigError(f"{where}: '{name}' = true is not supported")
        act = hf.get("hidden_act", "silu")
        if not isinstance(act, str) or act not in SILU_NAMES:
            raise ConfigError(f"{where}: hidden_act {act!r} is not supported (only 'silu', also named 'swish')")
        moe = {}
        if arch == "Qwen3MoeForCausalLM":
            # transformers writes num_local_experts; published configs
            # num_experts.
            experts = "num_experts" if hf.get("num_experts") is not None else "num_local_experts"
            moe = dict(num_experts=get(experts), num_experts_per_tok=get("num_experts_per_tok"),
                       moe_intermediate_size=get("moe_intermediate_size"), norm_topk_prob=flag("norm_topk_prob"))
            sparse_step = get("decoder_sparse_step", int, 1)
            dense_layers = hf.get("mlp_only_layers") or []
            if not isinstance(dense_layers, list):
                raise ConfigError(f"{where}: 'mlp_only_layers' must be a list, got {dense_layers!r}")
            if sparse_step != 1 or dense_layers:
                raise ConfigError(f"{where}: dense MLP layers among the expert layers are not supported "
                                  f"(decoder_sparse_step {sparse_step}, mlp_only_layers {dense_layers}; "
                                  "only every layer with experts)")
            for name in ("shared_expert_intermediate_size",):
                if hf.get(name):
                    raise ConfigError(f"{where}: '{name}' (shared experts) is not supported")
        config = cls(
            family=ARCHITECTURES[arch],
            hidden_size=hidden,
            intermediate_size=get("intermediate_size"),
            num_layers=get("num_hidden_layers"),
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=get("head_dim", int, head_dim),
            vocab_size=get("vocab_size"),
            rms_norm_eps=get("rms_norm_eps", float, 1e-6),
            rope_theta=get("rope_theta", float, 10000.0),
            rope_scaling=scaling,
            tie_word_embeddings=flag("tie_word_embeddings"),
            max_position_embeddings=get("max_position_embeddings", int, 8192),
            architecture=arch,
            **moe,
        )
        config.validate(where)
        return config

    def validate(self, where: str = "config") -> None:
        if self.family not in ("llama", "qwen3"):
            raise ConfigError(f"{where}: unknown family {self.family!r}")
        if self.num_heads % self.num_kv_heads:
            raise ConfigError(f"{where}: num_attention_heads {self.num_heads} is not a multiple of "
                              f"num_key_value_heads {self.num_kv_heads}")
        if self.head_dim % HEAD_DIM_MULTIPLE:
            raise ConfigError(f"{where}: head_dim must be a multiple of {HEAD_DIM_MULTIPLE} (the decode attention "
                              f"tiles' lanes), got {self.head_dim}")
        if self.rope_theta <= 1:
            raise ConfigError(f"{where}: rope_theta must be greater than 1, got {self.rope_theta}")
        if not 1 <= self.vocab_size <= MAX_VOCAB_SIZE:
            raise ConfigError(f"{where}: vocab_size must be in [1, {MAX_VOCAB_SIZE}] (token ids are 32-bit, and "
                              f"{MAX_VOCAB_SIZE + 1} marks a row without a token), got {self.vocab_size}")
        for name in ("hidden_size", "intermediate_size", "num_layers", "num_heads"):
            if getattr(self, name) > MAX_DIMENSION:
                raise ConfigError(f"{where}: {name} must be at most {MAX_DIMENSION}, got {getattr(self, name)}")
        for name in ("hidden_size", "intermediate_size"):
            if getattr(self, name) % 8:
                raise ConfigError(f"{where}: {name} must be a multiple of 8 (16-byte bf16 rows), "
                                  f"got {getattr(self, name)}")
        if (self.num_heads * self.head_dim) % 8:
            raise ConfigError(f"{where}: num_attention_heads * head_dim must be a multiple of 8")
        if self.moe:
            if self.family != "qwen3":
                raise ConfigError(f"{where}: experts are supported in Qwen3 models only, got family {self.family!r}")
            if not 1 <= self.num_experts_per_tok <= self.num_experts:
                raise ConfigError(f"{where}: num_experts_per_tok must be in [1, num_experts {self.num_experts}], "
                                  f"got {self.num_experts_per_tok}")
            if self.moe_intermediate_size < 1 or self.moe_intermediate_size % 8:
                raise ConfigError(f"{where}: moe_intermediate_size must be a positive multiple of 8 (16-byte "
                                  f"bf16 rows), got {self.moe_intermediate_size}")
        elif self.num_experts_per_tok or self.moe_intermediate_size or self.num_experts < 0:
            raise ConfigError(f"{where}: num_experts_per_tok and moe_intermediate_size need num_experts >= 1")

    def to_hf(self) -> dict[str, Any]:
        """A Hugging Face config dict for this model (for transformers)."""
        hf = {
            "architectures": [self.architecture or ("Qwen3MoeForCausalLM" if self.moe else
                                                    {"llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM"}[self.family])],
            "model_type": self.family,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "vocab_size": self.vocab_size,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "tie_word_embeddings": self.tie_word_embeddings,
            "max_position_embeddings": self.max_position_embeddings,
            "hidden_act": "silu",
            "attention_bias": False,
            "torch_dtype": "bfloat16",
        }
        if self.moe:
            hf.update(model_type="qwen3_moe", num_experts=self.num_experts, num_experts_per_tok=self.num_experts_per_tok,
                      moe_intermediate_size=self.moe_intermediate_size, norm_topk_prob=self.norm_topk_prob,
                      decoder_sparse_step=1, mlp_only_layers=[])
        if self.rope_scaling:
            f, lo, hi, orig = self.rope_scaling
            hf["rope_scaling"] = {"rope_type": "llama3", "factor": f, "low_freq_factor": lo,
                                  "high_freq_factor": hi, "original_max_position_embeddings": int(orig)}
        return hf


def tiny_config(family: str = "llama", **overrides) -> ModelConfig:
    """A 2-layer, hidden-64 model for tests."""
    heads = (2, 1) if family == "llama" else (4, 2)  # head_dim 32: the attention op's minimum
    base = dict(family=family, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=heads[0],
                num_kv_heads=heads[1], head_dim=32, vocab_size=256, rms_norm_eps=1e-5, rope_theta=10000.0 if family == "llama" else 1e6,
                rope_scaling=(8.0, 1.0, 4.0, 64.0) if family == "llama" else None, tie_word_embeddings=True,
                max_position_embeddings=256)
    base.update(overrides)
    return ModelConfig(**base)


def demo_config() -> ModelConfig:
    """The built-in demo model: Llama-shaped, small enough for CPU workers."""
    return ModelConfig(family="llama", hidden_size=256, intermediate_size=768, num_layers=4, num_heads=8,
                       num_kv_heads=2, head_dim=32, vocab_size=2048, rms_norm_eps=1e-5, rope_theta=500000.0,
                       rope_scaling=(32.0, 1.0, 4.0, 8192.0), tie_word_embeddings=True,
                       max_position_embeddings=2048, architecture="LlamaForCausalLM")


def _llama_3_2_1b() -> ModelConfig:
    """The shapes of Llama-3.2-1B (its published config.json)."""
    return ModelConfig(family="llama", hidden_size=2048, intermediate_size=8192, num_layers=16, num_heads=32,
                       num_kv_heads=8, head_dim=64, vocab_size=128256, rms_norm_eps=1e-5, rope_theta=500000.0,
                       rope_scaling=(32.0, 1.0, 4.0, 8192.0), tie_word_embeddings=True,
                       max_position_embeddings=131072, architecture="LlamaForCausalLM")


def _qwen3_0_6b() -> ModelConfig:
    """The shapes of Qwen3-0.6B (its published config.json)."""
    return ModelConfig(family="qwen3", hidden_size=1024, intermediate_size=3072, num_layers=28, num_heads=16,
                       num_kv_heads=8, head_dim=128, vocab_size=151936, rms_norm_eps=1e-6, rope_theta=1000000.0,
                       rope_scaling=None, tie_word_embeddings=True, max_position_embeddings=40960,
                       architecture="Qwen3ForCausalLM")


def _qwen3_1_7b() -> ModelConfig:
    """The shapes of Qwen3-1.7B (its published config.json)."""
    return ModelConfig(family="qwen3", hidden_size=2048, intermediate_size=6144, num_layers=28, num_heads=16,
                       num_kv_heads=8, head_dim=128, vocab_size=151936, rms_norm_eps=1e-6, rope_theta=1000000.0,
                       rope_scaling=None, tie_word_embeddings=True, max_position_embeddings=40960,
                       architecture="Qwen3ForCausalLM")


def _llama_3_1_8b() -> ModelConfig:
    """The shapes of Llama-3.1-8B (its published config.json)."""
    return ModelConfig(family="llama", hidden_size=4096, intermediate_size=14336, num_layers=32, num_heads=32,
                       num_kv_heads=8, head_dim=128, vocab_size=128256, rms_norm_eps=1e-5, rope_theta=500000.0,
                       rope_scaling=(8.0, 1.0, 4.0, 8192.0), tie_word_embeddings=False,
                       max_position_embeddings=131072, architecture="LlamaForCausalLM")


def _llama_3_2_3b() -> ModelConfig:
    """The shapes of Llama-3.2-3B (its published config.json)."""
    return ModelConfig(family="llama", hidden_size=3072, intermediate_size=8192, num_layers=28, num_heads=24,
                       num_kv_heads=8, head_dim=128, vocab_size=128256, rms_norm_eps=1e-5, rope_theta=500000.0,
                       rope_scaling=(32.0, 1.0, 4.0, 8192.0), tie_word_embeddings=True,
                       max_position_embeddings=131072, architecture="LlamaForCausalLM")


def _qwen3_4b() -> ModelConfig:
    """The shapes of Qwen3-4B (its published config.json)."""
    return ModelConfig(family="qwen3", hidden_size=2560, intermediate_size=9728, num_layers=36, num_heads=32,
                       num_kv_heads=8, head_dim=128, vocab_size=151936, rms_norm_eps=1e-6, rope_theta=1000000.0,
                       rope_scaling=None, tie_word_embeddings=True, max_position_embeddings=40960,
                       architecture="Qwen3ForCausalLM")


def _qwen3_14b() -> ModelConfig:
    """The shapes of Qwen3-14B (its published config.json)."""
    return ModelConfig(family="qwen3", hidden_size=5120, intermediate_size=17408, num_layers=40, num_heads=40,
                       num_kv_heads=8, head_dim=128, vocab_size=151936, rms_norm_eps=1e-6, rope_theta=1000000.0,
                       rope_scaling=None, tie_word_embeddings=False, max_position_embeddings=40960,
                       architecture="Qwen3ForCausalLM")


def _qwen3_8b() -> ModelConfig:
    """The shapes of Qwen3-8B (its published config.json)."""
    return ModelConfig(family="qwen3", hidden_size=4096, intermediate_size=12288, num_layers=36, num_heads=32,
                       num_kv_heads=8, head_dim=128, vocab_size=151936, rms_norm_eps=1e-6, rope_theta=1000000.0,
                       tie_word_embeddings=False, max_position_embeddings=40960,
                       architecture="Qwen3ForCausalLM")


def _qwen3_30b_a3b() -> ModelConfig:
    """The shapes of Qwen3-30B-A3B (its published config.json): 128
    experts of 768, 8 per token."""
    return ModelConfig(family="qwen3", hidden_size=2048, intermediate_size=6144, num_layers=48, num_heads=32,
                       num_kv_heads=4, head_dim=128, vocab_size=151936, rms_norm_eps=1e-6, rope_theta=1000000.0,
                       tie_word_embeddings=False, max_position_embeddings=40960,
                       architecture="Qwen3MoeForCausalLM", num_experts=128, num_experts_per_tok=8,
                       moe_intermediate_size=768, norm_topk_prob=True)


def tiny_moe_config(**overrides) -> ModelConfig:
    """A 2-layer Qwen3-MoE model for tests: 8 experts of 32, 2 per token."""
    base = dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True,
                architecture="Qwen3MoeForCausalLM", tie_word_embeddings=False)
    base.update(overrides)
    return tiny_config("qwen3", **base)


#: Named configurations: the CLI accepts these names wherever a config.json
#: is expected.
PRESETS = {
    "demo": demo_config,
    "tiny-llama": lambda: tiny_config("llama"),
    "tiny-qwen3": lambda: tiny_config("qwen3"),
    "tiny-qwen3-moe": tiny_moe_config,
    "llama-3.2-1b": _llama_3_2_1b,
    "qwen3-0.6b": _qwen3_0_6b,
    "qwen3-1.7b": _qwen3_1_7b,
    "llama-3.2-3b": _llama_3_2_3b,
    "qwen3-4b": _qwen3_4b,
    "llama-3.1-8b": _llama_3_1_8b,
    "qwen3-8b": _qwen3_8b,
    "qwen3-14b": _qwen3_14b,
    "qwen3-30b-a3b": _qwen3_30b_a3b,
}


def preset(name: str) -> ModelConfig:
    try:
        return PRESETS[name]()
    except KeyError:
        raise ConfigError(f"unknown preset {name!r}; presets: {', '.join(PRESETS)}") from None


def tp_config(config: ModelConfig, tp: int) -> ModelConfig:
    """The shapes one device holds when the model is split over `tp`
    devices (Megatron-style): its share of the query and KV heads and of the
    MLP's intermediate columns. The vocabulary stays whole (the embedding is
    replicated; the LM head's share is vocab_size / tp rows)."""
    c = config
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ConfigError(f"tp must be a positive int, got {tp!r}")
    if tp > 1 and c.moe:
        raise ConfigError("tensor parallelism of a model with experts is not supported")
    for what, n in (("num_kv_heads", c.num_kv_heads), ("num_heads", c.num_heads),
                    ("intermediate_size", c.intermediate_size), ("vocab_size", c.vocab_size)):
        if n % tp:
            raise ConfigError(f"tensor parallelism over {tp} devices needs {what} ({n}) divisible by {tp}")
    return replace(c, num_heads=c.num_heads // tp, num_kv_heads=c.num_kv_heads // tp,
                   intermediate_size=c.intermediate_size // tp)
