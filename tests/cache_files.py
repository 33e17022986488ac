"""Writing hand-made records into the disk cache, as a tuning elsewhere would have: through the disk tier."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from autotune.record import TuningRecord
from autotune.storage import DiskCache, EntryRef


def write_record(record: TuningRecord, directory: Optional[str | os.PathLike] = None) -> Path:
    """File `record` as the entry of its kernel, device, key and dtypes (under its lock); return its path."""
    disk = DiskCache(directory)
    entry = EntryRef.of(record)
    lease = disk.lock(entry, timeout_s=None)
    try:
        assert disk.put(entry, record), f"could not write {disk.path(entry)}"
    finally:
        if lease is not None:
            lease.release()
    return disk.path(entry)
