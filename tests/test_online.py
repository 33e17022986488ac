"""Online tuning through the interpreter: the first call never waits, every call is correct, the decision matches an
offline tuning when one config is clearly fastest, and it is stored like any winner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
from kernels_for_tests import record_launches

from autotune import CartesianSpace, IsolationWarning, OptionError, Reference, Tuning, autotune, stats
from autotune.errors import NoRecordError
from autotune.storage import disk_entries

REPO = Path(__file__).resolve().parents[1]


@triton.jit
def slow_add(x, y, out, n, BLOCK: tl.constexpr, SLOW: tl.constexpr, BAD: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    acc = tl.load(x + offs, mask=mask)
    for _ in range(SLOW):  # a deliberately slow config: SLOW extra passes
        acc = acc * 1.0
    result = acc + tl.load(y + offs, mask=mask)
    if BAD:  # a wrong config: what verify= must catch
        result = result * 0.0
    tl.store(out + offs, result, mask=mask)


@triton.jit
def increment(x, n, BLOCK: tl.constexpr, SLOW: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    value = tl.load(x + offs, mask=mask)
    for _ in range(SLOW):
        value = value * 1.0
    tl.store(x + offs, value + 1.0, mask=mask)


SPACE = {"BLOCK": [128], "SLOW": [360, 0, 180], "BAD": [0]}  # 0 is fastest by far (a loaded machine too)


def online(space=SPACE, fn=slow_add, key=("n",), **options):
    options.setdefault("reps", 3)
    options.setdefault("compile_workers", 0)
    return autotune(
        space=space,
        key=list(key),
        grid="(cdiv(n, $BLOCK),)",
        tuning=Tuning(mode="online", **options),
    )(fn)


def count_launches(kernel) -> list:
    """(SLOW, BAD) of every launch of `kernel`."""
    return record_launches(kernel, "SLOW", "BAD")


def call(kernel, n=512):
    x, y, out = torch.randn(n), torch.randn(n), torch.empty(n)
    kernel(x, y, out, n)
    torch.testing.assert_close(out, x + y)


def test_the_first_call_launches_once_and_measures_nothing():
    kernel = online()
    runs = count_launches(kernel)
    call(kernel)
    assert runs == [(360, 0)]  # the space's first config, once: nothing measured
    assert stats()["slow_add"]["tunings"] == 0
    with pytest.raises(
        NoRecordError,
        match=r"slow_add's last call \(key \(512,\)\) has no tuning record: .* or its key "
        r"is being tuned online \(\{'\[512\] float32,float32,float32': '0 of 3",
    ):
        kernel.record()  # nothing tuned yet (not some internal KeyError)
    assert kernel.cache_info()["online"] == {"[512] float32,float32,float32": "0 of 3 candidates measured"}


def test_online_decides_what_offline_tuning_picks_and_stores_it(monkeypatch, tmp_path):
    kernel = online()
    runs = count_launches(kernel)
    calls = 0
    while kernel.cache.in_memory((512,), ("torch.float32",) * 3) is None:
        call(kernel)
        calls += 1
        assert calls < 100
    assert len(runs) == calls  # one launch per call, every output checked by call()
    record = kernel.record()
    assert record.strategy == "online" and record.winner["SLOW"] == 0
    assert all(len(t.samples_ms) == 3 for t in record.trials)
    assert [e.record.strategy for e in disk_entries("slow_add")] == ["online"]
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path / "offline"))  # so that it tunes, not reads
    offline = autotune(space=SPACE, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=Tuning(compile_workers=0, reps=3))(
        slow_add
    )
    call(offline)
    assert offline.record().strategy is None and offline.record().winner == record.winner
    before = len(runs)
    call(kernel)  # decided: the winner, at the hot path's cost
    assert runs[before:] == [(0, 0)]


def test_an_in_place_kernel_ends_as_with_plain_launches():
    kernel = online(space={"BLOCK": [64, 128], "SLOW": [0, 30]}, fn=increment)
    x = torch.zeros(300)
    for _ in range(30):
        kernel(x, 300)
    assert torch.equal(x, torch.full((300,), 30.0))
    assert kernel.record().strategy == "online"


def test_a_verify_failure_never_reaches_the_caller():
    space = {"BLOCK": [128], "SLOW": [0, 10], "BAD": [0, 1]}
    kernel = autotune(
        space=space,
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        verify=Reference(lambda x, y, out, n: x + y, outputs=("out",)),
        tuning=Tuning(mode="online", compile_workers=0, reps=2),
    )(slow_add)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(25):
            call(kernel)  # every output is x + y, BAD configs included
    record = kernel.record()
    statuses = {(t.config["SLOW"], t.config["BAD"]): t.status.value for t in record.trials}
    assert statuses[(0, 1)] == statuses[(10, 1)] == "verify_failed"
    assert record.winner["BAD"] == 0


def test_a_second_process_starts_from_the_stored_winner(tmp_path):
    kernel = online()
    for _ in range(20):
        call(kernel)
    winner = kernel.record().winner
    (tmp_path / "mod").mkdir()
    code = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_online import online, count_launches, call
        from autotune import stats
        kernel = online()
        runs = count_launches(kernel)
        call(kernel)
        print(json.dumps({{"runs": runs, "stats": stats()["slow_add"]}}))
    """)
    env = dict(os.environ, PYTHONPATH=str(REPO), TRITON_INTERPRET="1")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert [tuple(r) for r in out["runs"]] == [(winner["SLOW"], winner["BAD"])]
    assert out["stats"]["disk_hits"] == 1 and out["stats"]["tunings"] == 0


def test_autotune_mode_switches_a_whole_process_and_compat(monkeypatch, capsys):
    from autotune import compat

    monkeypatch.setenv("AUTOTUNE_MODE", "online")
    monkeypatch.setenv("AUTOTUNE_PRINT", "1")
    kernel = compat.autotune(
        configs=[triton.Config({"BLOCK": 128, "SLOW": s, "BAD": 0}) for s in (180, 0)],
        key=["n"],
        tuning={"reps": 3, "compile_workers": 0},
    )(slow_add)
    runs = count_launches(kernel)
    for _ in range(12):
        x, y, out = torch.randn(256), torch.randn(256), torch.empty(256)
        kernel[(2,)](x, y, out, 256)
        torch.testing.assert_close(out, x + y)
    assert runs[0] == (180, 0) and len(runs) == 12  # first call untimed on the first config, one launch each
    assert kernel.tuner.record().strategy == "online" and kernel.tuner.record().winner["SLOW"] == 0
    assert "online:" in capsys.readouterr().err  # AUTOTUNE_PRINT printed the decision
    monkeypatch.setenv("AUTOTUNE_MODE", "later")
    fresh = autotune(
        space={"BLOCK": [64], "SLOW": [0, 1], "BAD": [0]},
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        tuning=Tuning(compile_workers=0),
    )(slow_add)  # mode left unset: the environment decides
    with pytest.raises(OptionError, match="AUTOTUNE_MODE") as caught:
        call(fresh)
    assert "AUTOTUNE_OFFLINE" not in str(caught.value)
    monkeypatch.setenv("AUTOTUNE_MODE", "offline")  # the mode meant is another variable: the message says which
    with pytest.raises(OptionError, match="AUTOTUNE_MODE='offline' is not a mode.*set AUTOTUNE_OFFLINE=1"):
        call(fresh)


def test_a_config_that_fails_at_launch_is_dropped_and_the_call_still_succeeds():
    kernel = online(space={"BLOCK": [128, 96], "SLOW": [0], "BAD": [0]})  # 96: not a power of 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(12):
            call(kernel)
    statuses = {t.config["BLOCK"]: t.status.value for t in kernel.record().trials}
    assert statuses == {128: "ok", 96: "runtime_error"}


def test_under_verify_even_the_first_call_is_checked():
    space = {"BLOCK": [128], "SLOW": [0, 5], "BAD": [1, 0]}  # the first config is wrong
    kernel = autotune(
        space=space,
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        verify=Reference(lambda x, y, out, n: x + y, outputs=("out",)),
        tuning=Tuning(mode="online", compile_workers=0, reps=2),
    )(slow_add)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(20):
            call(kernel)
    assert kernel.record().winner["BAD"] == 0


def test_background_compiles_do_not_hold_the_process_at_exit(tmp_path):
    """Online mode: a script that met a new key exits once it is done; the compile in flight (here one that never
    ends) is not waited for and the queued ones are cancelled at exit."""
    from test_pipeline import run_child_that_leaves_a_hanging_compile

    kernel = """
add = autotune(space={"BLOCK": [64, 32, 128, 256, 512]}, key=["n"], grid="(cdiv(n, $BLOCK),)",
               tuning=Tuning(mode="online", compile_workers=1, reps=2))(add_kernel)
add.compiler_factory = lambda tuned, prepare: FunctionCompiler(compile_fn)
"""
    run_child_that_leaves_a_hanging_compile(tmp_path, kernel, "add.cache_info()['online']")


def test_many_new_keys_share_one_bounded_compile_pool():
    """However many keys are new, one kernel's background compiles run on one pool of compile_workers threads
    driven by one thread, not a session thread and a pool per key."""
    from autotune.engine.compilers import FunctionCompiler

    gate, lock = threading.Event(), threading.Lock()
    running = [0, 0]  # compiles running now, most ever at once

    def compile_fn(config):
        with lock:
            running[0] += 1
            running[1] = max(running)
        gate.wait(60)
        with lock:
            running[0] -= 1

    kernel = autotune(
        space=SPACE, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=Tuning(mode="online", compile_workers=2, reps=2)
    )(slow_add)
    kernel.compiler_factory = lambda tuned, prepare: FunctionCompiler(compile_fn)
    keys = 12
    try:
        for n in range(100, 100 + keys):
            call(kernel, n)
        deadline = time.monotonic() + 60
        while running[0] < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        names = [t.name for t in threading.enumerate()]
        assert len(kernel.cache_info()["online"]) == keys
    finally:
        gate.set()
    assert running[1] == 2
    assert sum(n.startswith("autotune-compile") for n in names) <= 2, names
    assert sum(n.startswith("autotune-online") for n in names) <= 1, names
    for thread in threading.enumerate():  # every key's candidates compile, then the driver ends
        if thread.name.startswith("autotune-online"):
            thread.join(60)
    assert running[1] == 2


def test_threads_racing_to_the_first_online_call_share_one_tuner(monkeypatch):
    from autotune.modes.online import OnlineTuner

    kernel = online()
    start, constructing = threading.Barrier(8), threading.Barrier(8)
    made = OnlineTuner.__init__

    def init_together(self, *args, **kwargs):  # every thread is inside the race at once, not by luck
        constructing.wait(10)
        made(self, *args, **kwargs)

    monkeypatch.setattr(OnlineTuner, "__init__", init_together)
    seen: list = []

    def first_use():
        start.wait(10)
        seen.append(kernel.online)

    threads = [threading.Thread(target=first_use) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(seen) == 8 and all(tuner is seen[0] for tuner in seen)
    assert kernel.online is seen[0]


def test_isolation_asked_of_an_online_tuning_is_warned_where_it_would_not_apply(monkeypatch):
    """Online tuning times candidates on real calls in this process: isolate='process' or trial_timeout_s applies
    only when a tuning takes the blocking path (distributed, force), so the decoration warns, at the user's line."""
    with pytest.warns(
        IsolationWarning,
        match=r"mode='online' times candidates .*isolate='process' and "
        r"trial_timeout_s=5 applies only when a tuning takes the blocking path "
        r"\(distributed tuning, force\).*mode='blocking'",
    ) as caught:
        online(isolate="process", trial_timeout_s=5)
    assert caught[0].filename == __file__
    with pytest.warns(IsolationWarning, match="trial_timeout_s=2.5 applies only when"):
        online(isolate="auto", trial_timeout_s=2.5)
    plain = dict(space=SPACE, key=["n"], grid="(cdiv(n, $BLOCK),)")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        online(isolate="off")  # what online tuning does anyway: nothing to say
        autotune(**plain, tuning=Tuning(isolate="process", compile_workers=0))(slow_add)  # blocking: isolated
    monkeypatch.setenv("AUTOTUNE_MODE", "online")
    with pytest.warns(
        IsolationWarning, match="AUTOTUNE_MODE=online times candidates .*isolate='process' applies only when.*Drop it,"
    ):
        autotune(**plain, tuning=Tuning(isolate="process", compile_workers=0))(slow_add)
    monkeypatch.setenv("AUTOTUNE_MODE", "bogus")  # the call reports a bad value; decorating is not its place
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        autotune(**plain, tuning=Tuning(isolate="process", compile_workers=0))(slow_add)


def test_the_median_of_a_candidates_timed_launches_decides_not_one_stalled_launch():
    """SLOW=1 (the start config) takes 0.2 s more on every launch; SLOW=0 stalls 0.6 s on one of its three timed
    launches. SLOW=0 has the lower median, SLOW=1 the lower max and mean: the session decides SLOW=0."""
    kernel = online(space={"BLOCK": [128], "SLOW": [1, 0], "BAD": [0]})
    real, fast_launches = kernel.fn.run, []

    def stalling(*args, **kwargs):
        if kwargs["SLOW"] == 1:
            time.sleep(0.2)
        else:
            fast_launches.append(1)
            if len(fast_launches) == 3:  # its third timed launch (it is never launched untimed before the decision)
                time.sleep(0.6)
        return real(*args, **kwargs)

    kernel.fn.run = stalling
    calls = 0
    while kernel.cache.in_memory((512,), ("torch.float32",) * 3) is None:
        call(kernel)
        calls += 1
        assert calls < 100
    record = kernel.record()
    assert record.strategy == "online" and record.winner["SLOW"] == 0
    assert [len(t.samples_ms) for t in record.trials] == [3, 3]
    stalled, steady = sorted(record.trials, key=lambda t: t.config["SLOW"])
    assert max(stalled.samples_ms) >= 600.0 and min(steady.samples_ms) >= 200.0  # what the sleeps guarantee
    assert stalled.median_ms < steady.median_ms < max(stalled.samples_ms)


def test_keys_seen_once_do_not_accumulate_sessions(monkeypatch):
    """#40 item 19: a key called once never decides; past MAX_SESSIONS keys in progress the least recently called
    is dropped (a key still being called stays), so one-off keys cannot grow a serving process without bound."""
    from autotune.modes.online import OnlineTuner

    monkeypatch.setattr(OnlineTuner, "MAX_SESSIONS", 4)
    kernel = online(reps=10)  # 31 calls to decide a key
    call(kernel, 1000)  # a hot key, called between the one-off keys
    for n in range(100, 110):
        call(kernel, n)
        call(kernel, 1000)
    in_progress = kernel.cache_info()["online"]
    assert len(in_progress) == 4, in_progress
    assert {k.split()[0] for k in in_progress} == {"[1000]", "[107]", "[108]", "[109]"}
    for _ in range(20):  # the hot key still decides (11 calls so far)
        call(kernel, 1000)
    assert "[1000] float32,float32,float32" not in kernel.cache_info()["online"]
    assert kernel.record().winner["SLOW"] == 0


def test_an_error_of_the_reference_is_the_callers_and_blames_no_config():
    """verify='s reference is the user's code: its error reaches the caller as it is, and no config is marked
    failed for it (the fastest config still wins)."""
    raised = []

    def reference(x, y, out, n):
        if not raised:
            raised.append(True)
            raise RuntimeError("a bug in my reference")
        return x + y

    kernel = autotune(
        space={"BLOCK": [128], "SLOW": [0, 360], "BAD": [0]},
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        verify=Reference(reference, outputs=("out",)),
        tuning=Tuning(mode="online", compile_workers=0, reps=2),
    )(slow_add)
    with pytest.raises(RuntimeError, match="a bug in my reference"):
        call(kernel)
    for _ in range(12):
        call(kernel)
    record = kernel.record()
    assert {t.config["SLOW"]: t.status.value for t in record.trials} == {0: "ok", 360: "ok"}
    assert record.winner["SLOW"] == 0


def test_a_call_no_config_can_run_raises_its_error_and_blames_none(caplog):
    """Every config fails on one call (its output is a meta tensor): that is the call's problem. Its first error is
    raised, no config is marked failed or warned of, and the later calls decide as if it had not happened."""
    kernel = online(space={"BLOCK": [128], "SLOW": [0, 180], "BAD": [0]}, reps=2)
    call(kernel)
    x, y = torch.randn(512), torch.randn(512)
    with caplog.at_level("WARNING", logger="autotune"):
        with pytest.raises(NotImplementedError, match="meta"):
            kernel(x, y, torch.empty(512, device="meta"), 512)
    assert "failed during online tuning" not in caplog.text
    for _ in range(12):
        call(kernel)
    record = kernel.record()
    assert {t.config["SLOW"]: t.status.value for t in record.trials} == {0: "ok", 180: "ok"}


def test_a_failed_start_config_is_replaced_as_the_best_known_and_not_launched_again(caplog):
    """The start config fails on the first call and the next candidate runs it: that one becomes the best known,
    so the calls while the candidates still compile (held here) launch it, not the failed one again, and so would a
    CUDA-graph capture (`best_in_progress`)."""
    from autotune.engine.compilers import FunctionCompiler

    kernel = online(space={"BLOCK": [96, 128], "SLOW": [0], "BAD": [0]}, reps=2, compile_workers=1)  # 96: no power of 2
    held = threading.Event()
    kernel.compiler_factory = lambda tuned, prepare: FunctionCompiler(lambda config: held.wait(60))
    runs = record_launches(kernel, "BLOCK")
    try:
        with caplog.at_level("WARNING", logger="autotune"):
            for _ in range(4):
                call(kernel)
        assert runs == [(96,), (128,), (128,), (128,), (128,)], runs
        assert caplog.text.count("failed during online tuning") == 1
        x = torch.randn(512)
        key, dtypes = kernel.key_of(kernel.bind((x, x, x, 512), {}))
        assert kernel.online.best_in_progress(key, dtypes)["BLOCK"] == 128
    finally:
        held.set()


def test_the_driver_thread_compiles_for_the_callers_cuda_device(monkeypatch):
    """A new thread starts on CUDA device 0 and Triton files a compile under the thread's current device: a rank on
    GPU 3 whose candidates compiled for device 0 would compile them again on its hot path. The session keeps the
    caller's device and the driver thread makes it current before compiling (the device calls are the seam here:
    no GPU)."""
    import autotune.modes.online as online_module

    monkeypatch.setattr(online_module, "current_cuda_device", lambda: 3)
    used: list[tuple[str, int | None]] = []
    monkeypatch.setattr(
        online_module, "use_cuda_device", lambda device: used.append((threading.current_thread().name, device))
    )
    session = online_module.OnlineSession(
        kernel_name="k", candidates=[], start=None, samples=1, on_gpu=True, verify=None, restore_value=(),
        decide=lambda *a: None,
    )  # fmt: skip
    assert session.cuda_device == 3
    compiled_on: list[str] = []
    session.compile_all = lambda *args: compiled_on.append(threading.current_thread().name)
    kernel = online(space={"BLOCK": [128], "SLOW": [0], "BAD": [0]})
    tuner = online_module.OnlineTuner(kernel)
    tuner._to_compile.append((session, None, 0))
    tuner._drive()  # the driver thread's body, run here
    assert used == [(threading.current_thread().name, 3)] and compiled_on == [threading.current_thread().name]


@triton.jit
def _store_block(out, n, BLOCK: tl.constexpr):
    tl.store(out, BLOCK)


def test_best_config_is_the_candidate_each_online_call_ran():
    """DESIGN 6: under online tuning `best_config` is the config the call launched (a candidate it timed), not the
    session's best known, which another candidate's launch leaves unchanged."""
    kernel = autotune(
        space={"BLOCK": [16, 32, 64]}, key=["n"], grid=(1,), tuning=Tuning(mode="online", reps=2, compile_workers=0)
    )(_store_block)
    out = torch.zeros(1, dtype=torch.int32)
    for _ in range(8):
        kernel(out, 8)
        assert kernel.best_config["BLOCK"] == int(out[0])


def _call_until(kernel, done, n=512, limit=400):
    """Call `kernel` until `done()` (each call checked); the driver thread compiles meanwhile."""
    for _ in range(limit):
        if done():
            return
        call(kernel, n)
        time.sleep(0.005)
    raise AssertionError(f"not done after {limit} calls: {kernel.cache_info()}")


def test_a_key_whose_every_candidate_fails_is_given_up_warned_once_and_keeps_running():
    """Every candidate fails to compile in the background: the key is given up (a failed tuning counted, its
    session dropped, each config's error warned once) and its calls go on launching the config they ran so far,
    until a clear of the cache tunes it again."""
    from autotune import clear_autotune_cache
    from autotune.engine.compilers import FunctionCompiler

    kernel = autotune(
        space={"BLOCK": [128], "SLOW": [0, 180], "BAD": [0]},
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        fallback={"BLOCK": 64, "SLOW": 0, "BAD": 0},
        tuning=Tuning(mode="online", compile_workers=0, reps=2),
    )(slow_add)

    def bad(config):
        raise RuntimeError(f"out of resources: shared memory (config SLOW={config['SLOW']})")

    kernel.compiler_factory = lambda tuned, prepare: FunctionCompiler(bad)
    runs = record_launches(kernel, "BLOCK", "SLOW")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _call_until(kernel, lambda: stats()["slow_add"]["failed_tunings"] == 1)
        for _ in range(5):
            call(kernel)
    given_up = [str(w.message) for w in caught if "found no config that runs" in str(w.message)]
    assert len(given_up) == 1, given_up
    assert "out of resources: shared memory (config SLOW=0)" in given_up[0]
    assert "out of resources: shared memory (config SLOW=180)" in given_up[0]
    assert "{'BLOCK': 64, 'SLOW': 0, 'BAD': 0}" in given_up[0]
    assert "online" not in kernel.cache_info()  # no session holds a slot
    assert stats()["slow_add"]["failed_configs"] == 2 and stats()["slow_add"]["tunings"] == 0
    assert set(runs) == {(64, 0)}  # the fallback, the only config that ran
    clear_autotune_cache()
    with warnings.catch_warnings(record=True):
        _call_until(kernel, lambda: stats()["slow_add"]["failed_tunings"] == 2)  # tuned (and given up) again


def test_candidates_a_broken_compile_pipeline_never_compiled_are_failed_not_waited_for(monkeypatch):
    """The background compiles stop (the pipeline raised): the candidates never compiled are failed with that
    reason, so the key is given up instead of showing "2 of 2 candidates measured" for ever."""
    import autotune.modes.online as online_module

    def broken(*args, **kwargs):
        raise RuntimeError("the pool is gone")

    monkeypatch.setattr(online_module, "compile_in_order_of_completion", broken)
    kernel = online(space={"BLOCK": [128], "SLOW": [0, 180], "BAD": [0]}, reps=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _call_until(kernel, lambda: stats()["slow_add"]["failed_tunings"] == 1)
    (message,) = [str(w.message) for w in caught if "found no config that runs" in str(w.message)]
    assert message.count("never compiled: the background compiles stopped (RuntimeError: the pool is gone)") == 2
    assert "online" not in kernel.cache_info()


def test_an_error_in_the_driver_thread_fails_that_key_only_and_later_keys_are_tuned(monkeypatch):
    """The driver thread's setup for one session raises (a CUDA error making the caller's device current): that
    key gives up, the driver goes on, and the next keys are compiled and decided."""
    import autotune.modes.online as online_module

    failures = [RuntimeError("CUDA error: simulated")]

    def flaky(device):
        if failures:
            raise failures.pop()

    monkeypatch.setattr(online_module, "use_cuda_device", flaky)
    kernel = online(space={"BLOCK": [128], "SLOW": [0, 180], "BAD": [0]}, reps=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _call_until(kernel, lambda: stats()["slow_add"]["failed_tunings"] == 1, n=100)
    assert any("never compiled: RuntimeError: CUDA error: simulated" in str(w.message) for w in caught)
    for n in (200, 300):
        _call_until(kernel, lambda n=n: kernel.cache.in_memory((n,), ("torch.float32",) * 3) is not None, n=n)
    assert stats()["slow_add"]["tunings"] == 2 and "online" not in kernel.cache_info()


def test_a_new_keys_first_call_never_lists_the_stored_records(monkeypatch):
    """Listing the kernel's stored records reads every entry (seconds with thousands): the call that meets a new
    key does not; the driver thread does, and the nearest stored winner becomes the key's start config."""
    from cache_files import write_record
    from msgspec.structs import replace

    space = {"BLOCK": [128], "SLOW": [360, 0, 180], "BAD": [0]}
    blocking = autotune(space=space, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=Tuning(compile_workers=0, reps=1))(
        slow_add
    )
    call(blocking, 64)
    stored = blocking.record()
    slow = next(c for c in stored.trials if c.config["SLOW"] == 180).config
    write_record(replace(stored, key=[1000], winner=slow))
    kernel = online(space=space, reps=2)
    listed_on: list[str] = []
    real = kernel.cache.tuned_records

    def listing():
        listed_on.append(threading.current_thread().name)
        return real()

    monkeypatch.setattr(kernel.cache, "tuned_records", listing)
    call(kernel, 900)
    assert threading.current_thread().name not in listed_on
    key, dtypes = (900,), ("torch.float32",) * 3
    deadline = time.monotonic() + 60
    while not listed_on and time.monotonic() < deadline:
        time.sleep(0.01)
    deadline = time.monotonic() + 60
    while kernel.online.best_in_progress(key, dtypes) != slow and time.monotonic() < deadline:
        time.sleep(0.01)
    assert kernel.online.best_in_progress(key, dtypes) == slow, "the nearest stored winner is the start"
    assert listed_on and all(name.startswith("autotune-online") for name in listed_on), listed_on


def test_a_listing_of_stored_winners_that_fails_does_not_fail_the_keys_tuning(monkeypatch):
    """The driver's listing only improves a key's start config: when it raises, the key is tuned as usual (not
    given up with every candidate failed), and the failure is logged, not retried at every key."""
    kernel = online(reps=1)
    listings: list[int] = []

    def broken_listing():
        listings.append(1)
        raise OSError("the cache directory went away")

    monkeypatch.setattr(kernel.cache, "tuned_records", broken_listing)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _call_until(kernel, lambda: kernel.cache.in_memory((512,), ("torch.float32",) * 3) is not None)
    assert not [w for w in caught if "found no config that runs" in str(w.message)]
    assert stats()["slow_add"]["failed_tunings"] == 0 and stats()["slow_add"]["tunings"] == 1
    _call_until(kernel, lambda: kernel.cache.in_memory((1024,), ("torch.float32",) * 3) is not None, n=1024)
    assert len(listings) == 1  # the next key did not list again at once


@triton.jit
def unmasked_double(x, out, n, BLOCK: tl.constexpr):  # right only where BLOCK divides n: what prune= keeps
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(x + offs) * 2)


def _dividing_n(configs, named):
    return [c for c in configs if named["n"] % c["BLOCK"] == 0]


def test_the_first_calls_never_launch_a_fallback_that_prune_leaves_out_for_them():
    """fallback= BLOCK=64 is wrong for n=96, where prune= keeps only BLOCK=32: every call launches the kept config
    (the first call once launched the fallback: 32 of 96 elements wrong)."""
    kernel = autotune(
        space={"BLOCK": [32, 64]},
        key=["n"],
        grid="(n // $BLOCK,)",
        prune=_dividing_n,
        fallback={"BLOCK": 64},
        tuning=Tuning(mode="online", reps=2, compile_workers=0),
    )(unmasked_double)
    for _ in range(4):
        x, out = torch.rand(96), torch.zeros(96)
        kernel(x, out, 96)
        torch.testing.assert_close(out, x * 2)
        assert dict(kernel.best_config) == {"BLOCK": 32}


@triton.jit
def add_ab(x, y, out, n, BLOCK: tl.constexpr, A: tl.constexpr, B: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


def test_a_lazy_space_without_fallback_starts_from_the_searchs_first_proposal():
    """A space too large to list has no candidates before the search proposes them."""
    kernel = autotune(
        space=CartesianSpace(BLOCK=[32, 64], A=range(1000), B=range(100)),  # 200,000 configs: lazy
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        tuning=Tuning(mode="online", strategy="random", max_configs=4, reps=2, compile_workers=0),
    )(add_ab)
    for _ in range(3):
        x, y, out = torch.randn(100), torch.randn(100), torch.empty(100)
        kernel(x, y, out, 100)
        torch.testing.assert_close(out, x + y)
