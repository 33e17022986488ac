"""The package layout of DESIGN section 9, checked on the source: every module belongs to one layer, layers import
one way (data -> engine -> storage -> tooling, with the front door on top), the front door loads reporting only
lazily. A new module must be given its layer here, which is the point: placing it is a decision."""

from __future__ import annotations

import ast
from pathlib import Path

import autotune

PACKAGE = Path(autotune.__file__).parent

DATA, ENGINE, STORAGE, TOOLING, FRONT = "data", "engine", "storage", "tooling", "front door"

LAYERS: dict[str, str] = {
    # data: what a tuning is about, no side effects
    **dict.fromkeys(
        [
            "errors",
            "config",
            "keys",
            "codec",
            "options",
            "record",
            "reference",
            "format",
            "keyspec",
            "fork_safety",
            "lazy",
        ],
        DATA,
    ),
    **dict.fromkeys(
        [
            "space",
            "space.spaces",
            "space.checksum",
            "space.triton_config",
            "space.checks",
            "space.sampling",
            "space.expressions",
        ],
        DATA,
    ),
    **dict.fromkeys(
        [
            "kernel",
            "kernel.compile_options",
            "kernel.occupancy",
            "kernel.identity",
            "kernel.source",
            "kernel.call",
            "kernel.option_checks",
            "kernel.pruning",
        ],
        DATA,
    ),
    # engine: compile and measure
    **dict.fromkeys(
        [
            "engine",
            "engine.compilers",
            "engine.pipeline",
            "engine.thread_pool",
            "engine.timing",
            "engine.measuring",
            "engine.tuner",
            "engine.trial_runner",
            "engine.in_process",
            "engine.multi_call",
            "engine.runners",
            "engine.tunable_kernel",
            "engine.progress",
            "engine.shards",
            "engine.process_group",
            "engine.search",
            "engine.search.strategies",
            "engine.search.model",
            "engine.search.warm_start",
            "engine.search.prior",
            "isolation",
            "engine.isolation",
            "engine.isolation.pool",
            "engine.isolation.runner",
            "engine.isolation.trial",
            "engine.isolation.call_copies",
        ],
        ENGINE,
    ),
    # storage: the tuning cache
    **dict.fromkeys(
        [
            "storage",
            "storage.entries",
            "storage.fingerprint",
            "storage.files",
            "storage.journal",
            "storage.protocol",
            "storage.memory",
            "storage.disk",
            "storage.kernel_cache",
            "storage.counters",
            "storage.clear",
            "storage.remote_config",
            "storage.redis_tier",
        ],
        STORAGE,
    ),
    # tooling: reads records, never tunes on its own
    **dict.fromkeys(
        [
            "reporting",
            "reporting.export",
            "reporting.lines",
            "reporting.lookup",
            "reporting.plot",
            "reporting.ranking",
            "reporting.table",
            "reporting.replay",
            "cli",
            "cli.aot",
            "cli.arguments",
            "cli.cache",
            "cli.remote",
            "cli.replay",
            "cli.report",
            "cli.rows",
            "aot",
            "aot.api",
            "aot.archive",
            "aot.archive_checks",
            "aot.archive_install",
            "aot.call_checks",
            "aot.cubin",
            "aot.amdgcn",
            "aot.events",
            "aot.subprocess_compilers",
            "aot.report",
            "aot.specialize",
            "aot.standins",
            "aot.targets",
            "aot.triton_cache",
            "aot.triton_compile",
        ],
        TOOLING,
    ),
    # the front door: wires a tuning to its cache and its output
    **dict.fromkeys(
        [
            "",
            "__main__",
            "decorator",
            "decorator.autotuned",
            "decorator.functional",
            "decorator.tune_key",
            "decorator.inspection",
            "modes",
            "modes.online",
            "modes.distributed",
            "compat",
            "compat.options",
            "compat.timing",
            "engine.isolation.worker",
            "engine.isolation.__main__",
            "compiled",
            "compiled.capture",
            "compiled.tracing",
            "compiled.torch_ops",
            "compiled.warm_up",
            "cli.sweep",
            "sweeps",
            "sweeps.api",
            "sweeps.worker",
            "sweeps.slots",
            "sweeps.local",
            "sweeps.ray_executor",
            "sweeps.report",
            "sweeps.split",
            "sweeps.jobs",
            "sweeps.scratch",
        ],
        FRONT,
    ),
}

MAY_IMPORT = {
    DATA: {DATA},
    ENGINE: {DATA, ENGINE},
    STORAGE: {DATA, STORAGE},
    TOOLING: {DATA, ENGINE, STORAGE, TOOLING},
    FRONT: {DATA, ENGINE, STORAGE, TOOLING, FRONT},
}

# The one documented exception (DESIGN section 9): precompile's load_kernel accepts an `Autotuned`.
EXCEPTIONS = {("aot.api", "decorator.autotuned")}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(importer: str, is_package: bool, node: ast.ImportFrom | ast.Import, known: set[str]) -> list[str]:
    """The autotune modules an import statement loads (relative to the package root; "" is the root)."""
    if isinstance(node, ast.Import):
        return [
            a.name.removeprefix("autotune").lstrip(".")
            for a in node.names
            if a.name == "autotune" or a.name.startswith("autotune.")
        ]
    if node.level:
        base = importer.split(".") if importer else []
        if not is_package:
            base = base[:-1]
        base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
        module = ".".join(base + ([node.module] if node.module else []))
    elif node.module and (node.module == "autotune" or node.module.startswith("autotune.")):
        module = node.module.removeprefix("autotune").lstrip(".")
    else:
        return []
    out = []
    for alias in node.names:
        if module == "" and alias.name == "__version__":
            continue  # the version string, not the front door's code
        child = f"{module}.{alias.name}" if module else alias.name
        out.append(child if child in known else module)
    return out


def _imports(name: str, path: Path, known: set[str]) -> list[tuple[str, bool]]:
    """(imported module, lazily) for every import in the module; imports under `if TYPE_CHECKING` are skipped."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child, lazy)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.extend((m, lazy) for m in _resolve(name, path.name == "__init__.py", node, known))
        inner = lazy or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(tree, False)
    return found


def test_every_module_has_a_layer():
    unplaced = sorted(set(_modules()) - set(LAYERS))
    assert not unplaced, f"modules without a layer in tests/test_layout.py (and DESIGN section 9): {unplaced}"
    gone = sorted(set(LAYERS) - set(_modules()))
    assert not gone, f"LAYERS names modules that no longer exist: {gone}"


def test_layers_import_one_way():
    modules = _modules()
    wrong = []
    for name, path in modules.items():
        layer = LAYERS[name]
        for imported, lazy in _imports(name, path, set(modules)):
            if imported == name or (name, imported) in EXCEPTIONS:
                continue
            if LAYERS[imported] not in MAY_IMPORT[layer]:
                wrong.append(
                    f"{name or 'autotune'} ({layer}) imports {imported or 'autotune'} "
                    f"({LAYERS[imported]}){' lazily' if lazy else ''}"
                )
    assert not wrong, "imports against the layering of DESIGN section 9:\n" + "\n".join(sorted(set(wrong)))


def test_the_front_door_loads_reporting_only_lazily():
    """Decorating a kernel or hitting its cache never imports reporting (tables, charts): only output does."""
    modules = _modules()
    eager = sorted(
        {
            f"{name or 'autotune'} imports {imported}"
            for name, path in modules.items()
            if LAYERS[name] == FRONT
            for imported, lazy in _imports(name, path, set(modules))
            if imported.split(".")[0] == "reporting" and not lazy
        }
    )
    assert not eager, eager


def test_the_checker_sees_a_wrong_way_import(tmp_path):
    """The checker itself: an engine module importing the front door, eagerly and lazily, is found."""
    source = tmp_path / "tuner.py"
    source.write_text("from ..decorator import autotune\n\ndef f():\n    from ..storage import kernel_cache\n")
    known = set(_modules())
    assert _imports("engine.tuner", source, known) == [("decorator", False), ("storage.kernel_cache", True)]
    assert LAYERS["decorator"] not in MAY_IMPORT[LAYERS["engine.tuner"]]
    assert LAYERS["storage.kernel_cache"] not in MAY_IMPORT[LAYERS["engine.tuner"]]


def test_the_package_exports_each_public_name_once_and_each_resolves():
    """`__all__` is the public API's list: a name twice in it, or one `autotune` does not have, is a slip."""
    names = autotune.__all__
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    missing = [name for name in names if not hasattr(autotune, name)]
    assert not missing
