"""`export-matrix status`: the recorded cells as a table, stale ones marked.

Where a Slurm sweep left `DIR/manifest.json`, every job in it is asked about in one `sacct` call; jobs that ended
without finishing their record get one from Slurm's state and their log (orchestrator/launchers/slurm/), and cells whose
job is still pending or running show that. Stale marks come from fingerprint keys cached by their inputs
(fingerprint_cache.py) and, after a LeRobot bump, the files each cell loaded (config/staleness.py), each with why
(`stale (config changed)`, `stale (lerobot/policies/act/modeling_act.py changed)`), and the table is plain aligned
text: a rich Table takes seconds for thousands of rows.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from ..config import selected, split_selection
from ..config.fingerprint_cache import current_fingerprints
from ..config.selection import recorded
from ..config.staleness import stale_reasons
from ..console import aligned, stderr_console

if TYPE_CHECKING:
    from ..launchers.slurm.follow import CellState


def show_status(out_dir: Path, overrides: list[str], config_dir: Path | None,
                polled: list[CellState] | None = None) -> int:
    """`polled`: the cells' states a caller (wait) has just asked Slurm for, so the table asks no second time."""
    from ..launchers.slurm.follow import poll
    from ..launchers.slurm.manifest import manifest_path

    errors = stderr_console()
    overrides, selection = split_selection(overrides)
    every = recorded(out_dir)  # read once: poll settles ended jobs from these
    jobs = {}
    if polled is not None:
        jobs = {c.cell: c for c in polled}
    elif manifest_path(out_dir).exists():
        try:
            jobs = {c.cell: c for c in poll(out_dir, records=every)}
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            why = escape(f"could not ask Slurm about the sweep's jobs ({exc}); showing the records")
            errors.print(f"[yellow]{why}[/]")
    records = {c: r for c, r in every.items() if selected(c, selection)}
    jobs = {c: state for c, state in jobs.items() if selected(c, selection)}
    for cell_id, state in jobs.items():  # poll wrote the records it settled; a cell may have none yet
        if state.record is not None:
            records[cell_id] = state.record
    cells = sorted(set(records) | set(jobs))
    if not cells:
        errors.print(escape(f"no records under {out_dir}/cells/"))
        return 0
    current = current_fingerprints(out_dir, sorted(records), [o for o in overrides if not o.startswith("matrix")],
                                   config_dir)
    reasons = stale_reasons(out_dir, {c: r for c, r in records.items() if r is not None}, current)
    shown: Counter[str] = Counter()
    columns = ["cell", "status", "attempt", "step", "max_diff / tol", *(("job", "slurm") if jobs else ()), "stale"]
    rows: list[list[str]] = []
    for cell_id in cells:
        record, job = records.get(cell_id), jobs.get(cell_id)
        status = job.shown if job else str(record.status) if record else "missing"
        shown[status] += 1
        diff = f"{record.max_diff:.2e} / {record.tolerance:g}" if record and record.max_diff is not None else ""
        stale = f"stale ({reasons[cell_id]})" if cell_id in reasons else ""
        slurm: tuple[str, ...] = ()
        if jobs:
            state = job.job.state if job and job.job else ("SUBMITTED" if job and job.active else "")
            slurm = (job.entry.job_id if job and job.entry else "", state)
        attempt, step = (str(record.attempt), record.failed_step or "") if record else ("", "")
        rows.append([cell_id, status, attempt, step, diff, *(str(s) for s in slurm), stale])
    caption = "  ".join(f"{n} {s}" for s, n in sorted(shown.items()))
    table = aligned(f"{len(cells)} cells under {out_dir}", columns, rows, caption)
    out = Console(width=None if sys.stdout.isatty() else 200)
    if out.color_system is None:  # piped: the plain text, without rich rendering every span of every row
        sys.stdout.write(table.plain + "\n")
    else:
        out.print(table, soft_wrap=True)
    return 0
