"""End-to-end tuning of real Triton kernels through the interpreter: spaces, keys, records, safety."""

from __future__ import annotations

import threading

import pytest
import torch
import triton
import triton.language as tl
from kernels_for_tests import accumulate_kernel, add_kernel, add_wrong_when_64_kernel, record_launches, scale_2d_kernel

from autotune import (
    Config,
    FixedSpace,
    NoValidConfigError,
    OptionError,
    Reference,
    TrialStatus,
    Tuning,
    autotune,
    autotune_launch,
)
from autotune.engine.compilers import FunctionCompiler

FAST = Tuning(preset="fast", reps=2, warmup=0, compile_workers=2)


def make_add(space=None, **kwargs):
    kwargs.setdefault("tuning", FAST)
    return autotune(space=space or {"BLOCK": (32, 64, 128)}, key=["n"], grid="(cdiv(n, $BLOCK),)", **kwargs)(add_kernel)


def vectors(n):
    torch.manual_seed(n)
    return torch.randn(n), torch.randn(n), torch.empty(n)


def test_cartesian_space_tunes_vector_add_and_matches_torch():
    add = make_add()
    x, y, out = vectors(300)
    add(x, y, out, 300)
    torch.testing.assert_close(out, x + y)
    record = add.record((300,))
    assert [t.config for t in record.trials] == [Config(BLOCK=b) for b in (32, 64, 128)]
    assert all(t.status is TrialStatus.OK and t.median_ms > 0 and len(t.samples_ms) >= 2 for t in record.trials)
    assert record.winner == min(record.trials, key=lambda t: t.median_ms).config
    assert add.best_config == record.winner
    assert record.dtypes == ["torch.float32"] * 3
    assert record.kernel == "add_kernel" and record.device == "interpreter"


def test_fixed_space_with_2d_tiled_kernel():
    space = FixedSpace([{"BLOCK_M": 16, "BLOCK_N": 32}, {"BLOCK_M": 32, "BLOCK_N": 16, "num_warps": 2}])
    scale = autotune(space=space, key=["M", "N"], grid="(cdiv(M, $BLOCK_M), cdiv(N, $BLOCK_N))", tuning=FAST)(
        scale_2d_kernel
    )
    x = torch.randn(37, 45)
    out = torch.empty_like(x)
    scale(x, out, 37, 45, x.stride(0))
    torch.testing.assert_close(out, 2 * x)
    record = scale.record((37, 45))
    assert {t.config for t in record.trials} == set(space)
    assert all(t.status is TrialStatus.OK for t in record.trials)


def test_same_key_does_not_retune_new_key_does_and_force_retunes():
    add = make_add()
    x, y, out = vectors(256)
    add(x, y, out, 256)
    add(x, y, out, 256)
    assert add.cache_info()["tunings"] == 1
    assert add.cache_info()["hits"] >= 1
    x2, y2, out2 = vectors(100)
    add(x2, y2, out2, 100)
    assert add.cache_info()["tunings"] == 2
    torch.testing.assert_close(out2, x2 + y2)
    forced = make_add(tuning=FAST.replace(force=True))
    forced(x, y, out, 256)  # force ignores the winner another tuning stored on disk
    forced(x, y, out, 256)  # ... but tunes once per key in this process
    assert forced.cache_info()["tunings"] == 3


def test_dtype_is_part_of_the_key():
    add = make_add()
    x, y, out = vectors(64)
    add(x, y, out, 64)
    add(x.double(), y.double(), out.double(), 64)
    assert add.cache_info()["tunings"] == 2


def test_triton_style_grid_callable_still_works():
    add = autotune(space={"BLOCK": (32, 64)}, key=["n"], tuning=FAST)(add_kernel)
    x, y, out = vectors(200)
    add[lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),)](x, y, out, 200)
    torch.testing.assert_close(out, x + y)
    with pytest.raises(Exception, match="grid"):
        add(x, y, out, 200)


def test_derive_adds_a_meta_parameter_from_the_arguments():
    add = autotune(
        space={"num_warps": (1, 2)},
        key=["n"],
        derive={"BLOCK": "next_power_of_2(n)"},
        grid="(cdiv(n, $BLOCK),)",
        tuning=FAST,
    )(add_kernel)
    x, y, out = vectors(100)
    add(x, y, out, 100)
    torch.testing.assert_close(out, x + y)


def test_a_failing_config_is_recorded_and_another_wins():
    # BLOCK=48 is not a power of two: tl.arange rejects it when the config runs.
    add = make_add({"BLOCK": (48, 64)})
    x, y, out = vectors(128)
    add(x, y, out, 128)
    torch.testing.assert_close(out, x + y)
    record = add.record()
    bad = record.trial_for(Config(BLOCK=48))
    assert bad.status is TrialStatus.RUNTIME_ERROR
    assert "arange" in bad.error.lower() or "power of 2" in bad.error
    assert record.winner == Config(BLOCK=64)


def test_compile_errors_are_recorded_and_skipped():
    def compile_fn(config):
        if config["BLOCK"] == 32:
            raise RuntimeError("ptxas: out of registers")
        return None

    add = make_add()
    add.compiler_factory = lambda tuned, prepare: FunctionCompiler(compile_fn)
    x, y, out = vectors(128)
    add(x, y, out, 128)
    trial = add.record().trial_for(Config(BLOCK=32))
    assert trial.status is TrialStatus.COMPILE_ERROR and "out of registers" in trial.error
    assert add.best_config != Config(BLOCK=32)


def test_all_configs_failing_raises_no_valid_config_error_naming_each():
    add = make_add({"BLOCK": (48, 96)})
    x, y, out = vectors(64)
    with pytest.raises(NoValidConfigError) as info:
        add(x, y, out, 64)
    message = str(info.value)
    assert "{'BLOCK': 48}" in message and "{'BLOCK': 96}" in message and "runtime_error" in message
    assert len(info.value.trials) == 2
    assert add.cache_info()["entries"] == 0


def test_in_place_kernel_with_restore_value_equals_one_untuned_launch():
    tuned = autotune(
        space={"BLOCK": (16, 32, 64)},
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        restore_value=["acc"],
        tuning=Tuning(preset="fast", reps=3, warmup=1),
    )(accumulate_kernel)
    x = torch.randn(100)
    acc = torch.randn(100)
    expected = acc.clone()
    accumulate_kernel[(triton.cdiv(100, 32),)](x, expected, 100, BLOCK=32)
    tuned(x, acc, 100)
    assert torch.equal(acc, expected)


def test_in_place_kernel_without_restore_value_is_clobbered():
    # The control for the test above: without restore_value every trial adds again (in this process: a worker
    # would tune on copies of the arguments, which leaves the caller's alone).
    tuned = autotune(
        space={"BLOCK": (16, 32)},
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        tuning=Tuning(preset="fast", reps=2, warmup=0, isolate="off"),
    )(accumulate_kernel)
    x = torch.ones(50)
    acc = torch.zeros(50)
    tuned(x, acc, 50)
    assert acc[0].item() > 1


def test_reset_to_zero_zeroes_before_each_trial_and_final_launch_sees_input():
    tuned = autotune(
        space={"BLOCK": (16, 32)},
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        reset_to_zero=["acc"],
        tuning=Tuning(preset="fast", reps=2, warmup=1),
    )(accumulate_kernel)
    x = torch.ones(40)
    acc = torch.zeros(40)
    seen = []
    tuned.setup = lambda **args: seen.append(args["acc"].abs().sum().item())
    tuned(x, acc, 40)
    assert seen and all(s == 0 for s in seen)
    assert torch.equal(acc, torch.ones(40))


def test_verify_with_a_reference_rejects_the_wrong_config():
    tuned = autotune(
        space={"BLOCK": (32, 64, 128)},
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        tuning=FAST,
        verify=Reference(lambda x, y, **_: x + y, outputs=("out",), atol=1e-6),
    )(add_wrong_when_64_kernel)
    x, y, out = vectors(150)
    with pytest.warns(UserWarning, match="failed verification"):
        tuned(x, y, out, 150)
    record = tuned.record()
    assert record.trial_for(Config(BLOCK=64)).status is TrialStatus.VERIFY_FAILED
    assert "out" in record.trial_for(Config(BLOCK=64)).error
    assert record.winner != Config(BLOCK=64)
    torch.testing.assert_close(out, x + y)


@pytest.mark.parametrize(
    "got, want",
    [
        (torch.tensor([16777217], dtype=torch.int64), torch.tensor([16777216], dtype=torch.int64)),  # float32: equal
        (torch.tensor([1.0 + 1e-9], dtype=torch.float64), torch.tensor([1.0], dtype=torch.float64)),
    ],
    ids=["int64", "float64"],
)
def test_a_reference_compares_wide_outputs_without_rounding_them_to_float32(got, want):
    import numpy as np

    from autotune.errors import VerificationError

    exact = Reference(lambda **_: want, outputs=("out",), atol=np.float32(0), rtol=0)  # numpy tolerances are numbers
    with pytest.raises(VerificationError, match="'out' differs from the reference"):
        exact.check({"out": got}, {"out": want})
    exact.check({"out": want.clone()}, {"out": want})
    loose = Reference(lambda **_: want, outputs=("out",), atol=1e-3, rtol=0)  # narrow floats: float32, as before
    loose.check({"out": torch.tensor([1.0004], dtype=torch.float16)}, {"out": torch.tensor([1.0], dtype=torch.float16)})


def writes_in_place(x, y, out, **_):
    out.copy_(x + y)  # as the kernel does: returns None


@pytest.mark.parametrize(
    "reference, message",
    [
        (
            writes_in_place,
            r"returned NoneType for output 'out', not a tensor: the reference returns the expected values",
        ),
        (lambda x, y, **_: {"result": x + y}, r"returned a dict without 'out': key it by the output names"),
        (lambda x, y, **_: (x + y, x), r"returned 2 values for outputs=\('out',\)"),
        (lambda x, y, **_: (x + y)[:5], r"returned shape \(5,\) for output 'out', whose argument has shape \(100,\)"),
    ],
)
def test_a_reference_that_returns_no_expected_tensor_is_named_before_any_config_is_judged(reference, message):
    """The usual slip, a reference written like the kernel (in place, returning None), is the Reference's error,
    not an AttributeError from inside autotune nor a verification failure blamed on every config."""
    tuned = autotune(
        space={"BLOCK": (32, 64)},
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        tuning=FAST,
        verify=Reference(reference, outputs=("out",)),
    )(add_kernel)
    x, y, out = vectors(100)
    with pytest.raises(OptionError, match=message):
        tuned(x, y, out, 100)


def test_verify_with_a_callable():
    calls = []

    def check(x, y, out, **_):
        calls.append(1)
        return torch.allclose(out, x + y)

    tuned = autotune(space={"BLOCK": (64, 128)}, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=FAST, verify=check)(
        add_wrong_when_64_kernel
    )
    x, y, out = vectors(90)
    with pytest.warns(UserWarning):
        tuned(x, y, out, 90)
    assert len(calls) == 2
    assert tuned.best_config == Config(BLOCK=128)


def test_static_compile_options_reach_every_config():
    # in-process, so the launches pass through add.fn.run here (a worker rebuilds the kernel from the same
    # @autotune arguments, num_warps included)
    add = make_add(
        {"BLOCK": (32, 64)},
        num_warps=2,
        tuning=Tuning(preset="fast", reps=2, warmup=0, compile_workers=2, isolate="off"),
    )
    launches = record_launches(add, "BLOCK", "num_warps")
    x, y, out = vectors(64)
    add(x, y, out, 64)
    torch.testing.assert_close(out, x + y)
    assert {block for block, _ in launches} == {32, 64}  # both configs were measured ...
    assert {warps for _, warps in launches} == {2}  # ... each with the decorator's num_warps


def test_changing_a_static_compile_option_retunes_instead_of_reusing_the_winner():
    """A winner timed under @autotune(num_warps=2) says nothing of num_warps=8: the entry is filed under the
    static options too, so the second decoration misses the disk and tunes; the same options hit it."""
    tuning = Tuning(preset="fast", reps=2, warmup=0, compile_workers=0, isolate="off")
    x, y, out = vectors(64)
    make_add({"BLOCK": (32, 64)}, num_warps=2, tuning=tuning)(x, y, out, 64)
    from autotune import stats

    def counted() -> tuple:
        counters = stats()["add_kernel"]
        return counters["tunings"], counters["disk_hits"]

    before = counted()
    other = make_add({"BLOCK": (32, 64)}, num_warps=8, tuning=tuning)
    other(x, y, out, 64)
    assert counted() == (before[0] + 1, before[1])  # tuned, not read from the num_warps=2 entry
    same = make_add({"BLOCK": (32, 64)}, num_warps=8, tuning=tuning)
    same(x, y, out, 64)
    assert counted() == (before[0] + 1, before[1] + 1)  # the same options: the disk entry
    plain = autotune(space={"BLOCK": (32, 64)}, key=["n"], tuning=tuning)(add_kernel)
    assert plain.cache.space_checksum == plain.space.checksum()  # no static options, grid= or derive=: the space's


def test_conflicting_meta_parameter_at_call_time():
    add = make_add()
    x, y, out = vectors(64)
    with pytest.raises(Exception, match="Conflicting meta-parameters: BLOCK"):
        add(x, y, out, 64, BLOCK=32)


def test_seed_shuffles_trial_order_but_keeps_every_trial():
    order = []
    add = make_add({"BLOCK": (16, 32, 64, 128)}, tuning=FAST.replace(seed=3, compile_workers=0))
    add.setup = None
    add.compiler_factory = lambda tuned, prepare: FunctionCompiler(lambda c: order.append(c["BLOCK"]))
    x, y, out = vectors(64)
    add(x, y, out, 64)
    assert sorted(order) == [16, 32, 64, 128] and order != [16, 32, 64, 128]
    assert [t.config["BLOCK"] for t in add.record().trials] == [16, 32, 64, 128]


def test_threads_on_one_key_share_one_tuning():
    add = make_add()
    x, y = torch.randn(128), torch.randn(128)
    outs = [torch.empty(128) for _ in range(4)]
    errors = []
    barrier = threading.Barrier(len(outs))  # all four call while the first one's tuning is under way

    def call(out):
        try:
            barrier.wait()
            add(x, y, out, 128)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(o,)) for o in outs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert add.cache_info()["tunings"] == 1
    for out in outs:
        torch.testing.assert_close(out, x + y)


def test_autotune_launch_functional_form():
    x, y, out = vectors(96)
    result = autotune_launch(
        add_kernel, space={"BLOCK": (32, 64)}, args=(x, y, out, 96), key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=FAST
    )
    torch.testing.assert_close(out, x + y)
    assert result.cache_hit is False and result.config in (Config(BLOCK=32), Config(BLOCK=64))
    assert result.grid == (triton.cdiv(96, result.config["BLOCK"]),)
    assert len(result.record.trials) == 2
    again = autotune_launch(
        add_kernel, space={"BLOCK": (32, 64)}, args=(x, y, out, 96), key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=FAST
    )
    assert again.cache_hit is True and again.config == result.config


def test_autotune_launch_with_call_site_lambdas_reuses_one_wrapper_and_hits_memory():
    """A grid=/key=/verify= lambda written at the call site is a new object at every call: the registry must not
    key on its address (a new wrapper, and a miss of the memory tier, per call)."""
    from autotune.decorator import functional

    x, y, out = vectors(100)
    n = 100
    before = len(functional._launch_registry)
    results = []
    for _ in range(3):
        out.zero_()
        results.append(
            autotune_launch(
                add_kernel,
                space={"BLOCK": (32, 64)},
                args=(x, y, out, n),
                grid=lambda meta: (triton.cdiv(n, meta["BLOCK"]),),
                key=lambda n, **_: n // 64,
                verify=lambda out, x, y, **_: bool(torch.allclose(out, x + y)),
                tuning=FAST,
            )
        )
        torch.testing.assert_close(out, x + y)
    assert len(functional._launch_registry) == before + 1
    assert [r.cache_hit for r in results] == [False, True, True]
    assert results[-1].grid == (triton.cdiv(n, results[-1].config["BLOCK"]),)


def test_autotune_launch_with_a_call_site_list_of_triton_configs_reuses_one_wrapper():
    """`triton.Config` has no repr of its own (its text holds its address): a list made at each call is still one
    space, so one wrapper and memory hits, and other configs another wrapper."""
    from autotune.decorator import functional

    x, y, out = vectors(100)
    before = len(functional._launch_registry)

    def launch(blocks):
        space = [triton.Config({"BLOCK": b}) for b in blocks]
        return autotune_launch(
            add_kernel, space=space, args=(x, y, out, 100), key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=FAST
        )

    results = [launch((32, 64)) for _ in range(3)]
    assert len(functional._launch_registry) == before + 1
    assert [r.cache_hit for r in results] == [False, True, True]
    launch((32, 128))
    assert len(functional._launch_registry) == before + 2


def _outputs_match(out, x, y, atol, **_):
    return bool(torch.allclose(out, x + y, atol=atol))


def test_autotune_launch_with_a_call_site_partial_reuses_one_wrapper():
    """A `functools.partial` made at each call is identified by its function and arguments, not its address."""
    import functools

    from autotune.decorator import functional

    x, y, out = vectors(100)
    before = len(functional._launch_registry)
    results = [
        autotune_launch(
            add_kernel,
            space={"BLOCK": (32, 64)},
            args=(x, y, out, 100),
            key=["n"],
            grid="(cdiv(n, $BLOCK),)",
            verify=functools.partial(_outputs_match, atol=1e-6),
            tuning=FAST,
        )
        for _ in range(3)
    ]
    assert len(functional._launch_registry) == before + 1
    assert [r.cache_hit for r in results] == [False, True, True]
    other = autotune_launch(
        add_kernel,
        space={"BLOCK": (32, 64)},
        args=(x, y, out, 100),
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        verify=functools.partial(_outputs_match, atol=1e-3),
        tuning=FAST,
    )
    assert len(functional._launch_registry) == before + 2  # other arguments: another wrapper
    assert other.cache_hit is True  # (the same kernel, space and key: the disk entry)


def test_autotune_launch_refuses_a_call_site_function_capturing_a_per_call_object():
    x, y, out = vectors(40)
    expected = x + y
    with pytest.raises(OptionError, match=r"captures expected = Tensor.*read the value from the call's arguments"):
        autotune_launch(
            add_kernel,
            space={"BLOCK": (32, 64)},
            args=(x, y, out, 40),
            key=["n"],
            grid="(cdiv(n, $BLOCK),)",
            verify=lambda out, **_: bool(torch.equal(out, expected)),
            tuning=FAST,
        )


def test_single_config_space_is_launched_without_measuring():
    add = make_add({"BLOCK": (64,)})
    x, y, out = vectors(70)
    add(x, y, out, 70)
    torch.testing.assert_close(out, x + y)
    assert add.record().trials[0].status is TrialStatus.SKIPPED


def test_prune_skips_configs_and_records_them():
    add = make_add({"BLOCK": (16, 32, 64)}, prune=lambda configs, args: [c for c in configs if c["BLOCK"] >= 32])
    x, y, out = vectors(64)
    add(x, y, out, 64)
    record = add.record()
    assert record.trial_for(Config(BLOCK=16)).status is TrialStatus.SKIPPED
    assert record.winner["BLOCK"] >= 32


def test_verify_catches_a_config_that_leaves_part_of_the_output_unwritten():
    # `n // $BLOCK` instead of cdiv: BLOCK=64 on n=96 never writes the tail. Without the sentinel fill, the
    # previous trial's correct output would still be there and the broken config would pass.
    tuned = autotune(
        space=FixedSpace([{"BLOCK": 32}, {"BLOCK": 64}]),
        key=["n"],
        grid="(n // $BLOCK,)",
        tuning=FAST.replace(compile_workers=0),
        verify=Reference(lambda x, y, **_: x + y, outputs=("out",)),
    )(add_kernel)
    x, y, out = vectors(96)
    with pytest.warns(UserWarning, match="failed verification"):
        tuned(x, y, out, 96)
    assert tuned.record().trial_for(Config(BLOCK=64)).status is TrialStatus.VERIFY_FAILED
    assert tuned.best_config == Config(BLOCK=32)
    torch.testing.assert_close(out, x + y)


def test_compile_seconds_are_the_compile_itself_not_the_queue():
    """One compile worker: the configs compile one after another, each queued while those before it compiled.
    A compile_s counted from the queue would be at least its own compile plus the compiles it waited for (they ran
    between its submission and its start), which is the bound it must stay under; none is needed for the first."""
    import time

    spans: dict = {}  # BLOCK -> (start, end) of its compile, as the compile itself saw them

    def compile_fn(config):
        started = time.perf_counter()
        time.sleep(0.2)
        spans[config["BLOCK"]] = (started, time.perf_counter())

    add = make_add({"BLOCK": (16, 32, 64, 128)}, tuning=FAST.replace(compile_workers=1))
    add.compiler_factory = lambda tuned, prepare: FunctionCompiler(compile_fn)
    x, y, out = vectors(64)
    add(x, y, out, 64)
    waits = []
    for trial in add.record().trials:
        start, end = spans[trial.config["BLOCK"]]
        waited = sum(e - s for s, e in spans.values() if e <= start)  # the compiles it queued behind
        assert end - start <= trial.compile_s, (trial.config, trial.compile_s, spans)
        if waited >= 0.4:  # queued behind two or more: a margin of two compiles for the thread's own scheduling
            assert trial.compile_s < (end - start) + waited, (trial.config, trial.compile_s, spans)
        waits.append(waited)
    assert sorted(waits)[-1] >= 0.6  # the last one waited for the three others


def test_a_tuning_where_every_config_fails_is_counted():
    """#12 item 7: cache_info()/stats() count the miss, the failed tuning and its failed configs."""
    import autotune
    from autotune import NoValidConfigError

    @autotune.autotune(
        space={"BLOCK": [3, 5]},
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",  # arange needs powers of 2
        tuning={"warmup": 0, "reps": 1},
    )
    @triton.jit
    def bad_block_kernel(x, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)

    with pytest.raises(NoValidConfigError, match="failed with the same error.*power of 2") as info:
        bad_block_kernel(torch.zeros(16), 16)
    assert "power of 2" in str(info.value.__cause__)  # the common error itself, chained
    assert "or the search space if none of its configs can work" in str(info.value)  # here, the space is at fault
    info = bad_block_kernel.cache_info()
    assert (info["misses"], info["tunings"], info["failed_tunings"], info["failed_configs"]) == (1, 0, 1, 2)
    assert autotune.stats()["bad_block_kernel"]["failed_tunings"] == 1


def test_replace_preset_refills_the_numbers_the_user_never_set():
    """Tuning(preset="fast").replace(preset="thorough") is thorough's numbers; explicit fields are kept, also
    across several replaces, and a kernel tuned with it measures thorough's reps."""
    from autotune.options import PRESETS

    swapped = Tuning(preset="fast").replace(preset="thorough")
    assert swapped == Tuning(preset="thorough")
    assert Tuning().replace(preset="fast") == Tuning(preset="fast")
    kept = Tuning(preset="fast", reps=7).replace(warmup=0).replace(preset="thorough")
    assert (kept.reps, kept.warmup) == (7, 0)
    assert kept.max_configs == PRESETS["thorough"]["max_configs"]
    assert kept.explicit_fields() == {"reps", "warmup"}
    tuning = Tuning(preset="fast", warmup=0, compile_workers=0, refine_topk=0).replace(preset="default")
    kernel = make_add(space={"BLOCK": (32, 64)}, tuning=tuning)
    x, y, out = vectors(100)
    kernel(x, y, out, 100)
    assert {len(t.samples_ms) for t in kernel.record().trials} == {PRESETS["default"]["reps"]}


@triton.jit
def tag_kernel(out_ptr, TAG: tl.constexpr):
    tl.store(out_ptr, TAG)


def test_the_interleaved_re_measurement_alone_decides_among_the_best_few():
    """TAG=1's first pass falls in a slow spell (2.0 ms against TAG=2's 1.5 ms); in every interleaved round it is
    faster (1.0 against 1.1). The winner is TAG=1, and each refined trial's samples are its rounds: the first
    pass's samples do not outvote the paired rounds, and the record's median is still its samples' median."""
    out = torch.zeros(1, dtype=torch.int32)
    first_pass = {1: [2.0] * 10, 2: [1.5] * 10}
    rounds = {1: 1.0, 2: 1.1}
    calls: dict[int, int] = {}
    order: list[int] = []

    def do_bench(fn):
        fn()
        tag = int(out[0])
        order.append(tag)
        calls[tag] = calls.get(tag, 0) + 1
        return first_pass[tag] if calls[tag] == 1 else rounds[tag]

    tagged = autotune(
        space={"TAG": (1, 2)},
        key=None,
        grid="(1,)",
        do_bench=do_bench,
        tuning=Tuning(warmup=0, refine_topk=2, refine_reps=3, compile_workers=0, isolate="off"),
    )(tag_kernel)
    tagged(out)
    record = tagged.record(())
    assert record.winner == Config(TAG=1)
    assert order[2:] == [2, 1] * 3  # the rounds interleave, fastest by the first pass first
    by_tag = {t.config["TAG"]: t for t in record.trials}
    assert by_tag[1].median_ms == 1.0 and by_tag[2].median_ms == 1.1
    assert by_tag[1].samples_ms == [1.0] * 3 and by_tag[2].samples_ms == [1.1] * 3
    assert by_tag[1].min_ms == 1.0


def test_the_winner_comes_from_the_re_measured_few_even_when_they_all_measure_slower_there():
    """A spell that slows every round: the best two by the first pass re-measure at 3.0 and 3.1 ms, above the
    third's first-pass 2.5. The third was never compared with them side by side, so it does not win."""
    out = torch.zeros(1, dtype=torch.int32)
    first_pass = {1: [1.0] * 4, 2: [2.0] * 4, 3: [2.5] * 4}
    rounds = {1: 3.0, 2: 3.1}
    seen: dict[int, int] = {}

    def do_bench(fn):
        fn()
        tag = int(out[0])
        seen[tag] = seen.get(tag, 0) + 1
        return first_pass[tag] if seen[tag] == 1 else rounds[tag]

    tagged = autotune(
        space={"TAG": (1, 2, 3)},
        key=None,
        grid="(1,)",
        do_bench=do_bench,
        tuning=Tuning(warmup=0, refine_topk=2, refine_reps=2, compile_workers=0, isolate="off"),
    )(tag_kernel)
    tagged(out)
    assert tagged.record(()).winner == Config(TAG=1)
    assert seen == {1: 3, 2: 3, 3: 1}


def tagged_by(samples_of, **tuning):
    """tag_kernel over TAG 1..3, timed by a do_bench that reports `samples_of(tag)` for the config it ran."""
    out = torch.zeros(1, dtype=torch.int32)

    def do_bench(fn):
        fn()
        return samples_of(int(out[0]))

    tagged = autotune(
        space={"TAG": (1, 2, 3)},
        key=None,
        grid="(1,)",
        do_bench=do_bench,
        tuning=Tuning(warmup=0, compile_workers=0, isolate="off", **tuning),
    )(tag_kernel)
    return tagged, out


# TAG=1 stalls once (median 1, max 100, mean 34), TAG=2 is steady (2 throughout), TAG=3 is fast once (min 0.5,
# median 5): the median picks TAG=1, the max or the mean would pick TAG=2, the min TAG=3.
OUTLIERS = {1: [1.0, 1.0, 100.0], 2: [2.0, 2.0, 2.0], 3: [0.5, 5.0, 5.0]}


def test_the_median_of_a_configs_samples_picks_the_winner_not_their_min_max_or_mean():
    tagged, out = tagged_by(lambda tag: OUTLIERS[tag], refine_topk=0)
    tagged(out)
    record = tagged.record(())
    assert record.winner == Config(TAG=1) and int(out[0]) == 1  # chosen, and launched
    assert {t.config["TAG"]: (t.median_ms, t.min_ms) for t in record.trials} == {
        1: (1.0, 1.0),
        2: (2.0, 2.0),
        3: (5.0, 0.5),
    }


def test_the_median_of_the_interleaved_rounds_picks_the_winner_among_the_best_few():
    """The first pass cannot tell the three apart (1.0 each); in the rounds each reports the next of its OUTLIERS,
    one per round: the median of a config's rounds decides, as in the first pass."""
    calls: dict[int, int] = {}

    def samples_of(tag):
        calls[tag] = calls.get(tag, 0) + 1
        return [1.0] * 3 if calls[tag] == 1 else OUTLIERS[tag][(calls[tag] - 2) % 3]

    tagged, out = tagged_by(samples_of, refine_topk=3, refine_reps=3)
    tagged(out)
    record = tagged.record(())
    assert calls == {1: 4, 2: 4, 3: 4}  # one first pass and three rounds each
    assert record.winner == Config(TAG=1) and int(out[0]) == 1
    assert {t.config["TAG"]: t.samples_ms for t in record.trials} == OUTLIERS


def test_editing_the_grid_or_a_derive_expression_tunes_again_and_an_unchanged_one_hits_the_disk():
    """grid= and derive= decide what each config launches: a winner timed under one is not served under another
    (as a static option's change), while a kernel decorated again with the same ones finds its entry on disk."""

    def decorated(grid: str, block: str):
        space = {"num_warps": (1, 2)}
        return autotune(space=space, key=["n"], grid=grid, derive={"BLOCK": block}, tuning=FAST)(add_kernel)

    x, y, out = vectors(100)
    first = decorated("(cdiv(n, 32),)", "32")
    first(x, y, out, 100)
    assert first.cache_info()["tunings"] == 1
    again = decorated("(cdiv(n, 32),)", "32")
    again(x, y, out, 100)
    assert again.cache_info()["disk_hits"] == 1
    for edited in (decorated("(cdiv(n, 32),)", "64"), decorated("(cdiv(n, 32) + 1,)", "32")):  # derive; grid
        before = edited.cache_info()["tunings"]
        edited(x, y, out, 100)
        assert edited.cache_info()["tunings"] == before + 1
        torch.testing.assert_close(out, x + y)


@pytest.mark.parametrize("refine_topk", [0, 3])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0])
def test_a_do_bench_time_that_is_no_time_fails_that_config_and_never_wins(refine_topk, bad):
    """A NaN sorts nowhere (it won when it came first) and would make an entry no process can read back: a time
    that is not a finite number of ms >= 0 fails its config, saying do_bench= returned it."""
    tagged, out = tagged_by(lambda tag: [bad if tag == 1 else float(tag)], refine_topk=refine_topk, refine_reps=2)
    tagged(out)
    record = tagged.record(())
    assert record.winner == Config(TAG=2)
    failed = next(t for t in record.trials if t.config["TAG"] == 1)
    assert failed.status is TrialStatus.RUNTIME_ERROR and "do_bench= returned" in str(failed.error)
