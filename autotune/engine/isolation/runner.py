"""The parent's side of one isolated tuning: whether to isolate (`isolation_for`), the `TrialRunner` whose trials
and final re-measurement run in the measuring worker (`WorkerRunner`), and the compile stage in the compile
workers (`WorkerCompiler`, the pipeline's `Compiler` for isolated tunings)."""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import logging
import pickle
import pickletools
import signal
import sys
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future
from typing import Any

from ... import codec, errors
from ...errors import (
    AutotuneError,
    IsolationWarning,
    OptionError,
    WorkerShutdownError,
    warn_at_caller,
    warn_verification_failed,
)
from ...kernel.call import BoundCall
from ...kernel.identity import imported_object, kernel_ref, script_imported
from ...options import Objective, isolate_setting
from ...record import Trial, TrialStatus, Where
from ...space.spaces import Config
from ..compilers import NoCompile
from ..measuring import measuring
from ..pipeline import CompileFailed, Compiler
from ..trial_runner import TrialFailed
from ..tunable_kernel import TunableKernel
from .call_copies import UNREADABLE_REQUEST, encode_call, span_of
from .pool import Worker, WorkerCrashed, WorkerTimedOut, compile_workers, shared_worker

__all__ = ["WorkerRunner", "WorkerCompiler", "isolation_for", "check_isolation", "worker_error"]

logger = logging.getLogger("autotune")
_LOAD_TIMEOUT_S = 300.0  # importing torch, Triton and the kernel's module in a fresh worker
# An isolated trial's limit when `trial_timeout_s` is not set (Helion's default too): a config that hangs costs
# that config, never the tuning. Under Triton's CPU interpreter, whose launches are ~1000x slower, ten times that.
DEFAULT_TRIAL_TIMEOUT_S = 30.0
INTERPRETER_TRIAL_TIMEOUT_S = 300.0
_noted: set[str | tuple[str, str]] = set()
_noted_lock = threading.Lock()


def _how_to_load(kernel: TunableKernel, bound_by_name: bool = True) -> tuple[bytes | None, str | None]:
    """How a worker gets this kernel: (None, None) by its module and qualified name; (recipe, None) as the
    `@triton.jit` kernel there decorated anew from the pickled `@autotune` arguments (a kernel autotuned away
    from its definition, or by `autotune_launch`); (None, reason) when it cannot. `bound_by_name`: at a call
    (while decorating, the name is not bound yet, so only the module and the qualified name are checked)."""
    ref = kernel_ref(kernel.base_fn)
    if ref.module == "__main__" and not script_imported(ref):
        return None, (
            f"{kernel.name} is defined in __main__ (a script or a notebook cell), which a worker cannot import"
        )
    if ref.importable_reason is not None:
        return None, ref.importable_reason
    if not bound_by_name or ref.module not in sys.modules:  # the worker's import will tell
        return None, None
    named = imported_object(ref)
    if named is kernel or getattr(named, "tuner", None) is kernel:
        return None, None
    if named is not kernel.fn:
        return None, (
            f"{ref.module}.{ref.qualname} holds neither this autotuned kernel nor the kernel it decorates "
            "(another wrapper, such as triton.heuristics, was applied away from the definition): apply "
            "the decorators where the kernel is defined"
        )
    try:
        return pickle.dumps(
            {
                **kernel.recipe,
                "verify": kernel.verify,
                "setup": kernel.setup,  # as they are now
                "do_bench": kernel.do_bench,
                "compiler_factory": kernel.compiler_factory,
            }
        ), None
    except Exception as exc:
        return None, (
            f"{ref.module}.{ref.qualname} holds the plain @triton.jit kernel, not this autotuned one, and "
            f"its @autotune arguments cannot be sent to a worker to decorate it there ({exc}): apply "
            "@autotune where the kernel is defined, or pass module-level functions instead of lambdas"
        )


_PROCESS_ELSE = ", or use isolate='auto' (tunes it in-process) or 'off'"
_PROCESS_FIX = "Define the kernel at the top level of an importable module" + _PROCESS_ELSE


def check_isolation(kernel: TunableKernel) -> None:
    """At decoration: `isolate="process"` (or AUTOTUNE_ISOLATE=process) on a kernel no worker can import is an
    error now, not at a call; the message names what asked for it."""
    mode, source = isolate_setting(kernel.tuning, kernel.default_isolate)
    if mode == "process":
        _, reason = _how_to_load(kernel, bound_by_name=False)
        if reason is not None:
            raise OptionError(f"{source} on {kernel.name}: {reason}. {_PROCESS_FIX}")


class WorkerRunner:
    """A `TrialRunner` whose trials run in the measuring worker, on copies of the call's arguments (sent once).
    For a set of calls (`objective`, section 6b) the worker holds every call's copies under one token and
    measures each config on every call, answering with the combined trial. A crash or a hang there is the
    config's result (`crashed`, `timeout`, naming the call of a set); the pipeline's compile limit is the
    compile workers' own (they are killed past it), so `compile_timeout_s` is None."""

    compile_timeout_s: float | None = None
    where: Where = "worker process"

    def __init__(
        self,
        kernel: TunableKernel,
        calls: Sequence[tuple[BoundCall, Any]],
        recipe: bytes | None,
        encoded: list,
        objective: Objective | None = None,
    ) -> None:
        ref = kernel_ref(kernel.base_fn)
        recipe_hash = "" if recipe is None else hashlib.sha256(recipe).hexdigest()
        self.ref = (ref.module, ref.qualname, recipe_hash, ref.file)  # the file: a script's, imported from it
        self.recipe = recipe
        self.encoded = encoded  # the measuring worker's copies, with the data: one per call
        self.token = uuid.uuid4().hex
        self.cuda_device = _current_cuda_device([bound for bound, _ in calls])
        self.grids = [grid for _, grid in calls]
        self.objective = objective
        self.tuning = kernel.tuning
        self.kernel_name = kernel.name
        self.trial_timeout_s: float = self.tuning.trial_timeout_s or (
            INTERPRETER_TRIAL_TIMEOUT_S if kernel.interpreted else DEFAULT_TRIAL_TIMEOUT_S
        )
        # Compile workers only where there is something to compile (not the interpreter) and workers to do it.
        self.precompiles = self.tuning.compile_workers > 0 and not (
            kernel.interpreted and kernel.compiler_factory is None
        )
        # What a compile worker gets: the first call's layout without the bytes (it compiles with those shapes).
        first = calls[0][0]
        self.shapes = [encode_call(first.args, first.kwargs, data=False)] if self.precompiles else []
        self.errors: dict[Config, BaseException] = {}  # only text comes back from a worker
        self.compile_seconds: dict[Config, float] = {}  # in a compile worker, not the thread waiting for it
        self.measuring_call = 0  # during a trial on a set of calls, the call the worker measures (its notes say)
        self.noted = False  # during a trial, whether the worker has said it measures (its compile is over)
        self.worker, self.lock = shared_worker()
        with self.lock:
            self.prepare(self.worker)

    def prepare(self, worker: Worker, measuring: bool = True) -> None:
        """(Re)load the kernel and this tuning's arguments in `worker` (a restarted worker has neither); its
        failure is not a config's, so it ends the tuning."""
        try:
            worker.load(self.ref, self.recipe, _LOAD_TIMEOUT_S)
            if measuring:
                worker.send_call(self.token, self.encoded, self.cuda_device, _LOAD_TIMEOUT_S, self.grids)
            else:
                worker.send_call(self.token + "-shapes", self.shapes, self.cuda_device, _LOAD_TIMEOUT_S, self.grids[:1])
        except WorkerShutdownError:
            raise
        except (ImportError, RuntimeError, OSError, WorkerCrashed, WorkerTimedOut) as exc:  # OSError: no start
            _raise_if_grid_unloadable(self.kernel_name, self.grids, exc)
            raise AutotuneError(
                f"the tuning worker could not load {self.ref[0]}:{self.ref[1]} and the call's arguments: {exc}"
            ) from None
        except Exception as exc:  # an unexpected failure to start or feed the worker: still not a config's
            raise AutotuneError(
                f"the tuning worker could not be started with {self.ref[0]}:{self.ref[1]} and the call's "
                f"arguments ({type(exc).__name__}: {exc})"
            ) from exc

    def close(self) -> None:
        """The tuning ended: free the workers' copies of the call's arguments (the compile workers' too), and this
        side's encoded copy."""
        self.encoded = []
        with self.lock:
            self.worker.drop_call(self.token, _LOAD_TIMEOUT_S)  # unless later tunings' calls pushed it out
        if self.precompiles:
            compile_workers().drop_call(self.token + "-shapes", _LOAD_TIMEOUT_S)

    def compiler(self) -> Compiler:
        """The pipeline's compiler: the compile workers, or nothing to compile ahead (the measuring worker
        compiles each config as part of its trial)."""
        return WorkerCompiler(self) if self.precompiles else NoCompile()

    def measure(self, config: Config) -> Trial:
        """Check and measure `config` in the worker (compiling it first unless a compile worker did); a crash
        or a hang is this config's result."""
        trial = self._trial(config)
        trial.compile_s = self.compile_seconds.get(config, trial.compile_s)
        return trial

    def _trial(self, config: Config) -> Trial:
        message = ("trial", self.ref, config, self.token, self.grids, self.tuning, self.precompiles, self.objective)
        reply = self._measure(message, config)
        if isinstance(reply, Trial):
            return reply
        if reply[0] in ("ok", "failed"):
            trial = codec.from_builtins(reply[1], Trial)
            if trial.status is TrialStatus.VERIFY_FAILED:  # warned here, as in-process (the worker's is silenced)
                reason = (trial.error or "").split(": ", 1)[-1]  # "VerificationError: why" -> "why"
                warn_verification_failed(self.kernel_name, config, reason)
            return trial
        raise worker_error(reply, f"the tuning worker of {self.kernel_name}")

    def _measure(self, message: tuple, config: Config, retried: bool = False) -> tuple | Trial:
        """The worker's reply to a trial `message`, or the Trial a timeout, a crash or a poisoned device makes of it
        (a SIGKILL from outside: see `_ask_measuring_worker`)."""
        self.measuring_call = 0
        answer = self._ask_measuring_worker(message, self._measuring, retried)
        if answer is None:
            logger.warning(
                "autotune: the worker measuring %s of %s was killed by SIGKILL from outside (the OOM killer, a "
                "supervisor?); trying that config once more in a new worker",
                config,
                self.kernel_name,
            )
            return self._measure(message, config, retried=True)
        if isinstance(answer, TrialFailed):
            return self._failed(config, answer.status, str(answer))
        return answer

    def _ask_measuring_worker(
        self, message: tuple, on_note: Callable[[Any], Any], retried: bool
    ) -> tuple | TrialFailed | None:
        """The measuring worker's reply to `message`; a `TrialFailed` when it timed out, died or lost the device
        answering (the config it was running is to blame); None when it was killed by SIGKILL for the first time.
        The request holds this thread's measuring lock (`measuring`), released however it ends (a timeout or a
        crash kills the worker first, Ctrl-C too), so an isolated trial never measures beside another tuning's.
        autotune sends SIGKILL only on a timeout (a `WorkerTimedOut`), so that one came from outside (the OOM
        killer, a supervisor): not the config's doing until it happens again in a new worker."""
        compiling = self._compile_limit() if message[0] == "trial" else None
        with self.lock:
            self.prepare(self.worker)
            self.noted = False
            try:
                with measuring():  # as an in-process trial: no other tuning of this process measures meanwhile
                    reply = self.worker.request(message, self.trial_timeout_s, on_note=on_note, until_note_s=compiling)
            except WorkerTimedOut as exc:
                if compiling is not None and not self.noted:
                    return TrialFailed(
                        TrialStatus.TIMEOUT, f"compiling it took longer than compile_timeout_s={compiling:g} s: {exc}"
                    )
                return TrialFailed(TrialStatus.TIMEOUT, self._timeout_text(exc))
            except WorkerCrashed as exc:
                if exc.signal_number == signal.SIGKILL and not retried:
                    return None
                return TrialFailed(TrialStatus.CRASHED, f"{exc}{' (twice, in two workers)' if retried else ''}")
            if reply[0] == "sticky":  # its device context is poisoned: a fresh worker next
                self.worker.kill()
                return TrialFailed(TrialStatus.CRASHED, f"poisoned the device: {reply[1]}")
        return reply

    def compile(self, config: Config, worker: Worker) -> float:
        """Compile `config` in a compile worker: the seconds it took there, or `CompileFailed` with the config's
        status. The worker is killed past `compile_timeout_s` or `trial_timeout_s` (the smaller)."""
        self.prepare(worker, measuring=False)
        limits = [t for t in (self.tuning.compile_timeout_s, self.tuning.trial_timeout_s) if t is not None]
        try:
            reply = worker.request(
                ("compile", self.ref, config, self.token + "-shapes", self.grids[0]),
                min(limits) if limits else None,
            )
        except WorkerTimedOut as exc:
            raise CompileFailed(
                TrialStatus.TIMEOUT, f"compiling it took longer than {min(limits):g} s: {exc}"
            ) from None
        except WorkerCrashed as exc:
            raise CompileFailed(TrialStatus.CRASHED, f"compiling it: {exc}") from None
        if reply[0] == "ok":
            return reply[1]
        if reply[0] == "failed":
            raise CompileFailed(TrialStatus(reply[1]), reply[2])
        if reply[0] == "sticky":
            worker.kill()
            raise CompileFailed(TrialStatus.CRASHED, f"poisoned the device: {reply[1]}")
        # Always an AutotuneError: the pipeline would read a rebuilt TypeError or RuntimeError as this config's
        # compile error, and what a compile worker answers "error" (not "failed") is never the config's doing.
        raise worker_error(reply, f"the compile worker of {self.kernel_name}", own_class=False)

    def refine(self, configs: Sequence[Config], reps: int, retried: bool = False) -> dict[Config, list[float]]:
        """Re-measure the best few interleaved in the worker; {} when it could not (they keep their samples). The
        worker names each config before it runs it (each run has `trial_timeout_s`): the one that ended the worker,
        hung or lost the device is failed, so it cannot win on its first pass's samples (none before the first
        run: then the worker, not a config, failed). A SIGKILL from outside is blamed only when it comes again."""
        running: list[Config] = []
        try:
            message = ("refine", self.ref, list(configs), self.token, self.grids, self.tuning, reps, self.objective)
            answer = self._ask_measuring_worker(message, lambda index: running.append(configs[index]), retried)
        except WorkerShutdownError:
            raise
        except AutotuneError as exc:  # the worker could not load the kernel and the call again
            answer = ("error", exc)
        if answer is None:
            logger.warning(
                "autotune: the worker re-measuring the best configs of %s was killed by SIGKILL from outside (the OOM "
                "killer, a supervisor?); re-measuring them once more in a new worker",
                self.kernel_name,
            )
            return self.refine(configs, reps, retried=True)
        if isinstance(answer, TrialFailed):
            if running:
                self.errors[running[-1]] = answer
            answer = ("error", answer)
        if answer[0] != "ok":
            logger.warning(
                "autotune: re-measuring the best configs of %s in the worker failed (%s)", self.kernel_name, answer[1]
            )
            return {}
        by_text = {c.canonical(): c for c in configs}
        rounds = {by_text[text]: samples for text, samples in answer[1].items()}
        failed = answer[2] if len(answer) > 2 else {}  # each one's error, as its text
        for config in configs:  # left out by the worker: it failed on its own when run again
            if config not in rounds:
                text = failed.get(config.canonical(), "an error")
                self.errors[config] = AutotuneError(f"{text} (raised in the worker's re-measurement)")
        return rounds

    def _measuring(self, index: int) -> None:
        self.measuring_call = index
        self.noted = True

    def _compile_limit(self) -> float | None:
        """The limit of a trial's compile in the measuring worker (no compile workers): `compile_timeout_s` where
        it is below `trial_timeout_s`; None where the compile has only the trial's."""
        limit = self.tuning.compile_timeout_s
        return limit if not self.precompiles and limit is not None and limit < self.trial_timeout_s else None

    def _failed(self, config: Config, status: TrialStatus, error: str) -> Trial:
        """The trial of a config that ended its worker, saying which call of a set it was on (as `MultiCallRunner`
        says which call a config failed on)."""
        where = f"on call {self.measuring_call}: " if len(self.grids) > 1 else ""
        return Trial(config=config, status=status, error=where + error)

    def _timeout_text(self, exc: Exception) -> str:
        if self.tuning.trial_timeout_s is None:
            return f"the default trial timeout of an isolated trial, {self.trial_timeout_s:g} s, passed: {exc}"
        return f"trial_timeout_s={self.tuning.trial_timeout_s:g} passed: {exc}"


def worker_error(reply: tuple, where: str, own_class: bool = True) -> Exception:
    """The error a request raised in a worker, as the caller would have got it in process: its own class when that
    is an autotune error or a Python built-in one (so `except TypeError` works under isolation too), else (or
    with `own_class=False`) an AutotuneError saying where; the worker's traceback is attached as a note (in the
    message before Python 3.11). Only a class *name* is looked up, in those two modules: nothing is evaluated."""
    error: Exception | None = None
    try:
        module, name, message = reply[3]
        home = {"autotune.errors": errors, "builtins": builtins}.get(module) if own_class else None
        cls = getattr(home, name, None) if home is not None and isinstance(name, str) and "." not in name else None
        if isinstance(cls, type) and issubclass(cls, Exception) and not issubclass(cls, Warning):
            error = cls(f"{message} (raised in {where})")
    except Exception:  # an older or odd reply, or a class whose constructor takes more than a message
        error = None
    if error is None:
        error = AutotuneError(f"{where} failed: {reply[1] if len(reply) > 1 else reply}")
    trace = reply[2] if len(reply) > 2 and isinstance(reply[2], str) else ""
    if trace:
        note = f"The worker's traceback:\n{trace.rstrip()}"
        if hasattr(error, "add_note"):
            error.add_note(note)
        else:  # Python 3.10: no notes; the message carries it
            error.args = (f"{error.args[0] if error.args else ''}\n{note}",) + tuple(error.args[1:])
    return error


def _current_cuda_device(calls: Sequence[BoundCall]) -> int | None:
    """The caller's current GPU when the calls have CUDA tensors (a worker makes it current too), else None."""
    values = [v for bound in calls for v in bound.named.values()]
    if not any(getattr(getattr(v, "device", None), "type", None) == "cuda" for v in values):
        return None
    import torch

    return torch.cuda.current_device()


class WorkerCompiler:
    """The pipeline's `Compiler` under isolation: each pool thread lends a compile worker a config, so N
    compiles run in N processes while the measuring worker measures (a crash there costs that config)."""

    def __init__(self, runner: WorkerRunner) -> None:
        self.runner = runner
        self.pool = compile_workers()
        self._current = _CompileSession()

    @contextlib.contextmanager
    def session(self, executor: Executor) -> Iterator[None]:
        """Held by the pipeline around the whole drain, and left before it waits for its pool threads. Left by
        an exception (Ctrl-C, a worker's error), it kills the compile workers this session's threads are using
        and starts no more compiles: a compile that hangs (no timeout under isolation, or a long one) would
        otherwise keep the pipeline waiting for its thread, and the exception from reaching the caller."""
        self._current = session = _CompileSession()
        try:
            yield
        except BaseException:
            session.end()
            raise

    def submit(self, config: Config, executor: Executor) -> Future:
        return executor.submit(self._compile, config, self._current)

    def _compile(self, config: Config, session: _CompileSession) -> float:
        with self.pool.borrow(self.runner.tuning.compile_workers) as worker:  # waits while all N are busy
            with session.using(worker):
                return self.runner.compile(config, worker)

    def finalize(self, config: Config, result: Any) -> Any:
        self.runner.compile_seconds[config] = result  # the seconds the compile took in the worker
        return result


class _CompileSession:
    """The compile workers one pipeline session's threads are using, so that `end` can kill them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._using: set[Worker] = set()
        self._ended = False

    @contextlib.contextmanager
    def using(self, worker: Worker) -> Iterator[None]:
        """Note that the calling thread compiles in `worker`; after `end`, refuse (no new compile starts)."""
        with self._lock:
            if self._ended:
                raise AutotuneError("the tuning ended before this config's compile started")
            self._using.add(worker)
        try:
            yield
        finally:
            with self._lock:
                self._using.discard(worker)

    def end(self) -> None:
        """Kill the process groups of the workers in use (`Worker.abort`: their threads get end-of-file at once
        and return; the pool replaces those workers later) and let no compile start from now on."""
        with self._lock:  # held while aborting: a thread cannot give a worker back to the pool meanwhile
            self._ended = True
            for worker in self._using:
                worker.abort()


def isolation_for(
    kernel: TunableKernel, calls: Sequence[tuple[BoundCall, Any]], objective: Objective | None = None
) -> WorkerRunner | None:
    """The runner for this tuning of (bound call, grid) `calls` (one call, or a set of calls measured together for
    `objective`), or None to tune in-process (isolation off, or `"auto"` when a worker could not run this kernel
    or these calls: said once per kernel)."""
    mode, source = isolate_setting(kernel.tuning, kernel.default_isolate)
    if mode == "off":
        return None
    recipe, reason = _how_to_load(kernel)
    load_problem = reason is not None
    encoded: list = []
    fix = "To isolate it, decorate it at the top level of an importable module"
    if reason is None:
        reason, fix = _unsendable_grid(calls) or (None, fix)
    size = sum(_tensor_bytes(bound) for bound, _ in calls)
    if reason is None and kernel.tuning.isolate_max_bytes is not None and size > kernel.tuning.isolate_max_bytes:
        _say_in_process_for_size(kernel, size, kernel.tuning.isolate_max_bytes, source, len(calls))
        return None
    if reason is None:
        encoded, reason = _encoded_calls(calls)
        fix = "To isolate it, pass tensors and plain values (ints, floats, strings, dtypes)" if reason else fix
    if reason is None:
        try:
            return WorkerRunner(kernel, calls, recipe, encoded, objective)
        except WorkerShutdownError:  # not a reason to tune in-process: the process is stopping its workers
            raise
        except _GridUnloadable as exc:
            reason, fix = str(exc), _GRID_FIX
        except AutotuneError as exc:
            reason, fix = str(exc), "To isolate it, fix what kept the worker from loading it"
    if mode == "process":
        raise OptionError(
            f"{source} on {kernel.name}: {reason}. {_PROCESS_FIX if load_problem else fix + _PROCESS_ELSE}"
        )
    with _noted_lock:
        first = kernel.identity not in _noted
        _noted.add(kernel.identity)
    if first:
        warn_at_caller(
            f"autotune: {kernel.name} is tuned in this process, not in a worker, so a config that crashes "
            f"would end the process: {reason}. {fix}; isolate='off' (or AUTOTUNE_ISOLATE=off) tunes "
            "in-process without this note",
            IsolationWarning,
        )
    return None


class _GridUnloadable(AutotuneError):
    """The worker could not rebuild a call's launch grid (its module is not importable there)."""


_GRID_FIX = (
    "To isolate it, make the grid's module importable in the worker (on sys.path or PYTHONPATH as the worker "
    "starts), launch it with a tuple, or give the decorator a $X grid= string"
)


def _raise_if_grid_unloadable(kernel: str, grids: Sequence[Any], exc: BaseException) -> None:
    """A call request the worker could not read names a module only through a grid (the arguments travel as
    plain values): blame the grid, naming it and its modules, not the loading of the kernel."""
    if not isinstance(exc, RuntimeError) or UNREADABLE_REQUEST not in str(exc):
        return
    for grid in grids:
        if grid is None or isinstance(grid, (tuple, list)):
            continue
        try:
            modules = sorted(_pickled_modules(pickle.dumps(grid)) - {"builtins", "functools"})
        except Exception:
            continue
        name = getattr(grid, "__qualname__", type(grid).__name__)
        raise _GridUnloadable(
            f"the tuning worker could not import {kernel}'s launch grid {name!r} (it refers to module "
            f"{', '.join(modules) or '?'}): {exc}"
        ) from None


def _unsendable_grid(calls: Sequence[tuple[BoundCall, Any]]) -> tuple[str, str] | None:
    """(why, fix) when a call's launch grid cannot be sent to a worker: a lambda does not pickle, and a function
    (or anything) of the caller's script pickles as a reference to `__main__`, which in a worker is not the
    script. A grid from a module the worker cannot import fails when the worker gets the call (`prepare`)."""
    for index, (_, grid) in enumerate(calls):
        where = f" (call {index} of the set)" if len(calls) > 1 else ""
        try:
            modules = _pickled_modules(pickle.dumps(grid))
        except Exception:
            return f"its launch grid {grid!r}{where} cannot be sent to a worker", (
                "To isolate it, launch it with a tuple or a module-level function as the grid (a lambda cannot be "
                "sent), or give the decorator a $X grid= string"
            )
        if "__main__" in modules:
            return (
                f"its launch grid {grid!r}{where} is defined in __main__ (a script or a notebook cell), which a "
                "worker cannot import",
                "To isolate it, define the grid function in an importable module, launch it with a tuple, or give "
                "the decorator a $X grid= string",
            )
    return None


_STRINGS = ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "STRING", "BINSTRING", "SHORT_BINSTRING")


def _pickled_modules(data: bytes) -> set[str]:
    """The modules whose names a pickle's globals refer to, read from its opcodes (nothing is unpickled):
    GLOBAL carries "module name"; STACK_GLOBAL takes the two strings pushed (or fetched from the memo) before it."""
    modules: set[str] = set()
    memo: dict[int, object] = {}
    pushed: list[object] = []  # what each opcode pushed: a string, else None
    for op, arg, _ in pickletools.genops(data):
        if op.name in ("GLOBAL", "INST"):
            modules.add(str(arg).split(" ", 1)[0])
        elif op.name == "STACK_GLOBAL" and len(pushed) >= 2 and isinstance(pushed[-2], str):
            modules.add(pushed[-2])
        if op.name == "MEMOIZE":
            memo[len(memo)] = pushed[-1] if pushed else None
        elif op.name in ("PUT", "BINPUT", "LONG_BINPUT") and isinstance(arg, int):
            memo[arg] = pushed[-1] if pushed else None
        elif op.name in ("GET", "BINGET", "LONG_BINGET") and isinstance(arg, int):
            pushed.append(memo.get(arg))
        else:
            pushed.append(arg if op.name in _STRINGS else None)
    return modules


def _encoded_calls(calls: Sequence[tuple[BoundCall, Any]]) -> tuple[list, str | None]:
    """Each call's arguments as a worker gets them, or why one of them cannot be sent."""
    encoded: list = []
    for index, (bound, _) in enumerate(calls):
        try:
            pickle.dumps(encode_call(bound.args, bound.kwargs, data=False))  # the tensors' bytes always pickle
            encoded.append(encode_call(bound.args, bound.kwargs))
        except Exception as exc:
            which = "the call" if len(calls) == 1 else f"call {index} of the set"
            return [], f"an argument of {which} cannot be sent to a worker ({type(exc).__name__}: {exc})"
    return encoded, None


def _tensor_bytes(bound: Any) -> int:
    """The bytes of the call's tensors as a worker gets them: a view's copy carries the storage span it covers (a
    column of a matrix is most of the matrix), so each counts its span, not its elements."""
    return sum(
        span_of(v.shape, v.stride()) * v.element_size()
        for v in bound.named.values()
        if hasattr(v, "stride") and hasattr(v, "element_size") and hasattr(v, "shape")
    )


def _say_in_process_for_size(kernel: TunableKernel, size: int, bound: int, source: str, calls: int = 1) -> None:
    """Warn (once per kernel) that a call, or a set of `calls`, is tuned in-process: a worker would hold copies of
    `size` bytes of tensors (every call's, together), over `isolate_max_bytes`."""
    with _noted_lock:
        first = (kernel.identity, "size") not in _noted
        _noted.add((kernel.identity, "size"))
    whose = "this call's tensors are" if calls == 1 else f"the tensors of these {calls} calls are, together,"
    if first:
        warn_at_caller(
            f"autotune: {kernel.name} is tuned in this process despite {source}: {whose} "
            f"{size / 2**30:.2f} GiB, over isolate_max_bytes={bound} ({bound / 2**30:.2f} GiB), and a worker would "
            "hold copies of them (about 3x their size at the peak). Raise Tuning(isolate_max_bytes=...) (None: no "
            "bound) to isolate calls this large, if the memory is there",
            IsolationWarning,
        )
