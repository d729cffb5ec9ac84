"""The outputs put together from the policies' slices (slices.py) and the standalone repros' rows.

Cells are in id order (each policy's together), the matrix in table order: what a slice lists in its own order
(new failures, versions, first cells) is merged in the policies' id order, which gives what grouping every cell
at once gives (first seen first).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from . import render_html, render_md
from .failure_summary import failure_rows, order, policy_line
from .render_md import Summary, build_versions, gpu_versions
from .settings import Settings
from .slices import CELLS_HEADER, MATRIX_HEADER, MAX_CELL_ROWS, Slice, id_order


def table_order(slices: dict[str, Slice], settings: Settings) -> list[str]:
    """The policies in the order the outputs list them."""
    return sorted(slices, key=order(settings.policies))


def summary(slices: dict[str, Slice], policies: list[str], repros: pd.DataFrame, settings: Settings) -> Summary:
    """What the rendered outputs show, from every slice (`policies`: them in table order)."""
    recorded_gpus = {gpu for piece in slices.values() for gpu in piece.md}
    gpus = [g for g in dict.fromkeys([*settings.gpus, *sorted(recorded_gpus)]) if g in recorded_gpus]
    new: dict[str, list[str]] = {}
    logs: dict[str, str | None] = {}
    counts: dict[tuple[str, str], int] = {}
    fixes: dict[str, str] = {}
    pairs: dict[tuple[str, str], None] = {}
    rows: list[list[str]] = []
    # Kept slices share one list per distinct value (slice_store.py): each is counted once, times its holders.
    builds: dict[int, list[list[Any]]] = {}
    holders: dict[int, int] = {}
    seen_pairs: set[int] = set()
    for policy in sorted((p for p in slices if slices[p].records), key=id_order):
        piece = slices[policy]
        for error, cell, log in piece.new:
            new.setdefault(error, []).append(cell)
            logs[cell] = log
        builds.setdefault(id(piece.builds), piece.builds)
        holders[id(piece.builds)] = holders.get(id(piece.builds), 0) + 1
        if id(piece.gpu_versions) not in seen_pairs:
            seen_pairs.add(id(piece.gpu_versions))
            pairs.update(dict.fromkeys(map(tuple, piece.gpu_versions)))
        fixes.update(piece.fixes)
        if len(rows) < MAX_CELL_ROWS:
            if piece.rows is None:
                raise RuntimeError(f"collect: the slice of {policy} lacks its cells-table rows")
            rows += piece.rows
    for key, entries in builds.items():  # first seen first, as counting slice by slice gives
        for build, versions, count in entries:
            counts[(build, versions)] = counts.get((build, versions), 0) + count * holders[key]
    parts = {policy: slices[policy].part for policy in policies if slices[policy].part is not None}
    return Summary(
        policies=policies, gpus=gpus,
        md={policy: slices[policy].md for policy in policies},
        html={policy: slices[policy].html for policy in policies},
        records=sum(piece.records for piece in slices.values()),
        newest=max((piece.newest for piece in slices.values()), default=""),
        new_failures=list(new.items()), logs=logs, failure_rows=failure_rows(parts, settings),
        policy_line=policy_line(parts),
        builds=build_versions([(b, v, n) for (b, v), n in counts.items()], fixes, settings),
        gpu_versions=gpu_versions(list(pairs), settings), repros=repros.to_dict("records"),
        cell_rows=rows[:MAX_CELL_ROWS])


Pieces = list[bytes | memoryview]  # a file's bytes, in pieces written one after another


def csv_files(slices: dict[str, Slice], policies: list[str]) -> dict[str, Pieces]:
    """cells.csv and matrix.csv as their slices' rows (`policies`: in table order), encoded and not joined: tens of
    MB at 100,000 records, mostly views of the files they replace."""
    return {"cells.csv": [CELLS_HEADER.encode(), *(slices[p].cells_csv for p in policies)],
            "matrix.csv": [MATRIX_HEADER.encode(), *(slices[p].matrix_csv for p in policies)]}


def rendered(slices: dict[str, Slice], policies: list[str], repros: pd.DataFrame, settings: Settings) -> dict[str, str]:
    """repros.csv, matrix.md and report.html, by file name."""
    shown = summary(slices, policies, repros, settings)
    return {
        "repros.csv": repros.to_csv(index=False, lineterminator="\n"),
        "matrix.md": render_md.render(shown, settings),
        "report.html": render_html.render(shown, settings),
    }
