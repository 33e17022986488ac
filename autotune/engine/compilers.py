"""How a config gets compiled: through Triton's JIT (GPU), not at all (interpreter), or for an explicit target."""

from __future__ import annotations

import contextlib
import multiprocessing
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from contextlib import AbstractContextManager
from typing import Any, Protocol

from ..fork_safety import reset_in_forked_child
from ..space.spaces import Config

# (positional args, keyword args incl. meta-parameters and compile options, grid) for one config's launch
LaunchArgs = tuple[tuple, dict, Any]


class JitKernel(Protocol):
    """A `@triton.jit` kernel (Triton's JITFunction, or the interpreter's), or a heuristics layer over one."""

    def run(self, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any: ...

    def warmup(self, *args: Any, grid: Any, **kwargs: Any) -> Any: ...


def _done(value: Any) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future


class NoCompile:
    """Nothing to compile: every config is ready at once, in space order (Triton's CPU interpreter, and configs
    compiled already, as a worker's or a precompiled tuning's are)."""

    def session(self, executor: Executor) -> AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def submit(self, config: Config, executor: Executor) -> Future:
        return _done(None)

    def finalize(self, config: Config, result: Any) -> Any:
        return result


class FunctionCompiler:
    """Runs `compile_fn(config)` on the pool; for explicit targets, tests, and custom toolchains."""

    def __init__(self, compile_fn: Callable[[Config], Any]) -> None:
        self.compile_fn = compile_fn

    def session(self, executor: Executor) -> AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def submit(self, config: Config, executor: Executor) -> Future:
        return executor.submit(self.compile_fn, config)

    def finalize(self, config: Config, result: Any) -> Any:
        return result


def _async_compile() -> tuple[type, Any]:
    """Triton's AsyncCompileMode and the context variable naming the mode active in this thread (one module, the
    same in Triton 3.6 to 3.9)."""
    from triton.runtime import _async_compile as module

    return module.AsyncCompileMode, module.active_mode


class JitCompiler:
    """Compiles through the kernel's own JIT for the active GPU, in the pool, via `triton.AsyncCompileMode`.

    Inside the mode, a JIT warm-up submits the compile to our executor and returns a `FutureKernel` that,
    once resolved on the calling thread, sits in the JIT's kernel cache: the winner's launch compiles nothing.
    """

    def __init__(self, kernel: JitKernel, prepare: Callable[[Config], LaunchArgs]) -> None:
        self.kernel = kernel
        self.prepare = prepare
        self._future_kernels: dict[Config, Any] = {}  # submitted and not finalized (or abandoned) yet
        self._mode: Any = None

    @contextlib.contextmanager
    def session(self, executor: Executor) -> Iterator[Any]:
        mode_type, active = _async_compile()
        await_triton_key()  # the first submit needs it: wait for one started early rather than hash again beside it
        # A tuning inside another one's session (a setup=, verify= or hook that tunes a kernel, on its thread):
        # Triton allows one active mode per thread, so the outer mode steps aside until this one closes, and
        # each keeps its own pool, timeouts and errors.
        outer = active.set(None) if active.get() is not None else None
        # ignore_errors: a failed compile is already recorded by the pipeline, and on Ctrl-C the queued
        # compiles are cancelled first so that leaving the mode waits only for those already running.
        mode = self._mode = mode_type(executor, ignore_errors=True)
        self._future_kernels = {}
        try:
            with mode:
                try:
                    yield mode
                except BaseException:
                    for future in list(mode.raw_futures):
                        future.cancel()
                    raise
        finally:
            self._mode = None
            # what was never finalized failed or was cancelled (finalize pops each compiled one)
            self._drop_failed_placeholders(list(self._future_kernels.values()))
            self._future_kernels = {}
            if outer is not None:
                active.reset(outer)
            elif active.get() is mode:
                # Triton 3.6 clears the mode only after waiting for every compile: interrupted there, the thread
                # would keep a dead mode and refuse every later tuning ("Another AsyncCompileMode is active").
                active.set(None)

    def submit(self, config: Config, executor: Executor) -> Future:
        args, kwargs, grid = self.prepare(config)
        compiled = self.kernel.warmup(*args, grid=grid, **kwargs)
        future = getattr(compiled, "future", None) if type(compiled).__name__ == "FutureKernel" else None
        if future is None:  # already in the JIT's cache, or compiled synchronously
            return _done(compiled)
        self._future_kernels[config] = compiled
        return future

    def finalize(self, config: Config, result: Any) -> Any:
        future_kernel = self._future_kernels.pop(config, None)
        return future_kernel.result() if future_kernel is not None else result

    def _drop_failed_placeholders(self, future_kernels: list) -> None:
        """Remove from the JIT's kernel cache the `FutureKernel`s of this session whose compile failed, as Triton
        3.9 does itself: in 3.6 to 3.8 each stays there holding its exception and the compiler's locals, memory
        kept for the life of the process for every config of the space that failed to compile."""
        failed = set()
        for future_kernel in future_kernels:
            future = future_kernel.__dict__.get("future")  # not getattr: FutureKernel forwards to its result
            if future is not None and future.done() and (future.cancelled() or future.exception() is not None):
                failed.add(id(future_kernel))
        if not failed:
            return
        for caches in getattr(self.kernel, "device_caches", {}).values():
            kernel_cache = caches[0] if isinstance(caches, tuple) and caches else None
            if isinstance(kernel_cache, dict):
                for key in [k for k, v in list(kernel_cache.items()) if id(v) in failed]:
                    del kernel_cache[key]

    def abandon(self, config: Config) -> None:
        """Forget a compile that passed `compile_timeout_s`: leaving the session would otherwise wait for it
        (Triton's mode waits for every compile it started), so the timeout would not bound the tuning."""
        future_kernel = self._future_kernels.pop(config, None)
        raw_futures = getattr(self._mode, "raw_futures", None)
        if future_kernel is not None and isinstance(raw_futures, list):
            with contextlib.suppress(ValueError):
                raw_futures.remove(future_kernel.future)


_triton_key_thread: threading.Thread | None = None
_triton_key_lock = threading.Lock()


def warm_triton_key() -> None:
    """Start Triton's compiler hash (`triton_key()`: a SHA-256 of libtriton.so and Triton's sources) on a daemon
    thread, once per process. Every compile's cache key needs it, and Triton computes it in the first submit, on
    the calling thread, with the pool idle (0.3 s on a CPU here; on the H200 machine the first submits took a
    fixed 1.2 s). Started at decoration, it runs while the program does other things (reading and hashing
    release the GIL)."""
    global _triton_key_thread
    if multiprocessing.parent_process() is not None:
        return  # a pool's or a DataLoader's worker may never compile (a spawned one knows only once it runs)
    with _triton_key_lock:
        if _triton_key_thread is not None:
            return
        try:
            from triton.runtime.cache import triton_key
        except Exception:  # an unexpected Triton: the first compile computes it as before
            return
        if getattr(triton_key, "cache_info", None) is not None and triton_key.cache_info().currsize:
            return  # computed already (a kernel launched or compiled before)

        def compute() -> None:
            with contextlib.suppress(Exception):  # what fails here fails again, reported, where Triton calls it
                triton_key()

        _triton_key_thread = threading.Thread(target=compute, name="autotune-triton-key", daemon=True)
        _triton_key_thread.start()


def await_triton_key() -> None:
    """Wait for `warm_triton_key`'s thread, if one is still hashing (without, Triton would hash again, concurrently)."""
    thread = _triton_key_thread
    if thread is not None and thread is not threading.current_thread():
        thread.join()


@reset_in_forked_child
def _forget_triton_key_thread() -> None:
    """In a forked child the thread is gone (and Triton's memo empty, if it had not finished): start afresh."""
    global _triton_key_thread, _triton_key_lock
    _triton_key_thread, _triton_key_lock = None, threading.Lock()


_driver_ok = False  # set once a driver answered: the check then costs nothing for the rest of the process


def driver_problem() -> str | None:
    """Why Triton cannot compile for a GPU in this process (no active driver), or None when it can."""
    global _driver_ok
    if _driver_ok:
        return None
    try:
        from triton.runtime.driver import driver

        driver.active.get_current_target()
    except Exception as exc:  # Triton raises RuntimeError("0 active drivers ...") without a GPU driver
        return f"{type(exc).__name__}: {exc}"
    _driver_ok = True
    return None
