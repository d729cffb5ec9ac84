"""The steps every embedded exporter shares: load, trace, time, and the driver that prints the fork's lines.

executorch_cpu.py (XNNPACK) and executorch_cuda.py (the CUDA backend) subclass `PolicyExport` and add their
lowering, writing and checking steps. The shared part loads a make_random checkpoint, builds a seeded example
observation through the policy's adapter (policy_adapters.py), runs eager inference as the reference, exports
the adapter's methods with torch.export, and times eager against the exported program.

Each step that fails prints its traceback, then, as the last line,
`error: The <step> step failed (see above), so the bundle was not written.` and the exporter exits 1; the
orchestrator reads those lines with the patterns in conf/config.yaml (`parse:`), the same as for the fork's
`lerobot-export`. OUT/export_info.json records what happened, also on failure.

Imports only stdlib at module level: the file runs in a torch build's interpreter, never in the orchestrator's.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

DEFAULT_TOLERANCE = 1e-3  # float32: eager and the lowered program differ only in summation order
# Timing as the fork's README measures: 100 chunks after 20 warm-ups; fewer where a chunk takes over a second.
TIMED_RUNS, WARMUPS, SLOW_TIMING_S = 100, 20, 30.0


class RandomOpInProgram(RuntimeError):
    """The traced program still draws random numbers: its check would compare two random draws."""


def log(step: str, msg: str) -> None:
    print(f"[{step}] {msg}", flush=True)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kilobytes


def median_ms(fn: Callable[[], Any], runs: int, sync: Callable[[], None] = lambda: None) -> float:
    """Median wall time of `runs` calls; `sync` (torch.cuda.synchronize) brackets each so GPU work counts."""
    times = []
    for _ in range(runs):
        sync()
        t = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def parse_args(prog: str, description: str, argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--policy.path", dest="policy_path", required=True, help="checkpoint directory")
    p.add_argument("--output_dir", required=True, help="where model.pte and export_info.json go")
    p.add_argument("--task", default=None, help="language instruction, for policies that take one")
    p.add_argument("--tolerance", default=None,
                   help="largest allowed abs difference with eager: the policy config's (default: 1e-3, float32)")
    p.add_argument("--runs", type=int, default=None,
                   help=f"timed runs for the medians (default: {TIMED_RUNS}; where a chunk takes over a second, "
                        f"those that fit in {SLOW_TIMING_S:g} s)")
    p.add_argument("--warmups", type=int, default=None,
                   help=f"untimed runs before the timed ones (default: {WARMUPS}; 1 where a chunk takes over a second)")
    p.add_argument("--vision_autocast", action="store_true",
                   help="pi0/pi05: the vision tower under bf16 autocast on CUDA, as the fork runs it")
    p.add_argument("--kernels", action="store_true",
                   help="profile both sides' kernels after timing whatever the speedup (default: only where the "
                        "exported program is slower than eager; kernel_profile.py)")
    args = p.parse_args(argv)
    if args.runs is not None and args.runs < 1:
        p.error("--runs must be at least 1")
    if args.warmups is not None and args.warmups < 0:
        p.error("--warmups must be at least 0")
    if args.tolerance in (None, "auto", "None", "null"):
        args.tolerance = None
    else:
        try:
            args.tolerance = float(args.tolerance)
        except ValueError:
            p.error(f"--tolerance must be a positive number or 'auto', got {args.tolerance!r}")
        if not args.tolerance > 0:
            p.error(f"--tolerance must be a positive number or 'auto', got {args.tolerance!r}")
    return args


def versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for name in ("torch", "executorch", "lerobot", "transformers"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


class PolicyExport:
    """One policy's export: subclasses set `exporter`, `device`, `STEPS` and add their own steps."""

    exporter = "base"
    device = "cpu"
    STEPS: tuple[str, ...] = ("load", "trace")

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.out = Path(args.output_dir)
        self.pte = self.out / "model.pte"
        self.wrote_pte = False
        self.info: dict[str, Any] = {
            "exporter": self.exporter,
            "policy_path": args.policy_path,
            "task": args.task,
            "runs": args.runs,
            "options": {"vision_autocast": bool(args.vision_autocast)},
            "steps_s": {},
        }

    # hooks --------------------------------------------------------------------------------------------
    def prepare(self) -> None:
        """Runs first in `load`, before torch is used: device checks, numerics settings."""

    def sync(self) -> None:
        """Waits for queued device work (CUDA); nothing on the CPU."""

    def program_outputs(self) -> Any:
        """The action from the exported program, composed by the adapter (subclasses run their program)."""
        raise NotImplementedError

    # load --------------------------------------------------------------------------------------------
    def load(self) -> None:
        here = str(Path(__file__).resolve().parent)
        if here not in sys.path:  # run as a file it is already; imported from elsewhere it may not be
            sys.path.insert(0, here)
        self.prepare()
        import policy_adapters
        import torch
        from lerobot.configs.policies import PreTrainedConfig
        from lerobot.policies.factory import get_policy_class, make_pre_post_processors

        path = self.args.policy_path
        local = Path(path)
        if not local.exists() and (local.is_absolute() or path.startswith(".") or path.count("/") != 1):
            raise FileNotFoundError(f"No checkpoint directory at {path}")
        self.info["versions"] = versions()
        torch.manual_seed(0)
        cfg = PreTrainedConfig.from_pretrained(path)
        cfg.device = "cpu"  # the preprocessor stays on the CPU; inputs are moved to the device below
        if getattr(cfg, "pretrained_backbone_weights", None):
            # The checkpoint's state dict replaces the backbone anyway; skip torchvision's download.
            cfg.pretrained_backbone_weights = None
        kind = cfg.type
        log("load", f"{kind} policy from {path}")
        policy = get_policy_class(kind).from_pretrained(path, config=cfg)
        policy.to(self.device).eval()
        self.policy = policy
        self.kind = kind
        self.dtype = str(getattr(cfg, "dtype", None) or "float32")
        self.info["policy_type"] = kind
        self.info["dtype"] = self.dtype
        self.info["device"] = self.device
        self.info["params_M"] = round(sum(p.numel() for p in policy.parameters()) / 1e6, 1)
        self.set_tolerance()

        options = {"task": self.args.task, "vision_autocast": self.args.vision_autocast}
        adapter = policy_adapters.make_adapter(policy, options)
        self.adapter = adapter
        if adapter.preprocess and (local / "policy_preprocessor.json").exists():
            on_device = {"device_processor": {"device": self.device}}  # the program's tensors stay where it runs
            pre, post = make_pre_post_processors(cfg, pretrained_path=path, preprocessor_overrides=on_device,
                                                 postprocessor_overrides=on_device)
            adapter.set_processors(pre, post)
            self.info["preprocessor"] = [type(s).__name__ for s in pre.steps]
            self.info["postprocessor"] = [type(s).__name__ for s in post.steps]
        gen = torch.Generator().manual_seed(0)
        obs = adapter.observation(gen)
        if self.args.task is not None:
            obs["task"] = self.args.task
        with torch.no_grad():
            named = {k: self.on_device(v) for k, v in adapter.host_inputs(obs).items()}
            named.update({k: self.on_device(v) for k, v in adapter.extra_inputs(named, gen).items()})
        self.names = list(named)
        self.inputs = list(named.values())
        self.named = dict(named)
        self.info["adapter"] = adapter.describe()
        self.info["random_draws"] = [k for k in self.names if k.startswith("rng_")]
        self.info["inputs"] = {k: list(v.shape) for k, v in self.named.items()}
        log(
            "load",
            f"{self.info['params_M']} M parameters ({self.dtype}, {self.device}); inputs "
            + ", ".join(f"{k} {tuple(v.shape)}" for k, v in self.named.items()),
        )

        log("load", f"eager inference ({adapter.name})")
        t0 = time.perf_counter()
        self.expected = self.eager()
        self.sync()
        self.first_eager_s = time.perf_counter() - t0
        self.info["output_shape"] = list(self.expected.shape)
        log("load", f"eager action {tuple(self.expected.shape)}")
        self.time_eager()

    def on_device(self, v):
        return (v.float() if v.is_floating_point() else v).detach().to(self.device).contiguous()

    def set_tolerance(self) -> None:
        """The policy config's tolerance (--tolerance), else the float32 rule; printed with where it came from."""
        given = self.args.tolerance is not None
        self.tolerance = self.args.tolerance if given else DEFAULT_TOLERANCE
        source = "policy config" if given else "exporter default: float32 rule, the policy config names none"
        self.info["tolerance"], self.info["tolerance_source"] = self.tolerance, source
        print(f"Exported policy tolerance: {self.tolerance:g} ({source})", flush=True)

    def eager(self):
        import torch

        with torch.no_grad():
            return self.adapter.eager(dict(self.named)).detach().float()

    def eager_programs(self):
        """The action from the very modules torch.export traces, composed as the program's methods will be."""
        import torch

        modules = {method: module for method, (module, _) in self.adapter.programs(self.names, self.named).items()}

        def run(method, args):
            out = modules[method](*args)
            return list(out) if isinstance(out, (list, tuple)) else [out]

        with torch.no_grad():
            return self.adapter.compose(dict(self.named), run)

    def runs_for(self, first_s: float) -> tuple[int, int]:
        """(warm-ups, timed runs): --warmups/--runs, else the fork's 20 and 100 for a chunk of up to a second;
        a slower chunk gets 1 warm-up and the runs that fit in about 30 s (at least 1)."""
        slow = first_s > 1.0
        runs = self.args.runs or (max(1, int(SLOW_TIMING_S / first_s)) if slow else TIMED_RUNS)
        warmups = self.args.warmups if self.args.warmups is not None else (1 if slow else min(WARMUPS, runs))
        return warmups, runs

    def time_eager(self) -> None:
        """Eager's medians, taken here while the policy is loaded, so a resumed export has them too.

        eager_ms times the exported boundary (adapter.compose over the modules torch.export traces), the one
        exported_ms times; eager_policy_ms the policy's own call, for comparison with what a user's code pays."""
        warmups, runs = self.runs_for(self.first_eager_s)
        log("load", f"eager timing x {runs} (after {warmups} warm-ups) ...")
        for _ in range(warmups):
            self.eager_programs()
        self.info["eager_ms"] = median_ms(self.eager_programs, runs, self.sync)
        if self.adapter.eager_is_program:
            self.info["eager_policy_ms"] = self.info["eager_ms"]  # the same call: the module runs adapter.run
        else:
            for _ in range(warmups):
                self.eager()
            self.info["eager_policy_ms"] = median_ms(self.eager, runs, self.sync)
        self.info["timing"] = {"eager": "adapter.compose over the traced modules (eager)",
                               "eager_policy": f"adapter.eager ({self.adapter.name})",
                               "exported": "adapter.compose over the program's methods",
                               "eager_runs": runs, "warmup": warmups, "sync": self.device == "cuda"}
        reset = getattr(self.policy, "reset", None)
        if callable(reset):
            reset()  # the timed calls filled action queues; trace must see the first step, as the reference did

    # trace -------------------------------------------------------------------------------------------
    io = "on the CPU"  # where the program's inputs and outputs live while it is timed (the CUDA check says)

    def trace(self) -> None:
        import torch
        from random_inputs import random_ops

        self.eps = {}
        self.info["graph_nodes"] = {}
        for method, (module, args) in self.adapter.programs(self.names, self.named).items():
            log("trace", f"torch.export {method}({', '.join(str(tuple(a.shape)) for a in args)}) ...")
            torch.manual_seed(0)
            with torch.no_grad():
                ep = torch.export.export(module, args)
            left = random_ops(ep.graph)
            if left:
                raise RandomOpInProgram(
                    f"rng_in_program: {', '.join(left)} (method {method}): the exported program still draws random "
                    "numbers, so its check would compare two random draws; not compared")
            self.eps[method] = ep
            self.traced = self.eps  # what a failed lowering keeps for `export-matrix repro` (failure_evidence.py)
            nodes = sum(1 for _ in ep.graph.nodes)
            self.info["graph_nodes"][method] = nodes
            log("trace", f"{method}: exported program with {nodes} nodes")

    # check -------------------------------------------------------------------------------------------
    def compare(self, got: Any, check: str) -> None:
        """Eager against the program's action: the fork's pass line, or its RuntimeError."""
        import torch

        got = torch.as_tensor(got).float().to(self.expected.device)
        if tuple(got.shape) != tuple(self.expected.shape):
            raise RuntimeError(
                f"The exported policy returns shape {tuple(got.shape)}, eager {tuple(self.expected.shape)}."
            )
        max_diff = (got - self.expected).abs().max().item()
        self.info["max_diff"] = max_diff
        self.info["check"] = check
        if not max_diff <= self.tolerance:  # also catches NaN
            raise RuntimeError(
                f"The exported policy does not reproduce its test case ({max_diff:.2e} > {self.tolerance:g}). "
                "Export it again on this device."
            )
        print(
            f"Exported policy test case: largest difference {max_diff:.2e} (tolerance {self.tolerance:g})",
            flush=True,
        )

    # time --------------------------------------------------------------------------------------------
    def time(self) -> None:
        warmups, runs = self.runs_for(self.first_exported_s)
        log("time", f"exported x {runs} (after {warmups} warm-ups; the check's run was one more) ...")
        for _ in range(warmups):
            self.program_outputs()
        exported_ms = median_ms(self.program_outputs, runs, self.sync)
        eager_ms = self.info["eager_ms"]
        self.info["exported_ms"] = exported_ms
        self.info["runs"] = runs
        timing = {**self.info["timing"], "exported_runs": runs, "exported_warmup": warmups, "io": self.io,
                  "eager_policy_ms": self.info["eager_policy_ms"]}
        self.info["timing"] = timing
        print(
            f"Exported policy timing: eager {eager_ms:.3f} ms, exported {exported_ms:.3f} ms (median of {runs} runs)",
            flush=True,
        )
        print(f"Exported policy timing detail: {json.dumps(timing)}", flush=True)

    # kernels -----------------------------------------------------------------------------------------
    def kernels(self) -> None:
        """After `time`: each side's top kernels where the program is slower than eager or --kernels asks
        (kernel_profile.py). Never fails the export: a profiler that fails leaves its reason in the breakdown."""
        import kernel_profile

        exported_ms, eager_ms = self.info.get("exported_ms"), self.info.get("eager_ms")
        speedup = eager_ms / exported_ms if eager_ms and exported_ms else None
        why = kernel_profile.reason(speedup, self.args.kernels)
        if why is None:
            log("kernels", "not profiled: " + (f"the exported program runs at {speedup:.2f}× eager's speed"
                                               if speedup else "no timing") + " (--kernels profiles it anyway)")
            return
        unit = "gpu" if self.device == "cuda" else "cpu"
        log("kernels", f"{why}: torch.profiler over a few runs of each side; {kernel_profile.MEASURES[unit]} ...")
        eager = (self.eager_programs, eager_ms) if hasattr(self, "policy") else \
            "not profiled: this attempt resumed from saved programs without loading the policy"
        found = kernel_profile.breakdown({"eager": eager, "exported": (self.program_outputs, exported_ms)}, unit,
                                         why, self.sync)
        self.info["kernels"] = found
        for line in kernel_profile.log_lines(found):
            log("kernels", line)
        print(f"Exported policy kernels: {json.dumps(found)}", flush=True)

    # driver ------------------------------------------------------------------------------------------
    def write_info(self) -> None:
        self.info["peak_rss_mb"] = round(peak_rss_mb(), 1)
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / "export_info.json").write_text(json.dumps(self.info, indent=2, default=str) + "\n")
        except OSError as e:  # the report must not hide the real result
            print(f"warning: could not write export_info.json: {e}", file=sys.stderr, flush=True)

    def step_done(self, step: str) -> None:
        log(step, f"done in {self.info['steps_s'][step]:.1f} s (peak RSS {peak_rss_mb():.0f} MiB)")

    def run(self) -> int:
        for step in self.STEPS:
            method = getattr(self, step.replace("-", "_"))
            t0 = time.perf_counter()
            try:
                method()
            except Exception as e:
                self.info["steps_s"][step] = round(time.perf_counter() - t0, 3)
                self.info["ok"] = False
                self.info["failed_step"] = step
                name = type(e).__qualname__
                if type(e).__module__ != "builtins":
                    name = f"{type(e).__module__}.{name}"
                self.info["error"] = f"{name}: {e}"[:4000]
                from failure_evidence import after_failure

                # the programs a repro starts from, or where the trace stopped; said before the traceback, so its
                # last line stays just above the "error: The ... step failed" line, as the fork prints them
                after_failure(self, step, e)
                sys.stdout.flush()
                traceback.print_exc()
                if self.wrote_pte and self.pte.exists():
                    self.pte.replace(self.pte.with_name("model.pte.failed"))
                self.write_info()
                print(
                    f"error: The {step} step failed (see above), so the bundle was not written.",
                    file=sys.stderr,
                    flush=True,
                )
                return 1
            self.info["steps_s"][step] = round(time.perf_counter() - t0, 3)
            self.step_done(step)
        self.info["ok"] = True
        self.write_info()
        return 0
