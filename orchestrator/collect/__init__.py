"""`export-matrix collect`: rebuild the tracking table from the records alone.

Reads every DIR/cells/<policy>/<gpu>/<torch>/record.json and writes, each atomically, DIR/cells.csv (one row per
cell), DIR/matrix.csv (one row per policy x gpu, with its ✅/🟡/❌), DIR/matrix.md (GitHub Markdown for the tracking
issue), DIR/report.html (the same, each cell linking to its log) and DIR/changes.md (what changed since the
previous collect, also printed). `--into FILE` puts matrix.md between FILE's export-matrix markers; `--check`
writes nothing and exits 1 when FILE or DIR's tables are out of date with the records.
"""

from __future__ import annotations

import gc
import sys
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..atomic import write_bytes_atomic, write_pieces_atomic
from ..config import Composed, ConfigError, axis_list, compose_config, selected, to_plain
from ..config_cache import kept
from . import assemble, last_collect, slice_store
from . import changes as changes_md
from .assemble import Pieces
from .catalog import Catalog, load_catalog
from .index import INDEX_DIR, Indexed, frames, update_index
from .records import REPRO_EXPORTER
from .rules import MATRIX_COLUMNS, repro_table
from .settings import DEFAULTS, Settings
from .slices import LIGHT_COLUMNS, MATRIX_HEADER, Slice, compute, compute_pairs, listed_policies, matrix_rows, merge
from .splice import splice_file

OUTPUTS = ("cells.csv", "matrix.csv", "repros.csv", "matrix.md", "report.html")
CHANGES = "changes.md"


@dataclass
class Collected:
    slices: dict[str, Slice]  # one per policy of the matrix
    matrix: pd.DataFrame  # the matrix rows of the policies computed (all of them, unless slices were kept)
    repros: pd.DataFrame  # repros.csv's rows
    records: int  # the cells collected, standalone repros included
    computed: set[str] | None = None  # the policies computed (None: all); the others' slices were kept
    previous: pd.DataFrame | None = None  # the kept matrix rows of the computed policies (changes.md)


def _plain_settings(composed: Composed, overrides: list[str]) -> dict[str, Any]:
    """What collect takes from the composed config, as JSON (config_cache.py keeps it)."""
    from ..cells import expand

    cfg = composed.cfg
    knobs = {**DEFAULTS, **(to_plain(cfg.get("collect")) or {})}
    settings = Settings(catalog=Catalog([]), out_dir=Path(cfg.out_dir), at_limit=float(knobs["at_limit"]),
                        slow_below=float(knobs["slow_below"]), margin_move=float(knobs["margin_move"]),
                        read_threads=int(knobs["read_threads"]))
    _add_axes(settings, *_axes(cfg))
    named = any(o.lstrip("+~").split("=", 1)[0].split(".", 1)[0] == "matrix" for o in overrides)
    if named:  # only a matrix the user names says which cells should exist ("—" when they have no record)
        repros = {p for p in cfg.get("policies") or {} if cfg.policies[p].get("exporter") == REPRO_EXPORTER}
        settings.policies = [p for p in axis_list(cfg.matrix, "policies") if p not in repros]
        settings.expected = list(dict.fromkeys((c["policy"], c["gpu"]) for c in expand(cfg.matrix)
                                               if c["policy"] not in repros
                                               and composed.selects(f"{c['policy']}/{c['gpu']}/{c['torch']}")))
    plain = {f.name: getattr(settings, f.name) for f in fields(Settings) if f.name != "catalog"}
    return {**plain, "out_dir": str(settings.out_dir), "config_dirs": [str(d) for d in composed.config_dirs],
            "selection": composed.selection, "options": {axis: composed.options[axis] for axis in ("gpu", "torch")}}


def _settings(plain: dict[str, Any]) -> Settings:
    names = {f.name for f in fields(Settings)} - {"catalog"}
    settings = Settings(catalog=load_catalog([Path(d) for d in plain["config_dirs"]]),
                        **{k: v for k, v in plain.items() if k in names})
    settings.out_dir = Path(plain["out_dir"])
    settings.expected = [(policy, gpu) for policy, gpu in plain["expected"]]
    return settings


def _axes(cfg) -> tuple[dict[str, str], dict[str, list[str]]]:
    """The config's GPU labels and builds' fixes, in its order."""
    labels = {name: str(cfg.gpus[name].get("label") or name) for name in cfg.get("gpus") or {}}
    fixes = {name: [str(f) for f in (cfg.builds[name].get("fixes") or [])] for name in cfg.get("builds") or {}}
    return labels, fixes


def _add_axes(settings: Settings, labels: dict[str, str], fixes: dict[str, list[str]]) -> None:
    for name, label in labels.items():
        settings.gpu_labels.setdefault(name, label)
        if name not in settings.gpus:
            settings.gpus.append(name)
    for name, build_fixes in fixes.items():
        settings.build_fixes.setdefault(name, build_fixes)
        if name not in settings.builds:
            settings.builds.append(name)


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
        labels, fixes = kept("collect_settings", overrides, config_dir, [Path(__file__)], extra,
                             lambda: _axes(compose_config([*overrides, *extra], config_dir).cfg))
    except ConfigError:
        return
    _add_axes(settings, labels, fixes)


def tables(cells: pd.DataFrame, history: pd.DataFrame, settings: Settings) -> Collected:
    """Every output from these cells (in id order), computed from scratch."""
    is_repro = cells["repro_row"].notna()
    ordinary = cells[~is_repro]
    slices, matrix = compute(ordinary, history, settings, listed_policies(ordinary["policy"].value_counts().to_dict()))
    return Collected(slices, matrix, repro_table(cells[is_repro], settings), len(cells))


def _kept_tables(indexed: Indexed, settings: Settings, kept: dict[str, Slice]) -> Collected:
    """The slices, computing again only the policy x gpu pairs whose records changed since `kept` (their
    policies' other GPUs taken from the kept slices), or the whole policy where its cells-table rows are wanted."""
    ordinary = pc.is_null(indexed.column("repro_row"))
    policies = indexed.column("policy")
    counts = pc.value_counts(policies.filter(ordinary)).to_pylist()
    listed = listed_policies({item["values"]: item["counts"] for item in counts})
    changed: dict[str, set[str]] = {}
    for cell in indexed.changed or ():
        policy, gpu, _ = cell.split("/", 2)
        changed.setdefault(policy, set()).add(gpu)
    whole = {p for p in changed if p not in kept or p in listed}
    whole |= {p for p in listed if p not in kept or kept[p].rows is None}
    whole |= {p for p, _ in settings.expected if p not in kept}
    partial = {p: gpus for p, gpus in changed.items() if p not in whole}
    computed = whole | partial.keys()
    matrix, merged = pd.DataFrame(columns=MATRIX_COLUMNS), {}
    if computed:
        pair_ids = pc.binary_join_element_wise(policies, indexed.column("gpu"), pa.scalar("/", policies.type))
        wanted = pc.or_(_among(policies, whole), _among(pair_ids, {f"{p}/{g}" for p, gpus in partial.items()
                                                                    for g in gpus}))
        cells, history = frames(indexed.rows(pc.and_(ordinary, wanted)))
        expected = [(p, g) for p, g in settings.expected if p in whole or g in partial.get(p, ())]
        fresh, matrix = compute_pairs(cells, history, replace(settings, expected=expected), listed & whole)
        light = indexed.rows(pc.and_(ordinary, _among(policies, computed)), LIGHT_COLUMNS).to_pandas()
        merged = merge(kept, fresh, {p: None for p in whole} | partial, light, settings)
    slices = {p: piece for p, piece in kept.items() if p not in computed} | merged
    repro_cells, _ = frames(indexed.rows(pc.invert(ordinary)))
    previous = changes_md.read_matrix_csv(MATRIX_HEADER + b"".join(matrix_rows(kept[p], partial.get(p))
                                                                    for p in computed if p in kept).decode())
    return Collected(slices, matrix, repro_table(repro_cells, settings),
                     sum(piece.records for piece in slices.values()) + len(repro_cells), computed, previous)


def _among(column: pa.ChunkedArray, values: set[str]) -> pa.ChunkedArray:
    return pc.is_in(column, value_set=pa.array(sorted(values), column.type))


def _write_changed(path: Path, text: str | bytes | Pieces) -> bool:
    """Write the file (atomically) unless it already holds text: after a rerun most outputs stay the same, and
    reading is cheaper than writing and syncing."""
    pieces = _pieces(text)  # encoded once: cells.csv is tens of MB at 100,000 records
    if not _stale(path, pieces):
        return False
    write_pieces_atomic(path, pieces)
    return True


def _stale(path: Path, expected: str | bytes | Pieces) -> bool:
    pieces = _pieces(expected)
    try:  # a file of another size differs: not read (cells.csv is tens of MB)
        return path.stat().st_size != sum(map(len, pieces)) or path.read_bytes() != b"".join(pieces)
    except OSError:  # missing or unreadable: written again (or reported by --check)
        return True


def _pieces(text: str | bytes | Pieces) -> Pieces:
    return [text.encode()] if isinstance(text, str) else [text] if isinstance(text, bytes) else text


def kept_settings(overrides: list[str], config_dir: Path | None) -> tuple[Settings, dict[str, Any]]:
    """The settings (and their JSON) for these overrides: composed through Hydra only when the config changed
    (config_cache.py)."""
    plain = kept("collect_settings", overrides, config_dir, [Path(__file__)], [],
                 lambda: _plain_settings(compose_config(overrides, config_dir), overrides))
    return _settings(plain), plain


def run_collect(overrides: list[str], config_dir: Path | None, into: Path | None = None, check: bool = False) -> int:
    # Writes of tens or hundreds of MB (the index, cells.csv) are system calls and Arrow's code, which run without
    # Python's lock: a writer thread does them while the collect goes on; the collect returns once they are done.
    with _no_cycle_collection(), ThreadPoolExecutor(max_workers=2, thread_name_prefix="collect-writer") as writer:
        return _collect(overrides, config_dir, into, check, writer)


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """The kept slices are thousands of small lists and dicts: each pass of Python's cycle collector scans them
    all (0.2 s at 100,000 records), and a collect makes no garbage cycles worth it (reference counting frees the
    rest)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _collect(overrides: list[str], config_dir: Path | None, into: Path | None, check: bool,
             writer: ThreadPoolExecutor) -> int:
    settings, plain = kept_settings(overrides, config_dir)
    out_dir = settings.out_dir
    if not (out_dir / "cells").is_dir() and not settings.expected:
        raise ConfigError(f"no records: {out_dir}/cells/ does not exist (out_dir={out_dir})")
    indexed = update_index(out_dir, settings.read_threads, update=not check, writer=writer)
    root, matrix_csv = out_dir / INDEX_DIR, out_dir / "matrix.csv"
    key = None
    if plain["selection"]:  # policy=, gpu=, torch= narrow the table to those cells (computed from scratch)
        def selects(cell_id: str) -> bool:
            return selected(cell_id, plain["selection"])

        cells, history = frames(indexed.table)
        cells = cells[cells["id"].map(selects).astype(bool)].reset_index(drop=True)
        if len(history):
            history = history[history["id"].map(selects).astype(bool)].reset_index(drop=True)
        _complete_axes(settings, plain, overrides, config_dir,
                       *(sorted(cells[axis].unique().tolist()) for axis in ("gpu", "torch")))
        done = tables(cells, history, settings)
    else:
        _complete_axes(settings, plain, overrides, config_dir,
                       *(sorted(pc.unique(indexed.column(axis)).to_pylist()) for axis in ("gpu", "torch")))
        key = slice_store.digest(settings, None)
        last = last_collect.current(root, key, out_dir, OUTPUTS) if indexed.changed == set() else None
        if last is not None:
            return _nothing_changed(last, out_dir, into, check)
        kept = None if indexed.changed is None else slice_store.load(root, key, out_dir)
        done = _kept_tables(indexed, settings, kept) if kept is not None else tables(*frames(indexed.table), settings)
    policies = assemble.table_order(done.slices, settings)
    csv_files = assemble.csv_files(done.slices, policies)
    if check:
        texts = {**csv_files, **assemble.rendered(done.slices, policies, done.repros, settings)}
        spliced = splice_file(into, texts["matrix.md"]) if into is not None else None
        return _checked([name for name in OUTPUTS if _stale(out_dir / name, texts[name])], spliced, done.records,
                        out_dir, into)
    if into is not None:
        splice_file(into, "")  # a FILE that cannot take the table fails the collect before anything is written
    previous = done.previous if done.computed is not None else changes_md.read_previous(matrix_csv)  # before the
    # new matrix.csv replaces it
    writes = {name: writer.submit(_write_changed, out_dir / name, pieces) for name, pieces in csv_files.items()}
    texts = assemble.rendered(done.slices, policies, done.repros, settings)  # while the CSV files are written
    spliced = splice_file(into, texts["matrix.md"]) if into is not None else None
    writes |= {name: writer.submit(_write_changed, out_dir / name, text) for name, text in texts.items()}
    lines = changes_md.changes(previous, done.matrix, settings)
    counts = Counter(s for piece in done.slices.values() for s in piece.symbols.values())
    summary = last_collect.Last(done.records, dict(counts.most_common()))
    store = slice_store.stored(done.slices, policies, key) if key is not None else None  # still while they are
    csv_written = any([writes[name].result() for name in slice_store.CSV_FILES])  # both written before the save
    if store is not None and (done.computed != set() or csv_written):  # else the kept slices still stand
        slice_store.save(root, store, out_dir)  # by cells.csv's and matrix.csv's identity
    for future in [*writes.values(), *([indexed.saved] if indexed.saved is not None else [])]:
        future.result()  # written, or its error is the collect's
    if key is not None:  # a narrowed collect (policy=...) keeps neither: its outputs are not the whole table
        last_collect.save(root, key, out_dir, OUTPUTS, summary)
    return _report(lines, spliced, summary, out_dir, into)


def _nothing_changed(last: last_collect.Last, out_dir: Path, into: Path | None, check: bool) -> int:
    """No record changed and the outputs are the files the last collect wrote: they stand as they are."""
    spliced = splice_file(into, (out_dir / "matrix.md").read_text()) if into is not None else None
    if check:
        return _checked([], spliced, last.records, out_dir, into)
    return _report([], spliced, last, out_dir, into)


def _report(lines: list[str], spliced: tuple[bytes, bytes] | None, last: last_collect.Last, out_dir: Path,
            into: Path | None) -> int:
    """changes.md and --into's FILE written, the changes and the summary printed."""
    text = changes_md.render(lines)
    _write_changed(out_dir / CHANGES, text)
    if spliced is not None and spliced[0] != spliced[1]:
        write_bytes_atomic(into, spliced[1])
    print(text, end="")
    _print_summary(last, out_dir, into)
    return 0


def _checked(stale: list[str], spliced: tuple[bytes, bytes] | None, records: int, out_dir: Path,
             into: Path | None) -> int:
    """--check's verdict: 1 (and which files) when any output or FILE is out of date with the records."""
    if spliced is not None and spliced[0] != spliced[1]:
        stale.append(str(into))
    if stale:
        print(f"export-matrix: out of date with the {records} records under {out_dir}/cells: "
              f"{', '.join(stale)} (run collect without --check)", file=sys.stderr)
        return 1
    print(f"up to date: {records} records, {', '.join(OUTPUTS)}" + (f", {into}" if into else ""), file=sys.stderr)
    return 0


def _print_summary(last: last_collect.Last, out_dir: Path, into: Path | None) -> None:
    counts = last.counts
    print(f"collected {last.records} records into {sum(counts.values())} policy × GPU cells "
          f"({', '.join(f'{counts[s]} {s}' for s in ('✅', '🟡', '❌', '⏳', '—') if s in counts)}): "
          f"{', '.join(str(out_dir / n) for n in (*OUTPUTS, CHANGES))}" + (f", {into}" if into else ""),
          file=sys.stderr)
