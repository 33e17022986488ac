"""The worker process of `Tuning(isolate="process")`: runs untried configs so that a crash or a hang costs that
config, never the caller's process.

Started as `python -m autotune.engine.isolation FD PARENT_PID MAIN_THREAD` (a fresh interpreter, as `spawn` gives,
without re-running the caller's `__main__`; MAIN_THREAD is 1 when the parent's main thread started it, the only case
where PR_SET_PDEATHSIG is asked for) with one end of a socket pair. It puts itself in a process group of its own
(so that a timeout kills it and anything it started), and exits when its parent is gone (PR_SET_PDEATHSIG on
Linux, and a watchdog thread everywhere). Messages are pickled tuples over the private socket pair between a
process and the worker it started; tensors travel as (shape, dtype, strides, the bytes of the storage span the
view covers) and are rebuilt as copies, so the caller's tensors are never written by a worker.

Requests name a kernel by `ref` = (module, qualname, recipe digest, source file: a script's, imported from it).
("load", ref, recipe, sys_path) imports it with the parent's sys.path as it is then: the decorated object the module's name holds, or, with a recipe (the pickled arguments of `@autotune`, for a
kernel autotuned away from its definition), the `@triton.jit` kernel there decorated anew. ("call", token,
[args of each call], cuda_device, keep, grids) makes the caller's GPU current and rebuilds a tuning's arguments
once: one call's, or every call's of a set (`Tuning.objective`), kept together under the token (later requests
name them by token, so they are copied once per worker and tuning, not per config), after freeing those of every
token not in `keep` (the parent chooses which tunings' calls stay: the last few within a byte budget); the grids
come along only so that one this worker cannot load fails there, not a trial. ("keep", tokens) only frees the
others. A request this worker cannot read at all is answered with an error, never died of. ("trial", ref, config,
token, grids, tuning, precompiled, objective) compiles (unless a compile worker already did), checks (verify=) and measures
one config, on every call of a set (saying ("note", index) before each call, so that the parent can tell which
call a crash or a hang was on), and answers with the trial (samples, or the failure's status and text);
("compile", ref, config, token, grid) only compiles it, with the first call's shapes (a compile
worker: Triton's on-disk cache keeps the result for the measuring worker); ("refine", ref, configs, token,
grids, tuning, reps, objective) re-measures the best few interleaved (saying ("note", index in configs) before
each run); ("exit",).
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from typing import Any

from ..tunable_kernel import TunableKernel
from .call_copies import UNREADABLE_REQUEST, decode_call


def _die_with_parent(parent: int, pdeathsig: bool) -> None:
    # Linux: SIGKILL when the parent dies, even SIGKILLed. It fires when the *thread* that started the worker
    # exits, so the parent asks for it only from its main thread; the watchdog covers every case.
    if pdeathsig:
        try:
            import ctypes

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except Exception:
            pass

    def watch() -> None:
        while True:
            if os.getppid() != parent:
                os._exit(0)
            time.sleep(0.5)

    threading.Thread(target=watch, name="autotune-worker-watchdog", daemon=True).start()


def rebuild(jit_kernel: object, recipe: bytes) -> TunableKernel:
    """The autotuned kernel its parent built with `autotune(**recipe)(jit_kernel)` (the parent pickled the
    recipe itself, over the private socket to this worker), with the parent's compiler_factory if it had one."""
    import pickle

    from ...decorator.autotuned import Autotuned

    options = pickle.loads(recipe)
    factory = options.pop("compiler_factory", None)
    jit_kernel = getattr(jit_kernel, "tuner", jit_kernel)  # the name holds another autotuning of it:
    if isinstance(jit_kernel, Autotuned):  # decorate its kernel, not it
        jit_kernel = jit_kernel.fn
    kernel = Autotuned(jit_kernel, **options)
    kernel.compiler_factory = factory
    return kernel


def _follow_path(parent_path: list) -> None:
    """Put the parent's sys.path as it is at this load first (the worker's PYTHONPATH is the parent's sys.path at
    the worker's start: an entry added since would be missing, and a module found there not importable)."""
    if parent_path and sys.path[: len(parent_path)] != parent_path:
        import importlib

        sys.path[:] = list(parent_path) + [p for p in sys.path if p not in parent_path]
        importlib.invalidate_caches()


def serve(conn: Any) -> None:
    """Answer requests until ("exit",) or the parent closes the socket."""
    kernels: dict[tuple, TunableKernel] = {}
    # the arguments of the tunings the parent has it keep, rebuilt once: {token: (cuda device, [(args, kwargs)])}
    calls: dict[str, tuple[int | None, list]] = {}
    while True:
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError):
            return
        request = _decode(data)
        if request[0] == "undecodable":  # answered, not died of: the parent blames no config for it
            conn.send(request[1])
            continue
        if request[0] == "exit":
            return
        try:
            conn.send(_answer(conn, request, kernels, calls))
        except Exception as exc:  # a request that failed as a whole (an import, a refine): say why, go on
            conn.send(_request_failed(exc))


def _decode(data: bytes) -> tuple:
    """A request from the parent (pickled by it over the private socket), or ("undecodable", the error answer) when
    this worker cannot rebuild it: an object in it, such as a launch grid, names a module or attribute the worker
    cannot import."""
    import pickle

    try:
        request = pickle.loads(data)
        if not isinstance(request, tuple) or not request:
            raise TypeError(f"a request is a non-empty tuple, not {type(request).__name__}")
        return request
    except Exception as exc:
        text = f"{UNREADABLE_REQUEST} ({type(exc).__name__}: {exc})"
        if isinstance(exc, (AttributeError, ImportError)):
            text += "; an object in it (a launch grid?) is not importable in the worker"
        return ("undecodable", ("error", text))


def _answer(conn: Any, request: tuple, kernels: dict[tuple, TunableKernel], calls: dict[str, tuple]) -> tuple:
    kind = request[0]
    if kind == "load":
        return _load(request, kernels)
    if kind == "call":
        return _keep_call(request, calls)
    if kind == "keep":
        _keep_only(request[1], calls)
        return ("ok",)
    if kind in ("trial", "compile", "refine"):
        kernel, (device, call_set) = kernels.get(request[1]), calls.get(request[3], (None, []))
        if kernel is None or not call_set:
            return ("error", "the kernel or the call's arguments are not loaded in the worker")
        _make_current(device)
        # call_set is held only by `calls` once this returns, so that dropping the token frees the copies
        return _run(conn, request, kernel, call_set)
    return ("error", f"unknown request {kind!r}")


def _load(request: tuple, kernels: dict[tuple, TunableKernel]) -> tuple:
    from ...kernel.identity import KernelRef, import_object

    ref, recipe = request[1], request[2]
    _follow_path(request[3] if len(request) > 3 else [])
    with warnings.catch_warnings():  # what decorating warns of, the parent already said
        warnings.simplefilter("ignore")
        obj = import_object(KernelRef(module=ref[0], qualname=ref[1], file=ref[3], line=None))
        if recipe is not None:
            obj = rebuild(obj, recipe)
    obj = getattr(obj, "tuner", obj)  # a compat Autotuner wraps the native one
    if not (hasattr(obj, "bind") and hasattr(obj, "launch_args")):
        return (
            "error",
            f"{ref[0]}.{ref[1]} is not the autotuned kernel there (decorate the "
            "kernel where it is defined, @autotune above @triton.jit, so that its name "
            "holds the autotuned object)",
        )
    kernels[ref] = obj
    return ("ok",)


def _keep_call(request: tuple, calls: dict[str, tuple]) -> tuple:
    """("call", token, encoded calls, cuda device, tokens to keep, launch grids): rebuild a tuning's arguments,
    first freeing those of the tunings the parent no longer has this worker keep. The grids come again with each
    trial; they come here only so that one this worker cannot load fails the request (`_decode`): the tuning's
    start, not a config."""
    _keep_only(request[4] if len(request) > 4 else [], calls)
    _make_current(request[3])
    calls[request[1]] = (request[3], [decode_call(encoded) for encoded in request[2]])
    return ("ok",)


def _keep_only(tokens: list, calls: dict[str, tuple]) -> None:
    """Free the arguments of every tuning but those of `tokens`."""
    dropped = [token for token in calls if token not in tokens]
    for token in dropped:
        del calls[token]
    if dropped:
        gc.collect()  # now: a finished tuning's job holds them in reference cycles


def _make_current(device: int | None) -> None:
    """Make the caller's current GPU of a tuning current here too: Triton launches on the current device."""
    if device is not None:
        import torch

        if torch.cuda.current_device() != device:
            torch.cuda.set_device(device)


def _run(conn: Any, request: tuple, kernel: TunableKernel, call_set: list) -> tuple:
    from .trial import compile_in_worker, refine_in_worker, run_trial_in_worker

    kind, config = request[0], request[2]
    if kind == "trial":
        grids, tuning, precompiled, objective = request[4:]
        return run_trial_in_worker(kernel, config, call_set, grids, tuning, precompiled, objective, _noting(conn))
    if kind == "compile":
        return compile_in_worker(kernel, config, call_set, request[4])
    grids, tuning, reps, objective = request[4:]
    rounds, failed = refine_in_worker(kernel, config, call_set, grids, tuning, reps, objective, _noting(conn))
    return ("ok", rounds, failed)


def _request_failed(exc: Exception) -> tuple:
    from ...errors import FailureKind, classify, device_error_text

    if classify(exc, "run") is FailureKind.STICKY_DEVICE:  # the context is poisoned: replace this worker
        return ("sticky", device_error_text(exc))
    # the innermost frames (the user's verify= is there) and the class by name: the parent rebuilds an autotune
    # or built-in error as itself (runner.worker_error), anything else as AutotuneError
    return (
        "error",
        f"{type(exc).__name__}: {exc}",
        "".join(traceback.format_exception(exc, limit=-6)),
        (type(exc).__module__, type(exc).__qualname__, raised_message(exc)),
    )


def _noting(conn: Any) -> Callable[[int], None]:
    """Tells the parent which call of a set a trial is measuring now, or which config a re-measurement is
    running: a crash or a hang is on that one."""
    return lambda index: conn.send(("note", index))


def raised_message(exc: BaseException) -> str:
    """The text an error was raised with: its one string argument where it has one (str(KeyError("k")) is the
    repr "'k'", which the parent would quote a second time when it rebuilds the KeyError), else str(exc)."""
    return exc.args[0] if len(exc.args) == 1 and isinstance(exc.args[0], str) else str(exc)


def main() -> None:
    from multiprocessing.connection import Connection

    fd, parent, pdeathsig = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:4] == ["1"]
    _die_with_parent(parent, pdeathsig)  # started in a session (process group) of its own: a timeout kills the group
    # A worker never tunes on its own: an autotuned kernel called here outside a trial (a module that warms its
    # kernel up at import, a verify= that calls another autotuned kernel) launches its fallback config untuned.
    # Tuning there would take the key's file lock that the parent holds while it waits for this worker: a deadlock.
    os.environ["AUTOTUNE_DISABLE"] = "1"
    # The parent warns of a config that failed verify= where the caller sees it (runner.WorkerRunner.measure).
    from ...errors import VerificationWarning

    warnings.filterwarnings("ignore", category=VerificationWarning)
    serve(Connection(fd))
