"""How long `export-matrix collect` takes for 1,000 / 10,000 / 100,000 records.

    .venv/bin/python bench/collect.py [--sizes 1000 10000 100000] [--dir DIR] [--keep]

Writes synthetic record.json trees (the real schema, ~3 KB each like a real record with its fingerprint and log
tail; the seed's messages, passes, slow passes, timeouts, unknown errors and running cells, seeded) under DIR (a
temp dir by default), then times whole collects (the CLI's `run_collect`, outputs written), side by side in one run:
every record.json parsed (one thread, and 4) for scale; the first collect (no index, no slices); one when nothing
changed; one after a single record was rewritten (as a job writes it: renamed into place, its gpu directory
stamped); one with nothing changed after that (the index then has a delta); after 1 % of the records were rewritten
at random (scattered: three times, other records each time, the median kept); after every record of 1 % worth of
policies was (clustered: a rerun of whole policies); one record again (the index then has a large delta); 1 %
scattered again, this collect also folding the delta into a new index base (as one does once the delta passes its
share of the rows: one in ten 1 % reruns); and the same records with every policy computed again, checked
byte-equal; then, each as the first collect of a new process (as the CLI runs it: the collects above run in one
process, after others), one when nothing changed, three after 1 % scattered rewrites (the median kept) and one
more writing a new index base, timed inside the process and as the whole process (Python's start and imports
too). Prints a line per size and the growth factor per 10x records, and writes bench/results/collect.json.
The files are freshly written, so they are in the page cache: a cold read from network storage will be slower.
"""

from __future__ import annotations

import argparse
import contextlib
import io
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
from orchestrator.collect import OUTPUTS, run_collect  # noqa: E402
from orchestrator.collect import index as index_module  # noqa: E402
from orchestrator.collect.index import INDEX_DIR  # noqa: E402
from orchestrator.collect.last_collect import LAST_FILE  # noqa: E402
from orchestrator.collect.records import load_records  # noqa: E402
from orchestrator.collect.slice_store import STORE_FILE  # noqa: E402
from orchestrator.record import mark_written  # noqa: E402

SCATTERED_RUNS = 3  # collects after 1 % of the records were rewritten, each time other records
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


def rewrite(root: Path, paths: list[Path], seed: int) -> int:
    """Rewrite these records as jobs write them (renamed into place, the gpu directory stamped), as a rerun of
    those cells would."""
    rng = random.Random(seed)
    for path in paths:
        policy, gpu, build = path.parts[-4:-1]
        tmp = path.with_name(".record.json.tmp")
        tmp.write_text(json.dumps(record(policy, gpu, build, rng), indent=2))
        os.replace(tmp, path)
        mark_written(path.parent)
    time.sleep(0.05)  # past the file system's clock tick: else the next collect reads them again (index.py)
    return len(paths)


def run(root: Path) -> float:
    """One `export-matrix collect out_dir=root`, as the CLI runs it (outputs written), in seconds."""
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert run_collect([f"out_dir={root}"], None) == 0
    return time.perf_counter() - start


NEW_PROCESS = "\n".join([  # a collect as the CLI runs it: the first in its process (argv: repo root, out dir)
    "import contextlib, io, sys, time",
    "sys.path.insert(0, sys.argv[1])",
    "from orchestrator.collect import index, run_collect",
    "index.DELTA_SHARE = float(sys.argv[3])",
    "start = time.perf_counter()",
    "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):",
    "    assert run_collect([f'out_dir={sys.argv[2]}'], None) == 0",
    "print(time.perf_counter() - start)",
])


def run_in_new_process(root: Path, delta_share: float = index_module.DELTA_SHARE) -> tuple[float, float]:
    """(the whole process's seconds: interpreter, imports, collect, exit; its collect's seconds). The collects above
    run in one process, after others: the first in a process takes longer (pandas' and Arrow's first calls, memory
    the allocator has not handed out yet)."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", NEW_PROCESS, str(ROOT), str(root), str(delta_share)],
                          capture_output=True, text=True, check=True)
    return time.perf_counter() - start, float(done.stdout.split()[-1])


def outputs(root: Path) -> dict[str, bytes]:
    return {name: (root / name).read_bytes() for name in OUTPUTS}


def bench(root: Path, count: int, rewrite_seed: int = 1) -> dict:
    timings = {}
    start = time.perf_counter()
    full_cells, _ = load_records(root, 1)
    timings["read_full"] = time.perf_counter() - start
    start = time.perf_counter()
    load_records(root, workers=4)
    timings["read_full_4_threads"] = time.perf_counter() - start
    assert len(full_cells) == count, (len(full_cells), count)
    shutil.rmtree(root / INDEX_DIR, ignore_errors=True)
    run(root)  # Hydra composes this config once; later collects get its settings by config digest
    shutil.rmtree(root / INDEX_DIR, ignore_errors=True)
    timings["first"] = run(root)  # no index, no slices: every record read, every policy computed
    timings["nothing_changed"] = run(root)
    paths = sorted(root.glob("cells/*/*/*/record.json"))
    rng = random.Random(rewrite_seed)
    rewrite(root, rng.sample(paths, 1), rewrite_seed)
    timings["one_record"] = run(root)
    timings["nothing_changed_after"] = run(root)
    runs = []
    for turn in range(SCATTERED_RUNS):  # the goal's case, on a shared machine: the median of a few
        scattered = rewrite(root, rng.sample(paths, max(count // 100, 1)), rewrite_seed + 10 * turn)
        runs.append(run(root))
    timings["scattered"] = statistics.median(runs)
    policies = sorted({path.parts[-4] for path in paths})
    per_policy = count / len(policies)
    picked = set(rng.sample(policies, max(round(count / 100 / per_policy), 1)))
    clustered = rewrite(root, [path for path in paths if path.parts[-4] in picked], rewrite_seed + 1)
    timings["clustered"] = run(root)
    rewrite(root, rng.sample(paths, 1), rewrite_seed + 2)
    timings["one_record_after"] = run(root)  # the index's delta now holds the rows of the last two changes
    rewrite(root, rng.sample(paths, max(count // 100, 1)), rewrite_seed + 3)
    share, index_module.DELTA_SHARE = index_module.DELTA_SHARE, 0.0  # as when the delta passes its share (one
    try:  # in ten 1 % reruns): this collect also writes a new base of the index
        timings["scattered_new_base"] = run(root)
    finally:
        index_module.DELTA_SHARE = share
    kept = outputs(root)
    (root / INDEX_DIR / STORE_FILE).unlink()
    (root / INDEX_DIR / LAST_FILE).unlink()  # else nothing changed since the last collect: nothing rendered
    timings["scratch_after"] = run(root)  # the same records, every policy computed again
    assert outputs(root) == kept, "kept slices changed an output"
    new_process = {"nothing_changed": [run_in_new_process(root)], "scattered": []}
    for turn in range(SCATTERED_RUNS):
        rewrite(root, rng.sample(paths, max(count // 100, 1)), rewrite_seed + 100 + turn)
        new_process["scattered"].append(run_in_new_process(root))
    rewrite(root, rng.sample(paths, max(count // 100, 1)), rewrite_seed + 200)
    new_process["scattered_new_base"] = [run_in_new_process(root, delta_share=0.0)]
    for case, measured in new_process.items():
        timings[f"new_process_{case}"] = statistics.median(collect for _, collect in measured)
        timings[f"new_process_{case}_whole"] = statistics.median(whole for whole, _ in measured)
    return {"records": count, "policies": len(policies), "scattered_records": scattered,
            "scattered_runs": [round(t, 3) for t in runs],
            "clustered_records": clustered, "clustered_policies": len(picked),
            **{k: round(v, 3) for k, v in timings.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000])
    parser.add_argument("--dir", type=Path, default=None, help="where the synthetic trees go (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the synthetic trees")
    parser.add_argument("--reuse", type=Path, default=None,
                        help="time the trees a --keep run left in this folder (<DIR>/<size>/) instead of writing new")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "collect.json")
    args = parser.parse_args()
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
    base = args.reuse or Path(tempfile.mkdtemp(prefix="collect-bench-", dir=args.dir))
    keep = args.keep or args.reuse is not None
    results = []
    try:
        for count in args.sizes:
            root = base / str(count)
            made = 0.0 if args.reuse else generate(root, count)
            # a reused tree already holds seed 1's rewrite: the same content again would be no change at all
            result = bench(root, count, time.time_ns() if args.reuse else 1)
            result["generate_s"] = round(made, 2)
            results.append(result)
            print(f"{count:>7} records ({result['policies']} policies)  full read {result['read_full']:6.2f} s "
                  f"(4 threads {result['read_full_4_threads']:5.2f} s)  collect: first {result['first']:6.2f} s, "
                  f"nothing changed {result['nothing_changed']:5.2f} s, one record {result['one_record']:5.2f} s, "
                  f"nothing changed after it {result['nothing_changed_after']:5.2f} s, 1% scattered "
                  f"({result['scattered_records']} records, median of "
                  f"{', '.join(f'{t:.2f}' for t in result['scattered_runs'])}) {result['scattered']:5.2f} s, "
                  f"1% clustered "
                  f"({result['clustered_records']} records of {result['clustered_policies']} policies) "
                  f"{result['clustered']:5.2f} s, one record after those {result['one_record_after']:5.2f} s, "
                  f"1% scattered writing a new index base {result['scattered_new_base']:5.2f} s; "
                  f"the same from scratch {result['scratch_after']:6.2f} s; each the first collect of a new "
                  f"process: nothing changed {result['new_process_nothing_changed']:5.2f} s "
                  f"({result['new_process_nothing_changed_whole']:5.2f} s with Python's start and imports), "
                  f"1% scattered {result['new_process_scattered']:5.2f} s "
                  f"({result['new_process_scattered_whole']:5.2f} s), 1% scattered writing a new index base "
                  f"{result['new_process_scattered_new_base']:5.2f} s "
                  f"({result['new_process_scattered_new_base_whole']:5.2f} s)", flush=True)
            if not keep:
                shutil.rmtree(root)
    finally:
        if not keep:
            shutil.rmtree(base, ignore_errors=True)
    growth = [{"from": a["records"], "to": b["records"],
               **{k: round(b[k] / a[k], 2) for k in ("read_full", "first", "one_record", "scattered", "clustered")}}
              for a, b in zip(results, results[1:], strict=False)]
    for g in growth:
        print(f"{g['from']} -> {g['to']} records: first x{g['first']}, one record x{g['one_record']}, "
              f"1% scattered x{g['scattered']}, "
              f"1% clustered x{g['clustered']}")
    report = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                          "platform": platform.platform()}, "results": results, "growth": growth}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(args.out, json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
