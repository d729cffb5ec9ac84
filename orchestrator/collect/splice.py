"""`--into FILE`: replace only the text between the export-matrix markers, leaving every other byte as it was."""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError

START = "<!-- export-matrix:start -->"
END = "<!-- export-matrix:end -->"


def splice_file(path: Path, table: str) -> tuple[bytes | None, bytes]:
    """(current bytes, None where path does not exist yet; the bytes with table between START and END) of path; a
    one-line ConfigError if it cannot.

    Bytes, so nothing outside the markers is decoded or re-encoded; the table takes the file's line endings.
    """
    try:
        original = Path(path).read_bytes()
    except FileNotFoundError:
        if not Path(path).parent.is_dir():
            raise ConfigError(f"--into {path}: no folder {Path(path).parent} to create it in") from None
        return None, f"{START}\n{table.rstrip(chr(10))}\n{END}\n".encode()  # a new file: the markers and the table
    except IsADirectoryError:
        raise ConfigError(f"--into {path}: is a directory") from None
    start, end = START.encode(), END.encode()
    starts, ends = original.count(start), original.count(end)
    if starts == 0 or ends == 0:
        raise ConfigError(f"{path} has no {START} ... {END} markers to put the table between: put these two lines, "
                          "each alone on its line, where the table goes")
    if starts > 1 or ends > 1:
        raise ConfigError(f"{path} has {starts} start and {ends} end markers; keep exactly one pair")
    head = original.index(start) + len(start)
    tail = original.index(end)
    if tail < head:
        raise ConfigError(f"{path}: {END} comes before {START}")
    newline = b"\r\n" if b"\r\n" in original else b"\n"
    body = table.encode().replace(b"\n", newline)
    if not body.endswith(newline):
        body += newline
    return original, original[:head] + newline + body + original[tail:]
