"""Sampling a lazy space whose filters keep a tiny share of its product: the `$X` clauses' axes are drawn from their
listed valid combinations (space_sampling), uniformly, where plain rejection would give up; a real kernel
decorated with such a space tunes with every strategy."""

from __future__ import annotations

import random
from collections import Counter

import pytest
import torch
import triton
import triton.language as tl

from autotune import CartesianSpace, SpaceError, Tuning, autotune
from autotune.space import Config
from autotune.space.expressions import WhereString


@triton.jit
def add_tuned_kernel(
    x, y, out, n, BLOCK: tl.constexpr, B: tl.constexpr, C: tl.constexpr, D: tl.constexpr, E: tl.constexpr
):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


def diagonal() -> CartesianSpace:
    """3 x 10^8 configs, of which one in 900 passes: B == C == D (30 of 27,000 combinations) times E."""
    return CartesianSpace(B=range(30), C=range(30), D=range(30), E=range(10_000)).where("$B == $C and $C == $D")


def test_a_filter_keeping_one_config_in_900_samples_every_time_and_uniformly():
    space = diagonal()
    assert space.lazy
    rng = random.Random(7)
    drawn = [space.sample(rng) for _ in range(3000)]
    assert all(c["B"] == c["C"] == c["D"] for c in drawn)
    assert all(space.contains(c) for c in drawn[:50])
    counts = Counter(c["B"] for c in drawn)
    assert set(counts) == set(range(30))  # every diagonal value drawn
    assert 50 <= min(counts.values()) and max(counts.values()) <= 160  # 100 expected each (sd about 10)
    assert len({c["E"] for c in drawn}) > 2000  # the free axis stays uniform too


def test_a_seed_draws_the_same_configs_whatever_the_space_drew_before():
    """How a space samples is decided by the space alone (a probe with its own seed), not by earlier draws: a
    space used before and a fresh one give one seed the same configs."""
    for make in (
        diagonal,
        lambda: CartesianSpace(A=range(300), B=range(300), C=range(40)).where("$A == $B"),
        lambda: CartesianSpace(A=range(300), B=range(300), C=range(40)).where("$A <= $B"),
    ):
        used = make()
        for seed in range(50):
            used.sample(random.Random(seed))
        fresh = make()
        assert [used.sample(random.Random(9)) for _ in range(1)] == [fresh.sample(random.Random(9))]
        rng_used, rng_fresh = random.Random(5), random.Random(5)
        assert [used.sample(rng_used) for _ in range(20)] == [fresh.sample(rng_fresh) for _ in range(20)]


def test_a_filter_keeping_enough_of_the_product_samples_by_plain_rejection_as_before():
    """A `$X` filter that keeps half the product: the draws are those of plain rejection with the caller's rng."""
    space = CartesianSpace(A=range(1000), B=range(1000)).where("$A <= $B")
    rng, plain = random.Random(11), random.Random(11)
    expected = []
    while len(expected) < 30:
        config = Config(A=plain.randrange(1000), B=plain.randrange(1000))
        if config["A"] <= config["B"]:
            expected.append(config)
    assert [space.sample(rng) for _ in range(30)] == expected


def test_clauses_of_one_string_and_of_chained_filters_combine():
    space = (
        CartesianSpace(A=range(50), B=range(50), C=range(50), D=range(5000))
        .where("$A < 3 and $B == $A * 2")
        .where("$C == $B + 1")
    )
    rng = random.Random(0)
    for _ in range(200):
        c = space.sample(rng)
        assert c["A"] < 3 and c["B"] == 2 * c["A"] and c["C"] == c["B"] + 1


def test_a_callable_filter_is_still_checked_on_top_of_the_listed_clauses():
    space = diagonal().where(lambda c: c["E"] % 2 == 0)
    rng = random.Random(1)
    drawn = [space.sample(rng) for _ in range(300)]
    assert all(c["B"] == c["C"] == c["D"] and c["E"] % 2 == 0 for c in drawn)


def test_filters_that_keep_nothing_are_an_empty_space_error_at_decoration():
    space = CartesianSpace(BLOCK=(32, 64), B=range(300), C=range(300), D=range(300), E=(1,)).where(
        "$B == $C and $C == -1"
    )
    with pytest.raises(SpaceError, match="keep none of its"):
        autotune(space=space, key=["n"], grid="(cdiv(n, $BLOCK),)")(add_tuned_kernel)


def test_a_string_filter_whose_axes_are_too_many_to_list_is_told_to_split_not_to_be_a_string():
    space = CartesianSpace(A=range(1, 1001), B=range(1, 1001), C=range(100)).where("$A * $B == 4096")
    with pytest.raises(SpaceError, match="split each \\$X filter into conditions joined by `and`"):
        space.sample(random.Random(0))


def test_a_callable_filter_too_selective_to_sample_names_the_fix_in_a_short_message():
    space = CartesianSpace(B=range(300), C=range(300), D=range(300)).where(lambda c: c["B"] == c["C"] == c["D"] == 7)
    with pytest.raises(SpaceError, match=r"write them as \$X strings") as caught:
        space.sample(random.Random(0))
    assert len(str(caught.value)) < 600 and "300 values" in str(caught.value)


def test_a_string_filter_splits_into_the_clauses_of_its_top_level_and():
    where = WhereString("$B == $C and ($C == $D and $A > 1)", {"A", "B", "C", "D"})
    clauses = where.clauses()
    assert [c.source for c in clauses] == ["$B == $C", "$C == $D", "$A > 1"]
    assert [sorted(c.fields_read) for c in clauses] == [["B", "C"], ["C", "D"], ["A"]]
    assert WhereString("$B == $C or $A > 1", {"A", "B", "C"}).clauses()[0].source == "$B == $C or $A > 1"


@pytest.mark.parametrize("strategy", ["random", "local", "model"])
def test_a_kernel_over_such_a_space_tunes_with_every_strategy(strategy):
    pytest.importorskip("optuna") if strategy == "model" else None
    space = CartesianSpace(BLOCK=(32, 64, 128), B=range(100), C=range(100), D=range(100), E=range(1000)).where(
        "$B == $C and $C == $D"
    )
    kernel = autotune(
        space=space,
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        tuning=Tuning(
            strategy=strategy, max_configs=6, seed=0, compile_workers=0, warmup=0, reps=1, refine_topk=0, isolate="off"
        ),
    )(add_tuned_kernel)
    x, y, out = torch.randn(200), torch.randn(200), torch.empty(200)
    kernel(x, y, out, 200)
    torch.testing.assert_close(out, x + y)
    record = kernel.record((200,))
    tried = [t.config for t in record.trials if t.status.value == "ok"]
    assert len(tried) == 6 and all(c["B"] == c["C"] == c["D"] for c in tried)
    assert isinstance(record.winner, Config)


def test_decorating_a_listed_space_runs_its_filters_once_per_config():
    """A space just under LIST_LIMIT is listed at decoration; checking it, keeping its configs and its checksum
    read one listing (three before, over 65,536 configs)."""
    calls = [0]

    def keep(c):
        calls[0] += 1
        return c["B"] % 10 != 0

    space = CartesianSpace(BLOCK=(32,), B=range(980), C=range(100), D=(0,), E=(0,)).where(keep)
    assert not space.lazy
    kernel = autotune(space=space, key=["n"], grid="(cdiv(n, $BLOCK),)")(add_tuned_kernel)
    assert calls[0] == 98_000 and len(kernel.configs) == 88_200
