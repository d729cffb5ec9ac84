"""changes.md: what changed since the previous collect's matrix.csv: symbols that flipped, failure ids that
came or went, new errors no catalog entry knows, margins that moved by more than `collect.margin_move`.
"""

from __future__ import annotations

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
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except FileNotFoundError:
        return None
    return frame.assign(**{c: "" for c in ("symbol", "failures", "margin", "new_error", *KEYS) if c not in frame})


def changes(previous: pd.DataFrame | None, matrix: pd.DataFrame, settings: Settings) -> list[str]:
    """One line per change, in table order; [] when nothing changed."""
    if previous is None:
        counts = matrix["symbol"].value_counts()
        summary = ", ".join(f"{counts[s]} {s}" for s in SYMBOL_ORDER if s in counts)
        return [f"first collect: {len(matrix)} table cells (policy × column) ({summary or 'none'})"]
    now = matrix.astype({"failures": str}).fillna({"failures": "", "new_error": ""}).assign(order=range(len(matrix)))
    merged = now.merge(previous, on=KEYS, how="outer", suffixes=("", "_was"), indicator="state")
    merged = merged.sort_values("order", kind="stable", na_position="last")  # table order; dropped cells last
    merged = merged.assign(**{c: pd.to_numeric(merged[c], errors="coerce") for c in ("margin", "margin_was")})
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
        if abs(row.margin - row.margin_was) > settings.margin_move:  # False where either is missing (NaN)
            lines.append(f"{where}: margin {num(row.margin_was)} → {num(row.margin)}")
    return lines


def render(lines: list[str]) -> str:
    body = "\n".join(f"- {md_text(line)}" for line in lines) if lines else "Nothing changed."
    return f"Changes since the previous collect:\n\n{body}\n"
