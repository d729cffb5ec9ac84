"""Scale on the local Slurm cluster: 2,500 cells of one signature run to the end, and 10,000 cells submitted.

Needs `sudo scripts/slurm-local up` (MaxArraySize 1001, MaxJobCount 40000) and hydra-submitit-launcher (the `dev`
extra). Cheap cells as in bench/submit.py: policies with `checkpoint: {path: ...}` (nothing to build) and an
exporter that only starts Python, so what is measured is the orchestration. `sbatch` and `sacct` are counted by
wrappers first on PATH; each export-matrix command runs under /usr/bin/time (wall seconds, peak RSS).

1. 2,502 cells (834 policies x h100 x 3 builds: one resource signature; without a GPU gres, so the node's 16
   CPU slots run them rather than its 4 fake GPUs) swept for real: the arrays it became
   (goal: >= 3 at MaxArraySize 1001), then `wait` until every cell has its record, then one more `wait` and a
   `status` with every job ended: sacct calls per poll (goal 1), and how many cells have a finished record.
2. 10,002 cells (1,667 policies x h100, a100 x 3 builds) submitted held: `sweep` time, sbatch calls and arrays,
   the process's peak memory; `status` on that manifest (time, sacct calls, memory; then again, and once with
   its fingerprint-key cache deleted, which composes every policy); `collect` of its records;
   then the same cells through hydra-submitit-launcher in the same run (one multirun per partition and
   MaxArraySize chunk, `cell=range(a,b)`, all started at once, timed until every task is submitted and queued;
   a multirun of more than MaxArraySize tasks is refused by sbatch). Goal: sweep <= 0.3x Hydra's time.
Writes bench/results/scale.json.

    .venv/bin/python bench/scale.py [--skip-run | --only-run]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.submit import (  # noqa: E402
    BUILDS,
    GPUS,
    SMALL,
    calls,
    counting_wrappers,
    hydra_app,
    hydra_command,
    manifest_arrays,
    queued,
    submitted_tasks,
    tool_conf,
)
from orchestrator.launchers.slurm.limits import cluster_limits  # noqa: E402


def timed(env: dict[str, str], *args: str, timeout: float = 3600) -> dict:
    """An export-matrix command under /usr/bin/time: its wall seconds and peak RSS."""
    done = subprocess.run(["/usr/bin/time", "-f", "TIME %e %M", sys.executable, "-m", "orchestrator.cli", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode not in (0, 1):
        raise SystemExit(f"export-matrix {args[0]} exited {done.returncode}:\n{done.stderr[-3000:]}")
    seconds, kib = done.stderr.strip().splitlines()[-1].split()[1:]
    return {"s": float(seconds), "peak_rss_mib": round(int(kib) / 1024, 1), "rc": done.returncode,
            "stdout": done.stdout, "stderr": done.stderr}


def records(out: Path) -> dict[str, int]:
    found: dict[str, int] = {}
    for path in out.glob("cells/*/*/*/record.json"):
        status = json.loads(path.read_text())["status"]
        found[status] = found.get(status, 0) + 1
    return found


def run_2500(env: dict[str, str], bin_dir: Path, conf: Path, work: Path) -> dict:
    out = work / "run2500"
    args = ["--config-dir", str(conf), "matrix=cheap", "matrix.gpus=[h100]", "exporter=noop", f"out_dir={out}",
            *(o for o in SMALL if o.startswith("gpus.h100.")), "gpus.h100.slurm.gres=null"]
    sbatch_before = calls(bin_dir, "sbatch")
    sweep = timed(env, "sweep", *args, f"ckpt_dir={out / 'ckpts'}", "launcher=slurm", "launcher.prepare=null")
    arrays = json.loads((out / "manifest.json").read_text())["sweeps"]
    arrays = [a for sweep_entry in arrays.values() for a in sweep_entry["arrays"]]
    start = time.perf_counter()
    waited = timed(env, "wait", "--config-dir", str(conf), f"out_dir={out}", "--poll-s", "10", timeout=7200)
    run_s = time.perf_counter() - start
    sacct_before = calls(bin_dir, "sacct")
    timed(env, "wait", "--config-dir", str(conf), f"out_dir={out}", "--poll-s", "1")  # all ended: one poll
    wait_sacct = calls(bin_dir, "sacct") - sacct_before
    sacct_before = calls(bin_dir, "sacct")
    status = timed(env, "status", *args)
    status_sacct = calls(bin_dir, "sacct") - sacct_before
    status_again = timed(env, "status", *args)  # what a user sees from the second look on
    found = records(out)
    return {"cells": 834 * len(BUILDS), "arrays": len(arrays), "array_sizes": [a["cells"] for a in arrays],
            "sbatch_calls": calls(bin_dir, "sbatch") - sbatch_before, "sweep_s": sweep["s"],
            "run_until_all_recorded_s": round(run_s, 1), "wait_rc": waited["rc"], "records": found,
            "recorded": sum(found.values()), "sacct_calls_per_wait_poll": wait_sacct,
            "status_s": status["s"], "status_again_s": status_again["s"], "status_sacct_calls": status_sacct}


def hydra_chunks(env: dict[str, str], bin_dir: Path, app: Path, work: Path, jobs_per_gpu: int, chunk: int,
                 timeout_s: float = 1800) -> dict:
    """hydra-submitit-launcher, one multirun per partition and chunk of at most `chunk` tasks, all at once."""
    work.mkdir(parents=True)
    sbatch_before = calls(bin_dir, "sbatch")
    runs = [(gpu, lo, min(lo + chunk, jobs_per_gpu)) for gpu in GPUS for lo in range(0, jobs_per_gpu, chunk)]
    logs, procs, arrays, done = {}, {}, {}, {}
    start = time.perf_counter()
    for gpu, lo, hi in runs:
        key = f"{gpu}-{lo}"
        logs[key] = (work / f"{key}.log").open("w")
        procs[key] = subprocess.Popen(hydra_command(app, [f"cell=range({lo},{hi})"], work / f"sweep-{key}", gpu),
                                      cwd=app, env=env, stdout=logs[key], stderr=subprocess.STDOUT)
    try:
        while len(done) < len(runs):
            time.sleep(0.5)
            for gpu, lo, hi in runs:
                key = f"{gpu}-{lo}"
                if key in done:
                    continue
                if procs[key].poll() is not None or time.perf_counter() - start > timeout_s:
                    raise SystemExit(f"hydra multirun {key} exited or timed out:\n"
                                     f"{(work / f'{key}.log').read_text()[-2000:]}")
                count, array = submitted_tasks(work / f"sweep-{key}" / ".submitit")
                if array:
                    arrays[key] = array
                if count == hi - lo and queued([array]) == hi - lo:
                    done[key] = time.perf_counter() - start
    finally:
        for key, proc in procs.items():
            proc.kill()
            proc.wait()
            logs[key].close()
        if arrays:
            subprocess.run(["scancel", *arrays.values()], check=True)
    return {"submit_s": round(max(done.values()), 2), "multiruns": len(runs),
            "sbatch_calls": calls(bin_dir, "sbatch") - sbatch_before}


def submit_10000(env: dict[str, str], bin_dir: Path, conf: Path, app: Path, work: Path, policies: int) -> dict:
    out = work / "held10000"
    cells = policies * len(GPUS) * len(BUILDS)
    args = ["--config-dir", str(conf), "matrix=cheap", "exporter=noop", f"out_dir={out}", *SMALL]
    sbatch_before = calls(bin_dir, "sbatch")
    sweep = timed(env, "sweep", *args, f"ckpt_dir={out / 'ckpts'}", "launcher=slurm", "launcher.prepare=null",
                  "+launcher.sbatch.hold=true")
    sbatch_calls = calls(bin_dir, "sbatch") - sbatch_before
    arrays = manifest_arrays(out)
    in_queue = queued(arrays)
    sacct_before = calls(bin_dir, "sacct")
    status = timed(env, "status", *args)
    status_sacct = calls(bin_dir, "sacct") - sacct_before
    status_again = timed(env, "status", *args)
    (out / ".fingerprints.json").unlink()  # the cache gone: every cell composed through Hydra again
    status_cold = timed(env, "status", *args)
    plain = [a for a in args if not a.startswith(("matrix", "gpus."))]  # the default matrix: no policy composed
    collect = timed(env, "collect", *plain)
    collect_again = timed(env, "collect", *plain)
    subprocess.run(["scancel", *arrays], check=True)
    time.sleep(35)  # MinJobAge: the cancelled tasks leave slurmctld's job count
    hydra = hydra_chunks(env, bin_dir, app, work / "hydra", policies * len(BUILDS), cluster_limits().array_tasks)
    return {"cells": cells, "in_queue": in_queue, "sweep_s": sweep["s"], "sweep_peak_rss_mib": sweep["peak_rss_mib"],
            "sbatch_calls": sbatch_calls, "arrays": len(arrays), "status_s": status["s"],
            "status_again_s": status_again["s"], "status_without_key_cache_s": status_cold["s"],
            "status_sacct_calls": status_sacct,
            "status_peak_rss_mib": status["peak_rss_mib"], "collect_s": collect["s"],
            "collect_again_s": collect_again["s"], "collect_peak_rss_mib": collect["peak_rss_mib"],
            "hydra_values_submit_s": hydra["submit_s"], "hydra_multiruns": hydra["multiruns"],
            "hydra_sbatch_calls": hydra["sbatch_calls"], "ratio_vs_hydra": round(sweep["s"] / hydra["submit_s"], 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parts = parser.add_mutually_exclusive_group()
    parts.add_argument("--skip-run", action="store_true", help="only the 10,000-cell submission")
    parts.add_argument("--only-run", action="store_true", help="only the 2,500-cell run")
    parser.add_argument("--policies", type=int, default=1667, help="part 2: cells = policies x 2 GPUs x 3 builds")
    args = parser.parse_args()
    limits = cluster_limits()
    result: dict = {"date": date.today().isoformat(), "cpus": os.cpu_count(),
                    "limits": {"MaxArraySize": limits.max_array_size, "MaxJobCount": limits.max_job_count}}
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        work = Path(tmp)
        bin_dir = counting_wrappers(work)
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "HF_HUB_OFFLINE": "1",
               "HYDRA_FULL_ERROR": "1", "COLUMNS": "200"}
        if not args.skip_run:
            result["run_2500"] = run_2500(env, bin_dir, tool_conf(work / "c2500", 834), work)
            print(json.dumps(result["run_2500"]), flush=True)
        if not args.only_run:
            conf = tool_conf(work / "c10000", args.policies)
            app = hydra_app(work / "h10000", args.policies, "values")
            result["submit_10000"] = submit_10000(env, bin_dir, conf, app, work, args.policies)
            print(json.dumps(result["submit_10000"]), flush=True)
    path = ROOT / "bench" / "results" / "scale.json"
    if path.exists():  # the part not run keeps its last figures, with the date they were measured
        last = json.loads(path.read_text())
        for part in ("run_2500", "submit_10000"):
            if part not in result and last.get(part):
                result[part] = {"date": last.get("date"), **last[part]} if "date" not in last[part] else last[part]
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
