"""Which records are stale: made from other configs than the current config gives their cells.

A record's fingerprint holds the configs it ran with; `fingerprint.config_key` hashes them with a recipe build's
identity, leaving out the distributions of an interpreter we did not build, which only the machine that ran the
cell can read (a collect may run elsewhere: every record of such a build would read stale there). Where the
sweep ran, `export-matrix status` and `rerun --stale` also compare those distributions, so `rerun --stale` takes
every cell marked here. The current config keys are kept by their config inputs (fingerprint_cache.py): a
collect after the first composes nothing.

Not marked: a record without a fingerprint (written by hand, or before records had one) and a cell whose policy,
gpu or torch config no longer exists: there is nothing to compare. Where the config cannot be composed, no record
is marked, and collect says why in one line.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from ..cell_id import CellId
from ..config import ConfigError, split_selection
from ..jsonio import loads
from ..record import RECORD_NAME
from .records import FROM_CONFIGS


def stale_cells(cells: pd.DataFrame, overrides: list[str], config_dir: Path | None, out_dir: Path,
                store: bool = True) -> tuple[set[str], str | None]:
    """(the ids of the stale records, why none could be compared or None). `store`: keep newly composed keys in
    DIR/.fingerprints.json (`collect --check` writes nothing)."""
    printed = cells[cells["config_key"].notna()]
    if printed.empty:
        return set(), None
    # only where a record has a fingerprint: a tree of hand-made records imports and reads nothing more
    from ..config.fingerprint_cache import current_config_keys

    recorded = dict(zip(printed["id"].tolist(), printed["config_key"].tolist(), strict=True))
    try:
        keys = current_config_keys(out_dir, sorted(recorded), split_selection(overrides)[0], config_dir, store=store)
    except (ConfigError, OSError) as exc:
        return set(), f"stale marks left out: the current config of the recorded cells cannot be composed ({exc})"
    return {cell for cell, key in keys.items() if _config_key(out_dir, cell, recorded[cell]) != key}, None


def _config_key(out_dir: Path, cell: str, recorded: str) -> str | None:
    """The record's config key: written by its sweep, or, for a record from before, computed from its configs."""
    if recorded != FROM_CONFIGS:
        return recorded
    from ..config.fingerprint import config_key

    try:
        with open(os.path.join(CellId.parse(cell).dir(out_dir), RECORD_NAME), "rb") as handle:
            printed = loads(handle.read()).get("fingerprint") or {}
        return config_key(printed.get("configs"), printed.get("env"))
    except (OSError, ValueError, AttributeError):
        return None  # rewritten unreadable since it was read: compared as a mismatch, as any other change
