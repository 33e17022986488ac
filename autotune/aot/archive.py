"""Moving tuned kernels between machines: `export_archive(path)` / `import_archive(path)` (CLI: `autotune
export` / `autotune import`) carry the tuned winners (the disk cache's JSON records) and the compiled binaries
(the kernels' entries of Triton's cache directory, chosen by `triton_cache`) as one .tar.gz with a checked
manifest.

Why: a deployed service should start tuned and compiled; the winners come from the tuning cache, the
binaries from a build machine that may have no GPU (`precompile`). Nothing read from an archive is
unpickled or evaluated: members are checked (regular files at safe relative paths, sizes, checksums)
before anything is written, and records are validated JSON.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import inspect
import io
import os
import re
import stat
import sys
import tarfile
import time
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from msgspec import Struct
from msgspec import field as struct_field

from .. import codec
from ..errors import ArchiveError
from ..format import safe_text
from ..kernel.identity import kernel_ref, python_function
from ..kernel.source import kernel_identity
from . import triton_compile
from .archive_checks import (
    MANIFEST,
    MAX_MANIFEST_BYTES,
    RECORDS_PREFIX,
    SIGNATURE,
    TRITON_PREFIX,
    ArchiveLimits,
    read_key,
    sign,
    stage,
)
from .archive_install import checked_binaries, checked_records, install_binaries, install_records
from .triton_cache import CacheEntry, Selection, select, triton_entries

__all__ = [
    "ARCHIVE_FORMAT",
    "ARCHIVE_FORMAT_VERSION",
    "ArchiveFile",
    "ArchiveRecord",
    "ArchiveBinary",
    "ArchiveManifest",
    "ImportReport",
    "export_archive",
    "import_archive",
]


ARCHIVE_FORMAT = "autotune-archive"
ARCHIVE_FORMAT_VERSION = 1
_CHUNK = 1 << 20  # a binary is read, hashed and written this much at a time


class ArchiveFile(Struct, kw_only=True, forbid_unknown_fields=True):
    """A member of the archive with its checksum."""

    path: str
    sha256: str
    size: int


class ArchiveRecord(Struct, kw_only=True, forbid_unknown_fields=True):
    """A tuned winner in the archive (its JSON record is the member at `path`)."""

    path: str
    kernel: str
    key: list[Any]
    dtypes: list[str]
    device: str
    winner: dict[str, Any]
    timestamp: float
    triton_version: str


class ArchiveBinary(Struct, kw_only=True, forbid_unknown_fields=True):
    """One compiled kernel from Triton's cache: the files of one cache directory entry."""

    kernel: str
    dir: str
    target: str
    files: list[str]
    triton_version: str | None = None


class ArchiveManifest(Struct, kw_only=True, forbid_unknown_fields=True):
    """`manifest.json` of an archive: what it holds and the versions it was made with."""

    format: str = ARCHIVE_FORMAT
    format_version: int = ARCHIVE_FORMAT_VERSION
    created: float = struct_field(default_factory=time.time)
    autotune_version: str
    triton_version: str
    torch_version: str
    python_version: str
    kernels: list[str]
    targets: list[str]
    records: list[ArchiveRecord] = struct_field(default_factory=list)
    binaries: list[ArchiveBinary] = struct_field(default_factory=list)
    files: list[ArchiveFile] = struct_field(default_factory=list)


@dataclass
class ImportReport:
    """What `import_archive` did: imported, skipped (with why), and warnings."""

    manifest: ArchiveManifest
    records_imported: list[str] = field(default_factory=list)
    records_skipped: list[tuple[str, str]] = field(default_factory=list)
    records_replaced: list[tuple[str, str]] = field(default_factory=list)  # (path, what the older entry was for)
    records_failed: list[tuple[str, str]] = field(default_factory=list)  # not installed: invalid, unwritable
    binaries_imported: list[str] = field(default_factory=list)
    binaries_skipped: list[tuple[str, str]] = field(default_factory=list)
    binaries_failed: list[tuple[str, str]] = field(default_factory=list)  # not installed: an unsafe name
    warnings: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Whether everything the archive holds is in place: imported, or skipped because the caches already hold
        it or something newer. False when a record or binary failed (`autotune import` exits 1 then)."""
        return not self.records_failed and not self.binaries_failed

    def summary(self) -> str:
        failed = (
            f"; NOT installed: {len(self.records_failed)} records, {len(self.binaries_failed)} compiled kernels"
            if not self.complete
            else ""
        )
        return (
            f"imported {len(self.records_imported)} records ({len(self.records_skipped)} skipped) and "
            f"{len(self.binaries_imported)} compiled kernels ({len(self.binaries_skipped)} skipped) for "
            f"{', '.join(self.manifest.kernels) or 'no kernel'}{failed}"
        )

    def __str__(self) -> str:
        lines = [self.summary()]
        lines += [f"  FAILED record {p}: {why}" for p, why in self.records_failed]
        lines += [f"  FAILED binary {p}: {why}" for p, why in self.binaries_failed]
        lines += [f"  skipped record {p}: {why}" for p, why in self.records_skipped]
        lines += [f"  replaced record {p}: {why}" for p, why in self.records_replaced]
        lines += [f"  skipped binary {p}: {why}" for p, why in self.binaries_skipped]
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(safe_text(line) for line in lines)  # names and versions are the archive's: escaped

    def to_dict(self) -> dict[str, Any]:
        return {
            "complete": self.complete,
            "records_imported": self.records_imported,
            "records_skipped": self.records_skipped,
            "records_replaced": self.records_replaced,
            "records_failed": self.records_failed,
            "binaries_imported": self.binaries_imported,
            "binaries_skipped": self.binaries_skipped,
            "binaries_failed": self.binaries_failed,
            "warnings": self.warnings,
            "manifest": codec.to_builtins(self.manifest),
        }


def _kernel_names(kernels: Iterable[Any] | None) -> dict[str, str | None] | None:
    """The kernels asked for, as names ("module:qualname" for a kernel object), each with a kernel object's
    source file (None for a name given as text)."""
    if kernels is None:
        return None
    if isinstance(kernels, (str, bytes)) or not isinstance(kernels, Iterable):
        kernels = [kernels]
    names: dict[str, str | None] = {}
    for k in kernels:
        if isinstance(k, str):  # a short name (every module's kernel of it) or a module:qualname (that one)
            names.setdefault(k, None)
            continue
        fn = python_function(k)
        if not inspect.isfunction(fn):
            raise ArchiveError(f"kernels=[...]: {k!r} is neither a kernel name nor an autotuned kernel")
        # a kernel object is that one kernel: its module:qualname (with a factory-made variant's "#<8 hex>")
        names[kernel_identity(fn)] = kernel_ref(fn).file
    return names


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def export_archive(
    path: str | os.PathLike,
    kernels: Iterable[Any] | None = None,
    *,
    cache_dir: str | os.PathLike | None = None,
    triton_cache_dir: str | os.PathLike | None = None,
    sign_key: str | os.PathLike | bytes | None = None,
    targets: Iterable[Any] | None = None,
) -> ArchiveManifest:
    """Write the tuned winners (and the compiled binaries) of `kernels` (names or kernels; None: every kernel of
    the tuning cache, by its records' module:qualname) to the .tar.gz `path`; returns its manifest. A name is a
    short name (every module's kernel of that name) or a "module:qualname" (that kernel alone;
    `storage.entries.kernel_matches`); an `@autotune` kernel (or any kernel object) is that one kernel, named by
    its module:qualname.

    Records come from the tuning cache (`cache_dir`, default AUTOTUNE_CACHE_DIR...); binaries are the entries
    of Triton's cache (`triton_cache_dir`, default `triton.knobs.cache.dir`), whoever compiled them (precompile,
    a launch), for every target found: for a short name every entry of that function name, for a module:qualname
    or a kernel object those compiled from its definition, told by the source location Triton writes into the
    entry (`triton_cache`; an entry without one, compiled with TRITON_DISABLE_LINE_INFO, is left out with a
    warning). A module:qualname's module is found without running it; one that cannot be (a script's
    `__main__`, a module not importable from here) is an ArchiveError naming the fix when its function name has
    binaries. With `sign_key` (a key file or the secret's bytes), the manifest is signed (HMAC-SHA256) so
    `import_archive(verify_key=...)` can trust it. With `targets` (e.g. `["cuda:90"]`, as `precompile` takes
    them), only binaries compiled for those targets go in (an H100 fleet's archive without the AMD binaries),
    and only the records tuned on a device of those targets (`record_fits_targets`); the records left out are
    warned of, by device.
    """
    out = Path(path)
    _check_destination(out)
    secret = read_key(sign_key) if sign_key is not None else None  # a wrong key file before any work
    kernel_names, entries, binaries = _chosen(kernels, cache_dir, triton_cache_dir, targets)
    manifest, members = _manifest(kernel_names, entries, binaries)
    _check_importable(manifest)  # from the files' sizes, before any binary is read
    _hash_binaries(manifest, members)
    _write_archive(out, manifest, members, secret)
    return manifest


@dataclass(frozen=True)
class _BinaryFile:
    """A file of a Triton cache entry to export, streamed from disk (never held whole in memory)."""

    entry: CacheEntry
    name: str

    @property
    def path(self) -> Path:
        return self.entry.dir / self.name


def _unexportable(entry: CacheEntry, problem: str) -> ArchiveError:
    return ArchiveError(
        f"autotune export: the Triton cache entry {entry.dir} cannot be exported ({problem}); export without that "
        "kernel's binaries, or precompile it again into a fresh TRITON_CACHE_DIR"
    )


def _binary_size(binary: _BinaryFile) -> int:
    """The size of a binary's file, from lstat (nothing read): a regular file of the entry, not a link."""
    try:
        st = os.lstat(binary.path)
    except OSError as exc:
        raise _unexportable(binary.entry, f"{binary.name}: {exc.strerror or exc}") from None
    if binary.name not in binary.entry.files or not stat.S_ISREG(st.st_mode):
        raise _unexportable(binary.entry, f"{binary.name} is no longer a regular file of the entry")
    return st.st_size


@contextlib.contextmanager
def _open_binary(binary: _BinaryFile, size: int) -> Iterator[IO[bytes]]:
    """The binary's file opened as the scan took it: a regular file, a link not followed, a FIFO not waited on,
    still `size` bytes (the size the manifest and the cap check took)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(binary.path, flags)
    except OSError as exc:
        raise _unexportable(binary.entry, f"{binary.name}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != size:
            raise _unexportable(binary.entry, f"{binary.name} changed while being exported; export again")
        yield fh


def _read_chunk(binary: _BinaryFile, fh: IO[bytes], size: int) -> bytes:
    try:
        return fh.read(min(_CHUNK, size))
    except OSError as exc:  # the cache's file, not the archive being written
        raise _unexportable(binary.entry, f"{binary.name}: {exc.strerror or exc}") from None


def _digest(binary: _BinaryFile, size: int) -> str:
    """The sha256 of the binary's `size` bytes, read in bounded chunks; a file that changed size is refused."""
    digest = hashlib.sha256()
    with _open_binary(binary, size) as fh:
        remaining = size
        while remaining > 0:
            chunk = _read_chunk(binary, fh, remaining)
            if not chunk:
                raise _unexportable(binary.entry, f"{binary.name} changed while being exported; export again")
            digest.update(chunk)
            remaining -= len(chunk)
    return digest.hexdigest()


def _hash_binaries(manifest: ArchiveManifest, members: dict[str, bytes | _BinaryFile]) -> None:
    """Fill in the manifest's sha256 of each binary file (the sizes are there already)."""
    for listed in manifest.files:
        member = members[listed.path]
        if isinstance(member, _BinaryFile):
            listed.sha256 = _digest(member, listed.size)


class _CheckedReader(io.RawIOBase):
    """A binary's file as tarfile reads it into the archive: hashed as read, so what is written is checked
    against the manifest's size and sha256 (a file changed since it was hashed fails the export)."""

    def __init__(self, binary: _BinaryFile, fh: IO[bytes]) -> None:
        self.binary, self.fh, self.digest = binary, fh, hashlib.sha256()

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        chunk = _read_chunk(self.binary, self.fh, size if size >= 0 else _CHUNK)
        if size and not chunk:  # shorter than its size: truncated since it was hashed
            raise _unexportable(self.binary.entry, f"{self.binary.name} changed while being exported; export again")
        self.digest.update(chunk)
        return chunk

    def check(self, listed: ArchiveFile) -> None:
        if self.fh.read(1) or self.digest.hexdigest() != listed.sha256:
            raise _unexportable(self.binary.entry, f"{self.binary.name} changed while being exported; export again")


def _check_importable(manifest: ArchiveManifest) -> None:
    """An archive that `import_archive`'s default caps would refuse is refused here, before it is shipped: from
    the manifest's sizes alone (its sha256s have a fixed length), before any binary is read."""
    limits = ArchiveLimits()
    manifest_bytes = len(codec.to_json(manifest, indent=1))
    sizes = [f.size for f in manifest.files]
    count = len(sizes) + 2  # with the manifest and its signature
    total = sum(sizes)
    listed = len(manifest.records) + len(manifest.binaries)
    largest = max(sizes, default=0)
    over = [
        f"{text} (import's cap: {cap:,})"
        for text, value, cap in (
            (f"a manifest of {manifest_bytes:,} bytes", manifest_bytes, MAX_MANIFEST_BYTES),
            (f"{count:,} members", count, limits.max_members),
            (f"{listed:,} records and compiled kernels", listed, limits.max_members),
            (f"{total:,} bytes", total, limits.max_total_bytes),
            (f"a member of {largest:,} bytes", largest, limits.max_member_bytes),
        )
        if value > cap
    ]
    if over:
        raise ArchiveError(
            f"autotune export: this archive would hold {'; '.join(over)}, which import_archive refuses: export "
            "fewer kernels (kernels= / --kernel), the targets deployed (targets= / --target), or only the winners' "
            "binaries (precompile with winners_only=True into a fresh Triton cache directory)"
        )


def _chosen(
    kernels: Iterable[Any] | None,
    cache_dir: str | os.PathLike | None,
    triton_cache_dir: str | os.PathLike | None,
    targets: Iterable[Any] | None,
) -> tuple[list[str], list[tuple[Path, Any]], list[Any]]:
    """(the kernels' names, their (entry path, record)s, their Triton cache entries) that go in the archive."""
    from ..storage import disk_entries
    from ..storage.entries import kernel_matches, short_name
    from ..storage.files import root as tuning_root

    names = _kernel_names(kernels)
    found = disk_entries(None, cache_dir)
    entries = [(e.path, e.record) for e in found if e.record is not None]
    _warn_left_out([e for e in found if e.record is None], names)
    cached = [(rec.kernel, rec.kernel_id) for _, rec in entries]  # every cached kernel, for a misspelt name's hint
    triton_dir = Path(triton_cache_dir) if triton_cache_dir is not None else Path(triton_compile.triton_cache_dir())
    if names is not None:
        entries = [(p, rec) for p, rec in entries if any(kernel_matches(rec.kernel, rec.kernel_id, n) for n in names)]
    elif not entries:
        raise _nothing_named(tuning_root(cache_dir), triton_dir)
    # every tuned kernel by its module:qualname where its records have one: not every module's of its short name
    kernel_names = names if names is not None else sorted({rec.kernel_id or rec.kernel for _, rec in entries})
    # Triton's cache names a binary by its function name alone: a module:qualname takes those of its name that
    # were compiled from its definition (`triton_cache`), a short name all of them
    found_binaries = triton_entries(triton_dir, {short_name(n) for n in kernel_names})
    # a default export keeps the binaries whose module cannot be told (TRITON_DISABLE_LINE_INFO), as by short name
    chosen = select(found_binaries, kernel_names, names or {}, triton_dir, unknown_origin=names is None)
    if names is None:
        _by_short_name_where_unfound(chosen, found_binaries, triton_dir)
    _check_found(names, chosen, [rec for _, rec in entries], cached, triton_dir)
    if targets is not None:
        wanted_targets = _targets_found(targets, chosen, kernel_names, triton_dir)
        chosen.by_name = {n: [b for b in taken if b.target in wanted_targets] for n, taken in chosen.by_name.items()}
        entries = _records_for_targets(entries, sorted(wanted_targets))
        _check_found(names, chosen, [rec for _, rec in entries], cached, triton_dir)
    binaries = chosen.entries
    for note in (note for notes in chosen.notes.values() for note in notes):
        warnings.warn(f"autotune export: {note}", stacklevel=3)
    if not entries and not binaries:
        raise ArchiveError(
            f"nothing to export: the tuning cache {tuning_root(cache_dir)} has no records and "
            f"{triton_dir} no compiled kernels"
        )
    return list(kernel_names), entries, binaries


def _nothing_named(tuning_dir: Path, triton_dir: Path) -> ArchiveError:
    """A default export with no records names no kernel: say so, and which compiled kernels --kernel could name."""
    compiled = collections.Counter(b.kernel for b in triton_entries(triton_dir, None))
    if not compiled:
        return ArchiveError(
            f"nothing to export: the tuning cache {tuning_dir} has no records and {triton_dir} no compiled kernels"
        )
    listed = ", ".join(f"{name}: {n}" for name, n in sorted(compiled.items())[:8])
    return ArchiveError(
        f"nothing to export: the tuning cache {tuning_dir} has no records, so no kernel is named; Triton's cache "
        f"{triton_dir} holds {compiled.total()} compiled kernels ({listed}{', ...' if len(compiled) > 8 else ''}): "
        "pass --kernel NAME (kernels=[...] in Python; a module:qualname takes one module's) to export them"
    )


def _by_short_name_where_unfound(chosen: Selection, found: list[CacheEntry], triton_dir: Path) -> None:
    """A default export's record whose own binaries cannot be told (its module cannot be found without running it,
    a script's `__main__`; or none of its name was compiled from the file its module resolves to here, as when the
    export runs beside a checkout of an installed package) takes every binary of its short name, as `--kernel
    SHORT` would, with a warning: a binary too many is never launched, a missing one compiles at launch."""
    from ..storage.entries import short_name

    for name, taken in list(chosen.by_name.items()):
        others = [b for b in found if b.kernel == short_name(name)]
        if not others:  # nothing of its name compiled: its records go alone, as they did by short name
            chosen.unfound.pop(name, None)
        if taken or not others:
            continue
        why = chosen.unfound.pop(name, None) or "; ".join(chosen.notes.pop(name, [])) or "none matched its module"
        chosen.by_name[name] = others
        warnings.warn(
            f"autotune export: took every compiled kernel named {short_name(name)} in {triton_dir} for {name}, "
            f"whose own cannot be told from other modules' ({why})",
            stacklevel=4,
        )


def _targets_found(targets: Iterable[Any], chosen: Any, kernel_names: Iterable[str], triton_dir: Path) -> set[str]:
    """The targets asked for, each of which must have compiled kernels (else the fleet would compile at launch)."""
    from .targets import parse_target

    wanted = {str(parse_target(t)) for t in ([targets] if isinstance(targets, str) else targets)}
    found = {b.target for b in chosen.entries}
    absent = sorted(wanted - found)
    if absent:
        raise ArchiveError(
            f"no compiled kernels of {', '.join(kernel_names) or 'any kernel'} for "
            f"{', '.join(absent)} in {triton_dir} (found: {', '.join(sorted(found)) or 'none'});"
            f" precompile for {'them' if len(absent) > 1 else 'it'} first (autotune precompile "
            "--target), or leave it out of targets=/--target"
        )
    return wanted


def _manifest(
    kernel_names: list[str], entries: list[tuple[Path, Any]], binaries: list[Any]
) -> tuple[ArchiveManifest, dict[str, bytes | _BinaryFile]]:
    """The manifest and the members (archive path -> a record's bytes, or a binary's file) of the records and
    binaries chosen. A binary's size is its file's (lstat), its sha256 a placeholder `_hash_binaries` fills in."""
    import torch
    import triton

    from .. import __version__ as autotune_version
    from ..storage.entries import kernel_dirname, record_json

    members: dict[str, bytes | _BinaryFile] = {}
    manifest = ArchiveManifest(
        autotune_version=str(autotune_version),
        triton_version=str(triton.__version__),
        torch_version=str(torch.__version__),
        python_version=sys.version.split()[0],
        kernels=list(kernel_names),
        targets=[],
    )
    for entry_path, rec in entries:
        member = f"{RECORDS_PREFIX}/{kernel_dirname(rec.kernel, rec.kernel_id)}/{entry_path.name}"
        members[member] = record_json(rec)
        manifest.records.append(
            ArchiveRecord(
                path=member,
                kernel=rec.kernel,
                key=list(rec.key),
                dtypes=list(rec.dtypes),
                device=rec.device,
                winner=dict(rec.winner),
                timestamp=rec.timestamp,
                triton_version=rec.triton_version,
            )
        )
    for b in binaries:
        for f in b.files:
            members[f"{TRITON_PREFIX}/{b.dir.name}/{f}"] = _BinaryFile(b, f)
        manifest.binaries.append(
            ArchiveBinary(
                kernel=b.kernel,
                dir=b.dir.name,
                target=b.target,
                triton_version=b.metadata.get("triton_version"),
                files=list(b.files),
            )
        )
    manifest.targets = sorted({b.target for b in manifest.binaries})
    manifest.files = [_listed(p, member) for p, member in sorted(members.items())]
    return manifest, members


def _listed(path: str, member: bytes | _BinaryFile) -> ArchiveFile:
    if isinstance(member, bytes):
        return ArchiveFile(path=path, sha256=_sha256(member), size=len(member))
    return ArchiveFile(path=path, sha256="0" * 64, size=_binary_size(member))  # hashed once the caps are checked


def _add_member(tar: tarfile.TarFile, info: tarfile.TarInfo, member: bytes | _BinaryFile, listed: ArchiveFile) -> None:
    """Add one member: a record's bytes, or a binary streamed from its file and checked against the manifest."""
    if isinstance(member, bytes):
        tar.addfile(info, io.BytesIO(member))
        return
    with _open_binary(member, listed.size) as fh:
        reader = _CheckedReader(member, fh)
        tar.addfile(info, reader)
        reader.check(listed)


def _write_archive(
    out: Path, manifest: ArchiveManifest, members: dict[str, bytes | _BinaryFile], secret: bytes | None
) -> None:
    """The .tar.gz, manifest (and its signature) first, written to a temporary file and renamed into place."""
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    now = time.time()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(tmp, "w:gz") as tar:
            manifest_json = codec.to_json(manifest, indent=1)
            first = [(MANIFEST, manifest_json)]  # the manifest first: an import reads it before the rest
            if secret is not None:
                first.append((SIGNATURE, sign(manifest_json, secret)))
            for name, data in first:
                info = tarfile.TarInfo(name)
                info.size, info.mtime, info.mode = len(data), now, 0o644
                tar.addfile(info, io.BytesIO(data))
            for listed in manifest.files:
                info = tarfile.TarInfo(listed.path)
                info.size, info.mtime, info.mode = listed.size, now, 0o644
                _add_member(tar, info, members[listed.path], listed)
        os.replace(tmp, out)
    except OSError as exc:
        raise ArchiveError(
            f"cannot write the archive {out} ({exc.__class__.__name__}: {exc.strerror or exc}); give "
            "a file path in a writable directory"
        ) from None
    finally:
        if tmp.is_file():
            tmp.unlink()


def _check_found(
    names: Iterable[str] | None,
    chosen: Selection,
    records: list[Any],
    cached: list[tuple[str, str | None]],
    triton_dir: Path,
) -> None:
    """Raise ArchiveError for a name asked for that has no record and took no binary (why, and the closest cached
    kernel), then for a tuned kernel whose binaries cannot be told from its twins' (not half an archive)."""
    from ..storage.entries import kernel_matches, kernel_suggestion

    missing = (
        []
        if names is None
        else [
            n
            for n in names
            if not chosen.by_name.get(n) and not any(kernel_matches(r.kernel, r.kernel_id, n) for r in records)
        ]
    )
    if missing:
        # each name that is close to a cached kernel (a record's, or a compiled binary's function name) ends
        # the message with it, in the form it was written: `mod:add_kernel` -> 'mod:_add_kernel'
        known = cached + [(b.kernel, None) for b in triton_entries(triton_dir, None)]
        hints = [h for h in (kernel_suggestion(n, known) for n in missing) if h]
        hints = hints[:1] + [h.removeprefix(".") for h in hints[1:]]  # ". Did you mean 'a'? Did you mean 'b'?"
        why = "".join(
            f" ({note})" for n in missing for note in chosen.notes.get(n, []) + [chosen.unfound.get(n, "")] if note
        )
        raise ArchiveError(
            f"nothing to export for {missing}: no tuned records in the tuning cache and no compiled "
            f"kernels of {'it' if len(missing) == 1 else 'them'} in {triton_dir}{why}; tune or "
            f"precompile first, or check the names{''.join(hints)}"
        )
    if chosen.unfound:
        raise ArchiveError(next(iter(chosen.unfound.values())))


def _warn_left_out(unreadable: list[Any], names: dict[str, str | None] | None) -> None:
    """An export leaves out the entries it cannot read (corrupt, of a newer autotune, dated ahead): say how many
    and the first reasons, as `autotune cache list` does, rather than ship an archive short of them unsaid."""
    from ..storage.entries import is_dir_of

    if names is not None:  # of the kernels asked for: by the directory they lie in (their record is unreadable)
        unreadable = [e for e in unreadable if any(is_dir_of(e.path.parent.name, n) for n in names)]
    if unreadable:
        reasons = "; ".join(f"{e.path.name}: {safe_text(e.error)}" for e in unreadable[:3])
        warnings.warn(
            f"autotune export: left out {len(unreadable)} cache entries that cannot be read ({reasons}"
            f"{'; ...' if len(unreadable) > 3 else ''}); `autotune cache list` shows them",
            stacklevel=4,
        )


def record_fits_targets(device: str, targets: Iterable[str]) -> bool:
    """Whether a record tuned on `device` (its fingerprint: "interpreter", "<name> sm<cc>") is for one of `targets`
    ("cuda:90", "hip:gfx942"): an NVIDIA device by its compute capability; any AMD GPU for a HIP target, whose
    fingerprint does not tell the gfx architecture (ROCm's torch gives AMD GPUs a capability too: an MI250 reads
    sm90, never a CUDA target's); the interpreter's (CPU) winners for none."""
    match = re.search(r" sm(\d+)$", device)
    if match is None:
        return False
    amd = _AMD_DEVICE.search(device) is not None
    return any((t == f"cuda:{match.group(1)}" and not amd) or (t.startswith("hip:") and amd) for t in targets)


_AMD_DEVICE = re.compile(r"\b(AMD|Radeon|Instinct)\b")


def _records_for_targets(entries: list, targets: list[str]) -> list:
    """The (path, record) pairs tuned for `targets`; the others are left out with one warning, by device."""
    kept = [(p, rec) for p, rec in entries if record_fits_targets(rec.device, targets)]
    left = collections.Counter(rec.device for p, rec in entries if not record_fits_targets(rec.device, targets))
    if left:
        warnings.warn(
            f"autotune export: left out {sum(left.values())} tuned winners of other devices than "
            f"{', '.join(targets)} ({', '.join(f'{n} of {d!r}' for d, n in sorted(left.items()))}): a winner is for "
            "the device it was tuned on; export without --target/targets= to pack every device's",
            stacklevel=3,
        )
    return kept


def _check_destination(out: Path) -> None:
    """Refuse, before anything is collected, an archive path that names a directory or lies under a file."""
    if out.is_dir():
        raise ArchiveError(f"{out} is a directory; give the archive's file name, e.g. {out / 'deploy.tar.gz'}")
    parent = next((p for p in out.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise ArchiveError(
            f"cannot write the archive {out}: {parent} is a file, not a directory; give a path in a directory"
        )


class _ManifestFormat(Struct):
    """The two fields every manifest version keeps, read leniently (unknown fields ignored) before the strict
    decode, so an archive from a newer autotune is told apart from a malformed one."""

    format: str = ARCHIVE_FORMAT  # the defaults of ArchiveManifest
    format_version: int = ARCHIVE_FORMAT_VERSION


def _decode(data: bytes, kind: type) -> Any:
    try:
        return codec.from_json(data, kind)
    except codec.DecodeError as exc:  # not JSON, or not a manifest (ValidationError is a DecodeError)
        raise ArchiveError(
            f"invalid {MANIFEST} ({codec.error_text(exc)}); not an archive made by `autotune export`, or it was altered"
        ) from None
    except RecursionError:  # arrays or objects nested thousands deep
        raise ArchiveError(
            f"invalid {MANIFEST} (nested too deeply); not an archive made by `autotune export`, or it was altered"
        ) from None


def _parse_manifest(data: bytes) -> ArchiveManifest:
    """The manifest in `data`: its format and version first (a newer one says to upgrade autotune, whatever
    fields it adds), then the strict decode (unknown fields refused). Raises ArchiveError."""
    head = _decode(data, _ManifestFormat)
    if head.format != ARCHIVE_FORMAT:
        raise ArchiveError(
            f"{MANIFEST} is of format {head.format!r}, not {ARCHIVE_FORMAT!r}: not an archive made by `autotune export`"
        )
    if head.format_version > ARCHIVE_FORMAT_VERSION:
        raise ArchiveError(
            f"the archive was written by a newer autotune (archive format v{head.format_version}; "
            f"this autotune reads up to v{ARCHIVE_FORMAT_VERSION}): upgrade autotune to import it"
        )
    return _decode(data, ArchiveManifest)


def _other_triton(path: str | os.PathLike, manifest: ArchiveManifest, local: str) -> str:
    return (
        f"{path} was made with Triton {manifest.triton_version}, this is Triton {local}: its records "
        f"would be tuned again and its binaries never found (Triton's cache key includes its version)"
    )


_NOT_FORCED = "; re-export with the same Triton, or pass force=True (--force) to import anyway"


def _refused_early(
    manifest: ArchiveManifest, path: str | os.PathLike, limits: ArchiveLimits, local: str, force: bool
) -> ArchiveManifest:
    """`manifest`, unless it lists too many records and kernels or (without `force`) was made with another Triton:
    ArchiveError, raised before any member is staged (an archive may hold gigabytes)."""
    listed = len(manifest.records) + len(manifest.binaries)
    if listed > limits.max_members:  # each makes files: counted as the members are
        raise ArchiveError(
            f"{path}: the manifest lists {listed} records and compiled kernels, more than {limits.max_members} "
            "(max_members); nothing was imported"
        )
    if manifest.triton_version != local and not force:
        raise ArchiveError(_other_triton(path, manifest, local) + _NOT_FORCED)
    return manifest


def import_archive(
    path: str | os.PathLike,
    *,
    force: bool = False,
    cache_dir: str | os.PathLike | None = None,
    triton_cache_dir: str | os.PathLike | None = None,
    verify_key: str | os.PathLike | bytes | None = None,
    limits: ArchiveLimits | None = None,
) -> ImportReport:
    """Install an archive made by `export_archive`: winners into the tuning cache, binaries into Triton's cache.

    An archive is code from whoever built it. Every member is checked before anything is written (see
    `autotune.aot.archive_checks`: the manifest first, members streamed under `limits`, listed with their
    checksums, only Triton compile artifacts); a failed check changes nothing, and so does a Triton cache
    directory that cannot be written, nor does a tuning cache directory that cannot (`archive_install`: both
    probed first, binaries next, records last). A record that still cannot be installed (invalid, no lock, a
    full disk) is in `records_failed`, and `report.complete` is False. With `verify_key` (a key file or
    the secret's bytes) an unsigned or wrongly signed archive is refused. An archive made with another Triton
    version is refused unless `force=True` (then a warning). A record never replaces a newer entry of the same
    (kernel, device, key, dtypes): the newer timestamp wins and the skip is reported.
    """
    import triton

    from ..options import lock_timeout_s

    lock_wait = lock_timeout_s()  # a bad AUTOTUNE_LOCK_TIMEOUT_S is refused before the archive is read
    key = read_key(verify_key) if verify_key is not None else None
    limits = limits or ArchiveLimits()
    local = str(triton.__version__)

    def parse_and_refuse(data: bytes) -> ArchiveManifest:  # run as soon as the manifest is read: nothing staged yet
        # with a key, the manifest's Triton version is judged once the signature says who wrote it (below)
        return _refused_early(_parse_manifest(data), path, limits, local, force or key is not None)

    manifest, staged = stage(path, parse_manifest=parse_and_refuse, limits=limits, verify_key=key)
    try:
        if manifest.triton_version != local and not force:  # signed by the deployment key, of another Triton
            raise ArchiveError(_other_triton(path, manifest, local) + _NOT_FORCED)
        report = ImportReport(manifest=manifest)
        if key is None and SIGNATURE in staged.names:  # installing is fine; trusting it unchecked should be a choice
            report.warnings.append(
                f"{path} is signed but its signature was not checked: pass verify_key= (autotune "
                "import --verify KEYFILE) to refuse it unless the deployment key signed it"
            )
        if manifest.triton_version != local:  # force=True: refused otherwise, by _refused_early
            message = _other_triton(path, manifest, local)
            report.warnings.append(message)
            warnings.warn(message, stacklevel=2)
        records = checked_records(manifest, staged, report)  # everything validated before any write
        binaries = checked_binaries(manifest, staged, report)
        triton_dir = Path(triton_cache_dir) if triton_cache_dir is not None else Path(triton_compile.triton_cache_dir())
        tuning_dir = Path(cache_dir) if cache_dir is not None else None
        # raises, with what it wrote undone, before any record is written: the tuning cache is probed first
        install_binaries(binaries, staged, triton_dir, report, tuning_dir=tuning_dir, records=bool(records))
        install_records(records, tuning_dir, report, lock_timeout_s=lock_wait)
        return report
    finally:
        staged.close()
