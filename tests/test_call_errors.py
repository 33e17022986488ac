"""A mistake in the call is the caller's error, raised at once, before any config is tried (#12 item 5)."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl
from kernels_for_tests import add_kernel, count_trials

from autotune import AutotuneError, CallError, NoRecordError, autotune


def _counting_add(**options):
    tuned = autotune(
        space={"BLOCK": [16, 32]}, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning={"warmup": 0, "reps": 1}, **options
    )(add_kernel)
    return tuned, count_trials(tuned)


def test_missing_argument_is_a_type_error_before_tuning():
    tuned, launches = _counting_add()
    x = torch.ones(8)
    with pytest.raises(CallError, match=r"missing 1 required argument: 'n'"):
        tuned(x, x, torch.empty_like(x))
    assert launches == [] and tuned.cache_info()["misses"] == 0


def test_a_constexpr_the_space_does_not_set_is_missing_from_the_call_and_the_message_says_where_it_comes_from():
    tuned = autotune(space={"num_warps": [1, 2]}, key=["n"], grid="(1,)")(add_kernel)
    x = torch.ones(8)
    with pytest.raises(
        CallError,
        match=r"missing 1 required argument: 'BLOCK'.*not set by the search space, a "
        r"tl.constexpr \(BLOCK\) is passed at each call or added to the space",
    ):
        tuned(x, x, torch.empty_like(x), 8)
    tuned(x, x, out := torch.empty_like(x), 8, BLOCK=8)  # passed at the call: launches
    assert torch.equal(out, x + x)


def test_a_call_error_is_an_autotune_error_and_a_type_error():
    """`except autotune.AutotuneError` catches a bad call; code written for Triton (`except TypeError`) does too."""
    tuned, _ = _counting_add()
    x = torch.ones(8)
    with pytest.raises(CallError) as info:
        tuned(x, x, torch.empty_like(x))
    assert isinstance(info.value, AutotuneError) and isinstance(info.value, TypeError)


def test_argument_by_position_and_by_keyword_is_a_type_error_before_tuning():
    tuned, launches = _counting_add()
    x = torch.ones(8)
    with pytest.raises(CallError, match=r"multiple values for argument 'x'"):
        tuned(x, x, torch.empty_like(x), 8, x=x)
    assert launches == []


def test_tuned_field_passed_by_the_caller_is_refused_before_tuning():
    tuned, launches = _counting_add()
    x = torch.ones(8)
    with pytest.raises(AutotuneError, match="Conflicting meta-parameters: BLOCK"):
        tuned(x, x, torch.empty_like(x), 8, BLOCK=16)
    assert launches == []
    above = triton.heuristics({"BLOCK": lambda args: 64})(tuned)  # the caller passes no BLOCK: the heuristic does
    with pytest.raises(AutotuneError, match="drop BLOCK= from the call, or from a triton.heuristics above @autotune"):
        above[(1,)](x, x, torch.empty_like(x), 8)
    assert launches == []


def test_float_size_with_a_cdiv_grid_blames_the_argument_not_the_grid():
    tuned, _ = _counting_add()
    x = torch.ones(8)
    with pytest.raises(Exception) as info:
        tuned(x, x, torch.empty_like(x), 8.0)
    text = str(info.value) + str(info.value.__cause__)
    assert "pass ints" in text and "use cdiv" not in text


def test_a_float_in_the_space_read_by_the_grid_blames_the_config_not_the_call():
    tuned = autotune(
        space={"BLOCK": (16, 64.0)},
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        tuning={"compile_workers": 0, "isolate": "off"},
    )(add_kernel)
    x = torch.ones(40)
    with pytest.raises(
        AutotuneError,
        match=r"grid '\(cdiv\(n, \$BLOCK\),\)' gave \(1.0,\) for config \{'BLOCK': 64.0\}: "
        r"\$BLOCK=64.0 is a float; give the search space int values",
    ) as info:
        tuned(x, x, torch.empty_like(x), 40)
    assert "pass ints" not in str(info.value)


def test_kernel_arguments_given_by_keyword_or_by_a_heuristic_are_not_missing():
    tuned, _ = _counting_add()
    x = torch.ones(8)
    out = torch.empty_like(x)
    tuned(x=x, y=x, out=out, n=8)
    assert torch.equal(out, 2 * x)

    heur = autotune(space={"num_warps": [1, 2]}, key=["n"], grid=(1,), tuning={"warmup": 0, "reps": 1})(
        triton.heuristics({"BLOCK": lambda args: 16})(add_kernel)
    )
    out2 = torch.empty_like(x)
    heur(x, x, out2, 8)
    assert torch.equal(out2, 2 * x)


@pytest.mark.parametrize(
    "grid", [lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),), "(cdiv(n, BLOCK),)"], ids=["callable", "string"]
)
def test_the_decorators_grid_reads_the_values_of_triton_heuristics_below_it_as_a_triton_grid_does(grid):
    tuned = autotune(space={"num_warps": [1, 2]}, key=["n"], grid=grid, tuning={"warmup": 0, "reps": 1})(
        triton.heuristics({"BLOCK": lambda args: 16})(add_kernel)
    )
    for _ in range(2):  # a miss (tuned), then a memory hit
        x = torch.randn(100)
        out = torch.zeros_like(x)
        tuned(x, x, out, 100)
        assert torch.equal(out, 2 * x)  # every block covered: the grid used BLOCK=16
    assert tuned.cache_info()["tunings"] == 1


def test_a_warmup_with_dtypes_through_triton_heuristics_compiles_the_winner_or_says_tensors_are_needed():
    """KernelInterface.warmup (what triton.heuristics' .warmup is) passes dtypes as MockTensors: nothing can be
    tuned on them. Untuned, the caller is told to warm up with tensors; tuned, the winner compiles, nothing runs."""
    tuned = autotune(
        space={"BLOCK": [16, 32]},
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        tuning={"warmup": 0, "reps": 1, "isolate": "off"},
    )(add_kernel)
    launches = []
    run_trial = tuned.run_trial
    tuned.run_trial = lambda config, *args, **kwargs: launches.append(config) or run_trial(config, *args, **kwargs)
    wrapped = triton.heuristics({"n": lambda args: 100})(tuned)  # a heuristic value must be a kernel argument
    grid = lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),)  # noqa: E731
    with pytest.raises(AutotuneError, match="warmup with dtypes instead of tensors.*call add_kernel.warmup"):
        wrapped.warmup(torch.float32, torch.float32, torch.float32, grid=grid)
    assert launches == []
    x, out = torch.ones(100), torch.zeros(100)
    tuned(x, x, out, 100)
    tried = len(launches)
    wrapped.warmup(torch.float32, torch.float32, torch.float32, grid=grid)
    assert tried > 0 and len(launches) == tried and tuned.best_config is not None


def test_call_time_option_that_the_decorator_sets_statically_is_refused_not_overridden():
    tuned, launches = _counting_add(num_warps=4)
    x = torch.ones(8)
    with pytest.raises(
        AutotuneError,
        match=r"num_warps=8 passed to add_kernel, whose @autotune\(num_warps=4\).*"
        r"drop num_warps= from the call or from @autotune",
    ):
        tuned(x, x, torch.empty_like(x), 8, num_warps=8)
    assert launches == []
    out = torch.empty_like(x)
    tuned(x, x, out, 8, num_stages=1)  # an option the decorator does not set is the call's
    assert torch.equal(out, 2 * x)


def test_unknown_keyword_is_a_type_error_naming_the_closest_name_before_tuning():
    tuned, launches = _counting_add()
    x = torch.ones(8)
    with pytest.raises(CallError, match=r"unexpected keyword argument 'num_warp'.*Did you mean 'num_warps'\?"):
        tuned(x, x, torch.empty_like(x), 8, num_warp=4)
    with pytest.raises(CallError, match=r"unexpected keyword argument 'outt'.*Did you mean 'out'\?"):
        tuned(x, x, outt=torch.empty_like(x), n=8)
    assert launches == []


def test_unknown_keyword_passes_through_the_triton_autotune_drop_in_as_in_triton():
    from autotune import compat

    add = compat.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})], key=["n"])(add_kernel)
    x, out = torch.ones(8), torch.empty(8)
    add[(1,)](x, x, out, 8, not_an_argument=1)
    assert torch.equal(out, 2 * x)


def test_tuned_field_passed_by_position_is_refused_as_by_keyword_before_tuning():
    tuned, launches = _counting_add()
    x = torch.ones(8)
    with pytest.raises(AutotuneError, match="Conflicting meta-parameters: BLOCK passed by position to add_kernel"):
        tuned(x, x, torch.empty_like(x), 8, 16)
    assert launches == []


def test_asking_for_the_record_of_an_untuned_key_names_the_keys_there_are():
    """`record()` / `report()` before any tuning, or of a key not tuned: a `NoRecordError` (an AutotuneError and a
    KeyError) whose text reads as a sentence and lists the keys this kernel has."""
    tuned, _ = _counting_add()
    with pytest.raises(NoRecordError, match=r"no tuning record in this process yet: call the kernel first") as info:
        tuned.record()
    assert isinstance(info.value, AutotuneError) and isinstance(info.value, KeyError)
    assert not str(info.value).startswith(("'", '"'))  # not KeyError's quoted repr
    x = torch.ones(8)
    tuned(x, x, torch.empty_like(x), 8)
    assert tuned.record().winner in ({"BLOCK": 16}, {"BLOCK": 32})
    with pytest.raises(NoRecordError, match=r"no record for key \(9,\) in this process; the keys it has: \[\(8,\)\]"):
        tuned.report((9,))


def test_the_record_of_a_call_that_launched_untuned_says_why_there_is_none(monkeypatch):
    """Called, yet no record: the message does not tell the user to call the kernel (they did) but why it made none."""
    monkeypatch.setenv("AUTOTUNE_DISABLE", "1")
    tuned, launches = _counting_add()
    x = torch.ones(8)
    tuned(x, x, torch.empty_like(x), 8)
    with pytest.raises(
        NoRecordError,
        match=r"add_kernel's last call \(key \(8,\)\) has no tuning record: it launched "
        r"without one \(a space of one config, AUTOTUNE_DISABLE",
    ):
        tuned.record()


@triton.jit
def add_with_optional_bias(x, y, out, n, bias, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    value = tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask)
    if bias is not None:
        value += bias
    tl.store(out + offs, value, mask=mask)


def test_the_keys_listed_by_a_missing_record_may_mix_types():
    """Keys of None and of a number cannot be ordered by `<`: listing them must not turn the error into a TypeError."""
    tuned = autotune(
        space={"BLOCK": [16, 32]},
        key=["n", "bias"],
        grid="(cdiv(n, $BLOCK),)",
        tuning={"warmup": 0, "reps": 1, "isolate": "off"},
    )(add_with_optional_bias)
    x = torch.ones(8)
    tuned(x, x, torch.empty_like(x), 8, None)
    tuned(x, x, torch.empty_like(x), 8, 1.5)
    with pytest.raises(
        NoRecordError,
        match=r"no record for key \(32, None\) in this process; the keys it has: "
        r"\[\(8, 1.5\), \(8, None\)\]",
    ):
        tuned.record((32, None))


def test_a_launch_option_passed_at_the_call_is_checked_as_in_the_space():
    """num_warps=3 in a space is refused at decoration; passed at the call it was accepted, ignored by the
    interpreter and refused by a GPU compile in every config (which then took the blame)."""
    tuned, launches = _counting_add()
    x = torch.ones(8)
    with pytest.raises(
        CallError,
        match=r"num_warps=3 passed to add_kernel: num_warps must be a power of two.*fix "
        r"the call",
    ):
        tuned(x, x, torch.empty_like(x), 8, num_warps=3)
    with pytest.raises(CallError, match=r"maxnreg='a' passed to add_kernel: maxnreg must be None or an int"):
        tuned(x, x, torch.empty_like(x), 8, maxnreg="a")
    assert launches == []
    out = torch.empty_like(x)
    tuned(x, x, out, 8, num_warps=2)
    torch.testing.assert_close(out, x + x)
    out = torch.empty_like(x)
    tuned(x, x, out, 8, num_warps=None, num_stages=None)  # None: unset, as Triton reads it (a wrapper's default)
    torch.testing.assert_close(out, x + x)
