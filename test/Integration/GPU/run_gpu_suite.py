#!/usr/bin/env python3
"""Runs the GPU suite prepared by utils/prepare_gpu_suite.py on a CUDA
machine with no MLIR (numpy, torch and cuda-bindings): every random task
graph must match its sequential reference on three consecutive launches
(the counters are reused through epochs), and the planted deadlock must
raise the watchdog error within its timeout instead of hanging the GPU.

    PYTHONPATH=python python3 test/Integration/GPU/run_gpu_suite.py .device/suite [OUTDIR]

With OUTDIR, the profiled case's Chrome trace and Gantt chart are written there.
"""

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from event_tensor import reference as numpy_refs
from event_tensor import runtime


def run_profiled(root: Path, out: Path | None) -> bool:
    art = runtime.load(root / "profiled")
    case = np.load(root / "profiled" / "case.npz")
    launch = art.launcher(timeout_s=5)
    data = [torch.zeros(int(n), dtype=torch.int64, device="cuda") for n in case["data_sizes"]]
    outs = [torch.full((int(n),), -7777, dtype=torch.int64, device="cuda") for n in case["out_sizes"]]
    launch(*[int(x) for x in case["sizes"]], *data, *outs)
    trace = launch.last_trace
    total = int(sum(case["out_sizes"]))
    ok = len(trace.records) == total and all(
        np.array_equal(o.cpu().numpy(), case[f"out{t}"]) for t, o in enumerate(outs))
    print(f"profiled launch: {len(trace.records)}/{total} tile records, makespan {trace.makespan_ns / 1e3:.1f} us, "
          f"outputs {'match' if ok else 'DIFFER'}")
    if out is not None:
        trace.chrome_trace(out / "profiled-trace.json")
        try:
            trace.gantt_png(out / "profiled-gantt.png")
        except ImportError:
            pass
    return ok


def run_tile_numerics(root: Path) -> bool:
    """RMSNorm with the residual add, and SiLU-mul, against float64."""
    case_dir = root.parent / "tiles" / "norm-act"
    if not case_dir.exists():
        return True
    c = np.load(case_dir / "case.npz")
    bf = lambda a: torch.from_numpy(a.copy()).view(torch.bfloat16).cuda()
    x, w, g, u = bf(c["x"]), bf(c["w"]), bf(c["g"]), bf(c["u"])
    res = torch.from_numpy(c["res"].copy()).cuda()
    y = torch.full(x.shape, float("nan"), device="cuda")
    o = torch.full(x.shape, float("nan"), device="cuda")
    runtime.load(case_dir).launcher()(x, w, y, g, u, o, res)
    err = lambda t, r: float(np.linalg.norm(t.cpu().double().numpy() - r) / np.linalg.norm(r))
    errs = {"rmsnorm": err(y, c["ref_y"]), "silu_mul": err(o, c["ref_o"]), "residual": err(res, c["ref_res"])}
    early = root.parent / "tiles" / "norm-early"
    if early.exists():
        # A wide RMSNorm whose weights are loaded before its task's wait.
        c = np.load(early / "case.npz")
        y = torch.full((1, c["x"].shape[1]), float("nan"), device="cuda")
        runtime.load(early).launcher()(torch.from_numpy(c["x"]).cuda(), bf(c["w"]), y)
        errs["rmsnorm, weights before the wait"] = err(y, c["ref_y"])
    ok = all(e < 1e-3 for e in errs.values())
    print("tile numerics vs float64: " + ", ".join(f"{k} {v:.1e}" for k, v in errs.items())
          + ("" if ok else "  FAIL"))
    return ok


def run_logit_ops(root: Path) -> bool:
    """Logit biases, then penalties over a slot's history, then the greedy
    token, a row tile each, against the numpy references."""
    case_dir = root.parent / "tiles" / "logit-ops"
    if not case_dir.exists():
        return True
    c = np.load(case_dir / "case.npz")
    t = {k: torch.from_numpy(c[k].copy()).cuda() for k in ("x", "ids", "vals", "hist", "slots", "lengths",
                                                           "outputs_from", "repetition", "frequency", "presence")}
    n, vocab = c["x"].shape
    counts = torch.zeros(n, vocab, dtype=torch.int32, device="cuda")
    v, i = torch.zeros(n, 1, device="cuda"), torch.full((n, 1), -1, dtype=torch.int32, device="cuda")
    runtime.load(case_dir).launcher()(t["x"], t["ids"], t["vals"], t["hist"], t["slots"], t["lengths"],
                                      t["outputs_from"], t["repetition"], t["frequency"], t["presence"], counts,
                                      v, i, n)
    err = float(np.abs(t["x"].cpu().double().numpy() - c["ref_x"]).max())
    tokens = i[:, 0].cpu().numpy()
    left = bool(counts.any().item())
    ok = err < 1e-4 and np.array_equal(tokens, c["ref_tokens"]) and not left
    print(f"logit bias and penalties on the GPU: worst error {err:.1e}, tokens {tokens.tolist()} "
          f"(reference {c['ref_tokens'].tolist()}), counts {'LEFT' if left else 'zero'}: {'ok' if ok else 'FAIL'}")
    return ok


def run_top_logprobs(root: Path) -> bool:
    """A row's log-sum-exp and its most likely ids (et.top_logprobs) against
    the numpy reference; then the time of a one-row launch with 20 ids
    against one with the op off (count -1), median of 50. Every case
    directory `top-logprobs*` (builds of it side by side)."""
    return all([_top_logprobs_case(d) for d in sorted((root.parent / "tiles").glob("top-logprobs*"))])


def _top_logprobs_case(case_dir: Path) -> bool:
    c = np.load(case_dir / "case.npz")
    x, counts, rows, lists = c["x"], c["counts"], c["rows"], int(c["lists"])
    n, entries = len(counts), 20
    launch = runtime.load(case_dir).launcher()
    gx, gc, gr = (torch.from_numpy(a.copy()).cuda() for a in (x, counts, rows))
    lse = torch.full((n,), 7.0, device="cuda")
    ids = torch.full((lists, entries), -7, dtype=torch.int32, device="cuda")
    vals = torch.full((lists, entries), 7.0, device="cuda")
    launch(gx, gc, lse, ids, vals, gr, n)
    lse, ids, vals = lse.cpu().numpy(), ids.cpu().numpy(), vals.cpu().numpy()
    ok, worst = True, 0.0
    for m in range(n):
        r = rows[m]
        if counts[m] < 0:
            ok &= bool(lse[m] == 7.0 and (ids[r] == -7).all())
            continue
        take = min(int(counts[m]), entries)
        want_lse, want_ids, want_vals = numpy_refs.top_logprobs(x[m], take)
        worst = max(worst, abs(float(lse[m]) - want_lse), *(abs(vals[r, :take] - want_vals).tolist() or [0.0]))
        ok &= bool(np.array_equal(ids[r, :take], want_ids) and (ids[r, take:] == -7).all())
    ok &= worst < 1e-3
    times = {}
    for label, count in (("20 ids", 20), ("off", -1)):
        one = torch.tensor([count], dtype=torch.int32, device="cuda")
        args = (gx[:1].contiguous(), one, torch.zeros(1, device="cuda"), torch.zeros(1, entries, dtype=torch.int32,
                device="cuda"), torch.zeros(1, entries, device="cuda"), torch.zeros(1, dtype=torch.int32, device="cuda"), 1)
        spans = []
        for _ in range(60):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            launch(*args)
            end.record()
            torch.cuda.synchronize()
            spans.append(start.elapsed_time(end) * 1e3)
        times[label] = float(np.median(spans[10:]))
    print(f"{case_dir.name} on the GPU (vocabulary {x.shape[1]}): worst error {worst:.1e}, "
          f"{'ok' if ok else 'FAIL'}; one row's launch {times['20 ids']:.1f} us with 20 ids, {times['off']:.1f} us off")
    return ok


def run_rows_in_flight(root: Path) -> bool:
    """Wide and per-head RMSNorm and the KV append compiled with several
    rows in flight (tile_rows_in_flight=8), against float64."""
    case_dir = root.parent / "tiles" / "rows-in-flight"
    if not case_dir.exists():
        return True
    c = np.load(case_dir / "case.npz")
    bf = lambda a: torch.from_numpy(a.copy()).view(torch.bfloat16).cuda()
    f32 = lambda a: torch.from_numpy(a.copy()).cuda()
    x, w, hw = bf(c["x"]), bf(c["w"]), bf(c["hw"])
    res, hx, new = f32(c["res"]), f32(c["hx"]), f32(c["new"])
    y = torch.full(x.shape, float("nan"), device="cuda")
    hy = torch.full(hx.shape, float("nan"), device="cuda")
    cache = torch.zeros(c["ref_cache"].shape, device="cuda", dtype=torch.bfloat16)
    runtime.load(case_dir).launcher()(x, w, y, res, hx, hw, hy, new, cache)
    err = lambda t, r: float(np.linalg.norm(t.cpu().double().numpy() - r) / np.linalg.norm(r))
    errs = {"rmsnorm": err(y, c["ref_y"]), "residual": err(res, c["ref_res"]), "head norm": err(hy, c["ref_hy"])}
    ok = all(e < 1e-3 for e in errs.values())
    cache_ok = bool(np.array_equal(cache.float().cpu().double().numpy(), c["ref_cache"]))
    print("rows in flight vs float64: " + ", ".join(f"{k} {v:.1e}" for k, v in errs.items())
          + f", kv append {'exact' if cache_ok else 'WRONG'}" + ("" if ok and cache_ok else "  FAIL"))
    return ok and cache_ok


def run_linear_spread(root: Path) -> bool:
    """et.linear in the spread layout (split K, rows per trip, a gated tile
    whole, a static M, first loads before a norm) at runtime M = 1, 2 and
    3, against float64."""
    case_dir = root.parent / "tiles" / "linear-spread"
    if not case_dir.exists():
        return True
    c = np.load(case_dir / "case.npz")
    bf = lambda a: torch.from_numpy(a.copy()).view(torch.bfloat16).cuda()
    launch = runtime.load(case_dir).launcher()
    err = lambda t, r: float(np.linalg.norm(t.cpu().double().numpy() - r) / np.linalg.norm(r))
    ok, errs = True, {}
    for m in (1, 2, 3):
        x, x2, x3 = bf(c["x"][:m]), bf(c["x2"][:m]), bf(c["x3"][:m])
        y1 = torch.from_numpy(c["y0"][:m].copy()).cuda()
        y4 = torch.full((m, 64), float("nan"), device="cuda")
        y2 = torch.full((m, 1000), float("nan"), device="cuda")
        y3 = torch.full((m, 600), float("nan"), device="cuda", dtype=torch.bfloat16)
        y5 = torch.full((3, 1000), float("nan"), device="cuda")
        y6 = torch.full((m, 1000), float("nan"), device="cuda")
        xn = torch.zeros((16, 3, 1024), device="cuda", dtype=torch.bfloat16)
        h = torch.from_numpy(c["h"][:m].copy()).cuda()
        launch(x, bf(c["wd"]), y1, x2, bf(c["w4"]), y4, x3, bf(c["wm"]), y2, bf(c["wg"]), bf(c["wu"]), y3,
               bf(c["xs"]), y5, h, bf(c["ln"]), xn, y6)
        for name, got, ref, tol in (("split 2", y1, c["ref_y1"][:m], 1e-5), ("split 4", y4, c["ref_y4"][:m], 1e-5),
                                    ("2 rows per trip", y2, c["ref_y2"][:m], 1e-5),
                                    ("gated", y3.float(), c["ref_y3"][:m], 8e-3),
                                    ("static M", y5, c["ref_y5"], 1e-5),
                                    ("after a norm", y6, c["ref_y6"][:m], 1e-3)):
            e = err(got, ref)
            errs[f"{name} M={m}"] = e
            ok = ok and e < tol and not torch.isnan(got).any().item()
    print("linear spread vs float64: " + ", ".join(f"{k} {v:.1e}" for k, v in errs.items())
          + ("" if ok else "  FAIL"))
    return ok


def run_decode_ops(root: Path) -> bool:
    """Embedding, RoPE, KV append, argmax and split-KV attention on the GPU."""
    tiles = root.parent / "tiles"
    ok = True
    if (tiles / "decode-ops").exists():
        rng = np.random.default_rng(11)
        table = torch.randn(50, 64, device="cuda").to(torch.bfloat16)
        ids = torch.tensor([7, 99], dtype=torch.int32, device="cuda")
        h = torch.full((2, 64), float("nan"), device="cuda")
        q = torch.randn(2, 4, 16, device="cuda")
        kq = torch.randn(2, 4, 16, device="cuda")
        pos = torch.tensor([5, 3000], dtype=torch.int32, device="cuda")
        new = torch.randn(2, 2, 16, device="cuda")
        cache = torch.zeros(10, 2, 16, device="cuda", dtype=torch.bfloat16)
        logits = torch.randn(2, 300, device="cuda")
        logits[1, 123] = logits[1, 250] = 10.0
        pv, pi = torch.zeros(2, 5, device="cuda"), torch.zeros(2, 5, dtype=torch.int32, device="cuda")
        v, i = torch.zeros(2, 1, device="cuda"), torch.zeros(2, 1, dtype=torch.int32, device="cuda")
        from event_tensor import reference  # the float64 references of the CPU tests

        ref_q = reference.rope(q.cpu().numpy(), pos.cpu().numpy(), 5e5, (32.0, 1.0, 4.0, 8192.0))
        ref_kq = reference.rope(kq.cpu().numpy(), pos.cpu().numpy(), 1e6)
        runtime.load(tiles / "decode-ops").launcher()(table, ids, h, q, pos, kq, new, cache, 8, logits, pv, pi, v, i)
        rel = lambda a, r: float(np.linalg.norm(a.cpu().double().numpy() - r) / np.linalg.norm(r))
        checks = {
            "embedding": torch.equal(h[0], table[7].float()) and not h[1].any().item(),
            "rope llama3": rel(q, ref_q) < 1e-4,
            "rope qwen3": rel(kq, ref_kq) < 1e-4,
            "kv_append": torch.equal(cache[8:].float(), new.to(torch.bfloat16).float()) and not cache[:8].any().item(),
            "argmax": i[:, 0].tolist() == [int(logits[0].argmax()), 123],
        }
        print("decode ops on the GPU: " + ", ".join(f"{k} {'ok' if v else 'FAIL'}" for k, v in checks.items())
              + f" (rope errors {rel(q, ref_q):.1e}, {rel(kq, ref_kq):.1e})")
        ok &= all(checks.values())
    if (tiles / "rope-into").exists():
        c = np.load(tiles / "rope-into" / "case.npz")
        def arg(n):
            t = torch.from_numpy(c[n].copy())
            return (t.view(torch.bfloat16) if n in ("kn", "cache", "on", "oc") else t).cuda()
        args = [arg(n) for n in ("k", "pos", "kn", "cache")]
        rest = {n: arg(n) for n in ("q", "s", "sn", "so", "d", "dn", "o", "opos", "on", "oc")}
        runtime.load(tiles / "rope-into").launcher()(*args, int(c["at"]), *rest.values())
        got = {"cache": args[3], "q": rest["q"], "so": rest["so"], "d": rest["d"], "oc": rest["oc"]}
        errs = {n: float(np.linalg.norm(g.cpu().double().numpy() - c[f"ref_{n}"]) / np.linalg.norm(c[f"ref_{n}"]))
                for n, g in got.items()}
        unwritten = (not args[3][:9].any().item() and not rest["so"][:2].any().item()
                     and not rest["oc"][:3].any().item() and not rest["oc"][4:].any().item())
        good = (errs["cache"] < 1e-2 and errs["oc"] < 1e-2 and all(errs[n] < 1e-4 for n in ("q", "so", "d"))
                and unwritten)
        print("rope_into on the GPU vs float64: " + ", ".join(f"{n} {e:.1e}" for n, e in errs.items())
              + ("" if unwritten else ", rows outside the output WRITTEN") + ("" if good else "  FAIL"))
        ok &= good
    for case_dir in sorted(tiles.glob("attention-[0-9]*")):
        c = np.load(case_dir / "case.npz")
        bf = lambda a: torch.from_numpy(a.copy()).view(torch.bfloat16).cuda()
        q = torch.from_numpy(c["q"]).cuda()
        k, v = bf(c["k"]), bf(c["v"])
        entries, hq, d = int(c["entries"]), q.shape[0], q.shape[1]
        o = torch.full((entries, hq, d), float("nan"), device="cuda")
        lse = torch.full((entries, hq), float("nan"), device="cuda")
        out = torch.full((hq, d), float("nan"), device="cuda")
        extra = [int(c["stable"])] if "stable" in c.files else []
        runtime.load(case_dir).launcher()(q, k, v, o, lse, out, int(c["length"]), *extra)
        err = float(np.linalg.norm(out.cpu().double().numpy() - c["ref"]) / np.linalg.norm(c["ref"]))
        staged = f", rows below {extra[0]} staged in shared memory" if extra else ""
        print(f"split-KV attention + merge on the GPU ({case_dir.name}: {hq} heads, D = {d}{staged}): "
              f"relative error {err:.1e}")
        ok &= err < 1e-5
    for case_dir in sorted(tiles.glob("attention-append-*")):
        c = np.load(case_dir / "case.npz")
        bf = lambda a: torch.from_numpy(a.copy()).view(torch.bfloat16).cuda()
        q, kn, vn = (torch.from_numpy(c[n]).cuda() for n in ("q", "kn", "vn"))
        k, v = bf(c["k"]), bf(c["v"])
        entries, hq, d = int(c["entries"]), q.shape[0], q.shape[1]
        o = torch.full((entries, hq, d), float("nan"), device="cuda")
        lse = torch.full((entries, hq), float("nan"), device="cuda")
        out = torch.full((hq, d), float("nan"), device="cuda")
        runtime.load(case_dir).launcher()(q, k, v, o, lse, out, kn, vn, int(c["length"]), int(c["stable"]))
        err = float(np.linalg.norm(out.cpu().double().numpy() - c["ref"]) / np.linalg.norm(c["ref"]))
        caches = bool((k.view(torch.int16).cpu().numpy().view(np.uint16) == c["k_after"]).all()
                      and (v.view(torch.int16).cpu().numpy().view(np.uint16) == c["v_after"]).all())
        how = "staged" if bool(c["staged"]) else "not staged"
        print(f"split-KV attention appending rows {int(c['stable'])}.. on the GPU ({case_dir.name}, {how}: "
              f"{hq} heads, D = {d}): relative error {err:.1e}, caches {'as expected' if caches else 'WRONG'}")
        ok &= err < 1e-5 and caches
    return ok


def run_bound_capacity(root: Path) -> bool:
    """A bound launch (`bind`) that needs more counters than the launcher
    holds: `check()` raises, grows the buffer, and the next bound launch
    (packed again with the new buffer) computes the product."""
    art = runtime.load(root / "bound-capacity")
    launch = art.launcher(timeout_s=5)
    m, n, k = 2048, 256, 512
    gen = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
    w = (torch.randn(n, k, device="cuda", generator=gen) / k ** 0.5).to(torch.bfloat16)
    y = torch.full((m, n), float("nan"), device="cuda")
    part = torch.full((2, m, n), float("nan"), device="cuda")
    bound = launch.bind(x, w, y, m, part)
    bound()
    try:
        launch.check()
        print("bound launch past the counter buffer: FAIL (no error)")
        return False
    except runtime.KernelError as err:
        if "launch again" not in str(err):
            print(f"bound launch past the counter buffer: FAIL (unexpected error: {err})")
            return False
        print(f"bound launch past the counter buffer: {err}")
    bound()
    launch.check()
    ref = x.double() @ w.double().T
    rel = float((y.double() - ref).norm() / ref.norm())
    ok = not bool(torch.isnan(y).any()) and rel < 1e-5
    print(f"the next bound launch: relative error {rel:.2e} ({'ok' if ok else 'FAIL'})")
    launch.close()
    return ok


def run_graph_capture(root: Path) -> bool:
    """A launch of a kernel that signals events, captured into a CUDA graph,
    is refused (a replay would reuse the captured launch number and with it
    a counter bank no launch clears); the same launch outside the capture
    runs."""
    launch = runtime.load(root / "bound-capacity").launcher(timeout_s=5)
    m, n, k = 2048, 256, 512
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    w = torch.randn(n, k, device="cuda").to(torch.bfloat16)
    y = torch.zeros(m, n, device="cuda")
    part = torch.zeros(2, m, n, device="cuda")
    stream = torch.cuda.Stream()
    ok = False
    try:
        with torch.cuda.stream(stream):
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=stream):
                launch.bind(x, w, y, m, part, stream=stream.cuda_stream)()
        print("graph capture of a kernel with events: FAIL (captured)")
    except runtime.DeviceError as err:
        ok = "cannot be captured into a CUDA graph" in str(err)
        print(f"graph capture of a kernel with events: {err} ({'ok' if ok else 'FAIL'})")
    launch(x, w, y, m, part)
    ref = x.double() @ w.double().T
    rel = float((y.double() - ref).norm() / ref.norm())
    print(f"the same launch outside the capture: relative error {rel:.2e} ({'ok' if rel < 1e-5 else 'FAIL'})")
    ok = ok and rel < 1e-5
    launch.close()
    return ok


def run_steps(root: Path) -> bool:
    """Kernels with steps (et.repeat) on the GPU: every (budget, limit) of
    the CPU tests gives the reference's sums, and no step past the stop."""
    from event_tensor.testing import STEPS_CASES, steps_reference

    ok = True
    for mode in ("static", "dynamic"):
        if not (root / f"steps-{mode}").exists():
            continue
        launch = runtime.load(root / f"steps-{mode}").launcher(timeout_s=5)
        for steps, limit in STEPS_CASES:
            stop = torch.zeros(1, dtype=torch.int32, device="cuda")
            acc = torch.zeros(8, dtype=torch.int64, device="cuda")
            log = torch.full((64,), -1, dtype=torch.int64, device="cuda")
            launch(steps, stop, acc, log, torch.tensor([limit], dtype=torch.int64, device="cuda"))
            want_acc, want_log = steps_reference(steps, limit)
            got = log.cpu().numpy()
            good = (acc.cpu().numpy().tolist() == want_acc.tolist() and got[: len(want_log)].tolist() == want_log
                    and (got[len(want_log):] == -1).all())
            if not good:
                print(f"steps ({mode}): FAIL at budget {steps}, limit {limit}: {got[:12].tolist()}")
                ok = False
        launch.close()
        print(f"steps in one launch ({mode} schedule): {len(STEPS_CASES)} budgets and stops "
              f"{'match' if ok else 'FAIL'}")
    return ok


def run_oversubscribed(root: Path) -> bool:
    """A static kernel with waits and more workers than the GPU holds at
    once: the launcher refuses it, naming the limit, before any launch."""
    if not (root / "oversubscribed").exists():
        return True
    try:
        runtime.load(root / "oversubscribed").launcher(timeout_s=2)
    except runtime.ArtifactError as err:
        ok = "must be resident" in str(err)
        print(f"more workers than the GPU holds: {err} ({'ok' if ok else 'FAIL'})")
        return ok
    print("more workers than the GPU holds: FAIL (the launcher accepted it)")
    return False


def run_split_k(root: Path) -> bool:
    """Split-K et.linear with atomic adds (test_tile_ops.SPLIT_K: short rows
    in four passes; three chunks on four lanes with the weights before a
    wait) at M = 1 and 3, against float64."""
    case_dir = root.parent / "tiles" / "split-k"
    if not case_dir.exists():
        return True
    c = np.load(case_dir / "case.npz")
    launch = runtime.load(case_dir).launcher()
    ok, errs = True, {}
    for m in (1, 3):
        t = {}
        for n in ("x", "w", "y", "x2", "w2", "y2"):
            arr = c[n] if n.startswith("w") else c[n][:m]  # weights, then rows of M = 3
            a = torch.from_numpy(arr.copy())
            t[n] = (a.view(torch.bfloat16) if arr.dtype == np.uint16 else a).cuda()
        launch(*t.values())
        for n in ("y", "y2"):
            ref = c[f"ref_{n}"][:m]
            errs[f"{n} M={m}"] = e = float(np.linalg.norm(t[n].cpu().double().numpy() - ref) / np.linalg.norm(ref))
            ok = ok and e < 1e-5
    print("split-K linear (atomic adds) vs float64: " + ", ".join(f"{k} {v:.1e}" for k, v in errs.items())
          + ("" if ok else "  FAIL"))
    return ok


def run_norm_linear(root: Path) -> bool:
    """et.linear ... norm (test_tile_ops.NORM_LINEAR) in the spread and
    one-row-per-warp layouts at M = 1 and 3, against float64 (the bf16
    activation of the gated rows within its rounding)."""
    ok = True
    for layout in ("spread", "rows"):
        case_dir = root.parent / "tiles" / f"norm-linear-{layout}"
        if not case_dir.exists():
            continue
        c = np.load(case_dir / "case.npz")
        launch = runtime.load(case_dir).launcher()
        errs = {}
        for m in (1, 3):
            t = {}
            for n in ("h", "g", "w", "y", "w2", "y2", "wg", "wu", "a", "y1"):
                arr = c[n] if n in ("g", "w", "w2", "wg", "wu", "y1") else c[n][:m]
                a = torch.from_numpy(arr.copy())
                t[n] = (a.view(torch.bfloat16) if arr.dtype == np.uint16 else a).cuda()
            launch(*t.values())
            for n in ("y", "y2", "a", "y1"):
                ref = c[f"ref_{n}"] if n == "y1" else c[f"ref_{n}"][:m]
                got = t[n].float().cpu().double().numpy()
                errs[f"{n} M={m}"] = e = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
                ok = ok and e < (8e-3 if n == "a" else 1e-5)
        launch.close()
        print(f"norm-linear ({layout}) vs float64: " + ", ".join(f"{k} {v:.1e}" for k, v in errs.items())
              + ("" if ok else "  FAIL"))
    return ok


def main(root: Path, out: Path | None = None) -> int:
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    cases = json.loads((root / "cases.json").read_text())
    failures = []
    start = time.monotonic()
    for name in cases:
        art = runtime.load(root / name)
        case = np.load(root / name / "case.npz")
        launch = art.launcher(timeout_s=5)
        sizes = [int(x) for x in case["sizes"]]
        for rep in range(3):
            data = [torch.zeros(int(n), dtype=torch.int64, device="cuda") for n in case["data_sizes"]]
            outs = [torch.full((int(n),), -7777, dtype=torch.int64, device="cuda") for n in case["out_sizes"]]
            try:
                launch(*sizes, *data, *outs)
            except runtime.KernelError as err:
                failures.append(f"{name} launch {rep}: {err}")
                break
            bad = [t for t, o in enumerate(outs) if not np.array_equal(o.cpu().numpy(), case[f"out{t}"])]
            bad += [f"event{e}" for e, d in enumerate(data)
                    if not np.array_equal(d.cpu().numpy()[: len(case[f"data{e}"])], case[f"data{e}"])]
            if bad:
                failures.append(f"{name} launch {rep}: mismatch in {bad}")
                break
        launch.close()
    elapsed = time.monotonic() - start
    print(f"random graphs: {len(cases) - len(failures)}/{len(cases)} cases match the reference "
          f"(3 launches each, {elapsed:.1f} s)")
    for f in failures:
        print("  FAIL", f)

    art = runtime.load(root / "planted-deadlock")
    launch = art.launcher()
    t0 = time.monotonic()
    try:
        launch(64, timeout_s=0.5)
        print("planted deadlock: FAIL (no error)")
        failures.append("deadlock")
    except runtime.WatchdogError as err:
        print(f"planted deadlock: watchdog error after {time.monotonic() - t0:.2f} s (timeout 0.5 s): {err}")
    # The launcher recovers and the GPU is usable afterwards.
    x = torch.ones(4, device="cuda")
    torch.cuda.synchronize()
    print("GPU usable after the watchdog:", float(x.sum()) == 4.0)
    if not run_bound_capacity(root):
        failures.append("bound capacity")
    if not run_graph_capture(root):
        failures.append("graph capture")
    if not run_oversubscribed(root):
        failures.append("oversubscribed")
    if not run_steps(root):
        failures.append("steps")
    if not run_profiled(root, out):
        failures.append("profiled")
    if not run_tile_numerics(root):
        failures.append("tile numerics")
    if not run_decode_ops(root):
        failures.append("decode ops")
    if not run_logit_ops(root):
        failures.append("logit ops")
    if not run_top_logprobs(root):
        failures.append("top logprobs")
    if not run_rows_in_flight(root):
        failures.append("rows in flight")
    if not run_linear_spread(root):
        failures.append("linear spread")
    if not run_split_k(root):
        failures.append("split-K linear")
    if not run_norm_linear(root):
        failures.append("norm linear")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else None))
