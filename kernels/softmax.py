"""Fused row-wise softmax: one read and one write of each row, max/exp/sum/divide in fp32 registers.

A program holds whole rows, so BLOCK_SIZE is not tuned but derived: next_power_of_2(n_cols). What is
left to tune is how a row is spread over threads (num_warps, 1..16: wide rows want more warps) and how
many rows one program handles (ROWS_PER_PROGRAM: narrow rows waste a launch-sized program each, so
batching rows amortises it). The key is the row width and the power-of-two bucket of the row count,
the two things the best config depends on.
Rows wider than Triton's per-block limit (2**20 elements) are not supported; past ~16K fp32 columns a
looped kernel would beat this one, which keeps a row in registers.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from autotune import CartesianSpace, autotune

SPACE = CartesianSpace(ROWS_PER_PROGRAM=(1, 2, 4), num_warps=(1, 2, 4, 8, 16))
# Two configs for Triton's CPU interpreter: one row and two rows per program.
CPU_SPACE = CartesianSpace(ROWS_PER_PROGRAM=(1, 2), num_warps=(4,))


@triton.jit
def _softmax_kernel(
    out_ptr,
    in_ptr,
    in_row_stride,
    out_row_stride,
    n_rows,
    n_cols,
    BLOCK_SIZE: tl.constexpr,
    ROWS_PER_PROGRAM: tl.constexpr,
):
    """Softmax of rows [pid * ROWS_PER_PROGRAM, +ROWS_PER_PROGRAM), each held as one BLOCK_SIZE vector."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    col_mask = cols < n_cols
    for i in tl.static_range(ROWS_PER_PROGRAM):
        row = pid * ROWS_PER_PROGRAM + i
        if row < n_rows:
            row64 = row.to(tl.int64)
            x = tl.load(in_ptr + row64 * in_row_stride + cols, mask=col_mask, other=-float("inf"))
            x = x.to(tl.float32)
            x = x - tl.max(x, axis=0)
            num = tl.exp(x)
            y = num / tl.sum(num, axis=0)
            tl.store(out_ptr + row64 * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=col_mask)


def make_softmax(space: Any = SPACE, **autotune_kwargs: Any) -> Any:
    """An `@autotune`-decorated softmax kernel over `space`; `autotune_kwargs` go to `autotune`."""
    autotune_kwargs.setdefault("key", ["n_cols", "next_power_of_2(n_rows)"])
    autotune_kwargs.setdefault("grid", "(cdiv(n_rows, $ROWS_PER_PROGRAM),)")
    autotune_kwargs.setdefault("derive", {"BLOCK_SIZE": "next_power_of_2(n_cols)"})
    return autotune(space=space, **autotune_kwargs)(_softmax_kernel)


softmax_kernel = make_softmax()


def softmax(x: torch.Tensor, *, kernel: Any | None = None) -> torch.Tensor:
    """Softmax over the last dimension of `x` (any leading shape), in `x`'s dtype, computed in fp32."""
    if x.dim() == 0:
        raise ValueError("softmax: x must have at least one dimension")
    n_cols = x.shape[-1]
    x2 = x.reshape(-1, n_cols)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    out = torch.empty((x2.shape[0], n_cols), dtype=x.dtype, device=x.device)
    n_rows = x2.shape[0]
    if n_rows and n_cols:
        launch = kernel if kernel is not None else softmax_kernel
        launch(out, x2, x2.stride(0), out.stride(0), n_rows, n_cols)
    return out.reshape(x.shape)


def softmax_reference(x: torch.Tensor) -> torch.Tensor:
    """The torch result `softmax` must match (computed in fp32, returned in `x`'s dtype)."""
    return torch.softmax(x.float(), dim=-1).to(x.dtype)
