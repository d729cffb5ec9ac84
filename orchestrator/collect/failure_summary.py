"""The seed's failure summary table and its "Policy to failure:" line, from the matrix and its cells."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pandas as pd

from .catalog import id_key
from .settings import Settings

MAX_NAMED_BUILDS = 62  # a note names up to this many builds of a policy (else "other builds")


def order(names: list[str]):
    """Sort key: position in names (the configured order), names it does not list after them, by name."""
    rank = {name: i for i, name in enumerate(names)}
    return lambda name: (rank.get(name, len(rank)), name)


def columns(frame: pd.DataFrame, *names: str) -> list[list]:
    """Columns as Python lists: iterating a pyarrow-backed column boxes one scalar at a time, `tolist` is one call."""
    return [frame[name].tolist() for name in names]


def named_rows(frame: pd.DataFrame, kind: Any) -> Iterator[Any]:
    """Each row as a `kind` (a named tuple of some of frame's columns), from the columns as lists."""
    return map(kind._make, zip(*columns(frame, *kind._fields), strict=True))


def gpu_note(where: set[str], everywhere: set[str], settings: Settings) -> str | None:
    """"H100" when a failure was seen on some of a policy's GPUs only (None when on all)."""
    if not where or where >= everywhere:
        return None
    return " and ".join(settings.gpu_short(g) for g in sorted(where, key=order(settings.gpus)))


def table_scope(cells: pd.DataFrame, settings: Settings) -> set[tuple[str | None, str]]:
    """The (exporter, GPU) pairs of a table: its cells' (an exporter a record does not name is None: any), and for
    a policy x GPU the matrix names but no record holds, the exporter its cell would run with."""
    gpus = [cell_id.split("/")[1] for cell_id in cells["id"].tolist()]  # the GPU, also where a column splits it
    exporters = [e if isinstance(e, str) else None for e in cells["exporter"].tolist()]
    pairs = set(zip(exporters, gpus, strict=True))
    recorded = set(zip(cells["policy"].tolist(), gpus, strict=True))
    pairs |= {(settings.exporter_choice or settings.default_exporter(policy, gpu), gpu)
              for policy, gpu in settings.expected if (policy, gpu) not in recorded}
    return pairs


def left_out_text(ids: list[str], pairs: set[tuple[str | None, str]], settings: Settings) -> str:
    """The line that says which catalog rows the summary left out, and why ("" when none)."""
    if not ids:
        return ""
    ran = ", ".join(f"{exporter or 'an unnamed exporter'} on {settings.gpu_short(gpu)}" for exporter, gpu in
                    sorted(pairs, key=lambda p: (order(settings.gpus)(p[1]), p[0] or "")))
    return (f"Not shown: {len(ids)} catalog row{'s' if len(ids) > 1 else ''} ({', '.join(ids)}) that describe only "
            f"other exporters or GPUs than this table's ({ran or 'none'}; failures.yaml's exporters and gpus).")


def summarize(matrix: pd.DataFrame, cells: pd.DataFrame, settings: Settings,
              pairs: set[tuple[str | None, str]] | None = None,
              keep: frozenset[str] = frozenset()) -> tuple[list[tuple[str, str, str, str, str]], str, list[str]]:
    """(the summary table's rows: #, failure, policies, repro, fixed by; the "Policy to failure:" line; the ids
    of the catalog rows left out: those no cell of pairs, the table's (exporter, GPU) pairs, can hit, unless in
    keep, the rows whose standalone repro the table holds).

    A policy's main failures are its deciding cells' (`primary`); those only other builds hit (that a patched
    build got past) follow as "and 7 on stock torch". Policies with the same clause share it, ordered by the
    clause's lowest failure id, ties in table order.
    """
    seen_on: dict[tuple[str, str], set[str]] = defaultdict(set)  # (policy, failure id) -> builds that hit it
    builds: dict[str, set[str]] = defaultdict(set)
    stock: dict[str, set[str]] = defaultdict(set)
    for policy, build, is_stock, failures in zip(*columns(cells, "policy", "torch", "stock", "failures"),
                                                 strict=True):
        builds[policy].add(build)
        if is_stock:
            stock[policy].add(build)
        for failure_id in (failures or "").split():
            seen_on[(policy, failure_id)].add(build)
    hits: dict[str, dict[str, tuple[set[str], list[str]]]] = {}  # policy -> gpu -> (primary ids, failure ids)
    recorded = matrix[matrix["status"] != "missing"]  # in table order
    for policy, gpu, main, every in zip(*columns(recorded, "policy", "gpu", "primary", "failures"), strict=True):
        hits.setdefault(policy, {})[gpu] = (set(str(main or "").split()), str(every or "").split())
    names: dict[str, list[tuple[str, str]]] = defaultdict(list)  # failure id -> (policy, its text in the row)
    clauses: dict[tuple[str, str], list] = {}  # (hoisted GPU, failures) -> [policies, lowest failure id]
    for policy, gpus in hits.items():
        everywhere = set(gpus)
        seen, primary, secondary = defaultdict(set), defaultdict(set), defaultdict(set)  # failure id -> GPUs
        for gpu, (main, every) in gpus.items():
            for failure_id in every:
                seen[failure_id].add(gpu)
                (primary if failure_id in main else secondary)[failure_id].add(gpu)
        for failure_id, where in seen.items():
            note = gpu_note(where, everywhere, settings)
            names[failure_id].append((policy, f"{policy} ({note})" if note else policy))
        if primary or secondary:
            main_ids, other = (primary, secondary) if primary else (secondary, {})
            other = {k: v for k, v in other.items() if k not in main_ids}
            notes = {i: build_note(builds[policy], stock[policy], seen_on[(policy, i)]) for i in other
                     if seen_on[(policy, i)]}
            clause = clauses.setdefault(_describe(main_ids, other, everywhere, notes, settings), [[], (9, 0, "")])
            clause[0].append(policy)
            clause[1] = min(clause[1], *(id_key(i) for i in main_ids))
    env_ids = set(settings.catalog.env_ids)
    waiting: dict[str, set[str]] = defaultdict(set)  # a `decides: false` id -> policies it left undecided
    for policy, outcome, reason in zip(*columns(cells, "policy", "outcome", "reason"), strict=True):
        if outcome == "undecided":  # its reason is those ids (rules.py), or words such as `timeout 5 min`
            for failure_id in env_ids.intersection(str(reason or "").split()):
                waiting[failure_id].add(policy)
    shown = [entry for entry in settings.catalog.entries
             if pairs is None or entry.id in keep or names.get(entry.id) or waiting.get(entry.id)
             or any(entry.describes(exporter, gpu) for exporter, gpu in pairs)]
    left_out = [entry.id for entry in settings.catalog.entries if entry not in shown]
    rows = [(entry.id, entry.title, ", ".join(text for _, text in sorted(names.get(entry.id, [])))
             or (f"{', '.join(sorted(waiting[entry.id]))} (undecided)" if waiting.get(entry.id) else "none yet"),
             entry.repro, entry.fixed_by) for entry in shown]
    if not clauses:
        return rows, "Policy to failure: none.", left_out
    pieces = [f"{', '.join(sorted(policies))}{hoist}: {body}." for (hoist, body), (policies, _) in
              sorted(clauses.items(), key=lambda item: item[1][1])]  # stable: ties keep table order
    return rows, "Policy to failure: " + " ".join(pieces), left_out


def _describe(primary: dict[str, set[str]], secondary: dict[str, set[str]], everywhere: set[str],
              build_notes: dict[str, str], settings: Settings) -> tuple[str, str]:
    """A clause without its policy names: (the GPU hoisted when all its failures share it, the failures)."""
    main = sorted(primary, key=id_key)
    notes = {i: gpu_note(primary[i], everywhere, settings) for i in main}
    hoist = ""
    if len(set(notes.values())) == 1 and notes[main[0]]:
        hoist, notes = f" ({notes[main[0]]})", dict.fromkeys(main)
    slow = {e.id for e in settings.catalog.entries if e.signal == "slow"}
    body = ", ".join(i + (" (slow, not failing)" if i in slow else "") + (f" on the {notes[i]}" if notes[i] else "")
                     for i in main)
    by_builds: dict[str, list[str]] = defaultdict(list)
    for failure_id in sorted(secondary, key=id_key):
        by_builds[build_notes.get(failure_id, "other builds")].append(failure_id)
    for note, ids in by_builds.items():
        body += f", and {', '.join(ids)} on {note}"
    return hoist, body


def build_note(builds: set[str], stock: set[str], where: set[str]) -> str:
    """Where a policy saw a failure: "stock torch" when on every stock build it ran, else the builds by name
    ("other builds" past MAX_NAMED_BUILDS)."""
    if len(builds) > MAX_NAMED_BUILDS:
        return "other builds"
    if stock and stock <= where:
        return "stock torch"
    return "torch " + ", ".join(sorted(where))
