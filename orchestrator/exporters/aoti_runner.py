"""Run the AOTInductor shared object that ExecuTorch's CUDA backend put into a program, without ExecuTorch.

CudaBackend compiles each method with `torch._inductor.aot_compile` into a libtorch-free `.wrapper.so` (its
kernels embedded) plus its weights, stored as the program's named data: ExecuTorch 1.2 names them
`<method>_so_blob` (model.pte) and `<method>_weights_blob` (one dense blob in aoti_cuda_blob.ptd); ExecuTorch 1.5
keys the .so by its sha256 and stores each weight apart (`cuda_fqn_weight:cuda:<fqn>`), the delegate's processed
bytes saying which storage is which weight. ExecuTorch's CUDA runtime dlopens that .so, loads the
weights with `AOTInductorModelUpdateConstantsFromBlob` and calls `AOTInductorModelContainerRun`, supplying the
`aoti_torch_*` C shims itself. Where that runtime is missing (PyPI's executorch wheel has no CUDA backend), this
module does the same calls on the same bytes, with libtorch supplying the shims: the very kernels of the
program run, only the shim layer differs. (Loading such a .so with `torch._inductor.aoti_load_package` segfaults:
its constants are not in the .so, and that loader never hands it the blob.)

Imports only stdlib at module level; torch is imported when a program is loaded.
"""

from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass
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


@dataclass(frozen=True)
class FqnConstant:
    """One weight as ExecuTorch >= 1.5 stores it: a named storage in the .ptd viewed as this tensor."""

    fqn: str
    storage: bytes
    dtype: int  # ExecuTorch's ScalarType number
    device_type: int  # 0 cpu, 1 cuda
    storage_offset: int
    sizes: tuple[int, ...]
    strides: tuple[int, ...]


@dataclass(frozen=True)
class MethodBlobs:
    """What one method's delegate needs: its .so and either a dense weights blob (ExecuTorch 1.2) or its
    weights one by one (ExecuTorch 1.5, whose processed bytes hold `ETCUDAFQN3` metadata)."""

    so: bytes
    weights: bytes | None = None
    constants: tuple[FqnConstant, ...] = ()


FQN_MAGIC = b"ETCUDAFQN3"


def decode_fqn_metadata(data: bytes) -> tuple[str, list[tuple[str, str, int, int, int, int, tuple, tuple]]]:
    """(so_blob_key, [(fqn, storage_key, nbytes, dtype, device_type, offset, sizes, strides)]) from a delegate's
    processed bytes, in the layout of ExecuTorch 1.5's `encode_cuda_weight_metadata`."""
    at = len(FQN_MAGIC)

    def take(fmt: str) -> tuple:
        nonlocal at
        values = struct.unpack_from(fmt, data, at)
        at += struct.calcsize(fmt)
        return values

    def string() -> str:
        nonlocal at
        (size,) = take("<I")
        at += size
        return data[at - size:at].decode("utf-8")

    so_key = string()
    (count,) = take("<I")
    entries = []
    for _ in range(count):
        fqn, storage_key = string(), string()
        nbytes, dtype, device_type, offset, rank = take("<QiiqI")
        entries.append((fqn, storage_key, nbytes, dtype, device_type, offset, take(f"<{rank}q"), take(f"<{rank}q")))
    if at != len(data):
        raise RuntimeError(f"{len(data) - at} bytes left over after the CUDA weight metadata")
    return so_key, entries


def blobs_from_files(pte: Path, ptd: Path) -> dict[str, MethodBlobs]:
    """Each method's blobs as the written program holds them: named data of model.pte and of the .ptd next to
    it, read back from disk, so the check runs what a deployment would load."""
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

    def named_bytes(*keys: str) -> list[bytes]:
        missing = [key for key in keys if key not in entries]
        if missing:
            shown = sorted(entries)[:8]
            raise RuntimeError(f"{pte.name} + {ptd.name} have no {', '.join(missing)} "
                               f"({len(entries)} keys: {shown}{' ...' if len(entries) > 8 else ''})")
        return [bytes(entries[key]) for key in keys]

    blobs = {}
    for plan in program.program.execution_plan:
        processed = b""
        if len(plan.delegates) == 1:
            processed = bytes(program.program.backend_delegate_data[plan.delegates[0].processed.index].data)
        if processed.startswith(FQN_MAGIC):
            so_key, weights = decode_fqn_metadata(processed)
            constants = []
            for fqn, storage_key, nbytes, dtype, device_type, offset, sizes, strides in weights:
                (storage,) = named_bytes(storage_key)
                if len(storage) != nbytes:
                    raise RuntimeError(f"{storage_key} holds {len(storage)} bytes, its metadata says {nbytes}")
                constants.append(FqnConstant(fqn, storage, dtype, device_type, offset, sizes, strides))
            blobs[plan.name] = MethodBlobs(named_bytes(so_key)[0], constants=tuple(constants))
        else:
            so, weights = named_bytes(f"{plan.name}_so_blob", f"{plan.name}_weights_blob")
            blobs[plan.name] = MethodBlobs(so, weights=weights)
    return blobs


def write_so(so: bytes, workdir: Path, name: str) -> Path:
    """The method's .so on disk (dlopen needs a file), with libtorch's shims made visible to it."""
    export_libtorch_symbols()
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"{name}.wrapper.so"
    path.write_bytes(so)
    return path


# ExecuTorch's ScalarType numbers (the ones weights use) to torch dtype names.
_SCALAR_TYPES = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16", 6: "float32",
                 7: "float64", 11: "bool", 15: "bfloat16"}


def constant_tensor(constant: FqnConstant, device: str) -> Any:
    """The weight as a tensor on its device, viewed over its storage with the recorded offset and strides."""
    import torch

    name = _SCALAR_TYPES.get(constant.dtype)
    if name is None:
        raise RuntimeError(f"{constant.fqn}: ScalarType {constant.dtype} is not one of {sorted(_SCALAR_TYPES)}")
    flat = torch.frombuffer(bytearray(constant.storage), dtype=torch.uint8).view(getattr(torch, name))
    flat = flat.to(device if constant.device_type == 1 else "cpu")
    return flat.as_strided(constant.sizes, constant.strides, constant.storage_offset)


class FqnAotiMethod:
    """A method of ExecuTorch >= 1.5: torch's AOTI container runner on the .so, its weights handed over by FQN
    as user-managed constants (what ExecuTorch's CUDA runtime does), since no dense blob exists."""

    def __init__(self, blobs: MethodBlobs, workdir: Path, name: str, device: str = "cuda") -> None:
        import torch

        self.so_path = write_so(blobs.so, workdir, name)
        self.runner = torch._C._aoti.AOTIModelContainerRunnerCuda(str(self.so_path), 1, device)
        by_fqn = {fqn: constant for constant, fqn in self.runner.get_constant_names_to_original_fqns().items()}
        self.constants = {}  # kept alive: the container holds these tensors, it does not copy them
        for constant in blobs.constants:
            self.constants[by_fqn.get(constant.fqn, constant.fqn)] = constant_tensor(constant, device)
        self.runner.update_constant_buffer(self.constants, False, False, True)

    def __call__(self, inputs: list[Any]) -> list[Any]:
        return self.runner.run([t.contiguous() for t in inputs])


def load_methods(pte: Path, ptd: Path, workdir: Path, device: str = "cuda") -> dict[str, Any]:
    """Each method of the written program as a callable on torch tensors."""
    methods: dict[str, Any] = {}
    for name, blobs in blobs_from_files(pte, ptd).items():
        if blobs.weights is not None:
            methods[name] = AotiMethod(blobs.so, blobs.weights, workdir, name, device)
        else:
            methods[name] = FqnAotiMethod(blobs, workdir, name, device)
    return methods


class AotiMethod:
    """One method's compiled container, called with torch tensors on its device, returning torch tensors."""

    def __init__(self, so_bytes: bytes, weights: bytes, workdir: Path, name: str, device: str = "cuda") -> None:
        self.so_path = write_so(so_bytes, workdir, name)
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


