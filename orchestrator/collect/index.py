"""The collect index: every record's row as the last collect read it, so the next one reads only what changed.

DIR/.collect-index/ holds two Parquet files (pyarrow): `cells.parquet`, the typed cells frame plus each
record.json's identity (inode, mtime in ns, size) and its earlier attempts' check numbers, and `dirs.parquet`,
the directories under cells/ with their mtimes. A collect stats the directories: one whose mtime is unchanged
has the same entries, so only changed directories are listed again; then it stats every record.json it knows
and reads (JSON) only those whose identity changed. Records are replaced by rename, so a rewritten record always
has a new identity; one edited in place changes mtime and size. A missing, unreadable or foreign index means a
full read, which writes a new one. The rows are the ones records.py makes, so the tables are the same as from a
full read (tests/test_collect_index.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from ..atomic import write_bytes_atomic
from ..record import RECORD_NAME, dirs
from .records import COLUMNS, read_paths, typed_cells, typed_history

INDEX_DIR = ".collect-index"
VERSION = "1"
IDENTITY = ("ino", "mtime_ns", "size")


def _stat(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


class Index:
    def __init__(self, out_dir: Path) -> None:
        self.root = Path(out_dir) / INDEX_DIR
        self.cells_dir = os.path.join(str(out_dir), "cells")

    def read(self) -> tuple[pd.DataFrame | None, dict[str, int]]:
        try:
            cells = pd.read_parquet(self.root / "cells.parquet")
            dirs = pd.read_parquet(self.root / "dirs.parquet")
        except (OSError, ValueError, ImportError):
            return None, {}
        if cells.attrs.get("version") != VERSION or list(cells.columns) != [*COLUMNS, *IDENTITY, "history"]:
            return None, {}
        return cells, dict(zip(dirs["path"].tolist(), dirs["mtime_ns"].tolist(), strict=True))

    def write(self, cells: pd.DataFrame, dirs: dict[str, int]) -> None:
        try:
            self._write(cells, dirs)
        except OSError:
            pass  # an index that cannot be written (read-only or full disk) costs the next collect time only

    def _write(self, cells: pd.DataFrame, dirs: dict[str, int]) -> None:
        cells = cells.copy()
        cells.attrs = {"version": VERSION}
        write_bytes_atomic(self.root / "cells.parquet", cells.to_parquet(index=False))
        dirs_frame = pd.DataFrame({"path": list(dirs), "mtime_ns": list(dirs.values())})
        write_bytes_atomic(self.root / "dirs.parquet", dirs_frame.to_parquet(index=False))


def _walk(cells_dir: str, known: dict[str, int]) -> tuple[list[str], dict[str, int]]:
    """Every cell directory (cells/<policy>/<gpu>/<torch>), listing again only the directories whose mtime
    changed since the index knew them; and every directory's mtime now."""
    stamps: dict[str, int] = {}
    children: dict[str, list[str]] = {}
    for path in known:  # written in walk order: each directory's children come sorted
        children.setdefault(path.rpartition(os.sep)[0], []).append(path)

    def listing(path: str, depth: int) -> list[str]:
        if depth == 3:  # a cell directory: known by its parent's listing; its record.json is stat'ed next
            stamps[path] = 0
            return [path]
        stat = _stat(path)
        if stat is None:
            return []
        stamps[path] = stat[1]
        if known.get(path) == stat[1]:
            return children.get(path, [])
        return sorted(dirs(path))

    return [cell for level1 in listing(cells_dir, 0) for level2 in listing(level1, 1)
            for level3 in listing(level2, 2) for cell in listing(level3, 3)], stamps


def load_indexed(out_dir: Path, workers: int = 1, update: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(cells, history) as records.load_records gives them, reading only the records that changed; `update`
    False leaves the index as it is (`collect --check` writes nothing)."""
    index = Index(out_dir)
    previous, known_dirs = index.read()
    by_id: dict[str, tuple[int, tuple[int, int, int]]] = {}
    if previous is not None:
        identities_then = zip(previous["ino"].tolist(), previous["mtime_ns"].tolist(), previous["size"].tolist(),
                              strict=True)
        by_id = {cell: (i, identity) for i, (cell, identity) in enumerate(zip(previous["id"].tolist(),
                                                                              identities_then, strict=True))}
    cell_dirs, stamps = _walk(index.cells_dir, known_dirs if previous is not None else {})
    kept: list[int] = []
    fresh: list[str] = []
    new_identity: dict[str, tuple[int, int, int]] = {}
    prefix = len(index.cells_dir) + 1
    for cell_dir in cell_dirs:
        path = cell_dir + os.sep + RECORD_NAME
        identity = _stat(path)
        if identity is None:
            continue
        cell = cell_dir[prefix:].replace(os.sep, "/")
        then = by_id.get(cell)
        if then is not None and then[1] == identity:
            kept.append(then[0])
        else:
            fresh.append(path)
            new_identity[cell] = identity
    rows, history = read_paths(fresh, workers)
    new = typed_cells(rows)
    for position, name in enumerate(IDENTITY):
        new[name] = [new_identity[cell][position] for cell in new["id"]]
    grouped: dict[str, list[list[Any]]] = {}
    for row in history:
        grouped.setdefault(row[0], []).append(list(row))
    new["history"] = [json.dumps(grouped[c]) if c in grouped else None for c in new["id"]]
    frames = [f for f in (previous.take(kept) if previous is not None else None, new) if f is not None and len(f)]
    merged = pd.concat(frames, ignore_index=True) if frames else new
    order = (merged["id"] + "/").sort_values(kind="stable").index  # the full read's order: by record path
    merged = merged.loc[order].reset_index(drop=True)
    if update and (fresh or stamps != known_dirs or previous is None or len(merged) != len(previous)):
        index.write(merged, stamps)
    past_rows = [tuple(r) for text in merged["history"].dropna() for r in json.loads(text)]
    cells = merged[list(COLUMNS)].reset_index(drop=True)
    return cells, typed_history(past_rows) if past_rows else typed_history([])

