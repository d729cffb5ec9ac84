"""Row 2: bf16 F.grouped_mm has no kernel choice under the CUDA backend's Triton-only GEMM autotuning (A100).

Lowers a grouped linear layer (4 groups, 256 -> 512, bf16) with CudaPartitioner. On sm_80 Inductor has no Triton
template for aten._grouped_mm in bf16 and the backend allows no other kind, so the lowering stops with
NoValidChoicesError; on sm_90 it lowers. Reproduced = the lowering failed with that error.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

ROW = 2


def run(out: Path, report: Callable[[dict], None]) -> dict[str, Any]:
    import cuda_program
    import torch
    import torch.nn.functional as F
    from common import error_line, gpu
    from torch import nn

    info = gpu()
    if not hasattr(F, "grouped_mm"):
        return {**info, "reproduced": None, "summary": f"torch {torch.__version__} has no F.grouped_mm"}

    class GroupedLinear(nn.Module):
        def __init__(self, groups: int = 4, k: int = 256, n: int = 512) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(groups, k, n) * 0.02)
            self.register_buffer("offs", torch.tensor([16, 32, 48, 64], dtype=torch.int32))

        def forward(self, x):
            return F.grouped_mm(x, self.w, offs=self.offs)

    torch.manual_seed(0)
    model = GroupedLinear().to("cuda", torch.bfloat16).eval()
    x = torch.randn(64, 256, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        model(x)
        ep = torch.export.export(model, (x,))
        try:
            cuda_program.lower({"forward": ep})
        except Exception as exc:  # noqa: BLE001 - the error is what this repro measures
            line = error_line(exc)
            hit = "NoValidChoicesError" in line
            summary = "lowering failed: NoValidChoicesError" if hit else f"lowering failed otherwise: {line}"
            return {**info, "reproduced": hit, "lowered": False, "error": line, "summary": summary}
    return {**info, "reproduced": False, "lowered": True, "summary": "lowered ok"}
