"""`$X` expressions: parsing, rejected syntax, name checks, evaluation, grids, derive and predicates."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.errors import ExpressionError, SpaceError
from autotune.space import Config
from autotune.space.expressions import (
    Expression,
    cdiv,
    compile_derive,
    compile_grid,
    compile_predicate,
    next_power_of_2,
)

FIELDS = ("BLOCK_M", "BLOCK_N", "num_warps")
ARGS = ("a", "b", "M", "N")


def expr(source, *, config_fields=FIELDS, arg_names=ARGS, what="grid"):
    return Expression(source, config_fields=config_fields, arg_names=arg_names, what=what)


# ---------------------------------------------------------------------------------------------- evaluation
def test_arithmetic_with_config_fields_and_args():
    e = expr("$BLOCK_M * 2 + M // $BLOCK_N - (N % 3) ** 2")
    assert e({"BLOCK_M": 64, "BLOCK_N": 16}, {"M": 100, "N": 5}) == 64 * 2 + 100 // 16 - (5 % 3) ** 2
    assert e.config_refs == frozenset({"BLOCK_M", "BLOCK_N"})
    assert e.arg_refs == frozenset({"M", "N"})
    assert e.source == "$BLOCK_M * 2 + M // $BLOCK_N - (N % 3) ** 2"


def test_a_dollar_inside_a_string_literal_is_text_not_a_field():
    """`$X` names a config field in the expression, never inside a quoted string: a filter comparing a field with a
    value that holds a `$` reads it as written (it matched no config), and is not refused."""
    from autotune import CartesianSpace

    space = CartesianSpace(L=("a$B", "x"), B=(1, 2))
    assert [c["L"] for c in space.where("$L == 'a$B'").configs()] == ["a$B", "a$B"]
    assert [c["L"] for c in space.where('$L != "a$B" and $B > 1').configs()] == ["x"]
    e = expr("('$BLOCK_M', $BLOCK_M)")
    assert e({"BLOCK_M": 4}, {}) == ("$BLOCK_M", 4) and e.config_refs == frozenset({"BLOCK_M"})


def test_helpers():
    e = expr("(cdiv(M, $BLOCK_M), next_power_of_2(N), min(M, N), max(M, N), abs(-M), int(N / 2))")
    assert e({"BLOCK_M": 64}, {"M": 130, "N": 33}) == (3, 64, 33, 130, 130, 16)
    assert (cdiv(0, 4), cdiv(1, 4), cdiv(8, 4), cdiv(9, 4)) == (0, 1, 2, 3)
    assert [next_power_of_2(n) for n in (0, 1, 2, 3, 4, 5, 1000)] == [0, 1, 2, 4, 4, 8, 1024]


def test_helpers_match_triton():
    triton = pytest.importorskip("triton")
    for n in range(0, 300):
        assert next_power_of_2(n) == triton.next_power_of_2(n)
        for d in (1, 3, 16):
            assert cdiv(n, d) == triton.cdiv(n, d)


def test_tensor_attributes_methods_subscripts():
    a = torch.empty(6, 4)
    e = expr(
        "a.shape[0] * b.stride(0) + a.numel() + len_ if False else a.shape[0] * b.stride(0) + a.numel()",
        arg_names=ARGS + ("len_",),
    )
    assert e({}, {"a": a, "b": a.t().contiguous(), "len_": 0}) == 6 * 6 + 24
    assert expr("a.shape[1:]")({}, {"a": a}) == (4,)
    assert expr("[M, N][-1]")({}, {"M": 1, "N": 2}) == 2


def test_bool_ops_compare_ifexp():
    e = expr("M if $BLOCK_M > 32 and not N else -1")
    assert e({"BLOCK_M": 64}, {"M": 7, "N": 0}) == 7
    assert e({"BLOCK_M": 16}, {"M": 7, "N": 0}) == -1
    assert expr("1 < M <= 3 or $num_warps == 8")({"num_warps": 4}, {"M": 2}) is True


def test_missing_field_at_call_time_names_field_and_config():
    e = expr("$BLOCK_N * 2")
    with pytest.raises(
        ExpressionError,
        match=r"grid expression '\$BLOCK_N \* 2' reads \$BLOCK_N, but config "
        r"\{'BLOCK_M': 64\} has no field 'BLOCK_N'",
    ):
        e(Config(BLOCK_M=64), {})


def test_missing_argument_at_call_time():
    with pytest.raises(ExpressionError, match=r"reads argument 'M', which was not passed"):
        expr("M + 1")({}, {"N": 1})


def test_user_key_error_is_not_swallowed():
    """The expression's own KeyError is named, and kept as the cause, not taken for a missing field or argument."""
    with pytest.raises(ExpressionError, match=r"raised KeyError: 'zz'") as info:
        expr("M['zz']")({}, {"M": {}})
    assert isinstance(info.value.__cause__, KeyError)


# ---------------------------------------------------------------------------------------------- rejected syntax
@pytest.mark.parametrize(
    "source, fragment",
    [
        ("lambda: 1", "a lambda is not allowed"),
        ("[i for i in a]", "a list comprehension is not allowed"),
        ("(i for i in a)", "a generator expression is not allowed"),
        ("{i: i for i in a}", "a dict comprehension is not allowed"),
        ("(y := 3)", "walrus"),
        ("f'{M}'", "an f-string is not allowed"),
        ("a.__class__", "attribute '__class__' is not allowed"),
        ("a._private", "attribute '_private' is not allowed"),
        ("max(**a)", "'\\*\\*' keyword unpacking is not allowed"),
        ("max(*a)", "'\\*' unpacking is not allowed"),
        ("{M: 1}", "a dict display is not allowed"),
        ("M = 3", "is a statement; only a Python expression is allowed"),
        ("import os", "is a statement"),
        ("M +", "is not valid Python expression syntax"),
        ("print(M)", "cannot call 'print'"),
        ("M(3)", "cannot call 'M'"),
        ("(a.shape)[0](1)", "only helpers and methods"),
        ("__import__('os')", "cannot call '__import__'"),
        ("'{0.__globals__[__builtins__][open]}'.format(cdiv)", "cannot call 'format' here"),
        ("'{0.__globals__}'.format_map({'0': cdiv})", "cannot call 'format_map' here"),
        ("fmt.format(cdiv)", "cannot call 'format' here"),  # a str argument's format is the same hole
        ("'ab'.upper()", "methods of constants cannot"),
        ("$ BLOCK_M", "'\\$' must be followed by a config field name"),
        ("__autotune_cfg__BLOCK_M", "reserved name prefix"),
    ],
)
def test_rejected_syntax(source, fragment):
    with pytest.raises(ExpressionError, match=fragment):
        expr(source)


def test_syntax_error_quotes_source():
    with pytest.raises(ExpressionError, match=r"grid expression '\(M, \$BLOCK_M' is not valid"):
        expr("(M, $BLOCK_M")


def test_non_string_source():
    with pytest.raises(ExpressionError, match="must be a string"):
        Expression(3, config_fields=FIELDS, arg_names=ARGS, what="grid")


def test_builtins_are_not_reachable():
    for source in ("open('x')", "eval('1')", "getattr(a, 'x')", "type(a)"):
        with pytest.raises(ExpressionError, match="cannot call"):
            expr(source)


# ---------------------------------------------------------------------------------------------- names
def test_unknown_field_lists_valid_fields_and_suggests():
    with pytest.raises(
        ExpressionError,
        match=r"\$BLOCK_K is not a field of the search space; valid fields: "
        r"BLOCK_M, BLOCK_N, num_warps\. Did you mean 'BLOCK_N'\?",
    ):
        expr("$BLOCK_K")


def test_unknown_name_lists_args_and_helpers_and_suggests():
    with pytest.raises(
        ExpressionError,
        match=r"unknown name 'MM'; kernel arguments: M, N, a, b; helpers: abs, "
        r"anchor, cdiv, int, max, min, next_power_of_2, pow2_bucket\. Did you "
        r"mean 'M'\?",
    ):
        expr("MM + 1")


def test_an_argument_written_with_a_dollar_is_told_to_drop_it():
    with pytest.raises(
        ExpressionError,
        match=r"\$M is not a field of the search space; valid fields: BLOCK_M, "
        r"BLOCK_N, num_warps\. 'M' is an argument of the kernel: write M, "
        r"without \$\.",
    ):
        expr("cdiv($M, $BLOCK_M)")


def test_config_field_used_without_dollar():
    with pytest.raises(ExpressionError, match=r"'BLOCK_M' is a config field: write \$BLOCK_M"):
        expr("BLOCK_M")


def test_no_config_fields_allowed_says_why():
    with pytest.raises(
        ExpressionError,
        match=r"key expression '\$BLOCK_M' uses \$BLOCK_M, but config fields "
        r"\(\$X\) are not available in a key expression",
    ):
        Expression("$BLOCK_M", config_fields=None, arg_names=ARGS, what="key")


def test_argument_shadows_helper_name():
    e = Expression("max + 1", config_fields=(), arg_names=("max",), what="grid")
    assert e({}, {"max": 2}) == 3
    with pytest.raises(ExpressionError, match="cannot call 'max'"):
        Expression("max(1, 2)", config_fields=(), arg_names=("max",), what="grid")


# ---------------------------------------------------------------------------------------------- grid
def test_grid_none():
    assert compile_grid(None, config_fields=FIELDS, arg_names=ARGS) is None


def test_grid_string_tuple_and_int():
    g = compile_grid("(cdiv(M, $BLOCK_M), cdiv(N, $BLOCK_N))", config_fields=FIELDS, arg_names=ARGS)
    assert g({"BLOCK_M": 64, "BLOCK_N": 32}, {"M": 129, "N": 32}) == (3, 1)
    g1 = compile_grid("cdiv(M, $BLOCK_M)", config_fields=FIELDS, arg_names=ARGS)
    assert g1({"BLOCK_M": 64}, {"M": 129}) == (3,)


def test_grid_tuple_of_ints_and_strings():
    g = compile_grid((4, "cdiv(M, $BLOCK_M)", 1), config_fields=FIELDS, arg_names=ARGS)
    assert g({"BLOCK_M": 32}, {"M": 64}) == (4, 2, 1)
    assert compile_grid([2, 3], config_fields=FIELDS, arg_names=ARGS)({}, {}) == (2, 3)


def test_grid_callable_meta_like_triton():
    seen = {}

    def grid(meta):
        seen.update(meta)
        return (cdiv(meta["M"], meta["BLOCK_M"]),)

    g = compile_grid(grid, config_fields=FIELDS, arg_names=ARGS)
    assert g(Config(BLOCK_M=16), {"M": 33, "a": 1}) == (3,)
    assert seen == {"M": 33, "a": 1, "BLOCK_M": 16}


def test_grid_result_normalised_to_python_ints():
    np = pytest.importorskip("numpy")
    g = compile_grid(lambda meta: [np.int64(3), torch.tensor(2)], config_fields=FIELDS, arg_names=ARGS)
    out = g({}, {})
    assert out == (3, 2) and all(type(v) is int for v in out)


@pytest.mark.parametrize(
    "grid, fragment",
    [
        ("(M, M, M, M)", "a grid has 1 to 3 dimensions"),
        ("()", "a grid has 1 to 3 dimensions"),
        ("M / 2", "grid sizes must be ints, got float"),
        ("-M", "grid sizes must be >= 0"),
        ("M > 0", "not bools"),
    ],
)
def test_grid_bad_results_raise_at_call_time_naming_source(grid, fragment):
    g = compile_grid(grid, config_fields=FIELDS, arg_names=ARGS)
    with pytest.raises(ExpressionError, match=fragment) as info:
        g({}, {"M": 3})
    assert repr(grid) in str(info.value)


def test_grid_bad_callable_result_names_callable():
    def my_grid(meta):
        return "x"

    with pytest.raises(ExpressionError, match="grid callable my_grid gave"):
        compile_grid(my_grid, config_fields=FIELDS, arg_names=ARGS)({}, {})


def test_grid_bad_forms_at_compile_time():
    with pytest.raises(ExpressionError, match="1 to 3"):
        compile_grid((1, 2, 3, 4), config_fields=FIELDS, arg_names=ARGS)
    with pytest.raises(ExpressionError, match="item 1 .* must be a non-negative int or a \\$X expression string"):
        compile_grid((1, 2.5), config_fields=FIELDS, arg_names=ARGS)
    with pytest.raises(ExpressionError, match="grid must be"):
        compile_grid(3.0, config_fields=FIELDS, arg_names=ARGS)
    with pytest.raises(ExpressionError, match=r"grid\[1\] expression 'MM'.*unknown name"):
        compile_grid((1, "MM"), config_fields=FIELDS, arg_names=ARGS)


# ---------------------------------------------------------------------------------------------- derive
def test_derive_strings_and_callables_in_order():
    d = compile_derive(
        {
            "EVEN": "M % $BLOCK_M == 0",
            "HALF": "$BLOCK_M // 2",
            "TWICE_HALF": "$HALF * 2",
            "FROM_META": lambda meta: meta["M"] + meta["BLOCK_M"] + meta["HALF"],
        },
        config_fields=FIELDS,
        arg_names=ARGS,
    )
    assert d(Config(BLOCK_M=64), {"M": 128}) == {"EVEN": True, "HALF": 32, "TWICE_HALF": 64, "FROM_META": 224}


def test_derive_single_and_none():
    assert compile_derive(None, config_fields=FIELDS, arg_names=ARGS)({"BLOCK_M": 1}, {}) == {}
    assert compile_derive({"X": "$BLOCK_M + 1"}, config_fields=FIELDS, arg_names=ARGS)({"BLOCK_M": 1}, {}) == {"X": 2}


def test_derive_errors():
    with pytest.raises(ExpressionError, match=r"derive\['X'\] expression '\$NOPE'.*not a field"):
        compile_derive({"X": "$NOPE"}, config_fields=FIELDS, arg_names=ARGS)
    with pytest.raises(ExpressionError, match=r"derive\['BLOCK_M'\] has the name of a search-space field"):
        compile_derive({"BLOCK_M": "1"}, config_fields=FIELDS, arg_names=ARGS)
    with pytest.raises(ExpressionError, match="not a Python identifier"):
        compile_derive({"1X": "1"}, config_fields=FIELDS, arg_names=ARGS)
    with pytest.raises(ExpressionError, match=r"derive\['X'\] must be a \$X expression string or a callable"):
        compile_derive({"X": 3}, config_fields=FIELDS, arg_names=ARGS)


# ---------------------------------------------------------------------------------------------- predicate
def test_compile_predicate():
    p = compile_predicate("$BLOCK_M >= 64", config_fields=FIELDS)
    assert p(Config(BLOCK_M=64)) is True and p(Config(BLOCK_M=32)) is False
    f = lambda c: True  # noqa: E731
    assert compile_predicate(f, config_fields=FIELDS) is f
    with pytest.raises(ExpressionError, match=r"where expression 'M > 1': unknown name 'M'"):
        compile_predicate("M > 1", config_fields=FIELDS)
    with pytest.raises(SpaceError):
        compile_predicate(None, config_fields=FIELDS)


def test_where_reading_a_call_argument_says_where_sees_config_fields_only_and_points_to_prune():
    from autotune import CartesianSpace

    with pytest.raises(
        ExpressionError,
        match=r"unknown name 'n'; where\(\) sees only the config's fields, as \$X "
        r"\(BLOCK\).*use @autotune\(prune=\.\.\.\)",
    ) as info:
        CartesianSpace(BLOCK=(32, 64)).where("$BLOCK <= n")
    assert "kernel arguments" not in str(info.value)


# ---------------------------------------------------------------------------------------------- properties
_OPS = ["+", "-", "*", "//", "%"]


@st.composite
def _int_expressions(draw, depth=3):
    """(source with $X, python source with values substituted) pairs of random integer arithmetic."""
    if depth == 0 or draw(st.booleans()):
        if draw(st.booleans()):
            name = draw(st.sampled_from(["A", "B", "C"]))
            return f"${name}", name
        v = draw(st.integers(-20, 20))
        return f"({v})", f"({v})"
    left = draw(_int_expressions(depth=depth - 1))
    right = draw(_int_expressions(depth=depth - 1))
    op = draw(st.sampled_from(_OPS))
    if op in ("//", "%"):
        return (f"({left[0]} {op} max(1, abs({right[0]})))", f"({left[1]} {op} max(1, abs({right[1]})))")
    return f"({left[0]} {op} {right[0]})", f"({left[1]} {op} {right[1]})"


@settings(max_examples=80, deadline=None)
@given(_int_expressions(), st.fixed_dictionaries({k: st.integers(-50, 50) for k in "ABC"}))
def test_property_integer_arithmetic_matches_python(pair, values):
    source, python = pair
    e = Expression(source, config_fields=("A", "B", "C"), arg_names=(), what="where")
    assert e(values, {}) == eval(python, {"max": max, "abs": abs}, dict(values))  # noqa: S307


# --- behaviour pinned after mutation testing ----------------------------------------------------------------------


def test_next_power_of_2_takes_integer_like_arguments():
    np = pytest.importorskip("numpy")
    assert next_power_of_2(np.int64(5)) == 8 and type(next_power_of_2(np.int64(5))) is int
    assert expr("next_power_of_2(N)")({}, {"N": np.int64(33)}) == 64


def test_surrounding_whitespace_and_newlines_are_allowed():
    e = expr("  cdiv(M, $BLOCK_M)  ")
    assert e({"BLOCK_M": 64}, {"M": 130}) == 3
    multi = expr("""
        (cdiv(M, $BLOCK_M),
         N)
    """)
    assert multi({"BLOCK_M": 64}, {"M": 130, "N": 7}) == (3, 7)


def test_syntax_error_column_only_when_it_points_into_the_source():
    with pytest.raises(ExpressionError, match=r"'\(M, N' is not valid Python expression syntax \(column 1\)"):
        expr("(M, N")
    with pytest.raises(ExpressionError) as info:  # '$X' is rewritten before parsing: columns would be off
        expr("(M, $BLOCK_M")
    assert "column" not in str(info.value)


def test_derive_reading_an_earlier_derived_name_without_dollar_is_refused():
    """A derived name is a kernel meta-parameter (so a kernel argument name), set per config: reading it bare
    would read a call argument no call passes; the error says to write $NAME."""
    with pytest.raises(
        ExpressionError,
        match=r"derive\['TWICE'\] expression 'HALF \* 2' reads 'HALF' as a call "
        r"argument, but derive= sets it for each config .*\(write \$HALF\)",
    ):
        compile_derive(
            {"HALF": "$BLOCK_M // 2", "TWICE": "HALF * 2"}, config_fields=FIELDS, arg_names=ARGS + ("HALF", "TWICE")
        )
    with pytest.raises(
        ExpressionError,
        match=r"derive\['FIRST'\] expression 'LATER \+ 1' reads 'LATER' as a call "
        r"argument, but derive= sets it for each config",
    ):
        compile_derive(
            {"FIRST": "LATER + 1", "LATER": "$BLOCK_M"}, config_fields=FIELDS, arg_names=ARGS + ("FIRST", "LATER")
        )
    d = compile_derive(
        {"HALF": "$BLOCK_M // 2", "TWICE": "$HALF * 2"}, config_fields=FIELDS, arg_names=ARGS + ("HALF", "TWICE")
    )
    assert d({"BLOCK_M": 64}, {}) == {"HALF": 32, "TWICE": 64}


@pytest.mark.parametrize(
    "grid, fragment",
    [
        ("(M - 129,)", "grid sizes must be >= 0"),  # -1: the one-dimensional grid is checked as any other
        ("(M - 129, 1)", "grid sizes must be >= 0"),
        ("(M / 2,)", "grid sizes must be ints, got float"),
        ("(M > 0,)", "not bools"),
    ],
)
def test_one_dimensional_grid_results_are_checked(grid, fragment):
    g = compile_grid(grid, config_fields=FIELDS, arg_names=ARGS)
    with pytest.raises(ExpressionError, match=fragment):
        g({"BLOCK_M": 64}, {"M": 128})
    with pytest.raises(ExpressionError, match=fragment):
        compile_grid(lambda meta: eval(grid, {}, meta), config_fields=FIELDS, arg_names=ARGS)({}, {"M": 128})


def test_grid_tuple_refuses_negative_and_bool_items_at_compile_time():
    for grid in ((-1,), (4, -1), (True,), (4, False)):
        with pytest.raises(ExpressionError, match="must be a non-negative int or a \\$X expression string"):
            compile_grid(grid, config_fields=FIELDS, arg_names=ARGS)


def test_float_grid_error_hint_depends_on_cdiv():
    """A float that reaches a cdiv grid comes from a float size passed by the call; elsewhere, from a division."""
    with pytest.raises(ExpressionError, match=r"pass ints \(e\.g\. n=1024, not 1024\.0\)"):
        compile_grid("cdiv(M, $BLOCK_M)", config_fields=FIELDS, arg_names=ARGS)({"BLOCK_M": 64}, {"M": 100.0})
    with pytest.raises(ExpressionError, match=r"use cdiv\(\.\.\.\) or int\(\.\.\.\)"):
        compile_grid("M / 2", config_fields=FIELDS, arg_names=ARGS)({}, {"M": 100})


def test_meta_callables_see_config_values_over_same_named_arguments():
    """As in Triton, a `meta` callable (grid=, derive=) gets {**args, **config}: the config's value wins."""
    g = compile_grid(lambda meta: (meta["BLOCK_M"],), config_fields=FIELDS, arg_names=ARGS)
    assert g({"BLOCK_M": 64}, {"BLOCK_M": 1, "M": 5}) == (64,)
    d = compile_derive({"B": lambda meta: meta["BLOCK_M"]}, config_fields=FIELDS, arg_names=ARGS)
    assert d({"BLOCK_M": 64}, {"BLOCK_M": 1}) == {"B": 64}
