"""Numerics of the tile compute ops on the CPU target, against float64 numpy
references (tolerances from the GPU method: f32 outputs well under 1e-3
relative error, bf16 outputs under 1e-2)."""

import numpy as np
import pytest

import event_tensor as et
from event_tensor import reference

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


@pytest.mark.parametrize("m,out", [(1, "bf16"), (3, "f32")])
def test_gated_linear_has_the_bits_of_two_linears_and_silu_mul(m, out, tmp_path):
    """et.linear ... gated(%wu): silu(x wg^T) * (x wu^T) in one pass, the
    bits of two et.linear into f32 and et.silu_mul after them (rows past N
    untouched), and within f32 rounding of float64."""
    k, n, rows = 512, 40, 16
    tiles = -(-n // rows)
    text = f"""
et.kernel @k(%x: memref<{m}x{k}xbf16>, %wg: memref<{n}x{k}xbf16>, %wu: memref<{n}x{k}xbf16>,
             %act: memref<{m}x{n}x{out}>, %g: memref<{m}x{n}xf32>, %u: memref<{m}x{n}xf32>,
             %act2: memref<{m}x{n}x{out}>) {{
  %ct = arith.constant {tiles} : index
  %cr = arith.constant {rows} : index
  et.task @gated tiles(%t) in (%ct) {{
    %r0 = arith.muli %t, %cr : index
    et.linear %x, %wg, %act rows(%r0, %cr) gated(%wu)
        : memref<{m}x{k}xbf16>, memref<{n}x{k}xbf16>, memref<{m}x{n}x{out}>, memref<{n}x{k}xbf16>
  }}
  et.task @apart tiles(%t) in (%ct) {{
    %r0 = arith.muli %t, %cr : index
    et.linear %x, %wg, %g rows(%r0, %cr) : memref<{m}x{k}xbf16>, memref<{n}x{k}xbf16>, memref<{m}x{n}xf32>
    et.linear %x, %wu, %u rows(%r0, %cr) : memref<{m}x{k}xbf16>, memref<{n}x{k}xbf16>, memref<{m}x{n}xf32>
    et.silu_mul %g, %u, %act2 cols(%r0, %cr) : memref<{m}x{n}xf32>, memref<{m}x{n}xf32>, memref<{m}x{n}x{out}>
  }}
}}
"""
    rng = np.random.default_rng(m + n)
    x = rng.standard_normal((m, k)).astype(BF16)
    wg = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(BF16)
    wu = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(BF16)
    dtype = np.float32 if out == "f32" else BF16
    act, act2 = np.zeros((m, n), dtype), np.zeros((m, n), dtype)
    g, u = np.zeros((m, n), np.float32), np.zeros((m, n), np.float32)
    art = et.compile(text, target="cpu", workers=3, mode="dynamic", cache_dir=tmp_path)
    art.launcher()(x, wg, wu, act, g, u, act2)
    assert act.astype(np.float32).any() and np.array_equal(act.astype(np.float32), act2.astype(np.float32))
    g64 = x.astype(np.float64) @ wg.astype(np.float64).T
    ref = g64 / (1 + np.exp(-g64)) * (x.astype(np.float64) @ wu.astype(np.float64).T)
    assert _rel_err(act, ref) < (1e-5 if out == "f32" else 1e-2)


def test_linear_accumulate_adds_to_y(tmp_path):
    m, k, n = 3, 512, 40
    rng = np.random.default_rng(5)
    x = rng.standard_normal((m, k)).astype(BF16)
    w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(BF16)
    y0 = rng.standard_normal((m, n)).astype(np.float32)
    ref = y0.astype(np.float64) + x.astype(np.float64) @ w.astype(np.float64).T
    text = _linear_kernel(m, k, n, 16, "f32", dynamic_m=True).replace(
        "rows(%r0, %cr) :", "rows(%r0, %cr) accumulate :")
    art = et.compile(text, target="cpu", workers=2, mode="static", cache_dir=tmp_path)
    y = y0.copy()
    art.launcher()(x, w, y)
    assert _rel_err(y, ref) < 1e-5
    # Without accumulate, y is overwritten: the sum alone.
    art = et.compile(_linear_kernel(m, k, n, 16, "f32", dynamic_m=True), target="cpu", workers=2,
                     mode="static", cache_dir=tmp_path)
    y = y0.copy()
    art.launcher()(x, w, y)
    assert _rel_err(y, ref - y0) < 1e-5


# Split-K et.linear (`accumulate atomic`): every tile adds its block of K
# into the same rows of y. @heads: 16 tiles of one head's 64 columns each
# over all 2048 rows (short rows of 8 lanes; at 256 threads 64 loads per
# thread: four passes); @chunks: 4 tiles of 24 columns over 1000 rows (3
# chunks per row on 4 lanes, one idle; the last thread rows past N), after
# a wait (their weights go before it with tile_prefetch="registers").
SPLIT_K = """
et.kernel @split_k(%x: memref<?x1024xbf16>, %w: memref<2048x1024xbf16>, %y: memref<?x2048xf32>,
                   %x2: memref<?x96xbf16>, %w2: memref<1000x96xbf16>, %y2: memref<?x1000xf32>) {
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c24 = arith.constant 24 : index
  %c16 = arith.constant 16 : index
  %c64 = arith.constant 64 : index
  %c1000 = arith.constant 1000 : index
  %c2048 = arith.constant 2048 : index
  %m = memref.dim %x, %c0 : memref<?x1024xbf16>
  %e = et.event.create() : !et.event<>
  et.task @heads tiles(%g) in (%c16) {
    %k0 = arith.muli %g, %c64 : index
    %xg = memref.subview %x[0, %k0] [%m, 64] [1, 1] : memref<?x1024xbf16> to memref<?x64xbf16, strided<[1024, 1], offset: ?>>
    %wg = memref.subview %w[0, %k0] [2048, 64] [1, 1] : memref<2048x1024xbf16> to memref<2048x64xbf16, strided<[1024, 1], offset: ?>>
    et.linear %xg, %wg, %y rows(%c0, %c2048) accumulate atomic : memref<?x64xbf16, strided<[1024, 1], offset: ?>>, memref<2048x64xbf16, strided<[1024, 1], offset: ?>>, memref<?x2048xf32>
    et.event.signal %e[] : !et.event<>
  }
  et.task @chunks tiles(%c) in (%c4) {
    %k0 = arith.muli %c, %c24 : index
    %xc = memref.subview %x2[0, %k0] [%m, 24] [1, 1] : memref<?x96xbf16> to memref<?x24xbf16, strided<[96, 1], offset: ?>>
    %wc = memref.subview %w2[0, %k0] [1000, 24] [1, 1] : memref<1000x96xbf16> to memref<1000x24xbf16, strided<[96, 1], offset: ?>>
    et.event.wait %e[] : !et.event<>
    et.linear %xc, %wc, %y2 rows(%c0, %c1000) accumulate atomic : memref<?x24xbf16, strided<[96, 1], offset: ?>>, memref<1000x24xbf16, strided<[96, 1], offset: ?>>, memref<?x1000xf32>
  }
}
"""


def split_k_case(rng, m):
    """Inputs of SPLIT_K for M = m (bf16 as ml_dtypes) and the float64 sums."""
    x = rng.standard_normal((m, 1024)).astype(BF16)
    w = (rng.standard_normal((2048, 1024)) / 32).astype(BF16)
    y = rng.standard_normal((m, 2048)).astype(np.float32)
    x2 = rng.standard_normal((m, 96)).astype(BF16)
    w2 = (rng.standard_normal((1000, 96)) / 10).astype(BF16)
    y2 = rng.standard_normal((m, 1000)).astype(np.float32)
    f = lambda a: a.astype(np.float64)
    refs = {"y": f(y) + f(x) @ f(w).T, "y2": f(y2) + f(x2) @ f(w2).T}
    return dict(x=x, w=w, y=y, x2=x2, w2=w2, y2=y2), refs


def _matches_float64(text, case, seed, workers, tmp_path, tol=lambda name: 1e-5):
    """Compiles `text` for the host and launches it at M = 1 and 3 on the
    inputs of `case(rng, m)`; each output within `tol(name)` of its float64
    result."""
    launch = et.compile(text, target="cpu", workers=workers, mode="dynamic", cache_dir=tmp_path).launcher()
    rng = np.random.default_rng(seed)
    for m in (1, 3):
        inputs, refs = case(rng, m)
        launch(*inputs.values())
        for name, ref in refs.items():
            assert _rel_err(inputs[name].astype(np.float64), ref) < tol(name), (m, name)


def test_split_k_atomic_linear_matches_float64(tmp_path):
    """Tiles on several host threads add their blocks of K into the same
    rows at once (atomic adds): the sums of all of them, at M = 1 and 3."""
    _matches_float64(SPLIT_K, split_k_case, 8, 4, tmp_path)


# et.linear ... norm: the f32 residual stream read through an RMSNorm.
# @rows: 64 tiles of 32 rows of 2048 (K = 1024; spread: 12 warps of 384
# threads take 2-3 rows each, the first row's loads giving the squares);
# @few: 512 tiles of 2 rows of 1024 (spread: K split over the warps, the
# squares in a pass of their own); @gated: 16 tiles of 32 gate and up rows
# into a bf16 activation; @one: a static single-token view (M = 1).
NORM_LINEAR = """
et.kernel @norm_linear(%h: memref<?x1024xf32>, %g: memref<1024xbf16>, %w: memref<2048x1024xbf16>,
                       %y: memref<?x2048xf32>, %w2: memref<1024x1024xbf16>, %y2: memref<?x1024xf32>,
                       %wg: memref<512x1024xbf16>, %wu: memref<512x1024xbf16>, %a: memref<?x512xbf16>,
                       %y1: memref<1x1024xf32>) {
  %c2 = arith.constant 2 : index
  %c16 = arith.constant 16 : index
  %c32 = arith.constant 32 : index
  %c64 = arith.constant 64 : index
  %c512 = arith.constant 512 : index
  et.task @rows tiles(%t) in (%c64) {
    %r0 = arith.muli %t, %c32 : index
    et.linear %h, %w, %y rows(%r0, %c32) norm(%g : memref<1024xbf16>) eps(1.0e-06)
        : memref<?x1024xf32>, memref<2048x1024xbf16>, memref<?x2048xf32>
  }
  et.task @few tiles(%t) in (%c512) {
    %r0 = arith.muli %t, %c2 : index
    et.linear %h, %w2, %y2 rows(%r0, %c2) norm(%g : memref<1024xbf16>) eps(1.0e-06)
        : memref<?x1024xf32>, memref<1024x1024xbf16>, memref<?x1024xf32>
  }
  et.task @gated tiles(%t) in (%c16) {
    %r0 = arith.muli %t, %c32 : index
    et.linear %h, %wg, %a rows(%r0, %c32) gated(%wu) norm(%g : memref<1024xbf16>) eps(1.0e-06)
        : memref<?x1024xf32>, memref<512x1024xbf16>, memref<?x512xbf16>, memref<512x1024xbf16>
  }
  et.task @one tiles(%t) in (%c32) {
    %r0 = arith.muli %t, %c32 : index
    %h1 = memref.subview %h[0, 0] [1, 1024] [1, 1] : memref<?x1024xf32> to memref<1x1024xf32, strided<[1024, 1]>>
    et.linear %h1, %w2, %y1 rows(%r0, %c32) norm(%g : memref<1024xbf16>) eps(1.0e-06)
        : memref<1x1024xf32, strided<[1024, 1]>>, memref<1024x1024xbf16>, memref<1x1024xf32>
  }
}
"""


def norm_linear_case(rng, m):
    """Inputs of NORM_LINEAR for M = m (bf16 as ml_dtypes) and the float64
    results (@one's for the first token)."""
    h = (rng.standard_normal((m, 1024)) * 3).astype(np.float32)
    g = (1 + rng.standard_normal(1024) / 4).astype(BF16)
    w = (rng.standard_normal((2048, 1024)) / 32).astype(BF16)
    w2 = (rng.standard_normal((1024, 1024)) / 32).astype(BF16)
    wg = (rng.standard_normal((512, 1024)) / 32).astype(BF16)
    wu = (rng.standard_normal((512, 1024)) / 32).astype(BF16)
    f = lambda a: a.astype(np.float64)
    # x * g rounded to bf16 (as the op does), then the inverse RMS.
    xn = f((h * g.astype(np.float32)).astype(BF16)) / np.sqrt(np.mean(f(h) ** 2, axis=1, keepdims=True) + 1e-6)
    gate, up = xn @ f(wg).T, xn @ f(wu).T
    refs = {"y": xn @ f(w).T, "y2": xn @ f(w2).T, "a": gate / (1 + np.exp(-gate)) * up, "y1": xn[:1] @ f(w2).T}
    inputs = dict(h=h, g=g, w=w, y=np.zeros((m, 2048), np.float32), w2=w2, y2=np.zeros((m, 1024), np.float32),
                  wg=wg, wu=wu, a=np.zeros((m, 512), BF16), y1=np.zeros((1, 1024), np.float32))
    return inputs, refs


def test_norm_linear_matches_float64(tmp_path):
    """`norm`: each token's inverse RMS scales its finished sums (both of a
    gated row before the activation), at M = 1 and 3 and for a static
    single-token view; the bf16 activation within its rounding."""
    _matches_float64(NORM_LINEAR, norm_linear_case, 5, 3, tmp_path, lambda name: 8e-3 if name == "a" else 1e-5)


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


DECODE_OPS = """
et.kernel @k(%table: memref<50x64xbf16>, %ids: memref<2xi32>, %h: memref<2x64xf32>,
             %q: memref<2x4x16xf32>, %pos: memref<2xi32>, %kq: memref<2x4x16xf32>,
             %new: memref<2x2x16xf32>, %cache: memref<10x2x16xbf16>, %at: index,
             %logits: memref<2x300xf32>, %pv: memref<2x5xf32>, %pi: memref<2x5xi32>,
             %v: memref<2x1xf32>, %i: memref<2x1xi32>) {
  %c1 = arith.constant 1 : index
  %c5 = arith.constant 5 : index
  %c64 = arith.constant 64 : index
  %z = arith.constant 0 : index
  %done = et.event.create() : !et.event<>
  et.task @embed tiles(%t) in (%c1) {
    et.embedding %table, %ids, %h : memref<50x64xbf16>, memref<2xi32>, memref<2x64xf32>
  }
  et.task @rope tiles(%t) in (%c1) {
    et.rope %q, %pos theta(5.0e+05) llama3_scaling([32.0, 1.0, 4.0, 8192.0]) : memref<2x4x16xf32>, memref<2xi32>
    et.rope %kq, %pos theta(1.0e+06) : memref<2x4x16xf32>, memref<2xi32>
  }
  et.task @append tiles(%t) in (%c1) {
    et.kv_append %new, %cache, %at : memref<2x2x16xf32>, memref<10x2x16xbf16>
  }
  et.task @argmax tiles(%t) in (%c5) {
    %c0 = arith.muli %t, %c64 : index
    et.argmax %logits, %pv, %pi cols(%c0, %c64) slot(%t) : memref<2x300xf32>, memref<2x5xf32>, memref<2x5xi32>
    et.event.signal %done[] : !et.event<>
  }
  et.task @final tiles(%t) in (%c1) {
    et.event.wait %done[] : !et.event<>
    et.argmax %pv, %v, %i cols(%z, %c5) slot(%z) from(%pi) : memref<2x5xf32>, memref<2x1xf32>, memref<2x1xi32>, memref<2x5xi32>
  }
}
"""


def _rope_ref(x, pos, theta, scaling=None):
    return reference.rope(x, pos, theta, scaling)


def test_decode_ops_match_float64(tmp_path):
    rng = np.random.default_rng(11)
    table = rng.standard_normal((50, 64)).astype(BF16)
    ids = np.array([7, 99], np.int32)  # 99 is out of range: a zero row
    h = np.full((2, 64), np.nan, np.float32)
    q = rng.standard_normal((2, 4, 16)).astype(np.float32)
    kq = rng.standard_normal((2, 4, 16)).astype(np.float32)
    pos = np.array([5, 3000], np.int32)
    new = rng.standard_normal((2, 2, 16)).astype(np.float32)
    cache = np.zeros((10, 2, 16), BF16)
    logits = rng.standard_normal((2, 300)).astype(np.float32)
    logits[1, 123] = logits[1, 250] = 10.0  # a tie: the smaller index wins
    pv, pi = np.zeros((2, 5), np.float32), np.zeros((2, 5), np.int32)
    v, i = np.zeros((2, 1), np.float32), np.zeros((2, 1), np.int32)
    ref_q = _rope_ref(q, pos, 5e5, (32.0, 1.0, 4.0, 8192.0))
    ref_kq = _rope_ref(kq, pos, 1e6)
    art = et.compile(DECODE_OPS, target="cpu", workers=3, mode="dynamic", cache_dir=tmp_path)
    art.launcher()(table, ids, h, q, pos, kq, new, cache, 8, logits, pv, pi, v, i)
    assert np.array_equal(h[0], table[7].astype(np.float32)) and not h[1].any()
    assert _rel_err(q, ref_q) < 1e-4 and _rel_err(kq, ref_kq) < 1e-4
    assert np.array_equal(cache[8:10].astype(np.float32), new.astype(BF16).astype(np.float32))
    assert not cache[:8].astype(np.float32).any()
    assert i[:, 0].tolist() == [int(np.argmax(logits[0])), 123]
    assert v[:, 0].tolist() == [float(logits[0].max()), 10.0]


ROPE_INTO = """
et.kernel @k(%k: memref<2x3x128xf32>, %pos: memref<2xi32>, %kn: memref<128xbf16>, %cache: memref<10x3x128xbf16>,
             %at: index, %q: memref<2x4x64xf32>, %s: memref<2x2x48xf32>, %sn: memref<48xf32>,
             %so: memref<4x2x48xf32>, %d: memref<2x2x?xf32>, %dn: memref<?xf32>,
             %o: memref<1x2x64xf32>, %opos: memref<1xi32>, %on: memref<64xbf16>, %oc: memref<6x2x64xbf16>) {
  %c1 = arith.constant 1 : index
  %z = arith.constant 0 : index
  %two = arith.constant 2 : index
  %three = arith.constant 3 : index
  %ready = et.event.create() : !et.event<>
  et.task @key tiles(%t) in (%c1) {
    et.rope_into %k, %pos, %cache[%at] theta(1.0e+06) norm(%kn) eps(1.0e-06)
        : memref<2x3x128xf32>, memref<2xi32>, memref<10x3x128xbf16>, memref<128xbf16>
  }
  et.task @query tiles(%t) in (%c1) {
    et.rope_into %q, %pos, %q[%z] theta(5.0e+05) llama3_scaling([32.0, 1.0, 4.0, 8192.0])
        : memref<2x4x64xf32>, memref<2xi32>, memref<2x4x64xf32>
  }
  et.task @narrow tiles(%t) in (%c1) {
    et.rope_into %s, %pos, %so[%two] theta(1.0e+04) norm(%sn) eps(1.0e-05)
        : memref<2x2x48xf32>, memref<2xi32>, memref<4x2x48xf32>, memref<48xf32>
  }
  et.task @dynamic tiles(%t) in (%c1) {
    et.rope_into %d, %pos, %d[%z] theta(1.0e+06) norm(%dn) eps(1.0e-06)
        : memref<2x2x?xf32>, memref<2xi32>, memref<2x2x?xf32>, memref<?xf32>
    et.event.signal %ready[] : !et.event<>
  }
  et.task @after_wait tiles(%t) in (%c1) {
    et.event.wait %ready[] : !et.event<>
    et.rope_into %o, %opos, %oc[%three] theta(5.0e+05) norm(%on) eps(1.0e-05) llama3_scaling([32.0, 1.0, 4.0, 8192.0])
        : memref<1x2x64xf32>, memref<1xi32>, memref<6x2x64xbf16>, memref<64xbf16>
  }
}
"""


def rope_into_case(rng):
    """Inputs of ROPE_INTO (numpy; bf16 as ml_dtypes) and the float64
    results expected in its outputs: the key heads normalized, rotated and
    written at rows 9 and 10 of a 10-row cache (the second past its end),
    the query heads rotated in place, heads of 48 written at rows 2 and 3,
    and heads of a dynamic size normalized and rotated in place; then, after
    a wait, one token's heads (on the GPU its angles and weights come before
    the wait) written at row 3."""
    pos = np.array([5, 3000], np.int32)
    k = rng.standard_normal((2, 3, 128)).astype(np.float32)
    kn = (1 + 0.1 * rng.standard_normal(128)).astype(BF16)
    q = rng.standard_normal((2, 4, 64)).astype(np.float32)
    s = rng.standard_normal((2, 2, 48)).astype(np.float32)
    sn = (1 + 0.1 * rng.standard_normal(48)).astype(np.float32)
    d = rng.standard_normal((2, 2, 128)).astype(np.float32)
    dn = (1 + 0.1 * rng.standard_normal(128)).astype(np.float32)
    ref_cache = np.zeros((10, 3, 128))
    ref_cache[9] = reference.rope(reference.head_rmsnorm(k, kn.astype(np.float32), 1e-6), pos, 1e6)[0]
    ref_so = np.zeros((4, 2, 48))
    ref_so[2:] = reference.rope(reference.head_rmsnorm(s, sn, 1e-5), pos, 1e4)
    o = rng.standard_normal((1, 2, 64)).astype(np.float32)
    opos = np.array([777], np.int32)
    on = (1 + 0.1 * rng.standard_normal(64)).astype(BF16)
    ref_oc = np.zeros((6, 2, 64))
    ref_oc[3:4] = reference.rope(reference.head_rmsnorm(o, on.astype(np.float32), 1e-5), opos, 5e5,
                                 (32.0, 1.0, 4.0, 8192.0))
    inputs = dict(k=k, pos=pos, kn=kn, cache=np.zeros((10, 3, 128), BF16), at=9, q=q, s=s, sn=sn,
                  so=np.zeros((4, 2, 48), np.float32), d=d, dn=dn, o=o, opos=opos, on=on,
                  oc=np.zeros((6, 2, 64), BF16))
    refs = dict(cache=ref_cache, q=reference.rope(q, pos, 5e5, (32.0, 1.0, 4.0, 8192.0)), so=ref_so,
                d=reference.rope(reference.head_rmsnorm(d, dn, 1e-6), pos, 1e6), oc=ref_oc)
    return inputs, refs


def test_rope_into_matches_float64(tmp_path):
    inputs, refs = rope_into_case(np.random.default_rng(12))
    art = et.compile(ROPE_INTO, target="cpu", workers=3, mode="dynamic", cache_dir=tmp_path)
    art.launcher()(*inputs.values())
    cache = inputs["cache"].astype(np.float64)
    assert not cache[:9].any(), "only row 9 is written (row 10 is past the cache)"
    assert _rel_err(cache, refs["cache"]) < 1e-2
    assert not inputs["so"][:2].any()
    oc = inputs["oc"].astype(np.float64)
    assert not oc[:3].any() and not oc[4:].any() and _rel_err(oc, refs["oc"]) < 1e-2
    for name in ("q", "so", "d"):
        assert _rel_err(inputs[name], refs[name]) < 1e-4, name  # f32 angles at position 3000


def test_rope_into_has_the_bits_of_rmsnorm_then_rope(tmp_path):
    """Qwen3's per-head norm and RoPE as one et.rope_into, and as et.rmsnorm
    over the heads then et.rope: the same f32 bits (the same order of the
    sum of squares), so the fused op changes no model output."""
    text = """
et.kernel @k(%x: memref<1x4x128xf32>, %y: memref<1x4x128xf32>, %z: memref<1x4x128xf32>, %w: memref<128xbf16>,
             %pos: memref<1xi32>) {
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0 : index
  %e = et.event.create() : !et.event<>
  et.task @fused tiles(%t) in (%c1) {
    et.rope_into %x, %pos, %y[%zero] theta(1.0e+06) norm(%w) eps(1.0e-06)
        : memref<1x4x128xf32>, memref<1xi32>, memref<1x4x128xf32>, memref<128xbf16>
  }
  et.task @norm tiles(%t) in (%c1) {
    %rows = memref.collapse_shape %z [[0, 1], [2]] : memref<1x4x128xf32> into memref<4x128xf32>
    et.rmsnorm %rows, %w, %rows eps(1.0e-06) : memref<4x128xf32>, memref<128xbf16>, memref<4x128xf32>
    et.event.signal %e[] : !et.event<>
  }
  et.task @rotate tiles(%t) in (%c1) {
    et.event.wait %e[] : !et.event<>
    et.rope %z, %pos theta(1.0e+06) : memref<1x4x128xf32>, memref<1xi32>
  }
}
"""
    rng = np.random.default_rng(21)
    x = rng.standard_normal((1, 4, 128)).astype(np.float32)
    w = (1 + 0.1 * rng.standard_normal(128)).astype(BF16)
    y, z = np.zeros_like(x), x.copy()
    art = et.compile(text, target="cpu", workers=2, mode="static", cache_dir=tmp_path)
    art.launcher()(x, y, z, w, np.array([77], np.int32))
    assert y.any() and np.array_equal(y, z)


def _attention_kernel(hq, hkv, d, s_max, splits, split_len, q_t="f32", out_t="f32", subsplits=1, stable=False):
    """Split tiles, then one merge tile. With `stable`, the kernel takes a
    last argument %stable (positions below it may be read before a wait),
    and the split tiles wait on a task before them, so that
    `tile_kv_prefetch="shared"` has a wait to stage the cache rows before."""
    entries = splits * subsplits
    sub = f" {{subsplits = {subsplits} : i64}}" if subsplits > 1 else ""
    stable_arg = ", %stable: index" if stable else ""
    stable_op = " stable(%stable)" if stable else ""
    ready = "  et.task @ready tiles(%r) in (%c1) {\n    et.event.signal %go[] : !et.event<>\n  }\n" if stable else ""
    wait = "    et.event.wait %go[] : !et.event<>\n" if stable else ""
    return f"""
et.kernel @attn(%q: memref<{hq}x{d}x{q_t}>, %k: memref<{s_max}x{hkv}x{d}xbf16>, %v: memref<{s_max}x{hkv}x{d}xbf16>,
                %o: memref<{entries}x{hq}x{d}xf32>, %lse: memref<{entries}x{hq}xf32>, %out: memref<{hq}x{d}x{out_t}>,
                %len: index{stable_arg}) {{
  %ckv = arith.constant {hkv} : index
  %cs = arith.constant {splits} : index
  %cl = arith.constant {split_len} : index
  %c1 = arith.constant 1 : index
  %parts = et.event.create() : !et.event<>
  %go = et.event.create() : !et.event<>
{ready}  et.task @split tiles(%g, %s) in (%ckv, %cs) {{
{wait}    et.attention_split %q, %k, %v, %o, %lse kv_head(%g) split(%s) split_len(%cl) len(%len){stable_op} scale({1.0 / np.sqrt(d):.9e}){sub}
        : memref<{hq}x{d}x{q_t}>, memref<{s_max}x{hkv}x{d}xbf16>, memref<{s_max}x{hkv}x{d}xbf16>, memref<{entries}x{hq}x{d}xf32>, memref<{entries}x{hq}xf32>
    et.event.signal %parts[] : !et.event<>
  }}
  et.task @merge tiles(%t) in (%c1) {{
    et.event.wait %parts[] : !et.event<>
    et.attention_merge %o, %lse, %out : memref<{entries}x{hq}x{d}xf32>, memref<{entries}x{hq}xf32>, memref<{hq}x{d}x{out_t}>
  }}
}}
"""


def _attention_ref(q, k, v, length):
    return reference.attention(q, k, v, length)


@pytest.mark.parametrize("hq,hkv,d,s_max,splits,split_len,length,subsplits", [
    (8, 2, 64, 300, 4, 64, 200, 1),    # the last split is empty
    (4, 4, 32, 64, 2, 32, 64, 1),      # no grouping
    (6, 2, 128, 1000, 3, 333, 777, 1),
    (8, 2, 64, 1000, 3, 333, 900, 5),  # chunks of 67 positions, some empty
])
def test_split_kv_attention_matches_float64(hq, hkv, d, s_max, splits, split_len, length, subsplits, tmp_path):
    rng = np.random.default_rng(hq * d + length)
    q = rng.standard_normal((hq, d)).astype(np.float32)
    k = rng.standard_normal((s_max, hkv, d)).astype(BF16)
    v = rng.standard_normal((s_max, hkv, d)).astype(BF16)
    o = np.full((splits * subsplits, hq, d), np.nan, np.float32)
    lse = np.full((splits * subsplits, hq), np.nan, np.float32)
    out = np.full((hq, d), np.nan, np.float32)
    art = et.compile(_attention_kernel(hq, hkv, d, s_max, splits, split_len, subsplits=subsplits),
                     target="cpu", workers=3, cache_dir=tmp_path)
    art.launcher()(q, k, v, o, lse, out, length)
    assert _rel_err(out, _attention_ref(q, k, v, length)) < 1e-5
    # `stable` only permits earlier loads: the same result.
    staged = et.compile(_attention_kernel(hq, hkv, d, s_max, splits, split_len, subsplits=subsplits, stable=True),
                        target="cpu", workers=3, cache_dir=tmp_path)
    out2 = np.full_like(out, np.nan)
    staged.launcher()(q, k, v, o, lse, out2, length, length // 2)
    assert np.array_equal(out2, out)
    if splits * split_len > length + split_len - 1:
        assert np.isneginf(lse[-1]).all()


def _append_kernel(hq, hkv, d, s_max, splits, split_len, n_new):
    """Split tiles whose attention appends this step's `n_new` rows per KV
    head: each tile copies its head's rows of %kn and %vn (f32) into
    workgroup buffers (et.kv_append), which `append` hands to the attention
    (on the host, ordinary per-tile memory). The split tiles wait on a
    task before them, so that the GPU's staged lowering
    (`tile_kv_prefetch="shared"`) has a wait to stage the history before."""
    wg = "#gpu.address_space<workgroup>"
    view = f"memref<{n_new}x1x{d}xf32, strided<[{hkv * d}, {d}, 1], offset: ?>>"
    return f"""
et.kernel @attn(%q: memref<{hq}x{d}xf32>, %k: memref<{s_max}x{hkv}x{d}xbf16>, %v: memref<{s_max}x{hkv}x{d}xbf16>,
                %o: memref<{splits}x{hq}x{d}xf32>, %lse: memref<{splits}x{hq}xf32>, %out: memref<{hq}x{d}xf32>,
                %kn: memref<{n_new}x{hkv}x{d}xf32>, %vn: memref<{n_new}x{hkv}x{d}xf32>, %len: index, %stable: index) {{
  %ckv = arith.constant {hkv} : index
  %cs = arith.constant {splits} : index
  %cl = arith.constant {split_len} : index
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %parts = et.event.create() : !et.event<>
  %go = et.event.create() : !et.event<>
  et.task @ready tiles(%r) in (%c1) {{
    et.event.signal %go[] : !et.event<>
  }}
  et.task @split tiles(%g, %s) in (%ckv, %cs) {{
    %ks = memref.alloca() : memref<{n_new}x1x{d}xf32, {wg}>
    %vs = memref.alloca() : memref<{n_new}x1x{d}xf32, {wg}>
    et.event.wait %go[] : !et.event<>
    %kh = memref.subview %kn[0, %g, 0] [{n_new}, 1, {d}] [1, 1, 1] : memref<{n_new}x{hkv}x{d}xf32> to {view}
    %vh = memref.subview %vn[0, %g, 0] [{n_new}, 1, {d}] [1, 1, 1] : memref<{n_new}x{hkv}x{d}xf32> to {view}
    et.kv_append %kh, %ks, %c0 : {view}, memref<{n_new}x1x{d}xf32, {wg}>
    et.kv_append %vh, %vs, %c0 : {view}, memref<{n_new}x1x{d}xf32, {wg}>
    %kc = memref.collapse_shape %ks [[0, 1], [2]] : memref<{n_new}x1x{d}xf32, {wg}> into memref<{n_new}x{d}xf32, {wg}>
    %vc = memref.collapse_shape %vs [[0, 1], [2]] : memref<{n_new}x1x{d}xf32, {wg}> into memref<{n_new}x{d}xf32, {wg}>
    et.attention_split %q, %k, %v, %o, %lse kv_head(%g) split(%s) split_len(%cl) len(%len) stable(%stable)
        append(%kc, %vc) scale({1.0 / np.sqrt(d):.9e})
        : memref<{hq}x{d}xf32>, memref<{s_max}x{hkv}x{d}xbf16>, memref<{s_max}x{hkv}x{d}xbf16>, memref<{splits}x{hq}x{d}xf32>, memref<{splits}x{hq}xf32>,
          memref<{n_new}x{d}xf32, {wg}>, memref<{n_new}x{d}xf32, {wg}>
    et.event.signal %parts[] : !et.event<>
  }}
  et.task @merge tiles(%t) in (%c1) {{
    et.event.wait %parts[] : !et.event<>
    et.attention_merge %o, %lse, %out : memref<{splits}x{hq}x{d}xf32>, memref<{splits}x{hq}xf32>, memref<{hq}x{d}xf32>
  }}
}}
"""


def append_case(rng, hq, hkv, d, s_max, length, stable, n_new):
    """Inputs of _append_kernel (the cache rows from `stable` on are NaN:
    the attention must not read them before the append writes them), and
    the caches after it."""
    q = rng.standard_normal((hq, d)).astype(np.float32)
    k = rng.standard_normal((s_max, hkv, d)).astype(BF16)
    v = rng.standard_normal((s_max, hkv, d)).astype(BF16)
    k[stable:], v[stable:] = np.nan, np.nan
    kn = rng.standard_normal((n_new, hkv, d)).astype(np.float32)
    vn = rng.standard_normal((n_new, hkv, d)).astype(np.float32)
    k_after, v_after = k.copy(), v.copy()
    new = min(length, stable + n_new) - stable
    k_after[stable:stable + new], v_after[stable:stable + new] = kn[:new].astype(BF16), vn[:new].astype(BF16)
    return dict(q=q, k=k, v=v, kn=kn, vn=vn), k_after, v_after


@pytest.mark.parametrize("length,stable,n_new", [
    (200, 199, 1),   # one decode step: the row in the last split
    (129, 127, 4),   # two rows across a split boundary; rows past len not written
    (64, 64, 2),     # nothing to append (len == stable)
])
def test_split_kv_attention_append(length, stable, n_new, tmp_path):
    """`append`: positions [stable, min(len, stable + N)) take kn / vn
    (rounded to bf16), the split that covers each writes it into the
    caches, and the attention is that over the updated caches."""
    hq, hkv, d, s_max, splits, split_len = 8, 2, 64, 256, 2, 128
    inputs, k_after, v_after = append_case(np.random.default_rng(length + n_new), hq, hkv, d, s_max, length,
                                           stable, n_new)
    q, k, v, kn, vn = (inputs[n] for n in ("q", "k", "v", "kn", "vn"))
    o = np.full((splits, hq, d), np.nan, np.float32)
    lse = np.full((splits, hq), np.nan, np.float32)
    out = np.full((hq, d), np.nan, np.float32)
    art = et.compile(_append_kernel(hq, hkv, d, s_max, splits, split_len, n_new), target="cpu", workers=3,
                     cache_dir=tmp_path)
    art.launcher()(q, k, v, o, lse, out, kn, vn, length, stable)
    np.testing.assert_array_equal(k.view(np.uint16), k_after.view(np.uint16))
    np.testing.assert_array_equal(v.view(np.uint16), v_after.view(np.uint16))
    assert _rel_err(out, _attention_ref(q, k_after, v_after, length)) < 1e-5


@pytest.mark.parametrize("m,k,n,tile,stages,out,accumulate", [
    (37, 200, 72, (32, 64, 32), 3, "f32", False),   # partial tiles in M, N and K
    (130, 64, 40, (64, 32, 16), 1, "bf16", False),  # one stage, bf16 output
    (5, 128, 16, (16, 16, 64), 2, "f32", True),     # y += x * w^T
])
def test_matmul_matches_float64(m, k, n, tile, stages, out, accumulate, tmp_path):
    from event_tensor.kernels import gemm_kernel

    rng = np.random.default_rng(m + k + n)
    x = rng.standard_normal((m, k)).astype(BF16)
    w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(BF16)
    y0 = rng.standard_normal((m, n)).astype(np.float32)
    ref = x.astype(np.float64) @ w.astype(np.float64).T + (y0 if accumulate else 0)
    art = et.compile(gemm_kernel(k, n, tile=tile, stages=stages, out=out, accumulate=accumulate),
                     target="cpu", workers=3, mode="dynamic", cache_dir=tmp_path)
    y = y0.copy() if accumulate else np.full((m, n), np.nan, np.float32 if out == "f32" else BF16)
    art.launcher()(x, w, y, m)
    assert not np.isnan(y.astype(np.float64)).any(), "every output must be written"
    assert _rel_err(y, ref) < (1e-5 if out == "f32" else 1e-2)


@pytest.mark.parametrize("m,k,n,tile,split,out,accumulate", [
    (37, 520, 72, (32, 64, 64), 3, "f32", False),   # a partial last range
    (130, 1000, 40, (64, 32, 64), 4, "bf16", False),
    (5, 256, 16, (16, 16, 64), 2, "f32", True),     # y += the sum of the parts
    (20, 64, 16, (16, 16, 64), 3, "f32", False),    # empty ranges (one slice of K for three parts)
])
def test_split_k_matches_float64(m, k, n, tile, split, out, accumulate, tmp_path):
    """gemm_kernel(split_k=S): S partial blocks per block (et.matmul over a
    K range) summed by a task that waits on the block's event."""
    from event_tensor.kernels import gemm_kernel

    rng = np.random.default_rng(m + split)
    x = rng.standard_normal((m, k)).astype(BF16)
    w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(BF16)
    y0 = rng.standard_normal((m, n)).astype(np.float32)
    ref = x.astype(np.float64) @ w.astype(np.float64).T + (y0 if accumulate else 0)
    text = gemm_kernel(k, n, tile=tile, out=out, accumulate=accumulate, split_k=split)
    art = et.compile(text, target="cpu", workers=3, mode="dynamic", cache_dir=tmp_path)
    y = y0.copy() if accumulate else np.full((m, n), np.nan, np.float32 if out == "f32" else BF16)
    part = np.full((split, m, n), np.nan, np.float32)
    art.launcher()(x, w, y, m, part)
    assert not np.isnan(y.astype(np.float64)).any(), "every output must be written"
    assert _rel_err(y, ref) < (1e-5 if out == "f32" else 1e-2)


@pytest.mark.parametrize("m,k,n,tile,split", [
    (37, 520, 72, (32, 64, 64), 3),   # a partial last range, partial blocks in M and N
    (20, 64, 16, (16, 16, 64), 3),    # empty ranges (one slice of K for three parts)
])
def test_atomic_split_k_matches_float64(m, k, n, tile, split, tmp_path):
    """gemm_kernel(split_k=S, atomic=True): each of a block's S tiles adds
    its K range into y with `accumulate atomic` (no part buffer, no sum
    task), on three host workers at once."""
    from event_tensor.kernels import gemm_kernel

    rng = np.random.default_rng(m + split)
    x = rng.standard_normal((m, k)).astype(BF16)
    w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(BF16)
    y = rng.standard_normal((m, n)).astype(np.float32)
    ref = x.astype(np.float64) @ w.astype(np.float64).T + y
    text = gemm_kernel(k, n, tile=tile, accumulate=True, split_k=split, atomic=True)
    assert "atomic" in text
    art = et.compile(text, target="cpu", workers=3, mode="dynamic", cache_dir=tmp_path)
    assert art.metadata["tasks"] == ["gemm"]
    art.launcher()(x, w, y, m)
    assert _rel_err(y, ref) < 1e-5


def test_one_launcher_across_event_counts(tmp_path):
    """A split-K kernel's event has one element per block, ceil(M / BM) x
    blocks of N, so its counters change with M. One launcher runs M = 200,
    20, 90, 150, 5: each launch's bank must be clean although the launches
    before it used other counts (the banks are halves of the buffer, and
    each launch clears all of the other half; they once moved with the
    launch's counts, and M = 150 after 90 woke the sum task early)."""
    from event_tensor.kernels import gemm_kernel

    k, n, split = 256, 64, 2
    art = et.compile(gemm_kernel(k, n, tile=(16, 16, 64), out="f32", split_k=split), target="cpu", workers=3,
                     mode="static", cache_dir=tmp_path)
    launch = art.launcher()
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((n, k)) / 16).astype(BF16)
    for m in (200, 20, 90, 150, 5):
        x = rng.standard_normal((m, k)).astype(BF16)
        y = np.full((m, n), np.nan, np.float32)
        launch(x, w, y, m, np.full((split, m, n), np.nan, np.float32))
        ref = x.astype(np.float64) @ w.astype(np.float64).T
        assert not np.isnan(y).any() and _rel_err(y, ref) < 1e-5, m


def test_gemm_kernel_rejects_bad_arguments():
    from event_tensor.kernels import gemm_kernel

    with pytest.raises(ValueError, match="out must be one of"):
        gemm_kernel(64, 64, out="f16")
    with pytest.raises(ValueError, match=r"tile must be \(BM, BN, BK\)"):
        gemm_kernel(64, 64, tile=(64, 64))
    with pytest.raises(ValueError, match="split_k must be a positive int, got 0"):
        gemm_kernel(64, 64, split_k=0)
    with pytest.raises(ValueError, match="split_k needs N to be a multiple of 4"):
        gemm_kernel(64, 66, split_k=2)
    with pytest.raises(ValueError, match="atomic needs split_k > 1, out 'f32' and accumulate, got split_k 2, "
                       "out 'bf16', accumulate True"):
        gemm_kernel(64, 64, split_k=2, out="bf16", accumulate=True, atomic=True)
    with pytest.raises(ValueError, match="atomic needs split_k > 1"):
        gemm_kernel(64, 64, accumulate=True, atomic=True)
    with pytest.raises(ValueError, match="order must be one of"):
        gemm_kernel(64, 64, order="columns")
    with pytest.raises(ValueError, match="tile_mma must be 'wgmma' or 'sync', got 'wmma'"):
        et.compile(gemm_kernel(64, 64), target="cuda", tile_mma="wmma")
    with pytest.raises(ValueError, match="tile_rows_in_flight must be 1, 2, 4, 8 or 16, got 6"):
        et.compile(gemm_kernel(64, 64), target="cuda", tile_rows_in_flight=6)


def test_matmul_verifier_errors(tmp_path):
    from event_tensor import compiler
    from event_tensor.kernels import gemm_kernel

    with pytest.raises(compiler.EventTensorCompileError, match=r"tile BK must be a multiple of 16 in \[16, 128\], got 24"):
        et.compile(gemm_kernel(64, 64, tile=(64, 64, 24)), target="cpu", cache_dir=tmp_path)
    # On the GPU, a tile too large for the worker's registers.
    with pytest.raises(compiler.EventTensorCompileError, match="needs more than 64 f32 accumulators per thread"):
        et.compile(gemm_kernel(64, 256, tile=(256, 256, 16)), target="cuda", threads_per_worker=512,
                   cache_dir=tmp_path)


@pytest.mark.parametrize("hq,hkv,d,t,pos0,block,out,q_type", [
    (8, 2, 64, 37, 5, 16, "f32", "bf16"),    # a partial last block of tokens, history before the prompt
    (4, 4, 32, 20, 0, 4, "bf16", "bf16"),
    (8, 4, 32, 30, 2, 8, "f32", "f32"),      # f32 q, as RoPE leaves it
])
def test_prefill_attention_matches_float64(hq, hkv, d, t, pos0, block, out, q_type, tmp_path):
    from event_tensor.kernels import prefill_attention_kernel

    s = 64
    rng = np.random.default_rng(t)
    q = rng.standard_normal((t, hq, d)).astype(np.float32 if q_type == "f32" else BF16)
    k = rng.standard_normal((s, hkv, d)).astype(BF16)
    v = rng.standard_normal((s, hkv, d)).astype(BF16)
    art = et.compile(prefill_attention_kernel(hq, hkv, d, s, block=block, out=out, q=q_type), target="cpu",
                     workers=3, cache_dir=tmp_path)
    o = np.full((t, hq, d), np.nan, np.float32 if out == "f32" else BF16)
    art.launcher()(q, k, v, o, t, pos0)
    assert not np.isnan(o.astype(np.float64)).any()
    assert _rel_err(o, reference.prefill_attention(q, k, v, pos0)) < (1e-5 if out == "f32" else 1e-2)


def test_prefill_attention_kernel_rejects_bad_heads():
    from event_tensor.kernels import prefill_attention_kernel, prefill_attention_tile

    with pytest.raises(ValueError, match=r"heads \(6\) must be a multiple of kv_heads \(4\)"):
        prefill_attention_kernel(6, 4, 64, 128)
    assert prefill_attention_tile(32, 8, 64) == (48, 384) and prefill_attention_tile(16, 8, 128) == (64, 256)
    with pytest.raises(ValueError, match="must divide 128"):
        prefill_attention_tile(48, 1, 128)


@pytest.mark.parametrize("experts,k,normalize", [(8, 2, True), (64, 8, True), (64, 3, False), (128, 8, True)])
def test_router_topk_matches_numpy(experts, k, normalize, tmp_path):
    """et.router_topk on the CPU worker: from registers (8 experts: up to 16
    per lane) and from memory (64, 128); ties to the smaller index."""
    tokens = 5
    text = f"""
et.kernel @route(%s: memref<{tokens}x{experts}xf32>, %ids: memref<{tokens}x{k}xi32>, %w: memref<{tokens}x{k}xf32>) {{
  %c{tokens} = arith.constant {tokens} : index
  et.task @topk tiles(%b) in (%c{tokens}) {{
    %row = memref.subview %s[%b, 0] [1, {experts}] [1, 1] : memref<{tokens}x{experts}xf32> to memref<1x{experts}xf32, strided<[{experts}, 1], offset: ?>>
    %ir = memref.subview %ids[%b, 0] [1, {k}] [1, 1] : memref<{tokens}x{k}xi32> to memref<1x{k}xi32, strided<[{k}, 1], offset: ?>>
    %wr = memref.subview %w[%b, 0] [1, {k}] [1, 1] : memref<{tokens}x{k}xf32> to memref<1x{k}xf32, strided<[{k}, 1], offset: ?>>
    et.router_topk %row, %ir, %wr {"normalize" if normalize else ""} : memref<1x{experts}xf32, strided<[{experts}, 1], offset: ?>>, memref<1x{k}xi32, strided<[{k}, 1], offset: ?>>, memref<1x{k}xf32, strided<[{k}, 1], offset: ?>>
  }}
}}"""
    rng = np.random.default_rng(experts + k)
    scores = rng.standard_normal((tokens, experts)).astype(np.float32)
    scores[1] = 0.5  # every expert ties: the first k win
    scores[2, [3, 5, 7]] = scores[2].max() + 1  # a three-way tie at the top
    ids = np.zeros((tokens, k), np.int32)
    w = np.zeros((tokens, k), np.float32)
    et.compile(text, target="cpu", workers=2, cache_dir=tmp_path).launcher()(scores, ids, w)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    want = np.argsort(-p, axis=-1, kind="stable")[:, :k]
    want_w = np.take_along_axis(p, want, -1)
    if normalize:
        want_w /= want_w.sum(-1, keepdims=True)
    assert np.array_equal(ids, want)
    np.testing.assert_allclose(w, want_w, rtol=1e-5)
