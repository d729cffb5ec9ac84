"""Print what a torch build's interpreter has, as one JSON line: its versions and, with --cuda, its CUDA device;
with --installed, its installed distributions and site directories instead; with --paths, its sys.path folders.

    <python> orchestrator/scripts/probe.py [--cuda | --installed | --paths]

Run by every cell's job with the build's interpreter before make_random, so a record names the versions it ran
with, and a cell whose exporter needs a GPU stops at once, with one line, where torch sees none. `--installed` is
what an interpreter we did not build is fingerprinted by (envs.env_fingerprint); `--paths` is where a loaded-files
list's paths are looked up (record/loaded.py). A lerobot installed from a git URL or a folder (not a registry) is
reported with a digest of its sources (`0.6.1+src.1a2b3c4d5e6f`): a branch bump keeps the version, and the random
checkpoints, keyed by it, must not outlive the code that made them. Run as a file, not with -c, so
the caller's working directory is not on sys.path (a *.egg-info there would count as installed). Imports only
stdlib (and torch for --cuda): that environment need not have the orchestrator installed.
"""

import importlib.metadata as metadata
import json
import os
import platform
import sys


def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def lerobot_version():
    """lerobot's version; from a URL or a folder (direct_url.json, PEP 610), with a digest of its .py sources."""
    found = version("lerobot")
    try:
        dist = metadata.distribution("lerobot")
        if found is None or dist.read_text("direct_url.json") is None:
            return found
        import hashlib
        import importlib.util

        spec = importlib.util.find_spec("lerobot")  # finds the package without running it
        top = os.path.dirname(spec.origin)
        sha = hashlib.sha256()
        for folder, dirs, names in os.walk(top):
            dirs.sort()
            for name in sorted(n for n in names if n.endswith(".py")):
                path = os.path.join(folder, name)
                sha.update(os.path.relpath(path, top).encode() + b"\0")
                with open(path, "rb") as handle:
                    sha.update(hashlib.sha256(handle.read()).digest())
        return f"{found}+src.{sha.hexdigest()[:12]}"
    except Exception:  # noqa: BLE001 - the plain version, as before
        return found


def cuda():
    """{"available": bool, "why": one line when not}: what torch in this interpreter sees."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "unset")
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - any import failure is the reason
        return {"available": False, "why": f"torch does not import ({type(exc).__name__}: {exc})"}
    if not torch.cuda.is_available():
        return {"available": False, "why": f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees "
                                           f"{torch.cuda.device_count()} devices (CUDA_VISIBLE_DEVICES={visible})"}
    major, minor = torch.cuda.get_device_capability()
    return {"available": True, "device": torch.cuda.get_device_name(), "capability": f"sm_{major}{minor}"}


def installed():
    """Every distribution with its version, and the site directories (sys.path[0] is this script's own) with
    their mtimes taken before the distributions are read: an install during the read leaves a stamp older than
    the directory, so a key cached under it is looked up again (fingerprint_cache.py)."""
    site = [p for p in sys.path[1:] if p and os.path.isdir(p)]
    stamp = []  # fingerprint_cache.site_stamp's shape; this file runs in the build's interpreter, without our package
    for directory in site:
        try:
            stamp.append([directory, os.stat(directory).st_mtime_ns])
        except OSError:
            stamp.append([directory, None])
    return {"python_version": platform.python_version(),
            "freeze": sorted(f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions()),
            "site": site, "site_stamp": stamp}


if "--paths" in sys.argv[1:]:
    print(json.dumps([p for p in sys.path[1:] if p and os.path.isdir(p)]))
    sys.exit(0)
if "--installed" in sys.argv[1:]:
    print(json.dumps(installed()))
    sys.exit(0)
found = {"python": platform.python_version(),
         **{name: version(name) for name in ("torch", "executorch", "lerobot", "transformers")}}
found["lerobot"] = lerobot_version()
if "--cuda" in sys.argv[1:]:
    found["cuda"] = cuda()
print(json.dumps(found))
