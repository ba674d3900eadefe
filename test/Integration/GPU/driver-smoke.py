# RUN: %PYTHON %s | FileCheck %s
# The CUDA driver initializes and lists at least one device.

import ctypes

cuda = ctypes.CDLL("libcuda.so.1")
count = ctypes.c_int(0)
ok = cuda.cuInit(0) == 0 and cuda.cuDeviceGetCount(ctypes.byref(count)) == 0 and count.value > 0
# CHECK: PASS
print("PASS" if ok else f"FAIL: {count.value} devices")
