"""The CPU exporter (orchestrator/exporters/executorch_cpu.py), its exported side made slower by a sleep in each
call, so that its `kernels` step profiles both sides. KERNELS_FAULT makes the profiler fail: `raise` (an
exception inside it), `crash` (the process dies by SIGSEGV while profiling). Run as the exporter is run: as a file,
in the export environment, with the exporter's arguments."""

import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "orchestrator" / "exporters"))
import executorch_cpu  # noqa: E402
import kernel_profile  # noqa: E402 - the module export_base imports by this name: patched here, used there

SLOWER_S = float(os.environ.get("SLOWER_S", "0.5"))  # gaussian_actor: about 10 ms either side, 0.3 s cold
program_outputs = executorch_cpu.CpuExport.program_outputs


def slower(self):
    time.sleep(SLOWER_S)
    return program_outputs(self)


def failing(*args, **kwargs):
    if os.environ["KERNELS_FAULT"] == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")


executorch_cpu.CpuExport.program_outputs = slower
if os.environ.get("KERNELS_FAULT"):
    kernel_profile.profile_side = failing
sys.exit(executorch_cpu.main())
