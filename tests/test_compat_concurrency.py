"""`autotune.compat` indexing its configs anew while other threads, or other ranks, tune the same kernel.

An `early_config_prune` may change one of the decorator's triton.Configs in place and return it (Triton's
matmul_perf_model sets `num_stages = 2` before Ampere); the user may change `kernel.configs` in place. Either way
the drop-in indexes the configs anew (a new engine) and runs the call again. These tests put a second thread at
that moment, at another key and at the same key (real threads, real @triton.jit kernels through the interpreter;
the interleaving is forced with Events set and awaited in the prune, in a hook or in `kernel.cache`, Triton's dict
that every launch reads first), and real gloo process groups of two ranks around it. What a user expects: every
call gets the right result, no thread sees another's change as an error, every rank launches the same winner,
the prune's change is what gets tuned, and `cache` / `best_config` end consistent.
"""

from __future__ import annotations

import json
import threading
import traceback
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import triton
from kernels_for_tests import add_kernel

from autotune import TrialStatus, Tuning
from autotune.compat import autotune
from autotune.compat.options import ConfigChangedInPlace

FAST = dict(preset="fast", reps=2, warmup=0, compile_workers=0)
WAIT_S = 30.0  # an Event not set by then is a deadlock: the test fails instead of hanging
OK = TrialStatus.OK
DEVICE = threading.local()  # this thread's GPU generation, as torch.cuda.get_device_capability() would give it


TIMES_MS = {32: 3.0, 64: 1.0, 128: 2.0}  # what scripted_bench reports, by BLOCK (the interpreter's clock is noise)
RUNNING = threading.local()  # the BLOCK of the config this thread is running (set by a pre_hook)


def scripted_bench(kernel_call, quantiles):
    """Triton's do_bench signature: runs the config, reports its time from TIMES_MS."""
    kernel_call()
    return [TIMES_MS[RUNNING.block]] * len(quantiles)


def stage_configs() -> list:
    return [triton.Config({"BLOCK": block}, num_stages=3) for block in (32, 64, 128)]


def stages_before_ampere(configs, named_args, **kwargs):
    """matmul_perf_model's early_config_prune in small: before Ampere it sets `num_stages = 2` in place on a
    config and returns it; which config depends on the call (the largest BLOCK that n fills, as the matmul picks
    one per group of the configs that fit), so calls at other keys change other configs."""
    if getattr(DEVICE, "capability", (7, 0)) < (8, 0):
        [c for c in configs if c.kwargs["BLOCK"] <= named_args["n"]][-1].num_stages = 2
    return configs


def stages(configs) -> list:
    return [(c.kwargs["BLOCK"], c.num_stages) for c in configs]


def trials(record) -> list:
    return [(t.config["BLOCK"], t.config["num_stages"], t.status) for t in record.trials]


def launch(kernel, n: int, seed: int = 0) -> bool:
    torch.manual_seed(seed * 1000 + n)
    x, y, out = torch.randn(n), torch.randn(n), torch.empty(n)
    kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n)
    return bool(torch.allclose(out, x + y))


def wait(event: threading.Event) -> None:
    assert event.wait(WAIT_S), "the other thread never got there"


def in_threads(**calls: Callable[[], Any]) -> tuple[dict, dict]:
    """Run each call in its own thread, named as its keyword: ({name: result}, {name: exception raised})."""
    results: dict = {}
    errors: dict = {}

    def body(name: str, call: Callable[[], Any]) -> None:
        try:
            results[name] = call()
        except BaseException as exc:  # collected: the test asserts which thread raised what
            errors[name] = exc

    threads = [threading.Thread(target=body, args=item, name=item[0]) for item in calls.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(2 * WAIT_S)
    assert not any(thread.is_alive() for thread in threads), "a thread is stuck"
    return results, errors


class HookedCache(dict):
    """`kernel.cache` whose `get` (the first thing a launch reads, after it took the kernel's current engine) calls
    `hook(n, how many times key n was read)`: where a test holds a call after it started, before it prunes."""

    def __init__(self, hook: Callable[[int, int], None]) -> None:
        super().__init__()
        self.hook, self.reads, self.lock = hook, {}, threading.Lock()

    def get(self, key, default=None):
        with self.lock:
            reads = self.reads[key[0]] = self.reads.get(key[0], 0) + 1
        self.hook(key[0], reads)
        return super().get(key, default)


def no_hook(n: int, reads: int) -> None:
    pass


def keys(kernel) -> list:
    return sorted(key[0] for key in kernel.cache)


# ------------------------------------------------------------------------------------------------ threads
@pytest.mark.parametrize("paused_at", [32, 128], ids=["before-any-trial", "after-measuring-the-winner"])
@pytest.mark.parametrize("b_n", [40, 96], ids=["another-key", "the-same-key"])
def test_a_thread_whose_prune_changes_a_config_while_another_tunes_leaves_that_tuning_whole(b_n, paused_at):
    """B (an Ampere device: its prune changes nothing) is measuring its configs when A (pre-Ampere) changes
    configs[1] (BLOCK=64, the fastest) in place and the configs are indexed anew. B's remaining trials still run
    the configs B started with (none recorded as failed), B launches the winner it measured, A tunes the changed
    config, and both launch right."""
    b_measuring, a_reindexed, b_engine = threading.Event(), threading.Event(), []
    prunes_in_a = []

    def prune(configs, named_args, **kwargs):
        if getattr(DEVICE, "capability", None) == (7, 0):
            prunes_in_a.append(1)
            if len(prunes_in_a) == 2:  # A's second prune: the call runs again, on the configs indexed anew
                a_reindexed.set()
        return stages_before_ampere(configs, named_args)

    def pre_hook(nargs, reset_only=False):
        RUNNING.block = nargs["BLOCK"]
        if threading.current_thread().name == "b" and nargs["BLOCK"] == paused_at and not b_measuring.is_set():
            b_engine.append(kernel.tuner)
            b_measuring.set()
            wait(a_reindexed)

    kernel = autotune(
        configs=stage_configs(),
        key=["n"],
        prune_configs_by={"early_config_prune": prune},
        pre_hook=pre_hook,
        do_bench=scripted_bench,
        tuning=FAST,
    )(add_kernel)

    def b() -> bool:
        DEVICE.capability = (8, 0)
        return launch(kernel, b_n)

    def a() -> bool:
        DEVICE.capability = (7, 0)
        wait(b_measuring)
        return launch(kernel, 96, seed=1)

    results, errors = in_threads(b=b, a=a)
    assert errors == {} and results == {"a": True, "b": True}
    assert stages(kernel.configs) == [(32, 3), (64, 2), (128, 3)]
    b_record, a_record = b_engine[0].record((b_n,)), kernel.record((96,))
    assert trials(b_record) == [(32, 3, OK), (64, 3, OK), (128, 3, OK)] and b_record.winner["num_stages"] == 3
    assert trials(a_record) == [(32, 3, OK), (64, 2, OK), (128, 3, OK)] and a_record.winner["num_stages"] == 2
    assert b_record.winner["BLOCK"] == a_record.winner["BLOCK"] == 64
    assert keys(kernel) == sorted({b_n, 96})
    assert all(config is kernel.configs[1] for config in kernel.cache.values())
    assert kernel.cache_info()["failed_configs"] == 0 and kernel.cache_info()["tunings"] == 2
    # the next launches are hits: no key tunes again
    assert launch(kernel, 96, seed=2) and launch(kernel, b_n, seed=2)
    assert kernel.cache_info()["tunings"] == 2 and kernel.best_config is kernel.configs[1]


@pytest.mark.parametrize("change", ["replace-an-item", "change-an-item"])
@pytest.mark.parametrize("b_n", [40, 96], ids=["another-key", "the-same-key"])
def test_the_user_changing_kernel_configs_while_another_thread_tunes_is_indexed_for_the_next_call_only(b_n, change):
    """`kernel.configs[1] = ...` or `kernel.configs[1].num_stages = 2` (Triton reads the list at each tuning) while
    B measures: A's call at a key not in `cache` indexes the list anew; B finishes on the list it started with."""
    b_measuring, a_reindexed, b_engine = threading.Event(), threading.Event(), []

    def pre_hook(nargs, reset_only=False):
        if threading.current_thread().name == "b" and not b_measuring.is_set():
            b_engine.append(kernel.tuner)
            b_measuring.set()
            wait(a_reindexed)

    def hook(n: int, reads: int) -> None:
        if threading.current_thread().name == "a" and reads == (3 if n == b_n else 2):
            a_reindexed.set()  # A's call runs again, after indexing the changed list

    configs = stage_configs()
    original = list(configs)  # the list is the kernel's (as in Triton): A may replace an item of it
    kernel = autotune(configs=configs, key=["n"], pre_hook=pre_hook, tuning=FAST)(add_kernel)
    kernel.cache = HookedCache(hook)

    def a() -> bool:
        wait(b_measuring)
        if change == "replace-an-item":
            kernel.configs[1] = triton.Config({"BLOCK": 64}, num_stages=2)
        else:
            kernel.configs[1].num_stages = 2
        return launch(kernel, 96, seed=1)

    results, errors = in_threads(b=lambda: launch(kernel, b_n), a=a)
    assert errors == {} and results == {"a": True, "b": True}
    assert trials(b_engine[0].record((b_n,))) == [(32, 3, OK), (64, 3, OK), (128, 3, OK)]
    assert trials(kernel.record((96,))) == [(32, 3, OK), (64, 2, OK), (128, 3, OK)]
    assert keys(kernel) == sorted({b_n, 96})
    assert all(any(config is c for c in original + kernel.configs) for config in kernel.cache.values())
    assert kernel.cache_info()["failed_configs"] == 0 and kernel.cache_info()["tunings"] == 2
    assert launch(kernel, 96, seed=2) and launch(kernel, b_n, seed=2)
    assert kernel.cache_info()["tunings"] == 2


@pytest.mark.parametrize("b_n", [100, 96], ids=["another-key", "the-same-key"])
def test_a_call_that_started_before_another_thread_reindexed_runs_on_the_new_engine_without_another_rebuild(b_n):
    """B's launch has taken the kernel's engine when A's prune changes configs[1] in place, A indexes the configs
    anew and tunes. B then finds its engine out of date: it runs again on A's engine (no second re-index, which
    would throw away what A tuned), or at A's key launches A's winner without tuning."""
    b_started, a_done, a_engine = threading.Event(), threading.Event(), []

    def hook(n: int, reads: int) -> None:
        if threading.current_thread().name == "b" and reads == 1:
            b_started.set()
            wait(a_done)

    kernel = autotune(
        configs=stage_configs(), key=["n"], tuning=FAST, prune_configs_by={"early_config_prune": stages_before_ampere}
    )(add_kernel)
    kernel.cache = HookedCache(hook)

    def a() -> bool:
        wait(b_started)
        try:
            return launch(kernel, 96, seed=1)
        finally:
            a_engine.append(kernel.tuner)
            a_done.set()

    results, errors = in_threads(b=lambda: launch(kernel, b_n), a=a)
    assert errors == {} and results == {"a": True, "b": True}
    assert kernel.tuner is a_engine[0]
    assert stages(kernel.configs) == [(32, 3), (64, 2), (128, 3)]
    for n in {96, b_n}:
        assert trials(kernel.record((n,))) == [(32, 3, OK), (64, 2, OK), (128, 3, OK)]
    assert keys(kernel) == sorted({b_n, 96})
    assert kernel.cache_info()["tunings"] == len({b_n, 96})  # at the same key: tuned by A, B launched its winner


@pytest.mark.parametrize("how", ["its-launch", "in-place-not-indexed-yet"])
def test_a_change_another_thread_made_does_not_use_up_the_rerun_of_a_call(how):
    """A's prune changes configs[1] (the call runs again, once); before A's second run prunes, another thread
    changes configs[0]: B's launch at another key (its prune; B indexes anew and tunes), or B's own code setting
    `num_stages` in place (nothing indexed it yet). A's second run finds the configs changed: not A's doing, so
    A runs again rather than failing with ConfigChangedInPlace."""
    a_rerunning, b_done = threading.Event(), threading.Event()

    def hook(n: int, reads: int) -> None:
        if n == 96 and reads == 2:  # A's second run, on the configs A's change had indexed
            a_rerunning.set()
            wait(b_done)

    kernel = autotune(
        configs=stage_configs(), key=["n"], tuning=FAST, prune_configs_by={"early_config_prune": stages_before_ampere}
    )(add_kernel)
    kernel.cache = HookedCache(hook)

    def b() -> bool:
        wait(a_rerunning)
        try:
            if how == "its-launch":
                return launch(kernel, 40, seed=1)
            kernel.configs[0].num_stages = 2
            return True
        finally:
            b_done.set()

    results, errors = in_threads(a=lambda: launch(kernel, 96), b=b)
    assert errors == {} and results == {"a": True, "b": True}
    assert stages(kernel.configs) == [(32, 2), (64, 2), (128, 3)]
    assert trials(kernel.record((96,))) == [(32, 2, OK), (64, 2, OK), (128, 3, OK)]
    if how == "its-launch":
        assert trials(kernel.record((40,))) == [(32, 2, OK), (64, 2, OK), (128, 3, OK)]
    assert keys(kernel) == ([40, 96] if how == "its-launch" else [96])


def test_a_prune_that_never_settles_fails_its_own_call_and_no_other_threads():
    """A's prune changes configs[2] on every run (at n=200): A's call raises ConfigChangedInPlace. B, whose launch
    had started before, finds the configs changed under it and runs again; it never sees A's error."""
    b_started, a_failed = threading.Event(), threading.Event()

    def restless(configs, named_args, **kwargs):
        if named_args["n"] == 200:
            configs[2].num_stages += 1
        return configs

    def hook(n: int, reads: int) -> None:
        if n == 40 and reads == 1:
            b_started.set()
            wait(a_failed)

    kernel = autotune(
        configs=stage_configs(), key=["n"], tuning=FAST, prune_configs_by={"early_config_prune": restless}
    )(add_kernel)
    kernel.cache = HookedCache(hook)

    def a() -> bool:
        wait(b_started)
        try:
            return launch(kernel, 200)
        finally:
            a_failed.set()

    results, errors = in_threads(a=a, b=lambda: launch(kernel, 40, seed=1))
    assert list(errors) == ["a"] and isinstance(errors["a"], ConfigChangedInPlace)
    assert "changed configs[2] in place" in str(errors["a"])
    assert results == {"b": True}
    assert stages(kernel.configs) == [(32, 3), (64, 3), (128, 5)]
    assert trials(kernel.record((40,))) == [(32, 3, OK), (64, 3, OK), (128, 5, OK)]
    assert keys(kernel) == [40]


def test_threads_racing_into_the_same_change_all_launch_right_and_keep_their_keys():
    """Eight threads launch at four keys at once, each prune setting num_stages = 2 in place (as the pre-Ampere
    matmul prune does, on every call): however they interleave, every launch is right, no config is recorded as
    failed, the configs end indexed with every change, and every key stays in `cache`, launched without tuning
    again."""
    kernel = autotune(
        configs=stage_configs(), key=["n"], tuning=FAST, prune_configs_by={"early_config_prune": stages_before_ampere}
    )(add_kernel)
    start = threading.Barrier(8)
    sizes = (40, 96, 130, 140)

    def call(i: int) -> Callable[[], bool]:
        def go() -> bool:
            start.wait(WAIT_S)
            return launch(kernel, sizes[i % 4], seed=i)

        return go

    results, errors = in_threads(**{f"t{i}": call(i) for i in range(8)})
    assert errors == {} and len(results) == 8 and all(results.values())
    assert stages(kernel.configs) == [(32, 2), (64, 2), (128, 2)]
    assert keys(kernel) == list(sizes) and kernel.cache_info()["failed_configs"] == 0
    tunings = kernel.cache_info()["tunings"]
    assert all(launch(kernel, n, seed=9) for n in sizes) and kernel.cache_info()["tunings"] == tunings


# ------------------------------------------------------------------------------------------------ ranks
# Each rank is a spawned process (module-level functions): it joins a gloo group of two, runs every scenario in
# order and writes what it saw to rank<r>.json. One spawn for every distributed test of this file.


def _rank_result(kernel, n: int, rank: int) -> dict:
    from autotune.modes import distributed as adist

    correct = launch(kernel, n, seed=rank)
    agreed = [a for a in adist.agreements(kernel.name) if a.key == (n,)]
    return {
        "correct": correct,
        "winner": [kernel.best_config.kwargs["BLOCK"], kernel.best_config.num_stages],
        "agreed": dict(agreed[-1].winner) if agreed else None,
        "configs": stages(kernel.configs),
        "trials": [[t.config["BLOCK"], t.config["num_stages"], t.status.value] for t in kernel.record((n,)).trials],
    }


def _caught(run: Callable[[], Any]) -> dict:
    try:
        return {"result": run()}
    except Exception as exc:  # each rank's error is what the test checks
        return {"error": type(exc).__name__, "message": str(exc)}


def _in_place(mode: str) -> Callable[[int], dict]:
    def scenario(rank: int) -> dict:
        kernel = autotune(
            configs=stage_configs(),
            key=["n"],
            tuning=Tuning(**FAST, distributed=mode),
            prune_configs_by={"early_config_prune": stages_before_ampere},
        )(add_kernel)
        return _rank_result(kernel, 96, rank)

    return scenario


def _list_changed(rank: int) -> dict:
    kernel = autotune(configs=stage_configs(), key=["n"], tuning=Tuning(**FAST, distributed="rank0"))(add_kernel)
    first = _rank_result(kernel, 64, rank)
    kernel.configs.append(triton.Config({"BLOCK": 16}, num_stages=3))
    return {"first": first, "second": _rank_result(kernel, 80, rank)}


def _restless(mode: str) -> Callable[[int], dict]:
    def scenario(rank: int) -> dict:
        def restless(configs, named_args, **kwargs):
            if named_args["n"] == 120:
                configs[2].num_stages += 1
            return configs

        kernel = autotune(
            configs=stage_configs(),
            key=["n"],
            tuning=Tuning(**FAST, distributed=mode),
            prune_configs_by={"early_config_prune": restless},
        )(add_kernel)
        failed = _caught(lambda: _rank_result(kernel, 120, rank))
        return {"failed": failed, "next key": _caught(lambda: _rank_result(kernel, 64, rank))}

    return scenario


def _one_rank_changes(rank: int) -> dict:
    def prune(configs, named_args, **kwargs):
        if rank == 1:
            configs[1].num_stages = 2
        return configs

    kernel = autotune(
        configs=stage_configs(),
        key=["n"],
        tuning=Tuning(**FAST, distributed="rank0"),
        prune_configs_by={"early_config_prune": prune},
    )(add_kernel)
    failed = _caught(lambda: _rank_result(kernel, 96, rank))
    other = autotune(configs=stage_configs(), key=["n"], tuning=Tuning(**FAST, distributed="rank0"))(add_kernel)
    return {"failed": failed, "other kernel": _caught(lambda: _rank_result(other, 96, rank))}


SCENARIOS: dict[str, Callable[[int], dict]] = {
    "rank0": _in_place("rank0"),
    "shard": _in_place("shard"),
    "list": _list_changed,
    "restless rank0": _restless("rank0"),
    "restless shard": _restless("shard"),
    "one rank": _one_rank_changes,
}


def _rank(rank: int, world: int, out: str) -> None:
    import os

    import torch.distributed as dist

    out_dir = Path(out)
    os.environ["AUTOTUNE_CACHE_DIR"] = str(out_dir / "cache")
    dist.init_process_group(
        "gloo", init_method=f"file://{out_dir / 'pg-init'}", rank=rank, world_size=world, timeout=timedelta(seconds=60)
    )
    dist.barrier()
    dist.distributed_c10d._set_pg_timeout(timedelta(seconds=WAIT_S))
    results: dict = {}
    try:
        for name, scenario in SCENARIOS.items():
            try:
                results[name] = scenario(rank)
            except Exception:
                results[name] = {"crash": traceback.format_exc()}
    finally:
        (out_dir / f"rank{rank}.json").write_text(json.dumps(results, indent=1, default=str))
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    import torch.multiprocessing as mp

    out = tmp_path_factory.mktemp("ranks")
    mp.spawn(_rank, args=(2, str(out)), nprocs=2, join=True)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def outcome(ranks: list[dict], scenario: str) -> list[dict]:
    """Each rank's result of `scenario`, which raised nothing it did not catch."""
    for rank, results in enumerate(ranks):
        assert "crash" not in results[scenario], f"rank {rank} {scenario}:\n{results[scenario]['crash']}"
    return [results[scenario] for results in ranks]


@pytest.mark.parametrize("mode", ["rank0", "shard"])
def test_every_rank_reindexes_a_config_changed_in_place_and_launches_the_same_winner(ranks, mode):
    """Under a process group each rank runs the prune, sees its change and indexes anew before the agreement, then
    the ranks agree over the changed configs. (Raised inside the agreement, as it was, under "rank0" the change
    failed the other ranks' calls while rank 0 ran its call again alone and waited for them.)"""
    results = outcome(ranks, mode)
    for result in results:
        assert result["correct"] and result["configs"] == [[32, 3], [64, 2], [128, 3]]
        assert result["trials"] == [[32, 3, "ok"], [64, 2, "ok"], [128, 3, "ok"]]
        assert result["agreed"] == {
            "BLOCK": result["winner"][0],
            "num_warps": 4,
            "num_stages": result["winner"][1],
            "num_ctas": 1,
        }
    assert results[0]["winner"] == results[1]["winner"]


def test_every_rank_reindexes_a_list_changed_in_place_and_agrees(ranks):
    results = outcome(ranks, "list")
    for result in results:
        assert result["first"]["correct"] and result["second"]["correct"]
        assert [t[0] for t in result["second"]["trials"]] == [32, 64, 128, 16]
    assert results[0]["second"]["winner"] == results[1]["second"]["winner"]


@pytest.mark.parametrize("mode", ["rank0", "shard"])
def test_a_prune_that_never_settles_fails_on_every_rank_and_leaves_the_ranks_in_step(ranks, mode):
    results = outcome(ranks, f"restless {mode}")
    failed = [result["failed"] for result in results]
    assert failed[0]["error"] == "ConfigChangedInPlace" and "configs[2]" in failed[0]["message"]
    # each rank's prune raised: each rank raises its own error, in either mode (told at the handshake)
    assert failed[1]["error"] == "ConfigChangedInPlace" and "configs[2]" in failed[1]["message"]
    after = [result["next key"]["result"] for result in results]
    assert all(a["correct"] for a in after) and after[0]["winner"] == after[1]["winner"]


def test_a_config_changed_on_one_rank_only_is_an_error_on_every_rank_not_a_hang(ranks):
    """Rank 1's prune changes a config rank 0's does not (another GPU generation): the ranks would tune different
    configs, so the handshake refuses on both; the group is still usable."""
    results = outcome(ranks, "one rank")
    for result in results:
        assert result["failed"]["error"] == "DistributedTuningError"
        assert "another search space" in result["failed"]["message"]
        assert result["other kernel"]["result"]["correct"]
    assert results[0]["other kernel"]["result"]["winner"] == results[1]["other kernel"]["result"]["winner"]
