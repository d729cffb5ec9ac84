"""Nothing lost: killed sweeps, orphaned jobs, abandoned records, markup in foreign text (issue: reliability)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from orchestrator.record import Record, owner, read_record, write_record

from .conftest import ROOT, record

SLOW = ("import time; print('[export] step one', flush=True); time.sleep({s}); "
        "print('Exported policy test case: largest difference 0 (tolerance 1)')")


def probe_conf(tmp_path: Path, seconds: float, extra: str = "") -> Path:
    conf = tmp_path / "conf"
    (conf / "exporter").mkdir(parents=True)
    (conf / "exporter" / "slow.yaml").write_text(json.dumps({"command": ["{python}", "-c", SLOW.format(s=seconds)
                                                                         + extra]}))
    (conf / "policy").mkdir()
    (conf / "policy" / "probe.yaml").write_text(json.dumps({"checkpoint": {"path": "none"}, "export_args": []}))
    return conf


def cli_args(conf: Path, out: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "orchestrator.cli", *args, "--config-dir", str(conf), "matrix.policies=[probe]",
            "exporter=slow", f"out_dir={out}", "launcher.poll_s=0.2"]


def wait_for_status(path: Path, status: str, timeout_s: float = 60) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            data = json.loads(path.read_text())
            if data["status"] == status:
                return data
        time.sleep(0.2)
    raise AssertionError(f"{path} never became {status}")


def sweep_until_running(conf: Path, out: Path) -> tuple[subprocess.Popen, dict]:
    """A sweep of the probe cell in its own session, once its job has written the `running` record."""
    sweep = subprocess.Popen(cli_args(conf, out, "sweep"), cwd=ROOT, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    return sweep, wait_for_status(out / "cells/probe/cpu/local/record.json", "running")


def test_an_orphan_of_an_earlier_attempt_never_writes_over_a_later_one(tmp_path: Path) -> None:
    cell = tmp_path / "cells/probe/cpu/local"
    write_record(cell, Record(cell="probe/cpu/local", policy="probe", gpu="cpu", torch="local", exporter="x",
                              status="pending", attempt=2))
    orphan = Record(cell="probe/cpu/local", policy="probe", gpu="cpu", torch="local", exporter="x",
                    status="killed", attempt=1)
    assert write_record(cell, orphan) is False
    assert read_record(cell).attempt == 2 and read_record(cell).status == "pending"


def test_kill_9_of_the_sweep_then_rerun_keeps_every_attempt(tmp_path: Path) -> None:
    conf, out = probe_conf(tmp_path, 30), tmp_path / "out"
    sweep, running = sweep_until_running(conf, out)
    os.kill(sweep.pid, signal.SIGKILL)  # the sweep alone: its job lives on, orphaned
    sweep.wait()
    assert owner.alive(running["owner"])
    status = subprocess.run(cli_args(conf, out, "status"), cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "running" in status.stdout  # the orphan still runs: nothing to settle yet
    conf2 = probe_conf(tmp_path / "fast", 0)
    rerun = subprocess.run([*cli_args(conf2, out, "rerun", "probe/cpu/local")], cwd=ROOT, capture_output=True,
                           text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    time.sleep(2)  # the orphan got SIGTERM: give it time to try (and fail) to write its ending
    now = record(out, "probe/cpu/local")
    assert (now["status"], now["attempt"]) == ("passed", 2)
    first = json.loads((out / "cells/probe/cpu/local/attempts/1/record.json").read_text())
    assert first["attempt"] == 1 and first["status"] == "cancelled", first
    assert not owner.alive(running["owner"])  # the orphan was stopped


def test_a_record_whose_job_died_is_settled_and_rerun_failed_finds_it(tmp_path: Path) -> None:
    conf, out = probe_conf(tmp_path, 30), tmp_path / "out"
    sweep, running = sweep_until_running(conf, out)
    os.killpg(sweep.pid, signal.SIGKILL)  # the sweep and everything it started
    sweep.wait()
    os.kill(running["owner"]["pid"], signal.SIGKILL) if owner.alive(running["owner"]) else None
    deadline = time.monotonic() + 10
    while owner.alive(running["owner"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    status = subprocess.run(cli_args(conf, out, "status"), cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "killed" in status.stdout and "running" not in status.stdout, status.stdout
    settled = record(out, "probe/cpu/local")
    assert settled["status"] == "killed" and "ended without finishing its record" in settled["error"]
    rerun = subprocess.run(cli_args(probe_conf(tmp_path / "fast", 0), out, "rerun", "--failed"), cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0 and record(out, "probe/cpu/local")["attempt"] == 2, rerun.stderr[-2000:]


def test_rich_markup_in_an_error_line_is_printed_as_text(tmp_path: Path) -> None:
    conf = probe_conf(tmp_path, 0, "; raise SystemExit('RuntimeError: closing tag [/red] and [bold]x')")
    (conf / "exporter" / "slow.yaml").write_text(json.dumps({"command": [
        "{python}", "-c", "import sys; print('RuntimeError: closing tag [/red] and [bold]x'); "
        "print('error: The export step failed (see above), so the bundle was not written.'); sys.exit(1)"]}))
    done = subprocess.run([*cli_args(conf, tmp_path / "out", "sweep")], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "[export] RuntimeError: closing tag [/red] and [bold]x" in " ".join(done.stderr.split())
    assert "MarkupError" not in done.stderr


def test_bad_values_give_one_line_naming_key_value_and_what_is_allowed(tmp_path: Path) -> None:
    from .conftest import cli, write

    (tmp_path / "afile").write_text("")
    bad = write(tmp_path / "conf/policy/act.yaml", "checkpoint: {random: {type: act\n  bad: [\n")
    cases = [
        (["sweep", f"out_dir={tmp_path / 'afile'}"], f"out_dir '{tmp_path / 'afile'}' is a file, not a directory"),
        (["sweep", "out_dir=/proc/x/y"], "out_dir '/proc/x/y' cannot be written: "),
        (["cells", "--config-dir", str(tmp_path / "conf")], f"malformed YAML in {bad}, line 2: expected ','"),
        (["sweep", "policies.act.timeout_min=abc", f"out_dir={tmp_path / 'o'}"],
         "policies.act.timeout_min must be a number greater than 0, got 'abc'"),
        (["sweep", "launcher.parallel=two", f"out_dir={tmp_path / 'o'}"],
         "launcher.parallel must be an integer at least 1, got 'two'"),
        (["rerun", "act//stock", f"out_dir={tmp_path / 'o'}"], "bad cell id 'act//stock' (expected policy/gpu/torch)"),
        (["collect", str(tmp_path / "o")], f"'{tmp_path / 'o'}' is not a Hydra override (key=value, +key=value or "
                                            f"~key); a results folder goes in as out_dir={tmp_path / 'o'}"),
        (["sweep", "launcher=slurm", "+launcher.array_paralelism=8", f"out_dir={tmp_path / 'o'}"],
         "unknown key launcher.array_paralelism (valid: array_parallelism, max_requeues, name, "),
        (["sweep", "gpus.cpu.slurm.mem_gb=lots", f"out_dir={tmp_path / 'o'}"],
         "gpus.cpu.slurm.mem_gb must be a number greater than 0, got 'lots'"),
        (["sweep", "policies.act.export_args=3", f"out_dir={tmp_path / 'o'}"],
         "policies.act.export_args must be a list of strings, got 3"),
    ]
    for args, message in cases:
        done = cli(*args, check=False, timeout=120)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"export-matrix: error: {message}"), \
            (args, done.stderr[-1500:])
    assert not (tmp_path / "o").exists()  # nothing was written for a bad value


def test_disk_full_mid_sweep_ends_in_one_line_and_the_cells_settle_afterwards(tmp_path: Path) -> None:
    import shutil

    import pytest

    out = tmp_path / "small"
    out.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(out)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        conf = probe_conf(tmp_path, 0)
        fill = ("import pathlib; pathlib.Path('filler').write_bytes(b'0' * 1_000_000); "
                "print('Exported policy test case: largest difference 0 (tolerance 1)')")
        (conf / "exporter" / "slow.yaml").write_text(json.dumps({"command": ["{python}", "-c", fill]}))
        done = subprocess.run(cli_args(conf, out, "sweep"), cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert done.returncode == 1
        assert "Traceback" not in done.stderr, done.stderr[-3000:]
        assert done.stderr.strip().splitlines()[-1].startswith("export-matrix: error: ")
        assert "No space left on device" in done.stderr
        (out / "cells/probe/cpu/local/filler").unlink(missing_ok=True)
        shutil.rmtree(out / "submitit", ignore_errors=True)
        status = subprocess.run(cli_args(conf, out, "status"), cwd=ROOT, capture_output=True, text=True,
                                timeout=120)
        assert status.returncode == 0, status.stderr[-2000:]
        settled = record(out, "probe/cpu/local")
        assert settled["status"] in ("killed", "cancelled", "failed"), settled  # ended, never pending for good
        row = next(line for line in status.stdout.splitlines() if "probe/cpu/local" in line)
        assert "killed" in row and "stale" not in row  # its fingerprint was recorded before the disk filled
    finally:
        subprocess.run(["umount", "-l", str(out)], capture_output=True)


def test_a_truncated_record_is_named_by_status_and_rerun_failed_runs_the_cell(tmp_path: Path) -> None:
    conf, out = probe_conf(tmp_path, 0), tmp_path / "out"
    assert subprocess.run(cli_args(conf, out, "sweep"), cwd=ROOT, capture_output=True, timeout=300).returncode == 0
    path = out / "cells/probe/cpu/local/record.json"
    cut = path.read_text()[:40]
    path.write_text(cut)  # cut short, as a full disk or a crash of another tool might leave it
    status = subprocess.run(cli_args(conf, out, "status"), cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert status.returncode == 0 and "unreadable" in status.stdout and "Traceback" not in status.stderr
    rerun = subprocess.run(cli_args(conf, out, "rerun", "--failed"), cwd=ROOT, capture_output=True, text=True,
                           timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert record(out, "probe/cpu/local")["status"] == "passed"
    assert (out / "cells/probe/cpu/local/attempts/1/record.json").read_text() == cut  # kept as it was, not lost


def test_a_lowering_out_of_gpu_memory_is_an_oom_record_of_the_row_3_kind(tmp_path: Path) -> None:
    from orchestrator.cli import main

    conf, out = probe_conf(tmp_path, 0), tmp_path / "out"
    oom = ("torch._inductor.exc.InductorError: RuntimeError: Failed to run autotuning code block: CUDA out of memory. "
           "Tried to allocate 2.98 GiB. GPU 0 has a total capacity of 79.25 GiB of which 1.50 GiB is free.")
    (conf / "exporter" / "slow.yaml").write_text(json.dumps({"command": [
        "{python}", "-c", f"import sys; print({oom!r}); print('Exported policy GPU memory: export 81234.0 MiB, run "
        "0.0 MiB (NVML peak)'); print('error: The compile-model step failed (see above), so the bundle was not "
        "written.'); sys.exit(1)"]}))
    # row 3 describes the CUDA exporters' cells; this site's catalog names its own exporter there too
    (conf / "failures.yaml").write_text(json.dumps({"3": {"exporters": ["lerobot_cuda", "executorch_cuda", "slow"]}}))
    done = subprocess.run(cli_args(conf, out, "sweep"), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    cell = record(out, "probe/cpu/local")
    assert (cell["status"], cell["failed_step"]) == ("oom", "compile-model")
    assert cell["peak_gpu_phases"] == {"export": 81234.0, "run": 0.0} and cell["error"] == oom
    assert main(["collect", "--config-dir", str(conf), f"out_dir={out}", "exporter=slow"]) == 0  # the sweep's
    assert "| probe | ❌ 3 |" in (out / "matrix.md").read_text()


def _as_from_a_terminal() -> None:
    """SIGINT's default action, as a sweep started at a terminal has: one started in a script's background
    (`cmd &`) inherits SIGINT ignored, and Python keeps it ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_or_sigterm_of_a_local_sweep_is_one_line_and_exit_130(tmp_path: Path) -> None:
    """The terminal's Ctrl-C reaches the whole process group, jobs included; SIGTERM only the sweep."""
    conf = probe_conf(tmp_path, 120)
    for signum in (signal.SIGINT, signal.SIGTERM):
        out = tmp_path / signum.name
        sweep = subprocess.Popen(cli_args(conf, out, "sweep"), cwd=ROOT, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, start_new_session=True,
                                 preexec_fn=_as_from_a_terminal)
        wait_for_status(out / "cells/probe/cpu/local/record.json", "running")
        if signum == signal.SIGINT:
            os.killpg(sweep.pid, signum)
        else:
            sweep.send_signal(signum)
        _, err = sweep.communicate(timeout=90)
        assert sweep.returncode == 130, err
        assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
        last = err.strip().splitlines()[-1]
        assert last == (f"interrupted: 1 cells cancelled, records kept; rerun with: export-matrix rerun --failed "
                        f"--config-dir {conf} matrix.policies=[probe] exporter=slow out_dir={out} "
                        "launcher.poll_s=0.2").replace(f"--config-dir {conf} ", ""), err
        assert record(out, "probe/cpu/local")["status"] in ("cancelled", "killed")


def _as_from_a_scripts_background() -> None:
    """What `export-matrix sweep ... &` in a script gets: bash starts a background job with SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


def test_sigterm_of_a_sweep_ignoring_sigint_stops_its_jobs_and_no_late_job_rewrites_the_record(
        tmp_path: Path) -> None:
    """Issue 44 item 6: a background sweep (SIGINT ignored) sent SIGTERM used to say '2 cells cancelled' while
    status said 1 cancelled, 1 killed, and its exporter ran on and later rewrote the record `killed` -> `passed`.
    Now the exporter's process group is stopped before the sweep exits, the line's count is what status shows, and
    the record stays as the sweep left it after the exporter would have finished."""
    seconds = 40
    conf = tmp_path / "conf"
    slow = ("import os, time; open('exporter.pid', 'w').write(str(os.getpid())); print('[export] step one', "
            f"flush=True); time.sleep({seconds}); "
            "print('Exported policy test case: largest difference 0 (tolerance 1)')")
    (conf / "exporter").mkdir(parents=True)
    (conf / "exporter" / "slow.yaml").write_text(json.dumps({"command": ["{python}", "-c", slow]}))
    (conf / "policy").mkdir()
    for name in ("probe", "probe2"):
        (conf / "policy" / f"{name}.yaml").write_text(json.dumps({"checkpoint": {"path": "none"}, "export_args": []}))
    out = tmp_path / "out"
    args = [sys.executable, "-m", "orchestrator.cli", "sweep", "--config-dir", str(conf),
            "matrix.policies=[probe,probe2]", "exporter=slow", f"out_dir={out}", "launcher.poll_s=0.2"]
    sweep = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True, preexec_fn=_as_from_a_scripts_background)
    cell = out / "cells/probe/cpu/local"
    wait_for_status(cell / "record.json", "running")
    deadline = time.monotonic() + 60
    while not (cell / "exporter.pid").exists() or not (cell / "exporter.pid").read_text():
        assert time.monotonic() < deadline, "the exporter never started"
        time.sleep(0.1)
    exporter = int((cell / "exporter.pid").read_text())
    started = time.monotonic()
    sweep.send_signal(signal.SIGTERM)
    _, err = sweep.communicate(timeout=120)
    assert sweep.returncode == 130, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("interrupted: 2 cells cancelled, records kept; rerun with: export-matrix rerun "), err
    assert _gone(exporter), "the sweep exited and left its exporter running"
    status = subprocess.run([sys.executable, "-m", "orchestrator.cli", "status", "--config-dir", str(conf),
                             "matrix.policies=[probe,probe2]", "exporter=slow", f"out_dir={out}"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert status.returncode == 0, status.stderr[-2000:]
    caption = status.stdout.strip().splitlines()[-1].split()
    assert caption == ["2", "cancelled"], status.stdout
    after_sweep = {name: record(out, f"{name}/cpu/local") for name in ("probe", "probe2")}
    assert after_sweep["probe"]["status"] == "cancelled", after_sweep["probe"]
    time.sleep(max(0.0, started + seconds + 5 - time.monotonic()))  # past when the exporter would have passed
    assert {name: record(out, f"{name}/cpu/local") for name in ("probe", "probe2")} == after_sweep


def test_ctrl_c_kills_an_exporter_that_ignores_sigterm_before_the_sweep_exits(tmp_path: Path) -> None:
    """Ctrl-C reaches the job's controller, which SIGKILLs the job a second later, before the job's own grace to
    its exporter ends: an exporter deaf to SIGTERM and SIGINT used to run on, orphaned. The sweep kills the
    process groups its jobs led."""
    deaf = ("import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "signal.signal(signal.SIGINT, signal.SIG_IGN); open('exporter.pid', 'w').write(str(os.getpid())); "
            "time.sleep(60)")
    conf, out = probe_conf(tmp_path, 0), tmp_path / "out"
    (conf / "exporter" / "slow.yaml").write_text(json.dumps({"command": ["{python}", "-c", deaf]}))
    sweep = subprocess.Popen(cli_args(conf, out, "sweep"), cwd=ROOT, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, start_new_session=True,
                             preexec_fn=_as_from_a_terminal)
    pid_file = out / "cells/probe/cpu/local/exporter.pid"
    deadline = time.monotonic() + 60
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline, "the exporter never started"
        time.sleep(0.1)
    os.killpg(sweep.pid, signal.SIGINT)
    _, err = sweep.communicate(timeout=120)
    assert sweep.returncode == 130, err
    assert _gone(int(pid_file.read_text())), "the sweep exited and left its exporter running"
    assert record(out, "probe/cpu/local")["status"] == "cancelled"
