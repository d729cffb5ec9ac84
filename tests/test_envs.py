"""Torch builds from recipes: a real uv environment with a real patch to torch, fingerprints, stale reruns."""

from __future__ import annotations

import difflib
import json
import os
import re
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


# Recipes of tiny packages on a local index: lerobot's shape (a policy package pinning torch and torchvision
# below the versions a recipe wants), in milliseconds instead of gigabytes.
BOT_REQUIRES = ["emx-torch<2.12", "emx-vision<0.27"]
OVERRIDES = ["emx-torch==2.15.0", "emx-vision==0.29.2"]


def wheel_files(name: str, version: str, requires: list[str]) -> dict[str, str]:
    module, dist = name.replace("-", "_"), f"{name.replace('-', '_')}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    return {f"{module}/__init__.py": f'VERSION = "{version}"\n', f"{dist}/METADATA": metadata,
            f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}


def write_wheel(folder: Path, name: str, version: str, requires: list[str]) -> Path:
    import base64
    import hashlib
    import zipfile

    files = wheel_files(name, version, requires)
    dist = next(f for f in files if f.endswith("/WHEEL")).split("/")[0]
    record = "".join(f"{f},sha256={base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).decode().rstrip('=')},"
                     f"{len(t.encode())}\n" for f, t in files.items()) + f"{dist}/RECORD,,\n"
    path = folder / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in {**files, f"{dist}/RECORD": record}.items():
            archive.writestr(member, text)
    return path


def local_index(root: Path, with_bot: bool = True) -> str:
    """A PEP 503 index (file://) of emx-torch 2.11.0/2.15.0, emx-vision 0.26.0/0.29.2 and emx-bot 0.6.1."""
    packages = {"emx-torch": [("2.11.0", []), ("2.15.0", [])],
                "emx-vision": [("0.26.0", ["emx-torch==2.11.0"]), ("0.29.2", ["emx-torch==2.15.0"])]}
    if with_bot:
        packages["emx-bot"] = [("0.6.1", BOT_REQUIRES)]
    for name, versions in packages.items():
        links = [write_wheel(root / "files", name, v, r).name for v, r in versions]
        write(root / "simple" / name / "index.html",
              "".join(f'<a href="../../files/{link}">{link}</a>\n' for link in links))
    write(root / "simple" / "index.html", "".join(f'<a href="{n}/">{n}</a>\n' for n in packages))
    return (root / "simple").as_uri()


def emx_recipe(conf: Path, name: str, index: str, **more: object) -> None:
    write(conf / "torch" / f"{name}.yaml", json.dumps({
        "python_version": "3.12", "index_url": index, "pip": ["emx-torch==2.15.0"], "lerobot": "emx-bot==0.6.1",
        "fixes": [], "env": {}, **more}))


def freeze_of(envs: Path, name: str) -> list[str]:
    (env,) = [p for p in envs.iterdir() if p.is_dir() and p.name.startswith(f"{name}-")]
    return json.loads((env / "export-matrix-env.json").read_text())["freeze"]


def test_a_resolve_that_fails_names_the_conflicting_pins(tmp_path: Path) -> None:
    conf, envs = tmp_path / "conf", tmp_path / "envs"
    emx_recipe(conf, "pinned", local_index(tmp_path / "index"))
    done = cli("env", "build", "pinned", "--config-dir", str(conf), f"envs_dir={envs}", check=False)
    errors = [line for line in done.stderr.splitlines() if line.startswith("export-matrix: error")]
    assert done.returncode == 1 and len(errors) == 1 and done.stderr.strip().endswith(errors[0]), done.stderr
    assert errors[0].startswith("export-matrix: error: torch build pinned: uv pip failed: no solution: ")
    assert re.search(r"emx-bot depends? on emx-torch<2.12 and you require emx-torch==2.15.0;? ", errors[0]), errors[0]
    assert "(log: " in errors[0] and not [p for p in envs.iterdir() if p.is_dir()]


def test_overrides_replace_a_dependencys_pins_and_a_site_constraint_is_lifted(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    conf, envs = tmp_path / "conf", tmp_path / "envs"
    emx_recipe(conf, "overridden", local_index(tmp_path / "index"), overrides=OVERRIDES)
    cap = write(tmp_path / "site-constraints.txt", "emx-torch<=2.14.1\n")  # a machine's cap on torch
    monkeypatch.setenv("UV_CONSTRAINT", str(cap))
    monkeypatch.setenv("PIP_CONSTRAINT", str(cap))
    cli("env", "build", "overridden", "--config-dir", str(conf), f"envs_dir={envs}")
    freeze = freeze_of(envs, "overridden")
    assert {"emx-torch==2.15.0", "emx-vision==0.29.2", "emx-bot==0.6.1"} <= set(freeze), freeze

    def listed() -> list[str]:
        lines = cli("env", "list", "--config-dir", str(conf), f"envs_dir={envs}").stdout.splitlines()
        return next(line.split() for line in lines if line.startswith("overridden "))

    before = listed()
    emx_recipe(conf, "overridden", local_index(tmp_path / "index"), overrides=OVERRIDES[:1])
    after = listed()
    assert before[1] == "built" and after[1:3] == ["not", "built"] and before[-1] != after[-1]  # in the digest


def test_overrides_must_be_a_list(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    emx_recipe(conf, "bad", "file:///nowhere", overrides="emx-torch==2.15.0")
    done = cli("env", "build", "bad", "--config-dir", str(conf), check=False)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "export-matrix: error: builds.bad.overrides must be a list of strings, got 'emx-torch==2.15.0'"]


BACKEND = '''
"""A build backend with no requirements: it zips the package as it is."""
import base64, hashlib, os, zipfile

NAME, VERSION = "emx_bot", "0.6.1"
FILES = {"emx_bot/__init__.py": open("emx_bot/__init__.py").read(),
         "emx_bot-0.6.1.dist-info/METADATA": "Metadata-Version: 2.1\\nName: emx-bot\\nVersion: 0.6.1\\n"
         + "".join(f"Requires-Dist: {r}\\n" for r in REQUIRES),
         "emx_bot-0.6.1.dist-info/WHEEL": "Wheel-Version: 1.0\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"}


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    def sha(text):
        return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).decode().rstrip("=")
    record = "".join(f"{f},sha256={sha(t)},{len(t.encode())}\\n" for f, t in FILES.items())
    name = "emx_bot-0.6.1-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as archive:
        for member, text in FILES.items():
            archive.writestr(member, text)
        archive.writestr("emx_bot-0.6.1.dist-info/RECORD", record + "emx_bot-0.6.1.dist-info/RECORD,,\\n")
    return name
'''


def bot_fork(root: Path) -> str:
    """emx-bot 0.6.1 as a fork's source in a git repository (a lerobot @ git+... requirement)."""
    write(root / "emx_bot" / "__init__.py", 'VERSION = "0.6.1"\nSOURCE = "fork"\n')
    write(root / "backend.py", f"REQUIRES = {BOT_REQUIRES!r}\n{BACKEND}")
    write(root / "pyproject.toml", '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n')
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    for command in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "fork"]):
        subprocess.run([*git, *command], check=True, capture_output=True)
    return f"emx-bot @ git+{root.as_uri()}"


def test_a_wheelhouse_builds_the_env_with_the_network_cut(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The wheelhouse holds the fork built from its git source; the offline build installs it, the overridden
    pins and the patch with the index, the git repository and every proxy gone."""
    conf, envs, house = tmp_path / "conf", tmp_path / "envs", tmp_path / "wheelhouse"
    patch = ("--- a/emx_bot/__init__.py\n+++ b/emx_bot/__init__.py\n@@ -1,2 +1,3 @@\n VERSION = \"0.6.1\"\n"
             " SOURCE = \"fork\"\n+PATCHED = True\n")
    write(conf / "patches" / "emx-bot.diff", patch)
    emx_recipe(conf, "fork", local_index(tmp_path / "index", with_bot=False), lerobot=bot_fork(tmp_path / "fork"),
               overrides=OVERRIDES, patches=["patches/emx-bot.diff"])
    common = ["--config-dir", str(conf), f"envs_dir={envs}"]
    cli("env", "wheelhouse", "fork", str(house), *common)
    assert {w.name.split("-")[0] for w in house.glob("*.whl")} == {"emx_torch", "emx_vision", "emx_bot"}

    shutil.rmtree(tmp_path / "index")
    shutil.rmtree(tmp_path / "fork")
    for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.setenv(proxy, "http://127.0.0.1:9")  # nothing listens there: any download fails
    online = cli("env", "build", "fork", *common, check=False)
    assert online.returncode == 1 and "uv pip failed" in online.stderr, online.stderr

    cli("env", "build", "fork", "--wheelhouse", str(house), *common)
    freeze = freeze_of(envs, "fork")
    assert {"emx-torch==2.15.0", "emx-vision==0.29.2", "emx-bot==0.6.1"} <= set(freeze), freeze
    (env,) = [p for p in envs.iterdir() if p.is_dir()]
    done = subprocess.run([str(env / "bin/python"), "-c", "import emx_bot; print(emx_bot.SOURCE, emx_bot.PATCHED)"],
                          capture_output=True, text=True)
    assert done.stdout.strip() == "fork True", done.stderr


def test_a_wheelhouse_of_another_recipe_is_refused(tmp_path: Path) -> None:
    conf, house = tmp_path / "conf", tmp_path / "wheelhouse"
    emx_recipe(conf, "pinned", "file:///nowhere")
    house.mkdir()
    done = cli("env", "build", "pinned", "--wheelhouse", str(house), "--config-dir", str(conf),
               f"envs_dir={tmp_path / 'envs'}", check=False)
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("export-matrix: error")]
    assert done.returncode == 1 and line.startswith(
        f"export-matrix: error: torch build pinned: {house} has no wheelhouse of this recipe (pinned-"), line
    assert f"missing): make it with export-matrix env wheelhouse pinned {house} (log: " in line
