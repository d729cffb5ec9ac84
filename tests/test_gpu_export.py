"""The embedded CUDA lane (executorch_cuda exporter, standalone repros) on an NVIDIA GPU, and without one.

The GPU tests run `export-matrix sweep matrix=gpu_smoke` for real (make_random, torch.export, ExecuTorch's CUDA
backend, the check against eager) and are skipped, with the reason, where NVML sees no GPU (CI has none). The
no-GPU test runs where there is none: each CUDA cell must end as an `error` record with one line, and the sweep
must go on to the next cell.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.job import gpu

from .conftest import cli, record

EXPORTERS = Path(__file__).resolve().parents[1] / "orchestrator" / "exporters"
PTXAS_VERSION = "from triton.backends.nvidia.compiler import get_ptxas_version; print(get_ptxas_version(90))"

HAS_GPU = bool(gpu.describe())
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="no NVIDIA GPU visible to NVML")


@needs_gpu
def test_cuda_export_of_a_policy_is_checked_against_eager(tmp_path: Path) -> None:
    cli("sweep", "matrix=gpu_smoke", "matrix.policies=[tdmpc]", f"out_dir={tmp_path}",
        f"ckpt_dir={tmp_path / 'ckpts'}", timeout=900)
    cell = record(tmp_path, "tdmpc/h200/local")
    assert cell["status"] == "passed", cell["log_tail"]
    assert cell["check"] in ("executorch", "aoti"), cell["check"]
    if cell["check"] == "aoti":  # the reason the ExecuTorch runtime did not run it is kept
        assert "CudaBackend" in cell["check_reason"]
    assert 0 <= cell["max_diff"] <= cell["tolerance"] == 1e-3
    assert cell["eager_ms"] > 0 and cell["exported_ms"] > 0
    assert cell["peak_gpu_phases"]["export"] > 0 and cell["peak_gpu_phases"]["run"] > 0
    assert cell["steps_s"]["compile-model"] > 0 and cell["versions"]["gpu_capability"].startswith("sm_")
    bundle = tmp_path / "cells/tdmpc/h200/local/bundle"
    assert (bundle / "model.pte").stat().st_size > 0 and (bundle / "aoti_cuda_blob.ptd").stat().st_size > 0
    assert any((tmp_path / "inductor_cache").iterdir())  # the persistent Inductor cache a rerun reuses


@needs_gpu
def test_repro_cell_records_what_it_showed(tmp_path: Path) -> None:
    cli("sweep", "matrix=gpu_smoke", "matrix.policies=[repro_scatter_value_deterministic]", f"out_dir={tmp_path}",
        timeout=900)
    cell = record(tmp_path, "repro_scatter_value_deterministic/h200/local")
    assert cell["status"] == "passed", cell["log_tail"]
    repro = cell["repro"]
    assert repro["row"] == 4 and repro["deterministic_off"] == "lowered ok"
    assert repro["reproduced"] is ("aoti_torch_cuda_scatter_value_out" in repro["deterministic_on"])


@pytest.mark.skipif(HAS_GPU, reason="a GPU is visible: the no-GPU path cannot be seen here")
def test_without_a_gpu_each_cuda_cell_is_an_error_record_and_the_sweep_goes_on(tmp_path: Path) -> None:
    done = cli("sweep", "matrix=gpu_smoke", "matrix.policies=[gaussian_actor,repro_fp32_speed]",
               f"out_dir={tmp_path}", check=False, timeout=300)
    assert done.returncode == 1  # a sweep with `error` cells exits 1
    assert "Traceback" not in done.stderr + done.stdout
    for cell_id in ("gaussian_actor/h200/local", "repro_fp32_speed/h200/local"):
        cell = record(tmp_path, cell_id)
        assert cell["status"] == "error" and cell["failed_step"] == "setup"
        assert cell["error"].startswith("no CUDA device visible to the job: torch ")
        assert "\n" not in cell["error"]
    assert not (tmp_path / "cells/gaussian_actor/h200/local/make_random.log").exists()  # stopped before it


def _ptxas_version_seen(setup: str, env: dict[str, str]) -> str:
    code = f"import sys; sys.path.insert(0, {str(EXPORTERS)!r}); {setup}; {PTXAS_VERSION}"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout


def test_the_exporter_compiles_triton_kernels_with_the_compile_workers_ptxas() -> None:
    """Triton keys its kernel cache by `ptxas --version`: where the exporter's process and Inductor's compile
    workers use different ptxas, every autotune choice a worker precompiled is compiled again, serially, in the
    exporter (up to 4.6 s a choice on an H200; ACT ran past 9 minutes). Runs without a GPU: ptxas only prints
    its version."""
    pytest.importorskip("triton")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_PTXAS_PATH"}
    # what torch/_inductor/compile_worker/__main__.py does first in each worker
    worker = _ptxas_version_seen(
        "from torch._inductor.runtime.compile_tasks import _set_triton_ptxas_path; _set_triton_ptxas_path()", env)
    exporter = _ptxas_version_seen("import cuda_program; cuda_program.align_triton_ptxas()", env)
    assert exporter == worker, (exporter, worker)
    # a ptxas the user chose stays theirs (the workers keep it too)
    bundled = subprocess.run([sys.executable, "-c", "from triton import knobs; print(knobs.nvidia.ptxas.path)"],
                             env=env, capture_output=True, text=True, check=True).stdout.strip()
    chosen = _ptxas_version_seen("import cuda_program; cuda_program.align_triton_ptxas()",
                                 {**env, "TRITON_PTXAS_PATH": bundled})
    assert chosen == _ptxas_version_seen("pass", env)  # Triton's bundled ptxas, as the user asked
