"""Build a torch build's environment from its recipe with uv, apply its PR patches, and fingerprint it.

A torch config with `pip:` or `lerobot:` is a recipe; its environment lives in `envs/<name>-<hash>/`, the hash
covering the recipe and the patches' bytes, so a changed recipe is a new environment. The fingerprint file is
written last and marks the env as built; a failed build removes the folder, and a killed one is started over.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .atomic import write_json_atomic

RECIPE_KEYS = ("python_version", "pip", "index_url", "lerobot", "transformers", "patches")
FINGERPRINT = "export-matrix-env.json"
PROBE = Path(__file__).parent / "scripts" / "probe.py"  # run with a build's interpreter: what it has


class EnvBuildError(RuntimeError):
    """A step of building an environment failed; the message is the one line to show."""


@dataclass(frozen=True)
class EnvRecipe:
    name: str
    python_version: str
    requirements: list[str]
    index_url: str | None
    patches: list[Path]
    envs_dir: Path

    @property
    def patch_sha(self) -> list[str]:
        return [sha256(p) if p.is_file() else "missing" for p in self.patches]

    @property
    def digest(self) -> str:
        blob = json.dumps({"python": self.python_version, "requirements": self.requirements,
                           "index_url": self.index_url, "patches": self.patch_sha}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    @property
    def path(self) -> Path:
        return self.envs_dir / f"{self.name}-{self.digest}"

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def built(self) -> bool:
        return (self.path / FINGERPRINT).exists()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def is_recipe(build: dict[str, Any]) -> bool:
    return bool(build.get("pip") or build.get("lerobot"))


def recipe_of(name: str, build: dict[str, Any], config_dirs: list[Path], envs_dir: Path) -> EnvRecipe:
    """The recipe of torch build `name`; patch paths are relative to the config dirs, searched in order."""
    requirements = [str(r) for r in build.get("pip") or []]
    for package in ("lerobot", "transformers"):
        value = build.get(package)
        if value:
            value = str(value)
            requirements.append(value if any(c in value for c in "=<>@ ") else f"{package}=={value}")
    patches = [_find_patch(name, str(p), config_dirs) for p in build.get("patches") or []]
    return EnvRecipe(name=name, python_version=str(build.get("python_version") or "3.12"),
                     requirements=requirements, index_url=build.get("index_url"), patches=patches,
                     envs_dir=envs_dir.absolute())


def _find_patch(build: str, patch: str, config_dirs: list[Path]) -> Path:
    """The first config dir's copy of the patch; a missing one stops only the build that needs it."""
    candidates = [Path(patch)] if Path(patch).is_absolute() else [d / patch for d in config_dirs]
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    return candidates[0]


def find_interpreter(version: str) -> str:
    """An interpreter of `version` for uv: on PATH, else one of pyenv's; uv downloads none."""
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}
    pyenv = shutil.which("pyenv")
    if pyenv:
        installed = subprocess.run([pyenv, "versions", "--bare"], capture_output=True, text=True).stdout.split()
        matching = [v for v in installed if v == version or v.startswith(f"{version}.")]
        if matching:
            env["PYENV_VERSION"] = matching[-1]
    found = subprocess.run([uv(), "python", "find", version], capture_output=True, text=True, env=env)
    if found.returncode != 0:
        raise EnvBuildError(f"no Python {version} interpreter found for uv (uv downloads none here)")
    return found.stdout.strip()


def uv() -> str:
    beside = Path(sys.executable).parent / "uv"
    return str(beside) if beside.exists() else (shutil.which("uv") or "uv")


def build_env(recipe: EnvRecipe, log: Any = None) -> Path:
    """Create the environment, install, patch, verify and fingerprint it; returns its python."""
    if recipe.built:
        return recipe.python
    for patch in recipe.patches:
        if not patch.is_file():
            raise EnvBuildError(f"patch {patch} not found: download it there (for a pytorch PR: "
                                f"https://github.com/pytorch/pytorch/pull/<N>.diff)")
    building = recipe.path
    shutil.rmtree(building, ignore_errors=True)
    building.parent.mkdir(parents=True, exist_ok=True)
    try:
        _run([uv(), "venv", "--python", find_interpreter(recipe.python_version), str(building)], log)
        python = building / "bin" / "python"
        index = ["--index-url", recipe.index_url] if recipe.index_url else []
        if recipe.requirements:
            # compiled: jobs import torch from an env that may be read-only to them (or PYTHONDONTWRITEBYTECODE)
            _run([uv(), "pip", "install", "--compile-bytecode", "--python", str(python), *index,
                  *recipe.requirements], log)
        site = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], log).strip()
        for patch in recipe.patches:
            apply_patch(patch, Path(site))
        freeze = _run([uv(), "pip", "freeze", "--python", str(python)], log).splitlines()
        version = _run([str(python), "-c", "import platform; print(platform.python_version())"], log).strip()
        write_json_atomic(building / FINGERPRINT, {
            "name": recipe.name, "python_version": version, "requirements": recipe.requirements,
            "index_url": recipe.index_url, "freeze": sorted(freeze),
            "patches": {p.name: sha256(p) for p in recipe.patches},
        })
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return recipe.python


def build_env_logged(recipe: EnvRecipe) -> Path:
    """build_env with its commands' output in envs/<name>-<hash>.log, named in the error if it fails."""
    recipe.envs_dir.mkdir(parents=True, exist_ok=True)
    log_path = recipe.envs_dir / f"{recipe.path.name}.log"
    try:
        with open(log_path, "w") as log:
            return build_env(recipe, log)
    except EnvBuildError as exc:
        raise EnvBuildError(f"{exc} (log: {log_path})") from None


def apply_patch(patch: Path, site: Path) -> None:
    """Apply a `git diff`-style patch (a/torch/... paths) to site-packages and check every hunk went in."""
    args = ["patch", "-p1", "--batch", "--forward", "-d", str(site), "-i", str(patch)]
    dry = subprocess.run([*args, "--dry-run"], capture_output=True, text=True)
    if dry.returncode != 0:
        raise EnvBuildError(f"patch {patch.name} does not apply: {_failing_file(dry.stdout + dry.stderr)}")
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        raise EnvBuildError(f"patch {patch.name} does not apply: {_failing_file(done.stdout + done.stderr)}")
    check = subprocess.run(["patch", "-p1", "--batch", "-R", "--dry-run", "-d", str(site), "-i", str(patch)],
                           capture_output=True, text=True)
    if check.returncode != 0:
        raise EnvBuildError(f"patch {patch.name} is not fully in after applying: {_failing_file(check.stdout)}")


def _failing_file(output: str) -> str:
    current = None
    for line in output.splitlines():
        hit = re.match(r"(?:checking|patching) file (\S+)|\|?\+\+\+ b/(\S+)", line)
        if hit:
            current = hit.group(1) or hit.group(2)
        if "FAILED" in line or "can't find file" in line or "No file to patch" in line or "Reversed" in line:
            return f"{current or '?'} ({line.strip()})"
    return output.strip().splitlines()[-1] if output.strip() else "unknown reason"


def _run(command: list[str], log: Any) -> str:
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"})
    if log is not None:
        log.write(f"$ {' '.join(command)}\n{done.stdout}{done.stderr}")
    if done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
        raise EnvBuildError(f"{Path(command[0]).name} {command[1]} failed: {last}")
    return done.stdout


def env_fingerprint(python: str) -> dict[str, Any]:
    """A built env's fingerprint file, or (for an env we did not build) its installed distributions."""
    marker = Path(python).parent.parent / FINGERPRINT
    if marker.exists():
        return json.loads(marker.read_text())
    try:
        done = subprocess.run([python, str(PROBE), "--installed"], capture_output=True, text=True)
    except OSError:
        return {"missing": python}
    if done.returncode != 0:
        return {"missing": python}
    return json.loads(done.stdout)
