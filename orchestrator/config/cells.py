"""Expand a composed matrix into cells (policy/gpu/torch) and resolve each into a self-contained job spec."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..envs import EnvRecipe, is_recipe, recipe_of
from . import Composed, ConfigError, axis_list, number, selected, to_plain
from .fingerprint import GPU_NEEDS, code_identity, env_identity, fingerprint
from .schema import AXES, check_axis, typed_launcher
from .spec import CellSpec

if TYPE_CHECKING:
    from omegaconf import DictConfig

AXIS_KEYS = ("policy", "gpu", "torch")


def matches(cell: dict[str, str], partial: dict[str, str]) -> bool:
    return all(cell[key] == value for key, value in partial.items())


def expand(matrix: DictConfig) -> list[dict[str, str]]:
    """The matrix's product, minus `exclude`, plus `include` (partial cells take the other axes' lists)."""
    axes = {"policy": axis_list(matrix, "policies"), "gpu": axis_list(matrix, "gpus"),
            "torch": axis_list(matrix, "torch")}
    cells = [dict(zip(AXIS_KEYS, combo, strict=True)) for combo in itertools.product(*axes.values())]
    for partial in (to_plain(p) for p in matrix.get("include") or []):
        lists = [[partial[k]] if k in partial else axes[k] for k in AXIS_KEYS]
        for combo in itertools.product(*lists):
            cell = dict(zip(AXIS_KEYS, combo, strict=True))
            if cell not in cells:
                cells.append(cell)
    for partial in (to_plain(p) for p in matrix.get("exclude") or []):
        kept = [cell for cell in cells if not matches(cell, partial)]
        if len(kept) == len(cells):
            raise ConfigError(f"exclude {partial} matches no cell of the matrix")
        cells = kept
    return cells


def recipes(composed: Composed) -> dict[str, EnvRecipe]:
    """The torch builds of the composed config that declare how to build their environment."""
    envs_dir = Path(composed.cfg.envs_dir).expanduser()
    builds = {name: to_plain(build) for name, build in composed.cfg.builds.items()}
    check_axis("builds", builds)  # env build and env list read recipes without resolving cells
    return {name: recipe_of(name, build, composed.config_dirs, envs_dir)
            for name, build in builds.items() if is_recipe(build)}


def resolve(composed: Composed, with_fingerprints: bool = False) -> list[CellSpec]:
    """One CellSpec per cell, with paths made absolute so a job can run from any directory.

    Fingerprints ask each build's interpreter for its distributions, so only commands that compare or record
    them ask for them.
    """
    cfg = composed.cfg
    for node in AXES:
        check_axis(node, to_plain(cfg.get(node)) or {})
    typed_launcher(cfg.launcher)
    exporter_choice = composed.choices.get("exporter")
    identities: dict[str, dict[str, Any]] = {}
    repeat = _repeat(to_plain(cfg.get("repeat")) or {})
    specs = []
    cells = [c for c in expand(cfg.matrix) if composed.selects(f"{c['policy']}/{c['gpu']}/{c['torch']}")]
    _check_selected(composed, [f"{c['policy']}/{c['gpu']}/{c['torch']}" for c in cells])
    built_from = recipes(composed)
    for cell in cells:
        policy = to_plain(cfg.policies[cell["policy"]])
        gpu = to_plain(cfg.gpus[cell["gpu"]])
        build = to_plain(cfg.builds[cell["torch"]])
        exporter_name = policy.get("exporter") or exporter_choice or gpu["exporter"]
        exporter = to_plain(cfg.exporters[exporter_name])
        _check_checkpoint(cell["policy"], policy.get("checkpoint"))
        recipe = built_from.get(cell["torch"])
        python = build.get("python") or (str(recipe.python) if recipe else sys.executable)
        if "/" in python:
            python = str(Path(python).expanduser().absolute())
        configs = {"policy": policy, "gpu": gpu, "torch": build, "exporter": exporter}
        if with_fingerprints and cell["torch"] not in identities:
            identities[cell["torch"]] = env_identity(python, recipe if not build.get("python") else None)
        env = {**_env(policy), **_env(gpu), **_env(build)}
        slurm = {**(gpu.get("slurm") or {}), **(policy.get("slurm") or {})}
        specs.append(
            CellSpec(
                policy=cell["policy"],
                gpu=cell["gpu"],
                torch=cell["torch"],
                exporter=exporter_name,
                python=python,
                command=[str(part) for part in exporter["command"]],
                checkpoint=policy.get("checkpoint") or {},
                task=policy.get("task"),
                export_args=[str(a) for a in policy.get("export_args") or []],
                timeout_min=float(policy.get("timeout_min") or 60),
                env=env,
                fixes=list(build.get("fixes") or []),
                slurm={k: v for k, v in slurm.items() if v is not None},
                parse=to_plain(cfg.parse),
                out_dir=str(Path(cfg.out_dir).expanduser().absolute()),
                ckpt_dir=str(Path(cfg.ckpt_dir).expanduser().absolute()),
                configs=configs,
                recipe=recipe if not build.get("python") else None,
                fingerprint=fingerprint(configs, identities[cell["torch"]],
                                        code_identity(recipe if not build.get("python") else None))
                if with_fingerprints else {},
                requires_cuda=bool(exporter.get("requires_cuda")),
                repeat=repeat,
                tolerance=None if policy.get("tolerance") is None else float(policy["tolerance"]),
                gpu_needs={k: str(gpu[k]) for k in GPU_NEEDS if gpu.get(k)},
            )
        )
    return specs


def _repeat(node: dict[str, Any]) -> dict[str, Any]:
    band, runs = node.get("band", [0.8, 1.25]), node.get("runs", 1)
    if not (isinstance(band, list) and len(band) == 2 and all(isinstance(b, int | float) for b in band)
            and 0 <= band[0] <= band[1]):
        raise ConfigError(f"repeat.band must be [low, high] with 0 <= low <= high, got {band!r}")
    return {"band": [float(b) for b in band], "runs": int(number(runs, "repeat.runs", int, 1, True))}


def _env(node: dict[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in (node.get("env") or {}).items()}


def _check_selected(composed: Composed, cell_ids: list[str]) -> None:
    """Refuse a selection value that keeps no cell: `policy=tdmpc,vqbet` on a matrix without vqbet would
    otherwise run tdmpc alone and say nothing of vqbet."""
    unused = {axis: [p for p in patterns if not any(selected(cell_id, {axis: [p]}) for cell_id in cell_ids)]
              for axis, patterns in composed.selection.items()}
    chosen = " ".join(f"{axis}={','.join(p)}" for axis, p in unused.items() if p)
    if chosen:
        lists = "; ".join(f"{key}: {', '.join(axis_list(composed.cfg.matrix, key))}"
                          for key in ("policies", "gpus", "torch"))
        raise ConfigError(f"{chosen} selects no cell of matrix {composed.choices.get('matrix')} ({lists})")


def _check_checkpoint(policy: str, checkpoint: Any) -> None:
    if checkpoint is None:  # a standalone repro: no checkpoint
        return
    if not isinstance(checkpoint, dict) or len(checkpoint) != 1 or not ({"random", "path"} & checkpoint.keys()):
        raise ConfigError(f"policy {policy!r}: checkpoint must be {{random: {{type: ...}}}}, {{path: ...}} or null, "
                          f"got {checkpoint!r}")
    if "random" in checkpoint and not (checkpoint["random"] or {}).get("type"):
        raise ConfigError(f"policy {policy!r}: checkpoint.random needs a lerobot policy type")
