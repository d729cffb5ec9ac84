"""Read an exporter's log into record fields, with the patterns from the config's `parse:` section."""

from __future__ import annotations

import itertools
import json
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
            found["test_case"] = "passed" if key == "check_passed" else "failed"
    if found.get("max_diff") is not None and found.get("tolerance"):
        found["margin"] = found["max_diff"] / found["tolerance"]
    timing = list(re.finditer(patterns["timing"], text))
    if timing:
        eager, exported = _number(timing[-1]["eager_ms"]), _number(timing[-1]["exported_ms"])
        found["eager_ms"], found["exported_ms"] = eager, exported
        if eager and exported:
            found["speedup"] = eager / exported
    found.update(_embedded_lines(text, patterns))
    lines = text.splitlines()
    step_line = None
    for index, line in enumerate(lines):
        hit = re.search(patterns["failed_step"], line)
        if hit:
            found["failed_step"], step_line = hit["step"], index
    found["error"] = last_error_line(lines[:step_line] if step_line is not None else lines, patterns["exception"])
    return found


def _embedded_lines(text: str, patterns: dict[str, Any]) -> dict[str, Any]:
    """What only the embedded exporters and repros print: the check that ran, GPU memory, step times, results.

    Patterns missing from a user's config (one written before they existed) are skipped."""
    found: dict[str, Any] = {}
    if patterns.get("oom") and re.search(patterns["oom"], text):
        found["oom"] = True
    hits = list(re.finditer(patterns["check_kind"], text)) if patterns.get("check_kind") else []
    if hits:
        found["check"], found["check_reason"] = hits[-1]["check"], hits[-1]["reason"]
    hits = list(re.finditer(patterns["tolerance_source"], text)) if patterns.get("tolerance_source") else []
    if hits:
        found["tolerance_source"], found["declared_tolerance"] = hits[-1]["source"], _number(hits[-1]["tolerance"])
    hits = list(re.finditer(patterns["gpu_memory"], text)) if patterns.get("gpu_memory") else []
    if hits:
        found["peak_gpu_phases"] = {k: _number(hits[-1][k]) for k in ("export", "run")}
    hits = list(re.finditer(patterns["step_started"], text)) if patterns.get("step_started") else []
    if hits:
        found["last_step"] = hits[-1]["step"]
    if patterns.get("step_seconds"):
        found["steps_s"] = {hit["step"]: _number(hit["seconds"]) for hit in re.finditer(patterns["step_seconds"], text)}
    for key, pattern in (("checked_files", "checked_files"), ("timing", "timing_detail"), ("kernels", "kernels")):
        hits = list(re.finditer(patterns[pattern], text)) if patterns.get(pattern) else []
        if hits:
            try:
                found[key] = json.loads(hits[-1]["json"])
            except ValueError:
                found[key] = {"unreadable": hits[-1]["json"][:200]}
    hits = list(re.finditer(patterns["trace_site"], text)) if patterns.get("trace_site") else []
    if hits:
        found["trace_site"] = hits[-1]["site"].strip()
    if patterns.get("resumed") and re.search(patterns["resumed"], text):
        found["resumed"] = True
    hits = list(re.finditer(patterns["repro"], text)) if patterns.get("repro") else []
    if hits:
        try:
            found["repro"] = json.loads(hits[-1]["json"])
        except ValueError:
            found["repro"] = {"reproduced": None, "summary": f"unreadable result line: {hits[-1]['json'][:200]}"}
    return found


def last_error_line(lines: list[str], exception_pattern: str) -> str | None:
    """The last raised-exception line; failing that, the last line that is not part of a traceback."""
    pattern = re.compile(exception_pattern)
    for index in range(len(lines) - 1, -1, -1):
        line = lines[index].strip()
        if pattern.match(lines[index]):
            following = lines[index + 1].strip() if index + 1 < len(lines) else ""
            if line.endswith(":") and following and not TRACEBACK_FRAME.match(lines[index + 1]):
                # continued on the next line ("SpecViolationError: Operator ..."), or a list of them, one a line
                # ("missing fallback kernels (2 total):" then "- aten::detach_copy", "- aten::multinomial")
                items = list(itertools.takewhile(lambda x: x.startswith("- "), (x.strip() for x in lines[index + 1:])))
                return f"{line} {' '.join(items) or following}"
            return line
    for line in reversed(lines):
        if line.strip() and not TRACEBACK_FRAME.match(line):
            return line.strip()
    return None


def tail(text: str, lines: int) -> str:
    return "\n".join(text.splitlines()[-lines:])
