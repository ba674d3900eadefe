"""The EventGraph analysis from Python: JSON and DOT of a kernel."""

from pathlib import Path

import pytest

from event_tensor.analysis import event_graph, event_graph_dot, kernels
from event_tensor.compiler import parse
from event_tensor.ir import Context

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture
def ctx():
    with Context() as c:
        yield c


def load(name):
    return parse((EXAMPLES / name).read_text())


def test_attention_counts(ctx):
    g = event_graph(load("attention-split-kv.mlir"))
    assert g["kernel"] == "attention"
    counts = {e["name"]: (e["count_kind"], e["count"]) for e in g["events"]}
    assert counts == {
        "event0": ("static", "1"),
        "event1": ("static", "4"),
        "event2": ("symbolic", "arg3"),
        "event3": ("static", "8"),
    }
    assert g["events"][1]["static_counts"] == [4] * 8
    edges = {(e["from"], e["to"]) for e in g["edges"]}
    assert ("qkv_proj", "attn_split") in edges and ("merge", "o_proj") in edges
    tasks = {t["name"]: t["extents"] for t in g["tasks"]}
    assert tasks["attn_split"] == [{"value": "8", "kind": "static"}, {"value": "arg3", "kind": "symbolic"}]


def test_moe_is_device_known(ctx):
    g = event_graph(load("moe-dispatch-combine.mlir"))
    ev = {e["name"]: e for e in g["events"]}
    assert ev["event1"]["count_kind"] == "device"
    assert "data" in ev["event1"]["device_reason"]
    tasks = {t["name"]: t["extents"] for t in g["tasks"]}
    assert tasks["expert0"][0]["kind"] == "device"


def test_mlp_symbolic_retiling(ctx):
    g = event_graph(load("mlp-dynamic-rows.mlir"))
    ev = {e["name"]: e for e in g["events"]}
    assert ev["event1"]["count"] == "min(2, ceildiv(arg5, 32) - 2*e0)"
    assert ev["event1"]["shape"] == ["ceildiv(arg5, 64)"]


def test_dot(ctx):
    dot = event_graph_dot(load("attention-split-kv.mlir"))
    assert dot.startswith('digraph "attention"')
    assert '"rmsnorm" -> "event0"' in dot and '"event0" -> "qkv_proj"' in dot


def test_bad_input_is_a_clear_error(ctx):
    m = parse("func.func @f() { return }")
    with pytest.raises(ValueError, match="exactly one 'et.kernel', found 0"):
        event_graph(m)
    with pytest.raises(ValueError, match="expected an 'et.kernel' operation, got 'func.func'"):
        event_graph(kernels(m) or m.body.operations[0])
