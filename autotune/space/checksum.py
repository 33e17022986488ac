"""Checksums of search spaces, stable across processes: of listed configs, and of a lazy space's filters.

Also the stable text of a value (`stable_text`), shared with the kernel identity (`kernel_source`): a value is part
of a checksum only through a text that every process writes the same (no address, no set order)."""

from __future__ import annotations

import dis
import enum
import functools
import hashlib
import inspect
import textwrap
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from ..errors import SpaceError
from ..kernel.identity import python_function

__all__ = ["configs_checksum", "code_identity", "filter_identity", "launch_text", "stable_text", "tuned_under"]

_MAX_DEPTH = 16  # nesting followed in a value (a list that contains itself stops here) or a filter's helpers


def configs_checksum(configs: Iterable[Any]) -> str:
    """sha256 hex of configs' canonical JSON, in order: what a space, or the configs prune= kept, are."""
    h = hashlib.sha256()
    for config in configs:
        h.update(config.canonical().encode())
        h.update(b"\n")
    return h.hexdigest()


def tuned_under(space_checksum: str, static_options: dict[str, Any], launch: str = "") -> str:
    """The checksum a cache entry is filed under: the space's, the static compile options every config was
    compiled with (`@autotune(num_warps=8)`) and how each config is launched (`launch_text`: the decorator's grid=
    and derive= expressions), so changing one retunes instead of reusing a winner timed under the other. Without
    either, the space's checksum as is."""
    if not static_options and not launch:
        return space_checksum
    options = ", ".join(f"{name}={stable_text(value) or repr(value)}" for name, value in sorted(static_options.items()))
    text = f"{space_checksum}\nstatic: {options}" if static_options else space_checksum
    return hashlib.sha256((text + (f"\nlaunch: {launch}" if launch else "")).encode()).hexdigest()


def launch_text(grid: Any, derive: Any) -> str:
    """The decorator's grid= and derive= expression strings ('' when there are none). A callable is left out: its
    bytecode differs between Python versions, which would split a fleet's entries."""
    parts = [f"grid={grid}"] if isinstance(grid, str) else []
    if isinstance(derive, Mapping):
        parts += [f"derive {name}={value}" for name, value in sorted(derive.items()) if isinstance(value, str)]
    return "; ".join(parts)


def code_identity(fn: Any, _depth: int = 0) -> str:
    """What a function computes, the same in every process: its bytecode, names and constants (nested code objects
    too, never their addresses; a set literal's members sorted, as their order follows PYTHONHASHSEED), its
    annotations, the values it closes over (a jitted or plain function there by its own identity) and its
    defaults (keyword-only ones too). Used for a kernel made by exec(), whose source cannot be read, and for the
    callables given to `autotune_launch` (a lazy space's filters use `filter_identity`)."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return getattr(fn, "__qualname__", type(fn).__name__)
    h = hashlib.sha256(_code_text(code).encode())
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            h.update(b"<empty>")
            continue
        inner = python_function(value)  # a function, or a @triton.jit helper's (under its wrappers)
        if inspect.isfunction(inner) and _depth < 8:
            h.update(code_identity(inner, _depth + 1).encode())
        else:
            h.update(repr(value).encode())
    h.update(repr(getattr(fn, "__defaults__", None)).encode())
    kwdefaults = getattr(fn, "__kwdefaults__", None)
    if kwdefaults:  # only when there are any: the identity of a function without them stays what it was
        h.update(("kwdefaults " + repr(sorted((k, repr(v)) for k, v in kwdefaults.items()))).encode())
    try:
        annotations = dict(getattr(fn, "__annotations__", None) or {})
    except Exception:  # lazily evaluated annotations (Python 3.14) naming what is not defined
        annotations = {}
    h.update(repr(sorted((k, repr(v)) for k, v in annotations.items())).encode())
    return h.hexdigest()


def _code_text(code: Any) -> str:
    consts = [_code_text(c) if hasattr(c, "co_code") else _const_text(c) for c in code.co_consts]
    return f"{code.co_code.hex()}|{code.co_names}|{code.co_varnames}|{consts}"


def _const_text(value: Any) -> str:
    if isinstance(value, frozenset):
        return "frozenset(" + repr(sorted(map(repr, value))) + ")"
    return repr(value)


def stable_text(value: Any, depth: int = 0) -> str | None:
    """A text for `value` that is the same in every process, or None when it has none (an object whose repr
    shows an address): plain and numpy scalars, strings, tuples, lists and sets of them, `tl.constexpr`s, dtypes and
    enums."""
    if depth > _MAX_DEPTH:  # a list that contains itself
        return None
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return repr(value)
    if isinstance(value, enum.Enum):
        return f"{type(value).__qualname__}.{value.name}"
    if isinstance(value, (tuple, list, set, frozenset)):
        items = [stable_text(item, depth + 1) for item in value]
        if None in items:
            return None
        if isinstance(value, (set, frozenset)):  # ordered by PYTHONHASHSEED: sorted here
            items.sort()
        return f"{type(value).__name__}({', '.join(items)})"  # type: ignore[arg-type]
    if type(value).__name__ == "constexpr" and hasattr(value, "value"):  # tl.constexpr(...)
        inner = stable_text(value.value, depth + 1)
        return None if inner is None else f"constexpr({inner})"
    module = type(value).__module__ or ""
    if module == "numpy" and hasattr(value, "dtype") and getattr(value, "shape", None) == ():  # np.float32(0.5)
        return f"{value.dtype}({value.item()!r})"
    if module.split(".")[0] in ("triton", "torch") and "dtype" in type(value).__name__:  # tl.float16, torch.int32
        return repr(value)
    return None


def filter_identity(pred: Callable[..., Any]) -> str:
    """What a lazy space's `where` filter computes, as text that every process writes the same: a function's own
    text (a `def`'s source where it compiles to the running code, else its bytecode: `_function_text`) with the
    stable values it closes over and the module globals it reads (a function it calls by its own identity); a
    `functools.partial` as its function and its arguments; a callable object as its class by name, its class's
    `__call__`, the methods `__call__` names and its attributes. Why: a lazy space's checksum cannot hash its
    configs, so it hashes its filters; an address or a set's order there would change the checksum in every process
    (no cache hit), and a missed global or argument would let two different filters share cache entries.

    Raises SpaceError for what has no such text (an argument, attribute or captured value that is an object whose
    repr shows an address), naming the fix."""
    return hashlib.sha256(_FilterWalk(pred).text(pred, 0).encode()).hexdigest()


class _FilterWalk:
    """One `filter_identity`: each helper function is walked once; one met again on its own path stands in by name."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.path: set[int] = set()

    def fail(self, what: str) -> SpaceError:
        return SpaceError(
            f"the where() filter {self.root!r} of a lazy space (too large to list) has {what}, which has "
            "no text that is the same in every process, so the space's checksum (its cache key) could "
            "not be computed; use a $X expression string, or a plain module-level function that reads "
            "only numbers, strings and tuples of them"
        )

    def value(self, value: Any, what: str, depth: int) -> str:
        text = stable_text(value)
        if text is not None:
            return text
        if callable(value) and not inspect.isclass(value):
            return self.text(value, depth + 1)
        raise self.fail(f"{what} = {type(value).__module__}.{type(value).__qualname__} object")

    def text(self, fn: Any, depth: int) -> str:
        if isinstance(fn, functools.partial):
            args = ", ".join(self.value(a, "an argument", depth) for a in fn.args)
            keywords = ", ".join(f"{k}={self.value(v, f'argument {k}', depth)}" for k, v in sorted(fn.keywords.items()))
            return f"partial({self.text(fn.func, depth + 1)}; {args}; {keywords})"
        if inspect.ismethod(fn):
            return f"method({self.text(fn.__func__, depth + 1)}; {self.attributes(fn.__self__, depth)})"
        inner = _plain_function(fn)
        if inner is not None:
            return self.function(inner, depth)
        cls = type(fn)
        call = getattr(cls, "__call__", None)  # noqa: B004 (the function itself, not whether it exists)
        if inspect.isfunction(call):  # an instance of a class defining __call__
            # the class by name, and the methods __call__ names (self.helper(c)): two classes alike in __call__
            # but not in what it calls are two filters
            methods = [
                f"method {name}={self.function(method, depth + 1)}"
                for name in sorted(_global_names(call.__code__))
                if inspect.isfunction(method := getattr(cls, name, None)) and method is not call
            ]
            return (
                f"object({cls.__module__}.{cls.__qualname__}; {self.function(call, depth)}; "
                f"{'; '.join(methods)}; {self.attributes(fn, depth)})"
            )
        raise self.fail(f"a callable of type {type(fn).__module__}.{type(fn).__qualname__} with no Python code")

    def attributes(self, obj: Any, depth: int) -> str:
        """Its attributes, in `__dict__` and in `__slots__` (a slots class, a `slots=True` dataclass, has no dict)."""
        names = sorted(_own_attributes(obj))
        return ", ".join(f"{n}={self.value(getattr(obj, n), f'attribute {n}', depth)}" for n in names)

    def function(self, fn: Any, depth: int) -> str:
        """Its code, defaults, closure and the globals its code reads (modules and classes by name)."""
        if id(fn) in self.path or depth > _MAX_DEPTH:
            return f"{fn.__module__}.{fn.__qualname__}"
        self.path.add(id(fn))
        try:
            code = fn.__code__
            parts = [
                _function_text(fn),
                "defaults " + ", ".join(self.value(v, "a default", depth) for v in fn.__defaults__ or ()),
            ]
            parts += [
                f"kwdefault {k}={self.value(v, f'default {k}', depth)}"
                for k, v in sorted((fn.__kwdefaults__ or {}).items())
            ]
            for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
                try:
                    captured = cell.cell_contents
                except ValueError:  # an empty cell (not the SpaceError of a value with no text)
                    parts.append(f"closure {name}=<empty>")
                    continue
                parts.append(f"closure {name}={self.value(captured, f'captured {name}', depth)}")
            scope = getattr(fn, "__globals__", {})
            names = _global_names(code)  # a generator expression's or comprehension's names too
            read = names - _stored_attributes(code)  # never what it assigns (a counter)
            for name in sorted(names):
                if name in scope:
                    parts.append(f"global {name}={self.global_value(scope[name], depth)}")
                    parts += self.read_through(name, scope[name], read, 0)
            return "\n".join(parts)
        finally:
            self.path.discard(id(fn))

    def global_value(self, value: Any, depth: int) -> str:
        """A global's stable text (a dict of stable items included: a table the filter looks up); a function by its
        identity; anything else (a module, a class) by its type, as the kernel identity does."""
        text = _table_text(value)
        if text is not None:
            return text
        if _plain_function(value) is not None:
            return self.text(value, depth + 1)
        if inspect.ismodule(value):
            return f"module {value.__name__}"
        if inspect.isclass(value):
            return f"class {value.__module__}.{value.__qualname__}"
        return f"{type(value).__module__}.{type(value).__qualname__} object"

    def read_through(self, prefix: str, owner: Any, names: set[str], level: int) -> list[str]:
        """Lines for what a filter may read through a global module, class or object (`settings.LIMIT`,
        `CFG.limit`, `CFG.sub.limit`): each name its code uses, and does not assign, that is an attribute of it with
        a stable value (not a dict: a memo the filter fills would change the checksum as it runs); of an object,
        its public ones. What a method it calls reads is not followed. A change to one is a change of the filter."""
        if inspect.ismodule(owner) or inspect.isclass(owner):
            attrs = {a: getattr(owner, a) for a in sorted(names) if hasattr(owner, a)}
        elif _is_object(owner):
            public = {a for a in names & _own_attributes(owner) if not a.startswith("_")}  # never its own state
            attrs = {a: getattr(owner, a) for a in sorted(public)}
        else:
            return []
        lines = []
        for attr, value in attrs.items():
            text = stable_text(value)
            if text is not None:
                lines.append(f"global {prefix}.{attr}={text}")
            elif _is_object(value) and level < 3:  # an object held by one: CFG.sub.limit
                lines += self.read_through(f"{prefix}.{attr}", value, names, level + 1)
        return lines


def _table_text(value: Any, depth: int = 0, path: frozenset[int] = frozenset()) -> str | None:
    """`stable_text`, and for a dict (keys sorted) or a list of stable values, dicts and lists nested to
    `_MAX_DEPTH`: a table a filter looks up (`TABLE["A"]["max"]`). None when a value in it has no stable text, or
    the table holds itself (a cycle)."""
    text = stable_text(value)  # a list of scalars (a list subclass by its own name), as before tables were walked
    if text is not None:
        return text
    if isinstance(value, dict):
        if depth > _MAX_DEPTH or id(value) in path:
            return None
        inner = path | {id(value)}
        pairs = [(stable_text(k), _table_text(v, depth + 1, inner)) for k, v in value.items()]
        if any(k is None or v is None for k, v in pairs):
            return None
        return "dict(" + ", ".join(sorted(f"{k}: {v}" for k, v in pairs)) + ")"
    if isinstance(value, list):
        if depth > _MAX_DEPTH or id(value) in path:
            return None
        items = [_table_text(item, depth + 1, path | {id(value)}) for item in value]
        return None if None in items else f"{type(value).__name__}({', '.join(items)})"  # type: ignore[arg-type]
    return None


def _own_attributes(obj: Any) -> set[str]:
    """The names of an object's own attributes: its `__dict__`'s and its set `__slots__` (of every class in its
    MRO; a private slot by its mangled name)."""
    names = set(getattr(obj, "__dict__", None) or {})
    for cls in type(obj).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for slot in (slots,) if isinstance(slots, str) else slots:
            name = f"_{cls.__name__.lstrip('_')}{slot}" if slot.startswith("__") and not slot.endswith("__") else slot
            if name not in ("__dict__", "__weakref__") and hasattr(obj, name):
                names.add(name)
    return names


def _is_object(value: Any) -> bool:
    """An instance of a user's class that holds attributes (a settings object): not a module, class, function or
    builtin value."""
    if inspect.ismodule(value) or inspect.isclass(value) or inspect.isroutine(value):
        return False
    cls = type(value)
    return cls.__module__ != "builtins" and (
        hasattr(value, "__dict__") or any("__slots__" in c.__dict__ for c in cls.__mro__)
    )


def _function_text(fn: Any) -> str:
    """A filter function's own text: its source when Python can read it, it is a `def`, and it is the source the
    running code was compiled from (a file edited since import is not: its text would describe other code), else
    its bytecode. The source is read from the code object, so a `functools.wraps` wrapper is not read as the
    function it wraps."""
    code = fn.__code__
    if code.co_name != "<lambda>":
        try:
            source = textwrap.dedent(inspect.getsource(code))
        except Exception:  # OSError, TypeError, tokenize.TokenError on a file being edited, ...
            source = None
        if source is not None and _compiled_from(source, code):
            return "source " + source
    return _code_text(code)  # as before sources were read: entries of lambda-filtered spaces stay valid


def _compiled_from(source: str, code: Any) -> bool:
    """Whether compiling `source` here gives `code` (bytecode compared within this process, where it is stable)."""
    import __future__

    flags = 0
    for name in __future__.all_feature_names:
        feature = getattr(__future__, name)
        flags |= code.co_flags & feature.compiler_flag
    text = source
    if code.co_freevars:  # a nested def: its free names become cells of an enclosing function again
        text = (
            "def __autotune_outer__():\n"
            + "".join(f"    {v} = None\n" for v in code.co_freevars)
            + textwrap.indent(source, "    ")
        )
    try:
        module = compile(text, code.co_filename, "exec", flags=flags, dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    pending, want = [module], _code_text(code)
    while pending:
        c = pending.pop()
        if c.co_name == code.co_name and _code_text(c) == want:
            return True
        pending += [k for k in c.co_consts if hasattr(k, "co_code") and c.co_name in ("<module>", "__autotune_outer__")]
    return False


def _plain_function(value: Any) -> Callable[..., Any] | None:
    """The Python function `value` is, or wraps when it is a Triton JIT wrapper; None for anything else (an object
    with an `fn` attribute is not unwrapped: its own `__call__` and attributes are what it computes)."""
    if inspect.isfunction(value):
        return value
    if (type(value).__module__ or "").split(".")[0] == "triton":
        inner = python_function(value)
        return inner if inspect.isfunction(inner) else None
    return None


def _stored_attributes(code: Any) -> set[str]:
    """The attribute names a code object (and the code nested in it) assigns or deletes (`STATS.refused += 1`)."""
    stores = ("STORE_ATTR", "DELETE_ATTR")
    return {i.argval for c in _nested_codes(code) for i in dis.get_instructions(c) if i.opname in stores}


def _global_names(code: Any) -> set[str]:
    """The global names a code object (and the code nested in it) may read."""
    return {name for c in _nested_codes(code) for name in c.co_names}


def _nested_codes(code: Any) -> Iterator[Any]:
    """`code` and the code objects nested in it (its generator expressions, comprehensions, inner functions)."""
    yield code
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            yield from _nested_codes(const)
