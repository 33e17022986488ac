"""`$X` expressions: strings for `grid=`, `where=`, `derive=` and `key=`, parsed once and compiled to functions.

In an expression `$X` is config field `X` and a bare name is the kernel argument of that name (a `where`
filter runs before any call and sees config fields only).  The helpers `cdiv`, `next_power_of_2`,
`pow2_bucket`, `anchor`, `min`, `max`, `abs` and `int` are available by name.  Each string is parsed with `ast`
when decorating, checked against an allow-list of expression syntax, rewritten so that `$X` reads `__c["X"]` and
`name` reads `__a["name"]`, and compiled once to a plain Python function: a launch pays for one function call
and a few dict lookups, never for parsing.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable, Collection, Mapping
from typing import Any

from ..errors import ExpressionError, did_you_mean
from ..format import shorten

__all__ = [
    "Expression",
    "to_grid",
    "compile_grid",
    "compile_derive",
    "compile_predicate",
    "cdiv",
    "next_power_of_2",
    "pow2_bucket",
    "anchor",
    "HELPERS",
]


def cdiv(x: int, y: int) -> int:
    """Ceiling division, as `triton.cdiv`: the number of blocks of size `y` that cover `x`."""
    return (x + y - 1) // y


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= `n`, as `triton.next_power_of_2` (0 for n <= 0)."""
    n = int(n)
    return 0 if n <= 0 else 1 << (n - 1).bit_length()


def pow2_bucket(n: int) -> int:
    """The next power of two >= n (1 for n <= 1): one tuning per power-of-two size range
    (`key=["pow2_bucket(n)"]`)."""
    n = operator.index(_number("pow2_bucket", n))
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def anchor(n: int, base: int) -> int:
    """`n` rounded up to a multiple of `base` (> 0): one tuning per `base`-wide size range
    (`key=["anchor(n, 256)"]`)."""
    n, base = operator.index(_number("anchor", n, f", {base!r}")), operator.index(base)
    if base <= 0:
        raise ValueError(f"anchor(n, base) needs base > 0, got base={base}")
    return -(-n // base) * base


def _number(helper: str, n: Any, more: str = "") -> Any:
    """`n`, or the error for the usual slip: the helper called on an argument's name when decorating."""
    if isinstance(n, str):
        raise TypeError(
            f"{helper}({n!r}) takes a number, not an argument's name; in key= write the expression "
            f'as a string, key=["{helper}({n}{more})"], and it is evaluated at each call'
        )
    return n


HELPERS: dict[str, Callable[..., Any]] = {
    "cdiv": cdiv,
    "next_power_of_2": next_power_of_2,
    "pow2_bucket": pow2_bucket,
    "anchor": anchor,
    "min": min,
    "max": max,
    "abs": abs,
    "int": int,
}

# `$NAME` is rewritten to this prefix + NAME before parsing (`$` is not Python syntax).
_CFG_PREFIX = "__autotune_cfg__"
# `$X` outside string literals (a literal is matched first and kept as it is): "$L == 'a$B'" reads field L only
_DOLLAR = re.compile(
    r"""(?P<literal>[rRbBuUfF]{0,2}(?:'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*"))"""
    r"|\$(?P<field>[A-Za-z_][A-Za-z0-9_]*)?"
)
_CONFIG_VAR = "__c"
_ARGS_VAR = "__a"

_ALLOWED_NODES: tuple[type, ...] = (
    ast.Expression,
    ast.BinOp,
    ast.UnaryOp,
    ast.BoolOp,
    ast.Compare,
    ast.IfExp,
    ast.Call,
    ast.Name,
    ast.Attribute,
    ast.Subscript,
    ast.Slice,
    ast.Constant,
    ast.Tuple,
    ast.List,
    ast.Load,
    ast.keyword,
    ast.operator,
    ast.unaryop,
    ast.boolop,
    ast.cmpop,
)
_FORMAT_METHODS = frozenset({"format", "format_map"})
_FRIENDLY_NODE_NAMES = {
    "Lambda": "a lambda",
    "ListComp": "a list comprehension",
    "SetComp": "a set comprehension",
    "DictComp": "a dict comprehension",
    "GeneratorExp": "a generator expression",
    "NamedExpr": "':=' (walrus)",
    "JoinedStr": "an f-string",
    "FormattedValue": "an f-string",
    "Starred": "'*' unpacking",
    "Await": "'await'",
    "Yield": "'yield'",
    "YieldFrom": "'yield from'",
    "Dict": "a dict display",
    "Set": "a set display",
}


def _shown(value: Any) -> str:
    return shorten(repr(value) if isinstance(value, (int, float, str, bool, type(None))) else type(value).__name__, 40)


def _names(valid: Collection[str]) -> str:
    return ", ".join(sorted(valid)) if valid else "(none)"


def _with_fields_named(source: str) -> str | None:
    """`source` with each `$X` outside string literals as the name the compiled expression reads; None when a `$`
    there names no field."""
    lone: list[bool] = []

    def replace(match: re.Match[str]) -> str:
        if match.group("literal") is not None:
            return match.group(0)
        if match.group("field") is None:
            lone.append(True)
            return "$"
        return _CFG_PREFIX + match.group("field")

    rewritten = _DOLLAR.sub(replace, source)
    return None if lone else rewritten


class _Rewriter(ast.NodeTransformer):
    """Rewrites `$X` placeholders to `__c["X"]` and argument names to `__a["name"]`."""

    def __init__(self, arg_refs: frozenset[str]) -> None:
        self.arg_refs = arg_refs

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id.startswith(_CFG_PREFIX):
            key, var = node.id[len(_CFG_PREFIX) :], _CONFIG_VAR
        elif node.id in self.arg_refs:
            key, var = node.id, _ARGS_VAR
        else:
            return node  # a helper, bound in the function's globals
        new = ast.Subscript(value=ast.Name(id=var, ctx=ast.Load()), slice=ast.Constant(value=key), ctx=ast.Load())
        return ast.copy_location(new, node)


class Expression:
    """One `$X` expression string, validated and compiled once; call it with (config, args) on every launch.

    `config_fields=None` means `$X` is not allowed (e.g. in `key=`); `what` names the expression's role
    ("grid", "where", "key", "derive['X']") in error messages. A bare name that is a config field, or one of
    `tuned` (derive= names not readable as `$X` yet), is refused: each config sets it, no call passes it.
    """

    __slots__ = ("source", "what", "config_refs", "arg_refs", "_fn")

    def __init__(
        self,
        source: str,
        *,
        config_fields: Collection[str] | None = None,
        arg_names: Collection[str] = (),
        what: str = "expression",
        tuned: Collection[str] = (),
    ) -> None:
        if not isinstance(source, str):
            raise ExpressionError(f"{what} expression must be a string, got {type(source).__name__}: {source!r}")
        self.source = source
        self.what = what
        if _CFG_PREFIX in source:
            raise ExpressionError(
                f"{what} expression {source!r} uses the reserved name prefix {_CFG_PREFIX!r}; "
                "write $X for config field X"
            )
        rewritten = _with_fields_named(source)
        if rewritten is None:
            raise ExpressionError(
                f"{what} expression {source!r}: '$' must be followed by a config field name, as in $BLOCK_M"
            )
        tree = self._parse(rewritten.strip())
        arg_names = frozenset(arg_names)
        config_refs: set[str] = set()
        arg_refs: set[str] = set()
        self._check(tree, config_fields, arg_names, config_refs, arg_refs, tuned)
        self.config_refs: frozenset[str] = frozenset(config_refs)
        self.arg_refs: frozenset[str] = frozenset(arg_refs)
        body = _Rewriter(self.arg_refs).visit(tree).body
        lam = ast.Expression(
            body=ast.Lambda(
                args=ast.arguments(
                    posonlyargs=[],
                    args=[ast.arg(arg=_CONFIG_VAR), ast.arg(arg=_ARGS_VAR)],
                    kwonlyargs=[],
                    kw_defaults=[],
                    defaults=[],
                ),
                body=body,
            )
        )
        ast.fix_missing_locations(lam)
        code = compile(lam, f"<autotune {what}: {source}>", "eval")
        self._fn: Callable[[Mapping, Mapping], Any] = eval(code, {"__builtins__": {}, **HELPERS})  # noqa: S307

    def _parse(self, text: str) -> ast.Expression:
        try:
            return ast.parse(text, mode="eval")
        except SyntaxError as exc:
            try:
                ast.parse(text, mode="exec")
            except SyntaxError:
                pass
            else:
                raise ExpressionError(
                    f"{self.what} expression {self.source!r} is a statement; only a Python "
                    "expression is allowed (no assignments, imports, ...)"
                ) from None
            where = f" (column {exc.offset})" if exc.offset and "$" not in self.source else ""
            raise ExpressionError(
                f"{self.what} expression {self.source!r} is not valid Python expression syntax{where}: {exc.msg}"
            ) from None

    def _check(
        self,
        tree: ast.AST,
        config_fields: Collection[str] | None,
        arg_names: frozenset[str],
        config_refs: set[str],
        arg_refs: set[str],
        tuned: Collection[str],
    ) -> None:
        src, what = self.source, self.what
        for node in ast.walk(tree):
            if not isinstance(node, _ALLOWED_NODES):
                kind = _FRIENDLY_NODE_NAMES.get(type(node).__name__, type(node).__name__)
                raise ExpressionError(
                    f"{what} expression {src!r}: {kind} is not allowed; only arithmetic, "
                    "comparisons, conditionals, indexing, attributes and helper calls are"
                )
            if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
                raise ExpressionError(
                    f"{what} expression {src!r}: attribute {node.attr!r} is not allowed "
                    "(names starting with '_' are private)"
                )
            if isinstance(node, ast.keyword) and node.arg is None:
                raise ExpressionError(f"{what} expression {src!r}: '**' keyword unpacking is not allowed")
            if isinstance(node, ast.Call):
                self._check_call(node, arg_names)
            if isinstance(node, ast.Name):
                self._check_name(node, config_fields, arg_names, config_refs, arg_refs, tuned)

    def _check_call(self, node: ast.Call, arg_names: frozenset[str]) -> None:
        src, what = self.source, self.what
        func = node.func
        if isinstance(func, ast.Name):
            if func.id not in HELPERS or func.id in arg_names:
                raise ExpressionError(
                    f"{what} expression {src!r}: cannot call {func.id!r}; callable by name are the "
                    f"helpers {_names(HELPERS)}, and methods of arguments such as x.stride(0)"
                )
        elif not isinstance(func, ast.Attribute):
            raise ExpressionError(f"{what} expression {src!r}: only helpers and methods (x.stride(0)) can be called")
        elif func.attr in _FORMAT_METHODS or isinstance(func.value, ast.Constant):
            # str.format's field syntax ('{0.__globals__}') reads attributes the '_' rule cannot see
            raise ExpressionError(
                f"{what} expression {src!r}: cannot call {func.attr!r} here; methods "
                "of arguments such as x.stride(0) can be called, string formatting and "
                "methods of constants cannot"
            )

    def _check_name(
        self,
        node: ast.Name,
        config_fields: Collection[str] | None,
        arg_names: frozenset[str],
        config_refs: set[str],
        arg_refs: set[str],
        tuned: Collection[str],
    ) -> None:
        """A `$X` is a field of the space, a bare name an argument of the call or a helper; the refs are noted."""
        src, what = self.source, self.what
        name = node.id
        if name.startswith(_CFG_PREFIX):
            field = name[len(_CFG_PREFIX) :]
            if config_fields is None:
                raise ExpressionError(
                    f"{what} expression {src!r} uses ${field}, but config fields ($X) are not available "
                    f"in a {what} expression (it is evaluated before a config is chosen); use argument "
                    "names only"
                )
            if field not in config_fields:
                hint = (
                    f" {field!r} is an argument of the kernel: write {field}, without $."
                    if field in arg_names
                    else did_you_mean(field, config_fields)
                )
                raise ExpressionError(
                    f"{what} expression {src!r}: ${field} is not a field of the search space; valid "
                    f"fields: {_names(config_fields)}.{hint}"
                )
            config_refs.add(field)
        elif name in arg_names and config_fields is not None and (name in config_fields or name in tuned):
            source = "derive=" if name in tuned else "the search space"  # derive adds its names to fields
            raise ExpressionError(
                f"{what} expression {src!r} reads {name!r} as a call argument, but {source} sets it for "
                f"each config and the call never passes it (write ${name})"
            )
        elif name in arg_names:
            arg_refs.add(name)
        elif name not in HELPERS:
            valid = set(arg_names) | set(HELPERS)
            hint = ""
            if config_fields is not None and name in config_fields:
                hint = f" ({name!r} is a config field: write ${name})"
            if what == "where":  # a space's filter: no call exists when it runs
                raise ExpressionError(
                    f"where expression {src!r}: unknown name {name!r}{hint}; where() sees only the config's "
                    f"fields, as $X ({_names(config_fields or ())}), and the helpers {_names(HELPERS)}: it "
                    "filters the space once, before any call. For a condition on the call's arguments use "
                    "@autotune(prune=...), a callable (configs, named_args) -> the configs to keep"
                )
            raise ExpressionError(
                f"{what} expression {src!r}: unknown name {name!r}{hint}; kernel arguments: "
                f"{_names(arg_names)}; helpers: {_names(HELPERS)}."
                f"{did_you_mean(name, valid) if not hint else ''}"
            )

    def __call__(self, config: Mapping[str, Any], args: Mapping[str, Any]) -> Any:
        """Evaluate for one config and one call's named arguments. What an expression of the arguments only raises
        becomes an ExpressionError naming it and the arguments it read (`n.shape[0]` with an int n: the call's
        mistake); one that reads config fields raises as it raised (that config's own failure, as `1 // $B` at B=0)."""
        try:
            return self._fn(config, args)
        except Exception as exc:
            missing = self._missing(exc, config, args) if isinstance(exc, KeyError) else None
            if missing is not None:
                raise missing from None
            if self.config_refs:
                raise
            read = ", ".join(f"{n}={_shown(args[n])}" for n in sorted(self.arg_refs) if n in args)
            raise ExpressionError(
                f"{self.what} expression {self.source!r} raised {type(exc).__name__}: {exc}"
                + (f" (with {read})" if read else "")
                + "; check what it reads against the arguments passed"
            ) from exc

    def value(self, config: Mapping[str, Any], args: Mapping[str, Any]) -> Any:
        """Evaluate as `__call__` does, except that what the expression itself raises propagates as raised (a
        `.where` filter says what it means for a config)."""
        try:
            return self._fn(config, args)
        except KeyError as exc:
            missing = self._missing(exc, config, args)
            if missing is None:
                raise
            raise missing from None

    def _missing(self, exc: KeyError, config: Mapping[str, Any], args: Mapping[str, Any]) -> ExpressionError | None:
        missing = exc.args[0] if exc.args else None
        if missing in self.config_refs and missing not in config:
            return ExpressionError(
                f"{self.what} expression {self.source!r} reads ${missing}, but config "
                f"{dict(config)!r} has no field {missing!r}"
            )
        if missing in self.arg_refs and missing not in args:
            return ExpressionError(
                f"{self.what} expression {self.source!r} reads argument {missing!r}, which "
                f"was not passed; passed: {_names(args)}"
            )
        return None

    def __repr__(self) -> str:
        return f"Expression({self.source!r}, what={self.what!r})"


def to_grid(value: Any, source: str) -> tuple[int, ...]:
    """Normalise a grid result (of a $X expression, or of a callable grid: `source` names it in messages) to a
    tuple of 1-3 non-negative Python ints, or raise ExpressionError."""
    if type(value) is tuple and len(value) == 1 and type(value[0]) is int and value[0] >= 0:
        return value  # the common 1-D grid of an int: as is (every launch of a cache hit comes here)
    if not isinstance(value, (tuple, list)):
        value = (value,)
    if not 1 <= len(value) <= 3:
        raise ExpressionError(f"grid {source} gave {value!r}: a grid has 1 to 3 dimensions")
    out = []
    for v in value:
        if type(v) is not int:
            if isinstance(v, bool):
                raise ExpressionError(f"grid {source} gave {value!r}: grid sizes must be ints, not bools")
            try:
                v = operator.index(v)
            except TypeError:
                hint = (
                    "the grid already rounds with cdiv, so a size it reads is not an int: pass ints (e.g. "
                    "n=1024, not 1024.0)"
                    if "cdiv" in str(source)
                    else "use cdiv(...) or int(...)"
                )
                raise ExpressionError(
                    f"grid {source} gave {value!r}: grid sizes must be ints, got {type(v).__name__} {v!r} ({hint})"
                ) from None
        if v < 0:
            raise ExpressionError(f"grid {source} gave {value!r}: grid sizes must be >= 0")
        out.append(v)
    return tuple(out)


def _meta_call(fn: Callable[[dict], Any]) -> Callable[[Mapping, Mapping], Any]:
    """Adapt a Triton-style `meta -> value` callable to (config, args), with meta = {**args, **config}."""

    def call(config: Mapping[str, Any], args: Mapping[str, Any]) -> Any:
        return fn({**args, **config})

    return call


def compile_grid(
    grid: str | tuple | list | Callable[[dict], Any] | None,
    *,
    config_fields: Collection[str] | None,
    arg_names: Collection[str],
) -> Callable[[Mapping, Mapping], tuple[int, ...]] | None:
    """Compile `grid=` (a `$X` string, a tuple of ints/strings, or a `meta -> tuple` callable) once.

    The returned function maps (config, args) to a tuple of 1-3 Python ints; `None` stays `None`.
    """
    if grid is None:
        return None
    if isinstance(grid, str):
        return _grid_of_string(grid, config_fields, arg_names)
    if isinstance(grid, (tuple, list)):
        return _grid_of_items(grid, config_fields, arg_names)
    if callable(grid):
        return _grid_of_callable(grid)
    raise ExpressionError(
        f"grid must be a $X expression string, a tuple of ints and strings, a callable "
        f"meta -> tuple, or None; got {type(grid).__name__}: {grid!r}"
    )


def _grid_of_string(
    grid: str, config_fields: Collection[str] | None, arg_names: Collection[str]
) -> Callable[[Mapping, Mapping], tuple[int, ...]]:
    expr = Expression(grid, config_fields=config_fields, arg_names=arg_names, what="grid")
    source = repr(grid)

    def from_string(config: Mapping[str, Any], args: Mapping[str, Any]) -> tuple[int, ...]:
        value = expr(config, args)
        try:
            return to_grid(value, source)
        except ExpressionError:
            floats = [f"${n}={config[n]!r}" for n in sorted(expr.config_refs) if isinstance(config.get(n), float)]
            if floats:  # the config's value, not the call's: the space is to fix
                raise ExpressionError(
                    f"grid {source} gave {value!r} for config {dict(config)}: "
                    f"{', '.join(floats)} is a float; give the search space int values"
                ) from None
            raise

    return from_string


def _grid_of_items(
    grid: tuple | list, config_fields: Collection[str] | None, arg_names: Collection[str]
) -> Callable[[Mapping, Mapping], tuple[int, ...]]:
    if not 1 <= len(grid) <= 3:
        raise ExpressionError(f"grid {tuple(grid)!r} has {len(grid)} dimensions; a grid has 1 to 3")
    items: list[Any] = []
    for i, item in enumerate(grid):
        if isinstance(item, str):
            items.append(Expression(item, config_fields=config_fields, arg_names=arg_names, what=f"grid[{i}]"))
        elif type(item) is int and item >= 0:
            items.append(item)
        else:
            raise ExpressionError(
                f"grid {tuple(grid)!r}: item {i} ({item!r}) must be a non-negative int or a $X expression string"
            )
    source = repr(tuple(grid))
    if all(type(i) is int for i in items):
        const = tuple(items)
        return lambda config, args: const
    fixed = tuple(items)

    def from_items(config: Mapping[str, Any], args: Mapping[str, Any]) -> tuple[int, ...]:
        return to_grid([i if type(i) is int else i(config, args) for i in fixed], source)

    return from_items


def _grid_of_callable(grid: Callable[[dict], Any]) -> Callable[[Mapping, Mapping], tuple[int, ...]]:
    name = getattr(grid, "__name__", type(grid).__name__)
    source = f"callable {name}"

    def from_callable(config: Mapping[str, Any], args: Mapping[str, Any]) -> tuple[int, ...]:
        return to_grid(grid({**args, **config}), source)

    return from_callable


def compile_derive(
    derive: Mapping[str, str | Callable[[dict], Any]] | None,
    *,
    config_fields: Collection[str] | None,
    arg_names: Collection[str],
) -> Callable[[Mapping, Mapping], dict[str, Any]]:
    """Compile `derive={name: expr or callable(meta)}` once; the result maps (config, args) to the derived values.

    Entries are evaluated in order and a later entry may read an earlier one as `$NAME`.
    """
    if not derive:
        return lambda config, args: {}
    if not isinstance(derive, Mapping):
        raise ExpressionError(
            f"derive must be a mapping of name -> expression string or callable, got {type(derive).__name__}"
        )
    fields = set(config_fields) if config_fields is not None else None
    entries: list[tuple[str, Callable[[Mapping, Mapping], Any]]] = []
    for name, spec in derive.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ExpressionError(
                f"derive name {name!r} is not a Python identifier (it becomes a kernel meta-parameter)"
            )
        if fields is not None and name in fields:
            raise ExpressionError(f"derive[{name!r}] has the name of a search-space field; rename one of them")
        if isinstance(spec, str):
            fn: Callable[[Mapping, Mapping], Any] = Expression(
                spec, config_fields=fields, arg_names=arg_names, what=f"derive[{name!r}]", tuned=set(derive)
            )
        elif callable(spec):
            fn = _meta_call(spec)
        else:
            raise ExpressionError(
                f"derive[{name!r}] must be a $X expression string or a callable(meta), got "
                f"{type(spec).__name__}: {spec!r}"
            )
        entries.append((name, fn))
        if fields is not None:
            fields.add(name)
    frozen = tuple(entries)
    if len(frozen) == 1:
        ((only_name, only_fn),) = frozen
        return lambda config, args: {only_name: only_fn(config, args)}

    def derived(config: Mapping[str, Any], args: Mapping[str, Any]) -> dict[str, Any]:
        meta = dict(config)
        out = {}
        for name, fn in frozen:
            out[name] = meta[name] = fn(meta, args)
        return out

    return derived


_NO_ARGUMENTS: Mapping[str, Any] = {}  # what a where() expression sees of a call: nothing (config fields only)


class WhereString:
    """A `where("$X")` filter: calls the compiled expression; pickles as its text and fields (recompiled on load), so
    a space filtered by strings can be sent to a worker process (a closure could not)."""

    __slots__ = ("source", "config_fields", "expression", "__name__")

    def __init__(self, pred: str, config_fields: Collection[str] | None) -> None:
        self.expression = Expression(pred, config_fields=config_fields, arg_names=(), what="where")
        self.source, self.__name__ = pred, f"where({pred!r})"
        self.config_fields = None if config_fields is None else tuple(sorted(config_fields))

    def __call__(self, config: Any) -> bool:
        try:
            return bool(self.expression.value(config, _NO_ARGUMENTS))
        except ExpressionError as exc:
            raise ExpressionError(
                f"{exc} (in a FixedSpace whose configs differ in fields, use a callable "
                "such as lambda c: c.get('X', 0) ...)"
            ) from None
        except Exception as exc:  # 1 // ($BLOCK - 16) at BLOCK=16: the filter's, not autotune's
            from ..errors import SpaceError

            raise SpaceError(
                f"where({self.source!r}) raised {type(exc).__name__} ({exc}) on {dict(config)}: a "
                "filter must answer True or False for every config of the product; guard the part that "
                "fails with `and` (e.g. '$B != 0 and $A % $B == 0')"
            ) from exc

    @property
    def fields_read(self) -> frozenset[str]:
        """The config fields (`$X`) the filter reads."""
        return self.expression.config_refs

    def clauses(self) -> list[WhereString]:
        """The filter as the clauses its top-level `and` joins (itself when it is one): each reads fewer fields, so
        a sampler can check it as soon as those are chosen (space_sampling)."""
        body = ast.parse((_with_fields_named(self.source) or self.source).strip(), mode="eval").body
        parts = _conjuncts(body)
        if len(parts) == 1:
            return [self]
        unprefix = re.compile(re.escape(_CFG_PREFIX) + r"([A-Za-z_][A-Za-z0-9_]*)")
        return [WhereString(unprefix.sub(r"$\1", ast.unparse(part)), self.config_fields) for part in parts]

    def __reduce__(self):
        return (WhereString, (self.source, self.config_fields))


def _conjuncts(node: ast.expr) -> list[ast.expr]:
    """The operands of a (nested) top-level `and`, in order."""
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
        return [part for value in node.values for part in _conjuncts(value)]
    return [node]


def compile_predicate(
    pred: str | Callable[[Any], bool], *, config_fields: Collection[str] | None
) -> Callable[[Any], bool]:
    """Compile a `where=` predicate: a callable `Config -> bool` or a `$X` string that uses config fields only."""
    if isinstance(pred, str):
        return WhereString(pred, config_fields)
    if callable(pred):
        return pred
    from ..errors import SpaceError

    raise SpaceError(
        f"where() takes a callable Config -> bool or a $X expression string, got {type(pred).__name__}: {pred!r}"
    )
