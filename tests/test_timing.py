"""The CUDA-event timer against a simulated stream (no GPU here): a host thread that falls behind the GPU, as one
kept from the GIL by a tuning's compile threads does, must not be what the samples measure."""

from __future__ import annotations

import types

import pytest

from autotune.engine import timing
from autotune.engine.timing import CudaEventTimer

KERNEL_S = 13e-6  # a short kernel: the case where a lagging host shows most


class SimulatedCuda:
    """One stream, in order: an op queued at host time h starts at max(h, when the GPU is free). The host clock
    moves only when the kernel is launched, by `launch_s()` each time (the host's pace)."""

    def __init__(self, launch_s) -> None:
        self.launch_s = launch_s
        self.host = 0.0
        self.gpu_free = 0.0
        self.sleeps: list[int] = []

    def queue(self, duration_s: float) -> float:
        start = max(self.host, self.gpu_free)
        self.gpu_free = start + duration_s
        return start

    def module(self) -> types.SimpleNamespace:
        sim = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                self.at: float | None = None

            def record(self, stream=None) -> None:
                self.at = sim.queue(0.0)

            def query(self) -> bool:
                return self.at is not None and self.at <= sim.host

            def elapsed_time(self, end: Event) -> float:
                return (end.at - self.at) * 1e3

        def sleep(cycles: int) -> None:
            sim.sleeps.append(cycles)
            sim.queue(cycles / timing._SLEEP_HZ)

        cuda = types.SimpleNamespace(Event=Event, current_stream=lambda: None, _sleep=sleep, synchronize=lambda: None)
        return types.SimpleNamespace(cuda=cuda)

    def kernel(self) -> None:
        self.host += self.launch_s()
        self.queue(KERNEL_S)


@pytest.fixture
def host_clock(monkeypatch):
    """The timer reads the simulated host clock (the seconds it took to queue the reps)."""
    sims: list[SimulatedCuda] = []
    monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=lambda: sims[0].host))
    return sims


def _timer(sim: SimulatedCuda) -> CudaEventTimer:
    timer = CudaEventTimer(flush_l2=False)
    timer.torch = sim.module()
    return timer


def test_a_host_kept_from_the_gil_is_not_timed_the_reps_are_queued_again_behind_a_longer_sleep(host_clock):
    # Every fourth launch waits 40 ms for the GIL (eight compile threads holding it 5 ms each): far longer than
    # the default sleep (1e6 cycles, 0.5 ms), so the first reps ran while the host was still queueing them.
    launches = iter(range(10_000))
    sim = SimulatedCuda(lambda: 0.040 if next(launches) % 4 == 3 else 20e-6)
    host_clock.append(sim)
    timer = _timer(sim)
    samples = timer.measure(sim.kernel, warmup=2, reps=10)
    assert samples == pytest.approx([KERNEL_S * 1e3] * 10)
    assert len(sim.sleeps) == 2 and sim.sleeps[0] == timer.delay_cycles
    assert sim.sleeps[1] > 0.08 * timing._SLEEP_HZ  # twice the ~80 ms the host took to queue the first reps
    assert timer.late_measurements == 0

    # The next measurement starts behind the grown sleep, and once the host keeps up it shrinks back.
    sim.launch_s = lambda: 20e-6
    assert timer.measure(sim.kernel, warmup=0, reps=10) == pytest.approx([KERNEL_S * 1e3] * 10)
    assert sim.sleeps[2] == sim.sleeps[1]
    assert timer.hold_cycles == pytest.approx(4 * 10 * 20e-6 * timing._SLEEP_HZ, rel=0.01)  # 4x this pace


def test_without_the_sleep_check_the_same_host_would_have_been_timed(host_clock):
    """The simulation shows the harm: the reps queued behind the default sleep alone are inflated."""
    launches = iter(range(10_000))
    sim = SimulatedCuda(lambda: 0.040 if next(launches) % 4 == 3 else 20e-6)
    host_clock.append(sim)
    timer = _timer(sim)
    samples, queued_s, ahead = timer._held_reps(sim.kernel, 10, None, None)
    assert not ahead and queued_s > 0.08
    assert max(samples) > 10 * KERNEL_S * 1e3


def test_a_host_slower_than_the_longest_sleep_keeps_its_last_samples_and_is_counted(host_clock):
    sim = SimulatedCuda(lambda: 0.1)  # 1 s to queue ten reps: over the 0.25 s cap
    host_clock.append(sim)
    timer = _timer(sim)
    samples = timer.measure(sim.kernel, warmup=0, reps=10)
    assert len(samples) == 10
    assert sim.sleeps == [timer.delay_cycles, timing._MAX_HOLD_CYCLES]  # the longest did not help: no third
    assert timer.late_measurements == 1 and timer.hold_cycles == timer.delay_cycles


def test_a_setup_that_waits_for_the_gpu_is_not_held_ever_longer(host_clock):
    """A `before` that synchronizes (`.item()`, a copy from pageable memory) makes the host wait out every sleep:
    a longer one cannot help, so the timer stops at the second try and the next measurement starts afresh."""
    sim = SimulatedCuda(lambda: 20e-6)

    def synchronize() -> None:
        sim.host = max(sim.host, sim.gpu_free)

    host_clock.append(sim)
    timer = _timer(sim)
    for _ in range(3):
        assert len(timer.measure(sim.kernel, warmup=0, reps=10, before=synchronize)) == 10
    assert len(sim.sleeps) == 6 and sim.sleeps[::2] == [timer.delay_cycles] * 3
    assert max(sim.sleeps) < 0.01 * timing._SLEEP_HZ  # never near the cap
    assert timer.late_measurements == 3


def test_the_reps_are_queued_with_a_short_switch_interval_and_the_callers_comes_back(host_clock):
    """Eight threads running Python kept an H200's measuring thread ~25 ms from the GIL at each launch (5 ms
    switch interval): 20 reps took seconds to queue, longer than any sleep. While reps are queued, a thread
    waiting for the GIL asks for it after 50 us instead."""
    import sys

    seen: list[float] = []
    sim = SimulatedCuda(lambda: seen.append(sys.getswitchinterval()) or 20e-6)
    host_clock.append(sim)
    before = sys.getswitchinterval()
    assert before > timing._QUEUEING_SWITCH_S
    _timer(sim).measure(sim.kernel, warmup=1, reps=5)
    assert seen[0] == before  # the warm-up is not queued behind a sleep
    assert seen[1:] == [pytest.approx(timing._QUEUEING_SWITCH_S, rel=0.05)] * 5
    assert sys.getswitchinterval() == before


def test_the_switch_interval_comes_back_after_the_last_of_two_overlapping_measurements():
    import sys

    before = sys.getswitchinterval()
    with timing._quick_gil_handoff():
        with timing._quick_gil_handoff():
            assert sys.getswitchinterval() == pytest.approx(timing._QUEUEING_SWITCH_S, rel=0.05)
        assert sys.getswitchinterval() < before  # the other is still queueing
    assert sys.getswitchinterval() == before


def test_a_switch_interval_set_while_reps_are_queued_is_kept():
    import sys

    before = sys.getswitchinterval()
    try:
        with timing._quick_gil_handoff():
            sys.setswitchinterval(0.002)  # the program's own choice, made meanwhile
        assert sys.getswitchinterval() == 0.002
    finally:
        sys.setswitchinterval(before)


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_child_forked_while_reps_are_queued_gets_the_programs_switch_interval_back():
    """A DataLoader worker forked while a tuning thread queues reps has no thread queueing them."""
    import os
    import sys
    import threading

    before = sys.getswitchinterval()
    inside, done = threading.Event(), threading.Event()

    def measuring() -> None:
        with timing._quick_gil_handoff():
            inside.set()
            done.wait()

    thread = threading.Thread(target=measuring)
    thread.start()
    inside.wait()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its interval and how many it counts as queueing
        os.write(write, f"{sys.getswitchinterval()} {timing._switch_users}".encode())
        os._exit(0)
    os.close(write)
    try:
        os.waitpid(pid, 0)
        interval, users = os.read(read, 100).decode().split()
    finally:
        os.close(read)
        done.set()
        thread.join()
    assert float(interval) == before and users == "0"
    assert sys.getswitchinterval() == before
