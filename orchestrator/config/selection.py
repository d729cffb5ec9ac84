"""Which cells a rerun takes: named ids or patterns, the failed ones, or the stale ones."""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

from ..cell_id import CellId
from ..record import UNFINISHED, Record, Status, owner, record_paths
from . import ConfigError, selected, split_selection
from .fingerprint_cache import current_fingerprints
from .spec import CellSpec
from .specs_now import current_specs
from .staleness import stale_reasons


def recorded(out_dir: Path) -> dict[str, Record]:
    """Every cell that has a record under out_dir, by id (status `unreadable` where the file cannot be read);
    records abandoned by a sweep or job that died are settled on the way (owner.py)."""
    found = {}
    for path in record_paths(out_dir):
        cell_dir = os.path.dirname(path)
        record = owner.current_record(cell_dir)
        if record is not None:
            found[str(CellId.of_dir(cell_dir))] = record
    return found


def select(out_dir: Path, patterns: list[str], failed: bool, stale: bool, overrides: list[str],
           config_dir: Path | None) -> list[CellSpec]:
    """The cells to rerun; `policy=`, `gpu=`, `torch=` among the overrides narrow every way of choosing them."""
    overrides, selection = split_selection(overrides)
    records = {c: r for c, r in recorded(out_dir).items() if selected(c, selection)}
    chosen: list[str] = []
    for pattern in patterns:
        hits = [c for c in records if fnmatch.fnmatchcase(c, pattern)]
        if not hits and not any(ch in pattern for ch in "*?[") and selected(pattern, selection):
            hits = [pattern]  # a cell that never ran can be run by its id
        if not hits:
            raise ConfigError(f"no recorded cell matches {pattern!r} (recorded: {len(records)} cells under {out_dir})")
        chosen += [c for c in hits if c not in chosen]
    if failed:
        chosen += [c for c, r in records.items() if r.status not in (Status.PASSED, *UNFINISHED) and c not in chosen]
    if stale:
        current = current_fingerprints(out_dir, sorted(records), overrides, config_dir)
        reasons = stale_reasons(out_dir, records, current)
        chosen += [c for c in records if c not in chosen and c in reasons]
    specs = current_specs(chosen, overrides, config_dir)
    missing = [c for c in chosen if c not in specs]
    if missing:
        raise ConfigError(f"cell {missing[0]!r} is not in the configured matrix (policy/gpu/torch names exist, but "
                          "the cell does not)")
    return [specs[c] for c in chosen]

