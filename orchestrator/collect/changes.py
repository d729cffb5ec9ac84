"""changes.md: what changed since the previous collect, cell by cell (policy, GPU and build), whatever the table's
layout (`table.by`): symbols that flipped, failure ids that came or went, new errors no catalog entry knows,
margins that moved by more than `collect.margin_move`. The previous state is the previous collect's cells.csv,
one row per cell in either layout, so switching the layout changes nothing here.
"""

from __future__ import annotations

from collections import namedtuple
from pathlib import Path

import numpy as np
import pandas as pd

from ..record import UNFINISHED, UNREADABLE
from . import generated
from .catalog import NEW, id_key
from .failure_summary import named_rows
from .render_md import md_text, num
from .rules import SYMBOLS
from .settings import Settings

KEYS = ["policy", "gpu", "torch"]
SYMBOL_ORDER = ("✅", "🟡", "❌", "⏸", "⏳", "—", "⚠️")
STATE_COLUMNS = [*KEYS, "symbol", "failures", "new_error", "margin"]
READ = frozenset({*KEYS, "status", "outcome", "stock", "failures", "error", "failed_step", "margin"})  # cells.csv's


_Row = namedtuple("_Row", ["policy", "gpu", "torch", "state", "symbol", "symbol_was", "failures", "failures_was",
                           "new_error", "new_error_was", "margin", "margin_was"])


def read_previous(path: Path) -> pd.DataFrame | None:
    """The cell states of the cells.csv a previous collect wrote, or None."""
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, usecols=lambda column: column in READ)
    except FileNotFoundError:
        return None
    return cell_states(frame)


def cell_states(cells: pd.DataFrame) -> pd.DataFrame:
    """Each cell's symbol (what its column would show were it the only build: ✅ a stock pass, 🟡 a patched one,
    ❌ a verdict that failed, ⏸ undecided, ⏳ unfinished, ⚠️ unreadable), failure ids, new error and margin, from
    cells.csv's columns: the new collect's frame or the previous one's text."""
    cells = cells.assign(**{c: "" for c in READ if c not in cells})
    if not len(cells):
        return pd.DataFrame(columns=STATE_COLUMNS)
    status = cells["status"].fillna("").astype(str)
    outcome = cells["outcome"].fillna("").astype(str)
    stock = cells["stock"].astype(str).str.lower() == "true"
    passed = status == "passed"
    symbol = np.select([passed & stock, passed, status.isin(UNFINISHED), status == UNREADABLE,
                        outcome == "undecided", outcome == "verdict"],
                       [SYMBOLS[k] for k in ("pass", "patched", "running", "unreadable", "undecided", "fail")],
                       SYMBOLS["missing"])
    failures = cells["failures"].fillna("").astype(str)
    new_errors = pd.Series("", index=cells.index, dtype=object)
    new = failures.str.contains(rf"(?:^| ){NEW}(?: |$)")
    for index, error, state, step in zip(new[new].index, *(cells.loc[new, c].tolist() for c in
                                                           ("error", "status", "failed_step")), strict=True):
        line = str(error).strip().split("\n")[0].strip() if isinstance(error, str) else ""  # as rules.py has it
        new_errors[index] = line or f"status {state}" + (f" in step {step}" if isinstance(step, str) and step else "")
    return pd.DataFrame({**{key: cells[key].astype(str) for key in KEYS}, "symbol": symbol, "failures": failures,
                         "new_error": new_errors, "margin": pd.to_numeric(cells["margin"], errors="coerce")},
                        index=cells.index)


def changes(previous: pd.DataFrame | None, cells: pd.DataFrame, matrix: pd.DataFrame,
            settings: Settings) -> list[str]:
    """One line per change of a cell (cells: the new cells.csv frame, in table order); [] when nothing changed.
    Then the generated repros (`export-matrix repro`) that stopped reproducing, reproduce again or are new."""
    return _cell_changes(previous, cells, matrix, settings) + generated.change_lines(
        generated.read_state(settings.out_dir / generated.STATE),
        generated.rows(generated.read_results(settings.out_dir)), lambda cell: _name(cell, settings))


def _name(cell: str, settings: Settings) -> str:
    policy, gpu, build = cell.split("/")
    return f"{policy} on {settings.gpu_short(gpu)}/{build}"


def _cell_changes(previous: pd.DataFrame | None, cells: pd.DataFrame, matrix: pd.DataFrame,
                  settings: Settings) -> list[str]:
    if previous is None:
        counts = matrix["symbol"].value_counts()
        summary = ", ".join(f"{counts[s]} {s}" for s in SYMBOL_ORDER if s in counts)
        return [f"first collect: {len(matrix)} table cells (policy × column) ({summary or 'none'})"]
    now = cell_states(cells).assign(order=range(len(cells)))
    merged = now.merge(previous, on=KEYS, how="outer", suffixes=("", "_was"), indicator="state")
    both = merged["state"] == "both"
    moved = (merged["margin"] - merged["margin_was"]).abs() > settings.margin_move
    same = both & ~moved & (merged["symbol"] == merged["symbol_was"]) & (merged["failures"] == merged["failures_was"])
    same &= merged["new_error"].fillna("") == merged["new_error_was"].fillna("")
    merged = merged[~same]  # thousands of cells, a few changed: only those go through the lines below
    merged = merged.sort_values("order", kind="stable", na_position="last")  # table order; dropped cells last
    lines = []
    for row in named_rows(merged, _Row):
        where = f"{row.policy} on {settings.gpu_short(row.gpu)}/{row.torch}"
        if row.state == "right_only":
            lines.append(f"{where}: no longer collected (was {row.symbol_was})")
            continue
        both = row.state == "both"
        was_symbol = row.symbol_was if both else SYMBOLS["missing"]
        if row.symbol != was_symbol:
            lines.append(f"{where}: {was_symbol} → {row.symbol}")
        was = set(str(row.failures_was).split()) - {NEW} if both else set()
        ids = set(str(row.failures).split()) - {NEW}  # a new error is its own line, below
        if ids - was:
            lines.append(f"{where}: new failure {' '.join(sorted(ids - was, key=id_key))}")
        if was - ids:
            lines.append(f"{where}: no longer fails with {' '.join(sorted(was - ids, key=id_key))}")
        error, was_error = str(row.new_error or ""), str(row.new_error_was or "") if both else ""
        if error and error != "nan" and error != was_error:
            lines.append(f"{where}: new error no catalog entry knows: {error}")
        if abs(row.margin - row.margin_was) > settings.margin_move:  # False where either is missing (NaN)
            lines.append(f"{where}: margin {num(row.margin_was)} → {num(row.margin)}")
    return lines


def render(lines: list[str]) -> str:
    body = "\n".join(f"- {md_text(line)}" for line in lines) if lines else "Nothing changed."
    return f"Changes since the previous collect:\n\n{body}\n"
