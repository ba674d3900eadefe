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


# CHECK-LABEL: TEST: testScheduleBuiltFromGeneratedOps
@run
def testScheduleBuiltFromGeneratedOps():
    from event_tensor.ir import Attribute, Block, DenseI64ArrayAttr, FlatSymbolRefAttr

    module = Module.create()
    with InsertionPoint(module.body):
        with et.kernel("k", [IndexType.get()]) as (n,):
            with et.task("a", [2]):
                pass
            task = et.TaskOp("b", [n])
            task.attributes["max_extents"] = DenseI64ArrayAttr.get([64])
            task.attributes["et.cost"] = Attribute.parse("#et.cost<bytes = 64, flops = 0>")
            schedule = et.ScheduleOp(et.ScheduleKind.Static, 2)
            Block.create_at_start(schedule.body)
            with InsertionPoint(schedule.body.blocks[0]):
                for w in range(2):
                    worker = et.WorkerOp(w)
                    Block.create_at_start(worker.body)
                    with InsertionPoint(worker.body.blocks[0]):
                        et.RunOp(FlatSymbolRefAttr.get("a"), tiles=DenseI64ArrayAttr.get([w]))
                        et.RunOp(FlatSymbolRefAttr.get("b"), cyclic=0)
    module.operation.verify()
    # CHECK: et.task @b {{.*}} attributes {et.cost = #et.cost<bytes = 64, flops = 0>, max_extents = array<i64: 64>}
    # CHECK: et.schedule static workers(2) {
    # CHECK-NEXT: et.worker 0 {
    # CHECK-NEXT: et.run @a tiles [0]
    # CHECK-NEXT: et.run @b cyclic 0
    # CHECK: et.worker 1 {
    # CHECK-NEXT: et.run @a tiles [1]
    print(module)
