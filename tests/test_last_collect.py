"""A collect that finds no record changed and every output as the last collect wrote it renders nothing, and
leaves the bytes a collect from scratch writes; anything else (an output edited, a setting, a record) renders."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from orchestrator import collect as collect_module
from orchestrator.collect.index import INDEX_DIR
from orchestrator.collect.splice import END, START

from .test_collect_rules import SEED_MESSAGES, collect, passed, put

POLICIES = "matrix.policies=[act,pi0,xvla]"
FILES = ("cells.csv", "matrix.csv", "repros.csv", "matrix.md", "report.html", "changes.md")


@pytest.fixture
def rendered(monkeypatch) -> list[int]:
    """One entry per collect that rendered its outputs."""
    calls: list[int] = []
    original = collect_module.assemble.rendered

    def spy(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(collect_module.assemble, "rendered", spy)
    return calls


def contents(out: Path) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in FILES}


def from_scratch(out: Path, tmp_path: Path, *args: str) -> dict[str, bytes]:
    """What a collect of the same records writes without an index, after a collect of them already ran."""
    scratch = tmp_path / "scratch"
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(out, scratch)
    shutil.rmtree(scratch / INDEX_DIR)
    assert collect(scratch, *args, matrix=POLICIES) == 0
    return contents(scratch)


def test_nothing_changed_renders_nothing_and_writes_the_bytes_of_a_full_collect(
        tmp_path: Path, rendered: list[int], capsys) -> None:
    out = tmp_path / "out"
    passed(out, "act/h100/stock")
    put(out, "pi0/h100/stock", "failed", failed_step="save", error=SEED_MESSAGES["7"])
    put(out, "xvla/a100/pr202785", "failed", failed_step="compile-model", error=SEED_MESSAGES["3"],
        fixes=["pytorch/pytorch#202785"])
    assert collect(out, matrix=POLICIES) == 0
    passed(out, "act/a100/stock", diff=0.07)
    assert collect(out, matrix=POLICIES) == 0
    assert "act on A100: — → ✅" in (out / "changes.md").read_text()
    summary = capsys.readouterr().err.splitlines()[-1]
    rendered.clear()

    assert collect(out, matrix=POLICIES) == 0
    said = capsys.readouterr()
    assert rendered == [], "a collect with nothing changed rendered its outputs"
    assert said.out == "Changes since the previous collect:\n\nNothing changed.\n"
    assert said.err.splitlines() == [summary]
    assert "collected 4 records into 6 policy × GPU cells (2 ✅, 2 ❌, 2 —)" in summary
    assert contents(out) == from_scratch(out, tmp_path)
    rendered.clear()

    assert collect(out, "--check", matrix=POLICIES) == 0
    issue = tmp_path / "issue.md"
    issue.write_text(f"Tracking\n{START}\nold\n{END}\n")
    assert collect(out, "--check", f"--into={issue}", matrix=POLICIES) == 1
    assert collect(out, f"--into={issue}", matrix=POLICIES) == 0
    assert (out / "matrix.md").read_text().strip() in issue.read_text()
    assert rendered == [], "--check and --into rendered though nothing changed"


@pytest.mark.parametrize("change", ["output edited", "output removed", "setting", "record"])
def test_anything_changed_renders_again(tmp_path: Path, rendered: list[int], change: str) -> None:
    out = tmp_path / "out"
    passed(out, "act/h100/stock")
    put(out, "pi0/h100/stock", "failed", failed_step="save", error=SEED_MESSAGES["7"])
    assert collect(out, matrix=POLICIES) == 0
    args: list[str] = []
    if change == "output edited":
        (out / "matrix.md").write_text("edited by hand\n")
    elif change == "output removed":
        (out / "report.html").unlink()
    elif change == "setting":
        args = ["collect.at_limit=0.1"]  # the act cell (margin 0.29) is now at its limit
    else:
        put(out, "xvla/h100/stock", "failed", failed_step="compile-model", error=SEED_MESSAGES["3"])
    rendered.clear()
    assert collect(out, *args, matrix=POLICIES) == 0
    assert rendered == [1]
    scratch = from_scratch(out, tmp_path, *args)
    for name in FILES[:-1]:  # changes.md: the scratch collect finds matrix.csv already up to date
        assert (out / name).read_bytes() == scratch[name], name
