"""Model weights: a small `.safetensors` reader and writer (numpy and
ml_dtypes only, so the device machine needs no extra package), Hugging Face
tensor names, random weights, and the stacked layout the megakernel takes.
No MLIR here."""

from __future__ import annotations

import json
import math
import struct
import warnings
from pathlib import Path
from typing import Iterable

import ml_dtypes
import numpy as np

from .config import ModelConfig, tp_config

__all__ = ["tp_shards", "WeightError", "read_safetensors", "write_safetensors", "hf_tensor_shapes", "random_weights",
           "load_weights", "save_weights", "pack", "PACKED_ORDER", "MOE_PACKED"]

BF16 = np.dtype(ml_dtypes.bfloat16)
_DTYPES = {"BF16": BF16, "F16": np.dtype(np.float16), "F32": np.dtype(np.float32), "F64": np.dtype(np.float64)}
_NAMES = {v: k for k, v in _DTYPES.items()}


class WeightError(ValueError):
    """Missing, unexpected or mis-shaped tensors (names the tensor)."""


# The largest header the format allows (its reference reader's limit).
_MAX_HEADER = 100_000_000


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_header(path: Path, header, data_bytes: int) -> list[tuple[str, np.dtype, tuple, int, int]]:
    """The tensors of a parsed safetensors header as (name, dtype, shape,
    start, end), checked the way the format's reference reader checks
    them: an object of entries with a known dtype, a shape of non-negative
    ints and [start, end] offsets whose span holds exactly the shape's
    bytes, the entries' spans tiling the data section (no gap, no overlap,
    nothing past the file). Raises WeightError naming the tensor."""
    if not isinstance(header, dict):
        raise WeightError(f"{path}: the header is a JSON {type(header).__name__}, not an object of tensors")
    meta = header.get("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise WeightError(f"{path}: __metadata__ must map strings to strings")
    tensors = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(info, dict):
            raise WeightError(f"{path}: tensor '{name}' is a JSON {type(info).__name__}, not an object")
        dtype = _DTYPES.get(info.get("dtype")) if isinstance(info.get("dtype"), str) else None
        if dtype is None:
            raise WeightError(f"{path}: tensor '{name}' has unsupported dtype {info.get('dtype')!r}")
        shape, offsets = info.get("shape"), info.get("data_offsets")
        if not isinstance(shape, list) or not all(_int(d) and d >= 0 for d in shape):
            raise WeightError(f"{path}: tensor '{name}' has shape {shape!r}, not a list of non-negative ints")
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(_int(o) for o in offsets) \
                or not 0 <= offsets[0] <= offsets[1]:
            raise WeightError(f"{path}: tensor '{name}' has data_offsets {offsets!r}, not [start, end] with "
                              "0 <= start <= end")
        start, end = offsets
        # Exact (Python ints): an int64 product wraps, and a shape of
        # 2^32 x 2^32 then seemed to take 0 bytes.
        nbytes = math.prod(shape) * dtype.itemsize
        if end - start != nbytes:
            raise WeightError(f"{path}: tensor '{name}' has data_offsets {offsets} ({end - start} bytes) for "
                              f"{dtype.name if dtype != BF16 else 'bfloat16'} {shape} "
                              f"({nbytes} bytes)")
        tensors.append((name, dtype, tuple(shape), start, end))
    # The spans, in order, tile the data section.
    at = 0
    for name, _, _, start, end in sorted(tensors, key=lambda t: (t[3], t[4])):
        if start != at:
            what = "overlaps the tensor before it" if start < at else f"leaves bytes {at}..{start} unused"
            raise WeightError(f"{path}: tensor '{name}' at data_offsets [{start}, {end}] {what}")
        at = end
    if at != data_bytes:
        raise WeightError(f"{path}: the tensors take {at} bytes but the data section has {data_bytes}")
    return tensors


def read_safetensors(path: str | Path) -> dict[str, np.ndarray]:
    """Reads every tensor of a `.safetensors` file (memory-mapped), checked
    as the format's reference reader checks it (`_check_header`)."""
    path = Path(path)
    try:
        raw = np.memmap(path, dtype=np.uint8, mode="r")
    except (OSError, ValueError) as err:
        raise WeightError(f"cannot read {path}: {err}") from None
    if raw.size < 8:
        raise WeightError(f"{path}: too short for a safetensors header")
    (n,) = struct.unpack("<Q", bytes(raw[:8]))
    if n > raw.size - 8 or n > _MAX_HEADER:
        if bytes(raw[:1]) in (b"{", b"["):
            raise WeightError(f"{path}: a JSON file, not a .safetensors file (pass the .safetensors files, or "
                              "their directory, rather than an index)")
        raise WeightError(f"{path}: header length {n} exceeds the file (or the format's limit): not a "
                          ".safetensors file, or a truncated one")
    try:
        header = json.loads(bytes(raw[8:8 + n]))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise WeightError(f"{path}: bad header: {err}") from None
    base = 8 + n
    return {name: raw[base + start:base + end].view(dtype).reshape(shape)
            for name, dtype, shape, start, end in _check_header(path, header, raw.size - base)}


def write_safetensors(path: str | Path, tensors: dict[str, np.ndarray]) -> None:
    header, offset, blobs = {}, 0, []
    for name, array in tensors.items():
        array = np.ascontiguousarray(array)
        if array.dtype not in _NAMES:
            raise WeightError(f"tensor '{name}': cannot store dtype {array.dtype}")
        blob = array.tobytes()
        header[name] = {"dtype": _NAMES[array.dtype], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def hf_tensor_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """The Hugging Face tensor names and shapes of `config`."""
    h, i, d, v = config.hidden_size, config.intermediate_size, config.head_dim, config.vocab_size
    hq, hkv = config.num_heads * d, config.num_kv_heads * d
    shapes = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,)}
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (v, h)
    for layer in range(config.num_layers):
        p = f"model.layers.{layer}."
        shapes.update({
            p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (hq, h), p + "self_attn.k_proj.weight": (hkv, h),
            p + "self_attn.v_proj.weight": (hkv, h), p + "self_attn.o_proj.weight": (h, hq),
        })
        if config.moe:
            im = config.moe_intermediate_size
            shapes[p + "mlp.gate.weight"] = (config.num_experts, h)
            for e in range(config.num_experts):
                x = f"{p}mlp.experts.{e}."
                shapes.update({x + "gate_proj.weight": (im, h), x + "up_proj.weight": (im, h),
                               x + "down_proj.weight": (h, im)})
        else:
            shapes.update({p + "mlp.gate_proj.weight": (i, h), p + "mlp.up_proj.weight": (i, h),
                           p + "mlp.down_proj.weight": (h, i)})
        if config.qk_norm:
            shapes[p + "self_attn.q_norm.weight"] = (d,)
            shapes[p + "self_attn.k_norm.weight"] = (d,)
    return shapes


def random_weights(config: ModelConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """Random bf16 weights under Hugging Face names: normal with std 0.02
    for matrices (embedding 1.0 std is avoided so logits stay moderate),
    norms around 1."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in hf_tensor_shapes(config).items():
        if len(shape) == 1:
            a = 1.0 + 0.1 * rng.standard_normal(shape)
        else:
            a = rng.standard_normal(shape, dtype=np.float32) * (1.0 / np.sqrt(shape[1]))
        out[name] = a.astype(np.float32).astype(BF16)
    return out


def load_weights(config: ModelConfig, paths: Iterable[str | Path]) -> dict[str, np.ndarray]:
    """Reads `.safetensors` files (a file, or a directory's `*.safetensors`)
    and checks every expected tensor is present with the right shape."""
    files: list[Path] = []
    placed: dict[str, Path] = {}  # tensor -> shard, from index files
    for p in paths:
        p = Path(p)
        if p.is_dir():
            found = sorted(p.glob("*.safetensors"))
            if not found:
                raise WeightError(f"{p}: no .safetensors files")
            files += found
        elif p.suffix == ".json":
            shards, where = _read_index(p)
            files += shards
            placed.update(where)
        else:
            files.append(p)
    tensors: dict[str, np.ndarray] = {}
    for f in files:
        held = read_safetensors(f)
        for name, shard in placed.items():
            if shard == f and name not in held:
                raise WeightError(f"{f}: the index places tensor '{name}' in this file, which does not hold it")
        tensors.update(held)
    expected = hf_tensor_shapes(config)
    missing = [n for n in expected if n not in tensors]
    if missing:
        more = f" (and {len(missing) - 3} more)" if len(missing) > 3 else ""
        raise WeightError(f"missing tensors: {', '.join(missing[:3])}{more}")
    for name, shape in expected.items():
        if tuple(tensors[name].shape) != shape:
            raise WeightError(f"tensor '{name}' has shape {list(tensors[name].shape)}, expected {list(shape)}")
    ignored = {"lm_head.weight"} if config.tie_word_embeddings else set()
    unexpected = [n for n in tensors if n not in expected and n not in ignored and "rotary_emb" not in n]
    if unexpected:
        raise WeightError(f"unexpected tensors for this config: {', '.join(unexpected[:3])}")
    wider = sorted({str(tensors[n].dtype) for n in expected if tensors[n].dtype != BF16})
    if wider:
        count = sum(tensors[n].dtype != BF16 for n in expected)
        warnings.warn(f"{count} of {len(expected)} tensors are {' and '.join(wider)}: they are rounded to bfloat16 "
                      "(the kernels compute with bf16 weights)", stacklevel=2)
    return {n: tensors[n] for n in expected}


def _read_index(path: Path) -> tuple[list[Path], dict[str, Path]]:
    """The shard files of a `model.safetensors.index.json` (its
    `weight_map` of tensor names to files beside it) and where it places
    each tensor."""
    try:
        index = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise WeightError(f"{path}: cannot read the index: {err}") from None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()):
        raise WeightError(f"{path}: a safetensors index needs a 'weight_map' object of tensor names to file names")
    where = {}
    for name, shard in weight_map.items():
        if Path(shard).is_absolute() or Path(shard).name != shard:
            raise WeightError(f"{path}: the index places '{name}' in {shard!r}, not a file beside the index")
        where[name] = path.parent / shard
    return sorted(set(where.values())), where


def save_weights(path: str | Path, weights: dict[str, np.ndarray]) -> None:
    write_safetensors(path, weights)


#: The packed tensors in kernel-argument order (Qwen3 adds q_norm, k_norm;
#: a model with experts has MOE_PACKED in place of wg, wu, wd).
PACKED_ORDER = ["embed", "ln1", "wq", "wk", "wv", "wo", "ln2", "wg", "wu", "wd", "final_norm", "lm_head"]
#: A model with experts: the router [L, E, H] and the experts' gate and up
#: [L, E, I, H] and down [L, E, H, I] projections.
MOE_PACKED = ["router", "exp_gate", "exp_up", "exp_down"]


def pack(config: ModelConfig, weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Stacks per-layer tensors into the megakernel's layout (bf16,
    contiguous): ln1/ln2 [L, H], wq [L, Hq*D, H], ..., wd [L, H, I]; with
    experts, MOE_PACKED (router [L, E, H], exp_gate [L, E, I, H], ...)."""
    def bf(a):
        return np.ascontiguousarray(np.asarray(a).astype(BF16))

    def get(name):
        try:
            return weights[name]
        except KeyError:
            raise WeightError(f"no tensor '{name}' among the {len(weights)} weights given (the model has "
                              f"{config.num_layers} layers{'' if config.tie_word_embeddings else ' and its own lm_head'})"
                              ) from None

    def stack(suffix):
        return bf(np.stack([np.asarray(get(f"model.layers.{i}.{suffix}")) for i in range(config.num_layers)]))

    packed = {
        "embed": bf(get("model.embed_tokens.weight")),
        "ln1": stack("input_layernorm.weight"),
        "wq": stack("self_attn.q_proj.weight"),
        "wk": stack("self_attn.k_proj.weight"),
        "wv": stack("self_attn.v_proj.weight"),
        "wo": stack("self_attn.o_proj.weight"),
        "ln2": stack("post_attention_layernorm.weight"),
        "final_norm": bf(get("model.norm.weight")),
    }
    if config.moe:
        def experts(proj):
            return bf(np.stack([np.stack([np.asarray(get(f"model.layers.{i}.mlp.experts.{e}.{proj}.weight"))
                                          for e in range(config.num_experts)]) for i in range(config.num_layers)]))
        packed.update(router=stack("mlp.gate.weight"), exp_gate=experts("gate_proj"), exp_up=experts("up_proj"),
                      exp_down=experts("down_proj"))
    else:
        packed.update(wg=stack("mlp.gate_proj.weight"), wu=stack("mlp.up_proj.weight"),
                      wd=stack("mlp.down_proj.weight"))
    packed["lm_head"] = packed["embed"] if config.tie_word_embeddings else bf(get("lm_head.weight"))
    if config.qk_norm:
        packed["q_norm"] = stack("self_attn.q_norm.weight")
        packed["k_norm"] = stack("self_attn.k_norm.weight")
    return packed


#: How tensor parallelism splits each packed tensor: (axis, what the
#: share is counted in); replicated tensors are absent.
TP_SPLIT = {"wq": 1, "wk": 1, "wv": 1, "wo": 2, "wg": 1, "wu": 1, "wd": 2, "lm_head": 0}


def tp_shards(config: ModelConfig, packed: dict, tp: int) -> list[dict]:
    """The packed tensors (`pack`) of each of `tp` devices: device d holds
    query heads [d * Hq/tp, (d + 1) * Hq/tp) and the matching KV heads
    (rows of wq, wk, wv; columns of wo), intermediate columns
    [d * I/tp, (d + 1) * I/tp) (rows of wg, wu; columns of wd) and rows
    [d * V/tp, (d + 1) * V/tp) of the LM head; the embedding and the norms
    are replicated. Works on numpy arrays and torch tensors (slices are
    views; the caller copies them where it needs contiguous memory)."""
    tp_config(config, tp)  # checks divisibility
    shards = []
    for d in range(tp):
        out = {}
        for name, t in packed.items():
            axis = TP_SPLIT.get(name)
            if axis is None:
                out[name] = t
                continue
            n = t.shape[axis] // tp
            index = [slice(None)] * len(t.shape)
            index[axis] = slice(d * n, (d + 1) * n)
            out[name] = t[tuple(index)]
        shards.append(out)
    return shards
