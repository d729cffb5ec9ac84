"""The Slurm launcher: submitit job arrays per resource signature, a durable manifest, and Slurm's states as records.

`submit_sweep` groups the cells by what they ask of Slurm (partition, gres, constraint, cpus, memory, time) and
submits each group as one job array through submitit, then writes `DIR/manifest.json` (cell -> job id) and
returns. `poll` asks Slurm about every job of the manifest in one `sacct` call and settles the records of jobs
that ended without finishing their own (killed, timed out, out of memory, cancelled, lost), so `status` and
`wait` can follow a sweep from any process, long after the one that submitted it has gone.
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import submitit
from rich.console import Console
from submitit.core.utils import DelayedSubmission, UncompletedJobError

from .job import Preempted, current_step, now, run_cell
from .launch import job_timeout_min, prepare
from .logparse import tail
from .record import UNFINISHED, Record, read_record, write_json_atomic, write_record
from .spec import CellSpec, cell_dir

MANIFEST = "manifest.json"
SUBMITIT_DIR = "submitit"
# Slurm job states of a job that has not ended (a requeued job comes back as PENDING).
ACTIVE = frozenset({"PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SUSPENDED", "CONFIGURING",
                    "COMPLETING", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD"})
# A job sacct does not know yet (slurmdbd lags a few seconds behind sbatch) counts as active this long.
UNKNOWN_GRACE_S = 300
# Slurm may send the --signal up to 60 s before the time it was asked for.
SIGNAL_SLACK_S = 90
# States Slurm reaches by signalling the job (SIGTERM, then SIGKILL after KillWait): the job body may still be
# writing its final record for a while after sacct shows the state, so a `running` record is left this long.
SIGNALLED = frozenset({"TIMEOUT", "CANCELLED", "PREEMPTED", "DEADLINE"})
ENDING_GRACE_S = 90
TAIL_LINES = 40


@dataclass(frozen=True)
class SlurmSettings:
    """`launcher=slurm`'s settings (conf/launcher/slurm.yaml)."""

    array_parallelism: int = 64
    signal_delay_s: int = 30
    max_requeues: int = 1
    poll_s: float = 15.0
    time_min: int | None = None
    sbatch: dict[str, Any] = field(default_factory=dict)
    setup: list[str] = field(default_factory=list)
    python: str | None = None

    @classmethod
    def from_config(cls, launcher: Any) -> SlurmSettings:
        from .config import to_plain

        plain = to_plain(launcher)
        known = {k: plain[k] for k in cls.__dataclass_fields__ if plain.get(k) is not None}
        return cls(**{**known, "sbatch": dict(known.get("sbatch") or {}), "setup": list(known.get("setup") or [])})


def resources(spec: CellSpec, settings: SlurmSettings) -> dict[str, Any]:
    """What the cell's job asks of Slurm: its gpu's and policy's `slurm:` settings, and a time limit.

    The time limit is the policy's or gpu's `slurm.time_min`, else the launcher's `time_min`, else room for
    make_random and the export at their own limits (the job kills them there itself, and leaves its record).
    """
    slurm = spec.slurm
    time_min = slurm.get("time_min") or settings.time_min or job_timeout_min(spec)
    return {"partition": slurm.get("partition"), "gres": slurm.get("gres"), "constraint": slurm.get("constraint"),
            "cpus_per_task": int(slurm.get("cpus_per_task") or 1), "mem_gb": slurm.get("mem_gb"),
            "time_min": int(time_min)}


def signature_key(res: dict[str, Any]) -> tuple:
    return tuple(res[k] for k in ("partition", "gres", "constraint", "cpus_per_task", "mem_gb", "time_min"))


# ------------------------------------------------------------------------------------------------ the job ---


class CellJob(submitit.helpers.Checkpointable):
    """A cell's Slurm job: `run_cell`, requeued once through submitit's checkpointing if Slurm preempts it.

    submitit's Slurm jobs get `--signal=USR2@signal_delay_s`. submitit's own USR2 handler calls `checkpoint()`
    and requeues the job with the pickle it returns, after guessing "timed out" from the wall time (any USR2 in
    the last 20 % of the limit, or in the last 10 minutes) and counting such timeouts against max_num_timeout;
    left alone, it would requeue a timed-out checkpointable job max_num_timeout times. So this job puts its own
    handler in front while the cell runs: USR2 within signal_delay_s (+ Slurm's up to 60 s of slack) of the time
    limit is let pass, and Slurm's SIGTERM at the limit ends the job: sacct says TIMEOUT, the record `timeout`.
    An earlier USR2 is a preemption: the first `max_requeues` go to submitit's handler (checkpoint() below,
    `scontrol requeue`, exit) and the job runs again from the start with `requeues` + 1; the next fails the cell.
    `checkpoint()` itself declines near the limit and once the requeues are spent, and the executor's
    max_num_timeout=1 only keeps submitit's timeout guess from vetoing a preemption late in a job. A job that
    Slurm requeued by itself (node failure, PreemptMode=REQUEUE) counts too, through SLURM_RESTART_COUNT.
    """

    def __init__(self, spec: CellSpec, attempt: int, time_limit_s: float, signal_delay_s: float,
                 max_requeues: int, requeues: int = 0) -> None:
        self.spec, self.attempt = spec, attempt
        self.time_limit_s, self.signal_delay_s = time_limit_s, signal_delay_s
        self.max_requeues, self.requeues = max_requeues, requeues
        self._started: float | None = None
        self._delegate: Any = None

    def __call__(self) -> dict[str, Any]:
        self._started = time.monotonic()
        self.requeues = max(self.requeues, int(os.environ.get("SLURM_RESTART_COUNT") or 0))
        if self.requeues > self.max_requeues:
            return self._give_up()
        previous = signal.getsignal(signal.SIGUSR2)
        self._delegate = previous if callable(previous) else None
        signal.signal(signal.SIGUSR2, self._on_usr2)
        try:
            return run_cell(self.spec, self.attempt, requeues=self.requeues)
        finally:
            signal.signal(signal.SIGUSR2, previous)

    def _near_time_limit(self) -> bool:
        left = self.time_limit_s - (time.monotonic() - self._started if self._started is not None else 0.0)
        return left <= self.signal_delay_s + SIGNAL_SLACK_S

    def _on_usr2(self, signum: int, frame: Any) -> None:
        if self._near_time_limit():
            print(f"[export-matrix] USR2 {self.signal_delay_s} s before the time limit: Slurm ends the job "
                  "(TIMEOUT)", file=sys.stderr, flush=True)
            return
        if self.requeues >= self.max_requeues or self._delegate is None:
            raise Preempted(f"the job was preempted again after {self.requeues} requeue(s) "
                            f"(max_requeues={self.max_requeues})")
        print(f"[export-matrix] USR2: preempted; requeue {self.requeues + 1} of {self.max_requeues}",
              file=sys.stderr, flush=True)
        try:
            self._delegate(signum, frame)  # submitit: checkpoint() below, `scontrol requeue`, exit
        except UncompletedJobError as exc:  # submitit declined to requeue
            raise Preempted(f"the job was preempted and not requeued: {exc}") from exc

    def checkpoint(self, *args: Any, **kwargs: Any) -> DelayedSubmission | None:
        if self.requeues >= self.max_requeues or self._near_time_limit():
            return None  # submitit then ends the job without requeuing it
        return DelayedSubmission(CellJob(self.spec, self.attempt, self.time_limit_s, self.signal_delay_s,
                                         self.max_requeues, self.requeues + 1))

    def _give_up(self) -> dict[str, Any]:
        spec = self.spec
        record = read_record(spec.cell_dir) or Record(cell=spec.id, policy=spec.policy, gpu=spec.gpu,
                                                      torch=spec.torch, exporter=spec.exporter)
        record.status, record.requeues, record.ended_at = "failed", self.requeues, now()
        record.attempt, record.fixes = self.attempt, list(spec.fixes)
        record.error = (f"Slurm ran the job {self.requeues + 1} times (preemption or node failure); "
                        f"max_requeues={self.max_requeues}")
        write_record(spec.cell_dir, record)
        return record.to_dict()


# ------------------------------------------------------------------------------------------- the manifest ---


def manifest_path(out_dir: Path) -> Path:
    return Path(out_dir) / MANIFEST


def read_manifest(out_dir: Path) -> dict[str, Any]:
    import json

    path = manifest_path(out_dir)
    if not path.exists():
        return {"version": 1, "sweeps": {}, "cells": {}}
    return json.loads(path.read_text())


@contextmanager
def manifest_lock(out_dir: Path) -> Iterator[None]:
    """Serializes read-modify-write of the manifest between processes (two sweeps, a sweep and a status)."""
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    with open(Path(out_dir) / f".{MANIFEST}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def merge_manifest(out_dir: Path, sweep_id: str, sweep: dict[str, Any], cells: dict[str, dict[str, Any]]) -> None:
    """Add a sweep's (new) arrays and cells to the manifest; every other cell's entry stays."""
    with manifest_lock(out_dir):
        manifest = read_manifest(out_dir)
        known = manifest["sweeps"].setdefault(sweep_id, {**sweep, "arrays": []})
        known["arrays"] = [*known["arrays"], *sweep.get("arrays", [])]
        manifest["cells"].update(cells)
        write_json_atomic(manifest_path(out_dir), manifest)


# ---------------------------------------------------------------------------------------------- sacct ---


@dataclass
class JobState:
    job_id: str
    state: str  # RUNNING, COMPLETED, TIMEOUT, ... ("CANCELLED by 0" -> CANCELLED; `detail` keeps the rest)
    exit_code: str = ""
    detail: str = ""
    elapsed: str = ""
    timelimit: str = ""
    nodes: str = ""
    end: str = ""
    steps: dict[str, tuple[str, str]] = field(default_factory=dict)  # "0", "batch" -> (state, exit code)

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    @property
    def step_exit(self) -> str:
        """The exit code of the job's step (submitit's srun: step 0), where the job process ran."""
        return self.steps.get("0", ("", ""))[1]


SACCT_FIELDS = ("JobID", "State", "ExitCode", "Elapsed", "Timelimit", "NodeList", "End")
_RANGE = re.compile(r"^(?P<base>\d+)_\[(?P<ranges>[\d,\-]+)(?:%\d+)?\]$")


def sacct(job_ids: list[str]) -> dict[str, JobState]:
    """One `sacct` call for all these jobs (array tasks `A_i` are asked as their array `A`), by job id.

    Steps are asked too (no -X): a job whose srun step the cgroup OOM-killed ends FAILED, its step OUT_OF_MEMORY.
    """
    bases = sorted({j.split("_")[0] for j in job_ids if j}, key=int)
    if not bases:
        return {}
    done = subprocess.run(["sacct", "-P", "-n", "-o", ",".join(SACCT_FIELDS), "-j", ",".join(bases)],
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"sacct failed: {done.stderr.strip()[-500:]}")
    return parse_sacct(done.stdout)


def parse_sacct(text: str) -> dict[str, JobState]:
    """Lines of `sacct -P -n`: a task `A_i`, a job `J`, a whole array still pending `A`, pending tasks
    `A_[3-9%4]`, or a step `J.0`, `J.batch`. A task's own line wins over a range that sacct sometimes keeps
    after the task started; a job that ended FAILED or COMPLETED with a step OUT_OF_MEMORY is OUT_OF_MEMORY."""
    explicit: dict[str, JobState] = {}
    ranged: dict[str, JobState] = {}
    steps: dict[str, dict[str, tuple[str, str]]] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < len(SACCT_FIELDS) or not parts[0]:
            continue
        values = dict(zip(SACCT_FIELDS, parts, strict=False))
        state, _, detail = values["State"].strip().partition(" ")
        if "." in values["JobID"]:
            job_id, _, step = values["JobID"].partition(".")
            steps.setdefault(job_id, {})[step] = (state, values["ExitCode"])
            continue
        job = JobState(values["JobID"], state, values["ExitCode"], detail.strip(), values["Elapsed"],
                       values["Timelimit"], values["NodeList"], values["End"])
        match = _RANGE.match(values["JobID"])
        if match:
            for part in match["ranges"].split(","):
                low, _, high = part.partition("-")
                for index in range(int(low), int(high or low) + 1):
                    ranged[f"{match['base']}_{index}"] = job
        else:
            explicit[values["JobID"]] = job
    for job_id, job in explicit.items():
        job.steps = steps.get(job_id, {})
        if job.state in ("FAILED", "COMPLETED") and any(s == "OUT_OF_MEMORY" for s, _ in job.steps.values()):
            job.state = "OUT_OF_MEMORY"
    return {**ranged, **explicit}


def lookup(states: dict[str, JobState], job_id: str) -> JobState | None:
    """A job's state; a task of an array that sacct still lists as one pending job `A` is pending."""
    if job_id in states:
        return states[job_id]
    base = job_id.split("_")[0]
    return states.get(base) if base != job_id else None


# ----------------------------------------------------------------------------------------- settling ---

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


def settle(record: Record, entry: dict[str, Any], job: JobState) -> Record:
    """The record a cell keeps once its Slurm job has ended in `job.state` (a copy; the caller writes it).

    COMPLETED: the job's own record (an unfinished one is an `error`); FAILED: the job's own record if it wrote
    one, else `failed`; TIMEOUT: `timeout`; OUT_OF_MEMORY: `oom`; CANCELLED: `cancelled`; NODE_FAIL, PREEMPTED,
    BOOT_FAIL, DEADLINE (a job Slurm did not requeue, or no more): `failed`.
    """
    new = Record.from_dict(record.to_dict())
    unfinished = new.status in UNFINISHED
    state, slurm = job.state, f"Slurm {job.state}{' ' + job.detail if job.detail else ''}"
    directory = cell_dir(entry["out_dir"], record.cell)
    if state == "COMPLETED":
        if not unfinished:
            return new
        new.status, new.error = "error", f"the job ended without finishing its record ({slurm})"
    elif state == "FAILED":
        if not unfinished:
            return new
        new.status = "failed"
        new.error = f"the job process ended without a record ({slurm}, {_exit_text(job.step_exit or job.exit_code)})"
        new.failed_step = new.failed_step or _step_from_files(directory)
    elif state == "TIMEOUT":
        new.status = "timeout"
        new.error = f"the job ran past its Slurm time limit of {job.timelimit or entry.get('time_min')} ({slurm})"
        new.failed_step = new.failed_step or (current_step(new) if not unfinished else _step_from_files(directory))
    elif state == "OUT_OF_MEMORY":
        new.status = "oom"
        new.error = f"the job ran out of its {entry.get('signature', {}).get('mem_gb')} GB of memory ({slurm})"
        new.failed_step = new.failed_step or (current_step(new) if not unfinished else _step_from_files(directory))
    elif state == "CANCELLED":
        started = record.status != "pending" and record.started_at
        new.status = "cancelled"
        new.error = f"the job was cancelled{'' if started else ' before it started'} ({slurm})"
    elif state == "UNKNOWN":
        if not unfinished:
            return new
        new.status = "error"
        new.error = (f"Slurm's accounting has no job {entry['job_id']}, {UNKNOWN_GRACE_S // 60} minutes after "
                     "its submission")
    else:  # NODE_FAIL, PREEMPTED, BOOT_FAIL, DEADLINE, ...: Slurm ended it and did not requeue it (again)
        new.status = "failed"
        new.error = f"Slurm ended the job and did not run it again ({slurm}, {_exit_text(job.exit_code)})"
        new.failed_step = new.failed_step or (current_step(new) if not unfinished else _step_from_files(directory))
    new.job_id = entry["job_id"]
    new.ended_at = new.ended_at or now()
    new.logs = {**new.logs, "job_stdout": entry["stdout"], "job_stderr": entry["stderr"]}
    if unfinished or not new.log_tail:
        texts = [Path(p).read_text(errors="replace") for p in (entry["stderr"], entry["stdout"]) if Path(p).exists()]
        new.log_tail = tail("\n".join(texts), TAIL_LINES) or new.log_tail
    return new


@dataclass
class CellState:
    cell: str
    record: dict[str, Any] | None
    entry: dict[str, Any] | None
    job: JobState | None

    @property
    def active(self) -> bool:
        """Its Slurm job has not ended (or sacct does not know it yet, shortly after submission), or Slurm has
        signalled it and its job body may still be writing its record."""
        if self.entry is None or not self._current:
            return False
        if self.job is None:
            return _age_s(self.entry.get("submitted_at")) < UNKNOWN_GRACE_S
        return self.job.active or self.ending

    @property
    def ending(self) -> bool:
        return (self.job is not None and self.job.state in SIGNALLED and self.record is not None
                and self.record.get("status") == "running" and _end_age_s(self.job.end) < ENDING_GRACE_S)

    @property
    def _current(self) -> bool:
        """The manifest's job is the one of the cell's record (not superseded by a later local attempt)."""
        if self.record is None or self.entry is None:
            return True
        return int(self.record.get("attempt") or 0) <= int(self.entry.get("attempt") or 0)

    @property
    def shown(self) -> str:
        """The status to show: the Slurm job's while it runs, else the record's."""
        if self.active:
            state = self.job.state if self.job else "SUBMITTED"
            if self.ending:
                return "ending"
            return state.lower() if state in ("PENDING", "RUNNING", "REQUEUED", "SUSPENDED") else "running"
        return self.record["status"] if self.record else "missing"

    @property
    def finished(self) -> bool:
        return not self.active and self.record is not None and self.record["status"] not in UNFINISHED


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


def poll(out_dir: Path, cells: list[str] | None = None) -> list[CellState]:
    """Ask Slurm about every job of the manifest (one sacct call), settle the ended ones, return each cell."""
    from .selection import recorded

    manifest = read_manifest(out_dir)
    entries = {c: e for c, e in manifest["cells"].items() if cells is None or c in cells}
    states = sacct([e["job_id"] for e in entries.values()])
    records = recorded(Path(out_dir))
    found = []
    for cell_id, entry in entries.items():
        job = lookup(states, entry["job_id"])
        if job is None and _age_s(entry.get("submitted_at")) >= UNKNOWN_GRACE_S:
            job = JobState(entry["job_id"], "UNKNOWN")
        state = CellState(cell_id, records.get(cell_id), entry, job)
        if job is not None and not job.active and not state.ending and state._current:
            before = Record.from_dict(state.record) if state.record else _blank(cell_id, entry)
            after = settle(before, entry, job)
            if after.to_dict() != state.record:
                write_record(cell_dir(entry["out_dir"], cell_id), after)
                state.record = after.to_dict()
        found.append(state)
    return found


def _blank(cell_id: str, entry: dict[str, Any]) -> Record:
    policy, gpu, torch = cell_id.split("/")
    return Record(cell=cell_id, policy=policy, gpu=gpu, torch=torch, exporter=entry.get("exporter", ""),
                  status="pending", attempt=int(entry.get("attempt") or 1))


# --------------------------------------------------------------------------------------------- submit ---


@dataclass
class Submitted:
    sweep_id: str
    arrays: list[dict[str, Any]]
    skipped: list[str]
    refused: list[dict[str, Any]]  # records of cells whose array sbatch refused


def _executor(out_dir: Path, settings: SlurmSettings) -> submitit.AutoExecutor:
    kwargs: dict[str, Any] = {"slurm_max_num_timeout": 1}  # see CellJob: the requeue decisions are its own
    if settings.python:
        kwargs["slurm_python"] = settings.python
    return submitit.AutoExecutor(folder=Path(out_dir) / SUBMITIT_DIR / "%j", cluster="slurm", **kwargs)


def submit_sweep(specs: list[CellSpec], out_dir: Path, settings: SlurmSettings, what: str, console: Console,
                 force: bool = False) -> Submitted:
    """Submit one job array per resource signature and record every cell's job in the manifest.

    Cells whose job from an earlier sweep is still pending or running are left alone (`force`: that job is
    cancelled, its record settled, and the cell submitted again).
    """
    sweep_id = f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"
    out_dir = Path(out_dir).absolute()
    skipped: list[str] = []
    if manifest_path(out_dir).exists():
        wanted = {s.id for s in specs}
        active = [c for c in poll(out_dir, sorted(wanted)) if c.active]
        if active and force:
            _cancel(out_dir, active, console)
        elif active:
            for c in active:
                console.print(f"[yellow]not submitted[/] {c.cell}: job {c.entry['job_id']} is still "
                              f"{c.shown} (--force cancels it and submits the cell again)")
            skipped = [c.cell for c in active]
            specs = [s for s in specs if s.id not in set(skipped)]
    groups: dict[tuple, list[CellSpec]] = {}
    signatures: dict[tuple, dict[str, Any]] = {}
    for spec in specs:
        res = resources(spec, settings)
        groups.setdefault(signature_key(res), []).append(spec)
        signatures[signature_key(res)] = res
    arrays: list[dict[str, Any]] = []
    refused: list[dict[str, Any]] = []
    sweep = {"what": what, "submitted_at": now(), "launcher": "slurm", "poll_s": settings.poll_s}
    for key, group in groups.items():
        res = signatures[key]
        attempts = {spec.id: prepare(spec) for spec in group}
        try:
            jobs = _submit_array(out_dir, settings, res, group, attempts)
        except Exception as exc:  # sbatch refused the array (bad partition, account, resources)
            reason = (str(exc).strip().splitlines() or [repr(exc)])[-1]
            console.print(f"[bold red]sbatch refused[/] {len(group)} cells ({_describe(res)}): {reason}")
            refused += [_refuse(spec, attempts[spec.id], f"sbatch refused the job array: {reason}")
                        for spec in group]
            continue
        array_id = str(jobs[0].job_id).split("_")[0]
        submitted_at = now()
        cells = {spec.id: {"job_id": str(job.job_id), "array": array_id, "sweep": sweep_id,
                           "attempt": attempts[spec.id], "fingerprint": spec.fingerprint.get("key"),
                           "configs": spec.configs, "signature": res, "time_min": res["time_min"],
                           "submitted_at": submitted_at, "out_dir": spec.out_dir, "exporter": spec.exporter,
                           "stdout": str(job.paths.stdout), "stderr": str(job.paths.stderr)}
                 for spec, job in zip(group, jobs, strict=True)}
        array = {"job_id": array_id, "cells": len(group), "signature": res}
        arrays.append(array)
        merge_manifest(out_dir, sweep_id, {**sweep, "arrays": [array]}, cells)
        console.print(f"[green]submitted[/] job array {array_id}: {len(group)} cells, {_describe(res)}")
    return Submitted(sweep_id, arrays, skipped, refused)


def _describe(res: dict[str, Any]) -> str:
    parts = [f"partition {res['partition'] or '(default)'}"]
    if res["gres"]:
        parts.append(f"gres {res['gres']}")
    if res["constraint"]:
        parts.append(f"constraint {res['constraint']}")
    parts.append(f"{res['cpus_per_task']} cpus")
    if res["mem_gb"]:
        parts.append(f"{res['mem_gb']} GB")
    parts.append(f"{res['time_min']} min")
    return ", ".join(parts)


def _submit_array(out_dir: Path, settings: SlurmSettings, res: dict[str, Any], group: list[CellSpec],
                  attempts: dict[str, int]) -> list[submitit.Job]:
    executor = _executor(out_dir, settings)  # a fresh one per array: parameters left unset stay unset
    params: dict[str, Any] = {
        "name": f"export-matrix-{res['partition'] or 'default'}", "timeout_min": res["time_min"],
        "cpus_per_task": res["cpus_per_task"], "slurm_partition": res["partition"], "slurm_gres": res["gres"],
        "slurm_constraint": res["constraint"], "slurm_array_parallelism": settings.array_parallelism,
        "slurm_signal_delay_s": settings.signal_delay_s,
        # --requeue: Slurm may run a job again after a node failure or a preemption (CellJob counts the runs)
        "slurm_additional_parameters": {"requeue": True, **settings.sbatch},
        "slurm_setup": list(settings.setup) or None,
    }
    if res["mem_gb"]:
        params["mem_gb"] = float(res["mem_gb"])
    executor.update_parameters(**params)
    jobs = []
    with executor.batch():
        for spec in group:
            jobs.append(executor.submit(CellJob(spec, attempts[spec.id], res["time_min"] * 60.0,
                                                settings.signal_delay_s, settings.max_requeues)))
    return jobs


def _refuse(spec: CellSpec, attempt: int, reason: str) -> dict[str, Any]:
    record = Record(cell=spec.id, policy=spec.policy, gpu=spec.gpu, torch=spec.torch, exporter=spec.exporter,
                    status="error", attempt=attempt, failed_step="submit", error=reason, fixes=list(spec.fixes),
                    started_at=now(), ended_at=now(), fingerprint=spec.fingerprint)
    write_record(spec.cell_dir, record)
    return record.to_dict()


def _cancel(out_dir: Path, active: list[CellState], console: Console, timeout_s: float = 120) -> None:
    """scancel these cells' jobs, wait until Slurm has ended them, and settle their records."""
    ids = [c.entry["job_id"] for c in active]
    console.print(f"[yellow]--force:[/] cancelling {len(ids)} jobs still pending or running ({', '.join(ids)})")
    subprocess.run(["scancel", *ids], capture_output=True, text=True, timeout=120)
    deadline = time.monotonic() + timeout_s
    cells = [c.cell for c in active]
    while time.monotonic() < deadline:
        if not any(c.active for c in poll(out_dir, cells)):
            return
        time.sleep(1)
    console.print("[yellow]some cancelled jobs have not ended yet; submitting anyway[/]")


# ------------------------------------------------------------------------------------- following ---


def counts(cells: list[CellState]) -> Counter[str]:
    return Counter(c.shown for c in cells)


def wait_for(out_dir: Path, poll_s: float | None, console: Console, only: list[str] | None = None) -> list[CellState]:
    """Poll until every cell of the manifest (or `only` these) has ended and has its final record."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from .launch import STATUS_STYLE

    manifest = read_manifest(out_dir)
    if poll_s is None:
        sweeps = list(manifest["sweeps"].values())
        poll_s = float(sweeps[-1].get("poll_s") or 15) if sweeps else 15.0
    cells = poll(out_dir, only)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[counts]}"), console=console, transient=False) as progress:
        task = progress.add_task("wait", total=len(cells), counts="")
        while True:
            shown = counts(cells)
            text = "  ".join(f"[{STATUS_STYLE.get(s, 'white')}]{s} {n}[/]" for s, n in sorted(shown.items()))
            progress.update(task, completed=sum(c.finished for c in cells), counts=text)
            if all(c.finished for c in cells):
                return cells
            time.sleep(poll_s)
            cells = poll(out_dir, only)


def launch_slurm(specs: list[CellSpec], refused: list[dict[str, Any]], out_dir: Path, launcher: Any, what: str,
                 wait: bool, force: bool, console: Console) -> int:
    """`sweep launcher=slurm`: submit, write the manifest, and return (or follow the cells with `wait`)."""
    from .config import ConfigError
    from .launch import summarize

    missing = [tool for tool in ("sbatch", "srun", "sacct") if shutil.which(tool) is None]
    if missing:
        raise ConfigError(f"launcher=slurm needs {', '.join(missing)} on PATH (no Slurm client here)")
    out_dir = Path(out_dir).absolute()
    settings = SlurmSettings.from_config(launcher)
    done = submit_sweep(specs, out_dir, settings, what, console, force)
    submitted = sum(a["cells"] for a in done.arrays)
    console.print(f"[bold]submitted:[/] {submitted} cells in {len(done.arrays)} job arrays (sweep {done.sweep_id})"
                  + (f"; {len(done.skipped)} cells still pending or running were left alone" if done.skipped else "")
                  + f"; manifest {manifest_path(out_dir)}")
    errors = [r for r in refused + done.refused if r["status"] == "error"]
    if not wait:
        console.print(f"follow it with `export-matrix status out_dir={out_dir}` or `export-matrix wait "
                      f"out_dir={out_dir}`")
        return 1 if errors else 0
    cells = wait_for(out_dir, settings.poll_s, console, [s.id for s in specs])
    records = [c.record for c in cells if c.record] + refused + done.refused
    console.print(f"[bold]done:[/] {summarize(records)}")
    return 1 if any(r["status"] == "error" for r in records) else 0


def wait_command(out_dir: Path, poll_s: float | None, overrides: list[str], config_dir: Path | None) -> int:
    """`export-matrix wait`: follow the manifest's cells until all ended, then show the status table."""
    from .status import show_status

    console = Console(stderr=True)
    if not manifest_path(out_dir).exists():
        console.print(f"no Slurm sweep under {out_dir} ({MANIFEST} is missing)")
        return 2
    try:
        cells = wait_for(out_dir, poll_s, console)
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        console.print(f"[red]export-matrix: error: could not ask Slurm about the sweep's jobs: {exc}[/]")
        return 2
    show_status(out_dir, overrides, config_dir)
    return 1 if any(c.record and c.record["status"] == "error" for c in cells) else 0
