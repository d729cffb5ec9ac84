"""A LeRobot bump that touches one policy: `rerun --stale` by the files each cell loaded vs by the recipe.

With LeRobot 0.6.1's own sources in a local git repository (PyPI's sdist, its [tool.uv] index and sources left
out: they point at download.pytorch.org, which this machine cannot reach; the build's own index decides):

1. a recipe build `bump` (torch 2.11.0, executorch 1.2.0, transformers 5.5.4, `lerobot[diffusion] @ git+file://
   ...@<commit 1>`), built with `export-matrix env build`, and the smoke sweep (act, diffusion, gaussian_actor,
   tdmpc on the CPU, exported for real) on it;
2. commit 2 changes act's modeling file alone (a comment line); the recipe points at it; `env build`;
3. the out_dir is copied and the copy's records lose their loaded-files lists, as a job before issue 48 wrote
   them, so the copy is judged by the recipe rule (today's); `status` and `rerun --stale` run on both, one after
   the other, each with a random-checkpoint folder of its own (a lerobot from git keys its checkpoints by its
   sources' digest, so both build theirs again);
4. commit 3 changes `lerobot/policies/factory.py`, which every policy loads; after `env build`, `status` on the
   by-files out_dir must mark all four cells.

Writes bench/results/bump.json: the cells each rerun ran, the export seconds of their records (export_s), the
rerun's wall seconds, and the reasons `status` gave.

    .venv/bin/python bench/bump.py [--work DIR]      (about 35 minutes on 2 cores)
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.atomic import write_json_atomic  # noqa: E402

RESULT = ROOT / "bench" / "results" / "bump.json"
POLICIES = ("act", "diffusion", "gaussian_actor", "tdmpc")
ACT_MODELING = "src/lerobot/policies/act/modeling_act.py"
GIT = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost"]


def cli(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if done.returncode != 0:
        raise SystemExit(f"export-matrix {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return done, time.perf_counter() - start


def lerobot_repo(work: Path) -> tuple[Path, str]:
    """LeRobot 0.6.1's sdist as a git repository; returns it and its first commit."""
    sdist = work / "sdist"
    if not list(sdist.glob("lerobot-0.6.1.tar.gz")):
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                        "lerobot==0.6.1", "-d", str(sdist)], check=True)
    repo = work / "lerobot"
    shutil.rmtree(repo, ignore_errors=True)
    with tarfile.open(next(sdist.glob("lerobot-0.6.1.tar.gz"))) as archive:
        archive.extractall(work, filter="data")
    (work / "lerobot-0.6.1").rename(repo)
    pyproject = repo / "pyproject.toml"
    text = pyproject.read_text()
    pyproject.write_text(re.sub(r"\[\[tool\.uv\.index\]\].*?(?=\[tool\.setuptools)", "", text, flags=re.S))
    return repo, commit(repo, "lerobot 0.6.1 (sdist), without its [tool.uv] index", init=True)


def commit(repo: Path, message: str, init: bool = False) -> str:
    if init:
        subprocess.run([*GIT, "-C", str(repo), "init", "-q"], check=True)
    subprocess.run([*GIT, "-C", str(repo), "add", "-A"], check=True)
    subprocess.run([*GIT, "-C", str(repo), "commit", "-q", "-m", message], check=True)
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()


def write_configs(conf: Path, repo: Path, ref: str) -> None:
    (conf / "torch").mkdir(parents=True, exist_ok=True)
    (conf / "matrix").mkdir(parents=True, exist_ok=True)
    (conf / "torch" / "bump.yaml").write_text(json.dumps({
        "python_version": "3.12", "pip": ["torch==2.11.0", "executorch==1.2.0"],
        "lerobot": f"lerobot[diffusion] @ git+{repo.as_uri()}@{ref}", "transformers": "5.5.4", "patches": [],
        "fixes": [], "env": {}}))
    (conf / "matrix" / "bump.yaml").write_text(json.dumps({"policies": list(POLICIES), "gpus": ["cpu"],
                                                          "torch": ["bump"], "exclude": [], "include": []}))


def stale(common: list[str], out: Path, seconds: list[float] | None = None) -> dict[str, str]:
    done, took = cli("status", *common, f"out_dir={out}")
    if seconds is not None:
        seconds.append(round(took, 2))
    found = {}
    for line in done.stdout.splitlines():
        if "/cpu/bump" in line and " stale (" in line:
            found[line.split()[0]] = line.split(" stale (", 1)[1].rstrip().removesuffix(")")
    return found


def records(out: Path) -> dict[str, dict]:
    paths = sorted((out / "cells").glob("*/*/*/record.json"))
    return {"/".join(p.parts[-4:-1]): json.loads(p.read_text()) for p in paths}


def without_lists(out: Path) -> None:
    """The records as a job before issue 48 wrote them: no loaded-files list."""
    for path in (out / "cells").glob("*/*/*/record.json"):
        data = json.loads(path.read_text())
        data["loaded_files"] = None
        path.write_text(json.dumps(data))


def rerun(common: list[str], out: Path, ckpts: Path) -> dict:
    before = {c: r["attempt"] for c, r in records(out).items()}
    _, seconds = cli("rerun", "--stale", *common, f"out_dir={out}", f"ckpt_dir={ckpts}")
    after = records(out)
    ran = sorted(c for c, r in after.items() if r["attempt"] > before.get(c, 0))
    return {"cells": ran, "statuses": {c: after[c]["status"] for c in ran}, "wall_s": round(seconds, 1),
            "export_s": round(sum(after[c].get("export_s") or 0 for c in ran), 1),
            "make_random_s": round(sum(after[c].get("make_random_s") or 0 for c in ran), 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=None, help="a folder to keep (default: a temporary one)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="bump-"))
    work.mkdir(parents=True, exist_ok=True)
    conf, out, envs = work / "conf", work / "out", work / "envs"
    for leftover in (out, work / "out_recipe", work / "ckpts", work / "ckpts_code", work / "ckpts_recipe"):
        shutil.rmtree(leftover, ignore_errors=True)
    repo, first = lerobot_repo(work)
    write_configs(conf, repo, first)
    common = ["--config-dir", str(conf), f"envs_dir={envs}", "matrix=bump"]
    _, build_1 = cli("env", "build", "bump", *common)
    _, sweep_s = cli("sweep", *common, f"out_dir={out}", f"ckpt_dir={work / 'ckpts'}")
    swept = records(out)
    print(f"sweep: {len(swept)} cells in {sweep_s:.0f} s ({', '.join(f'{c} {r['status']}' for c, r in swept.items())})")

    modeling = repo / ACT_MODELING
    modeling.write_text(modeling.read_text() + "\n# bench/bump.py: a change to act's modeling file alone\n")
    second = commit(repo, "act: a comment in modeling_act.py")
    write_configs(conf, repo, second)
    _, build_2 = cli("env", "build", "bump", *common)

    by_recipe_out = work / "out_recipe"
    shutil.copytree(out, by_recipe_out, symlinks=True)
    without_lists(by_recipe_out)
    status_s: list[float] = []
    reasons = {"by_code": stale(common, out, status_s), "by_recipe": stale(common, by_recipe_out)}
    print(f"status after the bump: by code {reasons['by_code']}; by recipe {sorted(reasons['by_recipe'])}")
    by_code = rerun(common, out, work / "ckpts_code")
    print(f"rerun --stale by code: {by_code}")
    by_recipe = rerun(common, by_recipe_out, work / "ckpts_recipe")
    print(f"rerun --stale by recipe: {by_recipe}")

    factory = repo / "src" / "lerobot" / "policies" / "factory.py"
    factory.write_text(factory.read_text() + "\n# bench/bump.py: a change to a file every policy loads\n")
    write_configs(conf, repo, commit(repo, "factory.py: a comment"))
    cli("env", "build", "bump", *common)
    shared = stale(common, out)
    print(f"status after a change to factory.py: {shared}")

    result = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{os.cpu_count()} cores, CPU only (executorch_cpu exporter, XNNPACK)",
        "policies": list(POLICIES), "bump": "a comment line in src/lerobot/policies/act/modeling_act.py",
        "cells_rerun_by_code": len(by_code["cells"]), "cells_rerun_by_recipe": len(by_recipe["cells"]),
        "export_s_by_code": by_code["export_s"], "export_s_by_recipe": by_recipe["export_s"],
        "rerun_wall_s_by_code": by_code["wall_s"], "rerun_wall_s_by_recipe": by_recipe["wall_s"],
        "by_code": by_code, "by_recipe": by_recipe, "status_reasons": reasons,
        "status_s_after_the_bump": status_s[0],  # the whole `status` process, files compared included
        "shared_file_bump": {"file": "src/lerobot/policies/factory.py", "stale": shared,
                             "all_stale": sorted(shared) == sorted(f"{p}/cpu/bump" for p in POLICIES)},
        "sweep": {"cells": len(swept), "wall_s": round(sweep_s, 1),
                  "statuses": {c: r["status"] for c, r in swept.items()}},
        "env_build_s": [round(build_1, 1), round(build_2, 1)],
        "goal": "the bumped policy's cells and no others",
        "met": by_code["cells"] == ["act/cpu/bump"] and sorted(shared) == sorted(f"{p}/cpu/bump" for p in POLICIES),
    }
    write_json_atomic(RESULT, result)
    print(f"wrote {RESULT.relative_to(ROOT)}: by code {result['cells_rerun_by_code']} cells, "
          f"{result['export_s_by_code']} s export; by recipe {result['cells_rerun_by_recipe']} cells, "
          f"{result['export_s_by_recipe']} s export")
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if result["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
