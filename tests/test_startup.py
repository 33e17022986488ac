"""Start-up is part of the architecture: a process whose winner is already cached loads none of the tuning,
search, isolation, precompile, reporting or CLI modules, also when asked for its cache_info() (real processes, real
disk cache)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

TESTS = Path(__file__).resolve().parent

CHILD = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, {tests!r})
    import torch
    from autotune import Tuning, autotune, stats as autotune_stats
    from kernels_for_tests import add_kernel
    add = autotune(space={{"BLOCK": [32, 64]}}, key=["n"], grid="(cdiv(n, $BLOCK),)",
                   tuning=Tuning(isolate="off", warmup=0, reps=1))(add_kernel)
    x, y, out = torch.randn(100), torch.randn(100), torch.empty(100)
    add(x, y, out, 100)
    info = add.cache_info()   # asking what the kernel holds loads nothing either
    heavy = ["autotune.engine.tuner", "autotune.modes.online", "autotune.engine.isolation", "autotune.engine.pipeline", "autotune.engine.timing",
             "autotune.aot", "autotune.reporting", "autotune.cli", "autotune.modes.distributed", "autotune.reporting.replay",
             "autotune.engine.search.model", "optuna", "matplotlib", "redis", "pydantic",
             # loaded on first use only: the miss path, the tooling the package exports, what a write needs
             "autotune.decorator.tune_key", "autotune.decorator.functional", "autotune.compiled.warm_up",
             "autotune.engine.multi_call", "autotune.engine.search.strategies", "autotune.engine.search.prior",
             "autotune.engine.search.warm_start", "autotune.storage.clear", "autotune.storage.journal",
             "autotune.sweeps"]
    print(json.dumps({{"ok": bool(torch.allclose(out, x + y)), "stats": autotune_stats()[add.name],
                      "loaded": [m for m in heavy if m in sys.modules],
                      "entries": info["entries"]}}))
""")


def run_child(cache: Path) -> dict:
    env = dict(os.environ, TRITON_INTERPRET="1", AUTOTUNE_CACHE_DIR=str(cache), PYTHONPATH=str(TESTS.parent))
    proc = subprocess.run(
        [sys.executable, "-c", CHILD.format(tests=str(TESTS))], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_cache_hit_loads_no_tuning_search_or_tooling_module(tmp_path):
    first = run_child(tmp_path)  # tunes: the tuner and the pipeline load
    assert first["ok"] and first["stats"]["tunings"] == 1
    assert "autotune.engine.tuner" in first["loaded"] and "autotune.engine.pipeline" in first["loaded"]
    second = run_child(tmp_path)  # a new process: the winner comes from the disk cache
    assert second["ok"] and second["stats"]["disk_hits"] == 1 and second["stats"]["tunings"] == 0
    assert second["loaded"] == [] and second["entries"] == 1


LAZY_CHILD = textwrap.dedent("""
    import importlib, json, sys
    import autotune
    lazy = dict(autotune._LAZY)
    loaded_at_import = sorted({module for module, _ in lazy.values() if module in sys.modules})
    same = {}
    for name, (module, attribute) in lazy.items():
        value = getattr(autotune, name)
        imported = importlib.import_module(module)
        same[name] = value is (imported if attribute is None else getattr(imported, attribute))
    from autotune import storage
    from autotune.engine import search
    print(json.dumps({"loaded_at_import": loaded_at_import, "same": same,
                      "in_dir": sorted(set(lazy) - set(dir(autotune))),
                      "storage_clear": storage.clear_autotune_cache is autotune.clear_autotune_cache,
                      "search": search.nearest_winners is importlib.import_module(search.__name__ + ".warm_start").nearest_winners}))
""")


def test_import_autotune_loads_the_lazy_names_on_first_use_only():
    """`import autotune` loads none of the modules behind its lazy names (warmup, autotune_launch, clear_autotune_cache,
    precompile, sweep, ...); each name, asked for, is the object its module defines, and dir() lists it beforehand."""
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(TESTS.parent))
    proc = subprocess.run([sys.executable, "-c", LAZY_CHILD], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["loaded_at_import"] == []
    assert out["same"] and all(out["same"].values()), out["same"]
    assert out["in_dir"] == []
    assert out["storage_clear"] and out["search"]
