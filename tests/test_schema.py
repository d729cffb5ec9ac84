"""The configs' schemas (orchestrator/config/schema.py): Hydra checks the launcher as it composes, the axis entries are
checked against theirs, every problem is one line, and what a config says reaches the job as written."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config import ConfigError, compose_config
from orchestrator.config.cells import resolve

from .conftest import write


@pytest.mark.parametrize(("overrides", "message"), [
    (["launcher.parallel=two"], "launcher.parallel must be an integer at least 1, got 'two'"),
    (["launcher=slurm", "launcher.poll_s=soon"], "launcher.poll_s must be a number greater than 0, got 'soon'"),
    (["launcher=slurm", "launcher.setup=3"], "launcher.setup must be a list of strings, got 3"),
])
def test_hydra_refuses_a_bad_launcher_value_while_composing(overrides: list[str], message: str) -> None:
    """The launcher YAMLs extend the schemas in Hydra's ConfigStore: the value is refused before any cell is
    resolved, in the same one line as the checks after composition give."""
    with pytest.raises(ConfigError) as caught:
        compose_config(overrides)
    assert str(caught.value) == message


def test_a_sites_launcher_yaml_without_the_schema_is_checked_the_same_way(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    write(conf / "launcher/local.yaml", "name: local\nparallel: 2\npoll_s: 1.0\nparalel: 3\n")
    composed = compose_config(["launcher=local"], conf)  # Hydra knows no schema for it ...
    with pytest.raises(ConfigError, match=r"^unknown key launcher\.paralel \(valid: name, parallel, poll_s\)$"):
        resolve(composed)  # ... the check after composition still has one
    write(conf / "launcher/local.yaml", "name: local\nparallel: 2\n")
    with pytest.raises(ConfigError, match=r"^launcher\.poll_s must be set \(a number greater than 0\)$"):
        resolve(compose_config(["launcher=local"], conf))


def test_a_key_appended_to_the_launcher_is_refused_by_name() -> None:
    """Hydra lets `+key=value` add to a typed config as it composes; the check after composition names it."""
    composed = compose_config(["launcher=slurm", "+launcher.prepare.cpu=8"])
    with pytest.raises(ConfigError) as caught:
        resolve(composed)
    assert str(caught.value) == ("unknown key launcher.prepare.cpu (valid: constraint, cpus_per_task, mem_gb, "
                                 "partition, time_min)")


def test_the_make_random_arrays_settings_are_checked_too() -> None:
    """`launcher.prepare` is typed by its own dataclass; its ranges are checked as the launcher's are."""
    with pytest.raises(ConfigError) as caught:
        resolve(compose_config(["launcher=slurm", "launcher.prepare.cpus_per_task=-1"]))
    assert str(caught.value) == "launcher.prepare.cpus_per_task must be a number greater than 0, got -1.0"


def test_axis_entries_keep_a_sites_own_keys_and_their_values_as_written(tmp_path: Path) -> None:
    """The axis schemas are open to the keys a site's own configs hold and leave values alone: a record's
    fingerprint hashes the configs as written, so checking them must not turn 60 into 60.0 or add the keys a config
    left out. (A key that no schema declares and no config holds, appended on the command line, is refused:
    tests/test_config.py.)"""
    write(tmp_path / "policy/act.yaml", "checkpoint: {random: {type: act}}\ntask: null\nexport_args: []\n"
          "timeout_min: 30\nenv: {}\nsite_owner: lab-2\nsite_meta: {room: 3}\n")
    write(tmp_path / "gpu/cpu.yaml", "label: CPU\nexporter: executorch_cpu\nslurm: {cpus_per_task: 2, qos: high}\n")
    overrides = ["policies.act.site_owner=lab-3", "gpus.cpu.slurm.qos=low", "+policies.act.site_meta.floor=1"]
    spec = next(s for s in resolve(compose_config(overrides, tmp_path)) if s.policy == "act")
    policy = spec.configs["policy"]
    assert policy["site_owner"] == "lab-3" and spec.configs["gpu"]["slurm"]["qos"] == "low"
    assert policy["site_meta"] == {"room": 3, "floor": 1}
    assert "exporter" not in policy and "slurm" not in policy
    assert isinstance(policy["timeout_min"], int)


@pytest.mark.parametrize(("override", "message"), [
    ("+exporters.executorch_cpu.requires_cuda=maybe", "exporters.executorch_cpu.requires_cuda must be true or false, "
                                                      "got 'maybe'"),
    ("+exporters.executorch_cpu.requires_cuda=yes", "exporters.executorch_cpu.requires_cuda must be true or false, "
                                                    "got 'yes'"),
    ("exporters.executorch_cpu.command=[]", "exporters.executorch_cpu.command must be a non-empty list of strings, "
                                            "got []"),
    ("policies.act.task=''", "policies.act.task must be a non-empty string or null, got ''"),
    ("gpus.cpu.slurm.cpus_per_task=-1", "gpus.cpu.slurm.cpus_per_task must be a number greater than 0, got -1"),
    ("policies.act.env=3", "policies.act.env must be a mapping (key: value), got 3"),
    ("policies.act.tolerance=-1", "policies.act.tolerance must be a number greater than 0 or null, got -1"),
    ("policies.act.tolerance=abc", "policies.act.tolerance must be a number greater than 0 or null, got 'abc'"),
])
def test_a_bad_axis_value_is_one_line(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve(compose_config([override]))
    assert str(caught.value) == message
