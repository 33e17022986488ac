"""Review fixes of the launch paths: an autotuned (or compat) kernel, or `autotune_launch`, called straight from
torch.compile'd code runs eagerly at a hit too (not traced by Dynamo), `autotune_launch` names `fake=` when a
torch_op wrapper runs it on FakeTensors, the hit path refuses a negative or bool grid size as a miss does, and
prune= errors (its own, or a launch of its own kernel) are named. Real kernels through the interpreter."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest
import torch
import triton
from kernels_for_tests import add_kernel

import autotune
from autotune import AutotuneError, ExpressionError, Tuning, autotune_launch, torch_op
from autotune.compat import autotune as triton_style_autotune

FAST = Tuning(warmup=0, reps=1, compile_workers=0, isolate="off")
GRID = "(cdiv(n, $BLOCK),)"


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _grid(n: int, meta: dict) -> tuple[int]:
    return (triton.cdiv(n, meta["BLOCK"]),)


def _native(x, y, out, n):
    _native.kernel(x, y, out, n)


def _compat(x, y, out, n):
    _compat.kernel[functools.partial(_grid, n)](x, y, out, n)


def _launched(x, y, out, n):
    autotune_launch(add_kernel, space={"BLOCK": [32, 64]}, args=(x, y, out, n), grid=GRID, key=["n"], tuning=FAST)


@pytest.mark.parametrize("launch", [_native, _compat, _launched], ids=["native", "compat", "autotune_launch"])
def test_a_direct_launch_in_compiled_code_runs_eagerly_at_its_hits_too(fresh_dynamo, launch):
    """The second call (a memory hit) used to be traced by Dynamo and fail on FakeTensors."""
    _native.kernel = autotune.autotune(space={"BLOCK": [32, 64]}, key=["n"], grid=GRID, tuning=FAST)(add_kernel)
    configs = [triton.Config({"BLOCK": b}) for b in (32, 64)]
    _compat.kernel = triton_style_autotune(configs=configs, key=["n"], tuning=FAST)(add_kernel)
    torch._dynamo.reset()  # what Dynamo was told at decoration outlives a reset

    def model(x, y):
        out = torch.empty_like(x)
        launch(x, y, out, x.numel())
        return out * 2

    compiled = torch.compile(model, backend="aot_eager")
    for n in (100, 100, 200):
        x, y = torch.randn(n), torch.randn(n)
        assert torch.equal(compiled(x, y), 2 * (x + y))


def test_autotune_launch_under_fullgraph_compile_names_torch_op(fresh_dynamo):
    def model(x, y):
        out = torch.empty_like(x)
        _launched(x, y, out, x.numel())
        return out

    with pytest.raises(Exception, match=r"autotune\.torch_op"):
        torch.compile(model, fullgraph=True, backend="aot_eager")(torch.randn(64), torch.randn(64))


@torch_op("autotune_review34::launched", mutates_args=())
def _launched_op(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    _launched(x, y, out, x.numel())
    return out


def test_autotune_launch_in_a_torch_op_without_fake_names_fake_and_tunes_nothing(fresh_dynamo):
    x, y = torch.randn(100), torch.randn(100)
    compiled = torch.compile(lambda a, b: _launched_op(a, b) * 2, fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match=r"give that torch_op fake="):
        compiled(x, y)
    cache = Path(os.environ["AUTOTUNE_CACHE_DIR"])
    assert not cache.exists() or not [p for p in cache.rglob("*") if p.is_file()]
    counts = autotune.stats().get("add_kernel") or {}
    assert counts.get("misses", 0) == counts.get("tunings", 0) == counts.get("failed_tunings", 0) == 0
    assert torch.equal(_launched_op(x, y), x + y)  # eager: the op's wrapper tunes and launches


@pytest.mark.parametrize(("grid", "said"), [((-1,), "must be >= 0"), ((True,), "not bools")])
def test_the_hit_path_refuses_a_grid_size_the_miss_path_refuses(grid, said):
    kernel = autotune.autotune(space={"BLOCK": (16, 32)}, key=["n"], tuning=FAST)(add_kernel)
    x, y = torch.randn(64), torch.randn(64)
    kernel[(4,)](x, y, torch.empty(64), 64)  # n=64 tuned: the next call is a memory hit
    with pytest.raises(ExpressionError, match=said):
        kernel[grid](x, y, torch.zeros(64), 64)


def test_a_prune_that_launches_its_own_kernel_is_named_not_a_recursion_error():
    def prune(configs, named):
        kernel(named["x"], named["y"], torch.empty(named["n"]), named["n"])
        return configs

    kernel = autotune.autotune(space={"BLOCK": (16, 32)}, key=["n"], grid=GRID, prune=prune, tuning=FAST)(add_kernel)
    x, y = torch.randn(50), torch.randn(50)
    with pytest.raises(AutotuneError, match=r"prune= launched add_kernel nested 32 deep.*kernel\.fn"):
        kernel(x, y, torch.empty(50), 50)


def test_a_prune_that_launches_its_own_kernel_once_at_a_key_whose_prune_launches_nothing_works():
    """Nesting that ends (prune= launches the kernel at n=8, whose prune= launches nothing) is not refused."""

    def prune(configs, named):
        if named["n"] != 8:
            kernel(torch.randn(8), torch.randn(8), torch.empty(8), 8)
        return configs

    kernel = autotune.autotune(space={"BLOCK": (16, 32)}, key=["n"], grid=GRID, prune=prune, tuning=FAST)(add_kernel)
    x, y, out = torch.randn(50), torch.randn(50), torch.empty(50)
    kernel(x, y, out, 50)
    assert torch.equal(out, x + y)


def test_an_error_of_prune_is_named_with_its_cause():
    def limit_prune(configs, named):
        return [c for c in configs if c["BLOCK"] <= named["limit_typo"]]

    kernel = autotune.autotune(space={"BLOCK": (16, 32)}, key=["n"], grid=GRID, prune=limit_prune, tuning=FAST)(
        add_kernel
    )
    with pytest.raises(AutotuneError, match=r"prune= \(limit_prune\).*raised KeyError: 'limit_typo'.*fix prune=") as e:
        kernel(torch.randn(50), torch.randn(50), torch.empty(50), 50)
    assert isinstance(e.value.__cause__, KeyError)


def test_a_compat_early_config_prune_error_is_raised_as_itself_as_triton_does():
    def early(configs, nargs, **kwargs):
        raise KeyError("limit_typo")

    configs = [triton.Config({"BLOCK": b}) for b in (32, 64)]
    kernel = triton_style_autotune(
        configs=configs, key=["n"], prune_configs_by={"early_config_prune": early}, tuning=FAST
    )(add_kernel)
    with pytest.raises(KeyError, match="limit_typo"):
        kernel[functools.partial(_grid, 50)](torch.randn(50), torch.randn(50), torch.empty(50), 50)
