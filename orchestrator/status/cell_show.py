"""`export-matrix show CELL`: what a cell would run, without running it (Hydra's `--cfg job`, for one cell).

The resolved policy, gpu, torch and exporter configs, the fingerprint that `status` compares, the environment
variables the job sets (job.py's job_env: HF_HUB_OFFLINE, TORCHINDUCTOR_CACHE_DIR, the axes' `env:`, the
EXPORT_MATRIX_* names, the build's bin/ on PATH) and its make_random and export steps as shell command lines, with
the paths a job would use. Only the build's interpreter is asked for its versions (the random checkpoint's cache key
holds the lerobot version). A cell with a record also gets `recorded`: its attempt and status, why `status` finds
it stale (or null), the files its make_random and export loaded (docs/bump.md) and, where its exported program
was slower than eager, one line of its kernel breakdown (record/kernels.py). A pattern (`'act/*/*'`) shows
every cell of the selected matrix it matches, one YAML document each.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any
from unittest import mock

import yaml

from ..cell_id import CellId
from ..config import SELECT_AXES, ConfigError, compose_config
from ..config.fingerprint_cache import Current
from ..config.spec import CellSpec
from ..config.specs_now import current_specs
from ..config.staleness import Judge
from ..envs import PROBE
from ..job import BUNDLE_DIR, export_command, job_env
from ..job.checkpoints import checkpoint_key, make_random_command
from ..record import Status, kernels, loaded, read_record

GLOB = "*?["


class CommandLine(str):
    """A command line, shown as a YAML literal block, so it is pasted into a shell as it is."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(CommandLine, lambda dumper, line: dumper.represent_scalar("tag:yaml.org,2002:str", line,
                                                                                  style="|"))


def show_cells(pattern: str, overrides: list[str], config_dir: Path | None) -> str:
    """The YAML of the cell `pattern` names, or of every cell of the selected matrix it matches."""
    versions: dict[tuple[str, ...], str] = {}  # lerobot's version per interpreter and axis env: asked once
    shown = []
    judges: dict[str, Judge] = {}
    for spec in specs_shown(pattern, overrides, config_dir):
        judge = judges.setdefault(spec.out_dir, Judge(Path(spec.out_dir)))
        shown.append({**describe(spec, versions), **recorded_part(spec, judge)})
    return yaml.dump_all(shown, Dumper=_Dumper, sort_keys=False, width=1 << 16, allow_unicode=True,
                         explicit_start=len(shown) > 1)


def specs_shown(pattern: str, overrides: list[str], config_dir: Path | None) -> list[CellSpec]:
    if not any(ch in pattern for ch in GLOB):  # one id: any cell the configs make, in the matrix or not
        specs = current_specs([pattern], overrides, config_dir)
        if pattern not in specs:
            raise ConfigError(f"cell {pattern!r} is not in the configured matrix")
        return [specs[pattern]]
    from ..config.cells import resolve

    try:
        parts = CellId.parse(pattern)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    # The pattern's axes narrow what is composed, as policy=/gpu=/torch= do; the user's own selection stays.
    narrowing = [f"{axis}={part}" for axis, part in zip(SELECT_AXES, parts, strict=True) if part != "*"]
    composed = compose_config([*overrides, *narrowing], config_dir)
    specs = [s for s in resolve(composed, with_fingerprints=True) if fnmatch.fnmatchcase(s.id, pattern)]
    if not specs:
        raise ConfigError(f"no cell of matrix {composed.choices.get('matrix')} matches {pattern!r}")
    return specs


def describe(spec: CellSpec, versions: dict[tuple[str, ...], str]) -> dict[str, Any]:
    env = job_variables(spec)
    ckpt = spec.checkpoint.get("path", "")
    make_random = None
    if "random" in spec.checkpoint:
        random = spec.checkpoint["random"]
        overrides_of = dict(random.get("overrides") or {})
        asked = (spec.python, *sorted(f"{k}={v}" for k, v in spec.env.items()))
        if asked not in versions:
            versions[asked] = _lerobot_version(spec.python, job_env(spec))
        key = checkpoint_key(random["type"], overrides_of, versions[asked])
        ckpt = str(Path(spec.ckpt_dir) / key)
        make_random = CommandLine(shlex.join(make_random_command(spec.python, random["type"], Path(ckpt),
                                                                 overrides_of)))
    return {
        "cell": spec.id,
        "configs": spec.configs,
        "fingerprint": spec.fingerprint.get("key"),
        "python": spec.python,
        "timeout_min": spec.timeout_min,
        "env": env,
        "make_random": make_random,
        "export": CommandLine(shlex.join(export_command(spec, ckpt, spec.cell_dir / BUNDLE_DIR))),
    }


def recorded_part(spec: CellSpec, judge: Judge) -> dict[str, Any]:
    """The cell's record as status judges it (why it is stale) and the files its steps loaded, one
    `<sha256 prefix>  <path>` a line (loaded_files.txt beside the record has them in full); nothing without one."""
    record = read_record(spec.cell_dir)
    if record is None or record.status == Status.UNREADABLE:
        return {}
    stale = judge.why_stale(record, Current.of(spec)) if spec.fingerprint else None
    path = spec.cell_dir / loaded.LOADED_NAME
    files = loaded.read_list(path, record.loaded_files) if record.loaded_files else None
    listed = None if files is None else {"file": str(path), "count": len(files),
                                         "files": [f"{files[rel][:12]}  {rel}" for rel in sorted(files)]}
    shown = {"attempt": record.attempt, "status": str(record.status), "stale": stale, "loaded_files": listed}
    if record.kernels:  # where its program was slower than eager: each side's top kernel (report.html has them all)
        shown["kernels"] = kernels.short_line(record.kernels)
    return {"recorded": shown}


def job_variables(spec: CellSpec) -> dict[str, str]:
    """Every variable job_env sets for the job on top of the environment it starts from, with the value the job gets
    here: job_env asked once with this environment and once with none, whose keys are the ones it sets."""
    everything = job_env(spec)
    with mock.patch.dict(os.environ, clear=True):
        own = job_env(spec)
    return {key: everything[key] for key in own}


def _lerobot_version(python: str, env: dict[str, str]) -> str:
    try:
        done = subprocess.run([python, str(PROBE)], env=env, capture_output=True, text=True, timeout=300)
        return json.loads(done.stdout.strip().splitlines()[-1]).get("lerobot") or "unknown"
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return "unknown"  # the same fallback a job uses when the build cannot say
