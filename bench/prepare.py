"""GPU-allocated seconds spent on random checkpoints, without and with the make_random preparation array.

Needs the local Slurm cluster (`sudo scripts/slurm-local up`). Sweeps P policies x h100, a100 x B builds with a
fresh checkpoint cache (real make_random; the stand-in lerobot-export), once with `launcher.prepare=null` (each
GPU job builds its checkpoint, or waits on the lock of the job that builds it) and once with the preparation
array (a CPU job builds each checkpoint before the GPU arrays start). Sums, over the GPU jobs' records, the
seconds each spent building (make_random_s) or waiting for (checkpoint_wait_s) a checkpoint: time a GPU was
allocated and idle. Writes bench/results/prepare.json.

    .venv/bin/python bench/prepare.py [--policies act,diffusion] [--builds stock,pr202785,pr202925]
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
sys.path.insert(0, str(ROOT))

from bench.cache import RANDOM, write_builds  # noqa: E402

SMALL = [f"gpus.{g}.slurm.{k}={v}" for g in ("h100", "a100") for k, v in (("cpus_per_task", 1), ("mem_gb", 3))]


def sweep(work: Path, name: str, policies: list[str], builds: list[str], prepare: list[str]) -> dict:
    out, ckpts = work / name, work / f"{name}-ckpts"
    checkpoints = [o for p in policies for o in (f"~policies.{p}.checkpoint", f"+policies.{p}.checkpoint={RANDOM[p]}")]
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "orchestrator.cli", "sweep", "--config-dir", str(work / "conf"),
                    "matrix=tracking", f"matrix.policies=[{','.join(policies)}]", "matrix.gpus=[h100,a100]",
                    f"matrix.torch=[{','.join(builds)}]", f"out_dir={out}", f"ckpt_dir={ckpts}", *checkpoints,
                    "launcher=slurm", "launcher.poll_s=1", *SMALL, *prepare, "--wait"],
                   cwd=ROOT, check=True, capture_output=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    wall = time.perf_counter() - start
    records = [json.loads(p.read_text()) for p in sorted(out.glob("cells/*/*/*/record.json"))]
    building = sum(r.get("make_random_s") or 0 for r in records)
    waiting = sum(r.get("checkpoint_wait_s") or 0 for r in records)
    return {"cells": len(records), "passed": sum(r["status"] == "passed" for r in records),
            "gpu_s_building": round(building, 1), "gpu_s_waiting": round(waiting, 1),
            "gpu_s_on_checkpoints": round(building + waiting, 1), "sweep_wall_s": round(wall, 1),
            "gpu_jobs_that_built": sum((r.get("make_random_s") or 0) > 0 for r in records)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", default="act,diffusion")
    parser.add_argument("--builds", default="stock,pr202785,pr202925")
    args = parser.parse_args()
    policies, builds = args.policies.split(","), args.builds.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        write_builds(work / "conf", builds)
        before = sweep(work, "without", policies, builds, ["launcher.prepare=null"])
        after = sweep(work, "with", policies, builds, ["launcher.prepare.cpus_per_task=1", "launcher.prepare.mem_gb=3"])
    for name, found in (("without the preparation array", before), ("with it", after)):
        print(f"{name:32s} {found['passed']}/{found['cells']} passed, GPU-allocated s on checkpoints "
              f"{found['gpu_s_on_checkpoints']:7.1f} (building {found['gpu_s_building']:.1f}, waiting "
              f"{found['gpu_s_waiting']:.1f}), sweep {found['sweep_wall_s']:.0f} s")
    result = {"date": time.strftime("%Y-%m-%d"), "policies": policies, "builds": builds, "gpus": ["h100", "a100"],
              "without_prepare": before, "with_prepare": after, "goal": "gpu_s_on_checkpoints 0 with prepare"}
    path = ROOT / "bench" / "results" / "prepare.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
