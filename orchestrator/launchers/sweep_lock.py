"""One sweep at a time per out_dir: two at once would run every cell twice and race for its record.

`sweep` and `rerun` hold an exclusive lock on DIR/.export-matrix.lock (flock: released by the kernel when the
process ends, also on kill -9, so no stale lock is left behind) while they prepare and launch cells. A second
sweep into the same DIR stops at once with one line that names the holder.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from ..config import ConfigError, check_out_dir

LOCK_NAME = ".export-matrix.lock"


@contextmanager
def sweep_lock(out_dir: Path, what: str) -> Iterator[None]:
    path = check_out_dir(out_dir) / LOCK_NAME
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a+")
    except OSError as exc:
        raise ConfigError(f"out_dir {str(out_dir)!r} cannot be written: {exc.strerror or exc}") from None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise ConfigError(f"another sweep is running in {out_dir} ({holder}): wait for it to end, "
                              "or give this one another out_dir") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{what}, pid {os.getpid()}, since {datetime.now(UTC).isoformat(timespec='seconds')}\n")
        handle.flush()
        try:
            yield
        finally:
            handle.seek(0)
            handle.truncate()
