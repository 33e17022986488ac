"""`export_archive` / `autotune export` by kernel: a `module:qualname` (or a kernel object) takes the binaries
compiled from that kernel's definition, never another module's kernel of the same function name.

Real kernels, real Triton caches: two modules (`twin_kernels` and the package module `twin_pkg.twin_kernels`)
each define a `@triton.jit def add_kernel`, and `twin_kernels` has a third in a class (`Variants.add_kernel`:
same file, same name). They are precompiled for cuda:90 (no GPU needed), and one more config of
`twin_kernels:add_kernel` is compiled by Triton's JIT launch path: under TRITON_INTERPRET=1 a launch compiles
nothing (the interpreter runs the Python body with NumPy, no `triton.compile`, no cache entry), so that compile
runs in a process without the interpreter whose stub driver reports cuda:90, through `JITFunction.run(...,
warmup=True)`, the launch path up to the driver's launch call (as tests/test_precompile.py's
test_jit_launch_path_finds_explicit_target_precompile does).
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import autotune
from autotune.aot import ArchiveError, export_archive, precompile

ROOT = Path(__file__).resolve().parent.parent
SIGNATURE = {"x": "*fp32", "y": "*fp32", "out": "*fp32", "n": "i32:16"}

KERNEL = """
@triton.jit
def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(x + offs, mask=offs < n) {op} tl.load(y + offs, mask=offs < n), mask=offs < n)
"""
HEAD = "import triton\nimport triton.language as tl\nfrom autotune import autotune\n"
TUNED = 'tuned = autotune(space={"BLOCK": (64, 128)}, key=["n"], grid="(cdiv(n, $BLOCK),)")(add_kernel)\n'
VARIANTS = (
    "\n\nclass Variants:" + KERNEL.format(op="*").replace("\n", "\n    ").rstrip(" ") + "\n\n"
    'tuned_variant = autotune(space={"BLOCK": (64,)}, key=["n"], grid="(cdiv(n, $BLOCK),)")'
    "(Variants.add_kernel)\n"
)
# the package's __init__ notes each time it runs: finding the module for an export must not run it
PACKAGE_INIT = (
    "import os\nwith open(os.path.join(os.path.dirname(__file__), os.pardir, 'inits.txt'), 'a') as f:\n"
    "    f.write('twin_pkg\\n')\n"
)

STUB_LAUNCH = """
import json, sys, torch, triton
import fake_gpu

fake_gpu.activate(90)   # an sm_90 GPU as far as Triton's JIT can tell, up to the launch itself
events = []
triton.knobs.compilation.listener = lambda **kw: events.append((kw["metadata"]["hash"], kw["cache_hit"]))
import twin_kernels
x = torch.zeros(1024)
twin_kernels.add_kernel.run(x, x, x, 1024, BLOCK=256, grid=(4,), warmup=True)
print(json.dumps(events))
"""


def _hashes(report) -> set[str]:
    assert report.failed == [] and report.compiled, report
    return {c.hash for c in report.compiled}


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    """The three add_kernels precompiled for cuda:90 and one config of twin_kernels' compiled by a JIT launch,
    in one Triton cache: the modules, the cache and each kernel's compile hashes."""
    src = tmp_path_factory.mktemp("twin-src")
    triton_dir = tmp_path_factory.mktemp("twin-triton")
    (src / "twin_kernels.py").write_text(HEAD + KERNEL.format(op="+") + "\n\n" + TUNED + VARIANTS)
    (src / "twin_pkg").mkdir()
    (src / "twin_pkg" / "__init__.py").write_text(PACKAGE_INIT)
    (src / "twin_pkg" / "twin_kernels.py").write_text(HEAD + KERNEL.format(op="-") + "\n\n" + TUNED)
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(src))
        mp.setenv("TRITON_CACHE_DIR", str(triton_dir))
        mine = importlib.import_module("twin_kernels")
        other = importlib.import_module("twin_pkg.twin_kernels")
        hashes = {
            "mine": _hashes(precompile(mine.tuned, signature=SIGNATURE, targets="cuda:90", workers=0)),
            "variant": _hashes(precompile(mine.tuned_variant, signature=SIGNATURE, targets="cuda:90", workers=0)),
            "other": _hashes(precompile(other.tuned, signature=SIGNATURE, targets="cuda:90", workers=0)),
        }
        env = {
            **os.environ,
            "TRITON_INTERPRET": "0",
            "TRITON_CACHE_DIR": str(triton_dir),
            "PYTHONPATH": os.pathsep.join([str(src), str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]),
        }
        out = subprocess.run([sys.executable, "-c", STUB_LAUNCH], env=env, capture_output=True, text=True, timeout=180)
        assert out.returncode == 0, out.stderr[-3000:]
        events = json.loads(out.stdout.strip().splitlines()[-1])
        assert [hit for _, hit in events] == [False], events  # compiled by the launch, not found precompiled
        hashes["launched"] = {events[0][0]}
        assert len(set().union(*hashes.values())) == 6  # 2 + 1 + 2 + 1 distinct binaries
        yield SimpleNamespace(src=src, triton_dir=triton_dir, mine=mine, other=other, hashes=hashes)
    for name in ("twin_kernels", "twin_pkg.twin_kernels", "twin_pkg"):
        sys.modules.pop(name, None)


def _binary_hashes(triton_dir: Path, manifest) -> set[str]:
    """The compile hashes (Triton's metadata) of the binaries an archive's manifest lists."""
    return {json.loads((triton_dir / b.dir / f"{b.kernel}.json").read_text())["hash"] for b in manifest.binaries}


def _dirs_of(triton_dir: Path, hashes: set[str]) -> set[str]:
    """The directories of Triton's cache holding the compiles of `hashes`."""
    return {
        d.name
        for d in triton_dir.iterdir()
        if (d / "add_kernel.json").is_file() and json.loads((d / "add_kernel.json").read_text())["hash"] in hashes
    }


def _tune(kernel) -> None:
    autotune.clear_autotune_cache(kernel)
    x = torch.arange(256, dtype=torch.float32)
    kernel(x, x, torch.empty_like(x), 256)


def test_a_module_qualname_takes_its_own_binaries_and_those_its_launches_compiled_not_a_twins(twins, tmp_path):
    _tune(twins.mine.tuned)
    _tune(twins.other.tuned)
    h = twins.hashes
    manifest = export_archive(
        tmp_path / "mine.tar.gz", kernels=["twin_kernels:add_kernel"], triton_cache_dir=twins.triton_dir
    )
    assert _binary_hashes(twins.triton_dir, manifest) == h["mine"] | h["launched"]
    assert [r.kernel for r in manifest.records] == ["add_kernel"] and len(manifest.records) == 1
    with tarfile.open(tmp_path / "mine.tar.gz") as tar:  # what the archive holds, not only what it lists
        packed = {n.split("/")[1] for n in tar.getnames() if n.startswith("triton/")}
    assert packed == _dirs_of(twins.triton_dir, h["mine"] | h["launched"])
    assert not packed & _dirs_of(twins.triton_dir, h["other"] | h["variant"])

    # the kernel object is that one kernel: the same binaries and records, named by its module:qualname
    by_object = export_archive(tmp_path / "obj.tar.gz", kernels=[twins.mine.tuned], triton_cache_dir=twins.triton_dir)
    assert by_object.kernels == ["twin_kernels:add_kernel"]
    assert _binary_hashes(twins.triton_dir, by_object) == h["mine"] | h["launched"]
    assert [r.path for r in by_object.records] == [r.path for r in manifest.records]

    # the same function name in the same file, in a class: told apart by the line of its def
    variant = export_archive(
        tmp_path / "v.tar.gz", kernels=["twin_kernels:Variants.add_kernel"], triton_cache_dir=twins.triton_dir
    )
    assert _binary_hashes(twins.triton_dir, variant) == h["variant"] and variant.records == []

    # the short name keeps meaning every module's kernel of that name
    every = export_archive(tmp_path / "all.tar.gz", kernels=["add_kernel"], triton_cache_dir=twins.triton_dir)
    assert _binary_hashes(twins.triton_dir, every) == set().union(*h.values())
    assert len(every.records) == 2


def test_the_cli_finds_a_package_module_without_running_it_and_needs_no_record(twins, tmp_path):
    """`autotune export --kernel pkg.mod:qualname` in a fresh process, run where the module imports: the module's
    file is found without importing it (the package's __init__ does not run), and a kernel precompiled but never
    tuned is exported with its binaries alone."""
    inits = twins.src / "inits.txt"
    before = inits.read_text() if inits.exists() else ""
    (tmp_path / "empty-cache").mkdir()
    archive = tmp_path / "other.tar.gz"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "autotune",
            "export",
            str(archive),
            "--kernel",
            "twin_pkg.twin_kernels:add_kernel",
            "--cache-dir",
            str(tmp_path / "empty-cache"),
            "--triton-cache-dir",
            str(twins.triton_dir),
        ],
        cwd=twins.src,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "0 records and 2 compiled kernels of twin_pkg.twin_kernels:add_kernel for cuda:90" in out.stdout
    assert (inits.read_text() if inits.exists() else "") == before
    with tarfile.open(archive) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))
    hashes = {
        json.loads((twins.triton_dir / b["dir"] / "add_kernel.json").read_text())["hash"] for b in manifest["binaries"]
    }
    assert hashes == twins.hashes["other"]


def test_a_kernel_whose_binaries_cannot_be_told_apart_says_why_and_how(twins, tmp_path, monkeypatch):
    # a script's kernel, or a module not found from here: which binaries are its cannot be told
    with pytest.raises(
        ArchiveError,
        match=r"a script's kernel \(__main__\) has no module name to find its file by; "
        r"pass the kernel itself to export_archive\(kernels=\[...\]\), or export "
        r"by its short name 'add_kernel'",
    ):
        export_archive(tmp_path / "a.tar.gz", kernels=["__main__:add_kernel"], triton_cache_dir=twins.triton_dir)
    with pytest.raises(
        ArchiveError,
        match=r"no module no_such_module is found from here .*; run the export where "
        r"no_such_module imports \(or set PYTHONPATH\)",
    ):
        export_archive(tmp_path / "a.tar.gz", kernels=["no_such_module:add_kernel"], triton_cache_dir=twins.triton_dir)
    assert not (tmp_path / "a.tar.gz").exists()

    # a cache holding only the twin's binaries: nothing of this kernel's, and the message says whose they are
    only_mine = tmp_path / "only-mine"
    for name in _dirs_of(twins.triton_dir, twins.hashes["mine"]):
        shutil.copytree(twins.triton_dir / name, only_mine / name)
    with pytest.raises(
        ArchiveError,
        match=r"nothing to export for \['twin_pkg.twin_kernels:add_kernel'\]: .*none of "
        r"the compiled kernels named add_kernel in .* was compiled from "
        r"twin_pkg.twin_kernels:add_kernel \(.*twin_pkg.twin_kernels\.py:\d+\); "
        r"they were compiled from .*twin-src\d*/twin_kernels\.py",
    ):
        export_archive(tmp_path / "a.tar.gz", kernels=["twin_pkg.twin_kernels:add_kernel"], triton_cache_dir=only_mine)


def test_binaries_compiled_without_line_info_are_left_out_of_a_module_qualname_export_with_a_warning(
    twins, tmp_path, monkeypatch
):
    """TRITON_DISABLE_LINE_INFO=1 makes Triton leave every source location out of its IR (3.6 to 3.9): such a
    binary is no kernel's in particular. A module:qualname export leaves it out and says so; the short name
    takes it."""
    stripped = tmp_path / "stripped"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(stripped))
    monkeypatch.setenv("TRITON_DISABLE_LINE_INFO", "1")
    report = precompile(twins.mine.tuned, signature=SIGNATURE, targets="cuda:90", workers=0)
    assert len(report.compiled) == 2
    _tune(twins.mine.tuned)
    with pytest.warns(
        UserWarning,
        match=r"2 compiled kernels named add_kernel in .* cannot be told to be "
        r"twin_kernels:add_kernel's \(compiled with TRITON_DISABLE_LINE_INFO set, "
        r"which leaves the source location out\) and were left out; export by the "
        r"short name 'add_kernel'",
    ):
        manifest = export_archive(tmp_path / "a.tar.gz", kernels=["twin_kernels:add_kernel"], triton_cache_dir=stripped)
    assert manifest.binaries == [] and len(manifest.records) == 1
    assert len(export_archive(tmp_path / "b.tar.gz", kernels=["add_kernel"], triton_cache_dir=stripped).binaries) == 2


def test_a_record_is_for_a_target_of_its_vendor_only():
    """ROCm's torch gives an AMD GPU a compute capability too (an MI250 reads sm90): its winners are never a CUDA
    target's, and an NVIDIA GPU's never a HIP target's; the interpreter's are no target's."""
    from autotune.aot.archive import record_fits_targets

    assert record_fits_targets("NVIDIA H100 80GB HBM3 sm90", ["cuda:90"])
    assert not record_fits_targets("NVIDIA H100 80GB HBM3 sm90", ["cuda:80", "hip:gfx942"])
    assert not record_fits_targets("AMD Instinct MI250X/MI250 sm90", ["cuda:90"])
    assert record_fits_targets("AMD Instinct MI250X/MI250 sm90", ["cuda:90", "hip:gfx90a"])
    assert not record_fits_targets("interpreter", ["cuda:90", "hip:gfx942"])
