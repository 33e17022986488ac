"""Regression fixes: sampling a large union never lists its parts to learn they are empty, nor recounts its parts'
sizes per draw; an offline miss reads the kernel's directory once per cache, and finds another device's entry
past the first 256 files."""

from __future__ import annotations

import json
import os
import random
import warnings
from pathlib import Path

import torch
import triton
import triton.language as tl

from autotune import CacheWarning, CartesianSpace, Tuning, autotune
from autotune.space import spaces
from autotune.storage import files, kernel_cache


# ------------------------------------------------------------------------ a union's parts are never listed to sample
def test_sampling_a_large_union_of_listable_parts_never_lists_them():
    """Each part (90,000 configs) is under LIST_LIMIT, the union over it: its draws must not list a part."""
    calls = [0]

    def keep(config):
        calls[0] += 1
        return config["A"] != 7

    a = CartesianSpace(A=range(300), B=range(300)).where(keep)
    b = CartesianSpace(A=range(300), C=range(300)).where(keep)
    union = a + b
    assert union.lazy and not a.lazy and not b.lazy
    rng = random.Random(0)
    drawn = [union.sample(rng) for _ in range(200)]
    assert all(union.contains(c) for c in drawn)
    # Each part's sampler probes its filter 1,000 times, and each draw calls it about once: listing would be 90,000.
    assert calls[0] < 10_000, calls[0]


def test_warm_draws_of_a_union_of_many_parts_do_not_recount_the_parts(monkeypatch):
    parts = [CartesianSpace(A=range(1000), B=range(200), V=[i]) for i in range(40)]
    union = parts[0]
    for part in parts[1:]:
        union = union + part
    rng = random.Random(0)
    union.sample(rng)  # the first draw counts the parts, once
    counted = [0]
    real = spaces.CartesianSpace._len_all

    def counting(self):
        counted[0] += 1
        return real(self)

    monkeypatch.setattr(spaces.CartesianSpace, "_len_all", counting)
    for _ in range(100):
        union.sample(rng)
    assert counted[0] <= 100, counted[0]  # at most one per draw (before: every part's, at every level, per draw)


# ------------------------------------------------------------------------------ an offline miss's device diagnosis
@triton.jit
def offline_add_w(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


def _decorate():
    return autotune(
        space=[{"BLOCK": 64}, {"BLOCK": 32}],
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        tuning=Tuning(compile_workers=0, warmup=0, reps=1, refine_topk=0),
    )(offline_add_w)


def _call(kernel, n: int) -> list[str]:
    x, y, out = torch.rand(n), torch.rand(n), torch.empty(n)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel(x, y, out, n)
    torch.testing.assert_close(out, x + y)
    return [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]


def test_an_offline_miss_reads_the_directory_once_and_finds_an_entry_past_many_others(monkeypatch):
    monkeypatch.setenv("AUTOTUNE_DEVICE_KIND", "GPU A")
    _call(_decorate(), 100)  # tuned and stored for GPU A
    (path,) = Path(os.environ["AUTOTUNE_CACHE_DIR"]).rglob("*.json")
    record = json.loads(path.read_text())
    for i in range(300):  # other keys of GPU A, named to come before the key's own entry
        other = dict(record, key=[1000 + i])
        (path.parent / f"{i:032x}.json").write_text(json.dumps(other))
    path.rename(path.parent / ("f" * 32 + ".json"))
    reads = [0]
    real = files.read_entry_bytes

    def counting(*args, **kwargs):
        reads[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(kernel_cache, "read_entry_bytes", counting, raising=False)
    monkeypatch.setenv("AUTOTUNE_DEVICE_KIND", "GPU B")
    monkeypatch.setenv("AUTOTUNE_OFFLINE", "1")
    kernel = _decorate()
    (warning,) = _call(kernel, 100)
    assert "entries of this key exist for device 'GPU A', this process is 'GPU B'" in warning, warning
    assert reads[0] == 301, reads[0]  # each entry file once
    for n in (200, 300):  # new keys: the map built on the first miss answers them
        (other,) = _call(kernel, n)
        assert "no cached winner" in other and "device" not in other, other
    assert reads[0] == 301, reads[0]


def test_a_deeply_nested_file_beside_the_entries_never_fails_an_offline_call(monkeypatch):
    """The diagnosis skips what it cannot read: a file nested past msgspec's depth raised RecursionError into the
    kernel's call."""
    monkeypatch.setenv("AUTOTUNE_DEVICE_KIND", "GPU A")
    _call(_decorate(), 100)
    (path,) = Path(os.environ["AUTOTUNE_CACHE_DIR"]).rglob("*.json")
    (path.parent / ("0" * 32 + ".json")).write_text('{"trials": ' + "[" * 100_000 + "]" * 100_000 + "}")
    monkeypatch.setenv("AUTOTUNE_DEVICE_KIND", "GPU B")
    monkeypatch.setenv("AUTOTUNE_OFFLINE", "1")
    (warning,) = _call(_decorate(), 100)
    assert "entries of this key exist for device 'GPU A', this process is 'GPU B'" in warning, warning
