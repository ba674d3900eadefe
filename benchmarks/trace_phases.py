"""Where a decode step's layer time goes, from a profiled step's Chrome
trace (benchmarks/decode.py --out DIR on a `profile=True` artifact).

For every task kind of a layered kernel, per layer: the span (first tile's
start of work after its wait to the last tile's end), the hop (the last
tile of the kind before to the first tile of this one past its wait), the
median work of a tile after its wait, and the median wait of the tiles that
reached their wait after the kind's first tile had passed its own (`late`:
for those the inputs were about ready, so the wait is the tile's own cost
before its work: the poll, and the weight loads issued before the wait
landing); printed as medians over the middle layers (the first two and the
last two left out), plus the layer's period.

    python3 benchmarks/trace_phases.py TRACE.json [TRACE.json ...] [--layers N] [--json OUT]

A kind's tiles are spread evenly over the layers: a tile's layer is its
index // (tiles of the kind / layers), with `NAME_first` (the layer-0 copy
of the entry task) as layer 0 and its kind then starting at layer 1.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path


def phases(trace: dict, layers: int) -> dict:
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "tile"]
    by_kind = defaultdict(list)
    for e in events:
        by_kind[e["name"]].append(e)
    # (kind, layer) -> [(work start, end, work, tile start, wait)]
    tiles = defaultdict(list)
    for kind, evs in by_kind.items():
        base = kind[:-len("_first")] if kind.endswith("_first") else kind
        first_layer = 0 if kind.endswith("_first") else (1 if f"{kind}_first" in by_kind else 0)
        count = 1 if kind.endswith("_first") else layers - first_layer
        if len(evs) % count:
            continue  # not a per-layer kind (embed, LM head, argmax)
        per = len(evs) // count
        for e in evs:
            start = e["args"].get("main_start_us", e["ts"])  # the trace's clock, past the wait
            end = e["ts"] + e["dur"]
            tiles[(base, first_layer + e["args"]["tile"] // per)].append(
                (start, end, end - start, e["ts"], e["args"].get("wait_us", start - e["ts"])))
    middle = range(2, layers - 2) if layers > 4 else range(layers)
    # The kinds in the order their tiles start work in the first middle layer.
    firsts = {kind: min(t[0] for t in ts) for (kind, layer), ts in tiles.items() if layer == middle[0]}
    order = sorted(firsts, key=firsts.get)
    rows = {}
    for i, kind in enumerate(order):
        spans, hops, works, late = [], [], [], []
        for layer in middle:
            ts = tiles.get((kind, layer))
            if not ts:
                continue
            start, end = min(t[0] for t in ts), max(t[1] for t in ts)
            spans.append(end - start)
            works.append(statistics.median(t[2] for t in ts))
            woke = min(t[0] for t in ts)
            late += [t[4] for t in ts if t[3] > woke]
            prev_kind, prev_layer = (order[i - 1], layer) if i else (order[-1], layer - 1)
            prev = tiles.get((prev_kind, prev_layer))
            if prev:
                hops.append(start - max(t[1] for t in prev))
        if spans:
            rows[kind] = {"hop_us": statistics.median(hops) if hops else None,
                          "span_us": statistics.median(spans), "work_us": statistics.median(works),
                          "late_wait_us": statistics.median(late) if late else None,
                          "tiles": len(tiles[(kind, middle[0])])}
    starts = [min(t[0] for t in tiles[(order[0], layer)]) for layer in middle if (order[0], layer) in tiles]
    period = statistics.median(b - a for a, b in zip(starts, starts[1:])) if len(starts) > 1 else None
    return {"kinds": rows, "layer_us": period}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--layers", type=int, default=None,
                        help="layers of the model (default: from the trace's qkv_first / qkv tiles)")
    parser.add_argument("--json", help="write the tables here")
    args = parser.parse_args()
    out = {}
    for path in args.traces:
        trace = json.loads(Path(path).read_text())
        layers = args.layers
        if layers is None:
            names = [e["name"] for e in trace["traceEvents"] if e.get("ph") == "X"]
            first = names.count("qkv_first")
            layers = names.count("qkv") // first + 1 if first else None
            if layers is None:
                raise SystemExit(f"{path}: pass --layers (no qkv_first task)")
        result = phases(trace, layers)
        out[Path(path).name] = result
        print(f"{Path(path).name}: {layers} layers, a layer every {result['layer_us']:.2f} us (median)")
        print(f"  {'kind':<8} {'tiles':>5} {'hop':>6} {'span':>6} {'work':>6} {'late':>6}")
        for kind, r in result["kinds"].items():
            hop = f"{r['hop_us']:6.2f}" if r["hop_us"] is not None else "     -"
            late = f"{r['late_wait_us']:6.2f}" if r["late_wait_us"] is not None else "     -"
            print(f"  {kind:<8} {r['tiles']:>5} {hop} {r['span_us']:6.2f} {r['work_us']:6.2f} {late}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
