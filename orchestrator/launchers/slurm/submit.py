"""Submitting a sweep: the cells grouped by what they ask of Slurm, one submitit job array per group.

Each array's cells go into the manifest as soon as sbatch accepts it; cells whose job from an earlier sweep is
still active are left alone (or, with --force, cancelled and submitted again).
"""

from __future__ import annotations

import secrets
import subprocess
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import submitit
from rich.console import Console
from rich.markup import escape

from ...config.schema import SlurmLauncherConf
from ...config.spec import CellSpec
from ...job import now, refuse
from ...record import Record
from ..common import job_timeout_min, prepare
from .cell_job import CellJob
from .limits import chunks, cluster_limits
from .manifest import Entry, merge_manifest
from .prepare_job import CheckpointTask, PrepareCheckpoint, checkpoint_tasks

SUBMITIT_DIR = "submitit"


@dataclass(frozen=True)
class Resources:
    """What a job asks of Slurm. Cells that ask the same share a job array (the manifest's `signature`)."""

    partition: str | None
    gres: str | None
    constraint: str | None
    cpus_per_task: int
    mem_gb: float | None
    time_min: int

    def describe(self) -> str:
        parts = [f"partition {self.partition or '(default)'}"]
        if self.gres:
            parts.append(f"gres {self.gres}")
        if self.constraint:
            parts.append(f"constraint {self.constraint}")
        parts.append(f"{self.cpus_per_task} cpus")
        if self.mem_gb:
            parts.append(f"{self.mem_gb} GB")
        parts.append(f"{self.time_min} min")
        return ", ".join(parts)


def resources(spec: CellSpec, settings: SlurmLauncherConf) -> Resources:
    """What the cell's job asks of Slurm: its gpu's and policy's `slurm:` settings, and a time limit.

    The time limit is the policy's or gpu's `slurm.time_min`, else the launcher's `time_min`, else room for
    make_random and the export at their own limits (the job kills them there itself, and leaves its record).
    """
    slurm = spec.slurm
    time_min = slurm.get("time_min") or settings.time_min or job_timeout_min(spec)
    return Resources(partition=slurm.get("partition"), gres=slurm.get("gres"), constraint=slurm.get("constraint"),
                     cpus_per_task=int(slurm.get("cpus_per_task") or 1), mem_gb=slurm.get("mem_gb"),
                     time_min=int(time_min))


@dataclass
class Submitted:
    sweep_id: str
    arrays: list[dict[str, Any]]
    refused: list[Record]  # records of cells whose array sbatch refused


def _executor(out_dir: Path, settings: SlurmLauncherConf) -> submitit.AutoExecutor:
    kwargs: dict[str, Any] = {"slurm_max_num_timeout": 1}  # see CellJob: the requeue decisions are its own
    if settings.python:
        kwargs["slurm_python"] = settings.python
    return submitit.AutoExecutor(folder=Path(out_dir) / SUBMITIT_DIR / "%j", cluster="slurm", **kwargs)


def submit_sweep(specs: list[CellSpec], out_dir: Path, settings: SlurmLauncherConf, what: str,
                 console: Console) -> Submitted:
    """Submit one job array per resource signature and record every cell's job in the manifest."""
    sweep_id = f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"
    out_dir = Path(out_dir).absolute()
    groups: dict[Resources, list[CellSpec]] = {}
    per_array = cluster_limits().array_tasks  # a signature larger than the cluster's arrays goes in as several
    for spec in specs:
        groups.setdefault(resources(spec, settings), []).append(spec)
    batches = [(res, part) for res, group in groups.items() for part in chunks(group, per_array)]
    arrays: list[dict[str, Any]] = []
    refused: list[Record] = []
    sweep = {"what": what, "submitted_at": now(), "launcher": "slurm", "poll_s": settings.poll_s}
    preparing = _submit_prepare(out_dir, settings, checkpoint_tasks(specs), console) if specs else None
    if preparing:
        sweep["prepare"] = preparing
    try:
        for res, group in batches:
            _submit_batch(out_dir, settings, res, group, sweep_id, sweep, preparing, arrays, refused, console)
    finally:  # held until every GPU array is in the manifest, where a failed make_random finds its cells' jobs
        if preparing and not settings.sbatch.get("hold"):  # a sweep submitted held stays held, this array too
            subprocess.run(["scontrol", "release", preparing["job_id"]], capture_output=True, text=True, timeout=120)
    return Submitted(sweep_id, arrays, refused)


def _submit_batch(out_dir: Path, settings: SlurmLauncherConf, res: Resources, group: list[CellSpec], sweep_id: str,
                  sweep: dict[str, Any], preparing: dict[str, Any] | None, arrays: list[dict[str, Any]],
                  refused: list[Record], console: Console) -> None:
    """One GPU job array: its cells' pending records, sbatch, the manifest; or their records if sbatch says no."""
    attempts = {spec.id: prepare(spec, local=False) for spec in group}
    after = {"dependency": f"afterany:{preparing['job_id']}"} if preparing else {}
    try:
        jobs = _submit_array(out_dir, settings, res, group, attempts, after)
    except Exception as exc:  # sbatch refused the array (bad partition, account, resources)
        reason = (str(exc).strip().splitlines() or [repr(exc)])[-1]
        console.print(f"[bold red]sbatch refused[/] {len(group)} cells {escape(f'({res.describe()}): {reason}')}")
        refused += [refuse(spec, attempts[spec.id], "submit", f"sbatch refused the job array: {reason}")
                    for spec in group]
        return
    array_id = str(jobs[0].job_id).split("_")[0]
    submitted_at = now()
    signature = asdict(res)
    cells = {spec.id: Entry(job_id=str(job.job_id), array=array_id, sweep=sweep_id, attempt=attempts[spec.id],
                            fingerprint=spec.fingerprint.get("key"), configs=spec.configs, signature=signature,
                            time_min=res.time_min, submitted_at=submitted_at, out_dir=spec.out_dir,
                            exporter=spec.exporter, stdout=str(job.paths.stdout), stderr=str(job.paths.stderr))
             for spec, job in zip(group, jobs, strict=True)}
    array = {"job_id": array_id, "cells": len(group), "signature": signature}
    arrays.append(array)
    merge_manifest(out_dir, sweep_id, {**sweep, "arrays": [array]}, cells)
    console.print(f"[green]submitted[/] job array {array_id}: {len(group)} cells, {escape(res.describe())}"
                  + (f", after {preparing['job_id']}" if preparing else ""))


def _submit_prepare(out_dir: Path, settings: SlurmLauncherConf, tasks: list[CheckpointTask],
                    console: Console) -> dict[str, Any] | None:
    """The preparation array (held until the GPU arrays are in), or None: off, nothing to build, or refused
    (then each GPU job builds its own checkpoint, as without it)."""
    if settings.prepare is None or not tasks:
        return None
    conf = settings.prepare
    time_min = int(conf.time_min or max(t.timeout_min for t in tasks) + 5)
    executor = _executor(out_dir, settings)
    params: dict[str, Any] = {
        "name": "export-matrix-prepare", "timeout_min": time_min, "cpus_per_task": int(conf.cpus_per_task or 1),
        "slurm_partition": conf.partition, "slurm_constraint": conf.constraint,
        "slurm_array_parallelism": settings.array_parallelism,
        "slurm_additional_parameters": {**settings.sbatch, "hold": True}, "slurm_setup": list(settings.setup) or None,
    }
    if conf.mem_gb:
        params["mem_gb"] = float(conf.mem_gb)
    executor.update_parameters(**params)
    try:
        with executor.batch():
            jobs = [executor.submit(PrepareCheckpoint(task, Path(out_dir))) for task in tasks]
    except Exception as exc:  # sbatch refused it: the GPU jobs build their checkpoints themselves
        reason = (str(exc).strip().splitlines() or [repr(exc)])[-1]
        console.print(f"[yellow]the make_random preparation array was refused ({escape(reason)}); each GPU job "
                      "builds its own random checkpoint[/]")
        return None
    array_id = str(jobs[0].job_id).split("_")[0]
    res = Resources(partition=conf.partition, gres=None, constraint=conf.constraint,
                    cpus_per_task=params["cpus_per_task"], mem_gb=conf.mem_gb, time_min=time_min)
    console.print(f"[green]submitted[/] make_random array {array_id}: {len(tasks)} random checkpoints, "
                  f"{escape(res.describe())}")
    return {"job_id": array_id, "checkpoints": len(tasks), "time_min": time_min}


def _submit_array(out_dir: Path, settings: SlurmLauncherConf, res: Resources, group: list[CellSpec],
                  attempts: dict[str, int], after: dict[str, str]) -> list[submitit.Job]:
    executor = _executor(out_dir, settings)  # a fresh one per array: parameters left unset stay unset
    params: dict[str, Any] = {
        "name": f"export-matrix-{res.partition or 'default'}", "timeout_min": res.time_min,
        "cpus_per_task": res.cpus_per_task, "slurm_partition": res.partition, "slurm_gres": res.gres,
        "slurm_constraint": res.constraint, "slurm_array_parallelism": settings.array_parallelism,
        "slurm_signal_delay_s": settings.signal_delay_s,
        # --requeue: Slurm may run a job again after a node failure or a preemption (CellJob counts the runs)
        "slurm_additional_parameters": {"requeue": True, **settings.sbatch, **after},
        "slurm_setup": list(settings.setup) or None,
    }
    if res.mem_gb:
        params["mem_gb"] = float(res.mem_gb)
    executor.update_parameters(**params)
    jobs = []
    with executor.batch():
        for spec in group:
            jobs.append(executor.submit(CellJob(spec, attempts[spec.id], res.time_min * 60.0,
                                                settings.signal_delay_s, settings.max_requeues)))
    return jobs
