"""The CLI as a Unix tool: a file given as out_dir is refused by every command that reads or writes out_dir,
output cut short by a closed pipe ends quietly, and output into a file is not wrapped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT, cli


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


def test_a_reader_that_goes_away_ends_the_output_quietly_as_cat_does(tmp_path: Path) -> None:
    """`export-matrix cells matrix=tracking | head -2`: no 'error: Broken pipe', and the status cat gets."""

    def closed_pipe(command: list[str]) -> tuple[int, str]:
        proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        proc.stdout.close()  # the reader is gone before the first line
        return proc.wait(timeout=120), proc.stderr.read()

    big = tmp_path / "big.txt"
    big.write_text("x\n" * 100_000)
    cat_status, _ = closed_pipe(["cat", str(big)])
    status, stderr = closed_pipe([sys.executable, "-m", "orchestrator.cli", "cells", "matrix=tracking"])
    assert (status, stderr) == (cat_status, "") and status == -signal.SIGPIPE


def test_output_into_a_file_is_not_wrapped(tmp_path: Path) -> None:
    """rich wraps at 80 columns where it sees no terminal: a line written into a file stays one line."""
    out_dir = tmp_path / ("long-" * 30)
    out_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    with open(tmp_path / "stderr.txt", "w") as into:
        done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "status", f"out_dir={out_dir}"], cwd=ROOT,
                              stderr=into, env=env, timeout=120)
    assert done.returncode == 0
    assert (tmp_path / "stderr.txt").read_text().splitlines() == [f"no records under {out_dir}/cells/"]
