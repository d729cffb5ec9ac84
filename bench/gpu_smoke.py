"""Summarize a GPU sweep's records (`export-matrix sweep matrix=gpu_smoke`) into bench/results/gpu_smoke.json.

The sweep itself is the measurement (make_random, torch.export, ExecuTorch's CUDA backend, the check against eager,
CUDA-synchronized medians of eager and exported, NVML peaks); this reads what its records say, so the figures in
README's "On a GPU" come from one file: the device (name, capability, driver), the versions, and per cell its
status, failed step, error, which check ran, max_diff / tolerance, eager and exported ms, speedup, peak GPU memory
and step seconds, and each standalone repro's result. Speed is given both ways a record times eager: `speedup`
over the same boundary the exported program is timed at (the traced modules composed as its methods), and
`speedup_policy` over the policy's own call (what a user's code pays), with the record's `timing` saying what
each side timed, its runs and warm-up.

    .venv/bin/python bench/gpu_smoke.py [--out-dir matrix_out] [--result bench/results/gpu_smoke.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.atomic import write_json_atomic  # noqa: E402

CELL_FIELDS = ("status", "failed_step", "error", "check", "check_reason", "max_diff", "tolerance", "margin",
               "eager_ms", "exported_ms", "speedup", "peak_gpu_mib", "peak_gpu_phases", "make_random_s", "export_s",
               "steps_s", "repro", "attempt", "ended_at")
DEVICE_FIELDS = ("gpu_name", "gpu_capability", "gpu_driver")
VERSION_FIELDS = ("python", "torch", "executorch", "lerobot", "transformers")


def speeds(record: dict) -> dict:
    """The record's timing detail and the speedup over the policy's own call, where the record has both."""
    timing = record.get("timing") or {}
    policy_ms, exported_ms = timing.get("eager_policy_ms"), record.get("exported_ms")
    return {"timing": timing or None,
            "speedup_policy": policy_ms / exported_ms if policy_ms and exported_ms else None}


def summarize(out_dir: Path) -> dict:
    records = sorted((out_dir / "cells").glob("*/*/*/record.json"))
    if not records:
        raise SystemExit(f"gpu_smoke.py: error: no records under {out_dir}/cells (run the gpu_smoke sweep first)")
    cells, devices, versions = {}, set(), set()
    for path in records:
        record = json.loads(path.read_text())
        seen = record.get("versions") or {}
        if seen.get("gpu_name"):
            devices.add(tuple(seen.get(k) for k in DEVICE_FIELDS))
        if seen.get("torch"):
            versions.add(tuple(seen.get(k) for k in VERSION_FIELDS))
        cells[record["cell"]] = {k: record.get(k) for k in CELL_FIELDS} | speeds(record)
    return {"devices": [dict(zip(DEVICE_FIELDS, d, strict=True)) for d in sorted(devices, key=str)],
            "versions": [dict(zip(VERSION_FIELDS, v, strict=True)) for v in sorted(versions, key=str)],
            "cells": cells}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=ROOT / "matrix_out")
    parser.add_argument("--result", type=Path, default=ROOT / "bench" / "results" / "gpu_smoke.json")
    args = parser.parse_args()
    summary = summarize(args.out_dir)
    write_json_atomic(args.result, summary)
    for cell, fields in summary["cells"].items():
        numbers = (f" {fields['max_diff']:.2e} / {fields['tolerance']:g}" if fields["max_diff"] is not None else "")
        speed = "".join(f" {name} {fields[key]:.2f}x" for key, name in (("speedup", "speedup"),
                        ("speedup_policy", "vs policy call")) if fields[key])
        print(f"{fields['status']:9s} {cell}{numbers}{speed} {fields['check'] or ''} {fields['error'] or ''}"[:160])
    print(f"wrote {args.result}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
