"""Lower exported programs with ExecuTorch's CUDA backend, write them, and load them back to run and check.

Shared by the executorch_cuda exporter and the standalone repros (orchestrator/repros/), so both lower with the
backend's own options and both say the same way which check ran:

  "executorch"  the installed ExecuTorch runtime has CudaBackend (a CUDA build of ExecuTorch): model.pte + .ptd
                are loaded and executed by it;
  "aoti"        it has not (PyPI's wheel): each method's compiled .so and weights, taken from the program's
                named data, run through the AOTInductor C interface with libtorch's shims (aoti_runner.py);
  "none"        neither could run; the reason says why, and the caller must not call the program checked.

Imports only stdlib at module level: the file runs in a torch build's interpreter, next to the exporters.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aoti_runner import executorch_cuda_unavailable, load_methods

PTD_NAME = "aoti_cuda_blob.ptd"
RunMethod = Callable[[str, list[Any]], list[Any]]


def require_cuda() -> str:
    """The device's name and capability; a one-line RuntimeError where this torch sees no CUDA device."""
    import torch

    if not torch.cuda.is_available():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        raise RuntimeError(
            f"no CUDA device visible to the job: torch {torch.__version__} (CUDA {torch.version.cuda}) sees "
            f"{torch.cuda.device_count()} devices (CUDA_VISIBLE_DEVICES={visible})"
        )
    major, minor = torch.cuda.get_device_capability()
    return f"{torch.cuda.get_device_name()} (sm_{major}{minor})"


def compile_options() -> dict[str, Any]:
    """The AOTInductor options CudaBackend compiles with (asked from the backend, never retyped)."""
    from executorch.backends.cuda.cuda_backend import CudaBackend

    return dict(CudaBackend.get_aoti_compile_options([]))


def align_triton_ptxas() -> str | None:
    """Give this process the ptxas Inductor's compile workers use, so the kernels they precompile are found here.

    The workers point TRITON_PTXAS_PATH at torch's own ptxas (torch/bin/ptxas, CUDA 13.0 in torch 2.11 cu130)
    while this process keeps Triton's bundled one (CUDA 12.8); `ptxas --version` is part of Triton's cache key,
    so every autotune choice the workers compiled missed and was compiled again, serially, in this process:
    up to 4.6 s a choice on an H200, and ACT ran past 9 minutes in compile-model. Torch's own helper sets it here too
    (it leaves a TRITON_PTXAS_PATH the user set). Must run before this process compiles its first Triton kernel.
    Returns the ptxas in use (None: Triton's bundled one).
    """
    try:
        from torch._inductor.runtime.compile_tasks import _set_triton_ptxas_path
    except ImportError:  # a torch without compile workers' ptxas choice: nothing to align
        return os.environ.get("TRITON_PTXAS_PATH")
    _set_triton_ptxas_path()
    return os.environ.get("TRITON_PTXAS_PATH")


class NotOneDelegate(RuntimeError):
    """The lowered program is not one CudaBackend delegate per method: the fork's export refuses it."""


def lower(eps: dict[str, Any]) -> Any:
    """to_edge_transform_and_lower with one CudaPartitioner per method and the fork's compile settings, then
    to_executorch, keeping inputs and outputs on the GPU where this ExecuTorch can (device_resident says)."""
    align_triton_ptxas()
    from executorch.backends.cuda.cuda_backend import CudaBackend
    from executorch.backends.cuda.cuda_partitioner import CudaPartitioner
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    partitioners = {m: [CudaPartitioner([CudaBackend.generate_method_name_compile_spec(m)])] for m in eps}
    edge = to_edge_transform_and_lower(eps, partitioner=partitioners,
                                       compile_config=EdgeCompileConfig(**EDGE_COMPILE))
    config, _ = gpu_resident_config()
    return edge.to_executorch(config) if config is not None else edge.to_executorch()


EDGE_COMPILE = {"_check_ir_validity": False, "_skip_dim_order": True}  # the fork's (act_executorch_cuda.py)


def gpu_resident_config() -> tuple[Any, str]:
    """The fork's GPU_RESIDENT backend config (no host copies of the program's inputs and outputs), and a line
    saying whether this ExecuTorch has it (PropagateDeviceConfig came after ExecuTorch 1.2)."""
    try:
        from executorch.exir import ExecutorchBackendConfig
        from executorch.exir.passes.memory_planning_pass import MemoryPlanningPass
        from executorch.exir.passes.propagate_device_pass import PropagateDeviceConfig
    except ImportError as exc:
        return None, f"host copies: this ExecuTorch has no PropagateDeviceConfig ({exc.name} missing)"
    config = ExecutorchBackendConfig(
        propagate_device_config=PropagateDeviceConfig(skip_h2d_for_method_inputs=True,
                                                      skip_d2h_for_method_outputs=True),
        enable_non_cpu_memory_planning=True,
        memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False))
    return config, "on the GPU (PropagateDeviceConfig: no host copies of inputs and outputs)"


def delegate_gate(program: Any) -> dict[str, dict[str, Any]]:
    """Each method must be exactly one CudaBackend delegate with no operator outside it, as the fork's
    check_program demands; NotOneDelegate names what was left outside. Returns each method's count."""
    from collections import Counter

    found = {}
    for method in program.methods:
        delegates, outside = 0, Counter()
        for node in program.exported_program(method).graph.nodes:
            if node.op != "call_function":
                continue
            target = str(getattr(node.target, "__name__", node.target))
            if "executorch_call_delegate" in target:
                delegates += 1
            elif "getitem" not in target and target not in ("alloc", "memory.alloc"):
                outside[str(node.target)] += 1
        found[method] = {"delegates": delegates, "outside": dict(outside.most_common(12))}
    bad = {m: f for m, f in found.items() if f["delegates"] != 1 or f["outside"]}
    if bad:
        parts = [f"method {m}: {f['delegates']} CudaBackend delegates, operators outside: "
                 + (", ".join(f"{op} x{n}" for op, n in f["outside"].items()) or "none") for m, f in bad.items()]
        raise NotOneDelegate("not_one_delegate: " + "; ".join(parts)
                             + " (the fork's export refuses a program that is not one CUDA delegate)")
    return found


def write(program: Any, out: Path) -> tuple[Path, Path]:
    """OUT/model.pte and OUT/aoti_cuda_blob.ptd (the weights)."""
    out.mkdir(parents=True, exist_ok=True)
    pte = out / "model.pte"
    with open(pte, "wb") as handle:
        program.write_to_file(handle)
    program.write_tensor_data_to_file(str(out))
    return pte, out / PTD_NAME


@dataclass
class LoadedProgram:
    check: str  # "executorch" | "aoti" | "none"
    reason: str | None  # why not executorch (for "aoti"), why neither (for "none")
    run: RunMethod | None
    io: str = "none: nothing ran"  # where the program's inputs and outputs live while it is timed


def load(pte: Path, workdir: Path, device: str = "cuda") -> LoadedProgram:
    """The written program ready to run: by the ExecuTorch runtime where it has CudaBackend, else through AOTI.

    Either way it is read from model.pte and the .ptd beside it, never from the program still in memory."""
    reason = executorch_cuda_unavailable()
    if reason is None:
        try:
            return LoadedProgram("executorch", None, _executorch_runner(pte, device),
                                 "copied to the host and back each call (the ExecuTorch runtime's Python API)")
        except Exception as exc:  # noqa: BLE001 - the reason goes into the record and the AOTI check runs
            reason = f"the ExecuTorch runtime could not load the program ({type(exc).__name__}: {exc})"
    try:
        runners = load_methods(pte, pte.parent / PTD_NAME, workdir, device)
    except Exception as exc:  # noqa: BLE001
        return LoadedProgram("none", f"{reason}; the program's AOTInductor .so did not load "
                                     f"({type(exc).__name__}: {exc})", None)
    return LoadedProgram("aoti", reason, lambda method, args: runners[method](list(args)),
                         "on the GPU: the AOTI runner takes and returns CUDA tensors")


def file_digests(pte: Path) -> dict[str, str]:
    """sha256 of model.pte and its .ptd: which written files a check ran."""
    digests = {}
    for path in (pte, pte.parent / PTD_NAME):
        if path.exists():
            digest = hashlib.sha256()
            with open(path, "rb") as handle:
                while chunk := handle.read(1 << 24):
                    digest.update(chunk)
            digests[path.name] = digest.hexdigest()
    return digests


def _executorch_runner(pte: Path, device: str) -> RunMethod:
    import torch
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(pte, data_path=str(pte.parent / PTD_NAME))
    methods = {name: program.load_method(name) for name in sorted(program.method_names)}

    def run(method: str, args: list[Any]) -> list[Any]:
        _ = program  # the methods need their program alive
        outputs = methods[method].execute([a.cpu() for a in args])
        outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
        return [torch.as_tensor(o).to(device) for o in outputs]

    return run


def inductor_cache() -> str | None:
    return os.environ.get("TORCHINDUCTOR_CACHE_DIR")
