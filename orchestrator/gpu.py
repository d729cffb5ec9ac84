"""What NVML says about the GPU a job runs on, without torch: name, capability, driver and peak memory."""

from __future__ import annotations

import os
import threading
from typing import Any

try:  # nvidia-ml-py; absent or without a driver on CPU machines
    import pynvml
except ImportError:  # pragma: no cover - it is a dependency, but a site may strip it
    pynvml = None


def _init() -> bool:
    if pynvml is None:
        return False
    try:
        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetCount() > 0
    except pynvml.NVMLError:
        return False


def describe() -> dict[str, Any]:
    """The first visible GPU's name, compute capability and driver, or {} where there is none."""
    if not _init():
        return {}
    handle = pynvml.nvmlDeviceGetHandleByIndex(_first_index())
    major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
    return {
        "gpu_name": pynvml.nvmlDeviceGetName(handle),
        "gpu_capability": f"sm_{major}{minor}",
        "gpu_driver": pynvml.nvmlSystemGetDriverVersion(),
    }


def _first_index() -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return int(visible) if visible.isdigit() else 0


class PeakSampler:
    """Samples the GPU memory used by one process group every half second; peak_mib stays None on CPUs."""

    def __init__(self, pgid: int, interval_s: float = 0.5) -> None:
        self.pgid = pgid
        self.interval_s = interval_s
        self.peak_mib: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        if _init():
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        handle = pynvml.nvmlDeviceGetHandleByIndex(_first_index())
        baseline = pynvml.nvmlDeviceGetMemoryInfo(handle).used
        while not self._stop.wait(self.interval_s):
            used = self._group_bytes(handle)
            if used is None:  # the container hides PIDs: fall back to the device's growth since the start
                used = max(pynvml.nvmlDeviceGetMemoryInfo(handle).used - baseline, 0)
            mib = used / 2**20
            self.peak_mib = mib if self.peak_mib is None else max(self.peak_mib, mib)

    def _group_bytes(self, handle: Any) -> int | None:
        try:
            procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        except pynvml.NVMLError:
            return None
        total, seen = 0, False
        for proc in procs:
            try:
                if os.getpgid(proc.pid) == self.pgid:
                    total += proc.usedGpuMemory or 0
                    seen = True
            except (ProcessLookupError, PermissionError):
                continue
        return total if seen else None
