"""Config groups, the override grammar, cell expansion and one-line errors for bad names."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config import ConfigError, compose_config
from orchestrator.config.cells import resolve

from .conftest import cli, write

TRACKING_POLICIES = ["act", "diffusion", "pi0", "pi05", "pi0_fast", "xvla", "wall_x", "wall_oss_05", "dm05", "eo1",
                     "lawam", "molmoact2", "flux3", "cosmos3", "fineart_vla", "lingbot_vla_v2",
                     # every type make_random.py builds on purpose, and those with a config of their own
                     "tdmpc", "vqbet", "gaussian_actor", "multi_task_dit", "smolvla", "groot"]


def cells(*overrides: str, config_dir: Path | None = None) -> list[str]:
    return [spec.id for spec in resolve(compose_config(list(overrides), config_dir))]


def test_tracking_lists_every_policy_gpu_and_build() -> None:
    ids = cli("cells", "matrix=tracking").stdout.splitlines()
    expected = {f"{p}/{g}/{t}" for p in TRACKING_POLICIES for g in ("h100", "a100")
                for t in ("stock", "pr202785", "pr202925")}
    assert set(ids) == expected and len(ids) == len(expected) == 132


def test_cells_command_prints_one_id_a_line() -> None:
    done = cli("cells", "matrix=tracking")
    assert done.stdout.splitlines() == cells("matrix=tracking")


@pytest.mark.parametrize("override", ["+gpu=h100", "++gpu=h100"])
def test_hydra_append_on_an_axis_selects_as_the_plain_form(override: str) -> None:
    done = cli("cells", "matrix=tracking", override)
    ids = done.stdout.splitlines()
    assert ids == cells("matrix=tracking", "gpu=h100") and len(ids) == 66
    assert all(i.split("/")[1] == "h100" for i in ids)


@pytest.mark.parametrize("override", ["~gpu", "~policy=act", "gpu@other=h100"])
def test_an_axis_override_hydra_would_not_select_with_is_refused(override: str) -> None:
    done = cli("cells", "matrix=tracking", override, check=False)
    assert done.returncode == 2 and done.stdout == ""
    axis = override.lstrip("~").split("@")[0].split("=")[0]
    assert done.stderr.strip().splitlines() == [
        f"export-matrix: error: {override!r}: {axis} is a selection, not a config group to change "
        f"(write {axis}=NAME[,NAME...])"]


def test_seed_checkpoints_tasks_and_args() -> None:
    cfg = compose_config(["matrix=tracking"]).cfg
    assert cfg.policies.lawam.checkpoint.path == "jialei02/lawam-libero-sft-lerobot"
    assert cfg.policies.flux3.checkpoint.path == "black-forest-labs/flux-3-action-droid"
    assert cfg.policies.dm05.checkpoint.random.type == "dm05"
    assert cfg.policies.wall_x.task == "pick up the cube"
    assert list(cfg.policies.lingbot_vla_v2.export_args) == ["--policy.precompute_grid_thw=true"]
    assert list(cfg.builds.pr202785.fixes) == ["pytorch/pytorch#202785"] and not cfg.builds.stock.fixes
    spec = next(s for s in resolve(compose_config(["matrix=tracking"])) if s.id == "wall_x/a100/pr202785")
    assert spec.exporter == "lerobot_cuda" and spec.slurm["partition"] == "a100"
    assert spec.command[:2] == ["lerobot-export", "--backend.type=executorch_cuda"]


@pytest.mark.parametrize(("override", "message"), [
    ("matrix=nope", "unknown matrix 'nope' (valid: gpu_smoke, repros, smoke, tracking)"),
    ("exporter=nope", "unknown exporter 'nope' (valid: executorch_cpu, executorch_cuda, lerobot_cuda, repro)"),
    ("launcher=nope", "unknown launcher 'nope' (valid: "),
    ("matrix.policies=[act,nope]", "unknown policy 'nope' (valid: act, cosmos3, diffusion,"),
    ("matrix.gpus=[h800]", "unknown gpu 'h800' (valid: a100, cpu, h100, h200)"),
    ("matrix.torch=[nightly]",
     "unknown torch 'nightly' (valid: et19924, etdetach, local, pr202785, pr202925, pypi215, stock)"),
    ("matrix.exclude=[{policy: flux3, gpu: cpu}]", "exclude {'policy': 'flux3', 'gpu': 'cpu'} matches no cell"),
    ("matrix.exclude=[{chip: a100}]", "unknown matrix axis 'chip'"),
])
def test_bad_names_give_one_line_naming_value_and_valid_ones(override: str, message: str) -> None:
    done = cli("cells", override, check=False)
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr


def test_bad_override_syntax_is_one_line() -> None:
    done = cli("cells", "nosuchkey=1", check=False)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "nosuchkey" in done.stderr


@pytest.mark.parametrize(("override", "message"), [
    ("polcy=act", "unknown key polcy (nearest: policy, policies)"),
    ("+polcy=act", "unknown key polcy (nearest: policy, policies)"),
    ("++polcy=act", "unknown key polcy (nearest: policy, policies)"),
    ("~polcy", "unknown key polcy (nearest: policy, policies)"),
    ("policies.act.tiemout_min=3", "unknown key policies.act.tiemout_min (nearest: policies.act.timeout_min)"),
    ("+policies.act.tiemout_min=3", "unknown key policies.act.tiemout_min (nearest: policies.act.timeout_min)"),
    ("+gpus.cpu.slurm.partiton=x", "unknown key gpus.cpu.slurm.partiton (nearest: gpus.cpu.slurm.partition)"),
    ("+policies.nope.env.X=1", "unknown key policies.nope.env.X (valid under policies: act, cosmos3, "),
    ("repeat.rns=3", "unknown key repeat.rns (nearest: repeat.runs)"),
    ("+repeat.rns=3", "unknown key repeat.rns (nearest: repeat.runs)"),
    ("launcher.paralel=3", "unknown key launcher.paralel (nearest: launcher.parallel)"),
])
def test_an_override_naming_a_key_nothing_holds_is_refused_with_the_nearest(override: str, message: str) -> None:
    """Appended (+, ++) or not, a key that no schema declares and no config holds stops the command in one line
    naming it and the nearest valid keys (Hydra said "use +" for the plain form and took the appended one)."""
    done = cli("cells", override, check=False)
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"export-matrix: error: {message}"), done.stderr


def test_open_mappings_and_entries_outside_the_matrix_take_overrides() -> None:
    """env:, a checkpoint's make_random overrides and a schema's fields stay open to `+`; a policy the matrix does
    not hold takes overrides (README's `policies.flux3.timeout_min=240` under the default matrix) and gives no
    cell."""
    overrides = ["+policies.act.env.MY_FLAG=1", "+policies.act.checkpoint.random.overrides.chunk_size=10",
                 "+policies.act.slurm.partition=cpu", "policies.flux3.timeout_min=240",
                 "+policies.flux3.env.X=1", "exporters.repro.command=[x]", "gpus.h100.slurm.cpus_per_task=4"]
    assert cli("cells", *overrides).stdout.splitlines() == cells()
    spec = next(s for s in resolve(compose_config(overrides)) if s.policy == "act")
    assert spec.env["MY_FLAG"] == "1" and spec.checkpoint["random"]["overrides"]["chunk_size"] == 10
    assert spec.slurm["partition"] == "cpu"


def test_exclude_and_include_partial_cells() -> None:
    ids = cells("matrix=tracking", "matrix.policies=[act,flux3]", "matrix.torch=[stock]",
                "matrix.exclude=[{policy: flux3, gpu: a100}]", "matrix.include=[{policy: act, gpu: cpu}]")
    assert ids == ["act/h100/stock", "act/a100/stock", "flux3/h100/stock", "act/cpu/stock"]


def test_exporter_override_replaces_gpu_default() -> None:
    specs = resolve(compose_config(["matrix=tracking", "exporter=executorch_cpu", "matrix.policies=[act]"]))
    assert {s.exporter for s in specs} == {"executorch_cpu"}


def test_user_config_dir_wins_and_adds_groups(tmp_path: Path) -> None:
    write(tmp_path / "policy" / "act.yaml", "checkpoint: {path: /ckpts/act}\ntask: null\nexport_args: []\n"
          "timeout_min: 5\nenv: {SITE: one}\n")
    write(tmp_path / "policy" / "mine.yaml", "checkpoint: {random: {type: act}}\ntask: go\nexport_args: []\n"
          "timeout_min: 5\nenv: {}\n")
    write(tmp_path / "gpu" / "h200.yaml", "label: H200\nexporter: lerobot_cuda\nslurm: {partition: h200}\n"
          "env: {GPU_SITE: two}\n")
    write(tmp_path / "matrix" / "site.yaml", "policies: [act, mine]\ngpus: [h200]\ntorch: [stock]\n")
    specs = resolve(compose_config(["matrix=site"], tmp_path))
    assert [s.id for s in specs] == ["act/h200/stock", "mine/h200/stock"]
    assert specs[0].checkpoint == {"path": "/ckpts/act"} and specs[0].timeout_min == 5
    assert specs[0].env == {"SITE": "one", "GPU_SITE": "two"}
    assert "smoke" in compose_config([], tmp_path).options["matrix"]


def test_missing_config_dir_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not a directory"):
        compose_config([], tmp_path / "absent")


def test_axis_overrides_reach_the_cell() -> None:
    spec = resolve(compose_config(["policies.act.timeout_min=3", "+policies.act.env.FOO=bar"]))[0]
    assert spec.timeout_min == 3 and spec.env["FOO"] == "bar"


def test_gpu_smoke_cells_use_the_cuda_exporter_and_repros_their_own() -> None:
    specs = {s.id: s for s in resolve(compose_config(["matrix=gpu_smoke", "exporter=lerobot_cuda"]))}
    act = specs["act/h200/local"]
    assert act.exporter == "lerobot_cuda"  # exporter=NAME replaces the GPU's default ...
    repro = specs["repro_fp32_speed/h200/local"]
    assert repro.exporter == "repro" and repro.requires_cuda  # ... but not a repro's own exporter
    assert repro.checkpoint == {} and repro.export_args == ["--repro=fp32_speed"]
    assert repro.command[1].endswith("repros/run_repro.py")
    default = {s.id: s for s in resolve(compose_config(["matrix=gpu_smoke"]))}["act/h200/local"]
    assert default.exporter == "executorch_cuda" and default.requires_cuda and default.slurm["gres"] == "gpu:h200:1"
    assert not specs["act/h200/local"].requires_cuda  # the fork's CLI reports its own errors


def test_unknown_exporter_of_a_policy_names_the_policy(tmp_path: Path) -> None:
    write(tmp_path / "policy" / "mine.yaml", "checkpoint: null\nexporter: nope\ntask: null\nexport_args: []\n")
    with pytest.raises(ConfigError, match=r"unknown exporter \(of policy mine\) 'nope' \(valid: executorch_cpu, "):
        compose_config(["matrix.policies=[mine]"], tmp_path)


def test_hydra_style_selection_narrows_the_matrix() -> None:
    assert cells("matrix=tracking", "gpu=a100", "policy=act,wall_x", "torch=stock") == ["act/a100/stock",
                                                                                      "wall_x/a100/stock"]
    assert cells("matrix=tracking", "policy=wall_*", "torch=stock", "gpu=h100") == ["wall_x/h100/stock",
                                                                                   "wall_oss_05/h100/stock"]
    done = cli("cells", "gpu=h200", check=False)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "export-matrix: error: gpu=h200 selects no cell of matrix smoke (policies: act, diffusion, gaussian_actor, "
        "tdmpc; gpus: cpu; torch: local)"]
    done = cli("cells", "policy=nope*", check=False)
    assert done.returncode == 2 and "unknown policy 'nope*' (valid: act, " in done.stderr
    done = cli("cells", "policy=act,vqbet", check=False)  # vqbet exists, but not in matrix smoke
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "export-matrix: error: policy=vqbet selects no cell of matrix smoke (policies: act, diffusion, gaussian_actor, "
        "tdmpc; gpus: cpu; torch: local)"]


def test_show_prints_a_cells_configs_and_exact_commands_without_running_it(tmp_path: Path) -> None:
    """The commands as shell command lines (shlex.join: pasted, they run), and every variable the job's environment
    sets (job.py's job_env), not the axes' env: alone."""
    import shlex

    import yaml

    done = cli("show", "act/cpu/local", f"out_dir={tmp_path}", f"ckpt_dir={tmp_path / 'ckpts'}",
               "+policies.act.env.MY_FLAG=two words")
    shown = yaml.safe_load(done.stdout)
    assert shown["cell"] == "act/cpu/local" and shown["configs"]["exporter"]["command"][1].endswith("executorch_cpu.py")
    make_random = shlex.split(shown["make_random"])
    ckpt = make_random[3]
    assert make_random[2] == "act" and ckpt.startswith(f"{tmp_path / 'ckpts'}/act-")
    assert make_random[4] == "pretrained_backbone_weights=null"
    export = shlex.split(shown["export"])
    assert export[2:4] == [f"--policy.path={ckpt}", f"--output_dir={tmp_path}/cells/act/cpu/local/bundle"]
    assert f"\n  {shown['export']}\n" in done.stdout  # one line, as the shell takes it
    env = shown["env"]
    assert env["HF_HUB_OFFLINE"] == "1" and env["MY_FLAG"] == "two words"
    assert env["TORCHINDUCTOR_CACHE_DIR"] == f"{tmp_path}/inductor_cache"
    assert {k: env[k] for k in env if k.startswith("EXPORT_MATRIX_") and k != "EXPORT_MATRIX_RESUME_DIR"} == {
        "EXPORT_MATRIX_CELL": "act/cpu/local", "EXPORT_MATRIX_POLICY": "act", "EXPORT_MATRIX_GPU": "cpu",
        "EXPORT_MATRIX_TORCH": "local"}
    assert "HOME" not in env  # what the job inherits unchanged is not listed
    assert len(shown["fingerprint"]) == 16 and not (tmp_path / "cells").exists()  # nothing ran
    quoted = yaml.safe_load(cli("show", "wall_x/h100/stock", f"out_dir={tmp_path}").stdout)["export"]
    assert quoted.endswith(" '--task=pick up the cube'") and shlex.split(quoted)[-1] == "--task=pick up the cube"


def test_show_takes_a_pattern_and_shows_every_cell_of_the_matrix_it_matches(tmp_path: Path) -> None:
    import yaml

    done = cli("show", "act/*/*", "matrix=tracking", "gpu=h100", f"out_dir={tmp_path}")
    assert [d["cell"] for d in yaml.safe_load_all(done.stdout)] == ["act/h100/stock", "act/h100/pr202785",
                                                                   "act/h100/pr202925"]
    done = cli("show", "act/*", check=False)
    assert done.returncode == 2 and done.stderr == "export-matrix: error: bad cell id 'act/*' (expected " \
                                                   "policy/gpu/torch)\n"


def test_many_policies_compose_in_chunks_to_the_same_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunked composition (for hundreds of policies) gives what one composition gives, overrides and errors too."""
    from orchestrator import config
    from orchestrator.config import to_plain
    from orchestrator.config.cells import resolve

    overrides = ["matrix=tracking", "policies.flux3.timeout_min=7", "+policies.act.env.X=1",
                 "policies.tdmpc_mpc.timeout_min=9", "gpus.h100.slurm.cpus_per_task=1", "exporter=lerobot_cuda",
                 "exporters.lerobot_cuda.command=[x]"]
    monkeypatch.setattr(config, "POLICY_CHUNK", 10**6)
    whole = compose_config(overrides)
    monkeypatch.setattr(config, "POLICY_CHUNK", 3)
    chunked = compose_config(overrides)
    keys = [k for k in whole.cfg if k != "hydra"]
    assert sorted(keys) == sorted(k for k in chunked.cfg if k != "hydra")
    assert all(to_plain(whole.cfg[k]) == to_plain(chunked.cfg[k]) for k in keys)
    assert len(to_plain(chunked.cfg.policies)) == len(to_plain(whole.cfg.policies)) > 3
    assert [(s.id, s.fingerprint, s.configs) for s in resolve(whole, True)] == \
        [(s.id, s.fingerprint, s.configs) for s in resolve(chunked, True)]
    assert chunked.cfg.policies.tdmpc_mpc.timeout_min == 9  # outside the matrix, composed for its override
    with pytest.raises(ConfigError, match=r"^unknown key policies\.nope\.timeout_min \(valid under policies: act, "):
        compose_config([*overrides, "policies.nope.timeout_min=3"])
