"""Reading an archive as untrusted input: an archive is code (compiled kernels) from whoever built it.

Every member is checked before anything is installed: the manifest comes first and is read alone, members are
streamed one at a time into a private staging directory under caps on each member, on the total and on their
number (so a small archive of highly compressible members cannot exhaust memory or disk), each member must be
listed in the manifest with its size and sha256, and only the artifact kinds a Triton compile produces are
accepted (never a shared library or anything executable). Extension headers (a GNU long name, a pax header),
which tarfile reads whole before the member they describe, are capped as their 512-byte header is parsed,
before their data is read. With a key, the manifest must carry a valid
HMAC-SHA256 signature (`manifest.sig`), so a deployment can trust what it installs.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import os
import re
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any

from ..errors import ArchiveError

MANIFEST = "manifest.json"
SIGNATURE = "manifest.sig"
RECORDS_PREFIX = "records"
TRITON_PREFIX = "triton"
SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,254}$")
# What a Triton compile writes into its cache: binaries (cubin, hsaco), assembly and IR text, JSON metadata.
ARTIFACT_NAME = re.compile(
    r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,200}\.(cubin|ptx|hsaco|amdgcn|json|ttir|ttgir|llir|"
    r"source|ttsharedir)$"
)

MAX_MANIFEST_BYTES = 16 << 20
MAX_KEY_FILE_BYTES = 4096  # a secret is tens of bytes: a larger "key file" is the wrong file
DEFAULT_MAX_MEMBER_BYTES = 256 << 20
DEFAULT_MAX_TOTAL_BYTES = 2 << 30
DEFAULT_MAX_MEMBERS = 100_000
# An autotune archive's names are short (records/<kernel>.<hash>/<entry>.json, triton/<hash>/<file>): its
# extension headers, if any, are a few hundred bytes.
DEFAULT_MAX_HEADER_BYTES = 64 << 10
_CHUNK = 1 << 20
_EXTENSION_HEADERS = {
    tarfile.GNUTYPE_LONGNAME: "GNU long-name",
    tarfile.GNUTYPE_LONGLINK: "GNU long-link",
    tarfile.XHDTYPE: "pax",
    tarfile.XGLTYPE: "pax global",
    tarfile.SOLARIS_XHDTYPE: "pax (Solaris)",
}


@dataclass(frozen=True)
class ArchiveLimits:
    """Caps on what an import reads: each member, all members together, how many there are, and each tar
    extension header (long name or pax data, which tarfile holds in memory whole)."""

    max_member_bytes: int = DEFAULT_MAX_MEMBER_BYTES
    max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES
    max_members: int = DEFAULT_MAX_MEMBERS
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES


@dataclass
class StagedArchive:
    """An archive whose members all passed the checks, staged on disk: `path(name)` is a member's file."""

    manifest_bytes: bytes
    directory: Path
    names: set[str] = field(default_factory=set)

    def path(self, name: str) -> Path:
        """Where member `name` is (or will be) staged; `name` must be a checked member name."""
        return self.directory / name

    def read(self, name: str) -> bytes:
        """The bytes of a staged member; a name that is not one is refused (never a file outside the archive)."""
        if name not in self.names:
            raise ArchiveError(f"refused: {name!r} is not a member of the archive; nothing was imported")
        return self.path(name).read_bytes()

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def read_key(key: str | os.PathLike | bytes) -> bytes:
    """The shared secret: raw bytes, or the contents of a key file (surrounding whitespace dropped)."""
    secret = key if isinstance(key, bytes) else _key_file_bytes(Path(os.fspath(key))).strip()
    if len(secret) < 16:
        raise ArchiveError(
            "the signing key is shorter than 16 bytes; use a random secret, e.g. "
            "`python -c 'import secrets; print(secrets.token_hex(32))' > archive.key`"
        )
    return secret


def _key_file_bytes(path: Path) -> bytes:
    """The bytes of a key file, read only from a small regular file: `/dev/zero`, a FIFO (whose open would wait
    for a writer) or a large file given as the key is refused before reading it."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise ArchiveError(f"cannot read the key file {path} ({exc.strerror or exc})") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_KEY_FILE_BYTES:
            what = "not a regular file" if not stat.S_ISREG(st.st_mode) else f"{st.st_size} bytes"
            raise ArchiveError(
                f"the key file {path} is {what}; a key file is a small regular file (up to {MAX_KEY_FILE_BYTES} "
                "bytes) holding the secret, e.g. made by `python -c 'import secrets; print(secrets.token_hex(32))' "
                "> archive.key`"
            )
        return fh.read(MAX_KEY_FILE_BYTES + 1)[:MAX_KEY_FILE_BYTES]


def sign(manifest_bytes: bytes, key: bytes) -> bytes:
    """The `manifest.sig` member: the hex HMAC-SHA256 of the manifest's bytes."""
    return hmac.new(key, manifest_bytes, hashlib.sha256).hexdigest().encode("ascii")


def capped_tarinfo(max_header_bytes: int) -> type[tarfile.TarInfo]:
    """A TarInfo class for `tarfile.open(..., tarinfo=)` that refuses, once each 512-byte header is parsed and
    before anything after it is read, an extension header (GNU long name / long link, pax) whose data is over
    `max_header_bytes`, and a GNU sparse file. Why here: tarfile reads an extension header's data whole into
    memory, and a sparse file's chain of extension blocks, before `check_member` sees the member they describe;
    a 0.5 MB .tar.gz can declare a 512 MiB long name.

    The hook is `_proc_member`, which tarfile calls on every parsed header (the first of a member and each one
    after an extension header) before its `_proc_*` method reads what follows, in every Python 3. Not
    `frombuf`: since the security fix gh-143933 (in later patch releases and in distributions' backports, such
    as a 3.12.3) tarfile parses headers with a private `_frombuf`, never calling an overridden one."""

    class CappedTarInfo(tarfile.TarInfo):
        def _proc_member(self, tar: tarfile.TarFile) -> tarfile.TarInfo:
            kind = _EXTENSION_HEADERS.get(self.type)
            if kind is not None and self.size > max_header_bytes:
                raise ArchiveError(
                    f"unsafe archive: a {kind} extension header of {self.size} bytes, over the cap "
                    f"of {max_header_bytes} bytes (max_header_bytes); it would be read whole into "
                    "memory, and an autotune archive's names are short: refusing it before reading"
                )
            if self.type == tarfile.GNUTYPE_SPARSE:
                raise ArchiveError(
                    f"unsafe archive: member {self.name!r} is a GNU sparse file; an autotune archive "
                    "holds only regular files"
                )
            return super()._proc_member(tar)  # type: ignore[misc]  # not in typeshed: a private hook

        def _proc_gnusparse_10(self, next: tarfile.TarInfo, pax_headers: dict, tar: tarfile.TarFile) -> None:
            # a pax header naming GNU sparse format 1.0: tarfile would read the member's sparse map, as many
            # numbers as its first line says, from the stream before any member check
            raise ArchiveError(
                f"unsafe archive: member {next.name!r} is a GNU sparse file (format 1.0); an autotune archive "
                "holds only regular files"
            )

    return CappedTarInfo


def check_member(member: tarfile.TarInfo, limits: ArchiveLimits) -> PurePosixPath:
    """Refuse anything but a regular file at a safe relative path in the archive's known folders, under the
    size cap; a compiled-kernel member must be an artifact kind a Triton compile produces."""
    name = member.name
    path = PurePosixPath(name)
    if member.isdir():
        raise ArchiveError(
            f"not an autotune archive as made: member {name!r} is a directory entry; an archive from "
            "`autotune export` lists files only (repacking it with tar adds directories): use the "
            "archive as exported, or export it again"
        )
    if not member.isreg() or member.sparse is not None:
        raise ArchiveError(
            f"unsafe archive: member {name!r} is not a regular file (links, devices and sparse files are refused)"
        )
    if (
        name.startswith(("/", "\\"))
        or path.is_absolute()
        or re.match(r"^[A-Za-z]:", name)
        or ".." in path.parts
        or "\\" in name
    ):
        raise ArchiveError(f"unsafe archive: member {name!r} has an absolute path or '..'")
    if member.size > limits.max_member_bytes:
        raise ArchiveError(
            f"archive member {name!r} is {member.size} bytes, over the cap of "
            f"{limits.max_member_bytes} bytes per member (max_member_bytes)"
        )
    data_filter = getattr(tarfile, "data_filter", None)
    if data_filter is not None:  # Python's own 'data' extraction filter, as a second opinion
        try:
            data_filter(member, tempfile.gettempdir())
        except tarfile.FilterError as exc:
            raise ArchiveError(f"unsafe archive: member {name!r} ({exc})") from None
    parts = path.parts
    if name in (MANIFEST, SIGNATURE):
        return path
    if (
        len(parts) == 3
        and parts[0] == RECORDS_PREFIX
        and all(SAFE_NAME.match(p) for p in parts[1:])
        and parts[2].endswith(".json")
    ):
        return path
    if len(parts) == 3 and parts[0] == TRITON_PREFIX and SAFE_NAME.match(parts[1]):
        if not ARTIFACT_NAME.match(parts[2]):
            raise ArchiveError(
                f"refused archive member {name!r}: a compiled kernel's files are Triton compile "
                "artifacts (.cubin, .ptx, .hsaco, .amdgcn, .json, IR text); a shared library or any "
                "other file is never installed"
            )
        return path
    raise ArchiveError(
        f"unexpected archive member {name!r}: an autotune archive holds {MANIFEST}, "
        f"{RECORDS_PREFIX}/<kernel>/<entry>.json and {TRITON_PREFIX}/<entry>/<file>"
    )


def stage(
    path: str | os.PathLike,
    *,
    parse_manifest: Callable[[bytes], Any],
    limits: ArchiveLimits = ArchiveLimits(),
    verify_key: bytes | None = None,
) -> tuple[Any, StagedArchive]:
    """Stream the archive at `path` into a staging directory, checking everything; return (the manifest as
    `parse_manifest(bytes)` returns it, the staged members). Raises ArchiveError, with nothing staged left
    behind, at the first problem. The manifest must be the first member (as `export_archive` writes it)."""
    try:
        staging = Path(tempfile.mkdtemp(prefix="autotune-import-"))
    except OSError as exc:
        raise _staging_failed(Path(tempfile.gettempdir()), exc) from None
    staged = StagedArchive(b"", staging)
    try:
        manifest = _stream(Path(path), staged, limits, verify_key, parse_manifest)
    except BaseException:
        staged.close()
        raise
    return manifest, staged


def _stream(
    path: Path,
    staged: StagedArchive,
    limits: ArchiveLimits,
    verify_key: bytes | None,
    parse_manifest: Callable[[bytes], Any],
) -> Any:
    manifest = None
    listed: dict[str, tuple[int, str]] = {}
    total = 0
    try:
        with tarfile.open(path, "r|*", tarinfo=capped_tarinfo(limits.max_header_bytes)) as tar:
            for count, member in enumerate(tar, start=1):
                if count > limits.max_members:
                    raise ArchiveError(f"{path}: more than {limits.max_members} members (max_members)")
                if count == 2 and verify_key is not None and member.name != SIGNATURE:
                    raise _unsigned(path)  # before anything is staged: export writes the signature second
                check_member(member, limits)
                if count == 1:
                    manifest = _read_manifest(path, tar, member, staged, parse_manifest)
                    listed = {f.path: (f.size, f.sha256) for f in manifest.files}
                    continue
                if member.name in staged.names or member.name == MANIFEST:
                    raise ArchiveError(f"archive member {member.name!r} appears twice")
                if member.name == SIGNATURE:
                    _check_signature(path, _reader(tar, member).read(4096), staged.manifest_bytes, verify_key)
                    staged.names.add(SIGNATURE)
                    continue
                total = _stage_listed_member(path, tar, member, staged, listed, limits, total)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise ArchiveError(f"{path}: not a readable .tar.gz archive ({exc.__class__.__name__}: {exc})") from None
    except RecursionError:  # tarfile recurses once per extension header in a row
        raise ArchiveError(f"{path}: a chain of thousands of tar extension headers; not an autotune archive") from None
    if manifest is None:
        raise ArchiveError(f"{path}: no {MANIFEST}; not an autotune archive (make one with `autotune export`)")
    if verify_key is not None and SIGNATURE not in staged.names:
        raise _unsigned(path)
    missing = sorted(set(listed) - staged.names)
    if missing:
        raise ArchiveError(
            f"{path}: the manifest lists members that are missing: {missing[:5]}; the archive is "
            "truncated or was altered; nothing was imported"
        )
    return manifest


def _read_manifest(
    path: Path,
    tar: tarfile.TarFile,
    member: tarfile.TarInfo,
    staged: StagedArchive,
    parse_manifest: Callable[[bytes], Any],
) -> Any:
    if member.name != MANIFEST:
        raise ArchiveError(
            f"{path}: the first member is {member.name!r}, not {MANIFEST}; not an "
            "autotune archive (make one with `autotune export`)"
        )
    if member.size > MAX_MANIFEST_BYTES:
        raise ArchiveError(f"{path}: {MANIFEST} is {member.size} bytes, over {MAX_MANIFEST_BYTES}")
    staged.manifest_bytes = _reader(tar, member).read()
    return parse_manifest(staged.manifest_bytes)


def _stage_listed_member(
    path: Path,
    tar: tarfile.TarFile,
    member: tarfile.TarInfo,
    staged: StagedArchive,
    listed: dict[str, tuple[int, str]],
    limits: ArchiveLimits,
    total: int,
) -> int:
    """Copy `member` into `staged` if the manifest lists it with this size and checksum and the archive's total
    stays under its cap; the total with it."""
    expected = listed.get(member.name)
    if expected is None:
        raise ArchiveError(f"{path}: member {member.name!r} is not listed in the manifest")
    if member.size != expected[0]:
        raise ArchiveError(
            f"{path}: member {member.name!r} does not match its checksum ({member.size} "
            f"bytes, the manifest says {expected[0]}); the archive is corrupt"
        )
    total += member.size
    if total > limits.max_total_bytes:
        raise ArchiveError(
            f"{path}: its members add up to over {limits.max_total_bytes} bytes, the cap "
            "on an archive's total size (max_total_bytes)"
        )
    _copy_checked(tar, member, staged.path(member.name), expected[1], path)
    staged.names.add(member.name)
    return total


def _staging_failed(directory: Path, exc: OSError) -> ArchiveError:
    """A local write failure while staging (a full disk, a file-size limit): the staging directory's, not the
    archive's fault."""
    return ArchiveError(
        f"cannot stage the archive's members in the staging directory {directory} ({exc.strerror or exc}): a "
        "local write failure, not a problem of the archive; free space there or set TMPDIR to a directory with "
        "room; nothing was imported"
    )


def _unsigned(path: Path) -> ArchiveError:
    return ArchiveError(
        f"{path} is not signed, and a key was given to verify it: refusing it (sign archives "
        "with `autotune export --sign KEYFILE`)"
    )


def _check_signature(path: Path, signature: bytes, manifest_bytes: bytes, key: bytes | None) -> None:
    if key is None:
        return  # no key to check it with: the signature says nothing here
    if not hmac.compare_digest(signature.strip(), sign(manifest_bytes, key)):
        raise ArchiveError(
            f"{path}: its signature does not match (a different key, or the manifest was altered); refusing it"
        )


def _reader(tar: tarfile.TarFile, member: tarfile.TarInfo) -> IO[bytes]:
    """The data of a member `check_member` passed: a regular file, for which `extractfile` never returns None."""
    source = tar.extractfile(member)
    assert source is not None, f"{member.name!r} is not a regular file"  # check_member refused it already
    return source


def _copy_checked(tar: tarfile.TarFile, member: tarfile.TarInfo, dest: Path, sha256: str, path: Path) -> None:
    """Copy one member to `dest` in bounded chunks, checking its sha256 against the manifest. A write error is
    the staging directory's (said so, naming it); a read error stays the archive's."""
    source = _reader(tar, member)
    digest = hashlib.sha256()
    staging = dest.parents[len(PurePosixPath(member.name).parts) - 1]  # the import's own, under $TMPDIR
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        out = open(dest, "wb", buffering=0)  # unbuffered: every write error surfaces at its write, none at close
    except OSError as exc:
        raise _staging_failed(staging, exc) from None
    with out:
        remaining = member.size
        while remaining > 0:
            chunk = source.read(min(_CHUNK, remaining))  # a read error here is the archive's
            if not chunk:
                break
            digest.update(chunk)
            _write_all(out, chunk, staging)
            remaining -= len(chunk)
    if remaining or digest.hexdigest() != sha256:
        raise ArchiveError(f"{path}: member {member.name!r} does not match its checksum; the archive is corrupt")


def _write_all(out: IO[bytes], chunk: bytes, staging: Path) -> None:
    """Write all of `chunk` to the unbuffered `out`; a write error is the staging directory's."""
    view = memoryview(chunk)
    try:
        while view:
            written = out.write(view)
            if not written:  # a regular file takes at least a byte, or raises
                raise OSError(errno.EIO, "the write made no progress")
            view = view[written:]
    except OSError as exc:
        raise _staging_failed(staging, exc) from None
