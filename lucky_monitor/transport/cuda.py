"""Observations in CUDA memory, shared by an IPC handle (``gpu_obs_mode = 1``, LAYOUT §3.4).

Theory of operation
-------------------
An engine started with ``--gpu-obs`` allocates ``f32[num_envs × obs_size]``
on device ``gpu_device_id``, exports it with ``cudaIpcGetMemHandle`` and
writes the 64-byte handle into the header's ``gpu_obs_handle`` (with
``gpu_available = 1``, ``gpu_obs_mode = 1``) before the header is published.
It writes observations there, synchronises the device, and only then stores
``frame_seq``: the lock-step rules of the CPU region (§6, §8.2) hold
unchanged for the device buffer.

A reader opens the handle once per attach (``cudaIpcOpenMemHandle``: about
150 ms from another process) and wraps the pointer as a cupy array. CUDA IPC
mappings cannot be made read-only; the monitor never writes through it (it
copies device → device into a buffer of its own and computes there). cupy is
an optional dependency (``lucky-monitor[gpu]``): it is imported here, lazily,
and every failure becomes :class:`~lucky_monitor.protocol.errors.GpuUnavailable`
with the reason, which the window shows.

Only this module (with the rest of ``transport``) touches the IPC handle.
"""

from __future__ import annotations

import time
from types import ModuleType
from typing import Any

from ..protocol.enums import GpuObsMode
from ..protocol.errors import GpuUnavailable
from ..protocol.header import Header

__all__ = ["CudaObs", "DeviceObs", "cupy_module", "export_handle"]

INSTALL_HINT = "install the gpu extra: pip install 'lucky-monitor[gpu]' (in a checkout: pip install '.[gpu]')"


def cupy_module() -> ModuleType:
    """Import cupy and check that a CUDA device is usable; :class:`GpuUnavailable` says why not."""
    try:
        import cupy
    except ImportError as exc:
        raise GpuUnavailable(f"GPU observations need cupy ({exc.msg}); {INSTALL_HINT}") from None
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # cupy raises its own CUDARuntimeError (no driver, no device)
        raise GpuUnavailable(f"no usable CUDA device: {exc}") from None
    if count < 1:
        raise GpuUnavailable("no CUDA device")
    return cupy


class DeviceObs:
    """The engine's side: an observation buffer on the GPU and its IPC handle.

    Parameters
    ----------
    num_envs, obs_size
        The buffer's shape (``float32``).
    device
        CUDA device id.
    """

    def __init__(self, num_envs: int, obs_size: int, device: int = 0) -> None:
        cp = cupy_module()
        self.cp = cp
        self.device = int(device)
        with cp.cuda.Device(self.device):
            self.array = cp.zeros((int(num_envs), int(obs_size)), cp.float32)
        self.handle = export_handle(self.array)

    def write(self, host_obs: Any) -> None:
        """Copy ``host_obs`` into the device buffer and wait for the copy (call before publishing ``frame_seq``)."""
        with self.cp.cuda.Device(self.device):
            self.array.set(host_obs)
            self.cp.cuda.runtime.deviceSynchronize()


def export_handle(array: Any) -> bytes:
    """The 64-byte ``cudaIpcMemHandle_t`` of a cupy array's allocation."""
    cp = cupy_module()
    if array.size == 0:
        raise GpuUnavailable("an empty observation buffer has no IPC handle (obs_size is 0)")
    raw = cp.cuda.runtime.ipcGetMemHandle(array.data.ptr)
    handle = bytes(raw)
    if len(handle) != 64:
        raise GpuUnavailable(f"cudaIpcMemHandle_t of {len(handle)} bytes, expected 64")
    return handle


class CudaObs:
    """A reader's view of the engine's device observations (``obs_cuda``).

    Raises :class:`GpuUnavailable` when the header exports none, cupy or a
    device is missing, or the handle does not open. ``open_s`` is how long
    opening took.
    """

    def __init__(self, header: Header) -> None:
        if header.gpu_obs_mode != GpuObsMode.CUDA_IPC or not header.gpu_available:
            raise GpuUnavailable("the engine exports no CUDA observations (gpu_obs_mode is not 1)")
        if header.obs_size == 0:
            raise GpuUnavailable("obs_size is 0: no observations to share")
        cp = cupy_module()
        self.cp = cp
        self.device = int(header.gpu_device_id)
        shape = (int(header.num_envs), int(header.obs_size))
        nbytes = 4 * shape[0] * shape[1]
        t0 = time.perf_counter()
        try:
            with cp.cuda.Device(self.device):
                ptr = cp.cuda.runtime.ipcOpenMemHandle(bytes(header.gpu_obs_handle))
        except Exception as exc:  # CUDARuntimeError: a stale handle, another device, no peer access
            raise GpuUnavailable(f"the CUDA IPC handle does not open on device {self.device}: {exc}") from None
        self.open_s = time.perf_counter() - t0
        self._ptr = int(ptr)
        mem = cp.cuda.UnownedMemory(self._ptr, nbytes, self, self.device)
        self.array = cp.ndarray(shape, cp.float32, cp.cuda.MemoryPointer(mem, 0))
        self._closed = False

    def copy_into(self, out: Any) -> None:
        """Device → device copy into ``out`` (a cupy array of the same shape), finished on return."""
        with self.cp.cuda.Device(self.device):
            self.cp.copyto(out, self.array)
            self.cp.cuda.runtime.deviceSynchronize()

    def empty(self) -> Any:
        """A device buffer of the observations' shape, owned by the caller."""
        with self.cp.cuda.Device(self.device):
            return self.cp.empty(self.array.shape, self.cp.float32)

    def close(self) -> None:
        """Close the IPC mapping. Idempotent; the array must not be used afterwards."""
        if self._closed:
            return
        self._closed = True
        try:
            with self.cp.cuda.Device(self.device):
                self.cp.cuda.runtime.deviceSynchronize()
                self.cp.cuda.runtime.ipcCloseMemHandle(self._ptr)
        except Exception:  # noqa: S110 - a device already gone: nothing left to release
            pass
