"""Built-in exporter for NVIDIA GPUs: a LeRobot policy through ExecuTorch's CUDA backend, checked against eager.

Runs as a file with the interpreter of a torch build that has CUDA (torch, executorch, lerobot):

    HF_HUB_OFFLINE=1 PATH=<venv>/bin:$PATH <python> orchestrator/exporters/executorch_cuda.py \
        --policy.path=<checkpoint dir> --output_dir=<out> [--task=TEXT] [--tolerance=X] [--runs=N]
        [--warmups=N] [--vision_autocast]

The steps are the fork's (`lerobot-export --backend.type=executorch_cuda`), so the same log patterns read both:

  load           the policy on the GPU in its config's dtype (float32 unless the config says bfloat16), TF32
                 off for matmuls and convolutions on both sides; seeded inputs as a robot sends them, the
                 policy's random draws among them (policy_adapters.py, random_inputs.py), on the GPU; eager run.
  trace          torch.export of each of the adapter's methods (policy_adapters.py).
  save, reload   torch.export.save of each program to RESUME/<method>.pt2, with the eager reference (inputs,
                 action, eager timings), then torch.export.load of those files (where rows 7 and 8 of the repro
                 pack fail: flat_apply's TreeSpec, wrap_with_autocast's missing val).
  compile-model  to_edge_transform_and_lower with CudaPartitioner (one compile spec per method) and the fork's
                 EdgeCompileConfig(_check_ir_validity=False, _skip_dim_order=True), then to_executorch (inputs
                 and outputs kept on the GPU where this ExecuTorch has PropagateDeviceConfig): CudaBackend runs
                 AOTInductor with its own options (max-autotune, Triton-only GEMM and convolution kernels,
                 libtorch-free .so), which export_info.json records, with Triton's ptxas set to the compile
                 workers' (cuda_program.align_triton_ptxas says why). A method that is not exactly one CudaBackend
                 delegate fails here (`not_one_delegate: ... operators outside: ...`), as the fork refuses it.
  write          OUT/model.pte and OUT/aoti_cuda_blob.ptd (the weights).
  check          loads the written model.pte + .ptd back from disk, runs it and compares with eager (tolerance:
                 --tolerance, the policy config's, else 1e-3), prints the files' sha256
                 (`Exported policy checked files: {...}`) and which check ran:
                   `Exported policy check: executorch` where the installed ExecuTorch runtime has CudaBackend
                   (a CUDA build of ExecuTorch): model.pte + .ptd executed by it;
                   `Exported policy check: aoti (<why not executorch>)` otherwise: each method's compiled .so and
                   weights blob, read from the files' named data, run through the AOTInductor C interface
                   with libtorch's shims (aoti_runner.py) - the same kernels, another shim layer;
                   `Exported policy check: none (<why>)` when neither could run: the step fails, since a
                   program nobody ran has not passed.
  time           the checked program's median after warm-ups (20 + 100 runs, fewer for chunks over a second),
                 CUDA-synchronized, against eager's
                 (timed in load, export_base.time_eager: the same compose over the traced modules).
  kernels        where the exported program is slower than eager (or --kernels): a few more runs of each side
                 under torch.profiler, each side's top 10 CUDA kernels by GPU time with calls per run, ms per call
                 and share (kernel_profile.py), in export_info.json's `kernels` and the line
                 `Exported policy kernels: {...}`. It never fails the export.

RESUME is $EXPORT_MATRIX_RESUME_DIR (the orchestrator sets <cell>/resume, kept across attempts), else OUT/resume.
An attempt that finds it complete and keyed to the same checkpoint, task, tolerance, versions and exporter
sources prints `[load] resumed from RESUME` and runs load (the reference only), reload, compile-model, write,
check and time: a job stopped at its time limit during the lowering goes on from there when rerun. A decided
run (passed, or failed after save) removes it.

At the end, whatever happened: `Exported policy GPU memory: export <MiB> MiB, run <MiB> MiB (NVML peak)`,
export covering load to write and run covering check and time. Inductor's caches go where
TORCHINDUCTOR_CACHE_DIR points (the orchestrator sets it), so a rerun does not autotune again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cuda_program  # noqa: E402
from export_base import PolicyExport, log, parse_args, versions  # noqa: E402

RESUMED_STEPS = ("load", "reload", "compile-model", "write", "check", "time", "kernels")
SOURCES = ("export_base.py", "policy_adapters.py", "random_inputs.py", "executorch_cuda.py", "cuda_program.py",
           "aoti_runner.py")


class CudaExport(PolicyExport):
    exporter = "executorch_cuda"
    device = "cuda"
    STEPS = ("load", "trace", "save", "reload", "compile-model", "write", "check", "time", "kernels")

    def __init__(self, args):
        super().__init__(args)
        # Where `save` puts the exported programs and the eager reference; an attempt whose key matches starts
        # from them (RESUMED_STEPS), so a 4-billion-parameter VLA's load, trace and save are paid once.
        self.resume_dir = Path(os.environ.get("EXPORT_MATRIX_RESUME_DIR") or self.out / "resume")
        self.key = resume_key(args)
        self.resuming = _read_key(self.resume_dir) == self.key
        if self.resuming:
            self.STEPS = RESUMED_STEPS

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

    # load (resumed) ----------------------------------------------------------------------------------
    def load(self) -> None:
        if not self.resuming:
            return super().load()
        import torch

        reference = torch.load(self.resume_dir / REFERENCE, weights_only=True)
        if reference["compose"] != "forward":  # the adapter's loop needs the policy: load it, skip trace and save
            log("load", f"resumed from {self.resume_dir}: its programs, with the policy loaded for its adapter")
            return super().load()
        self.prepare()
        log("load", f"resumed from {self.resume_dir}: the programs and eager reference an earlier attempt saved "
                    "(the policy is not loaded)")
        import policy_adapters

        self.adapter = policy_adapters.ForwardOnly()
        self.names = list(reference["names"])
        self.inputs = [t.to(self.device) for t in reference["inputs"]]
        self.named = dict(zip(self.names, self.inputs, strict=True))
        self.expected = reference["expected"].to(self.device)
        self.first_eager_s = reference["first_eager_s"]
        self.info.update(reference["info"])
        self.info["resumed"] = True
        self.set_tolerance()

    # save / reload -----------------------------------------------------------------------------------
    def save(self) -> None:
        import torch

        shutil.rmtree(self.resume_dir, ignore_errors=True)
        self.resume_dir.mkdir(parents=True)
        for method, ep in self.eps.items():
            path = self.resume_dir / f"{method}.pt2"
            torch.export.save(ep, path)
            log("save", f"{method}: {path.stat().st_size / 2**20:.1f} MiB ({path})")
        compose = "forward" if type(self.adapter).compose is _chunk_compose() else "policy"
        kept = ("policy_type", "dtype", "device", "params_M", "tolerance", "adapter", "inputs", "output_shape",
                "graph_nodes", "versions", "eager_ms", "eager_policy_ms", "timing")
        torch.save({"compose": compose, "names": self.names, "inputs": [t.cpu() for t in self.inputs],
                    "expected": self.expected.cpu(), "first_eager_s": self.first_eager_s,
                    "info": {k: self.info[k] for k in kept if k in self.info}}, self.resume_dir / REFERENCE)
        (self.resume_dir / KEY).write_text(self.key)  # last: the folder is complete

    def reload(self) -> None:
        import torch

        self.eps = {path.stem: torch.export.load(path) for path in sorted(self.resume_dir.glob("*.pt2"))}
        log("reload", f"{', '.join(self.eps)} loaded back from {self.resume_dir}")

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
        self.info["edge_compile"] = cuda_program.EDGE_COMPILE
        self.info["io_lowered"] = cuda_program.gpu_resident_config()[1]
        self.program = cuda_program.lower(self.eps)
        del self.eps
        self.info["delegates"] = cuda_program.delegate_gate(self.program)
        log("compile-model", "one CudaBackend delegate per method, nothing outside it")

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
        loaded = cuda_program.load(self.pte, self.out / "aoti_check")
        self.info["check"], self.info["check_reason"] = loaded.check, loaded.reason
        print(f"Exported policy check: {loaded.check}" + (f" ({loaded.reason})" if loaded.reason else ""),
              flush=True)
        if loaded.run is None:
            raise RuntimeError(f"The exported program could not be checked: {loaded.reason}")
        self.info["checked_files"] = cuda_program.file_digests(self.pte)
        print(f"Exported policy checked files: {json.dumps(self.info['checked_files'])}", flush=True)
        self._run_method = loaded.run
        self.io = loaded.io
        log("check", f"running the program ({loaded.check}) from {self.pte.name} ...")
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
            code = super().run()
        finally:
            memory = getattr(self, "memory", None)
            if memory is not None:
                peaks = memory.stop()
                self.info["peak_gpu_mib"] = peaks
                self.write_info()
                print(f"Exported policy GPU memory: export {peaks.get('export', 0.0):.1f} MiB, "
                      f"run {peaks.get('run', 0.0):.1f} MiB (NVML peak)", flush=True)
        if self.info.get("failed_step") not in ("load", "trace", "save"):
            # Decided (passed, or failed in a step that starts after the saved state): the next attempt
            # starts afresh, and the saved programs (gigabytes for a VLA) do not stay behind.
            shutil.rmtree(self.resume_dir, ignore_errors=True)
        return code


REFERENCE = "reference.pt"
KEY = "key"


def _chunk_compose():
    import policy_adapters

    return policy_adapters.ChunkAdapter.compose


def resume_key(args) -> str:
    """What the saved programs depend on: the checkpoint's files, the task, tolerance, versions, our sources."""
    here = Path(__file__).resolve().parent
    ckpt = Path(args.policy_path)
    files = {p.name: [p.stat().st_size, p.stat().st_mtime_ns] for p in sorted(ckpt.glob("*")) if p.is_file()} \
        if ckpt.is_dir() else {}
    blob = json.dumps({"policy": str(ckpt.resolve()), "files": files, "task": args.task,
                       "tolerance": args.tolerance, "versions": versions(),
                       "sources": [hashlib.sha256((here / name).read_bytes()).hexdigest() for name in SOURCES]},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def _read_key(resume_dir: Path) -> str | None:
    try:
        return (resume_dir / KEY).read_text()
    except OSError:
        return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args("executorch_cuda.py", "Export a LeRobot policy with ExecuTorch's CUDA backend and check it.",
                      argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return CudaExport(args).run()


if __name__ == "__main__":
    sys.exit(main())
