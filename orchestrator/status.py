"""`export-matrix status`: the recorded cells as a table, stale ones marked.

Where a Slurm sweep left `DIR/manifest.json`, every job in it is asked about in one `sacct` call; jobs that ended
without finishing their record get one from Slurm's state and their log (orchestrator/slurm/), and cells whose
job is still pending or running show that.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .config import selected, split_selection
from .launch import STATUS_STYLE
from .selection import current_specs, is_stale, recorded

SHOWN_STYLE = {**STATUS_STYLE, "pending": "dim", "running": "cyan", "requeued": "cyan", "suspended": "dim"}


def show_status(out_dir: Path, overrides: list[str], config_dir: Path | None) -> int:
    from .slurm.follow import poll
    from .slurm.manifest import manifest_path

    errors = Console(stderr=True)
    jobs = {}
    if manifest_path(out_dir).exists():
        try:
            jobs = {c.cell: c for c in poll(out_dir)}
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            why = escape(f"could not ask Slurm about the sweep's jobs ({exc}); showing the records")
            errors.print(f"[yellow]{why}[/]")
    overrides, selection = split_selection(overrides)
    records = {c: r for c, r in recorded(out_dir).items() if selected(c, selection)}
    jobs = {c: state for c, state in jobs.items() if selected(c, selection)}
    for cell_id, state in jobs.items():  # poll wrote the records it settled; a cell may have none yet
        if state.record is not None:
            records[cell_id] = state.record
    cells = sorted(set(records) | set(jobs))
    if not cells:
        errors.print(escape(f"no records under {out_dir}/cells/"))
        return 0
    specs = current_specs(sorted(records), [o for o in overrides if not o.startswith("matrix")], config_dir)
    shown: Counter[str] = Counter()
    table = Table(title=f"{len(cells)} cells under {out_dir}")
    columns = ("cell", "status", "attempt", "step", "max_diff / tol", *(("job", "slurm") if jobs else ()), "stale")
    for column in columns:
        table.add_column(column)
    for cell_id in cells:
        record, job = records.get(cell_id) or {}, jobs.get(cell_id)
        status = job.shown if job else record.get("status", "missing")
        shown[status] += 1
        diff = f"{record['max_diff']:.2e} / {record['tolerance']:g}" if record.get("max_diff") is not None else ""
        stale = "stale" if cell_id in specs and record and is_stale(record, specs[cell_id]) else ""
        slurm = ()
        if jobs:
            state = job.job.state if job and job.job else ("SUBMITTED" if job and job.active else "")
            slurm = ((job.entry or {}).get("job_id", "") if job else "", state)
        table.add_row(escape(cell_id), f"[{SHOWN_STYLE.get(status, 'white')}]{escape(status)}[/]",
                      str(record.get("attempt", "")), escape(record.get("failed_step") or ""), diff,
                      *(escape(str(s)) for s in slurm), f"[yellow]{stale}[/]")
    table.caption = "  ".join(f"{n} {s}" for s, n in sorted(shown.items()))
    Console(width=None if sys.stdout.isatty() else 200).print(table)
    return 0

