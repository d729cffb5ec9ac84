"""The collect index: every record's row as the last collect read it, so the next one reads only what changed.

DIR/.collect-index/ holds Arrow IPC files (arrow_files.py: memory-mapped, written atomically): `cells.arrow`,
the typed cells frame in id order, but for the log tails (read again from a record where the catalog needs one:
records.read_log_tails), plus each record.json's identity (inode, mtime in ns, size) and its earlier attempts'
check numbers; `delta.arrow`, the rows read since `cells.arrow` was written (they win over its rows of the same
cell), so that a collect after a rerun writes the few changed rows, not the whole index (60 MB at 100,000
records); and `dirs.arrow`, the mtimes of cells/ and of each policy's and gpu's directory. A delta names the
base it extends by a token; once it holds more than 10 % of the rows, or a cell is gone (a delta only adds rows),
the next collect writes a new base instead.
A collect stats those directories only (25,000 at 100,000 records, not every record): one whose mtime is
unchanged has the same entries. Every record write stamps its gpu directory (record.mark_written), since renaming
record.json into place changes only its own cell directory's mtime; so a gpu directory whose mtime changed is
listed again and its records stat'ed, and only those whose identity changed are read (JSON). A record edited by
hand is seen once its gpu directory is touched (`touch DIR/cells/<policy>/<gpu>`); a cell added or removed by hand
changes its directory's mtime itself.
A file system stamps mtimes with a coarse clock (a few ms, on NFS the server's), so a directory or record changed
during a collect, in the same tick as it was read, can keep the mtime that collect saw: a collect first touches
DIR/.collect-index/clock to learn the file system's time, and keeps whatever has an mtime at or after it as
unknown (0, -1), so the next collect lists or reads it again (git's "racy clean" entries).
A missing, unreadable or foreign file means a full read (or, for a delta, reading again what it held), which
writes a new one. The rows are the ones records.py makes, so the tables are the same as from a full read
(tests/test_collect_index.py).
"""

from __future__ import annotations

import json
import os
import secrets
from bisect import bisect_left
from concurrent.futures import Executor, Future
from functools import cached_property, partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..record import dirs
from .arrow_files import read_table, write_table
from .records import COLUMNS, in_chunks, read_paths, record_path, typed_cells, typed_history

INDEX_DIR = ".collect-index"
VERSION = "6"
VERSION_KEY = b"export-matrix-collect-index"
BASE_KEY = b"export-matrix-collect-index-base"  # the base's token; a delta carries the token of its base
CELLS_FILE = "cells.arrow"
DELTA_FILE = "delta.arrow"
DIRS_FILE = "dirs.arrow"
CLOCK_FILE = "clock"
IDENTITY = ("ino", "mtime_ns", "size")
STORED = (*(c for c in COLUMNS if c != "log_tail"), *IDENTITY, "history")  # the files' columns: no log tails
# (the rows this collect read keep theirs in memory)
MAX_RUNS = 64  # a table in more runs than this is copied into one before pandas converts it
DELTA_SHARE = 0.1  # a delta holding more than this share of the rows is folded into a new base. A new base
# costs about 0.2 s at 100,000 rows (60 MB copied and written, in the writer thread); a delta is written again by
# every collect that reads a record, and read by every collect (7,700 rows: 0.13 to 0.15 s instead of 0.12 when
# nothing changed)


def _fs_clock(root: Path) -> int | None:
    """The file system's time now, on the clock that stamps the records' mtimes (None: the index cannot be
    written, so what this collect saw is not kept)."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        clock = root / CLOCK_FILE
        clock.touch()
        return clock.stat().st_mtime_ns
    except OSError:
        return None


def _stat(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def identities(out_dir: Path, names: tuple[str, ...]) -> list[list[int]] | None:
    """Each file's identity (inode, mtime in ns, size) as JSON keeps it, None where one is missing: the outputs
    and the stores beside them (last_collect.py, slice_store.py) are checked by it, as records are."""
    found = [_stat(os.path.join(out_dir, name)) for name in names]
    return None if None in found else [list(identity) for identity in found if identity is not None]


class Index:
    def __init__(self, out_dir: Path) -> None:
        self.root = Path(out_dir) / INDEX_DIR
        self.cells_dir = os.path.join(str(out_dir), "cells")
        self.token = b""  # the base's, once read or written
        self.base_rows = 0  # rows of the table `read` gives that come from the base (the delta's follow)

    def read(self) -> tuple[pa.Table | None, dict[str, int]]:
        """The base's rows then the delta's (a cell's last row is its newest), and the known directories."""
        base = self._table(CELLS_FILE)
        if base is None:
            return None, {}
        dirs = read_table(self.root / DIRS_FILE)
        if dirs is None or dirs.column_names != ["path", "mtime_ns"]:
            return None, {}
        known = dict(zip(dirs.column("path").to_pylist(), dirs.column("mtime_ns").to_pylist(), strict=True))
        self.token = base.schema.metadata[BASE_KEY]
        self.base_rows = base.num_rows
        delta = self._table(DELTA_FILE)
        if delta is None or delta.schema.metadata.get(BASE_KEY) != self.token:
            return base, known
        return pa.concat_tables([base, delta], promote_options="permissive"), known

    def _table(self, name: str) -> pa.Table | None:
        table = read_table(self.root / name)
        if table is None:
            return None
        metadata = table.schema.metadata or {}
        if metadata.get(VERSION_KEY) != VERSION.encode() or BASE_KEY not in metadata:
            return None
        if table.column_names != list(STORED):
            return None
        return table

    def write(self, merged: pa.Table | None, delta: pa.Table | None, dirs: dict[str, int] | None) -> None:
        """A new base (`merged`) or a delta on the base read; the directories when they changed."""
        try:
            if merged is not None:
                self.token = secrets.token_hex(8).encode()
                write_table(self.root / CELLS_FILE, self._stamped(merged))
                (self.root / DELTA_FILE).unlink(missing_ok=True)  # an old delta names the old base's token
            else:
                write_table(self.root / DELTA_FILE, self._stamped(delta))
            if dirs is not None:
                write_table(self.root / DIRS_FILE, pa.table({"path": pa.array(list(dirs), pa.string()),
                                                             "mtime_ns": pa.array(list(dirs.values()), pa.int64())}))
        except OSError:
            pass  # an index that cannot be written (read-only or full disk) costs the next collect time only

    def _stamped(self, table: pa.Table) -> pa.Table:
        metadata = {**(table.schema.metadata or {}), VERSION_KEY: VERSION, BASE_KEY: self.token}
        return table.replace_schema_metadata(metadata)


def _walk(cells_dir: str, known: dict[str, int], started: int) -> tuple[dict[str, list[str]], dict[str, int]]:
    """The gpu directories (`policy/gpu`) whose cells may have changed since the index knew them, each with its
    cell directories' names now: those whose mtime changed (a cell added or removed, or a record written: see
    record.mark_written), new ones and gone ones (no names). And the mtime now of cells/ ("") and of each policy's
    and gpu's directory, 0 for one changed since `started`, so the next collect lists it again. A directory whose
    mtime is unchanged has the same entries: its known children are taken, not listed."""
    found = {rel: _stat(_dir_path(cells_dir, rel)) for rel in known}  # in one pass: most are as they were
    unmoved = _walk_unmoved(cells_dir, known, found, started)
    if unmoved is not None:
        return unmoved
    stamps: dict[str, int] = {}
    children: dict[str, list[str]] = {}
    for rel in known:  # written in walk order: each directory's children come sorted
        if rel:
            children.setdefault(rel.rpartition("/")[0], []).append(rel)

    def listing(rel: str) -> tuple[list[str], bool]:
        path = _dir_path(cells_dir, rel)
        stat = found[rel] if rel in found else _stat(path)
        if stat is None:
            return [], True
        stamps[rel] = stat[1] if stat[1] < started else 0
        if known.get(rel) == stat[1]:
            return children.get(rel, []), False
        return sorted(f"{rel}/{os.path.basename(d)}" if rel else os.path.basename(d) for d in dirs(path)), True

    dirty: dict[str, list[str]] = {}
    for policy in listing("")[0]:
        for gpu in listing(policy)[0]:
            names, changed = listing(gpu)
            if changed:
                dirty[gpu] = [name.rpartition("/")[2] for name in names]
    for rel in known:
        if rel.count("/") == 1 and rel not in stamps:
            dirty[rel] = []  # gone, with its policy or alone
    return dirty, stamps


def _walk_unmoved(cells_dir: str, known: dict[str, int], found: dict[str, tuple[int, int, int] | None],
                  started: int) -> tuple[dict[str, list[str]], dict[str, int]] | None:
    """_walk where no directory was added or removed (cells/ and each policy's directory as the index knew them,
    every gpu directory still there), as after a rerun, which stamps gpu directories only: the changed ones are
    listed, the others taken as they were, without going down level by level (0.02 s less at 25,000). None
    otherwise, or with no index."""
    if not known or None in found.values():
        return None
    mtimes = [identity[1] for identity in found.values()]  # type: ignore[index]
    moved = [rel for rel, mtime in zip(found, mtimes, strict=True) if known[rel] != mtime]
    if any(rel.count("/") != 1 for rel in moved):
        return None
    stamps = {rel: mtime if mtime < started else 0 for rel, mtime in zip(found, mtimes, strict=True)}
    return {gpu: sorted(os.path.basename(d) for d in dirs(_dir_path(cells_dir, gpu))) for gpu in moved}, stamps


def _dir_path(cells_dir: str, rel: str) -> str:
    return cells_dir + os.sep + rel.replace("/", os.sep) if rel else cells_dir


def _stat_all(paths: list[str], workers: int) -> list[tuple[int, int, int] | None]:
    """Each path's identity, through collect.read_threads like the reads."""
    return [identity for chunk in in_chunks(lambda part: [_stat(path) for path in part], paths, workers)
            for identity in chunk]


class Indexed:
    """Every record's row (COLUMNS, identity, history) in id order, kept as positions in `source` (the base's
    rows in one chunk, then the delta's and those just read) and put in order only where asked: a collect that
    keeps slices wants a few columns and the changed policies' rows, and splicing every column into order took
    0.1 s per 2,000 rows of delta at 100,000 records."""

    def __init__(self, source: pa.Table, order: np.ndarray, base_rows: int, changed: set[str] | None) -> None:
        self.source, self.order, self.base_rows = source, order, base_rows
        self.changed = changed  # cells read again or gone since the index was written (None: no index before)
        self.saved: Future[None] | None = None  # the index's write, where a writer thread does it

    @cached_property
    def table(self) -> pa.Table:
        """Every row, in id order: in runs of zero-copy slices of source."""
        return _splice(self.source, self.order)

    def column(self, name: str) -> pa.ChunkedArray:
        return self.source.column(name).take(pa.array(self.order))

    def rows(self, mask: pa.ChunkedArray | pa.Array, columns: list[str] | None = None) -> pa.Table:
        """The rows where mask (over the rows in id order) is true, in id order, in one chunk: taken from each of
        source's parts on its own, since Arrow's take over a table in runs or chunks concatenates every column
        first (0.1 to 0.5 s at 100,000 records, when the index kept log tails)."""
        at = self.order[pc.indices_nonzero(mask).to_numpy()]
        in_base = at < self.base_rows
        source = self.source.select(columns) if columns is not None else self.source
        parts = [source.slice(0, self.base_rows).take(pa.array(at[in_base])),
                 source.slice(self.base_rows).take(pa.array(at[~in_base] - self.base_rows))]
        if not in_base.all() and in_base.any():  # the two parts' rows back in id order
            back = np.argsort(np.concatenate([np.flatnonzero(in_base), np.flatnonzero(~in_base)]), kind="stable")
            return pa.concat_tables(parts).take(pa.array(back)).combine_chunks()
        return parts[0 if in_base.all() else 1].combine_chunks()


def _write_base(index: Index, source: pa.Table, order: np.ndarray, stamps: dict[str, int]) -> None:
    """A new base of source's rows in id order. Taken (copied) by Arrow in one pass, as the write copies them
    anyway: cut into runs first (Indexed.table), a base after a rerun of thousands of scattered cells was tens of
    thousands of slices, 0.3 s of Python's time where the writer thread takes none."""
    index.write(source.take(pa.array(order)), None, stamps)


def load_indexed(out_dir: Path, workers: int = 1, update: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(cells, history) as records.load_records gives them, reading only the records that changed; `update`
    False leaves the index as it is (`collect --check` writes nothing)."""
    return frames(update_index(out_dir, workers, update).table)


def update_index(out_dir: Path, workers: int = 1, update: bool = True, writer: Executor | None = None) -> Indexed:
    """Every record's row, reading only the records that changed, and which cells changed. With a `writer`, the
    index is written by it (Indexed.saved: wait on it), while the caller goes on: a new base is 60 MB at 100,000
    records, copied and written in Arrow's code and the kernel, without Python's lock."""
    index = Index(out_dir)
    previous, known_dirs = index.read()
    started = _fs_clock(index.root) if update else None
    started = started if started is not None else np.iinfo(np.int64).max  # not written: nothing to keep unknown
    dirty, stamps = _walk(index.cells_dir, known_dirs if previous is not None else {}, started)
    listed = [f"{gpu}/{name}" for gpu, names in dirty.items() for name in names]
    paths = [record_path(index.cells_dir, cell) for cell in listed]
    identities = _stat_all(paths, workers)
    found = [i for i, identity in enumerate(identities) if identity is not None]
    ids = [listed[i] for i in found]
    now = np.array([identities[i] for i in found], dtype=np.int64).reshape(len(found), len(IDENTITY))
    known = _Known(previous, index.base_rows)
    then = np.fromiter((known.row(cell) for cell in ids), dtype=np.int64, count=len(ids))
    same = then >= 0
    if previous is not None and same.any():
        indexed = same.copy()
        for column, name in enumerate(IDENTITY):
            same[indexed] &= previous.column(name).to_numpy()[then[indexed]] == now[indexed, column]
    changed = np.flatnonzero(~same).tolist()
    fresh = [paths[found[i]] for i in changed]
    kept_now = now.copy()
    kept_now[kept_now[:, 1] >= started, 1] = -1  # changed since this collect began: read again next time
    new_identity = {ids[i]: kept_now[i].tolist() for i in changed}
    rows, history = read_paths(fresh, workers)
    new = typed_cells(rows)
    for position, name in enumerate(IDENTITY):
        new[name] = [new_identity[cell][position] for cell in new["id"]]
    grouped: dict[str, list[list[Any]]] = {}
    for row in history:
        grouped.setdefault(row[0], []).append(list(row))
    new["history"] = [json.dumps(grouped[c]) if c in grouped else None for c in new["id"]]
    present = set(ids)
    gone = {cell for gpu_dir in dirty for cell in known.under(gpu_dir) if cell not in present}
    dropped = gone | {ids[i] for i in changed}
    fresh_table = pa.Table.from_pandas(new, preserve_index=False).select([*STORED, "log_tail"])
    if previous is None:
        source, order = fresh_table, np.argsort((new["id"] + "/").to_numpy(dtype=object), kind="stable")
    else:
        source = pa.concat_tables([previous, fresh_table], promote_options="permissive") if len(new) else previous
        order = known.order(dropped, new["id"].tolist())
    indexed = Indexed(source, order, index.base_rows if previous is not None else 0,
                      None if previous is None else dropped)
    if update and (fresh or previous is None or gone or stamps != known_dirs):
        stored = source.select(list(STORED))  # the files' columns: the takes below copy no log tails
        from_delta = order[order >= index.base_rows] if previous is not None else order
        if previous is None or gone or len(from_delta) > DELTA_SHARE * len(order):  # a delta only adds rows
            job = partial(_write_base, index, stored, order, stamps)
        else:
            tail = stored.slice(index.base_rows)  # the old delta and the rows just read: few, so take copies little
            delta = tail.take(pa.array(from_delta - index.base_rows))
            job = partial(index.write, None, delta, stamps if stamps != known_dirs else None)
        if writer is not None:
            indexed.saved = writer.submit(job)
        else:
            job()
    return indexed


def frames(table: pa.Table) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(cells, history) of the index's rows."""
    if table.num_columns and table.column(0).num_chunks > MAX_RUNS:  # pandas' Arrow strings are slow over
        table = table.combine_chunks()  # thousands of runs (0.9 s instead of 0.5 at 100,000 records)
    frame = table.to_pandas()
    if "log_tail" not in frame:  # rows of the index's files only
        frame["log_tail"] = pd.Series(index=frame.index, dtype="str")
    frame["reproduced"] = frame["reproduced"].astype(object)  # True, False or None, as a full read has it
    past_rows = [tuple(r) for text in frame["history"].dropna() for r in json.loads(text)]
    cells = frame[list(COLUMNS)]
    return cells, typed_history(past_rows) if past_rows else typed_history([])


def _slash(cell: str) -> str:
    return cell + "/"  # the full read's order: by record path, so "p1/..." before "p1-x/..."


class _Known:
    """The index's rows by cell id, without a dict of every cell: the base is in id order (binary search), the
    delta holds few rows (a later row of a cell wins)."""

    def __init__(self, previous: pa.Table | None, base_rows: int) -> None:
        self.ids: list[str] = previous.column("id").to_pylist() if previous is not None else []
        self.base_rows = base_rows
        self.delta = {cell: base_rows + i for i, cell in enumerate(self.ids[base_rows:])}
        self.delta_dirs: dict[str, set[str]] = {}  # "policy/gpu" -> its cells in the delta: a scattered rerun
        for cell in self.delta:  # asks for a thousand directories, each scan of the delta was 2,000 compares
            self.delta_dirs.setdefault(cell.rpartition("/")[0], set()).add(cell)

    @cached_property
    def slashed(self) -> list[str]:
        """The base's ids as they sort (_slash), so that a search compares strings without a key function: a
        collect with a delta of 10,000 rows searched for each, 170,000 key calls (0.05 s)."""
        return [_slash(cell) for cell in self.ids[:self.base_rows]]

    def _in_base(self, cell: str) -> int:
        i = bisect_left(self.slashed, _slash(cell))
        return i if i < self.base_rows and self.ids[i] == cell else -1

    def row(self, cell: str) -> int:
        """The cell's newest row (-1: none)."""
        return self.delta[cell] if cell in self.delta else self._in_base(cell)

    def under(self, gpu_dir: str) -> set[str]:
        """The cells known in this gpu directory ("policy/gpu")."""
        low = bisect_left(self.slashed, gpu_dir + "/")
        high = bisect_left(self.slashed, gpu_dir + "0", low)  # "0" follows "/"
        return set(self.ids[low:high]) | self.delta_dirs.get(gpu_dir, set())

    def order(self, dropped: set[str], fresh: list[str]) -> np.ndarray:
        """The positions, in the index's rows followed by the `fresh` ones, of the rows now in id order: the base
        rows still current, with the delta's and the fresh rows merged in (no sort of every id)."""
        stale = {self._in_base(cell) for cell in self.delta.keys() | dropped} - {-1}
        base = np.delete(np.arange(self.base_rows, dtype=np.int64), sorted(stale))
        count = len(self.ids)

        def key(row: int) -> str:
            return _slash(self.ids[row] if row < count else fresh[row - count])

        extra = sorted([row for cell, row in self.delta.items() if cell not in dropped]
                       + list(range(count, count + len(fresh))), key=key)
        if not extra:
            return base
        in_base = [bisect_left(self.slashed, key(row)) for row in extra]  # where each goes among all base rows
        return np.insert(base, np.searchsorted(base, in_base), extra)  # ... so among the current ones


def _splice(source: pa.Table, order: np.ndarray) -> pa.Table:
    """source's rows at `order`, as runs of zero-copy slices: Arrow's `take` copies every text column row by
    row (most of a collect's read at 100,000 records, where a rerun changes a few rows)."""
    if not len(order):
        return source.slice(0, 0)
    starts = np.flatnonzero(np.r_[True, np.diff(order) != 1])
    ends = np.r_[starts[1:], len(order)]
    return pa.concat_tables([source.slice(order[a], b - a) for a, b in zip(starts.tolist(), ends.tolist(),
                                                                           strict=True)])
