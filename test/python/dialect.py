# RUN: %PYTHON %s | FileCheck %s

from event_tensor.dialects import et
from event_tensor.ir import IndexType, InsertionPoint, Module
from event_tensor.testing import run


# CHECK-LABEL: TEST: testEventType
@run
def testEventType():
    # CHECK: !et.event<4x?>
    print(et.EventType.get([4, et.DYNAMIC]))
    # CHECK: !et.event<>
    print(et.EventType.get([]))


# CHECK-LABEL: TEST: testKernelBuilder
@run
def testKernelBuilder():
    module = Module.create()
    with InsertionPoint(module.body):
        with et.kernel("attn", [IndexType.get()]) as (splits,):
            partials = et.event([8])
            with et.task("split", [8, splits]) as (h, s):
                et.signal(partials, [h])
            with et.task("merge", [8]) as (h,):
                et.wait(partials, [h])
    module.operation.verify()
    # CHECK: et.kernel @attn(%[[S:.*]]: index)
    # CHECK: %[[P:.*]] = et.event.create() : !et.event<8>
    # CHECK: et.task @split tiles(%[[H:.*]], %{{.*}}) in (%{{.*}}, %[[S]])
    # CHECK-NEXT: et.event.signal %[[P]][%[[H]]] : !et.event<8>
    # CHECK: et.task @merge tiles(%[[H2:.*]]) in
    # CHECK-NEXT: et.event.wait %[[P]][%[[H2]]] : !et.event<8>
    print(module)
