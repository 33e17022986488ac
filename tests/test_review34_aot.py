"""Review 34, archives and precompile: a full staging directory is named as a local write failure (not a broken
archive); precompile for the active GPU keeps winners_only=True within space=; export checks import's caps from the
files' sizes before reading any binary; the CLI's "no GPU under the interpreter" error names --target; an import
whose key has every slot taken by other kernel sources still installs the archive's record. Real archives from a
real precompile (the `exported` fixture of test_precompile), real processes for the CLI and the stub GPU."""

from __future__ import annotations

import json
import os
import resource
import shlex
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from test_archive_import import ROOT, _cli
from test_archive_security import _dirs, _snapshot
from test_precompile import (
    STUB_GPU,
    _tune_add,
    exported,  # noqa: F401  (the fixture: a tuned, precompiled, exported vector add)
    tuned_add,
)

import autotune.aot.archive as archive_module
from autotune.aot import export_archive, import_archive
from autotune.aot.archive_checks import ArchiveLimits
from autotune.errors import ArchiveError

FILE_LIMIT = 4096  # bytes any one file of the import process may grow to (RLIMIT_FSIZE): as a full $TMPDIR


def test_a_staging_directory_that_cannot_be_written_is_named_not_the_archive(exported, tmp_path):
    """`autotune import` whose staging directory cannot take a member (EFBIG here, ENOSPC on a full /tmp) says it is
    a local write failure in that directory and how to fix it; it does not call the archive unreadable."""
    archive, manifest, _ = exported
    assert max(f.size for f in manifest.files) > FILE_LIMIT  # a member the limit stops (the cubin)
    stage_dir = tmp_path / "stage"
    stage_dir.mkdir()
    dest, triton_dest = _dirs(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
    env.update(
        TRITON_INTERPRET="1",
        AUTOTUNE_PROGRESS="0",
        TMPDIR=str(stage_dir),
        PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]),
    )

    def limit_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))

    out = subprocess.run(
        [sys.executable, "-m", "autotune", "import", str(archive), "--cache-dir", str(dest)]
        + ["--triton-cache-dir", str(triton_dest)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=limit_files,
    )
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert "not a readable" not in out.stderr
    assert f"cannot stage the archive's members in the staging directory {stage_dir}" in out.stderr
    assert "local write failure, not a problem of the archive" in out.stderr and "TMPDIR" in out.stderr
    assert _snapshot(dest, triton_dest) == {} and list(stage_dir.iterdir()) == []  # nothing imported or left


def test_precompile_for_the_active_gpu_keeps_only_the_winners_within_space(tmp_path):
    """targets=None, winners_only=True, space=: only the cached winners inside space= go through the JIT (on a stub
    sm_80 GPU, as test_precompile's targets=None test), with the note saying which were left out."""
    winner = _tune_add()
    other = {"BLOCK": 64 if winner["BLOCK"] == 128 else 128}
    script = (
        STUB_GPU
        + f"""
from autotune.aot import precompile
from test_precompile import tuned_add, ADD_SIGNATURE
result = {{}}
for name, space in (("outside", {{"BLOCK": ({other["BLOCK"]},)}}), ("inside", {{"BLOCK": ({winner["BLOCK"]},)}})):
    report = precompile(tuned_add, signature=ADD_SIGNATURE, targets=None, winners_only=True, space=space, workers=0)
    result[name] = {{"compiled": [dict(c.config) for c in report.compiled],
                    "failed": [dict(f.config) for f in report.failed], "notes": report.notes}}
print(json.dumps(result))
"""
    )
    env = {
        **os.environ,
        "TRITON_INTERPRET": "0",
        "TRITON_CACHE_DIR": str(tmp_path / "triton"),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["outside"]["compiled"] == [] and result["outside"]["failed"] == []
    assert any(f"left out, not in space=: {winner}" in note for note in result["outside"]["notes"])
    assert [c["BLOCK"] for c in result["inside"]["compiled"]] == [winner["BLOCK"]]


def test_export_over_the_import_caps_is_refused_before_any_binary_is_read(exported, tmp_path, monkeypatch):
    """The caps are checked from the files' sizes: an archive over the total cap (made small here, as a
    many-target precompile over 2 GiB) is refused without opening one binary, never read into memory first."""
    monkeypatch.setattr(archive_module, "ArchiveLimits", lambda: ArchiveLimits(max_total_bytes=1000))
    opened: list[str] = []
    real_open = os.open

    def recording_open(path, *args, **kwargs):
        opened.append(os.fspath(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", recording_open)
    with pytest.raises(ArchiveError, match=r"would hold [\d,]+ bytes \(import's cap: 1,000\)"):
        export_archive(tmp_path / "big.tar.gz", kernels=[tuned_add])
    assert [p for p in opened if p.endswith((".cubin", ".ptx", ".llir", ".ttgir", ".ttir"))] == []
    assert not (tmp_path / "big.tar.gz").exists()


def test_an_exported_binary_streamed_into_the_archive_imports_with_its_bytes(exported, tmp_path):
    """The binaries streamed (and hashed as written) into the archive arrive byte for byte."""
    archive, manifest, _ = exported
    dest, triton_dest = _dirs(tmp_path)
    report = import_archive(archive, cache_dir=dest, triton_cache_dir=triton_dest)
    assert report.complete and len(report.binaries_imported) == len(manifest.binaries)
    source = Path(os.environ["TRITON_CACHE_DIR"])
    for binary in manifest.binaries:
        for name in binary.files:
            assert (triton_dest / binary.dir / name).read_bytes() == (source / binary.dir / name).read_bytes()


def test_the_cli_without_target_under_the_interpreter_names_the_target_option():
    out = _cli("precompile", "test_precompile:tuned_add", "--signature", "x=*fp32,y=*fp32,out=*fp32,n=i32:16")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert "TRITON_INTERPRET=1" in out.stderr and "--target cuda:90" in out.stderr


def _fill_slots_with_other_sources(ours, dest: Path, offsets: list[float], same_source_first: bool = False) -> None:
    from autotune.storage import DiskCache, EntryRef
    from autotune.storage.kernel_cache import slot_for

    store = DiskCache(dest)
    for i, offset in enumerate(offsets):  # the other halves of rolling deploys
        other = msgspec.structs.replace(ours, source_hash=f"{i:064x}", timestamp=ours.timestamp + offset)
        if same_source_first and i == 0:  # the archive's kernel source, tuned under another Triton
            other = msgspec.structs.replace(ours, triton_version="0.0.1", timestamp=ours.timestamp + offset)
        entry = EntryRef.of(other)
        lease = store.lock(entry, timeout_s=5)
        try:
            assert store.put(slot_for(store, entry, other), other)
        finally:
            lease.release()


def test_an_import_into_a_key_whose_slots_hold_older_other_sources_installs_the_archives_record(exported, tmp_path):
    """Every slot of the key holds another kernel source's record, the oldest tuned before the archive's: the
    archive's record takes that slot (as a launch's write would) and the report says what it replaced."""
    from autotune.storage import load_record
    from autotune.storage.protocol import SOURCES_PER_KEY

    archive, manifest, _ = exported
    dest, triton_dest = _dirs(tmp_path)
    ours = load_record(Path(os.environ["AUTOTUNE_CACHE_DIR"]) / _record_file(manifest))
    _fill_slots_with_other_sources(ours, dest, [-100.0] + [100.0 + i for i in range(SOURCES_PER_KEY - 1)])
    report = import_archive(archive, cache_dir=dest, triton_cache_dir=triton_dest)
    assert report.complete and report.records_skipped == []
    held = [load_record(p) for p in dest.glob("*/*.json")]
    assert ours.source_hash in {r.source_hash for r in held} and len(held) == SOURCES_PER_KEY
    assert [why for _, why in report.records_replaced] == ["the older entry there was tuned for another kernel source"]


def test_an_import_into_a_key_whose_slots_hold_newer_other_sources_keeps_them_saying_so(exported, tmp_path):
    """Every slot holds another kernel source's record, each tuned after the archive's: replacing the oldest would
    put the oldest record of the key in its place (the first a launch's write evicts), so the import keeps them
    and says why, naming the other source, not "the entry is newer" as if it were the archive's own version."""
    from autotune.storage import load_record
    from autotune.storage.protocol import SOURCES_PER_KEY

    archive, manifest, _ = exported
    dest, triton_dest = _dirs(tmp_path)
    ours = load_record(Path(os.environ["AUTOTUNE_CACHE_DIR"]) / _record_file(manifest))
    _fill_slots_with_other_sources(ours, dest, [100.0 + i for i in range(SOURCES_PER_KEY)])
    report = import_archive(archive, cache_dir=dest, triton_cache_dir=triton_dest)
    held = [load_record(p) for p in dest.glob("*/*.json")]
    assert ours.source_hash not in {r.source_hash for r in held} and len(held) == SOURCES_PER_KEY
    ((_, why),) = report.records_skipped
    assert (
        why.startswith("every slot of this key holds another version of the kernel") and "another kernel source" in why
    )
    assert report.records_replaced == []
    clear = why.split("`")[1]  # the command the skip gives, pasted as a user would: it clears that key, in `dest`
    assert clear.startswith("autotune cache clear --cache-dir "), clear
    done = _cli(*shlex.split(clear)[1:])
    assert done.returncode == 0, done.stderr
    again = import_archive(archive, cache_dir=dest, triton_cache_dir=triton_dest)
    assert again.records_skipped == [] and len(again.records_imported) == 1


def test_an_import_does_not_count_a_newer_autotune_s_slot_as_room_for_an_older_record(exported, tmp_path):
    """A slot a newer autotune wrote is never written here: with the other three holding versions tuned after the
    archive's record, the record would be the first evicted, so it is skipped (not installed over a newer entry)."""
    from autotune.storage import load_record
    from autotune.storage.protocol import SOURCES_PER_KEY

    archive, manifest, _ = exported
    dest, triton_dest = _dirs(tmp_path)
    ours = load_record(Path(os.environ["AUTOTUNE_CACHE_DIR"]) / _record_file(manifest))
    _fill_slots_with_other_sources(ours, dest, [100.0 + i for i in range(SOURCES_PER_KEY)])
    (first,) = [p for p in dest.glob("*/*.json") if load_record(p).source_hash == f"{0:064x}"]
    data = json.loads(first.read_text())
    data["schema_version"] = 10_000  # written by a newer autotune
    first.write_text(json.dumps(data))
    report = import_archive(archive, cache_dir=dest, triton_cache_dir=triton_dest)
    assert [why.split(" (")[0] for _, why in report.records_skipped] == [
        "every slot of this key holds another version of the kernel tuned after the archive's record"
    ]
    assert report.records_imported == []


def _record_file(manifest) -> str:
    """The path of the exported record under the tuning cache (records/<kernel dir>/<entry>.json in the archive)."""
    (record,) = manifest.records
    return record.path.removeprefix("records/")


def test_an_import_whose_version_slot_is_newer_but_another_slot_older_installs_the_record(exported, tmp_path):
    """The slot `slot_for` picks (the archive's source under another Triton) is newer than the archive's record,
    but another slot is older: the record is not the key's oldest, so it goes in, as a launch's write would."""
    from autotune.storage import load_record

    archive, manifest, _ = exported
    dest, triton_dest = _dirs(tmp_path)
    ours = load_record(Path(os.environ["AUTOTUNE_CACHE_DIR"]) / _record_file(manifest))
    _fill_slots_with_other_sources(ours, dest, [100.0, -1000.0, 200.0, 300.0], same_source_first=True)
    report = import_archive(archive, cache_dir=dest, triton_cache_dir=triton_dest)
    assert report.complete and report.records_skipped == [], report.records_skipped
    held = [load_record(p) for p in dest.glob("*/*.json")]
    assert ours.timestamp in {r.timestamp for r in held} and len(held) == 4
