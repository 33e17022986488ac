"""Run by test_jit_compile.py in a fresh process (no interpreter): the JIT compile path on a fake sm_90 driver.
`python jit_compile_script.py pool|timeout|interrupt|nested` prints one JSON line.

  pool       configs compile in the pool through AsyncCompileMode; a later warm-up of one compiles nothing
  timeout    a compile hangs past the timeout (three times a compile measured first): the pipeline must leave
             while it still hangs
  interrupt  Ctrl-C while the session waits for a running compile, with Triton 3.6's AsyncCompileMode.__exit__
             (which clears the thread's active mode only after that wait): the next tuning must still compile
  nested     a tuning started inside another one's compile session (a setup=/verify= that tunes a kernel),
             whose first compile hangs past its timeout (measured as for `timeout`)
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from concurrent.futures import as_completed

sys.path.insert(0, os.path.dirname(__file__))
os.environ.pop("TRITON_INTERPRET", None)

import fake_gpu  # noqa: E402

fake_gpu.activate()

import torch  # noqa: E402
from kernels_for_tests import accumulate_kernel, add_kernel  # noqa: E402
from triton.runtime import _async_compile  # noqa: E402

from autotune import Config  # noqa: E402
from autotune.engine.compilers import JitCompiler  # noqa: E402
from autotune.engine.pipeline import compile_in_order_of_completion  # noqa: E402

X = torch.randn(1000)
GATE = threading.Event()  # the hanging compile waits for this (at most a minute)
HUNG_RETURNED = threading.Event()  # set once the hanging compile stopped waiting


def pool() -> dict:
    """Five configs compiled in the pool; then a warm-up of a tuned one."""
    x = X
    compile_threads: list[str] = []
    kernel_cache = add_kernel.device_caches[0][0]
    real_compile = add_kernel.compile

    def counting_compile(*args, **kwargs):
        compile_threads.append(threading.current_thread().name)
        return real_compile(*args, **kwargs)

    add_kernel.compile = counting_compile

    def prepare(config: Config):
        return (x, x, x, 1000), {"BLOCK": config["BLOCK"], "num_warps": config["num_warps"]}, (1,)

    configs = [Config(BLOCK=b, num_warps=w) for b in (64, 128) for w in (2, 4)] + [Config(BLOCK=48, num_warps=4)]
    compiler = JitCompiler(add_kernel, prepare)
    with compile_in_order_of_completion(configs, compiler, workers=2) as outcomes:
        results = [(dict(o.config), o.status.value, type(o.result).__name__, str(o.error)[:200]) for o in outcomes]
    compiles_in_pipeline = len(compile_threads)
    # The winner's launch path: a warm-up of any compiled config must find it in the JIT's cache.
    again = add_kernel.warmup(x, x, x, 1000, BLOCK=128, num_warps=4, grid=(1,))
    return {
        "results": results,
        "compile_threads": compile_threads,
        "compiles_in_pipeline": compiles_in_pipeline,
        "compiles_after": len(compile_threads),
        "again_type": type(again).__name__,
        "cached_kernels": len(kernel_cache),
        "cached_kinds": sorted({type(v).__name__ for v in kernel_cache.values()}),
        "calling_thread": threading.current_thread().name,
    }


def hang_first_compile(kernel) -> None:
    """The first compile of `kernel` waits on GATE; the others run normally."""
    kernel.device_caches[0]  # the JIT sets up its compile function with its first device cache
    real, first = kernel.compile, threading.Lock()

    def compile(*args, **kwargs):
        if first.acquire(blocking=False):
            GATE.wait(60)
            HUNG_RETURNED.set()
        return real(*args, **kwargs)

    kernel.compile = compile


def add_compiler() -> JitCompiler:
    return JitCompiler(add_kernel, lambda c: ((X, X, X, 1000), {"BLOCK": c["BLOCK"]}, (1,)))


def statuses(configs, compiler, **kwargs) -> list[str]:
    with compile_in_order_of_completion(configs, compiler, workers=2, **kwargs) as outcomes:
        return sorted(o.status.value for o in outcomes)


def compile_timeout_s() -> float:
    """A compile timeout measured on this machine, now: three times this process's first compile (one that also
    pays the compiler's one-time set-up, so it outlasts a later compile under the same load)."""
    started = time.monotonic()
    assert statuses([Config(BLOCK=256)], add_compiler()) == ["ok"]
    return 3 * (time.monotonic() - started)


def timeout() -> dict:
    limit = compile_timeout_s()
    hang_first_compile(add_kernel)
    got = statuses([Config(BLOCK=64), Config(BLOCK=128)], add_compiler(), timeout_s=limit)
    hung_still_waiting = not HUNG_RETURNED.is_set()  # the pipeline left while the hung compile still waited
    GATE.set()
    return {"statuses": got, "hung_still_waiting": hung_still_waiting}


def _exit_as_in_triton_3_6(self, exc_type, exc_value, traceback):
    for future in as_completed(self.raw_futures):
        self.future_kernels[future._key].result(self.ignore_errors)
    _async_compile.active_mode.set(None)


def interrupt() -> dict:
    _async_compile.AsyncCompileMode.__exit__ = _exit_as_in_triton_3_6
    hang_first_compile(add_kernel)

    def ctrl_c(*_):
        GATE.set()  # the hanging compile may finish now; the pool's shutdown waits for it
        raise KeyboardInterrupt

    signal.signal(signal.SIGALRM, ctrl_c)
    interrupted = False
    try:
        with compile_in_order_of_completion([Config(BLOCK=64), Config(BLOCK=128)], add_compiler(), workers=2) as outs:
            next(outs)  # the compile that did not hang
            signal.setitimer(signal.ITIMER_REAL, 0.5)  # Ctrl-C while leaving waits for the hanging one
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        interrupted = True
    left_active = _async_compile.active_mode.get() is not None
    return {
        "interrupted": interrupted,
        "mode_left_active": left_active,
        "next_tuning": statuses([Config(BLOCK=256)], add_compiler()),
    }


def nested() -> dict:
    """An outer tuning whose first measured config runs a verify= that tunes another kernel, whose first compile
    hangs past its timeout: the outer tuning's mode is back afterwards, its next config (proposed after the
    inner tuning) compiles, and it ends without waiting for the inner tuning's hung compile."""
    from autotune.engine.pipeline import compile_as_proposed

    limit = compile_timeout_s()
    hang_first_compile(accumulate_kernel)
    queue = [Config(BLOCK=64), Config(BLOCK=128)]
    outer_statuses, inner_statuses, restored = [], [], []
    with compile_as_proposed(lambda n: [queue.pop(0)] if queue else [], add_compiler(), workers=2, ahead=1) as outcomes:
        for outcome in outcomes:
            outer_statuses.append(outcome.status.value)
            if not inner_statuses:
                mode = _async_compile.active_mode.get()
                inner = JitCompiler(accumulate_kernel, lambda c: ((X, X, 1000), {"BLOCK": c["BLOCK"]}, (1,)))
                inner_statuses = statuses([Config(BLOCK=64), Config(BLOCK=128)], inner, timeout_s=limit)
                restored.append(mode is not None and _async_compile.active_mode.get() is mode)
    hung_still_waiting = not HUNG_RETURNED.is_set()  # the sessions ended while the hung compile still waited
    GATE.set()
    return {
        "outer": outer_statuses,
        "inner": inner_statuses,
        "outer_restored": restored == [True],
        "hung_still_waiting": hung_still_waiting,
        "mode_after": _async_compile.active_mode.get() is not None,
    }


if __name__ == "__main__":
    print(json.dumps({"pool": pool, "timeout": timeout, "interrupt": interrupt, "nested": nested}[sys.argv[1]]()))
