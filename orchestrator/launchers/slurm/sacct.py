"""Asking Slurm about jobs: one `sacct` call for a whole manifest, parsed into a `JobState` per job id.

Only what Slurm says (sacct's line shapes: tasks, pending ranges, steps); what a state means for a cell is
settle's and follow's.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field

# Slurm job states of a job that has not ended (a requeued job comes back as PENDING).
ACTIVE = frozenset({"PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SUSPENDED", "CONFIGURING",
                    "COMPLETING", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD"})
# A job sacct does not know yet (slurmdbd lags a few seconds behind sbatch) counts as active this long.
UNKNOWN_GRACE_S = 300


@dataclass
class JobState:
    job_id: str
    state: str  # RUNNING, COMPLETED, TIMEOUT, ... ("CANCELLED by 0" -> CANCELLED; `detail` keeps the rest)
    exit_code: str = ""
    detail: str = ""
    elapsed: str = ""
    timelimit: str = ""
    nodes: str = ""
    end: str = ""
    steps: dict[str, tuple[str, str]] = field(default_factory=dict)  # "0", "batch" -> (state, exit code)

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    @property
    def step_exit(self) -> str:
        """The exit code of the job's step (submitit's srun: step 0), where the job process ran."""
        return self.steps.get("0", ("", ""))[1]


SACCT_FIELDS = ("JobID", "State", "ExitCode", "Elapsed", "Timelimit", "NodeList", "End")
_RANGE = re.compile(r"^(?P<base>\d+)_\[(?P<ranges>[\d,\-]+)(?:%\d+)?\]$")


def sacct(job_ids: list[str], steps: bool = True) -> dict[str, JobState]:
    """One `sacct` call for all these jobs (array tasks `A_i` are asked as their array `A`), by job id.

    With `steps`, their steps too: a job whose srun step the cgroup OOM-killed ends FAILED, its step
    OUT_OF_MEMORY. Without (-X), slurmdbd answers many times faster: one line per job instead of three or four.
    """
    bases = sorted({j.split("_")[0] for j in job_ids if j}, key=int)
    if not bases:
        return {}
    done = subprocess.run(["sacct", *([] if steps else ["-X"]), "-P", "-n", "-o", ",".join(SACCT_FIELDS),
                           "-j", ",".join(bases)], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"sacct failed: {done.stderr.strip()[-500:]}")
    return parse_sacct(done.stdout)


def parse_sacct(text: str) -> dict[str, JobState]:
    """Lines of `sacct -P -n`: a task `A_i`, a job `J`, a whole array still pending `A`, pending tasks
    `A_[3-9%4]`, or a step `J.0`, `J.batch`. A task's own line wins over a range that sacct sometimes keeps
    after the task started; a job that ended FAILED or COMPLETED with a step OUT_OF_MEMORY is OUT_OF_MEMORY."""
    explicit: dict[str, JobState] = {}
    ranged: dict[str, JobState] = {}
    steps: dict[str, dict[str, tuple[str, str]]] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < len(SACCT_FIELDS) or not parts[0]:
            continue
        values = dict(zip(SACCT_FIELDS, parts, strict=False))
        state, _, detail = values["State"].strip().partition(" ")
        if "." in values["JobID"]:
            job_id, _, step = values["JobID"].partition(".")
            steps.setdefault(job_id, {})[step] = (state, values["ExitCode"])
            continue
        job = JobState(values["JobID"], state, values["ExitCode"], detail.strip(), values["Elapsed"],
                       values["Timelimit"], values["NodeList"], values["End"])
        match = _RANGE.match(values["JobID"])
        if match:
            for part in match["ranges"].split(","):
                low, _, high = part.partition("-")
                for index in range(int(low), int(high or low) + 1):
                    ranged[f"{match['base']}_{index}"] = job
        else:
            explicit[values["JobID"]] = job
    for job_id, job in explicit.items():
        job.steps = steps.get(job_id, {})
        if job.state in ("FAILED", "COMPLETED") and any(s == "OUT_OF_MEMORY" for s, _ in job.steps.values()):
            job.state = "OUT_OF_MEMORY"
    return {**ranged, **explicit}


def lookup(states: dict[str, JobState], job_id: str) -> JobState | None:
    """A job's state; a task of an array that sacct still lists as one pending job `A` is pending."""
    if job_id in states:
        return states[job_id]
    base = job_id.split("_")[0]
    return states.get(base) if base != job_id else None
