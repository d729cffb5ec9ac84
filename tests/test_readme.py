"""README.md says what is true here: its override examples work through the CLI as written."""

from __future__ import annotations

import re

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
