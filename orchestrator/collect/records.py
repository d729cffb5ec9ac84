"""Read every `DIR/cells/<policy>/<gpu>/<torch>/record.json` into one pandas frame, one row per cell.

Reading the JSON files is most of a collect's time, so the directory walk is record.record_paths, each file is one
read and one parse (jsonio), and rows are tuples (no dict per record). `collect.read_threads` reads with a thread pool,
for storage where reads wait on the network.
Earlier attempts (attempts/<n>/record.json) are read only for cells whose record says attempt > 1: their check
numbers tell whether repeated runs straddle the tolerance (row 5).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd

from ..cell_id import CELLS_DIR, CellId
from ..jsonio import loads
from ..record import ATTEMPTS_DIR, RECORD_NAME, UNFINISHED, UNREADABLE, Status, dirs, record_paths

REPRO_EXPORTER = "repro"  # conf/exporter/repro.yaml: cells that run a standalone repro, not a policy export
# The columns a cell keeps, in order; the record fields of the same name, plus what is derived from them.
COLUMNS = ("id", "policy", "gpu", "torch", "exporter", "status", "attempt", "failed_step", "error", "max_diff",
           "tolerance", "margin", "speedup", "peak_gpu_mib", "eager_ms", "exported_ms", "fixes", "versions",
           "log", "log_tail", "ended_at", "check", "repro_row", "reproduced", "repro_summary", "runs_low",
           "runs_high")
NUMBERS = ("max_diff", "tolerance", "margin", "speedup", "peak_gpu_mib", "eager_ms", "exported_ms", "runs_low",
           "runs_high")
TEXTS = ("exporter", "failed_step", "error", "log", "log_tail", "ended_at", "check", "repro_row", "repro_summary")
HISTORY_COLUMNS = ("id", "attempt", "status", "max_diff", "tolerance")
# Only a failure's log tail is searched (for the catalog's patterns, when its error line matches none), so the
# tails of passed and unfinished cells, most of a record's bytes, stay out of the frame.
NO_TAIL_NEEDED = frozenset({Status.PASSED, *UNFINISHED})
THREADED_FROM = 256  # paths: fewer go through the calling thread whatever collect.read_threads says


def _read(path: str) -> dict[str, Any] | None:
    """One record as a dict; None when the cell has no record (yet); a stand-in `error` record if unreadable."""
    try:
        with open(path, "rb") as handle:
            data = loads(handle.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        data = {"status": UNREADABLE, "error": f"unreadable {path}: {' '.join(str(exc).split())}"}
    if not isinstance(data, dict):
        data = {"status": UNREADABLE, "error": f"unreadable {path}: a JSON {type(data).__name__}, not an object"}
    return data


_VERSIONS: dict[tuple, str] = {}  # the few distinct version sets of a sweep, each serialized once


def _versions(versions: Any) -> str:
    if not versions or not isinstance(versions, dict):
        return ""
    try:
        key = tuple(versions.items())
        text = _VERSIONS.get(key)
    except TypeError:  # an unhashable value: serialize it every time
        return json.dumps(versions, sort_keys=True, separators=(",", ":"), default=str)
    if text is None:
        text = _VERSIONS[key] = json.dumps(versions, sort_keys=True, separators=(",", ":"), default=str)
    return text


def _row(path: str, data: dict[str, Any]) -> tuple:
    cell = CellId.of_dir(os.path.dirname(path))
    policy, gpu, torch = cell
    get = data.get
    logs = get("logs")
    log = _log(logs, get("failed_step"))
    fixes = get("fixes") or []
    repro = get("repro")
    if not isinstance(repro, dict):
        repro = {"row": None} if get("exporter") != REPRO_EXPORTER else {"row": _policy_row(policy)}
    reproduced = repro.get("reproduced")
    status = get("status") or "error"
    return (
        str(cell), policy, gpu, torch, _text(get("exporter")), status,
        get("attempt") or 1, _text(get("failed_step")), _text(get("error")), get("max_diff"), get("tolerance"),
        get("margin"), get("speedup"), get("peak_gpu_mib"), get("eager_ms"), get("exported_ms"),
        " ".join(map(str, fixes)) if isinstance(fixes, list) else str(fixes), _versions(get("versions")),
        f"{CELLS_DIR}/{cell}/{log}" if log else None,
        _log_tail(data), _text(get("ended_at")),
        _text(get("check")), None if repro.get("row") is None else str(repro["row"]),
        reproduced if isinstance(reproduced, bool) else None, _text(repro.get("summary")),
        *_runs(get("check_runs"), get("tolerance")),
    )


def _text(value: Any) -> str | None:
    """A text field as text (a record written by hand may hold a number or a list there): one type per column."""
    return value if value is None or isinstance(value, str) else json.dumps(value, default=str)


def _log_tail(data: dict[str, Any]) -> str | None:
    return None if (data.get("status") or "error") in NO_TAIL_NEEDED else _text(data.get("log_tail"))


def _log(logs: Any, failed_step: Any) -> str | None:
    """The log that shows what the cell did last: make_random's when it stopped there, none when nothing ran."""
    if not isinstance(logs, dict) or not logs or failed_step == "setup":
        return None
    if failed_step == "make_random":
        return logs.get("make_random")
    return logs.get("export") or next(iter(logs.values()), None)


def _runs(diffs: Any, tolerance: Any) -> tuple[float | None, float | None]:
    """The lowest and highest margin of a check repeated near its limit; (None, None) for a single run."""
    if not isinstance(diffs, list) or len(diffs) < 2 or not isinstance(tolerance, int | float) or not tolerance:
        return None, None
    return min(diffs) / tolerance, max(diffs) / tolerance


def _policy_row(policy: str) -> str:
    """A repro cell that left no result (it crashed or timed out) still belongs to the repro table."""
    return f"? ({policy})"


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
    for attempt_dir in dirs(os.path.join(cell_dir, ATTEMPTS_DIR)):
        data = _read(os.path.join(attempt_dir, RECORD_NAME))
        if data:
            attempt = data.get("attempt")
            found.append((cell_id, attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else None,
                          _text(data.get("status")), data.get("max_diff"), data.get("tolerance")))
    return found


def load_records(out_dir: Path, workers: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(cells, history): one row per cell with a record, and the check numbers of their earlier attempts.

    workers > 1 reads with that many threads: worth it where reads wait on the network (NFS, Lustre); on a local,
    page-cached disk the JSON parse holds the GIL and threads only add switching (see bench/collect.py).
    """
    rows, history = read_paths(record_paths(out_dir), workers)
    return typed_cells(rows), typed_history(history)


def read_paths(paths: list[str], workers: int = 1) -> tuple[list[tuple], list[tuple]]:
    """The rows of these record.json files (and of their earlier attempts), with `workers` threads."""
    chunks = in_chunks(_read_chunk, paths, workers)
    return [row for rows, _ in chunks for row in rows], [row for _, history in chunks for row in history]


def in_chunks[T](work: Callable[[list[str]], T], paths: list[str], workers: int) -> list[T]:
    """work(chunk) for chunks of paths, through `workers` threads (collect.read_threads) once there are enough
    paths: on network storage each stat and read waits on the server; on a local disk they hold the GIL, and
    threads only add switching."""
    if workers <= 1 or len(paths) < THREADED_FROM:
        return [work(paths)]
    size = -(-len(paths) // (workers * 4))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(work, [paths[i:i + size] for i in range(0, len(paths), size)]))


def typed_cells(rows: list[tuple]) -> pd.DataFrame:
    """The cells frame with each column's one type (numbers float, attempt int, names str)."""
    cells = pd.DataFrame.from_records(rows, columns=list(COLUMNS))
    for column in NUMBERS:
        cells[column] = pd.to_numeric(cells[column], errors="coerce").astype("float64")
    cells["attempt"] = pd.to_numeric(cells["attempt"], errors="coerce").fillna(1).astype("int64")
    for column in ("id", "policy", "gpu", "torch", "status", "fixes", "versions"):
        cells[column] = cells[column].astype(str)
    for column in TEXTS:  # missing stays missing; one dtype however few values a column has
        cells[column] = cells[column].astype("str")
    cells["reproduced"] = cells["reproduced"].astype(object)
    return cells


def typed_history(rows: list[tuple]) -> pd.DataFrame:
    past = pd.DataFrame.from_records(rows, columns=list(HISTORY_COLUMNS))
    for column in ("max_diff", "tolerance"):
        past[column] = pd.to_numeric(past[column], errors="coerce").astype("float64")
    return past
