"""The last collect's slices (slices.py), kept in DIR/.collect-index/slices.arrow for the next collect.

They hold under a digest of what else they depend on (the settings, the catalog, the selection, pandas' version
and this package's collect code) and beside the cells.csv and matrix.csv written with them (inode, mtime and
size): a slice's CSV rows are not stored twice but cut from those files (the store keeps where each policy's rows
start, in bytes), and the next collect computes changes.md from the kept matrix rows of the policies it computes
again, which is right only while matrix.csv is the one they were written with. The builds, versions and fixes,
the same for most policies, are stored once each. Each slice's JSON is kept as bytes and read as a view of the
memory-mapped store; its spans and hits (`pairs`) apart, parsed only when a merge wants them. Anything else
(missing, foreign, stale) means computing every slice, as a first collect does.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, fields
from functools import cache
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa

from ..jsonio import loads
from .arrow_files import read_table, write_table
from .index import identities
from .settings import Settings
from .slices import CELLS_HEADER, MATRIX_HEADER, SMALL, Slice

STORE_FILE = "slices.arrow"
DIGEST_KEY = b"export-matrix-slices"
FILES_KEY = b"export-matrix-slices-files"  # the identities of cells.csv and matrix.csv
SHARED_KEY = b"export-matrix-slices-shared"  # each value of SHARED once: the slices refer to them by number
SHARED = ("builds", "gpu_versions", "fixes")  # the same for most policies (their versions strings are long)
COLUMNS = ["policy", "cells_start", "cells_end", "matrix_start", "matrix_end", "small", "pairs"]
CSV_FILES = ("cells.csv", "matrix.csv")


@cache
def _code_digest() -> str:
    digest = hashlib.sha1(pd.__version__.encode())
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def digest(settings: Settings, selection: object) -> str:
    """What the slices depend on besides their policies' records."""
    plain = {f.name: getattr(settings, f.name) for f in fields(Settings)
             if f.name not in ("catalog", "out_dir", "read_threads")}
    entries = [{**asdict(e), "patterns": [p.pattern for p in e.patterns]} for e in settings.catalog.entries]
    text = json.dumps([_code_digest(), plain, entries, selection], sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()


def _files(out_dir: Path) -> bytes:
    found = identities(out_dir, CSV_FILES)
    return b"" if found is None else orjson.dumps(found)


def load(root: Path, key: str, out_dir: Path) -> dict[str, Slice] | None:
    table = read_table(root / STORE_FILE)
    if table is None or table.column_names != COLUMNS or any(table.schema.field(name).type != pa.large_binary()
                                                             for name in ("small", "pairs")):
        return None
    metadata, files = table.schema.metadata or {}, _files(out_dir)
    if not files or metadata.get(DIGEST_KEY) != key.encode() or metadata.get(FILES_KEY) != files:
        return None
    try:
        # Views, not copies: a slice's rows are joined into the next files as they are (45 MB at 100,000 records)
        cells_data, matrix_data = (memoryview((out_dir / name).read_bytes()) for name in CSV_FILES)
        shared = loads(metadata[SHARED_KEY])
        stored_shared = [orjson.dumps(value) for value in shared]
        names, small, pairs = (table.column("policy").to_pylist(), _views(table.column("small")),
                               _views(table.column("pairs")))
        c0s, c1s, m0s, m1s = (table.column(c).to_numpy().tolist() for c in COLUMNS[1:5])
        if names and (c1s[-1] != len(cells_data) or m1s[-1] != len(matrix_data)):
            return None
        slices = {}
        for name, c0, c1, m0, m1, text, packed in zip(names, c0s, c1s, m0s, m1s, small, pairs, strict=True):
            fields_ = loads(text)
            for field_ in SHARED:  # one object for the slices with the same value: read, never changed
                fields_[field_] = shared[fields_[field_]]
            slices[name] = Slice(cells_csv=cells_data[c0:c1], matrix_csv=matrix_data[m0:m1],
                                 stored=(stored_shared, text), pairs=packed, **fields_)
        return slices
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None


def stored(slices: dict[str, Slice], order: list[str], key: str) -> pa.Table:
    """The store of these slices, whose rows are cells.csv's and matrix.csv's in `order`: made while those files
    are written, and saved (`save`) once they are. A kept slice's JSON is written as it was read, numbering the
    shared values as its store did; the store's values no longer used stay until a collect computes every slice."""
    base = next((piece.stored[0] for piece in slices.values() if piece.stored is not None), [])
    shared: dict[bytes, int] = {value: number for number, value in enumerate(base)}
    pieces = [slices[name] for name in order]
    at: dict[str, np.ndarray] = {}
    for name, header, column in (("cells", CELLS_HEADER, "cells_csv"), ("matrix", MATRIX_HEADER, "matrix_csv")):
        lengths = np.fromiter((len(getattr(piece, column)) for piece in pieces), np.int64, len(pieces))
        at[f"{name}_end"] = len(header.encode()) + np.cumsum(lengths)
        at[f"{name}_start"] = at[f"{name}_end"] - lengths
    small = [piece.stored[1] if piece.stored is not None and piece.stored[0] is base else _small(piece, shared)
             for piece in pieces]
    table = pa.table({"policy": pa.array(order, pa.string()),
                      **{column: pa.array(at[column]) for column in COLUMNS[1:5]},
                      "small": _binary(small),
                      "pairs": _binary([piece.pairs if not isinstance(piece.pairs, dict) else orjson.dumps(piece.pairs)
                                        for piece in pieces])},
                     metadata={DIGEST_KEY: key.encode(), SHARED_KEY: b"[" + b",".join(shared) + b"]"})
    return table


def save(root: Path, table: pa.Table, out_dir: Path) -> None:
    """Keep the store (`stored`) beside the cells.csv and matrix.csv just written (a store that cannot be written
    costs time only)."""
    table = table.replace_schema_metadata({**table.schema.metadata, FILES_KEY: _files(out_dir)})
    try:
        root.mkdir(parents=True, exist_ok=True)
        write_table(root / STORE_FILE, table)
    except OSError:
        pass


def _small(piece: Slice, shared: dict[bytes, int]) -> bytes:
    """A computed slice's SMALL fields as JSON, its SHARED values numbered (new ones added to `shared`)."""
    fields_ = {k: getattr(piece, k) for k in SMALL}
    for field_ in SHARED:
        fields_[field_] = shared.setdefault(orjson.dumps(fields_[field_]), len(shared))
    return orjson.dumps(fields_)


def _binary(values: list[bytes | memoryview]) -> pa.LargeBinaryArray:
    """The values as one Arrow array, built from their joined bytes and offsets: pa.array converts value by value
    (0.02 to 0.05 s for 10 MB of slices at 100,000 records)."""
    lengths = np.fromiter(map(len, values), np.int64, len(values))
    offsets = np.concatenate([np.zeros(1, np.int64), np.cumsum(lengths)])
    return pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(values),
                                            [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(values))])


def _views(column: pa.ChunkedArray) -> list[memoryview]:
    """Each value of a large_binary column as a view of the (memory-mapped) file: no copy, no decoding."""
    array = column.combine_chunks()
    if not len(array):
        return []
    _, offsets, data = array.buffers()
    at = np.frombuffer(offsets, np.int64)[array.offset:array.offset + len(array) + 1].tolist()
    view = memoryview(data) if data is not None else memoryview(b"")
    return [view[start:end] for start, end in zip(at[:-1], at[1:], strict=True)]
