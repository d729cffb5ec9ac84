"""Read an exporter's log into record fields, with the patterns from the config's `parse:` section."""

from __future__ import annotations

import re
from typing import Any

TRACEBACK_FRAME = re.compile(r"^\s*(File \"|Traceback \(most recent call last\)|\^+$|~+$|During handling)")


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def parse_log(text: str, patterns: dict[str, Any]) -> dict[str, Any]:
    """The check's numbers, the failed step, the error line and the timings found in an exporter's log."""
    found: dict[str, Any] = {}
    for key in ("check_passed", "check_failed"):
        hits = list(re.finditer(patterns[key], text))
        if hits:
            found["max_diff"] = _number(hits[-1]["max_diff"])
            found["tolerance"] = _number(hits[-1]["tolerance"])
            found["check"] = "passed" if key == "check_passed" else "failed"
    if found.get("max_diff") is not None and found.get("tolerance"):
        found["margin"] = found["max_diff"] / found["tolerance"]
    timing = list(re.finditer(patterns["timing"], text))
    if timing:
        eager, exported = _number(timing[-1]["eager_ms"]), _number(timing[-1]["exported_ms"])
        found["eager_ms"], found["exported_ms"] = eager, exported
        if eager and exported:
            found["speedup"] = eager / exported
    lines = text.splitlines()
    step_line = None
    for index, line in enumerate(lines):
        hit = re.search(patterns["failed_step"], line)
        if hit:
            found["failed_step"], step_line = hit["step"], index
    found["error"] = last_error_line(lines[:step_line] if step_line is not None else lines, patterns["exception"])
    return found


def last_error_line(lines: list[str], exception_pattern: str) -> str | None:
    """The last raised-exception line; failing that, the last line that is not part of a traceback."""
    pattern = re.compile(exception_pattern)
    for index in range(len(lines) - 1, -1, -1):
        line = lines[index].strip()
        if pattern.match(lines[index]):
            following = lines[index + 1].strip() if index + 1 < len(lines) else ""
            if line.endswith(":") and following and not TRACEBACK_FRAME.match(lines[index + 1]):
                return f"{line} {following}"  # "SpecViolationError: Operator ...:" continued on the next line
            return line
    for line in reversed(lines):
        if line.strip() and not TRACEBACK_FRAME.match(line):
            return line.strip()
    return None


def tail(text: str, lines: int) -> str:
    return "\n".join(text.splitlines()[-lines:])
