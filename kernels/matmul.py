"""C = A @ B, the Triton tutorial's tiled matmul with grouped ("super-grouping") program order.

fp16/bf16/fp32 inputs, fp32 accumulation, output in the input dtype; loads and stores are masked so any
M, N, K work. Programs are ordered GROUP_M tile-rows at a time so that tiles sharing A rows and B
columns run together and hit in L2. The space is the tile shape (BLOCK_M/N in 32..128, BLOCK_K 32/64),
GROUP_M, num_warps and num_stages (software-pipelining depth), 66 configs after two constraints that
drop configs a GPU would waste: at least 8 fp32 accumulators per thread (8 warps need a tile of 64x32 or
more), and an estimated num_stages-deep ring of 16-bit A and B tiles within 96 KiB of shared memory, so
every config also launches on sm_86/sm_89 (99 KiB per block; a config over a GPU's limit would only fail
and be skipped). On a GPU, fp32 inputs go through TF32 tensor cores (tl.dot's default precision), as
torch does with allow_tf32; the interpreter computes them exactly.
Offsets are int32, as in the tutorial: operands up to 2**31 elements.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from autotune import CartesianSpace, autotune

SPACE = (
    CartesianSpace(
        BLOCK_M=(32, 64, 128),
        BLOCK_N=(32, 64, 128),
        BLOCK_K=(32, 64),
        GROUP_M=(8,),
        num_warps=(4, 8),
        num_stages=(3, 4),
    )
    .where("$BLOCK_M * $BLOCK_N >= 256 * $num_warps")
    .where("$num_stages * ($BLOCK_M + $BLOCK_N) * $BLOCK_K * 2 <= 98304")
)
# A wide space for search (issue 13) and for the brute-force landscape (bench/record_landscape.py): tiles 32..256,
# BLOCK_K to 128, GROUP_M 1 or 8, 2..8 warps, 2..5 stages; 888 of the 1,152 configs keep 8 to 128 fp32
# accumulators per thread. Shared memory is not estimated: a config over a GPU's limit fails to load and is skipped.
WIDE_SPACE = (
    CartesianSpace(
        BLOCK_M=(32, 64, 128, 256),
        BLOCK_N=(32, 64, 128, 256),
        BLOCK_K=(32, 64, 128),
        GROUP_M=(1, 8),
        num_warps=(2, 4, 8),
        num_stages=(2, 3, 4, 5),
    )
    .where("$BLOCK_M * $BLOCK_N >= 8 * 32 * $num_warps")
    .where("$BLOCK_M * $BLOCK_N <= 128 * 32 * $num_warps")
)
# Four configs for Triton's CPU interpreter (tl.dot needs every block dim >= 16); GROUP_M=2 so that the
# grouped order wraps on the small test matrices.
CPU_SPACE = CartesianSpace(
    BLOCK_M=(16, 32), BLOCK_N=(32,), BLOCK_K=(16, 32), GROUP_M=(2,), num_warps=(4,), num_stages=(2,)
)

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@triton.jit
def _matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    """One BLOCK_M x BLOCK_N tile of C, accumulated in fp32 over K in BLOCK_K steps."""
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    # Rows/columns past M/N wrap (modulo) so loads stay in bounds without a mask; the store masks them.
    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    c = acc.to(c_ptr.dtype.element_ty)
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + offs_cm[:, None] * stride_cm + offs_cn[None, :] * stride_cn
    tl.store(c_ptrs, c, mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


def make_matmul(space: Any = SPACE, **autotune_kwargs: Any) -> Any:
    """An `@autotune`-decorated matmul kernel over `space`; `autotune_kwargs` go to `autotune`."""
    autotune_kwargs.setdefault("key", ["M", "N", "K"])
    autotune_kwargs.setdefault("grid", "(cdiv(M, $BLOCK_M) * cdiv(N, $BLOCK_N),)")
    return autotune(space=space, **autotune_kwargs)(_matmul_kernel)


matmul_kernel = make_matmul()


def matmul(a: torch.Tensor, b: torch.Tensor, *, kernel: Any | None = None) -> torch.Tensor:
    """`a @ b` for 2-D `a` (M, K) and `b` (K, N) of one dtype (fp16, bf16 or fp32); the result is in that dtype."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul: expected (M, K) @ (K, N); got {tuple(a.shape)} @ {tuple(b.shape)}")
    if a.dtype != b.dtype or a.dtype not in _DTYPES:
        raise ValueError(f"matmul: a and b must share one dtype of {_DTYPES}; got {a.dtype} and {b.dtype}")
    if a.device != b.device:
        raise ValueError(f"matmul: a and b are on different devices ({a.device}, {b.device})")
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    if M == 0 or N == 0:
        return c
    if K == 0:
        return c.zero_()
    launch = kernel if kernel is not None else matmul_kernel
    launch(a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    return c


def matmul_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The torch result `matmul` must match: the product in fp32, cast back to the input dtype."""
    return (a.float() @ b.float()).to(a.dtype)
