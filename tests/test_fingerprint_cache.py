"""Cached fingerprint keys (status, rerun --stale) against the full Hydra composition, before and after edits."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.config import fingerprint_cache, specs_now
from orchestrator.record import Record, write_record

from .conftest import ROOT, write

CELLS = ["act/h100/stock", "act/h100/recipe", "diffusion/h100/stock", "diffusion/h100/recipe",
         "act/h100/venv", "diffusion/a100/venv"]


@pytest.fixture
def setup(tmp_path: Path, standin_conf: Path) -> tuple[Path, Path, Path]:
    conf = tmp_path / "conf"
    shutil.copytree(standin_conf, conf)
    shutil.copy(ROOT / "conf" / "policy" / "act.yaml", write(conf / "policy" / "act.yaml", ""))
    write(conf / "patches" / "fix.patch", "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n")
    write(conf / "torch" / "recipe.yaml", json.dumps({"pip": ["torch==2.15.0"], "patches": ["patches/fix.patch"],
                                                      "fixes": ["pytorch/pytorch#202785"]}))
    venv = tmp_path / "venv"  # an installed interpreter we did not build: its distributions are in its key
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    write(conf / "torch" / "venv.yaml", json.dumps({"python": str(venv / "bin" / "python"), "fixes": []}))
    out = tmp_path / "out"
    return conf, out, venv


def full_keys(conf: Path) -> dict[str, str]:
    return {c: s.fingerprint["key"] for c, s in specs_now.current_specs(CELLS, [], conf).items()}


def test_cached_keys_equal_the_full_composition_and_follow_every_edit(setup, monkeypatch) -> None:
    conf, out, venv = setup
    first = full_keys(conf)
    for cell, key in first.items():  # records made by the current config: nothing is stale
        policy, gpu, torch = cell.split("/")
        write_record(out / "cells" / cell, Record(cell=cell, policy=policy, gpu=gpu, torch=torch, exporter="x",
                                                  status="passed", fingerprint={"key": key}))
    assert fingerprint_cache.current_keys(out, CELLS, [], conf) == first  # a cold cache composes them
    composed: list[list[str]] = []
    real = specs_now.current_specs

    def spy(cell_ids, overrides, config_dir):
        composed.append(sorted(cell_ids))
        return real(cell_ids, overrides, config_dir)

    monkeypatch.setattr(specs_now, "current_specs", spy)
    assert fingerprint_cache.current_keys(out, CELLS, ["launcher.parallel=3"], conf) == first
    assert composed == [], "nothing changed, yet cells were composed again"

    policy = conf / "policy" / "act.yaml"  # a policy edit: act's cells, and only they, change
    policy.write_text(policy.read_text().replace("timeout_min: 30", "timeout_min: 31"))
    keys = fingerprint_cache.current_keys(out, CELLS, [], conf)
    assert composed == [sorted(c for c in CELLS if c.startswith("act/"))]
    assert keys == full_keys(conf)
    assert {c for c in CELLS if keys[c] != first[c]} == {c for c in CELLS if c.startswith("act/")}

    composed.clear()  # a recipe edit (its patch's bytes): the recipe build's cells change
    (conf / "patches" / "fix.patch").write_text("--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+c\n")
    second = fingerprint_cache.current_keys(out, CELLS, [], conf)
    assert composed[0] == sorted(c for c in CELLS if c.endswith("/recipe"))
    assert {c for c in CELLS if second[c] != keys[c]} == {c for c in CELLS if c.endswith("/recipe")}

    composed.clear()  # a distribution installed into the interpreter of the venv build
    site = next(venv.glob("lib/python*/site-packages"))
    write(site / "newpkg-1.0.dist-info" / "METADATA", "Metadata-Version: 2.1\nName: newpkg\nVersion: 1.0\n")
    third = fingerprint_cache.current_keys(out, CELLS, [], conf)
    assert composed[0] == sorted(c for c in CELLS if c.endswith("/venv"))
    assert {c for c in CELLS if third[c] != second[c]} == {c for c in CELLS if c.endswith("/venv")}
    assert third == full_keys(conf)

    composed.clear()  # an override that reaches a config is an input of every cell
    over = fingerprint_cache.current_keys(out, CELLS, ["policies.diffusion.timeout_min=7"], conf)
    assert composed == [sorted(CELLS)]
    assert {c for c in CELLS if over[c] != third[c]} == {c for c in CELLS if c.startswith("diffusion/")}


def test_status_marks_the_edited_cells_stale(setup) -> None:
    conf, out, _ = setup
    for cell, key in full_keys(conf).items():
        policy, gpu, torch = cell.split("/")
        write_record(out / "cells" / cell, Record(cell=cell, policy=policy, gpu=gpu, torch=torch, exporter="x",
                                                  status="passed", fingerprint={"key": key}))

    def stale_cells() -> set[str]:
        done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "status", "--config-dir", str(conf),
                               f"out_dir={out}"], capture_output=True, text=True, cwd=ROOT, check=True)
        rows = [line.split() for line in done.stdout.splitlines() if line.strip()]
        return {row[0] for row in rows if row[-3:] == ["stale", "(config", "changed)"] and "/" in row[0]}

    # a record of a policy this config lacks (swept with another --config-dir): shown, nothing to compare
    write_record(out / "cells" / "elsewhere" / "h100" / "stock", Record(
        cell="elsewhere/h100/stock", policy="elsewhere", gpu="h100", torch="stock", exporter="x", status="passed",
        fingerprint={"key": "0" * 16}))
    assert stale_cells() == set()
    assert stale_cells() == set()  # from the cache
    policy = conf / "policy" / "act.yaml"
    policy.write_text(policy.read_text().replace("timeout_min: 30", "timeout_min: 45"))
    assert stale_cells() == {c for c in CELLS if c.startswith("act/")}


def test_a_sweep_leaves_the_keys_its_status_needs(setup, monkeypatch, tmp_path: Path) -> None:
    conf, _, _ = setup
    real = specs_now.current_specs
    specs = list(real(CELLS, [], conf).values())
    out = tmp_path / "swept"
    fingerprint_cache.remember(out, specs, ["matrix=tracking", "policy=act,diffusion", "launcher=slurm"], conf)

    def no_compose(*args):
        raise AssertionError(f"composed {args[0]}")

    monkeypatch.setattr(specs_now, "current_specs", no_compose)
    assert fingerprint_cache.current_keys(out, CELLS, [], conf) == {s.id: s.fingerprint["key"] for s in specs}
    monkeypatch.setattr(specs_now, "current_specs", real)  # another override set (wait, say) adds its own keys
    other = fingerprint_cache.current_keys(out, CELLS, ["gpus.h100.slurm.mem_gb=3"], conf)
    assert other != {s.id: s.fingerprint["key"] for s in specs}
    monkeypatch.setattr(specs_now, "current_specs", no_compose)  # ... and evicts none of the sweep's
    assert fingerprint_cache.current_keys(out, CELLS, [], conf) == {s.id: s.fingerprint["key"] for s in specs}


def test_a_distribution_installed_after_a_sweep_composed_is_never_a_stale_hit(setup, tmp_path: Path) -> None:
    """A sweep composes its keys, launches, then keeps the keys: an install in between must not leave the old key
    under the new site stamp, where every later status would take it for current."""
    conf, _, venv = setup
    specs = list(specs_now.current_specs(CELLS, [], conf).values())
    composed = {s.id: s.fingerprint["key"] for s in specs}
    site = next(venv.glob("lib/python*/site-packages"))
    write(site / "late-1.0.dist-info" / "METADATA", "Metadata-Version: 2.1\nName: late\nVersion: 1.0\n")
    out = tmp_path / "swept"
    fingerprint_cache.remember(out, specs, [], conf)
    keys = fingerprint_cache.current_keys(out, CELLS, [], conf)
    assert keys == full_keys(conf)
    assert {c for c in CELLS if keys[c] != composed[c]} == {c for c in CELLS if c.endswith("/venv")}
