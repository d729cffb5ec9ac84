"""Read every `DIR/cells/<policy>/<gpu>/<torch>/record.json` into one pandas frame, one row per cell.

Reading the JSON files is most of a collect's time, so the directory walk is three os.scandir levels (no glob)
and the files are read by a pool of threads (the reads release the GIL; the parse is json's C scanner).
Earlier attempts (attempts/<n>/record.json) are read only for cells whose record says attempt > 1: their check
numbers tell whether repeated runs straddle the tolerance (row 5).
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd

from ..record import ATTEMPTS_DIR, RECORD_NAME

# The columns a cell keeps, in order; the record fields of the same name, plus what is derived from them.
COLUMNS = ("id", "policy", "gpu", "torch", "exporter", "status", "attempt", "failed_step", "error", "max_diff",
           "tolerance", "margin", "speedup", "peak_gpu_mib", "eager_ms", "exported_ms", "fixes", "versions",
           "log", "log_tail", "ended_at")
NUMBERS = ("max_diff", "tolerance", "margin", "speedup", "peak_gpu_mib", "eager_ms", "exported_ms")
HISTORY_COLUMNS = ("id", "attempt", "status", "max_diff", "tolerance")


def record_paths(out_dir: Path) -> list[str]:
    """The record.json of every cell directory under out_dir/cells, sorted by cell id."""
    cells = Path(out_dir) / "cells"
    found: list[str] = []
    for level1 in _dirs(str(cells)):
        for level2 in _dirs(level1):
            for level3 in _dirs(level2):
                found.append(os.path.join(level3, RECORD_NAME))
    found.sort()
    return found


def _dirs(path: str) -> list[str]:
    try:
        with os.scandir(path) as entries:
            return [e.path for e in entries if e.is_dir() and not e.name.startswith(".")]
    except (FileNotFoundError, NotADirectoryError):
        return []


def _read(path: str) -> dict[str, Any] | None:
    """One record as a dict; None when the cell has no record (yet); a stand-in `error` record if unreadable."""
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        data = {"status": "error", "error": f"unreadable {RECORD_NAME}: {type(exc).__name__}: {exc}"}
    if not isinstance(data, dict):
        data = {"status": "error", "error": f"unreadable {RECORD_NAME}: not a JSON object"}
    return data


def _row(path: str, data: dict[str, Any]) -> tuple:
    cell_dir = os.path.dirname(path)
    rest, torch = os.path.split(cell_dir)
    rest, gpu = os.path.split(rest)
    policy = os.path.basename(rest)
    logs = data.get("logs") or {}
    log = (logs.get("export") or next(iter(logs.values()), None)) if isinstance(logs, dict) else None
    versions = data.get("versions") or {}
    fixes = data.get("fixes") or []
    return (
        f"{policy}/{gpu}/{torch}", policy, gpu, torch,
        data.get("exporter"), data.get("status") or "error", data.get("attempt") or 1, data.get("failed_step"),
        data.get("error"), data.get("max_diff"), data.get("tolerance"), data.get("margin"), data.get("speedup"),
        data.get("peak_gpu_mib"), data.get("eager_ms"), data.get("exported_ms"),
        " ".join(str(f) for f in fixes) if isinstance(fixes, list) else str(fixes),
        json.dumps(versions, sort_keys=True, separators=(",", ":")) if versions else "",
        f"cells/{policy}/{gpu}/{torch}/{log}" if log else None, data.get("log_tail"), data.get("ended_at"),
    )


def _read_chunk(paths: list[str]) -> tuple[list[tuple], list[tuple]]:
    rows: list[tuple] = []
    history: list[tuple] = []
    for path in paths:
        data = _read(path)
        if data is None:
            continue
        row = _row(path, data)
        rows.append(row)
        attempt = row[6]
        if isinstance(attempt, int) and attempt > 1:
            history += _earlier_attempts(os.path.dirname(path), row[0])
    return rows, history


def _earlier_attempts(cell_dir: str, cell_id: str) -> list[tuple]:
    found = []
    for attempt_dir in _dirs(os.path.join(cell_dir, ATTEMPTS_DIR)):
        data = _read(os.path.join(attempt_dir, RECORD_NAME))
        if data:
            found.append((cell_id, data.get("attempt"), data.get("status"), data.get("max_diff"),
                          data.get("tolerance")))
    return found


def load_records(out_dir: Path, workers: int | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(cells, history): one row per cell with a record, and the check numbers of their earlier attempts."""
    paths = record_paths(out_dir)
    workers = workers or min(16, (os.cpu_count() or 1) * 2)
    if workers <= 1 or len(paths) < 256:
        chunks = [_read_chunk(paths)]
    else:
        size = -(-len(paths) // (workers * 4))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            chunks = list(pool.map(_read_chunk, [paths[i:i + size] for i in range(0, len(paths), size)]))
    rows = [row for chunk, _ in chunks for row in chunk]
    history = [row for _, chunk in chunks for row in chunk]
    cells = pd.DataFrame.from_records(rows, columns=list(COLUMNS))
    for column in NUMBERS:
        cells[column] = pd.to_numeric(cells[column], errors="coerce").astype("float64")
    cells["attempt"] = pd.to_numeric(cells["attempt"], errors="coerce").fillna(1).astype("int64")
    for column in ("id", "policy", "gpu", "torch", "status", "fixes", "versions"):
        cells[column] = cells[column].astype(str)
    past = pd.DataFrame.from_records(history, columns=list(HISTORY_COLUMNS))
    for column in ("max_diff", "tolerance"):
        past[column] = pd.to_numeric(past[column], errors="coerce").astype("float64")
    return cells, past
