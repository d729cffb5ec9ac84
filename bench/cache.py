"""make_random runs and rerun scope: P policies x G gpus x T builds, then a bump of one build.

Sweeps a matrix with the stand-in lerobot-export (tests/standin; the exporter is not what is measured here)
and real make_random, then counts how many make_random runs the sweep made (goal: P, one per checkpoint) and,
after changing one build's config, how many cells `rerun --stale` ran (goal: that build's P x G cells).

    .venv/bin/python bench/cache.py [--policies act,diffusion] [--gpus h100,a100] [--builds stock,pr202785,pr202925]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STANDIN = ROOT / "tests" / "standin"
RANDOM = {"act": "{random:{type:act,overrides:{pretrained_backbone_weights:null}}}",
          "diffusion": "{random:{type:diffusion,overrides:{pretrained_backbone_weights:null}}}"}


def write_builds(conf: Path, builds: list[str], bumped: str | None = None) -> None:
    for name in builds:
        (conf / "torch").mkdir(parents=True, exist_ok=True)
        env = {"PATH": f"{STANDIN}:{os.environ['PATH']}", "BRANCH": "bumped" if name == bumped else "base"}
        (conf / "torch" / f"{name}.yaml").write_text(json.dumps({"python": sys.executable, "fixes": [], "env": env}))


def cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=ROOT, check=True, capture_output=True)


def count(out: Path) -> tuple[int, int, dict[str, int]]:
    built = reused = 0
    attempts = {}
    for cell in (out / "cells").glob("*/*/*"):
        log = (cell / "make_random.log").read_text() if (cell / "make_random.log").exists() else ""
        lines = log.splitlines()
        built += sum(line.startswith("[export-matrix] [") and "make_random.py" in line for line in lines)
        reused += sum(line.startswith("[export-matrix] reusing the random checkpoint") for line in lines)
        attempts["/".join(cell.parts[-3:])] = json.loads((cell / "record.json").read_text())["attempt"]
    return built, reused, attempts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policies", default="act,diffusion")
    parser.add_argument("--gpus", default="h100,a100")
    parser.add_argument("--builds", default="stock,pr202785,pr202925")
    args = parser.parse_args()
    policies, gpus, builds = (v.split(",") for v in (args.policies, args.gpus, args.builds))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        write_builds(work / "conf", builds)
        common = ["--config-dir", str(work / "conf"), f"out_dir={work / 'out'}", f"ckpt_dir={work / 'ckpts'}",
                  "launcher.poll_s=0.2", "launcher.parallel=2"]
        checkpoints = [o for p in policies
                       for o in (f"~policies.{p}.checkpoint", f"+policies.{p}.checkpoint={RANDOM[p]}")]
        start = time.perf_counter()
        cli("sweep", *common, "matrix=tracking", f"matrix.policies=[{','.join(policies)}]",
            f"matrix.gpus=[{','.join(gpus)}]", f"matrix.torch=[{','.join(builds)}]", *checkpoints)
        sweep_s = time.perf_counter() - start
        built, reused, _ = count(work / "out")
        write_builds(work / "conf", builds, bumped=builds[-1])
        cli("rerun", "--stale", *common, *checkpoints)
        _, _, attempts = count(work / "out")
    rerun = sorted(c for c, n in attempts.items() if n > 1)
    expected = sorted(f"{p}/{g}/{builds[-1]}" for p in policies for g in gpus)
    cells = len(policies) * len(gpus) * len(builds)
    print(f"{cells} cells ({len(policies)} policies x {len(gpus)} gpus x {len(builds)} builds) in {sweep_s:.1f} s")
    print(f"make_random runs: {built} (goal {len(policies)}), reuses: {reused}")
    print(f"cells rerun by `rerun --stale` after bumping {builds[-1]}: {len(rerun)} (goal {len(expected)}, "
          f"{'exactly that build' if rerun == expected else 'NOT exactly that build'})")
    result = {"cells": cells, "make_random_runs": built, "make_random_goal": len(policies), "reuses": reused,
              "rerun_cells": rerun, "rerun_goal": expected, "sweep_s": round(sweep_s, 1),
              "date": time.strftime("%Y-%m-%d")}
    (ROOT / "bench" / "results").mkdir(exist_ok=True)
    (ROOT / "bench" / "results" / "cache.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
