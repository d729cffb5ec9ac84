"""`status` and `wait` take out_dir, and `collect` its settings, from a cache keyed by the config files' bytes and
the overrides: composed again whenever either changes, never from interpolations, and without importing Hydra
when nothing changed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.config import PACKAGE_CONF, ConfigError
from orchestrator.config.config_cache import KEPT, cache_path, composed_out_dir, kept
from orchestrator.config.spec import cell_dir
from orchestrator.record import Record, write_record

ROOT = Path(__file__).resolve().parent.parent


def config_with_out_dir(conf: Path, out_dir: str) -> None:
    text = (PACKAGE_CONF / "config.yaml").read_text().replace("out_dir: matrix_out", f"out_dir: {out_dir}")
    assert f"out_dir: {out_dir}" in text
    conf.mkdir(exist_ok=True)
    (conf / "config.yaml").write_text(text)


def test_out_dir_follows_every_change_of_the_config_and_the_overrides(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    conf = tmp_path / "conf"
    config_with_out_dir(conf, "first")
    assert composed_out_dir([], conf) == Path("first")
    assert composed_out_dir([], conf) == Path("first")  # from the cache
    assert list(json.loads(cache_path().read_text()).values()) == ["first"]
    config_with_out_dir(conf, "second")  # an edit of the file: composed again
    assert composed_out_dir([], conf) == Path("second")
    assert composed_out_dir(["out_dir=third"], conf) == Path("third")
    assert composed_out_dir([], None) == Path("matrix_out")  # the package's config
    assert composed_out_dir(["out_dir=${oc.env:HOME}/m"], conf) == Path(os.environ["HOME"]) / "m"
    monkeypatch.setenv("HOME", str(tmp_path))
    assert composed_out_dir(["out_dir=${oc.env:HOME}/m"], conf) == tmp_path / "m"  # interpolations: never cached
    assert len(json.loads(cache_path().read_text())) == 4
    for _ in range(2):  # a bad override fails every time: only what composed is kept
        with pytest.raises(ConfigError, match="nope"):
            composed_out_dir(["launcher=nope"], conf)


def test_a_full_cache_keeps_the_newest_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With KEPT values remembered, a new one pushes out the oldest, never itself: older keys that sort after the
    new one (any digest sorts before "ffff...") must not make it forgotten, or it is composed on every call."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    old = {f"{'f' * 60}{i:04d}": f"old{i}" for i in range(KEPT)}
    cache_path("test").parent.mkdir(parents=True)
    cache_path("test").write_text(json.dumps(old))
    composed: list[int] = []

    def compose() -> str:
        composed.append(1)
        return "new"

    assert [kept("test", [f"x={n}"], None, [], [], compose) for n in (1, 1, 2, 1, 2)] == ["new"] * 5
    assert composed == [1, 1]
    remembered = json.loads(cache_path("test").read_text())
    assert len(remembered) == KEPT and "old0" not in remembered.values() and "old1" not in remembered.values()
    assert list(remembered.values())[:-2] == [f"old{i}" for i in range(2, KEPT)]


def test_a_known_config_is_read_without_importing_hydra(tmp_path: Path) -> None:
    script = ("import sys; from orchestrator.config.config_cache import composed_out_dir; "
              "print(composed_out_dir(['out_dir=/scratch/m'], None), 'hydra' in sys.modules)")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    runs = [subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                           check=True).stdout.split() for _ in range(2)]
    assert runs == [["/scratch/m", "True"], ["/scratch/m", "False"]]


def test_collect_takes_its_settings_from_the_cache_and_follows_config_edits(tmp_path: Path) -> None:
    """A GPU label and a build's fixes edited in --config-dir show in the next collect's table; a collect of an
    unchanged config composes nothing (no Hydra imported)."""
    out, conf = tmp_path / "out", tmp_path / "conf"
    cell = "act/h100/pr202785"
    write_record(cell_dir(out, cell), Record(cell=cell, policy="act", gpu="h100", torch="pr202785",
                                             exporter="lerobot_cuda", status="passed", max_diff=0.01, tolerance=0.075))
    (conf / "gpu").mkdir(parents=True)
    (conf / "torch").mkdir()
    gpu_text = (PACKAGE_CONF / "gpu" / "h100.yaml").read_text()
    build_text = (PACKAGE_CONF / "torch" / "pr202785.yaml").read_text()
    assert "label: H100 (sm_90)" in gpu_text and "fixes:" in build_text
    script = ("import sys; from orchestrator.cli import main; "
              f"code = main(['collect', 'out_dir={out}', '--config-dir', '{conf}']); "
              "print('hydra' in sys.modules, file=sys.stderr); sys.exit(code)")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}

    def collect() -> tuple[str, bool]:
        done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                              check=True)
        return (out / "matrix.md").read_text(), done.stderr.strip().endswith("True")

    (conf / "gpu" / "h100.yaml").write_text(gpu_text.replace("H100 (sm_90)", "First H100"))
    (conf / "torch" / "pr202785.yaml").write_text(build_text)
    table, composed = collect()
    assert "| policy | First H100 |" in table and "| act | 🟡 #202785 · 0.01 / 0.075 |" in table and composed
    table, composed = collect()
    assert "| policy | First H100 |" in table and not composed, "an unchanged config was composed again"
    (conf / "gpu" / "h100.yaml").write_text(gpu_text.replace("H100 (sm_90)", "Second H100"))
    (conf / "torch" / "pr202785.yaml").write_text(build_text.replace("fixes: [pytorch/pytorch#202785]", "fixes: []"))
    table, composed = collect()
    assert "| policy | Second H100 |" in table and "| act | ✅ 0.01 / 0.075 |" in table and composed
