"""`verify=Reference(...)`: a config's outputs checked against a reference function's. Its own module so that
declaring a kernel (and `import autotune`) does not load the tuner."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .errors import AutotuneError, FailureKind, OptionError, VerificationError, classify

__all__ = ["Reference", "check_verified"]


def run_hook(what: str, hook: Callable[..., Any], named_args: Mapping[str, Any]) -> Any:
    """Call a user's `setup=` on the call's arguments, before a config's run. Its own error (a bug in the hook,
    not a config's failure: it runs before every config) is an AutotuneError naming it; an interrupt, a device's
    error (poisoned by the config before it), memory running out or an error of autotune's own passes as it is."""
    try:
        return hook(**named_args)
    except Exception as exc:
        if not _the_hooks_own(exc) or "out of memory" in str(exc).lower():
            raise
        raise AutotuneError(
            f"{what} ({_name(hook)}) raised {type(exc).__name__}: {exc}; it runs before every config's trial, so no "
            f"config can be tuned past it: fix {what}"
        ) from exc


def check_verified(verify: Any, named_args: Mapping[str, Any], expected: Any = None) -> None:
    """Run `verify=` on a config's outputs: a `Reference` compares them with `expected`, a predicate must return
    true. VerificationError when the config is wrong, named as the predicate's when it raised (an assert, or an
    error the config's outputs caused: an index past a table); OptionError when the predicate returned None (a
    `verify=` that forgot its `return` would otherwise reject every config as "returned False")."""
    if isinstance(verify, Reference):
        verify.check(named_args, expected)
        return
    try:
        result = verify(**named_args)
    except Exception as exc:
        if not _the_hooks_own(exc):
            raise
        said = f": {exc}" if str(exc) else ""
        reason = f"rejected the outputs (assert failed{said})" if isinstance(exc, AssertionError) else None
        raise VerificationError(f"verify= ({_name(verify)}) {reason or f'raised {type(exc).__name__}{said}'}") from exc
    if result is None:
        raise OptionError(
            f"verify= ({_name(verify)}) returned None instead of True or False: return whether the outputs "
            "are right (a missing `return`?)"
        )
    numel = getattr(result, "numel", None)
    if callable(numel) and numel() != 1:
        raise OptionError(
            f"verify= ({_name(verify)}) returned a tensor of {numel()} elements instead of True or False: "
            "reduce it to one answer, e.g. `(out == x + y).all()` or `torch.allclose(out, x + y)`"
        )
    if not result:
        raise VerificationError(f"verify(...) returned {result!r}")


def _the_hooks_own(exc: Exception) -> bool:
    """Whether a hook's exception is its own (a bug, or its verdict), not a device's or one of autotune's."""
    return not isinstance(exc, AutotuneError) and classify(exc, "run") is FailureKind.CONFIG


def _name(hook: Any) -> str:
    return getattr(hook, "__name__", type(hook).__name__)


class Reference:
    """`verify=Reference(fn, outputs=("out",), atol=..., rtol=...)`: compare a config's outputs with `fn`'s.

    `fn(**named_args)` returns the expected value of each output argument (one tensor, a sequence in the
    order of `outputs`, or a dict by name). It is computed once per tuning, on the arguments as passed.
    """

    def __init__(
        self, fn: Callable[..., Any], *, outputs: Sequence[str], atol: float = 1e-5, rtol: float = 1e-5
    ) -> None:
        if isinstance(outputs, str):
            outputs = (outputs,)
        if not outputs:
            raise OptionError("Reference needs the names of the output arguments to compare: outputs=('out',)")
        if not callable(fn):
            raise OptionError(
                f"Reference(fn, ...) takes the reference function, fn(**args) -> the expected outputs; "
                f"got {type(fn).__name__}: {fn!r}"
            )
        for name, tolerance in (("atol", atol), ("rtol", rtol)):
            number = isinstance(tolerance, numbers.Real) and not isinstance(tolerance, bool)
            if not (number and 0 <= tolerance < float("inf")):
                raise OptionError(
                    f"Reference({name}={tolerance!r}): a tolerance is a finite number >= 0, e.g. {name}=1e-5"
                )
        self.fn = fn
        self.outputs = tuple(outputs)
        self.atol = float(atol)
        self.rtol = float(rtol)

    def expected(self, named_args: Mapping[str, Any]) -> dict[str, Any]:
        """Run the reference once and map each output name to its expected tensor."""
        value = self.fn(**named_args)
        what = f"verify=Reference({getattr(self.fn, '__name__', self.fn)!r})"
        if isinstance(value, Mapping):
            missing = [name for name in self.outputs if name not in value]
            if missing:
                raise OptionError(
                    f"{what} returned a dict without {', '.join(map(repr, missing))}: key it by the "
                    f"output names, outputs={self.outputs}"
                )
            values = [value[name] for name in self.outputs]
        else:
            values = list(value) if isinstance(value, (tuple, list)) else [value]
            if len(values) != len(self.outputs):
                raise OptionError(
                    f"{what} returned {len(values)} values for outputs={self.outputs}: return one "
                    "tensor per output name, in that order, or a dict keyed by those names"
                )
        for name, v in zip(self.outputs, values):
            if not callable(getattr(v, "detach", None)):
                raise OptionError(
                    f"{what} returned {type(v).__name__} for output {name!r}, not a tensor: the "
                    f"reference returns the expected values (`return x * 2`), it does not write them "
                    f"into the kernel's arguments"
                )
            shape = getattr(named_args.get(name), "shape", None)
            if shape is not None and tuple(v.shape) != tuple(shape):
                raise OptionError(
                    f"{what} returned shape {tuple(v.shape)} for output {name!r}, whose argument has "
                    f"shape {tuple(shape)}: return the whole expected output"
                )
        return {name: v.detach().clone() for name, v in zip(self.outputs, values)}

    def check(self, named_args: Mapping[str, Any], expected: Mapping[str, Any]) -> None:
        """Raise VerificationError naming the first output that differs beyond atol/rtol."""
        import torch

        for name in self.outputs:
            got, want = named_args[name], expected[name]
            common = _compared_as(torch.promote_types(got.dtype, want.dtype))
            got, want = got.to(common), want.to(device=got.device, dtype=common)
            if got.shape != want.shape or not torch.allclose(got, want, atol=self.atol, rtol=self.rtol, equal_nan=True):
                diff = (
                    (got - want).abs().max().item()
                    if got.shape == want.shape
                    else f"shape {tuple(got.shape)} != {tuple(want.shape)}"
                )
                raise VerificationError(
                    f"output {name!r} differs from the reference (max abs diff {diff}, "
                    f"atol={self.atol}, rtol={self.rtol})"
                )


def _compared_as(dtype: Any) -> Any:
    """The dtype two outputs are compared in: float32 for narrower floats (their rounding is what atol/rtol
    allow for), float64 and complex as they are, and float64 for integers and bools (exact to 2**53)."""
    import torch

    if dtype.is_complex or dtype == torch.float64:
        return dtype
    return torch.float32 if dtype.is_floating_point else torch.float64
