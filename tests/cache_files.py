"""Writing hand-made records into the disk cache, as a tuning elsewhere would have: through the disk tier."""

from __future__ import annotations

import os
from pathlib import Path

from autotune.record import TuningRecord
from autotune.storage import DiskCache, EntryRef


def write_record(record: TuningRecord, directory: str | os.PathLike | None = None) -> Path:
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


def file_signature(path: Path) -> tuple | None:
    """What identifies one version of a file (a rename onto it makes a new one), or None when absent."""
    try:
        st = path.lstat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
