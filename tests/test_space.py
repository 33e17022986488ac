"""Search spaces: order, filtering, union, checksum, conversions and validation against a kernel."""

from __future__ import annotations

import itertools
import json
import pickle

import pytest
from hash_seeds import printed_under_hash_seeds
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.engine.search import RandomSearch
from autotune.errors import ExpressionError, OptionError, SpaceError
from autotune.space import CartesianSpace, Config, FixedSpace, SearchSpace, as_space
from autotune.space.checks import validate_space


# ---------------------------------------------------------------------------------------------- Config
def test_config_is_immutable_hashable_and_attribute_accessible():
    c = Config(BLOCK=64, num_warps=4)
    assert c.BLOCK == 64 and c["num_warps"] == 4
    with pytest.raises(AttributeError, match="immutable"):
        c.BLOCK = 128
    assert hash(c) == hash(Config({"num_warps": 4, "BLOCK": 64}))
    assert {c, Config(BLOCK=64, num_warps=4)} == {c}
    assert c.replace(BLOCK=128).BLOCK == 128 and c.BLOCK == 64


def test_config_json_round_trip():
    c = Config(BLOCK=64, SHAPE=(1, 2), FLAG=True, NAME="x", F=0.5, N=None)
    back = Config.from_json(json.loads(json.dumps(c.to_json())))
    assert back == c and back.SHAPE == (1, 2)
    assert back.canonical() == c.canonical()
    assert pickle.loads(pickle.dumps(c)) == c


def test_config_rejects_non_json_values():
    with pytest.raises(SpaceError, match="not JSON-serialisable"):
        Config(X=object())


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), (1, float("-inf")), (64, object()), [[1, object()]]])
def test_config_rejects_non_finite_floats_and_bad_values_nested_in_sequences(bad):
    """NaN and infinities are not JSON; a tuple or list is checked value by value, however deeply nested."""
    with pytest.raises(SpaceError, match="JSON-serialisable"):
        Config(X=bad)


def test_config_takes_subclasses_of_json_types_as_their_plain_values_so_they_encode_and_compare_as_json():
    import enum

    import numpy as np

    from autotune.codec import to_json

    class Width(enum.IntEnum):
        WIDE = 4

    config = Config(SCALE=np.float64(1.5), WIDTH=Width.WIDE, NAME=np.str_("x"))
    assert [type(v) for v in config.values()] == [float, int, str]
    assert json.loads(to_json(config)) == {"SCALE": 1.5, "WIDTH": 4, "NAME": "x"}  # what a cache entry writes
    assert config == Config(SCALE=1.5, WIDTH=4, NAME="x") == {"SCALE": np.float64(1.5), "WIDTH": 4, "NAME": "x"}
    space = CartesianSpace(SCALE=np.array([1.0, 2.0]))  # numpy's float64 is a float
    assert list(space) == [Config(SCALE=1.0), Config(SCALE=2.0)]


def test_config_refuses_text_no_file_can_hold():
    with pytest.raises(SpaceError, match="lone surrogate"):
        Config(NAME="\ud800")


def test_config_turns_nested_lists_into_tuples():
    c = Config(SHAPE=[[1, 2], [3]])
    assert c.SHAPE == ((1, 2), (3,)) and hash(c) == hash(Config(SHAPE=((1, 2), (3,))))


def test_config_keyword_fields_override_the_mapping_and_keep_their_order():
    """As with `dict(mapping, **kwargs)`: a keyword wins, and fields keep the order they were given in (the order
    a config is printed in)."""
    c = Config({"num_warps": 4, "BLOCK": 64}, BLOCK=128, A=1)
    assert c.BLOCK == 128 and list(c) == ["num_warps", "BLOCK", "A"]
    assert list(c.replace(BLOCK=32, Z=0).items()) == [("num_warps", 4), ("BLOCK", 32), ("A", 1), ("Z", 0)]


def test_config_fields_starting_with_an_underscore_are_attributes_too():
    assert Config(_PRIVATE=3)._PRIVATE == 3
    with pytest.raises(AttributeError, match="no field '_MISSING'"):
        _ = Config(_PRIVATE=3)._MISSING


def test_configs_whose_hashes_collide_are_still_different():
    """hash(-1) == hash(-2) in CPython, so these two configs share a hash: equality compares the fields."""
    a, b = Config(A=-1), Config(A=-2)
    assert hash(a) == hash(b) and a != b and len({a, b}) == 2


def test_configs_compare_as_their_json_so_one_one_point_oh_and_true_are_three_configs():
    """Cache entries and checksums tell them apart by their JSON, so == and hashing do too: a search's set of
    tried configs holds all three, and a config equals a mapping only with the same value types."""
    ints, floats, bools = Config(B=1), Config(B=1.0), Config(B=True)
    assert len({ints, floats, bools}) == 3 and ints != floats and ints != bools and floats != bools
    assert ints == {"B": 1} and ints != {"B": 1.0} and ints != {"B": True} and bools == {"B": True}
    assert Config(B=0.0) != Config(B=-0.0) and Config(T=(1, 2)) != Config(T=(1, 2.0))
    assert Config(T=(1, 2)) == Config(T=[1, 2]) == {"T": [1, 2]} and ints != {"B": object()}
    strategy = RandomSearch(FixedSpace([{"B": 1}, {"B": 1.0}, {"B": True}]), seed=0)
    assert sorted(c.canonical() for c in strategy.ask(3)) == sorted(['{"B":1}', '{"B":1.0}', '{"B":true}'])


def test_a_config_equals_any_mapping_with_the_same_items():
    from types import MappingProxyType

    c = Config(BLOCK=64, num_warps=4)
    assert c == {"num_warps": 4, "BLOCK": 64} and {"BLOCK": 64, "num_warps": 4} == c
    assert c == MappingProxyType({"BLOCK": 64, "num_warps": 4})
    assert c != {"BLOCK": 64} and c != MappingProxyType({"BLOCK": 64, "num_warps": 8}) and c != [("BLOCK", 64)]


def test_a_config_s_json_is_a_copy_and_its_canonical_text_is_compact_with_sorted_keys():
    """The canonical text names cache entries and feeds checksums: its exact form is pinned."""
    c = Config(num_warps=4, BLOCK=64, SHAPE=(1, 2), NAME="x", N=None)
    data = c.to_json()
    data["BLOCK"] = 128
    assert c.BLOCK == 64
    assert c.canonical() == '{"BLOCK":64,"N":null,"NAME":"x","SHAPE":[1,2],"num_warps":4}'
    assert Config(BLOCK=64, num_warps=4).canonical() == Config(num_warps=4, BLOCK=64).canonical()


# ---------------------------------------------------------------------------------------------- Cartesian
def test_cartesian_is_itertools_product_order_last_axis_fastest():
    s = CartesianSpace(A=(1, 2), B=[10, 20, 30], C=range(2))
    expected = [dict(A=a, B=b, C=c) for a, b, c in itertools.product((1, 2), (10, 20, 30), range(2))]
    assert [dict(c) for c in s] == expected
    assert len(s) == 12
    assert s.first() == Config(A=1, B=10, C=0)
    assert all(isinstance(c, Config) for c in s.configs())
    assert s.fields() == frozenset({"A", "B", "C"})


def test_cartesian_materialises_one_shot_iterables():
    s = CartesianSpace(A=iter((1, 2)), B=(x for x in (3,)))
    assert len(s.configs()) == 2 and len(s.configs()) == 2  # the generators were consumed only once


def test_cartesian_empty_axis_names_the_axis():
    with pytest.raises(SpaceError, match=r"axis 'BLOCK_N' has no values"):
        CartesianSpace(BLOCK_M=(64,), BLOCK_N=())


@pytest.mark.parametrize("scalar", [64, "abc", 1.5, None])
def test_cartesian_scalar_axis_says_wrap_in_tuple(scalar):
    with pytest.raises(SpaceError, match=r"wrap it in a tuple"):
        CartesianSpace(BLOCK=scalar)


def test_cartesian_non_json_value_fails_at_construction():
    with pytest.raises(SpaceError, match="not JSON-serialisable"):
        CartesianSpace(BLOCK=(64, object()))


def test_spaces_are_immutable():
    s = CartesianSpace(A=(1,))
    with pytest.raises(AttributeError, match="immutable"):
        s.foo = 1
    assert isinstance(s, SearchSpace)


# ---------------------------------------------------------------------------------------------- where
def test_where_with_callable_and_string_chained():
    s = CartesianSpace(A=(1, 2, 4), B=(1, 2, 4))
    f1 = s.where(lambda c: c.A <= c.B)
    f2 = f1.where("$A * $B >= 4")
    assert [dict(c) for c in f2] == [dict(A=1, B=4), dict(A=2, B=2), dict(A=2, B=4), dict(A=4, B=4)]
    assert len(f2) == 4 and len(f1) == 6 and len(s) == 9  # the original spaces are unchanged
    assert "where('$A * $B >= 4')" in repr(f2)


def test_where_is_lazy():
    calls = []

    def pred(c):
        calls.append(c)
        return c.A > 1

    s = CartesianSpace(A=(1, 2, 3)).where(pred)
    assert calls == []
    it = iter(s)
    assert calls == []
    assert next(it) == Config(A=2)
    assert calls == [Config(A=1), Config(A=2)]


def test_where_unknown_field_raises_at_where_time_listing_fields():
    s = CartesianSpace(BLOCK_M=(64,), num_warps=(4,))
    with pytest.raises(ExpressionError, match=r"\$BLOCK_N is not a field.*BLOCK_M, num_warps.*Did you mean 'BLOCK_M'"):
        s.where("$BLOCK_N > 1")


def test_where_string_rejects_bare_names_and_bad_predicates():
    s = CartesianSpace(A=(1,))
    with pytest.raises(ExpressionError, match=r"unknown name 'A' \('A' is a config field: write \$A\)"):
        s.where("A > 0")
    with pytest.raises(SpaceError, match="callable Config -> bool or a \\$X expression string"):
        s.where(3)


def test_where_string_on_fixed_space_missing_field_names_field_and_config():
    s = FixedSpace([{"A": 1}, {"B": 2}]).where("$A > 0")
    with pytest.raises(ExpressionError, match=r"reads \$A, but config \{'B': 2\} has no field 'A'"):
        s.configs()


def test_first_of_empty_space():
    with pytest.raises(SpaceError, match="empty"):
        CartesianSpace(A=(1,)).where("$A > 1").first()


# ---------------------------------------------------------------------------------------------- Fixed, union
def test_fixed_space_mixed_fields_and_duplicates_dropped():
    s = FixedSpace([{"A": 1}, Config(A=1), {"A": 1, "num_warps": 4}, {"B": 2}])
    assert s.configs() == [Config(A=1), Config(A=1, num_warps=4), Config(B=2)]
    assert len(s) == 3
    assert s.fields() == frozenset({"A", "B", "num_warps"})


def test_fixed_space_keeps_1_and_true_distinct():
    assert len(FixedSpace([{"A": 1}, {"A": True}, {"A": 1.0}])) == 3


def test_fixed_space_rejects_non_mappings():
    with pytest.raises(SpaceError, match="item 1 is int"):
        FixedSpace([{"A": 1}, 5])
    with pytest.raises(SpaceError, match="takes a list of mappings"):
        FixedSpace({"A": 1})


def test_union_order_and_duplicates():
    a = CartesianSpace(A=(1, 2))
    b = FixedSpace([{"A": 2}, {"A": 3}])
    u = a + b
    assert u.configs() == [Config(A=1), Config(A=2), Config(A=3)]
    assert len(u) == 3
    assert (b + a).configs() == [Config(A=2), Config(A=3), Config(A=1)]
    assert (a + [{"A": 9}]).configs()[-1] == Config(A=9)
    assert ({"A": (7,)} + a).configs()[0] == Config(A=7)
    assert u.where("$A > 1").configs() == [Config(A=2), Config(A=3)]
    assert u.fields() == frozenset({"A"})
    assert u.parts == (a, b) and u.where("$A > 1").parts == (a, b)  # the union's filter applies on top


def test_union_with_garbage_is_type_error():
    with pytest.raises(TypeError):
        CartesianSpace(A=(1,)) + 3


# ---------------------------------------------------------------------------------------------- checksum
def test_checksum_is_sha256_of_canonical_configs():
    import hashlib

    s = CartesianSpace(B=(1, 2), A=("x",))
    h = hashlib.sha256()
    for c in s:
        h.update(c.canonical().encode() + b"\n")
    assert s.checksum() == h.hexdigest()
    assert s.checksum() != CartesianSpace(B=(2, 1), A=("x",)).checksum()  # order matters
    assert s.checksum() != s.where("$B > 1").checksum()


def test_checksum_stable_across_processes_and_hash_seeds():
    code = (
        "from autotune.space import CartesianSpace, FixedSpace;"
        "s = (CartesianSpace(BLOCK=(64, 128), num_warps=(4, 8), NAME=('a', 'b'))"
        "     + FixedSpace([{'BLOCK': 32, 'FLAGS': (1, 2)}])).where('$BLOCK >= 64 or $BLOCK == 32');"
        "print(s.checksum())"
    )
    from autotune.space import CartesianSpace as CS
    from autotune.space import FixedSpace as FS

    here = (
        (CS(BLOCK=(64, 128), num_warps=(4, 8), NAME=("a", "b")) + FS([{"BLOCK": 32, "FLAGS": (1, 2)}]))
        .where("$BLOCK >= 64 or $BLOCK == 32")
        .checksum()
    )
    outs = printed_under_hash_seeds(code, ("1", "12345"))
    assert outs[0] == outs[1] == here


def test_a_lazy_space_s_filter_checksum_is_stable_across_hash_seeds():
    """A filter with a set of strings (its order follows PYTHONHASHSEED) or closing over a function (whose repr
    shows an address) gives the same checksum in every process: else each process would retune its keys."""
    code = (
        "from autotune.space import CartesianSpace\n"
        "def wide(c):\n    return c['X'] > 1\n"
        "def make():\n    return lambda c: c['L'] in {'row', 'col', 'tiled', 'strided'} and wide(c)\n"
        "axes = {f'A{i}': tuple(range(10)) for i in range(8)}\n"
        "s = CartesianSpace(L=('row', 'col', 'other'), X=(1, 2), **axes).where(make())\n"
        "assert s.lazy\n"
        "print(s.checksum())"
    )
    outs = set(printed_under_hash_seeds(code, ("1", "2", "3", "12345")))
    assert len(outs) == 1
    changed = code.replace("'strided'}", "'blocked'}")
    assert printed_under_hash_seeds(changed, ("1",))[0] not in outs


# ---------------------------------------------------------------------------------------------- as_space
def test_as_space_conversions():
    s = CartesianSpace(A=(1,))
    assert as_space(s) is s
    assert isinstance(as_space({"A": (1, 2)}), CartesianSpace)
    assert as_space({"A": (1, 2)}).configs() == [Config(A=1), Config(A=2)]
    f = as_space([{"A": 1}, Config(B=2)])
    assert isinstance(f, FixedSpace) and f.configs() == [Config(A=1), Config(B=2)]
    assert isinstance(as_space(({"A": 1},)), FixedSpace)
    for bad in (3, "A", None):
        with pytest.raises(SpaceError, match="space must be a SearchSpace"):
            as_space(bad)
    with pytest.raises(SpaceError, match="space item 0 is int"):
        as_space([3])


def test_as_space_triton_configs():
    triton = pytest.importorskip("triton")
    s = as_space([triton.Config({"BLOCK": 64}, num_warps=8, num_stages=2), triton.Config({"BLOCK": 128}, maxnreg=128)])
    assert isinstance(s, FixedSpace)
    assert s.configs() == [
        Config(BLOCK=64, num_warps=8, num_stages=2, num_ctas=1),
        Config(BLOCK=128, num_warps=4, num_stages=3, num_ctas=1, maxnreg=128),
    ]


def test_as_space_triton_config_with_pre_hook_points_to_compat():
    triton = pytest.importorskip("triton")
    with pytest.raises(SpaceError, match=r"pre_hook.*autotune\.compat\.autotune"):
        as_space([triton.Config({"BLOCK": 64}, pre_hook=lambda nargs: None)])


# ---------------------------------------------------------------------------------------------- validate_space
def _validate(space, **kw):
    args = dict(
        kernel_name="matmul_kernel",
        constexpr_names=("BLOCK_M", "BLOCK_N"),
        compile_options=("num_warps", "num_stages", "num_ctas", "maxnreg"),
        static_options={},
    )
    args.update(kw)
    validate_space(space, **args)


def test_validate_space_accepts_a_good_space():
    _validate(CartesianSpace(BLOCK_M=(64,), BLOCK_N=(32,), num_warps=(4, 8)), static_options={"num_stages": 3})


def test_validate_space_empty_by_where():
    with pytest.raises(SpaceError, match=r"empty: its where\(\) filters removed all 2 configs"):
        _validate(CartesianSpace(BLOCK_M=(64, 128)).where("$BLOCK_M > 1000"))


def test_validate_space_empty_fixed_space():
    with pytest.raises(SpaceError, match=r"matmul_kernel is empty; give it at least one config"):
        _validate(FixedSpace([]))


def test_validate_space_unknown_field_lists_constexprs():
    with pytest.raises(
        SpaceError,
        match=r"'BLOCK_K' is neither a tl.constexpr parameter of matmul_kernel nor a "
        r"compile option.*BLOCK_M, BLOCK_N; compile options are e.g. num_warps, "
        r"num_stages",
    ):
        _validate(FixedSpace([{"BLOCK_M": 64}, {"BLOCK_K": 32}]))


def test_validate_space_field_that_is_derived():
    with pytest.raises(SpaceError, match=r"'BLOCK_N' is both a space field and a derive= name"):
        _validate(CartesianSpace(BLOCK_M=(64,), BLOCK_N=(32,)), derived_names=("BLOCK_N",))


def test_validate_space_static_option_also_field_in_any_config():
    space = FixedSpace([{"BLOCK_M": 64}, {"BLOCK_M": 128, "num_warps": 8}])
    with pytest.raises(OptionError, match=r"'num_warps' is both a static option and a space field.*pick one"):
        _validate(space, static_options={"num_warps": 4})


def test_validate_space_unknown_static_option_suggests():
    with pytest.raises(OptionError, match=r"num_warp= .* not a Triton compile option.*Did you mean 'num_warps'"):
        _validate(CartesianSpace(BLOCK_M=(64,)), static_options={"num_warp": 4})


# ---------------------------------------------------------------------------------------------- properties
_axis_values = st.lists(st.integers(-5, 50), min_size=1, max_size=4, unique=True)
_axes = st.dictionaries(st.sampled_from(["A", "B", "C", "D"]), _axis_values, min_size=1, max_size=4)


@settings(max_examples=60, deadline=None)
@given(_axes)
def test_property_cartesian_len_and_order(axes):
    s = CartesianSpace(**axes)
    names = list(axes)
    expected = [dict(zip(names, combo)) for combo in itertools.product(*axes.values())]
    assert len(s) == len(expected)
    assert [dict(c) for c in s] == expected
    assert s.checksum() == CartesianSpace(**axes).checksum()


@settings(max_examples=60, deadline=None)
@given(_axes, st.data())
def test_property_checksum_changes_when_a_value_changes(axes, data):
    name = data.draw(st.sampled_from(sorted(axes)))
    values = list(axes[name])
    i = data.draw(st.integers(0, len(values) - 1))
    new = data.draw(st.integers(100, 200))
    values[i] = new
    changed = dict(axes, **{name: values})
    assert CartesianSpace(**axes).checksum() != CartesianSpace(**changed).checksum()


@settings(max_examples=60, deadline=None)
@given(_axes, st.integers(0, 50))
def test_property_union_idempotent_and_where_matches_filter(axes, threshold):
    s = CartesianSpace(**axes)
    assert (s + s).configs() == s.configs()
    assert (s + s).checksum() == s.checksum()
    name = sorted(axes)[0]
    filtered = s.where(f"${name} >= {threshold}")
    assert filtered.configs() == [c for c in s if c[name] >= threshold]


def test_an_axis_given_as_a_set_has_one_order_and_checksum_in_every_process():
    """A set of strings iterates in hash order, which PYTHONHASHSEED changes: its values are sorted, so that the
    configs, their order and the checksum (listed and lazy) agree across processes, and each finds the others'
    entries."""
    code = (
        "from autotune.space import CartesianSpace\n"
        "listed = CartesianSpace(LAYOUT={'row', 'col', 'tiled', 'strided'}, B=(1, 2))\n"
        "lazy = CartesianSpace(LAYOUT={'row', 'col', 'tiled', 'strided'}, **{f'A{i}': tuple(range(10)) for i in "
        "range(6)})\n"
        "assert lazy.lazy\n"
        "print([c['LAYOUT'] for c in listed][::2], listed.checksum(), lazy.checksum())"
    )
    outs = set(printed_under_hash_seeds(code, ("1", "2", "3", "12345")))
    assert len(outs) == 1, outs
    assert outs.pop().startswith("['col', 'row', 'strided', 'tiled']")
