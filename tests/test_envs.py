"""Torch builds from recipes: a real uv environment with a real patch to torch, fingerprints, stale reruns."""

from __future__ import annotations

import difflib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator.config import PACKAGE_CONF
from orchestrator.envs import EnvBuildError, apply_patch, build_env, recipe_of

from .conftest import STANDIN_BIN, cli, record, write

TORCH_FILE = "torch/_export/serde/serialize.py"  # the file pytorch#202785 touches
MARK = 'EXPORT_MATRIX_TEST_PATCH = "pytorch-202785-test"\n'


def torch_patch(tmp_path: Path, anchor_shift: int = 0) -> Path:
    """A git-style diff adding one line to serialize.py of the torch installed here (the same version)."""
    import torch

    source = (Path(torch.__file__).parent.parent / TORCH_FILE).read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(source) if line.startswith("import ")) + 1
    changed = source[:at] + [MARK] + source[at:]
    if anchor_shift:  # a patch written against other text: its context does not match
        source = source[:at] + ["# not in torch\n"] + source[at:]
        changed = source[:at] + [MARK] + source[at:]
    diff = difflib.unified_diff(source, changed, f"a/{TORCH_FILE}", f"b/{TORCH_FILE}")
    return write(tmp_path / ("bad.diff" if anchor_shift else "pytorch-202785-test.diff"), "".join(diff))


@pytest.fixture(scope="module")
def torch_env(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    import torch

    root = tmp_path_factory.mktemp("envs")
    patch = torch_patch(root)
    build = {"python_version": "3.12", "pip": [f"torch=={torch.__version__.split('+')[0]}"],
             "patches": [patch.name], "fixes": ["pytorch/pytorch#202785"]}
    write(root / "conf" / "torch" / "patched.yaml", json.dumps(build))
    (root / "conf" / patch.name).write_bytes(patch.read_bytes())
    cli("env", "build", "patched", "--config-dir", str(root / "conf"), f"envs_dir={root / 'envs'}", timeout=1200)
    (env,) = [p for p in (root / "envs").iterdir() if p.is_dir()]
    return root, env, patch


def test_patch_is_active_inside_the_built_env(torch_env: tuple[Path, Path, Path]) -> None:
    import subprocess

    _, env, _ = torch_env
    done = subprocess.run([str(env / "bin/python"), "-c",
                           "import torch._export.serde.serialize as s; print(s.EXPORT_MATRIX_TEST_PATCH)"],
                          capture_output=True, text=True)
    assert done.stdout.strip() == "pytorch-202785-test", done.stderr[-2000:]


def test_patch_leaves_the_files_uv_links_alone(torch_env: tuple[Path, Path, Path]) -> None:
    """uv hardlinks an env's files to its cache, which setup's venv links too: the patched file must be a copy."""
    import torch

    _, env, _ = torch_env
    site = next((env / "lib").glob("python3*/site-packages"))
    assert (site / TORCH_FILE).stat().st_nlink == 1
    assert MARK not in (Path(torch.__file__).parent.parent / TORCH_FILE).read_text()
    cached = list((Path(os.environ["UV_CACHE_DIR"]) / "archive-v0").glob(f"*/{TORCH_FILE}"))
    assert cached and all(MARK not in path.read_text() for path in cached)


def test_fingerprint_has_freeze_and_patch_sha(torch_env: tuple[Path, Path, Path]) -> None:
    import hashlib

    _, env, patch = torch_env
    found = json.loads((env / "export-matrix-env.json").read_text())
    assert found["patches"] == {patch.name: hashlib.sha256(patch.read_bytes()).hexdigest()}
    assert any(line.startswith("torch==") for line in found["freeze"]) and found["python_version"].startswith("3.12")


def test_env_list_shows_built(torch_env: tuple[Path, Path, Path]) -> None:
    root, env, _ = torch_env
    done = cli("env", "list", "--config-dir", str(root / "conf"), f"envs_dir={root / 'envs'}")
    assert any(line.split()[:2] == ["patched", "built"] and str(env) in line for line in done.stdout.splitlines())


def test_patch_that_does_not_apply_fails_cleanly(torch_env: tuple[Path, Path, Path], tmp_path: Path) -> None:
    import torch

    bad = torch_patch(tmp_path, anchor_shift=1)
    recipe = recipe_of("bad", {"pip": [f"torch=={torch.__version__.split('+')[0]}"], "patches": [bad.name]},
                       [tmp_path], tmp_path / "envs")
    with pytest.raises(EnvBuildError, match=r"patch bad.diff does not apply: .*serialize.py") as caught:
        build_env(recipe)
    assert "\n" not in str(caught.value)
    assert not recipe.path.exists() and not list((tmp_path / "envs").iterdir())


def light_builds(conf: Path, lerobot: dict[str, str]) -> None:
    """Recipe builds with tiny packages (no torch): the stand-in exporter needs none."""
    for name, requirement in lerobot.items():
        write(conf / "torch" / f"{name}.yaml", json.dumps({
            "python_version": "3.12", "pip": [], "lerobot": requirement, "fixes": [],
            "env": {"PATH": f"{STANDIN_BIN}:/usr/local/bin:/usr/bin:/bin"}}))


def stale_cells(common: list[str]) -> set[str]:
    rows = [line.split() for line in cli("status", *common).stdout.splitlines() if "/h100/" in line]
    return {row[0] for row in rows if "stale" in row}  # the cell id leads each row of the status table


def test_bump_makes_one_build_stale_and_reruns_touch_only_those(tmp_path: Path) -> None:
    conf, out = tmp_path / "conf", tmp_path / "out"
    light_builds(conf, {"stock": "six==1.16.0", "pr202785": "six==1.16.0"})
    common = ["--config-dir", str(conf), f"out_dir={out}", f"envs_dir={tmp_path / 'envs'}", "launcher.poll_s=0.2"]
    matrix = ["matrix=tracking", "matrix.policies=[lawam,flux3]", "matrix.gpus=[h100]",
              "matrix.torch=[stock,pr202785]"]
    cli("sweep", *common, *matrix)
    cells = ["lawam/h100/stock", "lawam/h100/pr202785", "flux3/h100/stock", "flux3/h100/pr202785"]
    assert all(record(out, c)["attempt"] == 1 and record(out, c)["fingerprint"]["key"] for c in cells)
    assert stale_cells(common) == set()

    light_builds(conf, {"pr202785": "six==1.17.0"})  # the branch bump of one build
    assert stale_cells(common) == {"lawam/h100/pr202785", "flux3/h100/pr202785"}

    cli("rerun", "--stale", *common)
    assert {c: record(out, c)["attempt"] for c in cells} == {
        "lawam/h100/stock": 1, "lawam/h100/pr202785": 2, "flux3/h100/stock": 1, "flux3/h100/pr202785": 2}
    assert stale_cells(common) == set()
    assert (out / "cells/flux3/h100/pr202785/attempts/1/record.json").exists()

    cli("rerun", "flux3/h100/stock", *common)
    assert record(out, "flux3/h100/stock")["attempt"] == 2 and record(out, "lawam/h100/stock")["attempt"] == 1
    cli("rerun", "--failed", *common)  # lawam fails on builds without pytorch#202925 (row 8)
    assert record(out, "lawam/h100/stock")["attempt"] == 2 and record(out, "flux3/h100/stock")["attempt"] == 2


VIEW_COPY_PROBE = """
import torch
from executorch.backends.aoti.passes.replace_view_copy_with_view import ReplaceViewCopyWithViewPass

class Chunked(torch.nn.Module):
    def forward(self, x):
        a, b, c = torch.ops.aten.split_copy.Tensor(x, 2)  # what the edge dialect makes of the CUDA lane's split
        return torch.ops.aten.detach_copy.default(a + b * c)  # ... and of a detach (gaussian_actor's)

module = torch.export.export(Chunked(), (torch.randn(6, 4),)).graph_module
ReplaceViewCopyWithViewPass()(module)
print(sorted({str(n.target) for n in module.graph.nodes if "split" in str(n.target) or "detach" in str(n.target)}))
"""


@pytest.mark.parametrize(("build", "patched"), [
    ("et19924", "['aten.detach_copy.default', 'aten.split.Tensor']"),
    ("etdetach", "['aten.detach.default', 'aten.split.Tensor']"),
])
def test_a_patched_build_turns_view_copies_back_into_views(tmp_path: Path, build: str, patched: str) -> None:
    """A build's patches, applied the way `env build` applies them, to a copy of the installed ExecuTorch 1.2.0:
    CudaBackend's view pass then maps split_copy to split (et19924: act's failure on `local`, gone on the H200 with
    the same change) and, with etdetach's second patch, detach_copy to detach (gaussian_actor's, gone on the H200
    too); the installed one keeps both copies."""
    import executorch

    site = tmp_path / "site"
    shutil.copytree(next(iter(executorch.__path__)), site / "executorch", symlinks=True)  # a namespace package
    recipe = recipe_of(build, yaml.safe_load((PACKAGE_CONF / "torch" / f"{build}.yaml").read_text()),
                       [PACKAGE_CONF], tmp_path / "envs")
    for patch in recipe.patches:
        apply_patch(patch, site)

    def targets(pythonpath: str) -> str:
        done = subprocess.run([sys.executable, "-c", VIEW_COPY_PROBE], capture_output=True, text=True, timeout=600,
                              env={**os.environ, "PYTHONPATH": pythonpath})
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.strip().splitlines()[-1]

    assert targets("") == "['aten.detach_copy.default', 'aten.split_copy.Tensor']"
    assert targets(str(site)) == patched
