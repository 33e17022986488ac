"""The on-disk store: where each entry lives, and how one is read, written, locked, listed and removed.

Layout (under `options.cache_dir()`: AUTOTUNE_CACHE_DIR, else $XDG_CACHE_HOME/autotune, else ~/.cache/autotune)::

    <cache dir>/
      <kernel dir>/                 the kernel name, sanitised (`entries.kernel_dirname`)
        <entry id>.json             one TuningRecord as JSON; entry id = sha256(device, key, dtypes)[:32]
        <entry id>.lock             the entry's file lock: writes and single-flight tuning
        <entry id>.json.holder      who holds that lock (pid, host, since), for waiters' messages
        .<entry id>.json.<host>.<pid>.<rand>.tmp   a write in progress (then os.replace'd onto the .json)
        .<entry id>.json.holder.<host>.<pid>.<rand>.tmp   the same for the .holder file
                                    (<host>: `HOST_TAG`, a hash of the host name and the pid namespace)

Reads never follow a link, read only regular files and at most `MAX_ENTRY_BYTES`; writes go to a temporary
file that is `os.replace`d onto the entry once fully written, so a good entry is never half-overwritten.
"""

from __future__ import annotations

import errno
import hashlib
import itertools
import json
import logging
import os
import re
import socket
import stat
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import CacheEntryError
from ..options import cache_dir
from ..record import TuningRecord
from .entries import MAX_ENTRY_BYTES, entry_id, is_dir_of, kernel_dirname, kernel_matches, no_constant, parse_record
from .protocol import warn

if TYPE_CHECKING:
    import filelock

__all__ = [
    "ENTRY_SUFFIX",
    "DiskEntry",
    "root",
    "entry_path",
    "record_path",
    "lock_path",
    "read_entry_bytes",
    "load_record",
    "atomic_write",
    "acquire_entry_lock",
    "lock_holder",
    "lock_taken",
    "disk_entries",
    "kernel_dirs",
    "entry_files",
    "names_in",
    "remove_file",
    "sweep_tmp",
    "OnError",
    "warn_unlistable",
]

logger = logging.getLogger("autotune")

ENTRY_SUFFIX = ".json"
_LOCK_SUFFIX = ".lock"
_ENTRY_NAME = r"^[0-9a-f]{32}\.json$"  # only files named like ours are ever listed or removed
# `.<entry>[.holder].<host tag>.<pid>.<random>.tmp` (an entry's write, or its holder file's); names without the host tag
# (older writers) are swept by age only
_TMP_NAME = r"^\.[0-9a-f]{32}\.json(?:\.holder)?\.(?:(?P<host>[0-9a-f]{8})\.)?(?P<pid>\d+)\.[0-9a-f]{8}\.tmp$"


def _pid_namespace() -> int | None:
    """This process's pid namespace (Linux: the inode of /proc/self/ns/pid); None where there is none to read."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


PID_NAMESPACE = _pid_namespace()
# A pid means something only within its host and pid namespace: containers sharing the host name (host
# networking) and a cache directory each have their own pids, so the namespace is part of the host tag.
LEGACY_HOST_TAG = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]  # the tag before namespaces counted
HOST_TAG = (
    LEGACY_HOST_TAG
    if PID_NAMESPACE is None
    else hashlib.sha256(f"{socket.gethostname()}\0pidns:{PID_NAMESPACE}".encode()).hexdigest()[:8]
)
_STALE_TMP_S = 600.0  # temporary files older than this are debris of a killed writer
_LOCK_NOTICE_S = 2.0  # after this long waiting for a key's lock, say so in the log
SWEEP_INTERVAL_S = 60.0  # a write sweeps its directory's stale temporary files at most this often (per process)
_MAX_SWEPT_DIRS = 4096  # directories remembered as swept; past that the memory starts over
_swept: dict[Path, float] = {}
_swept_lock = threading.Lock()

OnError = Callable[[Path, OSError], None]
"""What to do with a directory that cannot be listed or an entry that cannot be read or removed: warn (the
library: a tier never raises) or collect it (the CLI, which reports it and exits non-zero)."""
_unlistable_warned: set[tuple[str, int | None]] = set()
_unlistable_lock = threading.Lock()


def warn_unlistable(path: Path, exc: OSError) -> None:
    """A cache directory that cannot be listed: one CacheWarning per directory and error, naming the fix."""
    with _unlistable_lock:
        if (str(path), exc.errno) in _unlistable_warned:
            return
        _unlistable_warned.add((str(path), exc.errno))
    warn(
        f"autotune cache: cannot list {path} ({exc.__class__.__name__}: {exc.strerror or exc}); its entries are "
        "left out. Point AUTOTUNE_CACHE_DIR at a directory this user can read and write"
    )


def root(directory: str | os.PathLike | None = None) -> Path:
    """The cache directory: `directory`, else the configured one."""
    return Path(directory) if directory is not None else Path(cache_dir())


def entry_path(
    kernel_name: str,
    device: str,
    key: Iterable[Any],
    dtypes: Iterable[str],
    directory: str | os.PathLike | None = None,
    identity: str | None = None,
) -> Path:
    """Where the entry of (kernel, device, key, dtypes) lives (the file may not exist)."""
    return root(directory) / kernel_dirname(kernel_name, identity) / (entry_id(device, key, dtypes) + ENTRY_SUFFIX)


def record_path(record: TuningRecord, directory: str | os.PathLike | None = None) -> Path:
    """Where `record` is filed: by its kernel (name and identity), device, key and dtypes."""
    return entry_path(record.kernel, record.device, record.key, record.dtypes, directory, record.kernel_id)


def lock_path(path: Path) -> Path:
    """The lock file of the entry at `path`."""
    return path.with_suffix(_LOCK_SUFFIX)


def read_entry_bytes(path: Path, limit: int = MAX_ENTRY_BYTES) -> bytes:
    """The bytes of an entry file, read safely: a symbolic link is not followed, only a regular file is read
    (a FIFO would block, a device such as /dev/zero never ends), and at most `limit` bytes. Raises
    FileNotFoundError when absent, CacheEntryError for what is not an entry, OSError when unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise CacheEntryError(
                f"{path} is a symbolic link; cache entries are regular files and links are never followed"
            ) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CacheEntryError(
                f"{path} is not a regular file (a FIFO, device or directory); cache entries are regular files"
            )
        if st.st_size > limit:
            raise CacheEntryError(f"{path} is {st.st_size} bytes, over the {limit}-byte limit of a cache entry")
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:
            raise CacheEntryError(f"{path} grew over the {limit}-byte limit of a cache entry while being read")
        return b"".join(chunks)
    finally:
        os.close(fd)


def load_record(path: str | os.PathLike, *, future_ok: bool = False) -> TuningRecord:
    """Read and validate one cache file. Raises OSError when unreadable and CacheEntryError when corrupt,
    truncated, of another schema version (`.kind == "schema"`) or dated in the future (`entries.parse_record`).
    JSON only; nothing is evaluated."""
    path = Path(path)
    return parse_record(read_entry_bytes(path), path, future_ok=future_ok)


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data` to `fd` (a seam: tests make it raise OSError(ENOSPC) to play a full disk)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to a temporary file next to `path`, fsync it, then os.replace it onto `path`.
    A reader sees the old file or the new one, never half of one; on any error the temporary file is
    removed and `path` is untouched. The caller holds the entry's lock."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sweep_tmp_now_and_then(path.parent)
    import secrets  # not at import (it loads hmac): a cache hit writes nothing

    tmp = path.parent / f".{path.name}.{HOST_TAG}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def acquire_entry_lock(path: Path, what: str, timeout_s: float | None = None) -> filelock.BaseFileLock | None:
    """Take the entry's file lock and write who holds it beside it; log when another process holds it for a
    while. Returns None when `timeout_s` passes first (the holder is stopped or hung). Raises OSError when the
    lock file cannot be created (read-only or missing directory)."""
    import filelock  # on a miss only: a hit takes no lock, and importing filelock is a third of `import autotune`

    path.parent.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(str(lock_path(path)))
    notice = _LOCK_NOTICE_S if timeout_s is None else min(_LOCK_NOTICE_S, timeout_s)
    try:
        lock.acquire(timeout=notice)
    except filelock.Timeout:
        logger.info(
            "waiting for another process tuning %s (lock %s; holder %s)",
            what,
            lock_path(path),
            lock_holder(path) or "unknown",
        )
        try:
            lock.acquire(timeout=-1 if timeout_s is None else max(0.0, timeout_s - notice))
        except filelock.Timeout:
            return None
    try:
        atomic_write(
            holder_path(path),
            json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}).encode(),
        )
    except OSError:
        pass  # who holds the lock is a courtesy for waiters' messages; the lock itself is what counts
    return lock


def lock_taken(path: Path) -> bool:
    """Whether another process (or another lock object of this one) holds the entry's lock now: one try, no
    wait, no notice, the holder file untouched (a sweep asking, not a tuning). Raises OSError when the lock file
    cannot be opened."""
    import filelock

    lock = filelock.FileLock(str(lock_path(path)))
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        return True
    lock.release()  # free: a killed holder's lock was released by the OS
    return False


def holder_path(path: Path) -> Path:
    """The file naming who holds the lock of the entry at `path`."""
    return path.with_name(path.name + ".holder")


def lock_holder(path: Path) -> str | None:
    """Who holds (or last held) the tuning lock of the entry at `path`: "pid 123 on host h since <time>"."""
    try:
        info = json.loads(read_entry_bytes(holder_path(path), limit=4096), parse_constant=no_constant)
        pid, host, since = int(info["pid"]), str(info["host"])[:255], float(info["since"])
        if not 0 <= since < float("inf"):
            return None  # not a time: not ours
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since))
    except Exception:  # absent, unreadable, not ours, or a time the platform cannot show: "unknown"
        return None
    return f"pid {pid} on host {host} since {when}"


@dataclass(frozen=True)
class DiskEntry:
    """One file of the disk cache as found by `disk_entries`: its record, or why it could not be read."""

    path: Path
    kernel: str  # the record's kernel name; the directory name when unreadable
    record: TuningRecord | None
    error: str | None


def kernel_dirs(base: Path, kernel: str | None, on_error: OnError = warn_unlistable) -> list[Path]:
    """The kernel directories under `base` (of kernels of one short name, of one "module:qualname", or all; see
    `entries.is_dir_of`); links are not followed. A
    missing `base` has none; one that cannot be listed (no permission, not a directory) goes to `on_error`."""
    try:
        found = list(base.iterdir())
    except FileNotFoundError:
        return []
    except OSError as exc:
        on_error(base, exc)
        return []
    return sorted(
        p
        for p in found
        if is_real_dir(p) and not p.name.startswith(".") and (kernel is None or is_dir_of(p.name, kernel))
    )


def is_real_dir(p: Path) -> bool:
    """A directory that is not a symbolic link: listing and clearing never leave the cache directory."""
    try:
        return stat.S_ISDIR(p.lstat().st_mode)
    except OSError:
        return False


def is_regular_file(p: Path) -> bool:
    try:
        return stat.S_ISREG(p.lstat().st_mode)
    except OSError:
        return False


def names_in(d: Path, keep: Callable[[str], bool], *, listed: int | None = None) -> list[str]:
    """The names in directory `d` that `keep` accepts, sorted, of the first `listed` it lists (None: all; no stat
    per name); [] where it cannot be listed."""
    try:
        with os.scandir(d) as listing:
            return sorted(e.name for e in itertools.islice(listing, listed) if keep(e.name))
    except OSError:
        return []


def entry_files(d: Path, on_error: OnError = warn_unlistable) -> list[Path]:
    """The entry files of one kernel directory (regular files named like an entry); a directory that cannot be
    listed goes to `on_error` (one that vanished meanwhile has none)."""
    try:
        found = list(d.iterdir())
    except FileNotFoundError:
        return []
    except OSError as exc:
        on_error(d, exc)
        return []
    return sorted(p for p in found if re.match(_ENTRY_NAME, p.name) and is_regular_file(p))


def disk_entries(
    kernel: str | None = None, directory: str | os.PathLike | None = None, on_error: OnError = warn_unlistable
) -> list[DiskEntry]:
    """Every entry file under the cache directory (or of `kernel`: a short name, every module's kernel of that
    name, or one "module:qualname"; `entries.kernel_matches`), parsed but not validated against any kernel: for
    the CLI and for export. Unreadable files, and kernel directories that cannot be
    listed, come back with `error` set; a cache directory that cannot be listed goes to `on_error`."""
    out: list[DiskEntry] = []
    for d in kernel_dirs(root(directory), kernel, on_error):
        problems: list[tuple[Path, OSError]] = []
        paths = entry_files(d, lambda path, exc: problems.append((path, exc)))  # noqa: B023 (called at once)
        out.extend(
            DiskEntry(
                path,
                kernel or d.name,
                None,
                f"cannot list the directory {path} ({exc.__class__.__name__}: {exc.strerror or exc})",
            )
            for path, exc in problems
        )
        for path in paths:
            try:
                record = load_record(path)
            except (OSError, CacheEntryError) as exc:
                out.append(DiskEntry(path, kernel or d.name, None, str(exc)))
                continue
            if kernel is not None and not kernel_matches(record.kernel, record.kernel_id, kernel):
                continue
            out.append(DiskEntry(path, record.kernel, record, None))
    return out


# --------------------------------------------------------------------------------------------------
# Process-wide state: live caches (for clear_autotune_cache) and stats


def remove_file(path: Path, on_error: OnError | None = None) -> bool:
    """Remove one file; False when it was already gone, or could not be removed (then `on_error`, else a
    warning)."""
    try:
        path.unlink()
        return True
    except FileNotFoundError:
        return False
    except OSError as exc:
        if on_error is not None:
            on_error(path, exc)
        else:
            warn(f"autotune cache: could not remove {path} ({exc.__class__.__name__}: {exc.strerror or exc}); it stays")
        return False


def sweep_tmp_now_and_then(d: Path) -> None:
    """`sweep_tmp(d)` at most once per `SWEEP_INTERVAL_S` per directory and process: a write's cost stays flat
    however many entries the directory holds (a sweep lists all of them), and debris still goes within a minute."""
    now = time.monotonic()
    with _swept_lock:
        last = _swept.get(d)
        if last is not None and now - last < SWEEP_INTERVAL_S:
            return
        if len(_swept) >= _MAX_SWEPT_DIRS:
            _swept.clear()
        _swept[d] = now
    sweep_tmp(d)


def sweep_tmp(d: Path) -> None:
    """Remove temporary files left by writers killed mid-write (old enough not to be in flight)."""
    try:
        names = list(d.iterdir())
    except OSError:
        return
    now = time.time()
    for p in names:
        match = re.match(_TMP_NAME, p.name)
        if match is None or not is_regular_file(p):
            continue
        try:  # left by a writer of this host and pid namespace that is gone, or old enough that no writer owns it
            mine = match.group("host") == HOST_TAG  # an older writer's tag names no namespace: swept by age only
            if (mine and not pid_alive(int(match.group("pid")))) or now - p.lstat().st_mtime > _STALE_TMP_S:
                p.unlink()
        except OSError:
            pass


def pid_alive(pid: int) -> bool:
    """Whether a process `pid` exists on this machine and has not ended: a zombie (ended, not yet reaped by its
    parent) counts as gone, so a crash of a process nobody has reaped is still seen as one."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return not _process_ended(pid)


def _process_ended(pid: int) -> bool:
    """Whether Linux's /proc/<pid>/stat says the process has ended (state Z, a zombie, or X, dead); False where
    it cannot be read (another OS: judged by its existence alone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            text = stat_file.read(4096)
        return text.rpartition(b")")[2].split()[0] in (b"Z", b"X")
    except (OSError, IndexError):
        return False
