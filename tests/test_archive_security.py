"""Archives are a way in (#12 items 17-20): only Triton artifacts, signatures, caps on size, and an import that
either installs everything or changes nothing. Real archives exported from a real precompile."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import pytest
from test_precompile import (
    exported,  # noqa: F401  (the fixture: a tuned, precompiled, exported vector add)
    tuned_add,
)

from autotune.aot import import_archive
from autotune.aot.archive import export_archive
from autotune.aot.archive_checks import ArchiveLimits, read_key, sign
from autotune.errors import ArchiveError


def _snapshot(*dirs: Path) -> dict:
    """Every file under the given directories with its bytes: what an import may have changed."""
    out = {}
    for d in dirs:
        if d.exists():
            out.update({str(p): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()})
    return out


def _rebuild(src: Path, dst: Path, *, extra: dict | None = None, drop: str | None = None, manifest_edit=None) -> None:
    """Copy an archive, adding `extra` members (listed in the manifest with true checksums, as an attacker
    who rebuilds the manifest would), dropping a member, or editing the manifest."""
    with tarfile.open(src) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    manifest = json.loads(members.pop("manifest.json"))
    for name, data in (extra or {}).items():
        members[name] = data
        manifest["files"].append({"path": name, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)})
        if name.startswith("triton/"):
            _, d, f = name.split("/")
            for b in manifest["binaries"]:
                if b["dir"] == d:
                    b["files"].append(f)
    if drop is not None:
        members.pop(drop)
    if manifest_edit is not None:
        manifest_edit(manifest)
    with tarfile.open(dst, "w:gz") as tar:
        for name, data in [("manifest.json", json.dumps(manifest).encode())] + sorted(members.items()):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _dirs(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "dest", tmp_path / "dest-triton"


def test_a_shared_library_planted_in_a_compiled_kernel_is_refused_and_nothing_written(exported, tmp_path):
    archive, manifest, _ = exported
    bad = tmp_path / "planted.tar.gz"
    _rebuild(archive, bad, extra={f"triton/{manifest.binaries[0].dir}/cuda_utils.so": b"\x7fELF evil"})
    dest, triton_dest = _dirs(tmp_path)
    with pytest.raises(ArchiveError, match="shared library or any other file is never installed"):
        import_archive(bad, cache_dir=dest, triton_cache_dir=triton_dest)
    assert _snapshot(dest, triton_dest) == {}


def test_signed_archive_imports_and_unsigned_tampered_or_wrong_key_is_refused(exported, tmp_path):
    key, other = tmp_path / "deploy.key", tmp_path / "other.key"
    key.write_text("a" * 64 + "\n")
    other.write_text("b" * 64)
    signed = tmp_path / "signed.tar.gz"
    export_archive(signed, kernels=[tuned_add], sign_key=key)
    dest, triton_dest = _dirs(tmp_path)
    report = import_archive(signed, cache_dir=dest, triton_cache_dir=triton_dest, verify_key=key)
    assert len(report.records_imported) == 1 and report.warnings == []
    unchecked = import_archive(signed, cache_dir=tmp_path / "d1", triton_cache_dir=tmp_path / "t1")
    assert len(unchecked.records_imported) == 1  # installed, with a note that nobody checked who signed it
    assert [w for w in unchecked.warnings if "is signed but its signature was not checked" in w] != []
    assert "--verify KEYFILE" in str(unchecked)

    unsigned, _, _ = exported
    with pytest.raises(ArchiveError, match="not signed"):
        import_archive(unsigned, cache_dir=tmp_path / "d2", triton_cache_dir=tmp_path / "t2", verify_key=key)
    with pytest.raises(ArchiveError, match="signature does not match"):
        import_archive(signed, cache_dir=tmp_path / "d3", triton_cache_dir=tmp_path / "t3", verify_key=other)
    tampered = tmp_path / "tampered.tar.gz"
    with tarfile.open(signed) as tar:
        members = [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()]
    with tarfile.open(tampered, "w:gz") as tar:
        for name, data in members:
            if name == "manifest.json":
                data = data.replace(b'"kernels": [', b'"kernels": ["x", ', 1)
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(ArchiveError, match="signature does not match"):
        import_archive(tampered, cache_dir=tmp_path / "d4", triton_cache_dir=tmp_path / "t4", verify_key=key)
    assert _snapshot(tmp_path / "d2", tmp_path / "d3", tmp_path / "d4", tmp_path / "t2") == {}


def test_a_short_key_is_refused_with_how_to_make_one(exported, tmp_path):
    weak = tmp_path / "weak.key"
    weak.write_text("secret")
    with pytest.raises(ArchiveError, match="shorter than 16 bytes.*token_hex"):
        export_archive(tmp_path / "a.tar.gz", kernels=[tuned_add], sign_key=weak)


def test_a_compressible_bomb_is_refused_at_the_caps_before_it_is_read(exported, tmp_path):
    archive, manifest, _ = exported
    bomb = tmp_path / "bomb.tar.gz"
    _rebuild(
        archive, bomb, extra={f"triton/{manifest.binaries[0].dir}/pad{i}.ptx": b"\0" * (4 << 20) for i in range(4)}
    )
    assert bomb.stat().st_size < (1 << 20)  # 16 MiB of members in well under 1 MiB
    dest, triton_dest = _dirs(tmp_path)
    with pytest.raises(ArchiveError, match=r"over the cap of 1048576 bytes per member \(max_member_bytes\)"):
        import_archive(
            bomb, cache_dir=dest, triton_cache_dir=triton_dest, limits=ArchiveLimits(max_member_bytes=1 << 20)
        )
    with pytest.raises(ArchiveError, match=r"over 8388608 bytes, the cap on an archive's total size"):
        import_archive(
            bomb, cache_dir=dest, triton_cache_dir=triton_dest, limits=ArchiveLimits(max_total_bytes=8 << 20)
        )
    with pytest.raises(ArchiveError, match=r"more than 3 members \(max_members\)"):
        import_archive(bomb, cache_dir=dest, triton_cache_dir=triton_dest, limits=ArchiveLimits(max_members=3))
    assert _snapshot(dest, triton_dest) == {}


def test_a_manifest_listing_a_missing_member_changes_nothing(exported, tmp_path):
    archive, manifest, _ = exported
    dest, triton_dest = _dirs(tmp_path)
    import_archive(archive, cache_dir=dest, triton_cache_dir=triton_dest)  # a first, good import
    before = _snapshot(dest, triton_dest)
    newer = tmp_path / "newer.tar.gz"

    def bump(m):  # records that would replace the installed ones
        for r in m["records"]:
            r["timestamp"] += 1000

    _rebuild(archive, newer, drop=manifest.records[0].path, manifest_edit=bump)
    with pytest.raises(ArchiveError, match="lists members that are missing.*nothing was imported"):
        import_archive(newer, cache_dir=dest, triton_cache_dir=triton_dest)
    assert _snapshot(dest, triton_dest) == before


def _extension_header_archive(path: Path, kind: bytes, size: int, data: bytes = b"") -> None:
    """A .tar.gz whose first header is a tar extension header (GNU long name, pax) declaring `size` bytes of
    data, of which only `data` follows (then a manifest member)."""
    header = tarfile.TarInfo("././@LongLink")
    header.type, header.size = kind, size
    manifest = tarfile.TarInfo("manifest.json")
    manifest.size = 2
    with gzip.open(path, "wb") as out:
        out.write(header.tobuf(tarfile.GNU_FORMAT))
        out.write(data + b"\0" * (-len(data) % tarfile.BLOCKSIZE))
        out.write(manifest.tobuf(tarfile.GNU_FORMAT) + b"{}".ljust(tarfile.BLOCKSIZE, b"\0") + b"\0" * 1024)


@pytest.mark.parametrize("kind", [tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE, tarfile.XGLTYPE])
def test_an_oversized_extension_header_is_refused_before_it_is_read(tmp_path, kind):
    dest, triton_dest = _dirs(tmp_path)
    # Declares 512 MiB of long name / pax data, holds none: refused from its 512-byte header alone (tarfile
    # would otherwise read the declared size whole into memory before any member check).
    declared = tmp_path / "declared.tar.gz"
    _extension_header_archive(declared, kind, 512 << 20)
    with pytest.raises(
        ArchiveError,
        match=r"extension header of 536870912 bytes, over the cap of 65536 bytes "
        r"\(max_header_bytes\).*refusing it before reading",
    ):
        import_archive(declared, cache_dir=dest, triton_cache_dir=triton_dest)
    # A real 64 KiB + 1 long name: over the default cap; under a raised cap it is read (and then refused as
    # a member name no autotune archive has).
    name = b"records/" + b"a" * (64 << 10) + b".json\0"
    real = tmp_path / "real.tar.gz"
    _extension_header_archive(real, kind, len(name), name)
    with pytest.raises(ArchiveError, match=rf"extension header of {len(name)} bytes, over the cap of 65536"):
        import_archive(real, cache_dir=dest, triton_cache_dir=triton_dest)
    with pytest.raises(ArchiveError, match=rf"over the cap of {len(name) - 1} bytes"):
        import_archive(
            real, cache_dir=dest, triton_cache_dir=triton_dest, limits=ArchiveLimits(max_header_bytes=len(name) - 1)
        )
    with pytest.raises(ArchiveError) as raised:
        import_archive(
            real, cache_dir=dest, triton_cache_dir=triton_dest, limits=ArchiveLimits(max_header_bytes=len(name))
        )
    assert "extension header" not in str(raised.value)
    assert _snapshot(dest, triton_dest) == {}


def test_a_sparse_member_is_refused(tmp_path):
    sparse = tarfile.TarInfo("manifest.json")
    sparse.type, sparse.size = tarfile.GNUTYPE_SPARSE, 0
    archive = tmp_path / "sparse.tar.gz"
    with gzip.open(archive, "wb") as out:
        out.write(sparse.tobuf(tarfile.GNU_FORMAT) + b"\0" * 1024)
    with pytest.raises(ArchiveError, match="GNU sparse file"):
        import_archive(archive, cache_dir=tmp_path / "d", triton_cache_dir=tmp_path / "t")


def test_a_pax_header_naming_gnu_sparse_1_0_is_refused_before_its_map_is_read(tmp_path):
    """Sparse format 1.0 is said in a small pax header; the member after it is a regular file whose data tarfile
    reads as the sparse map (as many numbers as its first line says) before any member check: refused first."""
    fields = 200_000
    data = b"%d\n" % fields + b"0\n" * (2 * fields)
    archive = tmp_path / "sparse10.tar.gz"
    with tarfile.open(archive, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        info.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0"}
        tar.addfile(info, io.BytesIO(data))
    with pytest.raises(ArchiveError, match=r"member 'manifest.json' is a GNU sparse file \(format 1.0\)"):
        import_archive(archive, cache_dir=tmp_path / "d", triton_cache_dir=tmp_path / "t")


def test_a_repacked_archive_with_directory_entries_is_refused_saying_so(exported, tmp_path):
    """`tar czf` over extracted folders adds directory members: refused (nothing written) with that reason, not
    as "links, devices and sparse files"."""
    archive, _, _ = exported
    with tarfile.open(archive) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    repacked = tmp_path / "repacked.tar.gz"
    with tarfile.open(repacked, "w:gz") as tar:
        tar.addfile(*_member(members[0]))  # the manifest first, as export writes it
        folder = tarfile.TarInfo("records")
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)
        for m in members[1:]:
            tar.addfile(*_member(m))
    dest, triton_dest = _dirs(tmp_path)
    with pytest.raises(
        ArchiveError,
        match=r"member 'records' is a directory entry; an archive from `autotune export` "
        r"lists files only",
    ):
        import_archive(repacked, cache_dir=dest, triton_cache_dir=triton_dest)
    assert _snapshot(dest, triton_dest) == {}


def _member(pair: tuple) -> tuple:
    info, data = pair
    return info, io.BytesIO(data)


@pytest.mark.parametrize("where", ["absolute", "dotdot", "not-a-member"])
def test_a_record_path_outside_the_archive_is_refused_and_never_read(exported, tmp_path, where):
    """A manifest whose record `path` names a file on this machine (absolute, or '../' from the staging
    directory) or a member it does not hold: refused, and the file outside is never read or installed."""
    import tempfile

    archive, manifest, _ = exported
    record_member = manifest.records[0].path
    with tarfile.open(archive) as tar:
        record = json.loads(tar.extractfile(record_member).read())
    record["timestamp"] += 10
    outside = tmp_path / "outside.json"  # a valid record, on disk, not in the archive
    outside.write_text(json.dumps(record))
    path = {
        "absolute": str(outside),
        "dotdot": "../" + os.path.relpath(outside, tempfile.gettempdir()),
        "not-a-member": "records/add_kernel.0/none.json",
    }[where]

    def point_outside(m):
        m["records"][0]["path"] = path
        m["files"] = [f for f in m["files"] if f["path"] != record_member]

    bad = tmp_path / "bad.tar.gz"
    _rebuild(archive, bad, drop=record_member, manifest_edit=point_outside)
    dest, triton_dest = _dirs(tmp_path)
    with pytest.raises(
        ArchiveError,
        match=r"lists the record .* not a member of the archive under records/.*"
        r"nothing was imported",
    ):
        import_archive(bad, cache_dir=dest, triton_cache_dir=triton_dest)
    assert _snapshot(dest, triton_dest) == {}


# ------------------------------------------------------------------------------ issue 40, items 8, 16, 17


def _edit_sha(manifest: dict) -> None:
    manifest["files"][0]["sha256"] = "0" * 64


def test_an_unsigned_archive_is_refused_before_any_member_is_staged(exported, tmp_path):
    """#40 item 16: with a key, the member after the manifest must be its signature; nothing else is read first
    (a member that does not match its checksum would otherwise be staged and reported before "not signed")."""
    archive, _, _ = exported
    bad = tmp_path / "unsigned-corrupt.tar.gz"
    _rebuild(archive, bad, manifest_edit=_edit_sha)
    key = tmp_path / "deploy.key"
    key.write_text("k" * 32)
    dest, triton_dest = _dirs(tmp_path)
    with pytest.raises(ArchiveError, match="is not signed"):
        import_archive(bad, cache_dir=dest, triton_cache_dir=triton_dest, verify_key=key)
    with pytest.raises(ArchiveError, match="does not match its checksum"):  # without a key: checked as before
        import_archive(bad, cache_dir=dest, triton_cache_dir=triton_dest)
    assert _snapshot(dest, triton_dest) == {}


def test_with_a_key_an_unsigned_archive_of_another_triton_is_refused_as_unsigned_and_a_signed_one_by_version(
    exported, tmp_path
):
    """With a key, the manifest's Triton version is not believed before the signature says who wrote it: an
    unsigned archive is refused as unsigned, whatever version it claims; a signed one of another Triton by version."""
    archive, _, _ = exported
    key = tmp_path / "deploy.key"
    key.write_text("k" * 32)
    unsigned = tmp_path / "unsigned-old.tar.gz"
    _rebuild(archive, unsigned, manifest_edit=lambda m: m.update(triton_version="0.0.1"))
    dest, triton_dest = _dirs(tmp_path)
    with pytest.raises(ArchiveError, match="is not signed"):
        import_archive(unsigned, cache_dir=dest, triton_cache_dir=triton_dest, verify_key=key)
    signed = tmp_path / "signed.tar.gz"
    export_archive(signed, kernels=[tuned_add], sign_key=key)
    with tarfile.open(signed) as tar:
        members = [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()]
    manifest = json.loads(dict(members)["manifest.json"])
    manifest["triton_version"] = "0.0.1"
    signed_old = tmp_path / "signed-old.tar.gz"
    manifest_bytes = json.dumps(manifest).encode()
    rest = [(n, d) for n, d in members if n not in ("manifest.json", "manifest.sig")]
    with tarfile.open(signed_old, "w:gz") as tar:  # signed by the deployment key, as an export would be
        signature = ("manifest.sig", sign(manifest_bytes, read_key(key)))
        for name, data in [("manifest.json", manifest_bytes), signature, *rest]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(ArchiveError, match="was made with Triton 0.0.1"):
        import_archive(signed_old, cache_dir=dest, triton_cache_dir=triton_dest, verify_key=key)
    assert _snapshot(dest, triton_dest) == {}


def test_an_unsafe_binary_directory_refuses_the_whole_archive(exported, tmp_path):
    """#40 item 17: the record is not installed beside a refused binary (a failed import changes nothing)."""
    archive, _, _ = exported

    def unsafe_dir(manifest: dict) -> None:
        manifest["binaries"][0]["dir"] = "../../outside"

    bad = tmp_path / "unsafe-dir.tar.gz"
    _rebuild(archive, bad, manifest_edit=unsafe_dir)
    dest, triton_dest = _dirs(tmp_path)
    with pytest.raises(ArchiveError, match="unsafe directory or kernel name.*nothing was imported"):
        import_archive(bad, cache_dir=dest, triton_cache_dir=triton_dest)
    assert _snapshot(dest, triton_dest) == {}


@pytest.mark.skipif(not os.path.exists("/dev/zero") or not hasattr(os, "mkfifo"), reason="needs /dev/zero, mkfifo")
def test_a_key_file_is_read_only_from_a_small_regular_file(tmp_path):
    """#40 item 8: /dev/zero would be read until MemoryError, a FIFO would wait for a writer forever."""
    import threading

    from autotune.aot.archive_checks import read_key

    fifo = tmp_path / "key.fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big.key"
    big.write_bytes(b"k" * (1 << 20))
    for path, why in ((fifo, "not a regular file"), (big, "1048576 bytes")):  # /dev/zero: the CLI test below
        outcome: dict = {}

        def read(path=path, outcome=outcome) -> None:
            try:
                read_key(path)
            except ArchiveError as exc:
                outcome["error"] = str(exc)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(60)  # generous: the read must end, not be fast
        assert not reader.is_alive(), f"reading the key file {path} did not return"
        assert why in outcome.get("error", ""), outcome
    good = tmp_path / "good.key"
    good.write_text("k" * 32 + "\n")
    assert read_key(good) == b"k" * 32


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_the_cli_refuses_dev_zero_as_a_key_in_one_line(tmp_path):
    """Run under a 2 GiB data limit: a regression reads /dev/zero until MemoryError, not until the machine's end."""
    import resource
    import subprocess
    import sys

    from test_archive_import import ROOT

    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_DATA, (2 << 30, 2 << 30))

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    for argv in (["import", "a.tar.gz", "--verify", "/dev/zero"], ["export", "x.tar.gz", "--sign", "/dev/zero"]):
        res = subprocess.run(
            [sys.executable, "-m", "autotune", *argv, "--cache-dir", str(tmp_path)],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            preexec_fn=limit_memory,
        )
        assert res.returncode == 2 and "not a regular file" in res.stderr, res.stderr
        assert len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_a_record_dated_years_ahead_is_not_imported_and_a_later_archive_is(exported, tmp_path):
    """#40 item 13: an archive stamped ten years ahead would otherwise win every later import ("newer there")."""
    import time

    archive, manifest, _ = exported
    with tarfile.open(archive) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    doc = json.loads(members.pop("manifest.json"))
    path = manifest.records[0].path
    record = json.loads(members[path])
    record["timestamp"] = time.time() + 10 * 365 * 86400
    members[path] = json.dumps(record).encode()
    for f in doc["files"]:
        if f["path"] == path:
            f["sha256"], f["size"] = hashlib.sha256(members[path]).hexdigest(), len(members[path])
    future = tmp_path / "future.tar.gz"
    with tarfile.open(future, "w:gz") as tar:
        for name, data in [("manifest.json", json.dumps(doc).encode())] + sorted(members.items()):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    dest, triton_dest = _dirs(tmp_path)
    report = import_archive(future, cache_dir=dest, triton_cache_dir=triton_dest)
    assert not report.records_imported and "ahead of this machine's clock" in report.records_failed[0][1]
    later = import_archive(archive, cache_dir=dest, triton_cache_dir=triton_dest)
    assert len(later.records_imported) == 1, str(later)


def test_compiled_kernels_listed_with_no_files_are_counted_and_refused_not_made_from_nothing(exported, tmp_path):
    """A listed compiled kernel whose files are none needs no member, so the member caps never counted it, and the
    import made a directory and a group file for each (20,000 from a 53 KB archive): the manifest's entries count
    against `max_members`, and a kernel without its metadata file is refused."""
    archive, _, _ = exported

    def empty_kernels(count: int):
        def edit(manifest: dict) -> None:
            manifest["binaries"] = [
                {"kernel": "k", "dir": f"D{i}", "target": "cuda:90", "files": []} for i in range(count)
            ]

        return edit

    many, few = tmp_path / "many.tar.gz", tmp_path / "few.tar.gz"
    _rebuild(archive, many, manifest_edit=empty_kernels(2000))
    _rebuild(archive, few, manifest_edit=empty_kernels(1))
    dest, triton_dest = _dirs(tmp_path)
    with pytest.raises(ArchiveError, match=r"the manifest lists 200\d records and compiled kernels, more than 100"):
        import_archive(many, cache_dir=dest, triton_cache_dir=triton_dest, limits=ArchiveLimits(max_members=100))
    with pytest.raises(ArchiveError, match=r"compiled kernel D0 lists \[\]: .*\(k\.json\).*nothing was imported"):
        import_archive(few, cache_dir=dest, triton_cache_dir=triton_dest)
    assert _snapshot(dest, triton_dest) == {}


def test_a_group_file_in_a_compiled_kernel_is_refused(exported, tmp_path):
    """Triton's group file lists absolute paths: the import writes its own, never one of the archive's (which
    could point Triton at any file on the machine)."""
    archive, manifest, _ = exported
    kernel = manifest.binaries[0].kernel
    planted = json.dumps({"child_paths": {f"{kernel}.cubin": "/tmp/elsewhere/evil.cubin"}}).encode()
    bad = tmp_path / "group.tar.gz"
    _rebuild(archive, bad, extra={f"triton/{manifest.binaries[0].dir}/__grp__other.json": planted})
    dest, triton_dest = _dirs(tmp_path)
    with pytest.raises(ArchiveError, match=r"never a group file \(__grp__\*, written here\)"):
        import_archive(bad, cache_dir=dest, triton_cache_dir=triton_dest)
    assert _snapshot(dest, triton_dest) == {}
