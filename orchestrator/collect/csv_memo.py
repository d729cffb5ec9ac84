"""CSV text remembered row by row, so a collect renders only the rows that changed since the last one.

pandas' `to_csv` of cells.csv took a second at 100,000 cells, and after a rerun almost every row is the same as
before. Each row is keyed by a 64-bit hash of its values (exact float bits, missing values told apart from the
text "None"); rows whose key the memo holds reuse their text, the others go through `to_csv` together. pandas
formats each value on its own (a float's repr, str of an object), so a row's text does not depend on the rows
around it: the result is byte for byte `frame.to_csv(index=False, lineterminator="\\n")`
(tests/test_csv_memo.py). The memo lives in DIR/.collect-index/rows.arrow, pruned to the rows last written.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.feather as feather

from ..atomic import write_atomic

MEMO_FILE = "rows.arrow"
ROW_END = "\x1e\n"  # ends each row of the rows rendered together: no cell text holds \x1e (else: no memo)
_MIX = np.uint64(0x9E3779B97F4A7C15)


def row_keys(frame: pd.DataFrame) -> np.ndarray:
    """One uint64 per row from every column's values; the same values give the same key."""
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
                hashed = np.append(pd.util.hash_array(np.asarray(uniques, dtype=object)), _MIX)[codes]
            keys = keys * _MIX + hashed + np.uint64(1)
    return keys


class CsvMemo:
    """Row texts by (file name, columns, key); `save` keeps those the last `to_csv` calls used."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.known: dict[tuple[str, int], str] = {}
        self.used: dict[tuple[str, int], str] = {}
        self.rendered = 0  # rows that went through pandas (the rest came from the memo)
        if path is not None:
            self._load(path)

    def _load(self, path: Path) -> None:
        try:
            table = feather.read_table(path, memory_map=True)
            names, keys, texts = (table.column(c).to_pylist() for c in ("name", "key", "text"))
        except (OSError, KeyError, pa.ArrowException):
            return
        self.known = dict(zip(zip(names, keys, strict=True), texts, strict=True))

    def to_csv(self, name: str, frame: pd.DataFrame) -> str:
        """frame.to_csv(index=False, lineterminator="\\n"), reusing the text of rows seen before."""
        header = frame.iloc[:0].to_csv(index=False, lineterminator="\n")
        layout = f"{name}\0{header}\0{' '.join(str(t) for t in frame.dtypes)}"
        scope = hashlib.sha1(layout.encode()).hexdigest()[:16]  # the file and its columns: rows of one layout
        keys = row_keys(frame).tolist()
        texts = [self.known.get((scope, key)) for key in keys]
        missing = [i for i, text in enumerate(texts) if text is None]
        if missing:
            fresh = frame.iloc[missing].to_csv(index=False, header=False, lineterminator=ROW_END).split(ROW_END)
            if len(fresh) != len(missing) + 1 or any(ROW_END[0] in text for text in fresh):
                return frame.to_csv(index=False, lineterminator="\n")  # a row's text holds \x1e: no memo
            for i, text in zip(missing, fresh, strict=False):
                texts[i] = text
            self.rendered += len(missing)
        for key, text in zip(keys, texts, strict=True):
            self.used[(scope, key)] = text
        return header + "".join(text + "\n" for text in texts)

    def save(self) -> None:
        """Keep the rows the last renders used (an index that cannot be written costs the next collect time)."""
        if self.path is None:
            return
        scopes, keys = zip(*self.used, strict=True) if self.used else ((), ())
        table = pa.table({"name": pa.array(scopes, pa.string()), "key": pa.array(keys, pa.uint64()),
                          "text": pa.array(list(self.used.values()), pa.large_string())})
        try:
            write_atomic(self.path, lambda handle: feather.write_feather(table, handle, compression="uncompressed"))
        except OSError:
            pass
