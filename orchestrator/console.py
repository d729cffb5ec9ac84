"""What the terminal shows: status colours, the progress bar of a sweep or a wait, one line per finished cell,
the summary, and the aligned status table. The local launcher, the Slurm follower and `status` share it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from .record import Status

if TYPE_CHECKING:
    from .record import Record

STATUS_STYLE = {"passed": "green", "failed": "red", "timeout": "yellow", "killed": "magenta",
                "error": "bold red", "cancelled": "yellow", "oom": "magenta"}
SHOWN_STYLE = {**STATUS_STYLE, "pending": "dim", "running": "cyan", "requeued": "cyan", "suspended": "dim"}


def stderr_console() -> Console:
    """The commands' console, on stderr. Into a file or a pipe rich would wrap every line at 80 columns, splitting a
    cell's line in two; there a line stays one line (a terminal still gets rich's wrapping)."""
    console = Console(stderr=True)
    console.soft_wrap = not console.is_terminal
    return console


def progress(console: Console) -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TextColumn("{task.fields[counts]}"), console=console, transient=False)


def counts_text(counts: Counter[str]) -> str:
    return "  ".join(f"[{STATUS_STYLE.get(s, 'white')}]{s} {n}[/]" for s, n in sorted(counts.items()))


def describe(record: Record) -> str:
    """One line per finished cell: status, the check against its tolerance, times, or the error."""
    status = record.status
    parts = [f"[{STATUS_STYLE.get(status, 'white')}]{escape(f'{status:9s}')}[/] {escape(record.cell)}"]
    if record.max_diff is not None:
        parts.append(f"diff {record.max_diff:.2e} / tol {record.tolerance:g}")
    if record.eager_ms is not None and record.exported_ms is not None:
        parts.append(f"eager {record.eager_ms:.1f} ms, exported {record.exported_ms:.1f} ms")
    if record.export_s is not None:
        parts.append(f"export {record.export_s:.0f} s")
    if status != "passed":
        parts.append(escape(f"[{record.failed_step or '?'}] {record.error or ''}"))
    return "  ".join(parts)


def exit_code(records: Iterable[Record]) -> int:
    """A launch's exit status: 1 where a cell could not even start (`error`), else 0 (failures are results)."""
    return 1 if any(r.status == Status.ERROR for r in records) else 0


def summarize(records: Iterable[Record]) -> str:
    counts = Counter(str(r.status) for r in records)
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no cells"


def aligned(title: str, columns: list[str], rows: list[list[str]], caption: str) -> Text:
    """Columns padded to their widest value; the status (column 1) styled, the last column (stale marks) in yellow.
    A few spans per row: rich renders each span, and a status lists thousands of rows."""
    widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]
    text = Text(title + "\n", style="italic")
    text.append("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip() + "\n", style="bold")
    for row in rows:
        padded = [value.ljust(width) for value, width in zip(row, widths, strict=True)]
        text.append(padded[0] + "  ")
        text.append(padded[1], style=SHOWN_STYLE.get(row[1], "white"))
        text.append("  " + "  ".join(padded[2:-1]) + "  ")
        text.append(row[-1] + "\n", style="yellow")
    text.append(caption, style="dim")
    return text
