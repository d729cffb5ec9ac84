"""The seed's failure summary table and its "Policy to failure:" line, put together from one part per policy.

A policy's part (the failure ids it hits, each with the GPUs it hit them on when not all, and its clause of the
line) depends on that policy's matrix rows and cells only. So `policy_parts` computes the parts of any set of
policies, each policy's slice keeps its part (slices.py), and `failure_rows` and `policy_line` only assemble
them: a collect after a rerun recomputes the parts of the policies that changed.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pandas as pd

from .catalog import Catalog, flag_column, id_key
from .settings import Settings

Part = dict[str, Any]  # {"notes": {failure id: GPU note, "" on all its GPUs}, "clause": [text, lowest id] | None}
MAX_NAMED_BUILDS = 62  # a note names up to this many builds of a policy (else "other builds")


def order(names: list[str]):
    """Sort key: position in names (the configured order), names it does not list after them, by name."""
    rank = {name: i for i, name in enumerate(names)}
    return lambda name: (rank.get(name, len(rank)), name)


def columns(frame: pd.DataFrame, *names: str) -> list[list]:
    """Columns as Python lists: iterating a pyarrow-backed column yields one boxed scalar at a time (most of a
    render at 10,000 records), `tolist` converts it in one call."""
    return [frame[name].tolist() for name in names]


class GpuNotes:
    """"H100" when a failure was seen on some of a policy's GPUs only (None when on all), each combination
    worded once."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.key = order(settings.gpus)
        self.worded: dict[tuple[frozenset, frozenset], str | None] = {}

    def __call__(self, where: set[str], everywhere: set[str]) -> str | None:
        pair = (frozenset(where), frozenset(everywhere))
        if pair not in self.worded:
            self.worded[pair] = None if not where or where >= everywhere else " and ".join(
                self.settings.gpu_short(g) for g in sorted(where, key=self.key))
        return self.worded[pair]


def policy_parts(matrix: pd.DataFrame, cells: pd.DataFrame, settings: Settings) -> dict[str, Part]:
    """The part of each policy that has a recorded cell, in table order.

    A policy's main failures are those of the cells that decided its symbols (`primary`); failures seen only on
    other builds (the ones a patched build got past) follow as "and 7 on stock torch". A GPU is named when a
    failure is seen on some of the policy's GPUs only.
    """
    gpu_note = GpuNotes(settings)
    recorded = matrix[matrix["status"] != "missing"]
    everywhere: dict[str, set[str]] = defaultdict(set)
    seen: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    primary: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    secondary: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for policy, gpu, main, every in zip(*columns(recorded, "policy", "gpu", "primary", "failures"), strict=True):
        everywhere[policy].add(gpu)
        main_ids = set(str(main or "").split())
        for failure_id in str(every or "").split():
            seen[policy][failure_id].add(gpu)
            (primary if failure_id in main_ids else secondary)[policy][failure_id].add(gpu)
    split = {}
    for policy in everywhere:
        main, other = dict(primary.get(policy, {})), dict(secondary.get(policy, {}))
        if not main and not other:
            continue
        if not main:
            main, other = other, {}
        split[policy] = (main, {k: v for k, v in other.items() if k not in main})
    notes = build_notes(cells, {(policy, i) for policy, (_, other) in split.items() for i in other})
    parts: dict[str, Part] = {}
    for policy, gpus in everywhere.items():
        clause = None
        if policy in split:
            main, other = split[policy]
            text = _describe(policy, main, other, gpus, notes, settings.catalog, gpu_note)
            clause = [text, list(min(id_key(i) for i in main))]
        parts[policy] = {"notes": {i: gpu_note(where, gpus) or "" for i, where in seen[policy].items()},
                         "clause": clause}
    return parts


def failure_rows(parts: dict[str, Part], settings: Settings) -> list[tuple[str, str, str, str, str]]:
    """The seed's summary table: every catalog entry with the policies seen hitting it (GPU noted when only some)."""
    names: dict[str, list[str]] = defaultdict(list)  # failure id -> its policies, by name
    for policy in sorted(parts):  # each policy's notes once, not once per catalog entry
        for failure_id, note in parts[policy]["notes"].items():
            names[failure_id].append(f"{policy} ({note})" if note else policy)
    return [(entry.id, entry.title, ", ".join(names.get(entry.id, [])) or "none yet", entry.repro, entry.fixed_by)
            for entry in settings.catalog.entries]


def policy_line(parts: dict[str, Part]) -> str:
    """The seed's "Policy to failure:" line: policies with the same clause share it; clauses are ordered by their
    lowest failure id, ties in table order."""
    clauses: dict[str, list[str]] = {}
    first_id: dict[str, tuple] = {}
    for policy, part in parts.items():
        if part["clause"] is None:
            continue
        text, key = part["clause"][0], tuple(part["clause"][1])
        clauses.setdefault(text, []).append(policy)
        first_id[text] = min(first_id.get(text, key), key)
    if not clauses:
        return "Policy to failure: none."
    pieces = []
    for text in sorted(clauses, key=lambda t: first_id[t]):  # stable: ties keep table order
        hoist, body = text.split("\0")
        pieces.append(f"{', '.join(sorted(clauses[text]))}{hoist}: {body}.")
    return "Policy to failure: " + " ".join(pieces)


def _describe(policy: str, primary: dict[str, set[str]], secondary: dict[str, set[str]], everywhere: set[str],
              build_notes: dict[tuple[str, str], str], catalog: Catalog, gpu_note: GpuNotes) -> str:
    """A clause without its policy names: "<hoisted GPU>\\0<failures>"."""
    main = sorted(primary, key=id_key)
    notes = {i: gpu_note(primary[i], everywhere) for i in main}
    hoist = ""
    if len(set(notes.values())) == 1 and notes[main[0]]:
        hoist, notes = f" ({notes[main[0]]})", dict.fromkeys(main)
    words = []
    for failure_id in main:
        word = failure_id
        entry = catalog.by_id.get(failure_id)
        if entry is not None and entry.signal == "slow":
            word += " (slow, not failing)"
        if notes[failure_id]:
            word += f" on the {notes[failure_id]}"
        words.append(word)
    body = ", ".join(words)
    by_builds: dict[str, list[str]] = defaultdict(list)
    for failure_id in sorted(secondary, key=id_key):
        by_builds[build_notes.get((policy, failure_id), "other builds")].append(failure_id)
    for note, ids in by_builds.items():
        body += f", and {', '.join(ids)} on {note}"
    return f"{hoist}\0{body}"


def build_notes(cells: pd.DataFrame, needed: set[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """Where each needed (policy, failure id) was seen, in words: "stock torch" when it hit every stock build
    the policy ran, else "torch <build names>" (by name); "other builds" for a policy with more than
    MAX_NAMED_BUILDS builds. One pass over the needed policies' cells, looking only at the flags each policy
    needs (melting and merging the whole frame took 0.1 s for a thousand policies)."""
    if not needed or cells.empty:
        return {}
    wanted: dict[str, list[str]] = defaultdict(list)
    for policy, failure_id in sorted(needed):
        if flag_column(failure_id) in cells:
            wanted[policy].append(failure_id)
    sub = cells[cells["policy"].isin(set(wanted))]
    flags = {i: sub[flag_column(i)].tolist() for i in {i for ids in wanted.values() for i in ids}}
    builds: dict[str, set[str]] = defaultdict(set)
    stock: dict[str, set[str]] = defaultdict(set)
    hit: dict[tuple[str, str], set[str]] = defaultdict(set)
    for row, (policy, build, is_stock) in enumerate(zip(*columns(sub, "policy", "torch", "stock"), strict=True)):
        builds[policy].add(build)
        if is_stock:
            stock[policy].add(build)
        for failure_id in wanted[policy]:
            if flags[failure_id][row]:
                hit[(policy, failure_id)].add(build)
    notes = {}
    for (policy, failure_id), where in hit.items():
        if len(builds[policy]) > MAX_NAMED_BUILDS:
            notes[(policy, failure_id)] = "other builds"
        elif stock[policy] and stock[policy] <= where:
            notes[(policy, failure_id)] = "stock torch"
        else:
            notes[(policy, failure_id)] = "torch " + ", ".join(sorted(where))
    return notes
