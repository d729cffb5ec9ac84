"""A collect that keeps the last collect's slices (computing again only the policies whose records changed) writes
the bytes of a collect from scratch, changes.md included, after every kind of change."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from orchestrator import collect as collect_module
from orchestrator.collect import assemble, render_html, slices
from orchestrator.collect.index import INDEX_DIR
from orchestrator.collect.slice_store import STORE_FILE
from orchestrator.collect.slices import csv_rows

from .test_collect_rules import SEED_MESSAGES, collect, passed, put

POLICIES = "matrix.policies=[act,diffusion,pi0,pi05,xvla,groot]"  # groot: expected, never recorded
OUTPUTS = ("cells.csv", "matrix.csv", "repros.csv", "matrix.md", "report.html", "changes.md")


@pytest.fixture
def computed(monkeypatch) -> list[set[str]]:
    """The policies each collect computed (the rest of its slices were kept)."""
    seen: list[set[str]] = []

    def spy(original):
        def computing(cells, history, settings, listed):
            seen.append(set(cells["policy"]) | {p for p, _ in settings.expected})
            return original(cells, history, settings, listed)
        return computing

    for name in ("compute", "compute_pairs"):  # from scratch; GPU by GPU (kept slices)
        monkeypatch.setattr(collect_module, name, spy(getattr(slices, name)))
    for module in (slices, assemble, render_html):  # the cells table's first rows cross policies
        monkeypatch.setattr(module, "MAX_CELL_ROWS", 5)
    return seen


def test_kept_slices_give_the_bytes_of_a_collect_from_scratch(tmp_path: Path, computed: list[set[str]]) -> None:
    out = tmp_path / "out"
    oom, serialize, autocast = SEED_MESSAGES["3"], SEED_MESSAGES["7"], SEED_MESSAGES["8"]
    fix785 = {"fixes": ["pytorch/pytorch#202785"]}
    for i, policy in enumerate(("act", "diffusion", "pi0", "xvla")):
        for gpu in ("h100", "a100"):
            passed(out, f"{policy}/{gpu}/pr202785", diff=0.01 * (i + 1), **fix785,
                   versions={"torch": "2.15.0", "gpu_name": f"NVIDIA {gpu.upper()}"})
            put(out, f"{policy}/{gpu}/stock", "failed", failed_step="save", error=serialize,
                versions={"torch": "2.15.0"}, ended_at=f"2026-12-0{i + 1}T10:00:00+00:00")
    for gpu in ("h100", "a100"):  # pi05: all fail, 3 decides, 7 only on pr202785
        put(out, f"pi05/{gpu}/stock", "failed", failed_step="compile-model", error=oom)
        put(out, f"pi05/{gpu}/pr202785", "failed", failed_step="save", error=serialize, **fix785)
    put(out, "repro_fp32_speed/h100/stock", exporter="repro", repro={"row": 9, "reproduced": True})
    assert collect(out, matrix=POLICIES) == 0
    assert computed[-1] >= {"act", "diffusion", "pi0", "pi05", "xvla", "groot"}

    put(out, "pi05/h100/pr202785", "failed", failed_step="compile-model", error=oom, **fix785)  # 7 moves
    put(out, "act/a100/stock", "failed", failed_step="reload", error=autocast)  # another failure id
    passed(out, "xvla/a100/stock", diff=0.07)  # now passes on stock, at its limit
    put(out, "xvla/h100/stock", "failed", failed_step="export", error="KeyError: 'a new one'")  # a new failure
    shutil.rmtree(out / "cells" / "diffusion")  # a policy's cells gone: pi0's move up into the cells table
    passed(out, "zz_new/h100/stock")  # a policy the matrix does not name
    scratch = tmp_path / "scratch"
    shutil.copytree(out, scratch)
    (scratch / INDEX_DIR / STORE_FILE).unlink()

    computed.clear()
    assert collect(out, matrix=POLICIES) == 0
    kept = computed[-1]
    assert collect(scratch, matrix=POLICIES) == 0
    assert computed[-1] >= {"act", "pi0", "pi05", "xvla", "groot", "zz_new"}
    for name in OUTPUTS:
        assert (out / name).read_text() == (scratch / name).read_text(), f"{name} differs from a collect from scratch"
    assert "groot" not in kept and {"act", "pi05", "xvla", "zz_new", "diffusion", "pi0"} <= kept, kept
    assert "xvla (A100): 5, and new on stock torch." in (out / "matrix.md").read_text()
    assert "xvla on H100: new error no catalog entry knows: KeyError: 'a new one'" in (out / "changes.md").read_text()

    computed.clear()
    assert collect(out, matrix=POLICIES) == 0  # nothing changed: nothing computed, the same bytes
    assert not any(computed), computed
    for name in OUTPUTS[:-1]:
        assert (out / name).read_text() == (scratch / name).read_text()
    assert (out / "changes.md").read_text().endswith("Nothing changed.\n")


def test_kept_slices_stay_right_over_collects_that_each_add_versions(tmp_path: Path,
                                                                     computed: list[set[str]]) -> None:
    """A kept slice's stored JSON is written again as it was, numbering the shared values as its store did: the
    store a collect leaves must read back to the slices a collect from scratch computes, collect after collect."""
    out = tmp_path / "out"
    for policy in ("act", "diffusion", "pi0"):
        for gpu in ("h100", "a100"):
            passed(out, f"{policy}/{gpu}/stock", versions={"torch": "2.15.0", "gpu_name": f"NVIDIA {gpu.upper()}"})
    assert collect(out, matrix=POLICIES) == 0
    for round_, policy in enumerate(("pi0", "act", "diffusion", "pi0"), start=1):
        passed(out, f"{policy}/h100/stock", versions={"torch": f"2.15.{round_}", "gpu_name": "NVIDIA H100"})
        computed.clear()
        assert collect(out, matrix=POLICIES) == 0
        assert policy in computed[-1] and not {"act", "diffusion", "pi0"} <= computed[-1], computed
        scratch = tmp_path / f"scratch{round_}"
        shutil.copytree(out, scratch)
        (scratch / INDEX_DIR / STORE_FILE).unlink()
        assert collect(scratch, matrix=POLICIES) == 0
        for name in OUTPUTS[:-1]:
            assert (out / name).read_text() == (scratch / name).read_text(), f"round {round_}: {name} differs"
        assert f"torch 2.15.{round_}" in (out / "matrix.md").read_text()


def test_a_matrix_csv_edited_since_makes_a_collect_from_scratch(tmp_path: Path, computed: list[set[str]]) -> None:
    """changes.md compares with matrix.csv as it is: kept slices would compare with what it was."""
    out = tmp_path / "out"
    passed(out, "act/h100/stock")
    passed(out, "pi0/h100/stock")
    assert collect(out, matrix="matrix.policies=[act,pi0]") == 0
    matrix_csv = out / "matrix.csv"
    matrix_csv.write_text(matrix_csv.read_text().replace("✅", "❌"))
    computed.clear()
    assert collect(out, matrix="matrix.policies=[act,pi0]") == 0
    assert computed[-1] >= {"act", "pi0"}
    assert "act on H100: ❌ → ✅" in (out / "changes.md").read_text()


def test_kept_slices_sharing_their_versions_count_each_policy(tmp_path: Path, computed: list[set[str]]) -> None:
    """Kept slices with the same builds and versions share one list (slice_store.py): the versions section still
    counts every policy's cells, as a collect from scratch does."""
    out = tmp_path / "out"
    versions = {"torch": "2.15.0", "executorch": "1.6.0", "gpu_name": "NVIDIA H100"}
    for policy in ("act", "diffusion", "pi0", "pi05", "xvla"):
        passed(out, f"{policy}/h100/stock", versions=versions)
        put(out, f"{policy}/h100/pr202785", "failed", failed_step="save", error=SEED_MESSAGES["7"],
            fixes=["pytorch/pytorch#202785"], versions=versions)
    assert collect(out, matrix=POLICIES) == 0
    passed(out, "pi0/h100/pr202785", fixes=["pytorch/pytorch#202785"], versions={**versions, "torch": "2.16.0"})
    computed.clear()
    assert collect(out, matrix=POLICIES) == 0
    assert computed[-1] == {"pi0"}
    scratch = tmp_path / "scratch"
    shutil.copytree(out, scratch)
    shutil.rmtree(scratch / INDEX_DIR)
    assert collect(scratch, matrix=POLICIES) == 0
    for name in OUTPUTS[:-1]:
        assert (out / name).read_text() == (scratch / name).read_text(), f"{name} differs from a collect from scratch"
    assert "torch 2.15.0, executorch 1.6.0 (4 cells)" in (out / "matrix.md").read_text()


def test_rows_cut_from_one_csv_are_what_to_csv_writes() -> None:
    """Values whose CSV text is easy to get wrong: signed zeros, exponents, missing next to the text "None",
    quotes, separators, line breaks, non-ASCII; and a value holding the row separator (written row by row)."""
    frame = pd.DataFrame({
        "margin": [0.0, -0.0, 1e-05, 1.2345678901234568e20, np.nan, 0.1 + 0.2, 3.0, -2.5],
        "attempt": np.arange(8, dtype="int64"),
        "slow": [True, False] * 4,
        "runs": [None, "None", np.nan, "0.63–1.27", "", "a,b", 'say "hi"', "line\nbreak"],
        "error": pd.Series(["x\r\ny", None, "plain", "tab\there", "ünï", "trailing ", " lead", "é,\"q\"\n"],
                           dtype="str"),
    })
    separated = pd.DataFrame({"error": ["fine", "record\x1eseparator", "end\x1e\nof row"]})
    for data in (frame, separated, frame.iloc[:0]):
        assert "".join(csv_rows(data)) == data.to_csv(index=False, header=False, lineterminator="\n")
    assert len(csv_rows(frame)) == len(frame) and len(csv_rows(separated)) == len(separated)


def test_rows_formatted_column_by_column_match_to_csv_on_random_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """Text, float64, int64 and bool columns are formatted without pandas' writer: 50 random frames of text drawn
    from separators, quotes, line breaks and look-alikes of missing values, and of numbers of every magnitude,
    against to_csv. A column of mixed Python values or of bytes, and a lone column, go through pandas."""
    rng = random.Random(0)
    pieces = [",", '"', "\n", "\r", "\r\n", "\x1e", " ", "a", "é", "–", "None", "nan", "0", "''"]

    def text() -> str:
        return "".join(rng.choice(pieces) for _ in range(rng.randint(0, 5)))

    def number() -> float:
        return rng.choice([np.nan, 0.0, -0.0, float("inf"), rng.uniform(-1, 1) * 10 ** rng.randint(-30, 30)])

    handled = ["text", "object", "float", "int", "bool"]
    for _ in range(50):
        n = 40
        frame = pd.DataFrame({
            "text": pd.Series([text() if rng.random() > 0.2 else None for _ in range(n)], dtype="str"),
            "object": [rng.choice([None, np.nan, text(), text()]) for _ in range(n)],
            "float": [number() for _ in range(n)],
            "int": np.array([rng.randint(-10**12, 10**12) for _ in range(n)], dtype="int64"),
            "bool": [rng.random() < 0.5 for _ in range(n)],
            "mixed": [rng.choice([1, 2.5, "x,y", None, True]) for _ in range(n)],
            "bytes": [rng.choice([b"x,y", "a", None]) for _ in range(n)],
        })
        with monkeypatch.context() as patched:  # the handled columns never reach pandas' writer
            patched.setattr(slices, "_pandas_rows", lambda frame: pytest.fail("written through pandas"))
            rows = csv_rows(frame[handled])
        assert "".join(rows) == frame[handled].to_csv(index=False, header=False, lineterminator="\n")
        assert len(rows) == n
        for columns in (list(frame.columns), ["text"], ["object"], ["text", "bytes"]):
            data = frame[columns]
            assert "".join(csv_rows(data)) == data.to_csv(index=False, header=False, lineterminator="\n")


def _random_record(out: Path, cell: str, rng: random.Random) -> None:
    """Any outcome a cell can have, with the fields the slices take per cell and per policy."""
    versions = rng.choice([{"torch": "2.15.0"}, {"torch": "2.15.1", "gpu_name": "NVIDIA H100"}])
    fields = {"versions": versions, "ended_at": f"2026-12-0{rng.randint(1, 9)}T10:00:00+00:00",
              "logs": {"export": "export.log"}}
    if cell.endswith("/nightly"):  # a build the config does not name: the record's own fixes count
        fields["fixes"] = rng.choice([[], ["pytorch/pytorch#202925"]])
    kind = rng.choice(["passed", "passed", "failed", "failed", "failed", "new", "running", "timeout"])
    if kind == "passed":
        diff = rng.choice([0.01, 0.07, 0.09])
        put(out, cell, "passed", max_diff=diff, tolerance=0.075, margin=diff / 0.075, **fields)
    elif kind == "failed":
        row = rng.choice(["2", "3", "5", "7", "8"])
        put(out, cell, "failed", failed_step=rng.choice(["compile-model", "save", "check"]),
            error=SEED_MESSAGES[row], **fields)
    elif kind == "new":
        put(out, cell, "failed", failed_step="export", error=f"KeyError: 'layer {rng.randint(1, 3)}'", **fields)
    else:
        put(out, cell, kind, **fields)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kept_slices_merged_gpu_by_gpu_give_the_bytes_of_a_collect_from_scratch(
        tmp_path: Path, computed: list[set[str]], monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """A policy whose records changed on some GPUs is computed again on those GPUs only, its other GPUs taken from
    its kept slice (slices.merge): over random reruns, removed cells and GPUs and GPUs added, every output is the
    one a collect from scratch writes."""
    merged: list[dict[str, set[str] | None]] = []
    original = collect_module.merge

    def spy(kept, fresh, changed, light, settings):
        merged.append(dict(changed))
        return original(kept, fresh, changed, light, settings)

    monkeypatch.setattr(collect_module, "merge", spy)
    rng = random.Random(seed)
    out = tmp_path / "out"
    policies, gpus, builds = ["act", "diffusion", "pi0", "pi05", "xvla"], ["h100", "a100", "l40s"], \
        ["stock", "pr202785", "nightly"]
    for policy in policies:
        for gpu in gpus[:2]:
            for build in builds:
                _random_record(out, f"{policy}/{gpu}/{build}", rng)
    assert collect(out, matrix=POLICIES) == 0
    for round_ in range(8):
        cells = sorted(str(p.parent.relative_to(out / "cells")) for p in (out / "cells").glob("*/*/*/record.json"))
        for cell in rng.sample(cells, 3):
            _random_record(out, cell, rng)
        change = rng.choice(["cell gone", "gpu gone", "gpu added", "none"])
        if change == "cell gone":
            shutil.rmtree(out / "cells" / rng.choice(cells))
        elif change == "gpu gone":
            shutil.rmtree(out / "cells" / rng.choice(cells).rpartition("/")[0])
        elif change == "gpu added":
            _random_record(out, f"{rng.choice(policies)}/{rng.choice(gpus)}/{rng.choice(builds)}", rng)
        scratch = tmp_path / f"scratch{round_}"
        shutil.copytree(out, scratch)
        shutil.rmtree(scratch / INDEX_DIR)
        computed.clear()
        assert collect(out, matrix=POLICIES) == 0
        assert collect(scratch, matrix=POLICIES) == 0
        for name in OUTPUTS:
            assert (out / name).read_text() == (scratch / name).read_text(), f"round {round_} ({change}): {name}"
    partial = [changed for changed in merged if any(gpus is not None for gpus in changed.values())]
    assert partial, f"no collect merged a policy GPU by GPU: {merged}"


def test_policy_fields_counted_on_codes_match_a_row_by_row_count() -> None:
    """slices._policy_fields works on the columns' codes: on random cells (a policy's cells in more than one run,
    missing versions and ended_at) it gives what going through the cells one by one gives."""
    rng = random.Random(7)
    rows = []
    for _ in range(400):
        build = rng.choice(["stock", "pr202785", "nightly"])
        rows.append({"policy": rng.choice(["act", "pi0", "xvla"]), "gpu": rng.choice(["h100", "a100"]),
                     "torch": build, "versions": rng.choice(['{"torch":"2.15.0"}', '{"torch":"2.15.1"}', "", None]),
                     "fixes": rng.choice(["", "pytorch/pytorch#202785"]) if build != "stock" else "",
                     "ended_at": rng.choice([None, *(f"2026-12-0{d}T10:00:00+00:00" for d in range(1, 10))])})
    expected: dict[str, dict] = {}
    for row in rows:
        entry = expected.setdefault(row["policy"], {"builds": {}, "fixes": {}, "pairs": {}, "records": 0,
                                                    "newest": "", "builds_seen": set(), "stock": set()})
        entry["fixes"][row["torch"]] = row["fixes"]
        entry["records"] += 1
        entry["builds_seen"].add(row["torch"])
        if row["fixes"] == "":
            entry["stock"].add(row["torch"])
        if isinstance(row["ended_at"], str) and row["ended_at"] > entry["newest"]:
            entry["newest"] = row["ended_at"]
        if isinstance(row["versions"], str):
            key = (row["torch"], row["versions"])
            entry["builds"][key] = entry["builds"].get(key, 0) + 1
        entry["pairs"][(row["gpu"], row["versions"])] = None
    frame = pd.DataFrame(rows).assign(stock=[row["fixes"] == "" for row in rows])
    for cells in (frame, frame.astype({"versions": "string", "ended_at": "string"})):  # object or text columns
        got = slices._policy_fields(cells)
        assert got.keys() == expected.keys()
        for policy, entry in expected.items():
            fields = got[policy]
            assert fields.builds == [[b, v, n] for (b, v), n in entry["builds"].items()], policy
            assert list(fields.fixes.items()) == list(entry["fixes"].items()), policy
            assert fields.gpu_versions == [[g, v] for g, v in entry["pairs"]], policy
            assert (fields.records, fields.newest) == (entry["records"], entry["newest"]), policy
            assert (set(fields.fixes), fields.stock_set) == (entry["builds_seen"], entry["stock"]), policy
