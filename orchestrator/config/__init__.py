"""Compose the sweep configuration with Hydra: the primary config, then every axis config a matrix names.

Hydra picks one option per config group; a matrix needs many policies, GPUs and builds at once, so each is
added under its own package (`+policy@policies.act=act`). A user's `--config-dir` is Hydra's main search path
entry, so its files win over the package's `conf/`, which is appended through `hydra.searchpath`.
"""

from __future__ import annotations

import difflib
import fnmatch
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ..errors import ConfigError

if TYPE_CHECKING:
    from omegaconf import DictConfig

# Hydra is imported where a config is composed, not with this module: importing it takes a third of a second,
# and `status` and `wait` usually need no composition (config_cache.py).

PACKAGE_CONF = Path(__file__).resolve().parents[2] / "conf"
PRIMARY = "export_matrix"
# Axis groups that a matrix lists by name, and the node each one is composed under.
AXES = {"policy": "policies", "gpu": "gpus", "torch": "builds", "exporter": "exporters"}
# Groups chosen one at a time with `group=name` on the command line.
CHOICE_GROUPS = ("matrix", "launcher", "exporter")
POLICY_CHUNK = 64  # policies per Hydra composition (see _compose_many)


class _ComposeError(ConfigError):
    """Hydra refused a composition: perhaps an override names a key no config holds (see _unknown_key)."""


@dataclass
class Composed:
    cfg: DictConfig
    choices: dict[str, str | None]
    options: dict[str, list[str]]
    config_dirs: list[Path]
    selection: dict[str, list[str]] = field(default_factory=dict)  # `policy=act,wall_*`: names or globs per axis

    def selects(self, cell_id: str) -> bool:
        """Whether `policy=`, `gpu=`, `torch=` on the command line keep this cell (all cells without them)."""
        return selected(cell_id, self.selection)


# `policy=act,wall_x`, `gpu=a100`, `torch=stock,pr*`: Hydra's way of choosing from a group, here narrowing the
# selected matrix's axes (names or globs) for every command.
SELECT_AXES = ("policy", "gpu", "torch")


def split_selection(overrides: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    rest: list[str] = []
    chosen: dict[str, list[str]] = {}
    for override in overrides:
        key, eq, value = override.partition("=")
        bare = key.lstrip("+~").split("@", 1)[0]
        if bare in SELECT_AXES and key != bare:
            if key.startswith("~") or "@" in key:  # a deletion or a package move has no meaning for a selection
                raise ConfigError(f"{override!r}: {bare} is a selection, not a config group to change "
                                  f"(write {bare}=NAME[,NAME...])")
            key = bare  # Hydra's append (+gpu=h100, ++gpu=h100) selects, as gpu=h100 does
        if eq and key in SELECT_AXES:
            names = [v.strip().strip("'\"") for v in value.strip().strip("[]").split(",") if v.strip()]
            if not names:
                raise ConfigError(f"{key}= needs one or more names or patterns (e.g. {key}=a,b or {key}='x*')")
            chosen.setdefault(key, []).extend(names)
        else:
            rest.append(override)
    return rest, chosen


def selected(cell_id: str, selection: dict[str, list[str]]) -> bool:
    parts = dict(zip(SELECT_AXES, cell_id.split("/"), strict=False))
    return all(any(fnmatch.fnmatchcase(parts.get(axis, ""), p) for p in patterns)
               for axis, patterns in selection.items())


def _check_selection(selection: dict[str, list[str]], options: dict[str, list[str]]) -> None:
    for axis, patterns in selection.items():
        for pattern in patterns:
            if not any(fnmatch.fnmatchcase(name, pattern) for name in options[axis]):
                raise unknown(axis, pattern, options[axis])


def check_out_dir(out_dir: Path) -> Path:
    """out_dir, unless it names a file: every command that reads or writes out_dir refuses one in the same line."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"out_dir {str(out_dir)!r} is a file, not a directory")
    return out_dir


def unknown(kind: str, value: Any, valid: list[str]) -> ConfigError:
    return ConfigError(f"unknown {kind} {value!r} (valid: {', '.join(sorted(valid)) or 'none'})")


def _first_line(exc: BaseException) -> str:
    """Hydra's messages span lines (the problem, then the hint): keep both, on one line."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return " ".join(lines[:2]) if lines else type(exc).__name__


def _axis_override(override: str) -> bool:
    """Overrides that reach into axis nodes only exist once those nodes are composed (phase 2)."""
    key = override.lstrip("+~").split("=", 1)[0]
    return key.split(".", 1)[0] in AXES.values()


def compose_config(overrides: list[str], config_dir: Path | None = None) -> Composed:
    """Compose the primary config and every axis config its matrix needs; raise ConfigError on bad input."""
    from hydra import initialize_config_dir
    from hydra.core.config_store import ConfigStore
    from hydra.core.global_hydra import GlobalHydra

    overrides, selection = split_selection(overrides)
    dirs = [PACKAGE_CONF] if config_dir is None else [Path(config_dir).resolve(), PACKAGE_CONF]
    if config_dir is not None and not dirs[0].is_dir():
        raise ConfigError(f"--config-dir {str(config_dir)!r} is not a directory")
    from .schema import register

    store = ConfigStore.instance()
    store.store(name=PRIMARY, node={"defaults": ["config", "_self_"]})
    register()
    search = [f"hydra.searchpath=[{','.join('file://' + str(d) for d in dirs[1:])}]"] if dirs[1:] else []
    try:
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(dirs[0]), version_base=None):
            options = _group_options(search)
            for override in overrides:
                key, _, value = override.lstrip("+").partition("=")
                if key in CHOICE_GROUPS and value not in options[key] and value != "null":
                    raise unknown(key, value, options[key])
            _check_selection(selection, options)
            try:
                composed = _compose_all(overrides, search, options, dirs, selection)
            except _ComposeError as exc:
                raise _unknown_key(overrides, search, options, appended=False) or exc from None
            bad = _unknown_key(overrides, search, options, appended=True)
            if bad is not None:
                raise bad
    except yaml.YAMLError as exc:
        raise yaml_error(exc) from None
    return composed


def _compose_all(overrides: list[str], search: list[str], options: dict[str, list[str]], dirs: list[Path],
                 selection: dict[str, list[str]]) -> Composed:
    """Phase 1 composes the primary config with the overrides outside the axes, which names the matrix."""
    from omegaconf import OmegaConf

    base = [o for o in overrides if not _axis_override(o)]
    cfg = _compose(search + base)
    choices = dict(OmegaConf.to_container(cfg.hydra.runtime.choices))
    matrix = cfg.matrix
    names = {
        "policy": _names(matrix, "policies", options["policy"], "policy"),
        "gpu": _names(matrix, "gpus", options["gpu"], "gpu"),
        "torch": _names(matrix, "torch", options["torch"], "torch"),
    }
    for axis, patterns in selection.items():  # compose only what the selection keeps
        names[axis] = [n for n in names[axis] if any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    for entry in [*(matrix.get("include") or []), *(matrix.get("exclude") or [])]:
        for axis, value in entry.items():
            if axis not in names:
                raise ConfigError(f"unknown matrix axis {axis!r} in include/exclude "
                                  "(valid: gpu, policy, torch)")
            if value not in options[axis]:
                raise unknown(axis, value, options[axis])
            if value not in names[axis]:
                names[axis].append(value)
    if not any(names.values()) and len(base) == len(overrides):  # an empty matrix (status, wait)
        return Composed(cfg=cfg, choices=choices, options=options, config_dirs=dirs, selection=selection)
    # An override may reach into a policy, GPU, build or exporter the matrix does not hold (README's
    # `policies.flux3.timeout_min=240` under the smoke matrix): it is composed too, so the override
    # applies to (and is checked against) its config, and gives no cell.
    named = _named_entries(overrides, options)
    composed = {group: [*names[group], *(n for n in named[group] if n not in names[group])]
                for group in names}
    # Phase 2 composes the policies, GPUs and builds, so the GPUs' own exporter defaults (and any
    # override of them) are known; phase 3 adds those exporters.
    axes = [f"+{group}@{AXES[group]}.{n}={n}" for group, values in composed.items() for n in values]
    not_exporters = [o for o in overrides if not o.lstrip("+~").startswith("exporters.")]
    if len(composed["policy"]) > POLICY_CHUNK:
        cfg = _compose_many(search, composed, names, not_exporters, overrides, choices, options["exporter"],
                            named["exporter"])
    else:
        cfg = _compose(search + axes + not_exporters)
        exporters = _exporter_names(cfg, choices, names, options["exporter"])
        exporters += [n for n in named["exporter"] if n not in exporters]
        axes += [f"+exporter@exporters.{n}={n}" for n in exporters]
        cfg = _compose(search + axes + overrides)
    return Composed(cfg=cfg, choices=choices, options=options, config_dirs=dirs, selection=selection)


def _key_of(override: str) -> tuple[str, list[str]] | None:
    """An override's prefix (+, ++, ~ or none) and its key's parts, for the overrides whose key must be a config's
    or a schema's; None for Hydra's own keys, a group choice (`matrix=tracking`) and a package (`+a@b=c`)."""
    key = override.partition("=")[0]
    body = key.lstrip("+~")
    if not body or "@" in body or "/" in body or body.split(".")[0] == "hydra" or body in CHOICE_GROUPS:
        return None
    return key[:len(key) - len(body)], body.split(".")


def _named_entries(overrides: list[str], options: dict[str, list[str]]) -> dict[str, list[str]]:
    """The valid policy, GPU, build and exporter names that overrides reach into (`policies.flux3.x=1`: flux3)."""
    groups = {node: group for group, node in AXES.items()}
    named: dict[str, list[str]] = {group: [] for group in AXES}
    for override in overrides:
        found = _key_of(override)
        if found and found[1][0] in groups and len(found[1]) > 1:
            group, name = groups[found[1][0]], found[1][1]
            if name in options[group] and name not in named[group]:
                named[group].append(name)
    return named


def _unknown_key(overrides: list[str], search: list[str], options: dict[str, list[str]],
                 appended: bool) -> ConfigError | None:
    """The first override naming a key that no schema declares and no config holds, as one line with the nearest
    valid keys; None where there is none. `appended`: check the `+key=value` overrides (Hydra adds any key so
    written); else the others (Hydra refuses an absent key, with advice to append it that names no valid key).

    Open mappings stay open: `env:`, `checkpoint:`, `sbatch:` (fields a schema types as a mapping with no keys of
    its own), and a mapping of a site's own that its config holds (`policies.act.site_meta.x`). The launcher's
    appended keys are left to its schema (schema.typed_launcher names them)."""
    wanted = []
    for override in overrides:
        found = _key_of(override)
        if found is None or found[0].startswith("+") != appended:
            continue
        if appended and (found[1][0] == "launcher" or _declared(found[1], options)):
            continue  # a schema's field, or under an open mapping: no composition needed to know
        wanted.append(found[1])
    if not wanted:
        return None
    base = _base_config(overrides, search, options)
    if base is None:
        return None
    for parts in wanted:
        problem = _key_problem(parts, base, options)
        if problem is not None:
            return problem
    return None


def _base_config(overrides: list[str], search: list[str], options: dict[str, list[str]]) -> dict[str, Any] | None:
    """The config without the overrides' keys (the group choices kept), with the axis entries they reach into."""
    from omegaconf import OmegaConf

    choices = [o.lstrip("+") for o in overrides if o.lstrip("+").partition("=")[0] in CHOICE_GROUPS]
    named = _named_entries(overrides, options)
    entries = [f"+{group}@{AXES[group]}.{n}={n}" for group, names in named.items() for n in names]
    try:
        cfg = _compose(search + choices + entries)
    except ConfigError:
        return None
    plain = OmegaConf.to_container(cfg, resolve=False)
    plain.pop("hydra", None)
    return plain


def _schema_fields(schema: type) -> dict[str, Any]:
    return {spec.name: spec for spec in fields(schema)}


def _is_mapping(spec: Any) -> bool:
    from .schema import mapping

    return spec.metadata["check"] is mapping


def _declared(parts: list[str], options: dict[str, list[str]]) -> bool:
    """Whether the schemas alone say this key may be set: an axis entry's field, or a key under an open mapping."""
    from .schema import AXES as SCHEMAS

    groups = {node: group for group, node in AXES.items()}
    if parts[0] not in groups or len(parts) < 2 or parts[1] not in options[groups[parts[0]]]:
        return False
    schema: type | None = SCHEMAS[parts[0]]
    for part in parts[2:]:
        spec = _schema_fields(schema).get(part) if schema else None
        if spec is None:
            return False
        if not _is_mapping(spec) or spec.metadata["keys"] is None:
            return True  # a value, or an open mapping (env:, checkpoint:): anything below it
        schema = spec.metadata["keys"]
    return True


def _key_problem(parts: list[str], base: dict[str, Any], options: dict[str, list[str]]) -> ConfigError | None:
    """Walk the key through the config (without the overrides) and the schemas; the error where it leaves both."""
    from .schema import AXES as SCHEMAS
    from .schema import LAUNCHERS

    groups = {node: group for group, node in AXES.items()}
    node: Any = base
    schema: type | None = None
    for depth, part in enumerate(parts):
        here = ".".join(parts[:depth])
        if depth == 0 and part in groups:  # policies, gpus, builds, exporters: held where the matrix names some
            node = base.get(part) or {}
            continue
        if depth == 1 and parts[0] in groups:  # an axis entry: a config of its group
            valid = options[groups[parts[0]]]
            if part not in valid:
                return _unknown_key_error(parts, here, valid)
            node, schema = (node or {}).get(part), SCHEMAS[parts[0]]
            continue
        spec = _schema_fields(schema).get(part) if schema else None
        held = isinstance(node, dict) and part in node
        if spec is not None and _is_mapping(spec) and spec.metadata["keys"] is None:
            return None  # an open mapping
        if spec is None and held and schema is not None and isinstance(node[part], dict):
            return None  # a mapping of a site's own, in its config: open
        if spec is None and not held:
            valid = [*(node if isinstance(node, dict) else {}), *(_schema_fields(schema) if schema else {})]
            if depth == 0:
                valid += [*SELECT_AXES, *CHOICE_GROUPS, *AXES.values()]
            return _unknown_key_error(parts, here, valid)
        if spec is not None and not _is_mapping(spec):
            return None  # a field's value (a list, a number): what it may be is the schema's check
        node = node.get(part) if held else None
        schema = spec.metadata["keys"] if spec is not None else None
        if depth == 0 and part == "launcher" and isinstance(node, dict):
            schema = LAUNCHERS.get(str(node.get("name")))
    return None


def _unknown_key_error(parts: list[str], here: str, valid: list[str]) -> ConfigError:
    valid = sorted({str(v) for v in valid})
    bad = parts[len(here.split(".")) if here else 0]
    near = difflib.get_close_matches(bad, valid, n=3, cutoff=0.6)
    key = ".".join(parts)
    if near:
        return ConfigError(f"unknown key {key} (nearest: {', '.join(f'{here}.{n}' if here else n for n in near)})")
    return ConfigError(f"unknown key {key} (valid {f'under {here}' if here else 'at the top'}: "
                       f"{', '.join(valid) or 'none'})")


def _group_options(search: list[str]) -> dict[str, list[str]]:
    """Each group's config names. The loader's get_group_options builds the search path's repository again for
    every group (loading the primary config each time); one repository answers them all."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.object_type import ObjectType

    loader = GlobalHydra.instance().config_loader()
    _, repository = loader._parse_overrides_and_create_caching_repo(PRIMARY, search)  # type: ignore[attr-defined]
    return {group: repository.get_group_options(group, ObjectType.CONFIG) for group in (*AXES, "matrix", "launcher")}


def _compose_many(search: list[str], names: dict[str, list[str]], cells: dict[str, list[str]],
                  not_exporters: list[str], overrides: list[str], choices: dict[str, Any], valid_exporters: list[str],
                  named_exporters: list[str]) -> DictConfig:
    """Phases 2 and 3 for a matrix of many policies. Hydra merges a composition's configs one by one, re-parenting
    the whole tree each time, so one composition of N policies costs O(N²) (800 policies: minutes). Policies go in
    chunks of POLICY_CHUNK, each with every GPU and build and the overrides that concern it, and are joined; the
    exporters are composed apart and added."""
    from omegaconf import OmegaConf, open_dict

    others = [f"+{group}@{AXES[group]}.{n}={n}" for group in ("gpu", "torch") for n in names[group]]
    policies = names["policy"]
    parts = []
    for start in range(0, len(policies), POLICY_CHUNK):
        chunk = policies[start:start + POLICY_CHUNK]
        wanted = set(chunk)
        mine = [o for o in not_exporters if _override_policy(o) is None or _override_policy(o) in wanted
                or (start == 0 and _override_policy(o) not in policies)]  # an unknown one still fails
        parts.append(_compose(search + others + [f"+policy@policies.{n}={n}" for n in chunk] + mine))
    cfg = parts[0]
    joined: dict[str, Any] = {}
    for part in parts:
        joined.update(OmegaConf.to_container(part.policies, resolve=False))
    with open_dict(cfg):
        cfg.policies = joined
    exporters = _exporter_names(cfg, choices, cells, valid_exporters)
    exporters += [n for n in named_exporters if n not in exporters]
    base = [o for o in overrides if not _axis_override(o) or o.lstrip("+~").startswith("exporters.")]
    found = _compose(search + [f"+exporter@exporters.{n}={n}" for n in exporters] + base)
    with open_dict(cfg):
        cfg.exporters = OmegaConf.to_container(found.exporters, resolve=False) if "exporters" in found else {}
    return cfg


def _override_policy(override: str) -> str | None:
    """The policy an override reaches into (`policies.act.timeout_min=5` -> act), else None."""
    key = override.lstrip("+~").split("=", 1)[0].split(".")
    return key[1] if key[0] == "policies" and len(key) > 1 else None


def _compose(overrides: list[str]) -> DictConfig:
    from hydra import compose
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        return compose(PRIMARY, overrides=overrides, return_hydra_config=True)
    except (HydraException, OmegaConfBaseException) as exc:
        raise _ComposeError(str(_schema_error(exc) or _first_line(exc))) from None
    except yaml.YAMLError as exc:
        raise yaml_error(exc) from None


def _schema_error(exc: BaseException) -> ConfigError | None:
    """A value that breaks a schema of config/schema.py, in its one line (Hydra wraps OmegaConf's error)."""
    from dataclasses import is_dataclass

    from .schema import one_line

    while exc is not None and not is_dataclass(getattr(exc, "object_type", None)):
        exc = exc.__cause__ or exc.__context__
    return one_line(exc) if exc is not None else None


def yaml_error(exc: yaml.YAMLError) -> ConfigError:
    """A malformed config file in one line: which file, which line, what the parser expected."""
    mark = getattr(exc, "problem_mark", None)
    where = f"{mark.name}, line {mark.line + 1}" if mark is not None else "a config file"
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return ConfigError(f"malformed YAML in {where}: {problem}")


def number(value: Any, key: str, kind: type = float, minimum: float = 0, inclusive: bool = False) -> Any:
    """A numeric config value, or a one-line error naming the key, the value and what is allowed."""
    try:
        found = kind(value)
        if isinstance(value, bool) or not (found >= minimum if inclusive else found > minimum):
            raise ValueError
    except (TypeError, ValueError):
        what = "an integer" if kind is int else "a number"
        bound = f"at least {minimum:g}" if inclusive else f"greater than {minimum:g}"
        raise ConfigError(f"{key} must be {what} {bound}, got {value!r}") from None
    return found


def axis_list(matrix: DictConfig, key: str) -> list[str]:
    """A matrix axis as a list of names; `matrix.policies=act` means the one name."""
    values = matrix.get(key) or []
    return [values] if isinstance(values, str) else [str(v) for v in values]


def _names(matrix: DictConfig, key: str, valid: list[str], kind: str) -> list[str]:
    values = axis_list(matrix, key)
    for value in values:
        if value not in valid:
            raise unknown(kind, value, valid)
    return values


def _exporter_names(cfg: DictConfig, choices: dict[str, Any], axes: dict[str, list[str]],
                    valid: list[str]) -> list[str]:
    """Every policy's own exporter (a standalone repro's), then the one chosen with `exporter=NAME`, else each
    GPU's default."""
    names: list[str] = []
    owners = [("policy", p, cfg.policies[p].get("exporter")) for p in axes["policy"]]
    chosen = choices.get("exporter")
    owners += [("choice", "", chosen)] if chosen else [("gpu", g, cfg.gpus[g].get("exporter")) for g in axes["gpu"]]
    for kind, owner, name in owners:
        if kind == "policy" and name is None:
            continue
        if name not in valid:
            raise unknown(f"exporter (of {kind} {owner})" if owner else "exporter", name, valid)
        if name not in names:
            names.append(name)
    return names


def to_plain(node: Any) -> Any:
    """Resolved plain Python containers, so job specs pickle without OmegaConf."""
    from omegaconf import OmegaConf

    if OmegaConf.is_config(node):
        return OmegaConf.to_container(node, resolve=True)
    return node
