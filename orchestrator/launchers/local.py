"""Launch one submitit job per cell and follow them to the end, with progress on the terminal.

Every cell gets a `pending` record before its job is submitted, and every job that ends without finishing its
own record (killed, lost, cancelled before it started) gets one from what submitit knows, so nothing is lost.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import submitit
from rich.console import Console
from rich.markup import escape

from ..config.schema import typed_launcher
from ..config.spec import CellSpec
from ..console import counts_text, describe, exit_code, stderr_console, summarize
from ..console import progress as console_progress
from ..job import gpu, now, run_cell
from ..job.logparse import tail
from ..job.process import KILL_GRACE_S, kill_tree, process_tree
from ..record import UNFINISHED, UNREADABLE, Record, Status, read_record, write_record
from .common import Interrupted, gpus_requested, job_timeout_min, prepare

CONTROLLER_LOG = "controllers.log"  # what submitit's job controllers print (their own tracebacks on Ctrl-C)


def visible_gpus() -> list[int] | None:
    """The GPUs this sweep may hand out: CUDA_VISIBLE_DEVICES's indices where it is set, else every GPU NVML
    counts. None where neither says (no GPU, or CUDA_VISIBLE_DEVICES names GPUs by UUID): no pool, and each GPU
    cell gets submitit's first GPUs, as before there was one."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        count = gpu.count()
        return list(range(count)) if count else None
    found = [int(i) for i in listed.split(",") if i.strip().isdigit()]
    return found or None


class GpuPool:
    """The visible GPUs, each held by at most one running cell: submitit's LocalExecutor gives every job the
    first `gpus_per_node` of its `visible_gpus`, so each GPU cell is submitted with the free GPUs it takes as
    its visible set, and gives them back when its job ends. A cell asking for more GPUs than there are gets all
    of them (as before, when every cell saw them all)."""

    def __init__(self, visible: list[int] | None) -> None:
        self.visible = visible
        self.free = list(visible or [])

    def wants(self, spec: CellSpec) -> int:
        asked = gpus_requested(spec)
        return min(asked, len(self.visible)) if self.visible else asked

    def take(self, spec: CellSpec) -> tuple[int, ...] | None:
        """The GPUs for this cell, now taken; None where too few are free (a CPU cell takes none, always)."""
        wanted = self.wants(spec)
        if self.visible is None or wanted == 0:
            return ()
        if wanted > len(self.free):
            return None
        taken, self.free = tuple(self.free[:wanted]), self.free[wanted:]
        return taken

    def give(self, gpus: tuple[int, ...]) -> None:
        self.free = sorted({*self.free, *gpus}, key=(self.visible or []).index)

    def parameters(self, spec: CellSpec, gpus: tuple[int, ...]) -> dict[str, Any]:
        """submitit's gpus_per_node and visible_gpus: the held GPUs (a CPU cell: none, an empty
        CUDA_VISIBLE_DEVICES); without a pool, no visible_gpus: submitit numbers from 0."""
        if self.visible is None:
            return {"gpus_per_node": self.wants(spec)}
        return {"gpus_per_node": len(gpus), "visible_gpus": gpus}


def local_executor(out_dir: Path) -> submitit.LocalExecutor:
    """submitit's LocalExecutor itself: AutoExecutor does not pass `visible_gpus` through."""
    return submitit.LocalExecutor(folder=out_dir / "submitit" / "%j")


def finish_lost(spec: CellSpec, job: submitit.Job | None, reason: str, status: Status | None = None) -> Record:
    """Write the record of a job that ended without writing its own final one: `status`, where the sweep itself
    stopped it; else `cancelled` for a cell that never started, `killed` for a job that died. A record its job
    ended first stays as it is (write_record refuses to replace a settled one), and is what comes back."""
    record = read_record(spec.cell_dir)
    if record is None or record.status == UNREADABLE:
        record = spec.new_record(status=Status.RUNNING, attempt=record.attempt if record else 1)
    if record.status not in UNFINISHED:
        return record
    record.status = status or (Status.CANCELLED if record.status == Status.PENDING and job is None else Status.KILLED)
    record.error = reason
    record.ended_at = now()
    if job is not None:
        record.job_id = record.job_id or str(job.job_id)
        texts = [job.stderr() or "", job.stdout() or ""]
        record.log_tail = tail("\n".join(t for t in texts if t), spec.parse["tail_lines"]) or None
        record.logs = {**record.logs, "job_stderr": str(job.paths.stderr), "job_stdout": str(job.paths.stdout)}
    if not write_record(spec.cell_dir, record):  # the job wrote its own ending meanwhile
        return read_record(spec.cell_dir) or record
    return record


def collect_result(spec: CellSpec, job: submitit.Job) -> Record:
    try:
        return job.result()
    except Exception as exc:  # the job process died: submitit says why, the record may be unfinished
        first = str(exc).strip().splitlines()
        return finish_lost(spec, job, f"the job ended without a record: {first[0] if first else exc!r}")


@dataclass(frozen=True)
class LocalLauncher:
    """`launcher=local` (conf/launcher/local.yaml): submitit's LocalExecutor on this machine, `parallel` cells at
    once; the sweep follows them to the end."""

    parallel: int = 1
    poll_s: float = 1.0

    @classmethod
    def from_config(cls, launcher: Any) -> LocalLauncher:
        settings = typed_launcher(launcher)
        return cls(parallel=settings.parallel, poll_s=settings.poll_s)

    def launch(self, specs: list[CellSpec], refused: list[Record], out_dir: Path, what: str, console: Console,
               wait: bool = False, force: bool = False) -> int:
        """Run the cells to the end (`wait` is what it does anyway; `force` has no job of an earlier sweep to
        cancel: out_dir's lock says no other sweep runs)."""
        records = refused + sweep_local(specs, out_dir, self.parallel, self.poll_s, console)
        console.print(f"[bold]done:[/] {summarize(records)}")
        return exit_code(records)


def sweep_local(specs: list[CellSpec], out_dir: Path, parallel: int, poll_s: float,
                console: Console | None = None) -> list[Record]:
    """Run the cells through submitit's local executor, at most `parallel` at once, in matrix order; each GPU
    cell holds GPUs of its own (GpuPool), so a GPU cell waits for a free one while CPU cells behind it may take
    the other slots."""
    console = console or stderr_console()
    executor = local_executor(out_dir)
    attempts = {spec.id: prepare(spec) for spec in specs}
    queue = list(specs)
    running: dict[str, tuple[CellSpec, submitit.Job]] = {}
    held: dict[str, tuple[int, ...]] = {}
    pool = GpuPool(visible_gpus())
    results: list[Record] = []
    counts: Counter[str] = Counter()
    waiting = 0
    with console_progress(console) as progress:
        task = progress.add_task("sweep", total=len(specs), counts="")
        try:
            while queue or running:
                while queue and len(running) < max(parallel, 1):
                    taken = next(((s, g) for s in queue if (g := pool.take(s)) is not None), None)
                    if taken is None:
                        break
                    spec, gpus = taken
                    queue.remove(spec)
                    executor.update_parameters(timeout_min=job_timeout_min(spec), **pool.parameters(spec, gpus))
                    try:
                        with _stderr_into(out_dir / "submitit" / CONTROLLER_LOG):
                            job = executor.submit(run_cell, spec, attempts[spec.id])
                    except BaseException:
                        pool.give(gpus)
                        raise
                    running[spec.id], held[spec.id] = (spec, job), gpus
                    on = f", GPU {','.join(map(str, gpus))}" if gpus else ""
                    progress.console.print(f"[dim]started[/] {escape(spec.id)} [dim](job {job.job_id}{on})[/]")
                now_waiting = sum(1 for s in queue if pool.wants(s)) if len(running) < max(parallel, 1) else 0
                if now_waiting != waiting:
                    waiting = now_waiting
                    if waiting:
                        busy = ",".join(str(g) for gpus in held.values() for g in gpus)
                        progress.console.print(f"[dim]waiting for a free GPU:[/] {waiting} cells [dim](GPUs {busy} "
                                               "held)[/]")
                    progress.update(task, counts=_counts(counts, waiting))
                for cell_id, (spec, job) in list(running.items()):
                    if job.done():
                        del running[cell_id]
                        pool.give(held.pop(cell_id))
                        record = collect_result(spec, job)
                        results.append(record)
                        counts[record.status] += 1
                        progress.console.print(describe(record))
                        progress.update(task, advance=1, counts=_counts(counts, waiting))
                if running:
                    time.sleep(poll_s)
        except (KeyboardInterrupt, OSError) as exc:
            why = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"stopped ({exc.strerror or exc})"
            progress.console.print(f"[yellow]{escape(f'the sweep was {why}: cancelling the running cells')}[/]")
            stop_jobs([job for _, job in running.values()])
            settled: list[Record] = []
            for spec, job in running.values():
                _settle_quietly(settled, spec, job, f"the sweep was {why}", Status.CANCELLED)
            for spec in queue:
                _settle_quietly(settled, spec, None, f"the sweep was {why} before this cell started")
            results.extend(settled)
            if isinstance(exc, KeyboardInterrupt):  # the count: the records that say so now, as `status` shows
                raise Interrupted([r.cell for r in settled if r.status == Status.CANCELLED]) from None
            raise
    return results


def _counts(counts: Counter[str], waiting: int) -> str:
    """The progress line's counts, and how many cells wait for a free GPU."""
    return "  ".join(filter(None, (counts_text(counts), f"[dim]waiting for a GPU {waiting}[/]" if waiting else "")))


@contextmanager
def _stderr_into(path: Path) -> Iterator[None]:
    """Point file descriptor 2 at `path` while a job's submitit controller starts, so it inherits that instead
    of the terminal: a Ctrl-C reaches the controller too, and its KeyboardInterrupt traceback belongs in a log."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(path, "ab") as log:
            os.dup2(log.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def stop_jobs(jobs: list[submitit.Job], grace_s: float = KILL_GRACE_S + 5) -> None:
    """Stop running local jobs for real, whatever SIGINT's disposition is. submitit's `cancel` sends SIGINT to a
    job's controller, which a sweep started in a script's background (`sweep ... &`: bash starts it with SIGINT
    ignored) passes on ignored, and the job and its exporter ran on. SIGTERM instead: the controller forwards it
    to the job, which stops its step's process group and records `cancelled`. Whatever of a job's processes is
    left after `grace_s` (the job's own grace to its step, and a margin) is killed with the process groups it
    leads, the exporter's among them, so no job outlives the sweep to write its ending later."""
    live = [job for job in jobs if not job.done()]
    trees = {job.job_id: process_tree(int(job.job_id)) for job in live}  # before anything ends and is reparented
    for job in live:
        try:
            os.kill(int(job.job_id), signal.SIGTERM)  # not yet reaped (done() polls): still the controller
        except ProcessLookupError:
            pass
    _wait_quietly(live, grace_s)
    for job in live:
        kill_tree([*trees[job.job_id], *(process_tree(int(job.job_id)) if not job.done() else [])])
    _wait_quietly(live, 5)


def _settle_quietly(results: list[Record], spec: CellSpec, job: submitit.Job | None, reason: str,
                    status: Status | None = None) -> None:
    """finish_lost where the disk may be full: a record that cannot be written now stays `pending`/`running`,
    owned by this sweep, and is settled by the next status, sweep or rerun (owner.py)."""
    try:
        results.append(finish_lost(spec, job, reason, status))
    except OSError:
        pass


def _wait_quietly(jobs: list[submitit.Job], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not all(job.done() for job in jobs) and time.monotonic() < deadline:
        time.sleep(0.2)
