"""Tune across torch.distributed ranks: the ranks share the tuning work and all launch the same config.

Run on a CPU (gloo; Triton's interpreter, which this script turns on when there is no CUDA GPU):

    torchrun --nproc_per_node=2 examples/distributed_tuning.py

On GPUs (nccl, one GPU per rank; the script calls torch.cuda.set_device(LOCAL_RANK) before any kernel
call, which nccl's object collectives need):

    torchrun --nproc_per_node=<number of GPUs> examples/distributed_tuning.py

Without torchrun (`python examples/distributed_tuning.py`) there is no process group: every mode tunes
locally, as a single process does.

What it shows:
  1. `Tuning(distributed="shard")`: the 8 configs are dealt round-robin to the ranks; each rank measures
     only its own, the trials are gathered, and every rank launches the same winner.
  2. `Tuning(distributed="rank0")`: rank 0 measures everything; the others receive its winner.
  3. A second call with the same key is a memory hit on every rank: no communication at all.
Only rank 0 reads and writes the disk cache (AUTOTUNE_CACHE_DIR; a temporary directory when it is not set).
"""

from __future__ import annotations

import os
import tempfile
from datetime import timedelta

import torch

_HAS_CUDA = torch.cuda.is_available()
if not _HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")  # must be set before triton is imported

import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from autotune import CartesianSpace, Tuning, autotune  # noqa: E402
from autotune.modes import distributed as autotune_distributed  # noqa: E402

SPACE = CartesianSpace(BLOCK=(64, 128, 256, 512), num_warps=(2, 4))


@triton.jit
def axpy_kernel(x, y, out, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, alpha * tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


def tuned(mode: str):
    """The same kernel, autotuned with the given distributed mode (a fresh wrapper, so a fresh memory cache)."""
    return autotune(space=SPACE, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=Tuning(preset="fast", distributed=mode))(
        axpy_kernel
    )


def show(kernel, n: int, rank: int, world: int, device: str) -> None:
    torch.manual_seed(rank)  # each rank has its own data; the config must be the same anyway
    x, y = torch.randn(n, device=device), torch.randn(n, device=device)
    out = torch.empty_like(x)
    kernel(x, y, out, 2.0, n)
    correct = torch.allclose(out, 2.0 * x + y)
    agreement = autotune_distributed.agreements(kernel)[-1] if world > 1 else None
    mine = (
        sorted(
            (dict(c) for c, r in agreement.measured_by.items() if r == rank), key=lambda c: (c["BLOCK"], c["num_warps"])
        )
        if agreement
        else "all (no process group)"
    )
    print(f"[rank {rank}] measured {mine}; launched {dict(kernel.best_config)}; correct: {correct}", flush=True)
    if world > 1:
        launched: list = [None] * world
        dist.all_gather_object(launched, dict(kernel.best_config))
        if rank == 0:
            same = all(c == launched[0] for c in launched)
            print(
                f"[rank 0] {agreement.mode}: all {world} ranks launched the same config: {same} "
                f"({launched[0]}, found by rank 0: {agreement.source})",
                flush=True,
            )


def main() -> None:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if _HAS_CUDA:
            torch.cuda.set_device(local_rank)  # before any kernel call: nccl object collectives use it
        # The group's timeout is autotune's timeout too: it must exceed the longest tuning.
        dist.init_process_group("nccl" if _HAS_CUDA else "gloo", timeout=timedelta(minutes=10))
    rank = dist.get_rank() if world > 1 else 0
    device = "cuda" if _HAS_CUDA else "cpu"
    n = 1 << 16 if _HAS_CUDA else 2048

    shard_kernel = tuned("shard")
    show(shard_kernel, n, rank, world, device)
    show(tuned("rank0"), n + 1, rank, world, device)
    again = shard_kernel.cache_info()
    x = torch.ones(n, device=device)
    shard_kernel(x, x, torch.empty_like(x), 1.0, n)
    hits = shard_kernel.cache_info()["hits"] - again["hits"]
    print(f"[rank {rank}] second call with the same key: memory hit ({hits}), no communication", flush=True)
    if world > 1:
        dist.barrier()
        if rank == 0:
            print("distributed tuning: shared work, one winner on every rank", flush=True)
        dist.destroy_process_group()


if __name__ == "__main__":
    if os.environ.get("AUTOTUNE_CACHE_DIR"):
        main()
    else:  # a private cache, removed at the end, so the example tunes every time and leaves nothing behind
        with tempfile.TemporaryDirectory(prefix="autotune-distributed-") as tmp:
            os.environ["AUTOTUNE_CACHE_DIR"] = tmp
            main()
