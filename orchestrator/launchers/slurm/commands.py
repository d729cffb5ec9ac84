"""The CLI's Slurm entry points: the launcher of `sweep launcher=slurm` (submit, then return or wait) and
`export-matrix wait`."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from ...config import ConfigError
from ...config.schema import SlurmLauncherConf, typed_launcher
from ...config.spec import CellSpec
from ...console import exit_code, stderr_console, summarize
from ...record import Record
from .active import leave_active
from .follow import CellState, wait_for
from .manifest import MANIFEST, manifest_path
from .submit import submit_sweep


@dataclass(frozen=True)
class SlurmLauncher:
    """`launcher=slurm` (conf/launcher/slurm.yaml): job arrays through submitit; the sweep returns once they are
    submitted, or follows them to the end with --wait."""

    settings: SlurmLauncherConf

    @classmethod
    def from_config(cls, launcher: Any) -> SlurmLauncher:
        missing = [tool for tool in ("sbatch", "srun", "sacct") if shutil.which(tool) is None]
        if missing:
            raise ConfigError(f"launcher=slurm needs {', '.join(missing)} on PATH (no Slurm client here)")
        return cls(typed_launcher(launcher))

    def launch(self, specs: list[CellSpec], refused: list[Record], out_dir: Path, what: str, console: Console,
               wait: bool = False, force: bool = False) -> int:
        """Submit, write the manifest, and return (or follow the cells with `wait`)."""
        out_dir = Path(out_dir).absolute()
        wanted = [s.id for s in specs]
        specs, skipped = leave_active(specs, out_dir, force, console)
        done = submit_sweep(specs, out_dir, self.settings, what, console)
        submitted = sum(a["cells"] for a in done.arrays)
        console.print(f"[bold]submitted:[/] {submitted} cells in {len(done.arrays)} job arrays (sweep "
                      f"{done.sweep_id})" + (f"; {len(skipped)} cells still pending or running were left alone"
                                            if skipped else "") + f"; manifest {manifest_path(out_dir)}")
        if not wait:
            console.print(f"follow it with `export-matrix status out_dir={out_dir}` or `export-matrix wait "
                          f"out_dir={out_dir}`")
            return exit_code(refused + done.refused)
        cells = wait_for(out_dir, self.settings.poll_s, console, wanted)
        records = [c.record for c in cells if c.record] + refused + done.refused
        console.print(f"[bold]done:[/] {summarize(records)}")
        return exit_code(records)


def wait_command(out_dir: Path, poll_s: float | None, show: Callable[[list[CellState]], object]) -> int:
    """`export-matrix wait`: follow the manifest's cells until all ended, then `show` the last poll's states (the
    CLI's status table, which then asks Slurm no second time)."""
    console = stderr_console()
    if not manifest_path(out_dir).exists():
        console.print(escape(f"no Slurm sweep under {out_dir} ({MANIFEST} is missing)"))
        return 2
    try:
        cells = wait_for(out_dir, poll_s, console)
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        console.print(f"[red]{escape(f'export-matrix: error: could not ask Slurm about the jobs: {exc}')}[/]")
        return 2
    show(cells)
    return exit_code(c.record for c in cells if c.record)
