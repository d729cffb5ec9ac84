"""Orchestration overhead: the smoke sweep through export-matrix vs the same commands run by hand.

Both sides build their random checkpoints afresh and export the same policies on the CPU, in turn (A B A B),
so machine drift hits both. Prints each pair's wall times and the ratio tool / by-hand (goal: <= 1.05x).

    .venv/bin/python bench/overhead.py [--policies act] [--pairs 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.config import compose_config  # noqa: E402
from orchestrator.config.cells import resolve  # noqa: E402
from orchestrator.job import export_command, job_env  # noqa: E402
from orchestrator.job.checkpoints import make_random_command  # noqa: E402


def by_hand(policies: list[str], work: Path) -> float:
    """make_random then the exporter, cell after cell, as a person would type them."""
    specs = resolve(compose_config(["matrix=smoke", f"matrix.policies=[{','.join(policies)}]"]))
    start = time.perf_counter()
    for spec in specs:
        random = spec.checkpoint["random"]
        ckpt = work / f"ckpt-{spec.policy}"
        env = job_env(spec)
        subprocess.run(make_random_command(spec.python, random["type"], ckpt, random.get("overrides") or {}),
                       env=env, check=True, capture_output=True)
        out = work / f"out-{spec.policy}"
        done = subprocess.run(export_command(spec, str(ckpt), out), env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"by hand: {spec.id} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return time.perf_counter() - start


def through_tool(policies: list[str], work: Path) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "orchestrator.cli", "sweep", "matrix=smoke",
                    f"matrix.policies=[{','.join(policies)}]", f"out_dir={work / 'out'}",
                    f"ckpt_dir={work / 'ckpts'}", "launcher.poll_s=0.5"], cwd=ROOT, check=True, capture_output=True)
    elapsed = time.perf_counter() - start
    records = [json.loads(p.read_text()) for p in (work / "out").glob("cells/*/*/*/record.json")]
    if not records or any(r["status"] != "passed" for r in records):
        raise SystemExit(f"tool: not every cell passed: {[(r['cell'], r['status']) for r in records]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policies", default="act", help="comma-separated smoke policies")
    parser.add_argument("--pairs", type=int, default=2)
    args = parser.parse_args()
    policies = args.policies.split(",")
    rows = []
    for pair in range(args.pairs):
        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
            hand = by_hand(policies, Path(a))
            tool = through_tool(policies, Path(b))
        rows.append({"pair": pair + 1, "by_hand_s": round(hand, 2), "tool_s": round(tool, 2),
                     "ratio": round(tool / hand, 3)})
        print(f"pair {pair + 1}: by hand {hand:7.1f} s   export-matrix {tool:7.1f} s   ratio {tool / hand:.3f}x",
              flush=True)
    ratio = statistics.median(r["ratio"] for r in rows)
    print(f"median ratio export-matrix / by hand: {ratio:.3f}x (goal <= 1.05x) over {len(rows)} pairs, "
          f"policies {','.join(policies)}")
    result = {"policies": policies, "pairs": rows, "median_ratio": ratio, "goal": 1.05,
              "date": time.strftime("%Y-%m-%d"), "cpus": __import__("os").cpu_count()}
    (ROOT / "bench" / "results").mkdir(exist_ok=True)
    (ROOT / "bench" / "results" / "overhead.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
