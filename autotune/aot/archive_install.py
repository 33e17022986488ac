"""Installing a checked, staged archive (`import_archive`'s second half): which records and binaries are
valid, then the binaries into Triton's cache and the records into the tuning cache.

Why a module of its own: `archive_checks` decides whether an archive may be read at all; this decides what of
it is installed and how, so that a failed import changes nothing. The order is what makes that hold: every
record and binary is validated before anything is written; Triton's cache directory is checked (created if
absent, probed for writing) next; the binaries go in before the records, and a binary that cannot be written
removes the files this import wrote and raises `ArchiveError` naming the path, before any record is written.
The tuning cache directory is probed the same way before any binary is written, so a read-only one changes
nothing either. A record that is invalid, or that the tuning cache still cannot take (no lock, a full disk), is
a reported failure (`ImportReport.records_failed`, and `autotune import` exits 1); a record the cache already
holds, or holds something newer than in the slot it would take (`kernel_cache.slot_for`), is a skip.
"""

from __future__ import annotations

import json
import os
import shlex
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ArchiveError, CacheEntryError
from ..format import format_timestamp
from ..storage.entries import key_text
from ..storage.files import atomic_write, is_regular_file, read_entry_bytes
from .archive_checks import ARTIFACT_NAME, RECORDS_PREFIX, SAFE_NAME, TRITON_PREFIX, StagedArchive

if TYPE_CHECKING:  # the models live in archive.py, which imports this module
    from .archive import ArchiveBinary, ArchiveManifest, ImportReport

__all__ = ["checked_records", "checked_binaries", "install_binaries", "install_records"]


def checked_records(manifest: ArchiveManifest, staged: StagedArchive, report: ImportReport) -> list[tuple[str, Any]]:
    """(member, record) of every record that validates (JSON only, bounded, the cache's own checks); the others
    are reported as skipped. Reads only the staged copies (a record path that is not a staged member under
    records/ refuses the archive); writes nothing."""
    from ..storage import load_record

    out = []
    for rec_info in manifest.records:
        if not rec_info.path.startswith(f"{RECORDS_PREFIX}/") or rec_info.path not in staged.names:
            # Only a checked, staged member is read: never a path outside the archive (absolute, '..').
            raise ArchiveError(
                f"refused: the manifest lists the record {rec_info.path!r}, which is not a member of "
                f"the archive under {RECORDS_PREFIX}/; nothing outside the archive is read, and "
                "nothing was imported"
            )
        try:
            out.append((rec_info.path, load_record(staged.path(rec_info.path))))
        except (OSError, CacheEntryError) as exc:
            report.records_failed.append((rec_info.path, f"not a valid record ({_archived(exc, staged)})"))
    return out


def checked_binaries(manifest: ArchiveManifest, staged: StagedArchive, report: ImportReport) -> list[ArchiveBinary]:
    """The compiled kernels whose names are safe and whose every file is a staged Triton artifact; an archive
    that lists a file it does not hold is refused before anything is written."""
    out = []
    for binary in manifest.binaries:
        if not SAFE_NAME.match(binary.dir) or not SAFE_NAME.match(binary.kernel):
            raise ArchiveError(  # a hostile manifest: refused whole, never a partial import of the rest
                f"refused: the manifest lists a compiled kernel with an unsafe directory or kernel name "
                f"({binary.dir[:80]!r}, {binary.kernel[:80]!r}); nothing was imported"
            )
        if f"{binary.kernel}.json" not in binary.files or any(name.startswith("__grp__") for name in binary.files):
            raise ArchiveError(  # no files: a directory made from nothing; a group file: paths of the archive's choosing
                f"refused: compiled kernel {binary.dir} lists {sorted(binary.files)[:8]!r}: a Triton compile's files "
                f"hold its metadata ({binary.kernel}.json) and never a group file (__grp__*, written here); nothing "
                "was imported"
            )
        for name in binary.files:
            member = f"{TRITON_PREFIX}/{binary.dir}/{name}"
            if not ARTIFACT_NAME.match(name):
                raise ArchiveError(
                    f"refused: compiled kernel {binary.dir} lists {name!r}, which is not a Triton "
                    "compile artifact; nothing was imported"
                )
            if member not in staged.names:
                raise ArchiveError(
                    f"the manifest lists {member!r} for {binary.kernel} but the archive does not hold "
                    "it; nothing was imported"
                )
        out.append(binary)
    return out


class _Written:
    """The files and directories one import created, removed again if it fails part way, and the files it
    replaced (a repaired group file), put back."""

    def __init__(self) -> None:
        self.paths: list[Path] = []
        self.replaced: list[tuple[Path, bytes]] = []

    def mkdir(self, path: Path) -> None:
        missing = [p for p in (path, *path.parents) if not p.exists()]
        path.mkdir(parents=True, exist_ok=True)
        self.paths.extend(reversed(missing))  # outermost first; undone innermost first

    def write(self, path: Path, data: bytes, *, previous: bytes | None = None) -> None:
        """Write `data` to `path` atomically; `previous`: what `path` held, put back by `undo`."""
        existed = path.exists()
        atomic_write(path, data)
        if not existed:
            self.paths.append(path)
        elif previous is not None:
            self.replaced.append((path, previous))

    def undo(self) -> None:
        for path, previous in reversed(self.replaced):
            try:
                atomic_write(path, previous)
            except OSError:
                pass  # best effort, as below
        for path in reversed(self.paths):
            try:
                path.rmdir() if path.is_dir() else path.unlink()
            except OSError:
                pass  # best effort: a directory someone else wrote into stays


def _cannot_write(what: str, exc: OSError) -> ArchiveError:
    return ArchiveError(
        f"cannot {what} ({exc.__class__.__name__}: {exc.strerror or exc}); give a writable "
        "directory as Triton's cache (--triton-cache-dir, triton_cache_dir= or TRITON_CACHE_DIR); "
        "nothing was imported"
    )


def _archived(exc: Exception, staged: StagedArchive) -> str:
    """The first line of a record's error, naming its member of the archive rather than the staging directory
    (which is gone when the report is read)."""
    text = str(exc).splitlines()[0]
    return text.replace(str(staged.path(RECORDS_PREFIX)), RECORDS_PREFIX)


def _probe_writable_dir(directory: Path, written: _Written, refused: Callable[[str, OSError], ArchiveError]) -> None:
    """Create `directory` if absent and write and remove a file in it; when it cannot, undo what `written` holds
    and raise `refused(kind, exc)` (`kind`: ", a file," when a file was given as the directory)."""
    try:
        written.mkdir(directory)
        fd, probe = tempfile.mkstemp(prefix=".autotune-import-", dir=directory)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        written.undo()
        raise refused(", a file," if directory.is_file() else "", exc) from None


def _check_writable_dirs(triton_dir: Path | None, tuning_dir: Path | None, written: _Written, *, records: bool) -> None:
    """Triton's cache directory (None: no binary to install) and, when `records` go in, the tuning cache directory
    (`tuning_dir`, None: the configured one), each created if absent and probed for writing; ArchiveError naming
    the one that cannot be written, with what was created removed."""
    from ..storage.files import root

    if triton_dir is not None:
        _probe_writable_dir(
            triton_dir,
            written,
            lambda kind, exc: _cannot_write(f"use {triton_dir}{kind} as Triton's cache directory", exc),
        )
    if records:
        tuning = root(tuning_dir)
        _probe_writable_dir(
            tuning,
            written,
            lambda kind, exc: ArchiveError(
                f"cannot use {tuning}{kind} as the tuning cache directory ({exc.__class__.__name__}: "
                f"{exc.strerror or exc}); give a writable directory (--cache-dir, cache_dir= or AUTOTUNE_CACHE_DIR); "
                "nothing was imported"
            ),
        )


def install_binaries(
    binaries: list[ArchiveBinary],
    staged: StagedArchive,
    triton_dir: Path,
    report: ImportReport,
    *,
    tuning_dir: Path | None = None,
    records: bool = False,
) -> None:
    """Write each compiled kernel's files into `triton_dir` (its group file last, rewritten for this directory).
    Raises ArchiveError naming the path, with what it wrote removed, when `triton_dir` cannot take them or, when
    `records` follow, the tuning cache directory (`tuning_dir`, None: the configured one) cannot be written: both
    are probed before the first binary, so either failure leaves nothing behind."""
    written = _Written()
    _check_writable_dirs(triton_dir if binaries else None, tuning_dir, written, records=records)
    if not binaries:
        return
    for binary in binaries:
        dest = triton_dir / binary.dir
        group = dest / f"__grp__{binary.kernel}.json"
        # Triton's group file lists absolute paths, and its lookup misses an entry whose listed paths do not exist
        children = {name: os.path.abspath(dest / name) for name in binary.files}
        name = f"{binary.dir} ({binary.kernel}, {binary.target})"
        present = all(is_regular_file(dest / f) for f in binary.files)
        previous = _read_group(group)  # put back if the import fails after replacing it
        if present and previous is not None and _lists_exactly(previous, children):
            report.binaries_skipped.append((name, "already in Triton's cache"))
            continue
        repair = present and group.exists()  # the files are there; the group file lists other paths (a moved cache)
        target = group if repair else dest
        try:
            written.mkdir(dest)
            for file in () if repair else binary.files:
                target = dest / file
                written.write(target, staged.read(f"{TRITON_PREFIX}/{binary.dir}/{file}"))
            target = group  # last: Triton's lookup finds the entry only once its files are in place
            written.write(group, json.dumps({"child_paths": children}).encode("utf-8"), previous=previous)
        except OSError as exc:
            written.undo()
            raise _cannot_write(f"write {target} into Triton's cache directory {triton_dir}", exc) from None
        report.binaries_imported.append(
            f"{name}: group file repaired (it listed paths other than {dest}'s files, as a moved or copied cache "
            "does, so Triton's lookup missed the entry)"
            if repair
            else name
        )


_MAX_GROUP_BYTES = 1 << 20  # a group file lists a handful of paths; Triton's metadata limit is far above it


def _read_group(group: Path) -> bytes | None:
    """The bytes of a group file (a regular file, read bounded), or None when there is none to read."""
    try:
        return read_entry_bytes(group, _MAX_GROUP_BYTES)
    except (OSError, CacheEntryError):
        return None


def _lists_exactly(group: bytes, children: dict[str, str]) -> bool:
    """Whether a group file's bytes parse and its `child_paths` are exactly `children` (name -> absolute path)."""
    try:
        parsed = json.loads(group)
    except (ValueError, RecursionError):
        return False
    return isinstance(parsed, dict) and parsed.get("child_paths") == children


def install_records(
    records: list[tuple[str, Any]], root: Path | None, report: ImportReport, *, lock_timeout_s: float
) -> None:
    """Write each record through the disk store (under the entry's lock, waited for at most `lock_timeout_s`:
    a record whose lock another process holds longer is a failure), into its version's slot of the key
    (`slot_for`), unless the entry there is of its version and newer, or every slot holds another version tuned
    after it (it would be the first evicted), or a newer autotune wrote it (a higher schema, never replaced)."""
    from ..storage import DiskCache, EntryRef, load_record
    from ..storage.entries import is_newer_schema
    from ..storage.kernel_cache import same_slot, slot_for

    faults: list[str] = []
    store = DiskCache(root, on_fault=faults.append)
    for member, record in records:
        entry = EntryRef.of(record)
        dest = store.path(entry)
        faults.clear()
        started = time.monotonic()
        lease = store.lock(entry, timeout_s=lock_timeout_s)
        if lease is None:
            report.records_failed.append((member, _lock_failure(faults, dest, lock_timeout_s, started)))
            continue
        entry = slot_for(store, entry, record)  # its kernel source's entry of the key: another source's stays
        dest = store.path(entry)
        try:
            try:
                existing = load_record(dest)
            except CacheEntryError as exc:
                if exc.kind == "schema" and is_newer_schema(exc.schema_version):  # never replaced (DiskCache.put)
                    report.records_skipped.append(
                        (member, f"kept the entry at {dest}: written by a newer autotune (schema {exc.schema_version})")
                    )
                    continue
                existing = None  # corrupt, or an older schema: replaced by a good record
            except OSError:
                existing = None  # absent or unreadable: replaced by a good record
            stale = _staler_triton(existing, record)
            if stale:
                report.records_skipped.append((member, f"kept the entry at {dest}: {stale}"))
                continue
            # another version's entry sits in the slot `slot_for` chose only when every slot of the key is taken:
            # it is replaced when older, as a launch's write replaces the oldest (a newer one would evict the
            # archive's record at the next launch's write)
            ours = existing if existing is not None and same_slot(existing, record) else None
            if ours is not None and ours.timestamp > record.timestamp:
                report.records_skipped.append((member, _newer_text(dest, ours, record)))
                continue
            if existing is not None and ours is None and _older_than_every_slot(store, entry, record):
                report.records_skipped.append((member, _every_slot_newer_text(existing, record, root)))
                continue
            if ours is not None and ours.timestamp == record.timestamp and ours.winner == record.winner:
                report.records_skipped.append((member, f"already present at {dest}"))
                continue
            faults.clear()
            if store.put(entry, record):
                report.records_imported.append(str(dest))
                differs = _made_for_another(existing, record)
                if differs:  # say so: the replaced entry may be the one the code here matches
                    report.records_replaced.append((str(dest), f"the older entry there was tuned for {differs}"))
            else:
                report.records_failed.append((member, _fault_reason(faults, f"could not write {dest}")))
        finally:
            lease.release()


def _lock_failure(faults: list[str], dest: Path, lock_timeout_s: float, started: float) -> str:
    """Why a record's lock was not taken: held by another process past the timeout, or the cache's fault."""
    if time.monotonic() - started >= lock_timeout_s:
        return (
            f"another process held the lock of {dest} for over {lock_timeout_s:g} s (AUTOTUNE_LOCK_TIMEOUT_S); "
            "run the import again once it is done"
        )
    return _fault_reason(faults, f"cannot lock {dest}")


def _fault_reason(faults: list[str], fallback: str) -> str:
    """A failed record's reason: the first clause of the first fault the tuning cache reported for it
    (`DiskCache(on_fault=...)`), else `fallback`. Nothing is warned: the cache's advice is a running kernel's
    ("kept in memory only"), not an import's."""
    return faults[0].removeprefix("autotune cache: ").split("; ")[0] if faults else fallback


def _staler_triton(existing: Any, record: Any) -> str:
    """Why a newer record must not replace `existing` ('' when it may): the entry here was tuned under this
    process's Triton and the record under another, which a lookup here would treat as stale and tune again."""
    import triton

    local = str(triton.__version__)
    if existing is None or existing.triton_version != local or record.triton_version == local:
        return ""
    return f"tuned under this Triton ({local}); the archive's record was tuned under Triton {record.triton_version}"


def _newer_text(dest: Path, existing: Any, record: Any) -> str:
    dates = f"({format_timestamp(existing.timestamp)} > {format_timestamp(record.timestamp)})"
    return f"the entry at {dest} is newer {dates}; kept it"


def _older_than_every_slot(store: Any, entry: Any, record: Any) -> bool:
    """Whether every slot of the key holds an entry tuned after `record`: it would be the first a launch's write
    evicts (the oldest), so installing it would only cost another version its entry."""
    writable = [slot for slot in entry.slots() if not store.newer_at(slot)]  # a newer autotune's: never written
    held = [r for slot in writable if (r := store.get(slot)) is not None]
    return len(held) == len(writable) and all(r.timestamp > record.timestamp for r in held)


def _every_slot_newer_text(existing: Any, record: Any, root: Path | None) -> str:
    where = "" if root is None else f" --cache-dir {shlex.quote(str(root))}"
    clear = (
        f"autotune cache clear{where} --kernel {shlex.quote(record.kernel_id)} "
        f"--key {shlex.quote(key_text(tuple(record.key)))}"
    )
    return (
        f"every slot of this key holds another version of the kernel tuned after the archive's record (the one it "
        f"would replace was tuned for {_made_for_another(existing, record)}, "
        f"{format_timestamp(existing.timestamp)} > {format_timestamp(record.timestamp)}): kept them (a launch's "
        f"write would evict the archive's record first); to install it, clear that key's entries (`{clear}`: every "
        "version and dtype of the key) and import again"
    )


def _made_for_another(existing: Any, record: Any) -> str:
    """What differs between a replaced entry and the record that replaces it ('' when nothing does)."""
    if existing is None:
        return ""
    what = [
        name
        for name, attr in (
            ("another kernel source", "source_hash"),
            ("another space", "space_checksum"),
            ("another Triton", "triton_version"),
        )
        if getattr(existing, attr) != getattr(record, attr)
    ]
    return ", ".join(what)
