"""The built-in CPU exporter, run for real as the orchestrator runs it: as a file, in a subprocess.

The ACT test builds a random checkpoint with make_random.py and exports it (about a minute on 2 cores).
Both need the export environment (torch, executorch, lerobot); the tests skip without it.
"""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXPORTER = ROOT / "orchestrator" / "exporters" / "executorch_cpu.py"
MAKE_RANDOM = ROOT / "orchestrator" / "scripts" / "make_random.py"

CHECK_RE = re.compile(r"^Exported policy test case: largest difference (?P<diff>\S+) \(tolerance (?P<tol>\S+)\)$", re.M)
TIMING_RE = re.compile(
    r"^Exported policy timing: eager (?P<eager>[\d.]+) ms, exported (?P<exported>[\d.]+) ms "
    r"\(median of (?P<runs>\d+) runs\)$",
    re.M,
)
ERROR_RE = re.compile(r"^error: The (?P<step>\w[\w-]*) step failed \(see above\), so the bundle was not written\.$")


def _python() -> str:
    venv = ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def _has_export_env(python: str) -> bool:
    if python == sys.executable:
        return all(importlib.util.find_spec(m) for m in ("torch", "executorch", "lerobot"))
    code = "import torch, executorch, lerobot"
    return subprocess.run([python, "-c", code], capture_output=True).returncode == 0


PYTHON = _python()
needs_env = pytest.mark.skipif(not _has_export_env(PYTHON), reason="needs torch, executorch and lerobot")


def _env() -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env["PATH"] = f"{Path(PYTHON).parent}{os.pathsep}{env.get('PATH', '')}"  # flatc
    return env


def _run(args: list, timeout: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PYTHON, *map(str, args)],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )


@needs_env
def test_act_exports_and_reproduces(tmp_path):
    ckpt, out = tmp_path / "random_act", tmp_path / "out"
    made = _run([MAKE_RANDOM, "act", ckpt, "pretrained_backbone_weights=null"], timeout=300)
    assert made.returncode == 0, made.stdout[-4000:]

    res = _run([EXPORTER, f"--policy.path={ckpt}", f"--output_dir={out}", "--runs=3"], timeout=900)
    assert res.returncode == 0, res.stdout[-6000:]
    assert (out / "model.pte").is_file() and (out / "model.pte").stat().st_size > 0

    check = CHECK_RE.search(res.stdout)
    assert check, res.stdout[-4000:]
    assert float(check["diff"]) <= float(check["tol"])
    assert re.fullmatch(r"\d\.\d\de[+-]\d\d", check["diff"])

    timing = TIMING_RE.search(res.stdout)
    assert timing, res.stdout[-4000:]
    assert int(timing["runs"]) == 3
    assert float(timing["eager"]) > 0 and float(timing["exported"]) > 0
    assert "error: The" not in res.stdout

    import json

    info = json.loads((out / "export_info.json").read_text())
    assert info["ok"] is True
    assert info["max_diff"] <= info["tolerance"]
    # what a robot sends, through the processors inside the program, as the fork's raw-frame programs
    assert info["inputs"] == {"observation.images.top": [224, 224, 3], "observation.images.wrist": [224, 224, 3],
                              "observation.state": [14]}
    assert info["adapter"]["processors"] == "program"
    assert "Exported policy tolerance: 0.001 (exporter default" in res.stdout
    assert info["timing"]["warmup"] >= 1 and info["timing"]["eager_runs"] == 3


@needs_env
def test_a_sampling_policy_passes_with_its_draws_as_inputs(tmp_path):
    """vqbet picks its codes with torch.multinomial: the draw is an input, so eager and the program agree."""
    ckpt, out = tmp_path / "random_vqbet", tmp_path / "out"
    made = _run([MAKE_RANDOM, "vqbet", ckpt, "pretrained_backbone_weights=null"], timeout=300)
    assert made.returncode == 0, made.stdout[-4000:]
    res = _run([EXPORTER, f"--policy.path={ckpt}", f"--output_dir={out}", "--runs=1", "--warmups=0",
                "--tolerance=0.002"], timeout=900)
    assert res.returncode == 0, res.stdout[-6000:]
    import json

    info = json.loads((out / "export_info.json").read_text())
    assert info["random_draws"] == ["rng_0"] and info["inputs"]["rng_0"] == [14, 1]
    assert info["max_diff"] <= 1e-4 and info["tolerance"] == 0.002
    assert info["tolerance_source"] == "policy config"


@needs_env
def test_missing_checkpoint_fails_in_load_step(tmp_path):
    res = _run(
        [EXPORTER, f"--policy.path={tmp_path / 'no_such_ckpt'}", f"--output_dir={tmp_path / 'out'}"], timeout=300
    )
    assert res.returncode == 1, res.stdout[-4000:]
    lines = res.stdout.strip().splitlines()
    match = ERROR_RE.match(lines[-1])
    assert match and match["step"] == "load", lines[-5:]
    assert "Traceback (most recent call last)" in res.stdout
    assert lines[-2].startswith("FileNotFoundError: "), lines[-3:]
    assert not (tmp_path / "out" / "model.pte").exists()


@needs_env
def test_check_failure_is_reported_as_the_check_step(tmp_path):
    """gaussian_actor is small (0.3 M parameters): a tolerance no float32 program meets fails the check."""
    ckpt, out = tmp_path / "random_gaussian_actor", tmp_path / "out"
    made = _run([MAKE_RANDOM, "gaussian_actor", ckpt], timeout=300)
    assert made.returncode == 0, made.stdout[-4000:]

    res = _run([EXPORTER, f"--policy.path={ckpt}", f"--output_dir={out}", "--tolerance=1e-30"], timeout=600)
    assert res.returncode == 1, res.stdout[-6000:]
    lines = res.stdout.strip().splitlines()
    match = ERROR_RE.match(lines[-1])
    assert match and match["step"] == "check", lines[-5:]
    failed = re.fullmatch(
        r"RuntimeError: The exported policy does not reproduce its test case \((\S+) > 1e-30\)\. "
        r"Export it again on this device\.",
        lines[-2],
    )
    assert failed and float(failed[1]) > 1e-30, lines[-3:]
    assert not CHECK_RE.search(res.stdout)
    assert not (out / "model.pte").exists() and (out / "model.pte.failed").exists()


GAUSSIAN_NOISE_PROBE = """
import sys

import torch

sys.path.insert(0, "orchestrator/exporters")
import policy_adapters  # noqa: E402
from lerobot.configs.types import FeatureType, NormalizationMode, PolicyFeature  # noqa: E402
from lerobot.policies.factory import get_policy_class, make_policy_config  # noqa: E402

cfg = make_policy_config("gaussian_actor", device="cpu")
cfg.input_features = {"observation.images.top": PolicyFeature(type=FeatureType.VISUAL, shape=(3, 96, 96)),
                      "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(14,))}
cfg.output_features = {"action": PolicyFeature(type=FeatureType.ACTION, shape=(14,))}
cfg.normalization_mapping = {k: NormalizationMode.IDENTITY for k in ("VISUAL", "STATE", "ACTION", "ENV")}
torch.manual_seed(0)
policy = get_policy_class("gaussian_actor")(cfg).eval()
adapter = policy_adapters.make_adapter(policy)
gen = torch.Generator().manual_seed(0)
named = adapter.host_inputs(adapter.observation(gen))
named.update(adapter.extra_inputs(named, gen))
with torch.no_grad():
    diff = (adapter.eager(dict(named)) - adapter.run(policy, dict(named))).abs().max().item()
policy.to("meta")
print(diff, adapter.extra_inputs(named, gen)["sample_noise"].device)
"""


@needs_env
def test_gaussian_actor_noise_is_drawn_on_the_policy_device():
    """The exported gaussian_actor takes rsample's standard-normal draw as an input; the eager reference draws it
    inside select_action on the policy's device. On the H200 the input was drawn on the CPU, CUDA's generator gave
    another eps, and the check failed at 1.63 against 0.001 (bench/results/gpu_smoke). Here the policy on the
    CPU matches its traced form, and moved to the meta device (no GPU here) the noise follows it."""
    res = _run(["-c", GAUSSIAN_NOISE_PROBE], timeout=300)
    assert res.returncode == 0, res.stdout[-4000:]
    diff, device = res.stdout.strip().splitlines()[-1].split()
    assert float(diff) < 1e-5 and device == "meta", res.stdout[-500:]


def test_unknown_argument_is_an_argparse_error(tmp_path):
    res = subprocess.run(
        [sys.executable, str(EXPORTER), "--policy.path=x", f"--output_dir={tmp_path}", "--bogus=1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2
    assert "unrecognized arguments: --bogus=1" in res.stderr
