"""Everything collect takes from the config, decided in this one file: knobs, labels, build fixes, table order,
the catalog, the cells a selection keeps, which records are stale, and the arguments of the commands the table
prints. `settings_and_records` is the one call that composes (through the caches of config/), and it reads the
records; the rest of collect works from the Settings it returns and composes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import pandas as pd

from ..config import Composed, ConfigError, axis_list, compose_config, selected, to_plain
from ..config.config_cache import composed_out_dir, kept
from .catalog import Catalog, load_catalog
from .records import REPRO_EXPORTER, load_records
from .stale import stale_cells

EMPTY_MATRIX = ["matrix.policies=[]", "matrix.gpus=[]", "matrix.torch=[]", "matrix.include=[]", "matrix.exclude=[]"]

BY = ("gpu", "build")  # table.by: one column per GPU, or per GPU and build (columns.py)
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
    selection: dict[str, list[str]] = field(default_factory=dict)  # policy=, gpu=, torch=: the cells the table keeps
    stale: set[str] = field(default_factory=set)  # ids of the records made from other configs than today's
    stale_why: str | None = None  # why no record could be compared, where none could
    warnings: list[str] = field(default_factory=list)  # one line each, for stderr

    def selects(self, cell_id: str) -> bool:
        return not self.selection or selected(cell_id, self.selection)

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


def _plain_settings(composed: Composed, overrides: list[str]) -> dict[str, Any]:
    """What collect takes from the composed config, as JSON (config_cache.py keeps it)."""
    from ..config.cells import expand

    cfg = composed.cfg
    knobs = {**DEFAULTS, **(to_plain(cfg.get("collect")) or {})}
    by = str((to_plain(cfg.get("table")) or {}).get("by", "gpu"))
    if by not in BY:
        raise ConfigError(f"table.by={by} is not one of: {', '.join(BY)}")
    labels, fixes, exporters = _axes(cfg)
    own = {name: str(cfg.policies[name].get("exporter")) for name in cfg.get("policies") or {}
           if cfg.policies[name].get("exporter")}
    plain: dict[str, Any] = {
        "out_dir": str(cfg.out_dir), "at_limit": float(knobs["at_limit"]), "slow_below": float(knobs["slow_below"]),
        "margin_move": float(knobs["margin_move"]), "read_threads": int(knobs["read_threads"]),
        "table_by": by, "gpu_labels": labels, "gpus": list(labels), "build_fixes": fixes,
        "builds": list(fixes), "policies": [], "expected": [], "config_dirs": [str(d) for d in composed.config_dirs],
        "gpu_exporters": exporters, "policy_exporters": own, "exporter_choice": composed.choices.get("exporter"),
        "selection": composed.selection,
        "options": {axis: composed.options[axis] for axis in ("gpu", "torch", "exporter")}}
    if any(_group(o) == "matrix" for o in overrides):
        # only a matrix the user names says which cells should exist ("—" when they have no record)
        repros = {p for p in cfg.get("policies") or {} if cfg.policies[p].get("exporter") == REPRO_EXPORTER}
        plain["policies"] = [p for p in axis_list(cfg.matrix, "policies") if p not in repros]
        plain["expected"] = list(dict.fromkeys((c["policy"], c["gpu"]) for c in expand(cfg.matrix)
                                               if c["policy"] not in repros
                                               and composed.selects(f"{c['policy']}/{c['gpu']}/{c['torch']}")))
    return plain


def _here(path: Path | str) -> str:
    """A path as the printed commands give it: relative to the current folder where it is inside it (an absolute
    path there names this machine's folders), else as given."""
    given = Path(path).expanduser()
    if given.is_absolute():
        try:
            return str(given.relative_to(Path.cwd())) or "."
        except ValueError:
            pass
    return str(path)


def _pasteable(overrides: list[str], config_dir: Path | None) -> list[str]:
    """The overrides as a printed command carries them: `out_dir=` left out where it is the default out_dir, else
    relative to the current folder where it is inside it."""
    out = []
    for override in overrides:
        key, _, value = override.partition("=")
        if key.lstrip("+") == "out_dir" and value and "${" not in value:
            try:  # the config's out_dir, with the matrix emptied (as cli.out_dir_only does: the same cache key)
                default = composed_out_dir(EMPTY_MATRIX, config_dir)
            except ConfigError:
                default = None
            if default is not None and Path(value).expanduser().resolve() == default.expanduser().resolve():
                continue
            override = f"{key}={_here(value)}"
        out.append(override)
    return out


def _group(override: str) -> str:
    """The config key an override sets, to its first dot: `matrix` for `matrix.gpus=[h100]`."""
    return override.lstrip("+~").split("=", 1)[0].split(".", 1)[0]


def _axes(cfg) -> tuple[dict[str, str], dict[str, list[str]], dict[str, str]]:
    """The config's GPU labels, builds' fixes and GPUs' default exporters, in its order."""
    labels = {name: str(cfg.gpus[name].get("label") or name) for name in cfg.get("gpus") or {}}
    fixes = {name: [str(f) for f in (cfg.builds[name].get("fixes") or [])] for name in cfg.get("builds") or {}}
    exporters = {name: str(cfg.gpus[name].get("exporter")) for name in cfg.get("gpus") or {}
                 if cfg.gpus[name].get("exporter")}
    return labels, fixes, exporters


def _complete_axes(settings: Settings, plain: dict[str, Any], overrides: list[str], config_dir: Path | None,
                   recorded_gpus: list[str], recorded_builds: list[str]) -> None:
    """Labels and fixes of recorded GPUs and builds that the selected matrix does not name, where the config
    still knows them (otherwise the GPU's name is its header and the record's own fixes count)."""
    gpus = [g for g in recorded_gpus if g not in settings.gpus and g in plain["options"]["gpu"]]
    builds = [b for b in recorded_builds if b not in settings.builds and b in plain["options"]["torch"]]
    if not gpus and not builds:
        return
    # Only the axes' labels and fixes are wanted: no policies (composing them took most of a second).
    extra = [f"matrix.gpus=[{','.join([*settings.gpus, *gpus])}]",
             f"matrix.torch=[{','.join([*settings.builds, *builds])}]", "matrix.include=[]", "matrix.exclude=[]",
             "matrix.policies=[]"]
    try:
        labels, fixes, exporters = kept("collect_settings", overrides, config_dir, [Path(__file__)], extra,
                                        lambda: _axes(compose_config([*overrides, *extra], config_dir).cfg))
    except ConfigError:
        return
    settings.gpu_labels = {**labels, **settings.gpu_labels}
    settings.gpu_exporters = {**exporters, **settings.gpu_exporters}
    settings.gpus += [gpu for gpu in labels if gpu not in settings.gpus]
    settings.build_fixes = {**fixes, **settings.build_fixes}
    settings.builds += [build for build in fixes if build not in settings.builds]


def settings_and_records(overrides: list[str], config_dir: Path | None,
                         store: bool = True) -> tuple[Settings, pd.DataFrame, pd.DataFrame]:
    """The settings for these overrides, and the records they select (cells, history: records.load_records).
    Composed through Hydra only where the config changed since the last collect; the records decide which more
    is asked of the config (the labels of recorded GPUs and builds the matrix does not name, the current config
    keys of the recorded cells). `store`: keep newly composed keys (collect --check writes nothing)."""
    plain = kept("collect_settings", overrides, config_dir, [Path(__file__)], [],
                 lambda: _plain_settings(compose_config(overrides, config_dir), overrides))
    names = {f.name for f in fields(Settings)} - {"catalog", "out_dir", "expected"}
    settings = Settings(catalog=load_catalog([Path(d) for d in plain["config_dirs"]]), out_dir=Path(plain["out_dir"]),
                        expected=[(policy, gpu) for policy, gpu in plain["expected"]],
                        **{k: v for k, v in plain.items() if k in names})
    settings.warnings = settings.catalog.unknown_names(plain["options"]["exporter"], plain["options"]["gpu"])
    pasted = _pasteable(overrides, config_dir)  # the commands matrix.md prints go into a public issue
    settings.rerun_args = [*(["--config-dir", _here(config_dir)] if config_dir else []),
                           *(o for o in pasted if _group(o) in ("matrix", "out_dir"))]
    settings.stale_args = [*(["--config-dir", _here(config_dir)] if config_dir else []), *pasted]
    cells, history = load_records(settings.out_dir, settings.read_threads)
    if settings.selection:  # policy=, gpu=, torch= narrow the table to those cells
        cells, history = (frame[frame["id"].map(settings.selects).astype(bool)].reset_index(drop=True)
                          for frame in (cells, history))
    settings.stale, settings.stale_why = stale_cells(cells, overrides, config_dir, settings.out_dir, store=store)
    _complete_axes(settings, plain, overrides, config_dir,
                   *(sorted(cells[axis].unique().tolist()) for axis in ("gpu", "torch")))
    return settings, cells, history
