"""What NVML says about the GPU a job runs on, without torch: name, capability, driver, UUID and peak memory,
and whether it is the GPU its column wants."""

from __future__ import annotations

import fnmatch
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
        "gpu_name": _text(pynvml.nvmlDeviceGetName(handle)),
        "gpu_capability": f"sm_{major}{minor}",
        "gpu_driver": _text(pynvml.nvmlSystemGetDriverVersion()),
    }


def count() -> int:
    """The GPUs NVML sees on this machine; 0 without NVML or a driver."""
    if not _init():
        return 0
    return int(pynvml.nvmlDeviceGetCount())


def held() -> dict[str, Any]:
    """The GPU this job was given (the first of CUDA_VISIBLE_DEVICES, what describe() and the peaks read): its
    index, and its UUID, name and capability where NVML reads them; {} where the job was given none."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if not first:
        return {}
    found: dict[str, Any] = {"index": int(first)} if first.isdigit() else {"uuid": first}
    if not first.isdigit() or not _init():
        return found
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(int(first))
        major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
        found.update(uuid=_text(pynvml.nvmlDeviceGetUUID(handle)), name=_text(pynvml.nvmlDeviceGetName(handle)),
                     capability=f"sm_{major}{minor}")
    except pynvml.NVMLError:  # an index NVML does not have: nothing read, nothing checked
        pass
    return found


def wrong_gpu(column: str, needs: dict[str, Any], found: dict[str, Any]) -> str | None:
    """Why the GPU found is not the one a column wants (`capability: sm_80`, `name: "*A100*"`, a glob on NVML's
    name), as one line; None where it is, or where nothing was read (no NVML: nothing to compare)."""
    if not needs or "name" not in found:
        return None
    wants = needs.get("capability")
    if not wants or found.get("capability") == wants:
        pattern = needs.get("name")
        if not pattern or fnmatch.fnmatchcase(found["name"], pattern):
            return None
        wants = f"a GPU named {pattern}"
    return f"wrong GPU ({found['name']}, {found.get('capability')}; the {column} column wants {wants})"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


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
