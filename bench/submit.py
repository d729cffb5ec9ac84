"""Submission cost on Slurm: export-matrix's job arrays vs Hydra multiruns through hydra-submitit-launcher.

Needs a Slurm cluster (`sudo scripts/slurm-local up` gives one on this machine) and hydra-submitit-launcher (the
`dev` extra). Every job is submitted held (`sbatch --hold`) and cancelled once it is in, so nothing runs.
Wrappers `sbatch` and `sacct` first on PATH count the calls. Each repeat runs every side, in the opposite order
to the repeat before (A B C, C B A, ...).

1,500 cheap cells (issue 7): 250 policies (`checkpoint: {path: ...}`, nothing to build) x h100, a100 x 3 builds,
an exporter that only starts Python (`{python} -c pass`):
  - `export-matrix sweep launcher=slurm`: the whole command's wall time (Python start, Hydra composition of 250
    policies, fingerprints, 1,500 pending records, the arrays, the manifest) and its sbatch calls;
  - the same 1,500 as a plain Hydra app whose task only writes its record, with hydra/launcher=submitit_slurm,
    in two shapes: `groups` (config groups policy/, torch/, gpu/ holding the same files, swept with
    `policy=glob(*) torch=glob(*)`) and `values` (no groups, `cell=range(0,750)`: the least Hydra composes per
    job). The launcher takes one set of resources per multirun, so one multirun per partition, both started at
    once (each blocks until its jobs end, as a user backgrounds them); timed from their start until every job
    is submitted (sbatch answered, each task's pickle in place) and squeue lists it, then killed;
  - `export-matrix status` on the 1,500-cell manifest: its sacct calls and wall time (the median of 3 runs).
Both sides ask for the same resources: partition, gres gpu:<kind>:1, 1 CPU, 3 GB, 65 min, --requeue,
USR2 30 s before the limit, at most 64 tasks of an array at once.

The tracking matrix (96 cells, the earlier figures): `sweep launcher=slurm` vs one `sbatch` per cell through
submitit (executor.submit per cell, no batch; the submissions alone are timed), and `status` on its manifest.
Torch builds are this interpreter with the tests' stand-in lerobot-export, as in the tests.

    .venv/bin/python bench/submit.py [--repeats 2] [--policies 250]
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
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GPUS = {"h100": "gpu:h100:1", "a100": "gpu:a100:1"}
BUILDS = ("stock", "pr202785", "pr202925")
SMALL = [f"gpus.{g}.slurm.{k}={v}" for g in GPUS for k, v in (("cpus_per_task", 1), ("mem_gb", 3))]
TIMEOUT_MIN = 30  # each policy's; a job's --time is 2 x 30 + 5 = 65 min on both sides
JOB_TIME_MIN = 2 * TIMEOUT_MIN + 5
PARALLELISM = 64
SIGNAL_DELAY_S = 30
STATUS_RUNS = 3  # status is timed this many times per repeat (the median is its figure): this machine is noisy
HYDRA_KINDS = ("groups", "values")
HYDRA_APP = f'''
import json
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig

BUILDS = {list(BUILDS)!r}


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def cell(cfg):
    """The job body: write the cell's record."""
    if "cell" in cfg:  # the values app: cell i is policy i // 3, build i % 3
        policy, gpu, torch = f"p{{cfg.cell // len(BUILDS):04d}}", cfg.gpu, BUILDS[cfg.cell % len(BUILDS)]
    else:
        choices = HydraConfig.get().runtime.choices
        policy, gpu, torch = choices["policy"], choices["gpu"], choices["torch"]
    cell_dir = Path(cfg.out_dir) / "cells" / policy / gpu / torch
    cell_dir.mkdir(parents=True, exist_ok=True)
    (cell_dir / "record.json").write_text(json.dumps({{"cell": f"{{policy}}/{{gpu}}/{{torch}}", "status": "passed"}}))


if __name__ == "__main__":
    cell()
'''


# ------------------------------------------------------------------ set-up -----

def counting_wrappers(work: Path) -> Path:
    """`sbatch` and `sacct` first on PATH: each call appends its arguments to bin/<tool>.calls, then runs it."""
    bin_dir = work / "bin"
    bin_dir.mkdir()
    for tool in ("sbatch", "sacct"):
        real = shutil.which(tool)
        if real is None:
            raise SystemExit(f"{tool} is not on PATH: start a cluster first (sudo scripts/slurm-local up)")
        wrapper = bin_dir / tool
        wrapper.write_text(f'#!/bin/sh\necho "$*" >> {bin_dir / f"{tool}.calls"}\nexec {real} "$@"\n')
        wrapper.chmod(0o755)
    return bin_dir


def calls(bin_dir: Path, tool: str) -> int:
    path = bin_dir / f"{tool}.calls"
    return len(path.read_text().splitlines()) if path.exists() else 0


def build_file(name: str) -> dict:
    return {"python": sys.executable, "fixes": [],
            "env": {"PATH": f"{ROOT / 'tests' / 'standin'}:{os.environ['PATH']}"}}


def policy_file() -> dict:
    return {"checkpoint": {"path": "/nonexistent"}, "task": None, "export_args": [], "timeout_min": TIMEOUT_MIN,
            "env": {}}


def policy_names(n: int) -> list[str]:
    return [f"p{i:04d}" for i in range(n)]


def tool_conf(work: Path, policies: int) -> Path:
    """A --config-dir with `matrix=cheap` (policies x h100, a100 x 3 builds) and `exporter=noop`."""
    conf = work / "tool-conf"
    for group in ("policy", "torch", "matrix", "exporter"):
        (conf / group).mkdir(parents=True)
    names = policy_names(policies)
    for name in names:
        (conf / "policy" / f"{name}.yaml").write_text(json.dumps(policy_file()))
    for name in BUILDS:
        (conf / "torch" / f"{name}.yaml").write_text(json.dumps(build_file(name)))
    (conf / "exporter" / "noop.yaml").write_text(json.dumps({"command": ["{python}", "-c", "pass"]}))
    (conf / "matrix" / "cheap.yaml").write_text(json.dumps({"policies": names, "gpus": list(GPUS),
                                                            "torch": list(BUILDS), "exclude": [], "include": []}))
    return conf


def hydra_app(work: Path, policies: int, kind: str) -> Path:
    """The same cells as a plain Hydra app. `groups`: config groups policy/, torch/ and gpu/ holding the same
    files, swept with `policy=glob(*) torch=glob(*)`. `values`: no groups, an integer swept with
    `cell=range(0,N)` (the job maps it to its policy and build): the least Hydra can compose per job."""
    app = work / f"hydra-{kind}"
    (app / "conf").mkdir(parents=True)
    out_dir = str(work / f"hydra-{kind}-out")
    if kind == "values":
        (app / "conf" / "config.yaml").write_text(json.dumps({"cell": 0, "gpu": "h100", "out_dir": out_dir}))
    else:
        for group in ("policy", "torch", "gpu"):
            (app / "conf" / group).mkdir()
        for name in policy_names(policies):
            (app / "conf" / "policy" / f"{name}.yaml").write_text(json.dumps(policy_file()))
        for name in BUILDS:
            (app / "conf" / "torch" / f"{name}.yaml").write_text(json.dumps(build_file(name)))
        for gpu, gres in GPUS.items():
            (app / "conf" / "gpu" / f"{gpu}.yaml").write_text(json.dumps(
                {"exporter": "noop", "slurm": {"partition": gpu, "gres": gres, "cpus_per_task": 1, "mem_gb": 3}}))
        (app / "conf" / "config.yaml").write_text(json.dumps({
            "defaults": [{"policy": "p0000"}, {"torch": "stock"}, {"gpu": "h100"}, "_self_"], "out_dir": out_dir}))
    (app / "app.py").write_text(HYDRA_APP.lstrip())
    return app


def tracking_conf(work: Path) -> Path:
    conf = work / "tracking-conf" / "torch"
    conf.mkdir(parents=True)
    for name in BUILDS:
        (conf / f"{name}.yaml").write_text(json.dumps(build_file(name)))
    return conf.parent


# ------------------------------------------------------------------ sides ------

def cli(env: dict[str, str], *args: str) -> float:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"export-matrix {args[0]} failed:\n{done.stderr[-2000:]}")
    return time.perf_counter() - start


def manifest_arrays(out: Path) -> list[str]:
    return sorted({e["array"] for e in json.loads((out / "manifest.json").read_text())["cells"].values()})


def tool_side(env: dict[str, str], bin_dir: Path, conf: Path, out: Path, cells: int) -> dict:
    """`sweep launcher=slurm` of the cheap matrix, then `status` on its manifest (sacct counted), then scancel."""
    args = ["--config-dir", str(conf), "matrix=cheap", "exporter=noop", f"out_dir={out}", *SMALL]
    sbatch_before = calls(bin_dir, "sbatch")
    sweep_s = cli(env, "sweep", *args, f"ckpt_dir={out / 'ckpts'}", "launcher=slurm",
                  f"launcher.array_parallelism={PARALLELISM}", f"launcher.signal_delay_s={SIGNAL_DELAY_S}",
                  "+launcher.sbatch.hold=true")
    sbatch_calls = calls(bin_dir, "sbatch") - sbatch_before
    arrays = manifest_arrays(out)
    in_queue = queued(arrays)
    sacct_before = calls(bin_dir, "sacct")
    status_s = [cli(env, "status", *args) for _ in range(STATUS_RUNS)]
    sacct_calls = (calls(bin_dir, "sacct") - sacct_before) / STATUS_RUNS
    subprocess.run(["scancel", *arrays], check=True)
    if in_queue != cells:
        raise SystemExit(f"tool: squeue lists {in_queue} of {cells} jobs")
    return {"sweep_s": sweep_s, "sbatch_calls": sbatch_calls, "status_s": statistics.median(status_s),
            "status_runs_s": status_s, "sacct_calls": sacct_calls, "arrays": len(arrays)}


def queued(ids: list[str]) -> int:
    """How many jobs (array tasks one by one) squeue lists for these job ids."""
    done = subprocess.run(["squeue", "-h", "-r", "-o", "%i", "-j", ",".join(ids)], capture_output=True, text=True)
    return len(done.stdout.split())


def submitted_tasks(folder: Path) -> tuple[int, str | None]:
    """submitit's tasks whose pickle is in place (`<A>_<i>/<A>_<i>_submitted.pkl`), and their array id."""
    count, array = 0, None
    if not folder.is_dir():
        return 0, None
    for entry in os.scandir(folder):
        if entry.is_dir() and os.path.exists(os.path.join(entry.path, f"{entry.name}_submitted.pkl")):
            count += 1
            array = entry.name.split("_")[0]
    return count, array


def hydra_command(app: Path, sweep: list[str], sweep_dir: Path, gpu: str) -> list[str]:
    return [sys.executable, str(app / "app.py"), "-m", *sweep, f"gpu={gpu}", "hydra/launcher=submitit_slurm",
            f"hydra.sweep.dir={sweep_dir}", f"hydra.launcher.partition={gpu}", f"hydra.launcher.gres={GPUS[gpu]}",
            "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=3", f"hydra.launcher.timeout_min={JOB_TIME_MIN}",
            f"hydra.launcher.signal_delay_s={SIGNAL_DELAY_S}", f"hydra.launcher.array_parallelism={PARALLELISM}",
            f"hydra.launcher.name=hydra-{gpu}", "++hydra.launcher.additional_parameters={hold: true, requeue: true}"]


def hydra_side(env: dict[str, str], bin_dir: Path, app: Path, kind: str, work: Path, policies: int,
               timeout_s: float = 300) -> dict:
    """One multirun per partition (the launcher takes one set of resources per multirun), started together, as a
    user backgrounds them (each blocks until its jobs end). Timed from their start until every job of both is
    submitted (sbatch answered, each task's pickle in place) and listed by squeue; then they are killed."""
    jobs = policies * len(BUILDS)
    sweep = [f"cell=range(0,{jobs})"] if kind == "values" else ["policy=glob(*)", "torch=glob(*)"]
    work.mkdir(parents=True)
    sbatch_before = calls(bin_dir, "sbatch")
    logs = {gpu: (work / f"{gpu}.log").open("w") for gpu in GPUS}
    start = time.perf_counter()
    procs = {gpu: subprocess.Popen(hydra_command(app, sweep, work / f"sweep-{gpu}", gpu), cwd=app, env=env,
                                   stdout=logs[gpu], stderr=subprocess.STDOUT) for gpu in GPUS}
    done: dict[str, float] = {}
    arrays: dict[str, str] = {}
    try:
        while len(done) < len(GPUS):
            time.sleep(0.2)
            elapsed = time.perf_counter() - start
            for gpu, proc in procs.items():
                if gpu in done:
                    continue
                if proc.poll() is not None or elapsed > timeout_s:
                    tail = (work / f"{gpu}.log").read_text()[-2000:]
                    raise SystemExit(f"hydra multirun ({kind}, {gpu}) exited or took over {timeout_s:.0f} s:\n{tail}")
                count, array = submitted_tasks(work / f"sweep-{gpu}" / ".submitit")
                if array:
                    arrays[gpu] = array
                if count == jobs and queued([array]) == jobs:
                    done[gpu] = time.perf_counter() - start
    finally:
        for gpu, proc in procs.items():
            proc.kill()
            proc.wait()
            logs[gpu].close()
        if arrays:
            subprocess.run(["scancel", *arrays.values()], check=True)
    return {"submit_s": max(done.values()), "per_partition_s": done,
            "sbatch_calls": calls(bin_dir, "sbatch") - sbatch_before}


def one_sbatch_per_cell(out: Path, env: dict[str, str], conf: Path) -> tuple[float, list[str]]:
    """The 96-cell baseline: the same job bodies, submitted one sbatch each (what a loop of executor.submit does)."""
    sys.path.insert(0, str(ROOT))
    import submitit

    from orchestrator.config import compose_config
    from orchestrator.config.cells import resolve
    from orchestrator.config.schema import typed_launcher
    from orchestrator.launchers.slurm.cell_job import CellJob
    from orchestrator.launchers.slurm.submit import resources

    os.environ["PATH"] = env["PATH"]
    composed = compose_config(["matrix=tracking", f"out_dir={out}", "launcher=slurm", *SMALL], conf)
    specs = resolve(composed)
    settings = typed_launcher(composed.cfg.launcher)
    start = time.perf_counter()
    ids = []
    for spec in specs:
        res = resources(spec, settings)
        executor = submitit.AutoExecutor(folder=out / "submitit" / "%j", cluster="slurm")
        executor.update_parameters(timeout_min=res.time_min, cpus_per_task=res.cpus_per_task,
                                   mem_gb=float(res.mem_gb), slurm_partition=res.partition,
                                   slurm_gres=res.gres, slurm_additional_parameters={"hold": True})
        ids.append(executor.submit(CellJob(spec, 1, res.time_min * 60.0, 30, 1)).job_id)
    return time.perf_counter() - start, ids


def tracking(env: dict[str, str], bin_dir: Path, conf: Path, work: Path, repeat: int) -> dict:
    out = work / f"tracking-arrays{repeat}"
    before = calls(bin_dir, "sbatch")
    sweep_s = cli(env, "sweep", "--config-dir", str(conf), "matrix=tracking", f"out_dir={out}",
                  f"ckpt_dir={work / 'ckpts'}", "launcher=slurm", *SMALL, "+launcher.sbatch.hold=true")
    sbatch_calls = calls(bin_dir, "sbatch") - before
    before = calls(bin_dir, "sacct")
    status_s = cli(env, "status", "--config-dir", str(conf), f"out_dir={out}", "matrix=tracking", *SMALL)
    sacct_calls = calls(bin_dir, "sacct") - before
    subprocess.run(["scancel", *manifest_arrays(out)], check=True)
    per_cell_s, ids = one_sbatch_per_cell(work / f"tracking-per-cell{repeat}", env, conf)
    assert len(set(ids)) == 96, ids
    subprocess.run(["scancel", *ids], check=True)
    return {"arrays_sweep_s": sweep_s, "sbatch_calls_arrays": sbatch_calls, "per_cell_submit_s": per_cell_s,
            "status_s": status_s, "sacct_calls": sacct_calls}


# ------------------------------------------------------------------ report -----

def median(rows: list[dict], key: str) -> float:
    return round(statistics.median(r[key] for r in rows), 2)


def rounded(row: dict) -> dict:
    return {k: round(v, 3) if isinstance(v, float) else rounded(v) if isinstance(v, dict) else v
            for k, v in row.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--policies", type=int, default=250, help="cells = policies x 2 GPUs x 3 builds")
    args = parser.parse_args()
    cells = args.policies * len(GPUS) * len(BUILDS)
    started = time.perf_counter()
    rounds: list[dict] = []
    tracked: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-submit-") as tmp:
        work = Path(tmp)
        bin_dir = counting_wrappers(work)
        conf, conf96 = tool_conf(work, args.policies), tracking_conf(work)
        apps = {kind: hydra_app(work, args.policies, kind) for kind in HYDRA_KINDS}
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "HF_HUB_OFFLINE": "1",
               "HYDRA_FULL_ERROR": "1"}
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # set on the dev machine; a user's Python caches its bytecode
        for repeat in range(args.repeats):
            order = ["tool", *HYDRA_KINDS]
            order = order if repeat % 2 == 0 else order[::-1]
            sides = {}
            for side in order:
                where = work / f"{side}{repeat}"
                sides[side] = (tool_side(env, bin_dir, conf, where, cells) if side == "tool" else
                               hydra_side(env, bin_dir, apps[side], side, where, args.policies))
            row = {"repeat": repeat + 1, "order": order, **{f"tool_{k}": v for k, v in sides["tool"].items()}}
            for kind in HYDRA_KINDS:
                row.update({f"hydra_{kind}_{k}": v for k, v in sides[kind].items()})
                row[f"ratio_{kind}"] = row["tool_sweep_s"] / row[f"hydra_{kind}_submit_s"]
            rounds.append(row)
            print(f"repeat {repeat + 1} ({', '.join(order)}): sweep {row['tool_sweep_s']:.2f} s "
                  f"({row['tool_sbatch_calls']} sbatch); "
                  + "; ".join(f"hydra {k} {row[f'hydra_{k}_submit_s']:.2f} s ({row[f'hydra_{k}_sbatch_calls']} "
                              f"sbatch), ratio {row[f'ratio_{k}']:.3f}" for k in HYDRA_KINDS)
                  + f"; status {row['tool_status_s']:.2f} s ({row['tool_sacct_calls']} sacct)", flush=True)
            tracked.append(tracking(env, bin_dir, conf96, work, repeat))
    signatures = len(GPUS)  # partition and gres differ per GPU kind; every other resource is the same
    ratios = {kind: statistics.median(r[f"ratio_{kind}"] for r in rounds) for kind in HYDRA_KINDS}
    goals = {"sbatch_calls_one_per_signature": all(r["tool_sbatch_calls"] == signatures for r in rounds),
             **{f"ratio_vs_hydra_{kind}_le_0.5": ratios[kind] <= 0.5 for kind in HYDRA_KINDS},
             "sacct_calls_per_status_1": all(r["tool_sacct_calls"] == 1 for r in rounds),
             "status_lt_1s": median(rounds, "tool_status_s") < 1.0}
    summary = {
        "date": date.today().isoformat(), "cpus": os.cpu_count(),
        "slurm": subprocess.run(["sinfo", "--version"], capture_output=True, text=True).stdout.strip(),
        "cells": cells, "policies": args.policies, "gpus": list(GPUS), "builds": list(BUILDS),
        "resource_signatures": signatures, "repeats": [rounded(r) for r in rounds],
        "median": {"tool_sweep_s": median(rounds, "tool_sweep_s"), "tool_status_s": median(rounds, "tool_status_s"),
                   **{f"hydra_{k}_submit_s": median(rounds, f"hydra_{k}_submit_s") for k in HYDRA_KINDS},
                   **{f"ratio_vs_hydra_{k}": round(ratios[k], 3) for k in HYDRA_KINDS}},
        "goals": {"sbatch_calls": f"one per resource signature ({signatures})", "ratio": "<= 0.5",
                  "sacct_calls_per_status": 1, "status_s": "< 1", "met": goals},
        "tracking_96": {
            "cells": 96, "sbatch_calls_per_cell": 96, "repeats": [rounded(t) for t in tracked],
            **{f"{k}_median": median(tracked, k) for k in ("arrays_sweep_s", "per_cell_submit_s", "status_s")}},
        "bench_s": round(time.perf_counter() - started, 1),
    }
    target = ROOT / "bench" / "results" / "submit.json"
    target.parent.mkdir(exist_ok=True)
    target.write_text(json.dumps(summary, indent=2) + "\n")
    report(summary, rounds, tracked, ratios, goals)


def report(summary: dict, rounds: list[dict], tracked: list[dict], ratios: dict, goals: dict) -> None:
    mark = {True: "met", False: "MISSED"}
    each = ", ".join
    print(f"\n{summary['cells']} cells ({summary['policies']} policies x {len(GPUS)} GPUs x {len(BUILDS)} builds), "
          f"{len(rounds)} repeats, {summary['bench_s']} s in all")
    rows = [("", "per repeat", "median", "goal"),
            ("sbatch calls: sweep launcher=slurm", each(str(r["tool_sbatch_calls"]) for r in rounds), "",
             f"one per signature ({summary['resource_signatures']}): {mark[goals['sbatch_calls_one_per_signature']]}"),
            *((f"sbatch calls: hydra {k}", each(str(r[f"hydra_{k}_sbatch_calls"]) for r in rounds), "", "")
              for k in HYDRA_KINDS),
            ("submission s: sweep launcher=slurm", each(f"{r['tool_sweep_s']:.2f}" for r in rounds),
             f"{summary['median']['tool_sweep_s']:.2f}", ""),
            *((f"submission s: hydra {k}", each(f"{r[f'hydra_{k}_submit_s']:.2f}" for r in rounds),
               f"{summary['median'][f'hydra_{k}_submit_s']:.2f}", "") for k in HYDRA_KINDS),
            *((f"ratio sweep / hydra {k}", each(f"{r[f'ratio_{k}']:.3f}" for r in rounds), f"{ratios[k]:.3f}x",
               f"<= 0.5x: {mark[goals[f'ratio_vs_hydra_{k}_le_0.5']]}") for k in HYDRA_KINDS),
            ("sacct calls per status poll", each(str(r["tool_sacct_calls"]) for r in rounds), "",
             f"1: {mark[goals['sacct_calls_per_status_1']]}"),
            ("status s (1,500-cell manifest, median of 3)", each(f"{r['tool_status_s']:.2f}" for r in rounds),
             f"{summary['median']['tool_status_s']:.2f}", f"< 1 s: {mark[goals['status_lt_1s']]}"),
            ("tracking 96: sbatch calls arrays", each(str(t["sbatch_calls_arrays"]) for t in tracked), "", "vs 96"),
            ("tracking 96: sweep s (arrays)", each(f"{t['arrays_sweep_s']:.2f}" for t in tracked),
             f"{summary['tracking_96']['arrays_sweep_s_median']:.2f}", ""),
            ("tracking 96: 96 sbatch s (submissions alone)", each(f"{t['per_cell_submit_s']:.2f}" for t in tracked),
             f"{summary['tracking_96']['per_cell_submit_s_median']:.2f}", ""),
            ("tracking 96: status s", each(f"{t['status_s']:.2f}" for t in tracked),
             f"{summary['tracking_96']['status_s_median']:.2f}", "")]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths, strict=True)) + "  " + row[3])


if __name__ == "__main__":
    main()
