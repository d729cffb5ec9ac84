"""The body of a cell's Slurm job: `run_cell` under submitit, with its own answer to Slurm's USR2.

It runs on the compute node (submitit pickles it by this module's path), apart from the submitting side.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

import submitit
from submitit.core.utils import DelayedSubmission, UncompletedJobError

from ...config.spec import CellSpec
from ...job import Preempted, now, run_cell
from ...record import Record, Status, read_record, write_record

# Slurm may send the --signal up to 60 s before the time it was asked for.
SIGNAL_SLACK_S = 90


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

    def __call__(self) -> Record:
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

    def _give_up(self) -> Record:
        spec = self.spec
        record = read_record(spec.cell_dir) or spec.new_record()
        record.status, record.requeues, record.ended_at = Status.FAILED, self.requeues, now()
        record.attempt, record.fixes = self.attempt, list(spec.fixes)
        record.error = (f"Slurm ran the job {self.requeues + 1} times (preemption or node failure); "
                        f"max_requeues={self.max_requeues}")
        write_record(spec.cell_dir, record, replaces_settled=True)  # the same job, run once too often
        return record
