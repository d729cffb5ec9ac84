"""One slice per policy: everything the outputs take from that policy's records, so that a collect after a rerun
computes again only the policies whose records changed.

A policy's cells.csv and matrix.csv rows, its matrix cells in Markdown and HTML, its part of the failure summary,
its new failures, the versions its records carry and its rows of report.html's cells table depend on that
policy's records and the settings only. `compute` classifies and renders the cells of any set of policies and
cuts the result into slices; `assemble` (assemble.py) puts the outputs together from all slices. A collect from
scratch computes every slice at once; the next one keeps the slices (slice_store.py) of the policies whose
records did not change (tests/test_slices.py: the same bytes either way).
"""

from __future__ import annotations

import csv
import functools
import io
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from . import render_html
from .catalog import NEW, flag_column
from .failure_summary import Part, columns, policy_parts
from .render_md import cell_text, md_text, row_dicts
from .rules import CELL_COLUMNS, MATRIX_COLUMNS, build_matrix, cells_table, classify_cells
from .settings import Settings

MAX_CELL_ROWS = render_html.MAX_CELL_ROWS
ROW_END = "\x1e\n"  # ends each row of a frame written at once: no cell text holds \x1e (else row by row)


def csv_header(names: list[str]) -> str:
    return pd.DataFrame(columns=names).to_csv(index=False, lineterminator="\n")


CELLS_HEADER = csv_header(CELL_COLUMNS)
MATRIX_HEADER = csv_header(MATRIX_COLUMNS)


@dataclass
class Slice:
    """What the outputs take from one policy (a policy the matrix expects without records has matrix rows only)."""

    cells_csv: bytes = b""  # its cells.csv rows, in table order (UTF-8: a kept slice's are cut from the file)
    matrix_csv: bytes = b""  # its matrix.csv rows, in table order
    md: dict[str, str] = field(default_factory=dict)  # GPU -> its matrix.md cell
    html: dict[str, str] = field(default_factory=dict)  # GPU -> its report.html cell
    symbols: list[str] = field(default_factory=list)  # of its matrix rows
    part: Part | None = None  # its part of the failure summary (failure_summary.py); None without a record
    new: list[list[str]] = field(default_factory=list)  # [first error line, cell id, log] of each new failure
    builds: list[list[Any]] = field(default_factory=list)  # [torch, versions, cells], first seen first
    fixes: dict[str, str] = field(default_factory=dict)  # torch build -> its fixes (the last cell's)
    gpu_versions: list[list[str]] = field(default_factory=list)  # [gpu, versions], each pair once, first seen first
    records: int = 0
    newest: str = ""  # the latest ended_at of its records
    rows: list[list[str]] | None = None  # [html, status, failures] of report.html's cells table, when computed
    stored: tuple[list[bytes], str] | None = field(default=None, compare=False, repr=False)  # as slice_store.py
    # read it: the store's shared values and this slice's SMALL fields' JSON, written again as they were


SMALL = (  # the fields slice_store.py keeps as JSON
    "md", "html", "symbols", "part", "new", "builds", "fixes", "gpu_versions", "records", "newest", "rows")


def csv_rows(frame: pd.DataFrame) -> list[str]:
    """Each row's text in frame.to_csv(index=False, header=False, lineterminator="\\n"). Columns of text, float64,
    int64 and bool are formatted as pandas formats them and quoted as the csv module quotes (about half the time
    of to_csv on a thousand policies' cells, where it was the largest part of computing them again); any other
    frame goes through pandas, written once and cut at the row ends."""
    if not len(frame):
        return []
    columns = [_csv_texts(frame[name]) for name in frame.columns] if frame.shape[1] > 1 else [None]
    if any(texts is None for texts in columns):  # a lone empty field is quoted: pandas decides
        return _pandas_rows(frame)
    return [",".join(fields) + "\n" for fields in zip(*columns, strict=True)]


def _quoting_characters() -> str:
    """The characters that make the csv module (pandas' writer) quote a field, asked of it: which ones do has
    changed between Python versions (3.12 leaves a lone "\\r" unquoted)."""
    quoting = ""
    for character in ',"\r\n\t\x1e \\':
        written = io.StringIO()
        csv.writer(written, lineterminator="\n").writerow([f"a{character}", "b"])
        quoting += character if written.getvalue().startswith('"') else ""
    return quoting


QUOTING = _quoting_characters()


def _csv_texts(column: pd.Series) -> list[str] | None:
    """The column's fields as to_csv writes them (missing values empty), or None for a kind not handled here."""
    dtype = column.dtype
    if isinstance(dtype, np.dtype) and dtype.kind in "fib" and dtype.itemsize == (1 if dtype.kind == "b" else 8):
        values = column.to_numpy()
        texts = values.astype(str)  # what pandas does: float64's shortest round-trip text, as repr() gives
        if dtype.kind == "f":
            texts[np.isnan(values)] = ""
        return texts.tolist()  # never quoted: digits, signs, ".", "e", "inf", True/False
    if not isinstance(dtype, pd.StringDtype) and not pd.api.types.is_object_dtype(dtype):
        return None
    try:  # text and missing values only (NaN and None are missing, as to pandas)
        values = pa.array(column, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type) or pa.types.is_null(values.type)):
        return None  # numbers, booleans or bytes among the values: pandas writes each as str() gives it
    texts = pc.fill_null(values.cast(pa.string()), "")
    quoted = functools.reduce(pc.or_, [pc.match_substring(texts, character) for character in QUOTING])
    if pc.any(quoted).as_py():
        wrapped = pc.binary_join_element_wise('"', pc.replace_substring(texts, '"', '""'), '"', "")
        texts = pc.if_else(quoted, wrapped, texts)
    return texts.to_pylist()


def _pandas_rows(frame: pd.DataFrame) -> list[str]:
    text = frame.to_csv(index=False, header=False, lineterminator=ROW_END)
    rows = text.split(ROW_END)
    if len(rows) == len(frame) + 1 and ROW_END[0] not in text.replace(ROW_END, ""):
        return [row + "\n" for row in rows[:-1]]
    return [frame.iloc[[i]].to_csv(index=False, header=False, lineterminator="\n") for i in range(len(frame))]


def compute(cells: pd.DataFrame, history: pd.DataFrame, settings: Settings,
            listed: set[str]) -> tuple[dict[str, Slice], pd.DataFrame]:
    """The slices of the policies of `cells` (policy export cells, in id order) and of the matrix's expected
    pairs, with report.html's cells-table rows for the `listed` policies; and their matrix rows."""
    classified = classify_cells(cells.reset_index(drop=True), history, settings)
    matrix = build_matrix(classified, settings)
    table = cells_table(classified, settings)
    slices: dict[str, Slice] = {policy: Slice() for policy in dict.fromkeys(matrix["policy"].tolist())}

    for policy, text in _csv_by_policy(table).items():
        slices[policy].cells_csv = text
    for policy, text in _csv_by_policy(matrix).items():
        slices[policy].matrix_csv = text
    for row in row_dicts(matrix):
        piece = slices[row["policy"]]
        text = cell_text(row)
        piece.md[row["gpu"]] = md_text(text)
        piece.html[row["gpu"]] = render_html.grid_cell(row, text)
        piece.symbols.append(row["symbol"])
    for policy, part in policy_parts(matrix, classified, settings).items():
        slices[policy].part = part
    if not len(classified):
        return slices, matrix

    new = classified[classified[flag_column(NEW)]]
    for policy, error, cell, log in zip(*columns(new, "policy", "new_error", "id", "log"), strict=True):
        slices[policy].new.append([str(error), cell, log])
    counts = classified.groupby(["policy", "torch", "versions"], sort=False).size()
    for (policy, build, versions), count in counts.items():
        slices[policy].builds.append([build, versions, int(count)])
    for policy, build, fixes in zip(*columns(classified, "policy", "torch", "fixes"), strict=True):
        slices[policy].fixes[build] = fixes
    for policy, gpu, versions in zip(*columns(classified[["policy", "gpu", "versions"]].drop_duplicates(),
                                              "policy", "gpu", "versions"), strict=True):
        slices[policy].gpu_versions.append([gpu, versions])
    for policy, number in classified["policy"].value_counts(sort=False).items():
        slices[policy].records = int(number)
    for policy, ended in zip(*columns(classified, "policy", "ended_at"), strict=True):
        if isinstance(ended, str) and ended > slices[policy].newest:  # not pandas' groupby max: on Arrow strings
            slices[policy].newest = ended  # it imports pyarrow's dataset engine (ssl: a quarter of a second)
    for policy in listed & slices.keys():
        slices[policy].rows = []
    shown = classified[classified["policy"].isin(listed)]
    for policy, html, status, failures in zip(shown["policy"].tolist(), render_html.cell_rows(shown),
                                              *columns(shown, "status", "failures"), strict=True):
        slices[policy].rows.append([html, status, "" if failures is None else str(failures)])
    return slices, matrix


def _csv_by_policy(frame: pd.DataFrame) -> dict[str, bytes]:
    """Each policy's rows of frame's CSV text, in frame's order."""
    texts: dict[str, list[str]] = defaultdict(list)
    for policy, text in zip(frame["policy"].tolist(), csv_rows(frame), strict=True):
        texts[policy].append(text)
    return {policy: "".join(rows).encode() for policy, rows in texts.items()}


def listed_policies(records: dict[str, int]) -> set[str]:
    """The policies whose cells are among the first MAX_CELL_ROWS in id order (report.html lists those)."""
    listed, seen = set(), 0
    for policy in sorted(records, key=id_order):
        if seen >= MAX_CELL_ROWS:
            break
        if records[policy]:
            listed.add(policy)
            seen += records[policy]
    return listed


def id_order(policy: str) -> str:
    """Cells sort by id (policy/gpu/torch), so each policy's cells are together, in the order of "policy/"."""
    return policy + "/"
