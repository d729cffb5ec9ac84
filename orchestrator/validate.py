"""Check every value of the configs a sweep uses, before anything runs: types, ranges and shapes.

Hydra composes whatever YAML says; a string where a number belongs or a misspelt launcher key would otherwise
surface as a traceback deep in a job, or be ignored. Each problem is one ConfigError line naming the key, the
value and what is allowed. Axis configs may carry keys of a site's own (they travel in the record's configs);
the launcher's keys are a closed set, so a typo there (`array_paralelism`) is an error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .config import ConfigError


def _text(v: Any) -> bool:
    return isinstance(v, str) and bool(v)


def _positive(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and v > 0


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _mapping(v: Any) -> bool:
    return isinstance(v, dict)


def _texts(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str | int | float) for x in v)


def _optional(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or check(v)


Rule = tuple[Callable[[Any], bool], str]
TEXT: Rule = (_text, "a non-empty string")
OPTIONAL_TEXT: Rule = (_optional(_text), "a non-empty string or null")
POSITIVE: Rule = (_optional(_positive), "a number greater than 0")
MAPPING: Rule = (_optional(_mapping), "a mapping (key: value)")
TEXTS: Rule = (_optional(_texts), "a list of strings")
COUNT: Rule = (_optional(_count), "an integer at least 0")
BOOL: Rule = (_optional(lambda v: isinstance(v, bool)), "true or false")

SLURM = {"partition": OPTIONAL_TEXT, "gres": OPTIONAL_TEXT, "constraint": OPTIONAL_TEXT, "cpus_per_task": POSITIVE,
         "mem_gb": POSITIVE, "time_min": POSITIVE}
AXES: dict[str, dict[str, Rule]] = {
    "policies": {"checkpoint": MAPPING, "task": OPTIONAL_TEXT, "export_args": TEXTS, "timeout_min": POSITIVE,
                 "env": MAPPING, "exporter": OPTIONAL_TEXT, "slurm": MAPPING},
    "gpus": {"label": OPTIONAL_TEXT, "exporter": OPTIONAL_TEXT, "slurm": MAPPING, "env": MAPPING},
    "builds": {"python": OPTIONAL_TEXT, "fixes": TEXTS, "env": MAPPING, "pip": TEXTS, "patches": TEXTS,
               "python_version": OPTIONAL_TEXT, "index_url": OPTIONAL_TEXT, "lerobot": OPTIONAL_TEXT,
               "transformers": OPTIONAL_TEXT, "overrides": TEXTS},
    "exporters": {"command": (lambda v: _texts(v) and bool(v), "a non-empty list of strings"),
                  "requires_cuda": BOOL},
}
LAUNCHERS: dict[str, dict[str, Rule]] = {
    "local": {"name": TEXT, "parallel": (lambda v: _count(v) and v >= 1, "an integer at least 1"),
              "poll_s": POSITIVE},
    "slurm": {"name": TEXT, "array_parallelism": (lambda v: _count(v) and v >= 1, "an integer at least 1"),
              "time_min": POSITIVE, "signal_delay_s": COUNT, "max_requeues": COUNT, "poll_s": POSITIVE,
              "sbatch": MAPPING, "setup": TEXTS, "python": OPTIONAL_TEXT, "prepare": MAPPING},
}
PREPARE = {k: SLURM[k] for k in ("partition", "constraint", "cpus_per_task", "mem_gb", "time_min")}


def check(key: str, value: Any, rule: Rule) -> None:
    ok, allowed = rule
    if not ok(value):
        raise ConfigError(f"{key} must be {allowed}, got {value!r}")


def validate_axis(node: str, entries: dict[str, Any]) -> None:
    """Raise ConfigError on the first bad value of one axis node (policies, gpus, builds, exporters)."""
    for name, values in entries.items():
        if not isinstance(values, dict):
            raise ConfigError(f"{node}.{name} must be a mapping, got {values!r}")
        for key, rule in AXES[node].items():
            check(f"{node}.{name}.{key}", values.get(key), rule)
        for key, value in (values.get("slurm") or {}).items():
            if key in SLURM:
                check(f"{node}.{name}.slurm.{key}", value, SLURM[key])


def validate(cfg: dict[str, Any]) -> None:
    """Raise ConfigError on the first bad value of the composed (plain) config's axes and launcher."""
    for node in AXES:
        validate_axis(node, cfg.get(node) or {})
    launcher = cfg.get("launcher") or {}
    rules = LAUNCHERS.get(str(launcher.get("name")))
    if rules is None:
        raise ConfigError(f"unknown launcher {launcher.get('name')!r} (valid: {', '.join(LAUNCHERS)})")
    for key, value in launcher.items():
        if key not in rules:
            raise ConfigError(f"unknown key launcher.{key} (valid: {', '.join(sorted(rules))})")
        check(f"launcher.{key}", value, rules[key])
    for key, value in (launcher.get("prepare") or {}).items():
        if key not in PREPARE:
            raise ConfigError(f"unknown key launcher.prepare.{key} (valid: {', '.join(PREPARE)})")
        check(f"launcher.prepare.{key}", value, PREPARE[key])
