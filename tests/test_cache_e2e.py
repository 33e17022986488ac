"""The cache under the real decorator: a Triton vector add through the interpreter, in this process and
in fresh Python processes (which must launch the winner from disk without tuning)."""

from __future__ import annotations

import errno
import importlib.util
import itertools
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from autotune import clear_autotune_cache, stats
from autotune.errors import CacheWarning
from autotune.space import Config
from autotune.storage import counters as stats_mod
from autotune.storage import disk_entries, load_record
from autotune.storage import files as files_mod
from autotune.storage import fingerprint as fingerprint_mod

REPO = Path(__file__).resolve().parents[1]

KERNEL_MODULE = """
import triton
import triton.language as tl
from autotune import autotune, Tuning


@autotune(space={{"BLOCK": {blocks}}}, key=["n"], grid="(cdiv(n, $BLOCK),)",
          tuning=Tuning(preset="fast", reps=2, warmup=0, compile_workers=0))
@triton.jit
def vadd(x, y, out, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n{extra}
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)
"""

CHILD = """
import json, sys, warnings
import torch
sys.path.insert(0, sys.argv[1])
import kmod
import autotune
n = int(sys.argv[2])
x, y, out = torch.randn(n), torch.randn(n), torch.empty(n)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    kmod.vadd(x, y, out, n)
torch.testing.assert_close(out, x + y)
print(json.dumps({"stats": autotune.stats()["vadd"], "info": kmod.vadd.cache_info(),
                  "best": dict(kmod.vadd.best_config),
                  "warnings": [str(w.message) for w in caught]}))
"""

_counter = itertools.count()


def write_kernel(directory: Path, blocks=(32, 64), extra: str = "") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "kmod.py"
    path.write_text(KERNEL_MODULE.format(blocks=tuple(blocks), extra=extra))
    return path


def load_kernel(tmp_path: Path, blocks=(32, 64), extra: str = ""):
    """A freshly decorated `vadd` (empty memory), from a module file of its own."""
    path = write_kernel(tmp_path / f"k{next(_counter)}", blocks, extra)
    # One module name for every load, as a restarted process has: entries are filed by module and qualified name.
    spec = importlib.util.spec_from_file_location("kmod_e2e", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.vadd


def call(kernel, n=256):
    torch.manual_seed(n)
    x, y, out = torch.randn(n), torch.randn(n), torch.empty(n)
    kernel(x, y, out, n)
    torch.testing.assert_close(out, x + y)
    return kernel.best_config


def run_child(module_dir: Path, n: int = 256, script_text: str = CHILD, **env_extra: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["TRITON_INTERPRET"] = "1"
    env.update(env_extra)
    script = module_dir / "child.py"
    script.write_text(script_text)
    res = subprocess.run(
        [sys.executable, str(script), str(module_dir), str(n)], capture_output=True, text=True, env=env, timeout=240
    )
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.fixture(autouse=True)
def _fresh_stats():
    stats_mod.reset_stats()
    yield


def only_entry():
    (entry,) = disk_entries("vadd")
    return load_record(entry.path)


def newest_entry():
    """The latest of the key's entries: an edited kernel's is filed beside its old source's (issue 40, item 12)."""
    return max((load_record(e.path) for e in disk_entries("vadd")), key=lambda r: r.timestamp)


# ---------------------------------------------------------------------------------------------- across processes


def test_a_second_process_launches_the_winner_from_disk_without_tuning(tmp_path):
    mod = write_kernel(tmp_path / "m").parent
    first = run_child(mod)
    assert first["stats"]["tunings"] == 1 and first["stats"]["misses"] == 1
    second = run_child(mod)
    assert second["stats"]["tunings"] == 0 and second["stats"]["misses"] == 0
    assert second["stats"]["disk_hits"] == 1
    assert second["best"] == first["best"] == dict(only_entry().winner)
    assert first["warnings"] == second["warnings"] == []


def test_an_edited_kernel_retunes_in_the_next_process(tmp_path):
    mod = write_kernel(tmp_path / "m").parent
    run_child(mod)
    old = only_entry()
    write_kernel(tmp_path / "m", extra="\n    mask = mask & (offs >= 0)")  # same result, new source
    edited = run_child(mod)
    assert edited["stats"]["tunings"] == 1 and edited["stats"]["disk_hits"] == 0
    new = newest_entry()  # filed beside the old source's entry, which stays for the old code
    assert new.source_hash != old.source_hash and new.timestamp > old.timestamp and len(disk_entries("vadd")) == 2
    assert run_child(mod)["stats"]["tunings"] == 0


HELPER_MODULE = KERNEL_MODULE.replace(
    "@autotune(",
    """
OFFSET = {offset}


@triton.jit
def add(a, b):
    return a + b + OFFSET


@autotune(""",
).replace(
    "tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask)",
    "add(tl.load(x + offs, mask=mask), tl.load(y + offs, mask=mask))",
)


def test_an_edited_helper_or_constant_retunes_in_the_next_process_and_a_moved_kernel_does_not(tmp_path):
    """The kernel's identity covers the @triton.jit helpers it calls and the globals they read (else an edit
    there would launch the old variant's winner); not line numbers, so a comment added above it is a disk hit."""

    def write(offset="0", top=""):
        (tmp_path / "m").mkdir(exist_ok=True)
        (tmp_path / "m" / "kmod.py").write_text(top + HELPER_MODULE.format(blocks=(32, 64), extra="", offset=offset))
        return tmp_path / "m"

    mod = write()
    assert run_child(mod)["stats"]["tunings"] == 1
    first = only_entry()
    assert run_child(write(top="# moved down\n\n\n"))["stats"]["disk_hits"] == 1
    assert run_child(write(offset="0.0"))["stats"]["tunings"] == 1  # the same sum: a new constant
    assert newest_entry().source_hash != first.source_hash
    (tmp_path / "m" / "kmod.py").write_text(
        (tmp_path / "m" / "kmod.py").read_text().replace("return a + b + OFFSET", "return b + a + OFFSET")
    )  # the helper's body
    edited = run_child(mod)
    assert edited["stats"]["tunings"] == 1 and edited["stats"]["disk_hits"] == 0


GENERATED_CHILD = CHILD.replace(
    "import kmod\n",
    """import pathlib, types
kmod = types.ModuleType("generated")   # a kernel made by exec() from generated text: no source to read back
exec(compile(pathlib.Path(sys.argv[1], "kmod.py").read_text(), "<generated>", "exec"), kmod.__dict__)
""",
)


def test_a_kernel_made_by_exec_is_cached_by_its_bytecode_across_processes(tmp_path):
    """Triton's interpreter runs a kernel exec()'d from text, whose source inspect cannot read: its bytecode
    identifies it instead, the same in a fresh process (a disk hit) and different once its body changes."""
    mod = write_kernel(tmp_path / "m").parent
    first = run_child(mod, script_text=GENERATED_CHILD)
    assert first["stats"]["tunings"] == 1
    record = only_entry()
    second = run_child(mod, script_text=GENERATED_CHILD)
    assert second["stats"]["tunings"] == 0 and second["stats"]["disk_hits"] == 1
    write_kernel(tmp_path / "m", extra="\n    mask = mask & (offs >= 0)")
    edited = run_child(mod, script_text=GENERATED_CHILD)
    assert edited["stats"]["tunings"] == 1 and newest_entry().source_hash != record.source_hash


def test_exec_kernels_that_differ_only_in_an_annotation_have_their_own_identity():
    """`m` and `m: tl.constexpr` compile the same bytecode but are different kernels to Triton."""
    import triton
    import triton.language as tl

    from autotune.storage import source_hash

    def generated(annotation: str):
        text = (
            f"@triton.jit\ndef scale(x, m{annotation}, BLOCK: tl.constexpr):\n"
            "    offs = tl.arange(0, BLOCK)\n    tl.store(x + offs, tl.load(x + offs) * m)\n"
        )
        namespace = {"triton": triton, "tl": tl}
        exec(compile(text, "<generated>", "exec"), namespace)
        return namespace["scale"]

    assert source_hash(generated("")) == source_hash(generated(""))
    assert source_hash(generated("")) != source_hash(generated(": tl.constexpr"))


def test_offline_process_uses_cached_winner_and_falls_back_on_a_miss(tmp_path):
    mod = write_kernel(tmp_path / "m", blocks=(64, 32)).parent
    tuned = run_child(mod, n=256)
    hit = run_child(mod, n=256, AUTOTUNE_OFFLINE="1")
    assert hit["best"] == tuned["best"] and hit["stats"]["tunings"] == 0 and hit["warnings"] == []
    miss = run_child(mod, n=100, AUTOTUNE_OFFLINE="1")
    assert miss["best"] == {"BLOCK": 64}  # the space's first config
    assert miss["stats"]["misses"] == 1 and miss["stats"]["tunings"] == 0
    assert len(miss["warnings"]) == 1 and "OFFLINE" in miss["warnings"][0]
    assert len(disk_entries("vadd")) == 1  # offline writes nothing


# ---------------------------------------------------------------------------------------------- in this process


def test_offline_miss_warns_once_per_key_and_counts(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_OFFLINE", "1")
    vadd = load_kernel(tmp_path, blocks=(64, 32))
    with pytest.warns(CacheWarning, match="OFFLINE") as caught:
        for _ in range(3):
            assert call(vadd, 256) == Config(BLOCK=64)
        call(vadd, 100)
    assert len([w for w in caught if issubclass(w.category, CacheWarning)]) == 2  # once per key
    s = stats()["vadd"]
    assert s["misses"] == 4 and s["tunings"] == 0
    assert disk_entries() == []


def test_offline_hit_uses_the_winner(tmp_path, monkeypatch):
    winner = call(load_kernel(tmp_path, blocks=(32, 64, 128)))
    monkeypatch.setenv("AUTOTUNE_OFFLINE", "1")
    vadd = load_kernel(tmp_path, blocks=(32, 64, 128))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert call(vadd) == winner
    assert stats()["vadd"]["disk_hits"] == 1 and stats()["vadd"]["tunings"] == 1  # the one tuning was the first


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"extra": "\n    mask = mask & (offs >= 0)"}, "the kernel source changed"),
        ({"blocks": (32, 64)}, "the search space changed"),
    ],
    ids=["source", "space"],
)
def test_offline_miss_of_a_stale_entry_says_why_it_was_not_used(tmp_path, monkeypatch, change, reason):
    """Imported, but the served kernel is not the one tuned: the offline warning names the stale entry's reason
    (the whole diagnosis of "deployed, yet untuned"), not "no cached winner"."""
    call(load_kernel(tmp_path, blocks=(32, 64, 128)))
    monkeypatch.setenv("AUTOTUNE_OFFLINE", "1")
    vadd = load_kernel(tmp_path, **{"blocks": (32, 64, 128), **change})
    with pytest.warns(CacheWarning) as caught:
        call(vadd)
    (message,) = [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]
    assert (
        f"no usable cached winner for vadd key=(256,) ['torch.float32', 'torch.float32', 'torch.float32'] "
        f"(the disk entry is out of date ({reason})); launching" in message
    )
    assert len(disk_entries()) == 1  # offline: the stale entry is left as it is


def test_offline_miss_of_a_corrupt_entry_says_what_offline_does_not_that_it_tunes(tmp_path, monkeypatch):
    call(load_kernel(tmp_path, blocks=(32, 64, 128)))
    entry = disk_entries()[0].path
    entry.write_text("{bad")
    monkeypatch.setenv("AUTOTUNE_OFFLINE", "1")
    with pytest.warns(CacheWarning) as caught:
        call(load_kernel(tmp_path, blocks=(32, 64, 128)))
    said = " ".join(str(w.message) for w in caught if issubclass(w.category, CacheWarning))
    assert "not valid JSON" in said and "AUTOTUNE_OFFLINE=1 launches vadd key" in said, said
    assert "tuning vadd" not in said and "replacing it" not in said
    assert entry.read_text() == "{bad"  # offline: left as it is


def test_disable_mode_neither_tunes_nor_writes(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_DISABLE", "1")
    vadd = load_kernel(tmp_path, blocks=(128, 32))
    assert call(vadd) == Config(BLOCK=128)
    assert stats()["vadd"]["tunings"] == 0 and disk_entries() == []


def test_force_mode_retunes_over_a_disk_entry(tmp_path, monkeypatch):
    call(load_kernel(tmp_path))
    before = only_entry()
    monkeypatch.setenv("AUTOTUNE_FORCE", "1")
    vadd = load_kernel(tmp_path)
    call(vadd)
    assert stats()["vadd"]["tunings"] == 2 and stats()["vadd"]["disk_hits"] == 0
    assert only_entry().timestamp > before.timestamp


@pytest.mark.parametrize("blocks", [(32, 64, 128), (64, 128), (16, 32)])
def test_a_changed_space_retunes_and_keeps_the_old_space_s_entry_beside(tmp_path, blocks):
    first = call(load_kernel(tmp_path, blocks=(32, 64)))
    vadd = load_kernel(tmp_path, blocks=blocks)  # (32, 64, 128) and (64, 128) may still hold the old winner
    winner = call(vadd)
    assert stats()["vadd"]["tunings"] == 2 and stats()["vadd"]["disk_hits"] == 0
    assert winner["BLOCK"] in blocks and len(disk_entries("vadd")) == 2  # one entry per space
    assert call(load_kernel(tmp_path, blocks=blocks)) == winner
    assert call(load_kernel(tmp_path, blocks=(32, 64))) == first  # the first space's winner was not lost
    assert stats()["vadd"]["disk_hits"] == 2 and stats()["vadd"]["tunings"] == 2


def test_another_device_retunes(tmp_path, monkeypatch):
    call(load_kernel(tmp_path))
    monkeypatch.setattr(fingerprint_mod, "device_fingerprint", lambda: "NVIDIA H100 80GB HBM3 sm90")
    call(load_kernel(tmp_path))
    assert stats()["vadd"]["tunings"] == 2
    assert sorted(e.record.device for e in disk_entries("vadd")) == ["NVIDIA H100 80GB HBM3 sm90", "interpreter"]


def test_another_triton_version_retunes_and_keeps_its_own_entry(tmp_path, monkeypatch):
    call(load_kernel(tmp_path))
    real = fingerprint_mod.runtime_versions()
    monkeypatch.setattr(fingerprint_mod, "runtime_versions", lambda: ("3.0.0", real[1]))
    call(load_kernel(tmp_path))
    assert stats()["vadd"]["tunings"] == 2
    assert sorted(e.record.triton_version for e in disk_entries("vadd")) == sorted([real[0], "3.0.0"])
    monkeypatch.setattr(fingerprint_mod, "runtime_versions", lambda: real)
    call(load_kernel(tmp_path))  # the first version's entry is still there: read, not tuned again
    assert stats()["vadd"]["tunings"] == 2


def test_corrupt_entry_warns_and_the_launch_is_right(tmp_path):
    call(load_kernel(tmp_path))
    (entry,) = disk_entries("vadd")
    entry.path.write_text(entry.path.read_text()[:40])
    vadd = load_kernel(tmp_path)
    with pytest.warns(CacheWarning, match=entry.path.name):
        call(vadd)
    assert stats()["vadd"]["tunings"] == 2
    assert only_entry().winner == vadd.best_config


def test_full_disk_warns_and_the_launch_is_right(tmp_path, monkeypatch):
    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(files_mod, "write_all", full)
    vadd = load_kernel(tmp_path)
    with pytest.warns(CacheWarning, match="disk is full"):
        call(vadd)
    assert disk_entries() == []
    call(vadd)
    assert stats()["vadd"]["hits"] == 1 and stats()["vadd"]["tunings"] == 1


def test_clear_autotune_cache_on_a_decorated_kernel(tmp_path):
    clear_autotune_cache()  # other tests' kernels still alive in this process would count in the last clear
    vadd = load_kernel(tmp_path)
    call(vadd, 256)
    call(vadd, 100)
    call(vadd, 300)
    with pytest.raises(ValueError):
        clear_autotune_cache(key=(256,))
    assert clear_autotune_cache(vadd, key=(256,)) == 1  # in memory and on disk: counted once
    assert sorted(tuple(e.record.key) for e in disk_entries("vadd")) == [(100,), (300,)]
    call(vadd, 256)  # tunes again
    assert stats()["vadd"]["tunings"] == 4
    assert clear_autotune_cache("vadd", key=100) == 1
    assert clear_autotune_cache(vadd) == 2
    assert vadd.cache_info()["entries"] == 0 and disk_entries() == []
    call(vadd, 256)
    assert clear_autotune_cache() == 1
    call(vadd, 256)
    assert stats()["vadd"]["tunings"] == 6


def test_offline_miss_warning_points_at_the_callers_line(monkeypatch):
    """#12 item 8: the AUTOTUNE_OFFLINE miss warning names the user's line, not autotune/decorator.py."""
    import warnings

    import torch
    from kernels_for_tests import add_kernel

    from autotune import CacheWarning, autotune

    monkeypatch.setenv("AUTOTUNE_OFFLINE", "1")
    tuned = autotune(space={"BLOCK": [16, 32]}, key=["n"], grid="(cdiv(n, $BLOCK),)")(add_kernel)
    x = torch.ones(16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tuned(x, x, torch.empty_like(x), 16)
    offline = [w for w in caught if issubclass(w.category, CacheWarning) and "AUTOTUNE_OFFLINE" in str(w.message)]
    assert len(offline) == 1 and offline[0].filename == __file__


# --- #12 item 2: kernels are told apart by module and qualified name, not by their short name --------------------


def _load_as(tmp_path: Path, module_name: str, blocks=(32, 64)):
    """`twin`: the vadd kernel under a name no other test uses, from a module named `module_name`."""
    path = write_kernel(tmp_path / module_name, blocks)
    path.write_text(path.read_text().replace("def vadd(", "def twin("))
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.twin


def test_two_kernels_with_one_name_in_two_modules_keep_their_own_entries(tmp_path):
    a, b = _load_as(tmp_path, "mod_a"), _load_as(tmp_path, "mod_b")  # same name, source and space
    call(a)
    call(b)
    entries = disk_entries("twin")
    assert len(entries) == 2 and {e.record.kernel_id for e in entries} == {"mod_a:twin", "mod_b:twin"}
    assert len({e.path.parent for e in entries}) == 2
    tunings_before = stats()["twin"]["tunings"]  # counters are per short name
    a_again, b_again = _load_as(tmp_path, "mod_a"), _load_as(tmp_path, "mod_b")
    call(a_again)
    call(b_again)
    assert stats()["twin"]["tunings"] == tunings_before  # both read their own entry back
    assert stats()["twin"]["disk_hits"] >= 2


def test_clearing_by_short_name_clears_every_kernel_of_that_name_and_says_so(tmp_path):
    a, b = _load_as(tmp_path, "mod_a"), _load_as(tmp_path, "mod_b")
    call(a)
    call(b)
    assert clear_autotune_cache(a) == 1  # the object: that kernel only
    assert [e.record.kernel_id for e in disk_entries("twin")] == ["mod_b:twin"]
    call(a)
    with pytest.warns(UserWarning, match="cleared 2 kernels of that name: mod_a:twin, mod_b:twin"):
        assert clear_autotune_cache("twin") == 2
    assert disk_entries("twin") == []


def test_clearing_by_module_qualname_clears_that_kernel_alone_in_memory_and_on_disk(tmp_path):
    a, b = _load_as(tmp_path, "mod_a"), _load_as(tmp_path, "mod_b")
    call(a)
    call(b)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one kernel: no "cleared 2 kernels"
        assert clear_autotune_cache("mod_a:twin", key=(256,)) == 1  # one entry in memory and on disk
    assert [e.record.kernel_id for e in disk_entries("twin")] == ["mod_b:twin"]
    assert len(a.cache.memory) == 0 and len(b.cache.memory) == 1
    assert [e.record.kernel_id for e in disk_entries("mod_b:twin")] == ["mod_b:twin"]
    assert clear_autotune_cache("mod_a:twin") == 0 and clear_autotune_cache("nomod:twin") == 0
    assert clear_autotune_cache("mod_b:twin") == 1 and disk_entries("twin") == []
