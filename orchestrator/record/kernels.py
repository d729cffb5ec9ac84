"""A record's kernel breakdown read back for people: one line for `show`, each side's rows for report.html.

The embedded exporters' `kernels` step (exporters/kernel_profile.py) writes it where the exported program was
slower than eager: `{"why", "unit": "gpu" | "cpu", "measure", "eager": SIDE, "exported": SIDE}`, a SIDE being
`{"runs", "total_ms", "distinct", "wall_ms", "top": [{"name", "calls", "ms_per_call", "share"}]}` or
`{"error": why it has none}`. A job whose exporter ended while profiling keeps only `{"error": ...}`.
"""

from __future__ import annotations

import json
from typing import Any

SIDES = ("exported", "eager")  # the side that was slower first
UNITS = {"gpu": "GPU", "cpu": "CPU"}


def parsed(kernels: Any) -> dict[str, Any] | None:
    """The breakdown as a mapping (a record's dict, or cells.csv's JSON text); None where there is none."""
    if isinstance(kernels, str):
        try:
            kernels = json.loads(kernels)
        except ValueError:
            return {"error": f"unreadable breakdown: {kernels[:200]}"}
    return kernels if isinstance(kernels, dict) and kernels else None


def unit_name(kernels: dict[str, Any]) -> str:
    """GPU or CPU: which time the shares are of (a CPU-lane breakdown is never read as a GPU figure)."""
    return UNITS.get(str(kernels.get("unit")), str(kernels.get("unit") or "?"))


def side_head(kernels: dict[str, Any], side: str) -> str:
    """`exported: 12.300 ms of GPU time per run in 48 kernels over 5 runs`, or the side's error."""
    data = kernels.get(side)
    if not isinstance(data, dict):
        return f"{side}: not profiled"
    if data.get("error"):
        return f"{side}: {data['error']}"
    head = (f"{side}: {ms(data.get('total_ms'))} ms of {unit_name(kernels)} time per run in "
            f"{data.get('distinct', '?')} kernels over {data.get('runs', '?')} runs")
    if isinstance(data.get("wall_ms"), int | float):
        head += f" (wall {ms(data['wall_ms'])} ms a run under the profiler)"
    return head + (f"; {data['note']}" if data.get("note") else "")


def rows(kernels: dict[str, Any], side: str) -> list[dict[str, Any]]:
    """The side's top kernels (name, calls per run, ms per call, share of the side's total)."""
    data = kernels.get(side)
    top = data.get("top") if isinstance(data, dict) else None
    return [row for row in top if isinstance(row, dict)] if isinstance(top, list) else []


def short_line(kernels: Any) -> str | None:
    """One line: why it was profiled, and each side's time per run and top kernel (`show`)."""
    found = parsed(kernels)
    if found is None:
        return None
    if found.get("error") and not any(side in found for side in SIDES):
        return str(found["error"])
    parts = []
    for side in SIDES:
        data = found.get(side)
        first = rows(found, side)[:1]
        if isinstance(data, dict) and not data.get("error") and first:
            k = first[0]
            parts.append(f"{side} {ms(data.get('total_ms'))} ms/run, top {k.get('name')} "
                         f"{ms(k.get('ms_per_call'))} ms x {k.get('calls')}/run ({percent(k.get('share'))})")
        else:
            parts.append(side_head(found, side))
    return f"{found.get('why') or 'profiled'}; {unit_name(found)} time: " + "; ".join(parts)


def ms(value: Any) -> str:
    """Milliseconds with 3 decimals; ? where the value is no number."""
    return f"{value:.3f}" if isinstance(value, int | float) and not isinstance(value, bool) else "?"


def percent(value: Any) -> str:
    """A share as a whole percentage; ? where the value is no number."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "?"
    return f"{value:.1%}" if value < 0.1 else f"{value:.0%}"
