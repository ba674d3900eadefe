# RUN: %PYTHON %s | FileCheck %s

from event_tensor.dialects import arith, et
from event_tensor.ir import IndexType, InsertionPoint, MLIRError, Module
from event_tensor.testing import run


# CHECK-LABEL: TEST: testVerifierDiagnostic
@run
def testVerifierDiagnostic():
    module = Module.create()
    with InsertionPoint(module.body):
        with et.kernel("k", []):
            n = arith.ConstantOp(IndexType.get(), 1).result
            et.EventCreateOp(et.EventType.get([et.DYNAMIC, et.DYNAMIC]), [n])
    try:
        module.operation.verify()
    except MLIRError as err:
        # CHECK: 'et.event.create' op expected 2 dynamic size operands for '!et.event<?x?>', got 1
        print(err.error_diagnostics[0].message)
