"""make_random's cache: one random checkpoint per (policy type, overrides, lerobot version), built once.

A lerobot from a git URL or a folder reports its version with a digest of its sources (probe.py), so a branch
bump builds new checkpoints. Each keeps the files make_random loaded (loaded_files.txt) for its cells' lists.

Two jobs that want the same checkpoint at once take a file lock; the loser finds it built. A checkpoint is
built in a temporary folder and renamed into place, so a killed build never leaves a half checkpoint behind.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..atomic import write_json_atomic
from ..record import loaded
from .process import run_logged

MAKE_RANDOM = Path(__file__).resolve().parents[1] / "scripts" / "make_random.py"
MARKER = "make_random.json"


class CheckpointFailed(Exception):
    """make_random exited non-zero or ran past its time limit; the log says why."""

    def __init__(self, returncode: int, timed_out: bool, seconds: float) -> None:
        super().__init__(f"make_random {'timed out' if timed_out else f'exited with {returncode}'}")
        self.returncode, self.timed_out, self.seconds = returncode, timed_out, seconds


@dataclass
class Checkpoint:
    path: Path
    key: str
    seconds: float
    built: bool

    @property
    def loaded_files(self) -> dict[str, str] | None:
        """What make_random loaded building it (loaded_files.txt in the checkpoint); None where it has no list."""
        return loaded.read_list(self.path / loaded.LOADED_NAME)


def checkpoint_key(policy_type: str, overrides: dict[str, Any], lerobot_version: str) -> str:
    """make_random seeds itself with 0, so type, overrides and lerobot version decide the weights."""
    blob = json.dumps({"type": policy_type, "overrides": overrides, "lerobot": lerobot_version}, sort_keys=True)
    return f"{policy_type}-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


def make_random_command(python: str, policy_type: str, out: Path, overrides: dict[str, Any]) -> list[str]:
    return [python, str(MAKE_RANDOM), policy_type, str(out),
            *(f"{key}={json.dumps(value)}" for key, value in overrides.items())]


def ensure_random_checkpoint(
    ckpt_dir: Path, random: dict[str, Any], lerobot_version: str, python: str,
    env: dict[str, str], log_path: Path, timeout_s: float,
) -> Checkpoint:
    policy_type, overrides = random["type"], dict(random.get("overrides") or {})
    key = checkpoint_key(policy_type, overrides, lerobot_version)
    final = ckpt_dir / key
    (ckpt_dir / ".locks").mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with open(ckpt_dir / ".locks" / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / MARKER).exists():
            with open(log_path, "a") as log:
                log.write(f"[export-matrix] reusing the random checkpoint {final}\n")
            return Checkpoint(final, key, time.monotonic() - start, built=False)
        building = ckpt_dir / f".{key}.building"
        shutil.rmtree(building, ignore_errors=True)
        command = make_random_command(python, policy_type, building, overrides)
        with open(log_path, "a") as log:
            log.write(f"[export-matrix] {json.dumps(command)}\n")
        listed = ckpt_dir / f".{key}.loaded"
        shutil.rmtree(listed, ignore_errors=True)
        outcome = run_logged(command, log_path, loaded.step_env(env, listed), timeout_s)
        if outcome.returncode != 0 or outcome.timed_out:
            shutil.rmtree(building, ignore_errors=True)
            shutil.rmtree(listed, ignore_errors=True)
            raise CheckpointFailed(outcome.returncode, outcome.timed_out, outcome.seconds)
        files = loaded.gathered(listed) if loaded.complete(listed, outcome.pid, False, outcome.returncode) else {}
        shutil.rmtree(listed, ignore_errors=True)
        if files:
            loaded.write_list(building / loaded.LOADED_NAME, files)
        write_json_atomic(building / MARKER, {"type": policy_type, "overrides": overrides,
                                              "lerobot": lerobot_version,
                                              "seconds": round(outcome.seconds, 2)})
        shutil.rmtree(final, ignore_errors=True)
        building.rename(final)
    return Checkpoint(final, key, outcome.seconds, built=True)
