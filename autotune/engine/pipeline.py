"""The compile -> measure pipeline: a thread pool compiles configs; the calling thread takes them in completion order.

Measuring happens on the calling thread (it owns the CUDA stream); compiling happens in the pool, so the
first config is being measured while the last ones are still compiling.
"""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, CancelledError, Executor, Future, wait
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import FailureKind, classify
from ..record import TrialStatus
from ..space.spaces import Config
from .thread_pool import DaemonThreadPool


class Compiler(Protocol):
    """Turns a config into something launchable. `submit` must not block on the compile itself.

    Two optional methods the pipeline calls where a compiler has them: `begin_batch(configs)` before the configs
    just proposed are submitted (the replay schedules their simulated compiles), and `abandon(config)` when the
    compile of `config` passed the timeout (the JIT compiler stops waiting for it)."""

    def session(self, executor: Executor) -> AbstractContextManager[Any]:
        """A context held around every submit and the whole drain (e.g. Triton's AsyncCompileMode)."""
        ...

    def submit(self, config: Config, executor: Executor) -> Future:
        """Start compiling `config` on `executor`; the future resolves when it is compiled, or raises its error."""
        ...

    def finalize(self, config: Config, result: Any) -> Any:
        """Called on the calling thread once `config` compiled (e.g. to install it in Triton's kernel cache)."""
        ...


@dataclass
class CompileOutcome:
    """One config leaving the compile stage: compiled (`status` ok) or with its error."""

    config: Config
    status: TrialStatus
    result: Any = None
    error: BaseException | None = None
    compile_s: float | None = None


class InlineExecutor(Executor):
    """Runs each submitted function at once on the calling thread: `compile_workers=0`."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        clock: dict[str, float] = {}
        future._autotune_clock = clock  # type: ignore[attr-defined]
        try:
            future.set_result(_timed_call(clock, fn, args, kwargs))
        except BaseException as exc:  # noqa: BLE001 - the future carries it to the consumer
            if isinstance(exc, KeyboardInterrupt):
                raise
            future.set_exception(exc)
        return future


@dataclass
class _Submitted:
    config: Config
    future: Future
    submitted_at: float = field(default_factory=time.perf_counter)


def _timed_call(clock: dict[str, float], fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """Run a compile, noting in `clock` when it started ("t") and ended ("end") on its thread."""
    clock["t"] = time.perf_counter()
    try:
        return fn(*args, **kwargs)
    finally:
        clock["end"] = time.perf_counter()


def _twin(future: Future) -> Future:
    """A future of its own that completes as `future` does (and shares its compile's clock)."""
    twin: Future = Future()
    twin._autotune_clock = _clock(future)  # type: ignore[attr-defined]

    def settle(done: Future) -> None:
        if done.cancelled():
            twin.cancel()
        elif done.exception() is not None:
            twin.set_exception(done.exception())
        else:
            twin.set_result(done.result())

    future.add_done_callback(settle)
    return twin


def _clock(future: Future) -> dict[str, float]:
    """The start ("t") and end ("end") of the compile behind `future`, as far as they happened; {} when the
    future did not come from one of our executors (nothing was compiled, e.g. the interpreter)."""
    return getattr(future, "_autotune_clock", {})


def _compile_seconds(future: Future) -> float | None:
    """How long the compile behind `future` ran on its thread (queueing excluded); None if nothing ran."""
    clock = _clock(future)
    return clock["end"] - clock["t"] if "end" in clock else None


def _outcome(sub: _Submitted, compiler: Compiler) -> CompileOutcome:
    elapsed = _compile_seconds(sub.future)
    try:
        result = compiler.finalize(sub.config, sub.future.result())
    except Exception as exc:  # a config's compile error is data: recorded, the config skipped
        return compile_failure(sub.config, exc, elapsed)
    return CompileOutcome(sub.config, TrialStatus.OK, result=result, compile_s=elapsed)


class CompileFailed(Exception):
    """Raised by a compiler whose compile already knows the config's status (a compile worker that crashed,
    timed out or reported the config's own error)."""

    def __init__(self, status: TrialStatus, text: str) -> None:
        super().__init__(text)
        self.status = status


def compile_failure(config: Config, exc: Exception, compile_s: float | None = None) -> CompileOutcome:
    """The outcome of a config whose compile raised `exc`; re-raises what is not the config's own fault."""
    if isinstance(exc, CompileFailed):
        return CompileOutcome(config, exc.status, error=exc, compile_s=compile_s)
    kind = classify(exc, "compile")
    if kind is FailureKind.CONFIG:
        return CompileOutcome(config, TrialStatus.COMPILE_ERROR, error=exc, compile_s=compile_s)
    if kind is FailureKind.OUT_OF_RESOURCES:
        return CompileOutcome(config, TrialStatus.OUT_OF_RESOURCES, error=exc, compile_s=compile_s)
    raise exc


def compile_in_order_of_completion(
    configs: Sequence[Config],
    compiler: Compiler,
    *,
    workers: int,
    timeout_s: float | None = None,
    pool: DaemonThreadPool | None = None,
) -> AbstractContextManager[Iterator[CompileOutcome]]:
    """Context manager yielding an iterator of `CompileOutcome`s in completion order.

    Leaving the context (normally, by an exception or by Ctrl-C) cancels what has not started and waits for
    the compiles in flight, so no pool thread outlives the tuning; on an exception with `timeout_s`, a compile
    still running at its timeout is abandoned instead (its daemon thread ends with it). With `pool` (a pool shared
    by online sessions) the compiles run there instead of in a pool of `workers` threads of this tuning's own, and
    leaving cancels and waits for this tuning's compiles only.
    """
    configs = list(configs)
    return _pipeline(_listed(configs), compiler, workers, timeout_s, ahead=len(configs), pool=pool)


def _listed(configs: list[Config]) -> Callable[[int], list[Config]]:
    """A fixed list as proposals: the first `n` left at each ask (the pipeline asks for all of it at once)."""
    left = list(configs)

    def propose(n: int) -> list[Config]:
        taken = left[:n]
        del left[:n]
        return taken

    return propose


@contextlib.contextmanager
def _pipeline(
    propose: Callable[[int], Sequence[Config]],
    compiler: Compiler,
    workers: int,
    timeout_s: float | None,
    ahead: int = 0,
    pool: DaemonThreadPool | None = None,
) -> Iterator[Iterator[CompileOutcome]]:
    if workers <= 0:
        executor: Executor = InlineExecutor()
        with compiler.session(executor):
            yield _serial(propose, compiler, executor, max(1, ahead))
        return
    executor = StartTrackingExecutor(workers, pool=pool)
    pending: dict[Future, _Submitted] = {}
    try:
        with compiler.session(executor):
            try:
                yield _parallel(propose, compiler, executor, timeout_s, ahead, pending)
            except BaseException:
                # inside the session: leaving it waits for every compile it has not been told to abandon
                _give_up_in_flight(pending, compiler, executor, timeout_s)
                raise
    finally:
        # A compile that timed out cannot be stopped (its thread is abandoned: not joined); everything else is
        # waited for. (Pool threads are daemons: an abandoned compile never holds the process at exit.)
        executor.shutdown(wait=True, cancel_futures=True)


def _give_up_in_flight(
    pending: dict[Future, _Submitted], compiler: Compiler, executor: StartTrackingExecutor, timeout_s: float | None
) -> None:
    """The tuning is failing (an error, Ctrl-C): cancel the queued compiles and, with `timeout_s`, wait for the
    running ones at most until their own timeout, then abandon those still running, so that the exception
    reaches the caller within `compile_timeout_s`. Without a timeout the running compiles are waited for."""
    executor.cancel_queued()
    if timeout_s is None:
        return
    running = {f: sub for f, sub in pending.items() if not f.done()}
    for future in sorted(running, key=lambda f: _clock(f).get("t", time.perf_counter())):
        started = _clock(future).get("t", time.perf_counter())
        with contextlib.suppress(Exception):  # a compile's own error: nobody is waiting for its outcome now
            future.exception(timeout=max(0.0, started + timeout_s - time.perf_counter()))
    _abandon_expired(pending, compiler, executor, 0.0)


def _begin_batch(compiler: Compiler, batch: Sequence[Config]) -> None:
    """Tell a compiler that has the optional `begin_batch` which configs are about to be submitted."""
    begin = getattr(compiler, "begin_batch", None)
    if begin is not None and batch:
        begin(list(batch))


def _serial(
    propose: Callable[[int], Sequence[Config]], compiler: Compiler, executor: Executor, window: int
) -> Iterator[CompileOutcome]:
    """Proposals kept `window` deep, one more asked for each time the caller has measured one: the information
    flow of the parallel pipeline (a strategy hears each result before its next proposal), compiled inline."""
    queue: collections.deque[Config] = collections.deque()

    def refill() -> None:
        if len(queue) >= window:
            return
        batch = list(propose(window - len(queue)))
        _begin_batch(compiler, batch)
        queue.extend(batch)

    refill()
    while queue:
        yield _compile_inline(queue.popleft(), compiler, executor)
        refill()


def _compile_inline(config: Config, compiler: Compiler, executor: Executor) -> CompileOutcome:
    try:
        sub = _Submitted(config, compiler.submit(config, executor))
    except Exception as exc:
        return compile_failure(config, exc)
    return _outcome(sub, compiler)


def compile_as_proposed(
    propose: Callable[[int], Sequence[Config]],
    compiler: Compiler,
    *,
    workers: int,
    ahead: int,
    timeout_s: float | None = None,
) -> AbstractContextManager[Iterator[CompileOutcome]]:
    """As `compile_in_order_of_completion`, for configs proposed as the tuning goes: `propose(n)` is asked for
    up to `n` more whenever fewer than `ahead` are compiling or waiting to be measured, so the pool compiles
    the next proposals while the caller measures the current ones; an empty proposal ends the stream. With
    `workers=0` they compile on the calling thread, still asked for one at a time as the caller measures, up to
    `ahead` deep (so a strategy sees what a pool of workers would let it see)."""
    return _pipeline(propose, compiler, workers, timeout_s, ahead)


def _parallel(
    propose: Callable[[int], Sequence[Config]],
    compiler: Compiler,
    executor: StartTrackingExecutor,
    timeout_s: float | None,
    ahead: int,
    pending: dict[Future, _Submitted],
) -> Iterator[CompileOutcome]:
    """Compile what `propose` gives, `ahead` deep, yielding outcomes in completion order; `pending` (the caller's,
    so it can give up the compiles still in flight) holds the configs submitted and not yet handed out."""
    failed: list[CompileOutcome] = []

    def refill() -> None:
        """Up to `ahead` compiling: after each outcome handed to the caller, whatever it was."""
        if len(pending) >= ahead:
            return
        batch = propose(ahead - len(pending))
        _begin_batch(compiler, batch)
        for config in batch:
            try:
                future = compiler.submit(config, executor)
            except Exception as exc:
                failed.append(compile_failure(config, exc))
                continue
            if future in pending:  # another config compiles to the same kernel: Triton's JIT cache shares its future
                future = _twin(future)
            pending[future] = _Submitted(config, future)

    refill()
    while pending or failed:
        while failed:
            yield failed.pop(0)
            refill()
        if not pending:
            break
        done, _ = wait(list(pending), timeout=_next_deadline(pending, timeout_s), return_when=FIRST_COMPLETED)
        if not done:
            for outcome in _abandon_expired(pending, compiler, executor, timeout_s):
                yield outcome
                refill()
        for future in sorted(done, key=lambda f: pending[f].submitted_at):
            yield _outcome(pending.pop(future), compiler)
            refill()  # the caller measured one: compile more meanwhile


def _abandon_expired(
    pending: dict[Future, _Submitted],
    compiler: Compiler,
    executor: StartTrackingExecutor,
    timeout_s: float | None,
) -> list[CompileOutcome]:
    """The compiles past `timeout_s`, given up: their threads are not waited for, and the compiler is told."""
    abandon = getattr(compiler, "abandon", None)
    outcomes = []
    for future in _expired(pending, timeout_s):
        sub = pending.pop(future)
        executor.abandon(future)  # its thread is not waited for; another may take its place
        if abandon is not None:
            abandon(sub.config)
        outcomes.append(
            CompileOutcome(
                sub.config,
                TrialStatus.TIMEOUT,
                error=TimeoutError(f"compiling took longer than compile_timeout_s={timeout_s}"),
                compile_s=time.perf_counter() - _clock(future)["t"],
            )
        )
    return outcomes


class StartTrackingExecutor(Executor):
    """A pool of daemon threads whose futures remember when their compile started and ended (timeouts,
    `compile_s`). By default it owns a `DaemonThreadPool` of `max_workers` threads; given a shared `pool`, it
    submits there and its `shutdown` cancels and waits for its own compiles only, leaving the pool running."""

    def __init__(self, max_workers: int, pool: DaemonThreadPool | None = None) -> None:
        self._owned = pool is None
        self._pool = pool if pool is not None else DaemonThreadPool(max_workers, "autotune-compile")
        self._mine: list[Future] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        clock: dict[str, float] = {}
        future = self._pool.submit(_timed_call, clock, fn, args, kwargs)
        future._autotune_clock = clock  # type: ignore[attr-defined]
        if not self._owned:
            self._mine.append(future)
        return future

    def abandon(self, future: Future) -> None:
        """Stop counting the thread of a compile past its timeout: see `DaemonThreadPool.abandon`."""
        self._pool.abandon(future)
        if future in self._mine:
            self._mine.remove(future)

    def cancel_queued(self) -> None:
        """Cancel this executor's compiles that have not started (running ones go on)."""
        if self._owned:
            self._pool.shutdown(wait=False, cancel_futures=True)  # takes no more work; `shutdown` joins later
        else:
            self._pool.cancel(self._mine)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if self._owned:
            self._pool.shutdown(wait=wait, cancel_futures=cancel_futures)
            return
        if cancel_futures:
            self._pool.cancel(self._mine)
        if wait:
            for future in self._mine:
                with contextlib.suppress(CancelledError):
                    future.exception()  # waits until it ran (returns its error, raises nothing else)
        self._mine = []


def _next_deadline(pending: dict[Future, _Submitted], timeout_s: float | None) -> float | None:
    """Seconds until the oldest running compile passes the timeout; a short poll while all are still queued."""
    if timeout_s is None:
        return None
    running = [clock["t"] for clock in map(_clock, pending) if "t" in clock]
    if not running:
        return 0.05 if any(hasattr(f, "_autotune_clock") for f in pending) else None
    return max(0.0, min(running) + timeout_s - time.perf_counter())


def _expired(pending: dict[Future, _Submitted], timeout_s: float | None) -> list[Future]:
    if timeout_s is None:
        return []
    now = time.perf_counter()
    return [f for f in pending if "t" in _clock(f) and now - _clock(f)["t"] >= timeout_s and not f.done()]
