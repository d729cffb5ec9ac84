"""One slice per policy: everything the outputs take from that policy's records, so that a collect after a rerun
computes again only the policy x gpu pairs whose records changed.

A policy's cells.csv and matrix.csv rows, its matrix cells in Markdown and HTML, its GPUs' hits (what its part
of the failure summary takes from each GPU), its new failures and its rows of report.html's cells table depend
on its records of that GPU and the settings only; its builds, versions, fixes, record count and part of the
failure summary on all its records (the part through its GPUs' hits). `compute` classifies and renders the
cells of whole policies and cuts the result into slices, `compute_pairs` the same for some GPUs of their
policies, without the fields of all a policy's cells; `merge` puts a policy's slice together
from its kept slice's other GPUs and the GPUs computed again (the fields of all its cells read again from the
index: a few columns, no classifying); `assemble` (assemble.py) puts the outputs together from all slices. A
collect from scratch computes every slice at once; the next one keeps the slices (slice_store.py)
(tests/test_slices.py: the same bytes either way).
"""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..jsonio import loads
from . import render_html
from .catalog import NEW, flag_column
from .failure_summary import GpuNotes, Hits, Part, columns, order, pair_hits, policy_part
from .render_md import cell_text, md_text, row_dicts
from .rules import CELL_COLUMNS, MATRIX_COLUMNS, build_matrix, cells_table, classify_cells, with_fixes
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

    cells_csv: bytes | memoryview = b""  # its cells.csv rows, in table order (UTF-8: a kept slice's are a view of
    # the file)
    matrix_csv: bytes | memoryview = b""  # its matrix.csv rows, in table order
    md: dict[str, str] = field(default_factory=dict)  # GPU -> its matrix.md cell
    html: dict[str, str] = field(default_factory=dict)  # GPU -> its report.html cell
    symbols: dict[str, str] = field(default_factory=dict)  # GPU -> its matrix row's symbol
    part: Part | None = None  # its part of the failure summary (failure_summary.py); None without a record
    new: list[list[str]] = field(default_factory=list)  # [first error line, cell id, log] of each new failure
    builds: list[list[Any]] = field(default_factory=list)  # [torch, versions, cells], first seen first
    fixes: dict[str, str] = field(default_factory=dict)  # torch build -> its fixes (the last cell's)
    gpu_versions: list[list[str]] = field(default_factory=list)  # [gpu, versions], each pair once, first seen first
    records: int = 0
    newest: str = ""  # the latest ended_at of its records
    rows: list[list[str]] | None = None  # [html, status, failures] of report.html's cells table, when computed
    # as slice_store.py read it: the store's shared values and this slice's SMALL fields' JSON (a view of the store),
    # written again as they were
    stored: tuple[list[bytes], bytes | memoryview] | None = field(default=None, compare=False, repr=False)
    # {"spans": ..., "hits": ...}, or as the store keeps it, JSON read on first use: only a merge wants them, and
    # parsing every kept slice's took a third of reading the store
    pairs: dict[str, dict[str, Any]] | bytes | memoryview = field(default_factory=lambda: {"spans": {}, "hits": {}},
                                                                  repr=False)

    @property
    def spans(self) -> dict[str, list[int]]:
        """GPU -> [its cells_csv bytes, its matrix_csv bytes], in table order."""
        return self._pairs()["spans"]

    @property
    def hits(self) -> dict[str, Hits]:
        """GPU with a record -> its hits (failure_summary.py)."""
        return self._pairs()["hits"]

    def _pairs(self) -> dict[str, dict[str, Any]]:
        if not isinstance(self.pairs, dict):
            self.pairs = loads(self.pairs)
        return self.pairs


SMALL = (  # the fields slice_store.py keeps as JSON (and `pairs` apart)
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
QUOTED = "[" + "".join(f"\\x{{{ord(character):x}}}" for character in QUOTING) + "]"  # RE2: any of them


def _csv_texts(column: pd.Series) -> list[str] | None:
    """The column's fields as to_csv writes them (missing values empty), or None for a kind not handled here."""
    dtype = column.dtype
    if isinstance(dtype, np.dtype) and dtype.kind in "fib" and dtype.itemsize == (1 if dtype.kind == "b" else 8):
        values = column.to_numpy()
        # what pandas does: float64's shortest round-trip text, as repr() gives (half the time of numpy's astype)
        texts = list(map(repr if dtype.kind == "f" else str, values.tolist()))
        if dtype.kind == "f":
            for missing in np.flatnonzero(np.isnan(values)).tolist():
                texts[missing] = ""
        return texts  # never quoted: digits, signs, ".", "e", "inf", True/False
    if not isinstance(dtype, pd.StringDtype) and not pd.api.types.is_object_dtype(dtype):
        return None
    try:  # text and missing values only (NaN and None are missing, as to pandas)
        values = pa.array(column, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type) or pa.types.is_null(values.type)):
        return None  # numbers, booleans or bytes among the values: pandas writes each as str() gives it
    texts = pc.fill_null(values.cast(pa.string()), "")
    quoted = pc.match_substring_regex(texts, QUOTED)
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
    slices, matrix = _pair_fields(classified, settings, listed)
    fields = _policy_fields(classified)
    gpu_note = GpuNotes(settings)
    for policy, piece in slices.items():
        _set_policy_fields(piece, fields.get(policy), settings, gpu_note)
    return slices, matrix


def compute_pairs(cells: pd.DataFrame, history: pd.DataFrame, settings: Settings,
                  listed: set[str]) -> tuple[dict[str, Slice], pd.DataFrame]:
    """As `compute`, without the fields of all a policy's cells (`merge` adds them): for cells of some of their
    policies' GPUs."""
    return _pair_fields(classify_cells(cells.reset_index(drop=True), history, settings), settings, listed)


def _pair_fields(classified: pd.DataFrame, settings: Settings,
                 listed: set[str]) -> tuple[dict[str, Slice], pd.DataFrame]:
    """The slices with what each policy x gpu gives them: CSV rows, matrix cells, hits, new failures, cells-table
    rows (the fields a merge takes GPU by GPU); and the matrix rows."""
    matrix = build_matrix(classified, settings)
    slices: dict[str, Slice] = {policy: Slice() for policy in dict.fromkeys(matrix["policy"].tolist())}
    cells_text = _csv_by_pair(cells_table(classified, settings))
    matrix_text = _csv_by_pair(matrix)
    for row in row_dicts(matrix):
        policy, gpu = row["policy"], row["gpu"]
        piece = slices[policy]
        cells_rows, matrix_row = cells_text.get((policy, gpu), b""), matrix_text[(policy, gpu)]
        piece.cells_csv += cells_rows
        piece.matrix_csv += matrix_row
        piece.spans[gpu] = [len(cells_rows), len(matrix_row)]
        text = cell_text(row)
        piece.md[gpu] = md_text(text)
        piece.html[gpu] = render_html.grid_cell(row, text)
        piece.symbols[gpu] = row["symbol"]
    for (policy, gpu), hits in pair_hits(matrix, classified).items():
        slices[policy].hits[gpu] = hits
    if not len(classified):
        return slices, matrix
    new = classified[classified[flag_column(NEW)]]
    for policy, error, cell, log in zip(*columns(new, "policy", "new_error", "id", "log"), strict=True):
        slices[policy].new.append([str(error), cell, log])
    for policy in listed & slices.keys():
        slices[policy].rows = []
    shown = classified[classified["policy"].isin(listed)]
    for policy, html, status, failures in zip(shown["policy"].tolist(), render_html.cell_rows(shown),
                                              *columns(shown, "status", "failures"), strict=True):
        slices[policy].rows.append([html, status, "" if failures is None else str(failures)])
    return slices, matrix


@dataclass
class PolicyFields:
    """What a slice takes from all of its policy's cells at once (builds first seen first)."""

    builds: list[list[Any]] = field(default_factory=list)
    fixes: dict[str, str] = field(default_factory=dict)
    gpu_versions: list[list[str]] = field(default_factory=list)
    records: int = 0
    newest: str = ""
    stock_set: set[str] = field(default_factory=set)  # its builds with a stock cell (its builds: fixes' keys)


LIGHT_COLUMNS = ["policy", "gpu", "torch", "versions", "fixes", "ended_at"]  # what _policy_fields reads (with
# "stock" and the effective fixes: rules.with_fixes)


def _policy_fields(cells: pd.DataFrame) -> dict[str, PolicyFields]:
    """Each policy's fields from its cells (LIGHT_COLUMNS and "stock", in id order): builds, versions and fixes
    first seen first. Worked out on the columns' codes (pandas.factorize), then one step per distinct value: row
    by row, making every versions text a Python string took 0.02 s at 100,000 cells, the loop 0.15 s."""
    if not len(cells):
        return {}
    (policy, policies), (gpu, gpus), (build, builds), (versions, texts), (fixes, fix_texts) = (
        pd.factorize(cells[name]) for name in ("policy", "gpu", "torch", "versions", "fixes"))
    names, build_names, gpu_names, version_texts = policies.tolist(), builds.tolist(), gpus.tolist(), texts.tolist()
    fields = {name: PolicyFields(records=count)
              for name, count in zip(names, np.bincount(policy, minlength=len(names)).tolist(), strict=True)}
    for name, newest in zip(names, _latest(cells["ended_at"], policy, len(names)), strict=True):
        fields[name].newest = newest
    group, first = _groups(policy, build, versions)
    counts = np.bincount(group)
    counted = versions[first] >= 0  # as grouping by versions does: missing values left out
    first, counts = first[counted], counts[counted]
    for p, b, v, count in zip(policy[first].tolist(), build[first].tolist(), versions[first].tolist(),
                              counts.tolist(), strict=True):
        fields[names[p]].builds.append([build_names[b], version_texts[v], count])
    group, first = _groups(policy, build)
    last = np.zeros(len(first), dtype=np.int64)
    np.maximum.at(last, group, np.arange(len(cells)))
    stocked = np.bincount(group, weights=cells["stock"].to_numpy(dtype=float), minlength=len(first)) > 0
    fix_names = [*fix_texts.tolist(), ""]  # code -1: missing, as rules.with_fixes writes it
    for p, b, fix, is_stock in zip(policy[first].tolist(), build[first].tolist(), fixes[last].tolist(),
                                   stocked.tolist(), strict=True):
        entry, name = fields[names[p]], build_names[b]
        entry.fixes[name] = fix_names[fix]  # the build's last cell's
        if is_stock:
            entry.stock_set.add(name)
    version_texts.append(None)  # code -1: missing
    first = _groups(policy, gpu, versions)[1]
    for p, g, v in zip(policy[first].tolist(), gpu[first].tolist(), versions[first].tolist(), strict=True):
        fields[names[p]].gpu_versions.append([gpu_names[g], version_texts[v]])
    return fields


def _groups(*codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's group (its combination of codes), groups numbered first seen first; and each group's first
    row."""
    key = np.zeros(len(codes[0]), dtype=np.int64)
    for column in codes:
        key = key * (int(column.max()) + 2) + (column + 1)
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    seen = np.argsort(first, kind="stable")
    number = np.empty(len(seen), dtype=np.int64)
    number[seen] = np.arange(len(seen))
    return number[inverse.reshape(-1)], first[seen]


def _latest(ended: pd.Series, policy: np.ndarray, policies: int) -> list[str]:
    """Each policy's latest ended_at ("" without one): the highest of its stamps, ranked among the distinct
    ones."""
    if not isinstance(ended.dtype, pd.StringDtype):  # text or missing only
        ended = ended.map(lambda value: value if isinstance(value, str) else None, na_action="ignore")
    codes, stamps = pd.factorize(ended)
    latest = [""] * policies
    if not len(stamps):
        return latest
    ordered = sorted(stamps.tolist())
    rank = {stamp: i for i, stamp in enumerate(ordered)}
    ranks = np.array([rank[stamp] for stamp in stamps.tolist()] + [-1], dtype=np.int64)[codes]  # -1: none
    best = np.full(policies, -1, dtype=np.int64)
    np.maximum.at(best, policy, ranks)
    return [ordered[at] if at >= 0 else "" for at in best.tolist()]


def _set_policy_fields(piece: Slice, fields: PolicyFields | None, settings: Settings, gpu_note: GpuNotes) -> None:
    fields = fields or PolicyFields()
    piece.builds, piece.fixes, piece.gpu_versions = fields.builds, fields.fixes, fields.gpu_versions
    piece.records, piece.newest = fields.records, fields.newest
    piece.part = policy_part(piece.hits, set(fields.fixes), fields.stock_set, settings, gpu_note)


def merge(kept: dict[str, Slice], fresh: dict[str, Slice], changed: dict[str, set[str] | None], light: pd.DataFrame,
          settings: Settings) -> dict[str, Slice]:
    """The slices of the `changed` policies (policy -> its GPUs whose records changed; None: all of them, its kept
    slice if any left aside) from the `fresh` slices (compute_pairs) of those GPUs' cells and the kept slices'
    other GPUs, which stand as they were; the fields of all a policy's cells from `light` (LIGHT_COLUMNS of every
    cell of those policies, in id order). A policy left without a GPU is gone. A policy merged GPU by GPU must not
    be listed in the cells table (its rows are not merged)."""
    fields = _policy_fields(with_fixes(light, settings))
    key, gpu_note = order(settings.gpus), GpuNotes(settings)
    merged = {}
    for policy, gpus in changed.items():
        old, new = kept[policy] if gpus is not None else Slice(), fresh.get(policy) or Slice()
        old_at, new_at = _spans(old), _spans(new)
        piece = Slice(rows=new.rows if gpus is None else None)
        for gpu in sorted({g for g in old.spans if g not in (gpus or ())} | new.spans.keys(), key=key):
            source, (c0, c1, m0, m1) = (new, new_at[gpu]) if gpu in new_at else (old, old_at[gpu])
            piece.cells_csv += source.cells_csv[c0:c1]
            piece.matrix_csv += source.matrix_csv[m0:m1]
            piece.spans[gpu] = [c1 - c0, m1 - m0]
            piece.md[gpu], piece.html[gpu], piece.symbols[gpu] = source.md[gpu], source.html[gpu], source.symbols[gpu]
            if gpu in source.hits:
                piece.hits[gpu] = source.hits[gpu]
        if not piece.spans:
            continue
        kept_new = [entry for entry in old.new if entry[1].split("/")[1] not in (gpus or ())]
        piece.new = sorted(kept_new + new.new, key=lambda entry: entry[1] + "/") if kept_new else new.new  # id order
        _set_policy_fields(piece, fields.get(policy), settings, gpu_note)
        merged[policy] = piece
    return merged


def _spans(piece: Slice) -> dict[str, tuple[int, int, int, int]]:
    """Where each GPU's rows are in piece's cells_csv and matrix_csv (start, end, start, end)."""
    at, cells_at, matrix_at = {}, 0, 0
    for gpu, (cells_length, matrix_length) in piece.spans.items():
        at[gpu] = (cells_at, cells_at + cells_length, matrix_at, matrix_at + matrix_length)
        cells_at, matrix_at = cells_at + cells_length, matrix_at + matrix_length
    return at


def matrix_rows(piece: Slice, gpus: set[str] | None = None) -> bytes:
    """The slice's matrix.csv rows of these GPUs (all: None)."""
    if gpus is None:
        return bytes(piece.matrix_csv)
    return b"".join(piece.matrix_csv[m0:m1] for gpu, (_, _, m0, m1) in _spans(piece).items() if gpu in gpus)


def _csv_by_pair(frame: pd.DataFrame) -> dict[tuple[str, str], bytes]:
    """Each policy x gpu's rows of frame's CSV text, in frame's order."""
    texts: dict[tuple[str, str], list[str]] = defaultdict(list)
    for policy, gpu, text in zip(frame["policy"].tolist(), frame["gpu"].tolist(), csv_rows(frame), strict=True):
        texts[(policy, gpu)].append(text)
    return {pair: "".join(rows).encode() for pair, rows in texts.items()}


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
