"""The crash journal: which config a process is measuring in-process, so the next process knows which one ended it.

Before a config is measured in the caller's process (no worker to die in its place), a note is written to
`<cache dir>/.journal/` naming the kernel, the key, the config and the process (pid, its start time, the boot,
the host); the note is removed when the measurement returns or raises, except for an error that left the device
unusable (an illegal memory access: every later launch of the process fails), which the note then names. A note
whose process no longer exists is a config that ended its process (a segfault, a sticky device error, a kill
after a hang): the next tuning of that key records it as `crashed` instead of trying it again, so a restarting
service does not crash-loop.

A live process's notes are never crashes; a note of another host is never one (the cache directory may be
shared); a note of another pid namespace of this host (a container with the host's name) is judged by the flock
its writer holds on it while measuring; a pid counts as alive only while its start time (Linux: /proc/<pid>/stat)
and the boot match the note's, since pids are reused. Notes are JSON (msgspec), each read at most `MAX_NOTE_BYTES`, at most
`MAX_NOTES` per key; nothing is unpickled. Writing a note is best-effort: a cache directory that cannot be
written loses crash memory, not the tuning.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import msgspec

try:
    import fcntl
except ImportError:  # Windows: no pid namespaces either
    fcntl = None  # type: ignore[assignment]

from ..errors import CacheEntryError, DeviceError, SpaceError, device_error_text
from ..fork_safety import hold_across_fork, reset_in_forked_child
from ..space.spaces import Config
from .entries import key_text
from .files import (
    HOST_TAG,
    LEGACY_HOST_TAG,
    PID_NAMESPACE,
    is_regular_file,
    names_in,
    pid_alive,
    read_entry_bytes,
    root,
)

__all__ = [
    "MAX_NOTES",
    "MAX_NOTE_BYTES",
    "NOT_TRIED_AGAIN",
    "Note",
    "crashed",
    "crashes",
    "forget",
    "keep_notes",
    "measuring",
    "notes_in",
    "why_crashed",
]

logger = logging.getLogger("autotune")

MAX_NOTE_BYTES = 16 * 1024  # a note larger than this is not one of ours: ignored
# How a reason (`why_crashed`) ends: true of an in-process tuning, whose trials are not run again
NOT_TRIED_AGAIN = "not tried again until AUTOTUNE_FORCE=1, clear_autotune_cache() or `autotune cache clear`"
MAX_NOTES = 256  # notes read per key at most (a process has one in flight per thread)
_MAX_LISTED = 64 * MAX_NOTES  # names of another directory's journal looked at, at most (`notes_in`)
_DIRNAME = ".journal"  # hidden: the cache's listings skip it
_HOST = socket.gethostname()
_SEQUENCE = itertools.count()


class Note(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One measurement in progress."""

    kernel: str  # the kernel's identity, "module:qualname"
    key: str  # key_text of the key
    dtypes: list[str]
    config: dict[str, Any]
    pid: int
    start: str | None  # the process's start time (clock ticks after boot; None where it cannot be read)
    boot: str | None  # this boot's id (None where it cannot be read)
    host: str
    since: float  # time.time() when the measurement began
    error: str | None = None  # the error that left the device unusable, when the measurement raised one
    pidns: int | None = None  # the process's pid namespace (Linux); None in notes written before it was noted


def measuring(
    kernel_id: str, key: tuple, dtypes: tuple, config: Mapping[str, Any]
) -> contextlib.AbstractContextManager:
    """A context around measuring `config` for (kernel, key, dtypes) in this process: noted before, the note
    removed after, whether the measurement returns or raises, unless it raised DeviceError (the config left the
    device unusable)."""
    return _noted(kernel_id, key, dtypes, config)


@contextlib.contextmanager
def _noted(kernel_id: str, key: tuple, dtypes: tuple, config: Mapping[str, Any]) -> Iterator[None]:
    pid = os.getpid()
    note = Note(
        kernel=kernel_id,
        key=key_text(key),
        dtypes=[str(d) for d in dtypes],
        config=dict(config),
        pid=pid,
        start=_process_start(pid),
        boot=_boot_id(),
        host=_HOST,
        since=time.time(),
        pidns=PID_NAMESPACE,
    )
    path = _directory() / f"{_prefix(kernel_id, key)}{HOST_TAG}.{pid}.{next(_SEQUENCE)}.json"
    with _HOLDING:
        held = _write(path, msgspec.json.encode(note))  # locked while this process measures: its proof of life
        if held is not None:
            _HELD.add(held)
    try:
        yield
    except DeviceError as exc:  # the measurement's own verdict (InProcessRunner), after earlier launches settled
        if held is not None and os.getpid() == pid:
            data = msgspec.json.encode(msgspec.structs.replace(note, error=device_error_text(exc)[:300]))
            if _replace(path, data):
                _release(held)  # the replacement holds the lock now, for the rest of this process
            held = None  # kept (locked while this process lives): once it ends, the config is recorded as crashed
        raise
    finally:
        if held is not None and os.getpid() == pid:  # a child forked meanwhile leaves its parent's note alone
            with contextlib.suppress(OSError):
                path.unlink()
            _release(held)


def crashed(kernel_id: str, key: tuple, dtypes: tuple) -> dict[Config, str]:
    """The configs of (kernel, key, dtypes) whose measurement ended its process, each with why it is said so."""
    found: dict[Config, str] = {}
    wanted_key, wanted_dtypes = key_text(key), [str(d) for d in dtypes]
    for _, note in _dead_notes(kernel_id, key):
        if note is not None and note.kernel == kernel_id and note.key == wanted_key and note.dtypes == wanted_dtypes:
            found[Config(note.config)] = why_crashed(note)
    return found


def crashes(limit: int | None = MAX_NOTES) -> list[Note]:
    """Every kernel's notes of dead processes: the configs the next tuning of their key records as crashed (of
    the first `limit` notes read; None: all, for a clear)."""
    return [note for _, note in _dead_notes(None, None, limit=limit) if note is not None]


def why_crashed(note: Note) -> str:
    """Why `note`'s config is said to have ended its process, and how to have it tried again."""
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(note.since))
    if note.error is None:
        what = f"the process ended while measuring it (pid {note.pid} on {note.host}, at {when}): a crash, or a kill"
        what += " from outside"
    else:
        what = f"it left the GPU unusable in the process measuring it (pid {note.pid} on {note.host}, at {when}:"
        what += f" {note.error})"
    return f"{what}; {NOT_TRIED_AGAIN}"


def forget(kernel_id: str | None = None, key: tuple | None = None, dtypes: tuple | None = None) -> int:
    """Remove the notes of dead processes (of `kernel_id`, or every kernel; of `key` and `dtypes`, or every key):
    their configs are tried again. Returns how many were removed. A live process's notes stay."""
    removed = 0
    for path, note in _dead_notes(kernel_id, key, limit=None):
        if dtypes is not None and note is not None and note.dtypes != [str(d) for d in dtypes]:
            continue
        with contextlib.suppress(OSError):
            path.unlink()
            removed += 1
    return removed


def _dead_notes(
    kernel_id: str | None, key: tuple | None, limit: int | None = MAX_NOTES
) -> list[tuple[Path, Note | None]]:
    """(path, note) of each note of `kernel_id` (and `key`; every note for None) whose process is gone, of the
    first `limit` (None: all, for a clear); the note None when it cannot be read (half written by a process killed
    while writing it)."""
    prefix = "" if kernel_id is None else _prefix(kernel_id, key)
    # no journal yet, or none readable: nothing known to have crashed
    names = names_in(_directory(), lambda name: name.startswith(prefix) and name.endswith(".json"))
    dead: list[tuple[Path, Note | None]] = []
    for name in names[:limit]:
        path = _directory() / name
        note = _read(path)
        if note is None:
            if _named_process_gone(name):
                dead.append((path, None))
        elif not _alive(note, path):
            dead.append((path, note))
    return dead


def _alive(note: Note, path: Path) -> bool:
    """Whether the note's process may still be running (its measurement still in progress)."""
    if note.host != _HOST:
        return True  # another machine's process: never judged from here
    if note.boot is not None and _boot_id() not in (None, note.boot):
        return False  # noted before this machine restarted
    if note.pidns is not None and note.pidns != PID_NAMESPACE:
        return _locked(path)  # another pid namespace's (a container sharing the host name): its pids are not ours
    if not pid_alive(note.pid):
        return False
    start = _process_start(note.pid)
    return note.start is None or start is None or start == note.start


def _named_process_gone(name: str) -> bool:
    """For a note that cannot be read: whether its file name says it is this host's (and pid namespace's, or of
    no namespace: an older autotune's) and its pid is gone."""
    fields = _name_fields(name)
    if fields is None or fields[0] not in (HOST_TAG, LEGACY_HOST_TAG):
        return False
    return fields[1].isdigit() and not pid_alive(int(fields[1]))


def _name_fields(name: str) -> tuple[str, str] | None:
    """(host tag, pid) as a note's file name `<tags>.<host>.<pid>.<n>.json` gives them; None for another name."""
    parts = name.split(".")
    return (parts[1], parts[2]) if len(parts) == 5 and parts[4] == "json" else None


def notes_in(cache_dir: str | Path, pid: int | None = None) -> list[tuple[str, Note]]:
    """(file name, note) of each note in another cache directory's journal (a sweep worker's), of process `pid`
    (None: every process's), read bounded: at most `MAX_NOTES` notes of `MAX_NOTE_BYTES` each."""
    folder = Path(cache_dir) / _DIRNAME

    def wanted(name: str) -> bool:
        fields = _name_fields(name)
        return fields is not None and (pid is None or fields[1] == str(pid))

    found = []
    for name in names_in(folder, wanted, listed=_MAX_LISTED)[:MAX_NOTES]:  # no journal: nothing measured there
        note = _read(folder / name)  # half written as it died, or not a note: skipped
        if note is not None and (pid is None or note.pid == pid):
            found.append((name, note))
    return found


def keep_notes(notes: list[tuple[str, Note]], cache_dir: str | Path) -> None:
    """Write notes (file name, note) from another cache directory's journal into `cache_dir`'s, where a tuning
    there records their configs `crashed` (a sweep actor inheriting its dead predecessor's). Best-effort."""
    for name, note in notes:
        fd = _write(Path(cache_dir) / _DIRNAME / name, msgspec.json.encode(note), lock=False)
        if fd is not None:  # a dead process's note: unlocked; one not written is measured again
            os.close(fd)


def _read(path: Path) -> Note | None:
    if not is_regular_file(path):
        return None
    try:
        note = msgspec.json.decode(read_entry_bytes(path, MAX_NOTE_BYTES), type=Note)
        Config(note.config)  # a config no space can hold: not one of ours
    except (OSError, CacheEntryError, msgspec.ValidationError, msgspec.DecodeError, SpaceError, RecursionError):
        return None  # not (or no longer) a note
    return note


def _write(path: Path, data: bytes, *, lock: bool = True) -> int | None:
    """Write a note, locked before it is written (`_locked`); its descriptor, which holds the lock until closed, or
    None (logged) when the journal cannot be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
        try:
            if lock:
                _lock(fd)
            os.write(fd, data)
        except OSError:
            os.close(fd)
            with contextlib.suppress(OSError):
                path.unlink()  # no empty note left behind
            raise
        return fd
    except OSError as exc:
        logger.debug("autotune: the crash journal %s cannot be written (%s)", path, exc)
        return None


def _lock(fd: int) -> None:
    """Best-effort: a file system without flock (Lustre's noflock, some FUSE or network mounts) still gets the
    note, which another pid namespace then never judges dead (`_locked`)."""
    if fcntl is not None:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def _locked(path: Path) -> bool:
    """Whether a process holds the lock of the note at `path`: the kernel lets go of it when the process ends,
    whatever its pid namespace, so another namespace's note is judged by it (a container restarted with the host
    name of the one that crashed finds that note unlocked: a crash). True where it cannot be told."""
    if fcntl is None:
        return True
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return True  # gone meanwhile (its measurement ended), or unreadable: not judged
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        # taken: its writer ended, unless it removed or replaced the note as this opened it (a measurement ending)
        return os.fstat(fd).st_nlink == 0 or os.fstat(fd).st_ino != os.stat(path).st_ino
    except OSError:
        return True
    finally:
        os.close(fd)


_HELD: set[int] = set()  # the descriptors holding this process's notes' locks
_HOLDING = threading.Lock()  # held from a note's open to its descriptor in _HELD: a fork waits, so its child has all
hold_across_fork(_HOLDING)


def _release(fd: int) -> None:
    _HELD.discard(fd)
    os.close(fd)


@reset_in_forked_child
def _drop_inherited_locks() -> None:
    """A forked child is not the process its parent's notes speak for: its copies of their descriptors would hold
    their locks after the parent ended (a crash read as a live measurement by another pid namespace)."""
    for fd in _HELD:
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()


def _replace(path: Path, data: bytes) -> bool:
    """Write a note over an earlier one atomically; best-effort, as `_write` (False: the earlier note stays)."""
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()  # a link left there is removed, never written through
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        with _HOLDING:
            fd = os.open(temporary, flags, 0o666)
            try:
                _lock(fd)
                os.write(fd, data)
                os.replace(temporary, path)
            except OSError:
                os.close(fd)
                raise
            _HELD.add(fd)  # a note kept for after this process: locked while it lives
        return True
    except OSError as exc:
        logger.debug("autotune: the crash journal %s cannot be written (%s)", path, exc)
        with contextlib.suppress(OSError):
            temporary.unlink()
        return False


def _directory() -> Path:
    return root() / _DIRNAME


def _prefix(kernel_id: str, key: tuple | None) -> str:
    """The start of the file names of a kernel's notes (of one key when `key` is given)."""
    kernel_tag = hashlib.sha256(kernel_id.encode()).hexdigest()[:16]
    if key is None:
        return kernel_tag
    return f"{kernel_tag}{hashlib.sha256(key_text(key).encode()).hexdigest()[:16]}."


def _process_start(pid: int) -> str | None:
    """When process `pid` started, in clock ticks after boot (Linux's /proc/<pid>/stat, field 22); None elsewhere."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            text = stat_file.read(4096)
        return text.rpartition(b")")[2].split()[19].decode()
    except (OSError, IndexError, UnicodeDecodeError):
        return None


def _boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as boot_file:
            return boot_file.read(64).decode().strip() or None
    except (OSError, UnicodeDecodeError):
        return None
