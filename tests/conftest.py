"""Shared fixtures: a config dir whose torch builds run the stand-in lerobot-export, and CLI helpers.

make_random, Hydra and submitit run for real; only the fork's lerobot-export CLI is a stand-in (tests/standin).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.envs import uv

ROOT = Path(__file__).resolve().parent.parent
STANDIN_BIN = Path(__file__).resolve().parent / "standin"
ACT_RANDOM = "{random:{type:act,overrides:{pretrained_backbone_weights:null}}}"
BUILD_FIXES = {"stock": [], "pr202785": ["pytorch/pytorch#202785"], "pr202925": ["pytorch/pytorch#202925"]}


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture(scope="session", autouse=True)
def user_cache(tmp_path_factory: pytest.TempPathFactory):
    """The commands' user cache (config_cache.py) in a temp dir, for every process the tests start.

    uv keeps its own cache, where setup's install left torch's wheels unpacked: a torch build's env links them
    from there instead of downloading and storing 4.5 GB again.
    """
    uv_cache = subprocess.run([uv(), "cache", "dir"], capture_output=True, text=True, check=True).stdout.strip()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("UV_CACHE_DIR", uv_cache)
        patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("user_cache")))
        yield


@pytest.fixture(scope="session")
def standin_conf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Torch builds that are this interpreter, with the stand-in lerobot-export first on PATH."""
    conf = tmp_path_factory.mktemp("conf")
    for name, fixes in BUILD_FIXES.items():
        write(conf / "torch" / f"{name}.yaml", json.dumps({
            "python": sys.executable, "fixes": fixes,
            "env": {"PATH": f"{STANDIN_BIN}:{os.environ['PATH']}", "STANDIN_FIXES": " ".join(fixes)},
        }))
    return conf


@pytest.fixture(scope="session")
def ckpt_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One make_random cache for the session: act's random checkpoint is built once, for real."""
    return tmp_path_factory.mktemp("random_ckpts")


def act_checkpoints(*policies: str) -> list[str]:
    """Overrides that give these policies act's random checkpoint (their own types need hub downloads)."""
    return [o for p in policies for o in (f"~policies.{p}.checkpoint", f"+policies.{p}.checkpoint={ACT_RANDOM}")]


def cli(*args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if check and done.returncode != 0:
        raise AssertionError(f"export-matrix {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return done


def record(out: Path, cell: str) -> dict:
    return json.loads((out / "cells" / cell / "record.json").read_text())


# The unit tier (`pytest -m fast`): modules that run no sweep, build no environment and start no Slurm.
FAST_MODULES = {"test_units", "test_logparse", "test_config", "test_schema", "test_config_cache",
                "test_fingerprint_cache", "test_collect_rules", "test_slurm_limits", "test_aoti_runner", "test_cli",
                "test_readme"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.module is not None and item.module.__name__.rsplit(".", 1)[-1] in FAST_MODULES:
            item.add_marker(pytest.mark.fast)
