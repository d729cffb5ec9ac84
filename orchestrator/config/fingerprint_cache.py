"""Cells' current fingerprint keys without composing every policy through Hydra when nothing changed.

`status` and `rerun --stale` compare each record's fingerprint key with the one the config gives now; composing
250 policies for that takes seconds. A cell's key is a function of its inputs: the bytes of the config files
(the cell's own policy, gpu and torch files and every file outside those groups: config.yaml, exporters, patches,
matrices), the overrides, this interpreter, and, for a build that is an installed interpreter, the state of its
site-packages directories. DIR/.fingerprints.json keeps, per cell, digests of those inputs and the keys they gave
(the last few sets of inputs); a cell whose inputs match one keeps its key, and only the others are composed
again. Configs that interpolate (`${...}`) may depend on anything, so they always take the full path.

collect's config keys (`config_keys`: no interpreter's distributions in them) are kept the same way, by the
config inputs alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..atomic import write_json_atomic
from ..jsonio import loads
from . import PACKAGE_CONF, specs_now, split_selection
from .spec import CellSpec

CACHE_NAME = ".fingerprints.json"
CELL_GROUPS = {"policy": 0, "gpu": 1, "torch": 2}  # the groups a cell names one file of, by cell id part
VERSION = 2
KEPT = 4  # keys kept per cell: one per set of inputs (a status with other overrides must not evict the sweep's)
# Top-level keys whose overrides never reach a fingerprint (it hashes the policy, gpu, torch and exporter configs).
NOT_FINGERPRINTED = frozenset({"launcher", "out_dir", "ckpt_dir", "matrix", "collect", "repeat", "parse", "hydra"})


class ConfigFiles:
    """The config dirs' YAML files, the first dir's copy winning (as in Hydra's search path), and the patches
    that torch builds' recipes name (found as recipe_of finds them)."""

    def __init__(self, config_dir: Path | None) -> None:
        self.dirs = [PACKAGE_CONF] if config_dir is None else [Path(config_dir).resolve(), PACKAGE_CONF]
        self.files: dict[str, bytes] = {}
        for directory in reversed(self.dirs):
            for parent, _, names in os.walk(directory):  # os.walk: rglob's Path per file costs more than the reads
                relative = os.path.relpath(parent, directory)
                for name in names:
                    if name.endswith(".yaml"):
                        with open(os.path.join(parent, name), "rb") as handle:
                            self.files[name if relative == "." else os.path.join(relative, name)] = handle.read()
        self.interpolates = any(b"${" in data for data in self.files.values())
        shared = sorted((name, data) for name, data in self.files.items() if name.split(os.sep)[0] not in CELL_GROUPS)
        self.shared = digest([sys.executable, *(f"{name}:{digest([data])}" for name, data in shared)])
        self._builds: dict[str, str] = {}
        self._digests: dict[str, str] = {}

    @property
    def everything(self) -> str:
        """A digest of every file, by name."""
        return digest([f"{name}:{self._filedigest(name)}" for name in sorted(self.files)])

    def cell_part(self, cell_id: str, overrides: list[str]) -> str:
        names = cell_id.split("/")
        own = [self._filedigest(f"{group}{os.sep}{names[i]}.yaml") for group, i in CELL_GROUPS.items()]
        return digest([self.shared, json.dumps(overrides), *own, self._patches(names[2])])

    def _filedigest(self, name: str) -> str:
        """Each file's digest once: a status digests thousands of cells that share a few hundred files."""
        found = self._digests.get(name)
        if found is None:
            found = self._digests[name] = digest([self.files.get(name, b"")])
        return found

    def knows(self, cell_id: str) -> bool:
        """The config has the cell's policy, gpu and torch files (records made with another --config-dir may not)."""
        names = cell_id.split("/")
        return len(names) == 3 and all(os.path.join(group, f"{names[i]}.yaml") in self.files
                                       for group, i in CELL_GROUPS.items())

    def known(self, cell_ids: list[str]) -> list[str]:
        """The cells `knows`, by a set of names per group: collect asks this of every record it reads."""
        names = {group: {name[len(group) + 1:-5] for name in self.files
                         if name.startswith(group + os.sep) and name.count(os.sep) == 1} for group in CELL_GROUPS}
        policies, gpus, builds = (names[group] for group in CELL_GROUPS)
        return [c for c in cell_ids if (p := c.split("/")) and len(p) == 3 and p[0] in policies and p[1] in gpus
                and p[2] in builds]

    def _patches(self, build: str) -> str:
        if build not in self._builds:
            from ..envs import _find_patch

            try:
                text = self.files.get(f"torch{os.sep}{build}.yaml", b"")
                patches = (yaml.safe_load(text) or {}).get("patches") or []
            except (yaml.YAMLError, AttributeError):
                patches = []
            found = [_find_patch(build, str(p), self.dirs) for p in patches if isinstance(p, str)]
            self._builds[build] = digest([p.read_bytes() if p.is_file() else b"missing" for p in found])
        return self._builds[build]


def digest(parts: list[str | bytes]) -> str:
    sha = hashlib.sha256()
    for part in parts:
        sha.update(part if isinstance(part, bytes) else part.encode())
        sha.update(b"\0")
    return sha.hexdigest()


def site_stamp(dirs: list[str]) -> list[list[Any]]:
    """Installing or removing a distribution changes its site-packages directory's mtime."""
    stamp: list[list[Any]] = []
    for directory in dirs:
        try:
            stamp.append([directory, os.stat(directory).st_mtime_ns])
        except OSError:
            stamp.append([directory, None])
    return stamp


def _inputs(part: str, entry: dict[str, Any], pythons: dict[str, Any], stamps: dict[str, str]) -> str:
    python = entry.get("python") or ""
    if python not in stamps:
        stamps[python] = json.dumps(site_stamp(pythons.get(python, {}).get("site") or []))
    return digest([part, stamps[python]])


def read_cache(out_dir: Path) -> dict[str, Any]:
    try:
        data = loads((Path(out_dir) / CACHE_NAME).read_bytes())
    except (OSError, ValueError):
        return {"version": VERSION, "cells": {}, "pythons": {}}
    if not isinstance(data, dict) or data.get("version") != VERSION:
        return {"version": VERSION, "cells": {}, "pythons": {}}
    return data


@dataclass(frozen=True)
class Current:
    """What the config gives a cell now: its fingerprint key and, for a recipe build with `lerobot:`, its code key
    (the key without that requirement) and the interpreter of the environment the recipe builds."""

    key: str
    code_key: str | None = None
    python: str | None = None

    @classmethod
    def of(cls, spec: CellSpec) -> Current:
        code = spec.fingerprint.get("code_key")
        return cls(spec.fingerprint["key"], code, spec.python if code else None)


def current_keys(out_dir: Path, cell_ids: list[str], overrides: list[str],
                 config_dir: Path | None) -> dict[str, str]:
    """Each cell's fingerprint key as the config gives it now (cells the config does not have are left out)."""
    return {c: found.key for c, found in current_fingerprints(out_dir, cell_ids, overrides, config_dir).items()}


def current_fingerprints(out_dir: Path, cell_ids: list[str], overrides: list[str],
                         config_dir: Path | None) -> dict[str, Current]:
    """current_keys with each cell's code key and recipe interpreter (cells the config does not have: left out)."""
    files = ConfigFiles(config_dir)
    if files.interpolates:
        return {c: Current.of(s) for c, s in specs_now.current_specs(cell_ids, overrides, config_dir).items()}
    cache = read_cache(out_dir)
    parts = {c: files.cell_part(c, _relevant(overrides)) for c in cell_ids}
    keys: dict[str, Current] = {}
    missed: list[str] = []
    stamps: dict[str, str] = {}
    for cell_id, part in parts.items():
        hit = next((e for e in cache["cells"].get(cell_id) or []
                    if "code_key" in e and e.get("inputs") == _inputs(part, e, cache["pythons"], stamps)), None)
        if hit is not None:
            keys[cell_id] = Current(hit["key"], hit["code_key"], hit.get("interpreter"))
        else:
            missed.append(cell_id)
    missed = [c for c in missed if files.knows(c)]  # a cell of names the config lacks has no key to compare
    if not missed:
        return keys
    specs = specs_now.current_specs(missed, overrides, config_dir)
    keys.update({cell_id: Current.of(spec) for cell_id, spec in specs.items()})
    _store(out_dir, cache, {c: parts[c] for c in specs}, specs)
    return keys


def current_config_keys(out_dir: Path, cell_ids: list[str], overrides: list[str], config_dir: Path | None,
                        store: bool = True) -> dict[str, str]:
    """Each cell's config key (fingerprint.config_key: the configs and a recipe's identity, no installed
    distributions) as the config gives it now; cells the config does not have are left out. It depends on the
    config files and overrides alone, so it is kept by those inputs (no interpreter is asked), beside the keys.
    `store`: keep the ones composed here (collect --check writes nothing)."""
    files = ConfigFiles(config_dir)
    cell_ids = files.known(cell_ids)  # a cell of names the config lacks has nothing to compare
    if files.interpolates:
        return _config_keys(specs_now.current_specs(cell_ids, overrides, config_dir, fingerprinted=False))
    cache = read_cache(out_dir)
    kept = cache.setdefault("config_keys", {})
    relevant = _relevant(overrides)
    parts = {c: files.cell_part(c, relevant) for c in cell_ids}
    keys = {}
    for cell_id, part in parts.items():
        hit = next((e["key"] for e in kept.get(cell_id) or [] if e.get("inputs") == part), None)
        if hit is not None:
            keys[cell_id] = hit
    missed = [c for c in cell_ids if c not in keys]
    if not missed:
        return keys
    found = _config_keys(specs_now.current_specs(missed, overrides, config_dir, fingerprinted=False))
    keys.update(found)
    if store:
        for cell_id, key in found.items():
            _keep(kept, cell_id, parts[cell_id], key)
        try:
            write_json_atomic(Path(out_dir) / CACHE_NAME, cache)
        except OSError:
            pass  # a cache that cannot be written costs time, not correctness
    return keys


def _keep(kept: dict[str, Any], cell_id: str, inputs: str, key: str) -> None:
    others = [e for e in kept.get(cell_id) or [] if e.get("inputs") != inputs]
    kept[cell_id] = [{"inputs": inputs, "key": key}, *others][:KEPT]


def _config_keys(specs: dict[str, CellSpec]) -> dict[str, str]:
    from .fingerprint import config_key, env_identity

    return {cell_id: config_key(spec.configs, env_identity(spec.python, spec.recipe) if spec.recipe else None)
            for cell_id, spec in specs.items()}


def remember(out_dir: Path, specs: list[CellSpec], overrides: list[str], config_dir: Path | None) -> None:
    """Keep the keys a sweep just computed, so the status that follows it composes nothing."""
    files = ConfigFiles(config_dir)
    if files.interpolates or not specs:
        return
    relevant = _relevant(overrides)
    _store(out_dir, read_cache(out_dir), {s.id: files.cell_part(s.id, relevant) for s in specs},
           {s.id: s for s in specs})


def _relevant(overrides: list[str]) -> list[str]:
    """The overrides that can change a fingerprint (not `policy=` selections, matrices, launchers, paths)."""
    overrides, _ = split_selection(overrides)
    return [o for o in overrides if o.lstrip("+~").split("=", 1)[0].split(".", 1)[0] not in NOT_FINGERPRINTED]


def _store(out_dir: Path, cache: dict[str, Any], parts: dict[str, str], specs: dict[str, CellSpec]) -> None:
    """Each key under its inputs. An interpreter is probed again: its site stamp is the one the probe took before
    reading the distributions, and a key is kept only where that read gives the distributions the key was
    computed with; so an install while the command ran is a miss next time, never a stale hit."""
    from ..envs import env_fingerprint
    from .fingerprint import installed_identity

    stamps: dict[str, str] = {}
    identities: dict[str, dict[str, Any]] = {}
    for cell_id, spec in specs.items():
        if spec.fingerprint.get("config_key"):  # collect's, which no interpreter's state changes
            _keep(cache.setdefault("config_keys", {}), cell_id, parts[cell_id], spec.fingerprint["config_key"])
        python = "" if spec.recipe is not None else spec.python  # a recipe's key does not read its env
        if python and python not in stamps:
            found = env_fingerprint(python)
            cache["pythons"][python] = {"site": list(found.get("site") or [])}
            stamps[python] = json.dumps(found.get("site_stamp") or site_stamp(cache["pythons"][python]["site"]))
            identities[python] = installed_identity(python, found)
        if python and spec.fingerprint.get("env") != identities[python]:
            continue  # the env changed after this key was computed
        current = Current.of(spec)
        entry = {"python": python, "key": current.key, "code_key": current.code_key, "interpreter": current.python}
        entry["inputs"] = _inputs(parts[cell_id], entry, cache["pythons"], stamps)
        others = [e for e in cache["cells"].get(cell_id) or [] if e.get("inputs") != entry["inputs"]]
        cache["cells"][cell_id] = [entry, *others][:KEPT]
    try:
        write_json_atomic(Path(out_dir) / CACHE_NAME, cache)
    except OSError:
        pass  # a cache that cannot be written costs time, not correctness


