"""Before submitting: build the environments that torch-build recipes declare and that are not built yet.

A build that fails gives each of its cells an `error` record (failed_step `env`) instead of a job.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console

from .envs import EnvBuildError, build_env
from .job import now
from .record import Record, start_attempt, write_record
from .spec import CellSpec


def build_missing_envs(specs: list[CellSpec], console: Console) -> tuple[list[CellSpec], list[dict[str, Any]]]:
    """The specs whose environment is ready, and the records of those whose environment failed to build."""
    failed: dict[str, str] = {}
    for recipe in {s.recipe.path: s.recipe for s in specs if s.recipe}.values():
        name = recipe.name
        if recipe.built:
            continue
        console.print(f"building the environment of torch build {name} in {recipe.path} (uv)")
        log_path = recipe.envs_dir / f"{recipe.path.name}.log"
        recipe.envs_dir.mkdir(parents=True, exist_ok=True)
        try:
            with open(log_path, "w") as log:
                build_env(recipe, log)
        except EnvBuildError as exc:
            failed[name] = f"{exc} (log: {log_path})"
            console.print(f"[red]torch build {name}: {exc}[/]")
    refused = [s for s in specs if s.recipe and s.recipe.name in failed]
    return [s for s in specs if s not in refused], [_refuse(s, failed[s.recipe.name]) for s in refused]


def _refuse(spec: CellSpec, reason: str) -> dict[str, Any]:
    record = Record(cell=spec.id, policy=spec.policy, gpu=spec.gpu, torch=spec.torch, exporter=spec.exporter,
                    status="error", attempt=start_attempt(spec.cell_dir), failed_step="env", error=reason,
                    fixes=list(spec.fixes), started_at=now(), ended_at=now(), fingerprint=spec.fingerprint)
    write_record(spec.cell_dir, record)
    return record.to_dict()
