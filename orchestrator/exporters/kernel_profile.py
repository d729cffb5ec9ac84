"""Where the time goes when an exported program is slower than eager: torch.profiler over a few runs of each side.

The `kernels` step of the embedded exporters runs after `time`. Where the exported median is slower than eager's
(speedup under 1), or the exporter was given --kernels, it profiles a few more runs of both sides, the very calls
`time` timed (eager: adapter.compose over the traced modules; exported: the checked program), and keeps each side's
top kernels by time, with calls per run, ms per call and share of the side's total:

  gpu  every CUDA kernel, memcpy and memset that CUPTI saw, by GPU time (a CUDA exporter)
  cpu  every torch operator's CPU self time (the CPU lane); what ran outside any torch operator - the ExecuTorch
       runtime's own kernels (XNNPACK), Python - is one row (OUTSIDE). Never a GPU figure.

Bounded: at most RUNS runs a side, fewer where they would take over BUDGET_S (one at least). Never raises: a side
whose profile failed keeps its `error`, and the exporter's verdict is what its check and timing said.

Imports only stdlib at module level: the file runs in a torch build's interpreter, next to the exporters.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Iterable
from typing import Any

TOP = 10  # kernels kept per side
RUNS, BUDGET_S = 5, 10.0  # profiled runs per side: at most RUNS, and what fits in about BUDGET_S (at least 1)
READ_S = 60.0  # the profiler stops reading its events after this long (torch's post_processing_timeout_s)
NAME_CHARS = 160  # a kernel's name in the log line and the record (cuDNN's template names run to 400 characters)
ANNOTATION = "export-matrix profiled run"  # the record_function around each profiled run
OUTSIDE = {"eager": "(outside torch operators: Python)",  # the CPU lane's time in no torch operator, per side
           "exported": "(outside torch operators: the ExecuTorch runtime, Python)"}
MEASURES = {"gpu": "GPU time of each CUDA kernel, memcpy and memset (torch.profiler, CUPTI)",
            "cpu": "CPU self time of each torch operator (torch.profiler on the CPU lane; no GPU figure)"}


def reason(speedup: float | None, forced: bool) -> str | None:
    """Why both sides are profiled (None: they are not)."""
    if forced:
        return "asked (--kernels)"
    if speedup is not None and speedup < 1:
        return f"exported slower than eager ({speedup:.2f}×)"
    return None


def runs_for(ms: float | None) -> int:
    """Profiled runs for a side whose median is `ms`: RUNS, or what fits in BUDGET_S, at least 1."""
    if not ms or ms <= 0:
        return RUNS
    return max(1, min(RUNS, int(BUDGET_S * 1e3 / ms)))


def aggregate(rows: Iterable[tuple[str, float]], runs: int, top: int = TOP) -> dict[str, Any]:
    """The top kernels of (name, microseconds) rows, one a launch or an operator's self time, over `runs` runs."""
    by_name: dict[str, list[float]] = {}
    for name, us in rows:
        seen = by_name.setdefault(name, [0, 0.0])
        seen[0] += 1
        seen[1] += us
    total = sum(us for _, us in by_name.values())
    ranked = sorted(by_name.items(), key=lambda item: (-item[1][1], item[0]))
    return {
        "runs": runs,
        "total_ms": round(total / 1e3 / runs, 4),  # per run
        "distinct": len(by_name),
        "top": [{"name": name[:NAME_CHARS], "calls": _per_run(int(calls), runs),
                 "ms_per_call": round(us / 1e3 / calls, 4), "share": round(us / total, 4) if total else 0.0}
                for name, (calls, us) in ranked[:top]],
    }


def _per_run(calls: int, runs: int) -> float | int:
    return calls // runs if calls % runs == 0 else round(calls / runs, 2)


def event_rows(events: Iterable[Any], unit: str, outside: str) -> Iterable[tuple[str, float]]:
    """(name, microseconds) of the profiler's events that `unit` counts; `outside` names the CPU time of a run
    spent in no torch operator."""
    from torch.autograd import DeviceType

    for event in events:
        if unit == "gpu":
            if event.device_type == DeviceType.CPU or getattr(event, "is_user_annotation", False) \
                    or event.name == ANNOTATION:  # a record_function's range on the GPU's timeline
                continue
            yield event.name, float(event.time_range.elapsed_us())
        elif event.device_type == DeviceType.CPU and not event.is_async:
            yield (outside if event.name == ANNOTATION else event.name), float(event.self_cpu_time_total)


def profile_side(run: Callable[[], Any], runs: int, unit: str, sync: Callable[[], None],
                 outside: str = OUTSIDE["exported"]) -> dict[str, Any]:
    """One side's top kernels over `runs` profiled calls of `run`, and its wall time per run under the profiler."""
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if unit == "gpu" else [])]
    known = inspect.signature(profile).parameters  # both are newer than some torch builds
    options = {k: v for k, v in (("acc_events", True), ("post_processing_timeout_s", READ_S)) if k in known}
    sync()
    start = time.perf_counter()
    with profile(activities=activities, **options) as prof:
        for _ in range(runs):
            with record_function(ANNOTATION):
                run()
        sync()
        ran = time.perf_counter()
    found = aggregate(event_rows(prof.events(), unit, outside), runs)
    read_s = time.perf_counter() - ran
    found["wall_ms"] = round((ran - start) * 1e3 / runs, 3)  # the profiler's overhead included
    if "post_processing_timeout_s" in options and read_s >= READ_S:
        found["note"] = f"the profiler read its events for {read_s:.0f} s and stopped: the shares are of those read"
    return found


def breakdown(sides: dict[str, tuple[Callable[[], Any], float | None] | str], unit: str, why: str,
              sync: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """Both sides' breakdowns; a side given as text was not profiled, the text saying why. Never raises."""
    out: dict[str, Any] = {"why": why, "unit": unit, "measure": MEASURES[unit]}
    for side, given in sides.items():
        if isinstance(given, str):
            out[side] = {"error": given}
            continue
        run, ms = given
        try:
            out[side] = profile_side(run, runs_for(ms), unit, sync, OUTSIDE.get(side, OUTSIDE["exported"]))
        except Exception as exc:  # noqa: BLE001 - the verdict stands; the breakdown says why it is missing
            out[side] = {"error": f"the profiler failed: {type(exc).__name__}: {exc}"[:500]}
    return out


def log_lines(found: dict[str, Any], first: int = 3) -> list[str]:
    """Each side's total per run and its first kernels, for the exporter's log."""
    out = []
    for side in ("eager", "exported"):
        data = found.get(side) or {}
        if "error" in data:
            out.append(f"{side}: {data['error']}")
            continue
        tops = "; ".join(f"{k['share']:.0%} {k['name'][:80]} ({k['ms_per_call']:.3f} ms x {k['calls']}/run)"
                         for k in data["top"][:first])
        out.append(f"{side}: {data['total_ms']:.3f} ms/run of {found['unit'].upper()} time in {data['distinct']} "
                   f"kernels over {data['runs']} runs: {tops}")
    return out
