"""Run one of the failure catalog's standalone repros and print what it showed as one machine-readable line.

    <python> orchestrator/repros/run_repro.py --repro=fp32_speed --output_dir=<out>

Each repro module here has ROW (the catalog row it reproduces) and `run(out, report) -> dict` with at least
`reproduced` (True: the failure still shows; False: it does not; None: it cannot show here, `summary` says why)
and `summary` (one line). This prints `Repro result: {json}` last, which the job reads into the record's
`repro` field (conf/config.yaml, parse.repro); a first line with `"summary": "did not finish"` names the row
of a repro that never gets to the end. A repro that crashes prints its traceback and exits 1 like an
exporter, so the cell is `failed` with the error line, never a silent "not reproduced".

Imports only stdlib at module level: the file runs in a torch build's interpreter, never in the orchestrator's.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPROS = ("fp32_speed", "grouped_mm_bf16", "scatter_value_deterministic")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="run_repro.py", description=__doc__.splitlines()[0])
    parser.add_argument("--repro", required=True, choices=REPROS)
    parser.add_argument("--output_dir", required=True)
    args = parser.parse_args(argv)
    for path in (HERE, HERE.parent / "exporters"):  # the repros share the exporters' CUDA helpers
        sys.path.insert(0, str(path))
    module = importlib.import_module(args.repro)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()

    def report(partial: dict) -> None:
        """A result line; the last one counts, so a repro stopped half-way still says what it had seen."""
        print("Repro result: " + json.dumps({"repro": args.repro, "row": module.ROW, **partial}, sort_keys=True),
              flush=True)

    report({"reproduced": None, "summary": "did not finish"})  # names the row even if nothing else comes
    result = {"repro": args.repro, "row": module.ROW, **module.run(out, report)}
    result["seconds"] = round(time.perf_counter() - started, 1)
    (out / "repro.json").write_text(json.dumps(result, indent=2) + "\n")
    report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
