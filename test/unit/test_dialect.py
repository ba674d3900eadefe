"""Building et IR from Python with the generated bindings."""

import pytest

from event_tensor.compiler import EventTensorCompileError, parse, run_pipeline, verify
from event_tensor.dialects import arith, et, func
from event_tensor.ir import Context, FunctionType, IndexType, InsertionPoint, Location, Module


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


def test_build_event_create(ctx):
    module = Module.create()
    with InsertionPoint(module.body):
        f = func.FuncOp("f", FunctionType.get([IndexType.get()], []))
        with InsertionPoint(f.add_entry_block()):
            n = f.arguments[0]
            ev = et.event_create(et.EventType.get([et.DYNAMIC, 8]), [n])
            assert isinstance(ev.type, et.EventType)
            func.ReturnOp([])
    verify(module)
    assert "et.event.create(%arg0) : !et.event<?x8>" in str(module)


def test_verifier_error_is_exception(ctx):
    module = Module.create()
    with InsertionPoint(module.body):
        n = arith.ConstantOp(IndexType.get(), 2).result
        et.EventCreateOp(et.EventType.get([4]), [n])
    with pytest.raises(EventTensorCompileError, match="expected 0 dynamic size operands"):
        verify(module)


def test_parse_error_is_exception(ctx):
    with pytest.raises(EventTensorCompileError, match="failed to parse"):
        parse("func.func @f() { %e = et.event.create() : !et.event<0> return }")


def test_run_pipeline_and_bad_pipeline(ctx):
    module = parse("func.func @f() -> index {\n %a = arith.constant 3 : index\n %b = arith.muli %a, %a : index\n return %b : index\n}")
    run_pipeline(module, "builtin.module(canonicalize)")
    assert "arith.constant 9" in str(module)
    with pytest.raises(EventTensorCompileError, match="invalid pass pipeline"):
        run_pipeline(module, "builtin.module(no-such-pass)")
