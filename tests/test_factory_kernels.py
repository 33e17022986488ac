"""Kernels made by a factory (`def make(V): @autotune @triton.jit def k(...)` reading V): each variant has its own
identity ("module:qualname#<8 hex>"), directory and slots, so any number of them stay cached across processes;
"module:qualname" names them all, a kernel without a closure keeps its directory."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from autotune import clear_autotune_cache
from autotune.options import cache_dir
from autotune.storage.entries import is_dir_of, kernel_matches, location_pattern, short_name

REPO = Path(__file__).resolve().parents[1]
VARIANTS = 6  # more than the 4 slots of a key (storage.protocol.SOURCES_PER_KEY)
BASE = "factory_mod:make_plain.<locals>.scale_kernel"

FACTORY = textwrap.dedent("""
    import torch
    import triton
    import triton.language as tl

    from autotune import autotune


    def make_plain(VARIANT):
        @triton.jit
        def scale_kernel(x, out, n, BLOCK: tl.constexpr, USE: tl.constexpr = False):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            m = offs < n
            v = tl.load(x + offs, mask=m)
            if USE:  # not taken: the interpreter cannot read a closure variable
                v = v * VARIANT
            tl.store(out + offs, v, mask=m)

        return scale_kernel


    def make(VARIANT):
        return autotune(space={"BLOCK": (16, 32)}, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning="fast")(
            make_plain(VARIANT)
        )


    @autotune(space={"BLOCK": (16, 32)}, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning="fast")
    @triton.jit
    def plain_kernel(x, out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=m), mask=m)
""")

RUN = textwrap.dedent("""
    import json, sys
    import torch
    import factory_mod

    kernels = [factory_mod.make(v) for v in range(int(sys.argv[1]))] + [factory_mod.plain_kernel]
    x = torch.rand(64)
    how = [k.select_and_launch((x, torch.empty(64), 64), {}, None, False).how for k in kernels]
    print(json.dumps({"how": how, "ids": [k.identity for k in kernels]}))
""")


@pytest.fixture
def work(tmp_path) -> Path:
    d = tmp_path / "work"
    d.mkdir()
    (d / "factory_mod.py").write_text(FACTORY)
    (d / "run.py").write_text(RUN)
    return d


def _env(work: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(work), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.setdefault("TRITON_INTERPRET", "1")
    return env


def _tune_in_a_process(work: Path) -> dict:
    res = subprocess.run(
        [sys.executable, str(work / "run.py"), str(VARIANTS)],
        capture_output=True,
        text=True,
        env=_env(work),
        cwd=str(work),
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def _kernel_dirs() -> list[str]:
    return sorted(p.name for p in Path(cache_dir()).iterdir() if p.is_dir() and not p.name.startswith("."))


def _entries_in(dirname: str) -> int:
    return len(list((Path(cache_dir()) / dirname).glob("*.json")))


def test_every_factory_variant_hits_the_disk_in_a_second_process(work):
    first = _tune_in_a_process(work)
    assert first["how"] == ["tuned"] * (VARIANTS + 1)
    second = _tune_in_a_process(work)
    assert second["how"] == ["disk"] * (VARIANTS + 1)  # none evicted by the others: each has its own slots
    ids = second["ids"][:VARIANTS]
    assert len(set(ids)) == VARIANTS and all(i.startswith(BASE + "#") and len(i) == len(BASE) + 9 for i in ids)
    assert ids == first["ids"][:VARIANTS]  # the variant is the same in every process


def test_a_kernel_without_a_closure_keeps_its_directory_and_variants_get_their_own(work):
    ids = _tune_in_a_process(work)["ids"]
    assert ids[-1] == "factory_mod:plain_kernel"
    plain = "plain_kernel." + hashlib.sha256(b"factory_mod:plain_kernel").hexdigest()[:8]
    tag = hashlib.sha256(BASE.encode()).hexdigest()[:8]
    variants = sorted(f"scale_kernel.{tag}.{i.rpartition('#')[2]}" for i in ids[:VARIANTS])
    assert _kernel_dirs() == sorted([plain, *variants])


def test_clear_by_module_qualname_clears_every_variant_and_by_variant_one(work):
    ids = _tune_in_a_process(work)["ids"][:VARIANTS]
    tag = hashlib.sha256(BASE.encode()).hexdigest()[:8]
    one = f"scale_kernel.{tag}.{ids[0].rpartition('#')[2]}"
    assert clear_autotune_cache(kernel=ids[0]) == 1
    assert _entries_in(one) == 0
    assert all(_entries_in(d) == 1 for d in _kernel_dirs() if d != one)  # the other variants and the plain kernel
    with warnings.catch_warnings():  # a module:qualname names its variants: clearing them all is no ambiguity
        warnings.simplefilter("error")
        assert clear_autotune_cache(kernel=BASE) == VARIANTS - 1
    assert [d for d in _kernel_dirs() if _entries_in(d)] == [
        "plain_kernel." + hashlib.sha256(b"factory_mod:plain_kernel").hexdigest()[:8]
    ]


def test_cache_show_of_module_qualname_lists_every_variant(work):
    ids = _tune_in_a_process(work)["ids"][:VARIANTS]
    res = subprocess.run(
        [sys.executable, "-m", "autotune", "cache", "show", BASE],
        capture_output=True,
        text=True,
        env=_env(work),
        cwd=str(REPO),
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert all(i in res.stdout for i in ids), res.stdout
    assert "plain_kernel" not in res.stdout


def test_names_of_a_variant():
    variant = BASE + "#0123abcd"
    tag = hashlib.sha256(BASE.encode()).hexdigest()[:8]
    assert short_name(variant) == "scale_kernel"
    assert kernel_matches("scale_kernel", variant, BASE) and kernel_matches("scale_kernel", variant, variant)
    assert not kernel_matches("scale_kernel", BASE + "#99999999", variant)
    assert not kernel_matches("scale_kernel", BASE, variant)
    assert is_dir_of(f"scale_kernel.{tag}.0123abcd", "scale_kernel")
    assert is_dir_of(f"scale_kernel.{tag}.0123abcd", BASE) and is_dir_of(f"scale_kernel.{tag}", BASE)
    assert is_dir_of(f"scale_kernel.{tag}.0123abcd", variant)
    assert not is_dir_of(f"scale_kernel.{tag}.99999999", variant) and not is_dir_of(f"scale_kernel.{tag}", variant)
    assert location_pattern(BASE) == f"*.{tag}*" and location_pattern(variant) == f"*.{tag}.0123abcd"


def test_the_redis_tier_finds_every_variant_by_module_qualname_and_one_by_its_variant(tmp_path, redis_server):
    """A remote tier scans locations with `location_pattern`: a variant's location must be in it."""
    pytest.importorskip("redis", reason="the redis client is not installed (pip install 'autotune[redis]')")
    import msgspec
    from cache_files import write_record
    from test_cache import make_record

    from autotune import set_remote_cache
    from autotune.storage.remote_config import remote_tier

    variants = [f"{BASE}#{i:08x}" for i in range(VARIANTS)]
    for kernel_id in variants:
        write_record(msgspec.structs.replace(make_record((1,), kernel="scale_kernel"), kernel_id=kernel_id))
    env = dict(os.environ, AUTOTUNE_REMOTE_CACHE=redis_server.url)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    res = subprocess.run(
        [sys.executable, "-m", "autotune", "cache", "push", "--kernel", BASE],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert res.returncode == 0 and f"copied {VARIANTS} entries" in res.stdout, res.stderr
    set_remote_cache(redis_server.url)
    assert sorted(e.record.kernel_id for e in remote_tier().entries(BASE)) == variants
    assert [e.record.kernel_id for e in remote_tier().entries(variants[2])] == [variants[2]]


def test_an_edited_body_keeps_each_variant_and_its_directory(work):
    """The variant is the closure's values alone: an edited body is a new source hash in the same directories."""
    first = _tune_in_a_process(work)
    dirs = _kernel_dirs()
    factory = work / "factory_mod.py"
    factory.write_text(factory.read_text().replace("v = v * VARIANT", "v = v * VARIANT + 0"))
    second = _tune_in_a_process(work)
    assert second["ids"] == first["ids"] and _kernel_dirs() == dirs
    assert second["how"] == ["tuned"] * VARIANTS + ["disk"]  # the variants' source changed, the plain kernel's not


def test_variants_made_with_helpers_differ_by_the_helper():
    import triton
    import triton.language as tl

    from autotune.kernel.source import kernel_identity

    @triton.jit
    def double(v):
        return v * 2

    @triton.jit
    def halve(v):
        return v / 2

    def make(op, wrapped):
        op_value = tl.constexpr(op) if wrapped else op

        @triton.jit
        def apply_kernel(x, n):
            tl.store(x, op_value(tl.load(x)))

        return apply_kernel

    ids = {kernel_identity(make(op, wrapped)) for op in (double, halve) for wrapped in (False, True)}
    assert len(ids) == 2  # by the helper; a helper wrapped in tl.constexpr is the same variant
    assert kernel_identity(make(double, False)) == kernel_identity(make(double, False))
    assert kernel_identity(double) == f"{__name__}:test_variants_made_with_helpers_differ_by_the_helper.<locals>.double"


def _launch_plain_variants(work: Path, monkeypatch, count: int) -> list:
    """`count` plain @triton.jit variants of the factory, each tuned in this process through autotune_launch."""
    import torch

    from autotune import autotune_launch

    monkeypatch.syspath_prepend(str(work))
    import factory_mod

    kernels = [factory_mod.make_plain(v) for v in range(count)]
    x = torch.rand(64)
    for kernel in kernels:
        autotune_launch(
            kernel, space={"BLOCK": (16, 32)}, args=(x, torch.empty(64), 64), key=["n"], grid="(cdiv(n, $BLOCK),)"
        )
    return kernels


def test_clearing_one_plain_variant_given_to_autotune_launch_leaves_the_others(work, monkeypatch):
    kernels = _launch_plain_variants(work, monkeypatch, 2)
    assert [_entries_in(d) for d in _kernel_dirs()] == [1, 1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert clear_autotune_cache(kernel=kernels[0]) == 1  # its variant alone, not every copy_kernel
    assert sorted(_entries_in(d) for d in _kernel_dirs()) == [0, 1]


def test_exporting_one_variants_kernel_object_exports_its_records_alone(work, monkeypatch, tmp_path):
    from autotune.aot.archive import export_archive

    kernels = _launch_plain_variants(work, monkeypatch, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no binaries under the interpreter: said, not judged here
        one = export_archive(tmp_path / "one.tar.gz", kernels=[kernels[1]])
        every = export_archive(tmp_path / "every.tar.gz", kernels=[BASE])
    assert len(one.records) == 1 and len(every.records) == 3


def test_an_archive_finds_a_variants_definition_by_its_module_qualname(work):
    from autotune.aot.triton_cache import definition

    file = str(work / "factory_mod.py")
    lines = definition(BASE + "#0123abcd", file).lines
    assert lines and lines == definition(BASE, file).lines  # the one `def` every variant comes from
