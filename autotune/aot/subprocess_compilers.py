"""Helper processes that compile for explicit targets when this process's Triton is the interpreter.

Why: under TRITON_INTERPRET=1 (tests, CPU examples) the kernel and triton.language's own @jit helpers are
`InterpretedFunction`s that cannot generate code. A helper is a Python process started with
TRITON_INTERPRET=0; it imports the kernel's module by name (a script's `__main__` by file path, without
running its `if __name__ == "__main__":` block), so such a kernel must be defined at module level.
`processes=True` uses helpers for a JIT kernel too (they escape the GIL part of Triton's compile holds).

Pipe protocol: once its imports are done the helper says `{"ready": True}`; then one request, one reply, each a
pickle on the helper's stdin / stdout (only between this process and the child it started; nothing read from disk
is unpickled). A compile's timeout starts once its request reaches a ready helper (start-up is not counted) and
kills the helper's whole process group (ptxas with it) when it passes. A request is the kernel's
`KernelRef` fields (module, qualname, file, line) plus target, signature, constexprs (@jit functions
encoded by their `KernelRef` fields, `encode_constant`), attrs, options and Triton's cache dir; the reply is
`{"ok": True, "result": <compile_source's dict>}` or `{"ok": False, "error": text, "type": class name}`.
The helper's print()s go to its stderr, a temporary file read back when it dies.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
import types
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

from ..errors import PrecompileError
from ..kernel.identity import KernelRef, base_kernel, import_object, kernel_ref, python_function
from .targets import Target
from .triton_compile import compile_source

__all__ = [
    "HELPERS",
    "HelperDied",
    "HelperPool",
    "HelperTimeout",
    "RemoteCompileError",
    "compile_in_helper",
    "encode_constant",
    "helper_main",
    "is_compilation_error",
    "unimportable_constant",
]

_JIT_TAG = "__autotune_jit__"


# A helper whose imports (torch, Triton, the autotune package) take longer than this is given up on as hung.
HELPER_START_S = 300.0


class RemoteCompileError(Exception):
    """A compile error raised in a helper process (its message as the helper formatted it)."""


class HelperTimeout(Exception):
    """A compile in a helper ran past its timeout: the helper and its children (ptxas) were killed."""


class HelperDied(RuntimeError):
    """A helper process died (a crash, a signal, or killed by an interrupted precompile) before it replied."""


def is_compilation_error(exc: BaseException) -> bool:
    """Whether `exc` is Triton's CompilationError (whose message is already the compiler's report)."""
    return type(exc).__name__ == "CompilationError"


def _is_jit(value: Any) -> bool:
    from triton.runtime.jit import JITFunction

    return isinstance(value, JITFunction) or type(value).__name__ == "InterpretedFunction"


def encode_constant(value: Any) -> Any:
    """Constexpr values cross to a helper process by pickle; @jit functions go by where they are defined
    (module, qualname, file, line: a script's `__main__` is imported from its file)."""
    if _is_jit(value):
        ref = kernel_ref(value)
        return (_JIT_TAG, ref.module, ref.qualname, ref.file, ref.line)
    return value


def unimportable_constant(named_values: Iterable[tuple[str, Any]]) -> str | None:
    """Why a compile helper process could not rebuild one of these constexpr values (a @jit function defined
    in a closure, or in a `__main__` without a source file), or None: said once, before any compile, rather
    than by each helper for each config."""
    for name, value in named_values:
        if _is_jit(value):
            ref = kernel_ref(value)
            reason = ref.importable_reason
            if reason is None and ref.module == "__main__" and not os.path.isfile(ref.file or ""):
                reason = f"{ref.qualname} is defined in __main__, whose source {ref.file} is not a file"
            if reason is not None:
                return (
                    f"{reason}; it is passed as the constexpr {name}, and a compile helper process imports "
                    "@jit functions by name: put it in a module, or precompile from a process without "
                    "TRITON_INTERPRET=1"
                )
    return None


# ------------------------------------------------------------------------------------------------ in the helper


class _KernelResolver:
    """The helper's kernels by name: each imported once for the life of its serve loop (importing a module
    again would run it again and make new JITFunctions); the pool restarts a helper whose environment changed."""

    def __init__(self) -> None:
        self._found: dict[tuple[str, str], Any] = {}

    def jit(self, ref: KernelRef) -> Any:
        """The JITFunction `ref` names, imported in this (non-interpreted) process."""
        from triton.runtime.jit import JITFunction

        key = (ref.module, ref.qualname)
        if key in self._found:
            return self._found[key]
        # Plan refuses these in the parent already (once, before any job); a file that vanished since is not
        reason = ref.importable_reason
        if reason is None and ref.module == "__main__" and not os.path.exists(ref.file or ""):
            reason = f"{ref.qualname} is defined in __main__, whose file {ref.file} is gone"
        if reason is not None:
            raise PrecompileError(
                f"{reason}; a compile helper process imports kernels by name: put it in a module, "
                "or precompile from a process without TRITON_INTERPRET=1"
            )
        obj = base_kernel(import_object(ref))
        if not isinstance(obj, JITFunction):
            raise PrecompileError(
                f"{ref.module}:{ref.qualname} is not a @triton.jit kernel in the compile helper "
                f"(got {type(obj).__name__}); does its module set TRITON_INTERPRET=1 on import? "
                f"Use os.environ.setdefault so the helper's TRITON_INTERPRET=0 wins"
            )
        self._found[key] = obj
        return obj

    def constant(self, value: Any) -> Any:
        """A constexpr value as `encode_constant` sent it, with @jit functions imported here."""
        if isinstance(value, tuple) and len(value) == 5 and value[0] == _JIT_TAG:
            return self.jit(KernelRef(module=value[1], qualname=value[2], file=value[3], line=value[4]))
        return value


def helper_main() -> None:
    """The helper process: read compile requests from stdin, answer on stdout (print()s go to stderr)."""
    os.environ["TRITON_INTERPRET"] = "0"
    protocol_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    protocol_in = sys.stdin.buffer
    warnings.simplefilter("ignore")
    import triton

    with contextlib.suppress(Exception):  # what a kernel's module imports first: its seconds are start-up, not compile
        import torch  # noqa: F401
    pickle.dump({"ready": True}, protocol_out, protocol=pickle.HIGHEST_PROTOCOL)  # a compile's timeout starts now
    protocol_out.flush()
    resolver = _KernelResolver()
    while True:
        try:
            request = pickle.load(protocol_in)
        except EOFError:
            return
        try:
            if request.get("cache_dir"):
                os.environ["TRITON_CACHE_DIR"] = request["cache_dir"]
                triton.knobs.cache.dir = request["cache_dir"]
            ref = KernelRef(
                module=request["module"],
                qualname=request["qualname"],
                file=request.get("file"),
                line=request.get("line"),
            )
            jit_fn = resolver.jit(ref)
            if request.get("source") not in (None, source_digest(jit_fn.fn)):  # imported before an edit
                pickle.dump({"ok": False, "stale": True}, protocol_out, protocol=pickle.HIGHEST_PROTOCOL)
                protocol_out.flush()
                continue
            constexprs = {k: resolver.constant(v) for k, v in request["constexprs"].items()}
            result = compile_source(
                jit_fn,
                Target(*request["target"]),
                request["signature"],
                constexprs,
                request["attrs"],
                request["options"],
            )
            reply = {"ok": True, "result": result}
        except BaseException as exc:  # noqa: BLE001 - every failure goes back as data
            if isinstance(exc, KeyboardInterrupt):
                raise
            reply = {
                "ok": False,
                "error": f"{exc.__class__.__name__}: {exc}" if not is_compilation_error(exc) else str(exc),
                "type": exc.__class__.__name__,
            }
        pickle.dump(reply, protocol_out, protocol=pickle.HIGHEST_PROTOCOL)
        protocol_out.flush()


# ------------------------------------------------------------------------------------------------ in this process


class _Helper:
    """A Python process without the interpreter that compiles for us (requests and replies pickled on its pipes),
    the leader of a process group of its own: killing it kills the ptxas it runs too."""

    def __init__(self, env: dict[str, str], fingerprint: tuple) -> None:
        self.fingerprint = fingerprint
        self.modules: set[str] = set()  # the modules it imported kernels from (a stale reply drops their helpers)
        self.killed = False  # killed (or being killed): never asked again, never put back idle
        self._ready = False
        self._timed_out = False
        self.log = tempfile.TemporaryFile()
        command = [sys.executable, "-c", "from autotune.aot.subprocess_compilers import helper_main; helper_main()"]
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            env=env,
            cwd=os.getcwd(),
            start_new_session=True,  # its own process group: see kill_group
        )

    def call(self, request: dict, timeout_s: float | None = None) -> dict:
        """The helper's reply to `request`; HelperTimeout when it takes over `timeout_s`, counted from when the
        helper is ready (its start-up is not the compile's), HelperDied when the helper dies first."""
        assert self.proc.stdin is not None  # Popen'd as a PIPE
        if not self._ready:
            self._read(HELPER_START_S, f"did not finish its imports within {HELPER_START_S:g} s")
            self._ready = True
        self.modules.add(request["module"])
        try:
            pickle.dump(request, self.proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self.proc.stdin.flush()
        except OSError as exc:
            raise self._died(exc) from None
        return self._read(timeout_s, None)

    def _read(self, timeout_s: float | None, hung: str | None) -> dict:
        """The next message on the helper's stdout, killing the helper if none came within `timeout_s`
        (`hung`: what that means at start-up; None: a compile past its timeout, HelperTimeout)."""
        assert self.proc.stdout is not None  # Popen'd as a PIPE
        timer = threading.Timer(timeout_s, self._expire) if timeout_s is not None else None
        if timer is not None:
            timer.daemon = True
            timer.start()
        try:
            return pickle.load(self.proc.stdout)
        except (EOFError, OSError, pickle.UnpicklingError) as exc:
            if self._timed_out and hung is None:
                raise HelperTimeout(
                    f"compiling took longer than timeout_s={timeout_s:g} (--timeout): its compile helper process "
                    "(and its ptxas) was killed"
                ) from None
            if self._timed_out:
                raise HelperDied(f"the compile helper process {hung}; it was killed") from None
            raise self._died(exc) from None
        finally:
            if timer is not None:
                timer.cancel()
                timer.join()  # an expiry already running has killed the helper by now: never handed out again

    def _expire(self) -> None:
        self.killed = True
        self._timed_out = True
        self.kill_group()

    def _died(self, exc: BaseException) -> HelperDied:
        code = self.proc.poll()
        return HelperDied(
            f"the compile helper process died (exit status {code}, {exc.__class__.__name__}); "
            f"its stderr ends with:\n{self.stderr_tail()}"
        )

    def stderr_tail(self, limit: int = 2000) -> str:
        try:
            self.log.seek(0, os.SEEK_END)
            size = self.log.tell()
            self.log.seek(max(0, size - limit))
            return self.log.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""

    def alive(self) -> bool:
        return not self.killed and self.proc.poll() is None

    def kill_group(self) -> None:
        """SIGKILL the helper's process group (the helper and the ptxas it runs); its reader gets EOF at once."""
        self.killed = True
        if self.proc.returncode is not None:  # reaped: its process group id may name another group by now
            return
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def kill(self) -> None:
        self.kill_group()
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=10)
        self.log.close()

    def close(self) -> None:
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except Exception:  # noqa: BLE001
            self.kill_group()
        finally:
            self.log.close()


def _helper_env() -> tuple[dict[str, str], tuple]:
    env = dict(os.environ)
    env["TRITON_INTERPRET"] = "0"
    paths = [p if p else os.getcwd() for p in sys.path]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    # What a compile depends on; TRITON_CACHE_DIR travels with each request instead.
    fingerprint = (
        tuple(
            sorted(
                (k, v)
                for k, v in env.items()
                if k.startswith(("TRITON_", "MLIR_", "LLVM_")) and k not in ("TRITON_CACHE_DIR", "TRITON_INTERPRET")
            )
        ),
        env["PYTHONPATH"],
    )
    return env, fingerprint


class HelperPool:
    """Helper processes kept across precompile calls (starting one costs the imports of torch and triton).

    An idle helper is reused only while this process's environment (Triton's variables, PYTHONPATH) still
    matches the one it was started with; otherwise it is closed and a fresh one started.
    """

    def __init__(self) -> None:
        self._idle: list[_Helper] = []
        self._all: list[_Helper] = []
        self._busy: dict[object, _Helper] = {}  # the helper compiling each owner's request (`busy_with`)
        self._lock = threading.Lock()

    def acquire(self, *, fresh: bool = False) -> _Helper:
        """An idle helper started in this environment, else a new one (`fresh`: always a new one)."""
        env, fingerprint = _helper_env()
        with self._lock:
            while self._idle and not fresh:
                helper = self._idle.pop()
                if helper.alive() and helper.fingerprint == fingerprint:
                    return helper
                self._close_forgotten(helper)
        helper = _Helper(env, fingerprint)
        with self._lock:
            self._all.append(helper)
        return helper

    def release(self, helper: _Helper) -> None:
        with self._lock:
            if helper.alive():
                self._idle.append(helper)
            else:
                self._close_forgotten(helper)

    def _close_forgotten(self, helper: _Helper) -> None:
        if helper in self._all:
            self._all.remove(helper)
        helper.close()

    @contextlib.contextmanager
    def busy_with(self, owner: object, helper: _Helper) -> Iterator[None]:
        """`helper` compiles `owner`'s request meanwhile (`kill_busy(owner)` kills it)."""
        if owner is None:
            yield
            return
        with self._lock:
            self._busy[owner] = helper
        try:
            yield
        finally:
            with self._lock:
                self._busy.pop(owner, None)

    def kill_busy(self, owner: object) -> None:
        """Kill the helper compiling `owner`'s request (a compile past its timeout, or a precompile interrupted):
        its caller's wait ends at once, with an error."""
        with self._lock:  # under the lock: once `owner` is done its helper may be handed to another compile
            helper = self._busy.get(owner)
            if helper is not None:
                helper.kill_group()

    def discard_idle_importing(self, module: str) -> None:
        """Kill the idle helpers that imported `module`: one replied it holds an older source of it than ours."""
        with self._lock:
            stale = [h for h in self._idle if module in h.modules]
            self._idle = [h for h in self._idle if h not in stale]
            self._all = [h for h in self._all if h not in stale]
        for helper in stale:
            helper.kill()

    def discard(self, helper: _Helper) -> None:
        """Kill `helper` and forget it: one whose pipe may still hold a reply to a request given up on."""
        with self._lock:
            if helper in self._all:
                self._all.remove(helper)
        helper.kill()

    def close(self) -> None:
        with self._lock:
            helpers, self._all, self._idle = self._all, [], []
        for helper in helpers:
            helper.close()


# The process's helpers outlive one precompile call on purpose: each costs the imports of torch and Triton
# (seconds) to start, and a service or test session precompiles several kernels. At most one per compile
# thread is busy at a time; they are closed at exit (and when their environment no longer matches).
HELPERS = HelperPool()
atexit.register(HELPERS.close)


def compile_in_helper(request: dict, owner: object = None, timeout_s: float | None = None) -> dict[str, Any]:
    """Send one compile request to an idle helper (started if none); its result, or RemoteCompileError. A helper
    that imported the kernel before its source was edited is replaced, with every idle one that imported that module,
    by a fresh one (which imports the file). `owner` names the compile for `HELPERS.kill_busy` (a compile given up
    on: its helper is killed); `timeout_s` bounds the compile once a helper is ready (HelperTimeout)."""
    reply = _ask_a_helper(request, owner, timeout_s)
    if reply.get("stale"):
        HELPERS.discard_idle_importing(request["module"])
        reply = _ask_a_helper(request, owner, timeout_s, fresh=True)
    if reply.get("stale"):
        raise PrecompileError(
            f"{request['module']}:{request['qualname']} in this process is not the source its file holds now "
            f"({request.get('file')}): a compile helper imports the file; reload the module (or restart) so both "
            "compile the same kernel"
        )
    if not reply["ok"]:
        raise RemoteCompileError(reply["error"])
    return reply["result"]


def _ask_a_helper(request: dict, owner: object, timeout_s: float | None, *, fresh: bool = False) -> dict[str, Any]:
    helper = HELPERS.acquire(fresh=fresh)
    try:
        with HELPERS.busy_with(owner, helper):
            reply = helper.call(request, timeout_s)
    except BaseException:  # interrupted (Ctrl-C), killed or died: its reply may still come; it is never asked again
        HELPERS.discard(helper)
        raise
    if reply.get("stale"):
        HELPERS.discard(helper)
    else:
        HELPERS.release(helper)
    return reply


def source_digest(fn: Any) -> str:
    """A digest of a kernel function's code (bytecode, constants, names; not its file or line numbers) and of the
    @jit functions it calls by global name, recursively: the same in this process and in a helper that imported
    the same sources, whatever the files hold now (an edit to a @jit function the kernel calls changes it too)."""
    texts: list[str] = []
    seen: set[int] = set()
    todo = [fn]
    while todo and len(seen) < _MAX_DEPENDENCIES:  # depth first, in the order of the names each function uses
        current = todo.pop()
        if id(current) in seen or not isinstance(getattr(current, "__code__", None), types.CodeType):
            continue
        seen.add(id(current))
        texts.append(_code_text(current.__code__))
        namespace = getattr(current, "__globals__", {})
        called = [namespace.get(name) for name in sorted(_global_names(current.__code__))]
        todo.extend(python_function(v) for v in reversed(called) if v is not None and _is_jit(v))
    return hashlib.sha256("\n".join(texts).encode()).hexdigest()


_MAX_DEPENDENCIES = 1000  # @jit functions followed from one kernel: a bound on the walk, far above real kernels


def _global_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _code_text(code: types.CodeType) -> str:
    consts = [_code_text(c) if isinstance(c, types.CodeType) else repr(c) for c in code.co_consts]
    return repr((code.co_code.hex(), consts, code.co_names, code.co_varnames))
