"""The EventTensor runtime: loads compiled artifacts and launches them on CUDA
(through cuda-bindings, the driver API) or on host threads. It imports no
MLIR, so it runs where only numpy, cuda-bindings and torch are installed.

    from event_tensor import runtime
    kernel = runtime.load("path/to/artifact").launcher(timeout_s=5)
    kernel(x, y, n)          # numpy arrays / torch tensors / DLPack / runtime.Buffer
"""

from .args import Buffer
from .artifact import Artifact, load
from .errors import ArgumentError, ArtifactError, DeviceError, KernelError, WatchdogError

__all__ = ["Artifact", "ArgumentError", "ArtifactError", "Buffer", "DeviceError", "KernelError",
           "WatchdogError", "load"]
