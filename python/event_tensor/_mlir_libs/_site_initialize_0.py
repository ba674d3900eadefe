"""Registers the et dialect (and the upstream dialects it lowers through) and
the project's passes in every Context created through `event_tensor.ir`."""

from ._etRegistration import register_dialects as _register_dialects
from ._etRegistration import register_passes as _register_passes

_register_passes()


def register_dialects(registry):
    _register_dialects(registry)
