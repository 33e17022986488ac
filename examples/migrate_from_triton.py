"""Moving a `triton.autotune` kernel to autotune: change one import, nothing else.

The kernel below is Triton's tutorial 03 (matrix multiplication) as written for `triton.autotune`, with
its `triton.Config` list, `key=['M', 'N', 'K']` and a Triton-style `kernel[grid](...)` launch. The edit:

    +from autotune.compat import autotune
    -@triton.autotune(
    +@autotune(

(a project that writes `from triton import autotune` changes only that import line).

What that buys, with no other change: the configs are compiled in a thread pool and measured as each
one is ready; the winner is stored in a file-locked disk cache that the next process (and every rank on
the node) reads instead of tuning again; a config that fails is recorded and skipped; and it all runs
on a CPU through Triton's interpreter, where `triton.autotune` itself cannot benchmark.

The config list is cut to the tutorial's smaller tiles and the matrices are small so the interpreter
finishes in seconds. The cache directory is AUTOTUNE_CACHE_DIR; when that is not set the example uses a
temporary one, so every run shows a first tuning.

Runs on a CPU through Triton's interpreter:  python examples/migrate_from_triton.py
"""

from __future__ import annotations

import os
import tempfile

try:
    import torch

    _HAS_CUDA = torch.cuda.is_available()
except Exception:  # noqa: BLE001 - no usable torch CUDA: fall back to the interpreter
    _HAS_CUDA = False
if not _HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")  # must be set before triton is imported

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from autotune.compat import autotune  # noqa: E402  <- the one changed import

DEVICE = "cuda" if os.environ.get("TRITON_INTERPRET", "0") != "1" else "cpu"


def get_cuda_autotune_config():
    # Four of the tutorial's configs, unchanged (the ones with smaller tiles, for the interpreter).
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


# `triton.jit`'ed functions can be auto-tuned by using the `triton.autotune` decorator, which consumes:
#   - A list of `triton.Config` objects that define different configurations of
#       meta-parameters (e.g., `BLOCK_SIZE_M`) and compilation options (e.g., `num_warps`) to try
#   - An auto-tuning *key* whose change in values will trigger evaluation of all the
#       provided configs
@autotune(  # was: @triton.autotune(
    configs=get_cuda_autotune_config(),
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
    # The stride variables represent how much to increase the ptr by when moving by 1
    # element in a particular dimension. E.g. `stride_am` is how much to increase `a_ptr`
    # by to get the element one row down (A has M rows).
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
    # Map program ids `pid` to the block of C it should compute, in grouped order for L2 reuse.
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

    # Pointers to the first blocks of A and B, advanced along K as the loop accumulates.
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

    # Write back the block of the output matrix C with masks.
    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)


@triton.jit
def leaky_relu(x):
    return tl.where(x >= 0, x, 0.01 * x)


def matmul(a, b, activation="", kernel=matmul_kernel):
    """The tutorial's wrapper (plus `kernel=`, so the example can launch a second decoration of it)."""
    # Check constraints.
    assert a.shape[1] == b.shape[0], "Incompatible dimensions"
    assert a.is_contiguous(), "Matrix A must be contiguous"
    M, K = a.shape
    K, N = b.shape
    # Allocates output.
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    # 1D launch kernel where each block gets its own program.
    grid = lambda META: (triton.cdiv(M, META["BLOCK_SIZE_M"]) * triton.cdiv(N, META["BLOCK_SIZE_N"]),)  # noqa: E731
    kernel[grid](
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


def main() -> None:
    torch.manual_seed(0)
    a = torch.rand((32, 32), device=DEVICE, dtype=torch.float16) - 0.5
    b = torch.rand((32, 48), device=DEVICE, dtype=torch.float16) - 0.5

    kernel = matmul_kernel
    triton_output = matmul(a, b)  # tunes the key (32, 48, 32)
    torch_output = torch.matmul(a.float(), b.float()).half()
    match = torch.allclose(triton_output, torch_output, atol=1e-2, rtol=0)
    print(f"Triton and Torch match: {match}")
    print(f"best_config: {kernel.best_config}")
    print(
        f"tuned {len(kernel.configs_timings)} configs in {kernel.bench_time:.2f}s "
        f"({'interpreter, wall clock' if DEVICE == 'cpu' else 'GPU'}):"
    )
    for config, (median, p20, p80) in kernel.configs_timings.items():
        mark = "  <- winner" if config is kernel.best_config else ""
        print(
            f"  {config.kwargs} num_warps={config.num_warps} num_stages={config.num_stages}: "
            f"median {median:.3f} ms (p20 {p20:.3f}, p80 {p80:.3f}){mark}"
        )
    print(f"cache: {[(key, str(config.kwargs)) for key, config in kernel.cache.items()]}")

    # The next process decorates the same kernel afresh: an empty memory cache in front of the disk.
    # (cache_info() counts per kernel name in this process, so compare before and after.)
    before = kernel.cache_info()
    next_process = autotune(configs=get_cuda_autotune_config(), key=["M", "N", "K"])(matmul_kernel.fn)
    again = matmul(a, b, kernel=next_process)
    after = next_process.cache_info()
    from_disk = after["disk_hits"] == before["disk_hits"] + 1 and after["tunings"] == before["tunings"]
    print(
        f"next process: winner read from the disk cache without tuning: {from_disk}, "
        f"same winner: {str(next_process.best_config) == str(kernel.best_config)}, "
        f"output equal: {torch.equal(again, triton_output)}"
    )
    assert match
    print("migrated from triton.autotune by changing one import")


if __name__ == "__main__":
    if os.environ.get("AUTOTUNE_CACHE_DIR"):
        main()
    else:
        with tempfile.TemporaryDirectory(prefix="autotune-migrate-") as tmp:
            os.environ["AUTOTUNE_CACHE_DIR"] = tmp
            main()
