"""The out_dir that `status` and `wait` read, without importing Hydra when the config has not changed.

All a status takes from the composed config is out_dir, and importing Hydra and composing is half of a status of
1,500 cells. The composed out_dir is a function of the config files' bytes, the overrides and the code that
composes, so it is kept under a digest of those in the user's cache (XDG_CACHE_HOME, else ~/.cache); a config
or override that interpolates (`${...}`) may read the environment, so it is always composed.
"""

from __future__ import annotations

import os
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from .atomic import write_json_atomic
from .fingerprint_cache import ConfigFiles, digest
from .jsonio import loads

KEPT = 64  # out_dirs remembered (one per distinct config and overrides)


def cache_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "export-matrix" / "out_dirs.json"


def composed_out_dir(overrides: list[str], config_dir: Path | None) -> Path:
    """out_dir as compose_config(overrides, config_dir) gives it: ConfigError where composing fails."""
    files = ConfigFiles(config_dir)
    key = None if files.interpolates or any("${" in o for o in overrides) else _key(files, overrides)
    known = _read() if key else {}
    if key in known:
        return Path(known[key])
    from .config import compose_config

    out_dir = str(compose_config(overrides, config_dir).cfg.out_dir)
    if key:
        known.pop(key, None)
        kept = dict(list(known.items())[-(KEPT - 1):])
        kept[key] = out_dir
        try:
            write_json_atomic(cache_path(), kept)
        except OSError:
            pass  # a cache that cannot be written costs time, not correctness
    return Path(out_dir)


def _key(files: ConfigFiles, overrides: list[str]) -> str:
    code = (Path(__file__).parent / "config.py").read_bytes()  # how it composes
    return digest([files.everything, *map(str, files.dirs), *overrides, "\0", code, _hydra_version()])


def _hydra_version() -> str:
    try:
        return version("hydra-core")
    except PackageNotFoundError:
        return "unknown"


def _read() -> dict[str, str]:
    try:
        found = loads(cache_path().read_bytes())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}
