"""GPU-only checks (marked `gpu`, skipped without CUDA): the CUDA-event timer, the L2 flush, CUDA graphs,
and the JIT compile path of a real tuning."""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu


def test_cuda_event_timer_scales_with_gpu_work():
    from autotune.timing import CudaEventTimer

    timer = CudaEventTimer(flush_l2=False)
    short = timer.measure(lambda: torch.cuda._sleep(200_000), warmup=1, reps=10)
    long = timer.measure(lambda: torch.cuda._sleep(800_000), warmup=1, reps=10)
    assert len(short) == len(long) == 10
    assert min(long) > 2.5 * min(short) > 0


def test_l2_flush_is_not_timed():
    from autotune.timing import CudaEventTimer

    timer = CudaEventTimer(flush_l2=True)
    flush_only = CudaEventTimer(flush_l2=False).measure(timer.flush, warmup=1, reps=5)
    x = torch.zeros(16, device="cuda")
    tiny = timer.measure(lambda: x.add_(1), warmup=1, reps=20)
    assert timer._buffer().numel() >= torch.cuda.get_device_properties(0).L2_cache_size
    assert max(tiny) < min(flush_only)


def test_cuda_graph_timing():
    from autotune.timing import CudaEventTimer

    x = torch.zeros(1 << 20, device="cuda")
    samples = CudaEventTimer(cuda_graph=True).measure(lambda: x.mul_(1.0001), warmup=2, reps=10)
    assert len(samples) == 10 and all(s > 0 for s in samples)


def test_tuning_on_gpu_compiles_in_the_pool_and_the_winner_launch_compiles_nothing():
    import triton
    from triton import knobs

    from autotune import TrialStatus, Tuning, autotune
    from kernels_for_tests import add_kernel

    compiles = []
    knobs.runtime.jit_post_compile_hook = lambda *a, **k: compiles.append(1)
    try:
        add = autotune(space={"BLOCK": (128, 256, 512, 1024), "num_warps": (2, 4)}, key=["n"],
                       grid="(cdiv(n, $BLOCK),)", tuning=Tuning(compile_workers=4))(add_kernel)
        n = 1 << 20
        x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        out = torch.empty_like(x)
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            add(x, y, out, n)
        stream.synchronize()
        torch.testing.assert_close(out, x + y)
        record = add.record()
        assert all(t.status is TrialStatus.OK for t in record.trials)
        after_tuning = len(compiles)
        add(x, y, out, n)
        torch.cuda.synchronize()
        assert len(compiles) == after_tuning, "the winner's launch compiled again"
        assert triton.__version__
    finally:
        knobs.runtime.jit_post_compile_hook = None
