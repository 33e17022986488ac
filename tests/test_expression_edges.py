"""Edges of the user-facing expression and space layer that the other test files leave open.

Written from a mutation-testing pass over `keys.py`, `template.py`, `space.py` and `space_checks.py`: each test
here pins a behaviour that some hand-made change to the code (a dropped check, a flipped comparison) did not
break anywhere else in the suite.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.errors import ExpressionError
from autotune.keys import KeyBuilder
from autotune.space import CartesianSpace, Config, FixedSpace
from autotune.space.expressions import Expression, anchor, compile_predicate

FIELDS = ("BLOCK", "num_warps")
ARGS = ("d", "M", "N")


def _expr(source: str, what: str = "grid") -> Expression:
    return Expression(source, config_fields=FIELDS, arg_names=ARGS, what=what)


# ---------------------------------------------------------------------------------------------- helpers
def test_anchor_refuses_a_float_base() -> None:
    """anchor's base is an integer like its n: anchor(100, 64.0) would give the float key 128.0, which no integer
    call's 128 meets again in a cache file name (json '128.0' != '128'); refused, as a float n is."""
    with pytest.raises(TypeError, match="'float' object cannot be interpreted as an integer"):
        anchor(100, 64.0)
    assert anchor(100, 64) == 128 and type(anchor(100, 64)) is int


# ---------------------------------------------------------------------------------------------- evaluation errors
def test_a_key_error_named_like_a_present_field_or_argument_is_the_user_s_own() -> None:
    """A KeyError raised inside the expression (a dict argument lacking a key) is the expression's own, even when
    the missing key has the name of a config field or argument the expression reads: those are present, so the
    'config has no field' / 'was not passed' messages would point at the wrong cause."""
    e = _expr("d['BLOCK'] + $BLOCK")  # reads a config field: raised as it is (that config's own failure)
    with pytest.raises(KeyError, match="BLOCK") as info:
        e({"BLOCK": 64}, {"d": {}})
    assert not isinstance(info.value, ExpressionError)
    e = _expr("d['M'] + M")
    with pytest.raises(ExpressionError, match=r"raised KeyError: 'M' \(with M=3, d=dict\)") as info:
        e({}, {"d": {}, "M": 3})
    assert "was not passed" not in str(info.value)
    assert e({}, {"d": {"M": 1}, "M": 3}) == 4


def test_an_expression_that_fails_on_a_call_names_itself_and_what_it_read() -> None:
    """`n.shape[0]` with an int n: an ExpressionError naming the key entry and n's value, not a bare
    AttributeError from generated code."""
    e = Expression("n.shape[0]", config_fields=None, arg_names=("n",), what="key[0]")
    with pytest.raises(ExpressionError, match=r"key\[0\] expression 'n.shape\[0\]' raised AttributeError.*n=10"):
        e({}, {"n": 10})


def test_a_where_string_predicate_returns_a_bool() -> None:
    """compile_predicate gives a `Config -> bool`: a $X string whose value is a number answers True/False,
    not the number, so a caller comparing with `is True` or counting with sum() sees a bool."""
    pred = compile_predicate("$BLOCK - 64", config_fields=FIELDS)
    assert pred(Config(BLOCK=128, num_warps=4)) is True
    assert pred(Config(BLOCK=64, num_warps=4)) is False


def test_derive_that_is_not_a_mapping_is_refused_by_name() -> None:
    """derive= given as a list (a common slip for a dict) is an ExpressionError saying derive must be a mapping,
    not an AttributeError from inside the compiler."""
    from autotune.space.expressions import compile_derive

    for bad in (["$BLOCK * 2"], ("HALF", "$BLOCK // 2"), "$BLOCK"):
        with pytest.raises(ExpressionError, match="derive must be a mapping of name -> expression"):
            compile_derive(bad, config_fields=FIELDS, arg_names=ARGS)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------- keys
KEY_ARGS = ("x", "M", "N")


def test_a_key_entry_with_surrounding_spaces_is_the_argument_it_names() -> None:
    """key=[" M "] is the argument M: its field text (what clear_autotune_cache(key=...) is checked against) is
    "M", and it reads no other argument."""
    kb = KeyBuilder([" M ", "N"], arg_names=KEY_ARGS)
    assert kb.fields == ("M", "N")
    assert kb({"x": None, "M": 3, "N": 4})[0] == (3, 4)


@pytest.mark.parametrize(
    "spec", [["M * 1.0"], lambda M, **_: M, lambda M, **_: (1, M)], ids=["expression", "callable", "callable-tuple"]
)
def test_nan_from_an_expression_or_a_callable_key_is_refused(spec) -> None:
    """NaN never equals itself, so a NaN key value would miss its cached winner at every call: refused whether it
    comes from an argument named in key=, an expression entry or a callable key."""
    from autotune.errors import KeyValueError

    kb = KeyBuilder(spec, arg_names=KEY_ARGS)
    with pytest.raises(KeyValueError, match="NaN never equals itself"):
        kb({"x": None, "M": float("nan"), "N": 1})
    assert kb({"x": None, "M": 2.0, "N": 1})[0] in ((2.0,), (1, 2.0))


def test_key_fields_and_argument_names() -> None:
    """fields is the text of each entry (None for a callable key: its arity is known only from a call) and
    argument_names the arguments the entries read, names and expressions alike (empty for a callable)."""
    kb = KeyBuilder(["M", "pow2_bucket(N) + x.shape[0]"], arg_names=KEY_ARGS)
    assert kb.fields == ("M", "pow2_bucket(N) + x.shape[0]")
    assert kb.argument_names == frozenset({"M", "N", "x"})
    assert KeyBuilder(None, arg_names=KEY_ARGS).fields == ()
    callable_key = KeyBuilder(lambda M, **_: M, arg_names=KEY_ARGS)
    assert callable_key.fields is None and callable_key.argument_names == frozenset()


# ---------------------------------------------------------------------------------------------- space laws
_values = st.sampled_from([1, 2, 3, 8, 16, 0.5, True, "a", None])
_axes = st.dictionaries(st.sampled_from(["A", "B", "C"]), st.lists(_values, min_size=1, max_size=4), min_size=1)


def _keep(limit: int):
    """A filter keeping the configs whose canonical text is short enough: deterministic, field-agnostic."""

    def keep(config: Config) -> bool:
        return len(config.canonical()) % 3 != limit

    return keep


def _product(axes: dict) -> list[Config]:
    space = CartesianSpace(**axes)
    return list(space)


@settings(max_examples=40, deadline=None)
@given(axes=_axes, limit=st.integers(0, 3))
def test_property_membership_agrees_with_enumeration(axes: dict, limit: int) -> None:
    """contains() of a (filtered) Cartesian space and of the FixedSpace of the same configs answer exactly the
    listed configs: each listed config is in, each product config the filter refused is out, and so is a config
    with a value the axis does not have (1 is not True, 1.0 is not 1), an extra field or a missing field."""
    cart = CartesianSpace(**axes).where(_keep(limit))
    listed = cart.configs()
    fixed = FixedSpace(listed)
    union = CartesianSpace(**axes).where(_keep(limit)) + FixedSpace(listed[:1])
    keys = {c.canonical() for c in listed}
    for config in _product(axes):
        inside = config.canonical() in keys
        assert cart.contains(config) is inside
        assert fixed.contains(config) is inside
        assert union.contains(config) is inside
    first = next(iter(_product(axes)))
    name = next(iter(axes))
    for other in (1, True, 1.0, "b"):
        if all(Config(A=other).canonical() != Config(A=v).canonical() for v in axes[name]):
            probe = first.replace(**{name: other})
            assert not cart.contains(probe) and not fixed.contains(probe) and not union.contains(probe)
    extra = Config({**first, "Z": 1})
    assert not cart.contains(extra) and not fixed.contains(extra)
    if len(first) > 1:
        missing = Config({k: v for k, v in first.items() if k != name})
        assert not cart.contains(missing) and not fixed.contains(missing)


@settings(max_examples=40, deadline=None)
@given(axes=_axes, limit=st.integers(0, 3))
def test_property_cartesian_neighbours_are_the_filtered_one_step_moves(axes: dict, limit: int) -> None:
    """neighbours(c) of a Cartesian space is exactly the set of members that differ from c in one axis by one
    position of that axis (previous or next value; no wrap-around), whether or not c itself passes the filter."""
    plain = CartesianSpace(**axes)
    space = plain.where(_keep(limit))
    names = list(axes)
    position = {n: {Config(X=v).canonical(): i for i, v in enumerate(plain.axes[n])} for n in names}

    def pos(config: Config, n: str) -> int:
        return position[n][Config(X=config[n]).canonical()]

    members = space.configs()
    for config in plain:
        got = space.neighbours(config)
        assert len({c.canonical() for c in got}) == len(got)
        want = {
            c.canonical()
            for c in members
            if sum(pos(c, n) != pos(config, n) for n in names) == 1
            and sum(abs(pos(c, n) - pos(config, n)) for n in names) == 1
        }
        assert {c.canonical() for c in got} == want


@settings(max_examples=30, deadline=None)
@given(axes=_axes, limit=st.integers(0, 3), seed=st.integers(0, 2**16))
def test_property_sample_draws_members_and_reaches_every_one(axes: dict, limit: int, seed: int) -> None:
    """sample() returns members only, the same one for the same seed, and over enough draws every member of a
    small (filtered) space, the first and the last included."""
    for space in (CartesianSpace(**axes).where(_keep(limit)), FixedSpace(CartesianSpace(**axes)).where(_keep(limit))):
        members = {c.canonical() for c in space}
        if not members:
            continue
        rng = random.Random(seed)
        drawn = {space.sample(rng).canonical() for _ in range(40 * len(members))}
        assert drawn == members
        assert space.sample(random.Random(seed)) == space.sample(random.Random(seed))


def test_a_space_of_exactly_list_limit_configs_is_listed_and_one_more_is_lazy() -> None:
    """Lazy means *more than* LIST_LIMIT configs before filtering (DESIGN.md section 2): a space of exactly
    100,000 configs is still listed (its cache entries keep the listed checksum), 100,001 is not."""
    from autotune.space import LIST_LIMIT

    exact = CartesianSpace(A=range(1000), B=range(100))
    assert exact.unfiltered_len() == LIST_LIMIT and not exact.lazy
    over = CartesianSpace(A=range(11), B=range(9091))
    assert over.unfiltered_len() == LIST_LIMIT + 1 and over.lazy


def test_an_eager_space_whose_filter_refuses_every_random_draw_still_samples_a_member() -> None:
    """Rejection sampling gives up after 10,000 refused draws; a listed space then samples from its list instead
    of raising (only a lazy space, which cannot be listed, raises)."""
    calls = {"n": 0}

    def stubborn(config: Config) -> bool:
        calls["n"] += 1
        return calls["n"] > 10_000 and config["A"] == 3

    space = CartesianSpace(A=range(5), B=(0,)).where(stubborn)
    assert space.sample(random.Random(0)) == Config(A=3, B=0)
    assert calls["n"] > 10_000


class _ScriptedRandom:
    """A stand-in for random.Random whose randrange returns the scripted values, then 0."""

    def __init__(self, *values: int) -> None:
        self.values = list(values)

    def randrange(self, n: int) -> int:
        v = self.values.pop(0) if self.values else 0
        assert 0 <= v < n
        return v


def _lazy_union():
    big = CartesianSpace(A=range(1000), B=range(101))  # 101,000 configs: lazy
    fixed = FixedSpace([{"A": 5000, "B": 0}, {"A": 5000, "B": 7}, {"A": 5001, "B": 0}])
    return big, fixed, (big + fixed).where("$A % 2 == 0")


def test_a_lazy_union_draws_each_part_in_proportion_to_its_size() -> None:
    """The part is drawn by one randrange over both sizes: values below the first part's size pick it, the rest
    the second part (the boundary value sizes[0] belongs to the second)."""
    big, fixed, union = _lazy_union()
    assert union.lazy
    n = big.unfiltered_len()
    assert union.unfiltered_len() == n + 3  # both parts, counted
    assert union.sample(_ScriptedRandom(n - 1, 4, 0)) == Config(A=4, B=0)  # last slot of the big part
    assert union.sample(_ScriptedRandom(n, 0)) == Config(A=5000, B=0)  # first slot of the fixed part
    assert union.sample(_ScriptedRandom(n + 1, 1)) == Config(A=5000, B=7)


def test_an_eager_union_samples_its_listed_configs_uniformly() -> None:
    """A listed union draws one index over its configs, duplicates dropped: a config both parts hold is not
    drawn twice as often (drawing a part by size first would)."""
    a, b = Config(A=1), Config(A=2)
    union = FixedSpace([a, b]) + FixedSpace([a])
    assert not union.lazy and union.configs() == [a, b]
    assert union.sample(_ScriptedRandom(1)) == b
    assert union.sample(_ScriptedRandom(0)) == a


def test_a_lazy_union_s_neighbours_contains_and_samples_apply_its_filters() -> None:
    """The filters of a lazy union apply to what its parts answer: neighbours from each part, once each and
    filtered; membership; and samples (a refused draw is redrawn)."""
    _, _, union = _lazy_union()
    assert union.neighbours(Config(A=4, B=3)) == [Config(A=4, B=2), Config(A=4, B=4)]  # A=3, A=5 refused
    assert union.neighbours(Config(A=5000, B=0)) == [Config(A=5000, B=7)]  # A=5001 refused
    assert union.contains(Config(A=4, B=3)) and not union.contains(Config(A=3, B=3))
    assert not union.contains(Config(A=5001, B=0))
    rng = random.Random(1)
    assert all(union.sample(rng)["A"] % 2 == 0 for _ in range(50))


def test_an_axis_drops_repeated_values_but_keeps_1_1_0_and_true() -> None:
    """Axis values are deduplicated by their JSON, as configs are: (1, 1, 2) is two values, (1, 1.0, True)
    three, so the product never repeats a config."""
    space = CartesianSpace(A=(1, 1, 2, 2), B=[1, 1.0, True, 1])
    assert space.axes == {"A": (1, 2), "B": (1, 1.0, True)}
    assert len(space) == 6 == len({c.canonical() for c in space})


def test_an_axis_name_that_is_not_an_identifier_is_refused_at_construction() -> None:
    """CartesianSpace(**{"BLOCK-M": ...}) fails when the space is built, naming the axis, not later when a
    config is first made (each field becomes a kernel keyword argument)."""
    from autotune.errors import SpaceError

    for name in ("BLOCK-M", "1st", ""):
        with pytest.raises(SpaceError, match=rf"axis name {name!r} is not a Python identifier"):
            CartesianSpace(**{name: (1, 2)})


def test_fields_and_common_fields_of_fixed_spaces_and_unions() -> None:
    """fields() is the union of the configs' fields and common_fields() those every config sets (what decides
    whether a constexpr without a default can be tuned), for a FixedSpace whose configs differ and for a union,
    where each is combined over the parts without listing them."""
    mixed = FixedSpace([{"A": 1, "B": 2}, {"A": 3}])
    assert mixed.fields() == {"A", "B"} and mixed.common_fields() == {"A"}
    union = mixed + CartesianSpace(A=(5,), C=(6,))
    assert union.fields() == {"A", "B", "C"} and union.common_fields() == {"A"}
    assert FixedSpace([]).fields() == frozenset() == FixedSpace([]).common_fields()


# ---------------------------------------------------------------------------------------------- 1, 1.0 and True
def test_a_fixed_space_tells_1_true_and_1_0_apart_in_membership_and_neighbours() -> None:
    """A space keeps 1, 1.0 and True as three values (they are three different constexprs for Triton), as
    Config's == now does too: contains() must not say a FixedSpace of {A: 1} holds {A: True}, as a Cartesian
    space of A=(1,) does not; and {A: True} is a neighbour of {A: 1} (they differ in one field), as in a
    Cartesian space. Before the fix FixedSpace.contains compared with ==: True for the wrong value."""
    fixed = FixedSpace([{"A": 1, "B": 0}])
    assert fixed.contains(Config(A=1, B=0))
    assert not fixed.contains(Config(A=True, B=0)) and not fixed.contains(Config(A=1.0, B=0))
    assert not CartesianSpace(A=(1,), B=(0,)).contains(Config(A=True, B=0))
    three = FixedSpace([{"A": 1}, {"A": True}, {"A": 1.0}, {"A": 2}])
    assert len(three) == 4 and all(three.contains(c) for c in three)
    assert [c.canonical() for c in three.neighbours(Config(A=1))] == ['{"A":true}', '{"A":1.0}', '{"A":2}']
    assert [c.canonical() for c in CartesianSpace(A=(1, True, 2)).neighbours(Config(A=1))] == ['{"A":true}']


def test_a_fixed_space_s_neighbours_have_the_config_s_fields_exactly() -> None:
    """In a FixedSpace whose configs differ in fields, a neighbour has the same fields as the config: one with
    an extra field (or one fewer) is not one step away, and does not break the comparison."""
    space = FixedSpace([{"A": 1}, {"A": 2}, {"A": 1, "B": 0}, {"A": 2, "B": 0}])
    assert space.neighbours(Config(A=1)) == [Config(A=2)]
    assert space.neighbours(Config(A=1, B=0)) == [Config(A=2, B=0)]


def test_a_union_s_neighbours_are_its_parts_whether_listed_or_lazy() -> None:
    """A union asks each part for neighbours (a Cartesian part: one axis, one step, none for a config it lacks;
    a FixedSpace part: its configs one field away), listed or lazy alike. Before, a listed union answered any
    of its configs one field away, so B=16's neighbours there were 32, 64, 128 and 256 but 32 and 256 once an
    axis made the union lazy."""
    fixed = FixedSpace([{"B": 256, "C": 0}])
    listed = CartesianSpace(B=(16, 32, 64, 128), C=(0,)) + fixed
    lazy = CartesianSpace(B=(16, 32, 64, 128), C=range(40_000)) + fixed
    assert not listed.lazy and lazy.lazy
    assert listed.neighbours(Config(B=16, C=0)) == [Config(B=32, C=0), Config(B=256, C=0)]
    assert lazy.neighbours(Config(B=16, C=0)) == [Config(B=32, C=0), Config(B=16, C=1), Config(B=256, C=0)]
    for union in (listed, lazy):
        assert union.neighbours(Config(B=64, C=0))[:2] == [Config(B=32, C=0), Config(B=128, C=0)]
        assert union.neighbours(Config(B=256, C=0)) == []  # no Cartesian part holds it; no other config
    filtered = listed.where("$B != 32")
    assert filtered.neighbours(Config(B=16, C=0)) == [Config(B=256, C=0)]


def test_a_lazy_union_keeps_neighbours_that_differ_only_as_1_and_true() -> None:
    """A lazy union lists its parts' neighbours once each, telling 1 and True apart as its configs do."""
    big = CartesianSpace(A=(0, 1, 2), B=range(40_000))
    union = big + FixedSpace([{"A": True, "B": 0}, {"A": 0, "B": 0}])
    assert union.lazy
    got = [c.canonical() for c in union.neighbours(Config(A=0, B=0))]
    assert got == ['{"A":1,"B":0}', '{"A":0,"B":1}', '{"A":true,"B":0}']


# ---------------------------------------------------------------------------------------------- checksums
def test_checksum_is_the_ordered_configs_whatever_space_lists_them_and_a_filtered_copy_has_its_own() -> None:
    """An eager space's checksum hashes its configs in order: a Cartesian space, the FixedSpace of its configs
    and a union giving the same list agree; another order differs; a filtered copy made after the parent's
    checksum was computed (and cached) has the checksum of its own configs, and so does its listing."""
    cart = CartesianSpace(A=(1, 2), B=(3, 4))
    whole = cart.checksum()
    assert FixedSpace(list(cart)).checksum() == whole
    assert (FixedSpace(list(cart)[:2]) + FixedSpace(list(cart)[1:])).checksum() == whole
    assert FixedSpace(list(cart)[::-1]).checksum() != whole
    assert CartesianSpace(B=(3, 4), A=(1, 2)).checksum() != whole
    cart.configs()
    kept = cart.where("$A == 1")
    assert kept.checksum() == FixedSpace([{"A": 1, "B": 3}, {"A": 1, "B": 4}]).checksum() != whole
    assert kept.configs() == [Config(A=1, B=3), Config(A=1, B=4)] and len(kept) == 2


def test_a_lazy_fixed_space_s_checksum_covers_every_config_not_only_the_three_its_repr_shows() -> None:
    """A FixedSpace of over LIST_LIMIT configs is lazy and its checksum hashes its structure: all its configs,
    so changing the 51st (past the three that repr shows) changes it."""
    configs = [{"A": i} for i in range(100_001)]
    one = FixedSpace(configs)
    other = FixedSpace(configs[:50] + [{"A": -1}] + configs[51:])
    assert one.lazy and other.lazy and repr(one) == repr(other)
    assert one.checksum() != other.checksum()


# ---------------------------------------------------------------------------------------------- space checks
@pytest.mark.parametrize(
    "name, good, bad",
    [
        ("num_warps", (1, 2, 4, 8, 16, 32), (0, 3, 6, -4, True, 4.0, "4")),
        ("num_stages", (0, 1, 3, 5), (-1, True, 2.0, None)),
        ("num_ctas", (1, 2), (0, -1, True, 1.0)),
        ("maxnreg", (None, 1, 128), (0, -8, True, 64.0)),
    ],
)
def test_compile_option_values_a_gpu_accepts_and_refuses(name: str, good: tuple, bad: tuple) -> None:
    """The interpreter ignores compile options, so these checks are all that stops a space that a GPU compile
    refuses: each boundary (0 warps, 0 stages, 0 CTAs, maxnreg None) and bools (an int subclass) pinned."""
    import numpy as np

    from autotune.space.checks import compile_option_problem

    for value in good + (np.int32(good[-1]) if good[-1] is not None else None,):
        assert compile_option_problem(name, value) is None, value
    for value in bad:
        assert compile_option_problem(name, value), value
    assert compile_option_problem("waves_per_eu", -3) is None  # options not checked here pass


def test_a_lazy_space_s_bad_compile_option_value_is_found_on_its_axis_not_only_in_its_sample() -> None:
    """A lazy space is checked from one sample, but every value of its axes is a config of it: a num_stages=-1
    that the sample did not draw is still refused when decorating."""
    from autotune.errors import SpaceError
    from autotune.space.checks import validate_space

    space = CartesianSpace(BLOCK=range(200_000), num_stages=(2, 3, -1, 4))
    assert space.lazy and space.sample(random.Random(0))["num_stages"] != -1
    with pytest.raises(SpaceError, match=r"num_stages=-1: num_stages must be an int >= 0"):
        validate_space(
            space, kernel_name="k", constexpr_names=("BLOCK",), compile_options=("num_stages",), static_options={}
        )


def test_a_grid_that_fails_for_one_config_fails_that_config_only() -> None:
    """`n // ($BLOCK - 32)` divides by zero at BLOCK=32 only: that config is recorded failed, the other tunes (an
    expression of config fields fails per config; of the arguments only, for every config: the call's mistake)."""
    import torch
    from kernels_for_tests import add_kernel

    from autotune import Tuning, autotune

    add = autotune(
        space={"BLOCK": (32, 64)},
        key=["n"],
        grid="(n // ($BLOCK - 32) * 0 + cdiv(n, $BLOCK),)",
        tuning=Tuning(warmup=0, reps=1, compile_workers=0, isolate="off"),
    )(add_kernel)
    x = torch.rand(100)
    out = torch.empty(100)
    add(x, x, out, 100)
    assert add.best_config == Config(BLOCK=64)
    (failed,) = [t for t in add.record().trials if t.config == Config(BLOCK=32)]
    assert not failed.ok and "ZeroDivisionError" in (failed.error or "")
