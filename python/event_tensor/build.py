"""Compiles an et kernel into an artifact (`event_tensor.compile`).

The pipeline is et-lower-to-cpu-pipeline (a host shared object, one thread
per worker) or et-lower-to-nvvm-pipeline (PTX, or a cubin where ptxas is
present). Artifacts are cached on disk by a hash of the IR, the options and
the toolchain: compiling the same kernel again loads the cached artifact.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from . import __version__
from .runtime.artifact import FORMAT_VERSION, METADATA, Artifact, binary_digest, load
from .runtime.cpu import host_isa_flags
from .runtime.errors import ArtifactError

__all__ = ["compile_kernel", "default_cache_dir"]

TOOLCHAIN = f"event_tensor {__version__}"
LLVM_VERSION = "22.1.8"
# Dynamic shared memory for tile_prefetch="shared" and tile_kv_prefetch="shared" (the lowering's bounds;
# Hopper gives a CTA 227 KB in all).
MIN_PREFETCH_BYTES = 16 * 1024
MAX_PREFETCH_BYTES = 200 * 1024
# The default of tile_prefetch_bytes.
PREFETCH_BYTES = 128 * 1024
# Rows of et.rmsnorm (elements per thread of et.kv_append) in flight together
# that the tile lowering takes: divisors of its 16-row chunk.
ROWS_IN_FLIGHT = (1, 2, 4, 8, 16)

_DTYPES = {
    "i1": "bool", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64", "index": "int64",
    "f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64",
}


def default_cache_dir() -> Path:
    """$ET_CACHE_DIR, else ~/.cache/event_tensor."""
    env = os.environ.get("ET_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "event_tensor"


def _arguments(kernel) -> list[dict[str, Any]]:
    from .ir import DictAttr, IndexType, MemRefType

    args = []
    names = None
    if "arg_names" in kernel.attributes:  # optional names, e.g. from the model builder
        names = [str(a).strip('"') for a in kernel.attributes["arg_names"]]
    arg_attrs = [{}] * len(kernel.regions[0].blocks[0].arguments)
    if "arg_attrs" in kernel.attributes:
        arg_attrs = [DictAttr(a) for a in kernel.attributes["arg_attrs"]]
    for i, arg in enumerate(kernel.regions[0].blocks[0].arguments):
        t = arg.type
        name = names[i] if names and i < len(names) else f"arg{i}"
        entry: dict[str, Any] = {"name": name, "type": str(t)}
        if isinstance(t, MemRefType):
            m = t
            elt = str(m.element_type)
            if elt not in _DTYPES:
                raise ValueError(f"argument {name}: unsupported element type {elt}")
            entry.update(kind="memref", dtype=_DTYPES[elt],
                         shape=[-1 if m.is_dynamic_dim(d) else m.shape[d] for d in range(m.rank)])
            if "et.symmetric" in arg_attrs[i]:
                entry["symmetric"] = True
        elif isinstance(t, IndexType):
            entry.update(kind="scalar", dtype="index")
        elif str(t) in _DTYPES:
            entry.update(kind="scalar", dtype=_DTYPES[str(t)])
        else:
            raise ValueError(f"argument {name}: unsupported type {t}")
        args.append(entry)
    return args


def _runtime_abi(target: str, profile: bool, devices: int) -> dict[str, Any]:
    """The contract between the worker code and the runtime, as the compiler
    declares it (EventTensor/Conversion/RuntimeABI.h): the metadata's `abi`,
    which the runtime checks against its own copy when it loads the artifact."""
    from ._mlir_libs import _etDialects

    return json.loads(_etDialects.runtime_abi_json(host_worker=target == "cpu", profile=profile,
                                                    multi_device=devices > 1))


def _counter_words(graph: dict, abi: dict[str, Any], devices: int) -> int | None:
    """Counters of both banks (and on several devices the words where they
    meet and the abort word) when every event shape is static."""
    total = 0
    for event in graph["events"]:
        if event["count_kind"] == "device":
            total += 1
            continue
        size = 1
        for d in event["shape"]:
            if not isinstance(d, int):
                return None
            size *= d
        total += size
    layout = abi["counters"]
    if devices > 1:
        total += layout["device_barrier_words"]
    words = layout["banks"] * total
    if devices > 1:
        words += layout["device_abort_words"]
    return words


def _ptx_from_binary(module) -> bytes:
    from .dialects import gpu

    for op in module.body.operations:
        if op.operation.name == "gpu.binary":
            objects = op.operation.attributes["objects"]
            return gpu.ObjectAttr(objects[0]).object
    raise RuntimeError("the NVVM pipeline produced no gpu.binary")


def compile_kernel(module, *, target: str = "cpu", workers: int | None = None, mode: str = "static",
                   optimize: bool = True, verify: bool = True, profile: bool = False, chip: str = "sm_90a", features: str = "+ptx80",
                   format: str = "isa", backoff_ns: int = 64, threads_per_worker: int = 128,
                   tile_unroll: int = 4, tile_prefetch: str = "none", tile_linear: str = "rows",
                   tile_prefetch_bytes: int = PREFETCH_BYTES, tile_kv_prefetch: str = "none",
                   tile_kv_mma_bytes: int = 0, tile_prefetch_tasks: tuple = (), tile_stage_bytes: int = 0,
                   tile_stage_tasks: tuple = (),
                   opt_level: int = 2, tile_mma: str = "wgmma", tile_rows_in_flight: int = 1,
                   cache_dir: str | os.PathLike | None = None, use_cache: bool = True) -> Artifact:
    """Compiles the one et.kernel of `module` (a Module or IR text) for
    `target` ("cpu" or "cuda") and returns the artifact.

    `mode` is "static", "dynamic" or "keep" (the kernel is already
    scheduled); `workers` defaults to 4 on the CPU and 132 on CUDA.
    `profile=True` makes every tile record its worker and start/end times
    (the launcher's `last_trace`). `verify=False` skips et-verify-event-graph (to test the runtime's
    watchdog on a schedule the verifier would reject). Errors
    raise `EventTensorCompileError` with the diagnostics and an et-opt repro
    line. A CUDA cubin (`format="bin"`) records what ptxas gave the kernel in
    the metadata's `resources`: registers and stack-frame bytes per thread
    (`event_tensor.cubin`; spills grow the frame).

    CUDA tile lowering: `tile_unroll` 16-byte weight loads per lane in
    flight; `tile_linear` lays out et.linear ("rows": a warp per row;
    "spread": the same, except that a tile of fewer rows than warps splits
    K between warps, short rows go several per trip, and a tile's later
    linear ops start their loads during the earlier ones; docs/lowering.md); `tile_prefetch` ("none", "registers", "l2", "shared") moves
    et.linear weight loads above a task's first wait, in the tasks named in
    `tile_prefetch_tasks` when it is given (else in all); `tile_kv_prefetch`
    ("none", "shared") copies the KV-cache rows an et.attention_split marks
    `stable` into shared memory before the wait; both shared forms use
    `tile_prefetch_bytes` of dynamic shared memory. `tile_kv_mma_bytes` > 0
    runs the other et.attention_split tiles on tensor cores, each warp
    streaming K and V through its own ring in that many bytes of dynamic
    shared memory (docs/lowering.md). `tile_stage_bytes` > 0
    lets each worker stage up to that many bytes of a tile's et.linear
    weight rows in shared memory during the tile before it (two regions of
    dynamic shared memory after the other buffers; docs/lowering.md,
    "Weights staged across tiles"); the worker's last thread issues those
    copies before each tile's waits. `tile_mma` picks the
    tensor-core instructions of et.matmul: "wgmma" (Hopper warpgroup MMA
    where the tile allows it, else mma.sync) or "sync" (mma.sync only).
    `tile_rows_in_flight` (1, 2, 4, 8 or 16) rows of et.rmsnorm, and
    elements per thread of et.kv_append, have their loads in flight
    together (the prompt tiles' row-wise ops; 1 keeps one at a time)."""
    from . import analysis
    from .compiler import parse, run_pipeline
    from .ir import Context

    if target not in ("cpu", "cuda"):
        raise ValueError(f"target must be 'cpu' or 'cuda', got {target!r}")
    if mode not in ("static", "dynamic", "keep"):
        raise ValueError(f"mode must be 'static', 'dynamic' or 'keep', got {mode!r}")
    if isinstance(opt_level, bool) or opt_level not in (0, 1, 2, 3):
        raise ValueError(f"opt_level must be 0, 1, 2 or 3, got {opt_level!r}")
    if tile_prefetch not in ("none", "registers", "l2", "shared"):
        raise ValueError(f"tile_prefetch must be 'none', 'registers', 'l2' or 'shared', got {tile_prefetch!r}")
    if tile_kv_prefetch not in ("none", "shared"):
        raise ValueError(f"tile_kv_prefetch must be 'none' or 'shared', got {tile_kv_prefetch!r}")
    _check_int_in("tile_prefetch_bytes", tile_prefetch_bytes, MIN_PREFETCH_BYTES, MAX_PREFETCH_BYTES)
    _check_int_in("tile_stage_bytes", tile_stage_bytes, 0, MAX_PREFETCH_BYTES // 2)
    _check_int_in("tile_kv_mma_bytes", tile_kv_mma_bytes, 0, MAX_PREFETCH_BYTES)
    if tile_linear not in ("rows", "spread"):
        raise ValueError(f"tile_linear must be 'rows' or 'spread', got {tile_linear!r}")
    if tile_mma not in ("wgmma", "sync"):
        raise ValueError(f"tile_mma must be 'wgmma' or 'sync', got {tile_mma!r}")
    if isinstance(tile_rows_in_flight, bool) or tile_rows_in_flight not in ROWS_IN_FLIGHT:
        raise ValueError(f"tile_rows_in_flight must be 1, 2, 4, 8 or 16, got {tile_rows_in_flight!r}")
    if format not in ("isa", "bin", "fatbin"):
        raise ValueError(f"format must be 'isa', 'bin' or 'fatbin', got {format!r}")
    if workers is None:
        workers = 4 if target == "cpu" else 132
    if target == "cuda" and (threads_per_worker < 32 or threads_per_worker > 1024 or threads_per_worker % 32):
        raise ValueError(f"threads_per_worker must be a multiple of 32 in [32, 1024], got {threads_per_worker}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive int, got {workers!r}")
    text = module if isinstance(module, str) else module.operation.get_asm(print_generic_op_form=True)

    options = {"target": target, "workers": workers, "mode": mode, "optimize": optimize, "verify": verify,
               "profile": profile}
    if target == "cuda":
        options.update(chip=chip, features=features, format=format, backoff_ns=backoff_ns,
                       threads_per_worker=threads_per_worker, tile_unroll=tile_unroll,
                       tile_prefetch=tile_prefetch, opt_level=opt_level)
        if tile_kv_prefetch != "none":
            options["tile_kv_prefetch"] = tile_kv_prefetch
        if tile_prefetch_tasks:
            options["tile_prefetch_tasks"] = list(tile_prefetch_tasks)
        if "shared" in (tile_prefetch, tile_kv_prefetch):
            options["tile_prefetch_bytes"] = tile_prefetch_bytes
        if tile_kv_mma_bytes:
            options["tile_kv_mma_bytes"] = tile_kv_mma_bytes
        if tile_stage_bytes:
            options["tile_stage_bytes"] = tile_stage_bytes
            if tile_stage_tasks:
                options["tile_stage_tasks"] = list(tile_stage_tasks)
        options["tile_linear"] = tile_linear
        options["tile_mma"] = tile_mma
        if tile_rows_in_flight != 1:
            options["tile_rows_in_flight"] = tile_rows_in_flight
    # A host artifact is compiled for this CPU's instruction set: part of
    # its key, so that a cache shared between machines holds one per CPU.
    isa = host_isa_flags() if target == "cpu" else None
    key = hashlib.sha256(json.dumps([TOOLCHAIN, _compiler_fingerprint(), options, text, isa],
                                    sort_keys=True).encode()).hexdigest()[:24]
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    out_dir = cache / key
    if use_cache and (out_dir / METADATA).exists():
        try:
            return load(out_dir)
        except ArtifactError:
            pass  # an entry of an older format, or damaged: compiled again below

    with Context():
        mod = parse(text)
        # Collectives become tasks first, so that the metadata's task list
        # (trace and error records index it) is the lowered kernel's.
        run_pipeline(mod, "builtin.module(et.kernel(et-lower-collectives))", name="collectives")
        kernel = analysis._one_kernel(mod)
        name = kernel.attributes["sym_name"].value
        graph = analysis.event_graph(kernel)
        devices = int(kernel.attributes["devices"].value) if "devices" in kernel.attributes else 1
        abi = _runtime_abi(target, profile, devices)
        metadata: dict[str, Any] = {
            "format": FORMAT_VERSION, "toolchain": TOOLCHAIN, "llvm": LLVM_VERSION,
            "target": target, "kernel": name, "workers": workers, "mode": mode, "profile": profile,
            "options": options, "ir_hash": key,
            "arguments": _arguments(kernel),
            "tasks": [t["name"] for t in graph["tasks"]],
            "events": [{"name": e["name"], "shape": e["shape"], "count_kind": e["count_kind"],
                        "count": e["count"]} for e in graph["events"]],
            "counter_words": _counter_words(graph, abi, devices),
            "abi": abi,
        }
        if devices > 1:
            metadata["devices"] = devices
        if any(op.operation.name == "et.repeat" for op in kernel.regions[0].blocks[0].operations):
            # Several steps per launch: error and trace records carry the step.
            metadata["steps"] = True
        common = {"workers": workers, "mode": mode, "optimize": optimize, "verify": verify, "profile": profile}
        if target == "cpu":
            pipeline = pipeline_spec("et-lower-to-cpu-pipeline", common)
        else:
            pipeline = pipeline_spec("et-lower-to-nvvm-pipeline", {
                **common, "chip": chip, "features": features, "format": format, "backoff-ns": backoff_ns,
                "tile-unroll": tile_unroll, "tile-prefetch": tile_prefetch, "tile-kv-prefetch": tile_kv_prefetch,
                "tile-prefetch-tasks": tile_prefetch_tasks, "tile-prefetch-bytes": tile_prefetch_bytes,
                "tile-kv-mma-bytes": tile_kv_mma_bytes, "tile-stage-bytes": tile_stage_bytes,
                "tile-stage-tasks": tile_stage_tasks, "tile-linear": tile_linear, "tile-mma": tile_mma,
                "tile-rows-in-flight": tile_rows_in_flight, "threads": threads_per_worker, "opt-level": opt_level})
        run_pipeline(mod, pipeline, name=name)
        tmp = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=_ensure(cache)))
        try:
            if target == "cpu":
                _emit_shared_object(mod, tmp / "kernel.o", tmp / "kernel.so")
                metadata.update(binary="kernel.so", entry=name + abi["entry_suffix"], threads_per_worker=1,
                                shared_memory_bytes=0, host_isa=isa)
            else:
                binary = _ptx_from_binary(mod)
                suffix = {"isa": "ptx", "bin": "cubin", "fatbin": "fatbin"}[format]
                (tmp / f"kernel.{suffix}").write_bytes(binary)
                # The shared prefetches lay their buffers out in the dynamic
                # shared memory, which the launch provides.
                dynamic = tile_prefetch_bytes if "shared" in (tile_prefetch, tile_kv_prefetch) else 0
                metadata.update(binary=f"kernel.{suffix}", entry=name,
                                threads_per_worker=threads_per_worker, shared_memory_bytes=32,
                                dynamic_shared_bytes=dynamic)
                if format == "bin":
                    # What ptxas gave the kernel: registers and stack frame
                    # per thread (spills grow the frame).
                    from .cubin import cubin_resources

                    metadata["resources"] = cubin_resources(binary, name)
            metadata["binary_sha256"] = binary_digest((tmp / metadata["binary"]).read_bytes())
            (tmp / METADATA).write_text(json.dumps(metadata, indent=2))
            if out_dir.exists():
                shutil.rmtree(out_dir)
            tmp.rename(out_dir)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return load(out_dir)


def pipeline_spec(name: str, options: dict) -> str:
    """The textual pass pipeline that runs pipeline `name` (one of the
    pipelines registered by the compiler, such as et-lower-to-nvvm-pipeline)
    on the module with `options`, by their pipeline option names: bools as
    1/0, sequences comma-separated (left out when empty). The option names
    and their allowed values are declared once, in the pipeline's C++
    options; a bad one fails there with the parser's message."""
    parts = []
    for key, value in options.items():
        if isinstance(value, bool):
            value = int(value)
        elif isinstance(value, (list, tuple)):
            if not value:
                continue
            value = ",".join(str(v) for v in value)
        parts.append(f"{key}={value}")
    return f"builtin.module({name}{{{' '.join(parts)}}})"


def _check_int_in(name: str, value, lo: int, hi: int) -> None:
    """Raises a ValueError naming option `name` unless `value` is an int (not
    a bool) in [lo, hi]."""
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"{name} must be an int in [{lo}, {hi}], got {value!r}")


@functools.lru_cache(maxsize=1)
def _compiler_fingerprint() -> str:
    """Size and modification time of the compiler library (the dialect,
    passes and lowerings), so that a rebuilt compiler never reuses artifacts
    cached by the previous build of the same version."""
    libs = Path(__file__).parent / "_mlir_libs"
    parts = []
    for lib in sorted(libs.glob("libEventTensor*")):
        st = lib.stat()
        parts.append(f"{lib.name}:{st.st_size}:{st.st_mtime_ns}")
    return ";".join(parts)


def _ensure(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _emit_shared_object(module, obj: Path, so: Path) -> None:
    from ._mlir_libs._mlirExecutionEngine import ExecutionEngine

    engine = ExecutionEngine(module, opt_level=2)
    engine.dump_to_object_file(str(obj))
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        raise RuntimeError("linking the host artifact needs a C compiler (cc, gcc or clang); set CC")
    result = subprocess.run([cc, "-shared", "-o", str(so), str(obj)], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"linking {so.name} failed:\n{result.stderr}")
