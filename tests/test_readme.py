"""README.md says what is true here: its override examples work through the CLI as written, where the everyday
commands' `export-matrix` lives, how long the suite takes, and it stays short."""

from __future__ import annotations

import re
import subprocess

import pytest

from .conftest import ROOT, cli

README = (ROOT / "README.md").read_text()


def readme_overrides() -> list[str]:
    """The Hydra overrides README's "Every command takes ..." paragraph gives as examples."""
    found = re.search(r"Hydra overrides \((.*?)\)\. A bad name", README, re.S)
    assert found, "README.md no longer has its paragraph of override examples"
    return re.findall(r"`([^`]+=[^`]*)`", found.group(1))


@pytest.mark.parametrize("override", readme_overrides())
def test_readmes_override_examples_work_under_the_default_matrix(override: str) -> None:
    assert "policies.flux3.timeout_min=240" in readme_overrides()
    done = cli("cells", override, check=False)
    assert done.returncode == 0 and done.stdout.splitlines(), done.stderr


def test_readme_says_where_export_matrix_lives_and_how_long_the_suite_takes() -> None:
    assert len(README.encode()) <= 15_000
    assert "about 22 minutes on 2 cores" in README
    assert "`export-matrix` is installed in `.venv/bin/`" in README and "source .venv/bin/activate" in README
    done = subprocess.run(["bash", "-c", "source .venv/bin/activate && export-matrix cells matrix=smoke"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.splitlines() == cli("cells", "matrix=smoke").stdout.splitlines()
