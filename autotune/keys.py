"""Tuning keys: which calls share a tuned winner, and bucketing helpers for dynamic sizes.

A key is `(key_values, dtypes)`: the values the `key=` spec computes from the call's arguments (JSON-friendly,
so they can name a cache file) and the dtype of every tensor argument, which is always part of the key, as
in Triton.  `KeyBuilder` compiles the spec once; calling it runs on every launch and is kept cheap.
"""

from __future__ import annotations

import enum
import math
import operator
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .errors import AutotuneError, ExpressionError, KeyValueError
from .space.expressions import Expression, anchor, pow2_bucket

__all__ = ["KeyBuilder", "pow2_bucket", "anchor", "normalise_key"]

# Key values kept as they are on the hot path, with a float other than a zero (-0.0 becomes 0.0) or NaN (refused)
_SCALARS = frozenset({int, bool, str, type(None)})
_NO_DTYPE = frozenset({int, float, bool, str, type(None)})
DTYPE_TEXTS: dict[Any, str] = {}  # each dtype met -> its text in keys; filled by KeyBuilder, read by compat_options


def _is_tensor(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _tuple_items(text: str) -> list[str] | None:
    """The items of `text` when it parses as a tuple without parentheses (`"n, x"`), else None: as key= such a
    string is most likely meant as a list of entries."""
    import ast

    text = text.strip()
    try:
        body = ast.parse(text, mode="eval").body
    except SyntaxError:
        return None  # the Expression reports it
    if not isinstance(body, ast.Tuple) or _parenthesised(text):  # "(n, m)" is deliberate: one tuple value
        return None
    return [ast.get_source_segment(text, item) or ast.unparse(item) for item in body.elts]


def _parenthesised(text: str) -> bool:
    """Whether one pair of parentheses encloses all of `text` ("(n, m)", not "(n), m"), read by tokens so that
    a parenthesis inside a string does not count."""
    import io
    import tokenize

    depth = 0
    tokens = [
        t
        for t in tokenize.generate_tokens(io.StringIO(text).readline)
        if t.type not in (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER)
    ]
    for i, token in enumerate(tokens):
        if token.type == tokenize.OP and token.string in "([{":
            depth += 1
        elif token.type == tokenize.OP and token.string in ")]}":
            depth -= 1
            if depth == 0:
                return i == len(tokens) - 1 and tokens[0].string == "("
        elif depth == 0:
            return False
    return False


def _as_is(value: Any) -> bool:
    """Whether a key value is kept as it is (the hot path), or needs `_normalise`."""
    kind = type(value)
    return kind in _SCALARS or (kind is float and value == value and value != 0.0)


def _normalise(value: Any, what: str) -> Any:
    """A key value as a JSON-friendly Python value (int/float/bool/str/None or tuples of those)."""
    if type(value) in _SCALARS:
        return value
    if type(value) is float and value == value:  # -0.0 as 0.0: equal in memory, so one text on disk too
        return value + 0.0
    if isinstance(value, (tuple, list)):  # torch.Size is a tuple
        return tuple(_normalise(v, f"{what} item {i}") for i, v in enumerate(value))
    if _is_tensor(value):
        raise KeyValueError(
            f"key {what} is a tensor ({tuple(value.shape)}, {value.dtype}); a key must be "
            "made of sizes and flags, not tensors: use e.g. x.shape[0] or x.numel()"
        )
    if isinstance(value, float) and value != value:
        raise KeyValueError(
            f"key {what} is NaN: NaN never equals itself, so no cached winner would ever match and "
            "every call would read the cache again; pass a number (or bucket/clean the value in "
            "key=)"
        )
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.dtype):
        return str(value)
    if isinstance(value, type):  # a class (np.float32, int): not one of its instances
        return _stable_text(value, what)
    if isinstance(value, frozenset):  # str() follows the process's hash seed: items sorted instead
        items = sorted(repr(_normalise(v, f"{what} item")) for v in value)
        return f"{type(value).__module__}.{type(value).__qualname__}:{{{', '.join(items)}}}"
    if getattr(value, "ndim", 0) and hasattr(value, "dtype"):  # a numpy array: a tensor's case
        raise KeyValueError(
            f"key {what} is an array ({tuple(value.shape)}, {value.dtype}); a key must be made of sizes and "
            "flags: use e.g. len(a) or a.shape[0]"
        )
    if isinstance(value, enum.Enum):
        return f"{type(value).__qualname__}.{value.name}"
    if isinstance(value, (bool, int, float, str)):  # subclasses, e.g. an IntEnum
        return _builtin(value)
    if hasattr(value, "__index__"):  # numpy integers, torch.SymInt
        return operator.index(value)
    if hasattr(value, "item") and hasattr(value, "dtype"):  # numpy scalars (float, bool)
        return _normalise(value.item(), what)
    if isinstance(value, float) or hasattr(value, "__float__"):
        return _normalise(float(value), what)
    return _stable_text(value, what)


def check_finite_key(key: tuple, kernel_name: str) -> None:
    """Refuse an infinite float in a key (checked when a process first meets a key, never on a memory hit): JSON
    has no infinity, so a stored entry would come back with another key, never match, and every process would
    tune that key again."""
    for value in key:
        if isinstance(value, tuple):
            check_finite_key(value, kernel_name)
        elif type(value) is float and value in (math.inf, -math.inf):
            raise KeyValueError(
                f"{kernel_name}: key value {value} is infinite: JSON has no infinity, so its cache "
                "entry would never match again and every process would tune it anew; pass a finite "
                "number (or bucket/clean the value in key=)"
            )


def normalise_key(values: Sequence[Any], what: str = "key") -> tuple:
    """Key values as `KeyBuilder` stores them (the form a cache entry's key has): a dtype as its text, an enum
    (an IntEnum too) as `Type.NAME`, numpy/torch scalars as Python numbers, lists as tuples. For matching a key a
    user gives (`clear_autotune_cache(kernel, key=...)`) against stored keys: both sides go through this one
    normalisation, so `(tl.float32,)` finds the entry a call keyed on `tl.float32` made. Raises KeyValueError for
    a value that cannot be a key (a tensor, NaN); `what` names where the values came from in that message."""
    return tuple(_normalise(v, f"{what}[{i}]") for i, v in enumerate(values))


def _stable_text(value: Any, what: str) -> str:
    """Any other hashable value Triton accepts as a key (e.g. `tl.float32`) by a text form that is the same in
    every process: its type's qualified name and its str(). Objects whose text holds a memory address are not."""
    try:
        hash(value)
        text = str(value)
    except Exception as exc:
        raise KeyValueError(
            f"key {what} = {value!r} ({type(value).__name__}) cannot be a key value ({exc}); key "
            "values must be hashable: int, float, bool, str, None, a dtype, an enum, or tuples of "
            "those"
        ) from None
    if re.search(r"0x[0-9a-fA-F]{6,}", text):
        raise KeyValueError(
            f"key {what} = {value!r} ({type(value).__name__}) is not JSON-friendly and has no "
            "stable text form (its str() shows a memory address, which differs in every process); "
            "key on something that identifies it, e.g. a name or a size"
        )
    return f"{type(value).__module__}.{type(value).__qualname__}:{text}"


def _shown(value: Any) -> str:
    """An argument in an error message: a tensor by its shape and dtype, anything else by a short repr."""
    if _is_tensor(value):
        return f"Tensor{tuple(value.shape)} {value.dtype}"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _builtin(value: Any) -> Any:
    if isinstance(value, str):
        return str.__str__(value)
    return int(value) if isinstance(value, int) else float(value) + 0.0  # np.float64(-0.0) as 0.0, as -0.0 is


def _dtype_str(dtype: Any) -> str:
    try:
        return DTYPE_TEXTS[dtype]
    except (KeyError, TypeError):
        s = str(dtype)
        try:
            DTYPE_TEXTS[dtype] = s
        except TypeError:
            pass
        return s


class KeyBuilder:
    """Compiles a `key=` spec once and maps each call's named arguments to `(key_values, dtypes)`.

    `spec` is None (one entry for all calls), a list of argument names / expression strings, or a callable
    receiving the named arguments as keywords.
    """

    __slots__ = ("spec", "arg_names", "_values", "_names_only", "_entries", "_fn")

    def __init__(self, spec: None | str | Sequence[str] | Callable[..., Any], *, arg_names: Sequence[str]) -> None:
        self.spec = spec
        self.arg_names: tuple[str, ...] = tuple(arg_names)
        self._names_only: tuple[str, ...] | None = None
        self._entries: tuple[Any, ...] = ()
        self._fn: Callable[..., Any] | None = None
        if spec is None:
            self._values = self._values_none
        elif isinstance(spec, str) or isinstance(spec, (list, tuple)):
            parts = _tuple_items(spec) if isinstance(spec, str) else None
            if parts is not None:
                raise ExpressionError(
                    f"key={spec!r} is one expression that makes a tuple; a key of several values "
                    f"is a list, one entry each: key={parts!r}"
                )
            items = [spec] if isinstance(spec, str) else list(spec)
            entries: list[Any] = []
            for i, item in enumerate(items):
                if not isinstance(item, str):
                    raise ExpressionError(
                        f"key[{i}] = {item!r}: key entries must be argument names or expression "
                        "strings; for anything else pass a callable key="
                    )
                stripped = item.strip()
                if stripped in self.arg_names:
                    entries.append(stripped)
                else:
                    entries.append(Expression(item, config_fields=None, arg_names=self.arg_names, what=f"key[{i}]"))
            self._entries = tuple(entries)
            if all(isinstance(e, str) for e in entries):
                self._names_only = tuple(entries)
                self._values = self._values_names
            else:
                self._values = self._values_entries
        elif callable(spec):
            self._fn = spec
            self._values = self._values_callable
        else:
            raise ExpressionError(
                f"key must be None, a list of argument names or expression strings, or a callable; "
                f"got {type(spec).__name__}: {spec!r}"
            )

    # -- key values ---------------------------------------------------------------------------------
    def _values_none(self, args: Mapping[str, Any]) -> tuple:
        return ()

    def _values_names(self, args: Mapping[str, Any]) -> tuple:
        try:
            values = tuple([args[n] for n in self._names_only])  # type: ignore[union-attr]
        except KeyError as exc:
            raise ExpressionError(
                f"key argument {exc.args[0]!r} was not passed; passed: {', '.join(args) or '(none)'}"
            ) from None
        for v in values:  # `_as_is`, inlined: this runs on every call
            kind = type(v)
            if kind not in _SCALARS and (kind is not float or v != v or v == 0.0):  # a tensor, a dtype, -0.0...
                return tuple(_normalise(v, repr(n)) for v, n in zip(values, self._names_only))  # type: ignore[arg-type]
        return values

    def _values_entries(self, args: Mapping[str, Any]) -> tuple:
        out = []
        for entry in self._entries:
            if isinstance(entry, str):
                try:
                    v = args[entry]
                except KeyError:
                    raise ExpressionError(
                        f"key argument {entry!r} was not passed; passed: {', '.join(args) or '(none)'}"
                    ) from None
                what = repr(entry)
            else:
                v = entry({}, args)
                what = repr(entry.source)
            out.append(v if _as_is(v) else _normalise(v, what))
        return tuple(out)

    def _values_callable(self, args: Mapping[str, Any]) -> tuple:
        """The callable's result as key values: a tuple or a list is several values, anything else one."""
        try:
            result = self._fn(**args)  # type: ignore[misc]
        except AutotuneError:
            raise
        except Exception as exc:
            raise KeyValueError(self._raised(exc, args)) from exc
        name = getattr(self._fn, "__name__", "callable")
        if not isinstance(result, (tuple, list)):
            result = (result,)
        return tuple(v if _as_is(v) else _normalise(v, f"from {name}()") for v in result)

    def _raised(self, exc: Exception, args: Mapping[str, Any]) -> str:
        """The message for a callable key= that raised: which function, what it raised, with what arguments."""
        name = getattr(self._fn, "__qualname__", None) or type(self._fn).__name__
        passed = ", ".join(f"{n}={_shown(v)}" for n, v in args.items())
        return (
            f"key={name} raised {type(exc).__name__}: {exc} (called with {passed or 'no arguments'}); "
            "fix the key= function for these arguments"
        )

    # -- the key ------------------------------------------------------------------------------------
    @property
    def fields(self) -> tuple[str, ...] | None:
        """The text of each value of the key, in order (`()` for key=None), or None for a callable key, whose
        number of values is known only from a call: what a clear's `key=` is checked against."""
        if self._fn is not None:
            return None
        return tuple(e if isinstance(e, str) else e.source for e in self._entries)

    @property
    def argument_names(self) -> frozenset[str]:
        """The call arguments the key reads (empty for a callable key, which may read any of them)."""
        return frozenset(n for e in self._entries for n in ((e,) if isinstance(e, str) else e.arg_refs))

    def dtypes(self, args: Mapping[str, Any]) -> tuple[str, ...]:
        """str(dtype) of every argument, in signature order, that has a `.dtype` (tensors)."""
        out = []
        for v in map(args.get, self.arg_names):  # the hot path of every call: kept to the fewest lookups
            if type(v) in _NO_DTYPE:
                continue
            dt = getattr(v, "dtype", None)
            if dt is not None:
                try:
                    out.append(DTYPE_TEXTS[dt])
                except (KeyError, TypeError):
                    out.append(_dtype_str(dt))
        return tuple(out)

    def __call__(self, args: Mapping[str, Any]) -> tuple[tuple, tuple[str, ...]]:
        """The key of one call: (key_values, dtypes) from the call's named arguments."""
        return self._values(args), self.dtypes(args)

    def __repr__(self) -> str:
        return f"KeyBuilder({self.spec!r})"
