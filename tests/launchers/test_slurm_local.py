"""End-to-end checks of scripts/slurm-local: a real Slurm cluster on localhost.

Needs root (it starts munged, MariaDB, slurmdbd, slurmctld and two slurmd).
Run: .venv/bin/python -m pytest tests/launchers/test_slurm_local.py
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "slurm-local"
TERMINAL = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "OUT_OF_MEMORY",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
}

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="slurm-local starts system daemons and needs root"
)


def _env() -> dict[str, str]:
    # Clients must find the cluster through /etc/slurm/slurm.conf alone.
    env = dict(os.environ)
    env.pop("SLURM_CONF", None)
    return env


def run(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        list(args), capture_output=True, text=True, env=_env(), timeout=timeout
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{args} -> rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        )
    return proc


def slurm_local(cmd: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return run(str(SCRIPT), cmd, timeout=timeout)


def sbatch(*args: str, chdir: Path) -> str:
    out = run("sbatch", "--parsable", f"--chdir={chdir}", *args).stdout.strip()
    return out.split(";")[0]


def sacct_state(job: str) -> str:
    out = run("sacct", "-j", job, "-n", "-X", "-P", "-o", "State", check=False).stdout
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    # "CANCELLED by 0" -> "CANCELLED"; a requeued job has one line per run: take the last.
    return lines[-1].split()[0] if lines else ""


def wait_terminal(job: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        state = sacct_state(job)
        if state in TERMINAL:
            return state
        time.sleep(0.5)
    raise AssertionError(f"job {job} not finished after {timeout}s (sacct state {state!r})")


def squeue_state(job: str) -> str:
    return run("squeue", "-h", "-j", job, "-o", "%T", check=False).stdout.strip()


def wait_running(job: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if squeue_state(job) == "RUNNING":
            return
        time.sleep(0.2)
    raise AssertionError(f"job {job} not RUNNING after {timeout}s: {squeue_state(job)!r}")


def wait_file_lines(path: Path, n: int, timeout: float = 20) -> list[str]:
    deadline = time.monotonic() + timeout
    lines: list[str] = []
    while time.monotonic() < deadline:
        if path.exists():
            lines = path.read_text().splitlines()
            if len(lines) >= n:
                return lines
        time.sleep(0.2)
    raise AssertionError(f"{path}: wanted {n} lines, got {lines}")


@pytest.fixture(scope="session")
def cluster() -> None:
    slurm_local("up")


def test_sinfo_lists_both_partitions(cluster):
    out = run("sinfo", "-h", "-o", "%R|%N|%G|%f|%T").stdout
    rows = {ln.split("|")[0]: ln.split("|") for ln in out.splitlines()}
    assert set(rows) == {"h100", "a100"}, out
    assert rows["h100"][1:4] == ["node-h100", "gpu:h100:4", "h100,sm_90"], out
    assert rows["a100"][1:4] == ["node-a100", "gpu:a100:4", "a100,sm_80"], out
    for row in rows.values():
        assert row[4] in {"idle", "mixed", "allocated"}, out


def test_gpu_job_completes(cluster, tmp_path):
    job = sbatch(
        "-p", "h100", "--gres=gpu:h100:1", "-o", "out.txt",
        "--wrap", 'echo "$SLURMD_NODENAME $CUDA_VISIBLE_DEVICES"; sleep 1',
        chdir=tmp_path,
    )
    assert wait_terminal(job) == "COMPLETED"
    node, gpus = (tmp_path / "out.txt").read_text().split()
    assert node == "node-h100"
    assert gpus == "0"
    tres = run("sacct", "-j", job, "-n", "-X", "-P", "-o", "AllocTRES").stdout
    assert "gres/gpu:h100=1" in tres


def test_feature_constraint_routes_to_a100(cluster, tmp_path):
    job = sbatch(
        "-p", "a100", "-C", "sm_80", "--gres=gpu:a100:2", "-o", "out.txt",
        "--wrap", 'echo "$SLURMD_NODENAME $CUDA_VISIBLE_DEVICES"',
        chdir=tmp_path,
    )
    assert wait_terminal(job) == "COMPLETED"
    assert (tmp_path / "out.txt").read_text().split() == ["node-a100", "0,1"]


def test_nonzero_exit_is_failed(cluster, tmp_path):
    job = sbatch("--wrap", "exit 3", chdir=tmp_path)
    assert wait_terminal(job) == "FAILED"
    code = run("sacct", "-j", job, "-n", "-X", "-P", "-o", "ExitCode").stdout.strip()
    assert code == "3:0"


def test_scancel_is_cancelled(cluster, tmp_path):
    job = sbatch("--wrap", "sleep 120", chdir=tmp_path)
    wait_running(job)
    run("scancel", job)
    assert wait_terminal(job) == "CANCELLED"


def test_memory_limit(cluster, tmp_path):
    cfg = run("scontrol", "show", "config").stdout
    cgroup = "proctrack/cgroup" in cfg
    job = sbatch(
        "--mem=64M",
        "--wrap",
        "python3 -c 'import time; b = bytearray(400 << 20); b[::4096] = b\"x\" * len(b[::4096]); time.sleep(5)'",
        chdir=tmp_path,
    )
    # cgroup v1 confinement -> kernel OOM kill -> OUT_OF_MEMORY;
    # no cgroups -> jobacct_gather OverMemoryKill -> FAILED.
    assert wait_terminal(job) == ("OUT_OF_MEMORY" if cgroup else "FAILED")


def test_requeue(cluster, tmp_path):
    job = sbatch(
        "-o", "out.txt", "--wrap", 'echo "run ${SLURM_RESTART_COUNT:-0}"; sleep 120',
        chdir=tmp_path,
    )
    wait_running(job)
    wait_file_lines(tmp_path / "out.txt", 1)
    run("scontrol", "requeue", job)
    # Slurm holds a requeued job ~2 min (BeginTime); tests release it at once.
    deadline = time.monotonic() + 20
    while squeue_state(job) != "PENDING":
        assert time.monotonic() < deadline, squeue_state(job)
        time.sleep(0.2)
    # The requeue revokes the first run's credential as of that second: a launch within the same second is killed
    # ("Killing non-startable batch JobId=...: Job credential revoked"), so the release waits the second out.
    time.sleep(1.5)
    run("scontrol", "update", f"jobid={job}", "starttime=now")
    wait_running(job)
    out = tmp_path / "out.txt"
    deadline = time.monotonic() + 20
    while not out.exists() or out.read_text().splitlines()[-1:] != ["run 1"]:
        assert time.monotonic() < deadline, out.read_text() if out.exists() else "no output"
        time.sleep(0.2)
    states = run("sacct", "-j", job, "-n", "-X", "-D", "-P", "-o", "State").stdout.split()
    assert states[0] == "REQUEUED", states
    run("scancel", job)
    assert wait_terminal(job) == "CANCELLED"


def test_up_is_idempotent_and_down_up_cycles(cluster, tmp_path):
    # Runs last (file order): leaves the cluster up.
    slurm_local("up")
    slurm_local("down")
    slurm_local("down")
    status = run(str(SCRIPT), "status", check=False)
    assert status.returncode != 0 and "slurmctld          stopped" in status.stdout
    slurm_local("up")
    assert run(str(SCRIPT), "status").returncode == 0
    job = sbatch("-p", "a100", "--wrap", "true", chdir=tmp_path)
    assert wait_terminal(job) == "COMPLETED"
