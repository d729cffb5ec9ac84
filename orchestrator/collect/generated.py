"""The generated repros `export-matrix repro` leaves: DIR/repros/<policy>/<gpu>/<torch>/<failure>.py and that
folder's repros.json (what each script reproduced, in which build, how long it ran, how long it is).

collect reads them for the summary's Repro column (`standalone (generated)`, linking a script) and keeps their
state in DIR/generated_repros.csv, so changes.md can say when a generated repro stopped reproducing (the row may
be fixed by the build that changed).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

REPROS_DIR = "repros"
RESULTS = "repros.json"
STATE = "generated_repros.csv"
STATE_COLUMNS = ("cell", "failure", "script", "reproduces", "versions")
GENERATED = "standalone (generated)"


def results_path(out_dir: Path, cell: str) -> Path:
    return Path(out_dir) / REPROS_DIR / cell / RESULTS


def read_results(out_dir: Path) -> list[dict[str, Any]]:
    """Every cell's repros.json, in cell order (an unreadable one is skipped: collect never fails on it)."""
    found = []
    for path in sorted((Path(out_dir) / REPROS_DIR).glob(f"*/*/*/{RESULTS}")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("scripts"), list):
            found.append(data)
    return found


def rows(results: list[dict[str, Any]]) -> list[dict[str, str]]:
    """One row per generated script: its cell, failure id, path under DIR, reproduces (yes/no/not run) and the
    versions it last ran with."""
    out = []
    for result in results:
        for entry in result["scripts"]:
            if not isinstance(entry, dict) or not entry.get("script"):
                continue
            verdict = {True: "yes", False: "no"}.get(entry.get("reproduces"), "not run")
            versions = entry.get("versions") or {}
            out.append({"cell": str(result.get("cell")), "failure": str(entry.get("failure")),
                        "script": f"{REPROS_DIR}/{result.get('cell')}/{entry['script']}", "reproduces": verdict,
                        "versions": ", ".join(f"{k} {v}" for k, v in sorted(versions.items()) if v)})
    return out


def links(state: list[dict[str, str]]) -> dict[str, str]:
    """Failure id -> a generated script to link from the summary (one that reproduces first, then by cell)."""
    best: dict[str, dict[str, str]] = {}
    for row in state:
        kept = best.get(row["failure"])
        if kept is None or (kept["reproduces"] != "yes" and row["reproduces"] == "yes"):
            best[row["failure"]] = row
    return {failure: row["script"] for failure, row in best.items()}


def state_text(state: list[dict[str, str]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(STATE_COLUMNS), lineterminator="\n")
    writer.writeheader()
    writer.writerows(state)
    return buffer.getvalue()


def read_state(path: Path) -> list[dict[str, str]] | None:
    try:
        with open(path, newline="") as handle:
            return list(csv.DictReader(handle))
    except OSError:
        return None


def change_lines(previous: list[dict[str, str]] | None, now: list[dict[str, str]], name) -> list[str]:
    """changes.md's lines for generated repros: one that stopped reproducing (the row may be fixed), one that
    reproduces again, one that is new. `name(cell)` is how changes.md names a cell."""
    if previous is None:
        return []
    before = {(r["cell"], r["failure"]): r for r in previous}
    lines = []
    for row in now:
        was = before.get((row["cell"], row["failure"]))
        where = f"{name(row['cell'])}: generated repro {Path(row['script']).name}"
        built = f" ({row['versions']})" if row["versions"] else ""
        if was is None:
            lines.append(f"{where} is new (reproduces: {row['reproduces']})")
        elif was["reproduces"] == "yes" and row["reproduces"] == "no":
            lines.append(f"{where} no longer reproduces{built}: the row may be fixed")
        elif was["reproduces"] != "yes" and row["reproduces"] == "yes":
            lines.append(f"{where} reproduces again{built}")
    return lines
