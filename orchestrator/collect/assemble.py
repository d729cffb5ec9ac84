"""The outputs put together from the policies' slices (slices.py) and the standalone repros' rows.

Cells are in id order (each policy's together), the matrix in table order: what a slice lists in its own order
(new failures, versions, first cells) is merged in the policies' id order, which gives what grouping every cell
at once gives (first seen first).
"""

from __future__ import annotations

import pandas as pd

from . import render_html, render_md
from .failure_summary import failure_rows, order, policy_line
from .render_md import Summary, build_versions, gpu_versions
from .settings import Settings
from .slices import CELLS_HEADER, MATRIX_HEADER, MAX_CELL_ROWS, Slice, id_order


def summary(slices: dict[str, Slice], repros: pd.DataFrame, settings: Settings) -> Summary:
    table_order = sorted(slices, key=order(settings.policies))
    recorded_gpus = {gpu for piece in slices.values() for gpu in piece.md}
    gpus = [g for g in dict.fromkeys([*settings.gpus, *sorted(recorded_gpus)]) if g in recorded_gpus]
    new: dict[str, list[str]] = {}
    logs: dict[str, str | None] = {}
    counts: dict[tuple[str, str], int] = {}
    fixes: dict[str, str] = {}
    pairs: dict[tuple[str, str], None] = {}
    rows: list[list[str]] = []
    for policy in sorted((p for p in slices if slices[p].records), key=id_order):
        piece = slices[policy]
        for error, cell, log in piece.new:
            new.setdefault(error, []).append(cell)
            logs[cell] = log
        for build, versions, count in piece.builds:
            counts[(build, versions)] = counts.get((build, versions), 0) + count
        fixes.update(piece.fixes)
        pairs.update(dict.fromkeys(map(tuple, piece.gpu_versions)))
        if len(rows) < MAX_CELL_ROWS:
            if piece.rows is None:
                raise RuntimeError(f"collect: the slice of {policy} lacks its cells-table rows")
            rows += piece.rows
    parts = {policy: slices[policy].part for policy in table_order if slices[policy].part is not None}
    return Summary(
        policies=table_order, gpus=gpus,
        md={(policy, gpu): text for policy in table_order for gpu, text in slices[policy].md.items()},
        html={(policy, gpu): text for policy in table_order for gpu, text in slices[policy].html.items()},
        records=sum(piece.records for piece in slices.values()),
        newest=max((piece.newest for piece in slices.values()), default=""),
        new_failures=list(new.items()), logs=logs, failure_rows=failure_rows(parts, settings),
        policy_line=policy_line(parts),
        builds=build_versions([(b, v, n) for (b, v), n in counts.items()], fixes, settings),
        gpu_versions=gpu_versions(list(pairs), settings), repros=repros.to_dict("records"),
        cell_rows=rows[:MAX_CELL_ROWS])


def outputs(slices: dict[str, Slice], repros: pd.DataFrame, settings: Settings) -> dict[str, str]:
    """Each output's text, by file name."""
    shown = summary(slices, repros, settings)
    return {
        "cells.csv": CELLS_HEADER + "".join(slices[p].cells_csv for p in shown.policies),
        "matrix.csv": MATRIX_HEADER + "".join(slices[p].matrix_csv for p in shown.policies),
        "repros.csv": repros.to_csv(index=False, lineterminator="\n"),
        "matrix.md": render_md.render(shown, settings),
        "report.html": render_html.render(shown, settings),
    }
