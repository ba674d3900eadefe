"""pytest configuration: the `cuda` marker skips, with its reason, where no GPU is."""

import pytest

from event_tensor.testing import cuda_skip_reason


def pytest_configure(config):
    config.addinivalue_line("markers", "cuda: needs a CUDA GPU (skipped with a reason elsewhere)")


def pytest_collection_modifyitems(config, items):
    reason = cuda_skip_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU: {reason}")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
