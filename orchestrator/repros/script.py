"""The form of a generated repro: a standalone script, torch and ExecuTorch only, in the repro pack's shape.

A Part is a module's body: parameters and buffers (random values of the program's shapes and dtypes: the failure
is the compiler's, not the weights'), inputs, one line per graph node. render() puts it in the script with the
exporter's lowering (LOWERING: the same partitioner and compile settings as exporters/executorch_cpu.py and
cuda_program.py), the versions and device printed first, and `Repro error: "<error>"` (a JSON string: the
message's lines kept) with exit status 1 last.
Stdlib only: generate.py imports it in a torch build.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field
from typing import Any

import errors

MAX_ERROR = 20000
PARAM_KINDS = {"PARAMETER": "parameter", "BUFFER": "buffer", "CONSTANT_TENSOR": "buffer"}


@dataclass
class Part:
    params: list[tuple[str, str, tuple[int, ...], Any, str]] = field(default_factory=list)  # name, kind, shape...
    inputs: list[tuple[str, tuple[int, ...], Any, str]] = field(default_factory=list)  # name, shape, dtype, source
    lines: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)

    def add_tensor(self, kind: str, shape: tuple[int, ...], dtype: Any, source: str) -> str:
        if kind in PARAM_KINDS:
            name = f"p{len(self.params)}"
            self.params.append((name, PARAM_KINDS[kind], shape, dtype, source))
            return f"self.{name}"
        name = f"x{len(self.inputs)}"
        self.inputs.append((name, shape, dtype, source))
        return name

    def add_line(self, expression: str, comment: str = "") -> str:
        name = f"v{len(self.lines)}"
        self.lines.append(f"{name} = {expression}" + (f"  # {comment}" if comment else ""))
        return name


def literal(value: Any) -> str:
    """A graph argument as Python source: dtypes, devices, layouts, numbers, lists."""
    import torch

    if isinstance(value, torch.dtype):
        return f"torch.{str(value).removeprefix('torch.')}"
    if isinstance(value, torch.device):
        return f"torch.device({str(value)!r})"
    if isinstance(value, (torch.layout, torch.memory_format)):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(literal(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    raise ValueError(f"no literal for {type(value).__name__} {value!r}")


def error_line(exc: BaseException) -> str:
    """The error as a script prints it: qualified type, message and notes, lines kept (errors.py reads them)."""
    name = type(exc).__qualname__
    if type(exc).__module__ not in ("builtins", "__main__"):
        name = f"{type(exc).__module__}.{name}"
    return "\n".join([f"{name}: {exc}", *map(str, getattr(exc, "__notes__", []))])[:MAX_ERROR]


XNNPACK = '''
def lower(ep, inputs):
    """executorch_cpu's lowering: XNNPACK partitioner, default EdgeCompileConfig, to_executorch{more}."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    edge = to_edge_transform_and_lower({{METHOD: ep}}, partitioner=[XnnpackPartitioner()],
                                       compile_config=EdgeCompileConfig(**EDGE_COMPILE))
    program = edge.to_executorch()
'''
CUDA = '''
def lower(ep, inputs):
    """executorch_cuda's lowering: CudaPartitioner, CudaBackend's own AOTInductor options, the fork's
    EdgeCompileConfig, to_executorch{more}."""
    from executorch.backends.cuda.cuda_backend import CudaBackend
    from executorch.backends.cuda.cuda_partitioner import CudaPartitioner
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    part = CudaPartitioner([CudaBackend.generate_method_name_compile_spec(METHOD)])
    edge = to_edge_transform_and_lower({{METHOD: ep}}, partitioner={{METHOD: [part]}},
                                       compile_config=EdgeCompileConfig(**EDGE_COMPILE))
    program = edge.to_executorch()
'''
WRITE = '''    folder = tempfile.mkdtemp()
    with open(os.path.join(folder, "model.pte"), "wb") as handle:
        program.write_to_file(handle)
'''
WRITE_PTD = "    program.write_tensor_data_to_file(folder)\n"
CHECK = '''    from executorch.runtime import Runtime

    data = {{"data_path": os.path.join(folder, "aoti_cuda_blob.ptd")}} if DEVICE == "cuda" else {{}}
    method = Runtime.get().load_program(os.path.join(folder, "model.pte"), **data).load_method(METHOD)
    method.execute([t.cpu() for t in inputs])
'''
LANES = {"executorch_cpu": (XNNPACK, {}), "executorch_cuda": (CUDA, {"_check_ir_validity": False,
                                                                     "_skip_dim_order": True})}
STEP_STAGES = {"lower": 0, "compile-model": 0, "write": 1, "check": 2}

TEMPLATE = '''"""Generated repro of {cell}: {title}

The cell ({exporter}; {versions}) failed in its {step} step with:

{error}

{how}

    python {name}            # exits 1 with the error; 0 where it no longer fails

Made by `export-matrix repro {cell}` (orchestrator/repros/generate.py).
"""

import json
import os
import sys
import tempfile
import traceback
from importlib.metadata import version

import torch
from torch import nn

DEVICE = {device!r}
METHOD = {method!r}
EDGE_COMPILE = {edge}


class Repro(nn.Module):
    def __init__(self):
        super().__init__()
{init}
    def forward(self{args}):
{body}        return ({outputs},)


INPUTS = [{inputs}]  # shape, dtype
{lower}

def main():
    gpu = f"{{torch.cuda.get_device_name()}} {{torch.cuda.get_device_capability()}}" if DEVICE == "cuda" else "cpu"
    print(f"torch {{torch.__version__}}, executorch {{version('executorch')}}, device {{gpu}}", flush=True)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    with torch.no_grad():
        model = Repro().to(DEVICE).eval()
        inputs = tuple(torch.randn(s, dtype=d, device=DEVICE) if d.is_floating_point
                       else torch.zeros(s, dtype=d, device=DEVICE) for s, d in INPUTS)
        lower(torch.export.export(model, inputs), inputs)
    print("no error: the failure does not reproduce here", flush=True)


if __name__ == "__main__":
    try:
        main()
    except Exception as exc:
        traceback.print_exc()
        name = type(exc).__qualname__ if type(exc).__module__ == "builtins" else \\
            f"{{type(exc).__module__}}.{{type(exc).__qualname__}}"
        notes = "".join(f"\\n{{note}}" for note in getattr(exc, "__notes__", []))
        print("Repro error: " + json.dumps(f"{{name}}: {{exc}}{{notes}}"[:20000]), flush=True)
        sys.exit(1)
'''


def render(part: Part, meta: dict[str, Any], method: str, expected: dict[str, str], how: str) -> str:
    import torch

    lowering, edge = LANES[meta["exporter"]]
    edge = {**edge, **meta.get("edge_compile", {})}
    stage = STEP_STAGES.get(meta["step"], 0)
    cuda = meta["exporter"] == "executorch_cuda"
    more = ", written" if stage >= 1 else ""
    more += ", loaded and run by the ExecuTorch runtime" if stage >= 2 else ""
    lower = lowering.format(more=more) + (WRITE + (WRITE_PTD if cuda else "") if stage >= 1 else "") + \
        (CHECK.format() if stage >= 2 else "")

    def shown(shape: tuple[int, ...], dtype: Any) -> str:
        return f"({literal(tuple(shape))}, {literal(dtype)})"

    init = "".join(
        f"        self.{name} = nn.Parameter(torch.randn({literal(tuple(shape))}, dtype={literal(dtype)}), "
        f"requires_grad=False)  # {source}\n" if kind == "parameter" and dtype.is_floating_point else
        f"        self.register_buffer({name!r}, torch.{'randn' if dtype.is_floating_point else 'zeros'}"
        f"({literal(tuple(shape))}, dtype={literal(dtype)}))  # {source}\n"
        for name, kind, shape, dtype, source in part.params)
    error = meta["error"]
    title = expected.get("fact") or expected.get("first_line", "")
    versions = ", ".join(f"{k} {v}" for k, v in (meta.get("versions") or {}).items() if v) or "its build"
    del torch
    nodes = len([line for line in part.lines if "torch.ops." in line])
    needs = " (its CUDA build, on a GPU)" if cuda else " (flatc on PATH: the build's bin/ has it)"
    return TEMPLATE.format(
        cell=meta.get("cell") or "a cell", title=errors.one_line(title, 120), exporter=meta["exporter"],
        versions=versions, step=meta["step"],
        error=textwrap.indent(textwrap.fill(errors.first_line(error)[:400], 100), "    "),
        how=textwrap.fill(
            f"This script is {how}: {nodes} node(s) of the exported program, with random parameters and inputs of "
            "its shapes and dtypes (the failure is the compiler's, not the weights'). Needs only torch and "
            f"ExecuTorch{needs}. Run it from a folder with no executorch checkout:", 110),
        method=method, name=f"{errors.slug(expected)}.py", device="cuda" if cuda else "cpu", edge=repr(edge), init=init,
        args="".join(f", {name}" for name, *_ in part.inputs),
        body="".join(f"        {line}\n" for line in part.lines), outputs=", ".join(part.outputs),
        inputs=", ".join(shown(shape, dtype) for _, shape, dtype, _ in part.inputs), lower=lower)
