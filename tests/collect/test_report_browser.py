"""report.html in a real headless Chromium (Debian's package), driven by playwright: it loads without errors,
its links resolve inside the folder, the cells table sorts and filters with no network, its symbols are
matrix.csv's, each with its word in a coloured badge (this Chromium has no emoji font, so the word is what reads),
and record text shows as text (never as markup or script)."""

from __future__ import annotations

import csv
import io
import shutil
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.config.spec import cell_dir
from orchestrator.record import Record, write_record

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
playwright = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (Debian: apt-get install chromium)")
EVIL = "RuntimeError: <script>window.pwned = 1</script> | pipe <b>bold</b>"


def put(out: Path, cell: str, status: str, log: str | None = "export", **fields) -> None:
    policy, gpu, torch = cell.split("/")
    logs = {"export": "export.log", "make_random": "make_random.log"} if log else {}
    write_record(cell_dir(out, cell), Record(cell=cell, policy=policy, gpu=gpu, torch=torch, exporter="x",
                                             status=status, logs=logs, ended_at="2026-12-03T12:00:00+00:00",
                                             **fields))
    if log:
        (cell_dir(out, cell) / f"{log}.log").write_text("the log\n")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report")
    put(out, "act/h100/stock", "passed", max_diff=0.01, tolerance=0.2, margin=0.05, eager_ms=73.0, exported_ms=91.25)
    put(out, "act/a100/stock", "passed", max_diff=0.15, tolerance=0.2, margin=0.75)
    put(out, "wall_x/h100/stock", "failed", failed_step="save",
        error="SerializeError: Unsupported getattr attribute function_const_func_spec0 with type TreeSpec")
    put(out, "wall_x/h100/pr202785", "passed", max_diff=0.022, tolerance=0.075, margin=0.022 / 0.075)
    put(out, "dm05/h100/stock", "failed", failed_step="trace", error=EVIL)
    put(out, "xvla/h100/stock", "failed", log="make_random", failed_step="make_random",
        error="ValueError: vision_config is required")
    assert main(["collect", f"out_dir={out}", "matrix=tracking", "matrix.policies=[act,wall_x,dm05,xvla]",
                 "matrix.torch=[stock,pr202785]"]) == 0
    return out


@pytest.fixture(scope="module")
def page(report: Path):
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        context = browser.new_context(offline=True)  # no network: the page must need none
        page = context.new_page()
        page.problems = []
        page.on("console", lambda m: page.problems.append(m.text) if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: page.problems.append(str(e)))
        page.goto((report / "report.html").as_uri())
        yield page
        browser.close()


def visible_cells(page) -> list[list[str]]:
    return [[td.inner_text() for td in row.query_selector_all("td")]
            for row in page.query_selector_all("#cells tbody tr") if row.is_visible()]


def test_it_loads_without_errors_and_every_link_is_a_file_in_the_folder(page, report: Path) -> None:
    assert page.problems == []
    hrefs = [a.get_attribute("href") for a in page.query_selector_all("a[href]")]
    assert hrefs and all(not h.startswith(("/", "http:", "https:", "file:")) for h in hrefs)
    assert all((report / h).is_file() for h in hrefs), [h for h in hrefs if not (report / h).is_file()]
    assert "xvla/h100/stock/make_random.log" in " ".join(hrefs)  # the log of the step it stopped in


def test_the_matrix_shows_matrix_csv_symbols(page, report: Path) -> None:
    expected = {(r["policy"], r["gpu"]): r["symbol"]
                for r in csv.DictReader(io.StringIO((report / "matrix.csv").read_text()))}
    headers = [th.inner_text() for th in page.query_selector_all("table:first-of-type tr:first-child th")][1:]
    gpus = {"H100 (sm_90)": "h100", "A100 80GB (sm_80)": "a100"}
    seen = {}
    for row in page.query_selector_all("table:first-of-type tr")[1:]:
        policy = row.query_selector("th").inner_text()
        for header, td in zip(headers, row.query_selector_all("td"), strict=True):
            text = td.inner_text().strip()
            seen[(policy, gpus[header])] = text.split()[0] if text else "—"
    assert seen == expected


def test_the_cells_table_sorts_and_filters(page) -> None:
    page.click("#cells thead th:text-is('margin')")
    margins = [float(c[5]) for c in visible_cells(page) if c[5]]
    assert margins == sorted(margins) and len(margins) == 3
    page.click("#cells thead th:text-is('margin')")
    margins = [float(c[5]) for c in visible_cells(page) if c[5]]
    assert margins == sorted(margins, reverse=True)
    page.select_option("#status-filter", "failed")
    assert sorted(c[0] for c in visible_cells(page)) == ["dm05/h100/stock", "wall_x/h100/stock", "xvla/h100/stock"]
    page.select_option("#status-filter", "")
    page.select_option("#failure-filter", "7")
    assert [c[0] for c in visible_cells(page)] == ["wall_x/h100/stock"]
    page.select_option("#failure-filter", "")
    assert len(visible_cells(page)) == 6


def test_record_text_shows_as_text(page) -> None:
    assert page.evaluate("window.pwned") is None  # the error's <script> never ran
    errors = [c[-1] for c in visible_cells(page)]
    assert EVIL in errors
    assert page.query_selector("#cells b") is None  # <b>bold</b> stayed text


def test_legend_date_and_builds_are_there(page) -> None:
    text = page.inner_text("body")
    assert "✅ pass passes on stock torch" in text and "the newest ended 2026-12-03T12:00:00+00:00" in text
    assert "Torch builds" in text


WORDS = {"✅": "pass", "🟡": "patched", "❌": "fail", "⏸": "undecided", "⏳": "in progress", "—": "no record"}


def test_every_symbol_has_its_word_in_a_coloured_badge(page, report: Path) -> None:
    """issue 44 item 4: without an emoji font (this Chromium has none) ✅/❌ are empty boxes; each symbol's word
    shows beside it, in a badge coloured by what it says, the emoji hidden from screen readers; the legend's
    Markdown is HTML."""
    expected = {(r["policy"], r["gpu"]): r["symbol"]
                for r in csv.DictReader(io.StringIO((report / "matrix.csv").read_text()))}
    badges = page.query_selector_all("table:first-of-type td .badge")
    assert len(badges) == len(expected) == 8
    shown = sorted((b.inner_text().split(maxsplit=1)[1], b.query_selector(".sym").inner_text()) for b in badges)
    assert shown == sorted((WORDS[s], s) for s in expected.values())
    assert all(b.is_visible() and b.query_selector(".sym").get_attribute("aria-hidden") == "true" for b in badges)
    colour = {b.inner_text().split(maxsplit=1)[1]: b.evaluate("e => getComputedStyle(e).backgroundColor")
              for b in badges}
    assert len(set(colour.values())) == len(colour) == 4  # pass, patched, fail, no record: each its own colour
    legend = page.query_selector("p.legend")
    assert [b.inner_text() for b in legend.query_selector_all(".badge")] == [
        "✅ pass", "🟡 patched", "❌ fail", "⏸ undecided", "⏳ in progress", "— no record", "⚠️ unreadable"]
    assert "*" not in legend.inner_text() and [e.inner_text() for e in legend.query_selector_all("em")] == \
        ["slow", "at limit"]


def test_cells_show_eager_ms_a_coloured_status_and_their_files(page) -> None:
    header = [th.inner_text() for th in page.query_selector_all("#cells thead th")]
    rows = {row.query_selector("td").inner_text(): row for row in page.query_selector_all("#cells tbody tr")}
    act = [td.inner_text() for td in rows["act/h100/stock"].query_selector_all("td")]
    assert (act[header.index("eager ms")], act[header.index("exported ms")]) == ("73.0", "91.2")
    status = {cell: row.query_selector_all("td")[1].evaluate("e => getComputedStyle(e).backgroundColor")
              for cell, row in rows.items()}
    assert status["act/h100/stock"] == status["act/a100/stock"] != status["dm05/h100/stock"] == \
        status["wall_x/h100/stock"] != status["wall_x/h100/pr202785"] != status["act/h100/stock"]
    files = {cell: [a.inner_text() for a in row.query_selector_all("td.files a")] for cell, row in rows.items()}
    assert files["act/h100/stock"] == ["record.json", "export.log"]  # its record names make_random.log, not there
    assert files["xvla/h100/stock"] == ["record.json", "make_random.log"]
    assert rows["xvla/h100/stock"].query_selector("td.files a").get_attribute("href") == \
        "cells/xvla/h100/stock/record.json"
