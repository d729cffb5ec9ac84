"""What a failed export leaves for `export-matrix repro`: its exported programs, and where a trace stopped.

A cell that fails after trace (lower or compile-model, write, check) keeps each method's torch.export program as
OUT/programs/<method>.pt2 with OUT/programs/programs.json (the step, the whole error message, the exporter, whose
partitioner and compile settings the repro generator repeats). `export-matrix repro CELL` reads them
(orchestrator/repros/generate.py) and removes them once every failure of the cell has a script that reproduces it.
Programs larger than KEEP_MIB (env EXPORT_MATRIX_KEEP_PROGRAMS_MIB, MiB; 0 keeps none) are not kept; programs.json
then says so, which `repro` prints. The CUDA exporter's `save` step has written them already (its resume folder):
they are moved, not written again. Only the newest failed attempt of a cell keeps them (an archived attempt's go).

A cell that fails in trace has no program; its log names the user code line where tracing stopped:
`Exported policy trace stopped at: modeling_tdmpc.py:256 in plan: actions = elite_actions[...]`.

Imports only stdlib at module level: the file runs in a torch build's interpreter, next to the exporters.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import traceback
from pathlib import Path
from typing import Any

PROGRAMS_DIR = "programs"
PROGRAMS_JSON = "programs.json"
KEEP_STEPS = ("lower", "compile-model", "write", "check")  # the steps whose failure a program can reproduce
DEFAULT_KEEP_MIB = 16384  # pi0/pi05 save 8.5-9 GiB; the programs go once a repro is made
MAX_ERROR_CHARS = 20000


def keep_mib() -> float:
    value = os.environ.get("EXPORT_MATRIX_KEEP_PROGRAMS_MIB", "")
    try:
        return float(value) if value else DEFAULT_KEEP_MIB
    except ValueError:
        return DEFAULT_KEEP_MIB


def after_failure(export: Any, step: str, exc: BaseException) -> None:
    """Keep what a repro needs: the programs after a lowering-side failure, the user line of a trace failure.
    Never raises: the export's own failure is what the log must end with."""
    try:
        if step == "trace":
            site = trace_site(exc)
            if site:
                export.info["trace_site"] = site
                print(f"Exported policy trace stopped at: {site}", flush=True)
        elif step in KEEP_STEPS:
            kept = keep_programs(export, step, exc)
            print(f"Exported policy programs: {kept}", flush=True)
    except Exception as err:  # noqa: BLE001 - evidence is a bonus; the failure itself must still be reported
        print(f"warning: could not keep the failure's evidence: {type(err).__name__}: {err}", file=sys.stderr,
              flush=True)


def keep_programs(export: Any, step: str, exc: BaseException) -> str:
    """OUT/programs/<method>.pt2 and programs.json; returns one line saying what was kept."""
    import torch

    folder = Path(export.out) / PROGRAMS_DIR
    shutil.rmtree(folder, ignore_errors=True)
    for earlier in Path(export.out).parent.glob(f"attempts/*/{Path(export.out).name}/{PROGRAMS_DIR}"):
        shutil.rmtree(earlier, ignore_errors=True)  # an archived attempt's (gigabytes for a VLA): these replace them
    folder.mkdir(parents=True)
    name = type(exc).__qualname__ if type(exc).__module__ == "builtins" else \
        f"{type(exc).__module__}.{type(exc).__qualname__}"
    meta: dict[str, Any] = {"cell": os.environ.get("EXPORT_MATRIX_CELL"), "versions": export.info.get("versions"),
                            "exporter": export.exporter, "device": export.device, "step": step,
                            "error": "\n".join([f"{name}: {exc}", *map(str, getattr(exc, "__notes__", []))])
                            [:MAX_ERROR_CHARS], "methods": {}, "kept": False}
    saved = sorted(Path(getattr(export, "resume_dir", "/nonexistent")).glob("*.pt2"))
    programs = getattr(export, "traced", None) or getattr(export, "eps", None) or {}
    cap = keep_mib()
    size = sum(p.stat().st_size for p in saved) / 2**20 if saved else sum(_mib(ep) for ep in programs.values())
    if not saved and not programs:
        meta["why"] = "no exported program in memory or in the resume folder"
    elif size > cap:
        meta["why"] = f"{size:.0f} MiB of programs is over the cap of {cap:g} MiB (EXPORT_MATRIX_KEEP_PROGRAMS_MIB)"
    else:
        for path in saved:  # the CUDA exporter's `save`: move, no second write of gigabytes
            shutil.move(str(path), folder / path.name)
            meta["methods"][path.stem] = path.name
        for method, ep in ({} if saved else programs).items():
            torch.export.save(ep, folder / f"{method}.pt2")
            meta["methods"][method] = f"{method}.pt2"
        meta["kept"] = True
    meta["mib"] = round(size, 1)
    (folder / PROGRAMS_JSON).write_text(json.dumps(meta, indent=2) + "\n")
    return (f"{', '.join(meta['methods'])} kept in {folder} ({size:.1f} MiB)" if meta["kept"]
            else f"not kept: {meta['why']}")


def _mib(ep: Any) -> float:
    tensors = [*ep.state_dict.values(), *getattr(ep, "constants", {}).values()]
    return sum(t.numel() * t.element_size() for t in tensors if hasattr(t, "element_size")) / 2**20


# A frame of torch, of Python itself or of this folder is not the user's code.
_NOT_USER = re.compile(r"[/\\](?:torch|executorch|_pytest|importlib|contextlib\.py|functools\.py)[/\\.]|"
                       r"[/\\]lib[/\\]python3\.\d+[/\\][^/\\]+\.py$")


def trace_site(exc: BaseException) -> str | None:
    """`file.py:N in fn: code` of the innermost frame of the user's code where tracing stopped.

    torch.export names it in the message for a data-dependent guard ("The following call raised this error:",
    or "Caused by: (path:N in fn)"); otherwise the innermost traceback frame outside torch and this folder."""
    text = str(exc)
    called = re.search(r'The following call raised this error:\s*File "([^"]+)", line (\d+), in (\w+)\n\s*(.*)', text)
    if called:
        return f"{_short(called[1])}:{called[2]} in {called[3]}: {called[4].strip()}"
    here = str(Path(__file__).resolve().parent)
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not _NOT_USER.search(f.filename) and not f.filename.startswith(here)]
    caused = re.search(r"Caused by: \((\S+):(\d+) in (\w+)\)", text)
    if caused:  # a path torch cut short: the traceback's frame of that file and line has it whole
        match = [f for f in frames if f.filename.endswith(Path(caused[1]).name) and f.lineno == int(caused[2])]
        frame = match[-1] if match else None
        code = frame.line if frame else ""
        return f"{_short(frame.filename if frame else caused[1])}:{caused[2]} in {caused[3]}" + (
            f": {code}" if code else "")
    if frames:
        frame = frames[-1]
        return f"{_short(frame.filename)}:{frame.lineno} in {frame.name}" + (f": {frame.line}" if frame.line else "")
    return None


def _short(path: str) -> str:
    """site-packages/lerobot/policies/x.py -> lerobot/policies/x.py: the same on every machine."""
    parts = Path(path).parts
    for anchor in ("site-packages", "dist-packages"):
        if anchor in parts:
            return "/".join(parts[parts.index(anchor) + 1:])
    return path
