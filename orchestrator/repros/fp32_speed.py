"""Row 1: float32 convolutions and matmuls in a CUDA-backend program against eager PyTorch (TF32 off on both).

Four convolutions (1x3x224x224) and two linear layers (512x1024 -> 4096 -> 1024) are exported, lowered with
CudaPartitioner (Triton-only GEMM and convolution autotuning), run with inputs and outputs on the GPU, checked
against eager and timed against it (CUDA-synchronized medians). Reproduced = either case is slower than eager
(eager/exported < 1). Which runner executed the program is recorded (`check`: executorch or aoti, see
cuda_program.py); where neither can run, nothing is timed and the repro says so.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

ROW = 1


def run(out: Path, report: Callable[[dict], None]) -> dict[str, Any]:
    import cuda_program
    import torch
    from common import gpu, median_ms
    from torch import nn

    info = gpu()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    convs = nn.Sequential(
        nn.Conv2d(3, 64, 7, stride=2, padding=3), nn.ReLU(),
        nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(),
        nn.Conv2d(128, 256, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(),
    )
    linears = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024))
    cases: dict[str, Any] = {}
    # Linears first: they lower in seconds, while Triton-only autotuning of the convolutions takes minutes.
    for name, model, shape in (("linears_float32", linears, (512, 1024)), ("convs_float32", convs, (1, 3, 224, 224))):
        torch.manual_seed(0)
        model = model.eval().to("cuda")
        x = torch.randn(shape, device="cuda")
        with torch.no_grad():
            program = cuda_program.lower({"forward": torch.export.export(model, (x,))})
            pte, _ = cuda_program.write(program, out / name)
            loaded = cuda_program.load(pte, out / name / "aoti_check")
            del program
            if loaded.run is None:
                cases[name] = {"check": "none", "check_reason": loaded.reason}
                continue
            run_program = loaded.run
            got = run_program("forward", [x])[0]
            diff = (got.float() - model(x).float()).abs().max().item()
            eager = median_ms(lambda m=model, x=x: m(x))
            exported = median_ms(lambda r=run_program, x=x: r("forward", [x]))
        cases[name] = {"check": loaded.check, "check_reason": loaded.reason, "eager_ms": round(eager, 4),
                       "exported_ms": round(exported, 4), "eager_over_exported": round(eager / exported, 3),
                       "max_abs_diff": diff}
        report({**info, **verdict(cases), "summary": verdict(cases)["summary"] + "; still running"})
    return {**info, **verdict(cases)}


def verdict(cases: dict[str, Any]) -> dict[str, Any]:
    """Reproduced where any timed case ran slower than eager; the cases so far, with each ratio and check."""
    timed = {k: v for k, v in cases.items() if "eager_over_exported" in v}
    if not timed:
        return {"cases": cases, "reproduced": None,
                "summary": "not timed: " + "; ".join(f"{k}: {v['check_reason']}" for k, v in cases.items())}
    slow = {k: v["eager_over_exported"] for k, v in timed.items() if v["eager_over_exported"] < 1}
    summary = ", ".join(f"{k.split('_')[0]} {v['eager_over_exported']:.2f}x ({v['check']})" for k, v in timed.items())
    return {"cases": cases, "reproduced": bool(slow), "summary": f"eager/exported: {summary}"}
