"""The specialization of a launch for an explicit target, computed by Triton's JIT's own code.

How: the kernel's binder (`triton.runtime.jit.create_function_from_signature`, built for the target's
backend) applied to the example arguments and the config's launch keywords, then `JITFunction._pack_args`,
with the option defaults `JITFunction.run` adds (debug, instrumentation mode). That yields exactly the
`ASTSource(fn, signature, constexprs, attrs)` and options that a launch with those arguments builds on a GPU
of that target, so `triton.compile(src, target=GPUTarget(...), options=...)` stores the result under the
same key the launch looks up.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import TYPE_CHECKING, Any

from ..errors import PrecompileError
from ..kernel.call import BoundCall
from ..kernel.identity import heuristics_layers, kernel_ref, python_function
from ..space.spaces import Config
from .subprocess_compilers import source_digest
from .targets import Target
from .triton_compile import triton_cache_dir

if TYPE_CHECKING:
    from ..decorator.autotuned import Autotuned

__all__ = ["Plan", "jit_function", "launch_values", "check_triton", "SUPPORTED_TRITON"]

SUPPORTED_TRITON = "3.6 to 3.9"


class Plan:
    """Everything the pool threads share for one precompile call (lives as long as that call)."""

    def __init__(
        self, kernel: Autotuned, args: tuple, kwargs: dict, processes: bool, *, helper_timeout_s: float | None = None
    ) -> None:
        self.kernel = kernel
        self.helper_timeout_s = helper_timeout_s  # a helper's compile, timed from when the helper is ready
        self.args = args
        self.kwargs = kwargs
        self.bound = kernel.bind(args, kwargs)
        self.processes = processes
        self.jit_fn = jit_function(kernel.base_fn)
        self.heuristics = heuristics_layers(kernel.fn, kernel.base_fn)
        # Where a helper process imports the kernel from: module, qualname, file, line.
        ref = kernel_ref(kernel.base_fn)
        if processes and ref.importable_reason is not None:  # said once here, not once per config by each helper
            raise PrecompileError(
                f"{ref.importable_reason}; compile helper processes import the kernel by name "
                "(or precompile from a process without TRITON_INTERPRET=1, which compiles in "
                "threads)"
            )
        # ... and the digest of the code it must find there (a helper that imported an older source is replaced)
        self.location = {**dataclasses.asdict(ref), "source": source_digest(python_function(kernel.base_fn))}
        self.cache_dir = triton_cache_dir()
        self._binders: dict[Target, tuple[Any, Any]] = {}
        self._lock = threading.Lock()

    def binder(self, target: Target) -> tuple[Any, Any]:
        with self._lock:
            found = self._binders.get(target)
            if found is None:
                from triton.compiler import make_backend
                from triton.runtime.jit import create_function_from_signature

                backend = make_backend(target.gpu_target())
                binder = create_function_from_signature(self.jit_fn.signature, self.jit_fn.params, backend)
                found = self._binders[target] = (backend, binder)
            return found

    def launch_kwargs(self, config: Config, target: Target) -> tuple[tuple, dict]:
        """The positional arguments and keywords a launch of `config` on `target` passes to the JIT (derived values,
        `triton.heuristics` and occupancy lowered for `target` included)."""
        return launch_values(self.kernel, self.heuristics, self.bound, config, target)

    def specialize(self, config: Config, target: Target) -> tuple[dict, dict, dict, dict]:
        """(signature, constexprs, attrs, options) as JITFunction.run builds them for this launch on `target`."""
        from triton import knobs

        backend, binder = self.binder(target)
        args, kwargs = self.launch_kwargs(config, target)
        # The option defaults JITFunction.run adds before binding (3.6: debug, instrumentation_mode; 3.9 also
        # fpsan_homomorphic_casts): they are part of the options' hash.
        kwargs["debug"] = kwargs.get("debug", getattr(self.jit_fn, "debug", None)) or knobs.runtime.debug
        for name in ("instrumentation_mode", "fpsan_homomorphic_casts"):
            if hasattr(knobs.compilation, name):
                kwargs[name] = getattr(knobs.compilation, name)
        try:
            bound, specialization, options = binder(*args, **kwargs)
        except TypeError as exc:
            raise PrecompileError(
                f"{self.kernel.name}: cannot bind the arguments for config {dict(config)}: {exc}. "
                f"Give every non-constexpr argument (example args or signature=) and a value for "
                f"every constexpr (the space, derive=, or signature=)"
            ) from None
        options, signature, constexprs, attrs = self.jit_fn._pack_args(backend, kwargs, bound, specialization, options)
        return signature, constexprs, attrs, dict(options.__dict__)


def launch_values(
    kernel: Autotuned, heuristics: list[Any], bound: BoundCall, config: Config, target: Target | None = None
) -> tuple[tuple, dict]:
    """(positional args, keywords) a launch of `config` passes to the JIT for a bound call: the config (its
    occupancy lowered for `target`, by default where this process launches), the `derive=` values, then each
    `triton.heuristics` layer (`heuristics`, outermost first) as Triton applies it."""
    args, kwargs, _ = kernel.launch_args(config, bound, (1,), target)
    for layer in heuristics:
        for name, heuristic in layer.values.items():
            kwargs[name] = heuristic({**dict(zip(layer.arg_names, args)), **kwargs})
    return args, kwargs


def jit_function(base: Any) -> Any:
    """A real JITFunction for the kernel: itself, or (under the interpreter) one built from its Python function."""
    from triton.runtime.jit import JITFunction

    if isinstance(base, JITFunction):
        return base
    cached = getattr(base, "_autotune_jit", None)
    if cached is not None:
        return cached
    kwargs = dict(getattr(base, "kwargs", {}) or {})
    jit_fn = JITFunction(base.fn, **kwargs)
    try:
        # Kept on the kernel object, as long as it lives: building a JITFunction parses the kernel's source,
        # and a kernel is precompiled for several targets and calls.
        base._autotune_jit = jit_fn
    except AttributeError:  # pragma: no cover - slots
        pass
    return jit_fn


def check_triton() -> None:
    """Raise PrecompileError unless this Triton has the JIT's binder and `_pack_args` that `Plan` relies on."""
    from triton.runtime.jit import JITFunction

    try:
        from triton.runtime.jit import create_function_from_signature  # noqa: F401
    except ImportError:
        create_function_from_signature = None  # type: ignore[assignment, unused-ignore]  # needed where triton is typed
    if create_function_from_signature is None or not hasattr(JITFunction, "_pack_args"):
        import triton

        raise PrecompileError(
            f"precompile needs Triton {SUPPORTED_TRITON} (the JIT's binder and _pack_args); "
            f"this is Triton {triton.__version__}"
        )
