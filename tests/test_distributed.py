"""Tuning across torch.distributed ranks (`Tuning(distributed=...)`, autotune/distributed.py).

The multi-process tests spawn real gloo process groups (2, 3 and 4 processes, `init_method=file://`) that
tune tiny kernels through the interpreter. Each spawn runs several scenarios in a row on the same group and
every rank writes what it saw (what it compiled, the winner it launched, whether its output is right, the
error it raised) to a JSON file that the tests read. One spawn per world size, shared by the tests through
a module-scoped cache, keeps the suite to a few process start-ups.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import triton
import triton.language as tl
from kernels_for_tests import add_kernel

from autotune import AutotuneError, Config, TrialStatus, Tuning, autotune
from autotune.engine.compilers import NoCompile
from autotune.engine.shards import merge_shards, shard_winner
from autotune.modes import distributed as adist
from autotune.record import Trial

FAST = dict(preset="fast", reps=2, warmup=0, refine_topk=0, compile_workers=0)
SPACE = {"BLOCK": (16, 32, 64, 128)}
# Round-robin over 2 ranks: rank 0 gets 16 and 32, rank 1 gets 24 and 48, which are not powers of 2
# (tl.arange refuses them): rank 1's whole shard fails. Over 4 ranks, ranks 1 and 3 fail.
HALF_BAD_SPACE = {"BLOCK": (16, 24, 32, 48)}
ALL_BAD_SPACE = {"BLOCK": (24, 48)}
WORKER_TIMEOUT_S = 30.0  # the process group's timeout in the functional spawns (only a failure waits for it)
HANG_TIMEOUT_S = 3.0  # the process group's timeout in the spawn where a rank never joins


# ------------------------------------------------------------------------------------------------------
# What each rank runs (in a spawned process: module-level functions, importable by the child)


class _RecordingCompiler(NoCompile):
    """The interpreter's (no-op) compiler, noting each config this rank compiles, i.e. measures."""

    def __init__(self, seen: list) -> None:
        self.seen = seen

    def submit(self, config: Config, executor: Any) -> Any:
        self.seen.append(config["BLOCK"])
        return super().submit(config, executor)


def _make(space: dict, mode: str | None, seen: list, **kwargs: Any) -> Any:
    kernel = autotune(
        space=space, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=Tuning(**FAST, distributed=mode), **kwargs
    )(add_kernel)
    kernel.compiler_factory = lambda k, prepare: _RecordingCompiler(seen)
    return kernel


def _launch(kernel: Any, n: int, rank: int) -> dict:
    """Call the kernel on rank-specific data; what this rank launched, measured and whether it is right."""
    torch.manual_seed(1000 * rank + n)
    x, y, out = torch.randn(n), torch.randn(n), torch.empty(n)
    kernel(x, y, out, n)
    record = kernel.record((n,))
    agreement = [a for a in adist.agreements(kernel) if a.key == (n,)]
    return {
        "winner": kernel.best_config["BLOCK"],
        "correct": bool(torch.allclose(out, x + y)),
        "trials": {str(t.config["BLOCK"]): t.status.value for t in record.trials},
        "measured_by": {str(c["BLOCK"]): r for c, r in agreement[-1].measured_by.items()} if agreement else None,
        "source": agreement[-1].source if agreement else None,
    }


def _caught(fn: Callable[[], Any]) -> dict:
    started = time.perf_counter()
    try:
        return {"result": fn(), "seconds": time.perf_counter() - started}
    except Exception as exc:  # the test inspects the error each rank raised
        return {
            "error": type(exc).__name__,
            "message": str(exc),
            "seconds": time.perf_counter() - started,
            "is_autotune_error": isinstance(exc, AutotuneError),
        }


def _barrier() -> None:
    import torch.distributed as dist

    dist.barrier()


def _entries(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.rglob("*.json")) if directory.exists() else []


def _scenario_shard(rank: int, world: int, out: Path) -> dict:
    seen: list = []
    result = _launch(_make(SPACE, "shard", seen), 200, rank)
    result["compiled"] = seen
    return result


def _scenario_rank0(rank: int, world: int, out: Path) -> dict:
    seen: list = []
    result = _launch(_make(SPACE, "rank0", seen), 201, rank)
    result["compiled"] = seen
    return result


def _scenario_default_is_rank0(rank: int, world: int, out: Path) -> dict:
    seen: list = []
    result = _launch(_make(SPACE, None, seen), 202, rank)
    result["compiled"] = seen
    return result


def _scenario_failing_shard(rank: int, world: int, out: Path) -> dict:
    seen: list = []
    result = _launch(_make(HALF_BAD_SPACE, "shard", seen), 203, rank)
    result["compiled"] = seen
    return result


def _scenario_all_fail(rank: int, world: int, out: Path) -> dict:
    results = {}
    for mode, n in (("shard", 204), ("rank0", 205)):
        results[mode] = _caught(lambda mode=mode, n=n: _launch(_make(ALL_BAD_SPACE, mode, []), n, rank))
    return results


def _scenario_cache_decided_by_rank0(rank: int, world: int, out: Path) -> dict:
    """Each rank has its own cache directory: only rank 0's is read or written."""
    from cache_files import write_record

    from autotune.storage import load_record

    own = out / f"cache-rank{rank}"
    os.environ["AUTOTUNE_CACHE_DIR"] = str(own)
    steps: dict[str, Any] = {}
    # 1. a miss everywhere: tuned in shards, stored by rank 0 only
    seen: list = []
    steps["tuned"] = {**_launch(_make(SPACE, "shard", seen), 300, rank), "compiled": seen, "entries": _entries(own)}
    # 2. a fresh kernel object (empty memory): rank 0 hits its disk, the others (empty disks) follow it
    seen = []
    steps["rank0_disk_hit"] = {**_launch(_make(SPACE, "shard", seen), 300, rank), "compiled": seen}
    # 3. only rank 1 has an entry (with winner 128): rank 0 misses, so everyone tunes; rank 1's entry is unused
    if rank == 1:
        stored = load_record(next((out / "cache-rank0").rglob("*.json")))
        write_record(stored.replace(key=[301], winner=Config(BLOCK=128)), directory=own)
    _barrier()
    seen = []
    steps["rank1_only_hit"] = {**_launch(_make(SPACE, "shard", seen), 301, rank), "compiled": seen}
    os.environ["AUTOTUNE_CACHE_DIR"] = str(out / "cache-shared")
    return steps


def _scenario_offline(rank: int, world: int, out: Path) -> dict:
    """AUTOTUNE_OFFLINE=1 with an entry on rank 0's disk only (one node imported an archive): every rank launches
    rank 0's winner; with no entry anywhere, every rank launches the same fallback. Nothing is tuned."""
    from cache_files import write_record

    from autotune.storage import load_record

    own = out / f"offline-cache-rank{rank}"
    os.environ["AUTOTUNE_CACHE_DIR"] = str(own)
    _launch(_make(SPACE, "shard", []), 340, rank)  # rank 0 stores the entry
    if rank == 0:
        entry = next(own.rglob("*.json"))
        write_record(load_record(entry).replace(winner=Config(BLOCK=128)), directory=own)
    _barrier()
    os.environ["AUTOTUNE_OFFLINE"] = "1"
    try:
        steps = {}
        for name, n in (("rank0_entry", 340), ("no_entry", 341)):
            seen: list = []
            kernel = _make(SPACE, "shard", seen)
            x, y, result = torch.randn(n), torch.randn(n), torch.empty(n)
            kernel(x, y, result, n)
            steps[name] = {
                "winner": kernel.best_config["BLOCK"],
                "correct": bool(torch.allclose(result, x + y)),
                "compiled": seen,
            }
    finally:
        os.environ.pop("AUTOTUNE_OFFLINE", None)
        os.environ["AUTOTUNE_CACHE_DIR"] = str(out / "cache-shared")
    return steps


def _scenario_lock_timeout(rank: int, world: int, out: Path) -> dict:
    """Another process holds the entry's lock on rank 0's node: Tuning(lock_timeout_s=) bounds the wait there as
    without a process group (it waited for the holder, past the bound, before)."""
    import subprocess
    import sys
    import warnings

    from autotune.storage.files import lock_path

    kernel = autotune(
        space=SPACE,
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        tuning=Tuning(**FAST, distributed="rank0", lock_timeout_s=1.0),
    )(add_kernel)
    kernel.compiler_factory = lambda k, prepare: _RecordingCompiler([])
    holder = None
    if rank == 0:
        disk = next(t for t in kernel.cache.tiers if t.name == "disk")
        lock = lock_path(disk.path(kernel.cache.entry((350,), ("torch.float32",) * 3)))
        lock.parent.mkdir(parents=True, exist_ok=True)
        holder = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import filelock, sys, time; lock = filelock.FileLock("
                f"{str(lock)!r}); lock.acquire(); print('held', flush=True); time.sleep(120)",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        holder.stdout.readline()
    _barrier()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = _launch(kernel, 350, rank)
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
    result["lock_warnings"] = [str(w.message) for w in caught if "lock" in str(w.message)]
    return result


def _scenario_shared_cache(rank: int, world: int, out: Path) -> dict:
    """All ranks share one cache directory: one entry, and a second kernel object reads it on every rank."""
    os.environ["AUTOTUNE_CACHE_DIR"] = str(out / "cache-one-dir")
    seen: list = []
    first = _launch(_make(SPACE, "rank0", seen), 310, rank)
    _barrier()
    entries = _entries(out / "cache-one-dir")
    again: list = []
    second = _launch(_make(SPACE, "rank0", again), 310, rank)
    os.environ["AUTOTUNE_CACHE_DIR"] = str(out / "cache-shared")
    return {"first": first, "entries": entries, "second": second, "compiled_again": again}


def _prune_raising_on(raising_rank: int, rank: int) -> Callable[[list, dict], list]:
    def prune(configs: list, named: dict) -> list:
        if rank == raising_rank:
            raise RuntimeError(f"prune exploded on rank {rank}")
        return configs

    return prune


def _scenario_prune_raises_on_one_rank(rank: int, world: int, out: Path) -> dict:
    return _caught(lambda: _launch(_make(SPACE, "shard", [], prune=_prune_raising_on(world - 1, rank)), 320, rank))


def _scenario_prune_raises_on_a_follower_in_rank0_mode(rank: int, world: int, out: Path) -> dict:
    """rank0 mode: the followers tune nothing, yet a prune= that raised on one of them is not dropped."""
    compiled: list = []
    raised = _caught(
        lambda: _launch(_make(SPACE, "rank0", compiled, prune=_prune_raising_on(world - 1, rank)), 321, rank)
    )
    return {**raised, "compiled": compiled}


def _scenario_prune_raises_offline(rank: int, world: int, out: Path) -> dict:
    """AUTOTUNE_OFFLINE=1: a prune= that raised on one rank is told at the handshake too (it skipped the agreement
    and left the other ranks waiting for it until the group's timeout)."""
    os.environ["AUTOTUNE_OFFLINE"] = "1"
    try:
        return _caught(lambda: _launch(_make(SPACE, "shard", [], prune=_prune_raising_on(world - 1, rank)), 322, rank))
    finally:
        os.environ.pop("AUTOTUNE_OFFLINE", None)


def _scenario_prune_differs_per_rank(rank: int, world: int, out: Path) -> dict:
    """prune= looking at rank-specific data: the ranks still agree, and are warned."""
    import warnings

    def prune(configs: list, named: dict) -> list:
        return [c for c in configs if rank == 0 or c["BLOCK"] != 128]

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        seen: list = []
        result = _launch(_make(SPACE, "shard", seen, prune=prune), 325, rank)
    result["compiled"] = seen
    result["warnings"] = [str(w.message) for w in caught]
    return result


def _scenario_different_keys(rank: int, world: int, out: Path) -> dict:
    n = 330 if rank == 0 else 331
    return _caught(lambda: _launch(_make(SPACE, "rank0", []), n, rank))


def _scenario_different_keys_and_a_prune_error(rank: int, world: int, out: Path) -> dict:
    """Ranks at different keys, and prune= raised on one of them: the key mismatch (the call's fault on every
    rank) is what each rank raises, not the one rank's prune error."""
    n = 332 if rank == 0 else 333
    return _caught(lambda: _launch(_make(SPACE, "rank0", [], prune=_prune_raising_on(world - 1, rank)), n, rank))


def _scenario_offline_on_one_rank(rank: int, world: int, out: Path) -> dict:
    """AUTOTUNE_OFFLINE=1 on the last rank only: it would wait for rank 0's stored record while rank 0 tunes, so
    the handshake refuses it on every rank together, naming the ranks and the variable."""
    if rank == world - 1:
        os.environ["AUTOTUNE_OFFLINE"] = "1"
    try:
        return _caught(lambda: _launch(_make(SPACE, "shard", []), 350, rank))
    finally:
        os.environ.pop("AUTOTUNE_OFFLINE", None)


def _scenario_isolated_shard(rank: int, world: int, out: Path) -> dict:
    from isolation_kernels import shard_crashy_add

    from autotune.engine.isolation import shutdown

    try:
        result = _launch(shard_crashy_add, 210, rank)
        result["errors"] = {str(t.config["BLOCK"]): t.error for t in shard_crashy_add.record((210,)).trials}
        return result
    finally:
        shutdown()  # a spawned rank runs no atexit hooks: stop its worker here


@triton.jit
def tag_kernel(out_ptr, TAG: tl.constexpr):
    tl.store(out_ptr, TAG)


# The scripted shard tuning over TAG 1..6 on 2 ranks (rank 0 measures 1, 3, 5; rank 1 measures 2, 4, 6), timed by
# a do_bench: each rank's first pass, then the interleaved rounds of its best two (refine_topk=2), which run slower.
# Rank 0 picks 1 (its rounds [3, 3, 300]: median 3, against 3's 4), rank 1 picks 2 (3.5, against 4's 4.5), so the
# agreed winner is 1. Judged by the max, rank 0 would pick 3 and the job 2; judged over every trial rather than the
# ranks' own winners, 5 would win (2.0 in a first pass, never compared side by side with the rounds).
SCRIPTED_FIRST_PASS = {1: 1.0, 3: 1.5, 5: 2.0, 2: 1.0, 4: 1.5, 6: 5.0}
SCRIPTED_ROUNDS = {1: [3.0, 3.0, 300.0], 3: [4.0, 4.0, 4.0], 2: [3.5, 3.5, 3.5], 4: [4.5, 4.5, 4.5]}


def _scenario_scripted_shard(rank: int, world: int, out: Path) -> dict:
    os.environ["AUTOTUNE_CACHE_DIR"] = str(out / "cache-scripted")
    result = torch.zeros(1, dtype=torch.int32)
    calls: dict[int, int] = {}

    def do_bench(fn: Callable[[], Any]) -> Any:
        fn()
        tag = int(result[0])
        calls[tag] = calls.get(tag, 0) + 1
        return [SCRIPTED_FIRST_PASS[tag]] * 3 if calls[tag] == 1 else SCRIPTED_ROUNDS[tag][calls[tag] - 2]

    kernel = autotune(
        space={"TAG": (1, 2, 3, 4, 5, 6)},
        key=None,
        grid="(1,)",
        do_bench=do_bench,
        tuning=Tuning(
            warmup=0, reps=3, refine_topk=2, refine_reps=3, compile_workers=0, isolate="off", distributed="shard"
        ),
    )(tag_kernel)
    try:
        kernel(result)
    finally:
        os.environ["AUTOTUNE_CACHE_DIR"] = str(out / "cache-shared")
    agreement = [a for a in adist.agreements(kernel) if a.key == ()][-1]
    return {
        "winner": kernel.best_config["TAG"],
        "launched": int(result[0]),
        "calls": {str(tag): n for tag, n in sorted(calls.items())},
        "medians": {str(t.config["TAG"]): t.median_ms for t in kernel.record(()).trials},
        "measured_by": {str(c["TAG"]): r for c, r in agreement.measured_by.items()},
        "cache": str(out / "cache-scripted"),
    }


def _add_args(n: int) -> tuple[tuple, dict]:
    return (torch.randn(n), torch.randn(n), torch.empty(n), n), {}


def _objective_kernel(seen: list) -> Any:
    tuning = Tuning(**FAST, distributed="shard", objective="geomean")
    kernel = autotune(space=SPACE, key=None, grid="(cdiv(n, $BLOCK),)", tuning=tuning)(add_kernel)
    kernel.compiler_factory = lambda k, prepare: _RecordingCompiler(seen)
    return kernel


def _served(kernel: Any, n: int) -> dict:
    return _caught(lambda: _launch_unkeyed(kernel, n))


def _launch_unkeyed(kernel: Any, n: int) -> dict:
    (x, y, out, _), _ = _add_args(n)
    kernel(x, y, out, n)
    return {"winner": kernel.best_config["BLOCK"], "correct": bool(torch.allclose(out, x + y))}


def _scenario_objective(rank: int, world: int, out: Path) -> dict:
    """Tuning(objective=...) under a process group: the calls' one config is agreed as a single call's is (shards
    measured on every call, rank 0's cache decides), served to every rank from rank 0's entry, and ranks giving
    different calls raise together. Each rank has its own cache directory."""
    import functools

    from autotune import warmup

    own = out / f"objective-cache-rank{rank}"
    os.environ["AUTOTUNE_CACHE_DIR"] = str(own)
    try:
        seen: list = []
        kernel = _objective_kernel(seen)
        report = warmup(kernel, [functools.partial(_add_args, n) for n in (64, 300)], in_process=True)
        agreed = [a for a in adist.agreements(kernel) if a.key == ()]
        record = kernel.record(())
        steps: dict[str, Any] = {
            "warmup": {
                "tuned": len(report.tuned),
                "compiled": seen,
                "source": agreed[-1].source if agreed else None,
                "winner": record.winner["BLOCK"],
                "calls": list(record.calls or ()),
                "entries": _entries(own),
            }
        }
        _barrier()
        steps["served"] = _served(_objective_kernel([]), 300)  # a new kernel object: rank 0's entry, on each rank
        other = [functools.partial(_add_args, n) for n in (64, 300 + rank)]
        steps["other_calls"] = _caught(lambda: warmup(_objective_kernel([]), other, in_process=True) and None)
    finally:
        os.environ["AUTOTUNE_CACHE_DIR"] = str(out / "cache-shared")
    return steps


def _scenario_warmup_where_only_a_follower_holds_the_key(rank: int, world: int, out: Path) -> dict:
    """autotune.warmup under a process group where rank 1's own disk holds the key and rank 0's does not: every
    rank joins the agreement (rank 0 tunes, the others take its winner) instead of rank 1 skipping it."""
    import functools

    from autotune import warmup

    own = out / f"warmup-cache-rank{rank}"
    os.environ["AUTOTUNE_CACHE_DIR"] = str(own)
    try:
        if rank == 1:
            _launch(_make(SPACE, "off", []), 360, rank)  # tuned alone: rank 1's disk holds the key
        _barrier()
        seen: list = []
        kernel = _make(SPACE, "rank0", seen)
        report = _caught(lambda: str(warmup(kernel, [functools.partial(_add_args, 360)], in_process=True)))
        winner = kernel.record((360,)).winner["BLOCK"] if "error" not in report else None
        return {**report, "compiled": seen, "winner": winner}
    finally:
        os.environ["AUTOTUNE_CACHE_DIR"] = str(out / "cache-shared")


SCENARIOS: dict[str, Callable[[int, int, Path], Any]] = {
    "shard": _scenario_shard,
    "rank0": _scenario_rank0,
    "default": _scenario_default_is_rank0,
    "failing_shard": _scenario_failing_shard,
    "all_fail": _scenario_all_fail,
    "cache_decided_by_rank0": _scenario_cache_decided_by_rank0,
    "shared_cache": _scenario_shared_cache,
    "offline": _scenario_offline,
    "lock_timeout": _scenario_lock_timeout,
    "prune_raises": _scenario_prune_raises_on_one_rank,
    "prune_raises_rank0": _scenario_prune_raises_on_a_follower_in_rank0_mode,
    "prune_raises_offline": _scenario_prune_raises_offline,
    "prune_differs": _scenario_prune_differs_per_rank,
    "different_keys_and_prune_error": _scenario_different_keys_and_a_prune_error,
    "scripted_shard": _scenario_scripted_shard,
    "objective": _scenario_objective,
    "warmup_follower_holds_key": _scenario_warmup_where_only_a_follower_holds_the_key,
    "offline_on_one_rank": _scenario_offline_on_one_rank,
    "different_keys": _scenario_different_keys,  # last: it leaves the ranks out of step on purpose
}
ALONE = {"isolated_shard": _scenario_isolated_shard}  # spawned on their own (`runs` does not run them)


def _worker(rank: int, world: int, out: str, timeout_s: float, scenarios: list[str], missing: int) -> None:
    """One rank: join the gloo group, run the scenarios, write what happened to out/rank<r>.json."""
    import torch.distributed as dist

    out_dir = Path(out)
    os.environ["AUTOTUNE_CACHE_DIR"] = str(out_dir / "cache-shared")
    os.environ.pop("AUTOTUNE_FORCE", None)
    results: dict[str, Any] = {}
    # Join with a generous timeout (start-up skew on a loaded machine), then set the group's timeout for the test.
    dist.init_process_group(
        "gloo", init_method=f"file://{out_dir / 'pg-init'}", rank=rank, world_size=world, timeout=timedelta(seconds=60)
    )
    dist.barrier()
    dist.distributed_c10d._set_pg_timeout(timedelta(seconds=timeout_s))
    try:
        if missing >= 0:
            if rank == missing:  # alive, but never calls the kernel until every other rank has given up on it
                others = [out_dir / f"rank{r}.json" for r in range(world) if r != rank]
                # The others raise within the group's timeout plus their first call's set-up; twenty timeouts leave
                # that set-up ample room on a loaded machine, yet are far below torch's default timeout of 30 min.
                deadline = time.monotonic() + 20 * timeout_s
                while not all(p.exists() for p in others) and time.monotonic() < deadline:
                    time.sleep(0.05)
                results["hang"] = {"skipped": True, "others_gave_up_first": all(p.exists() for p in others)}
            else:
                results["hang"] = _caught(lambda: _launch(_make(SPACE, "shard", []), 400, rank))
        for name in scenarios:
            try:
                results[name] = {**SCENARIOS, **ALONE}[name](rank, world, out_dir)
            except Exception:
                results[name] = {"crash": traceback.format_exc()}
    finally:
        (out_dir / f"rank{rank}.json").write_text(json.dumps(results, indent=1, default=str))
        if missing < 0:
            dist.destroy_process_group()


def _spawn(
    tmp: Path, world: int, scenarios: list[str], *, timeout_s: float = WORKER_TIMEOUT_S, missing: int = -1
) -> tuple[list[dict], float]:
    import torch.multiprocessing as mp

    started = time.perf_counter()
    mp.spawn(_worker, args=(world, str(tmp), timeout_s, scenarios, missing), nprocs=world, join=True)
    results = [json.loads((tmp / f"rank{r}.json").read_text()) for r in range(world)]
    for r, res in enumerate(results):
        for name, value in res.items():
            assert not (isinstance(value, dict) and "crash" in value), f"rank {r} {name}:\n{value['crash']}"
    return results, time.perf_counter() - started


_RUNS: dict[int, list[dict]] = {}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], list[dict]]:
    """`runs(world)`: every scenario's per-rank results for a spawned job of `world` ranks (spawned once)."""

    def get(world: int) -> list[dict]:
        if world not in _RUNS:
            names = list(SCENARIOS) if world == 2 else ["shard", "rank0", "failing_shard"]
            _RUNS[world], _ = _spawn(tmp_path_factory.mktemp(f"world{world}"), world, names)
        return _RUNS[world]

    return get


def _shard_of(space: dict, rank: int, world: int) -> list[int]:
    return list(space["BLOCK"][rank::world])


# ------------------------------------------------------------------------------------------------------
# Without a process group


def test_shard_assignment_is_round_robin_balanced_and_covers_every_config():
    configs = [Config(BLOCK=b) for b in range(10)]
    for world in (1, 2, 3, 4):
        shards = [adist.shard(configs, r, world) for r in range(world)]
        assert sorted((c for s in shards for c in s), key=lambda c: c["BLOCK"]) == configs
        assert max(map(len, shards)) - min(map(len, shards)) <= 1
        assert shards[1 % world] == configs[1 % world :: world]
    assert adist.shard(configs[:1], 3, 4) == []


def test_without_a_process_group_every_mode_tunes_locally():
    for n, mode in ((100, "shard"), (101, "rank0"), (102, "off"), (103, None)):
        assert adist.active_mode(mode) is None
        seen: list = []
        kernel = _make(SPACE, mode, seen)
        result = _launch(kernel, n, 0)
        assert result["correct"] and sorted(seen) == [16, 32, 64, 128]
        assert set(result["trials"].values()) == {"ok"}


def test_tuning_rejects_an_unknown_distributed_mode():
    from autotune.errors import OptionError

    with pytest.raises(OptionError, match="distributed"):
        Tuning.coerce({"distributed": "all"})


def test_merge_takes_the_measured_trial_of_each_config_and_the_rank_that_measured_it():
    a, b, c = Config(BLOCK=16), Config(BLOCK=32), Config(BLOCK=64)
    ok = dict(status=TrialStatus.OK, median_ms=1.0, min_ms=1.0, samples_ms=[1.0])
    rank0 = [Trial(config=a, **ok), Trial(config=b), Trial(config=c, status=TrialStatus.RUNTIME_ERROR, error="x")]
    rank1 = [Trial(config=a), Trial(config=b, **ok), Trial(config=c)]
    merged, by = merge_shards([{"rank": 1, "trials": rank1}, {"rank": 0, "trials": rank0}])
    assert [t.config for t in merged] == [a, b, c]
    assert [t.status for t in merged] == [TrialStatus.OK, TrialStatus.OK, TrialStatus.RUNTIME_ERROR]
    assert by == {a: 0, b: 1, c: 0}
    empty, none_by = merge_shards([{"rank": 0, "trials": [Trial(config=a)]}, {"rank": 1, "trials": []}])
    assert [t.status for t in empty] == [TrialStatus.SKIPPED] and none_by == {}


def test_the_shard_winner_is_the_fastest_of_the_ranks_own_winners_not_an_unrefined_trial():
    """Rank 0 re-measured a and c in a slow spell (3.0, 3.1) and picked a; its e (2.0 in the first pass) was never
    compared side by side with them. Rank 1 picked b (2.5). The agreed winner is b, not e."""
    a, b, c, d, e, f = (Config(BLOCK=x) for x in (16, 32, 64, 128, 256, 512))

    def trial(config: Config, ms: float | None) -> Trial:
        return (
            Trial(config=config)
            if ms is None
            else Trial(config=config, status=TrialStatus.OK, median_ms=ms, min_ms=ms, samples_ms=[ms])
        )

    rank0 = [trial(a, 3.0), trial(b, None), trial(c, 3.1), trial(d, None), trial(e, 2.0), trial(f, None)]
    rank1 = [trial(a, None), trial(b, 2.5), trial(c, None), trial(d, 2.6), trial(e, None), trial(f, 4.0)]
    gathered = [{"rank": 0, "trials": rank0, "winner": a}, {"rank": 1, "trials": rank1, "winner": b}]
    merged, _ = merge_shards(gathered)
    assert shard_winner(merged, gathered) == b
    assert shard_winner(merged, [{**g, "winner": None} for g in gathered]) == e  # no rank's winner known: all


# ------------------------------------------------------------------------------------------------------
# Real gloo process groups


def _same_winner_and_correct(results: list[dict], name: str) -> int:
    winners = {res[name]["winner"] for res in results}
    assert len(winners) == 1, f"{name}: ranks launched different configs: {winners}"
    assert all(res[name]["correct"] for res in results)
    return winners.pop()


@pytest.mark.parametrize("world", [2, 4])
def test_shard_mode_measures_each_config_on_exactly_one_rank_and_all_ranks_launch_one_winner(runs, world):
    results = runs(world)
    winner = _same_winner_and_correct(results, "shard")
    compiled = [sorted(res["shard"]["compiled"]) for res in results]
    for rank, mine in enumerate(compiled):
        assert mine == sorted(_shard_of(SPACE, rank, world)), f"rank {rank} measured {mine}"
    assert sorted(b for mine in compiled for b in mine) == [16, 32, 64, 128]  # each exactly once
    expected_by = {str(b): r for r in range(world) for b in _shard_of(SPACE, r, world)}
    for res in results:
        assert res["shard"]["measured_by"] == expected_by
        assert res["shard"]["trials"] == {"16": "ok", "32": "ok", "64": "ok", "128": "ok"}
        assert res["shard"]["source"] == "tuned"
    assert winner in SPACE["BLOCK"]


def test_each_rank_picks_by_the_median_of_its_rounds_and_the_job_takes_the_fastest_rank_winner(runs):
    """SCRIPTED_*: real ranks whose own winners were decided by their interleaved rounds agree on the one with the
    lowest median (TAG 1), neither the lowest max nor an unrefined first pass; rank 0 stores it, and a fresh
    process (the CLI) reads that winner back."""
    results = runs(2)
    for rank, res in enumerate(results):
        outcome = res["scripted_shard"]
        assert (outcome["winner"], outcome["launched"]) == (1, 1), (rank, outcome)
        mine = [t for t in (1, 2, 3, 4, 5, 6) if (t - 1) % 2 == rank]
        assert outcome["calls"] == {str(t): 4 if t in SCRIPTED_ROUNDS else 1 for t in mine}  # the best two re-measured
        assert outcome["measured_by"] == {str(t): (t - 1) % 2 for t in (1, 2, 3, 4, 5, 6)}
        assert outcome["medians"] == {"1": 3.0, "2": 3.5, "3": 4.0, "4": 4.5, "5": 2.0, "6": 5.0}
    cache = results[0]["scripted_shard"]["cache"]
    listed = subprocess.run(
        [sys.executable, "-m", "autotune", "cache", "list", "--json", "--cache-dir", cache],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1])),
    )
    assert listed.returncode == 0, listed.stderr
    entries = json.loads(listed.stdout)
    assert [e["record"]["winner"] for e in entries] == [{"TAG": 1}], entries


@pytest.mark.parametrize("world", [2, 4])
def test_rank0_mode_measures_only_on_rank_0(runs, world):
    results = runs(world)
    _same_winner_and_correct(results, "rank0")
    assert sorted(results[0]["rank0"]["compiled"]) == [16, 32, 64, 128]
    assert all(res["rank0"]["compiled"] == [] for res in results[1:])
    for res in results:
        assert res["rank0"]["measured_by"] == {"16": 0, "32": 0, "64": 0, "128": 0}
        assert res["rank0"]["trials"] == {"16": "ok", "32": "ok", "64": "ok", "128": "ok"}


def test_default_mode_under_a_process_group_is_rank0(runs):
    results = runs(2)
    _same_winner_and_correct(results, "default")
    assert sorted(results[0]["default"]["compiled"]) == [16, 32, 64, 128]
    assert results[1]["default"]["compiled"] == []


@pytest.mark.parametrize("world", [2, 4])
def test_a_rank_whose_whole_shard_fails_still_agrees_on_a_winner(runs, world):
    results = runs(world)
    winner = _same_winner_and_correct(results, "failing_shard")
    assert winner in (16, 32)
    bad_ranks = [r for r in range(world) if all(b in (24, 48) for b in _shard_of(HALF_BAD_SPACE, r, world))]
    assert bad_ranks  # the setup really has a rank with nothing that runs
    for res in results:
        trials = res["failing_shard"]["trials"]
        assert trials == {"16": "ok", "24": "runtime_error", "32": "ok", "48": "runtime_error"}
    for r in bad_ranks:
        assert sorted(results[r]["failing_shard"]["compiled"]) == sorted(_shard_of(HALF_BAD_SPACE, r, world))


def test_when_no_config_runs_on_any_rank_every_rank_raises_no_valid_config(runs):
    for res in runs(2):
        for mode in ("shard", "rank0"):
            outcome = res["all_fail"][mode]
            assert outcome.get("error") == "NoValidConfigError", (mode, outcome)
            assert "24" in outcome["message"] and "48" in outcome["message"]


def test_only_rank_0_reads_and_writes_the_disk_cache(runs):
    results = runs(2)
    tuned = [res["cache_decided_by_rank0"]["tuned"] for res in results]
    assert len(tuned[0]["entries"]) == 1 and tuned[1]["entries"] == []
    # A fresh kernel object: rank 0 hits its disk; rank 1, whose disk is empty, follows without tuning.
    hit = [res["cache_decided_by_rank0"]["rank0_disk_hit"] for res in results]
    assert [h["source"] for h in hit] == ["disk", "disk"]
    assert [h["compiled"] for h in hit] == [[], []]
    assert hit[0]["winner"] == hit[1]["winner"] == tuned[0]["winner"]
    assert all(h["correct"] for h in hit)
    # Only rank 1 has an entry: rank 0 decides to tune, and rank 1 tunes its shard instead of using its entry.
    miss = [res["cache_decided_by_rank0"]["rank1_only_hit"] for res in results]
    assert [m["source"] for m in miss] == ["tuned", "tuned"]
    assert sorted(miss[1]["compiled"]) == _shard_of(SPACE, 1, 2)
    assert miss[0]["winner"] == miss[1]["winner"] and all(m["correct"] for m in miss)


def test_offline_every_rank_launches_rank_0s_winner_or_the_same_fallback(runs):
    results = [res["offline"] for res in runs(2)]
    assert [r["rank0_entry"]["winner"] for r in results] == [128, 128]  # rank 1 holds no entry of its own
    assert [r["no_entry"]["winner"] for r in results] == [16, 16]  # the same fallback (the first config)
    assert all(r[step]["compiled"] == [] and r[step]["correct"] for r in results for step in r)


def test_lock_timeout_bounds_rank_0s_wait_for_another_processs_lock(runs):
    results = [res["lock_timeout"] for res in runs(2)]
    assert results[0]["winner"] == results[1]["winner"] and all(r["correct"] for r in results)
    assert any("held the tuning lock" in w for w in results[0]["lock_warnings"]), results[0]["lock_warnings"]


def test_ranks_sharing_a_cache_directory_write_one_entry_and_reuse_it(runs):
    results = runs(2)
    for res in results:
        shared = res["shared_cache"]
        assert len(shared["entries"]) == 1
        assert shared["compiled_again"] == [] and shared["second"]["source"] == "disk"
        assert shared["second"]["winner"] == shared["first"]["winner"] == results[0]["shared_cache"]["first"]["winner"]


# a prune= error is a UserCodeError naming prune= and what it raised (kernel/pruning.py)
_PRUNE_RAISED = "prune= (prune) on add_kernel raised RuntimeError: prune exploded on rank 1"


def test_an_error_on_one_rank_is_raised_on_every_rank_naming_it(runs):
    results = runs(2)
    failing = results[1]["prune_raises"]
    assert failing["error"] == "UserCodeError" and _PRUNE_RAISED in failing["message"]
    other = results[0]["prune_raises"]
    assert other["error"] == "DistributedTuningError"
    assert f"rank 1: UserCodeError: {_PRUNE_RAISED}" in other["message"]


def test_a_prune_error_on_a_follower_in_rank0_mode_is_raised_on_every_rank_and_nothing_is_tuned(runs):
    results = runs(2)
    failing = results[1]["prune_raises_rank0"]
    assert failing["error"] == "UserCodeError" and _PRUNE_RAISED in failing["message"], failing
    other = results[0]["prune_raises_rank0"]
    assert other["error"] == "DistributedTuningError", other
    assert f"prune= raised on another rank: rank 1: UserCodeError: {_PRUNE_RAISED}" in other["message"]
    assert other["compiled"] == [] and failing["compiled"] == []


def test_a_prune_error_under_autotune_offline_is_raised_on_every_rank_together(runs):
    results = runs(2)
    failing, other = results[1]["prune_raises_offline"], results[0]["prune_raises_offline"]
    assert failing["error"] == "UserCodeError" and _PRUNE_RAISED in failing["message"], failing
    assert other["error"] == "DistributedTuningError", other
    assert f"prune= raised on another rank: rank 1: UserCodeError: {_PRUNE_RAISED}" in other["message"]


def test_a_prune_that_differs_between_ranks_still_agrees_and_warns(runs):
    results = runs(2)
    _same_winner_and_correct(results, "prune_differs")
    assert sorted(results[0]["prune_differs"]["compiled"]) == [16, 64]  # of [16, 32, 64, 128]
    assert sorted(results[1]["prune_differs"]["compiled"]) == [32]  # of [16, 32, 64]
    for res in results:
        assert res["prune_differs"]["trials"]["128"] == "skipped"
        assert any("prune= kept different configs on different ranks" in w for w in res["prune_differs"]["warnings"])


def test_autotune_offline_on_some_ranks_only_is_refused_on_every_rank_naming_them(runs):
    for rank, res in enumerate(runs(2)):
        outcome = res["offline_on_one_rank"]
        assert outcome["error"] == "DistributedTuningError" and outcome["is_autotune_error"], (rank, outcome)
        assert f"rank {rank} of 2" in outcome["message"]
        assert "AUTOTUNE_OFFLINE=1 on rank(s) 1 only, not on rank(s) 0" in outcome["message"], outcome
        assert "Set AUTOTUNE_OFFLINE the same on every rank" in outcome["message"]


def test_ranks_at_different_keys_raise_instead_of_pairing_unrelated_collectives(runs):
    for rank, res in enumerate(runs(2)):
        outcome = res["different_keys"]
        assert outcome["error"] == "DistributedTuningError" and outcome["is_autotune_error"]
        assert "not tuning the same thing" in outcome["message"]
        assert "(330,)" in outcome["message"] or "[330]" in outcome["message"]
        assert f"rank {rank} of 2" in outcome["message"]


def test_ranks_at_different_keys_raise_the_mismatch_even_where_a_prune_also_raised(runs):
    for rank, res in enumerate(runs(2)):
        outcome = res["different_keys_and_prune_error"]
        assert outcome["error"] == "DistributedTuningError", (rank, outcome)
        assert "not tuning the same thing" in outcome["message"]
        assert "(332,)" in outcome["message"] or "[332]" in outcome["message"]
        assert "prune exploded" not in outcome["message"]


def test_a_rank_that_never_joins_makes_the_others_raise_within_the_timeout_naming_it(tmp_path):
    results, _ = _spawn(tmp_path, 3, [], timeout_s=HANG_TIMEOUT_S, missing=2)
    leader, other = results[0]["hang"], results[1]["hang"]
    for rank, outcome in ((0, leader), (1, other)):
        assert outcome["error"] == "DistributedTuningError", outcome
        message = outcome["message"]
        assert f"rank {rank} of 3" in message and "add_kernel key (400,)" in message
        assert "distributed='shard'" in message and "timeout is 3 s" in message
    assert "rank(s) 2 did not reach this call" in leader["message"]
    assert "rank 0 did not answer" in other["message"] and "rank 0's error names the missing ranks" in other["message"]
    # the group's timeout fired: the others raised while the missing rank was alive and still had not joined
    assert results[2]["hang"] == {"skipped": True, "others_gave_up_first": True}


def test_agreement_errors_are_autotune_errors():
    assert issubclass(adist.DistributedTuningError, AutotuneError)
    assert issubclass(adist.DistributedTuningError, RuntimeError)


def test_shard_mode_with_process_isolation_tunes_each_shard_in_a_worker_so_a_segfault_costs_its_config(tmp_path):
    """Each rank's shard runs in that rank's worker: the config that segfaults is recorded `crashed` instead of
    killing the rank (and with it the job), and every rank launches the same winner."""
    results, _ = _spawn(tmp_path, 2, ["isolated_shard"])
    winner = _same_winner_and_correct(results, "isolated_shard")
    assert winner in (64, 128)
    for res in results:
        outcome = res["isolated_shard"]
        assert outcome["trials"] == {"64": "ok", "128": "ok", "32": "crashed", "16": "crashed"}
        assert "SIGSEGV" in outcome["errors"]["32"] and "SIGSEGV" in outcome["errors"]["16"]
        assert outcome["measured_by"] == {"64": 0, "32": 0, "128": 1, "16": 1}


def test_an_objective_tuning_is_agreed_across_ranks_and_served_from_rank_0s_entry(runs):
    steps = [res["objective"] for res in runs(2)]
    warmed = [s["warmup"] for s in steps]
    assert [w["source"] for w in warmed] == ["tuned", "tuned"]  # through the agreement, on both ranks
    assert [sorted(w["compiled"]) for w in warmed] == [_shard_of(SPACE, r, 2) for r in range(2)]
    assert warmed[0]["winner"] == warmed[1]["winner"]
    assert all(len(w["calls"]) == 2 for w in warmed)  # the merged record keeps the calls it was tuned on
    assert warmed[0]["entries"] and warmed[1]["entries"] == []  # rank 0 alone stores it
    served = [s["served"] for s in steps]
    assert all("error" not in s for s in served), served  # rank 1, whose disk holds nothing, takes rank 0's entry
    assert [s["result"]["winner"] for s in served] == [warmed[0]["winner"]] * 2
    assert all(s["result"]["correct"] for s in served)


def test_ranks_warming_an_objective_kernel_up_on_different_calls_raise_together(runs):
    errors = [res["objective"]["other_calls"] for res in runs(2)]
    assert [e.get("error") for e in errors] == ["DistributedTuningError"] * 2, errors
    assert all("same calls" in e["message"] and "calls [" in e["message"] for e in errors)


def test_a_warm_up_joins_the_agreement_where_only_a_follower_holds_the_key(runs):
    results = [res["warmup_follower_holds_key"] for res in runs(2)]
    assert all("error" not in r for r in results), results
    assert results[0]["winner"] == results[1]["winner"]
    assert sorted(results[0]["compiled"]) == sorted(SPACE["BLOCK"]) and results[1]["compiled"] == []  # rank0 mode
    assert all(r["result"].startswith("add_kernel: 1 key tuned") for r in results)
