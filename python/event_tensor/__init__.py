"""EventTensor: a compiler for persistent GPU megakernels.

Tiled tasks and their dependencies are explicit in the `et` MLIR dialect:
*event tensors* are arrays of counters indexed by tile coordinates; tasks wait
on and signal elements of them. This package holds the MLIR Python bindings of
the dialect (`event_tensor.ir`, `event_tensor.dialects.et`, ...), the compiler
driver (`event_tensor.compiler`) and the `event-tensor` command line.

Importing `event_tensor` itself loads no MLIR: the MLIR parts load on first use,
so that runtime-only code can import the package on machines without MLIR.
"""

__version__ = "0.1.0"

__all__ = ["__version__", "compile"]


def compile(module, target: str = "cpu", **options):
    """Compiles the et.kernel of `module` (an MLIR Module or IR text) for
    `target` ("cpu" or "cuda") into an `event_tensor.runtime.Artifact`; see
    `event_tensor.build.compile_kernel` for the options. Needs MLIR; the
    artifact it returns runs without it."""
    from .build import compile_kernel

    return compile_kernel(module, target=target, **options)
