"""Lists the module files this interpreter loaded, so a LeRobot bump reruns only the cells whose code changed.

A job's make_random and export steps run with this folder first on PYTHONPATH and EXPORT_MATRIX_LOADED_DIR set
(orchestrator/record/loaded.py). At exit each process of the step (the fork's `lerobot-export`, an embedded
exporter, their workers) writes `<pid>.txt` there: one `<root>\t<path relative to it>\t<ran>` line per loaded
module whose root is on sys.path (site-packages, a LeRobot checkout), not the standard library or the script's
folder. `<ran>` is 1 where a function or method defined in the file was called other than by the file's own import
(sys.monitoring's PY_START, each code object reported once), 0 where only its import ran it (its module body, a
registering decorator), `?` where this Python cannot tell:
LeRobot imports every policy's package in every process, so which policy's code ran is what tells them apart.
The job hashes the files. Standard library only, cheap, and it never raises: a step must not fail because its
files could not be listed. The sitecustomize this one hides still runs.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CO_OPTIMIZED = 0x1  # a function's code object (not a module's or a class body's)
IMPORT_DEPTH = 6  # callers looked at for the module body of the function's own file
_ran = set()  # co_filename of every function that started
_tracking = []  # the sys.monitoring tool id in use, if any


def _track():
    """Note the file of each function's first start (sys.monitoring, Python 3.12+), on a tool id nobody holds."""
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is None:
        return
    for tool in (4, 3):  # ids no tool names (debugger 0, coverage 1, profiler 2, optimizer 5)
        try:
            monitoring.use_tool_id(tool, "export-matrix loaded files")
        except ValueError:
            continue

        def started(code, offset, disable=monitoring.DISABLE, ran=_ran, frame=sys._getframe):
            if not code.co_flags & CO_OPTIMIZED:
                return disable
            caller = frame(1).f_back
            for _ in range(IMPORT_DEPTH):  # called by its own file's import (a registering decorator): not yet
                if caller is None:
                    break
                if caller.f_code.co_name == "<module>" and caller.f_code.co_filename == code.co_filename:
                    return None
                caller = caller.f_back
            ran.add(code.co_filename)
            return disable  # once per code object

        monitoring.register_callback(tool, monitoring.events.PY_START, started)
        monitoring.set_events(tool, monitoring.events.PY_START)
        _tracking.append(tool)
        return


def _chain():
    """Run the sitecustomize this file hides (the next one on sys.path), as site would have."""
    import importlib.machinery
    import importlib.util

    others = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None or os.path.dirname(os.path.abspath(spec.origin or "")) == HERE:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - site itself reports and goes on
        print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(exc).__name__}: {exc}",
              file=sys.stderr)


def _roots():
    """sys.path's folders less the standard library, the script's folder, the working folder and this one."""
    import sysconfig

    paths = sysconfig.get_paths()
    left_out = {os.path.realpath(p) for p in (paths.get("stdlib"), paths.get("platstdlib"), HERE, os.getcwd()) if p}
    left_out |= {os.path.join(p, "lib-dynload") for p in set(left_out)}
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    if main:
        left_out.add(os.path.realpath(os.path.dirname(os.path.abspath(main))))
    return {os.path.realpath(p) for p in sys.path if p} - left_out


def _relative(name, path):
    """(root, path relative to it) of module `name` loaded from `path`: the root is what the module's dotted name
    leaves of its path (`lerobot.policies.act.modeling_act` at /x/lerobot/policies/act/modeling_act.py: /x)."""
    parts = name.split(".")
    base = os.path.basename(path)
    if base.split(".", 1)[0] == "__init__":
        rel = os.path.join(*parts, base)
    elif base.split(".", 1)[0] == parts[-1]:
        rel = os.path.join(*parts[:-1], base)
    else:
        return None
    if not path.endswith(os.sep + rel):
        return None
    return path[: -len(rel) - 1], rel


def _write(folder):
    roots = _roots()
    ran = {os.path.abspath(f) for f in _ran} if _tracking else None
    lines = set()
    for key, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if not isinstance(path, str) or key == "__main__":
            continue
        spec = getattr(module, "__spec__", None)
        path = os.path.abspath(path)
        found = _relative(getattr(spec, "name", None) or key, path)
        if found and os.path.realpath(found[0]) in roots and os.path.isfile(path):
            state = "?" if ran is None else "1" if path in ran else "0"
            lines.add(f"{found[0]}\t{found[1]}\t{state}\n")
    target = os.path.join(folder, f"{os.getpid()}.txt")
    temporary = f"{target}.tmp"
    with open(temporary, "w") as handle:
        handle.writelines(sorted(lines))
    os.replace(temporary, target)


def _at_exit(folder):
    try:
        _write(folder)
    except BaseException:  # noqa: BLE001 - the list is a courtesy; the step's own exit status stands
        pass


try:
    _folder = os.environ.get("EXPORT_MATRIX_LOADED_DIR")
    if _folder:
        import atexit

        atexit.register(_at_exit, _folder)
        _track()
except BaseException:  # noqa: BLE001
    pass
try:
    _chain()
except BaseException:  # noqa: BLE001 - never break the interpreter's start
    pass
