"""`autotune.compat.autotune`, the drop-in for `triton.autotune`: real kernels through Triton's interpreter,
checking the behaviour Triton documents for each argument and attribute, plus the native `prune=` dict."""

from __future__ import annotations

import math
import os
import warnings
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
import triton.testing
from triton.runtime.errors import AutotunerError

from autotune import Config as NativeConfig
from autotune import TrialStatus, Tuning
from autotune import autotune as native_autotune
from autotune.compat import Autotuner, autotune
from autotune.errors import OptionError, SpaceError

FAST = Tuning(preset="fast", reps=2, warmup=0, compile_workers=2)


# ------------------------------------------------------------------------------------------------ kernels
@triton.jit
def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


@triton.jit
def inplace_kernel(x, acc, counts, n, BLOCK: tl.constexpr):
    """acc += x and counts += 1, each only when passed (None is allowed, as in Triton)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(x + offs, mask=mask)
    if acc is not None:
        tl.store(acc + offs, tl.load(acc + offs, mask=mask) + v, mask=mask)
    if counts is not None:
        tl.store(counts + offs, tl.load(counts + offs, mask=mask) + 1, mask=mask)


@triton.jit
def scale_2d_kernel(x, out, M, N, stride_m, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """out = 2 * x over a 2-D grid of BLOCK_M x BLOCK_N tiles."""
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    offs = rm[:, None] * stride_m + rn[None, :]
    tl.store(out + offs, 2 * tl.load(x + offs, mask=mask), mask=mask)


def grid_1d(meta):
    return (triton.cdiv(meta["n"], meta["BLOCK"]),)


def grid_2d(meta):
    return (triton.cdiv(meta["M"], meta["BLOCK_M"]), triton.cdiv(meta["N"], meta["BLOCK_N"]))


def vectors(n, seed=0):
    torch.manual_seed(seed + n)
    return torch.randn(n), torch.randn(n), torch.empty(n)


BLOCK_CONFIGS = [
    triton.Config({"BLOCK": 32}, num_warps=2),
    triton.Config({"BLOCK": 64}, num_warps=4),
    triton.Config({"BLOCK": 128}, num_warps=8),
]


def cache_files() -> list[Path]:
    root = Path(os.environ["AUTOTUNE_CACHE_DIR"])
    return sorted(root.rglob("*.json")) if root.exists() else []


# ------------------------------------------------------------------------------------------------ the tutorial
# Triton's tutorial 03-matrix-multiplication, verbatim but for the import of `autotune` and the config list
# cut to four of `get_cuda_autotune_config()`'s entries, the smaller tiles (the interpreter is slow).
def get_cuda_autotune_config():
    return [
        triton.Config(
            {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8}, num_stages=4, num_warps=4
        ),
        triton.Config(
            {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8}, num_stages=4, num_warps=4
        ),
        triton.Config(
            {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8}, num_stages=5, num_warps=2
        ),
        triton.Config(
            {"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8}, num_stages=5, num_warps=2
        ),
    ]


def get_autotune_config():
    return get_cuda_autotune_config()


@autotune(
    configs=get_autotune_config(),
    key=["M", "N", "K"],
)
@triton.jit
def matmul_kernel(
    # Pointers to matrices
    a_ptr,
    b_ptr,
    c_ptr,
    # Matrix dimensions
    M,
    N,
    K,
    stride_am,
    stride_ak,  #
    stride_bk,
    stride_bn,  #
    stride_cm,
    stride_cn,
    # Meta-parameters
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,  #
    GROUP_SIZE_M: tl.constexpr,  #
    ACTIVATION: tl.constexpr,  #
):
    """Kernel for computing the matmul C = A x B.
    A has shape (M, K), B has shape (K, N) and C has shape (M, N)
    """
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    tl.assume(pid_m >= 0)
    tl.assume(pid_n >= 0)
    tl.assume(stride_am > 0)
    tl.assume(stride_ak > 0)
    tl.assume(stride_bn > 0)
    tl.assume(stride_bk > 0)
    tl.assume(stride_cm > 0)
    tl.assume(stride_cn > 0)

    offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)

    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
        accumulator = tl.dot(a, b, accumulator)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    if ACTIVATION == "leaky_relu":
        accumulator = leaky_relu(accumulator)
    c = accumulator.to(tl.float16)

    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)


@triton.jit
def leaky_relu(x):
    return tl.where(x >= 0, x, 0.01 * x)


def matmul(a, b, activation=""):
    # Check constraints.
    assert a.shape[1] == b.shape[0], "Incompatible dimensions"
    assert a.is_contiguous(), "Matrix A must be contiguous"
    M, K = a.shape
    K, N = b.shape
    # Allocates output.
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    # 1D launch kernel where each block gets its own program.
    grid = lambda META: (triton.cdiv(M, META["BLOCK_SIZE_M"]) * triton.cdiv(N, META["BLOCK_SIZE_N"]),)  # noqa: E731
    matmul_kernel[grid](
        a,
        b,
        c,  #
        M,
        N,
        K,  #
        a.stride(0),
        a.stride(1),  #
        b.stride(0),
        b.stride(1),  #
        c.stride(0),
        c.stride(1),  #
        ACTIVATION=activation,  #
    )
    return c


def test_tutorial_matmul_runs_unchanged_after_the_import_swap():
    torch.manual_seed(0)
    a = torch.rand((32, 32), dtype=torch.float16) - 0.5
    b = torch.rand((32, 48), dtype=torch.float16) - 0.5
    triton_output = matmul(a, b)
    torch_output = torch.matmul(a.float(), b.float()).half()
    assert torch.allclose(triton_output, torch_output, atol=1e-2, rtol=0)
    assert isinstance(matmul_kernel, Autotuner)
    assert any(matmul_kernel.best_config is c for c in matmul_kernel.configs)
    key = (32, 48, 32, "torch.float16", "torch.float16", "torch.float16")
    assert matmul_kernel.cache == {key: matmul_kernel.best_config}
    assert set(matmul_kernel.configs_timings) == set(matmul_kernel.configs)
    record = matmul_kernel.record()
    assert all(t.status is TrialStatus.OK for t in record.trials)
    # leaky_relu through the ACTIVATION meta-parameter (not tuned, passed by the caller) on the tuned winner
    relu_out = matmul(a, b, activation="leaky_relu")
    torch.testing.assert_close(
        relu_out.float(), torch.nn.functional.leaky_relu(torch_output.float(), 0.01), atol=1e-2, rtol=1e-2
    )
    assert matmul_kernel.cache_info()["tunings"] == 1


# ------------------------------------------------------------------------------------------------ configs
def test_triton_configs_translate_with_their_compile_options():
    configs = [
        triton.Config({"BLOCK": 32}, num_warps=2, num_stages=2, num_ctas=1, maxnreg=128),
        triton.Config({"BLOCK": 64}),
    ]
    add = autotune(configs=configs, key=["n"])(add_kernel)
    assert add.tuner.configs == [
        NativeConfig(BLOCK=32, num_warps=2, num_stages=2, num_ctas=1, maxnreg=128),
        NativeConfig(BLOCK=64, num_warps=4, num_stages=3, num_ctas=1),
    ]
    x, y, out = vectors(100)
    add[grid_1d](x, y, out, 100)
    torch.testing.assert_close(out, x + y)
    assert add.best_config in configs and isinstance(add.best_config, triton.Config)


def test_no_configs_means_triton_default_config_launched_untuned():
    seen = []
    add = autotune(configs=[], key=["n"], do_bench=lambda fn, quantiles: seen.append(1) or 1.0)(add_kernel)
    x, y, out = vectors(64)
    add[(1,)](x, y, out, 64, BLOCK=64)
    torch.testing.assert_close(out, x + y)
    assert seen == [] and add.best_config.all_kwargs() == {"num_warps": 4, "num_ctas": 1, "num_stages": 3}


def test_bad_configs_and_names_fail_when_decorating():
    with pytest.raises(TypeError, match="triton.Config"):
        autotune(configs=[{"BLOCK": 32}], key=["n"])(add_kernel)
    with pytest.raises(SpaceError, match="ir_override"):
        autotune(configs=[triton.Config({"BLOCK": 32}, ir_override="k.ttgir")], key=["n"])(add_kernel)
    with pytest.raises(ValueError, match="key contains names that are not kernel arguments: size"):
        autotune(configs=BLOCK_CONFIGS, key=["size"])(add_kernel)
    with pytest.raises(ValueError, match="reset_to_zero contains names"):
        autotune(configs=BLOCK_CONFIGS, key=["n"], reset_to_zero=["nope"])(add_kernel)
    with pytest.raises(ValueError, match="restore_value contains names"):
        autotune(configs=BLOCK_CONFIGS, key=["n"], restore_value=["nope"])(add_kernel)
    with pytest.raises(SpaceError, match="BLOK"):
        autotune(configs=[triton.Config({"BLOK": 32})], key=["n"])(add_kernel)


# ------------------------------------------------------------------------------------------------ keys, cache
def test_cache_maps_key_values_and_dtypes_to_the_callers_triton_config():
    add = autotune(configs=BLOCK_CONFIGS, key=["n"])(add_kernel)
    for n in (64, 100, 64):
        x, y, out = vectors(n)
        add[grid_1d](x, y, out, n)
        torch.testing.assert_close(out, x + y)
    x, y, out = (t.double() for t in vectors(64))
    add[grid_1d](x, y, out, 64)
    torch.testing.assert_close(out, x + y)
    f32, f64 = ("torch.float32",) * 3, ("torch.float64",) * 3
    assert set(add.cache) == {(64, *f32), (100, *f32), (64, *f64)}
    assert all(any(v is c for c in BLOCK_CONFIGS) for v in add.cache.values())
    assert add.cache_info()["tunings"] == 3
    assert isinstance(add.bench_time, float) and add.bench_time > 0


def test_a_key_name_set_by_the_configs_is_skipped_as_in_triton():
    """Triton keys on the call's arguments only, so a config's meta-parameter in key= is skipped, not an error
    (the native @autotune refuses it when decorating)."""
    add = autotune(configs=BLOCK_CONFIGS, key=["n", "BLOCK"])(add_kernel)
    x, y, out = vectors(64)
    add[grid_1d](x, y, out, 64)
    torch.testing.assert_close(out, x + y)
    assert set(add.cache) == {(64, *("torch.float32",) * 3)}


def test_keyword_arguments_in_any_order_share_one_tuning():
    add = autotune(configs=BLOCK_CONFIGS, key=["n"])(add_kernel)
    x, y, _ = vectors(80)
    outs = [torch.empty(80) for _ in range(4)]
    add[grid_1d](x, y, outs[0], 80)
    add[grid_1d](x=x, y=y, out=outs[1], n=80)
    add[grid_1d](n=80, out=outs[2], y=y, x=x)
    add[grid_1d](x, y, n=80, out=outs[3])
    for out in outs:
        torch.testing.assert_close(out, x + y)
    assert list(add.cache) == [(80, "torch.float32", "torch.float32", "torch.float32")]
    assert add.cache_info()["tunings"] == 1


def test_conflicting_meta_parameter_is_an_error_as_in_triton():
    add = autotune(configs=BLOCK_CONFIGS, key=["n"])(add_kernel)
    x, y, out = vectors(64)
    with pytest.raises(
        ValueError, match="Conflicting meta-parameters: BLOCK. Make sure that you don't re-define auto-tuned symbols."
    ):
        add[grid_1d](x, y, out, 64, BLOCK=32)
    single = autotune(configs=BLOCK_CONFIGS[:1], key=["n"])(add_kernel)
    with pytest.raises(ValueError, match="Conflicting meta-parameters: BLOCK"):
        single[grid_1d](x, y, out, 64, BLOCK=32)
    with pytest.raises(TypeError, match="add_kernel\\(\\) got multiple values for keyword argument 'num_warps'"):
        add[grid_1d](x, y, out, 64, num_warps=8)  # as Triton's fn.run(**kwargs, **config.all_kwargs()) raises


def test_cache_results_default_writes_the_disk_cache_and_a_new_process_reads_it():
    first = autotune(configs=BLOCK_CONFIGS, key=["n"])(add_kernel)
    x, y, out = vectors(96)
    first[grid_1d](x, y, out, 96)
    assert len(cache_files()) == 1
    # A second decoration stands in for the next process: it reads the winner and benchmarks nothing.
    second = autotune(configs=BLOCK_CONFIGS, key=["n"], do_bench=lambda *a, **k: pytest.fail("benchmarked"))(add_kernel)
    out2 = torch.empty(96)
    second[grid_1d](x, y, out2, 96)
    torch.testing.assert_close(out2, x + y)
    assert second.best_config is first.best_config
    assert set(second.configs_timings) == set(BLOCK_CONFIGS)
    assert second.cache_info()["disk_hits"] == 1


def test_cache_hits_count_name_the_last_key_and_follow_a_clear():
    from autotune import clear_autotune_cache

    add = autotune(configs=BLOCK_CONFIGS, key=["n"], tuning=FAST)(add_kernel)
    for n in (96, 200, 96, 96, 200):  # two tunings, then hits that alternate keys
        x, y, out = vectors(n)
        add[grid_1d](x, y, out, n)
        torch.testing.assert_close(out, x + y)
        assert list(add.record().key) == [n]  # the last launch's key, hit or not
    info = add.cache_info()
    assert info["tunings"] == 2 and info["hits"] == 3
    assert clear_autotune_cache(add, key=(96,)) == 1 and (96,) not in {k[:1] for k in add.cache}
    x, y, out = vectors(96)
    add[grid_1d](x, y, out, 96)  # cleared: tuned again, not launched from the forgotten entry
    assert add.cache_info()["tunings"] == 3 and list(add.record().key) == [96]


def test_force_under_compat_tunes_each_key_once_then_hits():
    add = autotune(configs=BLOCK_CONFIGS, key=["n"], tuning=Tuning(preset="fast", reps=2, warmup=0, force=True))(
        add_kernel
    )
    x, y, out = vectors(96)
    for _ in range(3):
        add[grid_1d](x, y, out, 96)
    assert add.cache_info()["tunings"] == 1 and add.cache_info()["hits"] == 2


def test_cache_results_false_keeps_winners_in_memory_only():
    add = autotune(configs=BLOCK_CONFIGS, key=["n"], cache_results=False)(add_kernel)
    x, y, out = vectors(96)
    add[grid_1d](x, y, out, 96)
    add[grid_1d](x, y, out, 96)
    torch.testing.assert_close(out, x + y)
    assert not Path(os.environ["AUTOTUNE_CACHE_DIR"]).exists()
    assert add.cache_info()["tunings"] == 1 and add.cache_info()["hits"] == 1
    assert autotune(configs=BLOCK_CONFIGS, key=["n"], cache_results=True)(add_kernel).cache_results is True


# ------------------------------------------------------------------------------------------------ safety
@pytest.mark.parametrize("pass_acc,pass_counts", [(True, True), (False, True), (True, False), (False, False)])
def test_reset_to_zero_and_restore_value_skip_arguments_passed_as_none(pass_acc, pass_counts):
    tuned = autotune(
        configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})],
        key=["n"],
        restore_value=["acc"],
        reset_to_zero=["counts"],
    )(inplace_kernel)
    x = torch.randn(50)
    acc0 = torch.randn(50)
    acc = acc0.clone() if pass_acc else None
    counts = torch.full((50,), 5.0) if pass_counts else None
    tuned[grid_1d](x, acc, counts, 50)
    if pass_acc:
        torch.testing.assert_close(acc, acc0 + x)  # restored between trials: one launch's effect
    if pass_counts:
        assert torch.equal(counts, torch.ones(50))  # zeroed, as Triton does before the real launch
    assert tuned.record().winner in tuned.tuner.configs


def test_restore_value_still_applies_with_a_user_pre_hook():
    # Triton drops its reset/restore when pre_hook is given; autotune keeps the arguments safe regardless.
    calls = []
    tuned = autotune(
        configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})],
        key=["n"],
        restore_value=["acc"],
        pre_hook=lambda kwargs, reset_only=False: calls.append(reset_only),
    )(inplace_kernel)
    x, acc = torch.randn(40), torch.randn(40)
    expected = acc + x
    tuned[grid_1d](x, acc, None, 40)
    torch.testing.assert_close(acc, expected)
    assert calls and calls[-1] is True


# ------------------------------------------------------------------------------------------------ hooks
def test_pre_and_post_hooks_pair_up_and_reset_only_follows_a_benchmark():
    pre, post, config_pre = [], [], []

    def pre_hook(nargs, reset_only=False):
        pre.append((reset_only, nargs["n"], nargs["BLOCK"], nargs["num_warps"]))

    def post_hook(nargs, exception):
        post.append(exception)

    configs = [
        triton.Config({"BLOCK": 32}, pre_hook=lambda nargs: config_pre.append(nargs["BLOCK"])),
        triton.Config({"BLOCK": 64}, pre_hook=lambda nargs: config_pre.append(nargs["BLOCK"])),
    ]
    add = autotune(configs=configs, key=["n"], pre_hook=pre_hook, post_hook=post_hook, tuning=FAST)(add_kernel)
    x, y, out = vectors(100)
    add[grid_1d](x, y, out, 100)
    torch.testing.assert_close(out, x + y)
    runs = [p for p in pre if not p[0]]
    assert len(runs) == len(post) >= 2 * len(configs) and all(e is None for e in post)
    assert {(p[2], p[3]) for p in runs} == {(32, 4), (64, 4)} and all(p[1] == 100 for p in runs)
    assert [p for p in pre if p[0]] == [(True, 100, add.best_config.kwargs["BLOCK"], 4)]  # once, after tuning
    winner = add.best_config.kwargs["BLOCK"]
    # a config's pre_hook: before each of its runs while tuning, and before every launch of the winner
    assert config_pre.count(32) + config_pre.count(64) == len(runs) + 1 and config_pre[-1] == winner
    pre.clear(), post.clear(), config_pre.clear()
    add[grid_1d](x, y, out, 100)  # cached: no tuning hooks, the winner's config pre_hook only
    assert pre == [] and post == [] and config_pre == [winner]


def test_post_hook_is_told_about_the_exception_and_the_failing_config_is_skipped():
    post = []
    pre_count = []
    configs = [triton.Config({"BLOCK": 48}), triton.Config({"BLOCK": 64})]  # 48: tl.arange needs a power of 2
    add = autotune(
        configs=configs,
        key=["n"],
        pre_hook=lambda nargs, reset_only=False: pre_count.append(reset_only),
        post_hook=lambda nargs, exception: post.append(exception),
        tuning=FAST,
    )(add_kernel)
    x, y, out = vectors(128)
    add[grid_1d](x, y, out, 128)
    torch.testing.assert_close(out, x + y)
    assert add.best_config is configs[1]
    errors = [e for e in post if e is not None]
    assert len(errors) == 1 and isinstance(errors[0], Exception)
    assert pre_count.count(False) == len(post)
    assert add.configs_timings[configs[0]] == [float("inf")] * 3
    assert (
        add.record().trial_for(NativeConfig(BLOCK=48, num_warps=4, num_stages=3, num_ctas=1)).status
        is TrialStatus.RUNTIME_ERROR
    )


# ------------------------------------------------------------------------------------------------ benchmarking
def test_do_bench_gets_kernel_call_and_quantiles_and_its_median_picks_the_winner():
    running, calls = [], []
    configs = [
        triton.Config({"BLOCK": b}, pre_hook=lambda nargs: running.append(nargs["BLOCK"])) for b in (32, 64, 128)
    ]

    def do_bench(kernel_call, quantiles):
        kernel_call()
        calls.append((running[-1], quantiles))
        return [1.0 if running[-1] == 64 else 2.0, 0.5, 3.0]

    add = autotune(configs=configs, key=["n"], do_bench=do_bench)(add_kernel)
    x, y, out = vectors(200)
    add[grid_1d](x, y, out, 200)
    torch.testing.assert_close(out, x + y)
    assert sorted(b for b, _ in calls) == [32, 64, 128]  # once per config, no refinement
    assert all(q == (0.5, 0.2, 0.8) for _, q in calls)
    assert add.best_config is configs[1]
    assert add.configs_timings == {
        configs[0]: [2.0, 0.5, 3.0],
        configs[1]: [1.0, 0.5, 3.0],
        configs[2]: [2.0, 0.5, 3.0],
    }


def test_do_bench_returning_a_float_is_accepted():
    add = autotune(
        configs=BLOCK_CONFIGS[:2], key=["n"], do_bench=lambda kernel_call, quantiles: (kernel_call(), 0.25)[1]
    )(add_kernel)
    x, y, out = vectors(64)
    add[grid_1d](x, y, out, 64)
    torch.testing.assert_close(out, x + y)
    assert list(add.configs_timings.values()) == [0.25, 0.25]


@pytest.mark.parametrize("options", [{"warmup": 5, "rep": 20}, {"use_cuda_graph": True}, {"rep": 10}])
def test_deprecated_warmup_rep_cuda_graph_warn_and_tune_on_the_wall_clock_in_the_interpreter(options):
    with pytest.warns(DeprecationWarning, match="warmup, rep, and use_cuda_graph parameters are deprecated"):
        add = autotune(configs=BLOCK_CONFIGS[:2], key=["n"], **options)(add_kernel)
    assert add.do_bench is None  # triton.testing needs a GPU: the interpreter's timer stands in
    x, y, out = vectors(64)
    add[grid_1d](x, y, out, 64)
    torch.testing.assert_close(out, x + y)
    assert all(t.status is TrialStatus.OK for t in add.record().trials)


def test_triton_testing_do_bench_is_replaced_by_the_wall_clock_in_the_interpreter():
    import triton.testing

    add = autotune(configs=BLOCK_CONFIGS[:2], key=["n"], do_bench=triton.testing.do_bench)(add_kernel)
    x, y, out = vectors(64)
    add[grid_1d](x, y, out, 64)
    torch.testing.assert_close(out, x + y)
    assert all(t.status is TrialStatus.OK and len(t.samples_ms) > 1 for t in add.record().trials)


def test_a_single_config_is_launched_without_benchmarking():
    hooks = []
    add = autotune(
        configs=[triton.Config({"BLOCK": 64})],
        key=["n"],
        pre_hook=lambda *a, **k: hooks.append("pre"),
        post_hook=lambda *a, **k: hooks.append("post"),
        do_bench=lambda *a, **k: pytest.fail("benchmarked a single config"),
    )(add_kernel)
    x, y, out = vectors(150)
    add[grid_1d](x, y, out, 150)
    torch.testing.assert_close(out, x + y)
    assert hooks == [] and add.cache == {} and add.best_config is add.configs[0]
    assert add.cache_info()["tunings"] == 0


# ------------------------------------------------------------------------------------------------ pruning
def test_early_config_prune_gets_triton_configs_positional_nargs_and_kwargs():
    seen = []

    def early_config_prune(configs, named_args, **kwargs):
        seen.append((configs, dict(named_args), dict(kwargs)))
        return [c for c in configs if c.kwargs["BLOCK"] >= 64]

    add = autotune(
        configs=BLOCK_CONFIGS, key=["n"], prune_configs_by={"early_config_prune": early_config_prune}, tuning=FAST
    )(add_kernel)
    x, y, out = vectors(90)
    add[grid_1d](x, y, out=out, n=90)
    add[grid_1d](x, y, out=out, n=90)
    torch.testing.assert_close(out, x + y)
    assert len(seen) == 1  # pruning runs only when a key is tuned
    configs, nargs, kwargs = seen[0]
    assert configs is add.configs
    assert set(nargs) == {"x", "y"}  # Triton's nargs: the positional arguments
    assert kwargs["n"] == 90 and kwargs["out"] is out and kwargs["grid"] is grid_1d and kwargs["warmup"] is False
    assert set(add.configs_timings) == set(BLOCK_CONFIGS[1:])
    assert add.record().trial_for(add.tuner.configs[0]).status is TrialStatus.SKIPPED


def test_perf_model_with_int_top_k_benchmarks_the_best_estimates():
    estimates = []

    def perf_model(x, y, out, n, BLOCK, num_warps, num_stages, num_ctas, **kwargs):
        estimates.append((n, BLOCK, num_warps))
        return {32: 3.0, 64: 1.0, 128: 2.0}[BLOCK]

    add = autotune(
        configs=BLOCK_CONFIGS, key=["n"], prune_configs_by={"perf_model": perf_model, "top_k": 2}, tuning=FAST
    )(add_kernel)
    x, y, out = vectors(77)
    add[grid_1d](x, y, out, 77)
    torch.testing.assert_close(out, x + y)
    assert sorted(estimates) == [(77, 32, 2), (77, 64, 4), (77, 128, 8)]
    assert set(add.configs_timings) == {BLOCK_CONFIGS[1], BLOCK_CONFIGS[2]}


def test_fractional_top_k_on_two_configs_keeps_one_and_launches_it_without_benchmarking():
    configs = [triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})]
    add = autotune(
        configs=configs,
        key=["n"],
        prune_configs_by={"perf_model": lambda BLOCK, **kw: 1.0 / BLOCK, "top_k": 0.4},
        do_bench=lambda *a, **k: pytest.fail("benchmarked after pruning to one"),
    )(add_kernel)
    x, y, out = vectors(100)
    add[grid_1d](x, y, out, 100)  # int(2 * 0.4) == 0 configs: at least one is kept
    torch.testing.assert_close(out, x + y)
    assert add.best_config is configs[1]
    assert add.cache == {(100, "torch.float32", "torch.float32", "torch.float32"): configs[1]}
    assert add.configs_timings == {}
    assert add.prune_configs({}, nargs={"n": 100}) == [configs[1]]


def test_pruning_to_nothing_and_bad_top_k_are_errors():
    add = autotune(
        configs=BLOCK_CONFIGS, key=["n"], prune_configs_by={"early_config_prune": lambda configs, nargs, **kw: []}
    )(add_kernel)
    x, y, out = vectors(64)
    with pytest.raises(AutotunerError, match="No valid autotuner configs after pruning"):
        add[grid_1d](x, y, out, 64)
    with pytest.raises(TypeError, match="top_k must be either"):
        autotune(configs=BLOCK_CONFIGS, key=["n"], prune_configs_by={"perf_model": len, "top_k": 1.5})
    with pytest.raises(ValueError, match="at least one"):
        autotune(configs=BLOCK_CONFIGS, key=["n"], prune_configs_by={"perf_model": len, "top_k": 0})
    foreign = autotune(
        configs=BLOCK_CONFIGS,
        key=["n"],
        prune_configs_by={"early_config_prune": lambda c, n, **k: [triton.Config({"BLOCK": 16})]},
    )(add_kernel)
    with pytest.raises(Exception, match="not one of the decorator's configs"):
        foreign[grid_1d](x, y, out, 64)


def test_warmup_compiles_the_pruned_configs():
    add = autotune(
        configs=BLOCK_CONFIGS, key=["n"], prune_configs_by={"early_config_prune": lambda c, nargs, **kw: c[:2]}
    )(add_kernel)
    x, y, out = vectors(64)
    assert len(add.warmup(x, y, out, 64, grid=(1,))) == 2


# ------------------------------------------------------------------------------------------------ heuristics
def test_stacks_under_triton_heuristics():
    # heuristics above autotune: it computes BLOCK_N and passes it to the autotuner as a keyword
    tuned = triton.heuristics({"BLOCK_N": lambda args: triton.next_power_of_2(args["N"])})(
        autotune(configs=[triton.Config({"BLOCK_M": 8}), triton.Config({"BLOCK_M": 16})], key=["M", "N"])(
            scale_2d_kernel
        )
    )
    x = torch.randn(20, 24)
    out = torch.empty_like(x)
    tuned[grid_2d](x, out, 20, 24, x.stride(0))
    torch.testing.assert_close(out, 2 * x)
    assert tuned.fn.best_config.kwargs["BLOCK_M"] in (8, 16)
    assert len(tuned.fn.record().trials) == 2


def test_stacks_over_triton_heuristics():
    # heuristics below autotune: each config's launch goes through it, and it sees the config's values
    seen = []

    def block_n(args):
        seen.append(args["BLOCK_M"])
        return 32

    tuned = autotune(configs=[triton.Config({"BLOCK_M": 8}), triton.Config({"BLOCK_M": 16})], key=["M", "N"])(
        triton.heuristics({"BLOCK_N": block_n})(scale_2d_kernel)
    )
    x = torch.randn(20, 24)
    out = torch.empty_like(x)
    tuned[grid_2d](x, out, 20, 24, x.stride(0))
    torch.testing.assert_close(out, 2 * x)
    assert {8, 16} <= set(seen) and seen[-1] == tuned.best_config.kwargs["BLOCK_M"]


def test_triton_print_autotuning_prints_the_summary(monkeypatch, capsys):
    from triton import knobs

    monkeypatch.setattr(knobs.autotuning, "print", True)
    add = autotune(configs=BLOCK_CONFIGS[:2], key=["n"], tuning=FAST)(add_kernel)
    x, y, out = vectors(64)
    add[grid_1d](x, y, out, 64)
    assert "Triton autotuning for function add_kernel" in capsys.readouterr().out


def test_autotune_disable_launches_the_first_config(monkeypatch):
    monkeypatch.setenv("AUTOTUNE_DISABLE", "1")
    add = autotune(configs=BLOCK_CONFIGS, key=["n"])(add_kernel)
    x, y, out = vectors(64)
    add[grid_1d](x, y, out, 64)
    torch.testing.assert_close(out, x + y)
    assert add.best_config is BLOCK_CONFIGS[0] and add.cache == {}


@pytest.mark.gpu
@pytest.mark.parametrize(
    "options",
    [{}, {"warmup": 5, "rep": 20}, {"use_cuda_graph": True}, {"do_bench": triton.testing.do_bench}],
    ids=["native", "rep", "graph", "do_bench"],
)
def test_on_a_gpu_each_benchmark_path_tunes(options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        add = autotune(configs=BLOCK_CONFIGS, key=["n"], **options)(add_kernel)
    x, y = torch.randn(1 << 16, device="cuda"), torch.randn(1 << 16, device="cuda")
    out = torch.empty_like(x)
    add[grid_1d](x, y, out, x.numel())
    torch.testing.assert_close(out, x + y)
    assert set(add.configs_timings) == set(BLOCK_CONFIGS)
    assert all(math.isfinite(t[0]) and t[0] > 0 for t in add.configs_timings.values())


# ------------------------------------------------------------------------------------------------ native prune=
def native_add(prune, **kwargs):
    return native_autotune(
        space={"BLOCK": (32, 64, 128)}, key=["n"], grid="(cdiv(n, $BLOCK),)", prune=prune, tuning=FAST, **kwargs
    )(add_kernel)


def test_native_prune_dict_with_perf_model_and_int_top_k():
    estimates = []

    def perf_model(x, y, out, n, BLOCK, **_):
        estimates.append(BLOCK)
        return abs(BLOCK - 64)

    add = native_add({"perf_model": perf_model, "top_k": 2})
    x, y, out = vectors(100)
    add(x, y, out, 100)
    torch.testing.assert_close(out, x + y)
    assert sorted(estimates) == [32, 64, 128]
    statuses = {t.config["BLOCK"]: t.status for t in add.record().trials}
    assert statuses[128] is TrialStatus.SKIPPED and statuses[64] is TrialStatus.OK and statuses[32] is TrialStatus.OK


def test_native_prune_dict_early_prune_then_fractional_top_k_keeps_one_unmeasured():
    add = native_add(
        {
            "early_config_prune": lambda configs, named: [c for c in configs if c.BLOCK >= 64],
            "perf_model": lambda BLOCK, **_: -BLOCK,
            "top_k": 0.4,
        }
    )
    x, y, out = vectors(100)
    add(x, y, out, 100)
    torch.testing.assert_close(out, x + y)
    assert add.best_config == NativeConfig(BLOCK=128)
    assert all(t.status is TrialStatus.SKIPPED for t in add.record().trials)


def test_native_prune_dict_is_validated_when_decorating():
    with pytest.raises(OptionError, match="unknown keys"):
        native_add({"perf_modle": len})
    with pytest.raises(TypeError, match="top_k must be either"):
        native_add({"perf_model": len, "top_k": "2"})
    with pytest.raises(OptionError, match="at least one"):
        native_add({"perf_model": len, "top_k": -1})
    with pytest.raises(OptionError, match="must be callable"):
        native_add({"perf_model": 3})
    with pytest.raises(OptionError, match="takes a callable"):
        native_add(["not", "a", "pruner"])


# --- #12 item 1: prune runs before the cache is read; an entry counts only for the configs it kept --------------


def _two_configs():
    return [triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 64})]


def _run_add(tuned, n=64):
    from kernels_for_tests import add_kernel  # noqa: F401  (the kernel tuned below)

    x = torch.arange(n, dtype=torch.float32)
    out = torch.empty_like(x)
    tuned[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, x, out, n)
    assert torch.equal(out, 2 * x)
    return tuned.best_config.kwargs["BLOCK"]


def test_compat_prune_runs_before_the_disk_cache_and_its_winner_is_never_one_it_removed():
    from kernels_for_tests import add_kernel

    first = autotune(
        configs=_two_configs(),
        key=["n"],
        prune_configs_by={"early_config_prune": lambda configs, nargs, **kw: [configs[0]]},
    )(add_kernel)
    assert _run_add(first) == 16  # its entry: winner BLOCK=16, on disk
    calls = []

    def perf_model(**kwargs):
        calls.append(kwargs["BLOCK"])
        return -kwargs["BLOCK"]  # estimates BLOCK=64 fastest: keeps only it

    second = autotune(
        configs=_two_configs(),
        key=["n"],  # same name, source and configs; other prune
        prune_configs_by={"perf_model": perf_model, "top_k": 1},
    )(add_kernel)
    assert _run_add(second) == 64  # never the first decorator's BLOCK=16
    assert calls  # the perf model ran for this key


PRUNING_PROCESS = """
import json, sys
sys.path.insert(0, {tests!r})
import torch, triton
from kernels_for_tests import add_kernel
from autotune import stats
from autotune.compat import autotune
keep = int(sys.argv[1])
kernel = autotune(
    configs=[triton.Config({{"BLOCK": 16}}), triton.Config({{"BLOCK": 64}})],
    key=["n"],
    prune_configs_by={{"early_config_prune": lambda configs, nargs, **kw: [c for c in configs if c.kwargs["BLOCK"] == keep]}},
)(add_kernel)
x = torch.arange(64, dtype=torch.float32)
out = torch.empty_like(x)
kernel[lambda meta: (triton.cdiv(64, meta["BLOCK"]),)](x, x, out, 64)
assert torch.equal(out, 2 * x)
print(json.dumps({{"launched": kernel.best_config.kwargs["BLOCK"], "stats": stats()["add_kernel"]}}))
"""


def test_a_new_process_prunes_before_reading_the_entry_another_prune_left_and_the_cli_shows_both():
    """Process 1 prunes to BLOCK=16 and stores that winner; process 2, same kernel and configs, prunes to BLOCK=64:
    it launches 64, never the stored 16, and its winner is kept beside the first (another prune= result is
    another slot of the key: the CLI lists both), which a third process pruning as the second reads."""
    import json
    import subprocess
    import sys

    tests = Path(__file__).resolve().parent
    env = dict(os.environ, PYTHONPATH=str(tests.parent), TRITON_INTERPRET="1")

    def run(*args: str) -> str:
        proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout

    def process(keep: int) -> dict:
        return json.loads(run("-c", PRUNING_PROCESS.format(tests=str(tests)), str(keep)).strip().splitlines()[-1])

    assert process(16)["launched"] == 16
    second = process(64)
    assert second["launched"] == 64 and second["stats"]["disk_hits"] == 0
    listed = json.loads(run("-m", "autotune", "cache", "list", "--json", "--kernel", "add_kernel"))
    assert sorted((e["record"]["key"], e["record"]["winner"]["BLOCK"]) for e in listed) == [([64], 16), ([64], 64)]
    third = process(64)  # the same prune again: its entry is read, nothing tuned
    assert third["launched"] == 64 and (third["stats"]["disk_hits"], third["stats"]["tunings"]) == (1, 0)


def test_compat_early_prune_returning_nothing_raises_even_with_a_cached_winner():
    from kernels_for_tests import add_kernel

    assert _run_add(autotune(configs=_two_configs(), key=["n"])(add_kernel)) in (16, 64)
    empty = autotune(
        configs=_two_configs(), key=["n"], prune_configs_by={"early_config_prune": lambda configs, nargs, **kw: []}
    )(add_kernel)
    with pytest.raises(Exception, match="removed every config|at least one"):
        _run_add(empty)


def test_native_prune_makes_the_kept_configs_part_of_what_an_entry_is_valid_for():
    from kernels_for_tests import add_kernel

    def make(keep):
        return native_autotune(
            space={"BLOCK": [16, 64]},
            key=["n"],
            grid="(cdiv(n, $BLOCK),)",
            tuning={"warmup": 0, "reps": 1},
            prune=lambda configs, named: [c for c in configs if c["BLOCK"] == keep],
        )(add_kernel)

    x = torch.ones(64)
    only16, only64 = make(16), make(64)
    only16(x, x, torch.empty_like(x), 64)
    assert only16.best_config["BLOCK"] == 16
    only64(x, x, torch.empty_like(x), 64)
    assert only64.best_config["BLOCK"] == 64 and only64.cache_info()["disk_hits"] == 0


# --- #12 items 21, 22: TRITON_PRINT_AUTOTUNING lines per config; ties broken in prune/perf_model order -------------


def test_print_autotuning_prints_one_line_per_config_as_triton_does(monkeypatch, capsys):
    from kernels_for_tests import add_kernel
    from triton import knobs

    monkeypatch.setattr(knobs.autotuning, "print", True)  # what TRITON_PRINT_AUTOTUNING=1 sets
    tuned = autotune(
        configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})], key=["n"]
    )(add_kernel)
    _run_add(tuned, n=96)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("Autotuning kernel")]
    assert sorted(lines) == sorted(f"Autotuning kernel add_kernel with config {c}" for c in tuned.configs)


def test_equal_timings_go_to_the_first_config_in_perf_model_order():
    from kernels_for_tests import add_kernel

    configs = [triton.Config({"BLOCK": b}) for b in (16, 32, 64)]
    tuned = autotune(
        configs=configs,
        key=["n"],
        do_bench=lambda kernel_call, quantiles: [1.0, 1.0, 1.0],
        prune_configs_by={"perf_model": lambda **kw: -kw["BLOCK"], "top_k": 2},
    )(add_kernel)
    assert _run_add(tuned) == 64  # Triton: min over {64: t, 32: t} in that order -> 64, not space order's 32


@triton.jit
def compat_tag_kernel(out_ptr, TAG: tl.constexpr):
    tl.store(out_ptr, TAG)


def test_configs_timings_rank_the_configs_as_the_refinement_decided(monkeypatch):
    """Without do_bench the drop-in times with autotune's timer and refines the best few: TAG=1 measures slow in
    its first pass (2.0 against 1.5) and faster in every interleaved round (1.0 against 1.1). best_config is TAG=1,
    and configs_timings agrees (its median is the rounds'), as Triton's best_config is configs_timings' argmin."""
    from autotune.engine import timing

    out = torch.zeros(1, dtype=torch.int32)
    calls: dict = {}

    def measure(self, fn, *, warmup, reps, before=None):
        fn()
        tag = int(out[0])
        calls[tag] = calls.get(tag, 0) + 1
        return [{1: 2.0, 2: 1.5}[tag]] * reps if calls[tag] == 1 else [{1: 1.0, 2: 1.1}[tag]] * reps

    monkeypatch.setattr(timing.WallClockTimer, "measure", measure)
    kernel = autotune(configs=[triton.Config({"TAG": 1}), triton.Config({"TAG": 2})], key=[])(compat_tag_kernel)
    kernel[(1,)](out)
    assert kernel.best_config.kwargs == {"TAG": 1}
    fastest = min(kernel.configs_timings, key=lambda c: kernel.configs_timings[c])
    assert fastest.kwargs == {"TAG": 1} and kernel.configs_timings[fastest][0] == 1.0


# --- the statistic that picks the winner -------------------------------------------------------------------------
def test_the_first_quantile_do_bench_returns_picks_the_winner_not_the_others():
    """Triton asks do_bench for [median, p20, p80] and ranks configs by the first: TAG=1's median is the lowest,
    TAG=2's p80, TAG=3's p20."""
    out = torch.zeros(1, dtype=torch.int32)
    times = {1: [1.0, 0.9, 100.0], 2: [2.0, 1.9, 2.1], 3: [3.0, 0.1, 3.5]}

    def do_bench(kernel_call, quantiles):
        kernel_call()
        return times[int(out[0])]

    configs = [triton.Config({"TAG": t}) for t in (1, 2, 3)]
    kernel = autotune(configs=configs, key=[], do_bench=do_bench)(compat_tag_kernel)
    kernel[(1,)](out)
    assert kernel.best_config is configs[0] and int(out[0]) == 1
    assert kernel.configs_timings == {c: times[c.kwargs["TAG"]] for c in configs}


def test_without_do_bench_the_median_of_the_samples_picks_the_winner_and_timings_are_torch_quantiles(monkeypatch):
    """autotune's own timer (the interpreter's wall clock) reports TAG=1 [1, 1, 100] (median 1, max 100, mean 34),
    TAG=2 [2, 2, 2] and TAG=3 [0.5, 5, 5] (min 0.5): the median picks TAG=1. configs_timings holds the
    [median, p20, p80] of each config's samples as Triton's do_bench computes them (torch.quantile)."""
    from autotune.engine import timing

    out = torch.zeros(1, dtype=torch.int32)
    samples = {1: [1.0, 1.0, 100.0], 2: [2.0, 2.0, 2.0], 3: [0.5, 5.0, 5.0]}

    def measure(self, fn, *, warmup, reps, before=None):
        fn()
        assert reps == 3
        return samples[int(out[0])]

    monkeypatch.setattr(timing.WallClockTimer, "measure", measure)
    configs = [triton.Config({"TAG": t}) for t in (1, 2, 3)]
    kernel = autotune(configs=configs, key=[], tuning=Tuning(warmup=0, reps=3, refine_topk=0, compile_workers=0))(
        compat_tag_kernel
    )
    kernel[(1,)](out)
    assert kernel.best_config is configs[0] and int(out[0]) == 1
    quantiles = torch.tensor([0.5, 0.2, 0.8], dtype=torch.float64)
    expected = {
        c: torch.quantile(torch.tensor(samples[c.kwargs["TAG"]], dtype=torch.float64), quantiles) for c in configs
    }
    assert kernel.configs_timings.keys() == expected.keys()
    for config, timing_value in kernel.configs_timings.items():
        assert timing_value == pytest.approx(expected[config].tolist(), rel=1e-12), config
    assert kernel.configs_timings[configs[0]] == pytest.approx([1.0, 1.0, 60.4])
