"""The CLI's Slurm entry points: `sweep launcher=slurm` (submit, then return or wait) and `export-matrix wait`."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from ..spec import CellSpec
from .active import leave_active
from .follow import wait_for
from .manifest import MANIFEST, manifest_path
from .submit import SlurmSettings, submit_sweep


def launch_slurm(specs: list[CellSpec], refused: list[dict[str, Any]], out_dir: Path, launcher: Any, what: str,
                 wait: bool, force: bool, console: Console) -> int:
    """`sweep launcher=slurm`: submit, write the manifest, and return (or follow the cells with `wait`)."""
    from ..config import ConfigError
    from ..console import summarize

    missing = [tool for tool in ("sbatch", "srun", "sacct") if shutil.which(tool) is None]
    if missing:
        raise ConfigError(f"launcher=slurm needs {', '.join(missing)} on PATH (no Slurm client here)")
    out_dir = Path(out_dir).absolute()
    settings = SlurmSettings.from_config(launcher)
    wanted = [s.id for s in specs]
    specs, skipped = leave_active(specs, out_dir, force, console)
    done = submit_sweep(specs, out_dir, settings, what, console)
    submitted = sum(a["cells"] for a in done.arrays)
    console.print(f"[bold]submitted:[/] {submitted} cells in {len(done.arrays)} job arrays (sweep {done.sweep_id})"
                  + (f"; {len(skipped)} cells still pending or running were left alone" if skipped else "")
                  + f"; manifest {manifest_path(out_dir)}")
    errors = [r for r in refused + done.refused if r["status"] == "error"]
    if not wait:
        console.print(f"follow it with `export-matrix status out_dir={out_dir}` or `export-matrix wait "
                      f"out_dir={out_dir}`")
        return 1 if errors else 0
    cells = wait_for(out_dir, settings.poll_s, console, wanted)
    records = [c.record for c in cells if c.record] + refused + done.refused
    console.print(f"[bold]done:[/] {summarize(records)}")
    return 1 if any(r["status"] == "error" for r in records) else 0


def wait_command(out_dir: Path, poll_s: float | None, overrides: list[str], config_dir: Path | None) -> int:
    """`export-matrix wait`: follow the manifest's cells until all ended, then show the status table."""
    from ..status import show_status

    console = Console(stderr=True)
    if not manifest_path(out_dir).exists():
        console.print(escape(f"no Slurm sweep under {out_dir} ({MANIFEST} is missing)"))
        return 2
    try:
        cells = wait_for(out_dir, poll_s, console)
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        console.print(f"[red]{escape(f'export-matrix: error: could not ask Slurm about the jobs: {exc}')}[/]")
        return 2
    show_status(out_dir, overrides, config_dir, polled=cells)  # the last poll's states: no second sacct
    return 1 if any(c.record and c.record["status"] == "error" for c in cells) else 0
