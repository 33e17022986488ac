"""A sweep worker's private cache directory, in the system's temporary directory.

A worker is killed at the sweep's end (or by Ray), so it may not remove its own directory: it holds a lock in it
for its life instead (released by the OS however the process ends), and whoever finds the lock free removes the
directory: the next worker on that host as it starts, and the local driver once its workers have stopped. The local
driver claims one directory per slot itself (its lock held by the driver), so a slot's replacement worker uses its
dead worker's directory and finds the crash journal there; a Ray actor removes its own before it is killed.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import time
from pathlib import Path

import filelock

__all__ = ["claim_worker_dir", "release_worker_dir", "remove_abandoned_worker_dirs"]

_PREFIX = "autotune-sweep-worker-"
_STARTING_PREFIX = "autotune-sweep-starting-"  # where a worker takes its lock, before the directory is found
_ALIVE = ".alive"
_YOUNG_S = 60.0  # a directory this new without a lock file may be a worker's of an earlier version, starting
_held: dict[str, filelock.BaseFileLock] = {}  # this process's locks by directory: held until it exits or releases


def claim_worker_dir(*, tidy: bool = True) -> str:
    """A new private directory for this worker process, locked for its life. It is locked under another name
    and then renamed, so no one can find it unlocked. `tidy`: first remove the abandoned ones (a driver claiming
    many at once does that once, not at each)."""
    if tidy:
        remove_abandoned_worker_dirs()
    starting = tempfile.mkdtemp(prefix=_STARTING_PREFIX)
    lock = filelock.FileLock(os.path.join(starting, _ALIVE))
    lock.acquire()
    path = os.path.join(os.path.dirname(starting), _PREFIX + os.path.basename(starting)[len(_STARTING_PREFIX) :])
    try:
        os.rename(starting, path)  # the lock is on the file, which keeps it through the rename
    except OSError:  # Windows renames no directory holding an open file: this one is then left where it is
        path = starting
    _held[path] = lock
    return path


def release_worker_dir(path: str) -> None:
    """Remove a directory `claim_worker_dir` gave this process, releasing its lock (a slot's, or an actor's own)."""
    lock = _held.pop(path, None)
    if lock is not None:
        shutil.rmtree(path, ignore_errors=True)  # removed while locked: no other process takes it meanwhile
        lock.release()
        shutil.rmtree(path, ignore_errors=True)  # Windows removes no file held open


def remove_abandoned_worker_dirs() -> int:
    """Remove the worker directories of this user whose worker has ended; returns how many were removed."""
    removed = 0
    for path in Path(tempfile.gettempdir()).glob(_PREFIX + "*"):
        if _abandoned(path):
            shutil.rmtree(path, ignore_errors=True)
            removed += not path.exists()
    return removed


def _abandoned(path: Path) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    getuid = getattr(os, "getuid", None)  # none on Windows, where the temporary directory is the user's own
    if not stat.S_ISDIR(info.st_mode) or (getuid is not None and info.st_uid != getuid()):
        return False
    if not (path / _ALIVE).exists() and time.time() - info.st_mtime < _YOUNG_S:
        return False
    lock = filelock.FileLock(str(path / _ALIVE))
    try:
        lock.acquire(timeout=0)
    except (filelock.Timeout, OSError):
        return False
    lock.release()
    return True
