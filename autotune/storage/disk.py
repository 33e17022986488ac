"""The disk tier: one JSON file per entry under the cache directory, a file lock per entry for single
flight across the processes sharing that directory (see `files` for the layout).

Faults (a corrupt, truncated or unreadable entry, an entry of an older schema version, a read-only
directory, a full disk) are warned about once per state of the file and answered as a miss; an entry
written by a newer autotune is never replaced (a debug log, not a fault: this version's record of the key goes
to another of its slots).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from ..errors import CacheEntryError
from ..record import TuningRecord
from .entries import (
    as_key_tuple,
    entry_json,
    is_newer_schema,
    kernel_matches,
    key_text,
    parse_record,
    wanted_key_text,
)
from .files import (
    ENTRY_SUFFIX,
    OnError,
    acquire_entry_lock,
    atomic_write,
    disk_entries,
    entry_files,
    kernel_dirs,
    load_record,
    lock_holder,
    lock_path,
    lock_taken,
    read_entry_bytes,
    remove_file,
    root,
    sweep_tmp,
    warn_unlistable,
)
from .protocol import ANY, LOCK_TIMEOUT_ADVICE, EntryRef, HeldLock, StoredEntry, every_slot_newer, warn

__all__ = ["DiskCache", "KeptEntries"]

logger = logging.getLogger("autotune")

# A cache directory this process may not write is one fault, however many keys meet it: warned once per process
# for each (cache directory, errno), naming the fix.
# Refused by permissions, or a cache directory that cannot be made (a path through a file, under /proc): the
# directory's fault, said once per directory with the fix, not once per entry.
_NOT_WRITABLE = frozenset({errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.ENOENT})
_dir_warned: set[tuple[str, int | None]] = set()
_dir_warned_lock = threading.Lock()


class DiskCache:
    """Entries as files under `directory` (default: the configured cache directory, read at each call)."""

    name = "disk"
    persistent = True

    def __init__(
        self,
        directory: str | os.PathLike | None = None,
        *,
        on_fault: Callable[[str], None] | None = None,
        then: Callable[[str, bool], str] | None = None,
    ) -> None:
        self.directory = directory
        self.on_fault = on_fault  # given: each fault's message goes there, every time, instead of a warning
        # what the caller does about an unusable entry of `what` (replaced: whether its next write replaces it), as
        # the end of the warning (", tuning K and replacing it"); the tier reads no mode switch, so a caller that
        # is not a launch (`cache pull`, an import) says nothing beyond "ignoring it"
        self.then = then
        self._warned: set[tuple] = set()
        self._guard = threading.Lock()

    def _fault(self, message: str) -> None:
        """Report a cache fault: to `on_fault` when given (a caller that reports it its own way, such as an
        archive import), else as a CacheWarning."""
        if self.on_fault is not None:
            self.on_fault(message)
        else:
            warn(message)

    def _then(self, what: str, replaced: bool = False) -> str:
        """The end of a warning about an unusable entry of `what`: a comma and what the caller does next (`then`),
        or nothing when the caller did not say."""
        return "" if self.then is None else ", " + self.then(what, replaced)

    def path(self, entry: EntryRef) -> Path:
        """The file of `entry` (it may not exist)."""
        return root(self.directory) / entry.location / (entry.entry_id + ENTRY_SUFFIX)

    # -- reading ------------------------------------------------------------------------------------

    def warn_not_writable(self, exc: OSError, path: Path) -> bool:
        """For a write refused by permissions (EACCES, EPERM, EROFS) or a directory that cannot be made (ENOTDIR,
        ENOENT): one warning per cache directory and errno, naming the directory and the fix, and True; False
        (nothing said) for any other error."""
        base = root(self.directory)
        if exc.errno not in _NOT_WRITABLE or (exc.errno == errno.ENOENT and base.is_dir()):
            return False  # (ENOENT with the cache directory there: an entry's folder removed meanwhile)
        if self.on_fault is not None:
            self.on_fault(
                f"autotune cache: cannot lock or write {exc.filename or path} ({exc.__class__.__name__}: "
                f"{exc.strerror or exc})"
            )
            return True
        with _dir_warned_lock:
            if (str(base), exc.errno) in _dir_warned:
                return True
            _dir_warned.add((str(base), exc.errno))
        warn(
            f"autotune cache: cannot lock or write entries in the cache directory {base} ({exc.__class__.__name__}: "
            f"{exc.strerror or exc}: {exc.filename or path}); tuning goes on without cross-process single flight "
            "and winners are kept in memory only. Point AUTOTUNE_CACHE_DIR at a writable directory"
        )
        return True

    def warn_once(self, path: Path, message: str) -> None:
        """Warn about a file once per state of that file (the same bad file is read twice per miss); with
        `on_fault`, report it every time."""
        if self.on_fault is not None:
            self.on_fault(message)
            return
        try:
            st = path.stat()
            sig: tuple[str, int | None, int | None, str] = (str(path), st.st_mtime_ns, st.st_size, message)
        except OSError:
            sig = (str(path), None, None, message)
        with self._guard:
            if sig in self._warned:
                return
            self._warned.add(sig)
        warn(message)

    def linked_out(self, path: Path, what: str) -> bool:
        """Whether the kernel directory of `path` is a symbolic link (warned once per link, naming its target):
        the cache never reads, writes or locks through a link out of its directory."""
        if not path.parent.is_symlink():
            return False
        try:
            target = os.readlink(path.parent)
        except OSError:  # replaced meanwhile
            target = "?"
        self.warn_once(
            path.parent,
            f"autotune cache: the kernel directory {path.parent} is a symbolic link (to {target}), not a directory "
            f"of the cache: autotune does not follow links out of its cache directory, so {what} is tuned with "
            "its winner kept in memory only. Remove the link: the next tuning makes the directory",
        )
        return True

    def get(self, entry: EntryRef) -> TuningRecord | None:
        path, what = self.path(entry), entry.what
        if self.linked_out(path, what):
            return None
        try:
            data = read_entry_bytes(path)
        except FileNotFoundError:
            return None
        except CacheEntryError as exc:
            self.warn_once(path, f"autotune cache: cannot read an entry ({exc}); ignoring it{self._then(what)}")
            return None
        except OSError as exc:
            if exc.errno == errno.ENOTDIR and self.warn_not_writable(exc, path):  # the cache directory's fault
                return None
            self.warn_once(
                path,
                f"autotune cache: cannot read {path} ({exc.__class__.__name__}: "
                f"{exc.strerror or exc}); ignoring it{self._then(what)}",
            )
            return None
        try:
            return parse_record(data, path)
        except CacheEntryError as exc:
            if exc.kind == "schema" and is_newer_schema(exc.schema_version):
                # a newer autotune sharing the directory: not a fault; its entry stays (`slot_for` skips it)
                logger.debug("autotune cache: %s; written by a newer autotune, left in place", exc)
            else:
                self.warn_once(path, f"autotune cache: {exc}; ignoring it{self._then(what, True)}")
            return None

    # -- writing ------------------------------------------------------------------------------------

    def put(self, entry: EntryRef, record: TuningRecord) -> bool:
        """Write `record` atomically (call it holding the lease of the key's slot 0). A newer autotune's entry
        stays (`slot_for` chooses another slot; here only when a newer autotune wrote every slot of the key)."""
        path, what = self.path(entry), entry.what
        if self.linked_out(path, what):
            return False  # warned when read
        if _newer_schema_at(path):
            self.warn_once(path, every_slot_newer(what, str(path.parent)))
            return False
        try:
            data = entry_json(record, what)
        except CacheEntryError as exc:  # too large for any reader: not written, rather than written unreadable
            self.warn_once(path, f"autotune cache: {exc}")
            return False
        except Exception as exc:  # a key value the encoder cannot serialise, say
            self._fault(
                f"autotune cache: cannot serialise the record of {what} ({exc}); the winner is kept in memory only"
            )
            return False
        try:
            atomic_write(path, data)
        except OSError as exc:
            if self.warn_not_writable(exc, path):
                return False
            reason = (
                "the disk is full" if exc.errno == errno.ENOSPC else f"{exc.__class__.__name__}: {exc.strerror or exc}"
            )
            self._fault(
                f"autotune cache: could not write {path} ({reason}); the winner of {what} is kept in memory "
                "only and any previous entry is unchanged"
            )
            return False
        logger.debug("autotune cache: wrote %s", path)
        return True

    def newer_at(self, entry: EntryRef) -> bool:
        return _newer_schema_at(self.path(entry))

    def lease_holder(self, entry: EntryRef) -> str | None:
        path = self.path(entry)
        if self.linked_out(path, entry.what):
            return None
        try:
            taken = lock_taken(path)
        except OSError:
            return None  # a tuning's own lock attempt warns of it
        return (lock_holder(path) or "another process") if taken else None

    def lock(self, entry: EntryRef, *, timeout_s: float | None) -> HeldLock | None:
        path, what = self.path(entry), entry.what
        if self.linked_out(path, what):
            return None
        try:
            held = acquire_entry_lock(path, what, timeout_s)
        except OSError as exc:
            if self.warn_not_writable(exc, lock_path(path)):
                return None
            self.warn_once(
                lock_path(path),
                f"autotune cache: cannot lock {lock_path(path)} ({exc.__class__.__name__}: "
                f"{exc.strerror or exc}); tuning {what} without cross-process single "
                "flight, the winner is kept in memory only",
            )
            return None
        if held is None:
            self._fault(
                f"autotune cache: another process has held the tuning lock of {what} for over {timeout_s:g} s "
                f"({lock_holder(path) or 'holder unknown'}; lock {lock_path(path)}): it may be stopped or hung. "
                f"Not writing {what} to disk this time (a tuning keeps its winner in memory){LOCK_TIMEOUT_ADVICE}"
            )
            return None
        return HeldLock(held)

    # -- listing and removing -----------------------------------------------------------------------

    def entries(self, kernel: str | None = None) -> list[StoredEntry]:
        return self.listing(kernel)[0]

    def listing(self, kernel: str | None = None) -> tuple[list[StoredEntry], list[str]]:
        """The readable entries (of `kernel`, or all), and why each other entry file could not be read (the error,
        which names the file): a copy reports those rather than leaving them out unsaid."""
        readable, unreadable = [], []
        for e in disk_entries(kernel, self.directory):
            if e.record is None:
                unreadable.append(e.error or f"cannot read {e.path}")
            else:
                readable.append(StoredEntry(self.name, e.path.parent.name, e.path.name[: -len(ENTRY_SUFFIX)], e.record))
        return readable, unreadable

    def remove(
        self,
        kernel: str | None = None,
        key: tuple | None = None,
        identity: object = ANY,
        *,
        on_error: OnError | None = None,
    ) -> list[StoredEntry]:
        """Remove entry files; only a file that reads as an entry of what was asked is removed, anything else
        stays. Lock files stay too: removing a lock file another process holds would break its exclusion. A
        directory that cannot be listed, an entry that cannot be read or removed goes to `on_error` (default: a
        warning; the CLI collects them to report "could not remove M")."""
        wanted = wanted_key_text(key)
        removed = []
        for d in kernel_dirs(root(self.directory), kernel, on_error or warn_unlistable):
            for path in entry_files(d, on_error or warn_unlistable):
                try:
                    record = load_record(path, future_ok=True)  # refused when read, but still removable
                except CacheEntryError:
                    continue
                except OSError as exc:
                    if on_error is not None:
                        on_error(path, exc)
                    else:
                        self.warn_once(
                            path,
                            f"autotune cache: cannot read {path} ({exc.__class__.__name__}: "
                            f"{exc.strerror or exc}); it stays",
                        )
                    continue
                if kernel is not None and not kernel_matches(record.kernel, record.kernel_id, kernel):
                    continue
                if identity is not ANY and record.kernel_id != identity:
                    continue
                if wanted is not None and key_text(as_key_tuple(record.key)) != wanted:
                    continue
                if remove_file(path, on_error):
                    removed.append(StoredEntry(self.name, d.name, path.name[: -len(ENTRY_SUFFIX)], record))
            sweep_tmp(d)
        return removed


_Signature = tuple[int, int, int, int]  # an entry file's (st_ino, st_size, st_mtime_ns, st_ctime_ns)
_Kept = tuple[_Signature, StoredEntry | None]  # a file's signature when read, and its entry when kept
_MAX_ROOTS = 8  # cache directories a KeptEntries remembers files of; past that it starts over


class KeptEntries:
    """The entries of one kernel in the disk tier that a filter keeps (in the form it gives them), remembered per
    entry file by its stat signature (inode, size, mtime, ctime): a listing reads and decodes only the files that
    are new or changed since the last one (an atomic write is a new inode), so a process pays for each file once,
    not at every new key's warm start and prior. Only kept records are held; a removed file is dropped at the next
    listing."""

    def __init__(self, kernel: str) -> None:
        self.kernel = kernel
        self._seen: dict[Path, dict[Path, _Kept]] = {}  # cache directory -> entry file -> what was kept of it
        self._lock = threading.Lock()

    def after_fork(self) -> None:
        """In a forked child: the lock free (its holder was a parent's thread); what was read stays valid."""
        self._lock = threading.Lock()

    def entries(self, tier: DiskCache, keep: Callable[[TuningRecord], TuningRecord | None]) -> list[StoredEntry]:
        """What `tier.entries(kernel)` lists, in its order, as `keep` gives each record back (None: not kept): the
        same filter at every call (what it refused is remembered as refused). Unreadable files are left out and read
        again next time, as is one dated ahead of this clock."""
        base = root(tier.directory)
        with self._lock:
            before = self._seen.pop(base, {})
            now: dict[Path, _Kept] = {}
            for d in kernel_dirs(base, self.kernel):
                for path in entry_files(d, _unlisted):
                    signature = _signature(path)
                    if signature is None:
                        continue
                    found = before.get(path)
                    if found is None or found[0] != signature:  # new or changed since the last listing
                        found = self._read(tier, path, signature, keep)
                    if found is not None:
                        now[path] = found
            if len(self._seen) >= _MAX_ROOTS:
                self._seen.clear()
            self._seen[base] = now
        return [entry for _, entry in now.values() if entry is not None]

    def _read(
        self, tier: DiskCache, path: Path, signature: _Signature, keep: Callable[[TuningRecord], TuningRecord | None]
    ) -> _Kept | None:
        """Read the file at `path` (`signature` taken before: a write meanwhile is read again next time): its entry
        when kept, None as the entry when not; None (nothing remembered) when it cannot be read now."""
        try:
            record = load_record(path)
        except OSError:
            return None
        except CacheEntryError as exc:  # not an entry while the file stays as it is; a date ahead may pass
            return None if exc.kind == "future" else (signature, None)
        kept = keep(record) if kernel_matches(record.kernel, record.kernel_id, self.kernel) else None
        if kept is None:
            return signature, None
        return signature, StoredEntry(tier.name, path.parent.name, path.name[: -len(ENTRY_SUFFIX)], kept)


def _unlisted(path: Path, exc: OSError) -> None:
    """A kernel directory that cannot be listed has no entries here (as in `DiskCache.entries`)."""


def _signature(path: Path) -> _Signature | None:
    """The stat signature of the file at `path` (not followed if a link), or None when it is gone."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _newer_schema_at(path: Path) -> bool:
    """Whether the file at `path` is an entry of a newer schema than this autotune writes."""
    try:
        obj = json.loads(read_entry_bytes(path).decode("utf-8"))
    except (OSError, CacheEntryError, ValueError, RecursionError):
        return False
    return isinstance(obj, dict) and is_newer_schema(obj.get("schema_version"))
