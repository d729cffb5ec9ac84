"""Which records are stale, and why: the fingerprint rule, and after a LeRobot bump the files the cell loaded.

A record is fresh where its fingerprint key is the one the config gives its cell now. Where it is not, and the
only change is the build's `lerobot:` (its code key, the key without that requirement, is the same), the record
lists the files its make_random and export loaded (loaded_files.txt) and the bumped recipe's environment is
built, the files decide: the record is stale exactly when one of them changed or vanished in that environment.
Anything else stale is stale as before ("config changed"). The rule, precisely: docs/bump.md.
"""

from __future__ import annotations

from pathlib import Path

from ..cell_id import CellId
from ..envs import FINGERPRINT, import_roots
from ..record import Record, loaded
from .fingerprint_cache import Current

CONFIG_CHANGED = "config changed"


class Judge:
    """Decides records against the current fingerprints; each environment is asked for its paths and each file
    hashed once, and records listing the same files (one digest) are compared once."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = Path(out_dir)
        self._envs: dict[str, loaded.Environment | None] = {}
        self._verdicts: dict[tuple[str, str], str | None] = {}

    def why_stale(self, record: Record, now: Current) -> str | None:
        """Why the record is stale (one short line), or None where it is not."""
        printed = record.fingerprint or {}
        if printed.get("key") == now.key:
            return None
        if now.code_key is None or printed.get("code_key") != now.code_key or now.python is None:
            return CONFIG_CHANGED
        if not record.loaded_files:
            return "lerobot changed (the record lists no loaded files)"
        env_dir = Path(now.python).parent.parent
        if not (env_dir / FINGERPRINT).is_file():
            return f"lerobot changed (its environment is not built: export-matrix env build {record.torch})"
        seen = (record.loaded_files, now.python)
        if seen not in self._verdicts:
            self._verdicts[seen] = self._compare(record, now.python)
        return self._verdicts[seen]

    def _compare(self, record: Record, python: str) -> str | None:
        path = CellId.parse(record.cell).dir(self.out_dir) / loaded.LOADED_NAME
        files = loaded.read_list(path, record.loaded_files)
        if files is None:
            return f"lerobot changed ({loaded.LOADED_NAME} missing or not the record's)"
        env = self._environment(python)
        if env is None:
            return f"lerobot changed ({python} cannot say where it imports from)"
        found = sorted(env.differences(files), key=lambda d: (not d[0].startswith("lerobot/"), d[0]))
        if not found:
            return None
        more = f" (+{len(found) - 1} more)" if len(found) > 1 else ""
        return f"{found[0][0]} {found[0][1]}{more}"

    def _environment(self, python: str) -> loaded.Environment | None:
        if python not in self._envs:
            roots = import_roots(python)
            self._envs[python] = None if roots is None else loaded.Environment(roots)
        return self._envs[python]


def stale_reasons(out_dir: Path, records: dict[str, Record], current: dict[str, Current]) -> dict[str, str]:
    """{cell id: why} for every stale record among those the config has a fingerprint for."""
    judge = Judge(out_dir)
    found = {}
    for cell_id, record in records.items():
        now = current.get(cell_id)
        why = judge.why_stale(record, now) if now is not None else None
        if why is not None:
            found[cell_id] = why
    return found

