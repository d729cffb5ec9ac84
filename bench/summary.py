"""README's Performance table, made from bench/results/*.json (the numbers live there, not in prose).

    .venv/bin/python bench/summary.py            # prints the table
    .venv/bin/python bench/summary.py --write    # puts it in README.md between the perf markers
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
START, END = "<!-- bench-summary:start -->", "<!-- bench-summary:end -->"


def _overhead(d: dict) -> tuple[str, str, str]:
    return ("sweep vs the same commands by hand (act, CPU)", f"median ratio {d['median_ratio']:.3f}×",
            f"≤ {d['goal']}× {'✅' if d['median_ratio'] <= d['goal'] else '❌'}")


def _cache(d: dict) -> tuple[str, str, str]:
    ok = d["make_random_runs"] == d["make_random_goal"] and d["rerun_cells"] == d["rerun_goal"]
    return (f"make_random cache, {d['cells']} cells; `rerun --stale` after one build bump",
            f"{d['make_random_runs']} builds, {d['reuses']} reuses; {len(d['rerun_cells'])} cells rerun",
            f"one build per checkpoint, only that build's cells {'✅' if ok else '❌'}")


def _prepare(d: dict) -> tuple[str, str, str]:
    without, with_ = d["without_prepare"]["gpu_s_on_checkpoints"], d["with_prepare"]["gpu_s_on_checkpoints"]
    return ("GPU-held seconds spent on random checkpoints (local Slurm)", f"{without:g} s without the CPU array, "
            f"{with_:g} s with it", f"0 {'✅' if with_ == 0 else '❌'}")


def _collect(d: dict) -> tuple[str, str, str]:
    sizes = ", ".join(f"{r['records']:,}: {r['whole_command_s']:.2f} s" for r in d["results"])
    ten_k = d.get("whole_command_10k_s")
    met = ten_k is not None and ten_k < d["guard_s"]
    goal = f"10,000 < {d['guard_s']} s {'✅' if met else '❌'}"
    return ("`export-matrix collect` as a whole new process", sizes, goal)


def _submit(d: dict) -> tuple[str, str, str]:
    m = d["median"]
    return (f"{d['cells']:,} cells submitted held vs hydra-submitit-launcher; `status`",
            f"ratio {m['ratio_vs_hydra_groups']:.3f}×; status {m['tool_status_s']:.2f} s, 1 sacct call",
            f"≤ 0.5×, < 1 s {'✅' if all(d['goals']['met'].values()) else '❌'}")


def _scale(d: dict) -> tuple[str, str, str]:
    run, sub = d["run_2500"], d["submit_10000"]
    calls = run["sacct_calls_per_wait_poll"]
    fast, one = run["status_s"] < 2, calls == 1
    return (f"{run['cells']:,} cells run on local Slurm ({run.get('date', d['date'])}); {sub['cells']:,} submitted "
            f"({sub.get('date', d['date'])})",
            f"arrays {run['array_sizes']}; status {run['status_s']:.2f} s at 2,500"
            + (f" ({run['status_again_s']:.2f} s again)" if "status_again_s" in run else "")
            + f", {sub['status_s']:.1f} s at "
            f"10,000; {calls} sacct call{'s' if calls != 1 else ''} per `wait` poll",
            f"status < 2 s {'✅' if fast else '❌'}, 1 sacct call per poll {'✅' if one else '❌'}")


def _stacks(d: dict) -> tuple[str, str, str]:
    versions = d["versions"]
    passed = ", ".join(f"{s} (torch {versions.get(s, {}).get('torch')}): {n}/{d['cells_per_stack']} passed"
                       for s, n in d["passed"].items())
    every = all(n == d["cells_per_stack"] for n in d["passed"].values())
    return ("the smoke matrix on two stacks (XNNPACK, CPU)", passed, f"every cell on both {'✅' if every else '❌'}")


def _bump(d: dict) -> tuple[str, str, str]:
    return (f"`rerun --stale` after a bump of act's modeling file ({len(d['policies'])} smoke policies, CPU): "
            "by loaded files vs by recipe",
            f"{d['cells_rerun_by_code']} cell{'s' if d['cells_rerun_by_code'] != 1 else ''}, "
            f"{d['export_s_by_code']:,.0f} s of export vs "
            f"{d['cells_rerun_by_recipe']} cells, {d['export_s_by_recipe']:,.0f} s",
            f"only the bumped policy's cells {'✅' if d['met'] else '❌'}")


ROWS: dict[str, Callable[[dict], tuple[str, str, str]]] = {
    "overhead": _overhead, "cache": _cache, "prepare": _prepare, "collect": _collect, "submit": _submit,
    "scale": _scale, "stacks": _stacks, "bump": _bump}


def table() -> str:
    lines = ["| bench | what | result | goal |", "| --- | --- | --- | --- |"]
    for name, row in ROWS.items():
        path = RESULTS / f"{name}.json"
        if path.exists():
            data = json.loads(path.read_text())
            what, result, goal = row(data)
            date = f" ({data['date']})" if "date" in data else ""
            lines.append(f"| `bench/{name}.py`{date} | {what} | {result} | {goal} |")
    return "\n".join(lines) + "\n"


def spliced(readme: str) -> str:
    head, _, rest = readme.partition(START)
    _, _, tail = rest.partition(END)
    if not rest:
        raise SystemExit(f"summary.py: README.md has no {START} marker")
    return f"{head}{START}\n{table()}{END}{tail}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    if args.write:
        readme = ROOT / "README.md"
        readme.write_text(spliced(readme.read_text()))
    else:
        print(table(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
