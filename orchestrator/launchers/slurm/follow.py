"""Following a submitted sweep: each cell's state from its record and its Slurm job, polled until all ended.

`poll` settles the records of jobs that ended without one, so the state shown is the same from any process.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console

from ...cell_id import CellId
from ...config.spec import cell_dir
from ...console import counts_text
from ...console import progress as console_progress
from ...record import UNFINISHED, Record, Status, write_record
from ...record.owner import current_record
from .manifest import Entry, read_entries, read_manifest
from .sacct import UNKNOWN_GRACE_S, JobState, lookup, sacct
from .settle import settle, settled, settled_once

# States Slurm reaches by signalling the job (SIGTERM, then SIGKILL after KillWait): the job body may still be
# writing its final record for a while after sacct shows the state, so a `running` record is left this long.
SIGNALLED = frozenset({"TIMEOUT", "CANCELLED", "PREEMPTED", "DEADLINE"})
ENDING_GRACE_S = 90


@dataclass
class CellState:
    cell: str
    record: Record | None
    entry: Entry | None
    job: JobState | None

    @property
    def active(self) -> bool:
        """Its Slurm job has not ended (or sacct does not know it yet, shortly after submission), or Slurm has
        signalled it and its job body may still be writing its record."""
        if self.entry is None or not self._current:
            return False
        if self.job is None:
            return _age_s(self.entry.submitted_at) < UNKNOWN_GRACE_S
        return self.job.active or self.ending

    @property
    def ending(self) -> bool:
        return (self.job is not None and self.job.state in SIGNALLED and self.record is not None
                and self.record.status == Status.RUNNING and _end_age_s(self.job.end) < ENDING_GRACE_S)

    @property
    def _current(self) -> bool:
        """The manifest's job is the one of the cell's record (not superseded by a later local attempt)."""
        if self.record is None or self.entry is None:
            return True
        return int(self.record.attempt or 0) <= int(self.entry.attempt or 0)

    @property
    def shown(self) -> str:
        """The status to show: the Slurm job's while it runs, else the record's."""
        if self.active:
            state = self.job.state if self.job else "SUBMITTED"
            if self.ending:
                return "ending"
            return state.lower() if state in ("PENDING", "RUNNING", "REQUEUED", "SUSPENDED") else "running"
        return str(self.record.status) if self.record else "missing"

    @property
    def finished(self) -> bool:
        return not self.active and self.record is not None and self.record.status not in UNFINISHED


def _end_age_s(end: str) -> float:
    """Seconds since sacct's End (local time, or "Unknown")."""
    try:
        return (datetime.now() - datetime.fromisoformat(end)).total_seconds()
    except ValueError:
        return float("inf")


def _age_s(stamp: str | None) -> float:
    if not stamp:
        return float("inf")
    return (datetime.now(UTC) - datetime.fromisoformat(stamp)).total_seconds()


def poll(out_dir: Path, cells: list[str] | None = None,
         records: dict[str, Record] | None = None) -> list[CellState]:
    """Ask Slurm about every job of the manifest (one sacct call, without steps), settle the ended ones, return
    each cell. Jobs whose steps can change their record (`_steps_matter`) are asked again with their steps, in
    a second call made only when there are such jobs: the step's exit code, an OOM-killed step.

    `records`: the cells' records where the caller has read them already (status reads every record once), else
    each cell's is read here."""
    entries = {c: e for c, e in read_entries(out_dir).items() if cells is None or c in cells}
    states = sacct([e.job_id for e in entries.values()], steps=False)
    found = []
    for cell_id, entry in entries.items():
        job = lookup(states, entry.job_id)
        if job is None and _age_s(entry.submitted_at) >= UNKNOWN_GRACE_S:
            job = JobState(entry.job_id, "UNKNOWN")
        record = records.get(cell_id) if records is not None else current_record(cell_dir(out_dir, cell_id))
        state = CellState(cell_id, record, entry, job)
        if records is not None and _to_settle(state):  # read before sacct answered: the job may have written since
            state.record = current_record(cell_dir(out_dir, cell_id))
        found.append(state)
    with_steps = [s for s in found if _steps_matter(s)]
    if with_steps:
        detailed = sacct([s.entry.job_id for s in with_steps if s.entry])
        for state in with_steps:
            state.job = lookup(detailed, state.entry.job_id) or state.job if state.entry else state.job
    for state in found:
        if _to_settle(state):
            entry = state.entry
            after = settle(state.record or _blank(state.cell, entry), entry, state.job)
            if after != state.record:
                write_record(cell_dir(entry.out_dir, state.cell), after, replaces_settled=True)  # sacct knows
                state.record = after
    return found


def _steps_matter(state: CellState) -> bool:
    """The job ended FAILED or COMPLETED, and its steps may change its record: it left no final record, or its
    process died (FAILED: an OOM-killed step looks so without its steps) and its record was not settled from
    Slurm yet. A job body that recorded its export's failure exits normally: COMPLETED."""
    job, entry, record = state.job, state.entry, state.record
    if job is None or entry is None or job.state not in ("FAILED", "COMPLETED") or state.ending:
        return False
    if record is None or record.status in UNFINISHED:
        return True
    return job.state == "FAILED" and record.status != Status.PASSED and not settled_once(record, entry)


def _to_settle(state: CellState) -> bool:
    """Its job has ended and its record is not yet the one settle gives."""
    job = state.job
    return (job is not None and state.entry is not None and not job.active and not state.ending and state._current
            and not settled(state.record, state.entry, job))


def _blank(cell_id: str, entry: Entry) -> Record:
    policy, gpu, torch = CellId.parse(cell_id)
    return Record(cell=cell_id, policy=policy, gpu=gpu, torch=torch, exporter=entry.exporter,
                  status=Status.PENDING, attempt=int(entry.attempt or 1))


def counts(cells: list[CellState]) -> Counter[str]:
    return Counter(c.shown for c in cells)


def wait_for(out_dir: Path, poll_s: float | None, console: Console, only: list[str] | None = None) -> list[CellState]:
    """Poll until every cell of the manifest (or `only` these) has ended and has its final record."""
    manifest = read_manifest(out_dir)
    if poll_s is None:
        sweeps = list(manifest["sweeps"].values())
        poll_s = float(sweeps[-1].get("poll_s") or 15) if sweeps else 15.0
    cells = poll(out_dir, only)
    with console_progress(console) as progress:
        task = progress.add_task("wait", total=len(cells), counts="")
        while True:
            shown = counts(cells)
            progress.update(task, completed=sum(c.finished for c in cells), counts=counts_text(shown))
            if all(c.finished for c in cells):
                return cells
            time.sleep(poll_s)
            cells = poll(out_dir, only)
