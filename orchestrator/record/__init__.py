"""A cell's record: what one make_random + export attempt did, written atomically as record.json.

Every job writes one, also when a step crashes, is killed or times out, so the collector never has to guess.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any

from ..atomic import write_json_atomic
from ..cell_id import CellId
from ..jsonio import loads

RECORD_NAME = "record.json"
LOCK_NAME = ".record.lock"
ATTEMPTS_DIR = "attempts"
RESUME_DIR = "resume"  # an export's saved programs and eager reference: the next attempt starts from them

class Status(StrEnum):
    """How an attempt ended (or that it has not). Members are strings: JSON and comparisons see "passed"."""

    PASSED = "passed"  # the exporter succeeded and its check held
    FAILED = "failed"  # a step exited non-zero (a known or new failure)
    TIMEOUT = "timeout"  # killed by us at timeout_min, or by Slurm at the job's time limit
    KILLED = "killed"  # ended by a signal we did not send (kill -9, OOM killer, Slurm)
    ERROR = "error"  # the job body itself broke (bad interpreter path, missing file): nothing was measured
    OOM = "oom"  # out of GPU (or the job's) memory: the catalog's row-3 kind
    CANCELLED = "cancelled"  # told to stop (scancel, Ctrl-C of a local sweep), or its sweep ended before it ran
    # Written at submission and when the job starts; either one left behind after the job ended means the job
    # was lost, and the sweep (or `status`) finishes the record from what it knows.
    PENDING = "pending"
    RUNNING = "running"
    UNREADABLE = "unreadable"  # the record.json on disk could not be read: never a result


class Step(StrEnum):
    """Where an attempt stopped (`failed_step`), besides the exporter's own steps (trace, save, compile-model)."""

    ENV = "env"  # the torch build's environment could not be built
    SUBMIT = "submit"  # sbatch refused the job array
    SETUP = "setup"  # before make_random: the build's versions, its CUDA device
    MAKE_RANDOM = "make_random"
    EXPORT = "export"  # the exporter, where it named no step of its own
    CHECK = "check"  # the exported policy's test case against eager


STATUSES = tuple(Status)
UNFINISHED = frozenset({Status.PENDING, Status.RUNNING})
UNREADABLE = Status.UNREADABLE


@dataclass
class Record:
    cell: str
    policy: str
    gpu: str
    torch: str
    exporter: str
    status: Status = Status.RUNNING
    attempt: int = 1
    failed_step: str | None = None
    error: str | None = None
    max_diff: float | None = None
    tolerance: float | None = None
    margin: float | None = None
    # where `tolerance` came from: the embedded exporters say ("policy config", "exporter default"); for the fork's
    # CLI, "bundle export.json" (its written export.json) or "exporter log" (the check line), both where they differ
    tolerance_source: str | None = None
    make_random_s: float | None = None
    checkpoint_wait_s: float | None = None  # seconds waiting for (and finding) a checkpoint another job built
    export_s: float | None = None
    eager_ms: float | None = None
    exported_ms: float | None = None
    speedup: float | None = None
    peak_gpu_mib: float | None = None  # NVML: the export's process group, sampled by the job
    gpu_index: int | None = None  # the GPU the job was given (CUDA_VISIBLE_DEVICES), and its NVML UUID
    gpu_uuid: str | None = None
    peak_gpu_phases: dict[str, float] = field(default_factory=dict)  # the exporter's own: export, run (MiB)
    check: str | None = None  # which check ran: executorch | aoti | none (embedded CUDA exporter)
    check_reason: str | None = None  # why not executorch (aoti), why nothing could run (none)
    checked_files: dict[str, str] = field(default_factory=dict)  # the written files the check loaded: sha256
    timing: dict[str, Any] = field(default_factory=dict)  # what eager_ms and exported_ms each timed, runs, warm-up
    # where the program was slower than eager (or --kernels): each side's top kernels (exporters/kernel_profile.py)
    kernels: dict[str, Any] | None = None
    resumed: bool = False  # the export started from a saved program of an earlier attempt (no load/trace/save)
    steps_s: dict[str, float] = field(default_factory=dict)  # the exporter's steps ("compile-model": 41.2)
    check_runs: list[float] = field(default_factory=list)  # max_diff of each run of a check repeated near its limit
    repro: dict[str, Any] | None = None  # a standalone repro's result: row, reproduced, summary, measurements
    trace_site: str | None = None  # a trace failure: the user code line where tracing stopped (file:N in fn: code)
    fixes: list[str] = field(default_factory=list)
    versions: dict[str, Any] = field(default_factory=dict)
    checkpoint: str | None = None
    command: list[str] = field(default_factory=list)
    started_at: str | None = None
    ended_at: str | None = None
    logs: dict[str, str] = field(default_factory=dict)
    log_tail: str | None = None
    fingerprint: dict[str, Any] = field(default_factory=dict)
    loaded_files: str | None = None  # digest of loaded_files.txt beside the record: the files its steps loaded
    job_id: str | None = None
    requeues: int = 0  # times Slurm ran this attempt again after a preemption or node failure
    owner: dict[str, Any] = field(default_factory=dict)  # host, pid, start time of the sweep or job (owner.py)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def finish(self, status: Status, step: str | None = None, error: str | None = None) -> Record:
        """End the attempt: how, the step it stopped in (None where it passed), and its error line."""
        self.status, self.failed_step, self.error = status, step, error
        return self

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Record:
        record = cls(**{k: v for k, v in data.items() if k in _FIELDS})
        if record.status in STATUSES:  # a status no member names is kept as written, for `status` to show
            record.status = Status(record.status)
        return record


_FIELDS = frozenset(f.name for f in fields(Record))


def write_record(cell_dir: Path, record: Record, replaces_settled: bool = False) -> bool:
    """Write the record unless the cell has moved on to a later attempt, or its attempt has settled: an orphaned
    job of attempt n (its sweep killed, the cell run again) can never write over attempt n + 1, and a record that
    ended (no longer `pending` or `running`) is final for its attempt, so a job that outlived the sweep that
    settled it (`cancelled`, `killed`) cannot turn it into a verdict later. `replaces_settled`: the writer is
    the authority on how the attempt ended (Slurm's accounting, a requeued run of the same Slurm job) and may
    replace a settled record of the same attempt. False where the write was refused."""
    cell_dir.mkdir(parents=True, exist_ok=True)
    with cell_lock(cell_dir):
        current = read_record(cell_dir)
        if current is not None and current.status != UNREADABLE:
            if current.attempt > record.attempt:
                return False
            if current.attempt == record.attempt and current.status not in UNFINISHED and not replaces_settled:
                return False
        write_json_atomic(cell_dir / RECORD_NAME, record.to_dict())
    return True


@contextmanager
def cell_lock(cell_dir: Path) -> Iterator[None]:
    """Serializes record writes and attempt changes of one cell across processes (flock, freed on any exit)."""
    with open(cell_dir / LOCK_NAME, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def read_record(cell_dir: Path | str) -> Record | None:
    """The cell's record; None where it has none; an `unreadable` record naming the file where it cannot be read,
    so no caller crashes on a truncated file and none takes it for a result."""
    path = os.path.join(cell_dir, RECORD_NAME)
    try:
        with open(path, "rb") as handle:
            text = handle.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        return unreadable(path, exc)
    try:
        data = loads(text)
        if not isinstance(data, dict):
            raise ValueError(f"a JSON {type(data).__name__}, not an object")
        return Record.from_dict(data)
    except (ValueError, TypeError) as exc:
        return unreadable(path, exc)


def record_paths(out_dir: Path | str) -> list[str]:
    """The record.json of every cell directory under out_dir/cells, sorted by cell id. Three os.scandir levels
    (no glob, no Path per entry): status and collect walk thousands of cells."""
    found: list[str] = []
    for level1 in dirs(os.path.join(out_dir, "cells")):
        for level2 in dirs(level1):
            for level3 in dirs(level2):
                found.append(os.path.join(level3, RECORD_NAME))
    found.sort()
    return found


def dirs(path: str) -> list[str]:
    """The subdirectories of path (none where it is missing), hidden ones left out."""
    try:
        with os.scandir(path) as entries:
            return [e.path for e in entries if e.is_dir() and not e.name.startswith(".")]
    except (FileNotFoundError, NotADirectoryError):
        return []


def unreadable(path: Path | str, exc: Exception) -> Record:
    cell = CellId.of_dir(Path(path).parent)
    reason = " ".join(str(exc).split()) or type(exc).__name__
    return Record(cell=str(cell), policy=cell.policy, gpu=cell.gpu, torch=cell.torch, exporter="", status=UNREADABLE,
                  error=f"unreadable {path}: {reason}")


def start_attempt(cell_dir: Path) -> int:
    """Move the previous attempt (record, logs, bundle) to attempts/<n>/ and return the new attempt's number.

    resume/ stays: the exporter of the next attempt checks its key and starts after `save` where it matches."""
    cell_dir.mkdir(parents=True, exist_ok=True)
    leftovers = [p for p in cell_dir.iterdir() if p.name not in (ATTEMPTS_DIR, LOCK_NAME, RESUME_DIR)]
    if not leftovers:
        return 1
    earlier = read_record(cell_dir)
    if earlier is not None and earlier.status == Status.PENDING and not earlier.job_id and len(leftovers) == 1:
        return earlier.attempt  # a sweep that stopped before submitting it: that attempt never ran
    archive = cell_dir / ATTEMPTS_DIR
    number = earlier.attempt if earlier else len(list(archive.glob("*"))) + 1
    while (archive / str(number)).exists():
        number += 1
    target = archive / str(number)
    target.mkdir(parents=True)
    for path in leftovers:
        path.rename(target / path.name)
    return number + 1
