"""Generated repros of the committed GPU failures, on the GPU: does each reproduce, in how many lines, how fast.

NOT RUN YET: no GPU machine was lent to the session that wrote it (issue 47). On the lent machine, with the
wheels a bare CUDA image lacks in .whl (docs/gpu.md):

    scripts/offline-env .whl python3 bench/repros.py --gpu h100 --policies gaussian_actor,vqbet,diffusion,act

pi0 and pi05 export for 8-12 minutes before they fail (docs/gpu.md): run the export detached first, follow it
with `scripts/device-wait 540` in the next calls while the machine stays warm, then measure:

    scripts/device-detach rerun pi0/h100/local matrix=gpu_smoke 'matrix.gpus=[h100]' exporter=executorch_cuda
    scripts/offline-env .whl python3 bench/repros.py --gpu h100 --policies pi0     # finds its kept programs

For each policy it runs the cell `<policy>/<gpu>/local` (torch 2.11.0 + executorch 1.2.0) with the embedded CUDA
exporter unless its record there already failed and kept its programs, then `export-matrix repro` on it, and
writes bench/results/repros.json (and $OUT/repros.json where $OUT is set): per generated script, whether it
reproduces its error, its lines and seconds, against the goal (every committed failure reproduces, at most 110
lines, under 60 s). The committed failures (bench/results/gpu_smoke): gaussian_actor detach_copy, vqbet
detach_copy + multinomial, diffusion conv_no_choice, pi0/pi05 sdpa_bf16_only, act split_copy on ExecuTorch 1.2.0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = {"gaussian_actor": ["detach_copy"], "vqbet": ["detach_copy", "multinomial"],
             "diffusion": ["conv_no_choice"], "pi0": ["sdpa_bf16_only"], "pi05": ["sdpa_bf16_only"],
             "act": ["split_copy"]}
MAX_LINES, MAX_SECONDS = 110, 60.0


def cli(*args: str, timeout: float) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=ROOT, text=True, timeout=timeout,
                          capture_output=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    print(done.stdout[-3000:], done.stderr[-3000:], sep="\n", flush=True)
    return done


def kept(out_dir: Path, cell: str) -> bool:
    record = out_dir / "cells" / cell / "record.json"
    programs = out_dir / "cells" / cell / "bundle" / "programs" / "programs.json"
    return record.exists() and json.loads(record.read_text()).get("status") == "failed" and programs.exists()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="h100", help="the GPU column (h100, h200)")
    parser.add_argument("--policies", default=",".join(COMMITTED), help="comma-separated, of: " + ", ".join(COMMITTED))
    parser.add_argument("--out-dir", type=Path, default=Path(os.environ.get("DEVICE_OUT_DIR", "/tmp/gm")))
    parser.add_argument("--ckpt-dir", type=Path, default=Path(os.environ.get("DEVICE_CKPT_DIR", "/tmp/ck")))
    parser.add_argument("--seconds", type=float, default=600.0, help="each cell's search bound")
    args = parser.parse_args()
    policies = [p for p in args.policies.split(",") if p]
    if unknown := [p for p in policies if p not in COMMITTED]:
        parser.error(f"unknown policy {unknown[0]!r} (valid: {', '.join(COMMITTED)})")
    common = ["matrix=gpu_smoke", f"matrix.gpus=[{args.gpu}]", "matrix.torch=[local]", "exporter=executorch_cuda",
              f"out_dir={args.out_dir}", f"ckpt_dir={args.ckpt_dir}"]
    results = []
    for policy in policies:
        cell = f"{policy}/{args.gpu}/local"
        started = time.monotonic()
        if not kept(args.out_dir, cell):
            cli("rerun", cell, *common, timeout=3600)
        export_s = round(time.monotonic() - started, 1)
        if not kept(args.out_dir, cell):
            results.append({"cell": cell, "expected": COMMITTED[policy], "export_s": export_s, "scripts": [],
                            "why": "the export did not fail with kept programs this time (see its record)"})
            continue
        cli("repro", cell, *common, f"--seconds={args.seconds:g}", timeout=args.seconds + 1800)
        made = json.loads((args.out_dir / "repros" / cell / "repros.json").read_text())
        scripts = [{k: s.get(k) for k in ("failure", "script", "reproduces", "lines", "seconds", "search_s", "how",
                                          "error", "versions")} for s in made.get("scripts", [])]
        for entry in scripts:
            entry["goal"] = bool(entry["reproduces"]) and (entry["lines"] or 999) <= MAX_LINES \
                and (entry["seconds"] or 999) < MAX_SECONDS
        missing = [f for f in COMMITTED[policy] if f not in {s["failure"] for s in scripts if s["goal"]}]
        results.append({"cell": cell, "expected": COMMITTED[policy], "export_s": export_s, "scripts": scripts,
                        "missing": missing})
    report = {"bench": "repros", "date": datetime.now(UTC).date().isoformat(), "gpu": args.gpu,
              "goal": f"each committed failure reproduces, at most {MAX_LINES} lines, under {MAX_SECONDS:g} s",
              "met": all(not r.get("missing", r["expected"]) for r in results), "cells": results}
    text = json.dumps(report, indent=2, default=str) + "\n"
    (ROOT / "bench" / "results" / "repros.json").write_text(text)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "repros.json").write_text(text)
    print(text)
    return 0 if report["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
