"""Tuning keys: spec forms, normalisation to JSON-friendly values, dtypes, errors, bucketing helpers."""

from __future__ import annotations

import json
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.errors import AutotuneError, ExpressionError, KeyValueError
from autotune.keys import KeyBuilder, anchor, pow2_bucket

ARGS = ("x", "y", "M", "N", "FLAG")


def _args(**kw):
    base = {
        "x": torch.empty(4, 8, dtype=torch.float16),
        "y": torch.empty(3, dtype=torch.float32),
        "M": 128,
        "N": 64,
        "FLAG": True,
    }
    base.update(kw)
    return base


def test_key_none_is_one_entry_but_keeps_dtypes():
    assert KeyBuilder(None, arg_names=ARGS)(_args()) == ((), ("torch.float16", "torch.float32"))


def test_key_names():
    kb = KeyBuilder(["M", "N"], arg_names=ARGS)
    assert kb(_args()) == ((128, 64), ("torch.float16", "torch.float32"))
    assert kb(_args(M=256))[0] == (256, 64)


def test_key_single_string_is_one_entry():
    assert KeyBuilder("M", arg_names=ARGS)(_args())[0] == (128,)


def test_key_expressions():
    kb = KeyBuilder(["x.shape[0]", "x.shape", "M // 64", "FLAG", "x.stride(0)"], arg_names=ARGS)
    values, dtypes = kb(_args())
    assert values == (4, (4, 8), 2, True, 8)
    assert type(values[1]) is tuple  # torch.Size became a plain tuple
    assert json.loads(json.dumps(values)) == [4, [4, 8], 2, True, 8]


def test_key_callable_receives_named_args():
    seen = {}

    def key(**kw):
        seen.update(kw)
        return (kw["M"] * 2, kw["x"].dtype)

    values, _ = KeyBuilder(key, arg_names=ARGS)(_args())
    assert values == (256, "torch.float16")
    assert set(seen) == set(ARGS)
    assert KeyBuilder(lambda M, **_: M, arg_names=ARGS)(_args())[0] == (128,)  # non-tuple -> 1-tuple


def test_key_normalises_numpy_and_dtypes():
    np = pytest.importorskip("numpy")
    kb = KeyBuilder(["M", "N", "FLAG"], arg_names=ARGS)
    values, dtypes = kb(_args(M=np.int64(7), N=np.float32(0.5), FLAG=np.bool_(False)))
    assert values == (7, 0.5, False)
    assert [type(v) for v in values] == [int, float, bool]
    assert dtypes == ("torch.float16", "torch.float32", "int64", "float32", "bool")  # numpy scalars have a dtype
    assert KeyBuilder(["M"], arg_names=ARGS)(_args(M=torch.float16))[0] == ("torch.float16",)


def test_dtypes_in_signature_order_for_args_with_dtype():
    kb = KeyBuilder(None, arg_names=("a", "n", "b"))
    args = {"b": torch.empty(1, dtype=torch.int32), "n": 3, "a": torch.empty(1, dtype=torch.bfloat16)}
    assert kb(args)[1] == ("torch.bfloat16", "torch.int32")
    assert kb.dtypes({"n": 1}) == ()


def test_tensor_as_key_value_suggests_shape():
    kb = KeyBuilder(["x"], arg_names=ARGS)
    with pytest.raises(KeyValueError, match=r"key 'x' is a tensor.*use e\.g\. x\.shape\[0\]") as info:
        kb(_args())
    assert isinstance(info.value, AutotuneError)
    with pytest.raises(AutotuneError, match="is a tensor"):
        KeyBuilder(lambda x, **_: x, arg_names=ARGS)(_args())


def test_non_json_key_value():
    with pytest.raises(AutotuneError, match="not JSON-friendly"):
        KeyBuilder(lambda **_: object(), arg_names=ARGS)(_args())


def test_unknown_key_names_list_kernel_args():
    with pytest.raises(
        ExpressionError,
        match=r"key\[1\] expression 'K': unknown name 'K'; kernel arguments: "
        r"FLAG, M, N, x, y",
    ):
        KeyBuilder(["M", "K"], arg_names=ARGS)
    with pytest.raises(ExpressionError, match=r"config fields \(\$X\) are not available"):
        KeyBuilder(["$BLOCK"], arg_names=ARGS)


def test_bad_key_specs():
    with pytest.raises(ExpressionError, match="key must be None, a list"):
        KeyBuilder(3, arg_names=ARGS)
    with pytest.raises(ExpressionError, match=r"key\[0\] = 3: key entries must be argument names"):
        KeyBuilder([3], arg_names=ARGS)


def test_missing_key_argument():
    args = _args()
    del args["M"]
    with pytest.raises(ExpressionError, match="key argument 'M' was not passed"):
        KeyBuilder(["M"], arg_names=ARGS)(args)
    with pytest.raises(ExpressionError, match="reads argument 'M', which was not passed"):
        KeyBuilder(["M + 1"], arg_names=ARGS)(args)


# ---------------------------------------------------------------------------------------------- bucketing
def test_pow2_bucket_examples():
    assert [pow2_bucket(n) for n in (-3, 0, 1, 2, 3, 4, 5, 1000, 1024, 1025)] == [1, 1, 1, 2, 4, 4, 8, 1024, 1024, 2048]


def test_bucketing_refuses_a_non_integer_size():
    """A float size would bucket to a float key that no integer call meets again: refused, not rounded."""
    with pytest.raises(TypeError, match="'float' object cannot be interpreted as an integer"):
        pow2_bucket(3.5)
    with pytest.raises(TypeError, match="'float' object cannot be interpreted as an integer"):
        anchor(100.0, 64)
    assert pow2_bucket(True) == 1 and anchor(65, 64) == 128  # an int subclass is an int


def test_a_key_string_with_commas_is_refused_with_the_list_it_likely_means():
    with pytest.raises(
        ExpressionError,
        match=r"key='M, cdiv\(N, 2\)' is one expression that makes a tuple; a key "
        r"of several values is a list, one entry each: key=\['M', 'cdiv\(N, 2\)'\]",
    ):
        KeyBuilder("M, cdiv(N, 2)", arg_names=ARGS)
    args = {"x": None, "y": None, "M": 3, "N": 4, "FLAG": 0}
    assert KeyBuilder("(M, N)", arg_names=ARGS)(args)[0] == ((3, 4),)  # parenthesised: one tuple value, kept
    assert KeyBuilder(["M", "N"], arg_names=ARGS)(args)[0] == (3, 4)


def test_a_key_string_opening_with_a_parenthesis_that_closes_early_is_refused_too():
    """Only a tuple that one pair of parentheses encloses whole is one deliberate value: "(M), N" and
    "(M) + 1, N" are comma lists like "M, N" (they used to pass as a single tuple value because the text starts
    with "("), while "((M), N)" and a ")" inside a string stay one value."""
    for text, meant in (
        ("(M), N", r"\['M', 'N'\]"),
        ("(M) + 1, N", r"\['\(M\) \+ 1', 'N'\]"),
        ("(M), (N)", r"\['M', 'N'\]"),
    ):
        with pytest.raises(ExpressionError, match=rf"is one expression that makes a tuple; .* key={meant}"):
            KeyBuilder(text, arg_names=ARGS)
    args = {"x": None, "y": None, "M": 3, "N": 4, "FLAG": 0}
    assert KeyBuilder("((M), N)", arg_names=ARGS)(args)[0] == ((3, 4),)
    assert KeyBuilder("(M, ')')", arg_names=ARGS)(args)[0] == ((3, ")"),)


def test_a_tensor_inside_a_tuple_key_value_is_named_by_its_position():
    args = {"x": torch.ones(3), "y": None, "M": 3, "N": 4, "FLAG": 0}
    with pytest.raises(KeyValueError, match=r"key '\(M, x\)' item 1 is a tensor \(\(3,\), torch.float32\)"):
        KeyBuilder(["(M, x)"], arg_names=ARGS)(args)


def test_the_bucketing_helpers_are_names_in_key_expressions_and_say_so_when_called_on_a_name():
    """key=["pow2_bucket(n)", "anchor(M, 256)"] buckets at each call; pow2_bucket("n"), written at decoration,
    is the usual slip and its error shows the string form."""
    key = KeyBuilder(["pow2_bucket(M)", "anchor(N, 256)"], arg_names=ARGS)
    assert key({"x": None, "y": None, "M": 1000, "N": 257, "FLAG": 0})[0] == (1024, 512)
    assert key({"x": None, "y": None, "M": 513, "N": 511, "FLAG": 0})[0] == (1024, 512)  # the same bucket: one tuning
    with pytest.raises(TypeError, match=r'in key= write the expression as a string, key=\["pow2_bucket\(n\)"\]'):
        pow2_bucket("n")
    with pytest.raises(TypeError, match=r'key=\["anchor\(M, 256\)"\]'):
        anchor("M", 256)


def test_anchor_examples_and_errors():
    assert [anchor(n, 64) for n in (0, 1, 64, 65, 128)] == [0, 64, 64, 128, 128]
    with pytest.raises(ValueError, match="base > 0"):
        anchor(10, 0)
    with pytest.raises(ValueError, match="base > 0"):
        anchor(10, -8)


@settings(max_examples=100, deadline=None)
@given(st.integers(-10, 1 << 40))
def test_property_pow2_bucket(n):
    b = pow2_bucket(n)
    assert b >= 1 and b & (b - 1) == 0  # a power of two
    assert b >= n
    assert b == 1 or b // 2 < n  # the smallest such
    assert pow2_bucket(b) == b


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 1 << 40), st.integers(1, 1 << 12))
def test_property_anchor(n, base):
    a = anchor(n, base)
    assert a % base == 0 and n <= a < n + base
    assert a == math.ceil(n / base) * base if n < (1 << 50) else True
    assert anchor(a, base) == a


# --- #12 items 3 and 16: any hashable key value Triton accepts; NaN refused --------------------------------------


def test_triton_dtype_key_value_is_stored_by_a_stable_text_form():
    import triton.language as tl

    kb = KeyBuilder(["M"], arg_names=ARGS)
    key, _ = kb({**_args(), "M": tl.float32})
    assert key == ("triton.language.core.dtype:fp32",)
    again, _ = kb({**_args(), "M": tl.float32})
    assert again == key and kb({**_args(), "M": tl.float16})[0] != key


def test_enum_key_value_is_its_qualified_member_name():
    import enum

    class Mode(enum.Enum):
        FAST = object()

    key, _ = KeyBuilder(["M"], arg_names=ARGS)({**_args(), "M": Mode.FAST})
    assert key == ("test_enum_key_value_is_its_qualified_member_name.<locals>.Mode.FAST",)


def test_nan_key_value_is_refused_with_the_reason():
    from autotune.errors import KeyValueError

    for kb in (
        KeyBuilder(["M"], arg_names=ARGS),
        KeyBuilder(lambda **_: float("nan"), arg_names=ARGS),
        KeyBuilder(["M * 1.0"], arg_names=ARGS),
    ):
        with pytest.raises(KeyValueError, match="NaN never equals itself"):
            kb({**_args(), "M": float("nan")})


def _keyed_by(value: list):
    """add_kernel tuned with the key `(value[0],)`, whatever the call: the test sets the key value it wants."""
    from kernels_for_tests import add_kernel

    from autotune import Tuning, autotune

    return autotune(
        space={"BLOCK": (16, 32)},
        key=lambda **_: (value[0],),
        grid="(cdiv(n, $BLOCK),)",
        tuning=Tuning(preset="fast", isolate="off", compile_workers=0),
    )(add_kernel)


def test_an_infinite_key_value_is_refused_when_a_key_is_first_met_and_a_finite_one_is_stored_as_is():
    """JSON has no infinity (an entry would be read back with another key and never match, so every process would
    tune again): refused on a memory miss, naming the value; a large finite value round-trips through the disk."""
    from autotune.storage import disk_entries

    value = [float("inf")]
    tuned = _keyed_by(value)
    x = torch.ones(40)
    for infinite in (math.inf, -math.inf):
        value[0] = infinite
        with pytest.raises(KeyValueError, match=f"key value {infinite} is infinite: JSON has no infinity"):
            tuned(x, x, torch.empty(40), 40)
    assert disk_entries("add_kernel") == []
    value[0] = 1e308
    tuned(x, x, torch.empty(40), 40)
    assert [e.record.key for e in disk_entries("add_kernel")] == [[1e308]]


def test_an_infinity_inside_a_tuple_key_value_is_refused_too():
    from autotune.keys import check_finite_key

    check_finite_key((1, (2.5, "x", None), True), "k")
    with pytest.raises(KeyValueError, match=r"k: key value -inf is infinite"):
        check_finite_key((1, (2.5, (float("-inf"),))), "k")


# --- normalisation of less common key values (found by mutation testing) ----------------------------------------


def test_list_key_values_become_tuples():
    """A list key value is stored as a tuple (hashable, the form a cache entry's key has); a callable key
    returning a list gives the same key values as one returning that tuple (its items, not one nested value)."""
    kb = KeyBuilder(["M"], arg_names=ARGS)
    assert kb(_args(M=[1, [2, 3]]))[0] == ((1, (2, 3)),)
    assert KeyBuilder(lambda **_: [4, 5], arg_names=ARGS)(_args())[0] == (4, 5)
    assert KeyBuilder(lambda **_: (4, 5), arg_names=ARGS)(_args())[0] == (4, 5)
    assert KeyBuilder(lambda **_: [4, [5, 6]], arg_names=ARGS)(_args())[0] == (4, (5, 6))


def test_subclasses_of_builtin_scalars_are_stored_as_the_plain_builtin():
    class Name(str):
        pass

    class Size(int):
        pass

    class Scale(float):
        pass

    values, _ = KeyBuilder(["M", "N", "FLAG"], arg_names=ARGS)(_args(M=Name("rows"), N=Size(7), FLAG=Scale(0.5)))
    assert values == ("rows", 7, 0.5)
    assert [type(v) for v in values] == [str, int, float]


def test_index_and_float_like_values_key_as_the_python_number():
    """torch.SymInt / SymFloat-like values (only __index__ / __float__) key as the number they stand for."""

    class SymIntLike:
        def __index__(self):
            return 12

    class SymFloatLike:
        def __float__(self):
            return 0.25

    values, _ = KeyBuilder(["M", "N"], arg_names=ARGS)(_args(M=SymIntLike(), N=SymFloatLike()))
    assert values == (12, 0.25) and [type(v) for v in values] == [int, float]


def test_nan_hidden_in_a_numpy_or_float_like_scalar_is_refused():
    np = pytest.importorskip("numpy")

    class NanLike:
        def __float__(self):
            return float("nan")

    kb = KeyBuilder(["M"], arg_names=ARGS)
    for value in (np.float32("nan"), NanLike()):
        with pytest.raises(KeyValueError, match="NaN never equals itself"):
            kb(_args(M=value))


def test_unhashable_key_value_is_refused():
    kb = KeyBuilder(["M"], arg_names=ARGS)
    for value in ({"a": 1}, {1, 2}):
        with pytest.raises(KeyValueError, match="must be hashable"):
            kb(_args(M=value))


def test_dtypes_skip_arguments_without_a_dtype():
    kb = KeyBuilder(None, arg_names=("a", "shape", "obj", "b"))
    args = {
        "a": torch.empty(1, dtype=torch.float16),
        "shape": (1, 2),
        "obj": object(),
        "b": torch.empty(1, dtype=torch.int8),
    }
    assert kb.dtypes(args) == ("torch.float16", "torch.int8")


def test_error_for_an_expression_key_names_the_expression():
    with pytest.raises(KeyValueError, match=r"key 'x \* 2' is a tensor"):
        KeyBuilder(["M", "x * 2"], arg_names=ARGS)(_args())


def test_normalise_key_matches_what_a_call_stores():
    """normalise_key (what clear_autotune_cache(key=...) matches with) gives the key a call with the same values
    stored, and refuses what a call would refuse."""
    import enum

    import triton.language as tl

    from autotune.keys import normalise_key

    class Mode(enum.IntEnum):
        FAST = 1

    values = [tl.float32, Mode.FAST, [1, 2], torch.float16]
    stored, _ = KeyBuilder(["M", "N", "FLAG", "x"], arg_names=("M", "N", "FLAG", "x"))(
        dict(zip(("M", "N", "FLAG", "x"), values))
    )
    assert normalise_key(values) == stored
    assert normalise_key(values) == (
        "triton.language.core.dtype:fp32",
        "test_normalise_key_matches_what_a_call_stores.<locals>.Mode.FAST",
        (1, 2),
        "torch.float16",
    )
    with pytest.raises(KeyValueError, match=r"where\[1\] is NaN"):
        normalise_key((1, float("nan")), "where")


def test_a_set_key_value_has_the_same_text_in_every_process():
    from hash_seeds import printed_under_hash_seeds

    code = (
        "from autotune.keys import KeyBuilder\n"
        "print(KeyBuilder(['mode'], arg_names=['mode'])({'mode': frozenset({'relu', 'gelu', 'silu', 7})}))"
    )
    printed = printed_under_hash_seeds(code, ("1", "2", "3", "4"))
    assert len(set(printed)) == 1 and "gelu" in printed[0], printed


def test_a_class_is_a_key_value_by_its_name_and_an_array_is_refused_as_a_tensor_is():
    import numpy as np

    kb = KeyBuilder(["kind"], arg_names=["kind"])
    assert kb({"kind": np.float32})[0] != kb({"kind": np.float64})[0]
    assert kb({"kind": int})[0] == ("builtins.type:<class 'int'>",)
    with pytest.raises(KeyValueError, match=r"is an array \(\(2,\), int64\).*len\(a\)"):
        kb({"kind": np.array([1, 2])})


def test_a_callable_key_that_raises_is_a_key_value_error_naming_key_and_the_arguments():
    """What a callable key= raises is said as key='s failure (as an expression key's is), naming the function,
    the exception and the call's arguments; the original exception is its cause."""
    from kernels_for_tests import add_kernel

    from autotune import Tuning, autotune

    def bucket(x, y, out, n):
        return n // 0

    tuned = autotune(
        space={"BLOCK": (16, 32)},
        key=bucket,
        grid="(cdiv(n, $BLOCK),)",
        tuning=Tuning(preset="fast", isolate="off", compile_workers=0),
    )(add_kernel)
    x = torch.ones(40)
    with pytest.raises(KeyValueError, match=r"key=.*bucket raised ZeroDivisionError: .* n=40\); fix the key=") as info:
        tuned(x, x, torch.empty(40), 40)
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    assert "x=Tensor(40,) torch.float32" in str(info.value)


def test_autotune_launch_tells_apart_key_callables_differing_only_in_keyword_only_defaults():
    """Two key= lambdas with the same code and different keyword-only defaults compute different keys: each gets
    its own tuner (code_identity hashes __kwdefaults__ as it hashes __defaults__)."""
    from kernels_for_tests import add_kernel

    from autotune import Tuning, autotune_launch

    x = torch.ones(64)
    keys = []
    for block in (16, 32):
        launched = autotune_launch(
            add_kernel,
            space={"BLOCK": (16, 32)},
            args=(x, x, torch.empty(64), 64),
            key=lambda x, y, out, n, *, B=block: n // B,
            grid="(cdiv(n, $BLOCK),)",
            tuning=Tuning(preset="fast", isolate="off", compile_workers=0),
        )
        keys.append(tuple(launched.record.key))
    assert keys == [(4,), (2,)]


def test_negative_zero_key_value_is_stored_as_zero_so_memory_and_disk_agree():
    """-0.0 == 0.0, so memory holds one winner for both; the key value is 0.0 everywhere (a nested one too), so
    the disk and clear_autotune_cache(key=) see the same single entry instead of "[-0.0]" beside "[0.0]"."""
    from kernels_for_tests import add_kernel

    from autotune import clear_autotune_cache
    from autotune.storage import disk_entries

    for kb in (KeyBuilder(["M"], arg_names=ARGS), KeyBuilder(["M * 1.0"], arg_names=ARGS)):
        (value,) = kb(_args(M=-0.0))[0]
        assert math.copysign(1.0, value) == 1.0
    assert math.copysign(1.0, KeyBuilder(["M"], arg_names=ARGS)(_args(M=(1, -0.0)))[0][0][1]) == 1.0
    value = [-0.0]
    tuned = _keyed_by(value)
    x = torch.ones(40)
    tuned(x, x, torch.empty(40), 40)
    value[0] = 0.0
    tuned(x, x, torch.empty(40), 40)
    assert [json.dumps(e.record.key) for e in disk_entries("add_kernel")] == ["[0.0]"]
    assert clear_autotune_cache(add_kernel.__name__, key=(-0.0,)) == 1
