"""A LeRobot bump reruns only the cells whose loaded code changed (issue 48, docs/bump.md).

In LeRobot's place: a tiny `lerobot` of two policies (alpha, beta) and a module both use (common.py), laid out as
LeRobot is (lerobot/policies/__init__.py imports every policy's package), in a local git repository; a recipe
build whose `lerobot:` points at one of its commits, built for real with uv; an exporter that runs the cell's
policy. The bench with LeRobot 0.6.1's own sources is bench/bump.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.job import checkpoints
from orchestrator.record import loaded

from .conftest import cli, record, write

BACKEND = '''
"""A build backend with no requirements: it zips the package as it is."""
import base64, hashlib, os, zipfile

def get_requires_for_build_wheel(config_settings=None):
    return []

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = {"sitecustomize.py": open("sitecustomize.py").read()}
    for folder, _, names in os.walk("lerobot"):
        for name in names:
            if name.endswith(".py"):
                files[os.path.join(folder, name)] = open(os.path.join(folder, name)).read()
    info = "lerobot-0.6.1.dist-info"
    files[f"{info}/METADATA"] = "Metadata-Version: 2.1\\nName: lerobot\\nVersion: 0.6.1\\n"
    files[f"{info}/WHEEL"] = "Wheel-Version: 1.0\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
    def sha(text):
        return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).decode().rstrip("=")
    record = "".join(f"{f},sha256={sha(t)},{len(t.encode())}\\n" for f, t in files.items())
    name = "lerobot-0.6.1-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as archive:
        for member, text in files.items():
            archive.writestr(member, text)
        archive.writestr(f"{info}/RECORD", record + f"{info}/RECORD,,\\n")
    return name
'''

# Run with the build's interpreter, as the fork's lerobot-export is: imports every policy (as LeRobot does), runs
# the cell's, prints the fork's check line. It fails where the distribution's own sitecustomize did not run.
EXPORTER = '''
import os, sys
import lerobot.policies
if os.environ.get("TINY_LEROBOT_SITE") != "ran":
    sys.exit("the distribution's sitecustomize did not run")
policy = getattr(lerobot.policies, os.environ["EXPORT_MATRIX_POLICY"].capitalize() + "Policy")()
print(f"Exported policy test case: largest difference {policy.act() * 1e-7:.2e} (tolerance 0.001)")
'''


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          check=True, capture_output=True, text=True)
    return done.stdout.strip()


def commit(repo: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        write(repo / name, text)
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def tiny_lerobot(repo: Path) -> str:
    git_dir = repo
    git_dir.mkdir(parents=True)
    git(repo, "init", "-q")
    return commit(repo, {
        "pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n',
        "backend.py": BACKEND,
        "sitecustomize.py": 'import os\nos.environ["TINY_LEROBOT_SITE"] = "ran"\n',
        "lerobot/__init__.py": 'VERSION = "0.6.1"\n',
        "lerobot/common.py": "def scale(x):\n    return 1.0 * x\n",
        "lerobot/policies/__init__.py": "from .alpha import AlphaPolicy\nfrom .beta import BetaPolicy\n",
        "lerobot/policies/alpha/__init__.py": "from .modeling_alpha import AlphaPolicy\n",
        "lerobot/policies/alpha/modeling_alpha.py": policy("Alpha", 1),
        "lerobot/policies/beta/__init__.py": "from .modeling_beta import BetaPolicy\n",
        "lerobot/policies/beta/modeling_beta.py": policy("Beta", 1),
    }, "a tiny lerobot 0.6.1")


def policy(name: str, factor: int) -> str:
    return f"from lerobot import common\n\n\nclass {name}Policy:\n    def act(self):\n" \
           f"        return common.scale({factor})\n"


def configs(conf: Path, repo: Path, ref: str, tmp: Path) -> None:
    write(conf / "torch" / "tb.yaml", json.dumps({
        "python_version": "3.12", "pip": [], "lerobot": f"lerobot @ git+{repo.as_uri()}@{ref}", "fixes": [],
        "env": {}}))
    exporter = write(tmp / "tiny_export.py", EXPORTER)
    write(conf / "exporter" / "tiny.yaml", json.dumps({
        "command": ["{python}", str(exporter), "--policy.path={ckpt}", "--output_dir={out}"]}))
    for name in ("alpha", "beta"):
        write(conf / "policy" / f"{name}.yaml", json.dumps({
            "checkpoint": {"path": str(tmp / "ckpt")}, "task": None, "export_args": [], "timeout_min": 5,
            "tolerance": None, "env": {}}))
    write(conf / "matrix" / "tiny.yaml", json.dumps({"policies": ["alpha", "beta"], "gpus": ["cpu"],
                                                     "torch": ["tb"], "exclude": [], "include": []}))


def stale(common: list[str]) -> dict[str, str]:
    """{cell: why} from the status table: `stale (why)` ends each stale row."""
    found = {}
    for line in cli("status", *common).stdout.splitlines():
        if "/cpu/tb" in line and " stale (" in line:
            found[line.split()[0]] = line.split(" stale (", 1)[1].rstrip().removesuffix(")")
    return found


ALPHA, BETA = "alpha/cpu/tb", "beta/cpu/tb"


def test_a_bump_marks_stale_exactly_the_cells_whose_loaded_files_changed(tmp_path: Path) -> None:
    repo, conf, out = tmp_path / "lerobot", tmp_path / "conf", tmp_path / "out"
    first = tiny_lerobot(repo)
    configs(conf, repo, first, tmp_path)
    common = ["--config-dir", str(conf), f"out_dir={out}", f"envs_dir={tmp_path / 'envs'}", "matrix=tiny",
              "exporter=tiny", "launcher.poll_s=0.2"]
    cli("env", "build", "tb", *common)
    cli("sweep", *common)
    alpha, beta = record(out, ALPHA), record(out, BETA)
    assert alpha["status"] == beta["status"] == "passed", alpha["error"]
    files = {c: loaded.read_list(out / "cells" / c / loaded.LOADED_NAME, record(out, c)["loaded_files"])
             for c in (ALPHA, BETA)}
    # every process imports both policies; a policy's package counts where its code ran
    assert {"lerobot/policies/alpha/__init__.py", "lerobot/policies/alpha/modeling_alpha.py"} <= set(files[ALPHA])
    assert not any(rel.startswith("lerobot/policies/beta/") for rel in files[ALPHA]), sorted(files[ALPHA])
    assert {"lerobot/common.py", "lerobot/policies/__init__.py",
            "lerobot/policies/beta/modeling_beta.py"} <= set(files[BETA])
    assert not any(rel.startswith("lerobot/policies/alpha/") for rel in files[BETA]), sorted(files[BETA])
    ours = loaded.file_sha(str(loaded.SITECUSTOMIZE_DIR / "sitecustomize.py"), "sitecustomize.py",
                           loaded.RecordHashes())
    assert files[BETA]["sitecustomize.py"] != ours  # the distribution's, which ours ran
    assert not any(rel.startswith("tiny_export") for rel in files[BETA])
    assert stale(common) == {}

    second = commit(repo, {"lerobot/policies/alpha/modeling_alpha.py": policy("Alpha", 2)}, "alpha only")
    configs(conf, repo, second, tmp_path)
    not_built = stale(common)  # the bumped recipe's environment does not exist yet: nothing to compare with
    assert set(not_built) == {ALPHA, BETA} and "env build tb" in not_built[BETA], not_built
    cli("env", "build", "tb", *common)
    assert stale(common) == {ALPHA: "lerobot/policies/alpha/modeling_alpha.py changed"}

    shown = cli("show", ALPHA, *common).stdout
    assert "stale: lerobot/policies/alpha/modeling_alpha.py changed" in shown, shown
    assert "  lerobot/policies/alpha/modeling_alpha.py" in shown and "  lerobot/common.py" in shown

    beta_record = out / "cells" / BETA / "record.json"
    kept = beta_record.read_text()
    beta_record.write_text(json.dumps({**json.loads(kept), "loaded_files": None}))  # a record from before
    assert stale(common)[BETA] == "lerobot changed (the record lists no loaded files)"
    beta_record.write_text(kept)

    cli("rerun", "--stale", *common)
    assert (record(out, ALPHA)["attempt"], record(out, BETA)["attempt"]) == (2, 1)
    assert stale(common) == {}

    third = commit(repo, {"lerobot/common.py": "def scale(x):\n    return 3.0 * x\n"}, "what every policy loads")
    configs(conf, repo, third, tmp_path)
    cli("env", "build", "tb", *common)
    assert stale(common) == {ALPHA: "lerobot/common.py changed", BETA: "lerobot/common.py changed"}
    assert stale([*common, "policies.beta.timeout_min=7"])[BETA] == "config changed"


def test_make_randoms_files_stay_with_its_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint keeps what make_random loaded (its cells' lists include it); a step whose sitecustomize
    cannot write still runs."""
    write(tmp_path / "lib" / "fakebot" / "__init__.py", "")
    write(tmp_path / "lib" / "fakebot" / "factory.py", "MADE = True\n")
    script = write(tmp_path / "make_random.py", "import sys, pathlib\nimport fakebot.factory\n"
                   "pathlib.Path(sys.argv[2]).mkdir(parents=True)\n")
    monkeypatch.setattr(checkpoints, "MAKE_RANDOM", script)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path / "lib")}
    built = checkpoints.ensure_random_checkpoint(tmp_path / "ckpts", {"type": "act"}, "0.6.1", sys.executable, env,
                                                 tmp_path / "make_random.log", 60)
    assert built.built and {"fakebot/__init__.py", "fakebot/factory.py"} <= set(built.loaded_files or {})
    assert not any(rel.startswith(("make_random", "sitecustomize")) for rel in built.loaded_files or {})

    blocked = write(tmp_path / "not_a_folder", "")  # the step's list cannot be written under a file
    done = subprocess.run([sys.executable, str(script), "act", str(tmp_path / "again")], capture_output=True,
                          text=True, env={**loaded.step_env(env, tmp_path / "lists"),
                                          loaded.FOLDER_VARIABLE: str(blocked / "x")})
    assert done.returncode == 0 and done.stderr == "", done.stderr
