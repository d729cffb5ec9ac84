"""GPU nodes without Slurm (issue 45): each running GPU cell holds a GPU of its own, and runs only on the GPU its
column wants. There is no GPU here: the GPUs are fake (CUDA_VISIBLE_DEVICES=0,1,2,3), and NVML's reading is a
stub module put first on the jobs' PYTHONPATH."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from .conftest import ROOT, record

# The exporter: which GPUs its job was given, and when it ran.
PROBE = ("import json, os, time; start = time.time(); time.sleep({s}); "
         "open('probe.json', 'w').write(json.dumps(dict(visible=os.environ.get('CUDA_VISIBLE_DEVICES'), "
         "start=start, end=time.time()))); "
         "print('Exported policy test case: largest difference 0 (tolerance 1)')")

# NVML as a driver would answer it: FAKE_NVML_GPUS lists "name|major.minor|uuid" for each GPU.
FAKE_PYNVML = '''
import os

class NVMLError(Exception):
    pass

def _gpus():
    return [g.split("|") for g in os.environ.get("FAKE_NVML_GPUS", "").split(";") if g]

class _Memory:
    used = 0

def nvmlInit():
    pass

def nvmlDeviceGetCount():
    return len(_gpus())

def nvmlDeviceGetHandleByIndex(index):
    if not 0 <= index < len(_gpus()):
        raise NVMLError("Invalid Argument")
    return index

def nvmlDeviceGetName(handle):
    return _gpus()[handle][0]

def nvmlDeviceGetCudaComputeCapability(handle):
    major, minor = _gpus()[handle][1].split(".")
    return int(major), int(minor)

def nvmlDeviceGetUUID(handle):
    return _gpus()[handle][2]

def nvmlSystemGetDriverVersion():
    return "999.1"

def nvmlDeviceGetMemoryInfo(handle):
    return _Memory()

def nvmlDeviceGetComputeRunningProcesses(handle):
    return []
'''
H100 = "NVIDIA H100 80GB HBM3|9.0|GPU-{i}0000000-aaaa-bbbb-cccc-000000000000"


def probe_conf(tmp_path: Path, policies: list[str], seconds: float) -> Path:
    conf = tmp_path / "conf"
    (conf / "exporter").mkdir(parents=True)
    (conf / "exporter" / "probe.yaml").write_text(json.dumps({"command": ["{python}", "-c", PROBE.format(s=seconds)]}))
    (conf / "policy").mkdir()
    for name in policies:
        (conf / "policy" / f"{name}.yaml").write_text(json.dumps({"checkpoint": {"path": "none"}, "export_args": []}))
    return conf


def sweep(conf: Path, out: Path, env: dict[str, str], *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", "sweep", "--config-dir", str(conf),
                           "exporter=probe", f"out_dir={out}", "launcher.poll_s=0.2", *overrides], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, env={**os.environ, **env})


def test_running_gpu_cells_hold_distinct_gpus_and_cpu_cells_take_none(tmp_path: Path) -> None:
    """Six GPU cells and one CPU cell, 6 at once on 4 GPUs: GPU cells that overlap in time never share a GPU,
    no more than 4 run at once, a freed GPU is taken again, the fifth and sixth GPU cells wait (and the sweep says
    so) while the CPU cell takes a fifth slot, holding no GPU. Each record names the GPU its job was given."""
    policies = [f"p{i}" for i in range(6)]
    conf, out = probe_conf(tmp_path, policies, 4), tmp_path / "out"
    done = sweep(conf, out, {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, "launcher.parallel=6",
                 f"matrix.policies=[{','.join(policies)}]", "matrix.gpus=[h100,cpu]",
                 "matrix.exclude=[{policy: p0, gpu: cpu}, {policy: p1, gpu: cpu}, {policy: p2, gpu: cpu}, "
                 "{policy: p3, gpu: cpu}, {policy: p4, gpu: cpu}]")
    assert done.returncode == 0, done.stderr[-3000:]
    runs = {cell: json.loads((out / "cells" / cell / "probe.json").read_text())
            for cell in [f"{p}/h100/local" for p in policies] + ["p5/cpu/local"]}
    gpu_runs = {cell: run for cell, run in runs.items() if "/h100/" in cell}
    assert {run["visible"] for run in gpu_runs.values()} <= {"0", "1", "2", "3"}, gpu_runs
    for cell, run in gpu_runs.items():
        overlapping = [other for other, o in gpu_runs.items()
                       if other != cell and o["start"] < run["end"] and run["start"] < o["end"]]
        assert all(gpu_runs[o]["visible"] != run["visible"] for o in overlapping), (cell, gpu_runs)
        at_its_start = [o for o in gpu_runs.values() if o["start"] <= run["start"] < o["end"]]
        assert len(at_its_start) <= 4, (cell, gpu_runs)  # itself and at most 3 others at once
        assert record(out, cell)["gpu_index"] == int(run["visible"])
    assert len({run["visible"] for run in gpu_runs.values()}) < len(gpu_runs)  # a freed GPU was taken again
    assert runs["p5/cpu/local"]["visible"] == "" and record(out, "p5/cpu/local")["gpu_index"] is None
    assert "waiting for a free GPU: " in " ".join(done.stderr.split()), done.stderr[-3000:]
    # the CPU cell, after two GPU cells in matrix order, ran while they waited: the slots beyond the GPUs
    assert runs["p5/cpu/local"]["start"] < max(run["start"] for run in gpu_runs.values()), runs


def test_a_cell_on_a_gpu_its_column_does_not_want_is_undecided_with_one_line(tmp_path: Path) -> None:
    """On a (stubbed) H100, the a100 and h200 cells end before make_random as `error` with the reason, which
    collect shows as ⏸; the h100 cell runs and its record names the GPU's index and UUID."""
    conf, out = probe_conf(tmp_path, ["probe"], 0), tmp_path / "out"
    nvml = tmp_path / "nvml"
    nvml.mkdir()
    (nvml / "pynvml.py").write_text(FAKE_PYNVML)
    env = {"CUDA_VISIBLE_DEVICES": "0,1", "PYTHONPATH": os.pathsep.join(filter(None, [str(nvml), os.environ.get(
        "PYTHONPATH")])), "FAKE_NVML_GPUS": ";".join(H100.format(i=i) for i in range(2))}
    done = sweep(conf, out, env, "matrix.policies=[probe]", "matrix.gpus=[a100,h100,h200]", "launcher.parallel=3")
    assert done.returncode == 1, done.stderr[-3000:]  # a cell that could not run: as a missing interpreter
    wants = {"a100": "sm_80", "h200": "a GPU named *H200*"}
    for column, wanted in wants.items():
        cell = f"probe/{column}/local"
        got = record(out, cell)
        error = f"wrong GPU (NVIDIA H100 80GB HBM3, sm_90; the {column} column wants {wanted})"
        assert (got["status"], got["failed_step"], got["error"]) == ("error", "setup", error), got
        assert got["make_random_s"] is None and got["command"] == [] and got["max_diff"] is None
        assert not (out / "cells" / cell / "probe.json").exists()  # the exporter never ran
        assert got["versions"]["gpu_name"] == "NVIDIA H100 80GB HBM3"
        lines = [line for line in done.stderr.splitlines() if cell in line and "error" in line]
        assert len(lines) == 1 and error in " ".join(done.stderr.split()), done.stderr[-3000:]
    h100 = record(out, "probe/h100/local")
    assert h100["status"] == "passed", h100
    assert h100["gpu_uuid"] == H100.format(i=h100["gpu_index"]).split("|")[2]
    assert h100["versions"]["gpu_capability"] == "sm_90"
    collect = subprocess.run([sys.executable, "-m", "orchestrator.cli", "collect", "--config-dir", str(conf),
                              "exporter=probe", f"out_dir={out}", "matrix.policies=[probe]",
                              "matrix.gpus=[a100,h100,h200]"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert collect.returncode == 0, collect.stderr[-3000:]
    row = next(line for line in (out / "matrix.md").read_text().splitlines() if line.startswith("| probe |"))
    assert row.count("⏸") == 2 and row.count("✅") == 1, row
    assert "⏸ wrong GPU (NVIDIA H100 80GB HBM3, sm_90; the a100 column wants sm_80)" in row  # in the cell itself
    assert "wrong GPU (NVIDIA H100 80GB HBM3, sm_90; the a100 column wants sm_80)" in (out / "matrix.md").read_text()
