"""What collect needs from the composed config: knobs, labels, build fixes, table order and the catalog."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .catalog import Catalog

DEFAULTS = {"at_limit": 0.9, "slow_below": 1.0, "margin_move": 0.1, "read_threads": 1}


@dataclass
class Settings:
    catalog: Catalog
    out_dir: Path = Path("matrix_out")
    at_limit: float = DEFAULTS["at_limit"]
    slow_below: float = DEFAULTS["slow_below"]
    margin_move: float = DEFAULTS["margin_move"]
    read_threads: int = DEFAULTS["read_threads"]
    gpu_labels: dict[str, str] = field(default_factory=dict)    # name -> table header ("A100 80GB (sm_80)")
    gpu_shorts: dict[str, str] = field(default_factory=dict)  # a split column (columns.py) -> how lines name it
    table_by: str = "gpu"  # one column per GPU, or per GPU and build (columns.py)
    build_fixes: dict[str, list[str]] = field(default_factory=dict)  # torch build -> its fixes, from the config
    policies: list[str] = field(default_factory=list)  # table order; recorded ones not listed follow, sorted
    gpus: list[str] = field(default_factory=list)
    builds: list[str] = field(default_factory=list)
    expected: list[tuple[str, str]] = field(default_factory=list)  # policy x gpu the matrix names ("—" if none)
    gpu_exporters: dict[str, str] = field(default_factory=dict)  # GPU -> its default exporter (conf/gpu)
    policy_exporters: dict[str, str] = field(default_factory=dict)  # policy -> its own exporter, where it has one
    exporter_choice: str | None = None  # collect's `exporter=NAME` (what a missing cell would run with), else None
    rerun_args: list[str] = field(default_factory=list)  # collect's --config-dir, matrix and out_dir: a rerun's too
    stale_args: list[str] = field(default_factory=list)  # collect's --config-dir and every override: rerun --stale's

    def gpu_label(self, gpu: str) -> str:
        return self.gpu_labels.get(gpu) or gpu

    def default_exporter(self, policy: str, gpu: str) -> str | None:
        """The exporter a cell gets without `exporter=` (its policy's own, else its GPU's); None if unknown."""
        return self.policy_exporters.get(policy) or self.gpu_exporters.get(gpu)

    def gpu_short(self, gpu: str) -> str:
        """The GPU's first word, as the seed writes it: "A100", "H100" (and a split column's build)."""
        if gpu in self.gpu_shorts:
            return self.gpu_shorts[gpu]
        label = self.gpu_labels.get(gpu)
        if not label and "@" in gpu:  # a split column's key (columns.py) the settings do not hold: as they would
            name, _, build = gpu.partition("@")
            return f"{self.gpu_short(name)}/{build}"
        return label.split()[0] if label else gpu.upper()
