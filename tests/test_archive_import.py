"""Importing archives: a failed import changes nothing and says why in one line (API and `autotune import`),
manifests that are malformed or from a newer autotune, and what the report says about kept entries. Real
archives exported from a real precompile (the `exported` fixture of test_precompile), real processes for
the CLI."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import warnings
from pathlib import Path

import pytest
from test_archive_security import _dirs, _rebuild, _snapshot
from test_precompile import exported  # noqa: F401  (the fixture: a tuned, precompiled, exported vector add)

from autotune.aot import import_archive
from autotune.errors import ArchiveError, CacheWarning

ROOT = Path(__file__).resolve().parent.parent


def _cli(*argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """`python -m autotune ARGV` in a fresh process (no AUTOTUNE_* settings of this one)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
    env.update(
        TRITON_INTERPRET="1",
        AUTOTUNE_PROGRESS="0",
        TRITON_DEFAULT_FP_FUSION="1",
        PYTHONPATH=os.pathsep.join([str(ROOT / "tests"), str(ROOT), env.get("PYTHONPATH", "")]),
    )
    return subprocess.run(
        [sys.executable, "-m", "autotune", *argv], env=env, capture_output=True, text=True, timeout=300, cwd=cwd
    )


def test_a_triton_cache_dir_that_is_a_file_fails_the_import_before_any_record_is_written(exported, tmp_path):
    archive, _, _ = exported
    dest = tmp_path / "dest"
    not_a_dir = tmp_path / "not-a-dir"
    not_a_dir.write_text("")
    with pytest.raises(
        ArchiveError,
        match=rf"cannot use {not_a_dir}, a file, as Triton's cache directory.*"
        "--triton-cache-dir.*nothing was imported",
    ):
        import_archive(archive, cache_dir=dest, triton_cache_dir=not_a_dir)
    assert _snapshot(dest) == {} and not_a_dir.read_text() == ""

    out = _cli("import", str(archive), "--cache-dir", str(dest), "--triton-cache-dir", str(not_a_dir))
    assert out.returncode == 1 and out.stdout == ""
    assert "Traceback" not in out.stderr
    assert out.stderr.startswith(f"autotune import: cannot use {not_a_dir}, a file, as Triton's cache directory")
    assert _snapshot(dest) == {}


def test_a_binary_that_cannot_be_written_undoes_the_import(exported, tmp_path):
    archive, manifest, _ = exported
    dest, triton_dest = _dirs(tmp_path)
    blocker = triton_dest / manifest.binaries[0].dir  # where the kernel's directory would go: a file
    triton_dest.mkdir()
    blocker.write_text("")
    with pytest.raises(ArchiveError, match=rf"cannot write {blocker} into Triton's cache directory {triton_dest}"):
        import_archive(archive, cache_dir=dest, triton_cache_dir=triton_dest)
    assert _snapshot(dest) == {} and _snapshot(triton_dest) == {str(blocker): b""}


def _with_manifest(src: Path, dst: Path, manifest_bytes: bytes) -> None:
    """Copy the archive at `src` with its manifest replaced by `manifest_bytes` (written as given)."""
    with tarfile.open(src) as tar:
        members = [(m.name, tar.extractfile(m).read()) for m in tar.getmembers() if m.name != "manifest.json"]
    with tarfile.open(dst, "w:gz") as tar:
        for name, data in [("manifest.json", manifest_bytes)] + members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_a_deeply_nested_manifest_is_an_invalid_manifest_not_a_recursion_error(exported, tmp_path):
    archive, _, _ = exported
    with tarfile.open(archive) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())
    manifest["records"][0]["key"] = "@DEEP@"  # json.dumps cannot nest that deep: splice the text in
    deep = json.dumps(manifest).replace('"@DEEP@"', "[" * 200_000 + "]" * 200_000).encode()
    bad = tmp_path / "deep.tar.gz"
    _with_manifest(archive, bad, deep)
    dest, triton_dest = _dirs(tmp_path)
    with pytest.raises(ArchiveError, match=r"invalid manifest\.json \(nested too deeply\)"):
        import_archive(bad, cache_dir=dest, triton_cache_dir=triton_dest)
    out = _cli("import", str(bad), "--cache-dir", str(dest), "--triton-cache-dir", str(triton_dest))
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.startswith("autotune import: invalid manifest.json (nested too deeply)")
    assert _snapshot(dest, triton_dest) == {}


@pytest.mark.parametrize("change", ["version", "new field", "new binary field"])
def test_an_archive_from_a_newer_autotune_says_upgrade_whatever_fields_it_adds(exported, tmp_path, change):
    archive, _, _ = exported

    def newer(m):
        m["format_version"] = 2
        if change == "new field":
            m["compression"] = "zstd"
        elif change == "new binary field":
            m["binaries"][0]["sm"] = "90a"

    bad = tmp_path / "v2.tar.gz"
    _rebuild(archive, bad, manifest_edit=newer)
    dest, triton_dest = _dirs(tmp_path)
    with pytest.raises(
        ArchiveError,
        match=r"written by a newer autotune \(archive format v2; this autotune reads up "
        r"to v1\): upgrade autotune",
    ):
        import_archive(bad, cache_dir=dest, triton_cache_dir=triton_dest)
    assert _snapshot(dest, triton_dest) == {}


def test_an_unknown_field_in_a_current_manifest_is_still_refused(exported, tmp_path):
    archive, _, _ = exported
    bad = tmp_path / "extra.tar.gz"
    _rebuild(archive, bad, manifest_edit=lambda m: m.update(compression="zstd"))
    with pytest.raises(ArchiveError, match=r"invalid manifest\.json \(.*unknown field `compression`"):
        import_archive(bad, cache_dir=tmp_path / "d", triton_cache_dir=tmp_path / "t")
    other = tmp_path / "other.tar.gz"
    _rebuild(archive, other, manifest_edit=lambda m: m.update(format="something-else"))
    with pytest.raises(ArchiveError, match="of format 'something-else', not 'autotune-archive'"):
        import_archive(other, cache_dir=tmp_path / "d", triton_cache_dir=tmp_path / "t")


def test_a_local_entry_of_a_newer_autotune_is_kept_and_the_record_imported_beside_it(exported, tmp_path):
    archive, _, _ = exported
    dest, triton_dest = _dirs(tmp_path)
    import_archive(archive, cache_dir=dest, triton_cache_dir=triton_dest)
    (entry,) = [p for p in dest.rglob("*.json")]
    record = json.loads(entry.read_text())
    record["schema_version"] += 1  # a newer autotune's entry, older than the archive's
    record["timestamp"] -= 1000
    entry.write_text(json.dumps(record))
    before = entry.read_bytes()

    report = import_archive(archive, cache_dir=dest, triton_cache_dir=triton_dest)
    assert report.records_skipped == [] and len(report.records_imported) == 1
    assert entry.read_bytes() == before  # a newer autotune's entry is never written over
    (beside,) = [p for p in dest.rglob("*.json") if p != entry]  # the record went to another slot of the key
    assert json.loads(beside.read_text())["schema_version"] == record["schema_version"] - 1
    assert "(warned)" not in str(report)


def test_a_local_entry_of_this_triton_is_not_replaced_by_a_newer_record_of_another(exported, tmp_path):
    """An archive's records may be tuned under another Triton than its manifest names (the exporter's cache held
    them): a newer one of those is another version of the kernel, imported beside the good entry of this Triton
    (another slot of the key), which stays as it was."""
    from autotune.storage import load_record

    archive, manifest, _ = exported
    dest, triton_dest = _dirs(tmp_path)
    import_archive(archive, cache_dir=dest, triton_cache_dir=triton_dest)
    (entry,) = [p for p in dest.rglob("*.json")]
    before = entry.read_bytes()
    member = manifest.records[0].path
    with tarfile.open(archive) as tar:
        record = json.loads(tar.extractfile(member).read())
    record["triton_version"], record["timestamp"] = "0.0.1", record["timestamp"] + 3600
    stale = tmp_path / "stale.tar.gz"
    _with_member(archive, stale, member, json.dumps(record).encode())

    report = import_archive(stale, cache_dir=dest, triton_cache_dir=triton_dest)
    assert entry.read_bytes() == before
    (beside,) = [Path(p) for p in report.records_imported]
    assert beside != entry and beside.parent == entry.parent and load_record(beside).triton_version == "0.0.1"


def _with_member(src: Path, dst: Path, name: str, data: bytes) -> None:
    """Copy the archive at `src` with member `name` replaced by `data`, its checksum and size in the manifest
    updated to match (what a well-formed archive holding a bad record looks like)."""
    import hashlib

    with tarfile.open(src) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    manifest = json.loads(members.pop("manifest.json"))
    members[name] = data
    for f in manifest["files"]:
        if f["path"] == name:
            f.update(sha256=hashlib.sha256(data).hexdigest(), size=len(data))
    _with_manifest_members(dst, json.dumps(manifest).encode(), members)


def _with_manifest_members(dst: Path, manifest_bytes: bytes, members: dict) -> None:
    with tarfile.open(dst, "w:gz") as tar:
        for name, data in [("manifest.json", manifest_bytes), *members.items()]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_a_tuning_cache_dir_that_cannot_be_written_fails_the_import_before_any_binary_is_written(exported, tmp_path):
    """A deploy whose records cannot land must not half-land: the tuning cache is probed before Triton's cache
    gets a binary, and the import fails naming it (exit 1), not "imported 0 records" with exit 0."""
    archive, _, _ = exported
    not_a_dir = tmp_path / "not-a-dir"
    not_a_dir.write_text("")
    triton_dest = tmp_path / "dest-triton"
    with pytest.raises(
        ArchiveError,
        match=rf"cannot use {not_a_dir}, a file, as the tuning cache directory.*"
        "--cache-dir.*nothing was imported",
    ):
        import_archive(archive, cache_dir=not_a_dir, triton_cache_dir=triton_dest)
    assert not triton_dest.exists() and not_a_dir.read_text() == ""

    out = _cli("import", str(archive), "--cache-dir", str(not_a_dir), "--triton-cache-dir", str(triton_dest))
    assert out.returncode == 2 and out.stdout == "" and "Traceback" not in out.stderr  # the CLI's own check first
    assert out.stderr.startswith(f"autotune import: the cache directory {not_a_dir} (--cache-dir) is not a directory")
    assert not triton_dest.exists()


def test_an_invalid_record_is_a_failure_of_the_import_named_by_its_member(exported, tmp_path):
    """A record that cannot be installed is reported as FAILED (not as a benign skip), named by its place in the
    archive (the staging directory is gone by then), and `autotune import` exits 1; the rest still goes in."""
    archive, manifest, _ = exported
    member = manifest.records[0].path
    bad = tmp_path / "bad-record.tar.gz"
    _with_member(archive, bad, member, b'{"schema_version": 1}')
    dest, triton_dest = _dirs(tmp_path)
    report = import_archive(bad, cache_dir=dest, triton_cache_dir=triton_dest)
    assert not report.complete and report.records_imported == [] and report.records_skipped == []
    (failed,) = report.records_failed
    assert failed[0] == member and failed[1].startswith("not a valid record")
    assert "autotune-import-" not in failed[1]  # no path into the gone staging directory
    assert report.binaries_imported  # the binaries are fine, and installed
    assert f"FAILED record {member}: not a valid record" in str(report)
    assert "NOT installed: 1 records" in report.summary()

    out = _cli(
        "import", str(bad), "--cache-dir", str(tmp_path / "d2"), "--triton-cache-dir", str(tmp_path / "t2"), "--json"
    )
    assert out.returncode == 1, out.stderr
    assert json.loads(out.stdout)["complete"] is False
    assert "1 records and 0 compiled kernels of the archive were not installed" in out.stderr


def test_a_record_that_cannot_be_written_fails_the_import_and_an_already_present_one_does_not(exported, tmp_path):
    """The tuning cache taking no record (here its entry's path is a directory) is a failure with exit 1; importing
    the same archive twice skips what is already there and exits 0."""
    archive, _, _ = exported
    dest, triton_dest = _dirs(tmp_path)
    first = import_archive(archive, cache_dir=dest, triton_cache_dir=triton_dest)
    assert first.complete and first.records_imported
    again = _cli("import", str(archive), "--cache-dir", str(dest), "--triton-cache-dir", str(triton_dest))
    assert again.returncode == 0 and "already present" in again.stdout, again.stderr

    blocked_dest = tmp_path / "blocked"
    entry = blocked_dest / Path(first.records_imported[0]).relative_to(dest)
    entry.mkdir(parents=True)  # where the entry file would go: a directory
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)  # the reason is in the report, not a runtime warning
        report = import_archive(archive, cache_dir=blocked_dest, triton_cache_dir=triton_dest)
    assert not report.complete and report.records_imported == []
    assert report.records_failed[0][1] == f"could not write {entry} (IsADirectoryError: Is a directory)"
    out = _cli("import", str(archive), "--cache-dir", str(blocked_dest), "--triton-cache-dir", str(triton_dest))
    assert out.returncode == 1 and "FAILED record" in out.stdout


def test_an_archive_of_binaries_alone_does_not_need_a_writable_tuning_cache(exported, tmp_path):
    """Nothing goes into the tuning cache, so it is not probed (nor created): a binaries-only import onto a
    tuning cache that cannot be written installs its binaries."""
    archive, _, _ = exported
    with tarfile.open(archive) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    manifest = json.loads(members.pop("manifest.json"))
    manifest["records"] = []
    manifest["files"] = [f for f in manifest["files"] if not f["path"].startswith("records/")]
    members = {n: d for n, d in members.items() if not n.startswith("records/")}
    binaries_only = tmp_path / "binaries.tar.gz"
    _with_manifest_members(binaries_only, json.dumps(manifest).encode(), members)
    not_a_dir = tmp_path / "not-a-dir"
    not_a_dir.write_text("")
    report = import_archive(binaries_only, cache_dir=not_a_dir, triton_cache_dir=tmp_path / "t")
    assert report.complete and report.binaries_imported and report.records_imported == []


@pytest.mark.parametrize("refusal", ["another Triton", "too many records"])
def test_another_triton_or_too_many_records_is_refused_before_any_member_is_staged(exported, tmp_path, refusal):
    """The manifest alone decides these refusals: an archive may hold gigabytes, none of which is staged first. Here
    an unlisted member follows the manifest, which staging would refuse: the manifest's refusal is what is said."""
    archive, manifest, _ = exported
    with tarfile.open(archive) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    manifest_dict = json.loads(members.pop("manifest.json"))
    if refusal == "another Triton":
        manifest_dict["triton_version"] = "0.0.1"
        limits, expected = None, "was made with Triton 0.0.1"
    else:
        from autotune.aot.archive import ArchiveLimits

        listed = len(manifest.records) + len(manifest.binaries)
        limits = ArchiveLimits(max_members=listed - 1)
        expected = f"the manifest lists {listed} records and compiled kernels, more than {listed - 1}"
    bad = tmp_path / "bad.tar.gz"
    _with_manifest_members(bad, json.dumps(manifest_dict).encode(), {"records/unlisted.json": b"{}", **members})
    dest, triton_dest = _dirs(tmp_path)
    with pytest.raises(ArchiveError, match=expected):
        import_archive(bad, cache_dir=dest, triton_cache_dir=triton_dest, limits=limits)
    assert _snapshot(dest, triton_dest) == {}


def test_an_entry_locked_by_another_process_fails_the_import_after_the_lock_timeout(exported, tmp_path):
    """`autotune import` waits for an entry's lock at most AUTOTUNE_LOCK_TIMEOUT_S (it waited forever): the record
    is FAILED, naming the lock's holder as the reason, and the command exits 1."""
    from autotune.storage import DiskCache, EntryRef, load_record
    from autotune.storage.files import lock_path

    archive, manifest, _ = exported
    dest, triton_dest = _dirs(tmp_path)
    with tarfile.open(archive) as tar:
        (tmp_path / "rec.json").write_bytes(tar.extractfile(manifest.records[0].path).read())
    entry_path = DiskCache(dest).path(EntryRef.of(load_record(tmp_path / "rec.json")))
    entry_path.parent.mkdir(parents=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import filelock, sys, time; held = filelock.FileLock(sys.argv[1]); held.acquire(); "
         "print('held', flush=True); time.sleep(120)", str(lock_path(entry_path))],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
        env.update(TRITON_INTERPRET="1", AUTOTUNE_LOCK_TIMEOUT_S="1", PYTHONPATH=str(ROOT))
        out = subprocess.run(
            [sys.executable, "-m", "autotune", "import", str(archive), "--cache-dir", str(dest),
             "--triton-cache-dir", str(triton_dest)],
            env=env, capture_output=True, text=True, timeout=90,
        )  # fmt: skip
    finally:
        holder.kill()
        holder.wait()
    assert out.returncode == 1, out.stderr
    assert f"another process held the lock of {entry_path} for over 1 s (AUTOTUNE_LOCK_TIMEOUT_S)" in out.stdout
    assert not entry_path.exists()
