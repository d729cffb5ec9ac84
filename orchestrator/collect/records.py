"""Read every `DIR/cells/<policy>/<gpu>/<torch>/record.json` into one pandas frame, one row per cell.

Earlier attempts are read only where attempt > 1: their checks tell whether runs straddle the tolerance.
"""

from __future__ import annotations

import json
import os
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
           "runs_high", "config_key", "logs", "kernels")
NUMBERS = ("max_diff", "tolerance", "margin", "speedup", "peak_gpu_mib", "eager_ms", "exported_ms", "runs_low",
           "runs_high")
TEXTS = ("exporter", "failed_step", "error", "log", "log_tail", "ended_at", "check", "repro_row", "repro_summary",
         "config_key", "logs", "kernels")  # kernels: the exporter's breakdown as JSON text (record/kernels.py)
FROM_CONFIGS = "?"  # `config_key` of a record from before records had one: stale.py computes it from the record
HISTORY_COLUMNS = ("id", "attempt", "status", "max_diff", "tolerance")
# Only a failure's log tail is searched for the catalog's patterns: the others, most of the bytes, stay out.
NO_TAIL_NEEDED = frozenset({Status.PASSED, *UNFINISHED})


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


def _row(cell: CellId, data: dict[str, Any]) -> tuple:
    get = data.get
    log = _log(get("logs"), get("failed_step"))
    fixes = get("fixes") or []
    repro = get("repro")
    if not isinstance(repro, dict):  # a repro cell that left no result still belongs to the repro table
        repro = {"row": f"? ({cell.policy})" if get("exporter") == REPRO_EXPORTER else None}
    reproduced = repro.get("reproduced")
    status = get("status") or "error"
    versions = get("versions")
    runs, tolerance = get("check_runs"), get("tolerance")  # a check repeated near its limit: its margins' range
    repeated = isinstance(runs, list) and len(runs) > 1 and isinstance(tolerance, int | float) and tolerance
    fingerprint = get("fingerprint")  # its config key, what stale.py compares (no dict kept: thousands cost GC time)
    config_key = fingerprint.get("config_key") or (FROM_CONFIGS if fingerprint.get("configs") else None) \
        if isinstance(fingerprint, dict) else None
    return (
        str(cell), *cell, _text(get("exporter")), status,
        get("attempt") or 1, _text(get("failed_step")), _text(get("error")), get("max_diff"), tolerance,
        get("margin"), get("speedup"), get("peak_gpu_mib"), get("eager_ms"), get("exported_ms"),
        " ".join(map(str, fixes)) if isinstance(fixes, list) else str(fixes),
        _versions(versions) if versions and isinstance(versions, dict) else "",
        f"{CELLS_DIR}/{cell}/{log}" if log else None,
        None if status in NO_TAIL_NEEDED else _text(get("log_tail")), _text(get("ended_at")),
        _text(get("check")), None if repro.get("row") is None else str(repro["row"]),
        reproduced if isinstance(reproduced, bool) else None, _text(repro.get("summary")),
        *((min(runs) / tolerance, max(runs) / tolerance) if repeated else (None, None)),
        config_key if isinstance(config_key, str) else None,
        _log_names(get("logs")),
        _text(get("kernels")),
    )


_VERSIONS: dict[tuple, str] = {}  # a sweep's few distinct version sets, each serialized once


def _versions(versions: dict[str, Any]) -> str:
    try:
        key = tuple(versions.items())
        return _VERSIONS[key]
    except KeyError:
        text = _VERSIONS[key] = json.dumps(versions, sort_keys=True, separators=(",", ":"), default=str)
        return text
    except TypeError:  # an unhashable value
        return json.dumps(versions, sort_keys=True, separators=(",", ":"), default=str)


def _text(value: Any) -> str | None:
    """A text field as text (a record written by hand may hold a number or a list there): one type per column."""
    return value if value is None or isinstance(value, str) else json.dumps(value, default=str)


def _log(logs: Any, failed_step: Any) -> str | None:
    """The log that shows what the cell did last: make_random's when it stopped there, none when nothing ran."""
    if not isinstance(logs, dict) or not logs or failed_step == "setup":
        return None
    if failed_step == "make_random":
        return logs.get("make_random")
    return logs.get("export") or next(iter(logs.values()), None)


_LOG_NAMES: dict[tuple, str | None] = {}  # a sweep's few distinct `logs` mappings, each joined once


def _log_names(logs: Any) -> str | None:
    """The record's log files (names in its cell's folder), space-separated, for report.html's links."""
    if not isinstance(logs, dict):
        return None
    try:
        key = tuple(logs.items())
        return _LOG_NAMES[key]
    except KeyError:
        names = [name for name in logs.values() if isinstance(name, str) and name and " " not in name
                 and "/" not in name and name not in (".", "..")]
        joined = _LOG_NAMES[key] = " ".join(dict.fromkeys(names)) or None
        return joined
    except TypeError:  # an unhashable value: no log name
        return None


def _read_cell(path: str) -> tuple[tuple, list[tuple]] | None:
    """(row, earlier attempts' check numbers) of one record.json; None when there is none."""
    data = _read(path)
    if data is None:
        return None
    cell_dir = os.path.dirname(path)
    row = _row(CellId.of_dir(cell_dir), data)
    history = []
    if isinstance(row[6], int) and row[6] > 1:
        for attempt_dir in dirs(os.path.join(cell_dir, ATTEMPTS_DIR)):
            past = _read(os.path.join(attempt_dir, RECORD_NAME))
            if past:
                attempt = past.get("attempt")
                history.append((row[0], attempt if isinstance(attempt, int) and not isinstance(attempt, bool)
                                else None, _text(past.get("status")), past.get("max_diff"), past.get("tolerance")))
    return row, history


def load_records(out_dir: Path, workers: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(cells, history): one row per cell with a record (each column of one type), and the check numbers of
    their earlier attempts. Threads (collect.read_threads) help only where reads wait on network storage."""
    paths = record_paths(out_dir)
    if workers > 1:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            read = [r for r in pool.map(_read_cell, paths) if r is not None]
    else:
        read = [r for r in map(_read_cell, paths) if r is not None]
    cells = pd.DataFrame.from_records([row for row, _ in read], columns=list(COLUMNS))
    for column in NUMBERS:
        cells[column] = pd.to_numeric(cells[column], errors="coerce").astype("float64")
    cells["attempt"] = pd.to_numeric(cells["attempt"], errors="coerce").fillna(1).astype("int64")
    for column in ("id", "policy", "gpu", "torch", "status", "fixes", "versions", *TEXTS):
        cells[column] = cells[column].astype("str")  # missing texts stay missing
    cells["reproduced"] = cells["reproduced"].astype(object)
    history = pd.DataFrame.from_records([past for _, h in read for past in h], columns=list(HISTORY_COLUMNS))
    for column in ("max_diff", "tolerance"):
        history[column] = pd.to_numeric(history[column], errors="coerce").astype("float64")
    return cells, history
