"""What a decorated kernel is made of, found in one place: the Triton function under the wrappers, its Python
function, its constexpr parameters, and a reference (module + qualified name) another process can import.

Wrappers such as `triton.heuristics`, `@autotune` and `autotune.compat` each keep the wrapped object in `.fn`;
every module that needs the layers below asks here instead of walking `.fn` itself.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
import threading
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, cast

from ..fork_safety import reset_in_forked_child

_MAX_LAYERS = 16


def base_kernel(fn: Any) -> Any:
    """The innermost Triton function (`JITFunction`, or `InterpretedFunction` under the interpreter) under
    wrappers that keep it in `.fn`; `fn` itself when there is none."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    inner = fn
    for _ in range(_MAX_LAYERS):
        if isinstance(inner, (JITFunction, InterpretedFunction)):
            return inner
        inner = getattr(inner, "fn", None)
        if inner is None:
            break
    return fn


def is_interpreted(base: Any) -> bool:
    """Whether `base` (from `base_kernel`) runs in Triton's CPU interpreter."""
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(base, InterpretedFunction)


def has_dtype_stand_ins(values: Iterable[Any]) -> bool:
    """Whether a call holds Triton's `MockTensor`s: `KernelInterface.warmup` passes dtypes in place of tensors."""
    from triton.runtime.jit import MockTensor

    return any(isinstance(value, MockTensor) for value in values)


_INTERPRETER_CHECKED = threading.Event()


def warn_if_interpreter_breaks() -> None:
    """Once per process, for an interpreted kernel: Triton 3.6's interpreter turns a tensor into an index with
    `int()` on a one-element array, which NumPy 2.4 refuses, so a kernel that loops to a computed bound
    (`range(0, tl.cdiv(K, BLOCK_K))`) fails every config. Triton 3.7 fixed it; say so before tuning fails."""
    if _INTERPRETER_CHECKED.is_set():
        return
    _INTERPRETER_CHECKED.set()
    import numpy
    import triton

    from ..errors import warn_at_caller

    try:
        numpy_version = tuple(int(part) for part in numpy.__version__.split(".")[:2])
    except ValueError:  # a development build: no claim either way
        return
    if triton.__version__.startswith("3.6.") and numpy_version >= (2, 4):
        warn_at_caller(
            f"autotune: Triton {triton.__version__}'s interpreter (TRITON_INTERPRET=1) cannot run kernels "
            f"that use a tensor as an index (a loop to range(0, tl.cdiv(K, BLOCK_K))) with NumPy "
            f"{numpy.__version__}: every config would fail with 'only 0-dimensional arrays can be "
            "converted to Python scalars'. Install numpy<2.4, or Triton 3.7 or later.",
            RuntimeWarning,
        )


# Triton's interpreter keeps per-launch state in module globals (it patches `triton.language` during a launch),
# so two threads launching interpreted kernels at once break each other ("Did you forget to add @triton.jit?").
# Every launch autotune makes of an interpreted kernel (trials and the winner's launches) holds this lock, so a
# threaded program behaves as it would on a GPU. Reentrant: a launch may happen inside a locked section.
INTERPRETER_LOCK = threading.RLock()
_NO_LOCK = nullcontext()


@reset_in_forked_child
def _after_fork_in_child() -> None:
    """Another thread launching at a fork does not exist in the child: its hold is freed there (one the forking
    thread holds stays, for it to release)."""
    # CPython's RLock has both (3.9+); typeshed leaves private methods out
    if not INTERPRETER_LOCK._is_owned():  # type: ignore[attr-defined]
        INTERPRETER_LOCK._at_fork_reinit()  # type: ignore[attr-defined]


def launch_lock(interpreted: bool) -> AbstractContextManager:
    """The lock a launch of a kernel must hold: the interpreter's lock, or nothing on a GPU."""
    return INTERPRETER_LOCK if interpreted else _NO_LOCK


def python_function(kernel: object) -> Callable:
    """The plain Python function the kernel was written as, under every wrapper and the JIT."""
    obj = kernel
    for _ in range(_MAX_LAYERS):
        if inspect.isfunction(obj):
            return obj
        nxt = getattr(obj, "fn", None)
        if nxt is None or nxt is obj:
            break
        obj = nxt
    return cast(Callable, obj)  # a callable object with no `fn` (Triton's JIT always has one)


def constexpr_names(base: Any) -> list[str]:
    """Names of the kernel's `tl.constexpr` parameters (from the JIT's params, or the annotations)."""
    params = getattr(base, "params", None)
    if params and hasattr(params[0], "is_constexpr"):
        return [p.name for p in params if p.is_constexpr]
    names = []
    for p in inspect.signature(python_function(base)).parameters.values():
        ann = p.annotation
        text = ann if isinstance(ann, str) else getattr(ann, "__name__", repr(ann))
        if ann is not inspect.Parameter.empty and "constexpr" in str(text):
            names.append(p.name)
    return names


def wrapper_layers(fn: Any, base: Any = None) -> list[Any]:
    """`fn` and the objects under it that wrappers keep in `.fn` (triton.heuristics, autotuners), outermost first,
    down to `base` (excluded) or to the end of the chain."""
    layers = []
    obj = fn
    for _ in range(_MAX_LAYERS):
        if obj is base or obj is None:
            break
        layers.append(obj)
        obj = getattr(obj, "fn", None)
    return layers


def tuned_under(obj: Any) -> tuple[Any, list[Any]] | None:
    """The autotuned kernel at or under `obj` (an @autotune kernel, or an autotune.compat kernel's `tuner`) and the
    `triton.heuristics` layers above it, outermost first; None when there is none."""
    layers: list[Any] = []
    for layer in wrapper_layers(obj):
        engine = getattr(layer, "tuner", layer)
        if hasattr(engine, "bind") and hasattr(engine, "select"):
            return engine, layers
        layers.append(layer)
    return None


def heuristic_kwargs(layers: list[Any], args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The keywords the `triton.heuristics` layers above an autotuner add to a call, as their `run` adds them: one
    rule at a time, each seeing the values of the rules before it in its layer."""
    for layer in layers:
        named = {**dict(zip(layer.arg_names, args)), **kwargs}
        kwargs = dict(kwargs)
        for name, rule in layer.values.items():
            kwargs[name] = named[name] = rule(named)
    return kwargs


def heuristics_layers(fn: Any, base: Any) -> list[Any]:
    """`triton.heuristics` wrappers between a decorated object `fn` and its base kernel, outermost first."""
    return [
        obj
        for obj in wrapper_layers(fn, base)
        if isinstance(getattr(obj, "values", None), dict) and hasattr(obj, "arg_names")
    ]


SCRIPT_MODULE = "__autotune_main__"  # the name a script's `__main__` is imported under in another process


@dataclass(frozen=True)
class KernelRef:
    """Where a kernel is defined: enough for another process to import it, and for the cache to tell two
    kernels with the same short name apart."""

    module: str  # the defining module's name ("__main__" for a script)
    qualname: str  # the function's qualified name ("outer.<locals>.kernel" for a closure)
    file: str | None  # the source file, used to import a script's `__main__` elsewhere
    line: int | None

    @property
    def importable_reason(self) -> str | None:
        """Why another process cannot import this kernel by name, or None when it can."""
        if "<locals>" in self.qualname:
            return (
                f"{self.qualname} is defined inside a function (a closure); another process can only import "
                "module-level kernels: move it to module level"
            )
        if self.module == "__main__" and not self.file:
            return f"{self.qualname} is defined in __main__ without a source file (a notebook cell or -c)"
        return None


def kernel_ref(kernel: object) -> KernelRef:
    """The `KernelRef` of a kernel or any wrapper of it (read from its Python function, since under the
    interpreter the kernel object's own `__module__` is Triton's)."""
    fn = python_function(kernel)
    code = getattr(fn, "__code__", None)
    module = getattr(fn, "__module__", None) or "__main__"
    return KernelRef(
        module="__main__" if module == SCRIPT_MODULE else module,  # a script's kernel, imported by a sweep worker
        qualname=getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn),
        file=code.co_filename if code is not None else None,
        line=code.co_firstlineno if code is not None else None,
    )


def import_object(ref: KernelRef) -> Any:
    """Import the object `ref` names (the decorated object as the module holds it). A script's `__main__` is
    imported from its file under the name `__autotune_main__`. Raises ImportError saying why it cannot."""
    reason = ref.importable_reason
    if reason is not None:
        raise ImportError(reason)
    if ref.module == "__main__":
        module = sys.modules.get(SCRIPT_MODULE)
        if module is None:
            spec = importlib.util.spec_from_file_location(SCRIPT_MODULE, ref.file)
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot import {ref.file} to find {ref.qualname}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[SCRIPT_MODULE] = module
            spec.loader.exec_module(module)
    else:
        module = importlib.import_module(ref.module)
    obj = _attribute(module, ref.qualname)
    if obj is _MISSING:
        raise ImportError(f"{ref.module} has no attribute {ref.qualname!r} (was it renamed, or defined conditionally?)")
    return obj


def script_imported(ref: KernelRef) -> bool:
    """Whether `ref`'s script is imported in this process as a module (`SCRIPT_MODULE`, as a sweep worker imports
    it): its top level ran without starting its work, so another process may import it the same way."""
    module = sys.modules.get(SCRIPT_MODULE)
    return ref.module == "__main__" and module is not None and getattr(module, "__file__", None) == ref.file


def imported_object(ref: KernelRef) -> Any:
    """What `ref` names in this process, without importing anything: None when its module is not imported (yet)
    or holds no such name."""
    module = sys.modules.get(SCRIPT_MODULE if script_imported(ref) else ref.module)
    obj = _attribute(module, ref.qualname) if module is not None else None
    return None if obj is _MISSING else obj


_MISSING = object()


def _attribute(obj: Any, qualname: str) -> Any:
    """`obj.a.b` for qualname "a.b", or `_MISSING`."""
    for part in qualname.split("."):
        obj = getattr(obj, part, _MISSING)
        if obj is _MISSING:
            break
    return obj
