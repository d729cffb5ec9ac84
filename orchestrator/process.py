"""Run one step's command as an argument list, its output in a log file, killed at its time limit.

The command runs in its own process group so that a timeout or a cancelled job takes its children along.
Peak GPU memory is sampled through NVML when a GPU is there (the orchestrator imports no torch).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from . import gpu

KILL_GRACE_S = 10.0


@dataclass
class Outcome:
    returncode: int
    timed_out: bool
    seconds: float
    peak_gpu_mib: float | None


class StepInterrupted(Exception):
    """The job itself was told to stop (SIGTERM from scancel, Slurm's time limit, Ctrl-C)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"the job received {signal.Signals(signum).name}")
        self.signum = signum


def run_logged(
    command: list[str], log_path: Path, env: dict[str, str], timeout_s: float, cwd: Path | None = None
) -> Outcome:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with open(log_path, "ab", buffering=0) as log:
        proc = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=cwd,
            start_new_session=True,
        )
        sampler = gpu.PeakSampler(proc.pid)
        sampler.start()
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            log.write(f"\n[export-matrix] time limit of {timeout_s:.0f} s reached: killing the step\n".encode())
            stop_group(proc)
        except BaseException:
            stop_group(proc)
            raise
        finally:
            sampler.stop()
    return Outcome(proc.returncode, timed_out, time.monotonic() - start, sampler.peak_mib)


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the step's process group, then SIGKILL whatever is left after a grace period."""
    for sig, wait_s in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait_s)
            break
        except subprocess.TimeoutExpired:
            continue


