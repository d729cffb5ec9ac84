"""Row 4: scatter with a scalar source, lowered while deterministic algorithms are on.

With torch.use_deterministic_algorithms(True) Inductor calls ATen's scatter.value instead of generating a
Triton kernel, and the CUDA backend has no shim for it (aoti_torch_cuda_scatter_value_out); with deterministic
mode off the same model lowers. Both are tried in one process. Reproduced = on fails with the missing fallback
kernel and off lowers.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

ROW = 4


def run(out: Path, report: Callable[[dict], None]) -> dict[str, Any]:
    import cuda_program
    import torch
    from common import error_line, gpu
    from torch import nn

    class ScatterValue(nn.Module):
        def forward(self, x, index):
            return x.scatter(1, index, 1.0)

    info = gpu()
    x = torch.zeros(4, 16, device="cuda")
    index = torch.tensor([[0, 3], [1, 4], [2, 5], [7, 9]], device="cuda")
    outcome: dict[str, str] = {}
    for deterministic in (True, False):
        torch.use_deterministic_algorithms(deterministic)
        try:
            with torch.no_grad():
                cuda_program.lower({"forward": torch.export.export(ScatterValue(), (x, index))})
            outcome["on" if deterministic else "off"] = "lowered ok"
        except Exception as exc:  # noqa: BLE001 - the error is what this repro measures
            outcome["on" if deterministic else "off"] = error_line(exc)
        finally:
            torch.use_deterministic_algorithms(False)
    missing = "aoti_torch_cuda_scatter_value_out" in outcome["on"]
    reproduced = missing and outcome["off"] == "lowered ok"
    summary = f"deterministic on: {outcome['on']}; off: {outcome['off']}"
    return {**info, "reproduced": reproduced, "deterministic_on": outcome["on"], "deterministic_off": outcome["off"],
            "summary": summary[:300]}
