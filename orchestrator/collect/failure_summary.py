"""The seed's failure summary table and its "Policy to failure:" line, put together from one part per policy.

A policy's part (the failure ids it hits, each with the GPUs it hit them on when not all, and its clause of the
line) depends on that policy's matrix rows and cells only, and through their hits (`pair_hits`: per policy x
gpu, the failure ids and the builds each was seen on) and the set of its builds; `failure_rows` and
`policy_line` only assemble the parts.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pandas as pd

from .catalog import id_key
from .settings import Settings

Part = dict[str, Any]  # {"notes": {failure id: GPU note, "" on all its GPUs}, "clause": [text, lowest id] | None}
Hits = list[Any]  # [primary ids, failure ids, {failure id: [builds it was seen on]}] of one policy x gpu
MAX_NAMED_BUILDS = 62  # a note names up to this many builds of a policy (else "other builds")


def order(names: list[str]):
    """Sort key: position in names (the configured order), names it does not list after them, by name."""
    rank = {name: i for i, name in enumerate(names)}
    return lambda name: (rank.get(name, len(rank)), name)


def columns(frame: pd.DataFrame, *names: str) -> list[list]:
    """Columns as Python lists: iterating a pyarrow-backed column yields one boxed scalar at a time (most of a
    render at 10,000 records), `tolist` converts it in one call."""
    return [frame[name].tolist() for name in names]


def gpu_note(where: set[str], everywhere: set[str], settings: Settings) -> str | None:
    """"H100" when a failure was seen on some of a policy's GPUs only (None when on all)."""
    if not where or where >= everywhere:
        return None
    return " and ".join(settings.gpu_short(g) for g in sorted(where, key=order(settings.gpus)))


def pair_hits(matrix: pd.DataFrame, cells: pd.DataFrame) -> dict[tuple[str, str], Hits]:
    """What a policy's part takes from each of its policy x gpu rows with a record, in table order: the failure
    ids of the cell that decided its symbol and of all its cells, and the builds each id was seen on."""
    seen_on: dict[tuple[str, str], dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    failing = cells[cells["failures"] != ""]
    for policy, gpu, build, failures in zip(*columns(failing, "policy", "gpu", "torch", "failures"), strict=True):
        for failure_id in failures.split():
            seen_on[(policy, gpu)][failure_id].add(build)
    recorded = matrix[matrix["status"] != "missing"]
    hits: dict[tuple[str, str], Hits] = {}
    for policy, gpu, main, every in zip(*columns(recorded, "policy", "gpu", "primary", "failures"), strict=True):
        builds = seen_on.get((policy, gpu), {})
        hits[(policy, gpu)] = [str(main or ""), str(every or ""), {i: sorted(b) for i, b in builds.items()}]
    return hits


def policy_part(hits: dict[str, Hits], builds: set[str], stock: set[str], settings: Settings) -> Part | None:
    """A policy's part from the hits of its GPUs (pair_hits) and the builds (and stock ones) of all its cells;
    None without a recorded GPU.

    Its main failures are those of the cells that decided its symbols (`primary`); failures seen only on other
    builds (the ones a patched build got past) follow as "and 7 on stock torch". A GPU is named when a failure is
    seen on some of the policy's GPUs only.
    """
    if not hits:
        return None
    everywhere = set(hits)
    seen: dict[str, set[str]] = {}
    primary: dict[str, set[str]] = {}
    secondary: dict[str, set[str]] = {}
    for gpu, (main, every, _) in hits.items():
        main_ids = set(main.split())
        for failure_id in every.split():
            seen.setdefault(failure_id, set()).add(gpu)
            (primary if failure_id in main_ids else secondary).setdefault(failure_id, set()).add(gpu)
    clause = None
    if primary or secondary:
        main, other = (primary, secondary) if primary else (secondary, {})
        other = {k: v for k, v in other.items() if k not in main}
        notes = {}
        for failure_id in other:
            where = {build for _, _, on in hits.values() for build in on.get(failure_id, ())}
            if where:
                notes[failure_id] = build_note(builds, stock, where)
        text = _describe(main, other, everywhere, notes, settings)
        clause = [text, list(min(id_key(i) for i in main))]
    return {"notes": {i: gpu_note(where, everywhere, settings) or "" for i, where in seen.items()}, "clause": clause}


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


def _describe(primary: dict[str, set[str]], secondary: dict[str, set[str]], everywhere: set[str],
              build_notes: dict[str, str], settings: Settings) -> str:
    """A clause without its policy names: "<hoisted GPU>\\0<failures>"."""
    main = sorted(primary, key=id_key)
    notes = {i: gpu_note(primary[i], everywhere, settings) for i in main}
    hoist = ""
    if len(set(notes.values())) == 1 and notes[main[0]]:
        hoist, notes = f" ({notes[main[0]]})", dict.fromkeys(main)
    words = []
    for failure_id in main:
        word = failure_id
        entry = settings.catalog.by_id.get(failure_id)
        if entry is not None and entry.signal == "slow":
            word += " (slow, not failing)"
        if notes[failure_id]:
            word += f" on the {notes[failure_id]}"
        words.append(word)
    body = ", ".join(words)
    by_builds: dict[str, list[str]] = defaultdict(list)
    for failure_id in sorted(secondary, key=id_key):
        by_builds[build_notes.get(failure_id, "other builds")].append(failure_id)
    for note, ids in by_builds.items():
        body += f", and {', '.join(ids)} on {note}"
    return f"{hoist}\0{body}"


def build_note(builds: set[str], stock: set[str], where: set[str]) -> str:
    """Where a policy saw a failure, in words: "stock torch" when it hit every stock build the policy ran
    (`builds`, `stock`: those of all its cells), else the builds by name; "other builds" for a policy with more
    than MAX_NAMED_BUILDS builds."""
    if len(builds) > MAX_NAMED_BUILDS:
        return "other builds"
    if stock and stock <= where:
        return "stock torch"
    return "torch " + ", ".join(sorted(where))
