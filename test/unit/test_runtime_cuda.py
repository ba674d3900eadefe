"""Checks of the CUDA launcher that run without a GPU: it refuses to have a
kernel that signals events captured into a CUDA graph (a replay would reuse
the captured launch number, so its counter bank would never be cleared; the
launcher's driver is a stand-in that records the calls), and a kernel whose
workers must all be resident but do not fit on the GPU."""

import pytest

from event_tensor.runtime.cuda import CUDALauncher, residency_error, signals_events
from event_tensor.runtime.errors import DeviceError


class _Driver:
    def __init__(self, capturing: bool):
        self.capturing = capturing
        self.launches = 0

    def cuCtxSetCurrent(self, context):
        return (0,)

    def cuStreamIsCapturing(self, stream):
        return (0, 1 if self.capturing else 0)

    def cuLaunchKernel(self, *args):
        self.launches += 1
        return (0,)


def _launcher(events, capturing):
    launcher = CUDALauncher.__new__(CUDALauncher)  # no device: only the launch path is exercised
    launcher.driver = _Driver(capturing)
    launcher.context = None
    launcher.metadata = {"kernel": "k", "events": events}
    launcher.signals_events = signals_events({"events": events})
    launcher.profile = False
    launcher.epoch = 0
    launcher.function, launcher.workers, launcher.threads, launcher.dynamic_shared = None, 1, 32, 0
    return launcher


SIGNALLED = [{"name": "e", "shape": [4], "count_kind": "static", "count": "1"}]
UNUSED = [{"name": "e", "shape": [], "count_kind": "static", "count": "0"}]


def _packed():
    import ctypes
    holders = [ctypes.c_int64(0)]
    return holders, (ctypes.c_void_p * 1)(ctypes.addressof(holders[0]))


def test_capture_of_a_kernel_with_events_is_refused():
    launcher = _launcher(SIGNALLED, capturing=True)
    with pytest.raises(DeviceError, match="kernel k signals events and cannot be captured into a CUDA graph"):
        launcher._launch_packed(_packed(), stream=7)
    assert launcher.driver.launches == 0


@pytest.mark.parametrize("events,capturing,stream", [(SIGNALLED, False, 7), (UNUSED, True, 7), ([], True, 7),
                                                     (SIGNALLED, True, 0)])
def test_other_launches_go_ahead(events, capturing, stream):
    # Not capturing; no event signalled; or the legacy stream 0 (which
    # cannot be captured).
    launcher = _launcher(events, capturing)
    launcher._launch_packed(_packed(), stream=stream)
    assert launcher.driver.launches == 1
    assert launcher.epoch == 1


def _meta(workers, mode="static", devices=1):
    return {"kernel": "k", "workers": workers, "mode": mode, "devices": devices, "threads_per_worker": 512}


def test_residency_error_names_the_limit():
    message = residency_error(_meta(264), signalled=True, per_sm=1, sms=132)
    assert message == ("kernel k has 264 workers, but this GPU holds 132 of them at once (1 per SM x 132 SMs at 512 "
                       "threads per worker with the kernel's registers and shared memory); its tiles wait on other "
                       "workers' tiles, so every worker must be resident: compile it with workers <= 132, or "
                       "mode='dynamic'")


@pytest.mark.parametrize("meta,signalled,per_sm", [
    (_meta(264), True, 2),               # two per SM fit
    (_meta(264), False, 1),              # nothing waits: workers may run one after another
    (_meta(264, mode="dynamic"), True, 1),  # a queue hands tiles to running workers only
    (_meta(132, devices=2), False, 1),
])
def test_residency_allowed(meta, signalled, per_sm):
    assert residency_error(meta, signalled, per_sm, 132) is None


def test_residency_of_several_devices():
    # Every worker meets the other device's at the end of a launch.
    assert "264 workers" in residency_error(_meta(264, mode="dynamic", devices=2), False, 1, 132)
