"""The text that identifies a kernel for its cache entries: its own source, and what it reads from outside it.

A winner is reused only while the kernel computes the same thing. That depends on more than the kernel's own body:
the `@triton.jit` helpers it calls (under their own dependencies), and the values of module globals and closed-over
variables it reads (a `MASKED = tl.constexpr(True)` switch, a `BLOCK_K = 64` constant). Triton's own JIT cache hashes
the same things. Line numbers are not part of it, so moving a kernel in its file does not retune it.
"""
from __future__ import annotations

import ast
import enum
import hashlib
import inspect
import re
import textwrap
from typing import Any, Callable, Optional

from .errors import OptionError
from .kernel_ref import python_function
from .space_checksum import code_identity

__all__ = ["check_kernel_source", "kernel_source_text"]

_MAX_DEPTH = 16                       # helper-of-helper nesting followed; deeper ones are named, not hashed
_SKIPPED_MODULES = ("triton", "math", "copy", "builtins")   # versioned elsewhere (an entry keys the Triton version)
_NOTHING = object()


def kernel_source_text(kernel: Any) -> str:
    """The kernel's identity as text: the source Triton compiles (`JITFunction.src`, else the function's source
    without its decorators, so the JIT and the interpreter agree), followed by one line per dependency it reads.

    A kernel that reads nothing outside its body and `triton` is its source alone. A kernel made by exec() from
    generated text, whose source cannot be read (only the interpreter runs one), is its `code_identity` instead.
    """
    fn, text = check_kernel_source(kernel)
    return _identity(fn, text, seen={id(fn)}, depth=0)


def check_kernel_source(kernel: Any) -> tuple[Callable, Optional[str]]:
    """At decoration: raise OptionError when the kernel can be identified neither by its source nor by its
    bytecode. Returns its Python function and source (None when there is only bytecode).

    Why apart from `kernel_source_text`: the identity itself is computed at the first use, when the module is
    fully imported (a helper defined below the kernel is not yet a global when the decorator runs)."""
    fn, text = _own_text(kernel)
    if text is None and getattr(fn, "__code__", None) is None:
        raise OptionError(f"cannot read the source of kernel {kernel!r}, and it is not a Python function: "
                          "autotune keys its cache on the kernel's source; decorate a @triton.jit function")
    return fn, text


def _identity(fn: Callable, text: Optional[str], seen: set[int], depth: int) -> str:
    """A function's own text (its bytecode's identity when it has no readable source), then what it reads."""
    lines = _dependency_lines(fn, text, seen, depth)
    own = text if text is not None else f"bytecode:{code_identity(fn)}"
    return own if not lines else own + "\n# reads:\n" + "\n".join(lines)


def _own_text(kernel: Any) -> tuple[Callable, Optional[str]]:
    """The Python function under the wrappers, and its source (the first `src` on the way down, else read back from
    its file, decorators dropped); None when there is no readable source."""
    obj = kernel
    for _ in range(_MAX_DEPTH):
        if getattr(type(obj), "src", None) is not None:   # JITFunction's property; no __getattr__ magic elsewhere
            value = getattr(obj, "src", None)
            if isinstance(value, str):
                return python_function(kernel), value
        nxt = getattr(obj, "fn", None)
        if inspect.isfunction(obj) or nxt is None or nxt is obj:
            break
        obj = nxt
    fn = python_function(kernel)
    try:
        raw = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        return fn, None
    # As triton.JITFunction does: keep from `def name(` on, so the text is the same through the interpreter and JIT.
    match = re.search(r"^def\s+\w+\s*\(", raw, re.MULTILINE)
    return fn, raw[match.start():] if match else raw


def _dependency_lines(fn: Callable, text: Optional[str], seen: set[int], depth: int) -> list[str]:
    """`name = value` for each stable value the function reads from its globals or closure, and `name -> <sha256>`
    for each `@triton.jit` helper it calls, hashed with its own dependencies."""
    scope = _scope(fn)
    lines: dict[str, str] = {}
    for path in _references(fn, text):
        if path[0] not in scope:
            continue
        name, value = _resolve(scope[path[0]], path)
        if name in lines or value is _NOTHING or inspect.ismodule(value):
            continue
        line = _describe(name, value, seen, depth)
        if line is not None:
            lines[name] = line
    return list(lines.values())


def _scope(fn: Callable) -> dict[str, Any]:
    """What a name in the function's body can mean besides a local or a builtin: its closure's cells, then its
    module's globals."""
    scope = dict(getattr(fn, "__globals__", None) or {})
    code, closure = getattr(fn, "__code__", None), getattr(fn, "__closure__", None) or ()
    for name, cell in zip(code.co_freevars if code is not None else (), closure):
        try:
            scope[name] = cell.cell_contents
        except ValueError:                      # a cell not yet filled
            pass
    return scope


def _references(fn: Callable, text: Optional[str]) -> list[tuple[str, ...]]:
    """Dotted names (`("cfg", "BLOCK")` for `cfg.BLOCK`) the body loads and does not bind itself, in source order;
    from the bytecode's names when there is no source to parse."""
    if text is None:
        code = getattr(fn, "__code__", None)
        return [(name,) for name in _code_names(code)] if code is not None else []
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    local = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load)}
    local |= {arg.arg for node in ast.walk(tree) if isinstance(node, ast.arguments)
              for arg in (*node.posonlyargs, *node.args, *node.kwonlyargs, node.vararg, node.kwarg) if arg is not None}
    paths: list[tuple[str, ...]] = []

    def visit(node: ast.AST) -> None:
        parts, inner = [], node
        while isinstance(inner, ast.Attribute):
            parts.append(inner.attr)
            inner = inner.value
        if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Load) and isinstance(node, (ast.Name,
                                                                                               ast.Attribute)):
            if inner.id not in local:
                paths.append((inner.id, *reversed(parts)))
            return
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return paths


def _code_names(code: Any) -> list[str]:
    """Global and attribute names a code object (and the code nested in it) uses, in order, once each."""
    names = list(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names += _code_names(const)
    return list(dict.fromkeys(names))


def _resolve(value: Any, path: tuple[str, ...]) -> tuple[str, Any]:
    """Follow `a.b.c` through modules and classes (`mod.BLOCK`, `Config.BLOCK`); stop at a value of any other kind
    or inside Triton's own modules. Returns the dotted name reached and its value (`_NOTHING` when it is missing)."""
    reached = [path[0]]
    for attr in path[1:]:
        if not (inspect.ismodule(value) or inspect.isclass(value)) or _in_skipped_module(value):
            break
        try:
            value = getattr(value, attr)
        except Exception:                       # AttributeError, or a module's __getattr__ failing
            return ".".join(reached), _NOTHING
        reached.append(attr)
    return ".".join(reached), value


def _in_skipped_module(value: Any) -> bool:
    module = value.__name__ if inspect.ismodule(value) else getattr(value, "__module__", None) or ""
    return module.split(".")[0] in _SKIPPED_MODULES


def _describe(name: str, value: Any, seen: set[int], depth: int) -> Optional[str]:
    """One line for a dependency, stable across processes; None for what is not recorded (Triton's builtins,
    classes and other callables, which a kernel cannot call, a helper already on the path)."""
    if _is_jit_helper(value):
        fn = python_function(value)
        if _in_skipped_module(fn) or id(fn) in seen:
            return None
        if depth >= _MAX_DEPTH:
            return f"{name} -> {fn.__module__}.{fn.__qualname__}"
        _, text = _own_text(value)
        identity = _identity(fn, text, seen | {id(fn)}, depth + 1)
        return f"{name} -> {hashlib.sha256(identity.encode()).hexdigest()}"
    stable = _stable(value)
    if stable is not None:
        return f"{name} = {stable}"
    if inspect.isclass(value) or callable(value):
        return None
    return f"{name} : {type(value).__module__}.{type(value).__qualname__}"


def _is_jit_helper(value: Any) -> bool:
    """A Triton JIT wrapper (`@triton.jit`, `triton.constexpr_function`, the interpreter's) around a function."""
    module = type(value).__module__ or ""
    if module.split(".")[0] != "triton" or inspect.isfunction(value):
        return False
    try:
        return inspect.isfunction(python_function(value))
    except Exception:
        return False


def _stable(value: Any) -> Optional[str]:
    """A text for `value` that is the same in every process, or None when it has none (an object whose repr
    shows an address): plain scalars, strings, tuples, lists and sets of them, `tl.constexpr`s, dtypes and enums."""
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return repr(value)
    if isinstance(value, enum.Enum):
        return f"{type(value).__qualname__}.{value.name}"
    if isinstance(value, (tuple, list)):
        items = [_stable(item) for item in value]
        return None if None in items else f"{type(value).__name__}({', '.join(items)})"
    if isinstance(value, (set, frozenset)):                  # ordered by PYTHONHASHSEED: sorted here
        items = [_stable(item) for item in value]
        return None if None in items else f"{type(value).__name__}({', '.join(sorted(items))})"
    if type(value).__name__ == "constexpr" and hasattr(value, "value"):          # tl.constexpr(...)
        inner = _stable(value.value)
        return None if inner is None else f"constexpr({inner})"
    module = type(value).__module__ or ""
    if module.split(".")[0] in ("triton", "torch") and "dtype" in type(value).__name__:   # tl.float16, torch.int32
        return repr(value)
    return None
