"""The launchers, behind one call: the launcher config picks `local` (submitit's LocalExecutor on this machine,
local.py) or `slurm` (job arrays through submitit, slurm/); both start a cell the same way (common.py).

`launcher_for(cfg.launcher)` checks the launcher's settings before anything is written; its `launch(specs,
refused, out_dir, what, console, wait, force)` runs or submits the cells and returns the exit status.
"""

from __future__ import annotations

from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from rich.console import Console

    from ..config.spec import CellSpec
    from ..record import Record

# name -> (module, class): imported when chosen, so `cells` or `status` never load a launcher they do not use
LAUNCHERS = {"local": (".local", "LocalLauncher"), "slurm": (".slurm.commands", "SlurmLauncher")}


class Launcher(Protocol):
    def launch(self, specs: list[CellSpec], refused: list[Record], out_dir: Path, what: str, console: Console,
               wait: bool = False, force: bool = False) -> int: ...


def launcher_for(launcher: Any) -> Launcher:
    """The launcher the config names, its settings checked (a one-line ConfigError otherwise)."""
    from ..config.schema import launcher_name

    module, cls = LAUNCHERS[launcher_name(launcher)]
    return getattr(import_module(module, __name__), cls).from_config(launcher)
