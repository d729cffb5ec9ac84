"""The failure catalog (conf/failures.yaml, plus a --config-dir's): which known failure each cell hit.

A boolean column per catalog id, so the matrix can `groupby(...).any()` them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from ..errors import ConfigError

CATALOG_NAME = "failures.yaml"
NEW = "new"
# `<N>` in a pattern: any number as a log prints it (3, 2.98, 9.53e-02, -1).
NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
SIGNALS = (None, "slow", "at_limit")
FIELDS = {"title", "repro", "fixed_by", "step", "signal", "patterns", "decides", "exporters", "gpus"}


@dataclass(frozen=True)
class Entry:
    id: str
    title: str
    repro: str
    fixed_by: str
    step: str | None
    signal: str | None
    patterns: tuple[re.Pattern, ...]
    # true: a timeout, kill or error matching it is a verdict (the export itself decided); false: a failure
    # matching it (and no other entry) decided nothing, since the job could not build the policy where it ran
    decides: bool | None = None
    # The exporters (conf/exporter names, a record's `exporter`) and GPUs (conf/gpu names) whose cells this entry
    # can describe; None: any. A cell of another exporter or GPU never hits it (a CPU cell's slowness is not row 1).
    exporters: frozenset[str] | None = None
    gpus: frozenset[str] | None = None

    @property
    def column(self) -> str:
        return flag_column(self.id)

    @property
    def restricted(self) -> bool:
        return self.exporters is not None or self.gpus is not None

    def describes(self, exporter: str | None, gpu: str) -> bool:
        """Whether a cell of this exporter (None: a record that names none, any) and GPU can hit this entry."""
        return ((self.exporters is None or exporter is None or exporter in self.exporters)
                and (self.gpus is None or gpu in self.gpus))



def flag_column(failure_id: str) -> str:
    return f"f:{failure_id}"


def id_key(failure_id: str) -> tuple[int, int, str]:
    """Numeric ids in numeric order, then named ones; `new` last."""
    return (2, 0, "") if failure_id == NEW else (0, int(failure_id), "") if failure_id.isdigit() else (1, 0, failure_id)


class Catalog:
    def __init__(self, entries: list[Entry]) -> None:
        self.entries = sorted(entries, key=lambda e: id_key(e.id))
        self.by_id = {e.id: e for e in self.entries}

    @property
    def ids(self) -> list[str]:
        return [e.id for e in self.entries]

    @property
    def env_ids(self) -> list[str]:
        """The `decides: false` entries: a failure they match (and no other) decided nothing."""
        return [e.id for e in self.entries if e.decides is False]

    def match(self, text: str | None) -> list[str]:
        """The ids whose patterns occur in text."""
        return [e.id for e in self.entries if any(p.search(text) for p in e.patterns)] if text else []

    def match_many(self, texts: pd.Series) -> pd.DataFrame:
        """Which entries match each text, one boolean column per entry; each distinct text is matched once (a
        sweep has thousands of cells but a handful of distinct errors)."""
        codes, uniques = pd.factorize(texts)
        hits = [[bool(t) and any(p.search(t) for p in e.patterns) for e in self.entries] for t in map(str, uniques)]
        table = np.array([*hits, [False] * len(self.entries)], dtype=bool)  # code -1 (no text) takes the last row
        return pd.DataFrame(table[codes], index=texts.index, columns=[e.column for e in self.entries])

    def scopes(self, exporters: pd.Series, gpus: pd.Series) -> dict[str, np.ndarray]:
        """Which cells (their exporter and GPU) each entry with `exporters:` or `gpus:` can describe: its flag
        column -> a boolean per cell. Each distinct (exporter, GPU) pair is asked once."""
        restricted = [e for e in self.entries if e.restricted]
        if not restricted:
            return {}
        named = exporters.notna()
        codes, uniques = pd.factorize(exporters.where(named, "").astype(str) + "\t" + gpus.astype(str)
                                      + np.where(named, "", "\t"))  # a third field: the record names no exporter
        pairs = [(parts[0] if len(parts) == 2 else None, parts[1]) for parts in (u.split("\t") for u in uniques)]
        return {e.column: np.array([e.describes(exporter, gpu) for exporter, gpu in pairs], dtype=bool)[codes]
                for e in restricted}

    def unknown_names(self, exporters: list[str], gpus: list[str]) -> list[str]:
        """One line per entry naming an exporter or GPU no config has (that entry can describe no cell of it)."""
        lines = []
        for entry in self.entries:
            for kind, named, valid in (("exporter", entry.exporters, exporters), ("gpu", entry.gpus, gpus)):
                if bad := sorted((named or set()) - set(valid)):
                    lines.append(f"failure {entry.id} names {kind} {', '.join(bad)}, which no config has "
                                 f"(valid: {', '.join(valid)}): no cell of it can hit that entry")
        return lines


def load_catalog(config_dirs: list[Path]) -> Catalog:
    """The package's catalog, overridden entry by entry (field by field) by each earlier config dir's."""
    merged: dict[str, dict[str, Any]] = {}
    for directory in reversed(config_dirs):  # the package's conf/ is last: read it first
        path = Path(directory) / CATALOG_NAME
        if not path.exists():
            continue
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a mapping of failure ids to entries")
        for key, entry in data.items():
            failure_id = str(key)
            if failure_id == NEW:
                raise ConfigError(f"{path}: {NEW!r} is reserved for failures that no entry matches")
            if not isinstance(entry, dict):
                raise ConfigError(f"{path}: failure {failure_id}: expected a mapping with title and patterns")
            if unknown := set(entry) - FIELDS:
                raise ConfigError(f"{path}: failure {failure_id}: unknown field {sorted(unknown)[0]!r} "
                                  f"(valid: {', '.join(sorted(FIELDS))})")
            merged.setdefault(failure_id, {}).update(entry)
            merged[failure_id]["_source"] = path
    return Catalog([_entry(failure_id, entry) for failure_id, entry in merged.items()])


def _entry(failure_id: str, entry: dict[str, Any]) -> Entry:
    where = f"{entry['_source']}: failure {failure_id}"
    patterns = entry.get("patterns") or []
    patterns = [patterns] if isinstance(patterns, str) else patterns
    signal = entry.get("signal")
    if signal not in SIGNALS:
        raise ConfigError(f"{where}: unknown signal {signal!r} (valid: slow, at_limit)")
    if not patterns and not signal:
        raise ConfigError(f"{where}: needs patterns or a signal, or nothing can match it")
    decides = entry.get("decides")
    if decides is not None and not isinstance(decides, bool):
        raise ConfigError(f"{where}: decides must be true or false, not {decides!r}")
    scope = {}
    for name in ("exporters", "gpus"):
        value = entry.get(name)
        if value is None:
            scope[name] = None
            continue
        value = [value] if isinstance(value, str) else value
        if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
            raise ConfigError(f"{where}: {name} must be a non-empty list of names, not {entry.get(name)!r}")
        scope[name] = frozenset(value)
    compiled = []
    for pattern in patterns:
        try:
            compiled.append(re.compile(str(pattern).replace("<N>", NUMBER)))
        except re.error as exc:
            raise ConfigError(f"{where}: bad pattern {pattern!r} ({exc})") from None
    return Entry(id=failure_id, title=str(entry.get("title") or f"failure {failure_id}"),
                 repro=str(entry.get("repro") or ""), fixed_by=str(entry.get("fixed_by") or ""),
                 step=entry.get("step"), signal=signal, patterns=tuple(compiled), decides=decides, **scope)
