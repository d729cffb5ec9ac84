"""Run the AOTInductor shared object that ExecuTorch's CUDA backend put into a program, without ExecuTorch.

CudaBackend compiles each method with `torch._inductor.aot_compile` into a libtorch-free `.wrapper.so` (its
kernels embedded) plus a weights blob, and stores both as the program's named data (`<method>_so_blob` in
model.pte, `<method>_weights_blob` in aoti_cuda_blob.ptd). ExecuTorch's CUDA runtime dlopens that .so, loads the
weights with `AOTInductorModelUpdateConstantsFromBlob` and calls `AOTInductorModelContainerRun`, supplying the
`aoti_torch_*` C shims itself. Where that runtime is missing (PyPI's executorch wheel has no CUDA backend), this
module does the same calls on the same bytes, with libtorch supplying the shims: the very kernels of the
program run, only the shim layer differs. (Loading such a .so with `torch._inductor.aoti_load_package` segfaults:
its constants are not in the .so, and that loader never hands it the blob.)

Imports only stdlib at module level; torch is imported when a program is loaded.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

_api = ctypes.pythonapi
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

_shims_global = False


def export_libtorch_symbols() -> None:
    """Make libtorch's `aoti_torch_*` shims visible to a .so that was built not to link libtorch."""
    global _shims_global
    if _shims_global:
        return
    import torch

    lib_dir = Path(torch.__file__).resolve().parent / "lib"
    for name in ("libc10.so", "libtorch_cpu.so", "libc10_cuda.so", "libtorch_cuda.so"):
        path = lib_dir / name
        if path.exists():
            ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)  # already loaded: this only promotes it to global
    _shims_global = True


def blobs_from_files(pte: Path, ptd: Path) -> dict[str, tuple[bytes, bytes]]:
    """Each method's (.so, weights) bytes as the written program holds them: named data of model.pte and of the
    .ptd next to it, read back from disk, so the check runs what a deployment would load."""
    from executorch.exir._serialize._program import deserialize_pte_binary
    from executorch.extension.flat_tensor.serialize.serialize import FlatTensorSerializer

    program = deserialize_pte_binary(pte.read_bytes())
    named = program.named_data
    if named is None:
        raise RuntimeError(f"{pte.name} has no named data (not lowered by an AOTInductor backend?)")
    entries = {key: named.buffers[entry.buffer_index] for key, entry in named.pte_data.items()}
    if ptd.exists():
        payload = FlatTensorSerializer().deserialize(ptd.read_bytes())
        entries.update({key: payload.buffers[entry.buffer_index] for key, entry in payload.named_data.items()})
    blobs = {}
    for plan in program.program.execution_plan:
        keys = (f"{plan.name}_so_blob", f"{plan.name}_weights_blob")
        missing = [key for key in keys if key not in entries]
        if missing:
            raise RuntimeError(f"{pte.name} + {ptd.name} have no {', '.join(missing)} (keys: {sorted(entries)})")
        blobs[plan.name] = (bytes(entries[keys[0]]), bytes(entries[keys[1]]))
    return blobs


class AotiMethod:
    """One method's compiled container, called with torch tensors on its device, returning torch tensors."""

    def __init__(self, so_bytes: bytes, weights: bytes, workdir: Path, name: str, device: str = "cuda") -> None:
        export_libtorch_symbols()
        workdir.mkdir(parents=True, exist_ok=True)
        self.so_path = workdir / f"{name}.wrapper.so"
        self.so_path.write_bytes(so_bytes)
        self.lib = ctypes.CDLL(str(self.so_path))
        self.name = name
        self.handle = ctypes.c_void_p()
        self._call("AOTInductorModelContainerCreateWithDevice", ctypes.byref(self.handle), ctypes.c_size_t(1),
                   device.encode(), None)
        # The model copies the weights to the device; the host copy must outlive that call.
        self._weights = ctypes.create_string_buffer(weights, len(weights)) if weights else None
        if self._weights is not None:
            self._call("AOTInductorModelUpdateConstantsFromBlob", self.handle, self._weights)
        count = ctypes.c_size_t()
        self._call("AOTInductorModelContainerGetNumOutputs", self.handle, ctypes.byref(count))
        self.num_outputs = count.value

    def _call(self, fn: str, *args: Any) -> None:
        code = getattr(self.lib, fn)(*args)
        if code != 0:
            raise RuntimeError(f"{fn} failed for method {self.name} (AOTIRuntimeError {code})")

    def __call__(self, inputs: list[Any]) -> list[Any]:
        import torch

        tensors = [t.contiguous() for t in inputs]
        capsules = torch._C._aoti.unsafe_alloc_void_ptrs_from_tensors(tensors)  # stolen by the run
        handles = (ctypes.c_void_p * len(capsules))(*[_api.PyCapsule_GetPointer(c, None) for c in capsules])
        outputs = (ctypes.c_void_p * self.num_outputs)()
        stream = torch.cuda.current_stream().cuda_stream if self.device_is_cuda(tensors) else None
        self._call("AOTInductorModelContainerRun", self.handle, handles, ctypes.c_size_t(len(capsules)), outputs,
                   ctypes.c_size_t(self.num_outputs), ctypes.c_void_p(stream), None)
        return torch._C._aoti.alloc_tensors_by_stealing_from_void_ptrs(
            [_api.PyCapsule_New(ptr, None, None) for ptr in outputs]
        )

    @staticmethod
    def device_is_cuda(tensors: list[Any]) -> bool:
        return any(t.is_cuda for t in tensors)

    def close(self) -> None:
        if self.handle:
            self.lib.AOTInductorModelContainerDelete(self.handle)
            self.handle = ctypes.c_void_p()


def executorch_cuda_unavailable() -> str | None:
    """Why the installed ExecuTorch runtime cannot run a CUDA program, or None where it can."""
    try:
        from executorch.runtime import Runtime
    except Exception as exc:  # noqa: BLE001 - any import failure is the reason
        return f"executorch.runtime does not import ({type(exc).__name__}: {exc})"
    registry = Runtime.get().backend_registry
    if registry.is_available("CudaBackend"):
        return None
    names = ", ".join(registry.registered_backend_names) or "none"
    return f"this ExecuTorch runtime has no CudaBackend (registered backends: {names})"


