"""`Tuning(objective=...)` with a shape-dependent `prune=`, and a set of calls given in different orders: a set is one
tuning whatever its order (one candidates checksum, one `record.calls`), its candidates are the configs prune= keeps
for every call, and any call of the set launches the stored winner, also in a new process. Real kernels through
the interpreter, real processes (a script run per step) and a real gloo process group."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

import autotune
from autotune import OptionError, Tuning

ROOT = Path(__file__).resolve().parents[1]

KERNEL = textwrap.dedent(
    """
    import json, sys
    import torch, triton, triton.language as tl
    import autotune
    from autotune import Tuning

    @triton.jit
    def add_one(x, out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=m) + 1.0, mask=m)

    def prune(configs, named):  # a typical shape prune: no block larger than the problem
        return [c for c in configs if c["BLOCK"] <= max(32, triton.next_power_of_2(named["n"]))]

    kernel = autotune.autotune(
        space={"BLOCK": [32, 64, 128, 256]}, key=None, grid="(cdiv(n, $BLOCK),)", prune=prune,
        tuning=Tuning(objective="max", reps=2, compile_workers=0),
    )(add_one)

    class Call:
        def __init__(self, n):
            self.n = n
        def __call__(self):
            return (torch.randn(self.n), torch.empty(self.n), self.n), {}

    step, sizes = sys.argv[1], [int(s) for s in sys.argv[2:]]
    if step == "warmup":
        report = autotune.warmup(kernel, [Call(n) for n in sizes])
        print(json.dumps({"tuned": len(report.tuned), "cached": len(report.cached)}))
    else:
        launched = {}
        for n in sizes:
            x, y = torch.randn(n), torch.empty(n)
            kernel(x, y, n)
            launched[n] = [bool(torch.allclose(y, x + 1)), kernel.best_config["BLOCK"]]
        print(json.dumps(launched))
    """
)


def _step(tmp_path: Path, *argv: object) -> dict:
    """Run one step of the kernel script in a new process (the test's cache directory); its JSON answer."""
    script = tmp_path / "objective_prune_kernel.py"
    script.write_text(KERNEL)
    env = dict(os.environ, PYTHONPATH=str(ROOT), TRITON_INTERPRET="1")
    done = subprocess.run(
        [sys.executable, str(script), *map(str, argv)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_call_of_a_warmed_set_launches_the_stored_winner_in_a_new_process(tmp_path):
    """prune= keeps BLOCK 32/64 for n=40 and every block for n=256: the set's entry serves both calls (it was
    filed under the first call's prune= and refused for n=256, asking for the warmup just done)."""
    assert _step(tmp_path, "warmup", 40, 256) == {"tuned": 1, "cached": 0}
    launched = _step(tmp_path, "launch", 256, 40)
    assert launched["256"][0] and launched["40"][0]  # both launched, right
    assert launched["256"][1] == launched["40"][1] in (32, 64)  # the one winner, among what prune= keeps for both


def test_a_new_set_replaces_the_keys_entry_and_serves_every_call_of_it(tmp_path):
    """The set changes from {40, 256} to {128, 256} (prune= keeps other configs for their intersection): the new
    set's entry replaces the old one (one entry for the key), and a serving process launches its winner on both
    calls, never the old set's."""
    from autotune.storage.files import disk_entries

    assert _step(tmp_path, "warmup", 40, 256) == {"tuned": 1, "cached": 0}
    assert _step(tmp_path, "warmup", 128, 256) == {"tuned": 1, "cached": 0}
    (entry,) = disk_entries("add_one")
    winner = entry.record.winner["BLOCK"]
    launched = _step(tmp_path, "launch", 256, 128)
    assert launched == {"256": [True, winner], "128": [True, winner]}


def test_the_same_set_in_another_order_is_cached(tmp_path):
    assert _step(tmp_path, "warmup", 40, 256) == {"tuned": 1, "cached": 0}
    assert _step(tmp_path, "warmup", 256, 40) == {"tuned": 0, "cached": 1}


@triton.jit
def _add_one(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=m) + 1.0, mask=m)


def _call(n: int):
    return lambda: ((torch.randn(n), torch.empty(n), n), {})


def test_only_configs_prune_keeps_for_every_call_are_measured_and_none_is_refused():
    seen: list[int] = []

    def only_up_to(configs, named):  # n=40 keeps 32/64, n=100 keeps 32/64/128
        seen.append(named["n"])
        return [c for c in configs if c["BLOCK"] <= max(64, triton.next_power_of_2(named["n"]))]

    kernel = autotune.autotune(
        space={"BLOCK": [32, 64, 128, 256]},
        key=None,
        grid="(cdiv(n, $BLOCK),)",
        prune=only_up_to,
        tuning=Tuning(objective="geomean", reps=2, compile_workers=0),
    )(_add_one)
    autotune.warmup(kernel, [_call(100), _call(40)])
    assert sorted(set(seen)) == [40, 100]  # prune= ran on every call of the set
    measured = sorted(t.config["BLOCK"] for t in kernel.record(()).trials if t.status.value != "skipped")
    assert measured == [32, 64]  # BLOCK 128, left out for n=40, is never measured on it nor a winner

    def one_each(configs, named):  # n=40 keeps only 64, n=256 only 256: no config fits both
        return [c for c in configs if c["BLOCK"] == max(32, triton.next_power_of_2(named["n"]))]

    disjoint = autotune.autotune(
        space={"BLOCK": [32, 64, 128, 256]},
        key=None,
        grid="(cdiv(n, $BLOCK),)",
        prune=one_each,
        tuning=Tuning(objective="max", reps=2, compile_workers=0),
    )(_add_one)
    with pytest.raises(OptionError, match=r"prune= on _add_one keeps no config for every call of this set"):
        autotune.warmup(disjoint, [_call(40), _call(256)])


RANKS = textwrap.dedent(
    """
    import json, os, sys
    from datetime import timedelta
    import torch.multiprocessing as mp

    def run(rank, world, out):
        os.environ["TRITON_INTERPRET"] = "1"
        os.environ["AUTOTUNE_CACHE_DIR"] = os.path.join(out, f"cache{rank}")
        import torch, torch.distributed as dist, triton, triton.language as tl, autotune
        dist.init_process_group("gloo", init_method=f"file://{out}/pg", rank=rank, world_size=world,
                                timeout=timedelta(seconds=120))

        @triton.jit
        def add_one(x, out, n, BLOCK: tl.constexpr, TAG: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            m = offs < n
            tl.store(out + offs, tl.load(x + offs, mask=m) + 1.0, mask=m)

        kernel = autotune.autotune(space={"BLOCK": [64], "TAG": [0, 1]}, key=None, grid="(cdiv(n, $BLOCK),)",
            tuning=autotune.Tuning(objective="max", distributed="shard", reps=2, warmup=0, refine_topk=0,
                                   compile_workers=0))(add_one)
        sys.path.insert(0, out)
        from calls import Call
        sizes = [64, 4096] if rank == 0 else [4096, 64]  # the same set, another order on each rank
        autotune.warmup(kernel, [Call(n) for n in sizes], in_process=True)
        record = kernel.cache.in_memory((), ("torch.float32", "torch.float32"))
        trials = {str(t.config["TAG"]): t.calls_ms for t in record.trials}
        json.dump({"calls": record.calls, "trials": trials}, open(os.path.join(out, f"rank{rank}.json"), "w"))
        dist.destroy_process_group()

    if __name__ == "__main__":
        mp.spawn(run, args=(2, sys.argv[1]), nprocs=2, join=True)
    """
)

CALLS = textwrap.dedent(
    """
    import torch

    class Call:
        def __init__(self, n):
            self.n = n
        def __call__(self):
            return (torch.randn(self.n), torch.empty(self.n), self.n), {}
    """
)


def test_shard_ranks_giving_the_set_in_other_orders_file_each_calls_time_under_its_call(tmp_path):
    """Each rank measures one config (shard) and the trials are merged: every rank's per-call times must be in the
    same order as the record's `calls`. n=4096 runs 64 programs to n=64's one under the interpreter, so each
    trial's time on it is the larger, whichever rank measured it."""
    (tmp_path / "ranks.py").write_text(RANKS)
    (tmp_path / "calls.py").write_text(CALLS)
    env = dict(os.environ, PYTHONPATH=str(ROOT), TRITON_INTERPRET="1")
    done = subprocess.run(
        [sys.executable, str(tmp_path / "ranks.py"), str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert records[0] == records[1]  # one record on every rank
    calls, trials = records[0]["calls"], records[0]["trials"]
    big, small = calls.index("x[4096], out[4096], n=4096"), calls.index("x[64], out[64], n=64")
    assert sorted(trials) == ["0", "1"]
    for times in trials.values():
        assert times[big] > times[small]
