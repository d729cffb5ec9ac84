"""A torch build's wheelhouse: every wheel its recipe installs, and the pinned list of them, for offline builds.

On a connected machine uv resolves the recipe (overrides included) to exact pins; pip downloads their wheels and
builds the ones that come as source (a lerobot fork at a git URL) into wheels. The pins, with each URL replaced by
the version of the wheel built from it, go to `DIR/<env>.txt`, the file `env build --wheelhouse DIR` installs
with uv offline, from DIR alone. The recipe's patches are applied from the config dirs as in any build.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

from ..atomic import write_bytes_atomic
from . import EnvBuildError, EnvRecipe, _run, find_interpreter, index_args, lock_path, overrides_args, uv


def make_wheelhouse(recipe: EnvRecipe, folder: Path, log: Any = None) -> Path:
    """Fill `folder` with the recipe's wheels and write its lock there; returns the lock's path."""
    folder = folder.absolute()
    folder.mkdir(parents=True, exist_ok=True)
    interpreter = find_interpreter(recipe.python_version)
    with tempfile.TemporaryDirectory(prefix="export-matrix-wheelhouse-") as tmp:
        work = Path(tmp)
        wanted = work / "requirements.in"
        wanted.write_text("".join(f"{r}\n" for r in recipe.requirements))
        pinned = work / "pinned.txt"
        _run([uv(), "pip", "compile", "--quiet", "--no-header", "--python", interpreter, *index_args(recipe),
              *overrides_args(recipe, work), "-o", str(pinned), str(wanted)], log)
        _run([uv(), "venv", "--seed", "--python", interpreter, str(work / "pip")], log)  # pip of the recipe's Python
        _run([str(work / "pip" / "bin" / "pip"), "wheel", "--no-deps", "--wheel-dir", str(folder),
              *index_args(recipe), "-r", str(pinned)], log)
        lines = [pin_of(line, folder) for line in pinned.read_text().splitlines()]
    lock = lock_path(recipe, folder)
    write_bytes_atomic(lock, "".join(f"{line}\n" for line in lines if line))
    return lock


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pin_of(line: str, folder: Path) -> str:
    """A pinned line as uv installs it offline: `name @ URL` becomes `name==<version of the wheel built from it>`."""
    line = "" if line.lstrip().startswith("#") else re.split(r"\s+#", line, maxsplit=1)[0].strip()
    if " @ " not in line:
        return line
    name = re.split(r"[\[ ]", line, maxsplit=1)[0]
    wheels = sorted((w for w in folder.glob("*.whl") if normalized(w.name.split("-")[0]) == normalized(name)),
                    key=lambda w: w.stat().st_mtime)
    if not wheels:
        raise EnvBuildError(f"pip wheel left no wheel of {name} in {folder}")
    return f"{name}=={wheels[-1].name.split('-')[1]}"


def make_wheelhouse_logged(recipe: EnvRecipe, folder: Path) -> Path:
    """make_wheelhouse with its commands' output in DIR/<env>.log, named in the error if it fails."""
    folder.mkdir(parents=True, exist_ok=True)
    log_path = folder.absolute() / f"{recipe.path.name}.log"
    try:
        with open(log_path, "w") as log:
            return make_wheelhouse(recipe, folder, log)
    except EnvBuildError as exc:
        raise EnvBuildError(f"{exc} (log: {log_path})") from None
