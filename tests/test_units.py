"""Table-driven unit tests: sacct lines to job states, Slurm end states to records, cell expansion and covering,
the launcher a config picks."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config import compose_config
from orchestrator.config.cells import expand
from orchestrator.config.specs_now import covering
from orchestrator.launchers.slurm.manifest import Entry
from orchestrator.launchers.slurm.sacct import JobState, lookup, parse_sacct
from orchestrator.launchers.slurm.settle import settle, settled
from orchestrator.record import Record, Status

LINE = "{id}|{state}|{exit}|00:01:02|01:05:00|node-h100|2026-12-03T10:00:00"


@pytest.mark.parametrize(("lines", "job_id", "state", "exit_code"), [
    (["7_3|COMPLETED|0:0"], "7_3", "COMPLETED", "0:0"),
    (["7_3|CANCELLED by 0|0:15"], "7_3", "CANCELLED", "0:15"),  # the detail is kept apart
    (["7_[0-9%4]|PENDING|0:0"], "7_5", "PENDING", "0:0"),  # a range of pending tasks
    (["7_[0-2,5]|PENDING|0:0", "7_1|RUNNING|0:0"], "7_1", "RUNNING", "0:0"),  # the task's own line wins
    (["7|PENDING|0:0"], "7_4", "PENDING", "0:0"),  # the whole array, not yet split
    (["9|FAILED|0:9", "9.0|OUT_OF_MEMORY|0:125", "9.batch|FAILED|0:9"], "9", "OUT_OF_MEMORY", "0:9"),
    (["9|COMPLETED|0:0", "9.0|COMPLETED|0:0"], "9", "COMPLETED", "0:0"),
    (["8_1|TIMEOUT|0:0"], "8_2", None, None),  # another task of the array: unknown
])
def test_parse_sacct(lines: list[str], job_id: str, state: str | None, exit_code: str | None) -> None:
    text = "\n".join(LINE.format(id=i, state=s, exit=e) for i, s, e in (line.split("|") for line in lines))
    found = lookup(parse_sacct(text + "\n\n|broken line\n"), job_id)
    assert (found.state if found else None, found.exit_code if found else None) == (state, exit_code)


def entry(tmp_path: Path) -> Entry:
    out = tmp_path / "job.out"
    out.write_text("Traceback (most recent call last):\nMemoryError\n")
    return Entry(job_id="7_1", out_dir=str(tmp_path), stdout=str(out), stderr=str(out), time_min=65,
                 signature={"mem_gb": 3})


def record(status: str, **fields) -> Record:
    return Record(cell="act/h100/stock", policy="act", gpu="h100", torch="stock", exporter="x", status=status,
                  **fields)


SETTLE_CASES = [
    (record("passed"), JobState("7_1", "COMPLETED"), "passed", None),  # the job's own record stays
    (record("running"), JobState("7_1", "COMPLETED"), "error", "without finishing its record"),
    (record("failed", error="E"), JobState("7_1", "FAILED", "1:0"), "failed", "E"),
    (record("running"), JobState("7_1", "FAILED", "0:9"), "failed", "SIGKILL"),
    (record("running"), JobState("7_1", "TIMEOUT", timelimit="01:05:00"), "timeout", "time limit of 01:05:00"),
    (record("passed", job_id="7_1"), JobState("7_1", "TIMEOUT"), "timeout", "time limit"),  # Slurm's end wins
    (record("running"), JobState("7_1", "OUT_OF_MEMORY"), "oom", "3 GB"),
    (record("pending"), JobState("7_1", "CANCELLED", detail="by 0"), "cancelled", "before it started"),
    (record("passed", job_id="7_1"), JobState("7_1", "CANCELLED"), "cancelled", "was cancelled"),
    (record("failed", job_id="8_0", failed_step="make_random", error="E"), JobState("7_1", "CANCELLED"), "failed",
     "E"),  # failed by the make_random preparation (another job), which cancelled this one
    (record("running"), JobState("7_1", "NODE_FAIL", "0:0"), "failed", "did not run it again"),
    (record("pending"), JobState("7_1", "UNKNOWN"), "error", "has no job 7_1"),
]


@pytest.mark.parametrize(("before", "slurm", "status", "error_part"), SETTLE_CASES)
def test_settle(tmp_path: Path, before: Record, slurm: JobState, status: str, error_part: str | None) -> None:
    after = settle(before, entry(tmp_path), slurm)
    assert after.status == Status(status)
    assert (error_part is None and after.error is None) or error_part in after.error
    if before.status not in ("pending", "running") and after.status == before.status:
        assert after.error == before.error  # a finished record keeps its own words


@pytest.mark.parametrize(("before", "slurm", "status", "error_part"), SETTLE_CASES)
def test_a_settled_record_is_not_settled_again(tmp_path: Path, before: Record, slurm: JobState, status: str,
                                               error_part: str | None) -> None:
    """poll skips the records `settled` names: settling them again must give them back unchanged."""
    job = entry(tmp_path)
    once = settle(before, job, slurm)
    for found in (before, once):
        if settled(found, job, slurm):
            assert settle(found, job, slurm).to_dict() == found.to_dict()
    if before.status in ("pending", "running"):  # what Slurm ended is settled once, then skipped
        assert settled(once, job, slurm)
    elif slurm.state in ("COMPLETED", "FAILED", "UNKNOWN"):  # the job's own finished record: nothing to copy
        assert settled(before, job, slurm)


@pytest.mark.parametrize(("matrix", "cells"), [
    ({"policies": ["a", "b"], "gpus": ["h"], "torch": ["s"]}, ["a/h/s", "b/h/s"]),
    ({"policies": ["a", "b"], "gpus": ["h", "g"], "torch": ["s"], "exclude": [{"policy": "b", "gpu": "g"}]},
     ["a/h/s", "a/g/s", "b/h/s"]),
    ({"policies": ["a"], "gpus": ["h"], "torch": ["s"], "include": [{"policy": "c", "torch": "p"}]},
     ["a/h/s", "c/h/p"]),  # a partial include takes the other axes' lists
    ({"policies": "a", "gpus": ["h"], "torch": ["s", "p"]}, ["a/h/s", "a/h/p"]),  # one name, not a list
])
def test_expand(matrix: dict, cells: list[str]) -> None:
    from omegaconf import OmegaConf

    found = expand(OmegaConf.create(matrix))
    assert [f"{c['policy']}/{c['gpu']}/{c['torch']}" for c in found] == cells


@pytest.mark.parametrize("cell_ids", [
    ["act/h100/stock"],
    ["act/h100/stock", "wall_x/a100/pr202785", "dm05/h100/pr202925"],
])
def test_covering_holds_every_cell_and_composes(cell_ids: list[str]) -> None:
    """`covering` gives a matrix whose cells include these (rerun and status filter it down to them)."""
    composed = compose_config(["matrix=tracking", *covering(cell_ids)])
    found = {f"{c['policy']}/{c['gpu']}/{c['torch']}" for c in expand(composed.cfg.matrix)}
    assert set(cell_ids) <= found
    assert len(found) == len({c.split("/")[0] for c in cell_ids}) * len({c.split("/")[1] for c in cell_ids}) * \
        len({c.split("/")[2] for c in cell_ids})


def test_a_record_with_nan_reads_back(tmp_path: Path) -> None:
    """json writes NaN and Infinity, which orjson refuses: such a record must still read, not turn unreadable."""
    from orchestrator.record import read_record, write_record

    cell = tmp_path / "cells" / "act" / "h100" / "stock"
    write_record(cell, Record(cell="act/h100/stock", policy="act", gpu="h100", torch="stock", exporter="x",
                              status=Status.FAILED, max_diff=float("nan"), speedup=float("inf")))
    back = read_record(cell)
    assert back is not None and back.status == "failed"
    assert back.max_diff != back.max_diff and back.speedup == float("inf")
    (cell / "record.json").write_text('{"cell": "act/h100/stock", "status": ')
    assert read_record(cell).status == Status.UNREADABLE


def test_an_atomic_write_keeps_permissions_and_a_failed_one_keeps_the_old_file(tmp_path: Path) -> None:
    from orchestrator.atomic import write_atomic, write_bytes_atomic

    target = tmp_path / "out.csv"
    target.write_bytes(b"old")
    target.chmod(0o600)
    write_bytes_atomic(target, "new")
    assert target.read_bytes() == b"new" and target.stat().st_mode & 0o777 == 0o600

    def broken(handle) -> None:
        handle.write(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomic(target, broken)
    assert target.read_bytes() == b"new" and [p.name for p in tmp_path.iterdir()] == ["out.csv"]


def test_an_interpreters_fingerprint_does_not_depend_on_the_working_directory(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A *.dist-info (or a checkout's *.egg-info) in the directory a command runs from is not installed."""
    import sys

    from orchestrator.envs import env_fingerprint

    here = tmp_path / "checkout"
    (here / "fake_pkg-9.9.dist-info").mkdir(parents=True)
    (here / "fake_pkg-9.9.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-pkg\nVersion: 9.9\n")
    monkeypatch.chdir(here)
    inside = env_fingerprint(sys.executable)
    monkeypatch.chdir(tmp_path)
    outside = env_fingerprint(sys.executable)
    assert "fake-pkg==9.9" not in inside["freeze"]
    assert inside == outside and inside["site"] and not any("scripts" in p for p in inside["site"])


@pytest.mark.parametrize(("launcher", "kind", "error_part"), [
    ({"name": "local", "parallel": 3, "poll_s": 0.5}, "LocalLauncher", None),
    ({"name": "local", "parallel": 0, "poll_s": 0.5}, None, "launcher.parallel must be an integer at least 1, got 0"),
    ({"name": "slurm", "poll_s": 5}, None, "launcher=slurm needs sbatch, srun, sacct on PATH"),  # PATH emptied
    ({"name": "nope"}, None, "unknown launcher 'nope' (valid: local, slurm)"),
])
def test_the_launcher_config_picks_the_launcher(launcher: dict, kind: str | None, error_part: str | None,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """cli.py starts every sweep through launcher_for; a bad launcher is one line, before anything is written."""
    from omegaconf import OmegaConf

    from orchestrator.config import ConfigError
    from orchestrator.launchers import launcher_for

    monkeypatch.setenv("PATH", "")
    if error_part is None:
        chosen = launcher_for(OmegaConf.create(launcher))
        assert type(chosen).__name__ == kind and (chosen.parallel, chosen.poll_s) == (3, 0.5)
        return
    with pytest.raises(ConfigError) as caught:
        launcher_for(OmegaConf.create(launcher))
    assert error_part in str(caught.value) and "\n" not in str(caught.value)


def test_a_cell_id_parses_formats_and_maps_to_its_directory(tmp_path: Path) -> None:
    from orchestrator.cell_id import CellId

    cell = CellId.parse("act/h100/pr202785")
    assert (cell.policy, cell.gpu, cell.torch, str(cell)) == ("act", "h100", "pr202785", "act/h100/pr202785")
    assert cell.dir(tmp_path) == tmp_path / "cells" / "act" / "h100" / "pr202785"
    assert CellId.of_dir(cell.dir(tmp_path)) == cell
    for bad in ("act/h100", "act//stock", "a/b/c/d"):
        with pytest.raises(ValueError, match=f"bad cell id '{bad}' \\(expected policy/gpu/torch\\)"):
            CellId.parse(bad)
