"""Moving tuned kernels between machines: `export_archive(path)` / `import_archive(path)` (CLI: `autotune
export` / `autotune import`) carry the tuned winners (the disk cache's JSON records) and the compiled binaries
(the kernels' entries of Triton's cache directory) as one .tar.gz with a checked manifest.

Why: a deployed service should start tuned and compiled; the winners come from the tuning cache, the
binaries from a build machine that may have no GPU (`precompile`). Nothing read from an archive is
unpickled or evaluated: members are checked (regular files at safe relative paths, sizes, checksums)
before anything is written, and records are validated JSON.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import tarfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Union

from msgspec import Struct, field as struct_field

from .. import codec
from ..errors import ArchiveError
from . import triton_compile
from .archive_checks import (ARTIFACT_NAME, MANIFEST, RECORDS_PREFIX, SAFE_NAME, SIGNATURE, TRITON_PREFIX,
                             ArchiveLimits, read_key, sign, stage)

__all__ = ["ARCHIVE_FORMAT", "ARCHIVE_FORMAT_VERSION", "ArchiveFile", "ArchiveRecord", "ArchiveBinary",
           "ArchiveManifest", "ImportReport", "export_archive", "import_archive"]


ARCHIVE_FORMAT = "autotune-archive"
ARCHIVE_FORMAT_VERSION = 1


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
    triton_version: Optional[str] = None


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
    records_replaced: list[tuple[str, str]] = field(default_factory=list)   # (path, what the older entry was for)
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
        lines += [f"  replaced record {p}: {why}" for p, why in self.records_replaced]
        lines += [f"  skipped binary {p}: {why}" for p, why in self.binaries_skipped]
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"records_imported": self.records_imported, "records_skipped": self.records_skipped,
                "records_replaced": self.records_replaced,
                "binaries_imported": self.binaries_imported, "binaries_skipped": self.binaries_skipped,
                "warnings": self.warnings, "manifest": codec.to_builtins(self.manifest)}


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
            if all((d / f).is_file() for f in files) and all(ARTIFACT_NAME.match(f) for f in files):
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
                   triton_cache_dir: Union[str, os.PathLike, None] = None,
                   sign_key: Union[str, os.PathLike, bytes, None] = None) -> ArchiveManifest:
    """Write the tuned winners (and the compiled binaries) of `kernels` (names or kernels; None: every kernel of
    the tuning cache) to the .tar.gz `path`; returns its manifest.

    Records come from the tuning cache (`cache_dir`, default AUTOTUNE_CACHE_DIR...); binaries are the entries
    of Triton's cache (`triton_cache_dir`, default `triton.knobs.cache.dir`) compiled from a kernel of that
    name (precompile or launches put them there), for every target found. With `sign_key` (a key file or the
    secret's bytes), the manifest is signed (HMAC-SHA256) so `import_archive(verify_key=...)` can trust it.
    """
    import torch
    import triton

    from .. import __version__ as autotune_version
    from ..storage import disk_entries
    from ..storage.entries import kernel_dirname, record_json

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
        member = f"{RECORDS_PREFIX}/{kernel_dirname(rec.kernel, rec.kernel_id)}/{e.path.name}"
        members[member] = record_json(rec)
        manifest.records.append(ArchiveRecord(path=member, kernel=rec.kernel, key=list(rec.key),
                                              dtypes=list(rec.dtypes), device=rec.device, winner=dict(rec.winner),
                                              timestamp=rec.timestamp, triton_version=rec.triton_version))
    for kernel, d, metadata, files in binaries:
        for f in files:
            members[f"{TRITON_PREFIX}/{d.name}/{f}"] = (d / f).read_bytes()
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
            manifest_json = codec.to_json(manifest, indent=1)
            first = [(MANIFEST, manifest_json)]            # the manifest first: an import reads it before the rest
            if sign_key is not None:
                first.append((SIGNATURE, sign(manifest_json, read_key(sign_key))))
            for name, data in first + sorted(members.items()):
                info = tarfile.TarInfo(name)
                info.size, info.mtime, info.mode = len(data), now, 0o644
                tar.addfile(info, io.BytesIO(data))
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    return manifest


def _parse_manifest(data: bytes) -> ArchiveManifest:
    try:
        manifest = codec.from_json(data, ArchiveManifest)
    except codec.DecodeError as exc:   # not JSON, or not a manifest (ValidationError is a DecodeError)
        raise ArchiveError(f"invalid {MANIFEST} ({codec.error_text(exc)})") from None
    if manifest.format != ARCHIVE_FORMAT or manifest.format_version > ARCHIVE_FORMAT_VERSION:
        raise ArchiveError(f"archive format {manifest.format!r} v{manifest.format_version}; this autotune reads "
                           f"{ARCHIVE_FORMAT} up to v{ARCHIVE_FORMAT_VERSION}: upgrade autotune")
    return manifest


def import_archive(path: Union[str, os.PathLike], *, force: bool = False,
                   cache_dir: Union[str, os.PathLike, None] = None,
                   triton_cache_dir: Union[str, os.PathLike, None] = None,
                   verify_key: Union[str, os.PathLike, bytes, None] = None,
                   limits: ArchiveLimits = ArchiveLimits()) -> ImportReport:
    """Install an archive made by `export_archive`: winners into the tuning cache, binaries into Triton's cache.

    An archive is code from whoever built it. Every member is checked before anything is written (see
    `autotune.aot.archive_checks`: the manifest first, members streamed under `limits`, listed with their
    checksums, only Triton compile artifacts); a failed check changes nothing. With `verify_key` (a key file or
    the secret's bytes) an unsigned or wrongly signed archive is refused. An archive made with another Triton
    version is refused unless `force=True` (then a warning). A record never replaces a newer entry of the same
    (kernel, device, key, dtypes): the newer timestamp wins and the skip is reported.
    """
    import triton

    key = read_key(verify_key) if verify_key is not None else None
    manifest, staged = stage(path, parse_manifest=_parse_manifest, limits=limits, verify_key=key)
    try:
        report = ImportReport(manifest=manifest)
        local = str(triton.__version__)
        if manifest.triton_version != local:
            message = (f"{path} was made with Triton {manifest.triton_version}, this is Triton {local}: its records "
                       f"would be tuned again and its binaries never found (Triton's cache key includes its version)")
            if not force:
                raise ArchiveError(message + "; re-export with the same Triton, or pass force=True (--force) to "
                                   "import anyway")
            report.warnings.append(message)
            warnings.warn(message, stacklevel=2)
        records = _checked_records(manifest, staged, report)
        binaries = _checked_binaries(manifest, staged, report)
        _install_records(records, staged, Path(cache_dir) if cache_dir is not None else None, report)
        triton_dir = Path(triton_cache_dir) if triton_cache_dir is not None else Path(triton_compile.triton_cache_dir())
        _install_binaries(binaries, staged, triton_dir, report)
        return report
    finally:
        staged.close()


def _checked_records(manifest: ArchiveManifest, staged: Any, report: ImportReport) -> list[tuple[str, Any]]:
    """(member, record) of every record that validates (JSON only, bounded, the cache's own checks); the others
    are reported as skipped. Reads only the staged copies (a record path that is not a staged member under
    records/ refuses the archive); writes nothing."""
    from ..errors import CacheEntryError
    from ..storage import load_record

    out = []
    for rec_info in manifest.records:
        if not rec_info.path.startswith(f"{RECORDS_PREFIX}/") or rec_info.path not in staged.names:
            # Only a checked, staged member is read: never a path outside the archive (absolute, '..').
            raise ArchiveError(f"refused: the manifest lists the record {rec_info.path!r}, which is not a member of "
                               f"the archive under {RECORDS_PREFIX}/; nothing outside the archive is read, and "
                               "nothing was imported")
        try:
            out.append((rec_info.path, load_record(staged.path(rec_info.path))))
        except (OSError, CacheEntryError) as exc:
            report.records_skipped.append((rec_info.path, f"not a valid record ({str(exc).splitlines()[0]})"))
    return out


def _checked_binaries(manifest: ArchiveManifest, staged: Any, report: ImportReport) -> list[ArchiveBinary]:
    """The compiled kernels whose names are safe and whose every file is a staged Triton artifact; an archive
    that lists a file it does not hold is refused before anything is written."""
    out = []
    for binary in manifest.binaries:
        if not SAFE_NAME.match(binary.dir) or not SAFE_NAME.match(binary.kernel):
            report.binaries_skipped.append((binary.dir, "unsafe directory or kernel name"))
            continue
        for name in binary.files:
            member = f"{TRITON_PREFIX}/{binary.dir}/{name}"
            if not ARTIFACT_NAME.match(name):
                raise ArchiveError(f"refused: compiled kernel {binary.dir} lists {name!r}, which is not a Triton "
                                   "compile artifact; nothing was imported")
            if member not in staged.names:
                raise ArchiveError(f"the manifest lists {member!r} for {binary.kernel} but the archive does not hold "
                                   "it; nothing was imported")
        out.append(binary)
    return out


def _install_records(records: list[tuple[str, Any]], staged: Any, root: Optional[Path],
                     report: ImportReport) -> None:
    """Write each record through the disk store (under the entry's lock), unless the entry there is newer."""
    from ..errors import CacheEntryError
    from ..storage import DiskCache, EntryRef, load_record

    store = DiskCache(root)
    for member, record in records:
        entry = EntryRef.of(record)
        dest = store.path(entry)
        lease = store.lock(entry, timeout_s=None)
        if lease is None:
            report.records_skipped.append((member, f"cannot lock {dest} (warned)"))
            continue
        try:
            try:
                existing = load_record(dest)
            except (OSError, CacheEntryError):
                existing = None  # absent, corrupt or unreadable: replaced by a good record
            if existing is not None and existing.timestamp > record.timestamp:
                report.records_skipped.append((member, f"the entry at {dest} is newer "
                                               f"({_when(existing.timestamp)} > {_when(record.timestamp)}); kept it"))
                continue
            if existing is not None and existing.timestamp == record.timestamp and existing.winner == record.winner:
                report.records_skipped.append((member, f"already present at {dest}"))
                continue
            if store.put(entry, record):
                report.records_imported.append(str(dest))
                differs = _made_for_another(existing, record)
                if differs:   # newer wins, but say so: the older entry may be the one the code here matches
                    report.records_replaced.append((str(dest), f"the older entry there was tuned for {differs}"))
            else:
                report.records_skipped.append((member, f"could not write {dest} (warned)"))
        finally:
            lease.release()


def _made_for_another(existing: Any, record: Any) -> str:
    """What differs between a replaced entry and the record that replaces it ('' when nothing does)."""
    if existing is None:
        return ""
    what = [name for name, attr in (("another kernel source", "source_hash"), ("another space", "space_checksum"),
                                    ("another Triton", "triton_version"))
            if getattr(existing, attr) != getattr(record, attr)]
    return ", ".join(what)


def _install_binaries(binaries: list[ArchiveBinary], staged: Any, triton_dir: Path, report: ImportReport) -> None:
    for binary in binaries:
        dest = triton_dir / binary.dir
        group = dest / f"__grp__{binary.kernel}.json"
        if group.is_file() and all((dest / f).is_file() for f in binary.files):
            report.binaries_skipped.append((f"{binary.dir} ({binary.kernel}, {binary.target})",
                                            "already in Triton's cache"))
            continue
        dest.mkdir(parents=True, exist_ok=True)
        for name in binary.files:
            _write_file(dest / name, staged.read(f"{TRITON_PREFIX}/{binary.dir}/{name}"))
        # Triton's group file lists absolute paths: rewrite it for this machine's cache directory, last.
        children = {name: str(dest / name) for name in binary.files}
        _write_file(group, json.dumps({"child_paths": children}).encode("utf-8"))
        report.binaries_imported.append(f"{binary.dir} ({binary.kernel}, {binary.target})")


def _write_file(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _when(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))


# ================================================================================================ command line
