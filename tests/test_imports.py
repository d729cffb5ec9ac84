"""Each module of the package imports on its own, first in a fresh interpreter: an import cycle inside a stage
(which import-linter's layers do not see) fails here with the module that starts it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TORCH_SIDE = ("exporters", "repros", "scripts")  # run in a torch build: import torch, not checked here


def _modules() -> list[str]:
    names = []
    for path in sorted((ROOT / "orchestrator").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if len(parts) > 1 and parts[1] in TORCH_SIDE:
            continue
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_every_module_imports_first_in_a_fresh_interpreter() -> None:
    code = ("import importlib, subprocess, sys\n"
            "bad = []\n"
            "for name in sys.argv[1:]:\n"
            "    done = subprocess.run([sys.executable, '-c', f'import {name}'], capture_output=True, text=True)\n"
            "    if done.returncode:\n"
            "        bad.append(f'{name}: {done.stderr.strip().splitlines()[-1]}')\n"
            "print('\\n'.join(bad))\n")
    modules = _modules()
    assert "orchestrator.collect.columns" in modules and "orchestrator.config.schema" in modules
    done = subprocess.run([sys.executable, "-c", code, *modules], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", f"modules that fail to import first:\n{done.stdout}"


def test_every_top_level_module_is_in_the_layers_and_forbidden_to_the_torch_side() -> None:
    """A module added to orchestrator/ is placed in the import contracts, or lint-imports would not check it."""
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layered = {name.strip() for c in contracts if c["type"] == "layers" and "containers" not in c
               for layer in c["layers"] for name in layer.split("|")}
    forbidden = {name for c in contracts if c["type"] == "forbidden"
                 and "orchestrator.exporters" in c["source_modules"] for name in c["forbidden_modules"]}
    top = {f"orchestrator.{p.stem if p.is_file() else p.name}" for p in (ROOT / "orchestrator").iterdir()
           if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()}
    top -= {f"orchestrator.{name}" for name in TORCH_SIDE}
    assert top - layered == set(), "add these to pyproject.toml's layers"
    assert top - forbidden == set(), "forbid these to exporters/, repros/ and scripts/ in pyproject.toml"
