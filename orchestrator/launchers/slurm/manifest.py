"""DIR/manifest.json: which Slurm job runs which cell, kept on disk so any later process can follow a sweep.

Several processes (two sweeps, a sweep and a status) update it, so every read-modify-write holds a file lock.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ...atomic import write_json_atomic
from ...jsonio import loads

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Entry:
    """One cell's job in the manifest: which job runs which attempt, where its logs go, what it asked of Slurm."""

    job_id: str  # `A_i`: task i of array A
    out_dir: str
    stdout: str
    stderr: str
    attempt: int = 1
    array: str = ""
    sweep: str = ""
    submitted_at: str | None = None
    fingerprint: str | None = None
    exporter: str = ""
    time_min: int | None = None
    signature: dict[str, Any] = field(default_factory=dict)  # the Resources it was submitted with
    configs: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Entry:
        return cls(**{k: v for k, v in data.items() if k in _ENTRY_FIELDS})


_ENTRY_FIELDS = frozenset(f.name for f in fields(Entry))


def manifest_path(out_dir: Path) -> Path:
    return Path(out_dir) / MANIFEST


def read_manifest(out_dir: Path) -> dict[str, Any]:
    path = manifest_path(out_dir)
    if not path.exists():
        return {"version": 1, "sweeps": {}, "cells": {}}
    return loads(path.read_bytes())


def read_entries(out_dir: Path) -> dict[str, Entry]:
    """Every cell's latest job, by cell id."""
    return {cell: Entry.from_dict(data) for cell, data in read_manifest(out_dir)["cells"].items()}


@contextmanager
def manifest_lock(out_dir: Path) -> Iterator[None]:
    """Serializes read-modify-write of the manifest between processes (two sweeps, a sweep and a status)."""
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    with open(Path(out_dir) / f".{MANIFEST}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def merge_manifest(out_dir: Path, sweep_id: str, sweep: dict[str, Any], cells: dict[str, Entry]) -> None:
    """Add a sweep's (new) arrays and cells to the manifest; every other cell's entry stays."""
    with manifest_lock(out_dir):
        manifest = read_manifest(out_dir)
        known = manifest["sweeps"].setdefault(sweep_id, {**sweep, "arrays": []})
        known["arrays"] = [*known["arrays"], *sweep.get("arrays", [])]
        manifest["cells"].update({cell: entry.to_dict() for cell, entry in cells.items()})
        write_json_atomic(manifest_path(out_dir), manifest)
