"""collect marks a record made from other configs than the current config gives its cell as stale: in matrix.md,
report.html and cells.csv, never among the new failures, offered to `export-matrix rerun --stale`. Records are
written with the real Record schema and fingerprints of the package's own config."""

from __future__ import annotations

import copy
import csv
import io
import json
import re
import shlex
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.config import specs_now
from orchestrator.config.fingerprint import env_identity, fingerprint
from orchestrator.config.fingerprint_cache import CACHE_NAME
from orchestrator.config.spec import cell_dir
from orchestrator.record import Record, write_record

from ..conftest import cli, write

UNKNOWN = "ValueError: vision_config is required"
ELSEWHERE = {"python": "/opt/torch/.venv/bin/python3", "python_version": "3.12.3", "freeze": "3e2310fa50793a2d"}


def fingerprint_now(cell: str, change=None) -> dict:
    """The fingerprint a sweep would give the cell under the current config (`change` edits its configs first),
    from a machine whose interpreter differs from this one's: collect compares configs, not installed packages."""
    spec = specs_now.current_specs([cell], [], None, fingerprinted=False)[cell]
    configs = copy.deepcopy(spec.configs)
    if change:
        change(configs)
    return fingerprint(configs, env_identity(spec.python, spec.recipe) if spec.recipe else ELSEWHERE)


def put(out: Path, cell: str, status: str, fingerprint: dict | None = None, **fields) -> None:
    policy, gpu, torch = cell.split("/")
    write_record(cell_dir(out, cell), Record(cell=cell, policy=policy, gpu=gpu, torch=torch, exporter="executorch_cpu",
                                             status=status, fingerprint=fingerprint or {}, **fields))


def old_xvla(configs: dict) -> None:
    """xvla's config before the offline Florence-2 one: make_random without overrides."""
    configs["policy"]["checkpoint"]["random"]["overrides"] = {}


def collect(out: Path, *args: str) -> int:
    return main(["collect", f"out_dir={out}", "matrix=smoke", *args])


def test_a_record_of_other_configs_is_stale_and_never_a_new_failure(tmp_path: Path) -> None:
    put(tmp_path, "act/cpu/local", "passed", fingerprint_now("act/cpu/local"), max_diff=1e-6, tolerance=1e-3)
    before, fresh_failure = fingerprint_now("xvla/cpu/local", old_xvla), fingerprint_now("tdmpc/cpu/local")
    del before["config_key"], fresh_failure["config_key"]  # records from before the config key: from their configs
    put(tmp_path, "xvla/cpu/local", "failed", before, failed_step="make_random", error=UNKNOWN)
    put(tmp_path, "tdmpc/cpu/local", "failed", fresh_failure, failed_step="trace", error="KeyError: 'unheard of'")
    assert collect(tmp_path) == 0
    text = (tmp_path / "matrix.md").read_text()
    lines = text.splitlines()
    assert "| xvla | ❌ (stale) |" in lines
    assert "| act | ✅ 1e-06 / 0.001 |" in lines  # made on another machine from the same config: current
    assert "| tdmpc | ❌ new |" in lines
    new = lines[lines.index("**New failures** (no entry of the failure catalog matches them):") + 2:]
    assert new[0] == "- KeyError: 'unheard of' (tdmpc/cpu/local)" and UNKNOWN not in text
    assert any(line.startswith("(stale): the record was made from other configs") for line in lines)
    stale = lines.index("**Stale** (made from other configs than the current config gives these cells; shown as "
                        "they were, never new failures):")
    assert lines[stale + 2:stale + 4] == ["- xvla/cpu/local: failed", ""]
    rerun = re.search(r"Rerun them: `([^`]*)`", text).group(1)
    assert shlex.split(rerun) == ["export-matrix", "rerun", "--stale", f"out_dir={tmp_path}", "matrix=smoke"]
    cells = {c["id"]: c for c in csv.DictReader(io.StringIO((tmp_path / "cells.csv").read_text()))}
    assert (cells["xvla/cpu/local"]["stale"], cells["act/cpu/local"]["stale"]) == ("True", "False")
    assert cells["xvla/cpu/local"]["failures"] == "" and cells["tdmpc/cpu/local"]["failures"] == "new"
    html = (tmp_path / "report.html").read_text()
    assert "❌</span> fail</span> (stale)" in html and '<td class="fail">failed (stale)</td>' in html
    assert "<h2>Stale</h2>" in html
    assert "vision_config is required</code>" not in html  # not among the new failures there either


def test_what_cannot_be_compared_is_shown_as_it_is(tmp_path: Path) -> None:
    """A record without a fingerprint, and one of a policy the config no longer has, are not marked."""
    retired = fingerprint_now("act/cpu/local", lambda c: c["policy"].update(timeout_min=1))
    put(tmp_path, "retired/cpu/local", "failed", retired, error=UNKNOWN)
    put(tmp_path, "act/cpu/local", "failed", error="KeyError: 'by hand'")
    assert collect(tmp_path) == 0
    text = (tmp_path / "matrix.md").read_text()
    assert "(stale)" not in text and "**Stale**" not in text
    assert f"- {UNKNOWN} (retired/cpu/local)" in text and "- KeyError: 'by hand' (act/cpu/local)" in text


def test_the_current_keys_are_kept_by_their_config_inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first collect composes the cells' configs; the next finds their keys in DIR/.fingerprints.json and
    composes nothing; `--check` writes no cache; a changed config composes again and marks."""
    put(tmp_path, "act/cpu/local", "passed", fingerprint_now("act/cpu/local"), max_diff=1e-6, tolerance=1e-3)
    assert collect(tmp_path, "--check") == 1 and not (tmp_path / CACHE_NAME).exists()
    assert collect(tmp_path) == 0
    assert list(json.loads((tmp_path / CACHE_NAME).read_text())["config_keys"]) == ["act/cpu/local"]

    def composes(*args, **kwargs):
        raise AssertionError("composed again")

    with monkeypatch.context() as patch:
        patch.setattr(specs_now, "current_specs", composes)
        assert collect(tmp_path, "--check") == 0
    assert collect(tmp_path, "policies.act.timeout_min=5") == 0
    assert "| act | ✅ (stale) 1e-06 / 0.001 |" in (tmp_path / "matrix.md").read_text().splitlines()


def test_a_collect_after_its_sweep_composes_nothing_and_marks_nothing(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The sweep keeps its cells' config keys beside their keys (DIR/.fingerprints.json): the collect with the
    same config finds them there; one with another config composes and marks."""
    conf, out = tmp_path / "conf", tmp_path / "out"
    passes = "print('Exported policy test case: largest difference 0 (tolerance 1)')"
    write(conf / "exporter/ok.yaml", json.dumps({"command": ["{python}", "-c", passes]}))
    write(conf / "policy/probe.yaml", json.dumps({"checkpoint": {"path": "none"}, "export_args": []}))
    args = ["--config-dir", str(conf), "matrix.policies=[probe]", "exporter=ok", f"out_dir={out}"]
    cli("sweep", *args, "launcher.poll_s=0.2")

    def composes(*args, **kwargs):
        raise AssertionError("composed again")

    with monkeypatch.context() as patch:
        patch.setattr(specs_now, "current_specs", composes)
        assert main(["collect", *args]) == 0
    assert "| probe | ✅ 0 / 1 |" in (out / "matrix.md").read_text().splitlines()
    assert main(["collect", *args, "+policies.probe.timeout_min=3"]) == 0
    assert "| probe | ✅ (stale) 0 / 1 |" in (out / "matrix.md").read_text().splitlines()
