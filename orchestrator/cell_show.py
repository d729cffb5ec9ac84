"""`export-matrix show CELL`: what a cell would run, without running it (Hydra's `--cfg job`, for one cell).

The resolved policy, gpu, torch and exporter configs, the fingerprint that `status` compares, and the exact argument
lists of its make_random and export steps, with the paths a job would use. Only the build's interpreter is asked
for its versions (the random checkpoint's cache key holds the lerobot version).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from .checkpoints import checkpoint_key, make_random_command
from .config import ConfigError
from .envs import PROBE
from .job import BUNDLE_DIR, export_command, job_env
from .specs_now import current_specs


def describe_cell(cell_id: str, overrides: list[str], config_dir: Path | None) -> dict[str, Any]:
    specs = current_specs([cell_id], overrides, config_dir)
    if cell_id not in specs:
        raise ConfigError(f"cell {cell_id!r} is not in the configured matrix")
    spec = specs[cell_id]
    ckpt = spec.checkpoint.get("path", "")
    make_random = None
    if "random" in spec.checkpoint:
        random = spec.checkpoint["random"]
        overrides_of = dict(random.get("overrides") or {})
        key = checkpoint_key(random["type"], overrides_of, _lerobot_version(spec.python, job_env(spec)))
        ckpt = str(Path(spec.ckpt_dir) / key)
        make_random = make_random_command(spec.python, random["type"], Path(ckpt), overrides_of)
    return {
        "cell": spec.id,
        "configs": spec.configs,
        "fingerprint": spec.fingerprint.get("key"),
        "python": spec.python,
        "env": spec.env,
        "timeout_min": spec.timeout_min,
        "make_random": make_random,
        "export": export_command(spec, ckpt, spec.cell_dir / BUNDLE_DIR),
    }


def _lerobot_version(python: str, env: dict[str, str]) -> str:
    try:
        done = subprocess.run([python, str(PROBE)], env=env, capture_output=True, text=True, timeout=300)
        return json.loads(done.stdout.strip().splitlines()[-1]).get("lerobot") or "unknown"
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return "unknown"  # the same fallback a job uses when the build cannot say
