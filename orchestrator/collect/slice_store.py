"""The last collect's slices (slices.py), kept in DIR/.collect-index/slices.arrow for the next collect.

They hold under a digest of what else they depend on (the settings, the catalog, the selection, pandas' version
and this package's collect code) and beside the matrix.csv written with them (its inode, mtime and size): the
next collect computes changes.md from the kept matrix rows of the policies it computes again, which is right only
while matrix.csv is the one they were written with. Anything else (missing, foreign, stale) means computing every
slice, as a first collect does.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, fields
from functools import cache
from pathlib import Path

import orjson
import pandas as pd
import pyarrow as pa

from ..jsonio import loads
from .arrow_files import read_table, write_table
from .settings import Settings
from .slices import SMALL, Slice

STORE_FILE = "slices.arrow"
DIGEST_KEY = b"export-matrix-slices"
MATRIX_KEY = b"export-matrix-slices-matrix-csv"
COLUMNS = ["policy", "cells_csv", "matrix_csv", "small"]


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


def _identity(path: Path) -> bytes:
    try:
        st = os.stat(path)
    except OSError:
        return b""
    return f"{st.st_ino}:{st.st_mtime_ns}:{st.st_size}".encode()


def load(root: Path, key: str, matrix_csv: Path) -> dict[str, Slice] | None:
    table = read_table(root / STORE_FILE)
    if table is None or table.column_names != COLUMNS:
        return None
    metadata, identity = table.schema.metadata or {}, _identity(matrix_csv)
    if not identity or metadata.get(DIGEST_KEY) != key.encode() or metadata.get(MATRIX_KEY) != identity:
        return None
    names, cells, matrix, small = (table.column(c).to_pylist() for c in COLUMNS)
    return {name: Slice(cells_csv=c, matrix_csv=m, **loads(s))
            for name, c, m, s in zip(names, cells, matrix, small, strict=True)}


def save(root: Path, slices: dict[str, Slice], key: str, matrix_csv: Path) -> None:
    """Keep the slices with the matrix.csv just written (a store that cannot be written costs time only)."""
    names = list(slices)
    table = pa.table({"policy": pa.array(names, pa.string()),
                      "cells_csv": pa.array([slices[n].cells_csv for n in names], pa.large_string()),
                      "matrix_csv": pa.array([slices[n].matrix_csv for n in names], pa.large_string()),
                      "small": pa.array([orjson.dumps({k: getattr(slices[n], k) for k in SMALL}).decode()
                                         for n in names], pa.large_string())},
                     metadata={DIGEST_KEY: key.encode(), MATRIX_KEY: _identity(matrix_csv)})
    try:
        root.mkdir(parents=True, exist_ok=True)
        write_table(root / STORE_FILE, table)
    except OSError:
        pass
