"""Review fixes of search spaces: a union's empty part, a lazy union too sparse to sample, and the compile-option
values a lazy space's filter removes."""

from __future__ import annotations

import random

import pytest
import torch
import triton
import triton.language as tl

from autotune import CartesianSpace, SpaceError, Tuning, autotune
from autotune.space import FixedSpace


@triton.jit
def add_ab_kernel(x, y, out, n, BLOCK: tl.constexpr, A: tl.constexpr, B: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


def decorate(space, **tuning):
    return autotune(
        space=space,
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        tuning=Tuning(compile_workers=0, warmup=0, reps=1, refine_topk=0, seed=0, isolate="off", **tuning),
    )(add_ab_kernel)


def big() -> CartesianSpace:
    return CartesianSpace(BLOCK=(32, 64), A=range(1000), B=range(1000))


# ------------------------------------------------------------------------------------------ a union's empty part
def test_a_union_part_that_its_filter_empties_is_refused_at_decoration_by_its_position():
    listed_part = CartesianSpace(BLOCK=(32, 64), A=range(1000), B=range(45)).where("$A < 0")
    with pytest.raises(SpaceError, match=r"^part 2 of 2 of the union that is the search space of add_ab_kernel") as e:
        decorate(big() + listed_part, strategy="random", max_configs=4)
    text = str(e.value)
    assert "its where() filters keep none of its 90,000 configs; remove the part or loosen the filters" in text
    assert len(text) < 400 and "1000 values" in text  # an outline, not every axis value

    lazy_part = CartesianSpace(BLOCK=(32, 64), A=range(1000), B=range(1000)).where("$A < 0")
    with pytest.raises(SpaceError, match=r"^part 1 of 3 of the union .* keep none .* or remove the part$") as e:
        decorate(lazy_part + big() + FixedSpace([{"BLOCK": 32, "A": 1, "B": 2}]), strategy="random", max_configs=4)
    assert len(str(e.value)) < 400


def test_a_lazy_union_never_draws_from_a_part_known_to_be_empty():
    """Sampling skips the empty part (mid-tuning it used to raise when the first draw picked it)."""
    space = CartesianSpace(A=range(1000), B=range(1000)) + CartesianSpace(A=range(1000), B=range(100, 190)).where(
        "$A < 0"
    )
    rng = random.Random(1)
    assert all(space.contains(space.sample(rng)) for _ in range(200))
    nothing = CartesianSpace(A=range(1000), B=range(1000)).where("$A < 0") + FixedSpace([])
    with pytest.raises(SpaceError, match="every part of .* is empty") as e:
        nothing.sample(rng)
    assert len(str(e.value)) < 300


def test_an_empty_listed_space_s_sampling_error_is_an_outline():
    space = CartesianSpace(A=range(1000), B=range(90)).where("$A < 0")
    assert not space.lazy
    with pytest.raises(SpaceError, match=r"A=\(0, 1, 2, \.\.\.: 1000 values\).*is empty") as e:
        space.sample(random.Random(0))
    assert len(str(e.value)) < 300


def test_a_union_with_a_healthy_part_per_position_still_tunes():
    space = big() + CartesianSpace(BLOCK=(32, 64), A=range(10), B=range(10)).where("$A == $B")
    kernel = decorate(space, strategy="random", max_configs=4)
    x, y, out = torch.randn(100), torch.randn(100), torch.empty(100)
    kernel(x, y, out, 100)
    torch.testing.assert_close(out, x + y)


# ------------------------------------------------------------------------------------ a lazy union too sparse
def test_a_lazy_union_too_sparse_to_sample_says_how_in_a_short_message():
    a = CartesianSpace(BLOCK=(32,), A=range(1000), B=range(1000))
    b = CartesianSpace(BLOCK=(32,), A=range(1000), B=range(1000, 1100))
    with pytest.raises(SpaceError, match=r"apply the filter to each part \(`a\.where\(f\) \+ b\.where\(f\)`\)") as e:
        decorate((a + b).where("$A == $B and $A < 10"))
    assert len(str(e.value)) < 800 and "1000 values" in str(e.value)
    f = "$A == $B and $A < 10"
    rewritten = a.where(f) + b.where(f)  # the fix the message names: samplable
    assert rewritten.sample(random.Random(0))["A"] < 10


# ------------------------------------------------------------------- options a lazy space's filter removes
POW2 = "$num_warps & ($num_warps - 1) == 0"


@pytest.mark.parametrize("size", [100, 1000], ids=["listed", "lazy"])
def test_a_filter_that_removes_bad_num_warps_is_accepted_whatever_the_space_s_size(size):
    space = CartesianSpace(BLOCK=(32,), num_warps=range(1, 9), A=range(size), B=range(100))
    assert space.lazy == (size == 1000)
    decorate(space.where(POW2))  # num_warps 3, 5, 6, 7 are filtered out: no config has them
    decorate((space + CartesianSpace(BLOCK=(64,), num_warps=(2,), A=(1,), B=(1,))).where(POW2))  # a union's filter
    with pytest.raises(SpaceError, match="has num_warps=3: num_warps must be a power of two"):
        decorate(space.where("$num_warps != 5"))  # 3 is kept: still refused


def test_a_filter_reading_more_than_the_option_leaves_it_checked():
    space = CartesianSpace(BLOCK=(32,), num_warps=(3, 4), A=range(1000), B=range(100)).where("$num_warps < $A")
    with pytest.raises(SpaceError, match="has num_warps=3"):
        decorate(space)
