"""`wait` and `status` against a real Slurm cluster on this host (scripts/slurm-local): how often they ask sacct,
and what a status that read the records before sacct answered writes.

A wrapper `sacct` first on PATH logs each call (with its time) and execs the real one; it can also hold a call
until a given job has ended, as a slurmdbd slow to answer does under thousands of jobs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..conftest import ROOT, record

SCRIPT = ROOT / "scripts" / "slurm-local"
BUILDS = ("stock", "pr202785", "pr202925")
POLL_S = 1.0

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="scripts/slurm-local starts system daemons and needs root")


@pytest.fixture(scope="module")
def cluster() -> None:
    subprocess.run([str(SCRIPT), "up"], check=True, capture_output=True, timeout=600)


def sacct_wrapper(bin_dir: Path) -> Path:
    """bin_dir/sacct: appends `<unix time> <args>` to bin_dir/sacct.log; while bin_dir/hold names a job id, waits
    until the real sacct shows that job COMPLETED before it answers."""
    bin_dir.mkdir()
    real = shutil.which("sacct")
    assert real, "no sacct on PATH after scripts/slurm-local up"
    wrapper = bin_dir / "sacct"
    wrapper.write_text(f"""#!/bin/sh
echo "$(date +%s.%N) $*" >> {bin_dir / 'sacct.log'}
if [ -s {bin_dir / 'hold'} ]; then
  job=$(cat {bin_dir / 'hold'})
  until {real} -X -n -P -o State -j "$job" | grep -q COMPLETED; do sleep 0.2; done
fi
exec {real} "$@"
""")
    wrapper.chmod(0o755)
    return bin_dir


def sacct_times(bin_dir: Path) -> list[float]:
    log = bin_dir / "sacct.log"
    return [float(line.split()[0]) for line in log.read_text().splitlines()] if log.exists() else []


def cheap_conf(conf: Path, policies: int, sleep_s: float) -> list[str]:
    """Policies with a checkpoint path (nothing to build), builds that are this interpreter, and an exporter that
    only sleeps: the overrides of that matrix on h100 without a GPU gres (the node's CPU slots run it)."""
    names = [f"p{i:02d}" for i in range(policies)]
    for group in ("policy", "torch", "matrix", "exporter"):
        (conf / group).mkdir(parents=True)
    for name in names:
        (conf / "policy" / f"{name}.yaml").write_text(json.dumps(
            {"checkpoint": {"path": "/nonexistent"}, "task": None, "export_args": [], "timeout_min": 5, "env": {}}))
    for name in BUILDS:
        (conf / "torch" / f"{name}.yaml").write_text(json.dumps({"python": sys.executable, "fixes": [], "env": {}}))
    (conf / "exporter" / "sleep.yaml").write_text(json.dumps(
        {"command": ["{python}", "-c", f"import time; time.sleep({sleep_s})"]}))
    (conf / "matrix" / "cheap.yaml").write_text(json.dumps(
        {"policies": names, "gpus": ["h100"], "torch": list(BUILDS), "exclude": [], "include": []}))
    return ["--config-dir", str(conf), "matrix=cheap", "exporter=sleep", "gpus.h100.slurm.gres=null",
            "gpus.h100.slurm.cpus_per_task=1", "gpus.h100.slurm.mem_gb=1"]


def xm(bin_dir: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PATH": f"{bin_dir}:{os.environ['PATH']}", "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout, env=env)
    assert done.returncode == 0, f"export-matrix {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}"
    return done


def submit(bin_dir: Path, matrix: list[str], out: Path) -> dict:
    xm(bin_dir, "sweep", *matrix, f"out_dir={out}", f"ckpt_dir={out / 'ckpts'}", "launcher=slurm",
       "launcher.prepare=null")
    return json.loads((out / "manifest.json").read_text())["cells"]


def test_wait_asks_sacct_once_per_poll(cluster: None, tmp_path: Path) -> None:
    """Every poll is one sacct call for the whole manifest, and the table at the end asks none: consecutive calls
    are at least the poll interval apart."""
    bin_dir = sacct_wrapper(tmp_path / "bin")
    matrix = cheap_conf(tmp_path / "conf", policies=2, sleep_s=4)
    out = tmp_path / "out"
    cells = submit(bin_dir, matrix, out)
    before = len(sacct_times(bin_dir))
    done = xm(bin_dir, "wait", *matrix, f"out_dir={out}", "--poll-s", str(POLL_S))
    calls = sacct_times(bin_dir)[before:]
    assert len(calls) >= 3, f"{len(calls)} sacct calls: the cells ended before wait polled twice"
    gaps = [b - a for a, b in zip(calls, calls[1:], strict=False)]
    assert min(gaps) >= 0.9 * POLL_S, f"two sacct calls within one poll: gaps {gaps}"
    rows = [line for line in done.stdout.splitlines() if line.startswith("p0")]
    assert len(rows) == len(cells) == 6 and all(" passed " in r and "COMPLETED" in r for r in rows), done.stdout


def test_status_does_not_settle_a_record_it_read_before_the_job_ended(cluster: None, tmp_path: Path) -> None:
    """status reads every record, then asks sacct: a job that finishes its record in between is COMPLETED in
    sacct's answer, and its `passed` record must stay (not become `error`, job ended without its record)."""
    bin_dir = sacct_wrapper(tmp_path / "bin")
    matrix = [*cheap_conf(tmp_path / "conf", policies=1, sleep_s=3), "matrix.torch=[stock]"]
    out = tmp_path / "out"
    cells = submit(bin_dir, matrix, out)
    (cell, entry), = cells.items()
    deadline = time.monotonic() + 120
    while record(out, cell)["status"] != "running":
        assert time.monotonic() < deadline, record(out, cell)
        time.sleep(0.1)
    (bin_dir / "hold").write_text(entry["job_id"])  # status's sacct answers once the job has ended
    shown = xm(bin_dir, "status", *matrix, f"out_dir={out}")
    after = record(out, cell)
    assert after["status"] == "passed" and after["error"] is None, after
    assert " passed " in shown.stdout and "COMPLETED" in shown.stdout, shown.stdout
