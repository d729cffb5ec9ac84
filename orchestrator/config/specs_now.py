"""The specs the current config gives cells already named by id: what a rerun runs and what stale marks compare."""

from __future__ import annotations

from pathlib import Path

from ..cell_id import CellId
from . import ConfigError, compose_config
from .spec import CellSpec


def covering(cell_ids: list[str]) -> list[str]:
    """Overrides for a matrix that holds every one of these cells (and is filtered to them afterwards)."""
    axes: list[list[str]] = [[], [], []]
    for cell_id in cell_ids:
        for axis, name in zip(axes, CellId.parse(cell_id), strict=True):
            if name not in axis:
                axis.append(name)
    policies, gpus, builds = (",".join(a) for a in axes)
    return [f"matrix.policies=[{policies}]", f"matrix.gpus=[{gpus}]", f"matrix.torch=[{builds}]",
            "matrix.include=[]", "matrix.exclude=[]"]


def current_specs(cell_ids: list[str], overrides: list[str], config_dir: Path | None,
                  fingerprinted: bool = True) -> dict[str, CellSpec]:
    """The specs the current config gives these cells, fingerprinted (which asks each installed interpreter for
    its distributions) unless `fingerprinted` is False."""
    from .cells import resolve

    if not cell_ids:
        return {}
    try:
        matrix = covering(cell_ids)  # parses every id
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    composed = compose_config([*overrides, *matrix], config_dir)
    wanted = set(cell_ids)
    return {s.id: s for s in resolve(composed, with_fingerprints=fingerprinted) if s.id in wanted}
