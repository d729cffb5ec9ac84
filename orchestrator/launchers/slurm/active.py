"""Cells whose job from an earlier sweep is still pending or running: left alone, or cancelled with --force.

A second sweep must not submit a cell twice; this decides what goes to `submit_sweep`, which only submits.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from ...config.spec import CellSpec
from .follow import CellState, poll
from .manifest import manifest_path


def leave_active(specs: list[CellSpec], out_dir: Path, force: bool,
                 console: Console) -> tuple[list[CellSpec], list[str]]:
    """The cells to submit, and those left alone because their job is still active (none with `force`: their
    jobs are cancelled and their records settled first)."""
    if not manifest_path(out_dir).exists():
        return specs, []
    active = [c for c in poll(out_dir, sorted({s.id for s in specs})) if c.active]
    if active and force:
        _cancel(out_dir, active, console)
        return specs, []
    for c in active:
        console.print(f"[yellow]not submitted[/] {escape(c.cell)}: job {c.entry.job_id} is still "
                      f"{c.shown} (--force cancels it and submits the cell again)")
    skipped = {c.cell for c in active}
    return [s for s in specs if s.id not in skipped], sorted(skipped)


def _cancel(out_dir: Path, active: list[CellState], console: Console, timeout_s: float = 120) -> None:
    """scancel these cells' jobs, wait until Slurm has ended them, and settle their records."""
    ids = [c.entry.job_id for c in active]
    console.print(f"[yellow]--force:[/] cancelling {len(ids)} jobs still pending or running ({', '.join(ids)})")
    subprocess.run(["scancel", *ids], capture_output=True, text=True, timeout=120)
    deadline = time.monotonic() + timeout_s
    cells = [c.cell for c in active]
    while time.monotonic() < deadline:
        if not any(c.active for c in poll(out_dir, cells)):
            return
        time.sleep(1)
    console.print("[yellow]some cancelled jobs have not ended yet; submitting anyway[/]")
