"""The row memo writes exactly what pandas' to_csv writes, rendering again only the rows that changed."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from orchestrator.collect import settings_from, tables
from orchestrator.collect.index import load_indexed
from orchestrator.collect.row_memo import RowMemo, row_keys
from orchestrator.config import compose_config

from .test_collect_rules import SEED_MESSAGES, passed, put


def frame() -> pd.DataFrame:
    """Values whose CSV text is easy to get wrong: signed zeros, exponents, missing next to the text "None",
    quotes, separators, line breaks, non-ASCII."""
    return pd.DataFrame({
        "id": pd.Series([f"p{i}/h100/stock" for i in range(8)], dtype="str"),
        "margin": [0.0, -0.0, 1e-05, 1.2345678901234568e20, np.nan, 0.1 + 0.2, 3.0, -2.5],
        "attempt": np.arange(8, dtype="int64"),
        "slow": [True, False] * 4,
        "runs": [None, "None", np.nan, "0.63–1.27", "", "a,b", 'say "hi"', "line\nbreak"],
        "error": pd.Series(["x\r\ny", None, "plain", "tab\there", "ünï", "trailing ", " lead", "é,\"q\"\n"],
                           dtype="str"),
    })


def plain(data: pd.DataFrame) -> str:
    return data.to_csv(index=False, lineterminator="\n")


def test_memo_writes_what_to_csv_writes_and_renders_only_changed_rows(tmp_path: Path) -> None:
    data = frame()
    path = tmp_path / "rows.arrow"
    memo = RowMemo(path)
    assert memo.to_csv("cells.csv", data) == plain(data)
    assert memo.rendered == len(data)
    memo.save()

    changed = data.copy()
    changed.loc[2, "margin"] = 1e-06  # one number
    changed.loc[5, "runs"] = None  # a text that goes missing
    changed = pd.concat([changed, changed.iloc[[0]].assign(id="p9/a100/stock")], ignore_index=True)  # a new row
    again = RowMemo(path)
    assert again.to_csv("cells.csv", changed) == plain(changed)
    assert again.rendered == 3, "rows that did not change were rendered again"
    assert again.to_csv("cells.csv", changed.iloc[::-1]) == plain(changed.iloc[::-1])  # any order, same rows
    assert RowMemo(path).to_csv("matrix.csv", changed.iloc[:0]) == plain(changed.iloc[:0])  # header only


def test_texts_rendered_since_the_base_go_into_a_delta_until_it_outgrows_the_base(tmp_path: Path,
                                                                                  monkeypatch) -> None:
    from orchestrator.collect import row_memo

    data = frame()
    path = tmp_path / "rows.arrow"
    first = RowMemo(path)
    first.to_csv("cells.csv", data)
    first.save()
    base = path.read_bytes()
    monkeypatch.setattr(row_memo, "REWRITE_SHARE", 1.0)
    for step in range(3):  # each collect changes one more row: its text joins the delta, the base stays
        data.loc[step, "margin"] = 100.0 + step
        memo = RowMemo(path)
        assert memo.to_csv("cells.csv", data) == plain(data)
        assert memo.rendered == 1, f"collect {step}: texts of the delta or the base were rendered again"
        memo.save()
        assert path.read_bytes() == base and (tmp_path / row_memo.DELTA_FILE).exists()
    monkeypatch.setattr(row_memo, "REWRITE_SHARE", 0.25)
    memo = RowMemo(path)
    assert memo.to_csv("cells.csv", data) == plain(data) and memo.rendered == 0
    memo.save()  # 3 of 8 texts in the delta (over a quarter), 3 no longer used: one new base with the 8
    assert not (tmp_path / row_memo.DELTA_FILE).exists() and path.read_bytes() != base
    again = RowMemo(path)
    assert sum(map(len, again.known.values())) == len(data) and again.to_csv("cells.csv", data) == plain(data)
    assert again.rendered == 0


def test_keys_tell_apart_what_is_written_differently() -> None:
    keys = np.array(row_keys(pd.DataFrame({"a": [0.0, -0.0], "b": ["x", "x"]})))
    assert keys[0] != keys[1]
    keys = row_keys(pd.DataFrame({"a": [None, "None", "nan", ""]}, dtype=object))  # written: "", None, nan, ""
    assert len(set(keys)) == 4, "a missing value and a text that spells it share a key"
    assert row_keys(frame()) == row_keys(frame())


def test_a_row_holding_the_separator_falls_back_to_to_csv() -> None:
    data = pd.DataFrame({"error": ["fine", "record\x1eseparator", "end\x1e\nof row"]})
    assert RowMemo().to_csv("cells.csv", data) == plain(data)


def test_a_broken_memo_file_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "rows.arrow"
    path.write_bytes(b"not an arrow file")
    memo = RowMemo(path)
    assert memo.to_csv("cells.csv", frame()) == plain(frame())
    assert memo.rendered == len(frame())


def test_a_collect_through_the_memo_equals_one_without_it_after_every_kind_of_change(tmp_path: Path) -> None:
    """Outputs rendered with the last collect's memo (only changed rows and policies rendered again) are the
    bytes of a render from nothing, after edits that change a matrix row, only a cell (a failure moving to
    another build: same matrix row, other build note), a GPU's cells, and the policy set."""
    out = tmp_path / "out"
    oom, serialize, autocast = SEED_MESSAGES["3"], SEED_MESSAGES["7"], SEED_MESSAGES["8"]
    fix785, fix925 = {"fixes": ["pytorch/pytorch#202785"]}, {"fixes": ["pytorch/pytorch#202925"]}
    for i in range(5):
        for gpu in ("h100", "a100"):
            passed(out, f"p{i}/{gpu}/pr202785", diff=0.01 * (i + 1), **fix785)
            put(out, f"p{i}/{gpu}/stock", "failed", failed_step="save", error=serialize)
    for gpu in ("h100", "a100"):  # p9: all fail, 3 decides, 7 only on pr202785 ("and 7 on torch pr202785")
        put(out, f"p9/{gpu}/stock", "failed", failed_step="compile-model", error=oom)
        put(out, f"p9/{gpu}/pr202785", "failed", failed_step="save", error=serialize, **fix785)
        put(out, f"p9/{gpu}/pr202925", "failed", failed_step="compile-model", error=oom, **fix925)
    memo_path = tmp_path / "rows.arrow"
    settings = settings_from(compose_config([f"out_dir={out}"]), [])

    def render(memo: RowMemo) -> dict[str, str]:
        cells, history = load_indexed(out)
        return tables(cells, history, settings, memo=memo).outputs

    first = RowMemo(memo_path)
    assert render(first) == render(RowMemo())
    first.save()

    put(out, "p9/h100/pr202785", "failed", failed_step="compile-model", error=oom, **fix785)  # 7 moves
    put(out, "p9/h100/pr202925", "failed", failed_step="save", error=serialize, **fix925)
    put(out, "p1/a100/stock", "failed", failed_step="reload", error=autocast)  # another failure id
    passed(out, "p2/h100/stock", diff=0.07)  # now passes on stock, at its limit
    shutil.rmtree(out / "cells" / "p3" / "a100")  # a GPU's cells gone
    passed(out, "p7/h100/stock")  # a new policy
    warm = RowMemo(memo_path)
    fresh = RowMemo()
    warm_outputs, fresh_outputs = render(warm), render(fresh)
    for name in fresh_outputs:
        assert warm_outputs[name] == fresh_outputs[name], f"{name} differs between the memo and a render from nothing"
    assert "p9: 3, and 7 on torch pr202785, pr202925." in fresh_outputs["matrix.md"]
    assert 0 < warm.rendered < fresh.rendered / 2, (warm.rendered, fresh.rendered)
