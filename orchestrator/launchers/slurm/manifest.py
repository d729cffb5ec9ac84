"""DIR/manifest.json: which Slurm job runs which cell, kept on disk so any later process can follow a sweep.

Several processes (two sweeps, a sweep and a status) update it, so every read-modify-write holds a file lock.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..atomic import write_json_atomic
from ..jsonio import loads

MANIFEST = "manifest.json"


def manifest_path(out_dir: Path) -> Path:
    return Path(out_dir) / MANIFEST


def read_manifest(out_dir: Path) -> dict[str, Any]:
    path = manifest_path(out_dir)
    if not path.exists():
        return {"version": 1, "sweeps": {}, "cells": {}}
    return loads(path.read_bytes())


@contextmanager
def manifest_lock(out_dir: Path) -> Iterator[None]:
    """Serializes read-modify-write of the manifest between processes (two sweeps, a sweep and a status)."""
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    with open(Path(out_dir) / f".{MANIFEST}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def merge_manifest(out_dir: Path, sweep_id: str, sweep: dict[str, Any], cells: dict[str, dict[str, Any]]) -> None:
    """Add a sweep's (new) arrays and cells to the manifest; every other cell's entry stays."""
    with manifest_lock(out_dir):
        manifest = read_manifest(out_dir)
        known = manifest["sweeps"].setdefault(sweep_id, {**sweep, "arrays": []})
        known["arrays"] = [*known["arrays"], *sweep.get("arrays", [])]
        manifest["cells"].update(cells)
        write_json_atomic(manifest_path(out_dir), manifest)
