"""report.html: the same tables as matrix.md, readable in a browser, each cell linking to its log.

Every text from a record goes through html.escape; links are relative to DIR (where report.html is written).
"""

from __future__ import annotations

from html import escape
from urllib.parse import quote

import pandas as pd

from .render_md import LEGEND, MAX_CELLS_LISTED, REPROS_HEAD, Summary, cell_text, num, repro_cells, summarize
from .settings import Settings

MAX_CELL_ROWS = 2000  # the per-cell table; a larger sweep lists only its first cells (cells.csv has them all)
CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em; color: #1f2328; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #d0d7de; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
td.pass { background: #dafbe1; } td.patched { background: #fff8c5; } td.fail { background: #ffebe9; }
td.running { background: #ddf4ff; } td.missing { color: #8c959f; }
a { color: inherit; } code { font-size: 90%; } .err { max-width: 60em; overflow-wrap: anywhere; }
"""


def _str(value: object) -> str:
    """"" for None and NaN (pandas' missing), else the text."""
    return "" if value is None or (isinstance(value, float) and value != value) else str(value)


def _link(path: object, text: str, title: object = None) -> str:
    if not isinstance(path, str) or not path:
        return escape(text)
    tip = f' title="{escape(str(title))}"' if isinstance(title, str) and title else ""
    return f'<a href="{escape(quote(path))}"{tip}>{escape(text)}</a>'


def render(matrix: pd.DataFrame, cells: pd.DataFrame, settings: Settings, summary: Summary | None = None) -> str:
    summary = summary or summarize(matrix, cells, settings)
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           "<title>export matrix</title>", f"<style>{CSS}</style></head><body>",
           f"<h1>Export matrix</h1><p>{len(cells)} records.</p>", "<table><tr><th>policy</th>"]
    out += [f"<th>{escape(settings.gpu_label(g))}</th>" for g in summary.gpus]
    out.append("</tr>")
    for policy in summary.policies:
        out.append(f"<tr><th>{escape(policy)}</th>")
        for gpu in summary.gpus:
            row = summary.grid.get((policy, gpu))
            if row is None:
                out.append("<td></td>")
                continue
            title = f"{row['cell']}: {row['error']}" if isinstance(row["error"], str) else row["cell"]
            out.append(f'<td class="{escape(row["status"])}">{_link(row["log"], cell_text(row), title)}</td>')
        out.append("</tr>")
    out += ["</table>", f"<p>{escape(LEGEND.format(at_limit=settings.at_limit))}</p>"]
    if summary.new_failures:
        out.append("<h2>New failures</h2><p>No entry of the failure catalog matches them.</p><ul>")
        logs = dict(zip(cells["id"], cells["log"], strict=True))
        for error, ids in summary.new_failures:
            links = ", ".join(_link(logs.get(i), i) for i in ids[:MAX_CELLS_LISTED])
            more = f" and {len(ids) - MAX_CELLS_LISTED} more" if len(ids) > MAX_CELLS_LISTED else ""
            out.append(f'<li><code class="err">{escape(error)}</code> ({links}{more})</li>')
        out.append("</ul>")
    out.append("<h2>Failures</h2><table><tr><th>#</th><th>Failure</th><th>Policies</th><th>Repro</th>"
               "<th>Fixed by</th></tr>")
    out += ["<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in summary.failure_rows]
    out += ["</table>", f"<p>{escape(summary.policy_line)}</p>"]
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
        out.append("<h2>Torch builds</h2><ul>")
        for build, fixes, versions in summary.builds:
            shown = "; ".join(f"{v} ({n} cells)" if len(versions) > 1 else v for v, n in versions)
            out.append(f"<li><b>{escape(build)}</b> ({escape(fixes)}): {escape(shown)}</li>")
        out.append("</ul>")
    if summary.gpu_versions:
        out.append("<h2>GPUs</h2><ul>")
        out += [f"<li><b>{escape(settings.gpu_label(g))}</b>: {escape(t)}</li>" for g, t in summary.gpu_versions]
        out.append("</ul>")
    out.append(_cells_table(cells))
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _cells_table(cells: pd.DataFrame) -> str:
    shown = cells.head(MAX_CELL_ROWS)
    out = [f"<h2>Cells</h2><p>{len(cells)} cells"
           + (f", the first {MAX_CELL_ROWS} shown (cells.csv has them all)" if len(cells) > MAX_CELL_ROWS else "")
           + ".</p><table><tr><th>cell</th><th>status</th><th>step</th><th>failures</th><th>difference / tolerance"
           "</th><th>speedup</th><th>peak GPU MiB</th><th>check</th><th>error</th></tr>"]
    for row in shown.itertuples(index=False):
        diff = f"{num(row.max_diff)} / {num(row.tolerance)}" if num(row.max_diff) else ""
        out.append(f"<tr><td>{_link(row.log, row.id)}</td><td>{escape(row.status)}</td>"
                   f"<td>{escape(_str(row.failed_step))}</td><td>{escape(_str(row.failures))}</td>"
                   f"<td>{escape(diff)}</td><td>{escape(num(row.speedup))}</td><td>{escape(num(row.peak_gpu_mib))}"
                   f"</td><td>{escape(_str(row.check))}</td>"
                   f'<td class="err">{escape(_str(row.error))}</td></tr>')
    out.append("</table>")
    return "\n".join(out)
