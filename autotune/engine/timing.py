"""Timers: CUDA events (L2 flush, GPU-side delay, optional CUDA graph) on a GPU, wall clock in the interpreter."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ..errors import OptionError

Thunk = Callable[[], Any]


class Timer(Protocol):
    """Measures a thunk: `warmup` untimed runs, then `reps` timed runs, returning one sample (ms) per rep."""

    def measure(self, fn: Thunk, *, warmup: int, reps: int, before: Thunk | None = None) -> list[float]:
        """`before` runs before every rep (warm-up included) and is never timed."""
        ...


def summarize(samples: Sequence[float]) -> tuple[float, float]:
    """(median, min) of the samples in ms; the median is what picks the winner."""
    return float(statistics.median(samples)), float(min(samples))


class WallClockTimer:
    """`time.perf_counter` around each synchronous call: the timer for Triton's CPU interpreter."""

    def measure(self, fn: Thunk, *, warmup: int, reps: int, before: Thunk | None = None) -> list[float]:
        for _ in range(warmup):
            if before is not None:
                before()
            fn()
        samples = []
        for _ in range(reps):
            if before is not None:
                before()
            start = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - start) * 1e3)
        return samples


class CallableTimer:
    """Wraps a user's `do_bench(fn) -> ms | [ms, ...]`, so any benchmarking function can stand in."""

    def __init__(self, do_bench: Callable[[Thunk], Any]) -> None:
        self.do_bench = do_bench

    def measure(self, fn: Thunk, *, warmup: int, reps: int, before: Thunk | None = None) -> list[float]:
        def call() -> Any:
            if before is not None:
                before()
            return fn()

        result = self.do_bench(call)
        try:
            if isinstance(result, (int, float)) and not isinstance(result, bool):
                return [float(result)]
            values = list(result)
            if not values or any(isinstance(x, bool) for x in values):
                raise ValueError("no times")
            return [float(x) for x in values]
        except (TypeError, ValueError):
            # The user's function, not the config: every config would fail alike.
            raise OptionError(
                f"do_bench= returned {type(result).__name__} {result!r}: it must return the time in "
                "milliseconds, a number or a list of numbers"
            ) from None


_DEFAULT_L2_BYTES = 256 * 1024 * 1024  # Triton's do_bench uses 256 MB where the L2 size is unknown


class CudaEventTimer:
    """CUDA events around each rep on the caller's current stream.

    Before each rep, an L2-sized buffer is zeroed (queued before the start event, so it is not timed);
    before the timed reps, a short GPU-side sleep lets the host queue every launch ahead of the GPU, so
    host launch overhead is not what gets measured. With `cuda_graph`, one call is captured and replayed.
    """

    def __init__(self, *, flush_l2: bool = True, cuda_graph: bool = False, delay_cycles: int = 1_000_000) -> None:
        import torch

        self.torch = torch
        self.flush_l2 = flush_l2
        self.cuda_graph = cuda_graph
        self.delay_cycles = delay_cycles
        self._flush_buffer: Any | None = None

    def _buffer(self) -> Any:
        if self._flush_buffer is None:
            torch = self.torch
            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            l2 = int(getattr(props, "L2_cache_size", 0) or _DEFAULT_L2_BYTES)
            self._flush_buffer = torch.empty(2 * l2, dtype=torch.int8, device="cuda")
        return self._flush_buffer

    def flush(self) -> None:
        """Evict the L2 cache by writing a buffer twice its size."""
        self._buffer().zero_()

    def measure(self, fn: Thunk, *, warmup: int, reps: int, before: Thunk | None = None) -> list[float]:
        torch = self.torch
        stream = torch.cuda.current_stream()
        for _ in range(warmup):
            if before is not None:
                before()
            fn()
        run = fn
        if self.cuda_graph:
            graph = torch.cuda.CUDAGraph()
            side = torch.cuda.Stream()
            side.wait_stream(stream)
            with torch.cuda.stream(side):
                fn()  # Triton needs one eager launch on the capture stream before capture
                side.synchronize()
                with torch.cuda.graph(graph, stream=side):
                    fn()
            stream.wait_stream(side)
            run = graph.replay
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        torch.cuda._sleep(self.delay_cycles)
        for i in range(reps):
            if before is not None:
                before()
            if self.flush_l2:
                self.flush()
            starts[i].record(stream)
            run()
            ends[i].record(stream)
        torch.cuda.synchronize()
        return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def make_timer(
    *, on_gpu: bool, do_bench: Callable[[Thunk], Any] | None = None, flush_l2: bool = True, cuda_graph: bool = False
) -> Timer:
    """The timer for this run: the user's `do_bench`, else CUDA events on a GPU, else the wall clock."""
    if do_bench is not None:
        return CallableTimer(do_bench)
    if on_gpu:
        return CudaEventTimer(flush_l2=flush_l2, cuda_graph=cuda_graph)
    return WallClockTimer()
