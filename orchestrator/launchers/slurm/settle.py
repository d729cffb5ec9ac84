"""A Slurm end state mapped onto a cell's record: the record a cell keeps when its job ended without its own.

A job Slurm ended (time limit, memory, cancel, node failure) may not have written its record; this gives the
cell one from the job's state, exit code and log, so every cell ends with a record.
"""

from __future__ import annotations

import signal
from pathlib import Path

from ...job import current_step, now
from ...logparse import tail
from ...record import UNFINISHED, Record, Status
from ...spec import cell_dir
from .manifest import Entry
from .sacct import UNKNOWN_GRACE_S, JobState

TAIL_LINES = 40

_SIGNALS = {int(s): s.name for s in signal.Signals}


def _exit_text(exit_code: str) -> str:
    code, _, sig = exit_code.partition(":")
    if sig and sig != "0" and sig.isdigit():
        return f"exit code {exit_code}, {_SIGNALS.get(int(sig), 'signal ' + sig)}"
    if code.isdigit() and int(code) > 128 and int(code) - 128 in _SIGNALS:
        return f"exit code {exit_code}, {_SIGNALS[int(code) - 128]}"
    return f"exit code {exit_code}"


def _step_from_files(directory: Path) -> str:
    if (directory / "export.log").exists():
        return "export"
    return "make_random" if (directory / "make_random.log").exists() else "setup"


def settled(record: Record | None, entry: Entry, job: JobState) -> bool:
    """`settle` would give the record back unchanged, so a status of a finished sweep builds no copy of thousands
    of records to find nothing to write: a finished record of a job that COMPLETED or FAILED (or that sacct no
    longer knows) is the job's own, and a record settled once already names the job and its log."""
    if record is None or record.status in UNFINISHED:
        return False
    if job.state in ("COMPLETED", "FAILED", "UNKNOWN"):
        return True
    return record.job_id == entry.job_id and (record.logs or {}).get("job_stdout") == entry.stdout


def settle(record: Record, entry: Entry, job: JobState) -> Record:
    """The record a cell keeps once its Slurm job has ended in `job.state` (a copy; the caller writes it).

    COMPLETED: the job's own record (an unfinished one is an `error`); FAILED: the job's own record if it wrote
    one, else `failed`; TIMEOUT: `timeout`; OUT_OF_MEMORY: `oom`; CANCELLED: `cancelled`; NODE_FAIL, PREEMPTED,
    BOOT_FAIL, DEADLINE (a job Slurm did not requeue, or no more): `failed`.
    """
    new = Record.from_dict(record.to_dict())
    unfinished = new.status in UNFINISHED
    state, slurm = job.state, f"Slurm {job.state}{' ' + job.detail if job.detail else ''}"
    directory = cell_dir(entry.out_dir, record.cell)
    if state == "COMPLETED":
        if not unfinished:
            return new
        new.status, new.error = Status.ERROR, f"the job ended without finishing its record ({slurm})"
    elif state == "FAILED":
        if not unfinished:
            return new
        new.status = Status.FAILED
        new.error = f"the job process ended without a record ({slurm}, {_exit_text(job.step_exit or job.exit_code)})"
        new.failed_step = new.failed_step or _step_from_files(directory)
    elif state == "TIMEOUT":
        new.status = Status.TIMEOUT
        new.error = f"the job ran past its Slurm time limit of {job.timelimit or entry.time_min} ({slurm})"
        new.failed_step = new.failed_step or (current_step(new) if not unfinished else _step_from_files(directory))
    elif state == "OUT_OF_MEMORY":
        new.status = Status.OOM
        new.error = f"the job ran out of its {entry.signature.get('mem_gb')} GB of memory ({slurm})"
        new.failed_step = new.failed_step or (current_step(new) if not unfinished else _step_from_files(directory))
    elif state == "CANCELLED":
        if not unfinished and record.job_id and record.job_id != entry.job_id:
            return new  # finished by another job: the make_random preparation failed and cancelled this one
        started = record.status != "pending" and record.started_at
        new.status = Status.CANCELLED
        new.error = f"the job was cancelled{'' if started else ' before it started'} ({slurm})"
    elif state == "UNKNOWN":
        if not unfinished:
            return new
        new.status = Status.ERROR
        new.error = (f"Slurm's accounting has no job {entry.job_id}, {UNKNOWN_GRACE_S // 60} minutes after "
                     "its submission")
    else:  # NODE_FAIL, PREEMPTED, BOOT_FAIL, DEADLINE, ...: Slurm ended it and did not requeue it (again)
        new.status = Status.FAILED
        new.error = f"Slurm ended the job and did not run it again ({slurm}, {_exit_text(job.exit_code)})"
        new.failed_step = new.failed_step or (current_step(new) if not unfinished else _step_from_files(directory))
    new.job_id = entry.job_id
    new.ended_at = new.ended_at or now()
    new.logs = {**new.logs, "job_stdout": entry.stdout, "job_stderr": entry.stderr}
    if unfinished or not new.log_tail:
        texts = [Path(p).read_text(errors="replace") for p in (entry.stderr, entry.stdout) if Path(p).exists()]
        new.log_tail = tail("\n".join(texts), TAIL_LINES) or new.log_tail
    return new
