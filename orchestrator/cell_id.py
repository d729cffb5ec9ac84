"""A cell's id, `policy/gpu/torch`: the one place that parses it, formats it and maps it to its directory."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

CELLS_DIR = "cells"


class CellId(NamedTuple):
    policy: str
    gpu: str
    torch: str

    @classmethod
    def parse(cls, text: str) -> CellId:
        parts = text.split("/")
        if len(parts) != 3 or not all(parts):
            raise ValueError(f"bad cell id {text!r} (expected policy/gpu/torch)")
        return cls(*parts)

    @classmethod
    def of_dir(cls, directory: Path | str) -> CellId:
        """The cell whose directory (OUT/cells/<policy>/<gpu>/<torch>) this is."""
        return cls(*os.fspath(directory).rstrip(os.sep).rsplit(os.sep, 3)[1:])

    def __str__(self) -> str:
        return f"{self.policy}/{self.gpu}/{self.torch}"

    def dir(self, out_dir: Path | str) -> Path:
        return Path(out_dir) / CELLS_DIR / self.policy / self.gpu / self.torch
