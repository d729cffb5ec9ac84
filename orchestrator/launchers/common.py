"""What both launchers do to a cell before its job starts: its time limit, its GPUs, and its `pending` record."""

from __future__ import annotations

from ..config.spec import CellSpec
from ..record import UNFINISHED, Status, owner, read_record, start_attempt, write_record


class Interrupted(Exception):
    """Ctrl-C or SIGTERM stopped a sweep: `cancelled` are the cells whose records now say so."""

    def __init__(self, cancelled: list[str]) -> None:
        super().__init__(f"{len(cancelled)} cells cancelled")
        self.cancelled = cancelled


def job_timeout_min(spec: CellSpec) -> int:
    """make_random and the export each have the cell's limit; the job gets both and a margin to write."""
    return int(2 * spec.timeout_min) + 5


def gpus_requested(spec: CellSpec) -> int:
    """The GPUs a cell asks for: the count of its gres (`gpu:h200:1`, `gpu:2`), 0 without one."""
    gres = str(spec.slurm.get("gres") or "")
    if not gres.startswith("gpu"):
        return 0
    count = gres.rsplit(":", 1)[-1]
    return int(count) if count.isdigit() else 1


def prepare(spec: CellSpec, local: bool = True) -> int:
    """Archive the cell's previous attempt and leave a `pending` record for this one: owned by this sweep on the
    local launcher; on Slurm the job id owns it (and sacct settles it), as the sweep returns at once.

    A previous attempt still marked unfinished was abandoned (no other sweep holds out_dir's lock): it is settled,
    and a job of it that still runs (an orphan of a killed sweep) is told to stop; it could no longer write the
    cell's record anyway."""
    earlier = read_record(spec.cell_dir)
    if local and earlier is not None and earlier.status in UNFINISHED and not earlier.owner.get("slurm_job"):
        owner.stop_orphan(earlier)
        if earlier.owner and owner.settle(spec.cell_dir, earlier).status in UNFINISHED:
            earlier.status = Status.CANCELLED
            earlier.error = "its sweep ended before it finished; the next sweep of the cell stopped it (SIGTERM)"
            write_record(spec.cell_dir, earlier)
    attempt = start_attempt(spec.cell_dir)
    write_record(spec.cell_dir, spec.new_record(status=Status.PENDING, attempt=attempt, fingerprint=spec.fingerprint,
                                                owner=owner.me() if local else {}))
    return attempt


