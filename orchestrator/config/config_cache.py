"""What a command takes from the composed config, kept so that a config that has not changed needs no Hydra.

Importing Hydra and composing is half of a `status` of 1,500 cells and most of a second of every `collect`. What
they take (status: out_dir; collect: its settings) is a function of the config files' bytes, the overrides and
the code that composes and derives it, so it is kept under a digest of those in the user's cache (XDG_CACHE_HOME,
else ~/.cache), one JSON file per kind; a config or override that interpolates (`${...}`) may read the
environment, so it is always composed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from ..atomic import write_json_atomic
from ..jsonio import loads
from .fingerprint_cache import ConfigFiles, digest

KEPT = 64  # values remembered per kind (one per distinct config and overrides)


def cache_path(kind: str = "out_dirs") -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "export-matrix" / f"{kind}.json"


def kept(kind: str, overrides: list[str], config_dir: Path | None, code: list[Path], extra: list[str],
         compose: Callable[[], Any]) -> Any:
    """compose()'s JSON value for this config and these overrides, from the cache when it has it. code: the
    files whose logic makes the value (config/__init__.py and schema.py always count); extra: anything else it depends
    on. A compose that raises (a bad override) is not kept."""
    files = ConfigFiles(config_dir)
    key = None
    if not files.interpolates and not any("${" in o for o in overrides):
        here = Path(__file__).parent
        sources = [path.read_bytes() for path in (here / "__init__.py", here / "schema.py", *code)]
        key = digest([files.everything, *map(str, files.dirs), *overrides, "\0", *sources, _hydra_version(), "\0",
                      *extra])
    known = _read(kind) if key else {}
    if key in known:
        return known[key]
    value = compose()
    if key:
        known.pop(key, None)
        remembered = dict(list(known.items())[-(KEPT - 1):])
        remembered[key] = value
        try:  # in the order remembered, the newest last (sorted keys made a new one the first to go)
            write_json_atomic(cache_path(kind), remembered, sort_keys=False)
        except OSError:
            pass  # a cache that cannot be written costs time, not correctness
    return value


def composed_out_dir(overrides: list[str], config_dir: Path | None) -> Path:
    """out_dir as compose_config(overrides, config_dir) gives it: ConfigError where composing fails."""

    def compose() -> str:
        from . import compose_config

        return str(compose_config(overrides, config_dir).cfg.out_dir)

    return Path(kept("out_dirs", overrides, config_dir, [], [], compose))


def _hydra_version() -> str:
    try:
        return version("hydra-core")
    except PackageNotFoundError:
        return "unknown"


def _read(kind: str) -> dict[str, Any]:
    try:
        found = loads(cache_path(kind).read_bytes())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}
