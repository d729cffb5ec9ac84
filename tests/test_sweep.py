"""Sweeps through the real CLI, submitit's local executor and make_random, with the stand-in lerobot-export."""

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

from .conftest import ROOT, act_checkpoints, cli, record

SEEDED = ["act", "wall_x", "dm05", "lawam", "flux3", "lingbot_vla_v2"]


@pytest.fixture(scope="session")
def tracking_out(standin_conf: Path, ckpt_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sweep of six seed policies over both GPUs and all three builds (36 cells)."""
    out = tmp_path_factory.mktemp("tracking")
    cli("sweep", "--config-dir", str(standin_conf), "matrix=tracking", f"matrix.policies=[{','.join(SEEDED)}]",
        f"out_dir={out}", f"ckpt_dir={ckpt_dir}", "launcher.parallel=2", "launcher.poll_s=0.2",
        *act_checkpoints("act", "wall_x", "dm05", "lingbot_vla_v2"))
    return out


def small_sweep(conf: Path, ckpt_dir: Path, out: Path, *overrides: str, **kwargs) -> subprocess.CompletedProcess:
    return cli("sweep", "--config-dir", str(conf), "matrix=tracking", "matrix.gpus=[h100]", "matrix.torch=[stock]",
               f"out_dir={out}", f"ckpt_dir={ckpt_dir}", "launcher.poll_s=0.2", *overrides, **kwargs)


def test_every_cell_leaves_a_record_with_the_seed_failures(tracking_out: Path) -> None:
    cells = sorted(p.parent.relative_to(tracking_out / "cells").as_posix()
                   for p in (tracking_out / "cells").glob("*/*/*/record.json"))
    assert len(cells) == 36
    wall_x_stock = record(tracking_out, "wall_x/a100/stock")
    assert (wall_x_stock["status"], wall_x_stock["failed_step"]) == ("failed", "save")
    assert wall_x_stock["error"].startswith("SerializeError: Unsupported getattr attribute function_const_func_spec0")
    at_limit = record(tracking_out, "wall_x/a100/pr202785")
    assert (at_limit["status"], at_limit["failed_step"]) == ("failed", "check")
    assert (at_limit["max_diff"], at_limit["tolerance"]) == (0.0953, 0.075)
    assert at_limit["margin"] == pytest.approx(0.0953 / 0.075)
    passed = record(tracking_out, "wall_x/h100/pr202785")
    assert passed["status"] == "passed" and passed["margin"] == pytest.approx(0.022 / 0.075)
    assert passed["fixes"] == ["pytorch/pytorch#202785"] and passed["failed_step"] is None
    oom = record(tracking_out, "flux3/a100/stock")
    assert oom["failed_step"] == "compile-model" and "CUDA out of memory" in oom["error"]
    assert oom["checkpoint"] == "black-forest-labs/flux-3-action-droid"
    assert record(tracking_out, "flux3/h100/stock")["status"] == "passed"
    lingbot = record(tracking_out, "lingbot_vla_v2/h100/pr202925")
    assert lingbot["failed_step"] == "trace" and lingbot["error"].startswith("ValueError: Exporting LingBot-VLA v2")
    assert "--policy.precompute_grid_thw=true" in lingbot["command"]
    autocast = record(tracking_out, "lawam/h100/pr202785")
    assert autocast["error"] == "Node.meta wrap_with_autocast_3 is missing val field"
    assert record(tracking_out, "lawam/h100/pr202925")["status"] == "passed"
    act = record(tracking_out, "act/a100/stock")
    assert act["status"] == "passed" and act["speedup"] == pytest.approx(73 / 91)
    assert act["versions"]["lerobot"] and act["versions"]["torch"] and act["versions"]["python"]
    assert act["command"][-1] == "--task=pick up the cube" or "--task" not in " ".join(act["command"])


def test_random_checkpoint_built_once_and_shared(tracking_out: Path, ckpt_dir: Path) -> None:
    built = [json.loads(p.read_text()) for p in ckpt_dir.glob("*/make_random.json")]
    assert [b["type"] for b in built] == ["act"]
    logs = [(tracking_out / "cells" / c / "make_random.log").read_text()
            for c in ("act/h100/stock", "wall_x/a100/pr202785", "dm05/h100/pr202925")]
    assert all("reusing the random checkpoint" in text or "make_random.py" in text for text in logs)
    assert sum("reusing" in text for text in logs) >= 2
    ckpt = Path(record(tracking_out, "dm05/h100/stock")["checkpoint"])
    assert (ckpt / "config.json").exists() and (ckpt / "model.safetensors").exists()


def test_timeout_leaves_a_record_and_the_sweep_goes_on(standin_conf: Path, ckpt_dir: Path, tmp_path: Path) -> None:
    small_sweep(standin_conf, ckpt_dir, tmp_path, "matrix.policies=[lawam,flux3]", "policies.lawam.timeout_min=0.05",
                "+policies.lawam.env.STANDIN_SCENARIO=hang")
    hung = record(tmp_path, "lawam/h100/stock")
    assert hung["status"] == "timeout" and hung["failed_step"] == "export"
    assert "time limit of 3 s reached" in hung["log_tail"] and 3 <= hung["export_s"] < 30
    assert record(tmp_path, "flux3/h100/stock")["status"] == "passed"


def test_kill_9_of_the_exporter_is_recorded(standin_conf: Path, ckpt_dir: Path, tmp_path: Path) -> None:
    args = ["sweep", "--config-dir", str(standin_conf), "matrix=tracking", "matrix.gpus=[h100]",
            "matrix.torch=[stock]", "matrix.policies=[lawam,flux3]", f"out_dir={tmp_path}", f"ckpt_dir={ckpt_dir}",
            "+policies.lawam.env.STANDIN_SCENARIO=hang", "launcher.poll_s=0.2"]
    sweep = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", *args], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    pid_file = tmp_path / "cells/lawam/h100/stock/bundle/standin.pid"
    deadline = time.monotonic() + 60
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(0.2)
    os.kill(int(pid_file.read_text()), signal.SIGKILL)
    assert sweep.wait(timeout=120) == 0
    killed = record(tmp_path, "lawam/h100/stock")
    assert killed["status"] == "killed" and killed["error"] == "the exporter was killed by SIGKILL"
    assert "Exporting jialei02/lawam-libero-sft-lerobot" in killed["log_tail"]
    assert record(tmp_path, "flux3/h100/stock")["status"] == "passed"


def test_crashed_exporter_and_broken_build_are_recorded(standin_conf: Path, ckpt_dir: Path, tmp_path: Path) -> None:
    done = small_sweep(standin_conf, ckpt_dir, tmp_path, "matrix.policies=[lawam,flux3]",
                       "matrix.torch=[stock,pr202925]", "+policies.lawam.env.STANDIN_SCENARIO=crash",
                       "builds.pr202925.python=/nonexistent/bin/python", check=False)
    assert done.returncode == 1, done.stderr  # an `error` record: the orchestrator could not run that build
    crashed = record(tmp_path, "lawam/h100/stock")
    assert crashed["status"] == "killed" and crashed["error"] == "the exporter was killed by SIGSEGV"
    broken = record(tmp_path, "flux3/h100/pr202925")
    assert (broken["status"], broken["failed_step"]) == ("error", "setup")
    assert "/nonexistent/bin/python" in broken["error"] and broken["ended_at"]
    assert record(tmp_path, "flux3/h100/stock")["status"] == "passed"


def test_make_random_failure_is_its_step(standin_conf: Path, ckpt_dir: Path, tmp_path: Path) -> None:
    small_sweep(standin_conf, ckpt_dir, tmp_path, "matrix.policies=[dm05]")
    failed = record(tmp_path, "dm05/h100/stock")  # lerobot 0.6.1 has no dm05 policy type: make_random fails
    assert (failed["status"], failed["failed_step"]) == ("failed", "make_random")
    assert "dm05" in failed["error"] and failed["command"] == []
    assert not list(ckpt_dir.glob("dm05-*"))


def test_rerun_keeps_earlier_attempts(standin_conf: Path, ckpt_dir: Path, tmp_path: Path) -> None:
    small_sweep(standin_conf, ckpt_dir, tmp_path, "matrix.policies=[flux3]")
    small_sweep(standin_conf, ckpt_dir, tmp_path, "matrix.policies=[flux3]")
    cell = tmp_path / "cells/flux3/h100/stock"
    assert record(tmp_path, "flux3/h100/stock")["attempt"] == 2
    first = json.loads((cell / "attempts/1/record.json").read_text())
    assert first["attempt"] == 1 and first["status"] == "passed" and (cell / "attempts/1/export.log").exists()


def test_job_environment_has_axis_env_and_cell_names(ckpt_dir: Path, tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    (conf / "exporter").mkdir(parents=True)
    (conf / "exporter" / "env_dump.yaml").write_text(
        'command: ["{python}", "-c", "import os, json; print(json.dumps(dict(os.environ)))"]\n')
    cli("sweep", "--config-dir", str(conf), "matrix=tracking", "matrix.gpus=[h100]", "matrix.torch=[local]",
        "matrix.policies=[flux3]", "exporter=env_dump", f"out_dir={tmp_path}", f"ckpt_dir={ckpt_dir}",
        "+policies.flux3.env.FROM_POLICY=p", "+gpus.h100.env.FROM_GPU=g", "+builds.local.env.FROM_TORCH=t")
    text = (tmp_path / "cells/flux3/h100/local/export.log").read_text().splitlines()
    env = json.loads(next(line for line in text if line.startswith("{")))
    assert (env["FROM_POLICY"], env["FROM_GPU"], env["FROM_TORCH"]) == ("p", "g", "t")
    assert env["EXPORT_MATRIX_CELL"] == "flux3/h100/local" and env["EXPORT_MATRIX_POLICY"] == "flux3"
    assert (env["EXPORT_MATRIX_GPU"], env["EXPORT_MATRIX_TORCH"]) == ("h100", "local")


def test_an_exports_resume_folder_outlives_its_attempt(ckpt_dir: Path, tmp_path: Path) -> None:
    """What an export saved for the next attempt (EXPORT_MATRIX_RESUME_DIR) stays in the cell when the attempt
    is archived, so a rerun after a time limit starts from it; the attempt's bundle and logs move as before."""
    conf = tmp_path / "conf"
    (conf / "exporter").mkdir(parents=True)
    saver = ("import os, pathlib; d = pathlib.Path(os.environ['EXPORT_MATRIX_RESUME_DIR']); "
             "print('found ' + (d / 'key').read_text() if (d / 'key').exists() else 'found nothing'); "
             "d.mkdir(exist_ok=True); (d / 'key').write_text('k1'); "
             "print('Exported policy test case: largest difference 0 (tolerance 1)')")
    (conf / "exporter" / "saver.yaml").write_text(json.dumps({"command": ["{python}", "-c", saver]}))
    args = ("sweep", "--config-dir", str(conf), "matrix=tracking", "matrix.gpus=[h100]", "matrix.torch=[local]",
            "matrix.policies=[flux3]", "exporter=saver", f"out_dir={tmp_path}", f"ckpt_dir={ckpt_dir}")
    cli(*args)
    cli(*args)
    cell = tmp_path / "cells/flux3/h100/local"
    assert "found nothing" in (cell / "attempts/1/export.log").read_text()
    assert "found k1" in (cell / "export.log").read_text()
    assert (cell / "resume/key").read_text() == "k1" and not (cell / "attempts/1/resume").exists()


def test_local_jobs_see_the_gpu_their_cell_asks_for(tmp_path: Path) -> None:
    """submitit's local executor hides every GPU unless told how many a job gets: a GPU cell gets its gres's
    count, numbered among the GPUs the sweep itself may see; a CPU cell gets none."""
    conf = tmp_path / "conf"
    show = ("import os; print('visible=' + os.environ['CUDA_VISIBLE_DEVICES']); "
            "print('Exported policy test case: largest difference 0 (tolerance 1)')")
    (conf / "exporter").mkdir(parents=True)
    (conf / "exporter" / "show.yaml").write_text(json.dumps({"command": ["{python}", "-c", show]}))
    (conf / "policy").mkdir()
    (conf / "policy" / "probe.yaml").write_text(json.dumps({"checkpoint": {"path": "none"}, "export_args": []}))
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "sweep", "--config-dir", str(conf),
                           "matrix=gpu_smoke", "matrix.policies=[probe]", "matrix.gpus=[h200,cpu]", "exporter=show",
                           f"out_dir={tmp_path / 'out'}", "launcher.poll_s=0.2"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "CUDA_VISIBLE_DEVICES": "3,5"})
    assert done.returncode == 0, done.stderr[-2000:]
    logs = {gpu: (tmp_path / f"out/cells/probe/{gpu}/local/export.log").read_text() for gpu in ("h200", "cpu")}
    assert "visible=3\n" in logs["h200"] and "visible=\n" in logs["cpu"]


def test_a_second_sweep_into_the_same_out_dir_stops_with_one_line(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    slow = "import time; time.sleep(6); print('Exported policy test case: largest difference 0 (tolerance 1)')"
    (conf / "exporter").mkdir(parents=True)
    (conf / "exporter" / "slow.yaml").write_text(json.dumps({"command": ["{python}", "-c", slow]}))
    (conf / "policy").mkdir()
    (conf / "policy" / "probe.yaml").write_text(json.dumps({"checkpoint": {"path": "none"}, "export_args": []}))
    args = [sys.executable, "-m", "orchestrator.cli", "sweep", "--config-dir", str(conf), "matrix.policies=[probe]",
            "exporter=slow", f"out_dir={tmp_path / 'out'}", "launcher.poll_s=0.2"]
    first = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        record_path = tmp_path / "out/cells/probe/cpu/local/record.json"
        deadline = time.monotonic() + 60
        while not (record_path.exists() and json.loads(record_path.read_text())["status"] == "running"):
            assert time.monotonic() < deadline and first.poll() is None, first.communicate()
            time.sleep(0.2)
        second = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert second.returncode == 2
        assert second.stderr.strip().splitlines() == [
            f"export-matrix: error: another sweep is running in {tmp_path / 'out'} "
            f"(matrix smoke, pid {first.pid}, since " + second.stderr.split("since ", 1)[1].split(")")[0]
            + "): wait for it to end, or give this one another out_dir"]
        assert first.wait(timeout=120) == 0
    finally:
        first.kill()
    cell = record(tmp_path / "out", "probe/cpu/local")
    assert cell["status"] == "passed" and cell["attempt"] == 1
    assert not (tmp_path / "out/cells/probe/cpu/local/attempts").exists()  # the second sweep touched nothing


def test_a_check_near_its_limit_runs_again_and_the_table_shows_the_range(standin_conf: Path, ckpt_dir: Path,
                                                                          tmp_path: Path) -> None:
    from orchestrator.cli import main

    small_sweep(standin_conf, ckpt_dir, tmp_path, "matrix.policies=[wall_x,act]", "matrix.torch=[pr202785]",
                "+policies.wall_x.env.STANDIN_DIFFS='0.06,0.095,0.047'", *act_checkpoints("act", "wall_x"))
    wall_x = record(tmp_path, "wall_x/h100/pr202785")
    assert wall_x["check_runs"] == [0.06, 0.095, 0.047]  # margin 0.8 first: in the band, so 3 runs in all
    assert wall_x["max_diff"] == 0.06 and wall_x["status"] == "passed"  # the median's verdict
    assert (tmp_path / "cells/wall_x/h100/pr202785/export.log").read_text().count("[export-matrix] repeat") == 2
    act = record(tmp_path, "act/h100/pr202785")
    assert act["check_runs"] == [] and act["margin"] < 0.8  # far from the limit: one run
    assert main(["collect", "--config-dir", str(standin_conf), f"out_dir={tmp_path}"]) == 0
    assert "at limit 0.63–1.27" in (tmp_path / "matrix.md").read_text()


def test_a_timeout_names_the_step_its_exporter_had_started(standin_conf: Path, ckpt_dir: Path,
                                                           tmp_path: Path) -> None:
    """The embedded exporters print `[step] ...` as each step starts: a cell stopped at its limit names the last."""
    conf = tmp_path / "conf"
    shutil.copytree(standin_conf, conf)
    body = ("import time; print('[load] policy', flush=True); print('[load] done in 0.1 s'); "
            "print('[compile-model] to_edge_transform_and_lower ...', flush=True); time.sleep(120)")
    (conf / "exporter").mkdir()
    (conf / "exporter" / "stepper.yaml").write_text(json.dumps({"command": ["{python}", "-c", body]}))
    small_sweep(conf, ckpt_dir, tmp_path / "out", "matrix.policies=[lawam]", "policies.lawam.timeout_min=0.05",
                "exporter=stepper")
    hung = record(tmp_path / "out", "lawam/h100/stock")
    assert (hung["status"], hung["failed_step"]) == ("timeout", "compile-model"), hung
    assert hung["steps_s"] == {"load": 0.1}
