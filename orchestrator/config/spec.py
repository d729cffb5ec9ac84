"""A cell's job spec: plain data that submitit pickles, importable without Hydra (jobs start fast)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..cell_id import CellId
from ..envs import EnvRecipe
from ..record import Record

PACKAGE_DIR = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class CellSpec:
    """Everything a job needs, as plain data: it is pickled by submitit and read on another machine."""

    policy: str
    gpu: str
    torch: str
    exporter: str
    python: str
    command: list[str]
    checkpoint: dict[str, Any]
    task: str | None
    export_args: list[str]
    timeout_min: float
    env: dict[str, str]
    fixes: list[str]
    slurm: dict[str, Any]
    parse: dict[str, Any]
    out_dir: str
    ckpt_dir: str
    configs: dict[str, Any] = field(default_factory=dict)
    recipe: EnvRecipe | None = None  # the environment the sweep builds before submitting, if not built
    fingerprint: dict[str, Any] = field(default_factory=dict)
    repeat: dict[str, Any] = field(default_factory=lambda: {"band": [0.8, 1.25], "runs": 1})
    requires_cuda: bool = False  # the exporter needs a CUDA device: without one the cell is an `error` at once
    tolerance: float | None = None  # the policy config's, for the exporter's `{tolerance}` part (left out if None)
    gpu_needs: dict[str, str] = field(default_factory=dict)  # the gpu config's capability and name: checked by the job

    @property
    def id(self) -> str:
        return str(CellId(self.policy, self.gpu, self.torch))

    @property
    def cell_dir(self) -> Path:
        return cell_dir(self.out_dir, self.id)

    def new_record(self, **fields: Any) -> Record:
        """A record of this cell: its names and fixes, plus the given fields."""
        return Record(cell=self.id, policy=self.policy, gpu=self.gpu, torch=self.torch, exporter=self.exporter,
                      fixes=list(self.fixes), **fields)


def cell_dir(out_dir: Path | str, cell_id: str) -> Path:
    return CellId.parse(cell_id).dir(out_dir)
