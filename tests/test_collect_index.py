"""The collect index reads only changed records and gives the frames (and tables) of a full read, after edits."""

from __future__ import annotations

import json
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.collect import index as index_module
from orchestrator.collect import records as records_module
from orchestrator.collect.arrow_files import read_table
from orchestrator.collect.index import INDEX_DIR, load_indexed
from orchestrator.collect.records import load_records
from orchestrator.record import Record, start_attempt, write_record


def put(out: Path, cell: str, **fields) -> Path:
    policy, gpu, torch = cell.split("/")
    cell_dir = out / "cells" / cell
    write_record(cell_dir, Record(cell=cell, policy=policy, gpu=gpu, torch=torch,
                                  **{"exporter": "lerobot_cuda", **fields}))
    age(cell_dir / "record.json", *list(cell_dir.parents)[:3], cell_dir)
    return cell_dir


def age(*paths: Path) -> None:
    """These mtimes a second back, as if written before the next collect's clock tick (else the index keeps
    them unknown, racy, and the next collect reads them again: tested on its own below)."""
    stamp = time.time_ns() - 10**9
    for path in paths:
        os.utime(path, ns=(stamp, stamp))


@pytest.fixture
def out(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    for i in range(6):
        for gpu in ("h100", "a100"):
            put(out, f"p{i}/{gpu}/stock", status="passed", max_diff=0.01 * (i + 1), tolerance=0.075,
                versions={"torch": "2.15.0"}, logs={"export": "export.log"})
            put(out, f"p{i}/{gpu}/pr202785", status="failed", failed_step="save",
                error="SerializeError: Unsupported getattr attribute function_const_func_spec0 with type TreeSpec",
                fixes=["pytorch/pytorch#202785"])
    put(out, "repro_x/h100/stock", exporter="repro", status="passed",
        repro={"row": 2, "reproduced": True, "summary": "NoValidChoicesError"})
    odd = out / "cells" / "p9" / "h100" / "stock"  # written by hand: a list where text belongs, a string attempt
    odd.mkdir(parents=True)
    (odd / "record.json").write_text(json.dumps({"status": "failed", "error": ["a", 1], "attempt": "2",
                                                 "check": 5, "max_diff": "0.2", "tolerance": 0.075}))
    age(odd / "record.json", odd, odd.parent, odd.parent.parent)
    return out


def same_as_full_read(out: Path) -> None:
    cells, history = load_indexed(out)
    full_cells, full_history = load_records(out)
    pd.testing.assert_frame_equal(cells, full_cells)
    key = ["id", "attempt", "status", "max_diff", "tolerance"]
    pd.testing.assert_frame_equal(history.sort_values(key).reset_index(drop=True),
                                  full_history.sort_values(key).reset_index(drop=True))


def calls(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> list[str]:
    """The paths module.name (a function of one path) is called with from now on."""
    seen: list[str] = []
    real = getattr(module, name)

    def counting(path: str):
        seen.append(path)
        return real(path)

    monkeypatch.setattr(module, name, counting)
    return seen


def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    return calls(monkeypatch, records_module, "_read")


@pytest.mark.parametrize("max_runs", [64, 0], ids=["runs-kept", "runs-combined"])
@pytest.mark.parametrize("delta_share", [0.0, 1.0], ids=["new-base-each-time", "deltas-only"])
def test_index_matches_a_full_read_through_every_kind_of_change(out: Path, monkeypatch, delta_share,
                                                                max_runs) -> None:
    monkeypatch.setattr(index_module, "DELTA_SHARE", delta_share)
    monkeypatch.setattr(index_module, "MAX_RUNS", max_runs)  # frames() converts the runs as they are, or one copy
    same_as_full_read(out)  # cold: no index yet, everything read, the index written
    assert (out / INDEX_DIR / "cells.arrow").exists()
    base = (out / INDEX_DIR / "cells.arrow").read_bytes()
    seen = reads(monkeypatch)
    load_indexed(out)
    assert seen == [], "an unchanged tree was read again"

    put(out, "p1/h100/stock", status="failed", failed_step="check", max_diff=0.09, tolerance=0.075)  # rewritten
    put(out, "p7/a100/stock", status="passed", max_diff=0.02, tolerance=0.075)  # a new policy
    put(out, "p2/h100/pr202925", status="timeout", failed_step="export")  # a new build in a known gpu dir
    put(out, "p1-x/h100/stock", status="passed")  # sorts before p1/ by path ("-" < "/"), after it by name
    seen.clear()
    load_indexed(out)
    assert sorted(Path(p).parent.name + "/" + Path(p).parent.parent.parent.name for p in seen) == \
        ["pr202925/p2", "stock/p1", "stock/p1-x", "stock/p7"]
    same_as_full_read(out)
    seen.clear()
    load_indexed(out)
    assert seen == [], "records read into the last index were read again"
    assert ((out / INDEX_DIR / "cells.arrow").read_bytes() == base) == (delta_share == 1.0)
    assert read_table(out / INDEX_DIR / "cells.arrow").column(0).num_chunks == 1, "a base not written as one batch"
    assert (out / INDEX_DIR / "delta.arrow").exists() == (delta_share == 1.0)

    late = out / "cells" / "p3" / "a100" / "nightly"  # a cell directory that has no record yet ...
    late.mkdir()
    age(late, late.parent)
    same_as_full_read(out)
    put(out, "p3/a100/nightly", status="passed", max_diff=0.01, tolerance=0.075)  # ... then has one
    same_as_full_read(out)

    path = out / "cells" / "p4" / "a100" / "stock" / "record.json"
    path.write_text(path.read_text()[:40])  # truncated in place: unreadable
    seen.clear()
    load_indexed(out)
    assert seen == [], "a record was read though no gpu directory changed"
    shutil.rmtree(out / "cells" / "p5" / "h100")  # a gpu's cells removed
    shutil.rmtree(out / "cells" / "p7" / "a100" / "stock")  # a cell removed whose row is in the delta
    age(path, path.parent.parent, out / "cells" / "p5", out / "cells" / "p7" / "a100")  # the edited record's gpu
    # directory touched, as documented
    cell_dir = out / "cells" / "p0" / "h100" / "stock"
    attempt = start_attempt(cell_dir)  # a rerun: attempt 1 archived, attempt 2 near the limit
    put(out, "p0/h100/stock", status="passed", attempt=attempt, max_diff=0.07, tolerance=0.075)
    same_as_full_read(out)
    cells, history = load_indexed(out)
    assert cells.set_index("id").loc["p4/a100/stock", "status"] == "unreadable"
    assert not cells["id"].str.startswith("p5/h100/").any()
    assert "p7/a100/stock" not in cells["id"].tolist()
    assert history["id"].tolist() == ["p0/h100/stock"]

    (out / INDEX_DIR / "cells.arrow").write_bytes(b"not an arrow file")  # a broken index: a full read again
    same_as_full_read(out)


def test_a_delta_that_does_not_extend_the_base_is_not_used(out: Path, monkeypatch) -> None:
    monkeypatch.setattr(index_module, "DELTA_SHARE", 1.0)
    load_indexed(out)
    index_dir = out / INDEX_DIR
    put(out, "p1/h100/stock", status="failed", failed_step="check", max_diff=0.09, tolerance=0.075)
    load_indexed(out)  # the rewritten record goes into a delta
    stale = (index_dir / "delta.arrow").read_bytes()
    monkeypatch.setattr(index_module, "DELTA_SHARE", 0.0)
    put(out, "p1/h100/stock", status="passed", max_diff=0.01, tolerance=0.075)
    load_indexed(out)  # a new base, which holds the passed row
    assert not (index_dir / "delta.arrow").exists()
    (index_dir / "delta.arrow").write_bytes(stale)  # the old delta back (a crash between the two writes)
    seen = reads(monkeypatch)
    cells, _ = load_indexed(out)
    assert seen == [] and cells.set_index("id").loc["p1/h100/stock", "status"] == "passed"
    (index_dir / "delta.arrow").write_bytes(b"garbage")
    same_as_full_read(out)


def test_stats_and_reads_through_threads_see_the_same_changes(out: Path, monkeypatch) -> None:
    pools: list[int] = []

    class CountingPool(ThreadPoolExecutor):
        def __init__(self, max_workers: int) -> None:
            pools.append(max_workers)
            super().__init__(max_workers=max_workers)

    monkeypatch.setattr(records_module, "THREADED_FROM", 0)
    monkeypatch.setattr(records_module, "ThreadPoolExecutor", CountingPool)
    load_indexed(out, workers=4)
    put(out, "p1/h100/stock", status="failed", failed_step="check", max_diff=0.09, tolerance=0.075)
    removed = out / "cells" / "p2" / "a100" / "stock" / "record.json"
    removed.unlink()
    age(removed.parent.parent)  # removed by hand, its gpu directory touched (record.mark_written)
    seen = reads(monkeypatch)
    cells, _ = load_indexed(out, workers=4)
    assert [Path(p).parent.parent.parent.name for p in seen] == ["p1"]
    pd.testing.assert_frame_equal(cells, load_records(out)[0])
    assert pools == [4] * 4, "each collect stats, then reads, through 4 threads"


def test_what_changes_in_the_tick_a_collect_sees_it_is_seen_by_the_next(out: Path) -> None:
    """A coarse file-system clock: a directory gains a cell, and a record is edited in place to the same size
    (its directory touched), all keeping the mtime the last collect saw, as happens when they change in that
    collect's clock tick."""
    future = time.time_ns() + 3600 * 10**9  # at or after any collect's clock: changed in its tick
    gpu_dir = out / "cells" / "p1" / "h100"
    record = out / "cells" / "p2" / "a100" / "stock" / "record.json"
    touched = (gpu_dir, record, record.parent.parent)
    for path in touched:
        os.utime(path, ns=(future, future))
    load_indexed(out)
    put(out, "p1/h100/nightly", status="passed", max_diff=0.01, tolerance=0.075)
    text = record.read_text()
    record.write_text(text.replace('"passed"', '"failed"'))  # same size, same inode
    for path in touched:
        os.utime(path, ns=(future, future))
    cells, _ = load_indexed(out)
    statuses = cells.set_index("id")["status"]
    assert "p1/h100/nightly" in statuses.index, "a cell added in the tick of the last listing was missed"
    assert statuses["p2/a100/stock"] == "failed", "a record edited in the tick of the last read was not read again"
    same_as_full_read(out)


def test_a_record_write_stamps_its_gpu_directory_and_a_collect_stats_only_its_records(out: Path, monkeypatch) -> None:
    """Renaming record.json into place changes its cell directory's mtime only; write_record stamps the gpu
    directory, the one level a collect stats, and the collect stats the records of that directory alone."""
    load_indexed(out)
    write_record(out / "cells" / "p1" / "h100" / "stock",
                 Record(cell="p1/h100/stock", policy="p1", gpu="h100", torch="stock", exporter="lerobot_cuda",
                        status="failed", failed_step="check", max_diff=0.09, tolerance=0.075))
    stats = calls(monkeypatch, index_module, "_stat")
    cells, _ = load_indexed(out)
    assert sorted(Path(p).parent.name for p in stats if p.endswith("record.json")) == ["pr202785", "stock"]
    assert len(stats) == 1 + 8 + 14 + 2, "cells/, 8 policy and 14 gpu directories, 2 records"
    assert cells.set_index("id").loc["p1/h100/stock", "status"] == "failed"
    same_as_full_read(out)


@pytest.mark.parametrize("workers", [1, 4])
def test_log_tails_read_again_are_those_of_a_full_read(out: Path, monkeypatch, workers) -> None:
    """The index keeps no log tails; the ones the catalog needs are read from the records, as a full read has them."""
    put(out, "p1/h100/pr202785", status="failed", error="RuntimeError: unknown", log_tail="Traceback ...\nboom\n")
    put(out, "p2/a100/pr202785", status="timeout", log_tail="Killed\n")
    put(out, "p3/h100/stock", status="passed", log_tail="a passed cell's tail, which no table needs\n")
    monkeypatch.setattr(records_module, "THREADED_FROM", 1)  # threads even for these few
    full, _ = load_records(out)
    expected = [None if pd.isna(tail) else tail for tail in full["log_tail"]]
    assert expected.count(None) == len(expected) - 2
    assert records_module.read_log_tails(out, [*full["id"], "p8/h100/stock"], workers) == [*expected, None]
