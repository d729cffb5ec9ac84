"""`export-matrix collect`: rebuild the tracking table from the records alone.

Reads every DIR/cells/<policy>/<gpu>/<torch>/record.json and writes, each atomically and only when it changed,
DIR's cells.csv, matrix.csv, repros.csv, matrix.md, report.html and changes.md (also printed). `--into FILE` puts
matrix.md between FILE's export-matrix markers; `--check` writes nothing and exits 1 when anything is out of date.
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import fields
from pathlib import Path
from typing import Any

from ..atomic import write_bytes_atomic
from ..config import Composed, ConfigError, axis_list, compose_config, selected, to_plain
from ..config.config_cache import kept
from . import changes as changes_md
from .catalog import CATALOG_NAME, load_catalog
from .changes import SYMBOL_ORDER
from .columns import BY
from .records import REPRO_EXPORTER, load_records
from .settings import DEFAULTS, Settings
from .splice import END, START, splice_file
from .stale import stale_cells
from .tables import make_tables

EMPTY_MATRIX = ["matrix.policies=[]", "matrix.gpus=[]", "matrix.torch=[]", "matrix.include=[]", "matrix.exclude=[]"]
OUTPUTS = ("cells.csv", "matrix.csv", "repros.csv", "matrix.md", "report.html")
CHANGES = "changes.md"


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
    from ..config.config_cache import composed_out_dir

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


def kept_settings(overrides: list[str], config_dir: Path | None) -> tuple[Settings, dict[str, Any]]:
    """The settings (and their JSON) for these overrides, composed through Hydra only when the config changed."""
    plain = kept("collect_settings", overrides, config_dir, [Path(__file__)], [],
                 lambda: _plain_settings(compose_config(overrides, config_dir), overrides))
    names = {f.name for f in fields(Settings)} - {"catalog", "out_dir", "expected"}
    settings = Settings(catalog=load_catalog([Path(d) for d in plain["config_dirs"]]), out_dir=Path(plain["out_dir"]),
                        expected=[(policy, gpu) for policy, gpu in plain["expected"]],
                        **{k: v for k, v in plain.items() if k in names})
    return settings, plain


def run_collect(overrides: list[str], config_dir: Path | None, into: Path | None = None, check: bool = False) -> int:
    """Read every record, classify, render, write: the whole table from scratch each time."""
    settings, plain = kept_settings(overrides, config_dir)
    for line in settings.catalog.unknown_names(plain["options"]["exporter"], plain["options"]["gpu"]):
        print(f"export-matrix: warning: {CATALOG_NAME}: {line}", file=sys.stderr)
    pasted = _pasteable(overrides, config_dir)  # the commands matrix.md prints go into a public issue
    settings.rerun_args = [*(["--config-dir", _here(config_dir)] if config_dir else []),
                           *(o for o in pasted if _group(o) in ("matrix", "out_dir"))]
    settings.stale_args = [*(["--config-dir", _here(config_dir)] if config_dir else []), *pasted]
    out_dir = settings.out_dir
    if not (out_dir / "cells").is_dir() and not settings.expected:
        raise ConfigError(f"no records: {out_dir}/cells/ does not exist (out_dir={out_dir})")
    cells, history = load_records(out_dir, settings.read_threads)
    if plain["selection"]:  # policy=, gpu=, torch= narrow the table to those cells
        def selects(cell_id: str) -> bool:
            return selected(cell_id, plain["selection"])

        cells, history = (frame[frame["id"].map(selects).astype(bool)].reset_index(drop=True)
                          for frame in (cells, history))
    stale, why = stale_cells(cells, overrides, config_dir, out_dir, store=not check)
    if why:
        print(f"export-matrix: {why}", file=sys.stderr)
    cells["stale"] = cells["id"].isin(stale)
    _complete_axes(settings, plain, overrides, config_dir,
                   *(sorted(cells[axis].unique().tolist()) for axis in ("gpu", "torch")))
    done = make_tables(cells, history, settings)
    original, spliced = splice_file(into, done.texts["matrix.md"]) if into is not None else (b"", b"")
    if check:
        stale = [name for name in OUTPUTS if _stale(out_dir / name, done.texts[name])]
        stale += [f"{into} (missing)" if original is None else str(into)] if original != spliced else []
        if stale:
            print(f"export-matrix: out of date with the {done.records} records under {out_dir}/cells: "
                  f"{', '.join(stale)} (run collect without --check)", file=sys.stderr)
            return 1
        print(f"up to date: {done.records} records, {', '.join(OUTPUTS)}" + (f", {into}" if into else ""),
              file=sys.stderr)
        return 0
    previous = changes_md.read_previous(out_dir / "cells.csv")  # before the new cells.csv replaces it
    text = changes_md.render(changes_md.changes(previous, done.cells, done.matrix, done.settings))
    for name, content in {**done.texts, CHANGES: text}.items():
        if _stale(out_dir / name, content):  # a rerun leaves most outputs as they were
            write_bytes_atomic(out_dir / name, content.encode())
    if original != spliced:
        write_bytes_atomic(into, spliced)
    if original is None:
        print(f"created {into}: the table between its {START} and {END} lines, which later collects replace; "
              "text outside them is kept", file=sys.stderr)
    print(text, end="")
    counts = Counter(done.matrix["symbol"].tolist())
    print(f"collected {done.records} records into {len(done.matrix)} table cells (policy × column) "
          f"({', '.join(f'{counts[s]} {s}' for s in SYMBOL_ORDER if s in counts)}): "
          f"{', '.join(str(out_dir / n) for n in (*OUTPUTS, CHANGES))}" + (f", {into}" if into else ""),
          file=sys.stderr)
    return 0


def _stale(path: Path, expected: str) -> bool:
    try:
        return path.read_bytes() != expected.encode()
    except OSError:  # missing or unreadable: written again (or reported by --check)
        return True
