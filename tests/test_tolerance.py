"""Tolerance is data: a policy config's `tolerance:` reaches the exporter's command and the record, which says where
the check's tolerance came from (the exporter's own line, or, for the fork's CLI, its bundle's export.json or its
check line). Sweeps through the real CLI and submitit; the exporters are a script here and the fork's stand-in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.config import ConfigError, compose_config
from orchestrator.config.cells import resolve
from orchestrator.job import export_command

from .conftest import cli, record, write

# An exporter that takes --tolerance as the embedded ones do: given, it is the policy config's; without it, its own
# default (1e-3), and it says which in the line the embedded exporters print.
FAKE_EXPORTER = """\
import sys
given = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--tolerance=")]
tolerance, source = (float(given[0]), "policy config") if given else (1e-3, "exporter default")
print("argv", sys.argv[1:])
print(f"Exported policy tolerance: {tolerance:g} ({source})")
print(f"Exported policy test case: largest difference 2.00e-05 (tolerance {tolerance:g})")
"""
POLICY = "checkpoint: {path: none}\nexport_args: []\n"


def test_the_templates_tolerance_part_is_filled_or_left_out() -> None:
    spec = next(s for s in resolve(compose_config(["policy=act"])) if s.id == "act/cpu/local")
    assert spec.tolerance == 0.001 and export_command(spec, "/ckpt", Path("/out"))[-1] == "--tolerance=0.001"
    spec = next(s for s in resolve(compose_config(["policy=act", "policies.act.tolerance=null"])))
    assert spec.tolerance is None
    assert export_command(spec, "/ckpt", Path("/out"))[2:] == ["--policy.path=/ckpt", "--output_dir=/out"]


def test_every_policy_that_exports_says_its_tolerance() -> None:
    """docs/collect.md's rule, written in each config (null where the fork's CLI decides); repros export nothing."""
    import yaml

    from orchestrator.config import PACKAGE_CONF

    configs = {p.stem: yaml.safe_load(p.read_text()) for p in (PACKAGE_CONF / "policy").glob("*.yaml")}
    missing = [name for name, config in configs.items()
               if config.get("exporter") != "repro" and "tolerance" not in config]
    assert configs and not missing
    assert [configs[name]["tolerance"] for name in ("pi0", "wall_x", "act", "flux3")] == [0.2, 0.075, 0.001, None]


def test_a_bad_tolerance_in_a_policy_file_is_one_line(tmp_path: Path) -> None:
    write(tmp_path / "policy/mine.yaml", POLICY + "tolerance: abc\n")
    with pytest.raises(ConfigError) as caught:
        resolve(compose_config(["matrix.policies=[mine]"], tmp_path))
    assert str(caught.value) == "policies.mine.tolerance must be a number greater than 0 or null, got 'abc'"


def test_a_policys_tolerance_reaches_the_command_and_the_record(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    script = write(tmp_path / "fake_exporter.py", FAKE_EXPORTER)
    write(conf / "exporter/fake.yaml", json.dumps(
        {"command": ["{python}", str(script), "--output_dir={out}", "--tolerance={tolerance}"]}))
    write(conf / "policy/given.yaml", POLICY + "tolerance: 0.05\n")
    write(conf / "policy/absent.yaml", POLICY)
    out = tmp_path / "out"
    cli("sweep", "--config-dir", str(conf), "matrix.policies=[given,absent]", "exporter=fake", f"out_dir={out}",
        "launcher.poll_s=0.2")
    given = record(out, "given/cpu/local")
    assert given["command"][-1] == "--tolerance=0.05" and given["status"] == "passed"
    assert (given["tolerance"], given["tolerance_source"]) == (0.05, "policy config")
    assert given["margin"] == pytest.approx(2e-5 / 0.05)
    absent = record(out, "absent/cpu/local")  # no tolerance in its config: the part is left out
    assert not any(part.startswith("--tolerance") for part in absent["command"])
    assert (absent["tolerance"], absent["tolerance_source"]) == (0.001, "exporter default")


def test_the_forks_cli_tolerance_comes_from_its_bundles_export_json(standin_conf: Path, tmp_path: Path) -> None:
    """The fork's CLI takes no --tolerance and prints only its check line; export.json in its bundle says the
    tolerance, and the record keeps export.json's where the two differ, naming both."""
    base = ["sweep", "--config-dir", str(standin_conf), "matrix=tracking", "matrix.gpus=[h100]", "matrix.torch=[stock]",
            "matrix.policies=[flux3,lawam]", "launcher.poll_s=0.2"]
    cli(*base, f"out_dir={tmp_path / 'a'}", "policies.flux3.tolerance=0.5", "+policies.lawam.env.STANDIN_SCENARIO=pass",
        "+policies.lawam.env.STANDIN_EXPORT_JSON=0.3")
    agrees = record(tmp_path / "a", "flux3/h100/stock")
    assert not any(part.startswith("--tolerance") for part in agrees["command"])  # the fork's CLI does not take it
    assert json.loads((tmp_path / "a/cells/flux3/h100/stock/bundle/export.json").read_text())["tolerance"] == 0.2
    assert (agrees["tolerance"], agrees["tolerance_source"]) == (0.2, "bundle export.json")
    differs = record(tmp_path / "a", "lawam/h100/stock")
    assert differs["tolerance"] == 0.3 and differs["max_diff"] == 0.00391  # max_diff always from the log
    assert differs["tolerance_source"] == "bundle export.json (0.3; the exporter log's check line said 0.2)"
    assert differs["margin"] == pytest.approx(0.00391 / 0.3)
    cli(*base, f"out_dir={tmp_path / 'b'}", "+policies.flux3.env.STANDIN_EXPORT_JSON=none",
        "+policies.lawam.env.STANDIN_SCENARIO=row5")
    no_json = record(tmp_path / "b", "flux3/h100/stock")
    assert (no_json["tolerance"], no_json["tolerance_source"]) == (0.2, "exporter log")
    failed = record(tmp_path / "b", "lawam/h100/stock")  # a failed check writes no bundle: its line says
    assert (failed["status"], failed["failed_step"], failed["tolerance"]) == ("failed", "check", 0.075)
    assert failed["tolerance_source"] == "exporter log"
