"""Review fixes of export/import: a moved Triton cache's group files are repaired on import (checked with
Triton's own lookup), and what a default export names and says when only precompiled kernels are there. Real
precompiles into real Triton cache directories, real archives, real `autotune` processes for the CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cache_files import write_record
from test_archive_export import SIGNATURE, _binary_hashes, _dirs_of, _tune, twins  # noqa: F401  (twins: two modules' add_kernel)
from test_cli import record
from test_precompile import exported  # noqa: F401  (the fixture: a tuned, precompiled, exported vector add)
from triton.runtime.cache import FileCacheManager

from autotune.aot import ArchiveError, export_archive, import_archive, precompile

ROOT = Path(__file__).resolve().parent.parent


def _triton_finds(triton_dir: Path, key: str, kernel: str, monkeypatch) -> bool:
    """Whether Triton's own cache lookup (FileCacheManager.get_group) finds `kernel`'s metadata in entry `key`."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(triton_dir))
    manager = FileCacheManager(key)
    assert manager.cache_dir == str(triton_dir / key)
    return f"{kernel}.json" in (manager.get_group(f"{kernel}.json") or {})


def test_importing_into_a_moved_triton_cache_repairs_its_group_files_so_triton_finds_them(
    exported, tmp_path, monkeypatch
):
    """A Triton cache built at one path and served under another (a container image) holds the archive's files,
    but its group files list the old paths, so Triton's lookup misses and compiles at launch: import rewrites
    them and says so, rather than skip the entry as already there."""
    archive, manifest, _ = exported
    binary = manifest.binaries[0]
    moved = tmp_path / "served"
    shutil.move(tmp_path / "triton-src", moved)  # the cache precompile wrote, now at another path
    assert (moved / binary.dir / f"{binary.kernel}.json").is_file()
    assert not _triton_finds(moved, binary.dir, binary.kernel, monkeypatch)  # a miss before the import

    report = import_archive(archive, cache_dir=tmp_path / "tc", triton_cache_dir=moved)
    assert report.complete and report.binaries_skipped == []
    assert len(report.binaries_imported) == 1
    assert report.binaries_imported[0].startswith(f"{binary.dir} ({binary.kernel}, {binary.target}): group file")
    assert "repaired" in report.binaries_imported[0]
    assert _triton_finds(moved, binary.dir, binary.kernel, monkeypatch)
    group = json.loads((moved / binary.dir / f"__grp__{binary.kernel}.json").read_text())
    assert group["child_paths"] == {f: str(moved / binary.dir / f) for f in binary.files}

    again = import_archive(archive, cache_dir=tmp_path / "tc", triton_cache_dir=moved)  # now it is in place
    assert again.binaries_imported == [] and [why for _, why in again.binaries_skipped] == ["already in Triton's cache"]


def test_a_default_export_takes_the_tuned_module_s_binaries_not_every_module_s_of_its_name(twins, tmp_path):
    """Without kernels=, the tuned kernels are named by their records' module:qualname, so the binaries are those
    compiled from that definition: not another module's kernel of the same name, precompiled but never tuned."""
    _tune(twins.mine.tuned)  # twin_pkg.twin_kernels:add_kernel and Variants.add_kernel are only precompiled
    manifest = export_archive(tmp_path / "a.tar.gz", triton_cache_dir=twins.triton_dir)
    assert manifest.kernels == ["twin_kernels:add_kernel"]
    assert [r.kernel for r in manifest.records] == ["add_kernel"]
    assert _binary_hashes(twins.triton_dir, manifest) == twins.hashes["mine"] | twins.hashes["launched"]


def test_a_default_export_keeps_binaries_compiled_without_line_info(twins, tmp_path, monkeypatch):
    """TRITON_DISABLE_LINE_INFO=1 leaves a binary's module untold: a default export takes it, as it did by short
    name, where a module:qualname named on purpose leaves it out (test_archive_export)."""
    stripped = tmp_path / "stripped"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(stripped))
    monkeypatch.setenv("TRITON_DISABLE_LINE_INFO", "1")
    assert len(precompile(twins.mine.tuned, signature=SIGNATURE, targets="cuda:90", workers=0).compiled) == 2
    _tune(twins.mine.tuned)
    manifest = export_archive(tmp_path / "a.tar.gz", triton_cache_dir=stripped)
    assert manifest.kernels == ["twin_kernels:add_kernel"] and len(manifest.binaries) == 2


def test_a_default_export_of_a_record_whose_module_cannot_be_found_takes_its_name_s_binaries_and_says_so(
    twins, tmp_path
):
    """A record tuned in a script (`__main__`) cannot be matched to its binaries: a default export takes every
    binary of its short name, as before, and warns, rather than fail an export nobody named a kernel for."""
    write_record(record("add_kernel", [1000], kernel_id="__main__:add_kernel"))
    with pytest.warns(UserWarning, match=r"took every compiled kernel named add_kernel in .* for __main__:add_kernel"):
        manifest = export_archive(tmp_path / "a.tar.gz", triton_cache_dir=twins.triton_dir)
    assert manifest.kernels == ["__main__:add_kernel"] and len(manifest.records) == 1
    assert _binary_hashes(twins.triton_dir, manifest) == set().union(*twins.hashes.values())


def test_a_default_export_whose_module_resolves_to_another_file_takes_its_name_s_binaries_and_says_so(twins, tmp_path):
    """A record of twin_pkg.twin_kernels:add_kernel where only twin_kernels' add_kernel was compiled (the module
    resolves here to a file none of them came from, as beside a checkout of an installed package): the default
    export takes the binaries of its name, with a warning, rather than ship the record without any."""
    only_mine = tmp_path / "only-mine"
    for name in _dirs_of(twins.triton_dir, twins.hashes["mine"]):
        shutil.copytree(twins.triton_dir / name, only_mine / name)
    write_record(record("add_kernel", [1000], kernel_id="twin_pkg.twin_kernels:add_kernel"))
    with pytest.warns(UserWarning, match=r"took every compiled kernel named add_kernel .*\(none of the compiled"):
        manifest = export_archive(tmp_path / "a.tar.gz", triton_cache_dir=only_mine)
    assert _binary_hashes(only_mine, manifest) == twins.hashes["mine"]


def test_a_default_export_with_no_records_names_the_compiled_kernels_and_says_to_pass_kernel(twins, tmp_path):
    """Precompiled from a signature, never tuned: the tuning cache names no kernel, but Triton's cache is not
    empty; the error says so, with what is compiled there and the option that exports it."""
    empty = tmp_path / "empty-cache"
    empty.mkdir()
    with pytest.raises(ArchiveError) as caught:
        export_archive(tmp_path / "a.tar.gz", cache_dir=empty, triton_cache_dir=twins.triton_dir)
    message = str(caught.value)
    assert f"the tuning cache {empty} has no records, so no kernel is named" in message
    assert f"Triton's cache {twins.triton_dir} holds 6 compiled kernels (add_kernel: 6)" in message
    assert "pass --kernel NAME (kernels=[...] in Python" in message and "no compiled kernels" not in message

    argv = ["export", str(tmp_path / "a.tar.gz"), "--cache-dir", str(empty), "--triton-cache-dir"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", "autotune", *argv, str(twins.triton_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 1 and out.stdout == "", out.stderr
    assert (
        out.stderr.startswith("autotune export: nothing to export: the tuning cache") and "--kernel NAME" in out.stderr
    )
    assert not (tmp_path / "a.tar.gz").exists()


def test_a_failed_import_puts_back_the_group_files_it_repaired(twins, tmp_path):
    """An import either installs what it reports or changes nothing: group files repaired before a later binary
    cannot be written are restored, byte for byte."""
    archive = tmp_path / "every.tar.gz"
    manifest = export_archive(archive, kernels=["add_kernel"], triton_cache_dir=twins.triton_dir)
    moved = tmp_path / "served"
    shutil.copytree(twins.triton_dir, moved)
    last = moved / manifest.binaries[-1].dir  # installed last: a file where its directory must be
    shutil.rmtree(last)
    last.write_text("")
    before = {p: p.read_bytes() for p in moved.rglob("*") if p.is_file()}
    with pytest.raises(ArchiveError, match=rf"cannot write {last} into Triton's cache directory {moved}"):
        import_archive(archive, cache_dir=tmp_path / "tc", triton_cache_dir=moved)
    assert {p: p.read_bytes() for p in moved.rglob("*") if p.is_file()} == before
