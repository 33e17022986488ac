"""Moving tuned kernels between machines: `export_archive(path)` / `import_archive(path)` (CLI: `autotune
export` / `autotune import`) carry the tuned winners (the disk cache's JSON records) and the compiled binaries
(the kernels' entries of Triton's cache directory) as one .tar.gz with a checked manifest.

Why: a deployed service should start tuned and compiled; the winners come from the tuning cache, the
binaries from a build machine that may have no GPU (`precompile`). Nothing read from an archive is
unpickled or evaluated: members are checked (regular files at safe relative paths, sizes, checksums)
before anything is written, and records are validated JSON.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import sys
import tarfile
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Iterable, Iterator, Mapping, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from ..errors import ArchiveError
from . import triton_compile

__all__ = ["ARCHIVE_FORMAT", "ARCHIVE_FORMAT_VERSION", "ArchiveFile", "ArchiveRecord", "ArchiveBinary",
           "ArchiveManifest", "ImportReport", "export_archive", "import_archive"]


class _EntryStore:
    """The tuning cache's on-disk store as export/import use it: a record's file bytes, an entry's lock, an
    atomic write. The ONE place this package touches the cache's files.

    MERGE NOTE (issue 11): `autotune/cache.py` offers these only as private helpers (`_record_json`,
    `_acquire`, `_atomic_write`); the storage package (`autotune.storage.store`) makes them public as
    `write_entry(path, record)` / `lock(path)` and the record serialisation: point these three methods at
    it and drop the private imports.
    """

    @staticmethod
    def record_bytes(record: Any) -> bytes:
        """The entry file's bytes for `record`, as the cache writes them."""
        from ..cache import _record_json

        return _record_json(record)

    @staticmethod
    @contextlib.contextmanager
    def locked(path: Path, what: str) -> Iterator[None]:
        """Hold the entry's file lock (blocking) while the caller reads and replaces it."""
        from ..cache import _acquire

        lock = _acquire(path, what)
        try:
            yield
        finally:
            lock.release()

    @staticmethod
    def write(path: Path, data: bytes) -> None:
        """Replace the entry at `path` atomically (the caller holds its lock)."""
        from ..cache import _atomic_write

        _atomic_write(path, data)


ARCHIVE_FORMAT = "autotune-archive"
ARCHIVE_FORMAT_VERSION = 1
_MANIFEST = "manifest.json"
_RECORDS_PREFIX = "records"
_TRITON_PREFIX = "triton"
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,254}$")
_MAX_MEMBER_BYTES = 1 << 30


class ArchiveFile(BaseModel):
    """A member of the archive with its checksum."""

    model_config = ConfigDict(extra="forbid")
    path: str
    sha256: str
    size: int


class ArchiveRecord(BaseModel):
    """A tuned winner in the archive (its JSON record is the member at `path`)."""

    model_config = ConfigDict(extra="forbid")
    path: str
    kernel: str
    key: list[Any]
    dtypes: list[str]
    device: str
    winner: dict[str, Any]
    timestamp: float
    triton_version: str


class ArchiveBinary(BaseModel):
    """One compiled kernel from Triton's cache: the files of one cache directory entry."""

    model_config = ConfigDict(extra="forbid")
    kernel: str
    dir: str
    target: str
    triton_version: Optional[str] = None
    files: list[str]


class ArchiveManifest(BaseModel):
    """`manifest.json` of an archive: what it holds and the versions it was made with."""

    model_config = ConfigDict(extra="forbid")
    format: str = ARCHIVE_FORMAT
    format_version: int = ARCHIVE_FORMAT_VERSION
    created: float = Field(default_factory=time.time)
    autotune_version: str
    triton_version: str
    torch_version: str
    python_version: str
    kernels: list[str]
    targets: list[str]
    records: list[ArchiveRecord] = Field(default_factory=list)
    binaries: list[ArchiveBinary] = Field(default_factory=list)
    files: list[ArchiveFile] = Field(default_factory=list)


@dataclass
class ImportReport:
    """What `import_archive` did: imported, skipped (with why), and warnings."""

    manifest: ArchiveManifest
    records_imported: list[str] = field(default_factory=list)
    records_skipped: list[tuple[str, str]] = field(default_factory=list)
    binaries_imported: list[str] = field(default_factory=list)
    binaries_skipped: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (f"imported {len(self.records_imported)} records ({len(self.records_skipped)} skipped) and "
                f"{len(self.binaries_imported)} compiled kernels ({len(self.binaries_skipped)} skipped) for "
                f"{', '.join(self.manifest.kernels) or 'no kernel'}")

    def __str__(self) -> str:
        lines = [self.summary()]
        lines += [f"  skipped record {p}: {why}" for p, why in self.records_skipped]
        lines += [f"  skipped binary {p}: {why}" for p, why in self.binaries_skipped]
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"records_imported": self.records_imported, "records_skipped": self.records_skipped,
                "binaries_imported": self.binaries_imported, "binaries_skipped": self.binaries_skipped,
                "warnings": self.warnings, "manifest": self.manifest.model_dump()}


def _kernel_names(kernels: Optional[Iterable[Any]]) -> Optional[list[str]]:
    if kernels is None:
        return None
    if isinstance(kernels, (str, bytes)) or not isinstance(kernels, Iterable):
        kernels = [kernels]
    names = []
    for k in kernels:
        if isinstance(k, str):
            names.append(k)
        elif getattr(getattr(k, "cache", None), "kernel_name", None):
            names.append(k.cache.kernel_name)
        elif isinstance(getattr(k, "name", None), str):
            names.append(k.name)
        else:
            raise ArchiveError(f"kernels=[...]: {k!r} is neither a kernel name nor an autotuned kernel")
    return list(dict.fromkeys(names))


def _triton_entries(triton_dir: Path, names: Optional[set[str]]) -> list[tuple[str, Path, dict, list[str]]]:
    """Complete entries of Triton's cache directory: (kernel name, dir, metadata, file names), for `names` or all."""
    out = []
    try:
        subdirs = sorted(p for p in triton_dir.iterdir() if p.is_dir())
    except OSError:
        return out
    for d in subdirs:
        try:
            groups = [p for p in d.iterdir() if p.name.startswith("__grp__") and p.name.endswith(".json")]
        except OSError:
            continue
        for grp in groups:
            kernel = grp.name[len("__grp__"):-len(".json")]
            if names is not None and kernel not in names:
                continue
            try:
                children = json.loads(grp.read_text())["child_paths"]
                metadata = json.loads((d / f"{kernel}.json").read_text())
            except (OSError, ValueError, KeyError, TypeError):
                continue
            files = sorted({os.path.basename(p) for p in children.values()} | {os.path.basename(c) for c in children})
            if all((d / f).is_file() for f in files) and all(_SAFE_NAME.match(f) for f in files):
                out.append((kernel, d, metadata, files))
    return out


def _target_of(metadata: Mapping[str, Any]) -> str:
    target = metadata.get("target") or {}
    if isinstance(target, Mapping) and "backend" in target:
        return f"{target['backend']}:{target.get('arch')}"
    return "unknown"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def export_archive(path: Union[str, os.PathLike], kernels: Optional[Iterable[Any]] = None, *,
                   cache_dir: Union[str, os.PathLike, None] = None,
                   triton_cache_dir: Union[str, os.PathLike, None] = None) -> ArchiveManifest:
    """Write the tuned winners (and the compiled binaries) of `kernels` (names or kernels; None: every kernel of
    the tuning cache) to the .tar.gz `path`; returns its manifest.

    Records come from the tuning cache (`cache_dir`, default AUTOTUNE_CACHE_DIR...); binaries are the entries
    of Triton's cache (`triton_cache_dir`, default `triton.knobs.cache.dir`) compiled from a kernel of that
    name (precompile or launches put them there), for every target found.
    """
    import torch
    import triton

    from .. import __version__ as autotune_version
    from ..cache import disk_entries, kernel_dirname

    names = _kernel_names(kernels)
    entries = [e for e in disk_entries(None, cache_dir) if e.record is not None]
    if names is not None:
        entries = [e for e in entries if e.record.kernel in set(names)]
    kernel_names = names if names is not None else sorted({e.record.kernel for e in entries})
    triton_dir = Path(triton_cache_dir) if triton_cache_dir is not None else Path(triton_compile.triton_cache_dir())
    binaries = _triton_entries(triton_dir, set(kernel_names))
    if names is not None:
        missing = [n for n in names if not any(e.record.kernel == n for e in entries)
                   and not any(b[0] == n for b in binaries)]
        if missing:
            raise ArchiveError(f"nothing to export for {missing}: no tuned records in the tuning cache and no compiled "
                               f"kernels of that name in {triton_dir}; tune or precompile first, or check the names")
    if not entries and not binaries:
        raise ArchiveError(f"nothing to export: the tuning cache has no records and {triton_dir} no compiled kernels")

    members: dict[str, bytes] = {}
    manifest = ArchiveManifest(autotune_version=str(autotune_version), triton_version=str(triton.__version__),
                               torch_version=str(torch.__version__), python_version=sys.version.split()[0],
                               kernels=list(kernel_names), targets=[])
    for e in entries:
        rec = e.record
        member = f"{_RECORDS_PREFIX}/{kernel_dirname(rec.kernel, rec.kernel_id)}/{e.path.name}"
        members[member] = _EntryStore.record_bytes(rec)
        manifest.records.append(ArchiveRecord(path=member, kernel=rec.kernel, key=list(rec.key),
                                              dtypes=list(rec.dtypes), device=rec.device, winner=dict(rec.winner),
                                              timestamp=rec.timestamp, triton_version=rec.triton_version))
    for kernel, d, metadata, files in binaries:
        for f in files:
            members[f"{_TRITON_PREFIX}/{d.name}/{f}"] = (d / f).read_bytes()
        manifest.binaries.append(ArchiveBinary(kernel=kernel, dir=d.name, target=_target_of(metadata),
                                               triton_version=metadata.get("triton_version"), files=files))
    manifest.targets = sorted({b.target for b in manifest.binaries})
    manifest.files = [ArchiveFile(path=p, sha256=_sha256(data), size=len(data)) for p, data in sorted(members.items())]

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    now = time.time()
    try:
        with tarfile.open(tmp, "w:gz") as tar:
            manifest_json = manifest.model_dump_json(indent=1).encode("utf-8")
            for name, data in [(_MANIFEST, manifest_json)] + sorted(members.items()):
                info = tarfile.TarInfo(name)
                info.size, info.mtime, info.mode = len(data), now, 0o644
                tar.addfile(info, io.BytesIO(data))
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    return manifest


def _check_member(member: tarfile.TarInfo) -> PurePosixPath:
    """Refuse anything but a regular file at a relative path without '..' inside the archive's known folders."""
    name = member.name
    path = PurePosixPath(name)
    if not member.isreg():
        raise ArchiveError(f"unsafe archive: member {name!r} is not a regular file (links and devices are refused)")
    if name.startswith(("/", "\\")) or path.is_absolute() or re.match(r"^[A-Za-z]:", name) or ".." in path.parts \
            or "\\" in name:
        raise ArchiveError(f"unsafe archive: member {name!r} has an absolute path or '..'")
    if member.size > _MAX_MEMBER_BYTES:
        raise ArchiveError(f"archive member {name!r} is {member.size} bytes; refusing members over 1 GiB")
    data_filter = getattr(tarfile, "data_filter", None)
    if data_filter is not None:  # Python's own 'data' extraction filter, as a second opinion
        try:
            data_filter(member, tempfile.gettempdir())
        except tarfile.FilterError as exc:
            raise ArchiveError(f"unsafe archive: member {name!r} ({exc})") from None
    parts = path.parts
    if name == _MANIFEST:
        return path
    if len(parts) == 3 and parts[0] in (_RECORDS_PREFIX, _TRITON_PREFIX) \
            and all(_SAFE_NAME.match(p) for p in parts[1:]):
        return path
    raise ArchiveError(f"unexpected archive member {name!r}: an autotune archive holds {_MANIFEST}, "
                       f"{_RECORDS_PREFIX}/<kernel>/<entry>.json and {_TRITON_PREFIX}/<entry>/<file>")


def _read_archive(path: Union[str, os.PathLike]) -> tuple[ArchiveManifest, dict[str, bytes]]:
    """Read and check every member (nothing is extracted to disk here): safe names, checksums, the manifest."""
    members: dict[str, bytes] = {}
    try:
        with tarfile.open(path, "r:*") as tar:
            for member in tar:
                _check_member(member)
                if member.name in members:
                    raise ArchiveError(f"archive member {member.name!r} appears twice")
                handle = tar.extractfile(member)
                members[member.name] = handle.read() if handle is not None else b""
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise ArchiveError(f"{path}: not a readable .tar.gz archive ({exc.__class__.__name__}: {exc})") from None
    if _MANIFEST not in members:
        raise ArchiveError(f"{path}: no {_MANIFEST}; not an autotune archive (make one with `autotune export`)")
    try:
        manifest = ArchiveManifest.model_validate_json(members[_MANIFEST])
    except Exception as exc:  # noqa: BLE001 - pydantic's ValidationError or JSON errors
        raise ArchiveError(f"{path}: invalid {_MANIFEST} ({str(exc).splitlines()[0]})") from None
    if manifest.format != ARCHIVE_FORMAT or manifest.format_version > ARCHIVE_FORMAT_VERSION:
        raise ArchiveError(f"{path}: archive format {manifest.format!r} v{manifest.format_version}; this autotune "
                           f"reads {ARCHIVE_FORMAT} up to v{ARCHIVE_FORMAT_VERSION}: upgrade autotune")
    listed = {f.path: f for f in manifest.files}
    for name, data in members.items():
        if name == _MANIFEST:
            continue
        entry = listed.get(name)
        if entry is None:
            raise ArchiveError(f"{path}: member {name!r} is not listed in the manifest")
        if entry.size != len(data) or entry.sha256 != _sha256(data):
            raise ArchiveError(f"{path}: member {name!r} does not match its checksum; the archive is corrupt")
    missing = sorted(set(listed) - set(members))
    if missing:
        raise ArchiveError(f"{path}: the manifest lists missing members {missing[:5]}; the archive is truncated")
    return manifest, members


def import_archive(path: Union[str, os.PathLike], *, force: bool = False,
                   cache_dir: Union[str, os.PathLike, None] = None,
                   triton_cache_dir: Union[str, os.PathLike, None] = None) -> ImportReport:
    """Install an archive made by `export_archive`: winners into the tuning cache, binaries into Triton's cache.

    Refuses an archive made with another Triton version (its records would be stale and its binaries never
    looked up here) unless `force=True`, which imports with a warning. A record never replaces a newer entry
    of the same (kernel, device, key, dtypes): the newer timestamp wins and the skip is reported. Members are
    checked before anything is written (regular files at safe relative paths, checksums from the manifest).
    """
    import triton

    from ..cache import CacheEntryError, load_record, record_path
    from ..record import SCHEMA_VERSION, TuningRecord

    manifest, members = _read_archive(path)
    report = ImportReport(manifest=manifest)
    local = str(triton.__version__)
    if manifest.triton_version != local:
        message = (f"{path} was made with Triton {manifest.triton_version}, this is Triton {local}: its records would "
                   f"be tuned again and its binaries never found (Triton's cache key includes its version)")
        if not force:
            raise ArchiveError(message + "; re-export with the same Triton, or pass force=True (--force) to import "
                               "anyway")
        report.warnings.append(message)
        warnings.warn(message, stacklevel=2)

    root = Path(cache_dir) if cache_dir is not None else None
    for rec_info in manifest.records:
        data = members[rec_info.path]
        try:
            obj = json.loads(data)
            if obj.get("schema_version") != SCHEMA_VERSION:
                raise ValueError(f"schema version {obj.get('schema_version')!r}, this autotune reads {SCHEMA_VERSION}")
            record = TuningRecord.model_validate(obj)
        except Exception as exc:  # noqa: BLE001
            report.records_skipped.append((rec_info.path, f"not a valid record ({str(exc).splitlines()[0]})"))
            continue
        dest = record_path(record, root)
        with _EntryStore.locked(dest, f"{record.kernel} import"):
            try:
                existing = load_record(dest)
            except FileNotFoundError:
                existing = None
            except (OSError, CacheEntryError):
                existing = None  # corrupt or unreadable: replaced by a good record
            if existing is not None and existing.timestamp > record.timestamp:
                report.records_skipped.append((rec_info.path, f"the entry at {dest} is newer "
                                               f"({_when(existing.timestamp)} > {_when(record.timestamp)}); kept it"))
                continue
            if existing is not None and existing.timestamp == record.timestamp and existing.winner == record.winner:
                report.records_skipped.append((rec_info.path, f"already present at {dest}"))
                continue
            _EntryStore.write(dest, data if data.endswith(b"\n") else data + b"\n")
            report.records_imported.append(str(dest))

    triton_dir = Path(triton_cache_dir) if triton_cache_dir is not None else Path(triton_compile.triton_cache_dir())
    for binary in manifest.binaries:
        if not _SAFE_NAME.match(binary.dir) or not _SAFE_NAME.match(binary.kernel):
            report.binaries_skipped.append((binary.dir, "unsafe directory or kernel name"))
            continue
        dest = triton_dir / binary.dir
        group = dest / f"__grp__{binary.kernel}.json"
        if group.is_file() and all((dest / f).is_file() for f in binary.files):
            report.binaries_skipped.append((f"{binary.dir} ({binary.kernel}, {binary.target})",
                                            "already in Triton's cache"))
            continue
        dest.mkdir(parents=True, exist_ok=True)
        for name in binary.files:
            _write_file(dest / name, members[f"{_TRITON_PREFIX}/{binary.dir}/{name}"])
        # Triton's group file lists absolute paths: rewrite it for this machine's cache directory, last.
        children = {name: str(dest / name) for name in binary.files}
        _write_file(group, json.dumps({"child_paths": children}).encode("utf-8"))
        report.binaries_imported.append(f"{binary.dir} ({binary.kernel}, {binary.target})")
    return report


def _write_file(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _when(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))


# ================================================================================================ command line
