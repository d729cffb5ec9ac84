"""On a machine with an NVIDIA GPU: the job records the GPU's name, capability and the export's peak memory.

Skipped where NVML finds no GPU (CI has none); run it on a GPU node with
`python -m pytest tests/test_gpu.py`. It needs torch with CUDA in the interpreter that runs it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from orchestrator.config.spec import CellSpec
from orchestrator.job import gpu, run_cell

ROOT = Path(__file__).resolve().parent.parent
ALLOCATE = """
import time, torch
x = torch.empty(3 * 1024**3, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
time.sleep(2.0)
print("Exported policy test case: largest difference 1.00e-03 (tolerance 0.01)", flush=True)
"""

pytestmark = pytest.mark.skipif(not gpu.describe(), reason="no NVIDIA GPU visible to NVML")


def test_record_has_gpu_and_peak_memory(tmp_path: Path) -> None:
    parse = yaml.safe_load((ROOT / "conf" / "config.yaml").read_text())["parse"]
    spec = CellSpec(policy="probe", gpu="h100", torch="local", exporter="alloc", python=sys.executable,
                    command=["{python}", "-c", ALLOCATE], checkpoint={"path": "none"}, task=None, export_args=[],
                    timeout_min=2, env={}, fixes=[], slurm={}, parse=parse, out_dir=str(tmp_path),
                    ckpt_dir=str(tmp_path / "ckpts"))
    record = run_cell(spec)
    assert record.status == "passed", record.log_tail
    assert record.versions["gpu_name"] and record.versions["gpu_capability"].startswith("sm_")
    assert record.peak_gpu_mib is not None and record.peak_gpu_mib >= 3 * 1024, record.peak_gpu_mib
    print(record.versions, record.peak_gpu_mib)
