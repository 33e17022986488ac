"""Element-wise `x + y`, tuned over the block size and the warp count.

The kernel is memory-bound: what matters is how many elements each program and each thread move. The
space pairs BLOCK_SIZE with num_warps so that every thread handles 4 to 16 elements (fp32 loads
vectorise to 128 bits, and no thread holds so many values that it spills), and the key buckets the
length to a power of two so that nearby sizes share one tuning.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from autotune import CartesianSpace, autotune

# 4..16 elements per thread: BLOCK_SIZE / (32 * num_warps) in [4, 16].
SPACE = (
    CartesianSpace(BLOCK_SIZE=(512, 1024, 2048, 4096), num_warps=(2, 4, 8))
    .where("$BLOCK_SIZE >= 128 * $num_warps")
    .where("$BLOCK_SIZE <= 512 * $num_warps")
)
# Two configs that keep Triton's CPU interpreter quick on the 64..1000-element inputs of the tests.
CPU_SPACE = CartesianSpace(BLOCK_SIZE=(64, 128), num_warps=(4,))


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    """out[i] = x[i] + y[i] for the BLOCK_SIZE elements of this program, masked at the tail."""
    pid = tl.program_id(0)
    offsets = pid.to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


def make_add(space: Any = SPACE, **autotune_kwargs: Any) -> Any:
    """An `@autotune`-decorated add kernel over `space`; `autotune_kwargs` (e.g. `tuning="fast"`) go to `autotune`."""
    autotune_kwargs.setdefault("key", ["next_power_of_2(n_elements)"])
    autotune_kwargs.setdefault("grid", "(cdiv(n_elements, $BLOCK_SIZE),)")
    return autotune(space=space, **autotune_kwargs)(_add_kernel)


add_kernel = make_add()


def add(x: torch.Tensor, y: torch.Tensor, *, kernel: Any | None = None) -> torch.Tensor:
    """`x + y` for two tensors of one shape, dtype and device, computed by the tuned kernel (or `kernel`)."""
    if x.shape != y.shape or x.dtype != y.dtype or x.device != y.device:
        raise ValueError(
            f"add: x and y must match in shape, dtype and device; got {tuple(x.shape)} {x.dtype} "
            f"{x.device} and {tuple(y.shape)} {y.dtype} {y.device}"
        )
    x_c, y_c = x.contiguous(), y.contiguous()
    out = torch.empty_like(x_c)
    n_elements = out.numel()
    if n_elements:
        launch = kernel if kernel is not None else add_kernel
        launch(x_c, y_c, out, n_elements)
    return out


def add_reference(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The torch result `add` must match."""
    return x + y
