"""The Arrow IPC (Feather) files of DIR/.collect-index/: memory-mapped reads, atomic uncompressed writes.

Uncompressed, so that opening one is a memory map (Parquet's decoding took half a second at 100,000 records).
A file that is missing or not Arrow reads as None: the index and the slices are caches, rebuilt from the records.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.feather as feather

from ..atomic import write_atomic


def read_table(path: Path) -> pa.Table | None:
    try:
        return feather.read_table(path, memory_map=True)
    except (OSError, ValueError, pa.ArrowException):
        return None


def write_table(path: Path, table: pa.Table) -> None:
    """One record batch: a table read back is then one chunk per column, which needs no combining (copying). A
    table in runs (a merged index) is combined here; one already in one chunk is not copied."""
    table = table.combine_chunks()
    write_atomic(path, lambda handle: feather.write_feather(table, handle, compression="uncompressed",
                                                            chunksize=max(table.num_rows, 1)))
