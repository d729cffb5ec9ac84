"""`export-matrix collect`: rebuild the tracking table from the records alone.

Reads every DIR/cells/<policy>/<gpu>/<torch>/record.json and writes, each atomically and only when it changed,
DIR's cells.csv, matrix.csv, repros.csv, matrix.md, report.html and changes.md (also printed). `--into FILE` puts
matrix.md between FILE's export-matrix markers; `--check` writes nothing and exits 1 when anything is out of date.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from ..atomic import write_bytes_atomic
from ..errors import ConfigError
from . import changes as changes_md
from .catalog import CATALOG_NAME
from .changes import SYMBOL_ORDER
from .settings import settings_and_records
from .splice import END, START, splice_file
from .tables import make_tables

OUTPUTS = ("cells.csv", "matrix.csv", "repros.csv", "matrix.md", "report.html")
CHANGES = "changes.md"


def run_collect(overrides: list[str], config_dir: Path | None, into: Path | None = None, check: bool = False) -> int:
    """Read every record, classify, render, write: the whole table from scratch each time."""
    settings, cells, history = settings_and_records(overrides, config_dir, store=not check)
    for line in settings.warnings:
        print(f"export-matrix: warning: {CATALOG_NAME}: {line}", file=sys.stderr)
    out_dir = settings.out_dir
    if not (out_dir / "cells").is_dir() and not settings.expected:
        raise ConfigError(f"no records: {out_dir}/cells/ does not exist (out_dir={out_dir})")
    if settings.stale_why:
        print(f"export-matrix: {settings.stale_why}", file=sys.stderr)
    cells["stale"] = cells["id"].isin(settings.stale)
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
