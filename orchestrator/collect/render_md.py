"""matrix.md: the tracking table as GitHub Markdown, to paste into the tracking issue as it is.

The matrix (one row per policy, one column per GPU), the failures no catalog entry knows, the failure summary
(the seed's table, rebuilt from the catalog and the cells seen), the "Policy to failure:" line, then the torch
builds and versions the records carry. No timestamps: the same records give the same bytes (`--check`).
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections import Counter, defaultdict
from dataclasses import dataclass

from .failure_summary import order
from .settings import Settings

LEGEND = ("✅ passes on stock torch · 🟡 passes only with a patched build (its fixes named) · ❌ fails on every "
          "build that reached a verdict (failure ids) · ⏸ undecided: no build reached a verdict (timeout, cancelled, "
          "env) · ⏳ in progress · — no record · ⚠️ a record could not be read (cells.csv names the file). Numbers: "
          "largest difference / tolerance of the cell that decided the symbol; *slow*: exported slower than eager "
          "(speedup); *at limit*: difference at {at_limit:g} of the tolerance or more, or repeated runs on both "
          "sides of it.")
MAX_ERROR_CHARS = 300
REPROS_HEAD = ("Standalone repros (orchestrator/repros/): does the row's failure still show on each GPU and build "
               "that ran it? A row that stops reproducing after a build change may be fixed.")
MAX_CELLS_LISTED = 5
_MD_CHARACTERS = "\\`*[]|~$"
_MD_SPECIAL = re.compile(f"([{re.escape(_MD_CHARACTERS)}])")
_PLAIN = re.compile(r"[A-Za-z0-9.,:/+=()#-]*")  # a single line with no character md_text escapes
_LONE_UNDERSCORE = re.compile(r"_(?:(?<![A-Za-z0-9]_)|(?![A-Za-z0-9]))")  # not after or not before a letter/digit


def md_text(text: object, limit: int | None = None) -> str:
    """Text that cannot break a Markdown table or line: one line, Markdown and HTML characters escaped, and an
    underscore escaped unless it sits between two letters or digits (inside a word it is no emphasis)."""
    if isinstance(text, str) and (limit is None or len(text) <= limit) and _PLAIN.fullmatch(text):
        return text  # most names: nothing to escape
    flat = " ".join(str(text).split())
    if limit and len(flat) > limit:
        flat = flat[:limit - 1] + "…"
    flat = _MD_SPECIAL.sub(r"\\\1", flat).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _LONE_UNDERSCORE.sub(r"\\_", flat)


def repro_cells(row: dict, settings: Settings) -> list[str]:
    """# · repro · GPU · torch · reproduces · what it showed (the summary, else the error of a cell that broke)."""
    shown = row["summary"] if isinstance(row["summary"], str) else row["error"]
    return [str(row["row"]), str(row["policy"]).removeprefix("repro_"), settings.gpu_label(row["gpu"]),
            str(row["torch"]), str(row["reproduces"]), shown if isinstance(shown, str) else ""]


def num(value: float | None) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3g}"


def cell_text(row: dict) -> str:
    """`✅ 0.022 / 0.075`, `🟡 #202785 · 0.022 / 0.075`, `❌ 5 7 · 0.0953 / 0.075 · at limit`, `❌ 3`, `—`."""
    status = row["status"]
    if status == "missing":
        return "—"
    if status == "unreadable":  # no numbers: they would come from a cell that did not decide the symbol
        return "⚠️ unreadable"
    label = {"patched": row["fixes"] or row["build"], "fail": row["failures"], "running": "running",
             "undecided": row.get("reason") or "undecided"}.get(status)
    head = row["symbol"] + (f" {label}" if label else "")
    pieces = [head]
    if status == "running" and row["failures"]:
        pieces.append(row["failures"])  # what the finished builds hit so far
    if num(row["max_diff"]) and num(row["tolerance"]):
        numbers = f"{num(row['max_diff'])} / {num(row['tolerance'])}"
        if label:
            pieces.append(numbers)
        else:
            pieces[0] = f"{head} {numbers}"
    if isinstance(row.get("check"), str) and row["check"] and row["check"] != "none":
        pieces.append(f"checked by {row['check']}")  # the embedded CUDA exporter's: executorch or aoti
    if row["slow"]:
        pieces.append(f"slow {row['speedup']:.2f}×")
    if row["at_limit"]:  # with the margins of every run where the check was repeated near its limit
        pieces.append(f"at limit {row['runs']}" if isinstance(row.get("runs"), str) and row["runs"] else "at limit")
    if row["in_progress"] and status != "running":
        pieces.append("⏳")
    return " · ".join(pieces)


@dataclass
class Summary:
    """Everything both renderings show (tables.py puts it together)."""

    policies: list[str]  # table order
    gpus: list[str]  # the recorded ones, in table order
    md: dict[str, dict[str, str]]  # policy -> gpu -> its matrix.md cell
    html: dict[str, dict[str, str]]  # policy -> gpu -> its report.html cell
    records: int  # policy export cells
    newest: str  # the latest ended_at of their records
    new_failures: list[tuple[str, list[str]]]  # (first error line, cell ids)
    logs: dict[str, str | None]  # cell id -> its log, for the cells of new failures
    failure_rows: list[tuple[str, str, str, str, str]]  # (#, failure, policies, repro, fixed by)
    policy_line: str
    builds: list[tuple[str, str, list[tuple[str, int]]]]  # (build, fixes text, [(versions text, cells)])
    gpu_versions: list[tuple[str, str]]
    repros: list[dict]  # repros.csv's rows: the standalone repros and whether each still reproduces
    cell_rows: list[list[str]]  # [html, status, failures] of the first cells in id order (report.html)
    undecided: list[tuple[str, str, str]]  # (cell id, why, exporter) of the cells nothing judged, in id order


def rerun_commands(undecided: list[tuple[str, str, str]], settings: Settings) -> list[str]:
    """The commands that run the undecided cells again: collect's config dir, matrix and out_dir, and each
    cell's exporter (a rerun composes its config from its own overrides, as a sweep does), one per exporter."""
    by_exporter: dict[str, list[str]] = defaultdict(list)
    for cell, _, exporter in undecided:
        by_exporter[exporter if isinstance(exporter, str) else ""].append(cell)  # a missing one reads NaN
    return [shlex.join(["export-matrix", "rerun", *cells, *settings.rerun_args,
                        *([f"exporter={exporter}"] if exporter else [])]) for exporter, cells in by_exporter.items()]


def build_versions(counts: list[tuple[str, str, int]], fixes: dict[str, str],
                   settings: Settings) -> list[tuple[str, str, list[tuple[str, int]]]]:
    """Each torch build, its fixes, and the distinct versions its records carry (with how many cells), from
    (build, versions, cells) first seen first and each build's fixes."""
    out: dict[str, Counter[str]] = defaultdict(Counter)  # versions that differ only in gpu_* fields read the same
    for build, versions, count in counts:
        data = json.loads(versions) if versions else {}
        shown = [f"{k} {data[k]}" for k in ("torch", "executorch", "lerobot", "transformers", "python")
                 if data.get(k)]
        shown += [f"{k} {v}" for k, v in sorted(data.items())
                  if k not in {"torch", "executorch", "lerobot", "transformers", "python"}
                  and not k.startswith("gpu_") and v]
        out[build][", ".join(shown) or "no versions recorded"] += int(count)
    result = []
    for build in sorted(out, key=order(settings.builds)):
        fix_text = ", ".join(fixes[build].split())
        counted = sorted(out[build].items(), key=lambda v: -v[1])
        result.append((build, f"with {fix_text}" if fix_text else "stock torch", counted))
    return result


def gpu_versions(pairs: list[tuple[str, str]], settings: Settings) -> list[tuple[str, str]]:
    """What NVML reported for each GPU column (name, capability, driver), from its distinct (gpu, versions)."""
    seen: dict[str, list[str]] = {}
    for gpu, versions in pairs:
        data = json.loads(versions) if versions else {}
        text = ", ".join(str(data[k]) if k != "gpu_driver" else f"driver {data[k]}"
                         for k in ("gpu_name", "gpu_capability", "gpu_driver") if data.get(k))
        texts = seen.setdefault(gpu, [])
        if text and text not in texts:
            texts.append(text)
    result = [(gpu, "; ".join(texts)) for gpu, texts in seen.items() if texts]
    return sorted(result, key=lambda item: order(settings.gpus)(item[0]))


def render(summary: Summary, settings: Settings) -> str:
    lines = [f"<!-- export-matrix collect: {summary.records} records; rebuilt from them, edits here are overwritten"
             " -->"]
    lines.append("| policy | " + " | ".join(md_text(settings.gpu_label(g)) for g in summary.gpus) + " |")
    lines.append("| --- |" + " --- |" * len(summary.gpus))
    for policy in summary.policies:
        cells = summary.md[policy]
        lines.append(f"| {md_text(policy)} | " + " | ".join([cells.get(g, "") for g in summary.gpus]) + " |")
    lines += ["", LEGEND.format(at_limit=settings.at_limit)]
    if summary.new_failures:
        lines += ["", "**New failures** (no entry of the failure catalog matches them):", ""]
        for error, ids in summary.new_failures:
            shown = ", ".join(md_text(i) for i in ids[:MAX_CELLS_LISTED])
            more = f" and {len(ids) - MAX_CELLS_LISTED} more" if len(ids) > MAX_CELLS_LISTED else ""
            lines.append(f"- {md_text(error, MAX_ERROR_CHARS)} ({shown}{more})")
    if summary.undecided:
        lines += ["", "**Undecided** (nothing judged the export; these are not failures):", ""]
        lines += [f"- {md_text(cell)}: {md_text(why)}" for cell, why, _ in summary.undecided]
        lines += ["", "Retry them: " + ", ".join(f"`{c}`" for c in rerun_commands(summary.undecided, settings))]
    lines += ["", "| # | Failure | Policies | Repro | Fixed by |", "| --- | --- | --- | --- | --- |"]
    lines += ["| " + " | ".join(md_text(c) for c in row) + " |" for row in summary.failure_rows]
    lines += ["", md_text(summary.policy_line)]
    if summary.repros:
        lines += ["", REPROS_HEAD, "", "| # | repro | GPU | torch | reproduces | what it showed |",
                  "| --- | --- | --- | --- | --- | --- |"]
        lines += ["| " + " | ".join(md_text(c, MAX_ERROR_CHARS) for c in repro_cells(r, settings)) + " |"
                  for r in summary.repros]
    if summary.builds:
        lines += ["", "Torch builds:", ""]
        for build, fixes, versions in summary.builds:
            shown = "; ".join(f"{v} ({n} cells)" if len(versions) > 1 else v for v, n in versions)
            lines.append(f"- {md_text(build)} ({md_text(fixes)}): {md_text(shown)}")
    if summary.gpu_versions:
        lines += ["", "GPUs:", ""]
        lines += [f"- {md_text(settings.gpu_label(g))}: {md_text(text)}" for g, text in summary.gpu_versions]
    return "\n".join(lines) + "\n"
