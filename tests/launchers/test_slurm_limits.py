"""Arrays sized to the cluster: MaxArraySize and MaxJobCount read from `scontrol show config`."""

from __future__ import annotations

import pytest

from orchestrator.launchers.slurm.limits import ClusterLimits, chunks, parse_limits

SCONTROL = """Configuration data as of 2026-12-03T12:00:00
AccountingStorageType   = accounting_storage/slurmdbd
MaxArraySize            = 1001
MaxJobCount             = 10000
MaxStepCount            = 40000
"""


@pytest.mark.parametrize(("text", "expected", "tasks"), [
    (SCONTROL, ClusterLimits(1001, 10000), 1001),
    (SCONTROL.replace("1001", "200"), ClusterLimits(200, 10000), 200),
    (SCONTROL.replace("10000", "500"), ClusterLimits(1001, 500), 250),  # half the system's jobs at most
    ("", ClusterLimits(1001, 10000), 1001),  # no answer: Slurm's defaults
])
def test_limits_from_scontrol(text: str, expected: ClusterLimits, tasks: int) -> None:
    limits = parse_limits(text)
    assert limits == expected and limits.array_tasks == tasks


def test_a_signature_of_2500_cells_goes_in_as_three_arrays_in_order() -> None:
    cells = list(range(2500))
    parts = chunks(cells, ClusterLimits().array_tasks)
    assert [len(p) for p in parts] == [1001, 1001, 498] and [c for p in parts for c in p] == cells
