"""Layer-norm forward over the last dimension: y = (x - mean) / sqrt(var + eps) * weight + bias.

One program per row; the row is walked in BLOCK_SIZE chunks three times (mean, variance, normalise),
with statistics in fp32. The chunk width is tuned rather than derived, so narrow rows pick a small
block and wide rows (beyond what fits in registers) still work: the space pairs BLOCK_SIZE 256..8192
with num_warps 1..16 such that every thread handles 2 to 16 elements per chunk. The key is the row
width N (the number of rows only sets the grid).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from autotune import CartesianSpace, autotune

# 2..16 elements per thread per chunk: BLOCK_SIZE / (32 * num_warps) in [2, 16].
SPACE = (
    CartesianSpace(BLOCK_SIZE=(256, 512, 1024, 2048, 4096, 8192), num_warps=(1, 2, 4, 8, 16))
    .where("$BLOCK_SIZE >= 64 * $num_warps")
    .where("$BLOCK_SIZE <= 512 * $num_warps")
)
# Two configs for Triton's CPU interpreter; on the tests' 50..100-wide rows the first loops over chunks.
CPU_SPACE = CartesianSpace(BLOCK_SIZE=(32, 128), num_warps=(4,))


@triton.jit
def _layer_norm_fwd_kernel(x_ptr, y_ptr, w_ptr, b_ptr, x_row_stride, y_row_stride, M, N, eps, BLOCK_SIZE: tl.constexpr):
    """Normalise row `program_id(0)` of x (M rows of N) into y, chunk by chunk."""
    row = tl.program_id(0).to(tl.int64)
    x_ptr += row * x_row_stride
    y_ptr += row * y_row_stride

    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        acc += tl.load(x_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / N

    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        x = tl.load(x_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
        x = tl.where(cols < N, x - mean, 0.0)
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)

    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        mask = cols < N
        x = tl.load(x_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        y = (x - mean) * rstd * w + b
        tl.store(y_ptr + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def make_layer_norm(space: Any = SPACE, **autotune_kwargs: Any) -> Any:
    """An `@autotune`-decorated layer-norm kernel over `space`; `autotune_kwargs` go to `autotune`."""
    autotune_kwargs.setdefault("key", ["N"])
    autotune_kwargs.setdefault("grid", "(M,)")
    return autotune(space=space, **autotune_kwargs)(_layer_norm_fwd_kernel)


layer_norm_kernel = make_layer_norm()


def layer_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
    *,
    kernel: Any | None = None,
) -> torch.Tensor:
    """Layer norm of `x` over its last dimension with optional affine `weight`/`bias` of shape (N,), in x's dtype."""
    if x.dim() == 0:
        raise ValueError("layer_norm: x must have at least one dimension")
    N = x.shape[-1]
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and (t.shape != (N,) or t.device != x.device):
            raise ValueError(
                f"layer_norm: {name} must have shape ({N},) on {x.device}; got {tuple(t.shape)} on {t.device}"
            )
    if weight is None:
        weight = torch.ones(N, dtype=x.dtype, device=x.device)
    if bias is None:
        bias = torch.zeros(N, dtype=x.dtype, device=x.device)
    x2 = x.reshape(-1, N)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    M = x2.shape[0]
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if M and N:
        launch = kernel if kernel is not None else layer_norm_kernel
        launch(x2, y, weight.contiguous(), bias.contiguous(), x2.stride(0), y.stride(0), M, N, float(eps))
    return y.reshape(x.shape)


def layer_norm_reference(
    x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None, eps: float = 1e-5
) -> torch.Tensor:
    """The torch result `layer_norm` must match: `torch.nn.functional.layer_norm` in fp32, cast to x's dtype."""
    w = weight.float() if weight is not None else None
    b = bias.float() if bias is not None else None
    return torch.nn.functional.layer_norm(x.float(), (x.shape[-1],), w, b, eps).to(x.dtype)
