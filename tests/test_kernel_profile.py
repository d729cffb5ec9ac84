"""The kernel breakdown of a cell whose exported program is slower than eager (issue 47 item 3), on the CPU lane.

The unit tests run kernel_profile.py's aggregation and torch.profiler for real on small torch calls. The sweep
runs the real CPU exporter on make_random's gaussian_actor, its exported side slowed by a sleep in each call
(tests/standin/slower_exporter.py), through the job, into record.json, `collect`'s report.html and `show`; once
with a profiler that raises and once with one that kills the process: the verdict stays what the check said.
"""

from __future__ import annotations

import json
import re
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from orchestrator.config import compose_config, to_plain
from orchestrator.job.logparse import parse_log
from orchestrator.record import kernels as kernel_text

from .conftest import ROOT, cli, record, write

torch = pytest.importorskip("torch")
sys.path.insert(0, str(ROOT / "orchestrator" / "exporters"))
import kernel_profile  # noqa: E402

PATTERNS = to_plain(compose_config([]).cfg.parse)
SLOWER = ROOT / "tests" / "standin" / "slower_exporter.py"


def test_aggregate_gives_calls_per_run_ms_per_call_and_share() -> None:
    rows = [("triton_tem_fused_convolution_0", 3000.0)] * 20 + [("triton_mm", 500.0)] * 8 \
        + [(f"small_{i}", 10.0) for i in range(12)]  # 2 runs: 10 convolutions and 4 matmuls a run
    found = kernel_profile.aggregate(rows, runs=2)
    assert found["runs"] == 2 and found["distinct"] == 14 and len(found["top"]) == kernel_profile.TOP == 10
    total = 20 * 3000 + 8 * 500 + 12 * 10
    assert found["total_ms"] == pytest.approx(total / 1e3 / 2)
    first, second = found["top"][:2]
    assert first == {"name": "triton_tem_fused_convolution_0", "calls": 10, "ms_per_call": 3.0,
                     "share": round(60000 / total, 4)}
    assert second["name"] == "triton_mm" and second["calls"] == 4 and second["ms_per_call"] == 0.5
    assert found["top"][2]["calls"] == 0.5  # once in two runs


def test_profiled_only_where_slower_or_asked_and_within_the_budget() -> None:
    assert kernel_profile.reason(0.45, forced=False) == "exported slower than eager (0.45×)"
    assert kernel_profile.reason(3.8, forced=False) is None and kernel_profile.reason(None, forced=False) is None
    assert kernel_profile.reason(3.8, forced=True) == "asked (--kernels)"
    assert kernel_profile.runs_for(1.0) == kernel_profile.RUNS
    assert kernel_profile.runs_for(4000.0) == 2 and kernel_profile.runs_for(60_000.0) == 1


def test_cpu_profile_names_the_operators_and_what_ran_outside_them() -> None:
    a, b = torch.randn(256, 256), torch.randn(256, 256)

    def run():
        for _ in range(3):
            torch.mm(a, b)
        sum(range(20000))  # Python, in no torch operator

    found = kernel_profile.profile_side(run, 2, "cpu", lambda: None, kernel_profile.OUTSIDE["eager"])
    by_name = {row["name"]: row for row in found["top"]}
    assert by_name["aten::mm"]["calls"] == 3 and by_name["aten::mm"]["ms_per_call"] > 0
    assert kernel_profile.OUTSIDE["eager"] in by_name
    assert 0.99 <= sum(row["share"] for row in found["top"]) <= 1.0001  # every operator fits in the top 10 here
    assert found["runs"] == 2 and found["wall_ms"] > 0


def test_a_profiler_that_raises_leaves_its_reason_and_raises_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")

    monkeypatch.setattr(kernel_profile, "profile_side", broken)
    found = kernel_profile.breakdown({"eager": (lambda: None, 1.0), "exported": "not profiled: resumed"}, "gpu",
                                     "exported slower than eager (0.50×)")
    assert found["eager"] == {"error": "the profiler failed: RuntimeError: CUPTI_ERROR_NOT_INITIALIZED"}
    assert found["exported"] == {"error": "not profiled: resumed"} and found["unit"] == "gpu"


def test_the_log_line_reaches_the_record_field_and_one_line_for_show() -> None:
    kernels = {"why": "exported slower than eager (0.45×)", "unit": "gpu", "measure": "GPU time",
               "exported": {"runs": 5, "total_ms": 10.0, "distinct": 40, "wall_ms": 11.0,
                            "top": [{"name": "triton_tem_fused_convolution_0", "calls": 1, "ms_per_call": 3.0,
                                     "share": 0.3}]},
               "eager": {"error": "not profiled: this attempt resumed from saved programs"}}
    found = parse_log("Exported policy timing: eager 4.5 ms, exported 10.0 ms (median of 100 runs)\n"
                      f"Exported policy kernels: {json.dumps(kernels)}\n", PATTERNS)
    assert found["kernels"] == kernels
    assert kernel_text.short_line(kernels) == (
        "exported slower than eager (0.45×); GPU time: exported 10.000 ms/run, top triton_tem_fused_convolution_0 "
        "3.000 ms x 1/run (30%); eager: not profiled: this attempt resumed from saved programs")
    assert kernel_text.short_line(None) is None and kernel_text.short_line("{not json").startswith("unreadable")


# The sweep ---------------------------------------------------------------------------------------------------
CELLS = {"gaussian_actor": None, "ga_raise": "raise", "ga_crash": "crash"}
OVERRIDES = ["matrix=smoke", f"matrix.policies=[{','.join(CELLS)}]", "exporter=slower_cpu"]


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(config dir, out_dir): the three cells swept for real (one make_random checkpoint) and collected."""
    conf, out = tmp_path_factory.mktemp("conf"), tmp_path_factory.mktemp("kernels")
    write(conf / "exporter" / "slower_cpu.yaml", json.dumps({"command": [
        "{python}", str(SLOWER), "--policy.path={ckpt}", "--output_dir={out}", "--tolerance={tolerance}",
        "--runs=5", "--warmups=3"]}))
    gaussian = (ROOT / "conf" / "policy" / "gaussian_actor.yaml").read_text()
    for name, fault in CELLS.items():
        if fault:
            # --kernels: profiled whatever this loaded machine's timing says (the slow cell shows the default)
            write(conf / "policy" / f"{name}.yaml", gaussian.replace("env: {}", f"env: {{KERNELS_FAULT: {fault}}}")
                  .replace("export_args: []", "export_args: [--kernels]"))
    args = ["--config-dir", str(conf), *OVERRIDES, f"out_dir={out}"]
    cli("sweep", *args, f"ckpt_dir={out / 'ckpts'}", timeout=900)
    cli("collect", *args)
    return conf, out


@pytest.fixture
def swept(sweep: tuple[Path, Path]) -> Path:
    return sweep[1]


def test_a_slower_program_gets_both_sides_top_kernels_in_its_record(swept: Path) -> None:
    rec = record(swept, "gaussian_actor/cpu/local")
    assert rec["status"] == "passed" and rec["speedup"] < 1, rec["log_tail"]
    kernels = rec["kernels"]
    assert kernels["why"] == f"exported slower than eager ({rec['speedup']:.2f}×)"
    assert kernels["unit"] == "cpu" and "CPU self time" in kernels["measure"] and "no GPU figure" in kernels["measure"]
    for side in ("eager", "exported"):
        data = kernels[side]
        assert 1 <= data["runs"] <= kernel_profile.RUNS and data["total_ms"] > 0 and data["wall_ms"] > 0
        assert 1 <= len(data["top"]) <= 10 and sum(row["share"] for row in data["top"]) <= 1.0001
        for row in data["top"]:
            assert set(row) == {"name", "calls", "ms_per_call", "share"} and row["ms_per_call"] >= 0
        shares = [row["share"] for row in data["top"]]
        assert shares == sorted(shares, reverse=True)
    assert any(row["name"].startswith("aten::") for row in kernels["eager"]["top"])
    # the XNNPACK kernels run inside the ExecuTorch runtime, which torch.profiler cannot see: one labelled row
    assert kernels["exported"]["top"][0]["name"] == kernel_profile.OUTSIDE["exported"]
    bundle = json.loads((swept / "cells/gaussian_actor/cpu/local/bundle/export_info.json").read_text())
    assert bundle["kernels"] == kernels and "kernels" in rec["steps_s"]


def test_a_profiler_that_fails_leaves_the_verdict_unchanged(swept: Path) -> None:
    slow = record(swept, "gaussian_actor/cpu/local")
    for cell, error in (("ga_raise/cpu/local", "the profiler failed: RuntimeError: CUPTI_ERROR_NOT_INITIALIZED"),
                        ("ga_crash/cpu/local", None)):
        rec = record(swept, cell)
        assert (rec["status"], rec["failed_step"], rec["error"]) == ("passed", None, None), rec["log_tail"]
        assert rec["max_diff"] == slow["max_diff"] and rec["speedup"] < 1
        if error:
            assert rec["kernels"]["eager"] == {"error": error} and rec["kernels"]["exported"] == {"error": error}
        else:  # died by SIGSEGV in the kernels step, after its check passed and both sides were timed
            assert rec["kernels"] == {"error": "the exporter ended while profiling: the exporter was killed by "
                                               "SIGSEGV"}
    matrix = (swept / "matrix.md").read_text()
    assert re.search(r"\| ga_crash \| ✅", matrix) and re.search(r"\| ga_raise \| ✅", matrix), matrix


def test_report_html_shows_the_breakdown(swept: Path) -> None:
    html = (swept / "report.html").read_text()
    rec = record(swept, "gaussian_actor/cpu/local")
    assert '<h2>Kernel breakdown</h2>' in html
    section = html[html.index('id="kernels-gaussian_actor/cpu/local"'):html.index('<h2>Cells</h2>')]
    parser = _Text()
    parser.feed(section)
    text = " ".join(parser.parts)
    assert f"exported slower than eager ({rec['speedup']:.2f}×)" in text
    for side in ("exported", "eager"):
        data = rec["kernels"][side]
        assert f"{side}: {data['total_ms']:.3f} ms of CPU time per run" in text
        for row in data["top"]:
            assert row["name"] in text and kernel_text.percent(row["share"]) in text
    assert "share of CPU time" in text and "GPU time" not in text.replace("no GPU figure", "")
    assert 'href="#kernels-gaussian_actor/cpu/local"' in html  # its speedup in the cells table links here
    assert "the profiler failed: RuntimeError" in html and "the exporter ended while profiling" in html


def test_show_has_one_line_of_it(sweep: tuple[Path, Path]) -> None:
    conf, out = sweep
    rec = record(out, "gaussian_actor/cpu/local")
    shown = yaml.safe_load(cli("show", "gaussian_actor/cpu/local", "--config-dir", str(conf), *OVERRIDES,
                               f"out_dir={out}").stdout)
    top = {side: rec["kernels"][side]["top"][0] for side in ("exported", "eager")}
    assert shown["recorded"]["kernels"] == (
        f"exported slower than eager ({rec['speedup']:.2f}×); CPU time: "
        + "; ".join(f"{side} {rec['kernels'][side]['total_ms']:.3f} ms/run, top {top[side]['name']} "
                    f"{top[side]['ms_per_call']:.3f} ms x {top[side]['calls']}/run "
                    f"({kernel_text.percent(top[side]['share'])})" for side in ("exported", "eager")))
    crashed = yaml.safe_load(cli("show", "ga_crash/cpu/local", "--config-dir", str(conf), *OVERRIDES,
                                 f"out_dir={out}").stdout)
    assert crashed["recorded"]["kernels"].startswith("the exporter ended while profiling: ")
