"""report.html: the same tables as matrix.md, readable in a browser, each cell linking to its log.

Every text from a record goes through html.escape; links are relative to DIR (where report.html is written).
Each symbol comes with a coloured badge holding its word (pass, patched, fail, undecided, ...), the emoji itself
hidden from screen readers, so the page reads the same in a browser without an emoji font.
"""

from __future__ import annotations

import os
import re
from collections import namedtuple
from html import escape
from pathlib import Path
from urllib.parse import quote

from ..cell_id import CELLS_DIR
from ..record import RECORD_NAME, UNFINISHED, UNREADABLE
from ..record import kernels as kernel_text
from .failure_summary import columns, named_rows
from .render_md import (
    LEGEND_NUMBERS,
    LEGEND_SYMBOLS,
    REPROS_HEAD,
    STALE_LEGEND,
    Summary,
    listed,
    num,
    repro_cells,
    rerun_commands,
    stale_command,
)
from .rules import SYMBOLS
from .settings import Settings

MAX_CELL_ROWS = 2000  # the per-cell table; a larger sweep lists only its first cells (cells.csv has them all)
CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em; color: #1f2328; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #d0d7de; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
td.pass { background: #dafbe1; } td.patched { background: #fff8c5; } td.fail { background: #ffebe9; }
td.running { background: #ddf4ff; } td.undecided { background: #eaeef2; } td.missing { color: #8c959f; }
td.unreadable { background: #fff1e5; }
a { color: inherit; } code { font-size: 90%; } .err { max-width: 60em; overflow-wrap: anywhere; }
.badge { display: inline-block; padding: 0 6px; border-radius: 9px; font-size: 85%; font-weight: 600;
         line-height: 1.5; white-space: nowrap; color: #fff; }
.badge.pass { background: #1a7f37; } .badge.patched { background: #9a6700; } .badge.fail { background: #cf222e; }
.badge.undecided { background: #6e7781; } .badge.running { background: #0969da; }
.badge.missing { background: #d0d7de; color: #424a53; } .badge.unreadable { background: #bc4c00; }
.files a { margin-right: 0.5em; white-space: nowrap; }
.kernels { display: flex; flex-wrap: wrap; gap: 0 2em; } .kernels table { margin-top: 0.3em; }
.kernels td.name { max-width: 40em; overflow-wrap: anywhere; font-family: monospace; font-size: 90%; }
"""
# The word beside each symbol (rules.SYMBOLS' keys), what a browser without an emoji font shows.
WORDS = {"pass": "pass", "patched": "patched", "fail": "fail", "undecided": "undecided", "running": "in progress",
         "missing": "no record", "unreadable": "unreadable"}


def _str(value: object) -> str:
    """"" for None and NaN (pandas' missing), else the text."""
    return "" if value is None or (isinstance(value, float) and value != value) else str(value)


def _link(path: object, text: str, title: object = None, html: str | None = None) -> str:
    """text (or html, already safe) linking to path, relative to DIR; no link where there is no path."""
    inner = escape(text) if html is None else html
    if not isinstance(path, str) or not path:
        return inner
    tip = f' title="{escape(str(title))}"' if isinstance(title, str) and title else ""
    return f'<a href="{escape(quote(path))}"{tip}>{inner}</a>'


def badge(status: str) -> str:
    """A symbol with its word in a coloured badge; the emoji hidden from screen readers, which read the word."""
    return (f'<span class="badge {escape(status)}"><span class="sym" aria-hidden="true">{SYMBOLS[status]}</span> '
            f"{WORDS[status]}</span>")


def _badged(text: str) -> str:
    """Text as HTML, each ⏳ (a cell still in progress) with its badge."""
    return escape(text).replace(SYMBOLS["running"], badge("running"))


def _inline_md(text: str) -> str:
    """Our own legend's Markdown (`*slow*`, `` `command` ``) as HTML, the rest escaped."""
    html = re.sub(r"\*([^*]+)\*", r"<em>\1</em>", escape(text))
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html)


def legend(at_limit: float) -> str:
    """The legend of matrix.md with badges for the symbols and HTML for its emphasis."""
    meanings = {key: meaning.removeprefix(f"{WORDS[key]}: ") for key, meaning in LEGEND_SYMBOLS}
    symbols = " · ".join(badge(key) + (f" {escape(meaning)}" if meaning != WORDS[key] else "")
                         for key, meaning in meanings.items())  # "⏳ in progress", not "⏳ in progress in progress"
    return f'<p class="legend">{symbols}. {_inline_md(LEGEND_NUMBERS.format(at_limit=at_limit))}</p>'


def grid_cell(row: dict, text: str) -> str:
    """The matrix row's cell: its symbol's badge, then its text (render_md.cell_text) without the symbol and the
    word the badge already says, linking to the log of the cell that decided it."""
    title = f"{row['cell']}: {row['error']}" if isinstance(row["error"], str) else row["cell"]
    status, symbol = row["status"], row["symbol"]
    rest = text[len(symbol):].strip() if text.startswith(symbol) else text
    for word in dict.fromkeys((WORDS[status], status)):  # "⏳ running · 7": the badge says in progress
        rest = "" if rest == word else rest[len(word) + 3:] if rest.startswith(f"{word} · ") else rest
    html = badge(status) + (f" {_badged(rest)}" if rest else "")
    return f'<td class="{escape(status)}">{_link(row["log"], "", title, html)}</td>'


def render(summary: Summary, settings: Settings) -> str:
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           "<title>export matrix</title>", f"<style>{CSS}</style></head><body>",
           f"<h1>Export matrix</h1><p>{summary.records} records"
           + (f"; the newest ended {escape(summary.newest)}" if summary.newest else "") + ".</p>",
           "<table><tr><th>policy</th>"]
    out += [*(f"<th>{escape(settings.gpu_label(g))}</th>" for g in summary.gpus), "</tr>"]
    for policy in summary.policies:
        out += [f"<tr><th>{escape(policy)}</th>", *(summary.html[policy].get(g, "<td></td>") for g in summary.gpus),
                "</tr>"]
    out += ["</table>", legend(settings.at_limit)]
    if summary.stale:
        out.append(f"<p>{_inline_md(STALE_LEGEND)}</p>")
    if summary.new_failures:
        out += ["<h2>New failures</h2><p>No entry of the failure catalog matches them.</p><ul>",
                *(f'<li><code class="err">{escape(error)}</code> ({listed(cells, lambda c: _link(c[1], c[0]))})</li>'
                  for error, cells in summary.new_failures), "</ul>"]
    if summary.undecided:
        out.append("<h2>Undecided</h2><p>Nothing judged the export of these cells; they are not failures.</p><ul>")
        out += [f"<li>{escape(cell)}: {escape(why)}</li>" for cell, why, _ in summary.undecided]
        out.append("</ul><p>Retry them: " + ", ".join(f"<code>{escape(c)}</code>"
                                                    for c in rerun_commands(summary.undecided, settings)) + "</p>")
    if summary.stale:
        out.append("<h2>Stale</h2><p>Made from other configs than the current config gives these cells; shown as "
                   "they were, never new failures.</p><ul>")
        out += [f"<li>{escape(cell)}: {escape(status)}</li>" for cell, status in summary.stale]
        out.append(f"</ul><p>Rerun them: <code>{escape(stale_command(settings))}</code></p>")
    out.append("<h2>Failures</h2><table><tr><th>#</th><th>Failure</th><th>Policies</th><th>Repro</th>"
               "<th>Fixed by</th></tr>")
    links = summary.repro_links  # a generated repro's Repro cell links its script
    out += ["<tr>" + "".join(f'<td><a href="{escape(quote(links[row[0]]))}">{escape(c)}</a></td>'
                               if i == 3 and row[0] in links else f"<td>{escape(c)}</td>" for i, c in enumerate(row))
            + "</tr>" for row in summary.failure_rows]
    out.append("</table>")
    if summary.rows_left_out:
        out.append(f"<p>{escape(summary.rows_left_out)}</p>")
    out.append(f"<p>{escape(summary.policy_line)}</p>")
    if summary.repros:
        out.append(f"<h2>Standalone repros</h2><p>{escape(REPROS_HEAD)}</p><table><tr><th>#</th><th>repro</th>"
                   "<th>GPU</th><th>torch</th><th>reproduces</th><th>what it showed</th></tr>")
        for row in summary.repros:
            texts = repro_cells(row, settings)
            texts[1] = _link(row["log"], texts[1])
            out.append("<tr>" + "".join(f"<td>{t if i == 1 else escape(t)}</td>" for i, t in enumerate(texts))
                       + "</tr>")
        out.append("</table>")
    if summary.builds:
        out += ["<h2>Torch builds</h2><ul>", *(f"<li><b>{escape(b)}</b> ({escape(fixes)}): {escape(shown)}</li>"
                                               for b, fixes, shown in summary.builds), "</ul>"]
    if summary.gpu_versions:
        out += ["<h2>GPUs</h2><ul>", *(f"<li><b>{escape(settings.gpu_label(g))}</b>: {escape(t)}</li>"
                                       for g, t in summary.gpu_versions), "</ul>"]
    out.append(_kernels_section(summary))
    out.append(_cells_table(summary, settings.out_dir))
    out.append(SCRIPT)
    out.append("</body></html>")
    return "\n".join(out) + "\n"


CELL_COLUMNS = ("cell", "status", "step", "failures", "difference / tolerance", "margin", "speedup", "eager ms",
                "exported ms", "peak GPU MiB", "check", "attempt", "files", "error")


_CellRow = namedtuple("_CellRow", ["id", "log", "logs", "status", "stale", "stock", "outcome", "failed_step",
                                   "failures", "max_diff", "tolerance", "margin", "speedup", "eager_ms", "exported_ms",
                                   "peak_gpu_mib", "check", "attempt", "error"])


def _ms(value: object) -> str:
    """Milliseconds as a plain number the table sorts by: 3395.9, 80.6, 0.213."""
    if not isinstance(value, int | float) or value != value:
        return ""
    return f"{value:.1f}" if abs(value) >= 1 else f"{value:.3g}"


def _state(row: _CellRow) -> str:
    """What the cell alone says (rules.SYMBOLS' key): the colour of its status."""
    if row.status == "passed":
        return "pass" if row.stock else "patched"
    if row.status in UNFINISHED:
        return "running"
    if row.status == UNREADABLE:
        return "unreadable"
    return "undecided" if row.outcome == "undecided" else "fail"


def _files(row: _CellRow, out_dir: Path) -> str:
    """Links to the cell's record.json and the logs its record names, those that exist (relative to DIR)."""
    folder = f"{CELLS_DIR}/{row.id}"
    where = os.path.join(out_dir, folder)
    names = [RECORD_NAME, *_str(row.logs).split()]
    return " ".join(_link(f"{folder}/{name}", name) for name in dict.fromkeys(names)
                    if os.path.isfile(os.path.join(where, name)))


def _cells_table(summary: Summary, out_dir: Path) -> str:
    """Every cell with its detail, sortable by any column and filtered by status or failure row (inline script)."""
    rows = list(named_rows(summary.cells, _CellRow))
    profiled = {cell for cell, _, _ in _breakdowns(summary)}
    statuses = sorted({row.status for row in rows})
    failures = sorted({f for row in rows for f in _str(row.failures).split()},
                      key=lambda f: (int(f), "") if f.isdigit() else (10**9, f))
    out = [f"<h2>Cells</h2><p>{summary.records} cells"
           + (f", the first {MAX_CELL_ROWS} shown (cells.csv has them all)" if summary.records > MAX_CELL_ROWS
              else "")
           + ". Click a column to sort by it.</p>",
           '<p><label>status <select id="status-filter"><option value="">all</option>'
           + "".join(f'<option value="{escape(s)}">{escape(s)}</option>' for s in statuses)
           + '</select></label> <label>failure <select id="failure-filter"><option value="">all</option>'
           + "".join(f'<option value="{escape(f)}">{escape(f)}</option>' for f in failures)
           + "</select></label></p>",
           '<table id="cells" class="sortable"><thead><tr>'
           + "".join(f"<th>{escape(c)}</th>" for c in CELL_COLUMNS) + "</tr></thead><tbody>"]
    for row in rows:
        diff = f"{num(row.max_diff)} / {num(row.tolerance)}" if num(row.max_diff) else ""
        speedup = escape(num(row.speedup))
        if row.id in profiled:  # its kernel breakdown, above the table
            speedup = f'<a href="#{escape(_anchor(row.id))}" title="kernel breakdown">{speedup}</a>'
        out.append(f'<tr data-status="{escape(row.status)}" data-failures="{escape(_str(row.failures))}">'
                   f"<td>{_link(row.log, row.id)}</td>"
                   f'<td class="{_state(row)}">{escape(row.status)}{" (stale)" if row.stale else ""}</td>'
                   f"<td>{escape(_str(row.failed_step))}</td><td>{escape(_str(row.failures))}</td>"
                   f"<td>{escape(diff)}</td><td>{escape(num(row.margin))}</td><td>{speedup}</td>"
                   f"<td>{_ms(row.eager_ms)}</td><td>{_ms(row.exported_ms)}</td>"
                   f"<td>{escape(num(row.peak_gpu_mib))}</td>"
                   f"<td>{escape(_str(row.check))}</td><td>{escape(_str(row.attempt))}</td>"
                   f'<td class="files">{_files(row, out_dir)}</td>'
                   f'<td class="err">{escape(_str(row.error))}</td></tr>')
    out.append("</tbody></table>")
    return "\n".join(out)


KERNELS_HEAD = ("Where an exported program was slower than eager (or its exporter was given --kernels), the exporter "
                "profiled a few more runs of each side with torch.profiler: each side's top kernels, with calls per "
                "run, milliseconds per call and share of that side's total. GPU: CUDA kernels by GPU time; CPU: "
                "torch operators by CPU self time, on the CPU lane (no GPU figure).")


def _anchor(cell: str) -> str:
    return f"kernels-{cell}"


def _breakdowns(summary: Summary) -> list[tuple[str, str | None, dict]]:
    """(cell id, its log, its breakdown) of the cells whose record holds one, in the cells table's order."""
    if "kernels" not in summary.cells:
        return []
    found = []
    for cell, log, text in zip(*columns(summary.cells, "id", "log", "kernels"), strict=True):
        kernels = kernel_text.parsed(text) if isinstance(text, str) else None
        if kernels is not None:
            found.append((cell, log, kernels))
    return found


def _kernels_section(summary: Summary) -> str:
    """Each profiled cell's breakdown: its reason, then a table per side (the slower side first)."""
    found = _breakdowns(summary)
    if not found:
        return ""
    out = ["<h2>Kernel breakdown</h2>", f"<p>{escape(KERNELS_HEAD)}</p>"]
    for cell, log, kernels in found:
        why = kernels.get("why") or kernels.get("error") or ""
        out.append(f'<h3 id="{escape(_anchor(cell))}">{_link(log, cell)}: {escape(str(why))}</h3>')
        if kernels.get("measure"):
            out.append(f"<p>{escape(str(kernels['measure']))}</p>")
        sides = [side for side in kernel_text.SIDES if side in kernels]
        if sides:
            out.append('<div class="kernels">' + "".join(_side_table(kernels, side) for side in sides) + "</div>")
    return "\n".join(out)


def _side_table(kernels: dict, side: str) -> str:
    unit = kernel_text.unit_name(kernels)
    out = [f"<div><p><b>{escape(kernel_text.side_head(kernels, side))}</b></p>"]
    rows = kernel_text.rows(kernels, side)
    if rows:
        out.append(f"<table><tr><th>#</th><th>kernel</th><th>calls / run</th><th>ms / call</th>"
                   f"<th>share of {escape(unit)} time</th></tr>")
        out += [f"<tr><td>{rank}</td><td class=\"name\">{escape(str(row.get('name')))}</td>"
                f"<td>{escape(str(row.get('calls')))}</td><td>{escape(kernel_text.ms(row.get('ms_per_call')))}</td>"
                f"<td>{escape(kernel_text.percent(row.get('share')))}</td></tr>"
                for rank, row in enumerate(rows, 1)]
        out.append("</table>")
    return "".join(out) + "</div>"


SCRIPT = """
<script>
// Sorting and filtering of the cells table; the page loads nothing from the network.
document.querySelectorAll("table.sortable thead th").forEach((th, column) => {
  th.style.cursor = "pointer";
  th.addEventListener("click", () => {
    const body = th.closest("table").tBodies[0];
    const direction = th.dataset.direction === "ascending" ? "descending" : "ascending";
    th.closest("tr").querySelectorAll("th").forEach((other) => delete other.dataset.direction);
    th.dataset.direction = direction;
    const text = (row) => row.children[column].textContent.trim();
    const rows = Array.from(body.rows).sort((a, b) => {
      const x = text(a), y = text(b), nx = parseFloat(x), ny = parseFloat(y);
      const order = !isNaN(nx) && !isNaN(ny) ? nx - ny : x.localeCompare(y);
      return direction === "ascending" ? order : -order;
    });
    rows.forEach((row) => body.appendChild(row));
  });
});
function applyFilters() {
  const status = document.getElementById("status-filter").value;
  const failure = document.getElementById("failure-filter").value;
  document.querySelectorAll("#cells tbody tr").forEach((row) => {
    row.hidden = (status && row.dataset.status !== status) ||
                 (failure && !row.dataset.failures.split(" ").includes(failure));
  });
}
document.getElementById("status-filter").addEventListener("change", applyFilters);
document.getElementById("failure-filter").addEventListener("change", applyFilters);
</script>
"""
