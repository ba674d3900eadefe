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


def _elementwise_kernel(m, h, in_t, out_t, residual):
    res_arg = f", %res: memref<{m}x{h}xf32>" if residual else ""
    res_use = " residual(%res)" if residual else ""
    res_type = f", memref<{m}x{h}xf32>" if residual else ""
    return f"""
et.kernel @k(%x: memref<{m}x{h}x{in_t}>, %w: memref<{h}x{in_t}>, %y: memref<{m}x{h}x{out_t}>,
             %g: memref<{m}x{h}x{in_t}>, %u: memref<{m}x{h}x{in_t}>, %o: memref<{m}x{h}x{out_t}>{res_arg}) {{
  %c1 = arith.constant 1 : index
  %c0 = arith.constant 0 : index
  %ch = arith.constant {h} : index
  et.task @norm tiles(%t) in (%c1) {{
    et.rmsnorm %x, %w, %y eps(1.0e-05){res_use} : memref<{m}x{h}x{in_t}>, memref<{h}x{in_t}>, memref<{m}x{h}x{out_t}>{res_type}
  }}
  et.task @act tiles(%t) in (%c1) {{
    et.silu_mul %g, %u, %o cols(%c0, %ch) : memref<{m}x{h}x{in_t}>, memref<{m}x{h}x{in_t}>, memref<{m}x{h}x{out_t}>
  }}
}}
"""


@pytest.mark.parametrize("m,h,in_t,out_t,residual", [
    (1, 2048, "bf16", "bf16", True),
    (3, 100, "f32", "f32", False),
    (2, 64, "bf16", "f32", False),
])
def test_rmsnorm_and_silu_mul_match_float64(m, h, in_t, out_t, residual, tmp_path):
    np_t = {"bf16": BF16, "f32": np.float32}
    rng = np.random.default_rng(h + m)
    x = rng.standard_normal((m, h)).astype(np_t[in_t])
    w = (1 + 0.1 * rng.standard_normal(h)).astype(np_t[in_t])
    g = rng.standard_normal((m, h)).astype(np_t[in_t])
    u = rng.standard_normal((m, h)).astype(np_t[in_t])
    res = rng.standard_normal((m, h)).astype(np.float32)
    h64 = x.astype(np.float64) + (res.astype(np.float64) if residual else 0)
    ref_norm = h64 / np.sqrt((h64 * h64).mean(axis=1, keepdims=True) + 1e-5) * w.astype(np.float64)
    g64 = g.astype(np.float64)
    ref_act = g64 / (1 + np.exp(-g64)) * u.astype(np.float64)
    y = np.full((m, h), np.nan, np_t[out_t])
    o = np.full((m, h), np.nan, np_t[out_t])
    art = et.compile(_elementwise_kernel(m, h, in_t, out_t, residual), target="cpu", workers=2, cache_dir=tmp_path)
    args = [x, w, y, g, u, o] + ([res] if residual else [])
    art.launcher()(*args)
    tol = 1e-2 if out_t == "bf16" else 1e-5
    assert _rel_err(y, ref_norm) < tol
    assert _rel_err(o, ref_act) < tol
    if residual:
        assert _rel_err(res, h64) < 1e-6, "the residual buffer must hold x + residual"
