"""Kernel arguments: checks them against the artifact's metadata and flattens
them into the kernel's parameter list (a memref is passed as its descriptor:
allocated pointer, aligned pointer, offset, sizes, strides)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from .errors import ArgumentError

__all__ = ["Buffer", "flatten_arguments", "flatten_device_arguments"]

# Element sizes of the dtypes the metadata names.
ITEMSIZE = {
    "bool": 1, "int8": 1, "uint8": 1, "int16": 2, "int32": 4, "int64": 8,
    "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8,
}


@dataclass
class Buffer:
    """A raw device or host pointer with its shape and dtype; `strides` in
    elements (row-major when None)."""

    pointer: int
    shape: Sequence[int]
    dtype: str
    device: str = "cpu"
    strides: Sequence[int] | None = None


@dataclass
class _View:
    pointer: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str
    device: str
    keepalive: Any = None


def _row_major(shape: Sequence[int]) -> tuple[int, ...]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    return tuple(reversed(strides))


def _row_major_view(view: _View) -> bool:
    """Whether `view` is laid out as the kernel's identity-layout memref
    reads it: row-major and dense (a dimension of size 1 may have any
    stride; an empty view has no elements to misplace)."""
    if 0 in view.shape:
        return True
    return all(size == 1 or stride == want
               for size, stride, want in zip(view.shape, view.strides, _row_major(view.shape)))


def _view(value: Any, name: str) -> _View:
    if isinstance(value, Buffer):
        strides = tuple(value.strides) if value.strides is not None else _row_major(value.shape)
        return _View(int(value.pointer), tuple(value.shape), strides, value.dtype, value.device, value)
    module = type(value).__module__.split(".")[0]
    if module == "torch":
        dtype = str(value.dtype).removeprefix("torch.")
        return _View(value.data_ptr(), tuple(value.shape), tuple(value.stride()), dtype,
                     value.device.type, value)
    if module == "numpy":
        if not value.flags.writeable:
            # The kernel may write any buffer it takes.
            raise ArgumentError(f"argument {name}: a read-only numpy array; pass a writable one (numpy.array "
                                "copies it)")
        item = value.itemsize
        if any(s % item for s in value.strides):
            raise ArgumentError(f"argument {name}: strides {value.strides} are not multiples of the element size")
        return _View(value.ctypes.data, tuple(value.shape), tuple(s // item for s in value.strides),
                     value.dtype.name, "cpu", value)
    if hasattr(value, "__dlpack__"):
        device_type, _ = value.__dlpack_device__()
        if device_type == 1:  # CPU
            import numpy

            return _view(numpy.from_dlpack(value), name)
        try:
            import torch.utils.dlpack
        except ImportError:
            raise ArgumentError(f"argument {name}: a DLPack tensor on device type {device_type} needs torch") from None
        return _view(torch.utils.dlpack.from_dlpack(value), name)
    raise ArgumentError(
        f"argument {name}: expected a numpy array, torch tensor, DLPack tensor or runtime.Buffer, "
        f"got {type(value).__name__}"
    )


def flatten_arguments(metadata: dict, values: Sequence[Any], device: str) -> tuple[list[tuple[str, int | float]], list]:
    """Returns the kernel arguments as (ctype, value) pairs, where ctype is
    'ptr', 'i64', 'i32', 'f32' or 'f64', and the objects to keep alive."""
    per_argument, keep = _flatten(metadata, values, device)
    return [pair for arg in per_argument for pair in arg], keep


def _check_count(metadata: dict, values: Sequence[Any]) -> None:
    specs = metadata["arguments"]
    if len(values) != len(specs):
        names = ", ".join(s["name"] for s in specs)
        raise ArgumentError(
            f"kernel {metadata['kernel']} takes {len(specs)} arguments ({names}), got {len(values)}"
        )


def flatten_device_arguments(metadata: dict, values: Sequence[Any], device: str) -> tuple[list[list], list]:
    """For a kernel on N devices (metadata "devices"): each argument is a
    list or tuple of N values, one per device (a scalar may also be given
    once for all). Returns, per device, the parameters that follow this
    device's number and every device's counters (which the launcher
    passes): every device's copy of each symmetric argument, then this
    device's kernel arguments, as (ctype, value) pairs; and the objects to
    keep alive. Symmetric copies must agree in dtype, shape and strides."""
    n = int(metadata.get("devices", 1))
    specs = metadata["arguments"]
    _check_count(metadata, values)
    columns = []
    for spec, value in zip(specs, values):
        name = f"{spec['name']} ({spec['type']})"
        if isinstance(value, (list, tuple)):
            if len(value) != n:
                raise ArgumentError(f"argument {name}: kernel {metadata['kernel']} runs on {n} devices, "
                                    f"got {len(value)} values")
            columns.append(list(value))
        elif spec["kind"] == "scalar":
            columns.append([value] * n)
        else:
            raise ArgumentError(f"argument {name}: kernel {metadata['kernel']} runs on {n} devices; "
                                f"give a list of {n} buffers, one per device")
    keep = []
    flat = []
    for d in range(n):
        per_argument, k = _flatten(metadata, [c[d] for c in columns], device)
        flat.append(per_argument)
        keep += k
    symmetric = [i for i, spec in enumerate(specs) if spec.get("symmetric")]
    for i in symmetric:
        first = flat[0][i]
        for d in range(1, n):
            # The descriptor after the two pointers: offset, sizes, strides.
            if flat[d][i][2:] != first[2:]:
                spec = specs[i]
                raise ArgumentError(f"argument {spec['name']} ({spec['type']}) is symmetric: every device's "
                                    f"copy needs the same shape and strides (device {d} differs from device 0)")
    out = []
    for d in range(n):
        params: list = []
        for i in symmetric:
            for e in range(n):
                params += flat[e][i]
        for arg in flat[d]:
            params += arg
        out.append(params)
    return out, keep


def _flatten(metadata: dict, values: Sequence[Any], device: str) -> tuple[list[list[tuple[str, int | float]]], list]:
    specs = metadata["arguments"]
    _check_count(metadata, values)
    per_argument: list[list[tuple[str, int | float]]] = []
    keep = []
    for spec, value in zip(specs, values):
        flat: list[tuple[str, int | float]] = []
        per_argument.append(flat)
        name = f"{spec['name']} ({spec['type']})"
        if spec["kind"] == "scalar":
            dtype = spec["dtype"]
            if dtype.startswith("float"):
                if not isinstance(value, (int, float)) or isinstance(value, bool):
                    raise ArgumentError(f"argument {name}: expected a float, got {value!r}")
                flat.append(("f32" if dtype == "float32" else "f64", float(value)))
            else:
                if isinstance(value, bool) or not isinstance(value, int):
                    raise ArgumentError(f"argument {name}: expected an int, got {value!r}")
                if dtype == "index" and value < 0:
                    raise ArgumentError(f"argument {name}: a size must be non-negative, got {value}")
                flat.append(("i32" if dtype == "int32" else "i64", value))
            continue
        view = _view(value, name)
        keep.append(view.keepalive)
        if view.dtype != spec["dtype"]:
            raise ArgumentError(f"argument {name}: expected dtype {spec['dtype']}, got {view.dtype}")
        if len(view.shape) != len(spec["shape"]):
            raise ArgumentError(
                f"argument {name}: expected rank {len(spec['shape'])}, got shape {list(view.shape)}"
            )
        for d, (want, got) in enumerate(zip(spec["shape"], view.shape)):
            if want >= 0 and want != got:
                raise ArgumentError(
                    f"argument {name}: dimension {d} must be {want}, got shape {list(view.shape)}"
                )
        if view.device != device:
            raise ArgumentError(f"argument {name}: expected a {device} tensor, got one on {view.device}")
        if "strided<" not in spec.get("type", "") and not _row_major_view(view):
            raise ArgumentError(
                f"argument {name}: expected a contiguous row-major array, got strides {list(view.strides)} "
                f"(in elements) for shape {list(view.shape)}; pass a contiguous copy "
                "(numpy.ascontiguousarray, tensor.contiguous())")
        flat += [("ptr", view.pointer), ("ptr", view.pointer), ("i64", 0)]
        flat += [("i64", d) for d in view.shape]
        flat += [("i64", s) for s in view.strides]
    return per_argument, keep
