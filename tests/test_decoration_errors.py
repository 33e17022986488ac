"""Every mistake that can be known when decorating is raised there, with a message naming the fix."""

from __future__ import annotations

import functools

import pytest
from kernels_for_tests import add_kernel, scale_2d_kernel

from autotune import AutotuneError, CartesianSpace, FixedSpace, Reference, autotune
from autotune.errors import ExpressionError, OptionError, SpaceError


def deco(**kwargs):
    kwargs.setdefault("space", {"BLOCK": (32, 64)})
    kwargs.setdefault("key", ["n"])
    return autotune(**kwargs)(add_kernel)


def test_field_that_is_neither_constexpr_nor_compile_option():
    with pytest.raises(SpaceError, match="BLOK") as info:
        deco(space={"BLOK": (32,)})
    assert "BLOCK" in str(info.value)


def test_a_space_whose_configs_do_not_all_set_a_constexpr_without_default_is_refused_with_one_that_lacks_it():
    """The call cannot pass a tuned field, so {'BLOCK_M': 16} alone could never launch scale_2d_kernel."""
    with pytest.raises(SpaceError, match=r"set 'BLOCK_N' and others do not \(e.g. \{'BLOCK_M': 16\}\)"):
        autotune(space=[{"BLOCK_M": 8, "BLOCK_N": 8}, {"BLOCK_M": 16}], key=["M"])(scale_2d_kernel)
    lazy = CartesianSpace(BLOCK_M=range(1, 10**4), BLOCK_N=range(1, 10**3)) + FixedSpace([{"BLOCK_M": 16}])
    with pytest.raises(SpaceError, match="set 'BLOCK_N' and others do not; BLOCK_N has no default"):
        autotune(space=lazy, key=["M"], tuning={"strategy": "random"})(scale_2d_kernel)
    # every config sets both, whatever the parts: accepted
    autotune(
        space=CartesianSpace(BLOCK_M=(8,), BLOCK_N=(8, 16)) + FixedSpace([{"BLOCK_M": 16, "BLOCK_N": 4}]), key=["M"]
    )(scale_2d_kernel)


def test_empty_space_and_where_that_empties_it():
    with pytest.raises(SpaceError, match="no values"):
        deco(space={"BLOCK": ()})
    with pytest.raises(SpaceError, match="where"):
        deco(space=CartesianSpace(BLOCK=(32, 64)).where("$BLOCK > 1000"))


def test_static_option_also_a_space_field_says_pick_one():
    with pytest.raises(OptionError, match="pick one"):
        deco(space=[{"BLOCK": 32}, {"BLOCK": 64, "num_warps": 8}], num_warps=4)


def test_unknown_static_option():
    with pytest.raises(OptionError, match="compile option"):
        deco(BLOCK=32)


def test_unknown_dollar_name_in_grid_lists_valid_fields():
    with pytest.raises(ExpressionError, match="BLOCK"):
        deco(grid="(cdiv(n, $BLOCKK),)")


def test_unknown_argument_in_grid():
    with pytest.raises(ExpressionError, match="N"):
        deco(grid="(cdiv(N, $BLOCK),)")


def test_unknown_key_argument():
    with pytest.raises(ExpressionError, match="size"):
        deco(key=["size"])


def test_statement_in_expression_rejected():
    with pytest.raises(ExpressionError):
        deco(grid="(lambda: 1)()")


def test_derive_must_name_a_constexpr():
    with pytest.raises(SpaceError, match="constexpr"):
        deco(space={"num_warps": (4,)}, derive={"n": "2"})


def test_restore_value_must_name_arguments():
    with pytest.raises(OptionError, match="acc"):
        deco(restore_value=["acc"])


def test_bad_tuning_options():
    with pytest.raises(OptionError, match="reps"):
        deco(tuning={"reps": 0})
    with pytest.raises(OptionError, match="preset"):
        deco(tuning="quick")
    with pytest.raises(OptionError, match="bogus"):
        deco(tuning={"bogus": 1})


def test_not_a_triton_kernel():
    with pytest.raises(AutotuneError, match="triton.jit"):
        autotune(space={"BLOCK": (32,)})(lambda x: x)


def test_value_not_json_serialisable():
    with pytest.raises(SpaceError, match="JSON"):
        deco(space={"BLOCK": (object(),)})


# --- #12 item 6: empty spaces and "did you mean" wherever a name is checked -------------------------------------


def test_empty_dict_space_is_refused_at_decoration():
    with pytest.raises(SpaceError, match="no axes"):
        autotune(space={})


def test_misspelt_decorator_argument_suggests_the_right_one():
    with pytest.raises(OptionError, match="Did you mean 'restore_value'"):
        autotune(space={"BLOCK": [32]}, restore_values=["x"])(add_kernel)
    with pytest.raises(OptionError, match="Did you mean 'out'"):
        autotune(space={"BLOCK": [32]}, reset_to_zero=["Out"])(add_kernel)


def test_wrong_case_argument_name_in_grid_or_key_suggests_the_argument():
    with pytest.raises(ExpressionError, match="unknown name 'N'.*Did you mean 'n'"):
        autotune(space={"BLOCK": [32]}, grid="(cdiv(N, $BLOCK),)")(add_kernel)
    with pytest.raises(ExpressionError, match="unknown name 'N'.*Did you mean 'n'"):
        autotune(space={"BLOCK": [32]}, key=["N"], grid="(cdiv(n, $BLOCK),)")(add_kernel)


# --- arguments whose mistakes used to fail every config at the first call (blaming the configs) ----------------


def test_verify_setup_and_do_bench_must_be_callables():
    with pytest.raises(OptionError, match=r"verify= on add_kernel must be a callable.*Reference; got int"):
        deco(verify=3)
    with pytest.raises(OptionError, match=r"setup= on add_kernel must be a callable; got str"):
        deco(setup="reset")
    with pytest.raises(OptionError, match=r"do_bench= on add_kernel must be a callable"):
        deco(do_bench=[1])
    deco(verify=lambda **args: True, setup=lambda **args: None)  # callables are accepted


def test_a_reference_s_outputs_must_be_arguments():
    with pytest.raises(OptionError, match=r"\['otu'\] are not arguments of the kernel.*Did you mean 'out'"):
        deco(verify=Reference(lambda x, y, **_: x + y, outputs=("otu",)))
    deco(verify=Reference(lambda x, y, **_: x + y, outputs=("out",)))


def test_a_hook_that_cannot_take_the_call_s_arguments_by_name_is_refused_naming_the_fix():
    with pytest.raises(
        OptionError,
        match=r"verify= on add_kernel is called with the call's arguments by name "
        r"\(x, y, out, n\), but its signature \(out\) does not take \['x', 'y', 'n'\]"
        r": .* e.g. def check\(out, \*\*_\)",
    ):

        def check(out):
            return True

        deco(verify=check)
    with pytest.raises(OptionError, match=r"setup= on add_kernel .* needs \['tolerance'\], which no call passes"):
        deco(setup=lambda tolerance, **_: None)
    with pytest.raises(
        OptionError,
        match=r"verify= on add_kernel .*\(x, y\) does not take \['out', 'n'\].*"
        r"e.g. lambda x, y, \*\*_: \.\.\.",
    ):
        deco(verify=Reference(lambda x, y: x + y, outputs=("out",)))
    with pytest.raises(OptionError, match=r"needs \['BLOCK'\].*come from the space, derive= or triton.heuristics"):
        deco(verify=lambda out, BLOCK, **_: True)  # a config's value is not an argument of the call


def test_a_hook_the_signature_check_accepts_is_called_with_exactly_the_names_it_checked():
    import torch

    seen = []

    def setup(x, y, out, n):
        seen.append((x is xs, n))

    def check(out, x, y):
        return bool(torch.allclose(out, x + y))

    @functools.wraps(check)
    def adapted(**named):  # an adapter is judged by its own signature
        return check(named["out"], named["x"], named["y"])

    tuned = deco(setup=setup, verify=adapted, grid="(cdiv(n, $BLOCK),)", tuning={"isolate": "off"})
    xs, ys, out = torch.randn(50), torch.randn(50), torch.empty(50)
    tuned(xs, ys, out, 50, num_warps=2)  # a launch option is the launch's, not the hooks'
    torch.testing.assert_close(out, xs + ys)
    assert seen and all(s == (True, 50) for s in seen)
    assert tuned.record().trials and all(t.ok for t in tuned.record().trials)


def test_a_key_on_a_tuned_field_is_refused_naming_the_fix():
    with pytest.raises(OptionError, match=r"reads \['BLOCK'\], which the search space .* key on arguments the call"):
        deco(key=["n", "BLOCK"])
    with pytest.raises(OptionError, match=r"reads \['BLOCK'\]"):
        deco(key=["n // BLOCK"])  # an expression reading it, too


def test_a_fallback_must_give_every_field_without_a_default():
    with pytest.raises(SpaceError, match=r"lacks the space's fields \['BLOCK'\]; give a value for each"):
        deco(space={"BLOCK": (32, 64), "num_warps": (2, 4)}, fallback={"num_warps": 4})
    deco(space={"BLOCK": (32, 64), "num_warps": (2, 4)}, fallback={"BLOCK": 32})  # num_warps has Triton's default


@pytest.mark.parametrize(
    "triton_version, numpy_version, warned",
    [("3.6.0", "2.4.1", True), ("3.6.0", "2.3.5", False), ("3.7.0", "2.4.1", False), ("3.9.0", "3.0.0", False)],
)
def test_triton_36s_interpreter_with_numpy_24_is_named_once_at_the_decorator_line(
    monkeypatch, triton_version, numpy_version, warned
):
    """Triton 3.6's interpreter calls int() on one-element arrays, which NumPy 2.4 refuses: every config of a
    kernel looping to a computed bound would fail, blamed on nothing. The pairing is named when decorating."""
    import warnings

    import numpy
    import triton

    from autotune.kernel import identity as kernel_ref

    monkeypatch.setattr(triton, "__version__", triton_version)
    monkeypatch.setattr(numpy, "__version__", numpy_version)
    monkeypatch.setattr(kernel_ref, "_INTERPRETER_CHECKED", __import__("threading").Event())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        deco()
        deco()
    said = [w for w in caught if "numpy<2.4" in str(w.message)]
    assert len(said) == (1 if warned else 0)
    assert all(w.filename == __file__ and w.category is RuntimeWarning for w in said)


@pytest.mark.parametrize("name", ["trial_timeout_s", "compile_timeout_s", "max_seconds", "lock_timeout_s"])
@pytest.mark.parametrize("value", [float("inf"), 1e300, 86400.5])
def test_an_infinite_or_absurd_timeout_is_refused_naming_the_field_and_the_most(name, value):
    """inf / 1e300 seconds were accepted and overflowed the waits at the first call (OverflowError)."""
    from autotune import Tuning

    with pytest.raises(OptionError, match=f"{name}.*the most is 86400 s"):
        deco(tuning={name: value, "isolate": "process"})
    assert getattr(Tuning(**{name: 86400}), name) == 86400


def test_a_timeout_nothing_would_apply_is_refused_naming_the_fix(monkeypatch):
    """trial_timeout_s needs an isolated trial; an in-process compile_timeout_s needs a compile thread to abandon.
    Accepted before, a hanging config then hung the call."""
    with pytest.raises(OptionError, match="trial_timeout_s=2.*isolate='process'"):
        deco(tuning={"isolate": "off", "trial_timeout_s": 2})
    with pytest.raises(OptionError, match="compile_timeout_s=2.*compile_workers>=1"):
        deco(tuning={"isolate": "off", "compile_timeout_s": 2, "compile_workers": 0})
    deco(tuning={"isolate": "off", "compile_timeout_s": 2, "compile_workers": 1})  # a thread to abandon
    deco(tuning={"isolate": "process", "trial_timeout_s": 2, "compile_timeout_s": 2, "compile_workers": 0})
    monkeypatch.setenv("AUTOTUNE_ISOLATE", "off")  # a process-wide switch warns, never breaks an import
    with pytest.warns(UserWarning, match="trial_timeout_s=2.*ignored"):
        deco(tuning={"trial_timeout_s": 2})


def test_grid_or_derive_reading_a_tuned_field_without_dollar_is_refused_naming_the_fix():
    """BLOCK is a kernel parameter too, so a bare `BLOCK` parsed as a call argument that no call can pass."""
    with pytest.raises(
        ExpressionError,
        match=r"grid expression .*reads 'BLOCK'.*search space sets it.*"
        r"\(write \$BLOCK\)",
    ):
        deco(grid="(cdiv(n, BLOCK),)")
    with pytest.raises(ExpressionError, match=r"grid\[0\] expression .*\(write \$BLOCK\)"):
        deco(grid=("cdiv(n, BLOCK)",))

    import triton
    import triton.language as tl

    @triton.jit
    def halves(x, out, n, BLOCK: tl.constexpr, HALF: tl.constexpr, QUARTER: tl.constexpr):
        pass

    with pytest.raises(ExpressionError, match=r"derive\['HALF'\] expression 'BLOCK // 2'.*\(write \$BLOCK\)"):
        autotune(
            space={"BLOCK": [32, 64]},
            key=["n"],
            grid="(cdiv(n, $BLOCK),)",
            derive={"HALF": "BLOCK // 2", "QUARTER": "$BLOCK // 4"},
        )(halves)
    with pytest.raises(ExpressionError, match=r"derive\['HALF'\] expression 'QUARTER \* 2'.*derive= sets it"):
        autotune(
            space={"BLOCK": [32, 64]},
            key=["n"],
            grid="(cdiv(n, $BLOCK),)",
            derive={"HALF": "QUARTER * 2", "QUARTER": "$BLOCK // 4"},
        )(halves)
    autotune(
        space={"BLOCK": [32, 64]},
        key=["n"],
        grid="(cdiv(n, $HALF),)",
        derive={"QUARTER": "$BLOCK // 4", "HALF": "$QUARTER * 2"},
    )(halves)


def test_a_key_callable_that_cannot_take_every_argument_by_name_is_refused_naming_the_fix():
    with pytest.raises(
        OptionError,
        match=r"key= on add_kernel is called with the call's arguments by name "
        r"\(x, y, out, n\), but its signature \(n\) does not take "
        r"\['x', 'y', 'out'\].*add \*\*_ for the rest, e.g. lambda n, \*\*_",
    ):
        deco(key=lambda n: n // 64, grid="(cdiv(n, $BLOCK),)")
    with pytest.raises(OptionError, match=r"key= on add_kernel .* needs \['BLOCK'\].*come from the space"):
        deco(key=lambda BLOCK, **_: BLOCK, grid="(cdiv(n, $BLOCK),)")
    deco(key=lambda n, **_: n // 64, grid="(cdiv(n, $BLOCK),)")


def test_a_bad_fallback_is_reported_as_fallback_s_not_as_the_search_space_s():
    with pytest.raises(
        SpaceError,
        match=r"^fallback=\{'BLOCK': 64, 'BLOKC': 1\} on add_kernel: fallback= field "
        r"'BLOKC' is neither.*Did you mean 'BLOCK'",
    ) as info:
        deco(fallback={"BLOCK": 64, "BLOKC": 1})
    assert "space" not in str(info.value)
    with pytest.raises(
        OptionError,
        match=r"^fallback=.* on add_kernel: 'num_warps' is both a static option and a "
        r"fallback= field.*remove the 'num_warps' field from fallback=$",
    ):
        deco(fallback={"BLOCK": 64, "num_warps": 8}, num_warps=4)
    with pytest.raises(SpaceError, match=r"^fallback=\{'BLOCK': nan\} on add_kernel: fallback= field 'BLOCK' = nan"):
        deco(fallback={"BLOCK": float("nan")})


@pytest.mark.parametrize(
    "space, match",
    [
        ({"BLOCK": (32,), "num_warps": (2, 3)}, r"num_warps=3: num_warps must be a power of two"),
        ({"BLOCK": (32,), "num_warps": (True,)}, r"num_warps=True: num_warps must be a power of two"),
        ({"BLOCK": (32,), "num_stages": (-1,)}, r"num_stages=-1: num_stages must be an int >= 0"),
        ({"BLOCK": (32,), "num_ctas": (0,)}, r"num_ctas=0: num_ctas must be an int >= 1"),
        ([{"BLOCK": 32, "num_warps": 4}, {"BLOCK": 64, "num_warps": 12}], r"num_warps=12"),
        (CartesianSpace(BLOCK=range(1, 10**6), num_warps=(4, 6)), r"num_warps=6"),  # lazy: its axes are read
    ],
    ids=["not a power of two", "bool", "negative stages", "no ctas", "listed configs", "lazy space"],
)
def test_a_compile_option_value_a_gpu_would_refuse_is_a_space_error_at_decoration(space, match):
    """The interpreter ignores num_warps and friends: without this check a space developed on a CPU fails config
    by config on the GPU."""
    with pytest.raises(SpaceError, match=match):
        deco(space=space, grid="(1,)")


def test_a_static_compile_option_of_the_wrong_form_is_an_option_error():
    with pytest.raises(OptionError, match=r"static option num_warps='four' of add_kernel: num_warps must be"):
        deco(num_warps="four")
    with pytest.raises(OptionError, match=r"maxnreg=0 .*maxnreg must be None or an int >= 1"):
        deco(maxnreg=0)
    deco(num_warps=8, num_stages=0, num_ctas=1, maxnreg=None)  # what a GPU compiles is accepted


def test_a_tuned_field_that_a_heuristic_under_autotune_overrides_is_warned_unless_the_heuristic_reads_it():
    """triton.heuristics under @autotune runs after the config is chosen: one that sets BLOCK without reading it
    launches every config alike, and the tuning would store a winner that never ran. One that clamps the config's
    value reads it, and is left alone."""
    import warnings

    import triton

    under = triton.heuristics({"BLOCK": lambda args: 64})(add_kernel)
    with pytest.warns(
        UserWarning,
        match=r"'BLOCK' of add_kernel is set both by its search space and by a "
        r"triton.heuristics.*Remove BLOCK from its search space",
    ) as caught:
        autotune(space={"BLOCK": (16, 32)}, key=["n"])(under)
    assert caught[0].filename == __file__  # the user's line
    with pytest.warns(UserWarning, match=r"set both by its derive= and by a triton.heuristics.*from its derive="):
        autotune(space={"num_warps": (1, 2)}, key=["n"], derive={"BLOCK": "32"})(under)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for reads in (
            lambda args: min(args["BLOCK"], 32),
            lambda args: min(args[k] for k in ("BLOCK", "n")),
            (lambda name: lambda args: args[name])("BLOCK"),
            functools.partial(_field_of, name="BLOCK"),
        ):
            clamped = triton.heuristics({"BLOCK": reads})(add_kernel)  # reads the config's BLOCK: no warning
            autotune(space={"BLOCK": (16, 64)}, key=["n"])(clamped)
        autotune(space={"num_warps": (1, 2)}, key=["n"])(under)  # the heuristic alone sets BLOCK
    with pytest.warns(UserWarning, match="set both by its search space"):  # reads another field only
        autotune(space={"BLOCK": (16, 64)}, key=["n"])(triton.heuristics({"BLOCK": lambda a: a["n"] // 2})(add_kernel))


def _field_of(args, name):
    return args[name]


def test_autotune_over_an_already_autotuned_kernel_is_refused():
    """The inner autotuner sets its fields at each launch: the outer one would time identical launches (and, with
    a $BLOCK grid, said to write BLOCK without $, then that BLOCK was missing)."""
    import triton

    from autotune import compat

    inner_kinds = {
        "autotune.decorator.autotuned.Autotuned": autotune(space={"BLOCK": (16, 32)}, key=["n"])(add_kernel),
        "triton.runtime.autotuner.Autotuner": triton.autotune(configs=[triton.Config({"BLOCK": 16})], key=["n"])(
            add_kernel
        ),
        "autotune.compat.Autotuner": compat.autotune(configs=[triton.Config({"BLOCK": 16})], key=["n"])(add_kernel),
    }
    for kind, inner in inner_kinds.items():
        for outer in (inner, triton.heuristics({"UNUSED": lambda args: 0})(inner)):
            with pytest.raises(OptionError, match=rf"add_kernel is already autotuned \({kind} under this one\)"):
                autotune(space={"num_warps": (1, 2)}, key=["n"], grid="(1,)")(outer)
    with pytest.raises(OptionError, match="already autotuned"):
        compat.autotune(configs=[triton.Config({}, num_warps=2)], key=["n"])(inner_kinds["autotune.compat.Autotuner"])


def test_a_where_filter_that_raises_is_named_as_the_filter_s_error():
    with pytest.raises(
        SpaceError,
        match=r"where\('1 // \(\$BLOCK - 32\) > 0'\) raised ZeroDivisionError .* on "
        r"\{'BLOCK': 32\}: .*guard the part that fails with `and`",
    ) as info:
        deco(space=CartesianSpace(BLOCK=(32, 64)).where("1 // ($BLOCK - 32) > 0"))
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    deco(space=CartesianSpace(BLOCK=(32, 64)).where("$BLOCK != 32 and 64 // ($BLOCK - 32) > 0"))  # guarded
    for space in (CartesianSpace(BLOCK=(32, 64)), CartesianSpace(BLOCK=(32, 64), A=range(1000), B=range(1000))):
        with pytest.raises(
            SpaceError,
            match=r"a where\(\) filter of the search space of add_kernel raised KeyError "
            r"\('BLOK'\).*Did you mean 'BLOCK'\?",
        ):
            autotune(space=space.where(lambda c: c["BLOK"] > 8), key=["n"], tuning={"strategy": "random"})(add_kernel)
