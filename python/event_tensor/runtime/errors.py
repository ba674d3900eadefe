"""Exceptions raised by the runtime."""

from __future__ import annotations

__all__ = ["ArgumentError", "ArtifactError", "DeviceError", "KernelError", "WatchdogError"]


class ArtifactError(RuntimeError):
    """An artifact is missing, malformed, or built by another toolchain."""


class ArgumentError(TypeError):
    """A kernel argument is missing or has the wrong type, dtype, shape or device."""


class DeviceError(RuntimeError):
    """The device (CUDA driver) reported an error."""


class KernelError(RuntimeError):
    """A launch ended with an error record written by the kernel."""

    def __init__(self, message: str, record: dict):
        super().__init__(message)
        self.record = record


class WatchdogError(KernelError):
    """A wait of the kernel timed out: a worker spun past its limit on an event
    element that never became ready. `record` names the worker, task, tile,
    event, element, expected and observed count."""
