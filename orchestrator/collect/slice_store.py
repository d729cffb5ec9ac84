"""The last collect's slices (slices.py), kept in DIR/.collect-index/slices.arrow for the next collect.

They hold under a digest of what else they depend on (the settings, the catalog, the selection, pandas' version
and this package's collect code) and beside the cells.csv and matrix.csv written with them (inode, mtime and
size): a slice's CSV rows are not stored twice but cut from those files (the store keeps where each policy's rows
start, in bytes), and the next collect computes changes.md from the kept matrix rows of the policies it computes
again, which is right only while matrix.csv is the one they were written with. The builds, versions and fixes,
the same for most policies, are stored once each. Anything else (missing, foreign, stale) means computing every
slice, as a first collect does.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, fields
from functools import cache
from pathlib import Path

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
COLUMNS = ["policy", "cells_start", "cells_end", "matrix_start", "matrix_end", "small"]
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
    if table is None or table.column_names != COLUMNS:
        return None
    metadata, files = table.schema.metadata or {}, _files(out_dir)
    if not files or metadata.get(DIGEST_KEY) != key.encode() or metadata.get(FILES_KEY) != files:
        return None
    try:
        # Views, not copies: a slice's rows are joined into the next files as they are (45 MB at 100,000 records)
        cells_data, matrix_data = (memoryview((out_dir / name).read_bytes()) for name in CSV_FILES)
        shared = loads(metadata[SHARED_KEY])
        stored_shared = [orjson.dumps(value) for value in shared]
        names, small = table.column("policy").to_pylist(), table.column("small").to_pylist()
        c0s, c1s, m0s, m1s = (table.column(c).to_numpy().tolist() for c in COLUMNS[1:5])
        if names and (c1s[-1] != len(cells_data) or m1s[-1] != len(matrix_data)):
            return None
        slices = {}
        for name, c0, c1, m0, m1, text in zip(names, c0s, c1s, m0s, m1s, small, strict=True):
            fields_ = loads(text)
            for field_ in SHARED:  # one object for the slices with the same value: read, never changed
                fields_[field_] = shared[fields_[field_]]
            slices[name] = Slice(cells_csv=cells_data[c0:c1], matrix_csv=matrix_data[m0:m1],
                                 stored=(stored_shared, text), **fields_)
        return slices
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None


def save(root: Path, slices: dict[str, Slice], order: list[str], key: str, out_dir: Path) -> None:
    """Keep the slices with the cells.csv and matrix.csv just written, whose rows are theirs in `order` (a store
    that cannot be written costs time only). A kept slice's JSON is written as it was read, numbering the shared
    values as its store did; the store's values no longer used stay until a collect computes every slice."""
    base = next((piece.stored[0] for piece in slices.values() if piece.stored is not None), [])
    shared: dict[bytes, int] = {value: number for number, value in enumerate(base)}
    at: dict[str, list[int]] = {column: [] for column in COLUMNS[1:5]}
    small = []
    cells_end, matrix_end = len(CELLS_HEADER.encode()), len(MATRIX_HEADER.encode())
    for name in order:
        piece = slices[name]
        at["cells_start"].append(cells_end)
        at["matrix_start"].append(matrix_end)
        cells_end, matrix_end = cells_end + len(piece.cells_csv), matrix_end + len(piece.matrix_csv)
        at["cells_end"].append(cells_end)
        at["matrix_end"].append(matrix_end)
        if piece.stored is not None and piece.stored[0] is base:
            small.append(piece.stored[1])
            continue
        fields_ = {k: getattr(piece, k) for k in SMALL}
        for field_ in SHARED:
            fields_[field_] = shared.setdefault(orjson.dumps(fields_[field_]), len(shared))
        small.append(orjson.dumps(fields_).decode())
    table = pa.table({"policy": pa.array(order, pa.string()),
                      **{column: pa.array(values, pa.int64()) for column, values in at.items()},
                      "small": pa.array(small, pa.large_string())},
                     metadata={DIGEST_KEY: key.encode(), FILES_KEY: _files(out_dir),
                               SHARED_KEY: b"[" + b",".join(shared) + b"]"})
    try:
        root.mkdir(parents=True, exist_ok=True)
        write_table(root / STORE_FILE, table)
    except OSError:
        pass
