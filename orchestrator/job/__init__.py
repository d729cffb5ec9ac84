"""The body of one cell's job: versions, make_random (cached), the exporter, and always a record.

It runs in the orchestrator's environment (no torch) on the node that submitit or Slurm chose, and starts
make_random and the exporter with the interpreter of the cell's torch build.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..config.spec import PACKAGE_DIR, CellSpec
from ..envs import PROBE
from ..record import RESUME_DIR, Record, Status, Step, loaded, owner, read_record, write_record
from . import gpu
from .checkpoints import CheckpointFailed, ensure_random_checkpoint
from .logparse import last_error_line, parse_log, tail
from .process import StepInterrupted, run_logged

EXPORT_LOG = "export.log"
MAKE_RANDOM_LOG = "make_random.log"
BUNDLE_DIR = "bundle"
EXPORT_JSON = "export.json"  # what the fork's CLI writes into the bundle: {"tolerance": <float>, ...}
INDUCTOR_CACHE = "inductor_cache"
LOADED_LISTS = ".loaded"  # each process of the export step lists its loaded files here (record/loaded.py)


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def job_env(spec: CellSpec) -> dict[str, str]:
    """The job's environment: ours, the build's bin/ first on PATH, every axis's env, and where it runs."""
    env = dict(os.environ)
    if "/" in spec.python:
        env["PATH"] = f"{Path(spec.python).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("HF_HUB_OFFLINE", "1")
    # One Inductor cache per out_dir: a rerun of a CUDA export finds its kernels and autotuning choices there.
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path(spec.out_dir) / INDUCTOR_CACHE))
    env.update(spec.env)
    env.setdefault("EXPORT_MATRIX_RESUME_DIR", str(Path(spec.cell_dir) / RESUME_DIR))
    env.update(EXPORT_MATRIX_CELL=spec.id, EXPORT_MATRIX_POLICY=spec.policy, EXPORT_MATRIX_GPU=spec.gpu,
               EXPORT_MATRIX_TORCH=spec.torch)
    return env


def export_command(spec: CellSpec, ckpt: str, out: Path) -> list[str]:
    """The exporter's argument list with its placeholders filled, then the task and the policy's extra args.

    A part with `{tolerance}` takes the policy config's tolerance; without one the part is left out, and the
    exporter uses (and says) its own default."""
    values = {"python": spec.python, "ckpt": ckpt, "out": str(out), "package": str(PACKAGE_DIR),
              "tolerance": "" if spec.tolerance is None else repr(float(spec.tolerance))}
    command = [part.format(**values) for part in spec.command
               if spec.tolerance is not None or "{tolerance}" not in part]
    if spec.task:
        command.append(f"--task={spec.task}")
    return command + list(spec.export_args)


def probe_versions(spec: CellSpec, env: dict[str, str], cuda: bool | None = None) -> dict[str, Any]:
    """The build's versions and NVML's GPU; with `cuda` (what torch sees) where the exporter needs a GPU."""
    cuda = spec.requires_cuda if cuda is None else cuda
    command = [spec.python, str(PROBE), *(["--cuda"] if cuda else [])]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"{spec.python} could not report its versions: {done.stderr.strip()[-300:]}")
    return {**json.loads(done.stdout.strip().splitlines()[-1]), **gpu.describe()}


class Preempted(Exception):
    """Slurm preempted the job again after its requeues were spent (the Slurm launcher raises it on USR2)."""


def refuse(spec: CellSpec, attempt: int, step: str, reason: str) -> Record:
    """Write the `error` record of a cell that could not be started at all (no environment, sbatch said no)."""
    record = spec.new_record(status="error", attempt=attempt, failed_step=step, error=reason, started_at=now(),
                             ended_at=now(), fingerprint=spec.fingerprint)
    write_record(spec.cell_dir, record)
    return record


def current_job_id() -> str | None:
    """The job's id as Slurm and submitit name it: `A_i` for a task of an array."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if array and task:
        return f"{array}_{task}"
    return os.environ.get("SLURM_JOB_ID") or os.environ.get("SUBMITIT_LOCAL_JOB_ID")


def current_step(record: Record) -> str:
    """The step an attempt had reached when it was stopped from outside: the export once its command is set."""
    if record.command:
        return "export"
    return "make_random" if "make_random" in record.logs else "setup"


def run_cell(spec: CellSpec, attempt: int = 1, requeues: int = 0) -> Record:
    """Run one cell and return its record (also written to the cell's record.json)."""
    cell_dir = spec.cell_dir
    cell_dir.mkdir(parents=True, exist_ok=True)
    record = spec.new_record(attempt=attempt, started_at=now(), job_id=current_job_id(), requeues=requeues,
                             owner=owner.me(), fingerprint=spec.fingerprint)
    earlier = read_record(cell_dir)
    if earlier is not None and earlier.job_id and not record.job_id:
        record.job_id = earlier.job_id
    # Slurm running the same job again (a requeue) may start over an ending its earlier run wrote; nobody else may
    requeued = requeues > 0 and earlier is not None and bool(record.job_id) and earlier.job_id == record.job_id
    if not write_record(cell_dir, record, replaces_settled=requeued):  # an orphan: moved on, or settled
        now_there = read_record(cell_dir)
        print(f"[export-matrix] {spec.id}: attempt {attempt} was {_refused(now_there, attempt)}; not running it",
              flush=True)
        return now_there or record
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        _run_steps(spec, record, cell_dir)
    except StepInterrupted as exc:
        record.finish(Status.CANCELLED, record.failed_step, str(exc))
    except Preempted as exc:
        record.finish(Status.FAILED, current_step(record), str(exc))
    except Exception as exc:  # the job body broke: still leave a record that says how
        record.finish(Status.ERROR, record.failed_step,
                      last_error_line(traceback.format_exception(exc)[-1].splitlines(), spec.parse["exception"]))
        record.log_tail = "".join(traceback.format_exception(exc))[-4000:]
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        record.ended_at = now()
        if not write_record(cell_dir, record):
            print(f"[export-matrix] {spec.id}: attempt {attempt} was {_refused(read_record(cell_dir), attempt)} "
                  f"while it ran; its result ({record.status}) is not recorded", flush=True)
    return record


def _refused(current: Record | None, attempt: int) -> str:
    """Why the cell's record refused this job's write: a later attempt, or this attempt already settled."""
    if current is not None and current.attempt == attempt:
        return f"settled ({current.status})"
    return "superseded"


def _interrupt(signum: int, _frame: Any) -> None:
    raise StepInterrupted(signum)


def _run_steps(spec: CellSpec, record: Record, cell_dir: Path) -> None:
    env = job_env(spec)
    timeout_s = spec.timeout_min * 60
    record.logs = {"export": EXPORT_LOG}
    record.failed_step = Step.SETUP
    held = gpu.held() if spec.gpu_needs or spec.slurm.get("gres") else {}
    record.gpu_index, record.gpu_uuid = held.get("index"), held.get("uuid")
    wrong = gpu.wrong_gpu(spec.gpu, spec.gpu_needs, held)
    if wrong:  # not the column's GPU: no make_random, no export, no verdict (an `error` is undecided)
        record.versions = gpu.describe()
        record.finish(Status.ERROR, Step.SETUP, wrong)
        return
    record.versions = probe_versions(spec, env)
    cuda = record.versions.pop("cuda", None)
    if cuda is not None and not cuda.get("available"):
        record.finish(Status.ERROR, Step.SETUP, f"no CUDA device visible to the job: {cuda.get('why')}")
        return
    record.failed_step = None
    if spec.fingerprint:
        seen = {k: record.versions.get(k) for k in ("gpu_name", "gpu_driver") if record.versions.get(k)}
        record.fingerprint = {**spec.fingerprint, **seen}
    ckpt = spec.checkpoint.get("path", "")
    made: dict[str, str] | None = {}  # what make_random loaded making this cell's checkpoint (None: not listed)
    if "random" in spec.checkpoint:
        record.logs["make_random"] = MAKE_RANDOM_LOG
        log = cell_dir / MAKE_RANDOM_LOG
        try:
            built = ensure_random_checkpoint(Path(spec.ckpt_dir), spec.checkpoint["random"],
                                             record.versions.get("lerobot") or "unknown", spec.python, env, log,
                                             timeout_s)
        except CheckpointFailed as exc:
            _finish_make_random(record, spec, log, exc.returncode, exc.timed_out)
            record.make_random_s = round(exc.seconds, 2)
            return
        record.make_random_s = round(built.seconds, 2) if built.built else 0.0
        if not built.built:  # held by another job building it (a GPU held idle, unless a CPU job built it first)
            record.checkpoint_wait_s = round(built.seconds, 2)
        ckpt = str(built.path)
        made = built.loaded_files
    record.checkpoint = ckpt
    bundle = cell_dir / BUNDLE_DIR
    bundle.mkdir(exist_ok=True)
    record.command = export_command(spec, ckpt, bundle)
    log = cell_dir / EXPORT_LOG
    listed = cell_dir / LOADED_LISTS
    step_env = loaded.step_env(env, listed)
    diffs: list[float] = []
    whole = True  # every run of the export exited on its own and listed its files
    while True:
        offset = log.stat().st_size if log.exists() else 0
        with open(log, "a") as handle:
            again = f"repeat {len(diffs) + 1} of {spec.repeat['runs']}: the check sat near its tolerance; " if diffs \
                else ""
            handle.write(f"[export-matrix] {again}{json.dumps(record.command)}\n")
        outcome = run_logged(record.command, log, step_env, timeout_s, cwd=cell_dir)
        _record_export(record, spec, outcome, log, offset)
        whole = whole and loaded.complete(listed, outcome.pid, outcome.timed_out, outcome.returncode)
        if not _checked(record, outcome):
            break
        diffs.append(record.max_diff)
        low, high = spec.repeat["band"]
        if not (low <= diffs[0] / record.tolerance <= high) or len(diffs) >= int(spec.repeat["runs"]):
            break  # far from the limit: one run; near it: `runs` in all
    if len(diffs) > 1:
        _summarize_runs(record, diffs)
    _keep_loaded(record, cell_dir, made if whole and made is not None else None)


def _keep_loaded(record: Record, cell_dir: Path, made: dict[str, str] | None) -> None:
    """loaded_files.txt beside the record: the export's files and make_random's (its checkpoint's list); the
    record keeps its digest. None (`made` None) where a run of the export was killed or its process wrote no
    list: a partial list could leave a changed file out, so such a record is judged by the recipe rule."""
    listed = cell_dir / LOADED_LISTS
    files = loaded.gathered(listed) if made is not None else {}
    shutil.rmtree(listed, ignore_errors=True)
    if files and made is not None:
        record.loaded_files = loaded.write_list(cell_dir / loaded.LOADED_NAME, loaded.merged(files, made))


def _record_export(record: Record, spec: CellSpec, outcome: Any, log: Path, offset: int) -> None:
    """The record's fields from one export run: its part of the log, its exit, its check."""
    data = log.read_bytes()
    text = data.decode(errors="replace")
    found = parse_log(data[offset:].decode(errors="replace"), spec.parse)  # this run's part of the log
    record.export_s = round((record.export_s or 0) + outcome.seconds, 2)  # every run of a repeated check
    record.peak_gpu_mib = max(filter(None, (record.peak_gpu_mib, outcome.peak_gpu_mib)), default=None)
    for key in ("max_diff", "tolerance", "margin", "eager_ms", "exported_ms", "speedup", "check", "check_reason",
                "repro", "tolerance_source", "trace_site"):
        setattr(record, key, found.get(key))
    if record.tolerance_source is None:  # the fork's CLI: its bundle's export.json, else its check line
        _bundle_tolerance(record, spec.cell_dir / BUNDLE_DIR / EXPORT_JSON)
    elif record.tolerance is None:  # an embedded exporter that stopped before its check still said its tolerance
        record.tolerance = found.get("declared_tolerance")
    record.checked_files = found.get("checked_files") or {}
    record.timing = found.get("timing") or {}
    record.kernels = found.get("kernels")  # where the program was slower than eager (exporters/kernel_profile.py)
    record.resumed = bool(found.get("resumed"))
    record.steps_s = found.get("steps_s") or {}
    record.peak_gpu_phases = found.get("peak_gpu_phases") or {}
    record.log_tail = tail(text, spec.parse["tail_lines"])
    record.finish(Status.PASSED)
    stopped = stopped_by(outcome.timed_out, outcome.returncode, spec.timeout_min, "the export", "the exporter")
    if (stopped or outcome.returncode != 0) and _decided_before_kernels(found):
        # checked and timed before the kernels step began: how the profiler ended is the breakdown's, not the cell's
        why = stopped[1] if stopped else f"the exporter exited with status {outcome.returncode}"
        record.kernels = {"error": f"the exporter ended while profiling: {why}"}
        return
    if stopped:
        record.finish(stopped[0], found.get("failed_step") or found.get("last_step") or Step.EXPORT, stopped[1])
    elif outcome.returncode != 0 or found.get("test_case") == "failed":
        step = found.get("failed_step") or (Step.CHECK if found.get("test_case") == "failed" else Step.EXPORT)
        record.finish(Status.OOM if found.get("oom") else Status.FAILED, step,
                      found.get("error") or f"the exporter exited with status {outcome.returncode}")


def _decided_before_kernels(found: dict[str, Any]) -> bool:
    """The embedded exporter's last step, `kernels`, had begun after its check passed and both sides were timed."""
    return found.get("last_step") == "kernels" and found.get("test_case") == "passed" \
        and found.get("exported_ms") is not None and not found.get("failed_step")


def _bundle_tolerance(record: Record, path: Path) -> None:
    """Where the fork's CLI, which prints only its check line, got its tolerance: the export.json it writes into
    the bundle (`{"tolerance": 0.2, ...}`) where it is there, else the check line. Where the two differ, the
    record keeps export.json's and says both."""
    logged = record.tolerance
    written = _written_tolerance(path)
    if written is None:
        record.tolerance_source = "exporter log" if logged is not None else None
        return
    record.tolerance, record.tolerance_source = written, "bundle export.json"
    if logged is not None and not math.isclose(logged, written, rel_tol=1e-5):  # the log prints 6 digits (%g)
        record.tolerance_source = f"bundle export.json ({written:g}; the exporter log's check line said {logged:g})"
    if record.max_diff is not None:
        record.margin = record.max_diff / written


def _written_tolerance(path: Path) -> float | None:
    """export.json's tolerance, a positive number; None where the file, or a usable tolerance in it, is missing."""
    try:
        value = json.loads(path.read_text()).get("tolerance")
    except (OSError, ValueError, AttributeError):
        return None
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    return float(value) if ok else None


def _checked(record: Record, outcome: Any) -> bool:
    """The export ran to its check (passed, or failed at the check itself) and the check has numbers."""
    finished = not outcome.timed_out and outcome.returncode >= 0 and record.status in ("passed", "failed")
    return finished and record.failed_step in (None, "check") and record.max_diff is not None \
        and bool(record.tolerance)


def _summarize_runs(record: Record, diffs: list[float]) -> None:
    """A check repeated near its limit: every run's difference, and the verdict of their median."""
    median = statistics.median(diffs)
    record.check_runs = diffs
    record.max_diff, record.margin = median, median / record.tolerance
    if median <= record.tolerance:
        record.finish(Status.PASSED)
    else:
        record.finish(Status.FAILED, Step.CHECK, f"RuntimeError: The exported policy does not reproduce its test "
                      f"case ({median:.2e} > {record.tolerance:g}), median of {len(diffs)} runs")


def _finish_make_random(record: Record, spec: CellSpec, log: Path, returncode: int, timed_out: bool) -> None:
    text = log.read_text(errors="replace") if log.exists() else ""
    record.log_tail = tail(text, spec.parse["tail_lines"])
    status, error = stopped_by(timed_out, returncode, spec.timeout_min, Step.MAKE_RANDOM, Step.MAKE_RANDOM) or \
        (Status.FAILED, last_error_line(text.splitlines(), spec.parse["exception"]))
    record.finish(status, Step.MAKE_RANDOM, error)


def stopped_by(timed_out: bool, returncode: int, timeout_min: float, step: str,
               process: str) -> tuple[Status, str] | None:
    """`timeout` where we stopped a step at its limit, `killed` where a signal we did not send ended it."""
    if timed_out:
        return Status.TIMEOUT, f"{step} ran past timeout_min={timeout_min:g}"
    if returncode < 0:
        return Status.KILLED, f"{process} was killed by {signal.Signals(-returncode).name}"
    return None
