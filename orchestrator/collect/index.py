"""The collect index: every record's row as the last collect read it, so the next one reads only what changed.

DIR/.collect-index/ holds two Arrow IPC (Feather) files, uncompressed so that opening one is a memory map
(Parquet's decoding took half a second at 100,000 records): `cells.arrow`, the typed cells frame plus each
record.json's identity (inode, mtime in ns, size) and its earlier attempts' check numbers, and `dirs.arrow`, the
directories under cells/ with their mtimes. A collect stats the directories: one whose mtime is unchanged has the
same entries, so only changed directories are listed again; then it stats every record.json it knows and reads
(JSON) only those whose identity changed. Records are replaced by rename, so a rewritten record always has a new
identity; one edited in place changes mtime and size. A missing, unreadable or foreign index means a full read,
which writes a new one. The rows are the ones records.py makes, so the tables are the same as from a full read
(tests/test_collect_index.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.feather as feather

from ..atomic import write_atomic
from ..record import RECORD_NAME, dirs
from .records import COLUMNS, read_paths, typed_cells, typed_history

INDEX_DIR = ".collect-index"
VERSION = "3"
VERSION_KEY = b"export-matrix-collect-index"
CELLS_FILE = "cells.arrow"
DIRS_FILE = "dirs.arrow"
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

    def read(self) -> tuple[pa.Table | None, dict[str, int]]:
        try:
            table = feather.read_table(self.root / CELLS_FILE, memory_map=True)
            if (table.schema.metadata or {}).get(VERSION_KEY) != VERSION.encode():
                return None, {}
            dirs = feather.read_table(self.root / DIRS_FILE, memory_map=True)
        except (OSError, ValueError, pa.ArrowException):
            return None, {}
        if table.column_names != [*COLUMNS, *IDENTITY, "history"]:
            return None, {}
        return table, dict(zip(dirs.column("path").to_pylist(), dirs.column("mtime_ns").to_pylist(), strict=True))

    def write(self, cells: pa.Table, dirs: dict[str, int]) -> None:
        try:
            self._write(cells, dirs)
        except OSError:
            pass  # an index that cannot be written (read-only or full disk) costs the next collect time only

    def _write(self, cells: pa.Table, dirs: dict[str, int]) -> None:
        cells = cells.combine_chunks()  # one chunk per column, however many runs the merge spliced
        cells = cells.replace_schema_metadata({**(cells.schema.metadata or {}), VERSION_KEY: VERSION})
        _write_table(self.root / CELLS_FILE, cells)
        dirs_frame = pd.DataFrame({"path": list(dirs), "mtime_ns": list(dirs.values())})
        _write_table(self.root / DIRS_FILE, pa.Table.from_pandas(dirs_frame, preserve_index=False))


def _write_table(path: Path, table: pa.Table) -> None:
    write_atomic(path, lambda handle: feather.write_feather(table, handle, compression="uncompressed"))


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
        identities_then = zip(*(previous.column(name).to_pylist() for name in IDENTITY), strict=True)
        by_id = {cell: (i, identity) for i, (cell, identity) in enumerate(zip(previous.column("id").to_pylist(),
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
    table = _merge(previous, kept, new)
    if update and (fresh or stamps != known_dirs or previous is None or table.num_rows != previous.num_rows):
        index.write(table, stamps)
    merged = table.to_pandas()
    merged["reproduced"] = merged["reproduced"].astype(object)  # True, False or None, as a full read has it
    past_rows = [tuple(r) for text in merged["history"].dropna() for r in json.loads(text)]
    cells = merged[list(COLUMNS)]
    return cells, typed_history(past_rows) if past_rows else typed_history([])



def _merge(previous: pa.Table | None, kept: list[int], new: pd.DataFrame) -> pa.Table:
    """The kept rows of the index and the new ones in the full read's order (by record path), as runs of
    zero-copy slices: Arrow's `take` copies every text column row by row (most of a collect's read at 100,000
    records, where a rerun changes a few rows)."""
    fresh = pa.Table.from_pandas(new, preserve_index=False)
    if previous is None:
        return fresh.take(np.argsort((new["id"] + "/").to_numpy(dtype=object), kind="stable"))
    if not len(new) and kept == list(range(previous.num_rows)):
        return previous  # nothing changed: the memory-mapped table as it is
    ids = np.array(previous.column("id").to_pylist() + new["id"].tolist(), dtype=object)
    sources = np.concatenate([np.asarray(kept, dtype=np.int64), np.arange(len(new)) + previous.num_rows])
    order = sources[np.argsort(ids[sources] + "/", kind="stable")]
    in_new = order >= previous.num_rows
    starts = np.flatnonzero(np.r_[True, (np.diff(order) != 1) | (in_new[1:] != in_new[:-1])])
    ends = np.r_[starts[1:], len(order)]
    pieces = [fresh.slice(order[a] - previous.num_rows, b - a) if in_new[a] else previous.slice(order[a], b - a)
              for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]
    if not pieces:
        return previous.slice(0, 0)
    return pa.concat_tables(pieces, promote_options="permissive")
