"""The configs' types, as dataclasses: Hydra's ConfigStore holds the launchers' (the launcher YAMLs extend them,
so Hydra checks a value as it composes, an override's too), and the axis entries are checked against theirs.

A YAML holds a setting's value and what it means; its dataclass here says what it may be (its type, its `check`,
and in `allowed` the one-line rule a user reads when a value breaks it). The axis schemas are open, as the axis
configs may carry keys of a site's own, and an entry is checked field by field in plain Python, leaving the
composed values as written (a record's fingerprint hashes them): an OmegaConf merge per entry would cost 2 ms,
seconds at a thousand policies.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from typing import Any

from ..errors import ConfigError

Check = Callable[[Any], bool]


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def positive(v: Any) -> bool:
    return v is None or (_number(v) and v > 0)


def at_least_1(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def count(v: Any) -> bool:
    return v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 0)


def text(v: Any) -> bool:
    return v is None or (isinstance(v, str) and bool(v))


def strict_bool(v: Any) -> bool:
    return v is None or isinstance(v, bool)


def mapping(v: Any) -> bool:
    return v is None or isinstance(v, dict)


def capability(v: Any) -> bool:
    return v is None or (isinstance(v, str) and re.fullmatch(r"sm_[0-9]{2,3}", v) is not None)


def texts(v: Any) -> bool:
    return v is None or (isinstance(v, list) and all(isinstance(x, str | int | float) for x in v))


def setting(allowed: str, check: Check, default: Any = None, keys: type | None = None) -> Any:
    """A field that says, in `allowed`, what its value may be, and `check`s it strictly (a range, a non-empty
    string, a boolean that is no string); `keys`, a mapping's known keys, checked the same way."""
    return field(default=default, metadata={"allowed": allowed, "check": check, "keys": keys})


POSITIVE = "a number greater than 0"
TEXT = "a non-empty string or null"
TEXTS = "a list of strings"
MAPPING = "a mapping (key: value)"


@dataclass
class PrepareConf:
    """What the make_random array asks of Slurm (`launcher.prepare`)."""

    partition: str | None = setting(TEXT, text)
    constraint: str | None = setting(TEXT, text)
    cpus_per_task: float | None = setting(POSITIVE, positive)
    mem_gb: float | None = setting(POSITIVE, positive)
    time_min: float | None = setting(POSITIVE, positive)


@dataclass
class LocalLauncherConf:
    name: str = setting("a non-empty string", text, MISSING)
    parallel: int = setting("an integer at least 1", at_least_1, MISSING)
    poll_s: float = setting(POSITIVE, positive, MISSING)


@dataclass
class SlurmLauncherConf:
    name: str = setting("a non-empty string", text, MISSING)
    array_parallelism: int = setting("an integer at least 1", at_least_1, MISSING)
    time_min: float | None = setting(POSITIVE, positive, MISSING)
    signal_delay_s: int = setting("an integer at least 0", count, MISSING)
    max_requeues: int = setting("an integer at least 0", count, MISSING)
    poll_s: float = setting(POSITIVE, positive, MISSING)
    sbatch: dict[str, Any] = setting(MAPPING, mapping, MISSING)
    setup: list[str] = setting(TEXTS, texts, MISSING)
    python: str | None = setting(TEXT, text, MISSING)
    prepare: PrepareConf | None = setting(MAPPING, mapping, MISSING, keys=PrepareConf)


@dataclass
class SlurmResources(PrepareConf):
    """The Slurm keys a gpu or policy config may set (others pass through to the record as they are): those of
    the make_random array, and the GPUs a job asks for."""

    gres: str | None = setting(TEXT, text)


@dataclass
class PolicyConf:
    checkpoint: dict[str, Any] | None = setting(MAPPING, mapping)
    task: str | None = setting(TEXT, text)
    export_args: list[str] | None = setting(TEXTS, texts)
    timeout_min: float | None = setting(POSITIVE, positive)
    env: dict[str, Any] | None = setting(MAPPING, mapping)
    exporter: str | None = setting(TEXT, text)
    slurm: dict[str, Any] | None = setting(MAPPING, mapping, keys=SlurmResources)
    # the check's largest allowed difference with eager, passed to the exporters that take it (--tolerance=)
    tolerance: float | None = setting(f"{POSITIVE} or null", positive)


@dataclass
class GpuConf:
    label: str | None = setting(TEXT, text)
    exporter: str | None = setting(TEXT, text)
    slurm: dict[str, Any] | None = setting(MAPPING, mapping, keys=SlurmResources)
    env: dict[str, Any] | None = setting(MAPPING, mapping)
    # what the column's cells must run on (job.py checks the GPU a job got, through NVML, before make_random):
    # its compute capability, and a glob on NVML's device name ("*A100*"); null: any (the cpu column)
    capability: str | None = setting("a compute capability such as sm_80, or null", capability)
    name: str | None = setting("a name pattern such as \"*A100*\", or null", text)


@dataclass
class BuildConf:
    python: str | None = setting(TEXT, text)
    fixes: list[str] | None = setting(TEXTS, texts)
    env: dict[str, Any] | None = setting(MAPPING, mapping)
    pip: list[str] | None = setting(TEXTS, texts)
    patches: list[str] | None = setting(TEXTS, texts)
    python_version: str | None = setting(TEXT, text)
    index_url: str | None = setting(TEXT, text)
    lerobot: str | None = setting(TEXT, text)
    transformers: str | None = setting(TEXT, text)
    overrides: list[str] | None = setting(TEXTS, texts)


@dataclass
class ExporterConf:
    command: list[str] | None = setting("a non-empty list of strings", lambda v: texts(v) and bool(v))
    requires_cuda: bool | None = setting("true or false", strict_bool)


LAUNCHERS: dict[str, type] = {"local": LocalLauncherConf, "slurm": SlurmLauncherConf}
AXES: dict[str, type] = {"policies": PolicyConf, "gpus": GpuConf, "builds": BuildConf, "exporters": ExporterConf}


def register() -> None:
    """Store the launchers' schemas, for conf/launcher/*.yaml's `defaults: [/schema/launcher/NAME@_here_]`."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    for name, schema in LAUNCHERS.items():
        store.store(group="schema/launcher", name=name, node=schema)


def launcher_name(node: Any) -> str:
    name = str(node.get("name"))
    if name not in LAUNCHERS:
        raise ConfigError(f"unknown launcher {name!r} (valid: {', '.join(LAUNCHERS)})")
    return name


def typed_launcher(node: Any) -> Any:
    """The launcher config as its dataclass (a launcher YAML of a site's own that does not extend the schema is
    checked here the same way)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    schema = LAUNCHERS[launcher_name(node)]
    plain = OmegaConf.to_container(node) if OmegaConf.is_config(node) else node
    try:  # a dataclass node refuses keys it does not name (a dict field's do not); to_object, a value left unset
        typed = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), plain))
    except OmegaConfBaseException as exc:
        raise one_line(exc, "launcher") from None
    _check_values(plain, schema, "launcher")
    return typed


def check_axis(node: str, entries: dict[str, Any]) -> None:
    """Raise ConfigError on the first bad value of one axis node (policies, gpus, builds, exporters)."""
    for name, values in entries.items():
        if not isinstance(values, dict):
            raise ConfigError(f"{node}.{name} must be a mapping, got {values!r}")
        _check_values(values, AXES[node], f"{node}.{name}")


def _check_values(values: dict[str, Any], schema: type, prefix: str) -> None:
    """Each field's check on the values as written; keys the schema does not name pass."""
    for spec in fields(schema):
        value = values.get(spec.name)
        if not spec.metadata["check"](value):
            raise ConfigError(f"{prefix}.{spec.name} must be {spec.metadata['allowed']}, got {value!r}")
        if spec.metadata["keys"] and isinstance(value, dict):
            _check_values(value, spec.metadata["keys"], f"{prefix}.{spec.name}")


def one_line(exc: Exception, prefix: str = "") -> ConfigError:
    """OmegaConf's error on a schema (a bad type, an unknown key, a value left unset) as the one line a user gets
    for it: the key, the value and what is allowed."""
    from omegaconf.errors import ConfigKeyError, MissingMandatoryValue

    schema, key = getattr(exc, "object_type", None), getattr(exc, "key", None)
    full_key = ".".join(part for part in (prefix, str(getattr(exc, "full_key", "") or key)) if part)
    spec = {f.name: f for f in fields(schema)} if isinstance(schema, type) and is_dataclass(schema) else {}
    if isinstance(exc, ConfigKeyError) and spec:
        return ConfigError(f"unknown key {full_key} (valid: {', '.join(sorted(spec))})")
    if key not in spec:
        return ConfigError(str(exc).splitlines()[0])
    allowed = spec[key].metadata["allowed"]
    if isinstance(exc, MissingMandatoryValue):
        return ConfigError(f"{full_key} must be set ({allowed})")
    return ConfigError(f"{full_key} must be {allowed}, got {getattr(exc, 'value', None)!r}")
