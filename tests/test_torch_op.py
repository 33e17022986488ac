"""`autotune.torch_op` inside `torch.compile(fullgraph=True)`: no graph break, results equal eager, and the
kernel's key still picks per shape at run time (two shapes, two entries) without a recompile per shape. Real
kernels through Triton's interpreter, compiled with backend="aot_eager" (Dynamo and AOTAutograd, no C++ compiler:
Inductor works where one is installed, but a CPU Inductor compile costs about a minute on the 2-core CI machine)."""

from __future__ import annotations

import pytest
import torch
import triton
from kernels_for_tests import add_kernel
from torch._dynamo.testing import CompileCounterWithBackend
from torch._subclasses.fake_tensor import FakeTensorMode

from autotune import Tuning, autotune, stats, torch_op
from autotune.compat import autotune as triton_style_autotune

FAST = Tuning(warmup=0, reps=1, compile_workers=0, isolate="off")
SPACE = {"BLOCK": [32, 64]}

add = autotune(space=SPACE, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=FAST)(add_kernel)
add_compat = triton_style_autotune(
    configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})], key=["n"], tuning=FAST
)(add_kernel)


@torch_op("autotune_tests::add", mutates_args=())
def add_op(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    add(x, y, out, x.numel())
    return out


@torch_op("autotune_tests::add_into", mutates_args=("out",))
def add_into(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    n = x.numel()
    add_compat[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n)


def model(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return add_op(x, y).relu() * 2


def model_in_place(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    add_into(x, y, out)
    return out - 1


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_native_kernel_compiles_fullgraph_once_for_dynamic_shapes_and_tunes_per_shape():
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(model, fullgraph=True, backend=counter, dynamic=True)
    for n in (100, 300, 100):
        x, y = torch.randn(n), torch.randn(n)
        assert torch.equal(compiled(x, y), model(x, y))
    assert counter.frame_count == 1  # one graph for every shape
    info = add.cache_info()
    assert info["entries"] == 2 and info["tunings"] == 2  # our key still picks per shape, as in eager


def test_compat_kernel_in_place_with_mark_dynamic_compiles_once_and_tunes_per_shape():
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(model_in_place, fullgraph=True, backend=counter)
    for n in (64, 200):
        x, y = torch.randn(n), torch.randn(n)
        torch._dynamo.mark_dynamic(x, 0)
        torch._dynamo.mark_dynamic(y, 0)
        assert torch.equal(compiled(x, y), model_in_place(x, y))
    assert counter.frame_count == 1
    assert add_compat.cache_info()["tunings"] == 2 and len(add_compat.cache) == 2


def test_dynamo_records_no_graph_break():
    explained = torch._dynamo.explain(model)(torch.randn(50), torch.randn(50))
    assert explained.graph_break_count == 0 and explained.graph_count == 1


def test_the_fake_implementation_is_the_wrapper_with_every_launch_skipped():
    with FakeTensorMode():
        out = add_op(torch.empty(70), torch.empty(70))
        add_into(torch.empty(70), torch.empty(70), torch.empty(70))
    assert out.shape == (70,) and out.dtype == torch.float32
    assert not any(stats().get("add_kernel", {}).values())  # nothing looked up, tuned or launched


def test_an_explicit_fake_is_used_instead():
    seen = []

    def fake(x: torch.Tensor) -> torch.Tensor:
        seen.append(x.shape)
        return x.new_empty(x.shape)

    @torch_op("autotune_tests::double", mutates_args=(), fake=fake)
    def double(x: torch.Tensor) -> torch.Tensor:
        raise AssertionError("the real implementation runs only on real tensors")

    with FakeTensorMode():
        double(torch.empty(3))
    assert seen == [torch.Size([3])]


def test_a_name_without_a_namespace_is_refused():
    with pytest.raises(ValueError, match="'namespace::op_name'"):
        torch_op("add", mutates_args=())
