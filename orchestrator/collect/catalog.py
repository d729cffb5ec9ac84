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

from ..config import ConfigError

CATALOG_NAME = "failures.yaml"
NEW = "new"
# `<N>` in a pattern: any number as a log prints it (3, 2.98, 9.53e-02, -1).
NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
SIGNALS = (None, "slow", "at_limit")
FIELDS = {"title", "repro", "fixed_by", "step", "signal", "patterns", "decides"}


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

    @property
    def column(self) -> str:
        return flag_column(self.id)


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
    compiled = []
    for pattern in patterns:
        try:
            compiled.append(re.compile(str(pattern).replace("<N>", NUMBER)))
        except re.error as exc:
            raise ConfigError(f"{where}: bad pattern {pattern!r} ({exc})") from None
    return Entry(id=failure_id, title=str(entry.get("title") or f"failure {failure_id}"),
                 repro=str(entry.get("repro") or ""), fixed_by=str(entry.get("fixed_by") or ""),
                 step=entry.get("step"), signal=signal, patterns=tuple(compiled), decides=decides)
