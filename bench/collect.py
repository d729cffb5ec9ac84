"""How long `export-matrix collect` takes, as a whole new process, for 1,000 and 10,000 records.

    .venv/bin/python bench/collect.py [--sizes 1000 10000] [--runs 3] [--dir DIR]

Writes synthetic record.json trees (the real schema, ~3 KB each like a real record with its fingerprint and log
tail; the seed's messages, passes, slow passes, timeouts, unknown errors and running cells, seeded) under DIR (a
temp dir by default). For each size it times, side by side in one run: reading every record.json (the first step
of a collect, in this process) and the whole `export-matrix collect` command in a new process (Python's start,
imports, read, classify, render, write), the median of --runs. The guard: `whole_command_10k_s` < 1.5 s on the
project's 2-core machine. Writes bench/results/collect.json. The files are freshly written, so they are in the
page cache: a cold read from network storage is slower (`collect.read_threads` helps there).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.atomic import write_bytes_atomic  # noqa: E402
from orchestrator.collect.records import load_records  # noqa: E402

GUARD_10K_S = 1.5
GPUS = ["h100", "a100", "h200", "l40s"]
BUILDS = {"stock": [], "pr202785": ["pytorch/pytorch#202785"], "pr202925": ["pytorch/pytorch#202925"],
          "nightly": [], "pr202785_202925": ["pytorch/pytorch#202785", "pytorch/pytorch#202925"]}
ERRORS = {
    "row2": ("compile-model", "torch._inductor.exc.InductorError: LoweringException: NoValidChoicesError: No choices "
             "to select. Provided reason: No choices exist for backend. please consider adding ATEN into "
             "max_autotune_gemm_backends config (defined in torch/_inductor/config.py) to allow at least one choice."),
    "row3": ("compile-model", "torch._inductor.exc.InductorError: RuntimeError: Failed to run autotuning code block: "
             "CUDA out of memory. Tried to allocate {n:.2f} GiB. GPU 0 has a total capacity of 79.25 GiB of which "
             "1.50 GiB is free."),
    "row5": ("check", "RuntimeError: The exported policy does not reproduce its test case ({n:.2e} > 0.075). "
             "Export it again on this device."),
    "row6": ("trace", "ValueError: Exporting LingBot-VLA v2 needs a vision_grid (see `predict_action_chunk`)."),
    "row7": ("save", "SerializeError: Unsupported getattr attribute function_const_func_spec{i} with type TreeSpec"),
    "row8": ("reload", "Node.meta wrap_with_autocast_{i} is missing val field"),
    "new": ("export", "KeyError: 'model.layers.{i}.mlp' | see `lerobot_export.py` <line {i}>"),
}
SCENARIOS = ["pass"] * 8 + ["slow"] * 3 + list(ERRORS) + ["timeout", "running"]
LOG_LINE = "Traceback (most recent call last):\n  File \"lerobot/scripts/lerobot_export.py\", line 212, in {step}\n"


def record(policy: str, gpu: str, build: str, rng: random.Random) -> dict:
    scenario = rng.choice(SCENARIOS)
    data = {
        "cell": f"{policy}/{gpu}/{build}", "policy": policy, "gpu": gpu, "torch": build, "exporter": "lerobot_cuda",
        "status": "passed", "attempt": 1, "failed_step": None, "error": None, "max_diff": None, "tolerance": None,
        "margin": None, "make_random_s": round(rng.uniform(5, 60), 2), "export_s": round(rng.uniform(60, 900), 2),
        "eager_ms": None, "exported_ms": None, "speedup": None, "peak_gpu_mib": round(rng.uniform(2e3, 8e4), 1),
        "fixes": BUILDS[build], "checkpoint": f"/ckpt/random_{policy}",
        "versions": {"python": "3.12.1", "torch": "2.15.0", "executorch": "1.6.0", "lerobot": "0.6.1",
                     "transformers": "5.22.1", "gpu_name": f"NVIDIA {gpu.upper()}", "gpu_capability": "sm_90",
                     "gpu_driver": "580.65"},
        "command": ["lerobot-export", "--backend.type=executorch_cuda", f"--policy.path=/ckpt/random_{policy}",
                    f"--output_dir=/out/cells/{policy}/{gpu}/{build}/bundle", "--task=pick up the cube"],
        "started_at": "2026-12-02T16:28:13+00:00", "ended_at": "2026-12-02T16:41:02+00:00",
        "logs": {"export": "export.log", "make_random": "make_random.log"},
        "fingerprint": {"key": f"{rng.getrandbits(64):016x}", "env": {"freeze": f"{rng.getrandbits(64):016x}",
                        "python": "/envs/stock/bin/python", "python_version": "3.12.1"},
                        "configs": {"gpu": {"label": gpu.upper(), "slurm": {"partition": gpu, "gres": f"gpu:{gpu}:1",
                                                                              "cpus_per_task": 16, "mem_gb": 200}},
                                    "policy": {"checkpoint": {"random": {"type": policy, "overrides": {}}},
                                               "task": "pick up the cube", "timeout_min": 60}}},
        "job_id": str(rng.randint(10_000, 99_999)),
    }
    tail = f"Exporting /ckpt/random_{policy} for executorch_cuda into /out/cells/{policy}/{gpu}/{build}/bundle\n"
    if scenario in ("pass", "slow"):
        diff, tol = rng.uniform(0.001, 0.07), 0.075
        eager, exported = rng.uniform(20, 200), 0.0
        exported = eager / (rng.uniform(0.5, 0.95) if scenario == "slow" else rng.uniform(1.0, 3.0))
        data.update(max_diff=diff, tolerance=tol, margin=diff / tol, eager_ms=eager, exported_ms=exported,
                    speedup=eager / exported)
        tail += f"Exported policy test case: largest difference {diff:.2e} (tolerance {tol:g})\n" * 3
    elif scenario == "timeout":
        data.update(status="timeout", failed_step="export", error="the export ran past timeout_min=60")
    elif scenario == "running":
        data.update(status="running", ended_at=None)
    else:
        step, message = ERRORS[scenario]
        message = message.format(n=rng.uniform(0.08, 3), i=rng.randint(0, 9))
        data.update(status="failed", failed_step=step, error=message)
        if scenario == "row5":
            data.update(max_diff=0.0953, tolerance=0.075, margin=0.0953 / 0.075)
        tail += LOG_LINE.format(step=step) + message + f"\nerror: The {step} step failed (see above).\n"
    data["log_tail"] = tail * 4
    return data


def generate(root: Path, count: int, seed: int = 0) -> float:
    rng = random.Random(seed)
    start = time.perf_counter()
    per_policy = len(GPUS) * len(BUILDS)
    policies = [f"policy{i:05d}" for i in range(-(-count // per_policy))]
    written = 0
    for policy in policies:
        for gpu in GPUS:
            for build in BUILDS:
                if written == count:
                    break
                cell = root / "cells" / policy / gpu / build
                cell.mkdir(parents=True, exist_ok=True)
                (cell / "record.json").write_text(json.dumps(record(policy, gpu, build, rng), indent=2))
                written += 1
    return time.perf_counter() - start


def whole_command(root: Path) -> float:
    """Seconds of one `export-matrix collect` as a new process."""
    start = time.perf_counter()
    subprocess.run([str(Path(sys.executable).parent / "export-matrix"), "collect", f"out_dir={root}"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def bench(root: Path, count: int, runs: int) -> dict:
    start = time.perf_counter()
    cells, _ = load_records(root)
    read = time.perf_counter() - start
    assert len(cells) == count, f"read {len(cells)} of {count} records"
    whole_command(root)  # the first writes every output; the timed ones rewrite what changed (nothing)
    (root / "matrix.md").unlink()  # one output to write again, as after a rerun
    timed = [whole_command(root) for _ in range(runs)]
    return {"records": count, "read_s": round(read, 3), "whole_command_s": round(statistics.median(timed), 3),
            "whole_command_runs_s": [round(t, 3) for t in timed]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="where the synthetic trees go (default: a temp dir)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "collect.json")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="collect-bench-", dir=args.dir))
    results = []
    try:
        for count in args.sizes:
            root = base / str(count)
            made = generate(root, count)
            result = {**bench(root, count, args.runs), "generate_s": round(made, 2)}
            results.append(result)
            print(f"{count:>7} records: read {result['read_s']:.2f} s, whole command {result['whole_command_s']:.2f} s"
                  f" (runs {', '.join(f'{t:.2f}' for t in result['whole_command_runs_s'])})", flush=True)
            shutil.rmtree(root)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}
    report = {"date": time.strftime("%Y-%m-%d"), "machine": machine, "results": results}
    ten_k = next((r["whole_command_s"] for r in results if r["records"] == 10_000), None)
    if ten_k is not None:
        report["whole_command_10k_s"] = ten_k
        report["guard_s"] = GUARD_10K_S
        verdict = 'met' if ten_k < GUARD_10K_S else 'MISSED'
        print(f"whole_command_10k_s {ten_k:.2f} (guard < {GUARD_10K_S} s: {verdict})")
    write_bytes_atomic(args.out, json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
