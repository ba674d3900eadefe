"""The CUDA target without a GPU: random task graphs compile to PTX that
uses the intended synchronization (acquire loads at GPU scope, a release
fence before each signal's atomic add, bounded spins with nanosleep), and
that ptxas accepts for sm_90a where ptxas is installed."""

import os
import random
import re
import subprocess

import pytest

import event_tensor as et
from event_tensor.dag import random_kernel, with_bodies
from event_tensor.testing import ptxas_path

SEEDS = int(os.environ.get("ET_PTX_SEEDS", "12"))


def _check_ptx(ptx: str):
    assert ".target sm_90a" in ptx
    assert re.search(r"ld\.acquire\.gpu(\.global)?\.b32", ptx), "waits must be acquire loads at GPU scope"
    assert "nanosleep.u32" in ptx, "a waiting CTA backs off with nanosleep"
    # Every signal is one release reduction at GPU scope, and no other atomic
    # add counts an event. (The dynamic schedule's ticket is an atomic add
    # too; thread 0 shares its result through shared memory right after,
    # which tells it apart.)
    lines = [l.strip() for l in ptx.splitlines()]
    assert any(re.match(r"red\.release\.gpu\.global\.add\.u32", l) for l in lines), (
        "signals must be release reductions at GPU scope")
    relaxed = [i for i, l in enumerate(lines) if re.match(r"(atom|red)\.global\.add\.u32", l)
               and not any(n.startswith("st.shared") for n in lines[i + 1: i + 4])]
    assert not relaxed, "a relaxed atomic add outside the ticket:\n" + "\n".join(lines[relaxed[0] - 3: relaxed[0] + 1])


def _assemble(art, tmp_path) -> str:
    """ptxas accepts the artifact's PTX for sm_90a (skips where it is not
    installed); returns its resource report (-v)."""
    ptxas = ptxas_path()
    if ptxas is None:
        pytest.skip("ptxas not installed")
    out = subprocess.run([ptxas, "-arch=sm_90a", "-v", str(art.binary_path), "-o", str(tmp_path / "k.cubin")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stderr


def _assert_rejects(kernel, tmp_path, option, bads, bounds, **extra):
    """et.compile raises a ValueError naming `option` and its bounds for
    each of the values `bads`."""
    for bad in bads:
        with pytest.raises(ValueError, match=f"{option} must be an int in \\[{bounds[0]}, {bounds[1]}\\]"):
            et.compile(kernel, target="cuda", cache_dir=tmp_path, **extra, **{option: bad})


@pytest.mark.parametrize("seed", range(SEEDS))
def test_random_graph_ptx(seed, tmp_path):
    rng = random.Random(seed)
    rk = random_kernel(seed, max_tasks=rng.choice([3, 6]), dynamic=seed % 2 == 0)
    text = with_bodies(rk)
    mode = ("static", "dynamic")[seed % 2]
    if not any("et.event.signal" in l for l in text.splitlines()):
        pytest.skip("no signal in this graph")
    art = et.compile(text, target="cuda", workers=rng.choice([8, 132]), mode=mode, cache_dir=tmp_path)
    assert art.metadata["target"] == "cuda" and art.metadata["entry"] == rk.name
    ptx = art.binary_path.read_text()
    if any("et.event.wait" in l for l in text.splitlines()):
        _check_ptx(ptx)
    _assemble(art, tmp_path)


# Two dependent linear layers: the second waits for the first.
CHAINED_LINEAR = """
et.kernel @chained(%x: memref<1x1024xbf16>, %w: memref<1024x1024xbf16>, %y: memref<1x1024xbf16>,
                   %w2: memref<1024x1024xbf16>, %y2: memref<1x1024xbf16>) {
  %c8 = arith.constant 8 : index
  %c128 = arith.constant 128 : index
  %e = et.event.create() : !et.event<>
  et.task @first tiles(%t) in (%c8) {
    %r0 = arith.muli %t, %c128 : index
    et.linear %x, %w, %y rows(%r0, %c128) : memref<1x1024xbf16>, memref<1024x1024xbf16>, memref<1x1024xbf16>
    et.event.signal %e[] : !et.event<>
  }
  et.task @second tiles(%t) in (%c8) {
    %r0 = arith.muli %t, %c128 : index
    et.event.wait %e[] : !et.event<>
    et.linear %y, %w2, %y2 rows(%r0, %c128) : memref<1x1024xbf16>, memref<1024x1024xbf16>, memref<1x1024xbf16>
  }
}
"""


def test_shared_prefetch_ptx(tmp_path):
    """tile_prefetch="shared": the second layer's weights are copied into the
    dynamic shared memory (declared extern, sized by the launch from the
    metadata) with cp.async before its wait, and waited for before use."""
    art = et.compile(CHAINED_LINEAR, target="cuda", workers=8, threads_per_worker=256,
                     tile_prefetch="shared", tile_prefetch_bytes=32 * 1024, cache_dir=tmp_path)
    assert art.metadata["dynamic_shared_bytes"] == 32 * 1024
    ptx = art.binary_path.read_text()
    assert ".extern .shared .align 16 .b8 __et_dynamic_shared[];" in ptx
    lines = [l.strip() for l in ptx.splitlines()]
    copies = [i for i, l in enumerate(lines) if l.startswith("cp.async.cg.shared.global")]
    waits = [i for i, l in enumerate(lines) if re.match(r"ld\.acquire\.gpu(\.global)?\.b32", l)]
    assert copies and waits and min(copies) < max(waits), "weights must be copied before the wait"
    assert any(l.startswith("cp.async.wait_group") for l in lines[min(copies):])
    plain = et.compile(CHAINED_LINEAR, target="cuda", workers=8, threads_per_worker=256, cache_dir=tmp_path)
    assert plain.metadata["dynamic_shared_bytes"] == 0
    assert "cp.async" not in plain.binary_path.read_text()
    _assert_rejects(CHAINED_LINEAR, tmp_path, "tile_prefetch_bytes", (1024, 1 << 20, True, 65536.0), (16384, 204800),
                    tile_prefetch="shared")
    _assemble(art, tmp_path)


def test_staged_rows_ptx(tmp_path):
    """tile_stage_bytes: the second layer's tiles read their first rows
    (16 of 128: 32 KiB) through et.staged_rows. The kernel states two
    staging regions of dynamic shared memory, initializes their mbarriers,
    and issues bulk copies that complete on them before the tile reads the
    rows (the first layer, which has no wait, stages nothing)."""
    art = et.compile(CHAINED_LINEAR, target="cuda", workers=8, threads_per_worker=256,
                     tile_stage_bytes=32 * 1024, cache_dir=tmp_path)
    assert art.metadata["options"]["tile_stage_bytes"] == 32 * 1024
    ptx = art.binary_path.read_text()
    assert ".visible .global .align 4 .u32 __et_dynamic_shared_bytes = 65536;" in ptx
    lines = [l.strip() for l in ptx.splitlines()]
    inits = [i for i, l in enumerate(lines) if l.startswith("mbarrier.init.shared.b64")]
    copies = [i for i, l in enumerate(lines)
              if l.startswith("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes")]
    waits = [i for i, l in enumerate(lines) if l.startswith("mbarrier.try_wait.parity.shared.b64")]
    assert len(inits) == 2 and copies and waits and max(inits) < min(copies)
    plain = et.compile(CHAINED_LINEAR, target="cuda", workers=8, threads_per_worker=256, cache_dir=tmp_path)
    assert "mbarrier" not in plain.binary_path.read_text()
    _assert_rejects(CHAINED_LINEAR, tmp_path, "tile_stage_bytes", (-1, 1 << 20, True, 4096.0), (0, 102400))
    _assemble(art, tmp_path)


HEAD_O = """
et.kernel @head_o(%x: memref<1x2048xbf16>, %w: memref<2048x2048xbf16>, %h: memref<1x2048xf32>) {
  %c16 = arith.constant 16 : index
  %c32 = arith.constant 32 : index
  %c64 = arith.constant 64 : index
  %c128 = arith.constant 128 : index
  %e = et.event.create() : !et.event<>
  et.task @o tiles(%head, %blk) in (%c32, %c16) {
    %k0 = arith.muli %head, %c64 : index
    %r0 = arith.muli %blk, %c128 : index
    %xh = memref.subview %x[0, %k0] [1, 64] [1, 1] : memref<1x2048xbf16> to memref<1x64xbf16, strided<[2048, 1], offset: ?>>
    %wh = memref.subview %w[0, %k0] [2048, 64] [1, 1] : memref<2048x2048xbf16> to memref<2048x64xbf16, strided<[2048, 1], offset: ?>>
    et.linear %xh, %wh, %h rows(%r0, %c128) accumulate atomic : memref<1x64xbf16, strided<[2048, 1], offset: ?>>, memref<2048x64xbf16, strided<[2048, 1], offset: ?>>, memref<1x2048xf32>
    et.event.signal %e[] : !et.event<>
  }
}
"""


def test_linear_short_rows_atomic_ptx(tmp_path):
    """A split-K et.linear (one head's 64 columns, `accumulate atomic`) on
    fixed 256 threads: short rows, 8 lanes each, so 4 loads of 16 bytes
    per thread for the tile's 128 rows (and one of x), 3 shuffles per row, and the adds
    into h are f32 atomics (no load of h, no plain store to it); ptxas
    accepts it without spills."""
    art = et.compile(HEAD_O, target="cuda", workers=8, threads_per_worker=256, cache_dir=tmp_path)
    lines = [l.strip() for l in art.binary_path.read_text().splitlines()]
    assert sum(l.startswith("ld.global.v4") or l.startswith("ld.global.nc.v4") for l in lines) == 4 + 1
    assert sum(l.startswith("shfl.sync.bfly") for l in lines) == 4 * 3
    adds = [l for l in lines if re.match(r"(atom|red)\.global(\.\w+)*\.add\.f32", l)]
    assert len(adds) == 4, adds
    assert not any(l.startswith("st.global.f32") for l in lines)
    report = _assemble(art, tmp_path)
    assert "0 bytes spill stores" in report


def test_kv_prefetch_ptx(tmp_path):
    """tile_kv_prefetch="shared": the split tiles copy their cache rows below
    `stable` into the dynamic shared memory with cp.async before their wait;
    without `stable` nothing is copied."""
    from test_tile_ops import _attention_kernel

    kernel = _attention_kernel(32, 8, 64, 1024, 8, 128, stable=True)
    art = et.compile(kernel, target="cuda", workers=8, threads_per_worker=512, tile_kv_prefetch="shared",
                     tile_prefetch_bytes=64 * 1024, cache_dir=tmp_path)
    assert art.metadata["dynamic_shared_bytes"] == 64 * 1024
    lines = [l.strip() for l in art.binary_path.read_text().splitlines()]
    copies = [i for i, l in enumerate(lines) if l.startswith("cp.async.cg.shared.global")]
    waits = [i for i, l in enumerate(lines) if re.match(r"ld\.acquire\.gpu(\.global)?\.b32", l)]
    assert copies and waits and min(copies) < max(waits), "cache rows must be copied before the wait"
    assert any(l.startswith("cp.async.wait_group") for l in lines[min(copies):])
    unmarked = et.compile(_attention_kernel(32, 8, 64, 1024, 8, 128), target="cuda", workers=8,
                          threads_per_worker=512, tile_kv_prefetch="shared", cache_dir=tmp_path)
    assert "cp.async" not in unmarked.binary_path.read_text()
    with pytest.raises(ValueError, match="tile_kv_prefetch must be 'none' or 'shared', got 'l2'"):
        et.compile(kernel, target="cuda", tile_kv_prefetch="l2", cache_dir=tmp_path)
    _assemble(art, tmp_path)
    # A group of six heads (not a power of two; three heads per lane in P.V)
    # is staged too.
    six = et.compile(_attention_kernel(48, 8, 128, 1024, 8, 128, stable=True), target="cuda", workers=8,
                     threads_per_worker=256, tile_kv_prefetch="shared", tile_prefetch_bytes=64 * 1024,
                     cache_dir=tmp_path)
    assert "cp.async.cg.shared.global" in six.binary_path.read_text()
    _assemble(six, tmp_path)


def test_kv_mma_ptx(tmp_path):
    """tile_kv_mma_bytes: split-KV attention on tensor cores. Qwen3 heads
    (D = 128): slots of 16 positions of K and V rows of 136 bf16 (8704
    bytes); 7 of the 16 warps get two slots in 128 KiB, so the kernel
    states 7 x 2 x 8704 bytes of dynamic shared memory. The loop waits for
    its block with cp.async.wait_group and a warp barrier, reads K and V
    through ldmatrix (V transposed) and multiplies with mma.sync."""
    from test_tile_ops import _attention_kernel

    kernel = _attention_kernel(16, 8, 128, 1024, 4, 256)
    art = et.compile(kernel, target="cuda", workers=8, threads_per_worker=512, tile_kv_mma_bytes=128 * 1024,
                     cache_dir=tmp_path)
    assert art.metadata["options"]["tile_kv_mma_bytes"] == 128 * 1024
    ptx = re.sub(r"\s+", " ", art.binary_path.read_text())
    assert f".visible .global .align 4 .u32 __et_dynamic_shared_bytes = {7 * 2 * 8704};" in ptx
    for needle in ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
                   "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", "bar.warp.sync", "cp.async.wait_group 1;"):
        assert needle in ptx, needle
    plain = et.compile(kernel, target="cuda", workers=8, threads_per_worker=512, cache_dir=tmp_path)
    assert "mma.sync" not in plain.binary_path.read_text()
    _assert_rejects(kernel, tmp_path, "tile_kv_mma_bytes", (-1, 1 << 20, True, 4096.0), (0, 204800))
    _assemble(art, tmp_path)


def test_matmul_ptx(tmp_path):
    """et.matmul: cp.async copies with a source size (zero fill), ldmatrix
    and bf16 mma.sync in the PTX; the kernel states its dynamic shared
    memory (3 stages x (128 + 128) rows x (32 + 8) bf16); ptxas accepts it
    with no spills at 256 threads."""
    from event_tensor.kernels import gemm_kernel

    art = et.compile(gemm_kernel(2048, 8192, tile=(128, 128, 32), stages=3, out="bf16"), target="cuda",
                     workers=132, threads_per_worker=256, mode="static", cache_dir=tmp_path)
    ptx = art.binary_path.read_text()
    assert re.search(r"cp\.async\.cg\.shared\.global \[%rd\d+\], \[%rd\d+\], 16, %r\d+;", ptx)
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in ptx
    assert f".u32 __et_dynamic_shared_bytes = {3 * 256 * 40 * 2};" in ptx
    report = _assemble(art, tmp_path)
    assert "0 bytes spill stores" in report, report


def test_atomic_split_k_ptx(tmp_path):
    """et.matmul ... accumulate atomic (a decode kernel's 64 x 64 block of
    `down` in quarters of K): the epilogue adds into y with f32 atomics and
    never loads y; ptxas accepts it with no spills at 512 threads."""
    from event_tensor.kernels import gemm_kernel

    art = et.compile(gemm_kernel(8192, 2048, tile=(64, 64, 128), stages=4, accumulate=True, split_k=4, atomic=True),
                     target="cuda", workers=132, threads_per_worker=512, mode="static", tile_mma="sync",
                     cache_dir=tmp_path)
    ptx = art.binary_path.read_text()
    assert re.search(r"(atom|red)\.global(\.\w+)*\.add\.f32", ptx), "atomic adds into y"
    assert not re.search(r"ld\.global(\.\w+)*\.v4\.f32", ptx), "y is not read first"
    report = _assemble(art, tmp_path)
    assert "0 bytes spill stores" in report, report


def test_wgmma_ptx(tmp_path):
    """et.matmul on the wgmma path: two warpgroups of m64n256k16 from
    128-byte-swizzled slices (descriptor constant: stride 1024 bytes,
    128-byte swizzle), the copies fenced for the async proxy; the kernel
    states 4 x (128 + 256) rows x 128 bytes + 1024 of dynamic shared
    memory; ptxas accepts it with no spills and does not serialize the
    wgmma instructions."""
    from event_tensor.kernels import gemm_kernel

    art = et.compile(gemm_kernel(2048, 8192, tile=(128, 256, 64), stages=4, out="bf16"), target="cuda",
                     workers=132, threads_per_worker=256, mode="static", cache_dir=tmp_path)
    ptx = art.binary_path.read_text()
    assert ptx.count("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16") == 4
    assert "fence.proxy.async.shared::cta;" in ptx
    assert "wgmma.wait_group.sync.aligned \t1;" in ptx and "mma.sync" not in ptx
    assert str(0x4000004000010000) in ptx, "descriptor bits: 128-byte swizzle, stride 64 x 16 bytes, leading 1"
    assert f".u32 __et_dynamic_shared_bytes = {4 * 384 * 128 + 1024};" in ptx
    # mma.sync, forced: the same tile on warps (3 stages: its padded rows
    # take more shared memory).
    sync = et.compile(gemm_kernel(2048, 8192, tile=(128, 256, 64), stages=3, out="bf16"), target="cuda",
                      workers=132, threads_per_worker=256, mode="static", tile_mma="sync", cache_dir=tmp_path)
    assert "wgmma" not in sync.binary_path.read_text()
    report = _assemble(art, tmp_path)
    assert "0 bytes spill stores" in report, report
    assert "serialized" not in report, report


def test_prefill_attention_ptx(tmp_path):
    """et.attention_prefill on tensor cores: ldmatrix (K) and
    ldmatrix.trans (V), bf16 mma.sync, ex2 for the softmax; the kernel
    states three slots of K and V blocks; ptxas accepts it, no spills."""
    from event_tensor.kernels import prefill_attention_kernel

    art = et.compile(prefill_attention_kernel(32, 8, 64, 4096, block=16), target="cuda", threads_per_worker=128,
                     cache_dir=tmp_path)
    ptx = art.binary_path.read_text()
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx
    assert ptx.count("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") == 64
    assert "ex2.approx" in ptx
    assert f".u32 __et_dynamic_shared_bytes = {3 * 2 * 64 * 72 * 2};" in ptx
    report = _assemble(art, tmp_path)
    assert "0 bytes spill stores" in report, report


def test_cubin_resources_match_ptxas(tmp_path):
    """format="bin": the artifact's metadata records the registers and the
    stack frame per thread that ptxas gave the kernel (read back from the
    cubin's .nv.info), the figures `ptxas -v` prints for its PTX at -O3; a
    spilling kernel (a register cap forced into the PTX) shows a larger
    frame. Anything but a cubin is refused with a CubinError."""
    import re

    from event_tensor.cubin import CubinError, cubin_resources
    from test_tile_ops import _attention_kernel

    ptxas = ptxas_path()
    if ptxas is None:
        pytest.skip("ptxas not installed")
    kernel = _attention_kernel(32, 8, 64, 1024, 8, 128)
    options = dict(target="cuda", workers=8, threads_per_worker=256, cache_dir=tmp_path)
    ptx = et.compile(kernel, format="isa", **options)
    cubin = et.compile(kernel, format="bin", **options)

    def report(path, out):
        run = subprocess.run([ptxas, "-arch=sm_90a", "-O3", "-v", str(path), "-o", str(out)],
                             capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        return (int(re.search(r"Used (\d+) registers", run.stderr).group(1)),
                int(re.search(r"(\d+) bytes stack frame", run.stderr).group(1)))

    registers, frame = report(ptx.binary_path, tmp_path / "k.cubin")
    assert cubin.metadata["resources"] == {"registers": registers, "frame_bytes": frame}
    # 32 registers cannot hold the tile: ptxas spills, and the frame grows.
    capped = tmp_path / "capped.ptx"
    text = ptx.binary_path.read_text()
    capped.write_text(re.sub(r"(\.maxntid [^\n]*\n)", r"\1.maxnreg 32\n", text, count=1))
    registers, frame = report(capped, tmp_path / "capped.cubin")
    assert registers <= 32 and frame > cubin.metadata["resources"]["frame_bytes"]
    assert cubin_resources(tmp_path / "capped.cubin", ptx.metadata["entry"]) == {"registers": registers,
                                                                                 "frame_bytes": frame}
    with pytest.raises(CubinError, match="not a little-endian ELF64 file"):
        cubin_resources(ptx.binary_path, ptx.metadata["entry"])
    with pytest.raises(CubinError, match="no register count for 'nope'"):
        cubin_resources(cubin.binary_path, "nope")


def test_cubin_is_assembled_at_ptxas_opt_level_3(tmp_path):
    """format="bin": ptxas runs at --opt-level 3 (what the driver uses for
    PTX) whatever the LLVM opt_level; at the model kernels' opt_level 1 it
    used to run at 1 too, and those cubins spilled and ran slower."""
    from test_tile_ops import _attention_kernel

    ptxas = ptxas_path()
    if ptxas is None:
        pytest.skip("ptxas not installed")
    kernel = _attention_kernel(32, 8, 64, 1024, 8, 128)
    options = dict(target="cuda", workers=8, threads_per_worker=512, opt_level=1, cache_dir=tmp_path)
    ptx = et.compile(kernel, format="isa", **options)
    cubin = et.compile(kernel, format="bin", **options)
    sizes = {}
    for level in (1, 3):
        out = tmp_path / f"o{level}.cubin"
        run = subprocess.run([ptxas, "-arch=sm_90a", "--opt-level", str(level), str(ptx.binary_path), "-o", str(out)],
                             capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        sizes[level] = out.stat().st_size
    assert sizes[1] != sizes[3], "the kernel must tell the two levels apart"
    assert cubin.binary_path.stat().st_size == sizes[3]
