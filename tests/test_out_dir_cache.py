"""`status` and `wait` take out_dir from a cache keyed by the config files' bytes and the overrides: composed
again whenever either changes, never from interpolations, and without importing Hydra when nothing changed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.config import PACKAGE_CONF, ConfigError
from orchestrator.out_dir_cache import cache_path, composed_out_dir

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


def test_a_known_config_is_read_without_importing_hydra(tmp_path: Path) -> None:
    script = ("import sys; from orchestrator.out_dir_cache import composed_out_dir; "
              "print(composed_out_dir(['out_dir=/scratch/m'], None), 'hydra' in sys.modules)")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    runs = [subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                           check=True).stdout.split() for _ in range(2)]
    assert runs == [["/scratch/m", "True"], ["/scratch/m", "False"]]
