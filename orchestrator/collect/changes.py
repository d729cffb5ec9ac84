"""changes.md: what changed since the previous collect, from the previous matrix.csv and the new matrix.

Cells that flipped (❌ → 🟡, ✅ → ❌, — → ✅ ...), failure ids that appeared or went away, new errors that no
catalog entry knows, and margins (difference / tolerance) that moved by more than `collect.margin_move`.
"""

from __future__ import annotations

import io
import math
from collections import namedtuple
from pathlib import Path

import pandas as pd

from .catalog import NEW, id_key
from .failure_summary import named_rows
from .render_md import md_text, num
from .settings import Settings

KEYS = ["policy", "gpu"]
SYMBOL_ORDER = ("✅", "🟡", "❌", "⏸", "⏳", "—", "⚠️")


_Row = namedtuple("_Row", ["policy", "gpu", "state", "symbol", "symbol_was", "failures", "failures_was",
                           "new_error", "new_error_was", "margin", "margin_was"])


def read_previous(path: Path) -> pd.DataFrame | None:
    """The matrix.csv a previous collect wrote, or None."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return None
    return read_matrix_csv(text)


def read_matrix_csv(text: str) -> pd.DataFrame:
    frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    for column in ("symbol", "failures", "margin", "new_error", *KEYS):
        if column not in frame:
            frame[column] = ""
    return frame


def _margin(value: object) -> float | None:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def changes(previous: pd.DataFrame | None, matrix: pd.DataFrame, settings: Settings) -> list[str]:
    """One line per change, in table order; [] when nothing changed."""
    if previous is None:
        counts = matrix["symbol"].value_counts()
        summary = ", ".join(f"{counts[s]} {s}" for s in SYMBOL_ORDER if s in counts)
        return [f"first collect: {len(matrix)} policy × GPU cells ({summary or 'none'})"]
    now = matrix.astype({"failures": str}).fillna({"failures": "", "new_error": ""})
    now = now.assign(order=range(len(now)))
    merged = now.merge(previous, on=KEYS, how="outer", suffixes=("", "_was"), indicator="state")
    merged = merged.sort_values("order", kind="stable", na_position="last")  # table order; dropped cells last
    lines = []
    for row in named_rows(merged, _Row):
        where = f"{row.policy} on {settings.gpu_short(row.gpu)}"
        if row.state == "right_only":
            lines.append(f"{where}: no longer collected (was {row.symbol_was})")
            continue
        was_symbol = row.symbol_was if row.state == "both" else "—"
        if row.symbol != was_symbol:
            lines.append(f"{where}: {was_symbol} → {row.symbol}")
        was = set(str(row.failures_was).split()) - {NEW} if row.state == "both" else set()
        ids = set(str(row.failures).split()) - {NEW}  # a new error is its own line, below
        if ids - was:
            lines.append(f"{where}: new failure {' '.join(sorted(ids - was, key=id_key))}")
        if was - ids:
            lines.append(f"{where}: no longer fails with {' '.join(sorted(was - ids, key=id_key))}")
        error, was_error = str(row.new_error or ""), str(row.new_error_was or "") if row.state == "both" else ""
        if error and error != "nan" and error != was_error:
            lines.append(f"{where}: new error no catalog entry knows: {error}")
        margin, was_margin = _margin(row.margin), _margin(row.margin_was)
        if margin is not None and was_margin is not None and abs(margin - was_margin) > settings.margin_move:
            lines.append(f"{where}: margin {num(was_margin)} → {num(margin)}")
    return lines


def render(lines: list[str]) -> str:
    body = "\n".join(f"- {md_text(line)}" for line in lines) if lines else "Nothing changed."
    return f"Changes since the previous collect:\n\n{body}\n"
