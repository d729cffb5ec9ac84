"""Built-in exporter: a CPU stand-in for the LeRobot fork's `lerobot-export --backend.type=executorch_cuda`.

Runs as a file with the interpreter of a torch build (torch, executorch, lerobot), never as part of the
orchestrator package:

    HF_HUB_OFFLINE=1 PATH=<venv>/bin:$PATH <python> orchestrator/exporters/executorch_cpu.py \
        --policy.path=<checkpoint dir> --output_dir=<out> [--task=TEXT] [--tolerance=X] [--runs=N] [--warmups=N]

(`flatc`, which ExecuTorch's serializer calls, must be on PATH; it ships in the venv's bin.)

Steps (load, trace, time and the driver live in export_base.py), in order; each failure prints the traceback,
then, as the last line,
`error: The <step> step failed (see above), so the bundle was not written.` and exits with status 1:

  load   read the policy and its saved pre/post processors from the checkpoint, build a seeded (seed 0)
         example of what a robot sends (policy_adapters.py), record the policy's random draws as inputs
         (random_inputs.py), run eager inference.
  trace  torch.export of the whole action-chunk prediction, through a per-policy adapter
         (policy_adapters.py): ACT's predict_action_chunk between its processors (one `forward` method);
         Diffusion as two methods, `encode` (observation -> global_cond) and `denoise_step` (one U-Net +
         scheduler step, the step's timestep/coefficients/noise as inputs), with the initial noise as an input
         and the sampling loop on the host (adapter.compose; the step table is in export_info.json). A traced
         graph that still draws random numbers is refused here (`rng_in_program: aten.X at file.py:N`).
  lower  ExecuTorch to_edge_transform_and_lower with the XNNPACK partitioner, then to_executorch.
  write  OUT/model.pte.
  check  load OUT/model.pte with the ExecuTorch runtime, run it (all its methods, composed as the adapter
         says) on the same inputs, compare the largest
         absolute difference with eager against the tolerance. On success it prints
         `Exported policy test case: largest difference 2.20e-02 (tolerance 0.075)`; otherwise it raises
         `RuntimeError: The exported policy does not reproduce its test case (9.53e-02 > 0.075). Export it
         again on this device.` and model.pte is renamed to model.pte.failed (kept for inspection).
  time   median of the eager composition and of the ExecuTorch program, after warm-ups, as the fork times:
         `Exported policy timing: eager 73.012 ms, exported 429.100 ms (median of 100 runs)`. Without --runs:
         100 runs after 20 warm-ups; where a chunk takes over a second, 1 warm-up and the runs that fit in 30 s.
  kernels  where the exported program is slower than eager (or --kernels): a few more runs of each side under
         torch.profiler, each side's top 10 operators by CPU self time (kernel_profile.py; the ExecuTorch
         runtime's own kernels are one row, invisible to torch.profiler), in export_info.json's `kernels` and the
         line `Exported policy kernels: {...}`. It never fails the export.

OUT/export_info.json records the result (max_diff, tolerance and where it came from, eager_ms, exported_ms,
each step's seconds, peak RSS, the failed step and its error), whether the export succeeded or not.

Tolerance (largest absolute difference): --tolerance, which the orchestrator takes from the policy config's
`tolerance:` (docs/collect.md gives the rule), else 1e-3, the float32 rule; the first line says which
(`Exported policy tolerance: 0.001 (policy config)`). Eager PyTorch and XNNPACK differ only in float32
summation order; measured with make_random's weights: ACT 1.2e-06, vqbet 1.0e-06, Diffusion 3.1e-06 (100 DDPM
steps), gaussian_actor 5.1e-07. 1e-3 leaves two orders of magnitude for deeper networks and longer samplers, and
still catches a wrong graph or a mismatched noise input, whose actions differ by O(0.1..1).

The example inputs, from one torch.Generator seeded with 0: each camera a uint8 HWC frame, the state uniform in
[0, 1), no batch dimension (a robot's frame, as the fork's test case holds it); the frame conversion and the
checkpoint's processors run inside the program. Every random draw the policy makes (flow or diffusion noise,
VQ-BeT's multinomial, TD-MPC's planning) is an input, the same tensor for eager and the program.
"""

from __future__ import annotations

import collections
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from export_base import PolicyExport, log, parse_args  # noqa: E402


class CpuExport(PolicyExport):
    """XNNPACK on the CPU, checked and timed with the ExecuTorch runtime."""

    exporter = "executorch_cpu"
    device = "cpu"
    STEPS = ("load", "trace", "lower", "write", "check", "time", "kernels")

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
        from executorch.runtime import Runtime

        log("check", "ExecuTorch runtime ...")
        program = Runtime.get().load_program(self.pte)
        self._program = program  # keep it alive while its methods are used
        self.methods = {name: program.load_method(name) for name in sorted(program.method_names)}
        t0 = time.perf_counter()
        got = self.program_outputs()
        self.first_exported_s = time.perf_counter() - t0
        self.compare(got, "executorch")

    def program_outputs(self):
        def run(method, args):
            outputs = self.methods[method].execute(list(args))
            return list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]

        return self.adapter.compose(dict(self.named), run)


def main(argv: list[str] | None = None) -> int:
    description = "Export a LeRobot policy to an ExecuTorch (XNNPACK, CPU) program and check it."
    args = parse_args("executorch_cpu.py", description, argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return CpuExport(args).run()


if __name__ == "__main__":
    sys.exit(main())
