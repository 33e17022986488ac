"""What an export reads from Triton's cache and which targets precompile takes.

Triton's cache is read as Triton writes it: real directories of regular files, metadata of a few KB. A link (to
/etc/passwd, or an entry directory elsewhere), a FIFO or an oversized file is left out with a warning, never
followed, waited on or read whole. A target is refused when it names no architecture Triton can compile for
(`cuda:09`, `cuda:999`, `hip:gfxabc`), saying the valid forms, rather than failing every config later.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import tarfile
import threading
import time
from pathlib import Path

import pytest
from test_precompile import (
    exported,  # noqa: F401  (the fixture: a tuned, precompiled, exported vector add)
    tuned_add,
)

from autotune.aot import triton_cache
from autotune.aot.archive import export_archive
from autotune.aot.targets import parse_target
from autotune.aot.triton_cache import triton_entries
from autotune.errors import CacheEntryError, PrecompileError

REFUSED = "left out the Triton cache entry"


def _entry(root: Path, name: str, kernel: str = "add_kernel") -> Path:
    """A complete, well-formed Triton cache entry of `kernel` (metadata, cubin, group file)."""
    d = root / name
    d.mkdir(parents=True)
    files = {f"{kernel}.json": str(d / f"{kernel}.json"), f"{kernel}.cubin": str(d / f"{kernel}.cubin")}
    (d / f"__grp__{kernel}.json").write_text(json.dumps({"child_paths": files}))
    (d / f"{kernel}.json").write_text(json.dumps({"target": {"backend": "cuda", "arch": 90, "warp_size": 32}}))
    (d / f"{kernel}.cubin").write_bytes(b"\x7fELF cubin")
    return d


def test_a_well_formed_entry_is_taken(tmp_path):
    d = _entry(tmp_path, "AAAA")
    (entry,) = triton_entries(tmp_path, {"add_kernel"})
    assert entry.dir == d and entry.files == ("add_kernel.cubin", "add_kernel.json") and entry.target == "cuda:90"


def test_a_huge_sparse_metadata_file_is_refused_by_its_size_not_read(tmp_path):
    d = _entry(tmp_path, "AAAA")
    with open(d / "add_kernel.json", "wb") as f:
        f.truncate(1_500_000_000)  # sparse: costs no disk, but 1.5 GB to read
    before, start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.monotonic()
    with pytest.warns(UserWarning, match=rf"{REFUSED} .*AAAA: .*1500000000 bytes, over the 4194304-byte limit"):
        assert triton_entries(tmp_path, {"add_kernel"}) == []
    assert time.monotonic() - start < 2
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100 * 1024  # KiB: nothing read whole


def test_a_fifo_named_like_a_group_file_does_not_block_the_scan(tmp_path):
    (tmp_path / "BBBB").mkdir()
    os.mkfifo(tmp_path / "BBBB" / "__grp__add_kernel.json")
    _entry(tmp_path, "CCCC")
    found: list = []
    with pytest.warns(UserWarning, match=rf"{REFUSED} .*BBBB: .*not a regular file"):
        scan = threading.Thread(target=lambda: found.extend(triton_entries(tmp_path, {"add_kernel"})), daemon=True)
        scan.start()
        scan.join(10)
    assert not scan.is_alive(), "the scan blocked opening a FIFO"
    assert [e.dir.name for e in found] == ["CCCC"]


def test_a_linked_binary_or_metadata_file_is_refused(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("root:x:0:0")
    cache = tmp_path / "cache"
    bad_cubin, bad_meta = _entry(cache, "AAAA"), _entry(cache, "BBBB")
    (bad_cubin / "add_kernel.cubin").unlink()
    (bad_cubin / "add_kernel.cubin").symlink_to(secret)
    (bad_meta / "add_kernel.json").unlink()
    (bad_meta / "add_kernel.json").symlink_to(tmp_path / "elsewhere.json")
    (tmp_path / "elsewhere.json").write_text(json.dumps({"target": {"backend": "cuda", "arch": 90}}))
    with pytest.warns(UserWarning) as caught:
        assert triton_entries(cache, {"add_kernel"}) == []
    messages = sorted(str(w.message) for w in caught)
    assert REFUSED in messages[0] and "AAAA: add_kernel.cubin: not a regular file" in messages[0]
    assert REFUSED in messages[1] and "BBBB" in messages[1] and "is a symbolic link" in messages[1]


def test_a_linked_entry_directory_is_refused(tmp_path):
    real = _entry(tmp_path / "elsewhere", "AAAA")
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "DDDD").symlink_to(real, target_is_directory=True)
    with pytest.warns(UserWarning, match=rf"{REFUSED} .*DDDD: it is a symbolic link.*TRITON_CACHE_DIR"):
        assert triton_entries(cache, None) == []


def test_a_binary_swapped_for_a_link_after_the_scan_is_not_read(tmp_path):
    _entry(tmp_path, "AAAA")
    (entry,) = triton_entries(tmp_path, {"add_kernel"})
    assert triton_cache.read_artifact(entry, "add_kernel.cubin", 1 << 20) == b"\x7fELF cubin"
    (entry.dir / "add_kernel.cubin").unlink()
    (entry.dir / "add_kernel.cubin").symlink_to("/etc/passwd")
    with pytest.raises(CacheEntryError, match="symbolic link"):
        triton_cache.read_artifact(entry, "add_kernel.cubin", 1 << 20)
    with pytest.raises(CacheEntryError, match="not a file of the Triton cache entry"):
        triton_cache.read_artifact(entry, "../../etc/passwd", 1 << 20)


def test_an_export_ships_no_linked_entry_or_binary(exported, tmp_path):
    """End to end: a real precompiled entry, a copy of it whose cubin links to a secret, and a link to the real
    entry's directory; the export takes the real entry alone and says what it left out."""
    triton_dir = Path(os.environ["TRITON_CACHE_DIR"])
    (real,) = triton_entries(triton_dir, {"add_kernel"})
    secret = tmp_path / "secret"
    secret.write_bytes(b"root:x:0:0 secret")
    copy = shutil.copytree(real.dir, triton_dir / ("Z" * 52))
    (copy / "add_kernel.cubin").unlink()
    (copy / "add_kernel.cubin").symlink_to(secret)
    (triton_dir / ("Y" * 52)).symlink_to(real.dir, target_is_directory=True)
    with pytest.warns(UserWarning, match=REFUSED) as caught:
        manifest = export_archive(tmp_path / "out.tar.gz", kernels=[tuned_add])
    refused = {m.group(1) for w in caught if (m := re.search(rf"{REFUSED} .*/(\w+): ", str(w.message)))}
    assert refused == {"Y" * 52, "Z" * 52}
    assert [b.dir for b in manifest.binaries] == [real.dir.name]
    with tarfile.open(tmp_path / "out.tar.gz") as tar:
        assert not any(b"secret" in tar.extractfile(m).read() for m in tar.getmembers() if m.isfile())


@pytest.mark.parametrize(
    "spec",
    ["cuda:09", "cuda:000", "cuda:999", "cuda:1000", "cuda:8", "cuda:49", "cuda:301", "sm_09", "cuda:090a"],
)
def test_a_cuda_target_that_is_no_compute_capability_is_refused_naming_the_form(spec):
    with pytest.raises(PrecompileError, match=r"'cuda:<compute capability>'.*no leading zero, 50 to 300"):
        parse_target(spec)


@pytest.mark.parametrize(
    "spec", ["hip:gfxabc", "hip:gfx942a", "hip:gfx0000", "hip:gfx9", "hip:gfx1a00", "hip:gfx9a0", "gfx500"]
)
def test_a_hip_target_that_is_no_amdgpu_processor_is_refused_naming_the_form(spec):
    with pytest.raises(PrecompileError, match=r"'hip:<gfx arch>'.*one minor digit and one hex stepping digit"):
        parse_target(spec)


@pytest.mark.parametrize(
    ("spec", "expected", "warp"),
    [
        ("cuda:90", "cuda:90", 32),
        ("cuda:90a", "cuda:90", 32),
        ("cuda:sm_90a", "cuda:90", 32),
        ("sm_80", "cuda:80", 32),
        ("cuda:sm80", "cuda:80", 32),
        ("CUDA:90", "cuda:90", 32),
        ("nvidia:90 ", "cuda:90", 32),
        ("cuda:100a", "cuda:100", 32),
        ("cuda:91", "cuda:91", 32),
        ("cuda:50", "cuda:50", 32),
        ("cuda:121", "cuda:121", 32),
        ("hip:gfx942", "hip:gfx942", 64),
        ("gfx90a", "hip:gfx90a", 64),
        ("gfx803", "hip:gfx803", 64),
        ("hip:gfx1100", "hip:gfx1100", 32),
        ("rocm:gfx950", "hip:gfx950", 64),
        ("amd:gfx1250", "hip:gfx1250", 32),
    ],
)
def test_the_documented_target_spellings_still_parse(spec, expected, warp):
    target = parse_target(spec)
    assert str(target) == expected and target.warp_size == warp
