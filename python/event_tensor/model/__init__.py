"""Decoder-only models (Llama-3, Qwen3, Qwen3-MoE) compiled to one decode-step
megakernel.

    from event_tensor import model
    config = model.ModelConfig.from_hf("config.json")
    weights = model.load_weights(config, ["model.safetensors"])  # or random_weights(config)
    path = model.compile_model(config, target="cpu", max_batch=2, max_context=256)
    session = model.DecodeSession(path, weights)
    result = session.generate([[1, 2, 3]], max_new_tokens=8)  # result.tokens, result.finish_reasons

`compile_model` needs MLIR; everything else here runs with the runtime
alone (numpy, and torch for CUDA).
"""

from .config import ARCHITECTURES, PRESETS, ConfigError, ModelConfig, demo_config, preset, tiny_config, tiny_moe_config
from .options import KernelOptions
from .reference import ReferenceModel
from .session import DecodeSession, Generation, Logprob, ModelArtifactError, NonFiniteLogitsError
from .weights import WeightError, hf_tensor_shapes, load_weights, random_weights, save_weights

__all__ = ["ARCHITECTURES", "PRESETS", "preset", "ConfigError", "DecodeSession", "Generation", "KernelOptions", "Logprob", "ModelArtifactError",
           "NonFiniteLogitsError", "ModelConfig", "ReferenceModel", "WeightError", "compile_model", "demo_config", "hf_tensor_shapes",
           "load_weights", "random_weights", "save_weights", "tiny_config", "tiny_moe_config"]


def compile_model(*args, **kwargs):
    """See `event_tensor.model.compile.compile_model` (imports MLIR)."""
    from .compile import compile_model as _compile

    return _compile(*args, **kwargs)
