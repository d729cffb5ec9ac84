"""Built-in exporter for NVIDIA GPUs: a LeRobot policy through ExecuTorch's CUDA backend, checked against eager.

Runs as a file with the interpreter of a torch build that has CUDA (torch, executorch, lerobot):

    HF_HUB_OFFLINE=1 PATH=<venv>/bin:$PATH <python> orchestrator/exporters/executorch_cuda.py \
        --policy.path=<checkpoint dir> --output_dir=<out> [--task=TEXT] [--tolerance=X|auto] [--runs=N]

The steps are the fork's (`lerobot-export --backend.type=executorch_cuda`), so the same log patterns read both:

  load           the policy on the GPU in its config's dtype (float32 unless the config says bfloat16), TF32
                 off for matmuls and convolutions on both sides; seeded example inputs on the GPU; eager run.
  trace          torch.export of each of the adapter's methods (policy_adapters.py).
  save, reload   torch.export.save and torch.export.load of each program (where rows 7 and 8 of the repro
                 pack fail: flat_apply's TreeSpec, wrap_with_autocast's missing val).
  compile-model  to_edge_transform_and_lower with CudaPartitioner (one compile spec per method), then
                 to_executorch: CudaBackend runs AOTInductor with its own options (max-autotune, Triton-only
                 GEMM and convolution kernels, libtorch-free .so), which export_info.json records, with
                 Triton's ptxas set to the compile workers' (cuda_program.align_triton_ptxas says why).
  write          OUT/model.pte and OUT/aoti_cuda_blob.ptd (the weights).
  check          runs the program and compares with eager (tolerance: --tolerance, else 1e-3 in float32 and
                 0.2 in bfloat16), then prints which check ran:
                   `Exported policy check: executorch` where the installed ExecuTorch runtime has CudaBackend
                   (a CUDA build of ExecuTorch): model.pte + .ptd executed by it;
                   `Exported policy check: aoti (<why not executorch>)` otherwise: the program's own compiled
                   .so and weights blob, taken from its named data, run through the AOTInductor C interface
                   with libtorch's shims (aoti_runner.py) - the same kernels, another shim layer;
                   `Exported policy check: none (<why>)` when neither could run: the step fails, since a
                   program nobody ran has not passed.
  time           medians of eager and of the checked program, CUDA-synchronized, inputs and outputs on the GPU.

At the end, whatever happened: `Exported policy GPU memory: export <MiB> MiB, run <MiB> MiB (NVML peak)`,
export covering load to write and run covering check and time. Inductor's caches go where
TORCHINDUCTOR_CACHE_DIR points (the orchestrator sets it), so a rerun does not autotune again.
"""

from __future__ import annotations

import io
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cuda_program  # noqa: E402
from export_base import PolicyExport, log, parse_args  # noqa: E402


class CudaExport(PolicyExport):
    exporter = "executorch_cuda"
    device = "cuda"
    STEPS = ("load", "trace", "save", "reload", "compile-model", "write", "check", "time")

    def prepare(self) -> None:
        import torch

        self.info["gpu"] = cuda_program.require_cuda()
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        self.info["tf32"] = False
        try:
            from gpu_memory import PhasePeaks

            self.memory: PhasePeaks | None = PhasePeaks()
        except Exception as exc:  # noqa: BLE001 - NVML is informative; the export goes on without it
            log("load", f"NVML unavailable ({type(exc).__name__}: {exc}); no GPU memory peaks")
            self.memory = None
        log("load", f"GPU {self.info['gpu']}, TF32 off")

    def sync(self) -> None:
        import torch

        torch.cuda.synchronize()

    # save / reload -----------------------------------------------------------------------------------
    def save(self) -> None:
        import torch

        self.saved = {}
        for method, ep in self.eps.items():
            buffer = io.BytesIO()
            torch.export.save(ep, buffer)
            self.saved[method] = buffer.getvalue()
            log("save", f"{method}: {len(self.saved[method]) / 2**20:.1f} MiB")

    def reload(self) -> None:
        import torch

        self.eps = {method: torch.export.load(io.BytesIO(data)) for method, data in self.saved.items()}
        del self.saved
        log("reload", f"{', '.join(self.eps)} loaded back")

    # compile-model -----------------------------------------------------------------------------------
    def compile_model(self) -> None:
        options = cuda_program.compile_options()
        self.info["aoti_options"] = options
        self.info["inductor_cache"] = cuda_program.inductor_cache()
        self.info["triton_ptxas"] = cuda_program.align_triton_ptxas()
        log("compile-model", f"to_edge_transform_and_lower (CudaBackend; max_autotune={options.get('max_autotune')}, "
                             f"gemm={options.get('max_autotune_gemm_backends')}, "
                             f"conv={options.get('max_autotune_conv_backends')}, "
                             f"ptxas={self.info['triton_ptxas'] or 'Triton bundled'}) ...")
        self.program = cuda_program.lower(self.eps)
        del self.eps
        self.blobs = cuda_program.blobs_of(self.program)
        self.info["so_bytes"] = {m: len(so) for m, (so, _) in self.blobs.items()}

    # write -------------------------------------------------------------------------------------------
    def write(self) -> None:
        failed = self.pte.with_name("model.pte.failed")
        if failed.exists():
            failed.unlink()
        self.wrote_pte = True
        _, ptd = cuda_program.write(self.program, self.out)
        del self.program
        self.info["pte_bytes"] = self.pte.stat().st_size
        self.info["ptd_bytes"] = ptd.stat().st_size if ptd.exists() else None
        log("write", f"{self.pte} ({self.info['pte_bytes'] / 2**20:.1f} MiB), {ptd.name} "
                     f"({(self.info['ptd_bytes'] or 0) / 2**20:.1f} MiB)")

    # check -------------------------------------------------------------------------------------------
    def check(self) -> None:
        if self.memory is not None:
            self.memory.enter("run")
        loaded = cuda_program.load(self.pte, self.blobs, self.out / "aoti_check")
        del self.blobs
        self.info["check"], self.info["check_reason"] = loaded.check, loaded.reason
        print(f"Exported policy check: {loaded.check}" + (f" ({loaded.reason})" if loaded.reason else ""),
              flush=True)
        if loaded.run is None:
            raise RuntimeError(f"The exported program could not be checked: {loaded.reason}")
        self._run_method = loaded.run
        log("check", f"running the program ({loaded.check}) ...")
        t0 = time.perf_counter()
        got = self.program_outputs()
        self.sync()
        self.first_exported_s = time.perf_counter() - t0
        self.compare(got, loaded.check)

    def program_outputs(self):
        return self.adapter.compose(dict(self.named), self._run_method)

    # driver ------------------------------------------------------------------------------------------
    def run(self) -> int:
        try:
            return super().run()
        finally:
            memory = getattr(self, "memory", None)
            if memory is not None:
                peaks = memory.stop()
                self.info["peak_gpu_mib"] = peaks
                self.write_info()
                print(f"Exported policy GPU memory: export {peaks.get('export', 0.0):.1f} MiB, "
                      f"run {peaks.get('run', 0.0):.1f} MiB (NVML peak)", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args("executorch_cuda.py", "Export a LeRobot policy with ExecuTorch's CUDA backend and check it.",
                      argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return CudaExport(args).run()


if __name__ == "__main__":
    sys.exit(main())
