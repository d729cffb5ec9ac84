"""Every output of a collect, computed from the classified cells in one pass: the CSV files and what the
renderers (render_md, render_html) show.

Cells arrive in id order (policy/gpu/torch), so what is listed "first seen first" (new failures, builds,
versions) follows that order; the matrix comes in table order (the config's, then recorded names sorted).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from . import render_html, render_md
from .catalog import NEW, flag_column
from .columns import by_build
from .failure_summary import columns, summarize
from .render_md import Summary, build_versions, cell_text, gpu_versions, md_text
from .rules import build_matrix, cells_table, classify_cells, repro_table
from .settings import Settings


@dataclass
class Tables:
    """A collect's outputs before they are written."""

    matrix: pd.DataFrame  # one row per policy x gpu (matrix.csv)
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
    summary = _summary(columned, matrix, repros, column_settings)
    texts = {
        "cells.csv": csv_text(cells_table(classified, settings)),
        "matrix.csv": csv_text(matrix),
        "repros.csv": csv_text(repros),
        "matrix.md": render_md.render(summary, column_settings),
        "report.html": render_html.render(summary, column_settings),
    }
    return Tables(matrix, texts, len(cells), column_settings)


def _summary(cells: pd.DataFrame, matrix: pd.DataFrame, repros: pd.DataFrame, settings: Settings) -> Summary:
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
    new_failures: dict[str, list[str]] = {}
    logs: dict[str, str | None] = {}
    builds: list[tuple[str, str, int]] = []
    fixes: dict[str, str] = {}
    pairs: list[tuple[str, str]] = []
    rows: list[list[str]] = []
    if len(cells):
        new = cells[cells[flag_column(NEW)]]
        for error, cell, log in zip(*columns(new, "new_error", "id", "log"), strict=True):
            new_failures.setdefault(str(error), []).append(cell)
            logs[cell] = log
        counts = cells.groupby(["torch", "versions"], sort=False).size()
        builds = [(build, versions, int(n)) for (build, versions), n in counts.items()]
        fixes = cells.groupby("torch", sort=False)["fixes"].last().to_dict()
        pairs = list(cells[["gpu", "versions"]].drop_duplicates().itertuples(index=False, name=None))
        shown = cells.head(render_html.MAX_CELL_ROWS)
        rows = [[text, status, "" if failures is None else str(failures)] for text, status, failures in
                zip(render_html.cell_rows(shown), *columns(shown, "status", "failures"), strict=True)]
    failure_rows, policy_line = summarize(matrix, cells, settings)
    return Summary(
        policies=policies, gpus=gpus, md=md, html=html, records=len(cells),
        newest=max((s for s in cells["ended_at"].tolist() if isinstance(s, str)), default="") if len(cells) else "",
        new_failures=list(new_failures.items()), logs=logs, failure_rows=failure_rows,
        policy_line=policy_line, builds=build_versions(builds, fixes, settings),
        gpu_versions=gpu_versions(pairs, settings), repros=repros.to_dict("records"), cell_rows=rows,
        undecided=list(zip(*columns(cells[cells["outcome"] == "undecided"], "id", "reason", "exporter"),
                           strict=True)) if len(cells) else [])
