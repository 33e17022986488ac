"""A model with two @autotune kernels: warm up, compile with torch.compile(fullgraph=True), serve.

Each kernel is called through a torch-level wrapper registered with `autotune.torch_op`, a PyTorch custom op, so
Dynamo keeps the whole model in one graph (no graph break) while our tuning still picks a config per shape at
run time. `autotune.warmup` tunes the shapes the model will see first, so serving (and CUDA-graph capture, on a
GPU) never pays for tuning. On a machine without a CUDA GPU the kernels run in Triton's CPU interpreter and the
model compiles with backend="aot_eager"; a GPU also captures the compiled model into a CUDA graph and replays it.

    python examples/compiled_model.py
"""

from __future__ import annotations

import functools
import os

import torch

ON_GPU = torch.cuda.is_available()
if not ON_GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import autotune  # noqa: E402
from autotune import Tuning  # noqa: E402

# Kernels in a script's __main__ cannot be imported by a worker process: they tune in this process.
TUNING = Tuning(preset="fast", isolate="off")
DEVICE = "cuda" if ON_GPU else "cpu"
SIZES = (1024, 4096) if ON_GPU else (256, 1024)


@autotune.autotune(space={"BLOCK": [64, 128, 256]}, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=TUNING)
@triton.jit
def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


@autotune.autotune(space={"BLOCK": [64, 128, 256]}, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=TUNING)
@triton.jit
def scaled_relu_kernel(x, out, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.maximum(tl.load(x + offs, mask=mask), 0.0) * scale, mask=mask)


# The wrappers: annotations are the op's schema, the allocation is the output's shape (declared once).
@autotune.torch_op("compiled_model::add", mutates_args=())
def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    add_kernel(x, y, out, x.numel())
    return out


@autotune.torch_op("compiled_model::scaled_relu", mutates_args=())
def scaled_relu(x: torch.Tensor, scale: float) -> torch.Tensor:
    out = torch.empty_like(x)
    scaled_relu_kernel(x, out, x.numel(), scale)
    return out


class Model(torch.nn.Module):
    def __init__(self, n_max: int) -> None:
        super().__init__()
        self.bias = torch.nn.Parameter(torch.randn(n_max, device=DEVICE), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return scaled_relu(add(x, self.bias[: x.numel()]), 0.5)


def reference(model: Model, x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x + model.bias[: x.numel()]) * 0.5


# Argument makers: picklable callables returning (args, kwargs) for one call of a kernel.
def add_args(n: int) -> tuple[tuple, dict]:
    x = torch.randn(n, device=DEVICE)
    return (x, torch.randn(n, device=DEVICE), torch.empty_like(x), n), {}


def scaled_relu_args(n: int) -> tuple[tuple, dict]:
    x = torch.randn(n, device=DEVICE)
    return (x, torch.empty_like(x), n, 0.5), {}


def main() -> None:
    model = Model(max(SIZES))

    # 1. Warm up before serving: tune every shape the model will see (skipped where already cached).
    for kernel, maker in ((add_kernel, add_args), (scaled_relu_kernel, scaled_relu_args)):
        print(f"warm-up: {autotune.warmup(kernel, [functools.partial(maker, n) for n in SIZES])}")
    tuned_before = autotune.stats()[add_kernel.name]["tunings"] + autotune.stats()[scaled_relu_kernel.name]["tunings"]

    # 2. Compile the whole model as one graph; dynamic=True: one graph for every size.
    explained = torch._dynamo.explain(model)(torch.randn(SIZES[0], device=DEVICE))
    print(f"compiled with fullgraph=True: {explained.graph_break_count} graph breaks")
    compiled = torch.compile(model, fullgraph=True, dynamic=True, backend="inductor" if ON_GPU else "aot_eager")

    # 3. Serve: each call picks the warmed winner of its shape.
    equal = True
    for n in SIZES:
        x = torch.randn(n, device=DEVICE)
        out = compiled(x)
        equal &= bool(torch.equal(out, model(x))) and bool(torch.allclose(out, reference(model, x)))
    tuned_after = autotune.stats()[add_kernel.name]["tunings"] + autotune.stats()[scaled_relu_kernel.name]["tunings"]
    print(
        f"served {len(SIZES)} shapes from one compiled graph; tunings while serving: {tuned_after - tuned_before}; "
        f"output equals eager: {equal}"
    )

    # 4. On a GPU, capture the compiled model into a CUDA graph: warmed keys launch their winners, nothing tunes.
    if ON_GPU:
        static_x = torch.randn(SIZES[-1], device=DEVICE)
        compiled(static_x)  # one eager run on the shape to capture (Triton compiles the winner here)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = compiled(static_x)
        static_x.copy_(torch.randn_like(static_x))
        graph.replay()
        torch.cuda.synchronize()
        print(f"CUDA graph replay equals eager: {bool(torch.allclose(static_out, reference(model, static_x)))}")
    else:
        print("no CUDA GPU: CUDA-graph capture skipped (the interpreter cannot capture)")


if __name__ == "__main__":
    main()
