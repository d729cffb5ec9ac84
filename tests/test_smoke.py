"""The README's main job for real: make_random, torch.export, ExecuTorch (XNNPACK) and the runtime check."""

from __future__ import annotations

from pathlib import Path

from .conftest import cli, record


def test_smoke_sweep_exports_act_for_real(tmp_path: Path) -> None:
    cli("sweep", "matrix=smoke", "matrix.policies=[act]", f"out_dir={tmp_path}", f"ckpt_dir={tmp_path / 'ckpts'}",
        timeout=900)
    act = record(tmp_path, "act/cpu/local")
    assert act["status"] == "passed", act["log_tail"]
    assert act["exporter"] == "executorch_cpu" and act["failed_step"] is None
    pte = tmp_path / "cells/act/cpu/local/bundle/model.pte"
    assert pte.exists() and pte.stat().st_size > 1_000_000  # ACT's 51.6 M parameters, serialized
    assert 0 <= act["max_diff"] <= act["tolerance"] and act["margin"] == act["max_diff"] / act["tolerance"]
    assert act["eager_ms"] > 0 and act["exported_ms"] > 0 and act["speedup"] > 0
    assert act["versions"]["executorch"] and act["versions"]["torch"] and act["make_random_s"] > 0
