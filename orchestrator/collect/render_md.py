"""matrix.md: the tracking table as GitHub Markdown, to paste into the tracking issue as it is.

No timestamps: the same records give the same bytes (`--check`).
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import pandas as pd

from .failure_summary import order
from .rules import SYMBOLS
from .settings import Settings

# What each symbol means (rules.SYMBOLS' keys), and what the numbers are: the legend of matrix.md and report.html.
LEGEND_SYMBOLS = (
    ("pass", "passes on stock torch"), ("patched", "passes only with a patched build (its fixes named)"),
    ("fail", "fails on every build that reached a verdict (failure ids)"),
    ("undecided", "undecided: no build reached a verdict (timeout, cancelled, env)"), ("running", "in progress"),
    ("missing", "no record"), ("unreadable", "a record could not be read (cells.csv names the file)"))
LEGEND_NUMBERS = ("Numbers: largest difference / tolerance of the cell that decided the symbol; *slow*: exported "
                  "slower than eager (speedup); *at limit*: difference at {at_limit:g} of the tolerance or more, or "
                  "repeated runs on both sides of it.")
LEGEND = " · ".join(f"{SYMBOLS[key]} {meaning}" for key, meaning in LEGEND_SYMBOLS) + ". " + LEGEND_NUMBERS
STALE_LEGEND = ("(stale): the record was made from other configs (or another build recipe) than the current config "
                "gives its cell; it is shown as it was and is never a new failure: `export-matrix rerun --stale` runs "
                "it again.")
MAX_ERROR_CHARS = 300
REPROS_HEAD = ("Standalone repros (orchestrator/repros/): does the row's failure still show on each GPU and build "
               "that ran it? A row that stops reproducing after a build change may be fixed.")
MAX_CELLS_LISTED = 5
MAIN_VERSIONS = ("torch", "executorch", "lerobot", "transformers", "python")  # named first, in this order
_MD_SPECIAL = re.compile(r"([\\`*\[\]|~$])")
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


def listed(cells: list, show) -> str:
    """The first MAX_CELLS_LISTED cells, each as show(cell) makes it, and how many more there are."""
    more = f" and {len(cells) - MAX_CELLS_LISTED} more" if len(cells) > MAX_CELLS_LISTED else ""
    return ", ".join(show(c) for c in cells[:MAX_CELLS_LISTED]) + more


def repro_cells(row: dict, settings: Settings) -> list[str]:
    """# · repro · GPU · torch · reproduces · what it showed (the summary, else the error of a cell that broke)."""
    shown = row["summary"] if isinstance(row["summary"], str) else row["error"]
    return [str(row["row"]), str(row["policy"]).removeprefix("repro_"), settings.gpu_label(row["gpu"]),
            str(row["torch"]), str(row["reproduces"]), shown if isinstance(shown, str) else ""]


def repro_cell(row: tuple[str, ...], links: dict[str, str]) -> str:
    """The summary's Repro cell: a generated repro links its script (relative to DIR, where matrix.md is)."""
    link = links.get(row[0])
    return f"[{md_text(row[3])}]({link})" if link else md_text(row[3])


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
    head = row["symbol"] + (" (stale)" if row.get("stale") else "") + (f" {label}" if label else "")
    pieces = [head]
    if status == "running" and row["failures"]:
        pieces.append(row["failures"])  # what the finished builds hit so far
    if num(row["max_diff"]) and num(row["tolerance"]):
        numbers = f"{num(row['max_diff'])} / {num(row['tolerance'])}"
        pieces = [*pieces, numbers] if label else [f"{head} {numbers}"]  # beside the symbol when it has no label
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
    new_failures: list[tuple[str, list[tuple[str, str | None]]]]  # (first error line, [(cell id, its log)])
    failure_rows: list[tuple[str, str, str, str, str]]  # (#, failure, policies, repro, fixed by)
    policy_line: str
    builds: list[tuple[str, str, str]]  # (build, fixes text, its versions and how many cells carry each)
    gpu_versions: list[tuple[str, str]]
    repros: list[dict]  # repros.csv's rows: the standalone repros and whether each still reproduces
    cells: pd.DataFrame  # the first cells in id order, report.html's cells table
    undecided: list[tuple[str, str, str]]  # (cell id, why, exporter) of the cells nothing judged, in id order
    stale: list[tuple[str, str]] = field(default_factory=list)  # (cell id, status) of the stale records, id order
    rows_left_out: str = ""  # which catalog rows no cell of the table could hit, left out of failure_rows
    repro_links: dict[str, str] = field(default_factory=dict)  # failure id -> its generated repro, under DIR


def rerun_commands(undecided: list[tuple[str, str, str]], settings: Settings) -> list[str]:
    """The commands that run the undecided cells again: collect's config dir, matrix and out_dir, and each
    cell's exporter where it is not the one the cell gets by default (a rerun composes its config from its own
    overrides, as a sweep does), one command per exporter."""
    by_exporter: dict[str, list[str]] = defaultdict(list)
    for cell, _, exporter in undecided:
        policy, gpu, _ = cell.split("/", 2)
        redundant = not isinstance(exporter, str) or exporter == settings.default_exporter(policy, gpu)
        by_exporter["" if redundant else exporter].append(cell)  # a missing one reads NaN
    return [shlex.join(["export-matrix", "rerun", *cells, *settings.rerun_args,
                        *([f"exporter={exporter}"] if exporter else [])]) for exporter, cells in by_exporter.items()]


def stale_command(settings: Settings) -> str:
    """The command that runs the stale records again: collect's own --config-dir and overrides, so `rerun --stale`
    compares with the same config this collect did."""
    return shlex.join(["export-matrix", "rerun", "--stale", *settings.stale_args])


def build_versions(cells: pd.DataFrame, settings: Settings) -> list[tuple[str, str, str]]:
    """Each torch build, its fixes, and the distinct versions its records carry (with how many cells, most
    first), first seen first."""
    out: dict[str, Counter[str]] = defaultdict(Counter)  # versions that differ only in gpu_* fields read the same
    for (build, versions), count in cells.groupby(["torch", "versions"], sort=False).size().items():
        data = json.loads(versions) if versions else {}
        shown = [f"{k} {data[k]}" for k in MAIN_VERSIONS if data.get(k)]
        shown += [f"{k} {v}" for k, v in sorted(data.items()) if k not in MAIN_VERSIONS and not k.startswith("gpu_")
                  and v]
        out[build][", ".join(shown) or "no versions recorded"] += int(count)
    fixes = cells.groupby("torch", sort=False)["fixes"].last()
    result = []
    for build in sorted(out, key=order(settings.builds)):
        fix_text = ", ".join(fixes[build].split())
        counted = out[build].most_common()
        shown = "; ".join(f"{v} ({n} cells)" if len(counted) > 1 else v for v, n in counted)
        result.append((build, f"with {fix_text}" if fix_text else "stock torch", shown))
    return result


def gpu_versions(cells: pd.DataFrame, settings: Settings) -> list[tuple[str, str]]:
    """What NVML reported for each GPU column (name, capability, driver), from its cells' distinct versions."""
    seen: dict[str, list[str]] = {}
    for gpu, versions in cells[["gpu", "versions"]].drop_duplicates().itertuples(index=False, name=None):
        data = json.loads(versions) if versions else {}
        text = ", ".join(str(data[k]) if k != "gpu_driver" else f"driver {data[k]}"
                         for k in ("gpu_name", "gpu_capability", "gpu_driver") if data.get(k))
        texts = seen.setdefault(gpu, [])
        if text and text not in texts:
            texts.append(text)
    return [(gpu, "; ".join(seen[gpu])) for gpu in sorted(seen, key=order(settings.gpus)) if seen[gpu]]


def render(summary: Summary, settings: Settings) -> str:
    lines = [f"<!-- export-matrix collect: {summary.records} records; rebuilt from them, edits here are overwritten"
             " -->"]
    lines.append("| policy | " + " | ".join(md_text(settings.gpu_label(g)) for g in summary.gpus) + " |")
    lines.append("| --- |" + " --- |" * len(summary.gpus))
    lines += [f"| {md_text(policy)} | " + " | ".join([summary.md[policy].get(g, "") for g in summary.gpus]) + " |"
              for policy in summary.policies]
    lines += ["", LEGEND.format(at_limit=settings.at_limit)]
    if summary.stale:
        lines += ["", STALE_LEGEND]
    if summary.new_failures:
        lines += ["", "**New failures** (no entry of the failure catalog matches them):", ""]
        lines += [f"- {md_text(error, MAX_ERROR_CHARS)} ({listed(cells, lambda c: md_text(c[0]))})"
                  for error, cells in summary.new_failures]
    if summary.undecided:
        lines += ["", "**Undecided** (nothing judged the export; these are not failures):", ""]
        lines += [f"- {md_text(cell)}: {md_text(why)}" for cell, why, _ in summary.undecided]
        lines += ["", "Retry them: " + ", ".join(f"`{c}`" for c in rerun_commands(summary.undecided, settings))]
    if summary.stale:
        lines += ["", "**Stale** (made from other configs than the current config gives these cells; shown as they "
                  "were, never new failures):", ""]
        lines += [f"- {md_text(cell)}: {md_text(status)}" for cell, status in summary.stale]
        lines += ["", f"Rerun them: `{stale_command(settings)}`"]
    lines += ["", "| # | Failure | Policies | Repro | Fixed by |", "| --- | --- | --- | --- | --- |"]
    lines += ["| " + " | ".join(repro_cell(row, summary.repro_links) if i == 3 else md_text(c)
                                for i, c in enumerate(row)) + " |" for row in summary.failure_rows]
    if summary.rows_left_out:
        lines += ["", md_text(summary.rows_left_out)]
    lines += ["", md_text(summary.policy_line)]
    if summary.repros:
        lines += ["", REPROS_HEAD, "", "| # | repro | GPU | torch | reproduces | what it showed |",
                  "| --- | --- | --- | --- | --- | --- |"]
        lines += ["| " + " | ".join(md_text(c, MAX_ERROR_CHARS) for c in repro_cells(r, settings)) + " |"
                  for r in summary.repros]
    if summary.builds:
        lines += ["", "Torch builds:", ""]
        lines += [f"- {md_text(build)} ({md_text(fixes)}): {md_text(shown)}" for build, fixes, shown in summary.builds]
    if summary.gpu_versions:
        lines += ["", "GPUs:", ""]
        lines += [f"- {md_text(settings.gpu_label(g))}: {md_text(text)}" for g, text in summary.gpu_versions]
    return "\n".join(lines) + "\n"
