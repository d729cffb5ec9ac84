"""Launch one submitit job per cell and follow them to the end, with progress on the terminal.

Every cell gets a `pending` record before its job is submitted, and every job that ends without finishing its
own record (killed, lost, cancelled before it started) gets one from what submitit knows, so nothing is lost.
"""

from __future__ import annotations

import os
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

from ..console import counts_text, describe, exit_code, stderr_console, summarize
from ..console import progress as console_progress
from ..job import now, run_cell
from ..logparse import tail
from ..record import UNFINISHED, UNREADABLE, Record, Status, read_record, write_record
from ..schema import typed_launcher
from ..spec import CellSpec
from .common import Interrupted, gpus_requested, job_timeout_min, prepare

CONTROLLER_LOG = "controllers.log"  # what submitit's job controllers print (their own tracebacks on Ctrl-C)


def local_gpu_parameters(spec: CellSpec) -> dict[str, Any]:
    """submitit's local executor sets CUDA_VISIBLE_DEVICES from gpus_per_node (none: an empty list, which hides
    every GPU), counting from the GPUs this process may see."""
    visible = [int(i) for i in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if i.strip().isdigit()]
    gpus = gpus_requested(spec)
    if visible and gpus > len(visible):
        gpus = len(visible)
    return {"gpus_per_node": gpus, **({"visible_gpus": tuple(visible)} if visible else {})}


def local_executor(out_dir: Path) -> submitit.LocalExecutor:
    """submitit's LocalExecutor itself: AutoExecutor does not pass `visible_gpus` through."""
    return submitit.LocalExecutor(folder=out_dir / "submitit" / "%j")


def finish_lost(spec: CellSpec, job: submitit.Job | None, reason: str) -> Record:
    """Write the record of a job that ended without writing its own final one."""
    record = read_record(spec.cell_dir)
    if record is None or record.status == UNREADABLE:
        record = spec.new_record(status=Status.RUNNING, attempt=record.attempt if record else 1)
    if record.status not in UNFINISHED:
        return record
    record.status = Status.CANCELLED if record.status == Status.PENDING and job is None else Status.KILLED
    record.error = reason
    record.ended_at = now()
    if job is not None:
        record.job_id = record.job_id or str(job.job_id)
        texts = [job.stderr() or "", job.stdout() or ""]
        record.log_tail = tail("\n".join(t for t in texts if t), spec.parse["tail_lines"]) or None
        record.logs = {**record.logs, "job_stderr": str(job.paths.stderr), "job_stdout": str(job.paths.stdout)}
    write_record(spec.cell_dir, record)
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
    """Run the cells through submitit's local executor, at most `parallel` at once, in matrix order."""
    console = console or stderr_console()
    executor = local_executor(out_dir)
    attempts = {spec.id: prepare(spec) for spec in specs}
    queue = list(specs)
    running: dict[str, tuple[CellSpec, submitit.Job]] = {}
    results: list[Record] = []
    counts: Counter[str] = Counter()
    with console_progress(console) as progress:
        task = progress.add_task("sweep", total=len(specs), counts="")
        try:
            while queue or running:
                while queue and len(running) < max(parallel, 1):
                    spec = queue.pop(0)
                    executor.update_parameters(timeout_min=job_timeout_min(spec), **local_gpu_parameters(spec))
                    with _stderr_into(out_dir / "submitit" / CONTROLLER_LOG):
                        job = executor.submit(run_cell, spec, attempts[spec.id])
                    running[spec.id] = (spec, job)
                    progress.console.print(f"[dim]started[/] {escape(spec.id)} [dim](job {job.job_id})[/]")
                for cell_id, (spec, job) in list(running.items()):
                    if job.done():
                        del running[cell_id]
                        record = collect_result(spec, job)
                        results.append(record)
                        counts[record.status] += 1
                        progress.console.print(describe(record))
                        progress.update(task, advance=1, counts=counts_text(counts))
                if running:
                    time.sleep(poll_s)
        except (KeyboardInterrupt, OSError) as exc:
            why = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"stopped ({exc.strerror or exc})"
            progress.console.print(f"[yellow]{escape(f'the sweep was {why}: cancelling the running cells')}[/]")
            for _, job in running.values():
                job.cancel(check=False)
            for spec, job in running.values():
                _wait_quietly(job, 30)
                _settle_quietly(results, spec, job, f"the sweep was {why}")
            for spec in queue:
                _settle_quietly(results, spec, None, f"the sweep was {why} before this cell started")
            if isinstance(exc, KeyboardInterrupt):
                raise Interrupted([*running, *(spec.id for spec in queue)]) from None
            raise
    return results


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


def _settle_quietly(results: list[Record], spec: CellSpec, job: submitit.Job | None, reason: str) -> None:
    """finish_lost where the disk may be full: a record that cannot be written now stays `pending`/`running`,
    owned by this sweep, and is settled by the next status, sweep or rerun (owner.py)."""
    try:
        results.append(finish_lost(spec, job, reason))
    except OSError:
        pass


def _wait_quietly(job: submitit.Job, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not job.done() and time.monotonic() < deadline:
        time.sleep(0.5)
