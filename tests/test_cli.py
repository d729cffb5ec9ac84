"""The CLI as a Unix tool: a file given as out_dir is refused by every command that reads or writes out_dir,
output cut short by a closed pipe ends quietly, and output into a file is not wrapped."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import cli


@pytest.mark.parametrize("command", [["status"], ["rerun", "--failed"], ["rerun", "--stale"],
                                     ["rerun", "act/cpu/local"], ["collect"], ["collect", "--check"], ["wait"],
                                     ["show", "act/cpu/local"], ["sweep"]])
def test_a_file_as_out_dir_is_refused_by_every_command_that_uses_it(command: list[str], tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("not a folder\n")
    done = cli(*command, f"out_dir={afile}", check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [f"export-matrix: error: out_dir '{afile}' is a file, not a directory"]
    assert afile.read_text() == "not a folder\n"
