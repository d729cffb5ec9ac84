"""The ✅/🟡/❌/⏸ rules: each cell's outcome, failures and marks, then one row per policy x gpu.

A cell's outcome is a **verdict** when the export itself decided it (passed, failed, oom, crashed with SIGSEGV,
SIGABRT, SIGBUS, SIGFPE or SIGILL), or **undecided** when nothing judged the export (an error in setup, env or
launcher; cancelled or killed from outside; a timeout; `check: none`, an export that no runtime could run). A catalog
entry with `decides: true` makes a matching timeout, kill or error a verdict; one with `decides: false` (needs_hub,
missing_package: the job could not build the policy where it ran) makes a matching failure undecided, the
entry's id its reason. Only verdicts decide a symbol (render_md.LEGEND says what each means).

The numbers of a policy x gpu come from the cell that decided its symbol: the first stock build that passed; else
the first patched build that passed; else the failed build that got as far as the check (smallest margin), else
the first stock build. `failures` is every catalog id seen across the builds; `primary` only the deciding cell's.

A stale record (made from other configs or another environment than the current config gives its cell; stale.py)
counts as it is, marked `stale`, but never as a new failure: it is rerun (`rerun --stale`), not triaged.
"""

from __future__ import annotations

import re
from itertools import compress

import numpy as np
import pandas as pd

from ..record import UNFINISHED, UNREADABLE, Status
from .catalog import NEW, flag_column
from .settings import Settings

SYMBOLS = {"pass": "✅", "patched": "🟡", "fail": "❌", "undecided": "⏸", "running": "⏳", "missing": "—",
           "unreadable": "⚠️"}
# Statuses that say nothing of the export unless a `decides: true` catalog entry matches the cell.
UNDECIDED_STATUSES = frozenset({Status.ERROR, Status.CANCELLED, Status.KILLED, Status.TIMEOUT})
# A process killed by a signal of its own making crashed: that is the export's verdict, not an outside stop.
CRASH_SIGNALS = r"\bSIG(?:SEGV|ABRT|BUS|FPE|ILL)\b"
CELL_COLUMNS = ["id", "policy", "gpu", "torch", "status", "stale", "outcome", "reason", "failed_step", "failures",
                "error", "max_diff", "tolerance", "margin", "speedup", "peak_gpu_mib", "check", "runs", "attempt",
                "versions", "fixes", "stock", "slow", "at_limit", "straddle", "log"]
MATRIX_COLUMNS = ["policy", "gpu", "symbol", "status", "reason", "build", "fixes", "failures", "primary", "error",
                  "max_diff", "tolerance", "margin", "speedup", "peak_gpu_mib", "check", "runs", "slow", "at_limit",
                  "in_progress", "stale", "builds", "new_error", "cell", "log"]
REPRO_COLUMNS = ["row", "id", "policy", "gpu", "torch", "status", "reproduces", "summary", "error", "log"]


def join_ids(flags: pd.DataFrame, ids: list[str]) -> pd.Series:
    """Space-separated ids whose flag column is set, in catalog order, one string per row."""
    bits = flags[[flag_column(i) for i in ids]].to_numpy(dtype=bool) if ids else np.zeros((len(flags), 0), bool)
    return pd.Series([" ".join(compress(ids, row)) for row in bits], index=flags.index, dtype=object)


def classify_cells(cells: pd.DataFrame, history: pd.DataFrame, settings: Settings) -> pd.DataFrame:
    """Each cell with its effective fixes, stock flag, marks (slow, at limit) and catalog flags."""
    catalog = settings.catalog
    df = cells.copy()
    # made from other configs or another environment than the current config gives the cell (stale.py): shown as
    # it is and marked, never a new failure
    df["stale"] = df["stale"].fillna(False).astype(bool) if "stale" in df else False
    configured = df["torch"].map({name: " ".join(fixes) for name, fixes in settings.build_fixes.items()})
    df["fixes"] = configured.fillna(df["fixes"]).fillna("").astype(str)  # the config's, for a build it names
    df["stock"] = df["fixes"].str.strip() == ""
    df["passed"] = df["status"] == "passed"
    df["unfinished"] = df["status"].isin(UNFINISHED)
    df["unreadable"] = df["status"] == UNREADABLE
    ended = ~(df["passed"] | df["unfinished"] | df["unreadable"])
    df["margin"] = df["margin"].fillna((df["max_diff"] / df["tolerance"]).where(df["tolerance"] > 0))
    # "0.63–1.27": the margins of a check repeated near its limit, lowest to highest
    df["runs"] = [None if low != low else f"{low:.2f}–{high:.2f}"
                  for low, high in zip(df["runs_low"].tolist(), df["runs_high"].tolist(), strict=True)]
    df["straddle"] = df["id"].isin(_straddling(df, history)) | ((df["runs_low"] <= 1) & (df["runs_high"] > 1))
    df["at_limit"] = (df["margin"] >= settings.at_limit) | df["straddle"]
    df["slow"] = df["speedup"] < settings.slow_below

    # an entry describes only the cells of its exporters and GPUs (a CPU cell's slowness is no CUDA row)
    scopes = catalog.scopes(df["exporter"], df["gpu"])
    flags = catalog.match_many(df["error"].where(ended))
    for column, scope in scopes.items():
        flags[column] &= scope
    by_error = [e.column for e in catalog.entries if e.patterns]
    unmatched = ended & ~flags[by_error].any(axis=1)
    if unmatched.any():  # no entry knows the error line: look in the log's tail
        tails = catalog.match_many(df["log_tail"].where(unmatched))
        for column, scope in scopes.items():
            tails[column] &= scope
        flags = flags | tails
    promoted = flags[[e.column for e in catalog.entries if e.decides]].any(axis=1)
    env_ids = catalog.env_ids
    compiler = [e.column for e in catalog.entries if e.patterns and e.id not in env_ids]
    env_failure = ended & flags[[flag_column(i) for i in env_ids]].any(axis=1) & ~flags[compiler].any(axis=1)
    crashed = (df["status"] == Status.KILLED) & df["error"].fillna("").astype(str).str.contains(CRASH_SIGNALS)
    # An export that compiled but that no runtime could run (`check: none`) was judged by nobody.
    unchecked = (df["status"] == Status.FAILED) & (df["failed_step"] == "check") & (df["check"] == "none")
    undecided = ended & (df["status"].isin(UNDECIDED_STATUSES) | unchecked | env_failure) & ~crashed & ~promoted
    df["failing"] = ended & ~undecided
    df["outcome"] = np.select([df["failing"] | df["passed"], undecided], ["verdict", "undecided"], "")
    df["reason"] = None
    stopped, unbuilt = undecided & ~env_failure, undecided & env_failure
    df.loc[stopped, "reason"] = _reasons(df[stopped])
    df.loc[unbuilt, "reason"] = join_ids(flags, env_ids)[unbuilt]  # needs_hub, missing_package
    flags.loc[undecided] = False  # an undecided cell hits no failure
    for entry in catalog.entries:  # an entry with a signal flags the cells with that mark
        if entry.signal:
            flags[entry.column] |= df[entry.signal] & scopes.get(entry.column, True)
    flags[flag_column(NEW)] = df["failing"] & ~flags[by_error].any(axis=1) & ~df["stale"]
    df = pd.concat([df, flags], axis=1)
    df["failures"] = join_ids(df, [*catalog.ids, NEW])
    new = df[flag_column(NEW)]
    step = df.loc[new, "failed_step"]
    fallback = "status " + df.loc[new, "status"] + (" in step " + step.fillna("").astype(str)).where(step.notna(), "")
    df["new_error"] = None
    first_line = df.loc[new, "error"].fillna("").astype(str).str.strip().str.split("\n").str[0].str.strip()
    df.loc[new, "new_error"] = first_line.where(first_line != "", fallback)
    return df


def _reasons(df: pd.DataFrame) -> list[str]:
    """Why each undecided cell decided nothing: `timeout 9 min`, `cancelled`, `killed SIGKILL`, `setup error`."""
    reasons = []
    for status, step, error in zip(*(df[c].tolist() for c in ("status", "failed_step", "error")), strict=True):
        text = error if isinstance(error, str) else ""
        if status == Status.TIMEOUT:
            minutes = re.search(r"timeout_min=([0-9.]+)", text)
            reasons.append(f"timeout {minutes.group(1)} min" if minutes else "timeout")
        elif status == Status.KILLED:
            signal = re.search(r"\bSIG[A-Z]+", text)
            reasons.append(f"killed {signal.group(0)}" if signal else "killed")
        elif status == Status.CANCELLED:
            signal = re.search(r"\bSIG(?:INT|TERM)\b", text)
            reasons.append(f"cancelled ({signal.group(0)})" if signal else "cancelled")
        elif status == Status.FAILED:
            reasons.append("not checked")
        elif step == "env":
            reasons.append("env build failed")
        elif step == "setup" and text.startswith("wrong GPU ("):
            reasons.append(text)  # the job refused the GPU it got: which one, and what the column wants
        else:
            reasons.append(f"{step} error" if isinstance(step, str) and step else "error")
    return reasons


def error_cause(error: object, limit: int = 160) -> str:
    """The cause an error record holds, in one short line for the undecided list: the last `Caused by:` of a
    chained message (uv's, cargo-style), without a leading `[setup]` or a trailing `(log: /path/on/this/host)`."""
    if not isinstance(error, str):
        return ""
    text = " ".join(error.split())
    text = re.sub(r"\s*\(log: [^()]*\)$", "", re.sub(r"^\[[\w-]+\]\s*", "", text))
    if "Caused by:" in text:
        text = text.rsplit("Caused by:", 1)[1].strip()
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _straddling(df: pd.DataFrame, history: pd.DataFrame) -> pd.Index:
    """Cells whose runs (this one and earlier attempts) landed on both sides of the tolerance."""
    checks = pd.concat([df.loc[df["id"].isin(history["id"]), ["id", "max_diff", "tolerance"]],
                        history[["id", "max_diff", "tolerance"]]]).dropna(subset=["max_diff", "tolerance"])
    over = (checks["max_diff"] > checks["tolerance"]).groupby(checks["id"]).agg(["any", "all"])
    return over.index[over["any"] & ~over["all"]]


def _ranks(names: pd.Series, order: list[str]) -> pd.Series:
    """Position in the configured order; names the config does not list follow, sorted."""
    codes, uniques = pd.factorize(names)
    extra = sorted(set(uniques) - set(order))
    rank = {name: i for i, name in enumerate([*order, *extra])}
    return pd.Series(np.array([rank[u] for u in uniques], dtype="int64")[codes], index=names.index)


def build_matrix(df: pd.DataFrame, settings: Settings) -> pd.DataFrame:
    """One row per policy x gpu (the recorded ones and the ones the matrix expects), with its symbol."""
    keys = ["policy", "gpu"]
    matrix = _aggregate(df, settings) if len(df) else pd.DataFrame(columns=keys)
    present = set(zip(matrix["policy"], matrix["gpu"], strict=True))
    missing = [pair for pair in settings.expected if pair not in present]
    if missing:
        blank = pd.DataFrame(missing, columns=keys).assign(status="missing", failures="", primary="", builds=0,
                                                           slow=False, at_limit=False, in_progress=False, stale=False)
        matrix = pd.concat([matrix, blank], ignore_index=True) if len(matrix) else blank
    for column in MATRIX_COLUMNS:
        if column not in matrix:
            matrix[column] = None
    matrix["symbol"] = matrix["status"].map(SYMBOLS)
    fixes = matrix["fixes"].fillna("").astype(str)
    matrix["fixes"] = fixes.map({f: short_fixes(f) for f in fixes.unique()})  # a few distinct lists: each once
    for column in ("slow", "at_limit", "in_progress", "stale"):
        matrix[column] = matrix[column].fillna(False).astype(bool)
    matrix["builds"] = matrix["builds"].fillna(0).astype("int64")
    return _in_table_order(matrix[MATRIX_COLUMNS], settings, "policy", "gpu").reset_index(drop=True)


def _aggregate(df: pd.DataFrame, settings: Settings) -> pd.DataFrame:
    catalog = settings.catalog
    keys = ["policy", "gpu"]
    priority = np.select(
        [df["passed"] & df["stock"], df["passed"], df["failing"] & df["max_diff"].notna(),
         df["failing"] & df["stock"], df["failing"]],
        [0, 1, 2, 3, 4], 5)
    # Sort only the keys, then take the deciding rows: moving every column of every row costs more than the rest.
    order = df[[*keys, "torch"]].assign(_priority=priority, _margin=np.where(priority == 2, df["margin"], 0.0),
                                         _build=_ranks(df["torch"], settings.builds))
    order = order.sort_values([*keys, "_priority", "_margin", "_build", "torch"], kind="stable")
    decided = df.loc[order.drop_duplicates(keys, keep="first").index].set_index(keys)
    grouped = df.assign(stock_pass=df["passed"] & df["stock"], patched_pass=df["passed"] & ~df["stock"],
                        stock_unfinished=df["unfinished"] & df["stock"]).groupby(keys, sort=False)
    agg = grouped[["stock_pass", "patched_pass", "unfinished", "stock_unfinished", "unreadable", "failing",
                   *(e.column for e in catalog.entries), flag_column(NEW)]].any()
    agg["builds"] = grouped["torch"].size()
    agg["new_error"] = grouped["new_error"].first()
    agg["failures"] = join_ids(agg, [*catalog.ids, NEW])
    picked = decided[["torch", "reason", "fixes", "failures", "error", "max_diff", "tolerance", "margin", "speedup",
                      "peak_gpu_mib", "check", "runs", "slow", "at_limit", "stale", "id", "log"]]
    matrix = agg.join(picked.rename(columns={"torch": "build", "failures": "primary", "id": "cell"}))
    # A cell whose record cannot be read may hold any result: only a stock pass is earned without it.
    matrix["status"] = np.select([matrix["stock_pass"], matrix["unreadable"], matrix["patched_pass"],
                                  matrix["unfinished"], matrix["failing"]],
                                 ["pass", "unreadable", "patched", "running", "fail"], "undecided")
    matrix["reason"] = matrix["reason"].where(matrix["status"] == "undecided", None)
    # A patched pass can still turn ✅ while a stock build runs; anything but ✅ can while any build runs.
    matrix["in_progress"] = np.select([matrix["status"] == "pass", matrix["status"] == "patched"],
                                      [False, matrix["stock_unfinished"]], matrix["unfinished"])
    return matrix.reset_index()


def repro_table(repros: pd.DataFrame, settings: Settings) -> pd.DataFrame:
    """repros.csv: per standalone repro cell, whether its failure still shows there (`yes`, `no`, `n/a` when it
    cannot show on that GPU or build, else the cell's status when it did not finish), in row and table order."""
    out = repros.assign(row=repros["repro_row"].astype(str), summary=repros["repro_summary"])
    verdict = out["reproduced"].map({True: "yes", False: "no"}).fillna("n/a")
    out["reproduces"] = np.where(out["status"] == "passed", verdict, out["status"])
    return _in_table_order(out[REPRO_COLUMNS], settings, "row", "gpu", "torch").reset_index(drop=True)


def short_fixes(fixes: str) -> str:
    """"pytorch/pytorch#202785 pytorch/executorch#19924" -> "#202785 executorch#19924": another repository keeps
    its name, so its number is not read as a torch PR."""
    short = []
    for fix in fixes.split():
        repo, sep, number = fix.rpartition("#")
        short.append(fix if not sep else f"#{number}" if repo in ("", "pytorch/pytorch")
                     else f"{repo.rsplit('/', 1)[-1]}#{number}")
    return " ".join(short)


def cells_table(df: pd.DataFrame, settings: Settings) -> pd.DataFrame:
    """cells.csv: one row per cell, in table order."""
    return _in_table_order(df[CELL_COLUMNS], settings, "policy", "gpu", "torch").reset_index(drop=True)


def _in_table_order(df: pd.DataFrame, settings: Settings, *keys: str) -> pd.DataFrame:
    """df sorted by keys, policies, GPUs and builds in the configured order; only the keys move (texts are big)."""
    orders = {"policy": settings.policies, "gpu": settings.gpus, "torch": settings.builds}
    ranks = pd.DataFrame({k: _ranks(df[k], orders[k]) if k in orders else df[k] for k in keys})
    return df.loc[ranks.sort_values(list(keys), kind="stable").index]
