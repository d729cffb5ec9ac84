"""The source files a cell's make_random and export loaded from its build's environment, with their sha256.

A job's steps run with scripts/loaded/sitecustomize.py first on PYTHONPATH (step_env): each process of a step
lists its loaded modules' files in a folder at exit, and the job turns those lists into one file next to the
record, `loaded_files.txt` (`<sha256>  <path relative to its sys.path root>` per line, sorted), whose digest the
record keeps. After a LeRobot bump, `status` resolves each path in the new environment and compares (docs/bump.md).

A file counts where it was imported, except in one place: the files of a policy's package,
`lerobot/policies/<name>/`, count only where a function or method defined in one of them ran (the sitecustomize's
third column). LeRobot's policies/__init__.py imports every policy's config, whose package imports its modeling,
so every process imports every policy; only the code that ran tells act's cell from diffusion's. Where the
interpreter cannot tell (Python before 3.12, or sys.monitoring's tool ids taken), every imported file counts.

Python sources are hashed; an extension module (`triton/_C/libtriton.so`: 415 MB) takes the sha256 its
distribution's RECORD lists, where it lists it, since hashing it in every job would cost seconds.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

from ..atomic import write_bytes_atomic

LOADED_NAME = "loaded_files.txt"
SITECUSTOMIZE_DIR = Path(__file__).resolve().parent.parent / "scripts" / "loaded"
FOLDER_VARIABLE = "EXPORT_MATRIX_LOADED_DIR"
CHANGED, VANISHED = "changed", "vanished"


def step_env(env: dict[str, str], folder: Path) -> dict[str, str]:
    """The step's environment with the sitecustomize first on PYTHONPATH, writing its lists into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = os.pathsep.join(p for p in (str(SITECUSTOMIZE_DIR), env.get("PYTHONPATH", "")) if p)
    return {**env, "PYTHONPATH": path, FOLDER_VARIABLE: str(folder)}


def complete(folder: Path, pid: int | None, timed_out: bool, returncode: int) -> bool:
    """A step's lists are whole: it exited on its own (no time limit, no signal) and its own process wrote one
    (a wrapper script or an os._exit writes none)."""
    return not timed_out and returncode >= 0 and pid is not None and (folder / f"{pid}.txt").is_file()


def gathered(folder: Path) -> dict[str, str]:
    """The files that count in every process's list in `folder`, hashed: {relative path: sha256}. Empty where no
    process wrote one."""
    located: dict[str, str] = {}
    ran: set[str] = set()
    for listed in sorted(folder.glob("*.txt")) if folder.is_dir() else []:
        for line in listed.read_text(errors="replace").splitlines():
            root, _, rest = line.partition("\t")
            rel, _, state = rest.partition("\t")
            if rel:
                located.setdefault(rel, os.path.join(root, rel))
                if state != "0":  # "1", or "?" (could not tell) and a list without the column
                    ran.add(rel)
    used = {policy_package(rel) for rel in ran} - {None}
    records = RecordHashes()
    files = {}
    for rel, path in located.items():
        if policy_package(rel) in used | {None}:
            sha = file_sha(path, rel, records)
            if sha is not None:
                files[rel] = sha
    return files


def policy_package(rel: str) -> str | None:
    """`lerobot/policies/act` for a file of that policy's package (its files count where its code ran); None for
    any other file (it counts where it was imported)."""
    parts = rel.split("/")
    return "/".join(parts[:3]) if len(parts) > 3 and parts[:2] == ["lerobot", "policies"] else None


def file_sha(path: str, rel: str, records: RecordHashes) -> str | None:
    """The file's sha256 (a source is read; an extension module takes its RECORD's where listed); None if gone."""
    if not rel.endswith(".py"):
        found = records.sha(path[: -len(rel) - 1], rel)
        if found is not None and os.path.isfile(path):
            return found
    try:
        with open(path, "rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    except OSError:
        return None


class RecordHashes:
    """The sha256 every installed distribution's RECORD lists, per site folder, read once."""

    def __init__(self) -> None:
        self._roots: dict[str, dict[str, str]] = {}

    def sha(self, root: str, rel: str) -> str | None:
        if root not in self._roots:
            self._roots[root] = _read_records(root)
        return self._roots[root].get(rel)


def _read_records(root: str) -> dict[str, str]:
    found: dict[str, str] = {}
    try:
        infos = [e.path for e in os.scandir(root) if e.name.endswith(".dist-info")]
    except OSError:
        return found
    for info in infos:
        try:
            lines = Path(info, "RECORD").read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            parts = line.rsplit(",", 2)
            if len(parts) == 3 and parts[1].startswith("sha256="):
                digest = parts[1][len("sha256="):]
                found[parts[0]] = base64.urlsafe_b64decode(digest + "=" * (-len(digest) % 4)).hex()
    return found


def merged(*lists: dict[str, str]) -> dict[str, str]:
    """One list from several (a checkpoint's make_random, the export): a path listed twice keeps the first sha."""
    out: dict[str, str] = {}
    for files in lists:
        for rel, sha in files.items():
            out.setdefault(rel, sha)
    return out


def write_list(path: Path, files: dict[str, str]) -> str:
    """Write the list atomically; returns its digest (what the record keeps)."""
    text = "".join(f"{files[rel]}  {rel}\n" for rel in sorted(files))
    write_bytes_atomic(path, text)
    return digest(text)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def read_list(path: Path | str, expected: str | None = None) -> dict[str, str] | None:
    """The list at `path`; None where it is missing, unreadable, or not the one the record's digest names."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError):
        return None
    if expected is not None and digest(text) != expected:
        return None
    files = {}
    for line in text.splitlines():
        sha, _, rel = line.partition("  ")
        if rel:
            files[rel] = sha
    return files


class Environment:
    """A build's environment as its interpreter imports: its sys.path folders, in order. Each file is looked up
    and hashed once, however many records name it."""

    def __init__(self, roots: Iterable[str]) -> None:
        self.roots = [r for r in roots if os.path.isdir(r)]
        self._shas: dict[str, str | None] = {}
        self._records = RecordHashes()

    def sha(self, rel: str) -> str | None:
        if rel not in self._shas:
            path = next((p for r in self.roots if os.path.isfile(p := os.path.join(r, rel))), None)
            self._shas[rel] = None if path is None else file_sha(path, rel, self._records)
        return self._shas[rel]

    def differences(self, files: dict[str, str]) -> list[tuple[str, str]]:
        """(path, `changed` or `vanished`) for each listed file this environment does not hold as listed."""
        out = []
        for rel in sorted(files):
            now = self.sha(rel)
            if now != files[rel]:
                out.append((rel, VANISHED if now is None else CHANGED))
        return out
