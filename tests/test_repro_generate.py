"""`export-matrix repro` and the generator behind it, on the CPU lane (XNNPACK), for real.

The CPU lane's lowering fails of its own on operators outside Core ATen (the edge dialect's check names the
operator: a one-node program) and, with that check off, on operators the portable runtime has no kernel for
(the program does not load, and the error names no operator: delta debugging). A program with such a node
planted stands in for a policy here: no small LeRobot policy fails the CPU lane's lowering today. tdmpc_mpc's
trace failure is a real cell's.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.repros import errors
from tests.conftest import cli, record, write

ROOT = Path(__file__).resolve().parents[1]
GENERATOR = ROOT / "orchestrator" / "repros" / "generate.py"
needs_export_env = pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import torch, executorch"], capture_output=True).returncode != 0,
    reason="needs torch and executorch")

# A small program with one node the CPU lane cannot take (erfinv: outside Core ATen, no portable kernel), planted
# among ordinary ones; kept as exporters/failure_evidence.py keeps a failed cell's programs.
PLANT = """
import json, sys
from pathlib import Path
import torch
from torch import nn
sys.path.insert(0, {exporters!r})
import failure_evidence

class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = nn.Linear(8, 16), nn.Linear(16, 8)

    def forward(self, x, steps):
        h = torch.sigmoid(torch.relu(self.l1(x)) * 2 + 1).tanh()
        z = torch.erfinv(h.clamp(-0.5, 0.5))  # the planted node
        return self.l2(z + h).sum(-1) + steps.float().mean()

class Export:  # what failure_evidence reads of an exporter
    exporter, device = "executorch_cpu", "cpu"

    def __init__(self, out, ep):
        self.out, self.eps, self.info = Path(out), {{"forward": ep}}, {{"versions": {{"torch": torch.__version__}}}}

check = json.loads(sys.argv[2])
ep = torch.export.export(Policy(), (torch.randn(4, 8), torch.zeros(4, dtype=torch.int64)))
from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
try:
    program = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()],
                                          compile_config=EdgeCompileConfig(**check)).to_executorch()
    path = Path(sys.argv[1]) / "model.pte"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        program.write_to_file(handle)
    from executorch.runtime import Runtime
    Runtime.get().load_program(str(path)).load_method("forward")
    step, exc = None, None
except Exception as err:
    step, exc = ("check" if check else "lower"), err
failure_evidence.after_failure(Export(sys.argv[1], ep), step, exc)
meta = Path(sys.argv[1]) / "programs" / "programs.json"
if check:
    meta.write_text(json.dumps({{**json.loads(meta.read_text()), "edge_compile": check}}))
print(json.dumps({{"step": step, "error": f"{{type(exc).__name__}}: {{exc}}"}}))
"""


EVERY_NODE = """
import json, sys
from pathlib import Path
sys.path.insert(0, {repros!r})
import generate, script
import torch
programs = Path(sys.argv[1])
meta = json.loads((programs / "programs.json").read_text())
done, failed = 0, []
for method, name in meta["methods"].items():
    program = generate.Program(method, torch.export.load(programs / name), meta)
    for sig, node in {{generate.signature(n): n for n in program.nodes}}.items():
        source = script.render(program.part([node]), meta, method, {{"first_line": "x"}}, "a test")
        source = source.replace("lower(torch.export.export(model, inputs), inputs)",
                                "torch.export.export(model, inputs); model(*inputs)")
        try:
            namespace = {{"__name__": "every_node"}}
            exec(compile(source, sig, "exec"), namespace)
            namespace["main"]()
            done += 1
        except Exception as exc:
            failed.append(f"{{sig}}: {{type(exc).__name__}}: {{exc}}")
print("\\n".join(failed))
print(f"scripts {{done}} failed {{len(failed)}}")
""".format(repros=str(ROOT / "orchestrator" / "repros"))


def _env() -> dict[str, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # flatc
    return env


def plant(bundle: Path, check: dict) -> dict:
    """A failed export's bundle/programs/ for the planted program; returns its step and error."""
    code = PLANT.format(exporters=str(ROOT / "orchestrator" / "exporters"))
    done = subprocess.run([sys.executable, "-c", code, str(bundle), json.dumps(check)], capture_output=True,
                          text=True, env=_env(), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.fast
def test_errors_name_each_operator_as_its_own_fact_and_normalize_the_rest():
    fallback = ("RuntimeError: Method forward missing fallback kernels (3 total):\n  - aten::detach_copy\n"
                "  - aten::multinomial\n  - aten::split_copy.Tensor\nPlease add them to the AOTI backend.")
    assert [e["fact"] for e in errors.expectation(fallback)] == [
        "missing fallback kernel aten::detach_copy", "missing fallback kernel aten::multinomial",
        "missing fallback kernel aten::split_copy.Tensor"]
    one = "RuntimeError: Method encode missing fallback kernels (1 total): - aten::multinomial Please add them"
    assert errors.reproduces({"fact": "missing fallback kernel aten::multinomial"}, one)
    assert not errors.reproduces({"fact": "missing fallback kernel aten::detach_copy"}, one)
    assert ("detach", None) in errors.operator_names("aten::detach_copy")
    assert ("scatter", "value") in errors.operator_names("aoti_torch_cuda_scatter_value_out")
    sdpa = errors.expectation("RuntimeError: Expected bfloat16 inputs\n\nWhile executing %sdpa : ...")
    assert sdpa == [{"first_line": "RuntimeError: Expected bfloat16 inputs"}]
    assert errors.reproduces(sdpa[0], "RuntimeError: Expected bfloat16 inputs")
    loaded = errors.expectation("RuntimeError: Failed to load method forward, error: 0x:14")[0]
    assert errors.reproduces(loaded, "RuntimeError: Failed to load method forward, error: 0x:22")
    assert not errors.reproduces(loaded, "RuntimeError: Failed to load program")


LOWERING = ("torch._inductor.exc.InductorError: LoweringException: NoValidChoicesError: No choices to select. "
            "Provided reason: No choices exist for backend. please consider adding ATEN into "
            "max_autotune_conv_backends config (defined in torch/_inductor/config.py) to allow at least one choice.\n"
            "  target: aten.convolution.default\n  args[0]: TensorBox(StorageBox(...))\nFound from :\n"
            ' File "/site/torch/nn/modules/conv.py", line 988, in forward\n    return F.conv_transpose1d(')


@pytest.mark.fast
def test_the_cuda_form_is_the_exporters_lowering_and_reads_a_multi_line_error_back():
    """What a CUDA cell's script holds (this machine cannot run it): CudaPartitioner, the fork's EdgeCompileConfig,
    the device; and a LoweringException printed whole (lines kept) is the same failure as the cell's."""
    import torch

    sys.path.insert(0, str(ROOT / "orchestrator" / "repros"))
    import script  # noqa: PLC0415 - the generator's own import, as it runs in a build

    expected = errors.expectation(LOWERING)[0]
    assert expected["fact"].startswith("lowering aten.convolution.default: torch._inductor.exc.InductorError: ")
    part = script.Part()
    x = part.add_tensor("USER_INPUT", (1, 1024, 8), torch.float32, "sample")
    w = part.add_tensor("PARAMETER", (1024, 1024, 4), torch.float32, "unet.up_modules.0.2.weight")
    part.outputs.append(part.add_line(f"torch.ops.aten.convolution.default({x}, {w}, None, [2], [1], [1], True, "
                                      "[0], 1)", "conv.py:988"))
    meta = {"exporter": "executorch_cuda", "step": "compile-model", "error": LOWERING, "cell": "diffusion/h100/local",
            "versions": {"torch": "2.11.0", "executorch": "1.2.0"}}
    source = script.render(part, meta, "denoise_step", expected, "a one-node program (aten.convolution.default)")
    compile(source, "conv_no_choice.py", "exec")
    assert len(source.splitlines()) <= 110, len(source.splitlines())
    assert "CudaPartitioner([CudaBackend.generate_method_name_compile_spec(METHOD)])" in source
    assert "EDGE_COMPILE = {'_check_ir_validity': False, '_skip_dim_order': True}" in source
    assert "DEVICE = 'cuda'" in source and "METHOD = 'denoise_step'" in source
    assert "import orchestrator" not in source and "from orchestrator" not in source
    from torch._inductor.exc import InductorError

    lowering = type("LoweringException", (Exception,), {})(LOWERING.split("LoweringException: ", 1)[1])
    printed = script.error_line(InductorError(lowering, None))  # what a trial sees and a script prints
    assert errors.reproduces(expected, printed), printed
    assert not errors.reproduces(expected, printed.replace("aten.convolution", "aten.mm"))


@needs_export_env
def test_delta_debugging_keeps_the_planted_node_alone(tmp_path):
    """The runtime's error names no operator: ddmin over the method's nodes must end at the erfinv node."""
    failed = plant(tmp_path / "bundle", {"_check_ir_validity": False})
    assert failed["step"] == "check" and "Failed to load method forward" in failed["error"]
    out = tmp_path / "generated"
    done = subprocess.run([sys.executable, str(GENERATOR), f"--programs={tmp_path / 'bundle' / 'programs'}",
                           f"--out={out}", "--seconds=240"], capture_output=True, text=True, env=_env(), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    target = json.loads((out / "generate.json").read_text())["targets"][0]
    assert target["how"].startswith("delta debugging over method forward's"), target
    source = (out / target["script"]).read_text()
    assert re.findall(r"torch\.ops\.\w+\.\w+\.\w+", source) == ["torch.ops.aten.erfinv.default"], source


@needs_export_env
def test_repro_command_makes_runs_and_records_a_script_collect_links_it(tmp_path):
    out, conf = tmp_path / "out", tmp_path / "conf"
    write(conf / "policy" / "planted.yaml", "checkpoint: null\ntask: null\nexport_args: []\ntimeout_min: 5\n"
          "tolerance: null\nenv: {}\n")
    write(conf / "failures.yaml", "erfinv_not_core:\n  title: erfinv is not in Core ATen (the CPU lane)\n"
          "  repro: export command\n  fixed_by: needs an owner\n  step: lower\n"
          "  patterns: ['Operator torch\\._ops\\.aten\\.erfinv\\.default is not in Core ATen opset']\n")
    cell_dir = out / "cells" / "planted" / "cpu" / "local"
    earlier = write(cell_dir / "attempts" / "1" / "bundle" / "programs" / "forward.pt2", "an earlier attempt's")
    failed = plant(cell_dir / "bundle", {})
    assert failed["step"] == "lower" and "not in Core ATen" in failed["error"]
    assert not earlier.exists()  # only the newest failed attempt keeps its programs
    write(cell_dir / "record.json", json.dumps({
        "cell": "planted/cpu/local", "policy": "planted", "gpu": "cpu", "torch": "local", "exporter": "executorch_cpu",
        "status": "failed", "failed_step": "lower", "error": " ".join(failed["error"].split()),
        "command": ["python", "executorch_cpu.py"], "ended_at": "2026-12-07T00:00:00+00:00"}))
    args = ["--config-dir", str(conf), f"out_dir={out}"]
    made = cli("repro", "planted/cpu/local", *args, timeout=900)
    result = json.loads((out / "repros" / "planted" / "cpu" / "local" / "repros.json").read_text())
    entry = result["scripts"][0]
    assert entry["failure"] == "erfinv_not_core" and entry["reproduces"] is True, (made.stdout, entry)
    assert entry["lines"] <= 110 and entry["seconds"] < 60 and entry["exit"] == 1, entry
    assert "a one-node program (aten.erfinv.default)" in entry["how"]
    script = out / "repros" / "planted" / "cpu" / "local" / "erfinv_not_core.py"
    assert "orchestrator" not in script.read_text().split('"""', 2)[2]  # past the docstring: torch and ExecuTorch
    assert not (cell_dir / "bundle" / "programs").exists()  # kept until a repro was made

    # standalone: from an empty folder, with any import of the orchestrator refused
    blocker = ("import runpy, sys\nclass Block:\n    def find_spec(self, name, *a):\n"
               "        if name.split('.')[0] == 'orchestrator': raise ImportError('orchestrator imported')\n"
               "sys.meta_path.insert(0, Block())\nsys.argv = [sys.argv[1]]\n"
               "runpy.run_path(sys.argv[0], run_name='__main__')")
    alone = subprocess.run([sys.executable, "-c", blocker, str(script)], capture_output=True, text=True,
                           cwd=tmp_path, env={k: v for k, v in _env().items() if k != "PYTHONPATH"}, timeout=300)
    assert alone.returncode == 1, alone.stderr[-2000:]
    assert re.search(r"(?m)^Repro error: .*aten\.erfinv\.default is not in Core ATen", alone.stdout), alone.stdout
    assert re.search(r"(?m)^torch \S+, executorch \S+, device cpu$", alone.stdout), alone.stdout

    cli("collect", *args)
    matrix = (out / "matrix.md").read_text()
    assert "[standalone (generated)](repros/planted/cpu/local/erfinv_not_core.py)" in matrix, matrix
    assert 'href="repros/planted/cpu/local/erfinv_not_core.py"' in (out / "report.html").read_text()

    again = cli("repro", "planted/cpu/local", *args, timeout=900)  # scripts in place: rerun, no search
    assert "running its generated repros again" in again.stdout and "erfinv_not_core.py reproduces" in again.stdout
    # a later build where it stops failing: what that rerun writes, then collect says so
    result = json.loads((out / "repros" / "planted" / "cpu" / "local" / "repros.json").read_text())
    result["scripts"][0]["reproduces"] = False
    (out / "repros" / "planted" / "cpu" / "local" / "repros.json").write_text(json.dumps(result))
    cli("collect", *args)
    changes = (out / "changes.md").read_text()
    assert "planted on CPU/local: generated repro erfinv_not_core.py no longer reproduces" in changes, changes


@needs_export_env
def test_a_real_failed_export_keeps_its_program_and_a_numeric_check_gets_the_export_command(tmp_path):
    """gaussian_actor (0.3 M parameters) exported for real; a tolerance no float32 program meets fails its check:
    the exporter keeps the traced program, and the generator says why no part of it is a repro."""
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    made = subprocess.run([sys.executable, str(ROOT / "orchestrator" / "scripts" / "make_random.py"),
                           "gaussian_actor", str(ckpt)], capture_output=True, text=True, env=_env(), timeout=300)
    assert made.returncode == 0, made.stderr[-3000:]
    export = subprocess.run([sys.executable, str(ROOT / "orchestrator" / "exporters" / "executorch_cpu.py"),
                             f"--policy.path={ckpt}", f"--output_dir={out}", "--tolerance=1e-30", "--runs=1",
                             "--warmups=0"], capture_output=True, text=True, env=_env(), timeout=600)
    assert export.returncode == 1 and "error: The check step failed" in export.stderr, export.stdout[-3000:]
    assert re.search(r"(?m)^Exported policy programs: forward kept in .*programs", export.stdout), export.stdout
    meta = json.loads((out / "programs" / "programs.json").read_text())
    assert meta["kept"] and meta["step"] == "check" and meta["exporter"] == "executorch_cpu", meta
    assert "does not reproduce its test case" in meta["error"] and (out / "programs" / "forward.pt2").exists()
    done = subprocess.run([sys.executable, str(GENERATOR), f"--programs={out / 'programs'}",
                           f"--out={tmp_path / 'generated'}"], capture_output=True, text=True, env=_env(), timeout=300)
    result = json.loads((tmp_path / "generated" / "generate.json").read_text())
    assert done.returncode == 0 and result["targets"] == [], result
    assert result["why"].startswith("a numerical check failure builds up across the whole program"), result
    # every distinct one-node program of the real policy's graph is a script that exports and runs (cat's list of
    # tensors, chunk's getitems, to.device's device, detach): lowering left out, as this lane lowers them all
    every = subprocess.run([sys.executable, "-c", EVERY_NODE, str(out / "programs")], capture_output=True, text=True,
                           env=_env(), timeout=600)
    assert every.returncode == 0 and re.search(r"(?m)^scripts \d{2,} failed 0$", every.stdout), every.stdout[-3000:]


def test_repro_of_a_cell_without_kept_programs_says_why_in_one_line(tmp_path):
    out = tmp_path / "out"
    write(out / "cells" / "act" / "cpu" / "local" / "record.json", json.dumps({
        "cell": "act/cpu/local", "policy": "act", "gpu": "cpu", "torch": "local", "exporter": "executorch_cpu",
        "status": "failed", "failed_step": "lower", "error": "RuntimeError: Missing out variants: {'aten::x'}"}))
    done = cli("repro", "act/cpu/local", f"out_dir={out}", check=False)
    assert done.returncode == 2
    assert done.stderr.startswith("export-matrix: error: act/cpu/local: no kept programs in ")
    assert "export-matrix rerun act/cpu/local" in done.stderr and len(done.stderr.strip().splitlines()) == 1


@needs_export_env
def test_a_trace_failure_names_its_user_line_and_the_export_command(tmp_path):
    """tdmpc_mpc's planner picks a trajectory with torch.multinomial: torch.export stops in the policy's code."""
    cli("sweep", "matrix=smoke", "matrix.policies=[tdmpc_mpc]", f"out_dir={tmp_path}",
        f"ckpt_dir={tmp_path / 'ckpts'}", timeout=900)
    rec = record(tmp_path, "tdmpc_mpc/cpu/local")
    assert rec["status"] == "failed" and rec["failed_step"] == "trace", rec["log_tail"]
    assert re.fullmatch(r"lerobot/policies/tdmpc/modeling_tdmpc\.py:\d+ in plan: .*torch\.multinomial.*",
                        rec["trace_site"] or ""), rec["trace_site"]
    done = cli("repro", "tdmpc_mpc/cpu/local", f"out_dir={tmp_path}")
    assert f"tracing stopped at {rec['trace_site']}" in done.stdout
    assert "the repro is the export command" in done.stdout
    result = json.loads((tmp_path / "repros" / "tdmpc_mpc" / "cpu" / "local" / "repros.json").read_text())
    assert result["repro"] == "export command" and result["trace_site"] == rec["trace_site"]
