"""How large one job array may be on this cluster, so a big signature goes in as several arrays sbatch accepts.

Slurm refuses an array whose indices reach MaxArraySize (default 1001: indices 0-1000) and any submission past
MaxJobCount (default 10000 jobs in the system, every array task counted). Both come from `scontrol show config`;
without an answer, Slurm's defaults. An array is at most MaxArraySize tasks and at most half of MaxJobCount, so a
sweep leaves room for other users' jobs.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

DEFAULT_MAX_ARRAY_SIZE = 1001
DEFAULT_MAX_JOB_COUNT = 10000


@dataclass(frozen=True)
class ClusterLimits:
    max_array_size: int = DEFAULT_MAX_ARRAY_SIZE
    max_job_count: int = DEFAULT_MAX_JOB_COUNT

    @property
    def array_tasks(self) -> int:
        """Tasks one array may hold here."""
        return max(1, min(self.max_array_size, self.max_job_count // 2))


def parse_limits(text: str) -> ClusterLimits:
    """The limits in `scontrol show config` output ("MaxArraySize = 1001"); Slurm's defaults where absent."""
    found = dict(re.findall(r"^(MaxArraySize|MaxJobCount)\s*=\s*(\d+)", text, flags=re.MULTILINE))
    return ClusterLimits(int(found.get("MaxArraySize", DEFAULT_MAX_ARRAY_SIZE)),
                         int(found.get("MaxJobCount", DEFAULT_MAX_JOB_COUNT)))


def cluster_limits() -> ClusterLimits:
    try:
        done = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return ClusterLimits()
    return parse_limits(done.stdout) if done.returncode == 0 else ClusterLimits()


def chunks(items: list, size: int) -> list[list]:
    return [items[i:i + size] for i in range(0, len(items), size)]
