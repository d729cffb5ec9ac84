"""`launcher=slurm` on a real Slurm cluster on this host (scripts/slurm-local): arrays, manifest, status, faults.

Nothing mocks Slurm: sbatch, sacct, scancel and scontrol are the real ones (a wrapper `sbatch` first on PATH only
logs its calls and execs the real one). The fork's lerobot-export is the stand-in, as in test_sweep.py. Jobs run on
this host, so the stand-in config, out_dir and ckpt_dir are the same paths for them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from ..conftest import ROOT, act_checkpoints, record

SCRIPT = ROOT / "scripts" / "slurm-local"
SEEDED = ["act", "wall_x", "dm05", "lawam", "flux3", "lingbot_vla_v2"]
ACT_CKPT = act_checkpoints("act", "wall_x", "dm05", "lingbot_vla_v2")
# The local cluster's nodes claim 16 CPUs and 64 GB: ask for little, so 4 jobs (one per fake GPU) run per node.
def small_jobs(*gpus: str) -> list[str]:
    return [f"gpus.{g}.slurm.{k}={v}" for g in gpus for k, v in (("cpus_per_task", 1), ("mem_gb", 3))]


# The make_random preparation array has its own test (test_make_random_runs_off_the_gpu); here each GPU job
# builds its checkpoint itself, so every sbatch call is one GPU array.
SLURM = ["launcher=slurm", "launcher.poll_s=1", "launcher.prepare=null", *small_jobs("h100", "a100")]
COMPARED = ("status", "failed_step", "error", "max_diff", "tolerance", "checkpoint", "fixes")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="scripts/slurm-local starts system daemons and needs root")


@pytest.fixture(scope="session")
def cluster() -> None:
    subprocess.run([str(SCRIPT), "up"], check=True, capture_output=True, timeout=600)


@pytest.fixture(scope="module")
def sbatch_log(tmp_path_factory: pytest.TempPathFactory, cluster: None) -> Path:
    """A `sbatch` first on PATH that logs each call and execs the real one."""
    bin_dir = tmp_path_factory.mktemp("bin")
    log = bin_dir / "sbatch.log"
    log.touch()
    wrapper = bin_dir / "sbatch"
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> {log}\nexec {shutil.which("sbatch")} "$@"\n')
    wrapper.chmod(0o755)
    return log


def env_with(sbatch_log: Path) -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "PATH": f"{sbatch_log.parent}:{os.environ['PATH']}",
            "COLUMNS": "200"}


def xm(sbatch_log: Path, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout, env=env_with(sbatch_log))
    if check and done.returncode != 0:
        raise AssertionError(f"export-matrix {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return done


def sbatch_calls(log: Path) -> int:
    return len(log.read_text().splitlines())


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def until(condition, timeout: float, what: str, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def squeue_state(job_id: str) -> str:
    return subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True).stdout.strip()


def expected_signatures() -> set[tuple[str, int]]:
    """(partition, --time) of the seeded cells: the policies' limits give 2 x timeout_min + 5 minutes."""
    times = {p: int(2 * yaml.safe_load((ROOT / "conf" / "policy" / f"{p}.yaml").read_text())["timeout_min"] + 5)
             for p in SEEDED}
    return {(gpu, t) for gpu in ("h100", "a100") for t in times.values()}


@pytest.fixture(scope="module")
def local_tracking(standin_conf: Path, ckpt_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """The same 36 cells through the local launcher, started in the background (it runs while Slurm tests wait)."""
    out = tmp_path_factory.mktemp("local_tracking")
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "sweep", "--config-dir", str(standin_conf),
                             "matrix=tracking", f"matrix.policies=[{','.join(SEEDED)}]", f"out_dir={out}",
                             f"ckpt_dir={ckpt_dir}", "launcher.parallel=2", "launcher.poll_s=0.2", *ACT_CKPT,
                             *SLURM[3:]],  # the same gpu configs as on Slurm: the same fingerprints
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})

    def finished() -> Path:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        return out

    yield finished
    if proc.poll() is None:
        proc.kill()


@pytest.fixture(scope="module")
def slurm_tracking(standin_conf: Path, ckpt_dir: Path, sbatch_log: Path, tmp_path_factory: pytest.TempPathFactory):
    """36 cells on Slurm: submitted held (sbatch --hold through launcher.sbatch), swept again with --wait while
    they are pending, released, the waiting sweep killed with SIGKILL, then `wait` and `status` from scratch."""
    out = tmp_path_factory.mktemp("slurm_tracking")
    args = ["sweep", "--config-dir", str(standin_conf), "matrix=tracking", f"matrix.policies=[{','.join(SEEDED)}]",
            f"out_dir={out}", f"ckpt_dir={ckpt_dir}", *ACT_CKPT, *SLURM, "+launcher.sbatch.hold=true"]
    facts: dict = {"out": out}
    start = time.monotonic()
    facts["first"] = xm(sbatch_log, *args)
    facts["sweep_s"] = time.monotonic() - start
    facts["calls_first"] = sbatch_calls(sbatch_log)
    facts["manifest_first"] = manifest(out)
    # the sweeping process: submits nothing (all pending), then waits; it is killed while the jobs run
    err_path = out.parent / f"{out.name}.again.err"
    with open(err_path, "w") as err:
        again = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", *args, "--wait"], cwd=ROOT,
                                 stdout=subprocess.DEVNULL, stderr=err, env=env_with(sbatch_log))
    until(lambda: "left alone" in err_path.read_text() or again.poll() is not None, 120, "the second sweep")
    arrays = sorted({e["array"] for e in facts["manifest_first"]["cells"].values()})
    subprocess.run(["scontrol", "release", *arrays], check=True, capture_output=True)
    until(lambda: sum(json.loads(p.read_text())["status"] not in ("pending", "running")
                      for p in out.glob("cells/*/*/*/record.json")) >= 4, 120, "the first cells to end")
    assert again.poll() is None, err_path.read_text()[-3000:]
    again.send_signal(signal.SIGKILL)
    again.wait(timeout=30)
    facts["again_err"] = err_path.read_text()
    facts["calls_again"] = sbatch_calls(sbatch_log)
    facts["wait"] = xm(sbatch_log, "wait", f"out_dir={out}", "--poll-s", "1", timeout=300)
    facts["status"] = xm(sbatch_log, "status", "--config-dir", str(standin_conf), f"out_dir={out}",
                         f"ckpt_dir={ckpt_dir}", "matrix=tracking", f"matrix.policies=[{','.join(SEEDED)}]",
                         *ACT_CKPT, *SLURM)
    return facts


def test_sweep_is_one_array_per_resource_signature_and_returns_at_once(slurm_tracking: dict) -> None:
    facts = slurm_tracking
    assert facts["sweep_s"] < 30, f"sweep took {facts['sweep_s']:.0f} s to submit"
    cells = facts["manifest_first"]["cells"]
    assert len(cells) == 36
    arrays: dict[str, list[dict]] = {}
    for entry in cells.values():
        arrays.setdefault(entry["array"], []).append(entry)
        assert entry["job_id"].startswith(f"{entry['array']}_") and entry["attempt"] == 1 and entry["fingerprint"]
    assert facts["calls_first"] == len(arrays) == len(expected_signatures()) == 6
    for entries in arrays.values():  # each array is one signature, and no two arrays share one
        assert len({json.dumps(e["signature"], sort_keys=True) for e in entries}) == 1
    signatures = {(e[0]["signature"]["partition"], e[0]["signature"]["time_min"]) for e in arrays.values()}
    assert signatures == expected_signatures()
    assert {e["signature"]["gres"] for e in cells.values()} == {"gpu:h100:1", "gpu:a100:1"}
    (sweep,) = facts["manifest_first"]["sweeps"].values()
    assert len(sweep["arrays"]) == 6 and sweep["what"] == "matrix tracking"


def test_a_second_sweep_submits_nothing_for_pending_cells(slurm_tracking: dict) -> None:
    facts = slurm_tracking
    assert facts["calls_again"] == facts["calls_first"], "the second sweep called sbatch"
    assert facts["again_err"].count("not submitted") == 36
    assert "submitted: 0 cells in 0 job arrays" in facts["again_err"]
    assert manifest(facts["out"])["cells"] == facts["manifest_first"]["cells"]


def test_wait_and_status_reattach_after_the_sweep_was_killed(slurm_tracking: dict) -> None:
    out, status = slurm_tracking["out"], slurm_tracking["status"].stdout
    rows = [line for line in status.splitlines() if "/stock" in line or "/pr20" in line]
    assert len(rows) == 36, status
    assert not any(word in status for word in ("pending", "running", "RUNNING", "PENDING")), status
    assert "COMPLETED" in status and not any("stale" in row for row in rows), status
    for cell, entry in manifest(out)["cells"].items():
        found = record(out, cell)
        assert found["job_id"] == entry["job_id"] and found["attempt"] == 1
        assert found["fingerprint"]["key"] == entry["fingerprint"]
        assert found["status"] not in ("pending", "running", "error"), (cell, found)


def test_faults_end_with_the_right_records(standin_conf: Path, ckpt_dir: Path, sbatch_log: Path, tmp_path: Path,
                                           local_tracking) -> None:
    """kill -9 of the job process, the Slurm time limit, scancel, a preemption requeued once then failing, the
    cgroup OOM killer, and --force, each in its own cell of one out_dir (each sweep merges into the manifest)."""
    out = tmp_path / "out"
    hog_conf = tmp_path / "conf"
    shutil.copytree(standin_conf, hog_conf)
    hog = tmp_path / "hog.py"
    hog.write_text("b = bytearray(1500 << 20)\nb[::4096] = b'x' * len(b[::4096])\nprint('allocated', flush=True)\n")
    (hog_conf / "exporter").mkdir()
    (hog_conf / "exporter" / "hog.yaml").write_text(json.dumps({"command": ["{python}", str(hog)]}))

    def sweep(policy: str, gpu: str, *extra: str, conf: Path = standin_conf) -> subprocess.CompletedProcess:
        return xm(sbatch_log, "sweep", "--config-dir", str(conf), "matrix=tracking", f"matrix.policies=[{policy}]",
                  f"matrix.gpus=[{gpu}]", "matrix.torch=[stock]", f"out_dir={out}", f"ckpt_dir={ckpt_dir}",
                  *(act_checkpoints("act") if policy == "act" else []), *SLURM[:3], *small_jobs(gpu), *extra)

    def hang(policy: str) -> str:
        return f"+policies.{policy}.env.STANDIN_SCENARIO=hang"

    def job_of(cell: str) -> str:
        return manifest(out)["cells"][cell]["job_id"]

    def pid_file(cell: str) -> Path:
        return out / "cells" / cell / "bundle" / "standin.pid"

    start = time.monotonic()
    # The time limit: the long pole. Its USR2 is asked for 5 s before the 1-minute limit, not
    # 30 s: under load a job may take 30 s to start Python and install a handler, and USR2's default action kills.
    sweep("flux3", "h100", hang("flux3"), "+policies.flux3.slurm={time_min:1}", "launcher.signal_delay_s=5")
    sweep("lawam", "h100", hang("lawam"))  # kill -9 of the job process
    sweep("lawam", "a100", hang("lawam"))  # scancel
    sweep("act", "a100", hang("act"))  # preempted (USR2): requeued through submitit; preempted again: failed
    sweep("wall_x", "a100", hang("wall_x"), *act_checkpoints("wall_x"))  # requeued by Slurm itself, twice
    sweep("act", "h100", hang("act"))  # swept again while running, then with --force
    sweep("flux3", "a100", "exporter=hog", "gpus.a100.slurm.mem_gb=0.5", conf=hog_conf)  # over its memory
    assert len(manifest(out)["cells"]) == 7 and len(manifest(out)["sweeps"]) == 7
    for cell in ("lawam/h100/stock", "lawam/a100/stock", "act/a100/stock", "act/h100/stock", "wall_x/a100/stock"):
        until(lambda c=cell: pid_file(c).exists(), 120, f"{cell}'s exporter")

    job_process = int(Path(f"/proc/{pid_file('lawam/h100/stock').read_text()}/stat").read_text().split()[3])
    os.kill(job_process, signal.SIGKILL)
    subprocess.run(["scancel", job_of("lawam/a100/stock")], check=True)

    calls = sbatch_calls(sbatch_log)
    again = sweep("act", "h100", hang("act"))
    assert "not submitted act/h100/stock" in again.stderr and sbatch_calls(sbatch_log) == calls
    first_job = job_of("act/h100/stock")
    forced = sweep("act", "h100", "--force")
    assert "--force" in forced.stderr and sbatch_calls(sbatch_log) == calls + 1
    assert job_of("act/h100/stock") != first_job

    def requeue(cell: str, command: list[str], runs: int) -> None:
        """Stop the cell's running job with `command`, which requeues it, and release it at once (Slurm holds a
        requeued job ~2 min); wait for its next run's exporter unless this was its last run."""
        job, before = job_of(cell), pid_file(cell).stat().st_mtime
        subprocess.run([*command, job], check=True)
        until(lambda: squeue_state(job) == "PENDING", 60, f"{cell}'s requeued job to be pending")
        subprocess.run(["scontrol", "update", f"jobid={job}", "starttime=now"], check=True)
        if runs:
            until(lambda: record(out, cell)["requeues"] == runs and pid_file(cell).exists()
                  and pid_file(cell).stat().st_mtime > before, 120, f"{cell}'s run {runs + 1}")

    usr2 = ["scancel", "--signal=USR2"]
    requeue("act/a100/stock", usr2, 1)  # submitit's handler: checkpoint(), `scontrol requeue`, exit
    subprocess.run([*usr2, job_of("act/a100/stock")], check=True)  # requeues spent: the cell fails
    requeue("wall_x/a100/stock", ["scontrol", "requeue"], 1)  # as Slurm does after a node failure
    requeue("wall_x/a100/stock", ["scontrol", "requeue"], 0)  # its third run gives up at once

    done = xm(sbatch_log, "wait", f"out_dir={out}", "--poll-s", "1", timeout=240)
    assert time.monotonic() - start < 200
    assert "7/7" in done.stderr

    killed = record(out, "lawam/h100/stock")
    assert (killed["status"], killed["failed_step"]) == ("failed", "export")
    assert "Slurm FAILED" in killed["error"] and "SIGKILL" in killed["error"] and "Killed" in killed["log_tail"]
    timed_out = record(out, "flux3/h100/stock")
    assert (timed_out["status"], timed_out["failed_step"]) == ("timeout", "export")
    assert "Slurm time limit" in timed_out["error"] and "TIMEOUT" in timed_out["error"]
    assert timed_out["requeues"] == 0
    cancelled = record(out, "lawam/a100/stock")
    assert cancelled["status"] == "cancelled" and "Slurm CANCELLED" in cancelled["error"]
    twice = record(out, "act/a100/stock")
    assert (twice["status"], twice["failed_step"], twice["requeues"]) == ("failed", "export", 1)
    assert "preempted again after 1 requeue" in twice["error"]
    history = subprocess.run(["sacct", "-X", "-D", "-n", "-P", "-o", "State", "-j", job_of("act/a100/stock")],
                             capture_output=True, text=True).stdout.split()
    assert history == ["REQUEUED", "COMPLETED"], history
    gave_up = record(out, "wall_x/a100/stock")
    assert (gave_up["status"], gave_up["requeues"]) == ("failed", 2)
    assert gave_up["error"].startswith("Slurm ran the job 3 times (preemption or node failure)")
    oom = record(out, "flux3/a100/stock")
    assert (oom["status"], oom["failed_step"]) == ("oom", "export") and "OUT_OF_MEMORY" in oom["error"]
    forced_cell = record(out, "act/h100/stock")
    assert (forced_cell["status"], forced_cell["attempt"]) == ("passed", 2)
    earlier = json.loads((out / "cells/act/h100/stock/attempts/1/record.json").read_text())
    assert earlier["status"] == "cancelled" and earlier["job_id"] == first_job


def test_slurm_and_local_give_the_same_records_and_matrix(slurm_tracking: dict, local_tracking, standin_conf: Path,
                                                           sbatch_log: Path) -> None:
    slurm_out, local_out = slurm_tracking["out"], local_tracking()
    cells = sorted(manifest(slurm_out)["cells"])
    assert len(cells) == 36
    for cell in cells:
        on_slurm, here = record(slurm_out, cell), record(local_out, cell)
        assert {k: on_slurm[k] for k in COMPARED} == {k: here[k] for k in COMPARED}, cell
        assert on_slurm["fingerprint"]["key"] == here["fingerprint"]["key"], cell
    tables = {}
    for out in (slurm_out, local_out):
        xm(sbatch_log, "collect", "--config-dir", str(standin_conf), f"out_dir={out}", "matrix=tracking",
           f"matrix.policies=[{','.join(SEEDED)}]")
        tables[out] = {name: (out / name).read_text().replace(str(out), "DIR")
                       for name in ("matrix.md", "matrix.csv")}
    assert tables[slurm_out] == tables[local_out]


def sacct_fields(job_id: str, fields: str) -> list[list[str]]:
    done = subprocess.run(["sacct", "-X", "-n", "-P", "-o", fields, "-j", job_id], capture_output=True, text=True)
    return [line.split("|") for line in done.stdout.splitlines() if line]


def test_make_random_runs_off_the_gpu(standin_conf: Path, sbatch_log: Path, tmp_path: Path) -> None:
    """launcher.prepare: one CPU array builds act's random checkpoint before the GPU arrays start (they find it
    built, waiting 0 s on it); a make_random that fails fails its cell without its GPU job ever starting."""
    out, ckpts = tmp_path / "out", tmp_path / "ckpts"  # an empty cache: the checkpoint must be built
    done = xm(sbatch_log, "sweep", "--config-dir", str(standin_conf), "matrix=tracking", "matrix.policies=[act,wall_x]",
              "matrix.torch=[stock]", f"out_dir={out}", f"ckpt_dir={ckpts}", *act_checkpoints("act"),
              "~policies.wall_x.checkpoint", "+policies.wall_x.checkpoint={random:{type:no_such_policy}}",
              "launcher=slurm", "launcher.poll_s=1", "launcher.prepare.cpus_per_task=1", "launcher.prepare.mem_gb=3",
              *small_jobs("h100", "a100"), "--wait", check=False, timeout=400)
    assert "make_random array" in done.stderr, done.stderr[-3000:]
    (sweep,) = manifest(out)["sweeps"].values()
    prep = sweep["prepare"]["job_id"]
    assert sweep["prepare"]["checkpoints"] == 2  # act's and the broken one, once each
    assert {state for state, in sacct_fields(prep, "State")} == {"COMPLETED"}
    prep_end = max(end for end, in sacct_fields(prep, "End"))
    for gpu in ("h100", "a100"):
        cell = f"act/{gpu}/stock"
        found = record(out, cell)
        assert found["status"] == "passed", found
        assert found["make_random_s"] == 0 and found["checkpoint_wait_s"] < 5, found  # built on the CPU before
        assert "reusing the random checkpoint" in (out / "cells" / cell / "make_random.log").read_text()
        (start,) = sacct_fields(manifest(out)["cells"][cell]["job_id"], "Start")[0]
        assert start >= prep_end, (start, prep_end)  # the GPU job started once the preparation had ended
        broken = record(out, f"wall_x/{gpu}/stock")
        assert (broken["status"], broken["failed_step"]) == ("failed", "make_random"), broken
        assert "no_such_policy" in (broken["error"] or "") + (broken["log_tail"] or ""), broken
        assert broken["job_id"].startswith(f"{prep}_")
        job = manifest(out)["cells"][f"wall_x/{gpu}/stock"]["job_id"]
        ((state, elapsed),) = sacct_fields(job, "State,Elapsed")
        assert state.startswith("CANCELLED") and elapsed == "00:00:00", (state, elapsed)  # never started
    assert len(list(ckpts.glob("act-*"))) == 1


def test_a_sweep_submitted_held_keeps_its_make_random_array_held(standin_conf: Path, sbatch_log: Path,
                                                                  tmp_path: Path) -> None:
    """`+launcher.sbatch.hold=true` holds every job of the sweep: the preparation array is not released either."""
    out = tmp_path / "out"
    done = xm(sbatch_log, "sweep", "--config-dir", str(standin_conf), "matrix=tracking", "matrix.policies=[act]",
              "matrix.torch=[stock]", f"out_dir={out}", f"ckpt_dir={tmp_path / 'ckpts'}", *act_checkpoints("act"),
              "launcher=slurm", "launcher.prepare.cpus_per_task=1", "launcher.prepare.mem_gb=3",
              *small_jobs("h100", "a100"), "+launcher.sbatch.hold=true")
    (sweep,) = manifest(out)["sweeps"].values()
    prep = sweep["prepare"]["job_id"]
    arrays = sorted({e["array"] for e in manifest(out)["cells"].values()})
    try:
        time.sleep(3)
        states = subprocess.run(["squeue", "-h", "-r", "-o", "%i %T %r", "-j", ",".join([prep, *arrays])],
                                capture_output=True, text=True, check=True).stdout.split("\n")
        shown = [line.split() for line in states if line.strip()]
        assert len(shown) == 3 and all(s[1:] == ["PENDING", "JobHeldUser"] for s in shown), (shown, done.stderr)
    finally:
        subprocess.run(["scancel", prep, *arrays], check=False)
