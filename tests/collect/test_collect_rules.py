"""Collect's rules on hand-written records (the real Record schema): in-progress cells, statuses, stock builds,
the at-limit mark, the failure catalog, text safety, --into, --check and changes.md."""

from __future__ import annotations

import csv
import io
import random
import re
import shlex
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from orchestrator.cli import main
from orchestrator.collect import OUTPUTS
from orchestrator.collect.catalog import load_catalog
from orchestrator.collect.failure_summary import build_note
from orchestrator.collect.render_md import md_text
from orchestrator.collect.rules import join_ids, short_fixes
from orchestrator.config import PACKAGE_CONF
from orchestrator.config.selection import select
from orchestrator.config.spec import cell_dir
from orchestrator.record import Record, read_record, write_record

from ..conftest import ROOT, write

ROW7 = "SerializeError: Unsupported getattr attribute function_const_func_spec0 with type TreeSpec"
SEED_MESSAGES = {
    "2": "torch._inductor.exc.InductorError: LoweringException: NoValidChoicesError: No choices to select. Provided "
         "reason: No choices exist for backend. please consider adding ATEN into max_autotune_gemm_backends config "
         "(defined in torch/_inductor/config.py) to allow at least one choice.",
    "3": "torch._inductor.exc.InductorError: RuntimeError: Failed to run autotuning code block: CUDA out of memory. "
         "Tried to allocate 2.98 GiB. GPU 0 has a total capacity of 79.25 GiB of which 1.50 GiB is free. Including "
         "non-PyTorch memory, this process has 77.74 GiB memory in use. Of the allocated memory 75.79 GiB is "
         "allocated by PyTorch, and 306.98 MiB is reserved by PyTorch but unallocated.",
    "4": "RuntimeError: Method forward missing fallback kernels (1 total):\n  - aoti_torch_cuda_scatter_value_out\n"
         "Please add them to the AOTI backend.",
    "5": "RuntimeError: The exported policy does not reproduce its test case (9.53e-02 > 0.075). Export it again on "
         "this device.",
    "6": "ValueError: Exporting LingBot-VLA v2 needs a vision_grid (see `predict_action_chunk`).",
    "7": ROW7,
    "8": "Node.meta wrap_with_autocast_3 is missing val field",
}
NASTY = ('RuntimeError: bad | pipe `tick` <b>bold</b> & *star* [link](x) $x$ say "hi" ~~strike~~ _under_ '
         '<!-- export-matrix:end -->\r\nsecond | line\n')


def put(out: Path, cell: str, status: str = "passed", **fields) -> None:
    """The cell's record, replacing the one it had (write_record keeps a settled record of the same attempt)."""
    policy, gpu, torch = cell.split("/")
    fields.setdefault("exporter", "lerobot_cuda")
    (cell_dir(out, cell) / "record.json").unlink(missing_ok=True)
    write_record(cell_dir(out, cell), Record(cell=cell, policy=policy, gpu=gpu, torch=torch, status=status, **fields))


def passed(out: Path, cell: str, diff: float = 0.022, tol: float = 0.075, **fields) -> None:
    put(out, cell, max_diff=diff, tolerance=tol, margin=diff / tol, logs={"export": "export.log"}, **fields)


def collect(out: Path, *args: str, matrix: str = "matrix.policies=[act]") -> int:
    return main(["collect", f"out_dir={out}", "matrix=tracking", matrix, "matrix.torch=[stock,pr202785]", *args])


def rows(out: Path) -> dict[tuple[str, str], dict[str, str]]:
    return {(r["policy"], r["gpu"]): r for r in csv.DictReader(io.StringIO((out / "matrix.csv").read_text()))}


def table_line(out: Path, policy: str) -> str:
    return next(line for line in (out / "matrix.md").read_text().splitlines() if line.startswith(f"| {policy} |"))


def test_in_progress_cells_are_not_failures(tmp_path: Path) -> None:
    put(tmp_path, "act/h100/stock", "running")
    passed(tmp_path, "act/h100/pr202785")
    put(tmp_path, "act/a100/stock", "failed", failed_step="save", error=ROW7)
    put(tmp_path, "act/a100/pr202785", "pending")
    put(tmp_path, "diffusion/h100/stock", "pending")
    passed(tmp_path, "diffusion/a100/stock")
    put(tmp_path, "diffusion/a100/pr202785", "running")
    assert collect(tmp_path, matrix="matrix.policies=[act,diffusion]") == 0
    got = rows(tmp_path)
    assert (got[("act", "h100")]["symbol"], got[("act", "h100")]["in_progress"]) == ("🟡", "True")
    assert (got[("act", "a100")]["symbol"], got[("act", "a100")]["status"], got[("act", "a100")]["failures"]) == \
        ("⏳", "running", "7")
    assert (got[("diffusion", "h100")]["symbol"], got[("diffusion", "a100")]["symbol"]) == ("⏳", "✅")
    assert got[("diffusion", "a100")]["in_progress"] == "False"
    assert table_line(tmp_path, "act") == "| act | 🟡 #202785 · 0.022 / 0.075 · ⏳ | ⏳ running · 7 |"
    assert table_line(tmp_path, "diffusion") == "| diffusion | ⏳ running | ✅ 0.022 / 0.075 |"


@pytest.mark.parametrize("status", ["failed", "oom"])
def test_a_failing_verdict_fails(tmp_path: Path, status: str) -> None:
    put(tmp_path, "pi0/h100/stock", status, error=f"it went {status}")
    put(tmp_path, "pi0/h100/pr202785", status, error=ROW7)
    assert collect(tmp_path, matrix="matrix.policies=[pi0]") == 0
    row = rows(tmp_path)[("pi0", "h100")]
    assert (row["symbol"], row["status"], row["failures"]) == ("❌", "fail", "7 new")
    assert row["new_error"] == f"it went {status}"
    assert f"- it went {status} (pi0/h100/stock)" in (tmp_path / "matrix.md").read_text()


@pytest.mark.parametrize(("status", "step", "error", "reason"), [
    ("timeout", "compile-model", "the export ran past timeout_min=9", "timeout 9 min"),
    ("cancelled", None, "the job received SIGINT", "cancelled (SIGINT)"),
    ("killed", "export", "the exporter was killed by SIGKILL", "killed SIGKILL"),
    ("error", "env", "uv pip failed: no index reachable", "env build failed"),
    ("error", "setup", "[setup] FileNotFoundError: /opt/torch215/bin/python", "setup error"),
])
def test_an_outcome_that_decides_nothing_is_undecided(tmp_path: Path, status: str, step: str | None, error: str,
                                                      reason: str) -> None:
    put(tmp_path, "pi05/h100/stock", status, failed_step=step, error=error)
    put(tmp_path, "pi05/h100/pr202785", status, failed_step=step, error=ROW7)  # even a known error line
    assert collect(tmp_path, matrix="matrix.policies=[pi05]") == 0
    row = rows(tmp_path)[("pi05", "h100")]
    assert (row["symbol"], row["status"], row["reason"], row["failures"]) == ("⏸", "undecided", reason, "")
    text = (tmp_path / "matrix.md").read_text()
    assert table_line(tmp_path, "pi05") == f"| pi05 | ⏸ {reason} | — |"
    assert "New failures" not in text and "❌" not in text.split("\n\n")[0]
    assert f"- pi05/h100/stock: {reason}" in text
    retry = re.search(r"Retry them: `([^`]*)`", text).group(1)
    assert retry == (f"export-matrix rerun pi05/h100/pr202785 pi05/h100/stock out_dir={tmp_path} matrix=tracking "
                     "'matrix.policies=[pi05]' 'matrix.torch=[stock,pr202785]'")  # lerobot_cuda: the H100's own
    argv = shlex.split(retry)[2:]  # what rerun selects with these ids and overrides: the cells, their exporter
    overrides = [a for a in argv if "=" in a]
    specs = select(tmp_path, [a for a in argv if "=" not in a], False, False, overrides, None)
    assert [(s.id, s.exporter) for s in specs] == [("pi05/h100/pr202785", "lerobot_cuda"),
                                                   ("pi05/h100/stock", "lerobot_cuda")]


def test_an_env_failure_keeps_its_cause_and_the_retry_command_pastes_anywhere(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """issue 44 item 10: `⏸ env build failed` keeps the record's cause in the undecided list (one short line, no
    path of this host); the Retry command has no absolute out_dir (left out where it is the default, relative to
    the current folder inside it) and no exporter= where it is the cells' default exporter."""
    monkeypatch.chdir(tmp_path)
    dns = ("uv pip failed: error: Failed to fetch: `https://pypi.org/simple/torch/`\n  Caused by: Could not resolve "
           "host: pypi.org (log: /home/me/envs/stock-1a2b.log)")
    matrix = ["matrix=tracking", "'matrix.policies=[pi05]'", "'matrix.torch=[stock,pr202785]'"]
    for out, given in ((tmp_path / "matrix_out", []), (tmp_path / "runs" / "dec", ["out_dir=runs/dec"])):
        put(out, "pi05/h100/stock", "error", failed_step="env", error=dns)
        put(out, "pi05/a100/stock", "error", failed_step="env", error=dns, exporter="executorch_cuda")
        assert collect(out, matrix="matrix.policies=[pi05]") == 0  # out_dir=<absolute path>
        md = (out / "matrix.md").read_text()
        assert table_line(out, "pi05") == "| pi05 | ⏸ env build failed | ⏸ env build failed |"
        assert "- pi05/h100/stock: env build failed: Could not resolve host: pypi.org\n" in md
        assert "env build failed: Could not resolve host: pypi.org</li>" in (out / "report.html").read_text()
        assert "/home/me" not in md and str(tmp_path) not in md
        retries = re.findall(r"`(export-matrix rerun [^`]*)`", md)
        assert retries == [
            " ".join(["export-matrix rerun pi05/a100/stock", *given, *matrix, "exporter=executorch_cuda"]),
            " ".join(["export-matrix rerun pi05/h100/stock", *given, *matrix])]
        for retry in retries:  # each selects its cells with the exporter they ran with, from the same folder
            argv = shlex.split(retry)[2:]
            specs = select(out, [a for a in argv if "=" not in a], False, False, [a for a in argv if "=" in a], None)
            assert [(s.id, s.exporter, s.cell_dir) for s in specs] == \
                [(c, e, (Path.cwd() / Path(given[0][8:] if given else "matrix_out") / "cells" / c).resolve())
                 for c, e in ([("pi05/a100/stock", "executorch_cuda")] if "a100" in retry
                              else [("pi05/h100/stock", "lerobot_cuda")])]


def test_an_export_no_runtime_could_run_is_undecided_a_checked_mismatch_is_not(tmp_path: Path) -> None:
    unchecked = "RuntimeError: The exported program could not be checked: this ExecuTorch runtime has no CudaBackend"
    put(tmp_path, "act/h100/stock", "failed", failed_step="check", check="none", error=unchecked)
    put(tmp_path, "act/a100/stock", "failed", failed_step="check", check="aoti", error=SEED_MESSAGES["5"])
    assert collect(tmp_path) == 0
    table = rows(tmp_path)
    assert (table[("act", "h100")]["symbol"], table[("act", "h100")]["reason"]) == ("⏸", "not checked")
    assert table[("act", "a100")]["symbol"] == "❌"


def test_a_verdict_build_decides_over_an_undecided_one(tmp_path: Path) -> None:
    """One build timed out, another failed for real: the cell is ❌ by the failure, the timeout listed apart."""
    put(tmp_path, "pi05/h100/stock", "timeout", failed_step="compile-model", error="ran past timeout_min=9")
    put(tmp_path, "pi05/h100/pr202785", "failed", failed_step="save", error=ROW7)
    assert collect(tmp_path, matrix="matrix.policies=[pi05]") == 0
    row = rows(tmp_path)[("pi05", "h100")]
    assert (row["symbol"], row["failures"], row["cell"]) == ("❌", "7", "pi05/h100/pr202785")
    assert "- pi05/h100/stock: timeout 9 min" in (tmp_path / "matrix.md").read_text()


def test_a_crash_signal_is_a_verdict(tmp_path: Path) -> None:
    put(tmp_path, "pi0/h100/stock", "killed", failed_step="export", error="the exporter was killed by SIGSEGV")
    assert collect(tmp_path, matrix="matrix.policies=[pi0]") == 0
    assert rows(tmp_path)[("pi0", "h100")]["symbol"] == "❌"


def test_a_catalog_entry_that_decides_makes_a_timeout_a_verdict(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "failures.yaml").write_text("slow_compile:\n  title: CUDA compile never ends\n  decides: true\n"
                                        "  patterns: ['autotuning \\d+ choices forever']\n")
    put(tmp_path / "out", "pi05/h100/stock", "timeout", failed_step="compile-model",
        error="the export ran past timeout_min=9", log_tail="... autotuning 4000 choices forever ...")
    put(tmp_path / "out", "pi0/h100/stock", "timeout", failed_step="compile-model",
        error="the export ran past timeout_min=9")
    assert collect(tmp_path / "out", "--config-dir", str(conf), matrix="matrix.policies=[pi0,pi05]") == 0
    got = rows(tmp_path / "out")
    assert (got[("pi05", "h100")]["symbol"], got[("pi05", "h100")]["failures"]) == ("❌", "slow_compile")
    assert got[("pi0", "h100")]["symbol"] == "⏸"


def test_a_job_that_could_not_build_its_policy_offline_is_undecided(tmp_path: Path) -> None:
    """needs_hub and missing_package (`decides: false`) say the job never reached the export: ⏸ with the id as
    its reason, listed with a rerun, never ❌ or a new failure; a compiler failure in the same record still decides."""
    hub = "OSError: We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them in " \
          "the cached files."
    put(tmp_path, "smolvla/h100/stock", "failed", failed_step="make_random", error=hub)
    put(tmp_path, "wall_x/h100/stock", "failed", failed_step="make_random",
        error="ImportError: 'qwen-vl-utils' is required but not installed. Install it with: pip install "
              "'lerobot[wallx]'")
    put(tmp_path, "pi05/h100/stock", "failed", failed_step="compile-model", error="RuntimeError: Expected bfloat16 "
        "inputs", log_tail=hub)
    put(tmp_path, "pi0/h100/stock", "timeout", failed_step="compile-model", error="the export ran past timeout_min=5")
    assert collect(tmp_path, matrix="matrix.policies=[smolvla,wall_x,pi05,pi0]") == 0
    got = rows(tmp_path)
    assert [got[(p, "h100")]["symbol"] for p in ("smolvla", "wall_x", "pi05")] == ["⏸", "⏸", "❌"]
    assert table_line(tmp_path, "smolvla").startswith("| smolvla | ⏸ needs_hub |")
    assert table_line(tmp_path, "wall_x").startswith("| wall_x | ⏸ missing_package |")
    md = (tmp_path / "matrix.md").read_text()
    assert "- smolvla/h100/stock: needs_hub" in md and "New failures" not in md
    assert "| needs_hub | The policy needs files from the Hugging Face hub" in md and "| smolvla (undecided) |" in md
    assert "- pi0/h100/stock: timeout 5 min" in md and "limit | none yet |" in md  # row 5 is not pi0's reason


def test_a_program_that_still_draws_is_undecided_one_not_one_delegate_fails(tmp_path: Path) -> None:
    """The embedded exporters' own refusals (issue 43): a traced program with a random op was never compared (⏸
    rng_in_program, listed with its rerun, never a new failure); a program the fork's export would refuse for ops
    outside its one CUDA delegate is a verdict (❌ not_one_delegate)."""
    put(tmp_path, "act/h100/stock", "failed", failed_step="trace", exporter="executorch_cuda",
        error="export_base.RandomOpInProgram: rng_in_program: aten.bernoulli at modeling_act.py:123 (method forward):"
              " the exported program still draws random numbers, so its check would compare two random draws")
    put(tmp_path, "vqbet/h100/stock", "failed", failed_step="compile-model", exporter="executorch_cuda",
        error="cuda_program.NotOneDelegate: not_one_delegate: method forward: 1 CudaBackend delegates, operators "
              "outside: aten.view_copy.default x2 (the fork's export refuses a program that is not one CUDA delegate)")
    assert collect(tmp_path, matrix="matrix.policies=[act,vqbet]") == 0
    got = rows(tmp_path)
    assert (got[("act", "h100")]["symbol"], got[("vqbet", "h100")]["symbol"]) == ("⏸", "❌")
    assert table_line(tmp_path, "act").startswith("| act | ⏸ rng_in_program |")
    md = (tmp_path / "matrix.md").read_text()
    assert "- act/h100/stock: rng_in_program" in md
    assert "| not_one_delegate | The lowered program is not one CUDA delegate" in md


def test_a_catalog_decides_field_must_be_a_bool(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "failures.yaml").write_text("x:\n  title: t\n  decides: sometimes\n  patterns: [boom]\n")
    put(tmp_path / "out", "pi0/h100/stock", "failed", error="boom")
    assert main(["collect", "--config-dir", str(conf), f"out_dir={tmp_path / 'out'}"]) == 2
    assert "failure x: decides must be true or false, not 'sometimes'" in capsys.readouterr().err


def test_stock_comes_from_the_config_then_the_record(tmp_path: Path) -> None:
    passed(tmp_path, "pi05/h100/mybuild", fixes=[])  # a build the config does not know, without fixes: stock
    put(tmp_path, "pi05/a100/stock", "failed", error=ROW7)
    passed(tmp_path, "pi05/a100/patchy", fixes=["pytorch/pytorch#1"])  # unknown build with a fix: patched
    passed(tmp_path, "xvla/h100/pr202785", fixes=[])  # the config's fixes win over the record's
    assert collect(tmp_path, matrix="matrix.policies=[pi05,xvla]") == 0
    got = rows(tmp_path)
    assert (got[("pi05", "h100")]["symbol"], got[("pi05", "h100")]["build"]) == ("✅", "mybuild")
    assert (got[("pi05", "a100")]["symbol"], got[("pi05", "a100")]["build"], got[("pi05", "a100")]["fixes"]) == \
        ("🟡", "patchy", "#1")
    assert (got[("xvla", "h100")]["symbol"], got[("xvla", "h100")]["fixes"]) == ("🟡", "#202785")
    assert got[("xvla", "a100")]["symbol"] == "—"  # the named matrix expects it; there is no record
    assert table_line(tmp_path, "xvla") == "| xvla | 🟡 #202785 · 0.022 / 0.075 | — |"


def test_at_limit_when_passing_and_its_fraction_is_configurable(tmp_path: Path) -> None:
    passed(tmp_path, "eo1/h100/stock", diff=0.069)  # 0.92 of the tolerance
    passed(tmp_path, "eo1/a100/stock", diff=0.0625)  # 0.83
    assert collect(tmp_path, matrix="matrix.policies=[eo1]") == 0
    got = rows(tmp_path)
    assert (got[("eo1", "h100")]["at_limit"], got[("eo1", "h100")]["failures"]) == ("True", "5")
    assert (got[("eo1", "a100")]["at_limit"], got[("eo1", "a100")]["failures"]) == ("False", "")
    assert table_line(tmp_path, "eo1") == "| eo1 | ✅ 0.069 / 0.075 · at limit | ✅ 0.0625 / 0.075 |"
    assert "Policy to failure: eo1 (H100): 5." in (tmp_path / "matrix.md").read_text()
    assert collect(tmp_path, "collect.at_limit=0.8", matrix="matrix.policies=[eo1]") == 0
    assert table_line(tmp_path, "eo1") == "| eo1 | ✅ 0.069 / 0.075 · at limit | ✅ 0.0625 / 0.075 · at limit |"
    assert collect(tmp_path, "collect.at_limit=0.95", matrix="matrix.policies=[eo1]") == 0
    assert rows(tmp_path)[("eo1", "h100")]["at_limit"] == "False"
    assert "Policy to failure: none." in (tmp_path / "matrix.md").read_text()


def test_slow_mark_and_its_threshold(tmp_path: Path) -> None:
    passed(tmp_path, "fineart_vla/h100/stock", speedup=0.8, eager_ms=73.0, exported_ms=91.0)
    passed(tmp_path, "fineart_vla/a100/stock", speedup=1.2)
    assert collect(tmp_path, matrix="matrix.policies=[fineart_vla]") == 0
    assert table_line(tmp_path, "fineart_vla") == "| fineart_vla | ✅ 0.022 / 0.075 · slow 0.80× | ✅ 0.022 / 0.075 |"
    assert "Policy to failure: fineart_vla (H100): 1 (slow, not failing)." in (tmp_path / "matrix.md").read_text()
    assert collect(tmp_path, "collect.slow_below=1.5", matrix="matrix.policies=[fineart_vla]") == 0
    assert table_line(tmp_path, "fineart_vla") == \
        "| fineart_vla | ✅ 0.022 / 0.075 · slow 0.80× | ✅ 0.022 / 0.075 · slow 1.20× |"


def test_a_cuda_row_describes_only_cuda_cells(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """issue 44 item 2: row 1 (the CUDA backend's Triton kernels) names only the CUDA exporters, so the CPU lane's
    slow act is listed as slow with no row; below a CPU-only table the rows no cell of it could hit are left out,
    in one line; a GPU-specific row (2: the A100) does not take an H100 cell's message."""
    cpu = {"exporter": "executorch_cpu", "diff": 1e-6, "tol": 1e-3}
    passed(tmp_path, "act/cpu/local", speedup=0.1, eager_ms=80.0, exported_ms=800.0, **cpu)
    passed(tmp_path, "diffusion/cpu/local", speedup=3.2, **cpu)
    assert main(["collect", f"out_dir={tmp_path}"]) == 0  # the smoke matrix: the CPU lane
    md = (tmp_path / "matrix.md").read_text()
    assert table_line(tmp_path, "act") == "| act | ✅ 1e-06 / 0.001 · slow 0.10× |"
    assert "Policy to failure: none." in md
    assert {r["id"]: r["failures"] for r in csv.DictReader(io.StringIO((tmp_path / "cells.csv").read_text()))} == \
        {"act/cpu/local": "", "diffusion/cpu/local": ""}
    shown = re.findall(r"^\| ([\w]+) \| .* \| none yet \|", md, re.M)
    assert shown == ["6", "7", "8", "data_dependent", "missing_package", "needs_hub", "rng_in_program"]
    assert ("Not shown: 11 catalog rows (1, 2, 3, 4, 5, conv_no_choice, detach_copy, multinomial, not_one_delegate, "
            "sdpa_bf16_only, split_copy) that describe only other exporters or GPUs than this table's "
            "(executorch_cpu on CPU; failures.yaml's exporters and gpus).") in md.splitlines()
    # the same slowness through a CUDA exporter is row 1; row 2's message on the H100 is no row 2
    passed(tmp_path, "act/h100/stock", speedup=0.5)
    put(tmp_path, "pi0/h100/stock", "failed", error=SEED_MESSAGES["2"])
    put(tmp_path, "pi0/a100/stock", "failed", error=SEED_MESSAGES["2"])
    assert main(["collect", f"out_dir={tmp_path}", "matrix=tracking", "matrix.policies=[act,pi0]",
                 "matrix.torch=[stock]", "matrix.gpus=[h100,a100,cpu]", "matrix.include=[{gpu: cpu, torch: local}]"]
                ) == 0
    got = rows(tmp_path)
    assert [got[cell]["failures"] for cell in (("act", "cpu"), ("act", "h100"), ("pi0", "h100"), ("pi0", "a100"))] \
        == ["", "1", "new", "2"]
    assert "Not shown" not in (tmp_path / "matrix.md").read_text()


def test_a_catalog_entrys_exporters_and_gpus_are_checked(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    passed(tmp_path / "out", "act/h100/stock", speedup=0.5)
    write(tmp_path / "conf" / "failures.yaml", "1: {exporters: lerobot_cuda, gpus: [h10]}\n")
    assert main(["collect", "--config-dir", str(tmp_path / "conf"), f"out_dir={tmp_path / 'out'}"]) == 0
    err = capsys.readouterr().err
    assert ("export-matrix: warning: failures.yaml: failure 1 names gpu h10, which no config has (valid: a100, cpu, "
            "h100, h200): no cell of it can hit that entry\n") in err
    assert rows(tmp_path / "out")[("act", "h100")]["failures"] == ""
    write(tmp_path / "conf" / "failures.yaml", "1: {exporters: null, gpus: [h100]}\n")  # null: any exporter
    assert main(["collect", "--config-dir", str(tmp_path / "conf"), f"out_dir={tmp_path / 'out'}"]) == 0
    assert rows(tmp_path / "out")[("act", "h100")]["failures"] == "1"
    write(tmp_path / "conf" / "failures.yaml", "1: {exporters: [], gpus: [h100]}\n")
    assert main(["collect", "--config-dir", str(tmp_path / "conf"), f"out_dir={tmp_path / 'out'}"]) == 2
    assert capsys.readouterr().err.strip().endswith("failure 1: exporters must be a non-empty list of names, not []")


def test_catalog_matches_the_seed_messages_with_other_numbers() -> None:
    catalog = load_catalog([PACKAGE_CONF])
    assert catalog.ids == ["1", "2", "3", "4", "5", "6", "7", "8", "conv_no_choice", "data_dependent", "detach_copy",
                           "missing_package", "multinomial", "needs_hub", "not_one_delegate", "rng_in_program",
                           "sdpa_bf16_only", "split_copy"]
    assert catalog.match("RuntimeError: Expected bfloat16 inputs") == ["sdpa_bf16_only"]  # pi05/h100, 2026-12-07
    for failure_id, message in SEED_MESSAGES.items():
        assert catalog.match(message) == [failure_id], failure_id
        other = re.sub(r"\d+", lambda m: str(int(m.group()) + 7), message)
        assert (other != message) == (failure_id != "2")  # row 2's message has no number
        assert catalog.match(other) == [failure_id], other
    assert catalog.match("Node.meta wrap_with_autocast_12 is missing val field") == ["8"]
    assert catalog.match("RuntimeError: Method forward missing fallback kernels (1 total):\n  - aoti_other") == []
    assert catalog.match("CUDA out of memory. Tried to allocate 2.98 GiB.") == []  # not during autotuning
    assert [e.signal for e in catalog.entries if e.signal] == ["slow", "at_limit"]
    assert catalog.by_id["7"].fixed_by == "pytorch/pytorch#202785"


def test_catalog_tells_the_h200_failures_apart_from_the_seed_rows() -> None:
    """The messages of the H200 runs (bench/results/gpu_smoke/cells): diffusion's convolution with no Triton choice
    says the same words as row 2's grouped_mm, but for the conv backends, and must not be filed as row 2."""
    catalog = load_catalog([PACKAGE_CONF])
    cells = ROOT / "bench" / "results" / "gpu_smoke" / "cells"
    errors = {cell: read_record(cells / cell / "h200" / "local").error
              for cell in ("act", "diffusion", "gaussian_actor", "tdmpc_mpc")}
    assert catalog.match(errors["diffusion"]) == ["conv_no_choice"]
    assert catalog.match(errors["act"]) == ["split_copy"]
    assert catalog.match(errors["gaussian_actor"]) == ["detach_copy", "split_copy"]  # both kernels it lists
    assert catalog.match(errors["tdmpc_mpc"]) == ["data_dependent"]
    assert catalog.match("RuntimeError: Method forward missing fallback kernels (2 total):\n  - aten::detach_copy\n"
                         "  - aten::split_copy.Tensor") == ["detach_copy", "split_copy"]
    assert catalog.match(SEED_MESSAGES["2"].replace("gemm", "conv")) == ["conv_no_choice"]
    assert catalog.by_id["split_copy"].fixed_by == "pytorch/executorch#19924"
    vqbet = {build: read_record(cells / "vqbet" / "h200" / build) for build in ("local", "etdetach")}
    assert catalog.match(vqbet["local"].log_tail) == ["detach_copy", "multinomial", "split_copy"]
    assert catalog.match(vqbet["local"].error) == ["detach_copy", "multinomial", "split_copy"]
    assert catalog.match(vqbet["etdetach"].error) == ["multinomial"]  # detach_copy and split_copy mapped to views


def test_offline_and_missing_package_failures_are_named_not_new() -> None:
    """The H200 records of policies that could not be built offline: each is named by the error line, or (pi0_fast,
    whose error line is its own RuntimeError) by the log tail, and no compiler failure matches them."""
    catalog = load_catalog([PACKAGE_CONF])
    cells = ROOT / "bench" / "results" / "gpu_smoke" / "cells"
    named = {}
    for policy in ("eo1", "smolvla", "groot", "molmoact2", "pi0_fast", "wall_x"):
        record = read_record(cells / policy / "h200" / "local")
        named[policy] = catalog.match(record.error) or catalog.match(record.log_tail)
    assert named == {"eo1": ["needs_hub"], "smolvla": ["needs_hub"], "groot": ["needs_hub"],
                     "molmoact2": ["needs_hub"], "pi0_fast": ["needs_hub"], "wall_x": ["missing_package"]}
    assert catalog.match("ModuleNotFoundError: No module named 'qwen_vl_utils'") == []


def test_a_fix_outside_torch_keeps_its_repository_in_the_table() -> None:
    assert short_fixes("pytorch/pytorch#202785 pytorch/executorch#19924 #7 my-local-patch") == \
        "#202785 executorch#19924 #7 my-local-patch"


def test_log_tail_is_searched_when_the_error_line_is_unknown(tmp_path: Path) -> None:
    put(tmp_path, "flux3/h100/stock", "failed", log_tail=SEED_MESSAGES["4"],
        error="RuntimeError: Method forward missing fallback kernels (1 total):")
    put(tmp_path, "flux3/a100/stock", "timeout", error="the export ran past timeout_min=60",
        log_tail="...\n" + SEED_MESSAGES["3"])
    assert collect(tmp_path, matrix="matrix.policies=[flux3]") == 0
    got = rows(tmp_path)
    assert (got[("flux3", "h100")]["failures"], got[("flux3", "a100")]["failures"]) == ("4", "3")
    (tmp_path / "matrix.csv").unlink()
    assert collect(tmp_path, "collect.at_limit=0.95", matrix="matrix.policies=[flux3]") == 0  # other settings:
    got = rows(tmp_path)  # every cell classified again, from the collect index's rows, which keep no log tails
    assert (got[("flux3", "h100")]["failures"], got[("flux3", "a100")]["failures"]) == ("4", "3")


def test_a_config_dir_catalog_overrides_and_adds_entries(tmp_path: Path) -> None:
    out = tmp_path / "out"
    put(out, "cosmos3/h100/stock", "failed", error="KeyError: 'model.layers.3.mlp'")
    put(out, "cosmos3/a100/stock", "failed", error=SEED_MESSAGES["8"])
    conf = tmp_path / "conf"
    write(conf / "failures.yaml", "8: {fixed_by: torch 2.16}\n"
          "9: {title: A layer is missing, repro: export command, fixed_by: needs an owner,\n"
          "    patterns: ['KeyError: .model\\.layers\\.<N>\\.mlp']}\n")
    assert main(["collect", "--config-dir", str(conf), f"out_dir={out}"]) == 0
    text = (out / "matrix.md").read_text()
    assert "| 9 | A layer is missing | cosmos3 (H100) | export command | needs an owner |" in text
    assert "| 8 | torch.export cannot load the program (wrap_with_autocast) | cosmos3 (A100) | export command | " \
           "torch 2.16 |" in text
    assert "New failures" not in text and rows(out)[("cosmos3", "h100")]["failures"] == "9"


def test_an_entry_matches_when_any_of_its_patterns_does(tmp_path: Path) -> None:
    write(tmp_path / "failures.yaml", "9: {title: two ways, patterns: ['first <N> way', 'second way$']}\n"
          "10: {title: flagged, patterns: ['(?i)^shouted', 'quiet one']}\n"
          "11: {title: groups, patterns: ['(x)y', '(a)\\1z']}\n")
    catalog = load_catalog([tmp_path])
    assert [catalog.match(t) for t in ("the first 3 way", "a second way", "second way then", "SHOUTED here",
                                       "a quiet one", "x SHOUTED", "xy", "aaz", "az")] == \
        [["9"], ["9"], [], ["10"], ["10"], [], ["11"], ["11"], []]


def test_a_bad_catalog_entry_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    put(tmp_path / "out", "cosmos3/h100/stock")
    write(tmp_path / "conf" / "failures.yaml", "9: {title: broken, patterns: ['(unclosed']}\n")
    assert main(["collect", "--config-dir", str(tmp_path / "conf"), f"out_dir={tmp_path / 'out'}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "failure 9: bad pattern '(unclosed'" in err


def test_text_safety(tmp_path: Path) -> None:
    put(tmp_path, "molmoact2/h100/stock", "failed", error=NASTY, logs={"export": "export.log"})
    passed(tmp_path, "molmoact2/a100/stock")
    assert collect(tmp_path, matrix="matrix.policies=[molmoact2]") == 0
    md = (tmp_path / "matrix.md").read_text()
    listed = [line for line in md.splitlines() if "RuntimeError" in line]
    assert len(listed) == 1  # one line: the newlines are gone
    line = listed[0]
    assert line.startswith("- RuntimeError: bad \\| pipe \\`tick\\` &lt;b&gt;bold&lt;/b&gt; &amp; \\*star\\*")
    assert line.endswith(" \\~\\~strike\\~\\~ \\_under\\_ &lt;!-- export-matrix:end --&gt; (molmoact2/h100/stock)")
    assert "second" not in md  # the first error line only
    assert not re.search(r"(?<!\\)[|`*\[\]<>$]", line[2:].replace("&lt;", "").replace("&gt;", ""))
    table = [row for row in md.splitlines() if row.startswith("| ")]
    assert {len(re.findall(r"(?<!\\)\|", row)) for row in table[:3]} == {4}  # header, rule, the one policy
    assert md.count("<!--") == 1  # only the header comment; the error's marker is escaped
    html = (tmp_path / "report.html").read_text()
    assert "<b>bold" not in html and "&lt;b&gt;bold&lt;/b&gt;" in html and "say &quot;hi&quot;" in html
    assert "<!-- export-matrix:end -->" not in html and "second | line" in html
    assert md_text("a\nb | c\r\n<d>") == "a b \\| c &lt;d&gt;"
    cells = list(csv.DictReader(io.StringIO((tmp_path / "cells.csv").read_text())))
    assert next(c for c in cells if c["id"] == "molmoact2/h100/stock")["error"] == NASTY.replace("\r\n", "\n")


def test_md_text_escapes_as_the_passes_written_out_do() -> None:
    """md_text (one lookaround pattern for lone underscores) against each pass written out over random texts."""
    rng = random.Random(7)
    alphabet = "aZ09.,:/+=()#-_ *`|[]~$&<>\\\n\tü✅"
    texts = ["act", "pi0_fast", "policy00017", "wall_x/h100/stock", "_lone", "a  b", "x" * 40, "", "1.5e-3"]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(2000)]
    for text in texts:
        for limit in (None, 0, 5):
            assert md_text(text, limit) == four_passes(text, limit), (text, limit)
    assert md_text("x" * 40, 5) == "xxxx…"
    assert md_text("pi0_fast _lone a|b <x>") == "pi0_fast \\_lone a\\|b &lt;x&gt;"


def four_passes(text: str, limit: int | None) -> str:
    """The escape written out as every pass over the whole text."""
    flat = " ".join(text.split())
    if limit and len(flat) > limit:
        flat = flat[:limit - 1] + "…"
    flat = re.sub(r"([\\`*\[\]|~$])", r"\\\1", flat)
    flat = flat.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return re.sub(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])", r"\\_", flat)


README = ("# Project\n\nSome text with trailing spaces   \nand unicode: ✅ — ünïcödé\n\n"
          "<!-- export-matrix:start -->\nstale table\n| a | b |\n<!-- export-matrix:end -->\n\n"
          "## After\n<!-- another comment -->\nno newline at the end")


def test_into_replaces_only_between_the_markers(tmp_path: Path) -> None:
    out = tmp_path / "out"
    passed(out, "act/h100/stock")
    for name, original in (("README.md", README.encode()), ("CRLF.md", README.replace("\n", "\r\n").encode())):
        target = tmp_path / name
        target.write_bytes(original)
        assert collect(out, "--into", str(target)) == 0
        new = target.read_bytes()
        start, end = b"<!-- export-matrix:start -->", b"<!-- export-matrix:end -->"
        head, tail = original.index(start) + len(start), original.index(end)
        assert new[:head] == original[:head]
        assert new.endswith(original[tail:]) and new[-len(original) + tail:] == original[tail:]
        newline = b"\r\n" if name == "CRLF.md" else b"\n"
        table = (out / "matrix.md").read_bytes().replace(b"\n", newline)
        assert new[head:len(new) - (len(original) - tail)] == newline + table
        assert collect(out, "--into", str(target)) == 0
        assert target.read_bytes() == new  # idempotent


def test_into_a_file_that_does_not_exist_creates_it_with_the_markers(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture) -> None:
    """issue 44 item 5: `--into FILE` creates a missing FILE holding the two marker lines and the table between
    them (later collects replace only that part); --check calls it missing; a missing folder is one line."""
    out = tmp_path / "out"
    passed(out, "act/h100/stock")
    target = tmp_path / "tracking-issue.md"
    assert collect(out, "--check", "--into", str(target)) == 1
    assert f"{target} (missing) (run collect without --check)" in capsys.readouterr().err
    assert not target.exists()
    assert collect(out, "--into", str(target)) == 0
    table = (out / "matrix.md").read_text()
    assert target.read_text() == f"<!-- export-matrix:start -->\n{table}<!-- export-matrix:end -->\n"
    assert (target.stat().st_mode & 0o777) == 0o644
    assert (f"created {target}: the table between its <!-- export-matrix:start --> and <!-- export-matrix:end --> "
            "lines") in capsys.readouterr().err
    write(target, "# Tracking\n\n" + target.read_text() + "\nNotes of mine.\n")
    passed(out, "act/a100/stock")
    assert collect(out, "--into", str(target)) == 0 and collect(out, "--check", "--into", str(target)) == 0
    table = (out / "matrix.md").read_text()
    assert target.read_text() == ("# Tracking\n\n<!-- export-matrix:start -->\n"
                                  f"{table}<!-- export-matrix:end -->\n\nNotes of mine.\n")
    capsys.readouterr()
    assert collect(out, "--into", str(tmp_path / "nowhere" / "t.md")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--into {tmp_path}/nowhere/t.md: no folder {tmp_path}/nowhere to create it in" \
        in err


def test_into_without_markers_fails_before_writing(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out"
    passed(out, "act/h100/stock")
    target = write(tmp_path / "README.md", "# no markers here\n")
    assert collect(out, "--into", str(target)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no <!-- export-matrix:start --> ... <!-- export-matrix:end --> markers" in err
    assert target.read_text() == "# no markers here\n"
    assert not [name for name in OUTPUTS if (out / name).exists()]  # not one output written
    write(target, "<!-- export-matrix:end -->\n<!-- export-matrix:start -->\n")
    assert collect(out, "--into", str(target)) == 2
    assert "comes before" in capsys.readouterr().err


def test_check_writes_nothing_and_fails_when_stale(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out"
    passed(out, "act/h100/stock")
    put(out, "act/a100/stock", "failed", error=ROW7)
    target = write(tmp_path / "README.md", README)
    assert collect(out, "--check") == 1  # never collected
    assert not (out / "matrix.md").exists() and not (out / "changes.md").exists()
    assert collect(out, "--into", str(target)) == 0
    assert collect(out, "--check", "--into", str(target)) == 0
    snapshot = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in [*out.glob("*.*"), target] if p.is_file()}
    passed(out, "act/a100/stock")  # the record changed: ❌ -> ✅
    capsys.readouterr()
    assert collect(out, "--check") == 1
    err = capsys.readouterr().err
    assert "cells.csv" in err and "matrix.md" in err and err.count("\n") == 1
    assert collect(out, "--check", "--into", str(target)) == 1
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in snapshot} == snapshot
    write(tmp_path / "README.md", README)  # a stale FILE alone makes --check fail too
    assert collect(out) == 0 and collect(out, "--check") == 0
    assert collect(out, "--check", "--into", str(target)) == 1


def test_changes_md(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    put(tmp_path, "act/h100/stock", "failed", error=ROW7)
    passed(tmp_path, "act/a100/stock", diff=0.01)
    passed(tmp_path, "diffusion/h100/stock", diff=0.01)
    assert collect(tmp_path, matrix="matrix.policies=[act,diffusion]") == 0
    assert "- first collect: 4 table cells (policy × column) (2 ✅, 1 ❌, 1 —)" in capsys.readouterr().out
    assert collect(tmp_path, matrix="matrix.policies=[act,diffusion]") == 0
    assert capsys.readouterr().out == "Changes since the previous collect:\n\nNothing changed.\n"
    passed(tmp_path, "act/h100/pr202785")  # ❌ -> 🟡
    passed(tmp_path, "act/a100/stock", diff=0.05)  # margin 0.133 -> 0.667
    passed(tmp_path, "diffusion/h100/stock", diff=0.015)  # margin moves by 0.067: under the threshold
    put(tmp_path, "diffusion/a100/stock", "failed", error="OSError: disk full")  # — -> ❌, a new error
    assert collect(tmp_path, matrix="matrix.policies=[act,diffusion]") == 0
    printed = capsys.readouterr().out
    assert printed == (tmp_path / "changes.md").read_text()
    assert printed.splitlines()[2:] == [  # cell by cell: the table's act on H100 went ❌ -> 🟡 by its pr202785
        "- act on H100/pr202785: — → 🟡",
        "- act on A100/stock: margin 0.133 → 0.667",
        "- diffusion on A100/stock: — → ❌",
        "- diffusion on A100/stock: new error no catalog entry knows: OSError: disk full",
    ]
    passed(tmp_path, "act/a100/stock", diff=0.01)
    assert collect(tmp_path, "collect.margin_move=0.6", matrix="matrix.policies=[act,diffusion]") == 0
    assert capsys.readouterr().out.endswith("Nothing changed.\n")


def test_changes_compare_cells_whatever_the_layout(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """issue 44 item 3: switching table.by lists no change; a change is named the same way in both layouts."""
    put(tmp_path, "act/h100/stock", "failed", error=ROW7)
    put(tmp_path, "act/h100/pr202785", "failed", error=ROW7)
    passed(tmp_path, "act/a100/stock")
    passed(tmp_path, "act/cpu/local", exporter="executorch_cpu", diff=1e-6, tol=1e-3)
    layouts = {"gpu": [], "build": ["table.by=build"]}
    assert collect(tmp_path, *layouts["build"]) == 0
    assert {gpu for _, gpu in rows(tmp_path)} == {"h100@stock", "h100@pr202785", "a100@stock", "cpu@local"}
    for by in ("gpu", "build", "gpu"):
        capsys.readouterr()
        assert collect(tmp_path, *layouts[by]) == 0
        assert capsys.readouterr().out == "Changes since the previous collect:\n\nNothing changed.\n", by
    for by, diff in (("build", 0.03), ("gpu", 0.06)):  # the next change, in the other layout
        passed(tmp_path, "act/h100/pr202785", diff=diff)
        assert collect(tmp_path, *layouts[by]) == 0
        lines = capsys.readouterr().out.splitlines()[2:]
        assert lines == (["- act on H100/pr202785: ❌ → 🟡", "- act on H100/pr202785: no longer fails with 7"]
                         if by == "build" else ["- act on H100/pr202785: margin 0.4 → 0.8"]), by
    assert table_line(tmp_path, "act").startswith("| act | 🟡 #202785 · 0.06 / 0.075 | ✅ 0.022 / 0.075 |")
    (tmp_path / "cells" / "act" / "cpu").rename(tmp_path / "gone")
    assert collect(tmp_path, *layouts["build"]) == 0
    assert capsys.readouterr().out.splitlines()[2:] == ["- act on CPU/local: no longer collected (was ✅)"]


def test_no_records_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["collect", f"out_dir={tmp_path}"]) == 2
    assert f"no records: {tmp_path}/cells/ does not exist" in capsys.readouterr().err


def test_an_unreadable_record_is_shown_as_such_never_as_a_symbol_it_did_not_earn(tmp_path: Path) -> None:
    passed(tmp_path, "act/h100/stock")
    write(tmp_path / "cells/act/a100/stock/record.json", '{"status": "passed", "cell": ')  # cut short
    passed(tmp_path, "act/a100/pr202785")  # would make the a100 cell 🟡 #202785 if the stock one counted as failed
    write(tmp_path / "cells/wall_x/h100/stock/record.json", "")  # empty
    assert collect(tmp_path, matrix="matrix.policies=[act,wall_x]") == 0
    got = rows(tmp_path)
    assert got[("act", "a100")]["symbol"] == "⚠️" and got[("act", "a100")]["failures"] == ""
    assert got[("wall_x", "h100")]["symbol"] == "⚠️" and got[("act", "h100")]["symbol"] == "✅"
    assert "| act | ✅ 0.022 / 0.075 | ⚠️ unreadable |" in (tmp_path / "matrix.md").read_text()
    cells = {r["id"]: r for r in csv.DictReader(io.StringIO((tmp_path / "cells.csv").read_text()))}
    assert cells["act/a100/stock"]["status"] == "unreadable"
    assert cells["act/a100/stock"]["error"].startswith(f"unreadable {tmp_path}/cells/act/a100/stock/record.json: ")


def test_repro_cells_fill_their_own_table_not_the_matrix(tmp_path: Path) -> None:
    passed(tmp_path, "act/h100/stock", check="aoti")
    put(tmp_path, "repro_fp32_speed/h100/stock", exporter="repro",
        repro={"row": 1, "reproduced": True, "summary": "eager/exported: convs 0.56x (aoti)"})
    put(tmp_path, "repro_fp32_speed/h100/pr202785", exporter="repro",
        repro={"row": 1, "reproduced": False, "summary": "eager/exported: convs 1.10x (aoti)"})
    put(tmp_path, "repro_grouped_mm_bf16/a100/stock", "timeout", exporter="repro",
        error="the export ran past timeout_min=20",
        repro={"row": 2, "reproduced": None, "summary": "did not finish"})
    assert collect(tmp_path) == 0
    assert set(rows(tmp_path)) == {("act", "h100"), ("act", "a100")}  # no repro row in the matrix
    assert rows(tmp_path)[("act", "h100")]["check"] == "aoti"
    repros = list(csv.DictReader(io.StringIO((tmp_path / "repros.csv").read_text())))
    assert [(r["row"], r["id"], r["reproduces"]) for r in repros] == [
        ("1", "repro_fp32_speed/h100/stock", "yes"), ("1", "repro_fp32_speed/h100/pr202785", "no"),
        ("2", "repro_grouped_mm_bf16/a100/stock", "timeout")]
    md = (tmp_path / "matrix.md").read_text()
    assert "| act | ✅ 0.022 / 0.075 · checked by aoti |" in md
    assert "| 1 | fp32_speed | H100 (sm_90) | pr202785 | no | eager/exported: convs 1.10x (aoti) |" in md
    assert "| 2 | grouped_mm_bf16 | A100 80GB (sm_80) | stock | timeout | did not finish |" in md
    html = (tmp_path / "report.html").read_text()
    assert "<h2>Standalone repros</h2>" in html and "eager/exported: convs 0.56x (aoti)" in html


def test_selection_narrows_collect_to_the_chosen_cells(tmp_path: Path) -> None:
    passed(tmp_path, "act/h100/stock")
    passed(tmp_path, "wall_x/h100/stock")
    assert collect(tmp_path, "gpu=h100", "policy=wall_*", matrix="matrix.policies=[act,wall_x]") == 0
    assert set(rows(tmp_path)) == {("wall_x", "h100")}


def test_vectorized_failure_matching_and_joining_equal_the_row_by_row_answers() -> None:
    """match_many (each distinct text matched once) and join_ids (one string per row) against match and a plain
    join, row by row, on the seed's messages, their log-tail forms and texts that match nothing."""
    catalog = load_catalog([PACKAGE_CONF])
    texts = [*SEED_MESSAGES.values(), "...\n" + SEED_MESSAGES["3"], "KeyError: 'x'", None, "",
             "RuntimeError: Method forward missing fallback kernels (2 total):\n  - aten::detach_copy\n"
             "  - aten::split_copy.Tensor"]
    series = pd.Series([texts[i] for i in np.random.default_rng(3).integers(0, len(texts), 500)])
    flags = catalog.match_many(series)
    for row, text in enumerate(series):
        expected = catalog.match(text if isinstance(text, str) else None)  # pandas keeps None as NaN
        assert [e.id for e in catalog.entries if flags.iloc[row][e.column]] == expected, text
    joined = join_ids(flags, catalog.ids)
    for row in range(len(series)):
        assert joined.iloc[row] == " ".join(i for i in catalog.ids if flags.iloc[row][f"f:{i}"])
    assert set(joined) >= {"", "2", "3", "detach_copy split_copy"}


def test_a_failure_got_past_is_named_with_the_builds_of_every_gpu(tmp_path: Path) -> None:
    """A failure a policy's deciding cells do not show (7 here) is named with the builds it hit on any of its
    GPUs, each GPU's hits kept apart until the policy's clause is made (failure_summary.summarize)."""
    put(tmp_path, "pi05/h100/stock", "failed", failed_step="compile-model", error=SEED_MESSAGES["3"])
    put(tmp_path, "pi05/h100/pr202785", "failed", failed_step="save", error=ROW7, fixes=["pytorch/pytorch#202785"])
    put(tmp_path, "pi05/a100/stock", "failed", failed_step="compile-model", error=SEED_MESSAGES["3"])
    put(tmp_path, "pi05/a100/nightly", "failed", failed_step="save", error=ROW7, fixes=["pytorch/pytorch#202925"])
    assert collect(tmp_path, matrix="matrix.policies=[pi05]") == 0
    assert "Policy to failure: pi05: 3, and 7 on torch nightly, pr202785." in (tmp_path / "matrix.md").read_text()


def test_build_note_names_where_a_policy_hit_a_failure() -> None:
    """"stock torch" when every stock build hit it, else the builds by name, and "other builds" past 62 builds;
    a policy's builds are those of all its cells (a build that hit it on another GPU counts)."""
    def note(cells: list[tuple[str, bool, bool]]) -> str:  # (build, stock, hit) of each of a policy's cells
        return build_note({b for b, _, _ in cells}, {b for b, stock, _ in cells if stock},
                          {b for b, _, hit in cells if hit})

    def five(stock, hit) -> list[tuple[str, bool, bool]]:
        return [(f"b{k}", stock(k), hit(k)) for k in range(5)]

    big = [(f"b{k:02d}", k % 2 == 0, k % 3 == 0) for k in range(63)]
    assert note(big) == "other builds"
    assert note(big[:62]) == "torch " + ", ".join(f"b{k:02d}" for k in range(0, 62, 3))  # 62 builds: still named
    assert note(five(lambda k: k < 2, lambda k: k in (0, 1, 3))) == "stock torch"
    assert note(five(lambda k: k < 2, lambda k: k < 2)) == "stock torch"
    assert note(five(lambda k: k < 2, lambda k: k in (1, 4)) + [("b4", False, False)]) == "torch b1, b4"
    assert note(five(lambda k: False, lambda k: k > 2)) == "torch b3, b4"


V211 = {"torch": "2.11.0", "executorch": "1.2.0"}
V215 = {"torch": "2.15.0", "executorch": "1.5.1"}


def two_stock(out: Path, *args: str) -> int:
    return main(["collect", f"out_dir={out}", "matrix=tracking", "matrix.policies=[act]",
                 "matrix.torch=[stock,pypi215]", *args])


def test_two_stock_builds_of_a_gpu_go_side_by_side_labelled_by_their_versions(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    passed(tmp_path, "act/h100/stock", versions=V211)
    put(tmp_path, "act/h100/pypi215", "failed", error=ROW7, versions=V215)
    passed(tmp_path, "act/a100/stock", versions=V211)
    assert two_stock(tmp_path) == 0
    lines = (tmp_path / "matrix.md").read_text().splitlines()
    assert lines[1] == ("| policy | H100 (sm_90) · torch 2.11.0 · ET 1.2.0 | H100 (sm_90) · torch 2.15.0 · ET 1.5.1 "
                        "| A100 80GB (sm_80) |")
    assert table_line(tmp_path, "act").startswith("| act | ✅ 0.022 / 0.075 | ❌ 7 | ✅ 0.022 / 0.075")
    assert {gpu for _, gpu in rows(tmp_path)} == {"h100@stock", "h100@pypi215", "a100"}
    capsys.readouterr()
    passed(tmp_path, "act/h100/pypi215", versions=V215)
    assert two_stock(tmp_path) == 0
    assert "- act on H100/pypi215: ❌ → ✅" in capsys.readouterr().out.splitlines()


def test_table_by_build_splits_every_gpu_and_never_repeats_a_label(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture) -> None:
    passed(tmp_path, "act/h100/stock", versions=V211)
    passed(tmp_path, "act/h100/pypi215", versions=V211)  # the same versions: the build's name tells them apart
    passed(tmp_path, "act/a100/stock", versions=V211)
    put(tmp_path, "act/a100/pr202785", "failed", error=ROW7, versions=V211, fixes=["pytorch/pytorch#202785"])
    assert main(["collect", f"out_dir={tmp_path}", "matrix=tracking", "matrix.policies=[act]",
                 "matrix.torch=[stock,pypi215,pr202785]", "table.by=build"]) == 0
    header = (tmp_path / "matrix.md").read_text().splitlines()[1].split(" | ")[1:]
    assert len(header) == len(set(header)) == 4
    assert "H100 (sm_90) · torch 2.11.0 · ET 1.2.0 (pypi215)" in header
    assert header[-1] == "A100 80GB (sm_80) · torch 2.11.0 · ET 1.2.0 · with pytorch/pytorch#202785 |"
    assert header[0] == "H100 (sm_90) · torch 2.11.0 · ET 1.2.0 (stock)"
    capsys.readouterr()
    assert main(["collect", f"out_dir={tmp_path}", "table.by=policy"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith("table.by=policy is not one of: gpu, build")
