"""Review fixes of `autotune.warmup` and capture for `autotune.compat` kernels: a compat prune run by a warm-up sees
the call's arguments as Triton gives them (nargs: the positional ones; kwargs: the keywords, grid, warmup), a
capture-time choice is looked up again after its key is deleted from `kernel.cache`, and a single-config key is
reported as untuned, not cached. Real kernels through the interpreter, a real disk cache."""

from __future__ import annotations

import functools
import warnings

import pytest
import torch
import triton
from kernels_for_tests import add_kernel

from autotune import Tuning, autotune, warmup
from autotune.compat import autotune as triton_style_autotune
from autotune.compiled.capture import assume_capturing

FAST = Tuning(warmup=0, reps=1, compile_workers=0, isolate="off")


def _grid(n: int, meta: dict) -> tuple[int]:
    return (triton.cdiv(n, meta["BLOCK"]),)


def n_by_keyword(n: int) -> tuple[tuple, dict]:
    """A call passing n by keyword, as Triton users do: it reaches early_config_prune's **kwargs."""
    return (torch.randn(n), torch.randn(n), torch.empty(n)), {"n": n, "grid": functools.partial(_grid, n)}


def add_args(n: int) -> tuple[tuple, dict]:
    return (torch.randn(n), torch.randn(n), torch.empty(n), n), {"grid": functools.partial(_grid, n)}


SEEN: list[tuple[list[str], list[str]]] = []


def prune_reading_kwargs(configs, nargs, **kwargs):
    """A Triton-style prune: the call's keyword n is read from kwargs."""
    SEEN.append((sorted(nargs), sorted(kwargs)))
    return [c for c in configs if c.kwargs["BLOCK"] <= max(32, kwargs["n"])]


@pytest.mark.parametrize("objective", [None, "geomean"])
def test_warmup_gives_a_compat_prune_the_arguments_its_own_run_gives(objective):
    SEEN.clear()
    add = triton_style_autotune(
        configs=[triton.Config({"BLOCK": b}) for b in (32, 64)],
        key=["n"],
        prune_configs_by={"early_config_prune": prune_reading_kwargs},
        tuning=FAST.replace(objective=objective),
    )(add_kernel)
    report = warmup(add, [functools.partial(n_by_keyword, 200)])
    assert [w.key for w in report.tuned] == [(200,)]
    assert SEEN and all(seen == (["out", "x", "y"], ["grid", "n", "warmup"]) for seen in SEEN)
    (x, y, out), kwargs = n_by_keyword(200)
    add[kwargs.pop("grid")](x, y, out, **kwargs)  # served as warmed up
    assert torch.equal(out, x + y)


def test_a_capture_choice_is_looked_up_again_after_its_key_is_deleted_from_cache():
    measuring: list[int] = []

    def bench(fn, quantiles):  # BLOCK 64 wins, so the winner differs from the capture's untuned first config
        fn()
        return [0.5 if measuring[-1] == 64 else 2.0] * 3

    configs = [triton.Config({"BLOCK": b}, pre_hook=lambda nargs: measuring.append(nargs["BLOCK"])) for b in (32, 64)]
    add = triton_style_autotune(configs=configs, key=["n"], do_bench=bench)(add_kernel)
    (x, y, out, n), kwargs = add_args(100)
    grid = kwargs["grid"]
    with warnings.catch_warnings(), assume_capturing():
        warnings.simplefilter("ignore")
        add[grid](x, y, out, n)  # untuned during capture: a choice is kept for the key
    add[grid](x, y, out, n)  # tuned outside a capture, the winner stored on disk
    assert add.best_config.kwargs == {"BLOCK": 64}
    add.cache.clear()  # the user deletes the key: it is looked up again (disk holds the winner)
    with warnings.catch_warnings(), assume_capturing():
        warnings.simplefilter("ignore")
        add[grid](x, y, out, n)
    assert add.best_config.kwargs == {"BLOCK": 64}
    assert add.cache_info()["tunings"] == 1 and torch.equal(out, x + y)


def test_warmup_reports_a_single_config_compat_key_as_untuned_not_cached():
    add = triton_style_autotune(configs=[triton.Config({"BLOCK": 32})], key=["n"], tuning=FAST)(add_kernel)
    report = warmup(add, [functools.partial(add_args, 100), functools.partial(add_args, 300)])
    assert report.cached == () and report.tuned == ()
    assert [w.key for w in report.untuned] == [(100,), (300,)]
    assert "0 already cached, 2 untuned (one config)" in str(report)


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _compat_add():
    return triton_style_autotune(configs=[triton.Config({"BLOCK": b}) for b in (32, 64)], key=["n"], tuning=FAST)(
        add_kernel
    )


def _native_add():
    return autotune(space={"BLOCK": [32, 64]}, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=FAST)(add_kernel)


LAUNCHES = {
    "compat[grid]": lambda: (lambda k, x, y, out, n: k[functools.partial(_grid, n)](x, y, out, n), _compat_add()),
    "native(...)": lambda: (lambda k, x, y, out, n: k(x, y, out, n), _native_add()),
    "native[grid]": lambda: (lambda k, x, y, out, n: k[functools.partial(_grid, n)](x, y, out, n), _native_add()),
}


@pytest.mark.parametrize("launch", sorted(LAUNCHES))
def test_a_kernel_launched_directly_under_fullgraph_compile_names_torch_op(fresh_dynamo, launch):
    call, kernel = LAUNCHES[launch]()

    def model(x, y):
        out = torch.empty_like(x)
        call(kernel, x, y, out, x.numel())
        return out

    x, y = torch.randn(64), torch.randn(64)
    with pytest.raises(Exception, match=r"autotune\.torch_op") as raised:
        torch.compile(model, fullgraph=True, backend="aot_eager")(x, y)
    assert "ContextVar" not in str(raised.value)
    torch._dynamo.reset()
    assert torch.equal(torch.compile(model, backend="aot_eager")(x, y), x + y)  # without fullgraph: runs eagerly
