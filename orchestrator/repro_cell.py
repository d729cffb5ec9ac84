"""`export-matrix repro CELL`: a standalone script for each failure of a failed cell, run in its build.

From the programs the cell's exporter kept (exporters/failure_evidence.py), the cell's torch build runs
repros/generate.py, which finds the smallest part of the graph that fails the same way (repros/errors.py) and
writes it as a script. Each script is named by the catalog id of its failure and written to
DIR/repros/<policy>/<gpu>/<torch>/<failure>.py, then run in the cell's build, on the cell's GPU kind, with no
orchestrator on its path; DIR/repros/<cell>/repros.json records whether it reproduces (the same operator, or
the same normalized first line), its seconds and lines. The kept programs are removed once every failure of the
cell has a script that reproduces it.

Run again with scripts in place (after a build change), it only reruns them: collect's changes.md says when one
stops reproducing. `--regenerate` searches again from the kept programs. A trace failure has no program: the
record names the user line where tracing stopped and the repro is the export command, said plainly.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .atomic import write_bytes_atomic, write_json_atomic
from .cell_id import CellId
from .collect.catalog import load_catalog
from .collect.generated import REPROS_DIR, results_path
from .config import PACKAGE_CONF, ConfigError
from .config.spec import PACKAGE_DIR, CellSpec
from .config.specs_now import current_specs
from .job import gpu, job_env
from .job.process import run_logged
from .jsonio import loads
from .record import Status, read_record, record_paths
from .repros import errors

GENERATOR = PACKAGE_DIR / "repros" / "generate.py"
PROGRAMS = Path("bundle") / "programs"  # exporters/failure_evidence.py: OUT/programs, OUT being <cell>/bundle
DEFAULT_SECONDS = 600.0
SCRIPT_TIMEOUT_S = 600.0
REPRODUCIBLE_STEPS = ("lower", "compile-model", "write", "check")
REPRO_ERROR = re.compile(r"(?m)^Repro error: (.*)$")


def run_repro(out_dir: Path, pattern: str, overrides: list[str], config_dir: Path | None, seconds: float,
              regenerate: bool) -> int:
    """Each recorded failed cell the pattern names; exit 0 when each got what it can have, else 1."""
    cells = _cells(out_dir, pattern)
    specs = current_specs(cells, overrides, config_dir, fingerprinted=False)
    catalog = load_catalog([*([Path(config_dir).resolve()] if config_dir else []), PACKAGE_CONF])
    code = 0
    for cell in cells:
        if cell not in specs:
            raise ConfigError(f"cell {cell!r} is not in the configured matrix (its policy, gpu or torch config is "
                              "gone); give the overrides it ran with")
        code = max(code, _one(out_dir, cell, specs[cell], catalog, seconds, regenerate))
    return code


def _cells(out_dir: Path, pattern: str) -> list[str]:
    recorded = [str(CellId.of_dir(os.path.dirname(p))) for p in record_paths(out_dir)]
    hits = [c for c in recorded if fnmatch.fnmatchcase(c, pattern)]
    if not hits:
        raise ConfigError(f"no recorded cell matches {pattern!r} (recorded: {len(recorded)} cells under "
                          f"{out_dir}/cells)")
    failed = [c for c in hits if _status(out_dir, c) in (Status.FAILED, Status.OOM)]
    if not failed and len(hits) == 1:
        raise ConfigError(f"{hits[0]} did not fail (status {_status(out_dir, hits[0])}): nothing to reproduce")
    if not failed:
        raise ConfigError(f"none of the {len(hits)} recorded cells {pattern!r} matches failed: nothing to reproduce")
    return failed


def _status(out_dir: Path, cell: str) -> str:
    record = read_record(CellId.parse(cell).dir(out_dir))
    return str(record.status) if record else "no record"


def say(line: str) -> None:
    print(line, flush=True)


def _one(out_dir: Path, cell: str, spec: CellSpec, catalog: Any, seconds: float, regenerate: bool) -> int:
    cell_dir = CellId.parse(cell).dir(out_dir)
    record = read_record(cell_dir)
    assert record is not None
    folder = Path(out_dir) / REPROS_DIR / cell
    base = {"cell": cell, "step": record.failed_step, "error": record.error, "exporter": record.exporter,
            "trace_site": record.trace_site}
    plain = _plainly(record, cell)
    if plain:  # no program to slice: the export command, said plainly (never a guessed repro)
        say(f"{cell}: {plain}")
        write_json_atomic(results_path(out_dir, cell), {**base, "repro": "export command", "why": plain,
                                                       "command": record.command, "scripts": []})
        return 0
    wrong = _wrong_machine(spec)
    if wrong:
        raise ConfigError(f"{cell}: {wrong}")
    existing = _read_results(out_dir, cell)
    if existing.get("scripts") and any(s.get("script") for s in existing["scripts"]) and not regenerate:
        say(f"{cell}: running its generated repros again in build {spec.torch} (--regenerate searches again)")
        scripts = [_run_script(folder, entry, spec) if entry.get("script") else entry for entry in existing["scripts"]]
        write_json_atomic(results_path(out_dir, cell), {**existing, **base, "scripts": scripts})
        return 0 if all(s.get("reproduces") for s in scripts if s.get("script")) else 1
    programs = cell_dir / PROGRAMS
    meta = _programs_meta(programs, cell)
    staging = Path(tempfile.mkdtemp(prefix="repro-", dir=_mkdir(folder)))
    try:
        say(f"{cell}: searching the kept programs ({', '.join(meta['methods'])}) for the smallest failing part, "
            f"at most {seconds:g} s, in build {spec.torch}")
        env = _env(spec)
        done = run_logged([spec.python, str(GENERATOR), f"--programs={programs}", f"--out={staging}",
                           f"--seconds={seconds:g}"], folder / "generate.log", env, seconds + SCRIPT_TIMEOUT_S)
        found = _generated(staging)
        if done.returncode != 0 or found is None:
            raise ConfigError(f"{cell}: the generator failed (exit {done.returncode}); see {folder / 'generate.log'}")
        scripts = []
        for target in found.get("targets", []):
            entry = {"expected": target["expected"], "failure": _failure_id(target, record, catalog, scripts),
                     "how": target.get("how"), "nodes": target.get("nodes"), "search_s": target.get("seconds"),
                     "script": None}
            if target.get("script"):
                name = f"{entry['failure']}.py"
                write_bytes_atomic(folder / name, (staging / target["script"]).read_bytes())
                entry = _run_script(folder, {**entry, "script": name}, spec)
            else:
                entry["why"] = target.get("why")
                say(f"{cell}: {entry['failure']}: no script: {entry['why']}")
            scripts.append(entry)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    result = {**base, "repro": "standalone (generated)" if any(s.get("script") for s in scripts) else
              "export command", "why": found.get("why"), "made_at": _now(), "scripts": scripts}
    write_json_atomic(results_path(out_dir, cell), result)
    if found.get("why"):
        say(f"{cell}: {found['why']}")
    made = bool(scripts) and all(s.get("reproduces") for s in scripts)
    if made:
        shutil.rmtree(programs, ignore_errors=True)  # kept until a repro is made: made, so they go
        say(f"{cell}: every failure has a script that reproduces it; the kept programs are removed ({programs})")
    return 0 if made else 1


def _plainly(record: Any, cell: str) -> str | None:
    """Why this failure gets the export command rather than a generated script; None where one can be made."""
    command = " ".join(record.command) if record.command else f"export-matrix rerun {cell}"
    if record.failed_step == "trace":
        where = f" at {record.trace_site}" if record.trace_site else " (the record names no user line: made " \
            "before the exporters printed it)"
        return (f"tracing stopped{where}; nothing was traced, so no program can be cut down to a standalone "
                f"script: the repro is the export command: {command}")
    if record.status == Status.OOM:
        return (f"it ran out of GPU memory in {record.failed_step}: the whole program's footprint, which no part of "
                f"it shows: the repro is the export command: {command}")
    if record.failed_step in ("save", "reload"):
        return (f"torch.export could not {record.failed_step} the program, so none was kept to cut down: the "
                f"repro is the export command: {command}")
    if record.failed_step not in REPRODUCIBLE_STEPS:
        return (f"it failed in {record.failed_step}, before or after any lowering a script could repeat: the repro "
                f"is the export command: {command}")
    if record.exporter not in ("executorch_cpu", "executorch_cuda"):
        return (f"its exporter {record.exporter} keeps no exported programs (only the package's executorch_cpu and "
                f"executorch_cuda do): run it with `export-matrix rerun {cell} exporter=executorch_cuda` first")
    return None


def _wrong_machine(spec: CellSpec) -> str | None:
    """A CUDA cell's repro runs on its GPU kind only: no GPU, or another kind, gives no verdict."""
    if not spec.requires_cuda:
        return None
    if gpu.count() == 0:
        return (f"its repros run on the {spec.gpu} column's GPU and this machine has none: run `export-matrix repro "
                f"{spec.id}` on a {spec.gpu} node")
    return gpu.wrong_gpu(spec.gpu, spec.gpu_needs, gpu.held())


def _programs_meta(programs: Path, cell: str) -> dict[str, Any]:
    try:
        meta = loads((programs / "programs.json").read_bytes())
    except (OSError, ValueError):
        raise ConfigError(
            f"{cell}: no kept programs in {programs}: a failed cell keeps its exported programs until a repro is "
            "made (this attempt kept none: it ran before they were kept, or its repros were made and the programs "
            f"removed); run the cell again to keep them: export-matrix rerun {cell}") from None
    if not meta.get("kept"):
        raise ConfigError(f"{cell}: its programs were not kept: {meta.get('why')}")
    return meta


def _generated(staging: Path) -> dict[str, Any] | None:
    try:
        return loads((staging / "generate.json").read_bytes())
    except (OSError, ValueError):
        return None


def _failure_id(target: dict[str, Any], record: Any, catalog: Any, taken: list[dict[str, Any]]) -> str:
    """The catalog id of the failure this script shows (split_copy, detach_copy, ...), else `new_<operator>`."""
    expected = target["expected"]
    text = errors.message(expected["fact"]) if "fact" in expected else expected["first_line"]
    ids = catalog.match(text) or (catalog.match(record.error or "") if "first_line" in expected else [])
    name = ids[0] if ids else f"new_{target['slug']}"
    used = {entry["failure"] for entry in taken}
    return name if name not in used else f"{name}_{target['slug']}"


def _env(spec: CellSpec) -> dict[str, str]:
    """The job's environment less the orchestrator's folder on PYTHONPATH: the scripts are standalone (a build
    whose packages come through PYTHONPATH, as scripts/offline-env gives them, keeps those)."""
    env = job_env(spec)
    ours = PACKAGE_DIR.parent.resolve()
    kept = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != ours]
    env.pop("PYTHONPATH", None)
    if kept:
        env["PYTHONPATH"] = os.pathsep.join(kept)
    return env


def _run_script(folder: Path, entry: dict[str, Any], spec: CellSpec) -> dict[str, Any]:
    """Run one script in the cell's build, from an empty folder; record what it showed."""
    script = folder / entry["script"]
    log = folder / f"{script.stem}.log"
    log.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as empty:
        done = run_logged([spec.python, str(script.resolve())], log, _env(spec), SCRIPT_TIMEOUT_S, cwd=Path(empty))
    text = log.read_text(errors="replace")
    shown = REPRO_ERROR.findall(text)
    error = _decoded(shown[-1].strip()) if shown else None
    reproduces = done.returncode == 1 and errors.reproduces(entry["expected"], error)
    versions = re.search(r"(?m)^torch (\S+), executorch (\S+), device (.*)$", text)
    entry = {**entry, "reproduces": reproduces, "exit": done.returncode, "timed_out": done.timed_out,
             "error": error, "seconds": round(done.seconds, 1), "lines": len(script.read_text().splitlines()),
             "ran_at": _now(), "build": spec.torch,
             "versions": {"torch": versions[1], "executorch": versions[2].rstrip(","), "device": versions[3]}
             if versions else {}}
    verdict = "reproduces" if reproduces else "does NOT reproduce"
    shown = errors.first_line(error) if error else f"exit {done.returncode}, no error line"
    say(f"{spec.id}: {entry['script']} {verdict} ({shown}) in "
        f"{entry['seconds']:g} s, {entry['lines']} lines: {script}")
    return entry


def _decoded(printed: str) -> str:
    """The script's `Repro error:` JSON string (its message's lines kept); as printed where it is not JSON."""
    try:
        text = loads(printed.encode())
    except ValueError:
        return printed
    return text if isinstance(text, str) else printed


def _read_results(out_dir: Path, cell: str) -> dict[str, Any]:
    try:
        data = loads(results_path(out_dir, cell).read_bytes())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")

