"""Submission cost on Slurm: the tracking matrix (96 cells) as job arrays vs one sbatch per cell.

Needs a Slurm cluster (`sudo scripts/slurm-local up` gives one on this machine). Every job is submitted held
(`sbatch --hold`) and cancelled right after, so nothing runs. Measures:
  - `export-matrix sweep launcher=slurm` wall time and its sbatch calls (a wrapper sbatch first on PATH counts them),
  - the same cells' jobs submitted one `sbatch` each through submitit (executor.submit per cell, no batch),
  - `export-matrix status` on the 96-cell manifest (one sacct call).
Torch builds are this interpreter with the tests' stand-in lerobot-export, as in the tests. The sweep's time is
the whole command (Python start, Hydra, fingerprints, the manifest); the baseline's is the submissions alone.

    .venv/bin/python bench/submit.py [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SMALL = [f"gpus.{g}.slurm.{k}={v}" for g in ("h100", "a100") for k, v in (("cpus_per_task", 1), ("mem_gb", 3))]


def conf_dir(work: Path) -> Path:
    conf = work / "conf" / "torch"
    conf.mkdir(parents=True)
    for name in ("stock", "pr202785", "pr202925"):
        (conf / f"{name}.yaml").write_text(json.dumps({
            "python": sys.executable, "fixes": [],
            "env": {"PATH": f"{ROOT / 'tests' / 'standin'}:{os.environ['PATH']}"}}))
    return conf.parent


def counting_sbatch(work: Path) -> Path:
    bin_dir = work / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "sbatch"
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> {bin_dir / "calls"}\nexec {shutil.which("sbatch")} "$@"\n')
    wrapper.chmod(0o755)
    return bin_dir


def cli(env: dict[str, str], *args: str) -> float:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"export-matrix {args[0]} failed:\n{done.stderr[-2000:]}")
    return time.perf_counter() - start


def one_sbatch_per_cell(out: Path, env: dict[str, str]) -> tuple[float, list[str]]:
    """The baseline: the same job bodies, submitted one sbatch each (what a loop of executor.submit does)."""
    sys.path.insert(0, str(ROOT))
    import submitit

    from orchestrator.cells import resolve
    from orchestrator.config import compose_config
    from orchestrator.slurm.cell_job import CellJob
    from orchestrator.slurm.submit import SlurmSettings, resources

    os.environ["PATH"] = env["PATH"]
    specs = resolve(compose_config(["matrix=tracking", f"out_dir={out}", "launcher=slurm", *SMALL],
                                   Path(env["BENCH_CONF"])))
    settings = SlurmSettings()
    start = time.perf_counter()
    ids = []
    for spec in specs:
        res = resources(spec, settings)
        executor = submitit.AutoExecutor(folder=out / "submitit" / "%j", cluster="slurm")
        executor.update_parameters(timeout_min=res["time_min"], cpus_per_task=res["cpus_per_task"],
                                   mem_gb=float(res["mem_gb"]), slurm_partition=res["partition"],
                                   slurm_gres=res["gres"], slurm_additional_parameters={"hold": True})
        ids.append(executor.submit(CellJob(spec, 1, res["time_min"] * 60.0, 30, 1)).job_id)
    return time.perf_counter() - start, ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    results: dict[str, list[float]] = {"arrays_sweep_s": [], "per_cell_submit_s": [], "status_s": []}
    calls: list[int] = []
    with tempfile.TemporaryDirectory(prefix="bench-submit-") as tmp:
        work = Path(tmp)
        conf, bin_dir = conf_dir(work), counting_sbatch(work)
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "HF_HUB_OFFLINE": "1",
               "BENCH_CONF": str(conf)}
        for repeat in range(args.repeats):
            out = work / f"arrays{repeat}"
            before = len((bin_dir / "calls").read_text().splitlines()) if (bin_dir / "calls").exists() else 0
            results["arrays_sweep_s"].append(cli(env, "sweep", "--config-dir", str(conf), "matrix=tracking",
                                                 f"out_dir={out}", f"ckpt_dir={work / 'ckpts'}", "launcher=slurm",
                                                 *SMALL, "+launcher.sbatch.hold=true"))
            calls.append(len((bin_dir / "calls").read_text().splitlines()) - before)
            results["status_s"].append(cli(env, "status", "--config-dir", str(conf), f"out_dir={out}",
                                           "matrix=tracking", *SMALL))
            arrays = {e["array"] for e in json.loads((out / "manifest.json").read_text())["cells"].values()}
            subprocess.run(["scancel", *arrays], check=True)
            seconds, ids = one_sbatch_per_cell(work / f"per_cell{repeat}", env)
            results["per_cell_submit_s"].append(seconds)
            assert len(set(ids)) == 96, ids
            subprocess.run(["scancel", *ids], check=True)
    summary = {"cells": 96, "sbatch_calls_arrays": calls, "sbatch_calls_per_cell": 96,
               **{k: [round(v, 2) for v in vals] for k, vals in results.items()},
               **{f"{k}_median": round(statistics.median(vals), 2) for k, vals in results.items()}}
    print(json.dumps(summary, indent=2))
    target = ROOT / "bench" / "results" / "submit.json"
    target.parent.mkdir(exist_ok=True)
    target.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
