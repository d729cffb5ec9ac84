"""Which process owns a cell's unfinished record, and whether it still lives.

A `pending` record is owned by the sweep that queued the cell, a `running` one by the job that runs it. Each
names its owner as host, pid and the process's start time (so a reused pid is not taken for the owner). A record
whose owner on this host is gone was abandoned (kill -9 of the sweep or the job, a crash); `settle` gives it its
end, so `status`, `collect` and `rerun --failed` see it. Owners on other hosts are taken to be alive (Slurm's
jobs are settled through sacct instead).
"""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path
from typing import Any

from . import UNFINISHED, Record, Status, read_record, write_record


def _start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22, after the command name (which may hold spaces)


def me() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid(), "started": _start_time(os.getpid()),
            "slurm_job": os.environ.get("SLURM_JOB_ID")}


def alive(owner: dict[str, Any] | None) -> bool:
    """False only where the owner was on this host and that process is gone (or its pid now names another).
    A Slurm job's record is Slurm's to settle (sacct knows how it ended), so such an owner counts as alive."""
    if not owner or owner.get("slurm_job") or owner.get("host") != socket.gethostname() or not owner.get("pid"):
        return True
    started = _start_time(int(owner["pid"]))
    return started is not None and started == owner.get("started")


def settle(cell_dir: Path, record: Record) -> Record:
    """End an abandoned record: `killed` for a job that died running it, `cancelled` for a queued cell whose sweep
    died before it ran. Anything else comes back as it is."""
    if record.status not in UNFINISHED or alive(record.owner):
        return record
    pid = record.owner.get("pid")
    if record.status == Status.RUNNING:
        record.status = Status.KILLED
        record.error = f"the job (pid {pid}) ended without finishing its record (killed or crashed)"
    else:
        record.status = Status.CANCELLED
        record.error = f"the sweep that queued this cell (pid {pid}) ended before the cell ran"
    write_record(cell_dir, record)
    return record


def current_record(cell_dir: Path | str) -> Record | None:
    """The cell's record as status and wait show it: None where it has none, settled where its owner died."""
    record = read_record(cell_dir)
    if record is not None and record.status in UNFINISHED:
        record = settle(Path(cell_dir), record)
    return record


def stop_orphan(record: Record) -> None:
    """SIGTERM a job still running an attempt whose sweep is gone, before the cell runs again: the job ends its
    step and its record write is refused, as the cell's attempt has moved on."""
    owner = record.owner or {}
    if record.status == Status.RUNNING and owner.get("host") == socket.gethostname() and alive(owner):
        try:
            os.kill(int(owner["pid"]), signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
