"""GPU-only checks (marked `gpu`, skipped without CUDA): the CUDA-event timer, the L2 flush, CUDA graphs,
the JIT compile path of a real tuning, and isolation against a real illegal address."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

TESTS = Path(__file__).resolve().parent

pytestmark = pytest.mark.gpu


def test_cuda_event_timer_scales_with_gpu_work():
    from autotune.engine.timing import CudaEventTimer

    timer = CudaEventTimer(flush_l2=False)
    short = timer.measure(lambda: torch.cuda._sleep(200_000), warmup=1, reps=10)
    long = timer.measure(lambda: torch.cuda._sleep(800_000), warmup=1, reps=10)
    assert len(short) == len(long) == 10
    assert min(long) > 2.5 * min(short) > 0


def test_l2_flush_is_not_timed():
    from autotune.engine.timing import CudaEventTimer

    timer = CudaEventTimer(flush_l2=True)
    flush_only = CudaEventTimer(flush_l2=False).measure(timer.flush, warmup=1, reps=5)
    x = torch.zeros(16, device="cuda")
    tiny = timer.measure(lambda: x.add_(1), warmup=1, reps=20)
    assert timer._buffer().numel() >= torch.cuda.get_device_properties(0).L2_cache_size
    assert max(tiny) < min(flush_only)


def test_a_measuring_thread_kept_from_the_gil_still_times_the_kernel():
    """Eight threads running Python (as a tuning's compile threads do) keep the measuring thread from the GIL for
    ~5 ms at a time; the timer's held sleep keeps the samples near the quiet ones (on an H200, a 13 us softmax
    measured 10x and more while configs compiled, before the sleep was checked)."""
    import statistics
    import threading

    from autotune.engine.timing import CudaEventTimer

    x = torch.zeros(1 << 16, device="cuda")
    quiet = statistics.median(CudaEventTimer().measure(lambda: x.add_(1), warmup=2, reps=20))
    stop = threading.Event()

    def hold_the_gil() -> None:
        while not stop.is_set():
            sum(range(1000))

    threads = [threading.Thread(target=hold_the_gil) for _ in range(8)]
    for thread in threads:
        thread.start()
    try:
        timer = CudaEventTimer()
        busy = [statistics.median(timer.measure(lambda: x.add_(1), warmup=2, reps=20)) for _ in range(5)]
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert max(busy) < 2 * quiet, (busy, quiet)


def test_cuda_graph_timing():
    from autotune.engine.timing import CudaEventTimer

    x = torch.zeros(1 << 20, device="cuda")
    samples = CudaEventTimer(cuda_graph=True).measure(lambda: x.mul_(1.0001), warmup=2, reps=10)
    assert len(samples) == 10 and all(s > 0 for s in samples)


def test_tuning_on_gpu_compiles_in_the_pool_and_the_winner_launch_compiles_nothing():
    """In-process (isolate="off"): each config compiles once, on a pool thread, through Triton's AsyncCompileMode,
    and the winner's launch finds its binary in the JIT's cache."""
    import threading

    import triton
    import triton.language as tl
    from triton import knobs

    from autotune import TrialStatus, Tuning, autotune

    @triton.jit
    def add_kernel(x, y, out, n, BLOCK: tl.constexpr):  # this test's own: no other test has compiled it
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)

    compiles, compile_threads = [], []
    knobs.runtime.jit_post_compile_hook = lambda *a, **k: compiles.append(1)
    knobs.compilation.listener = lambda **k: compile_threads.append(threading.current_thread().name)
    try:
        add = autotune(
            space={"BLOCK": (128, 256, 512, 1024), "num_warps": (2, 4)},
            key=["n"],
            grid="(cdiv(n, $BLOCK),)",
            tuning=Tuning(compile_workers=4, isolate="off"),
        )(add_kernel)
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
        assert len(compiles) == 8, "one compile per config"
        assert compile_threads and all(t.startswith("autotune-compile") for t in compile_threads), compile_threads
        add(x, y, out, n)
        torch.cuda.synchronize()
        assert len(compiles) == 8, "the winner's launch compiled again"
    finally:
        knobs.runtime.jit_post_compile_hook = None
        knobs.compilation.listener = None


_ISOLATED_CHILD = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, {tests!r})
    import torch
    from isolation_kernels import {kernel} as kernel
    n = 1 << 16
    x, y, out = (torch.randn(n, device="cuda") for _ in range(3))
    kernel(x, y, out, n)
    torch.cuda.synchronize()
    record = kernel.record()
    print(json.dumps({{"ok": bool(torch.allclose(out, x + y)), "winner": dict(record.winner),
                      "trials": [[dict(t.config), t.status.value, t.error] for t in record.trials]}}))
""")


def _isolated_child(kernel: str, tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    # this checkout first, then the caller's path (the GPU image imports msgspec from bench/gpu_suite.sh's wheels)
    env.update(
        TRITON_CACHE_DIR=str(tmp_path / "triton"),
        AUTOTUNE_CACHE_DIR=str(tmp_path / "autotune"),
        PYTHONPATH=os.pathsep.join(p for p in (str(TESTS.parent), os.environ.get("PYTHONPATH", "")) if p),
    )
    proc = subprocess.run(
        [sys.executable, "-c", _ISOLATED_CHILD.format(tests=str(TESTS), kernel=kernel)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_an_illegal_address_or_a_hang_in_a_worker_costs_that_config_only(tmp_path):
    got = _isolated_child("crashy_add", tmp_path)
    assert got["ok"] and got["winner"]["MODE"] == 0
    statuses = {(c["BLOCK"], c["MODE"]): status for c, status, _ in got["trials"]}
    assert statuses[(32, 1)] == "crashed"  # the wild load: an illegal address, the worker replaced
    assert statuses[(32, 2)] == "timeout"  # a kernel that spins on the GPU: its worker killed, replaced
    assert [statuses[(b, 0)] for b in (64, 128, 256)] == ["ok", "ok", "ok"]


def test_compile_workers_fill_tritons_cache_so_the_parent_compiles_nothing_new(tmp_path):
    got = _isolated_child("gpu_add", tmp_path)
    assert got["ok"] and all(status == "ok" for _, status, _ in got["trials"])
    cubins = list((tmp_path / "triton").rglob("*.cubin"))
    assert len(cubins) == len(got["trials"]), [p.parent.name for p in cubins]  # one per config, none for the launch
