"""Every output of a collect from the classified cells: the CSV files and what render_md and render_html show.

Cells arrive in id order, so what is listed "first seen first" (new failures, builds, versions) follows it.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from . import generated, render_html, render_md
from .catalog import NEW, flag_column
from .columns import by_build
from .failure_summary import columns, left_out_text, summarize, table_scope
from .render_md import Summary, build_versions, cell_text, gpu_versions, md_text
from .rules import build_matrix, cells_table, classify_cells, error_cause, repro_table
from .settings import Settings


@dataclass
class Tables:
    """A collect's outputs before they are written."""

    matrix: pd.DataFrame  # one row per policy x gpu (matrix.csv)
    cells: pd.DataFrame  # one row per cell, in table order (cells.csv): what changes.md compares
    texts: dict[str, str]  # file name -> its text
    records: int  # the cells collected, standalone repros included
    settings: Settings  # with the matrix's columns (columns.py), for changes.md


def csv_text(frame: pd.DataFrame) -> str:
    return frame.to_csv(index=False, lineterminator="\n")


def make_tables(cells: pd.DataFrame, history: pd.DataFrame, settings: Settings) -> Tables:
    """cells.csv, matrix.csv, repros.csv, matrix.md and report.html from these cells (in id order)."""
    is_repro = cells["repro_row"].notna()
    classified = classify_cells(cells[~is_repro].reset_index(drop=True), history, settings)
    columned, column_settings = by_build(classified, settings)
    matrix = build_matrix(columned, column_settings)
    repros = repro_table(cells[is_repro], settings)
    marked = cells[cells["stale"].fillna(False).astype(bool)] if "stale" in cells else cells.iloc[:0]
    stale = list(zip(*columns(marked, "id", "status"), strict=True))  # standalone repros too: rerun --stale takes them
    pairs = table_scope(classified, settings)
    summary = _summary(columned, matrix, repros, column_settings, stale, pairs)
    state = generated.rows(generated.read_results(settings.out_dir))  # `export-matrix repro`'s scripts
    summary.repro_links = generated.links(state)
    summary.failure_rows = [(fid, title, names, generated.GENERATED if fid in summary.repro_links else repro, fixed)
                            for fid, title, names, repro, fixed in summary.failure_rows]
    cell_rows = cells_table(classified, settings)
    texts = {
        "cells.csv": csv_text(cell_rows),
        "matrix.csv": csv_text(matrix),
        "repros.csv": csv_text(repros),
        "matrix.md": render_md.render(summary, column_settings),
        "report.html": render_html.render(summary, column_settings),
    }
    if state or (settings.out_dir / generated.STATE).exists():
        texts[generated.STATE] = generated.state_text(state)  # what changes.md compares next time
    return Tables(matrix, cell_rows, texts, len(cells), column_settings)


def _summary(cells: pd.DataFrame, matrix: pd.DataFrame, repros: pd.DataFrame, settings: Settings,
             stale: list[tuple[str, str]], pairs: set[tuple[str | None, str]]) -> Summary:
    md: dict[str, dict[str, str]] = {}
    html: dict[str, dict[str, str]] = {}
    names = list(matrix.columns)
    for row in (dict(zip(names, values, strict=True)) for values in zip(*columns(matrix, *names), strict=True)):
        text = cell_text(row)
        md.setdefault(row["policy"], {})[row["gpu"]] = md_text(text)
        html.setdefault(row["policy"], {})[row["gpu"]] = render_html.grid_cell(row, text)
    policies = list(md)  # the matrix is in table order
    recorded_gpus = set(matrix["gpu"])
    gpus = [g for g in dict.fromkeys([*settings.gpus, *sorted(recorded_gpus)]) if g in recorded_gpus]
    new_failures: dict[str, list[tuple[str, str | None]]] = {}
    new = cells[cells[flag_column(NEW)]]
    for error, cell, log in zip(*columns(new, "new_error", "id", "log"), strict=True):
        new_failures.setdefault(str(error), []).append((cell, log))
    repro_rows = frozenset(str(row) for row in repros["row"].tolist())  # a row whose repro ran here stays
    failure_rows, policy_line, left_out = summarize(matrix, cells, settings, pairs, repro_rows)
    return Summary(
        policies=policies, gpus=gpus, md=md, html=html, records=len(cells),
        newest=max((s for s in cells["ended_at"].tolist() if isinstance(s, str)), default=""),
        new_failures=list(new_failures.items()), failure_rows=failure_rows, policy_line=policy_line,
        rows_left_out=left_out_text(left_out, pairs, settings),
        builds=build_versions(cells, settings), gpu_versions=gpu_versions(cells, settings),
        repros=repros.to_dict("records"), cells=cells.head(render_html.MAX_CELL_ROWS),
        undecided=_undecided(cells[(cells["outcome"] == "undecided") & ~cells["stale"]]),  # a stale one is rerun
        # with the stale ones
        stale=stale)


def _undecided(cells: pd.DataFrame) -> list[tuple[str, str, str]]:
    """(cell id, why, exporter) of the cells nothing judged: why is the reason, and for one the orchestrator could
    not run (env build, setup) the cause its record holds (`env build failed: Could not resolve host: ...`)."""
    out = []
    for cell, reason, exporter, status, error in zip(*columns(cells, "id", "reason", "exporter", "status", "error"),
                                                     strict=True):
        cause = error_cause(error) if status == "error" else ""
        out.append((cell, f"{reason}: {cause}" if cause and cause not in str(reason) else reason, exporter))
    return out
