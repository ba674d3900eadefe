# RUN: %PYTHON %s | FileCheck %s

from event_tensor.dialects import et, func
from event_tensor.ir import FunctionType, IndexType, InsertionPoint, Module
from event_tensor.testing import run


# CHECK-LABEL: TEST: testEventType
@run
def testEventType():
    # CHECK: !et.event<4x?>
    print(et.EventType.get([4, et.DYNAMIC]))
    # CHECK: !et.event<>
    print(et.EventType.get([]))


# CHECK-LABEL: TEST: testEventCreateBuilder
@run
def testEventCreateBuilder():
    module = Module.create()
    with InsertionPoint(module.body):
        f = func.FuncOp("events", FunctionType.get([IndexType.get()], []))
        with InsertionPoint(f.add_entry_block()):
            et.EventCreateOp(et.EventType.get([et.DYNAMIC, 4]), [f.arguments[0]])
            et.event_create(et.EventType.get([16]), [])
            func.ReturnOp([])
    module.operation.verify()
    # CHECK: func.func @events(%[[N:.*]]: index)
    # CHECK: et.event.create(%[[N]]) : !et.event<?x4>
    # CHECK: et.event.create() : !et.event<16>
    print(module)
