"""matrix.md: the tracking table as GitHub Markdown, to paste into the tracking issue as it is.

The matrix (one row per policy, one column per GPU), the failures no catalog entry knows, the failure summary
(the seed's table, rebuilt from the catalog and the cells seen), the "Policy to failure:" line, then the torch
builds and versions the records carry. No timestamps: the same records give the same bytes (`--check`).
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pandas as pd

from .catalog import NEW, Catalog, flag_column, id_key
from .row_memo import RowMemo, row_keys, scope
from .settings import Settings

LEGEND = ("✅ passes on stock torch · 🟡 passes only with a patched build (its fixes named) · ❌ fails on every "
          "build (failure ids) · ⏳ in progress · — no record · ⚠️ a record could not be read (cells.csv names the "
          "file). Numbers: largest difference / tolerance of the cell that decided the symbol; *slow*: exported "
          "slower than eager (speedup); *at limit*: difference at {at_limit:g} of the tolerance or more, or repeated "
          "runs on both sides of it.")
MAX_ERROR_CHARS = 300
REPROS_HEAD = ("Standalone repros (orchestrator/repros/): does the row's failure still show on each GPU and build "
               "that ran it? A row that stops reproducing after a build change may be fixed.")
MAX_CELLS_LISTED = 5
_LONE_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_MD_SPECIAL = re.compile(r"([\\`*\[\]|~$])")


def md_text(text: object, limit: int | None = None) -> str:
    """Text that cannot break a Markdown table or line: one line, Markdown and HTML characters escaped."""
    flat = " ".join(str(text).split())
    if limit and len(flat) > limit:
        flat = flat[:limit - 1] + "…"
    flat = _MD_SPECIAL.sub(r"\\\1", flat)
    flat = flat.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _LONE_UNDERSCORE.sub(r"\\_", flat)


def repro_cells(row: dict, settings: Settings) -> list[str]:
    """# · repro · GPU · torch · reproduces · what it showed (the summary, else the error of a cell that broke)."""
    shown = row["summary"] if isinstance(row["summary"], str) else row["error"]
    return [str(row["row"]), str(row["policy"]).removeprefix("repro_"), settings.gpu_label(row["gpu"]),
            str(row["torch"]), str(row["reproduces"]), shown if isinstance(shown, str) else ""]


def num(value: float | None) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3g}"


def cell_text(row: dict) -> str:
    """`✅ 0.022 / 0.075`, `🟡 #202785 · 0.022 / 0.075`, `❌ 5 7 · 0.0953 / 0.075 · at limit`, `❌ 3`, `—`."""
    status = row["status"]
    if status == "missing":
        return "—"
    if status == "unreadable":  # no numbers: they would come from a cell that did not decide the symbol
        return "⚠️ unreadable"
    label = {"patched": row["fixes"] or row["build"], "fail": row["failures"], "running": "running"}.get(status)
    head = row["symbol"] + (f" {label}" if label else "")
    pieces = [head]
    if status == "running" and row["failures"]:
        pieces.append(row["failures"])  # what the finished builds hit so far
    if num(row["max_diff"]) and num(row["tolerance"]):
        numbers = f"{num(row['max_diff'])} / {num(row['tolerance'])}"
        if label:
            pieces.append(numbers)
        else:
            pieces[0] = f"{head} {numbers}"
    if isinstance(row.get("check"), str) and row["check"]:
        pieces.append(f"checked by {row['check']}")  # the embedded CUDA exporter's: executorch or aoti
    if row["slow"]:
        pieces.append(f"slow {row['speedup']:.2f}×")
    if row["at_limit"]:  # with the margins of every run where the check was repeated near its limit
        pieces.append(f"at limit {row['runs']}" if isinstance(row.get("runs"), str) and row["runs"] else "at limit")
    if row["in_progress"] and status != "running":
        pieces.append("⏳")
    return " · ".join(pieces)


@dataclass
class Summary:
    """What both renderings show under the matrix, computed once."""

    policies: list[str]
    gpus: list[str]
    pairs: list[tuple[str, str]]  # (policy, gpu) of each matrix row
    keys: list[int]  # each matrix row's key in the row memo
    new_failures: list[tuple[str, list[str]]]  # (first error line, cell ids)
    failure_rows: list[tuple[str, str, str, str, str]]  # (#, failure, policies, repro, fixed by)
    policy_line: str
    builds: list[tuple[str, str, list[tuple[str, int]]]]  # (build, fixes text, [(versions text, cells)])
    gpu_versions: list[tuple[str, str]]
    repros: list[dict]  # repros.csv's rows: the standalone repros and whether each still reproduces


def summarize(matrix: pd.DataFrame, cells: pd.DataFrame, settings: Settings,
              repros: pd.DataFrame | None = None, keys: list[int] | None = None) -> Summary:
    policy_column, gpu_column = columns(matrix, "policy", "gpu")
    policies = list(dict.fromkeys(policy_column))
    recorded_gpus = set(gpu_column)
    gpus = [g for g in dict.fromkeys([*settings.gpus, *sorted(recorded_gpus)]) if g in recorded_gpus]
    return Summary(policies=policies, gpus=gpus, pairs=list(zip(policy_column, gpu_column, strict=True)),
                   keys=row_keys(matrix) if keys is None else keys, new_failures=new_failures(cells),
                   failure_rows=failure_rows(matrix, settings), policy_line=policy_to_failure(matrix, cells, settings),
                   builds=build_versions(cells, settings), gpu_versions=gpu_versions(cells, settings),
                   repros=[] if repros is None else repros.to_dict("records"))


def row_dicts(frame: pd.DataFrame) -> Iterator[dict]:
    """Rows as dicts, built from column lists (to_dict boxes one value at a time)."""
    names = list(frame.columns)
    return (dict(zip(names, values, strict=True)) for values in zip(*columns(frame, *names), strict=True))


def grid_texts(matrix: pd.DataFrame, summary: Summary, memo: RowMemo | None, name: str,
               render_row: Callable[[dict], str]) -> dict[tuple[str, str], str]:
    """Each policy x gpu's text in the matrix (render_row of its row), rendering only rows the memo lacks."""
    texts = (memo or RowMemo()).texts(scope(name), summary.keys,
                                      lambda missing: [render_row(row) for row in row_dicts(matrix.take(missing))])
    return dict(zip(summary.pairs, texts, strict=True))


def columns(frame: pd.DataFrame, *names: str) -> list[list]:
    """Columns as Python lists: iterating a pyarrow-backed column yields one boxed scalar at a time (most of a
    render at 10,000 records), `tolist` converts it in one call."""
    return [frame[name].tolist() for name in names]


def new_failures(cells: pd.DataFrame) -> list[tuple[str, list[str]]]:
    new = cells.loc[cells[flag_column(NEW)], ["new_error", "id"]]
    if new.empty:
        return []
    grouped = new.groupby("new_error", sort=False)["id"].agg(list)
    return [(str(error), ids) for error, ids in grouped.items()]


def _seen_on(matrix: pd.DataFrame) -> tuple[dict[str, set[str]], dict[tuple[str, str], set[str]]]:
    """Each policy's recorded GPUs, and the GPUs where each (policy, failure id) was seen."""
    recorded = matrix[matrix["status"] != "missing"]
    gpus: dict[str, set[str]] = defaultdict(set)
    seen: dict[tuple[str, str], set[str]] = defaultdict(set)
    for policy, gpu, failures in zip(*columns(recorded, "policy", "gpu", "failures"), strict=True):
        gpus[policy].add(gpu)
        for failure_id in str(failures or "").split():
            seen[(policy, failure_id)].add(gpu)
    return gpus, seen


def _gpu_note(where: set[str], everywhere: set[str], settings: Settings) -> str | None:
    if not where or where >= everywhere:
        return None
    return " and ".join(settings.gpu_short(g) for g in sorted(where, key=_order(settings.gpus)))


def _order(order: list[str]):
    rank = {name: i for i, name in enumerate(order)}
    return lambda name: (rank.get(name, len(rank)), name)


def failure_rows(matrix: pd.DataFrame, settings: Settings) -> list[tuple[str, str, str, str, str]]:
    """The seed's summary table: every catalog entry with the policies seen hitting it (GPU noted when only some)."""
    gpus, seen = _seen_on(matrix)
    rows = []
    for entry in settings.catalog.entries:
        names = []
        for policy in sorted(p for p in gpus if (p, entry.id) in seen):
            note = _gpu_note(seen[(policy, entry.id)], gpus[policy], settings)
            names.append(f"{policy} ({note})" if note else policy)
        rows.append((entry.id, entry.title, ", ".join(names) or "none yet", entry.repro, entry.fixed_by))
    return rows


def policy_to_failure(matrix: pd.DataFrame, cells: pd.DataFrame, settings: Settings) -> str:
    """The seed's "Policy to failure:" line.

    A policy's main failures are those of the cells that decided its symbols (`primary`); failures seen only on
    other builds (the ones a patched build got past) follow as "and 7 on stock torch". A GPU is named when a
    failure is seen on some of the policy's GPUs only. Policies with the same text share a clause; clauses are
    ordered by their lowest failure id.
    """
    catalog = settings.catalog
    recorded = matrix[matrix["status"] != "missing"]
    everywhere: dict[str, set[str]] = defaultdict(set)
    primary: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    secondary: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for policy, gpu, main, every in zip(*columns(recorded, "policy", "gpu", "primary", "failures"), strict=True):
        everywhere[policy].add(gpu)
        main_ids = set(str(main or "").split())
        for failure_id in str(every or "").split():
            (primary if failure_id in main_ids else secondary)[policy][failure_id].add(gpu)
    split = {}
    for policy in everywhere:
        main, other = dict(primary.get(policy, {})), dict(secondary.get(policy, {}))
        if not main and not other:
            continue
        if not main:
            main, other = other, {}
        split[policy] = (main, {k: v for k, v in other.items() if k not in main})
    notes = _build_notes(cells, {(policy, i) for policy, (_, other) in split.items() for i in other})
    clauses: dict[str, list[str]] = {}
    first_id: dict[str, tuple] = {}
    for policy, (main, other) in split.items():
        text = _describe(policy, main, other, everywhere[policy], notes, catalog, settings)
        clauses.setdefault(text, []).append(policy)
        key = min(id_key(i) for i in main)
        first_id[text] = min(first_id.get(text, key), key)
    if not clauses:
        return "Policy to failure: none."
    parts = []
    for text in sorted(clauses, key=lambda t: first_id[t]):  # stable: ties keep table order
        hoist, body = text.split("\0")
        parts.append(f"{', '.join(sorted(clauses[text]))}{hoist}: {body}.")
    return "Policy to failure: " + " ".join(parts)


def _describe(policy: str, primary: dict[str, set[str]], secondary: dict[str, set[str]], everywhere: set[str],
              build_notes: dict[tuple[str, str], str], catalog: Catalog, settings: Settings) -> str:
    """A clause without its policy names: "<hoisted GPU>\\0<failures>"."""
    main = sorted(primary, key=id_key)
    notes = {i: _gpu_note(primary[i], everywhere, settings) for i in main}
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


def _build_notes(cells: pd.DataFrame, needed: set[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """Where each needed (policy, failure id) was seen, in words: "stock torch" when it hit every stock build
    the policy ran, else "torch <build names>". Builds are bits of an integer mask, so this is a groupby-sum."""
    if not needed or cells.empty:
        return {}
    need = pd.DataFrame(sorted(needed), columns=["policy", "id"])
    sub = cells[cells["policy"].isin(set(need["policy"].tolist()))]
    builds = sorted(sub["torch"].unique().tolist())
    if len(builds) > 62:  # more builds than bits: name them all
        return {pair: "other builds" for pair in needed}
    bit = sub["torch"].map({b: 1 << i for i, b in enumerate(builds)}).astype("int64")
    flags = [flag_column(i) for i in sorted(set(need["id"])) if flag_column(i) in sub]
    long = sub[["policy", "torch"]].assign(bit=bit, stock=sub["stock"], **{f: sub[f] for f in flags})
    long = long.melt(id_vars=["policy", "torch", "bit", "stock"], value_vars=flags, var_name="flag", value_name="hit")
    long = long[long["hit"]].drop_duplicates(["policy", "flag", "torch"])
    long["id"] = long["flag"].str[2:]
    long = long.merge(need, on=["policy", "id"])
    masks = long.groupby(["policy", "id"])["bit"].sum()
    stock = sub[sub["stock"]].assign(bit=bit).drop_duplicates(["policy", "torch"]).groupby("policy")["bit"].sum()
    stock_mask = masks.index.get_level_values("policy").map(stock).fillna(0).astype("int64").to_numpy()
    all_stock = (stock_mask != 0) & ((masks.to_numpy() & stock_mask) == stock_mask)
    names: dict[int, str] = {}
    notes = {}
    for (policy, failure_id), mask, is_stock in zip(masks.index, masks.to_numpy(), all_stock, strict=True):
        if is_stock:
            notes[(policy, failure_id)] = "stock torch"
            continue
        if mask not in names:
            names[mask] = "torch " + ", ".join(b for i, b in enumerate(builds) if mask >> i & 1)
        notes[(policy, failure_id)] = names[mask]
    return notes


def build_versions(cells: pd.DataFrame, settings: Settings) -> list[tuple[str, str, list[tuple[str, int]]]]:
    """Each torch build, its fixes, and the distinct versions its records carry (with how many cells)."""
    if cells.empty:
        return []
    counts = cells.groupby(["torch", "versions"], sort=False).size()
    out: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for (build, versions), count in counts.items():
        data = json.loads(versions) if versions else {}
        shown = [f"{k} {data[k]}" for k in ("torch", "executorch", "lerobot", "transformers", "python")
                 if data.get(k)]
        shown += [f"{k} {v}" for k, v in sorted(data.items())
                  if k not in {"torch", "executorch", "lerobot", "transformers", "python"}
                  and not k.startswith("gpu_") and v]
        out[build].append((", ".join(shown) or "no versions recorded", int(count)))
    fixes = dict(zip(*columns(cells, "torch", "fixes"), strict=True))
    result = []
    for build in sorted(out, key=_order(settings.builds)):
        fix_text = ", ".join(fixes[build].split())
        counted = sorted(out[build], key=lambda v: -v[1])
        result.append((build, f"with {fix_text}" if fix_text else "stock torch", counted))
    return result


def gpu_versions(cells: pd.DataFrame, settings: Settings) -> list[tuple[str, str]]:
    """What NVML reported for each GPU column: name, capability, driver."""
    if cells.empty:
        return []
    result = []
    for gpu, group in cells.groupby("gpu", sort=False)["versions"]:
        seen = []
        for versions in group.unique():
            data = json.loads(versions) if versions else {}
            text = ", ".join(str(data[k]) if k != "gpu_driver" else f"driver {data[k]}"
                             for k in ("gpu_name", "gpu_capability", "gpu_driver") if data.get(k))
            if text and text not in seen:
                seen.append(text)
        if seen:
            result.append((gpu, "; ".join(seen)))
    return sorted(result, key=lambda item: _order(settings.gpus)(item[0]))


def render(matrix: pd.DataFrame, cells: pd.DataFrame, settings: Settings, summary: Summary | None = None,
           memo: RowMemo | None = None) -> str:
    summary = summary or summarize(matrix, cells, settings)
    grid = grid_texts(matrix, summary, memo, "matrix.md cell", lambda row: md_text(cell_text(row)))
    lines = [f"<!-- export-matrix collect: {len(cells)} records; rebuilt from them, edits here are overwritten -->"]
    lines.append("| policy | " + " | ".join(md_text(settings.gpu_label(g)) for g in summary.gpus) + " |")
    lines.append("| --- |" + " --- |" * len(summary.gpus))
    for policy in summary.policies:
        texts = [grid.get((policy, g), "") for g in summary.gpus]
        lines.append(f"| {md_text(policy)} | " + " | ".join(texts) + " |")
    lines += ["", LEGEND.format(at_limit=settings.at_limit)]
    if summary.new_failures:
        lines += ["", "**New failures** (no entry of the failure catalog matches them):", ""]
        for error, ids in summary.new_failures:
            shown = ", ".join(md_text(i) for i in ids[:MAX_CELLS_LISTED])
            more = f" and {len(ids) - MAX_CELLS_LISTED} more" if len(ids) > MAX_CELLS_LISTED else ""
            lines.append(f"- {md_text(error, MAX_ERROR_CHARS)} ({shown}{more})")
    lines += ["", "| # | Failure | Policies | Repro | Fixed by |", "| --- | --- | --- | --- | --- |"]
    lines += ["| " + " | ".join(md_text(c) for c in row) + " |" for row in summary.failure_rows]
    lines += ["", md_text(summary.policy_line)]
    if summary.repros:
        lines += ["", REPROS_HEAD, "", "| # | repro | GPU | torch | reproduces | what it showed |",
                  "| --- | --- | --- | --- | --- | --- |"]
        lines += ["| " + " | ".join(md_text(c, MAX_ERROR_CHARS) for c in repro_cells(r, settings)) + " |"
                  for r in summary.repros]
    if summary.builds:
        lines += ["", "Torch builds:", ""]
        for build, fixes, versions in summary.builds:
            shown = "; ".join(f"{v} ({n} cells)" if len(versions) > 1 else v for v, n in versions)
            lines.append(f"- {md_text(build)} ({md_text(fixes)}): {md_text(shown)}")
    if summary.gpu_versions:
        lines += ["", "GPUs:", ""]
        lines += [f"- {md_text(settings.gpu_label(g))}: {md_text(text)}" for g, text in summary.gpu_versions]
    return "\n".join(lines) + "\n"
