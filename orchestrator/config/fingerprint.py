"""A cell's fingerprint: what the current config says the cell is, hashed, so a record can be found stale.

The key covers the resolved policy, gpu, torch and exporter configs (make_random's type and overrides among
them) and the build's environment: a recipe's digest (requirements, index, patch bytes) or, for an interpreter
we did not build, its installed distributions. The GPU name and driver that the job saw are kept in the record's
fingerprint too, but only the config can be compared before a job runs, so they are not in the key.
`config_key` leaves an interpreter's distributions out: what collect compares, wherever it runs. `code_key`, for
a recipe build with `lerobot:`, leaves that requirement out of the configs and the recipe's digest: where only it
changed, the files the cell loaded decide (docs/bump.md).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ..envs import EnvRecipe, env_fingerprint


def env_identity(python: str, recipe: EnvRecipe | None) -> dict[str, Any]:
    if recipe is not None:
        patches = dict(zip((p.name for p in recipe.patches), recipe.patch_sha, strict=True))
        return {"recipe": recipe.digest, "patches": patches}
    return installed_identity(python, env_fingerprint(python))


def code_identity(recipe: EnvRecipe | None) -> dict[str, Any] | None:
    """env_identity without the `lerobot:` requirement; None where the build is no recipe with one."""
    if recipe is None or recipe.code_digest is None:
        return None
    patches = dict(zip((p.name for p in recipe.patches), recipe.patch_sha, strict=True))
    return {"recipe": recipe.code_digest, "patches": patches}


def installed_identity(python: str, found: dict[str, Any]) -> dict[str, Any]:
    """What of an interpreter's env_fingerprint goes into the key: its Python version and distributions."""
    return {"python": python, "python_version": found.get("python_version"),
            "freeze": hashlib.sha256(json.dumps(found.get("freeze")).encode()).hexdigest()[:16]}


GPU_NEEDS = ("capability", "name")  # a gpu config's requirements: checked where a job runs, not what it ran


def _keyed(configs: Any) -> Any:
    """The configs as the keys hash them: a gpu config's requirements left out, so adding or tightening a check
    does not make every record of the column stale (a record made on the wrong GPU says so itself)."""
    gpu = configs.get("gpu") if isinstance(configs, dict) else None
    if not isinstance(gpu, dict) or not any(k in gpu for k in GPU_NEEDS):
        return configs
    return {**configs, "gpu": {k: v for k, v in gpu.items() if k not in GPU_NEEDS}}


def fingerprint(configs: dict[str, Any], env: dict[str, Any], code: dict[str, Any] | None = None) -> dict[str, Any]:
    """`code`: code_identity of the build, where it has one; then the fingerprint has a `code_key` too."""
    blob = json.dumps({"configs": _keyed(configs), "env": env}, sort_keys=True, default=str)
    found = {"key": hashlib.sha256(blob.encode()).hexdigest()[:16], "config_key": config_key(configs, env),
             "configs": configs, "env": env}
    if code is not None:
        found["code_key"] = code_key(configs, code)
    return found


def code_key(configs: dict[str, Any], code: dict[str, Any]) -> str:
    """The key with the build's `lerobot:` left out: equal before and after a bump of that alone."""
    torch = configs.get("torch") if isinstance(configs, dict) else None
    if isinstance(torch, dict):
        configs = {**configs, "torch": {k: v for k, v in torch.items() if k != "lerobot"}}
    blob = json.dumps({"configs": _keyed(configs), "env": code}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def config_key(configs: dict[str, Any], env: dict[str, Any] | None) -> str:
    """What of the key the config alone decides, on any machine: the resolved configs and a recipe's identity
    (its digest and patches), not the distributions of an interpreter we did not build, which only the machine
    that has it can read. collect compares this: it may run where the sweep's environments are not."""
    built = env if isinstance(env, dict) and "recipe" in env else None
    blob = json.dumps({"configs": _keyed(configs), "env": built}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
