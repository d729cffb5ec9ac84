"""A Slurm end state mapped onto a cell's record: the record a cell keeps when its job ended without its own.

A job Slurm ended (time limit, memory, cancel, node failure) may not have written its record; this gives the
cell one from the job's state, exit code and log, so every cell ends with a record.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import NamedTuple

from ...config.spec import cell_dir
from ...job import current_step, now
from ...job.logparse import tail
from ...record import UNFINISHED, Record, Status
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
    return settled_once(record, entry)


def settled_once(record: Record, entry: Entry) -> bool:
    """settle wrote this record for this job: it names the job and its log."""
    return record.job_id == entry.job_id and (record.logs or {}).get("job_stdout") == entry.stdout


class Ending(NamedTuple):
    """What a cell's record becomes when its job ended in one Slurm state without writing its own."""

    status: Status
    error: str  # a template: {slurm}, {exit}, {step_exit}, {limit}, {mem}, {job}, {grace}, {before}
    keeps: str  # "own": a finished record is the job's own, kept; "other": kept if another job wrote it; "none"
    names_step: bool  # the record says in which step the job was when Slurm ended it


ENDINGS = {
    "COMPLETED": Ending(Status.ERROR, "the job ended without finishing its record ({slurm})", "own", False),
    "FAILED": Ending(Status.FAILED, "the job process ended without a record ({slurm}, {step_exit})", "own", True),
    "TIMEOUT": Ending(Status.TIMEOUT, "the job ran past its Slurm time limit of {limit} ({slurm})", "none", True),
    "OUT_OF_MEMORY": Ending(Status.OOM, "the job ran out of its {mem} GB of memory ({slurm})", "none", True),
    # finished by another job: the make_random preparation failed and cancelled this one
    "CANCELLED": Ending(Status.CANCELLED, "the job was cancelled{before} ({slurm})", "other", False),
    "UNKNOWN": Ending(Status.ERROR, "Slurm's accounting has no job {job}, {grace} minutes after its submission",
                      "own", False),
}
# NODE_FAIL, PREEMPTED, BOOT_FAIL, DEADLINE, ...: Slurm ended the job and did not requeue it (again)
OTHER_ENDING = Ending(Status.FAILED, "Slurm ended the job and did not run it again ({slurm}, {exit})", "none", True)


def settle(record: Record, entry: Entry, job: JobState) -> Record:
    """The record a cell keeps once its Slurm job has ended in `job.state` (a copy; the caller writes it): the
    row of ENDINGS for that state."""
    new = Record.from_dict(record.to_dict())
    unfinished = new.status in UNFINISHED
    ending = ENDINGS.get(job.state, OTHER_ENDING)
    if not unfinished and (ending.keeps == "own"
                           or ending.keeps == "other" and record.job_id and record.job_id != entry.job_id):
        return new
    directory = cell_dir(entry.out_dir, record.cell)
    new.status = ending.status
    new.error = ending.error.format(
        slurm=f"Slurm {job.state}{' ' + job.detail if job.detail else ''}", exit=_exit_text(job.exit_code),
        step_exit=_exit_text(job.step_exit or job.exit_code), limit=job.timelimit or entry.time_min,
        mem=entry.signature.get("mem_gb"), job=entry.job_id, grace=UNKNOWN_GRACE_S // 60,
        before="" if record.status != Status.PENDING and record.started_at else " before it started")
    if ending.names_step:
        new.failed_step = new.failed_step or (current_step(new) if not unfinished else _step_from_files(directory))
    new.job_id = entry.job_id
    new.ended_at = new.ended_at or now()
    new.logs = {**new.logs, "job_stdout": entry.stdout, "job_stderr": entry.stderr}
    if unfinished or not new.log_tail:
        texts = [Path(p).read_text(errors="replace") for p in (entry.stderr, entry.stdout) if Path(p).exists()]
        new.log_tail = tail("\n".join(texts), TAIL_LINES) or new.log_tail
    return new
