"""Before submitting: build the environments that torch-build recipes declare and that are not built yet.

A build that fails gives each of its cells an `error` record (failed_step `env`) instead of a job.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from ..config.spec import CellSpec
from ..envs import EnvBuildError, build_env_logged
from ..job import refuse
from ..record import Record, start_attempt


def build_missing_envs(specs: list[CellSpec], console: Console) -> tuple[list[CellSpec], list[Record]]:
    """The specs whose environment is ready, and the records of those whose environment failed to build."""
    failed: dict[str, str] = {}
    for recipe in {s.recipe.path: s.recipe for s in specs if s.recipe}.values():
        name = recipe.name
        if recipe.built:
            continue
        console.print(escape(f"building the environment of torch build {name} in {recipe.path} (uv)"))
        try:
            build_env_logged(recipe)
        except EnvBuildError as exc:
            failed[name] = str(exc)
            console.print(f"[red]{escape(f'torch build {name}: {exc}')}[/]")
    refused = [s for s in specs if s.recipe and s.recipe.name in failed]
    records = [refuse(s, start_attempt(s.cell_dir), "env", failed[s.recipe.name]) for s in refused]
    return [s for s in specs if s not in refused], records
