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
    pid: int | None = None  # the step's process (whose loaded-files list makes the step's list whole)


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
    return Outcome(proc.returncode, timed_out, time.monotonic() - start, sampler.peak_mib, proc.pid)


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



@dataclass(frozen=True)
class Proc:
    pid: int
    pgid: int
    started: str  # /proc's start time: a pid reused by another process is not taken for this one


def _stat(pid: int) -> tuple[int, Proc] | None:
    """(parent pid, the process) from /proc/PID/stat; None where it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    except (OSError, IndexError):
        return None
    if fields[0] in ("Z", "X"):  # a zombie has ended: nothing to stop
        return None
    return int(fields[1]), Proc(pid, int(fields[2]), fields[19])


def process_tree(pid: int) -> list[Proc]:
    """The process and every descendant it has now (one read of /proc): a job's controller, the job, its steps."""
    parents: dict[int, list[Proc]] = {}
    root = None
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        found = _stat(int(name))
        if found is None:
            continue
        parents.setdefault(found[0], []).append(found[1])
        if found[1].pid == pid:
            root = found[1]
    if root is None:
        return []
    tree, todo = [root], [root.pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            tree.append(child)
            todo.append(child.pid)
    return tree


def kill_tree(procs: list[Proc]) -> None:
    """SIGKILL what is left of these processes (still the same processes) and the process groups they lead (a
    step started in its own session, with whatever it started since). Groups led from outside the tree (the
    sweep's own, which its job controllers share) are never signalled as a whole."""
    groups = {p.pid for p in procs if p.pid == p.pgid}
    for proc in procs:
        found = _stat(proc.pid)
        if found is None or found[1].started != proc.started:
            continue
        try:
            if proc.pgid in groups:
                os.killpg(proc.pgid, signal.SIGKILL)
            else:
                os.kill(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
