"""GPU smoke test: the CUDA driver is usable (skipped with a reason without a GPU)."""

import ctypes

import pytest


@pytest.mark.cuda
def test_cuda_driver_sees_a_device():
    cuda = ctypes.CDLL("libcuda.so.1")
    assert cuda.cuInit(0) == 0
    count = ctypes.c_int(0)
    assert cuda.cuDeviceGetCount(ctypes.byref(count)) == 0
    assert count.value >= 1
