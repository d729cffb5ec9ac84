"""Peak GPU memory of this process per phase (export, run), sampled through NVML as nvidia-smi sees it.

NVML counts what the driver gave the process (CUDA context, caching allocator, autotuning buffers), which is
what decides whether an export fits a GPU; torch's own counters miss the context and other allocators. Where
NVML cannot attribute memory to processes (some containers), the device's growth since the start is used.
"""

from __future__ import annotations

import os
import threading


class PhasePeaks:
    def __init__(self, interval_s: float = 0.2) -> None:
        import pynvml

        self.nvml = pynvml
        pynvml.nvmlInit()
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(int(visible) if visible.isdigit() else 0)
        self.baseline = pynvml.nvmlDeviceGetMemoryInfo(self.handle).used
        self.interval_s = interval_s
        self.phase = "export"
        self.peaks: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _used_bytes(self) -> int:
        try:
            procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle)
            mine = [p.usedGpuMemory or 0 for p in procs if p.pid == os.getpid()]
            if mine:
                return sum(mine)
        except self.nvml.NVMLError:
            pass
        return max(self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used - self.baseline, 0)

    def sample(self) -> None:
        mib = self._used_bytes() / 2**20
        self.peaks[self.phase] = max(self.peaks.get(self.phase, 0.0), mib)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def enter(self, phase: str) -> None:
        self.sample()
        self.phase = phase

    def stop(self) -> dict[str, float]:
        self.sample()
        self._stop.set()
        self._thread.join(timeout=2)
        return {k: round(v, 1) for k, v in self.peaks.items()}
