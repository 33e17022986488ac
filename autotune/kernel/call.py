"""One call's arguments (`BoundCall`), what it launched (`Launch`), and the checks `Autotuned.bind` runs before
any tuning: a mistake in the call is the caller's, and no config can fix it, so it is raised at once with the fix
instead of failing inside every trial (or, under the interpreter, being silently dropped)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from ..errors import CallError, OptionError, did_you_mean
from ..format import shorten
from ..space.checks import CHECKED_OPTIONS, compile_option_problem
from .compile_options import backend_option_fields, compile_option_names
from .occupancy import FIELD as OCCUPANCY

if TYPE_CHECKING:
    from ..record import TuningRecord
    from ..space.spaces import Config

__all__ = [
    "BoundCall",
    "CallSignature",
    "Found",
    "How",
    "Launch",
    "argument_makers",
    "launch_option_names",
    "made_args",
    "need_grid",
]

Found = Literal["memory", "disk", "remote", "tuned"]
"""Where `KernelCache.get_or_tune` found a key's record: a cache tier, or a tuning it ran."""

How = Literal["memory", "disk", "remote", "tuned", "cache", "disabled", "offline", "online", "capture"]
"""How a call's config was chosen: `Found`'s, a stored record read without tuning or waiting ("cache"),
AUTOTUNE_DISABLE's fallback ("disabled"), AUTOTUNE_OFFLINE's ("offline"), an online tuning's pick ("online"), or
a pick inside a CUDA-graph capture before any winner ("capture")."""


def launch_option_names() -> frozenset[str]:
    """Every keyword Triton's `JITFunction.run` accepts besides the kernel's arguments: the fields of the installed
    backends' options dataclasses (including those that are no tuning knob, such as `debug`), as Triton checks a
    launch's keywords against them."""
    return backend_option_fields()


@dataclasses.dataclass(frozen=True)
class BoundCall:
    """One call's arguments: as passed (`args`, `kwargs`) and by parameter name with defaults filled in
    (`named`: the kernel's parameters only; launch options such as num_warps= stay in `kwargs`). Made by
    `Autotuned.bind`; the key, the grid, the hooks and every launch read it."""

    args: tuple
    kwargs: dict
    named: dict


class Launch(NamedTuple):
    """What one call launched: Triton's return value, the config, its record, how the config was found, and
    the call's arguments and the grid and keyword arguments `fn.run` was given (a callable grid, as given)."""

    result: Any
    config: Config
    record: TuningRecord | None
    how: How
    bound: BoundCall
    grid: Any
    launch_kwargs: dict


class CallSignature:
    """What a call of one autotuned kernel may pass: its arguments (`arg_names`), the names each config sets
    (`tuned`: the space's fields and derive='s) and the decorator's static compile options (`static`)."""

    __slots__ = ("kernel", "arg_names", "tuned", "static", "first_tuned")

    def __init__(
        self, kernel: str, arg_names: Sequence[str], tuned: Collection[str], static: Mapping[str, Any]
    ) -> None:
        self.kernel = kernel
        self.arg_names = tuple(arg_names)
        self.tuned = frozenset(tuned)
        self.static = dict(static)
        # A call with no keywords and at most this many positional arguments has nothing to check (the hot path).
        self.first_tuned = min((i for i, n in enumerate(self.arg_names) if n in self.tuned), default=len(arg_names))

    def check(self, args: tuple, kwargs: Mapping[str, Any], *, strict: bool) -> None:
        """Raise for a call's mistakes. Always: an argument given by position and by keyword, a tuned field given
        by keyword. With `strict` (the native call path; the triton.autotune drop-in passes unknown keywords
        through, as Triton's Autotuner does): a tuned field given by position, a keyword that is also a static
        option of the decorator (which would silently win), a keyword that is neither a kernel argument nor a
        Triton launch option (a typo: the interpreter drops it, a GPU launch fails in every trial)."""
        if kwargs:
            twice = [n for n in self.arg_names[: len(args)] if n in kwargs]
            if twice:
                raise CallError(
                    f"{self.kernel}() got multiple values for argument {twice[0]!r}: it was given by "
                    "position and by keyword"
                )
            tuned = sorted(kwargs.keys() & self.tuned)
            if tuned:
                self._refuse_tuned(
                    tuned,
                    kwargs[tuned[0]],
                    "",
                    f"{tuned[0]}=",
                    ", or from a triton.heuristics above @autotune that sets it",
                )
        if not strict:
            return
        positional = [(n, v) for n, v in zip(self.arg_names, args) if n in self.tuned]
        if positional:
            self._refuse_tuned(
                [n for n, _ in positional], positional[0][1], " by position", f"the argument {positional[0][0]}"
            )
        if not kwargs:
            return
        static = sorted(kwargs.keys() & self.static.keys())
        if static:
            name = static[0]
            raise OptionError(
                f"{name}={kwargs[name]!r} passed to {self.kernel}, whose @autotune({name}="
                f"{self.static[name]!r}) sets it for every config and would override the call: drop "
                f"{name}= from the call or from @autotune"
            )
        launch = launch_option_names()
        unknown = sorted(k for k in kwargs if k not in self.arg_names and k not in launch)
        if OCCUPANCY in unknown:
            raise CallError(
                f"occupancy={kwargs[OCCUPANCY]!r} passed to {self.kernel}: occupancy is lowered per config when "
                f"compiled, not a launch option; set it in the search space or as @autotune(occupancy=...)"
            )
        if unknown:
            valid: Collection[str] = set(self.arg_names) | compile_option_names()
            raise CallError(
                f"{self.kernel}() got an unexpected keyword argument {unknown[0]!r}: neither an argument "
                f"of the kernel ({', '.join(self.arg_names)}) nor a Triton launch option (num_warps, "
                f"num_stages, ...).{did_you_mean(unknown[0], valid)}"
            )
        for name in sorted(kwargs.keys() & CHECKED_OPTIONS):  # checked as the space's (the interpreter ignores it)
            problem = None if kwargs[name] is None else compile_option_problem(name, kwargs[name])  # None: unset
            if problem:
                raise CallError(
                    f"{name}={kwargs[name]!r} passed to {self.kernel}: {problem}; fix the call (the "
                    "interpreter ignores it, a GPU compile would refuse it in every config)"
                )

    def _refuse_tuned(self, tuned: list[str], value: Any, how: str, drop: str, also: str = "") -> None:
        example = f"{tuned[0]} == {value!r}"
        raise OptionError(
            f"Conflicting meta-parameters: {', '.join(tuned)} passed{how} to {self.kernel} and set by "
            f"its search space for each config: drop {drop} from the call{also} (to fix its value, "
            f"narrow the space instead, e.g. .where('${example}'))"
        )


_MAKER_HELP = (
    "each item of calls must be a callable returning (args, kwargs), e.g. functools.partial(make_args, n) of a "
    "module-level `def make_args(n): return (x, y, out, n), {}`"
)


def argument_makers(calls: object, said: str) -> list[Callable[[], Any]]:
    """`calls` (of `sweep`, `warmup`) as a list of argument makers, or a CallError saying what is wrong with it,
    raised before anything starts."""
    if callable(calls) or isinstance(calls, (str, bytes, Mapping)) or not isinstance(calls, Iterable):
        raise CallError(
            f"{said}: calls must be a list of argument makers, got {_short(calls)} ({_MAKER_HELP}; [maker] for one)"
        )
    makers = list(calls)
    for index, maker in enumerate(makers):
        if not callable(maker):
            raise CallError(f"{said}: call {index} is {_short(maker)}, not an argument maker: {_MAKER_HELP}")
    return makers


def made_args(maker: Callable[[], Any], said: str) -> tuple[tuple, dict[str, Any]]:
    """What an argument maker returns, checked to be (args, kwargs); a CallError naming the maker when it raises or
    returns anything else."""
    try:
        made = maker()
    except Exception as exc:
        raise CallError(f"{said}: the argument maker {maker!r} failed: {type(exc).__name__}: {exc}") from exc
    if not (isinstance(made, tuple) and len(made) == 2 and isinstance(made[1], dict)):
        raise CallError(f"{said}: {_MAKER_HELP}; got {maker!r} returning {made!r}")
    return tuple(made[0]), dict(made[1])


def need_grid(kernel: str, own_grid: object, grid: object, said: str) -> None:
    """A maker's call of a kernel decorated without grid= must give one in its kwargs: a CallError saying how."""
    if grid is None and own_grid is None:
        raise CallError(
            f"{said}: {kernel} has no grid= of its own; return it in the maker's kwargs: `def make_args(n): ...; "
            "return (x, n), {'grid': lambda meta: (triton.cdiv(n, meta['BLOCK']),)}`, given as "
            "functools.partial(make_args, n)"
        )


def _short(value: object) -> str:
    return f"{type(value).__name__} {shorten(repr(value), 80)}"
