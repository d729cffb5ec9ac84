"""Rendered rows remembered by their content, so a collect renders again only the rows that changed.

pandas' `to_csv` of cells.csv took a second at 100,000 cells, and the matrix's cell texts (Markdown and HTML) most
of the rest; after a rerun almost every row is the same as before. Each row is keyed by a 64-bit hash of its
values (exact float bits, a missing value told apart from the text "None"); a row whose key the memo holds for
that rendering reuses its text, the others are rendered together. A rendering's scope names it and digests what
else its text depends on: the columns and their types, pandas' version and this package's rendering code, so a
changed renderer never serves old texts. CSV rows go through `to_csv` (which formats each value on its own), so
the result is byte for byte `frame.to_csv(index=False, lineterminator="\\n")` (tests/test_row_memo.py). The memo
lives in DIR/.collect-index/rows.arrow and, like the collect index, a delta beside it (rows-delta.arrow: the texts
rendered since the base was written, which names it by a token), so that a collect after a rerun writes a few
thousand texts rather than all of them; once the delta or the texts no longer used outgrow a quarter of the
texts in use, a new base holds only those.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from .arrow_files import read_table, write_table

MEMO_FILE = "rows.arrow"
DELTA_FILE = "rows-delta.arrow"
TOKEN_KEY = b"export-matrix-row-memo-base"
REWRITE_SHARE = 0.25  # a delta, or texts no longer used, above this share of the texts used: a new base
ROW_END = "\x1e\n"  # ends each row of the rows rendered together: no cell text holds \x1e (else: no memo)
_MIX = np.uint64(0x9E3779B97F4A7C15)


def row_keys(frame: pd.DataFrame) -> list[int]:
    """One 64-bit key per row from every column's values; the same values give the same key."""
    keys = np.full(len(frame), len(frame.columns), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for name in frame.columns:
            column = frame[name]
            if column.dtype.kind == "f":  # the bits: -0.0 and 0.0 are written differently
                hashed = pd.util.hash_array(np.ascontiguousarray(column.to_numpy()).view(np.uint64))
            elif column.dtype.kind in "biu":
                hashed = pd.util.hash_array(column.to_numpy())
            else:  # texts repeat (versions, errors): each distinct one hashed once; missing is not "None"
                codes, uniques = pd.factorize(column, use_na_sentinel=True)
                hashed = np.append(pd.util.hash_array(np.asarray(uniques, dtype=object), categorize=False),
                                   _MIX)[codes]  # already distinct: hash_array's own factorizing is pure cost
            keys = keys * _MIX + hashed + np.uint64(1)
        # splitmix64's finalizer: the keys above are linear in the values, so two rows that swap a value would
        # keep their sum (a policy's key, policy_keys) unchanged
        keys ^= keys >> np.uint64(30)
        keys *= np.uint64(0xBF58476D1CE4E5B9)
        keys ^= keys >> np.uint64(27)
        keys *= np.uint64(0x94D049BB133111EB)
        keys ^= keys >> np.uint64(31)
    return keys.tolist()


def policy_keys(matrix_policies: pd.Series, matrix_keys: Sequence[int], cell_policies: pd.Series,
                cell_keys: Sequence[int], policies: list[str]) -> list[int]:
    """One key per policy from the keys of its matrix rows and its cells (a sum: the order of rows is not part
    of what a policy's rows say)."""
    sums = {policy: 0 for policy in policies}
    for frame_policies, keys, weight in ((matrix_policies, matrix_keys, 1), (cell_policies, cell_keys, 3)):
        codes, names = pd.factorize(frame_policies)
        total = np.zeros(len(names), dtype=np.uint64)
        np.add.at(total, codes, np.asarray(keys, dtype=np.uint64) * np.uint64(weight))
        for name, value in zip(names.tolist(), total.tolist(), strict=True):
            if name in sums:
                sums[name] = (sums[name] * int(_MIX) + value) & 0xFFFFFFFFFFFFFFFF
    return [sums[policy] for policy in policies]


@cache
def _code_digest() -> str:
    """This package's collect code and pandas' version: what a rendered text may depend on besides its row."""
    digest = hashlib.sha1(pd.__version__.encode())
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def scope(*parts: object) -> str:
    """A rendering's name in the memo: its parts (name, columns, settings it reads) and the code digest."""
    return hashlib.sha1("\0".join([_code_digest(), *map(str, parts)]).encode()).hexdigest()[:16]


Texts = dict[str, dict[int, str]]  # scope -> row key -> text


class RowMemo:
    """Texts by scope and row key; `save` keeps those used since the memo was opened."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.known: Texts = {}
        self.used: Texts = {}
        self.rendered = 0  # rows rendered again (the rest came from the memo)
        self.token = b""  # the base's: a delta extends the base of the same token
        self.in_delta: Texts = {}
        if path is not None:
            self._load(path)

    def _load(self, path: Path) -> None:
        base = _read(path)
        if base is None:
            return
        self.token = base.schema.metadata[TOKEN_KEY]
        self.known = _entries(base)
        delta = _read(path.with_name(DELTA_FILE))
        if delta is not None and delta.schema.metadata[TOKEN_KEY] == self.token:
            self.in_delta = _entries(delta)
            for where, texts in self.in_delta.items():
                self.known.setdefault(where, {}).update(texts)

    def texts(self, where: str, keys: Sequence[int], render: Callable[[list[int]], list[str]]) -> list[str]:
        """The text of each row: remembered, or from render(positions of the rows the memo lacks)."""
        texts = list(map(self.known.get(where, {}).get, keys))
        missing = [i for i, text in enumerate(texts) if text is None]
        if missing:
            for i, text in zip(missing, render(missing), strict=True):
                texts[i] = text
            self.rendered += len(missing)
        self.used.setdefault(where, {}).update(zip(keys, texts, strict=True))
        return texts  # type: ignore[return-value]

    def to_csv(self, name: str, frame: pd.DataFrame, keys: Sequence[int] | None = None) -> str:
        """frame.to_csv(index=False, lineterminator="\\n"), reusing the text of rows seen before."""
        header = frame.iloc[:0].to_csv(index=False, lineterminator="\n")
        where = scope(name, header, *frame.dtypes)
        unsafe: list[bool] = []

        def render(missing: list[int]) -> list[str]:
            text = frame.iloc[missing].to_csv(index=False, header=False, lineterminator=ROW_END)
            rows = text.split(ROW_END)
            if len(rows) != len(missing) + 1 or ROW_END[0] in text.replace(ROW_END, ""):
                unsafe.append(True)  # a value holds \x1e: its row's text is not to_csv's
                return [""] * len(missing)
            return rows[:-1]

        keys = row_keys(frame) if keys is None else keys
        texts = self.texts(where, keys, render)
        if unsafe:
            for key in keys:
                self.used[where].pop(key, None)
            return frame.to_csv(index=False, lineterminator="\n")
        return header + "".join(text + "\n" for text in texts)

    def save(self) -> None:
        """Keep the texts used since opening: in a delta on the base while both it and the texts no longer used
        stay small, else in a new base (a memo that cannot be written costs the next collect time only)."""
        if self.path is None:
            return
        used = sum(map(len, self.used.values()))
        new = 0
        delta: Texts = {}  # the texts used that the old delta held, and the ones rendered now
        for where, texts in self.used.items():
            known, in_delta = self.known.get(where, {}), self.in_delta.get(where, {})
            fresh = [key for key in texts if key not in known]
            new += len(fresh)
            delta[where] = {key: texts[key] for key in [*(in_delta.keys() & texts.keys()), *fresh]}
        stale = sum(map(len, self.known.values())) - (used - new)  # remembered, not used this time
        limit = REWRITE_SHARE * used
        try:
            if not self.token or sum(map(len, delta.values())) > limit or stale > limit:
                self.token = secrets.token_hex(8).encode()
                _write(self.path, self.used, self.token)
                self.path.with_name(DELTA_FILE).unlink(missing_ok=True)  # it names the old base
            elif new:
                _write(self.path.with_name(DELTA_FILE), delta, self.token)
        except OSError:
            pass


def _read(path: Path) -> pa.Table | None:
    table = read_table(path)
    if table is None or TOKEN_KEY not in (table.schema.metadata or {}):
        return None
    if table.column_names != ["scope", "key", "text"]:
        return None
    return table


def _entries(table: pa.Table) -> Texts:
    entries: Texts = {}
    for where, key, text in zip(*(table.column(c).to_pylist() for c in ("scope", "key", "text")), strict=True):
        entries.setdefault(where, {})[key] = text
    return entries


def _write(path: Path, entries: Texts, token: bytes) -> None:
    scopes = [where for where, texts in entries.items() for _ in range(len(texts))]
    keys = [key for texts in entries.values() for key in texts]
    table = pa.table({"scope": pa.array(scopes, pa.string()), "key": pa.array(keys, pa.uint64()),
                      "text": pa.array([text for texts in entries.values() for text in texts.values()],
                                       pa.large_string())},
                     metadata={TOKEN_KEY: token})
    write_table(path, table)
