"""`export-matrix status`: the recorded cells as a table, stale ones marked."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from .launch import STATUS_STYLE
from .selection import current_specs, is_stale, recorded


def show_status(out_dir: Path, overrides: list[str], config_dir: Path | None) -> int:
    records = recorded(out_dir)
    if not records:
        Console(stderr=True).print(f"no records under {out_dir}/cells/")
        return 0
    specs = current_specs(sorted(records), [o for o in overrides if not o.startswith("matrix")], config_dir)
    table = Table(title=f"{len(records)} cells under {out_dir}")
    for column in ("cell", "status", "attempt", "step", "max_diff / tol", "stale"):
        table.add_column(column)
    for cell_id, record in records.items():
        status = record["status"]
        diff = f"{record['max_diff']:.2e} / {record['tolerance']:g}" if record.get("max_diff") is not None else ""
        stale = "stale" if cell_id in specs and is_stale(record, specs[cell_id]) else ""
        table.add_row(cell_id, f"[{STATUS_STYLE.get(status, 'white')}]{status}[/]", str(record.get("attempt")),
                      record.get("failed_step") or "", diff, f"[yellow]{stale}[/]")
    Console().print(table)
    return 0
