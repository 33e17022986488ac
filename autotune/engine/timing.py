"""Timers: CUDA events (L2 flush, GPU-side delay, optional CUDA graph) on a GPU, wall clock in the interpreter."""

from __future__ import annotations

import contextlib
import math
import numbers
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from ..errors import OptionError
from ..fork_safety import reset_in_forked_child

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
            if _scalar(result) is not None:
                samples = [_scalar(result)]
            else:
                values = [_scalar(x) for x in result]
                if not values or None in values:
                    raise ValueError("no times")
                samples = values
        except (TypeError, ValueError):
            # The user's function, not the config: every config would fail alike.
            raise OptionError(
                f"do_bench= returned {type(result).__name__} {result!r}: it must return the time in "
                "milliseconds, a number or a list of numbers"
            ) from None
        if not all(math.isfinite(ms) and ms >= 0 for ms in samples):  # this config's measurement failed
            raise ValueError(f"do_bench= returned {result!r} for this config: a time is a finite number of ms >= 0")
        return samples


def _scalar(value: Any) -> Any:
    """`value` as a float when it is one number (a Python or numpy number, a 0-d tensor; not a bool), else None."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return None
    if isinstance(value, numbers.Real):
        return float(value)
    if getattr(value, "ndim", None) == 0 and callable(getattr(value, "item", None)):
        return _scalar(value.item())
    return None


_DEFAULT_L2_BYTES = 256 * 1024 * 1024  # Triton's do_bench uses 256 MB where the L2 size is unknown


# The GPU sleep that holds the stream while the host queues the reps (`torch.cuda._sleep` spins for a number of
# clock cycles): cycles per second assumed when sizing it (about a data-centre GPU's boost clock; a slower clock
# only sleeps longer), its longest, and how many times the reps are queued behind a sleep before the last
# samples are kept as they are.
_SLEEP_HZ = 2.0e9
_MAX_HOLD_CYCLES = int(0.25 * _SLEEP_HZ)
_HELD_TRIES = 3

# While reps are queued, a thread waiting for the GIL asks for it after this long instead of CPython's 5 ms, so
# threads running Python beside the measuring one (a tuning's compile threads) delay the queueing ~100x less.
_QUEUEING_SWITCH_S = 5e-5
_switch_lock = threading.Lock()
_switch_users = 0
_switch_saved = 0.0
_switch_lowered = 0.0  # as CPython reads it back (it keeps whole microseconds)


@reset_in_forked_child
def _after_fork_in_child() -> None:
    """A child forked while another thread queued reps has no thread queueing them: its lock starts free, and the
    program's switch interval comes back (unless it set its own meanwhile)."""
    global _switch_lock, _switch_users
    _switch_lock = threading.Lock()
    if _switch_users and sys.getswitchinterval() == _switch_lowered:
        sys.setswitchinterval(_switch_saved)
    _switch_users = 0


@contextlib.contextmanager
def _quick_gil_handoff() -> Iterator[None]:
    """CPython's switch interval lowered while any thread queues reps; the caller's value comes back after the
    last one, unless someone else set another meanwhile."""
    global _switch_users, _switch_saved, _switch_lowered
    with _switch_lock:
        if _switch_users == 0:
            _switch_saved = sys.getswitchinterval()
            sys.setswitchinterval(min(_switch_saved, _QUEUEING_SWITCH_S))
            _switch_lowered = sys.getswitchinterval()
        _switch_users += 1
    try:
        yield
    finally:
        with _switch_lock:
            _switch_users -= 1
            if _switch_users == 0 and sys.getswitchinterval() == _switch_lowered:
                sys.setswitchinterval(_switch_saved)


class CudaEventTimer:
    """CUDA events around each rep on the caller's current stream.

    Before each rep, an L2-sized buffer is zeroed (queued before the start event, so it is not timed);
    before the timed reps, a GPU-side sleep holds the stream while the host queues every rep, so neither launch
    overhead nor a host thread kept from the GIL (compile threads of the same tuning) is what gets measured. If
    the sleep ended before the last rep was queued, the reps are run again behind a sleep sized to the host's
    pace, which later measurements keep. While the reps are queued, CPython's switch interval is lowered so that
    the measuring thread gets the GIL back quickly. With `cuda_graph`, one call is captured and replayed.
    """

    def __init__(self, *, flush_l2: bool = True, cuda_graph: bool = False, delay_cycles: int = 1_000_000) -> None:
        import torch

        self.torch = torch
        self.flush_l2 = flush_l2
        self.cuda_graph = cuda_graph
        self.delay_cycles = delay_cycles
        self.hold_cycles = delay_cycles  # the sleep the next measurement starts with: grows when the host lags
        self.late_measurements = 0  # measurements whose host still lagged behind the longest sleep
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
                if before is not None:  # setup= / restore_value / reset_to_zero before every run (DESIGN section 6)
                    before()
                fn()  # Triton needs one eager launch on the capture stream before capture
                side.synchronize()
                with torch.cuda.graph(graph, stream=side):
                    fn()
            stream.wait_stream(side)
            run = graph.replay
        if self.flush_l2:
            self._buffer()  # allocated before the reps are held, not while they are queued
        for _ in range(_HELD_TRIES):
            held_s = self.hold_cycles / _SLEEP_HZ
            samples, queued_s, ahead = self._held_reps(run, reps, before, stream)
            if ahead:  # shrink a grown sleep back to this pace, with room to spare
                self.hold_cycles = max(self.delay_cycles, min(self.hold_cycles, int(4 * queued_s * _SLEEP_HZ)))
                return samples
            if queued_s >= held_s and self.hold_cycles > self.delay_cycles:
                break  # a longer sleep made the host slower: it waits for the GPU (a `setup=` that synchronizes)
            self.hold_cycles = min(max(2 * self.hold_cycles, int(2 * queued_s * _SLEEP_HZ)), _MAX_HOLD_CYCLES)
        self.hold_cycles = self.delay_cycles  # no sleep helped: the next measurement starts afresh
        self.late_measurements += 1
        return samples

    def _held_reps(self, run: Thunk, reps: int, before: Thunk | None, stream: Any) -> tuple[list[float], float, bool]:
        """The reps queued behind a sleep: (samples, seconds the host took to queue them, whether the GPU was
        still asleep when the last one was queued, so that no host delay can fall inside a timed rep)."""
        torch = self.torch
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        awake = torch.cuda.Event()
        with _quick_gil_handoff():
            began = time.perf_counter()
            torch.cuda._sleep(self.hold_cycles)
            awake.record(stream)
            for i in range(reps):
                if before is not None:
                    before()
                if self.flush_l2:
                    self.flush()
                starts[i].record(stream)
                run()
                ends[i].record(stream)
            ahead = not awake.query()
            queued_s = time.perf_counter() - began
        torch.cuda.synchronize()
        return [s.elapsed_time(e) for s, e in zip(starts, ends)], queued_s, ahead


def make_timer(
    *, on_gpu: bool, do_bench: Callable[[Thunk], Any] | None = None, flush_l2: bool = True, cuda_graph: bool = False
) -> Timer:
    """The timer for this run: the user's `do_bench`, else CUDA events on a GPU, else the wall clock."""
    if do_bench is not None:
        return CallableTimer(do_bench)
    if on_gpu:
        return CudaEventTimer(flush_l2=flush_l2, cuda_graph=cuda_graph)
    return WallClockTimer()
