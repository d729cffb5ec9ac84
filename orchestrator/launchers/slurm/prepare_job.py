"""make_random off the GPU: a CPU-only job array that builds a sweep's random checkpoints before its GPU arrays.

Without it every GPU job builds (or waits on the lock of) its own random checkpoint while it holds a GPU. With it
(`launcher.prepare`, conf/launcher/slurm.yaml) one task per distinct checkpoint runs first on a CPU partition;
the GPU arrays depend on that array (`--dependency=afterany`) and find the checkpoint built. A task whose
make_random fails writes the `failed` record (failed_step make_random) of every cell that needed it and cancels
their GPU jobs while they are still pending, so none of them starts. If the preparation job itself dies (node
failure, its own time limit), afterany still lets the GPU jobs run and they build the checkpoint as before.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...config.spec import CellSpec
from ...job import MAKE_RANDOM_LOG, current_job_id, job_env, now, probe_versions, stopped_by
from ...job.checkpoints import CheckpointFailed, ensure_random_checkpoint
from ...job.logparse import last_error_line, tail
from ...record import Status, Step, read_record, write_record
from .manifest import read_entries

PREPARE_LOGS = "prepare"


@dataclass(frozen=True)
class CheckpointTask:
    """One random checkpoint (a build's interpreter, a policy type and its overrides) and the cells that use it."""

    cells: tuple[CellSpec, ...]

    @property
    def first(self) -> CellSpec:
        return self.cells[0]

    @property
    def name(self) -> str:
        return f"{self.first.checkpoint['random']['type']}-{self.first.torch}"

    @property
    def timeout_min(self) -> float:
        return max(spec.timeout_min for spec in self.cells)


def checkpoint_tasks(specs: list[CellSpec]) -> list[CheckpointTask]:
    """The sweep's random checkpoints, one task each, keyed as the job keys them (interpreter, type, overrides)."""
    groups: dict[tuple[str, str, str], list[CellSpec]] = {}
    for spec in specs:
        if "random" in spec.checkpoint:
            key = (spec.python, spec.ckpt_dir, json.dumps(spec.checkpoint["random"], sort_keys=True))
            groups.setdefault(key, []).append(spec)
    return [CheckpointTask(tuple(cells)) for cells in groups.values()]


class PrepareCheckpoint:
    """The body of one preparation task: probe the build's lerobot, build the checkpoint (or find it built)."""

    def __init__(self, task: CheckpointTask, out_dir: Path) -> None:
        self.task, self.out_dir = task, out_dir

    def __call__(self) -> dict[str, Any]:
        spec = self.task.first
        env = job_env(spec)
        log = self.out_dir / PREPARE_LOGS / f"{self.task.name}-{current_job_id() or 'local'}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        lerobot = probe_versions(spec, env, cuda=False).get("lerobot") or "unknown"
        try:
            built = ensure_random_checkpoint(Path(spec.ckpt_dir), spec.checkpoint["random"], lerobot, spec.python,
                                             env, log, spec.timeout_min * 60)
        except CheckpointFailed as exc:
            failed = self._fail_cells(log, exc)
            return {"checkpoint": None, "failed_cells": failed, "log": str(log)}
        return {"checkpoint": str(built.path), "built": built.built, "seconds": round(built.seconds, 2)}

    def _fail_cells(self, log: Path, exc: CheckpointFailed) -> list[str]:
        """Each waiting cell gets make_random's failure as its record and its log; its GPU job is cancelled."""
        text = log.read_text(errors="replace") if log.exists() else ""
        status, error = stopped_by(exc.timed_out, exc.returncode, self.task.timeout_min, Step.MAKE_RANDOM,
                                   Step.MAKE_RANDOM) or \
            (Status.FAILED, last_error_line(text.splitlines(), self.task.first.parse["exception"]))
        entries = read_entries(self.out_dir)
        failed, jobs = [], []
        for spec in self.task.cells:
            current = read_record(spec.cell_dir)
            if current is None or current.status != Status.PENDING:  # its GPU job started after all: it decides
                continue
            if log.exists():
                shutil.copyfile(log, spec.cell_dir / MAKE_RANDOM_LOG)
            record = spec.new_record(
                status=status, attempt=current.attempt, failed_step=Step.MAKE_RANDOM, error=error,
                started_at=now(), ended_at=now(), make_random_s=round(exc.seconds, 2), job_id=current_job_id(),
                logs={"make_random": MAKE_RANDOM_LOG}, log_tail=tail(text, spec.parse["tail_lines"]),
                fingerprint=spec.fingerprint)
            if write_record(spec.cell_dir, record):
                failed.append(spec.id)
                entry = entries.get(spec.id)
                if entry and entry.attempt == current.attempt:
                    jobs.append(entry.job_id)
        if jobs:  # still pending behind this array's dependency: they never start
            subprocess.run(["scancel", "--state=PENDING", *jobs], capture_output=True, text=True, timeout=120)
        return failed
