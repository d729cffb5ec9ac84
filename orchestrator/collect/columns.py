"""Which matrix column a cell lands in: one per GPU, or one per GPU and build where builds go side by side.

A GPU's builds fold into one column when at most one of them is stock: a patched build only says whether a fix
turns ❌ into 🟡. Two stock builds of one GPU (a torch bump) are two answers to the same question, so each gets a
column `<gpu>@<build>`, labelled by its records' versions; `collect table.by=build` splits every GPU so.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace

import pandas as pd

from .failure_summary import order
from .settings import Settings

SEPARATOR = "@"


def by_build(cells: pd.DataFrame, settings: Settings) -> tuple[pd.DataFrame, Settings]:
    """The cells with `gpu` set to their column's key, and the settings that label and order those columns."""
    if settings.table_by == "build":  # the GPUs whose builds go side by side, in the cells' order
        split = list(dict.fromkeys(cells["gpu"]))
    else:
        stock = cells[cells["stock"]].groupby("gpu", sort=False)["torch"].nunique()
        split = [gpu for gpu, builds in stock.items() if builds > 1]
    if not split:
        return cells, settings
    moved = cells["gpu"].isin(split)
    builds = {gpu: sorted(set(cells.loc[moved & (cells["gpu"] == gpu), "torch"]), key=order(settings.builds))
              for gpu in split}
    texts = {gpu: _build_texts(cells[cells["gpu"] == gpu], builds[gpu]) for gpu in split}
    cells = cells.assign(gpu=cells["gpu"].where(~moved, cells["gpu"] + SEPARATOR + cells["torch"]))
    keys = {gpu: [f"{gpu}{SEPARATOR}{build}" for build in builds[gpu]] for gpu in split}
    labels, shorts = dict(settings.gpu_labels), dict(settings.gpu_shorts)
    for gpu in split:
        for build, key in zip(builds[gpu], keys[gpu], strict=True):
            labels[key] = f"{settings.gpu_label(gpu)} · {texts[gpu][build]}"
            shorts[key] = f"{settings.gpu_short(gpu)}/{build}"
    gpus = [key for gpu in dict.fromkeys([*settings.gpus, *split]) for key in keys.get(gpu, [gpu])]
    expected = [(policy, key) for policy, gpu in settings.expected for key in keys.get(gpu, [gpu])]
    return cells, replace(settings, gpu_labels=labels, gpu_shorts=shorts, gpus=gpus, expected=expected)


def _build_texts(cells: pd.DataFrame, builds: list[str]) -> dict[str, str]:
    """`torch 2.15.0 · ET 1.5.1` (plus its fixes) per build, from the versions most of its records carry; a
    build whose text another build of this GPU shares also shows its name, so no two columns read the same."""
    texts = {}
    for build in builds:
        own = cells[cells["torch"] == build]
        versions = Counter(v for v in own["versions"] if isinstance(v, str) and v)
        data = json.loads(versions.most_common(1)[0][0]) if versions else {}
        parts = [f"{name} {data[key]}" for key, name in (("torch", "torch"), ("executorch", "ET")) if data.get(key)]
        fixes = " ".join(str(f) for f in own["fixes"].iloc[:1] if isinstance(f, str) and f.strip())
        texts[build] = " · ".join([*parts, *([f"with {fixes}"] if fixes else [])]) or build
    counts = Counter(texts.values())
    return {build: text if counts[text] == 1 else f"{text} ({build})" for build, text in texts.items()}
