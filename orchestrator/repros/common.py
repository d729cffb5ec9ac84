"""What the repros share: the GPU's description, TF32 off, CUDA-synchronized medians, the lowering's error line."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def gpu() -> dict[str, Any]:
    """torch's version and the device; a one-line RuntimeError where no CUDA device is visible."""
    import torch
    from cuda_program import require_cuda

    require_cuda()
    major, minor = torch.cuda.get_device_capability()
    return {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "capability": f"sm_{major}{minor}"}


def median_ms(fn: Callable[[], Any], runs: int = 30, warm: int = 5) -> float:
    import torch

    for _ in range(warm):
        fn()
    times = []
    for _ in range(runs):
        torch.cuda.synchronize()
        started = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times)


def error_line(exc: BaseException) -> str:
    """The exception as the catalog's patterns see it: qualified type, then the message, on one line."""
    name = type(exc).__qualname__
    if type(exc).__module__ not in ("builtins", "__main__"):
        name = f"{type(exc).__module__}.{name}"
    return " ".join(f"{name}: {exc}".split())[:1000]
