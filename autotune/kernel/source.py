"""The text that identifies a kernel for its cache entries: its own source, and what it reads from outside it.

A winner is reused only while the kernel computes the same thing. That depends on more than the kernel's own body:
the `@triton.jit` helpers it calls (under their own dependencies), and the values of module globals and closed-over
variables it reads (a `MASKED = tl.constexpr(True)` switch, a `BLOCK_K = 64` constant). Triton's own JIT cache hashes
the same things. Line numbers are not part of it, so moving a kernel in its file does not retune it.
"""

from __future__ import annotations

import ast
import dis
import hashlib
import inspect
import re
import sys
import textwrap
from collections.abc import Callable
from typing import Any

from ..errors import OptionError
from ..space.checksum import code_identity, stable_text
from .identity import base_kernel, kernel_ref, python_function

__all__ = ["check_kernel_source", "kernel_identity", "kernel_source_text"]

_MAX_DEPTH = 16  # helper-of-helper nesting followed (deeper ones are named, not hashed); also nested values
_SKIPPED_MODULES = ("triton", "math", "copy", "builtins")  # versioned elsewhere (an entry keys the Triton version)
_NOTHING = object()


def kernel_source_text(kernel: object) -> str:
    """The kernel's identity as text: the source Triton compiles (`JITFunction.src`, else the function's source
    without its decorators, so the JIT and the interpreter agree), followed by one line per dependency it reads.

    A kernel that reads nothing outside its body and `triton` is its source alone. A kernel made by exec() from
    generated text, whose source cannot be read (only the interpreter runs one), is its `code_identity` instead.
    """
    fn, text = check_kernel_source(kernel)
    return _Walk().function_identity(fn, text, depth=0)


def kernel_identity(kernel: object) -> str:
    """The kernel's "module:qualname", plus "#<8 hex>" of its closure's values for a kernel that has a closure: the
    variants a factory makes (`def make(ACT): @triton.jit def k(...)`) share a qualname, and would otherwise share
    one cache directory and its `SOURCES_PER_KEY` slots, evicting each other. Only the closure's values count, so
    an edited body changes the source hash, not the variant; a kernel without a closure keeps "module:qualname"."""
    ref = kernel_ref(kernel)
    identity = f"{ref.module}:{ref.qualname}"
    fn = python_function(kernel)
    closure = getattr(fn, "__closure__", None)
    if not closure:
        return identity
    names = getattr(getattr(fn, "__code__", None), "co_freevars", ())
    text = "\n".join(f"{name} {_closure_value_text(cell)}" for name, cell in zip(names, closure))
    return f"{identity}#{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def _closure_value_text(cell: Any) -> str:
    """A closure cell's value as text the same in every process: its stable text, a helper's or class's qualified
    name (not its source: editing a helper retunes through the source hash, not a new variant), else its type."""
    try:
        value = cell.cell_contents
    except ValueError:  # a cell not yet filled
        return "unfilled"
    try:
        if type(value).__name__ == "constexpr" and _is_jit_helper(getattr(value, "value", None)):
            value = value.value
        if _is_jit_helper(value):
            value = python_function(value)
        stable = stable_text(value)
        if stable is not None:
            return f"= {stable}"
        if inspect.ismodule(value):
            return f"-> {value.__name__}"
        if inspect.isclass(value) or inspect.isfunction(value):
            return f"-> {value.__module__}.{value.__qualname__}"
    except Exception:  # an object that fights inspection (a proxy)
        pass
    return f": {_type_name(value)}"


def check_kernel_source(kernel: object) -> tuple[Callable, str | None]:
    """At decoration: raise OptionError when the kernel can be identified neither by its source nor by its
    bytecode. Returns its Python function and source (None when there is only bytecode).

    Why apart from `kernel_source_text`: the identity itself is computed at the first use, when the module is
    fully imported (a helper defined below the kernel is not yet a global when the decorator runs)."""
    fn, text = _own_text(kernel)
    if text is None and getattr(fn, "__code__", None) is None:
        raise OptionError(
            f"cannot read the source of kernel {kernel!r}, and it is not a Python function: "
            "autotune keys its cache on the kernel's source; decorate a @triton.jit function"
        )
    return fn, text


def _own_text(kernel: object) -> tuple[Callable, str | None]:
    """The Python function under the wrappers, and its source (the Triton function's `src`, else read back from its
    file, decorators dropped); None when there is no readable source."""
    fn, base = python_function(kernel), base_kernel(kernel)
    if getattr(type(base), "src", None) is not None:  # JITFunction's property; no __getattr__ magic elsewhere
        src = getattr(base, "src", None)
        if isinstance(src, str):
            return fn, src
    try:
        raw = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        return fn, None
    # As triton.JITFunction does: keep from `def name(` on, so the text is the same through the interpreter and JIT.
    match = re.search(r"^def\s+\w+\s*\(", raw, re.MULTILINE)
    return fn, raw[match.start() :] if match else raw


class _Walk:
    """One identity computation: each helper is hashed once (`memo`; a helper library where every helper calls the
    earlier ones would otherwise cost 2^n), and a helper met again on its own call path stands in by name."""

    def __init__(self) -> None:
        self.memo: dict[int, str] = {}
        self.path: set[int] = set()

    def identity(self, obj: Any, own: str, scope: dict[str, Any], references: list[tuple[str, ...]], depth: int) -> str:
        """`own` text (of a function, or an aggregate class), then what its `references` read from `scope`; `obj`
        is on the call path meanwhile."""
        self.path.add(id(obj))
        try:
            lines = self.dependency_lines(scope, references, depth)
        finally:
            self.path.discard(id(obj))
        return _with_reads(own, lines)

    def function_identity(self, fn: Callable, text: str | None, depth: int) -> str:
        """A function's own text (its bytecode's identity when it has no readable source), then what it reads."""
        own = text if text is not None else f"bytecode:{code_identity(fn)}"
        return self.identity(fn, own, _scope(fn), _references(fn, text), depth)

    def hashed_line(self, name: str, obj: Any, depth: int, identity: Callable[[], str]) -> str:
        """`name -> <sha256 of identity()>`, computed once per `obj`; on its own call path (recursion) or too deep,
        its qualified name stands in."""
        if id(obj) in self.path or depth >= _MAX_DEPTH:
            return f"{name} -> {obj.__module__}.{obj.__qualname__}"
        if id(obj) not in self.memo:
            self.memo[id(obj)] = hashlib.sha256(identity().encode()).hexdigest()
        return f"{name} -> {self.memo[id(obj)]}"

    def dependency_lines(self, scope: dict[str, Any], references: list[tuple[str, ...]], depth: int) -> list[str]:
        """`name = value` for each stable value of `scope` (a function's globals and closure) the references read,
        and `name -> <sha256>` for each `@triton.jit` helper they call, hashed with its own dependencies."""
        lines: dict[str, str] = {}
        for path in references:
            if path[0] not in scope:
                continue
            name, value = _resolve(scope[path[0]], path)
            if name in lines or value is _NOTHING:
                continue
            try:
                line = self.describe(name, value, depth)
            except Exception:  # an object that fights inspection (a proxy, a self-containing list)
                line = f"{name} : {_type_name(value)}"
            if line is not None:
                lines[name] = line
        return list(lines.values())

    def describe(self, name: str, value: Any, depth: int) -> str | None:
        """One line for a dependency, stable across processes; None for what is not recorded (modules, Triton's
        builtins, classes and other callables, which a kernel cannot call)."""
        if inspect.ismodule(value):
            return None
        if _is_jit_helper(value):
            return self.helper_line(name, value, depth)
        if type(value).__name__ == "constexpr" and _is_jit_helper(getattr(value, "value", None)):  # ACT(v), a helper
            return self.helper_line(name, value.value, depth)
        if getattr(value, "__triton_aggregate__", False) and inspect.isclass(value):
            return self.aggregate_line(name, value, depth)
        stable = stable_text(value)
        if stable is not None:
            return f"{name} = {stable}"
        if type(value).__name__ == "constexpr" and hasattr(value, "value"):  # of a value with no stable text
            return f"{name} = constexpr({_type_name(value.value)})"
        if inspect.isclass(value) or callable(value):
            return None
        return f"{name} : {_type_name(value)}"

    def helper_line(self, name: str, value: Any, depth: int) -> str | None:
        fn = python_function(value)
        if _in_skipped_module(fn):
            return None
        return self.hashed_line(name, fn, depth, lambda: self.function_identity(fn, _own_text(value)[1], depth + 1))

    def aggregate_line(self, name: str, cls: type, depth: int) -> str:
        """A `tl.core._aggregate` class a kernel builds values of: the class's source (its fields and the bodies of
        its methods) and what that source reads from its module, as for a helper. Not Triton's `hash_attrs`: under
        the interpreter they leave the methods out, and the JIT and the interpreter must agree."""
        try:
            text = textwrap.dedent(inspect.getsource(cls))
        except (OSError, TypeError):  # a class made by exec(): no source to read
            return f"{name} = aggregate {cls.__module__}.{cls.__qualname__}"
        module = sys.modules.get(cls.__module__)
        scope = dict(vars(module)) if module else {}
        return self.hashed_line(
            name, cls, depth, lambda: self.identity(cls, text, scope, _references(None, text), depth + 1)
        )


def _with_reads(own: str, lines: list[str]) -> str:
    """A text followed by its dependencies' lines; the text alone when there are none (the hash entries had before
    dependencies counted)."""
    return own if not lines else own + "\n# reads:\n" + "\n".join(lines)


def _scope(fn: Callable) -> dict[str, Any]:
    """What a name in the function's body can mean besides a local or a builtin: its closure's cells, then its
    module's globals."""
    scope = dict(getattr(fn, "__globals__", None) or {})
    code, closure = getattr(fn, "__code__", None), getattr(fn, "__closure__", None) or ()
    for name, cell in zip(code.co_freevars if code is not None else (), closure):
        try:
            scope[name] = cell.cell_contents
        except ValueError:  # a cell not yet filled
            pass
    return scope


def _references(fn: Callable | None, text: str | None) -> list[tuple[str, ...]]:
    """Dotted names (`("cfg", "BLOCK")` for `cfg.BLOCK`) the body loads and does not bind itself, in source order;
    from the bytecode when there is no source to parse."""
    if text is None:
        code = getattr(fn, "__code__", None)
        return _code_references(code) if code is not None else []
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    local = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load)}
    local |= {
        arg.arg
        for node in ast.walk(tree)
        if isinstance(node, ast.arguments)
        for arg in (*node.posonlyargs, *node.args, *node.kwonlyargs, node.vararg, node.kwarg)
        if arg is not None
    }
    paths: list[tuple[str, ...]] = []

    def visit(node: ast.AST) -> None:
        parts, inner = [], node
        while isinstance(inner, ast.Attribute):
            parts.append(inner.attr)
            inner = inner.value
        if (
            isinstance(inner, ast.Name)
            and isinstance(inner.ctx, ast.Load)
            and isinstance(node, (ast.Name, ast.Attribute))
        ):
            if inner.id not in local:
                paths.append((inner.id, *reversed(parts)))
            return
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return paths


_GLOBAL_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF", "LOAD_CLASSDEREF", "LOAD_FROM_DICT_OR_DEREF"})
_ATTRIBUTE_LOADS = frozenset({"LOAD_ATTR", "LOAD_METHOD"})


def _code_references(code: Any) -> list[tuple[str, ...]]:
    """`_references` from bytecode: each load of a global or closure variable with the attribute loads right after
    it (`Tiles.K`), in this code and the code nested in it, once each. A cell of the function's own (a local that an
    inner function closes over) is not a reference."""
    paths: list[tuple[str, ...]] = []
    current: list[str] | None = None
    for instruction in dis.get_instructions(code):
        if instruction.opname in _ATTRIBUTE_LOADS and current is not None:
            current.append(str(instruction.argval))
            continue
        if current is not None:
            paths.append(tuple(current))
            current = None
        if instruction.opname in _GLOBAL_LOADS and isinstance(instruction.argval, str):
            own_cell = (
                instruction.opname != "LOAD_GLOBAL"
                and instruction.argval not in code.co_freevars
                and instruction.argval in code.co_cellvars
            )
            if not own_cell:
                current = [instruction.argval]
    if current is not None:
        paths.append(tuple(current))
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            paths += _code_references(const)
    return list(dict.fromkeys(paths))


def _resolve(value: Any, path: tuple[str, ...]) -> tuple[str, Any]:
    """Follow `a.b.c` through modules and classes (`mod.BLOCK`, `Config.BLOCK`); stop at a value of any other kind
    or inside Triton's own modules. Returns the dotted name reached and its value (`_NOTHING` when it is missing)."""
    reached = [path[0]]
    for attr in path[1:]:
        try:
            if not (inspect.ismodule(value) or inspect.isclass(value)) or _in_skipped_module(value):
                break
            value = getattr(value, attr)
        except Exception:  # AttributeError, or a module's __getattr__ failing
            return ".".join(reached), _NOTHING
        reached.append(attr)
    return ".".join(reached), value


def _in_skipped_module(value: Any) -> bool:
    module = value.__name__ if inspect.ismodule(value) else getattr(value, "__module__", None) or ""
    return str(module).split(".")[0] in _SKIPPED_MODULES


def _type_name(value: Any) -> str:
    cls = type(value)  # type() itself cannot raise, whatever the object does with __class__
    return f"{cls.__module__}.{cls.__qualname__}"


def _is_jit_helper(value: Any) -> bool:
    """A Triton JIT wrapper (`@triton.jit`, `triton.constexpr_function`, the interpreter's) around a function."""
    module = type(value).__module__ or ""
    if module.split(".")[0] != "triton" or inspect.isfunction(value):
        return False
    try:
        return inspect.isfunction(python_function(value))
    except Exception:
        return False
