"""Built-in exporter: a CPU stand-in for the LeRobot fork's `lerobot-export --backend.type=executorch_cuda`.

Runs as a file with the interpreter of a torch build (torch, executorch, lerobot), never as part of the
orchestrator package:

    HF_HUB_OFFLINE=1 PATH=<venv>/bin:$PATH <python> orchestrator/exporters/executorch_cpu.py \
        --policy.path=<checkpoint dir> --output_dir=<out> [--task=TEXT] [--tolerance=X] [--runs=N]

(`flatc`, which ExecuTorch's serializer calls, must be on PATH; it ships in the venv's bin.)

Steps, in order; each failure prints the traceback, then, as the last line,
`error: The <step> step failed (see above), so the bundle was not written.` and exits with status 1:

  load   read the policy (and its saved pre/post processors) from the checkpoint, build a seeded (seed 0)
         example observation for its input_features, run it through the preprocessor, run eager inference.
  trace  torch.export of the whole action-chunk prediction, through a per-policy adapter
         (policy_adapters.py): ACT's predict_action_chunk as is (one `forward` method); Diffusion as two
         methods, `encode` (observation -> global_cond) and `denoise_step` (one U-Net + scheduler step, the
         step's timestep/coefficients/noise as inputs), with the initial noise as an input and the sampling
         loop on the host (adapter.compose; the step table is in export_info.json).
  lower  ExecuTorch to_edge_transform_and_lower with the XNNPACK partitioner, then to_executorch.
  write  OUT/model.pte.
  check  load OUT/model.pte with the ExecuTorch runtime, run it (all its methods, composed as the adapter
         says) on the same inputs, compare the largest
         absolute difference with eager against the tolerance. On success it prints
         `Exported policy test case: largest difference 2.20e-02 (tolerance 0.075)`; otherwise it raises
         `RuntimeError: The exported policy does not reproduce its test case (9.53e-02 > 0.075). Export it
         again on this device.` and model.pte is renamed to model.pte.failed (kept for inspection).
  time   median of --runs runs of eager inference and of the ExecuTorch program (the load and check runs
         were the warm-ups): `Exported policy timing: eager 73.012 ms, exported 429.100 ms (median of 5 runs)`.
         Without --runs: 5 runs, or fewer (down to 1) where one eager plus one exported inference took more
         than 12 s, so the timing stays near a minute (Diffusion with DDPM's 100 steps: ~2 minutes eager each).

OUT/export_info.json records the result (max_diff, tolerance, eager_ms, exported_ms, each step's seconds,
peak RSS, the failed step and its error), whether the export succeeded or not.

Tolerances (largest absolute difference, float32 on CPU; --tolerance overrides): 1e-3 for every policy
(TOLERANCES holds per-type exceptions; none yet). Eager PyTorch and XNNPACK differ only in float32
summation order; measured with make_random's weights: ACT 1.3e-06, Diffusion 1.0e-05 (10 DDIM steps) and
5.4e-06 (10 DDPM steps), TD-MPC without MPC 3.9e-07, gaussian_actor 2.7e-07. 1e-3 leaves two orders of
magnitude for deeper networks and longer samplers, and still catches a wrong graph or a mismatched noise
input, whose actions differ by O(0.1..1).

The example inputs: images uniform in [0, 1), states and noise standard normal, batch size 1, from one
torch.Generator seeded with 0; policies that sample noise inside (DDPM steps, VQ-BeT, TD-MPC,
gaussian_actor) see torch.manual_seed(0) right before the eager call.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import statistics
import sys
import time
import traceback
from pathlib import Path

DEFAULT_TOLERANCE = 1e-3
TOLERANCES = {"act": 1e-3, "diffusion": 1e-3}  # per policy type; DEFAULT_TOLERANCE otherwise
STEPS = ("load", "trace", "lower", "write", "check", "time")


def log(step: str, msg: str) -> None:
    print(f"[{step}] {msg}", flush=True)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kilobytes


def median_ms(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="executorch_cpu.py",
        description="Export a LeRobot policy to an ExecuTorch (XNNPACK, CPU) program and check it.",
    )
    p.add_argument("--policy.path", dest="policy_path", required=True, help="checkpoint directory")
    p.add_argument("--output_dir", required=True, help="where model.pte and export_info.json go")
    p.add_argument("--task", default=None, help="language instruction, for policies that take one")
    p.add_argument("--tolerance", type=float, default=None, help="largest allowed abs difference with eager")
    p.add_argument("--runs", type=int, default=None, help="timed runs for the medians (default: 5, fewer if slow)")
    args = p.parse_args(argv)
    if args.runs is not None and args.runs < 1:
        p.error("--runs must be at least 1")
    if args.tolerance is not None and not args.tolerance > 0:
        p.error("--tolerance must be positive")
    return args


class Export:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.out = Path(args.output_dir)
        self.pte = self.out / "model.pte"
        self.wrote_pte = False
        self.info: dict = {
            "exporter": "executorch_cpu",
            "policy_path": args.policy_path,
            "task": args.task,
            "runs": args.runs,
            "steps_s": {},
        }

    # load --------------------------------------------------------------------------------------------
    def load(self) -> None:
        here = str(Path(__file__).resolve().parent)
        if here not in sys.path:  # run as a file it is already; imported from elsewhere it may not be
            sys.path.insert(0, here)
        import policy_adapters
        import torch
        from lerobot.configs.policies import PreTrainedConfig
        from lerobot.policies.factory import get_policy_class, make_pre_post_processors

        path = self.args.policy_path
        local = Path(path)
        if not local.exists() and (local.is_absolute() or path.startswith(".") or path.count("/") != 1):
            raise FileNotFoundError(f"No checkpoint directory at {path}")
        self.info["versions"] = _versions()
        torch.manual_seed(0)
        cfg = PreTrainedConfig.from_pretrained(path)
        cfg.device = "cpu"
        if getattr(cfg, "pretrained_backbone_weights", None):
            # The checkpoint's state dict replaces the backbone anyway; skip torchvision's download.
            cfg.pretrained_backbone_weights = None
        kind = cfg.type
        log("load", f"{kind} policy from {path}")
        policy = get_policy_class(kind).from_pretrained(path, config=cfg)
        policy.to("cpu").eval()
        self.policy = policy
        self.kind = kind
        self.info["policy_type"] = kind
        self.info["params_M"] = round(sum(p.numel() for p in policy.parameters()) / 1e6, 1)
        self.tolerance = self.args.tolerance or TOLERANCES.get(kind, DEFAULT_TOLERANCE)
        self.info["tolerance"] = self.tolerance

        preprocessor = None
        if (local / "policy_preprocessor.json").exists():
            preprocessor, _ = make_pre_post_processors(cfg, pretrained_path=path)
            self.info["preprocessor"] = [type(s).__name__ for s in preprocessor.steps]

        adapter = policy_adapters.make_adapter(policy)
        self.adapter = adapter
        gen = torch.Generator().manual_seed(0)
        obs = adapter.observation(gen)
        if self.args.task is not None:
            obs["task"] = self.args.task
        batch = preprocessor(obs) if preprocessor is not None else obs
        names = adapter.input_names(batch)
        named = {k: batch[k] for k in names}
        named.update(adapter.extra_inputs(named, gen))
        self.names = list(named)
        self.inputs = [
            (v.float() if v.is_floating_point() else v).detach().cpu().contiguous()
            for v in (named[k] for k in self.names)
        ]
        self.named = dict(zip(self.names, self.inputs, strict=True))
        self.info["adapter"] = adapter.describe()
        self.info["inputs"] = {k: list(v.shape) for k, v in self.named.items()}
        log(
            "load",
            f"{self.info['params_M']} M parameters; inputs "
            + ", ".join(f"{k} {tuple(v.shape)}" for k, v in self.named.items()),
        )

        log("load", f"eager inference ({adapter.name})")
        t0 = time.perf_counter()
        self.expected = self.eager()
        self.first_eager_s = time.perf_counter() - t0
        self.info["output_shape"] = list(self.expected.shape)
        log("load", f"eager action {tuple(self.expected.shape)}")

    def eager(self):
        import torch

        with torch.no_grad():
            return self.adapter.eager(dict(self.named)).detach().float()

    # trace -------------------------------------------------------------------------------------------
    def trace(self) -> None:
        import torch

        self.eps = {}
        self.info["graph_nodes"] = {}
        for method, (module, args) in self.adapter.programs(self.names, self.named).items():
            log("trace", f"torch.export {method}({', '.join(str(tuple(a.shape)) for a in args)}) ...")
            torch.manual_seed(0)
            with torch.no_grad():
                ep = torch.export.export(module, args)
            self.eps[method] = ep
            nodes = sum(1 for _ in ep.graph.nodes)
            self.info["graph_nodes"][method] = nodes
            log("trace", f"{method}: exported program with {nodes} nodes")

    # lower -------------------------------------------------------------------------------------------
    def lower(self) -> None:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        from executorch.exir import to_edge_transform_and_lower

        log("lower", "to_edge_transform_and_lower (XNNPACK) ...")
        edge = to_edge_transform_and_lower(self.eps, partitioner=[XnnpackPartitioner()])
        del self.eps
        log("lower", "to_executorch ...")
        self.program = edge.to_executorch()
        delegated, left = 0, collections.Counter()
        nodes = [n for m in self.program.methods for n in self.program.exported_program(m).graph.nodes]
        for node in nodes:
            if node.op == "call_function":
                target = str(node.target)
                if "executorch_call_delegate" in target:
                    delegated += 1
                elif "getitem" not in target:
                    left[target] += 1
        non_delegated = sum(left.values())
        self.info["delegate_calls"] = delegated
        self.info["non_delegated_ops"] = non_delegated
        self.info["non_delegated_top"] = dict(left.most_common(12))
        log("lower", f"{delegated} XNNPACK delegate calls, {non_delegated} ops left to portable kernels")

    # write -------------------------------------------------------------------------------------------
    def write(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        failed = self.pte.with_name("model.pte.failed")
        if failed.exists():
            failed.unlink()
        self.wrote_pte = True
        with open(self.pte, "wb") as f:
            self.program.write_to_file(f)
        del self.program
        self.info["pte_bytes"] = self.pte.stat().st_size
        log("write", f"{self.pte} ({self.info['pte_bytes'] / 2**20:.1f} MiB)")

    # check -------------------------------------------------------------------------------------------
    def check(self) -> None:
        import torch
        from executorch.runtime import Runtime

        log("check", "ExecuTorch runtime ...")
        program = Runtime.get().load_program(self.pte)
        self._program = program  # keep it alive while its methods are used
        self.methods = {name: program.load_method(name) for name in sorted(program.method_names)}
        t0 = time.perf_counter()
        got = torch.as_tensor(self.run_program()).float()
        self.first_exported_s = time.perf_counter() - t0
        if tuple(got.shape) != tuple(self.expected.shape):
            raise RuntimeError(
                f"The exported policy returns shape {tuple(got.shape)}, eager {tuple(self.expected.shape)}."
            )
        max_diff = (got - self.expected).abs().max().item()
        self.info["max_diff"] = max_diff
        if not max_diff <= self.tolerance:  # also catches NaN
            raise RuntimeError(
                f"The exported policy does not reproduce its test case ({max_diff:.2e} > {self.tolerance:g}). "
                "Export it again on this device."
            )
        print(
            f"Exported policy test case: largest difference {max_diff:.2e} (tolerance {self.tolerance:g})",
            flush=True,
        )

    def run_program(self):
        def run(method, args):
            outputs = self.methods[method].execute(list(args))
            return list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]

        return self.adapter.compose(dict(self.named), run)

    # time --------------------------------------------------------------------------------------------
    def time(self) -> None:
        runs = self.args.runs
        if runs is None:
            runs = max(1, min(5, int(60 / max(self.first_eager_s + self.first_exported_s, 1e-3))))
        self.info["runs"] = runs
        log("time", f"eager x {runs} ...")
        eager_ms = median_ms(self.eager, runs)
        log("time", f"exported x {runs} ...")
        exported_ms = median_ms(self.run_program, runs)
        self.info["eager_ms"] = eager_ms
        self.info["exported_ms"] = exported_ms
        print(
            f"Exported policy timing: eager {eager_ms:.3f} ms, exported {exported_ms:.3f} ms (median of {runs} runs)",
            flush=True,
        )

    # driver ------------------------------------------------------------------------------------------
    def write_info(self) -> None:
        self.info["peak_rss_mb"] = round(peak_rss_mb(), 1)
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / "export_info.json").write_text(json.dumps(self.info, indent=2) + "\n")
        except OSError as e:  # the report must not hide the real result
            print(f"warning: could not write export_info.json: {e}", file=sys.stderr, flush=True)

    def run(self) -> int:
        for step in STEPS:
            t0 = time.perf_counter()
            try:
                getattr(self, step)()
            except Exception as e:
                self.info["steps_s"][step] = round(time.perf_counter() - t0, 3)
                self.info["ok"] = False
                self.info["failed_step"] = step
                name = type(e).__qualname__
                if type(e).__module__ != "builtins":
                    name = f"{type(e).__module__}.{name}"
                self.info["error"] = f"{name}: {e}"[:4000]
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
            log(step, f"done in {self.info['steps_s'][step]:.1f} s (peak RSS {peak_rss_mb():.0f} MiB)")
        self.info["ok"] = True
        self.write_info()
        return 0


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("torch", "executorch", "lerobot"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return Export(args).run()


if __name__ == "__main__":
    sys.exit(main())
