"""What the last full collect wrote, so that the next one can tell it has nothing to do.

DIR/.collect-index/last.json holds the digest of its settings (slice_store.digest), each output's identity
(inode, mtime in ns, size) and its summary line's counts. A collect whose index found no record changed, under the
same digest, with every output still the file that collect wrote, would render the same bytes again (over a
second at 100,000 records): it writes only changes.md ("Nothing changed.") and stops. A missing, unreadable or
stale file means rendering as usual.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import orjson

from ..atomic import write_bytes_atomic
from .index import identities

LAST_FILE = "last.json"


@dataclass
class Last:
    records: int  # the cells collected, standalone repros included
    counts: dict[str, int]  # policy x GPU cells by symbol


def save(root: Path, key: str, out_dir: Path, names: tuple[str, ...], last: Last) -> None:
    """Remember the outputs just written (a file that cannot be written costs the next collect time only)."""
    found = identities(out_dir, names)
    try:
        if found is None:
            (root / LAST_FILE).unlink(missing_ok=True)
            return
        write_bytes_atomic(root / LAST_FILE, orjson.dumps({"key": key, "outputs": dict(zip(names, found, strict=True)),
                                                           "records": last.records, "counts": last.counts}))
    except OSError:
        pass


def current(root: Path, key: str, out_dir: Path, names: tuple[str, ...]) -> Last | None:
    """The last collect's summary where its outputs are still the files it wrote under this digest, else None."""
    try:
        data = orjson.loads((root / LAST_FILE).read_bytes())
        if data["key"] != key or data["outputs"] != dict(zip(names, identities(out_dir, names) or [],
                                                             strict=False)):
            return None
        return Last(records=int(data["records"]), counts={str(k): int(v) for k, v in data["counts"].items()})
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
