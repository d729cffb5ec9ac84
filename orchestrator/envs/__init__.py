"""Build a torch build's environment from its recipe with uv, apply its PR patches, and fingerprint it.

A torch config with `pip:` or `lerobot:` is a recipe; its environment lives in `envs/<name>-<hash>/`, the hash
covering the recipe and the patches' bytes, so a changed recipe is a new environment. The fingerprint file is
written last and marks the env as built; a failed build removes the folder, and a killed one is started over.
`overrides:` go to uv as an overrides file: they replace every dependency's pin of those packages (lerobot's
torch<2.12 when a recipe wants torch 2.15). With a wheelhouse (wheelhouse.py) the install reads nothing but it.
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

from ..atomic import write_json_atomic

RECIPE_KEYS = ("python_version", "pip", "index_url", "lerobot", "transformers", "patches", "overrides")
# a site-wide constraint (a pip.conf or UV_CONSTRAINT capping torch) would change what a recipe builds unseen
LIFTED = ("PIP_CONSTRAINT", "UV_CONSTRAINT", "UV_OVERRIDE", "UV_BUILD_CONSTRAINT")
OVERRIDES = "export-matrix-overrides.txt"
FINGERPRINT = "export-matrix-env.json"
PROBE = Path(__file__).parents[1] / "scripts" / "probe.py"  # run with a build's interpreter: what it has


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
    overrides: tuple[str, ...] = ()
    lerobot: str | None = None  # the requirement `lerobot:` gave (one of `requirements`), where it gave one

    @property
    def patch_sha(self) -> list[str]:
        return [sha256(p) if p.is_file() else "missing" for p in self.patches]

    @property
    def digest(self) -> str:
        return self._digest(self.requirements)

    @property
    def code_digest(self) -> str | None:
        """The digest with the `lerobot:` requirement left out (None without one): what a LeRobot bump keeps, so
        the loaded-files rule decides which cells it touched (docs/bump.md)."""
        if self.lerobot is None:
            return None
        return self._digest([r for r in self.requirements if r != self.lerobot])

    def _digest(self, requirements: list[str]) -> str:
        fields = {"python": self.python_version, "requirements": requirements, "index_url": self.index_url,
                  "patches": self.patch_sha}
        if self.overrides:  # only then: the digests (and built envs) of recipes without overrides stay as they were
            fields["overrides"] = list(self.overrides)
        blob = json.dumps(fields, sort_keys=True)
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
    named: dict[str, str] = {}
    for package in ("lerobot", "transformers"):
        value = build.get(package)
        if value:
            value = str(value)
            named[package] = value if any(c in value for c in "=<>@ ") else f"{package}=={value}"
            requirements.append(named[package])
    patches = [_find_patch(name, str(p), config_dirs) for p in build.get("patches") or []]
    return EnvRecipe(name=name, python_version=str(build.get("python_version") or "3.12"),
                     requirements=requirements, index_url=build.get("index_url"), patches=patches,
                     envs_dir=envs_dir.absolute(), overrides=tuple(str(o) for o in build.get("overrides") or []),
                     lerobot=named.get("lerobot"))


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


def build_env(recipe: EnvRecipe, log: Any = None, wheelhouse: Path | None = None) -> Path:
    """Create the environment, install, patch, verify and fingerprint it; returns its python.

    With a wheelhouse, uv installs its lock of the recipe offline, from its wheels alone."""
    if recipe.built:
        return recipe.python
    for patch in recipe.patches:
        if not patch.is_file():
            raise EnvBuildError(f"patch {patch} not found: download it there (for a pytorch PR: "
                                f"https://github.com/pytorch/pytorch/pull/<N>.diff)")
    lock = lock_path(recipe, wheelhouse) if wheelhouse else None
    if lock and not lock.is_file():
        raise EnvBuildError(f"{wheelhouse} has no wheelhouse of this recipe ({lock.name} missing): make it with "
                            f"export-matrix env wheelhouse {recipe.name} {wheelhouse}")
    building = recipe.path
    shutil.rmtree(building, ignore_errors=True)
    building.parent.mkdir(parents=True, exist_ok=True)
    try:
        _run([uv(), "venv", "--python", find_interpreter(recipe.python_version), str(building)], log)
        python = building / "bin" / "python"
        if recipe.requirements:
            # compiled: jobs import torch from an env that may be read-only to them (or PYTHONDONTWRITEBYTECODE)
            install = [uv(), "pip", "install", "--compile-bytecode", "--python", str(python),
                       *overrides_args(recipe, building)]
            if lock:
                install += ["--offline", "--no-index", "--find-links", str(wheelhouse), "-r", str(lock)]
            else:
                install += [*index_args(recipe), *recipe.requirements]
            _run(install, log)
        site = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], log).strip()
        for patch in recipe.patches:
            apply_patch(patch, Path(site))
        freeze = _run([uv(), "pip", "freeze", "--python", str(python)], log).splitlines()
        version = _run([str(python), "-c", "import platform; print(platform.python_version())"], log).strip()
        write_json_atomic(building / FINGERPRINT, {
            "name": recipe.name, "python_version": version, "requirements": recipe.requirements,
            "index_url": recipe.index_url, "overrides": list(recipe.overrides), "freeze": sorted(freeze),
            "patches": {p.name: sha256(p) for p in recipe.patches},
        })
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return recipe.python


def index_args(recipe: EnvRecipe) -> list[str]:
    return ["--index-url", recipe.index_url] if recipe.index_url else []


def overrides_args(recipe: EnvRecipe, folder: Path) -> list[str]:
    """uv's --overrides with the recipe's overrides written to a file in `folder` (none without overrides)."""
    if not recipe.overrides:
        return []
    path = folder / OVERRIDES
    path.write_text("".join(f"{o}\n" for o in recipe.overrides))
    return ["--overrides", str(path)]


def lock_path(recipe: EnvRecipe, wheelhouse: Path) -> Path:
    """The wheelhouse's pinned requirements of this recipe: named by its env, so a changed recipe has none."""
    return wheelhouse.absolute() / f"{recipe.path.name}.txt"


def build_env_logged(recipe: EnvRecipe, wheelhouse: Path | None = None) -> Path:
    """build_env with its commands' output in envs/<name>-<hash>.log, named in the error if it fails."""
    recipe.envs_dir.mkdir(parents=True, exist_ok=True)
    log_path = recipe.envs_dir / f"{recipe.path.name}.log"
    try:
        with open(log_path, "w") as log:
            return build_env(recipe, log, wheelhouse)
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


def build_environ() -> dict[str, str]:
    """The environment of a build's commands: no Python downloads, no site-wide constraint (LIFTED)."""
    env = {k: v for k, v in os.environ.items() if k not in LIFTED}
    return {**env, "UV_PYTHON_DOWNLOADS": "never", "PIP_CONSTRAINT": ""}  # empty: also lifts a pip.conf's


def _run(command: list[str], log: Any) -> str:
    done = subprocess.run(command, capture_output=True, text=True, env=build_environ())
    if log is not None:
        log.write(f"$ {' '.join(command)}\n{done.stdout}{done.stderr}")
    if done.returncode != 0:
        output = done.stderr.strip() or done.stdout.strip() or "no output"
        reason = no_solution(output) or output.splitlines()[-1]
        raise EnvBuildError(f"{Path(command[0]).name} {command[1]} failed: {reason}")
    return done.stdout


def no_solution(output: str) -> str | None:
    """uv's unsatisfiable resolution in one line: the pins that conflict, not just "unsatisfiable"."""
    if "No solution found" not in output:
        return None
    text = " ".join(output.split())
    clauses = re.findall(r"[Bb]ecause (.+?), we can conclude", text)
    pins = [c for c in clauses if re.search(r"\bdepends? on\b", c)] or clauses
    return (f"no solution: {'; '.join(dict.fromkeys(pins))} (a recipe's overrides: replace a dependency's pins)"
            if pins else None)


def import_roots(python: str) -> list[str] | None:
    """The interpreter's sys.path folders in import order (probe.py --paths); None where it cannot say."""
    try:
        done = subprocess.run([python, str(PROBE), "--paths"], capture_output=True, text=True, timeout=120)
        return [str(p) for p in json.loads(done.stdout)] if done.returncode == 0 else None
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


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
