"""The `et` dialect: generated op classes plus Pythonic helpers."""

from ._et_ops_gen import *  # noqa: F401,F403
from ._et_ops_gen import _Dialect  # noqa: F401
from .._mlir_libs._etDialects.et import DYNAMIC, EventType  # noqa: F401
