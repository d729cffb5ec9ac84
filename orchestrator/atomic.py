"""Atomic writes: a temp file in the same directory, fsync'ed, then renamed over the target.

A reader (another process, a collect running during a sweep) sees the old file or the new one, never half of
one, and a write killed half way leaves the old file and no temp file behind. A file keeps its permissions; a
new one is readable by all (0644), as records and tables on a shared filesystem must be.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO


def write_bytes_atomic(path: Path, data: str | bytes) -> None:
    write_atomic(path, lambda handle: handle.write(data.encode() if isinstance(data, str) else data))


def write_atomic(path: Path, fill: Callable[[BinaryIO], object]) -> None:
    """path's new content is what fill writes into the open file, or path is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            fill(handle)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            mode = path.stat().st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o644
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, data: Any, sort_keys: bool = True) -> None:
    write_bytes_atomic(path, json.dumps(data, indent=2, sort_keys=sort_keys, default=str) + "\n")
