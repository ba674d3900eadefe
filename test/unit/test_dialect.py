"""Building et IR from Python with the generated bindings and the helpers."""

import pytest

from event_tensor.compiler import EventTensorCompileError, parse, run_pipeline, verify
from event_tensor.dialects import arith, et
from event_tensor.ir import Context, IndexType, InsertionPoint, Location, MemRefType, Module


@pytest.fixture
def ctx():
    with Context() as c, Location.unknown():
        yield c


def test_event_type(ctx):
    t = et.EventType.get([4, et.DYNAMIC])
    assert str(t) == "!et.event<4x?>"
    assert t.rank == 2
    assert t.shape == [4, et.DYNAMIC]
    assert str(et.EventType.get([])) == "!et.event<>"


def test_event_type_rejects_bad_shape(ctx):
    with pytest.raises(ValueError, match="invalid event tensor shape"):
        et.EventType.get([4, 0])


def test_build_kernel_with_helpers(ctx):
    module = Module.create()
    with InsertionPoint(module.body):
        with et.kernel("mlp", [IndexType.get()]) as (rows,):
            ready = et.event([None, 8], [rows])
            assert isinstance(ready.type, et.EventType)
            with et.task("producer", [rows, 8]) as (i, j):
                et.signal(ready, [i, j])
            with et.task("consumer", [rows]) as (i,):
                et.wait(ready, [i, 0])
    verify(module)
    text = str(module)
    assert "et.kernel @mlp(%arg0: index)" in text
    assert "et.event.create(%arg0) : !et.event<?x8>" in text
    assert "et.task @producer tiles(%arg1, %arg2) in (%arg0, %c8)" in text
    assert "et.event.wait %0[%arg1, %c0] : !et.event<?x8>" in text


def test_generated_builders(ctx):
    module = Module.create()
    with InsertionPoint(module.body):
        k = et.KernelOp("k", [MemRefType.get([8], IndexType.get())])
        with InsertionPoint(k.entry_block):
            c0 = arith.ConstantOp(IndexType.get(), 0).result
            n = et.extent_load(IndexType.get(), k.arguments[0], [c0], [])
            t = et.TaskOp("t", [n])
            assert len(t.tile_ids) == 1
    verify(module)
    assert "et.extent.load %arg0[%c0] : memref<8xindex>" in str(module)


def test_helper_errors_name_the_bad_value(ctx):
    module = Module.create()
    with InsertionPoint(module.body):
        with et.kernel("k", []):
            with pytest.raises(ValueError, match="event dimension 1 must be a positive int"):
                et.event([4, 0])
            with pytest.raises(ValueError, match="1 dynamic dimensions but 0 sizes"):
                et.event([None])
            with pytest.raises(ValueError, match="extent #0 must be positive, got 0"):
                et.TaskOp("t", [0])
            ev = et.event([4])
            with et.task("t", [4]) as (i,):
                with pytest.raises(ValueError, match=r"has rank 1, got 2 indices"):
                    et.wait(ev, [i, i])
                with pytest.raises(TypeError, match="expected an index Value or a Python int"):
                    et.signal(ev, ["x"])


def test_verifier_error_is_exception(ctx):
    module = Module.create()
    with InsertionPoint(module.body):
        with et.kernel("k", []):
            n = arith.ConstantOp(IndexType.get(), 2).result
            et.EventCreateOp(et.EventType.get([4]), [n])
    with pytest.raises(EventTensorCompileError, match="expected 0 dynamic size operands"):
        verify(module)


def test_parse_error_is_exception(ctx):
    with pytest.raises(EventTensorCompileError, match="failed to parse"):
        parse("et.kernel @f() { %e = et.event.create() : !et.event<0> }")


def test_run_pipeline_and_bad_pipeline(ctx):
    module = parse("func.func @f() -> index {\n %a = arith.constant 3 : index\n %b = arith.muli %a, %a : index\n return %b : index\n}")
    run_pipeline(module, "builtin.module(canonicalize)")
    assert "arith.constant 9" in str(module)
    with pytest.raises(EventTensorCompileError, match="invalid pass pipeline"):
        run_pipeline(module, "builtin.module(no-such-pass)")
