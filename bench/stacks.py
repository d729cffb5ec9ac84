"""The smoke matrix on two torch stacks: the embedded one (`local`) and PyPI's current one (`pypi215`).

Runs `export-matrix sweep matrix=smoke matrix.torch=[local,pypi215]` (or, with --read, reads a sweep's records)
and writes, per policy and stack, how the cell ended, its error against eager, its export seconds, eager vs
exported milliseconds and the XNNPACK delegate calls (export_info.json), with each stack's versions, to
bench/results/stacks.json.

    .venv/bin/python bench/stacks.py [--out-dir DIR] [--read]
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.atomic import write_json_atomic  # noqa: E402

STACKS = ("local", "pypi215")
RESULT = ROOT / "bench" / "results" / "stacks.json"
VERSIONS = ("torch", "torchvision", "executorch", "lerobot")


def cell_row(cell_dir: Path) -> dict:
    record = json.loads((cell_dir / "record.json").read_text())
    info_path = cell_dir / "bundle" / "export_info.json"
    info = json.loads(info_path.read_text()) if info_path.exists() else {}
    return {"status": record["status"], "failed_step": record["failed_step"], "error": record["error"],
            "max_diff": record["max_diff"], "tolerance": record["tolerance"], "export_s": record["export_s"],
            "eager_ms": record["eager_ms"], "exported_ms": record["exported_ms"], "speedup": record["speedup"],
            "delegate_calls": info.get("delegate_calls"), "non_delegated_ops": info.get("non_delegated_ops")}


def collect(out_dir: Path) -> dict:
    cells = sorted((out_dir / "cells").glob("*/cpu/*/record.json"))
    policies = sorted({p.parts[-4] for p in cells})
    rows, versions = {}, {}
    for policy in policies:
        rows[policy] = {}
        for stack in STACKS:
            cell_dir = out_dir / "cells" / policy / "cpu" / stack
            if (cell_dir / "record.json").exists():
                rows[policy][stack] = cell_row(cell_dir)
                found = json.loads((cell_dir / "record.json").read_text()).get("versions") or {}
                versions.setdefault(stack, {k: found.get(k) for k in VERSIONS if k in found})
    passed = {s: sum(r.get(s, {}).get("status") == "passed" for r in rows.values()) for s in STACKS}
    return {"date": datetime.date.today().isoformat(), "out_dir": str(out_dir), "policies": policies,
            "versions": versions, "cells": rows, "passed": passed, "cells_per_stack": len(policies),
            "command": ["export-matrix", "sweep", "matrix=smoke", f"matrix.torch=[{','.join(STACKS)}]"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", type=Path, default=ROOT / "matrix_out" / "stacks")
    parser.add_argument("--read", action="store_true", help="read the records already there, run nothing")
    args = parser.parse_args()
    if not args.read:
        done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "sweep", "matrix=smoke",
                               f"matrix.torch=[{','.join(STACKS)}]", f"out_dir={args.out_dir}"], cwd=ROOT)
        if done.returncode not in (0, 1):  # 1: a cell could not start (an `error` record), which the result shows
            raise SystemExit(f"stacks.py: the sweep exited with {done.returncode}")
    result = collect(args.out_dir.absolute())
    if not result["policies"]:
        raise SystemExit(f"stacks.py: no records under {args.out_dir}/cells/")
    write_json_atomic(RESULT, result, sort_keys=False)
    for policy, stacks in result["cells"].items():
        print(policy, "  ".join(f"{s}: {c['status']} max_diff={c['max_diff']} export={c['export_s']}s "
                                f"eager={c['eager_ms']}ms exported={c['exported_ms']}ms "
                                f"delegates={c['delegate_calls']}" for s, c in stacks.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
