"""The log patterns of conf/config.yaml against the repro pack's exact messages."""

from __future__ import annotations

import pytest

from orchestrator.config import compose_config, to_plain
from orchestrator.job.logparse import parse_log

from .conftest import ROOT

PATTERNS = to_plain(compose_config([]).cfg.parse)

ROW2 = ("torch._inductor.exc.InductorError: LoweringException: NoValidChoicesError: No choices to select. Provided "
        "reason: No choices exist for backend. please consider adding ATEN into max_autotune_gemm_backends config "
        "(defined in torch/_inductor/config.py) to allow at least one choice.")
ROW3 = ("torch._inductor.exc.InductorError: RuntimeError: Failed to run autotuning code block: CUDA out of memory. "
        "Tried to allocate 2.98 GiB. GPU 0 has a total capacity of 79.25 GiB of which 1.50 GiB is free. Including "
        "non-PyTorch memory, this process has 77.74 GiB memory in use. Of the allocated memory 75.79 GiB is "
        "allocated by PyTorch, and 306.98 MiB is reserved by PyTorch but unallocated.")
ROW5 = ("RuntimeError: The exported policy does not reproduce its test case (9.53e-02 > 0.075). "
        "Export it again on this device.")
ROW6 = "ValueError: Exporting LingBot-VLA v2 needs a vision_grid (see `predict_action_chunk`)."
ROW7 = "SerializeError: Unsupported getattr attribute function_const_func_spec0 with type TreeSpec"
ROW8 = "Node.meta wrap_with_autocast_12 is missing val field"


def log(*lines: str) -> str:
    return "\n".join(["Loading policy", "Traceback (most recent call last):",
                      '  File "x.py", line 3, in f', "    raise", *lines]) + "\n"


@pytest.mark.parametrize(("error", "step"), [(ROW2, "compile-model"), (ROW3, "compile-model"), (ROW6, "trace"),
                                             (ROW7, "save"), (ROW8, "reload")])
def test_failed_step_and_last_error_line(error: str, step: str) -> None:
    found = parse_log(log(error, f"error: The {step} step failed (see above), so the bundle was not written."),
                      PATTERNS)
    assert found["failed_step"] == step and found["error"] == error
    assert "max_diff" not in found


def test_error_is_the_last_exception_not_an_earlier_one() -> None:
    text = log("KeyError: 'x'", "", "During handling of the above exception, another exception occurred:", "",
               ROW7, "error: The save step failed (see above), so the bundle was not written.")
    assert parse_log(text, PATTERNS)["error"] == ROW7


def test_check_failure_gives_diff_tolerance_and_margin() -> None:
    found = parse_log(log(ROW5), PATTERNS)
    assert found["max_diff"] == pytest.approx(0.0953) and found["tolerance"] == 0.075
    assert found["margin"] == pytest.approx(0.0953 / 0.075) and found["test_case"] == "failed"
    assert found["error"] == ROW5


def test_check_pass_and_timing() -> None:
    text = ("Exported policy test case: largest difference 2.20e-02 (tolerance 0.075)\n"
            "Exported policy timing: eager 105.000 ms, exported 359.000 ms (median of 5 runs)\n")
    found = parse_log(text, PATTERNS)
    assert (found["max_diff"], found["tolerance"], found["test_case"]) == (0.022, 0.075, "passed")
    assert found["margin"] == pytest.approx(0.022 / 0.075)
    assert (found["eager_ms"], found["exported_ms"]) == (105.0, 359.0)
    assert found["speedup"] == pytest.approx(105 / 359)
    assert "failed_step" not in found


def test_exception_message_on_the_next_line_is_kept() -> None:
    text = log("torch._export.verifier.SpecViolationError: ",
               "Operator torch._ops.aten.multinomial.default is not in Core ATen opset",
               "error: The lower step failed (see above), so the bundle was not written.")
    assert parse_log(text, PATTERNS)["error"] == ("torch._export.verifier.SpecViolationError: Operator "
                                                  "torch._ops.aten.multinomial.default is not in Core ATen opset")


def test_every_item_of_a_listed_message_is_kept() -> None:
    """ExecuTorch lists the missing kernels one a line; the catalog needs each (vqbet: detach_copy, multinomial)."""
    text = log("RuntimeError: Method forward missing fallback kernels (2 total):", "  - aten::detach_copy",
               "  - aten::multinomial", "Please add them to the AOTI backend.",
               "error: The compile-model step failed (see above), so the bundle was not written.")
    assert parse_log(text, PATTERNS)["error"] == ("RuntimeError: Method forward missing fallback kernels (2 total): "
                                                  "- aten::detach_copy - aten::multinomial")


def test_embedded_cuda_exporter_lines() -> None:
    text = "\n".join([
        "[compile-model] done in 41.2 s (peak RSS 2381 MiB)",
        "Exported policy check: aoti (this ExecuTorch runtime has no CudaBackend "
        "(registered backends: XnnpackBackend))",
        "Exported policy test case: largest difference 5.66e-07 (tolerance 0.001)",
        "[check] done in 0.3 s (peak RSS 2400 MiB)",
        "Exported policy GPU memory: export 1706.0 MiB, run 812.5 MiB (NVML peak)",
    ])
    found = parse_log(text, PATTERNS)
    assert found["check"] == "aoti"
    assert found["check_reason"] == "this ExecuTorch runtime has no CudaBackend (registered backends: XnnpackBackend)"
    assert found["steps_s"] == {"compile-model": 41.2, "check": 0.3}
    assert found["peak_gpu_phases"] == {"export": 1706.0, "run": 812.5}
    assert "oom" not in found and "repro" not in found


def test_the_last_step_started_is_found_in_a_real_cuda_log() -> None:
    """act on the H200, stopped in CudaBackend's lowering (bench/results/gpu_smoke): its last started step."""
    text = (ROOT / "bench/results/gpu_smoke/cells/act/h200/local/export.log").read_text()
    found = parse_log(text, PATTERNS)
    assert found["last_step"] == "compile-model" and "compile-model" not in found["steps_s"]
    assert parse_log("[export-matrix] time limit of 3 s reached: killing the step", PATTERNS).get("last_step") is None


def test_repro_result_last_line_wins_and_oom_is_recognized() -> None:
    text = "\n".join(['Repro result: {"repro": "fp32_speed", "row": 1, "reproduced": null, '
                      '"summary": "did not finish"}',
                      'Repro result: {"repro": "fp32_speed", "row": 1, "reproduced": true, "summary": "0.45x"}'])
    assert parse_log(text, PATTERNS)["repro"] == {"repro": "fp32_speed", "row": 1, "reproduced": True,
                                                 "summary": "0.45x"}
    assert parse_log(log(ROW3), PATTERNS)["oom"] is True
    assert parse_log(log(ROW2), PATTERNS).get("oom") is None


def test_patterns_missing_from_an_older_config_are_skipped() -> None:
    older = {k: v for k, v in PATTERNS.items() if k not in ("check_kind", "gpu_memory", "step_seconds", "repro",
                                                              "oom", "step_started")}
    found = parse_log("Exported policy check: aoti (x)\n" + log(ROW3), older)
    assert "check" not in found and "oom" not in found and found["error"] == ROW3


def test_an_exception_class_without_an_error_suffix_is_the_error_not_torch_exports_epilogue() -> None:
    """tdmpc_mpc on the H200 (bench/results/gpu_smoke): torch.export raised GuardOnDataDependentSymNode (MPC's
    torch.multinomial index) and followed it with its own "The error above occurred ..." lines."""
    text = (ROOT / "bench/results/gpu_smoke/cells/tdmpc_mpc/h200/local/export.log").read_text()
    found = parse_log(text, PATTERNS)
    assert found["failed_step"] == "trace"
    assert found["error"].startswith("torch.fx.experimental.symbolic_shapes.GuardOnDataDependentSymNode: Could not "
                                      "extract specialized integer from data-dependent expression u0")


def test_checked_files_timing_detail_and_resume_lines_reach_the_record_fields() -> None:
    """The CUDA exporter's lines for which written files were checked, what each timing covered, and a resume."""
    text = "\n".join([
        "[load] resumed from /m/cells/pi05/h100/local/resume: the programs and eager reference ...",
        'Exported policy checked files: {"model.pte": "ab12", "aoti_cuda_blob.ptd": "cd34"}',
        "Exported policy timing: eager 14.014 ms, exported 8.061 ms (median of 5 runs)",
        'Exported policy timing detail: {"eager": "adapter.compose over the traced modules (eager)", '
        '"exported_runs": 5, "warmup": 1}',
    ])
    found = parse_log(text, PATTERNS)
    assert found["checked_files"] == {"model.pte": "ab12", "aoti_cuda_blob.ptd": "cd34"}
    assert found["timing"]["exported_runs"] == 5 and found["timing"]["warmup"] == 1
    assert found["resumed"] is True
    plain = parse_log("Exported policy timing: eager 1.0 ms, exported 2.0 ms (median of 5 runs)", PATTERNS)
    assert "checked_files" not in plain and "timing" not in plain and "resumed" not in plain
