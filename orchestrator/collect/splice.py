"""`--into FILE`: replace only the text between the export-matrix markers, leaving every other byte as it was."""

from __future__ import annotations

from pathlib import Path

from ..config import ConfigError

START = "<!-- export-matrix:start -->"
END = "<!-- export-matrix:end -->"


class SpliceError(ConfigError):
    """FILE cannot take the table (no markers, markers out of order); the message is one line."""


def splice(original: bytes, table: str, name: str = "FILE") -> bytes:
    """original with the bytes between START and END replaced by table (a line of its own after START).

    Works on bytes so nothing outside the markers is decoded or re-encoded; the table takes the file's line
    endings (CRLF if the file uses them).
    """
    start, end = START.encode(), END.encode()
    starts, ends = original.count(start), original.count(end)
    if starts == 0 or ends == 0:
        raise SpliceError(f"{name} has no {START} ... {END} markers to put the table between")
    if starts > 1 or ends > 1:
        raise SpliceError(f"{name} has {starts} start and {ends} end markers; keep exactly one pair")
    head = original.index(start) + len(start)
    tail = original.index(end)
    if tail < head:
        raise SpliceError(f"{name}: {END} comes before {START}")
    newline = b"\r\n" if b"\r\n" in original else b"\n"
    body = table.encode().replace(b"\n", newline)
    if not body.endswith(newline):
        body += newline
    return original[:head] + newline + body + original[tail:]


def splice_file(path: Path, table: str) -> tuple[bytes, bytes]:
    """(current bytes, spliced bytes) of path; raises SpliceError with one line if it cannot be done."""
    try:
        original = Path(path).read_bytes()
    except FileNotFoundError:
        raise SpliceError(f"--into {path}: no such file") from None
    except IsADirectoryError:
        raise SpliceError(f"--into {path}: is a directory") from None
    return original, splice(original, table, str(path))
