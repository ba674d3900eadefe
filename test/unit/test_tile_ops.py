"""Numerics of the tile compute ops on the CPU target, against float64 numpy
references (tolerances from the GPU method: f32 outputs well under 1e-3
relative error, bf16 outputs under 1e-2)."""

import numpy as np
import pytest

import event_tensor as et

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = ml_dtypes.bfloat16


def _rel_err(got, ref):
    got = np.asarray(got, np.float64)
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


def _linear_kernel(m, k, n, rows, out, dynamic_m=False):
    mt = "?" if dynamic_m else str(m)
    tiles = -(-n // rows)
    return f"""
et.kernel @lin(%x: memref<{mt}x{k}xbf16>, %w: memref<{n}x{k}xbf16>, %y: memref<{mt}x{n}x{out}>) {{
  %ct = arith.constant {tiles} : index
  %cr = arith.constant {rows} : index
  et.task @rows tiles(%t) in (%ct) {{
    %r0 = arith.muli %t, %cr : index
    et.linear %x, %w, %y rows(%r0, %cr) : memref<{mt}x{k}xbf16>, memref<{n}x{k}xbf16>, memref<{mt}x{n}x{out}>
  }}
}}
"""


@pytest.mark.parametrize("m,k,n,rows,out,dynamic_m", [
    (1, 2048, 130, 16, "f32", False),
    (3, 264, 37, 8, "f32", False),
    (16, 8, 5, 4, "bf16", False),
    (2, 1024, 64, 32, "bf16", True),
])
def test_linear_matches_float64(m, k, n, rows, out, dynamic_m, tmp_path):
    rng = np.random.default_rng(m * 1000 + k + n)
    x = rng.standard_normal((m, k)).astype(BF16)
    w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(BF16)
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    dtype = np.float32 if out == "f32" else BF16
    art = et.compile(_linear_kernel(m, k, n, rows, out, dynamic_m), target="cpu", workers=3,
                     mode="dynamic", cache_dir=tmp_path)
    y = np.full((m, n), np.nan, dtype)
    art.launcher()(x, w, y)
    assert not np.isnan(y.astype(np.float64)).any(), "every output must be written"
    assert _rel_err(y, ref) < (1e-5 if out == "f32" else 1e-2)


def test_linear_verifier_errors(tmp_path):
    from event_tensor import compiler

    bad = _linear_kernel(1, 2048, 64, 16, "f32").replace("memref<64x2048xbf16>", "memref<64x1024xbf16>")
    with pytest.raises(compiler.EventTensorCompileError, match="x has K = 2048 but w has K = 1024"):
        et.compile(bad, target="cpu", cache_dir=tmp_path)
