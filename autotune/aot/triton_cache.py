"""Triton's compile cache as `export_archive` reads it: the complete entries of a kernel name, and which kernel
each was compiled from.

Why: Triton names a compiled kernel by its function name alone (`<dir>/<hash>/add_kernel.cubin`), so two modules'
`add_kernel`s share a name in its cache. What tells them apart is in every entry compiled from Python, by
whoever compiled it (precompile, a launch's JIT, another tool): the entry's Triton IR (`<name>.source`, the IR
before Triton's passes, written by Triton 3.6 to 3.9; `<name>.ttir` otherwise) gives the kernel's public
function the location of its `def`, `} loc(#loc)` with `#loc = loc("/path/kmod.py":6:1)`: the function's
`co_filename` and the line of `def` (3.6 and 3.7 write the column as 0, 3.9 as 1; the column is not used). A
`module:qualname` is matched against that: its file is found the way `import` finds it, through the import
system's finders, without running the module or its packages (a module already imported gives its `__file__`),
and the line of the qualname's `def` is read from the file with `ast` (parsed, never run). A kernel object gives
its file itself.

What cannot be told: an entry compiled with TRITON_DISABLE_LINE_INFO set (Triton then leaves every location
out of the IR; the entry's metadata says so) or with no IR text is no kernel's in particular; a
`module:qualname` export leaves it out and says so. A file whose `def` of the qualname is not found (an edited
file, a kernel made by `exec`) matches every entry of the name compiled from that file. Nothing read is
evaluated: the IR is matched as text, the source parsed with `ast`.
"""

from __future__ import annotations

import ast
import json
import os
import re
import stat
import sys
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ArchiveError, CacheEntryError
from ..storage.entries import base_identity, is_kernel_id, short_name
from ..storage.files import is_real_dir, read_entry_bytes
from .archive_checks import ARTIFACT_NAME

__all__ = [
    "CacheEntry",
    "Definition",
    "Selection",
    "compiled_from",
    "definition",
    "read_artifact",
    "select",
    "triton_entries",
]

_IR_LIMIT = 64 * 1024 * 1024  # an IR text longer than this is not read (no kernel's is near it)
# A group file lists a handful of paths and a kernel's metadata JSON is a few KB (a kernel with many TMA
# descriptors or a long `constants` still well under 100 KB): 4 MiB is far above any Triton writes, and small
# enough that a stray large file costs no noticeable time or memory to refuse.
_METADATA_LIMIT = 4 << 20
_ALIAS = re.compile(r"^(#loc\d*) = loc\((.*)\)[ \t]*$", re.MULTILINE)
_STRING = r'"((?:[^"\\]|\\\\|\\[0-9A-Fa-f]{2})*)"'
_FILE_LINE = re.compile(_STRING + r":(\d+):\d+")  # "file":line:col (a range may follow)
_NAMED = re.compile(_STRING + r"\((.*)\)$")  # "name"(location)
_ESCAPE = re.compile(r"\\(\\|[0-9A-Fa-f]{2})")


@dataclass(frozen=True)
class CacheEntry:
    """One complete entry of Triton's cache directory: its kernel (function) name, directory, metadata, files."""

    kernel: str
    dir: Path
    metadata: Mapping[str, Any]
    files: tuple[str, ...]

    @property
    def target(self) -> str:
        """ "cuda:90", "hip:gfx942", or "unknown"."""
        target = self.metadata.get("target") or {}
        if isinstance(target, Mapping) and "backend" in target:
            return f"{target['backend']}:{target.get('arch')}"
        return "unknown"


def triton_entries(triton_dir: Path, names: set[str] | None) -> list[CacheEntry]:
    """Complete entries of Triton's cache directory whose kernel is in `names` (None: all), in directory order.
    Only real directories and regular files are taken (Triton writes nothing else there); anything else is left
    out with a warning, and its metadata is read bounded (`_METADATA_LIMIT`) without following a link."""
    out: list[CacheEntry] = []
    try:
        found = sorted(triton_dir.iterdir())
    except OSError:
        return out
    for d in found:
        if not is_real_dir(d):
            _refuse_link(d)
            continue
        try:
            groups = [p for p in d.iterdir() if p.name.startswith("__grp__") and p.name.endswith(".json")]
        except OSError:
            continue
        for grp in groups:
            kernel = grp.name[len("__grp__") : -len(".json")]
            if names is None or kernel in names:
                entry = _entry(d, grp, kernel)
                out += [entry] if entry is not None else []
    return out


def _entry(d: Path, grp: Path, kernel: str) -> CacheEntry | None:
    """The complete entry of `kernel` in `d` whose group file is `grp`; None when it is incomplete, unreadable,
    or holds what Triton never writes (a link, a FIFO, a device, an oversized metadata file: warned of)."""
    try:
        children = json.loads(read_entry_bytes(grp, _METADATA_LIMIT))["child_paths"]
        metadata = json.loads(read_entry_bytes(d / f"{kernel}.json", _METADATA_LIMIT))
        files = sorted({os.path.basename(p) for p in children.values()} | {os.path.basename(c) for c in children})
    except CacheEntryError as exc:
        _warn_refused(d, str(exc))
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if not isinstance(metadata, dict) or not all(ARTIFACT_NAME.match(f) for f in files):
        return None
    kinds = {f: _kind(d / f) for f in files}
    odd = [f for f, kind in kinds.items() if kind == "other"]
    if odd:
        _warn_refused(d, f"{', '.join(odd)}: not a regular file (a symbolic link, FIFO or device)")
        return None
    return CacheEntry(kernel, d, metadata, tuple(files)) if all(k == "file" for k in kinds.values()) else None


def _kind(path: Path) -> str:
    """ "file" (regular), "missing" (an entry still being written), or "other" (a link, FIFO, device, directory),
    as `lstat` sees it: a link is never followed."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return "missing"
    except OSError:
        return "other"
    return "file" if stat.S_ISREG(mode) else "other"


def _refuse_link(path: Path) -> None:
    """A link among the entry directories (a plain file there is Triton's business and passed over in silence)."""
    if path.is_symlink():
        _warn_refused(path, "it is a symbolic link, and links are never followed out of the cache directory")


def _warn_refused(path: Path, why: str) -> None:
    warnings.warn(
        f"autotune export: left out the Triton cache entry {path}: {why}; Triton writes only directories of "
        "regular files there (metadata under "
        f"{_METADATA_LIMIT >> 20} MiB): remove it, or point TRITON_CACHE_DIR at a cache only Triton writes",
        UserWarning,
        stacklevel=3,  # triton_entries' line: one warning per entry, whichever export step scans it
    )


def read_artifact(entry: CacheEntry, name: str, limit: int) -> bytes:
    """The bytes of the file `name` of `entry`, read as `triton_entries` took it: a regular file inside the
    entry's directory (a link is not followed, a FIFO not waited on), at most `limit` bytes. Raises
    CacheEntryError when it is no longer one (replaced since the scan), OSError when unreadable."""
    if name not in entry.files:
        raise CacheEntryError(f"{name} is not a file of the Triton cache entry {entry.dir}")
    return read_entry_bytes(entry.dir / name, limit)


def _normal(path: str) -> str:
    return os.path.normcase(os.path.realpath(path))


def _unescape(text: str) -> str:
    """An MLIR string's text: `\\\\` is a backslash, `\\XX` a byte in hex (a quote, or a byte of UTF-8)."""
    parts, pos = [], 0
    for match in _ESCAPE.finditer(text):
        parts += [
            text[pos : match.start()].encode(),
            b"\\" if match.group(1) == "\\" else bytes.fromhex(match.group(1)),
        ]
        pos = match.end()
    parts.append(text[pos:].encode())
    return b"".join(parts).decode("utf-8", "surrogateescape")


def _resolve(loc: str, aliases: Mapping[str, str], depth: int = 0) -> tuple[str, int] | None:
    """(file, line) of an MLIR location: an alias, a file:line:col, or a name around one; None otherwise."""
    loc = loc.strip()
    if depth > 8:
        return None
    if loc.startswith("#"):
        return _resolve(aliases.get(loc, ""), aliases, depth + 1)
    match = _FILE_LINE.match(loc)
    if match:
        return _unescape(match.group(1)), int(match.group(2))
    match = _NAMED.match(loc)
    return _resolve(match.group(2), aliases, depth + 1) if match else None


def compiled_from(entry: CacheEntry) -> tuple[str, int] | None:
    """(file, line of `def`) of the kernel `entry` was compiled from, as its Triton IR locates its public
    function; None when the IR holds no location (TRITON_DISABLE_LINE_INFO) or cannot be read."""
    ir = next((f for f in (f"{entry.kernel}.source", f"{entry.kernel}.ttir") if f in entry.files), None)
    if ir is None:
        return None
    try:
        data = read_entry_bytes(entry.dir / ir, _IR_LIMIT)
    except (OSError, CacheEntryError):
        return None
    text = data.decode("utf-8", "replace")
    name = re.escape(entry.kernel)
    func = re.search(rf'^([ \t]*)tt\.func public @(?:{name}|"{name}")\(', text, re.MULTILINE)
    if func is None:
        return None
    end = re.compile(rf"^{re.escape(func.group(1))}\}} loc\((.*)\)[ \t]*$", re.MULTILINE).search(text, func.end())
    if end is None:
        return None
    return _resolve(end.group(1), dict(_ALIAS.findall(text)))


@dataclass(frozen=True)
class Definition:
    """Where a kernel is defined: its file (normalised) and the lines of its `def` there (empty: not found)."""

    kernel: str
    file: str
    lines: frozenset[int]

    def matches(self, origin: tuple[str, int] | None) -> bool:
        return origin is not None and _normal(origin[0]) == self.file and (not self.lines or origin[1] in self.lines)

    def __str__(self) -> str:
        return f"{self.file}:{min(self.lines)}" if self.lines else self.file


def _find_spec(name: str, path: list[str] | None) -> Any:
    """The import system's spec of `name` from its finders, as `import` finds it, without running anything."""
    for finder in sys.meta_path:
        find_spec = getattr(finder, "find_spec", None)
        if find_spec is None:
            continue
        spec = find_spec(name, path)
        if spec is not None:
            return spec
    return None


def _spec_origin(module: str) -> str | None:
    """Where `import module` would load it from (the CLI's `import` included: the current directory first), found
    through the import system's finders without running it or its packages; None when it is not found."""
    parts, path, spec, cwd = module.split("."), None, None, os.getcwd()
    for i in range(len(parts)):
        name, last = ".".join(parts[: i + 1]), i == len(parts) - 1
        package_path = getattr(sys.modules.get(name), "__path__", None)
        if not last and package_path is not None:
            path = list(package_path)  # an imported package: its own search path
            continue
        spec = None
        if i == 0 and cwd not in sys.path and "" not in sys.path:
            spec = _find_spec(name, [cwd])  # `autotune` run as a command: the directory it runs in first
        spec = spec or _find_spec(name, path)
        if spec is None or (not last and spec.submodule_search_locations is None):
            return None
        path = list(spec.submodule_search_locations or [])
    return spec.origin if spec is not None and spec.has_location else None


def _module_file(kernel: str, module: str) -> str:
    """The source file of `module` (an imported module's `__file__`, else `_spec_origin`). Raises ArchiveError
    naming the fix."""
    fix = (
        f"pass the kernel itself to export_archive(kernels=[...]), or export by its short name "
        f"{short_name(kernel)!r} (every module's kernel of that name)"
    )
    if module == "__main__":
        raise ArchiveError(
            f"cannot tell which compiled kernels are {kernel}'s: a script's kernel (__main__) has no "
            f"module name to find its file by; {fix} from that script"
        )
    origin = getattr(sys.modules.get(module), "__file__", None)
    if origin is None:
        try:
            origin = _spec_origin(module)
        except (ImportError, ValueError) as exc:
            raise ArchiveError(
                f"cannot tell which compiled kernels are {kernel}'s: finding the module {module} failed ({exc}); {fix}"
            ) from None
        if origin is None:
            raise ArchiveError(
                f"cannot tell which compiled kernels are {kernel}'s: no module {module} is found from "
                f"here ({os.getcwd()}); run the export where {module} imports (or set PYTHONPATH), "
                f"or {fix}"
            )
    if not isinstance(origin, str) or not origin.endswith(".py"):
        raise ArchiveError(
            f"cannot tell which compiled kernels are {kernel}'s: the module {module} is {origin}, "
            f"not Python source; {fix}"
        )
    return origin


def _scope_defs(nodes: Iterable[ast.AST]) -> Iterable[Any]:
    """The functions and classes defined in one scope, in its `if`/`try`/`with`/loop blocks too."""
    for node in nodes:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node
        elif not isinstance(node, ast.expr):
            yield from _scope_defs(ast.iter_child_nodes(node))


def _def_lines(file: str, qualname: str) -> frozenset[int]:
    """The lines of every `def` that `qualname` ("f", "Cls.f", "outer.<locals>.f") names in `file`."""
    try:
        tree = ast.parse(Path(file).read_bytes(), filename=file)
    except (OSError, SyntaxError, ValueError):
        return frozenset()
    scopes: list[Iterable[ast.AST]] = [tree.body]
    parts = [p for p in qualname.split(".") if p != "<locals>"]
    for i, part in enumerate(parts):
        found = [node for body in scopes for node in _scope_defs(body) if node.name == part]
        if i == len(parts) - 1:
            return frozenset(n.lineno for n in found if not isinstance(n, ast.ClassDef))
        scopes = [node.body for node in found]
    return frozenset()


def definition(kernel: str, file: str | None = None) -> Definition:
    """Where the kernel `kernel` ("module:qualname") is defined; `file` (a kernel object's `co_filename`) saves
    finding its module. Raises ArchiveError when the module cannot be found without running it."""
    module, _, qualname = base_identity(kernel).partition(":")  # a factory's variants share the one `def`
    if file is None:
        file = _module_file(kernel, module)
    return Definition(kernel, _normal(file), _def_lines(file, qualname))


@dataclass
class Selection:
    """What `select` took: the entries per name asked, why entries of a name were left out (for a warning, or the
    error when a name took nothing at all), and the names whose definition could not be found (with why: an
    error, or part of "nothing to export" for a name nothing else matches)."""

    by_name: dict[str, list[CacheEntry]] = field(default_factory=dict)
    notes: dict[str, list[str]] = field(default_factory=dict)
    unfound: dict[str, str] = field(default_factory=dict)

    @property
    def entries(self) -> list[CacheEntry]:
        """Every entry some name took, each once, in directory order."""
        unique = {entry.dir / entry.kernel: entry for taken in self.by_name.values() for entry in taken}
        return sorted(unique.values(), key=lambda e: (str(e.dir), e.kernel))


def select(
    entries: list[CacheEntry],
    names: Iterable[str],
    files: Mapping[str, str | None],
    triton_dir: Path,
    *,
    unknown_origin: bool = False,
) -> Selection:
    """The entries each name takes: a short name every entry of that function name, a "module:qualname" those
    compiled from its definition (`files[name]` is a kernel object's source file, if it was given as one), and
    with `unknown_origin` those whose origin cannot be told too (a default export, which took them by short name)."""
    out = Selection()
    for name in names:
        candidates = [e for e in entries if e.kernel == short_name(name)]
        if not is_kernel_id(name) or not candidates:
            out.by_name[name] = candidates
            continue
        try:
            where = definition(name, files.get(name))
        except ArchiveError as exc:
            out.by_name[name], out.unfound[name] = [], str(exc)
            continue
        origins = [(e, compiled_from(e)) for e in candidates]
        out.by_name[name] = [e for e, origin in origins if where.matches(origin) or (unknown_origin and origin is None)]
        notes = out.notes.setdefault(name, [])
        unknown = [e for e, origin in origins if origin is None]
        if unknown and not unknown_origin:
            stripped = sum(
                1
                for e in unknown
                if str(e.metadata.get("TRITON_DISABLE_LINE_INFO", "")).lower() not in ("", "0", "false", "off", "no")
            )
            why = (
                "compiled with TRITON_DISABLE_LINE_INFO set, which leaves the source location out"
                if stripped == len(unknown)
                else "their Triton IR holds no source location"
            )
            notes.append(
                f"{len(unknown)} compiled kernels named {short_name(name)} in {triton_dir} cannot be told "
                f"to be {name}'s ({why}) and were left out; export by the short name "
                f"{short_name(name)!r} to take every module's kernel of that name"
            )
        others = sorted(
            {f"{origin[0]}:{origin[1]}" for _, origin in origins if origin is not None and not where.matches(origin)}
        )
        if not out.by_name[name] and others:
            notes.append(
                f"none of the compiled kernels named {short_name(name)} in {triton_dir} was compiled from "
                f"{name} ({where}); they were compiled from {', '.join(others)}: precompile {name}, or run "
                f"the export where {name.partition(':')[0]} imports from the file its kernels were "
                "compiled from"
            )
    return out
