"""The crash journal (autotune/storage/journal.py): a config that ends the process measuring it in-process is
remembered, so the next process records it as crashed and tunes the rest instead of dying again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

from autotune import Config, CrashWarning, TrialStatus, clear_autotune_cache
from autotune.storage import journal

TESTS = Path(__file__).parent

CHILD = """
import json, sys, warnings
sys.path.insert(0, {tests!r})
import torch
import triton
import triton.language as tl
import autotune
from isolation_kernels import segfaulting_add
n = 100
x, y, out = torch.rand(n), torch.rand(n), torch.empty(n)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    segfaulting_add(x, y, out, n)
assert torch.allclose(out, x + y)
record = segfaulting_add.record()
print(json.dumps({{
    "stats": autotune.stats()["segfaulting_add"],
    "trials": {{f"{{t.config['BLOCK']}}/{{t.config['MODE']}}": [t.status.value, t.error] for t in record}},
    "where": record.where,
    "warnings": [f"{{type(w.message).__name__}}: {{w.message}}" for w in caught],
}}))
"""


def run_child(env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run(
        [sys.executable, "-c", CHILD.format(tests=str(TESTS))], capture_output=True, text=True, env=env, timeout=300
    )


def notes_dir() -> Path:
    return Path(os.environ["AUTOTUNE_CACHE_DIR"]) / ".journal"


def test_a_config_that_kills_the_process_is_recorded_crashed_by_the_next_and_the_third_neither_crashes_nor_tunes():
    first = run_child()
    assert first.returncode == -11, first.stderr[-2000:]  # SIGSEGV in the interpreter, measuring BLOCK 32 MODE 1
    assert len(list(notes_dir().iterdir())) == 1  # the note of what it was measuring outlived it

    second = run_child()
    assert second.returncode == 0, second.stderr[-2000:]
    out = json.loads(second.stdout)
    assert out["stats"]["tunings"] == 1
    assert out["trials"]["32/1"][0] == "crashed" and "the process ended while measuring it" in out["trials"]["32/1"][1]
    assert out["trials"]["64/0"][0] == out["trials"]["128/0"][0] == "ok"
    assert out["where"] == "in-process"
    crash_warnings = [w for w in out["warnings"] if w.startswith("CrashWarning")]
    assert len(crash_warnings) == 1 and "'BLOCK': 32, 'MODE': 1" in crash_warnings[0]
    assert not [w for w in out["warnings"] if "IsolationWarning" in w]  # in-process by default: nothing to say
    assert list(notes_dir().iterdir()) == []  # the crash is in the record now

    third = run_child()
    assert third.returncode == 0, third.stderr[-2000:]
    out = json.loads(third.stdout)
    assert out["stats"]["tunings"] == 0 and out["stats"]["disk_hits"] == 1
    assert out["trials"]["32/1"][0] == "crashed" and out["warnings"] == []


def _note_of_a_dead_process(kernel_id: str, key: tuple, dtypes: tuple, config: dict) -> None:
    """A real process enters `measuring` and exits inside it, as a crash would."""
    code = (
        f"import os, sys; sys.path.insert(0, {str(TESTS.parent)!r}); from autotune.storage import journal\n"
        f"with journal.measuring({kernel_id!r}, {key!r}, {dtypes!r}, {config!r}):\n    os._exit(3)\n"
    )
    assert subprocess.run([sys.executable, "-c", code], env=dict(os.environ), timeout=120).returncode == 3


def test_notes_of_live_processes_and_of_other_hosts_are_never_crashes_and_a_reused_pid_is_dead():
    config = Config(BLOCK=32)
    with journal.measuring("m:k", (100,), ("float32",), config):
        assert journal.crashed("m:k", (100,), ("float32",)) == {}  # this process is alive: measuring, not crashed
        (note_path,) = notes_dir().iterdir()
        note = json.loads(note_path.read_bytes())
    assert list(notes_dir().iterdir()) == []  # removed when the measurement ended

    def write(name: str, **changes) -> None:
        (notes_dir() / name).write_text(json.dumps({**note, **changes}))

    prefix = note_path.name.split(".")[0]
    write(f"{prefix}.00000000.{2**22 + 5}.90.json", host="another-host", pid=2**22 + 5)  # another machine's
    assert journal.crashed("m:k", (100,), ("float32",)) == {}
    write(f"{prefix}.00000000.{os.getpid()}.91.json", start="1")  # this pid, but another process started under it
    assert set(journal.crashed("m:k", (100,), ("float32",))) == {config}
    assert journal.crashed("m:k", (100,), ("int32",)) == {} and journal.crashed("m:k", (200,), ("float32",)) == {}


def _kernel_and_call(n: int):
    sys.path.insert(0, str(TESTS))
    from isolation_kernels import segfaulting_add

    args = (torch.rand(n), torch.rand(n), torch.empty(n), n)
    key, dtypes = segfaulting_add.key_of(segfaulting_add.bind(args, {}))
    return segfaulting_add, args, key, dtypes


def test_clear_autotune_cache_forgets_the_crashes_of_a_kernel():
    kernel, _, key, dtypes = _kernel_and_call(100)
    _note_of_a_dead_process(kernel.identity, key, dtypes, {"BLOCK": 32, "MODE": 1})
    assert set(journal.crashed(kernel.identity, key, dtypes)) == {Config(BLOCK=32, MODE=1)}
    clear_autotune_cache(kernel)
    assert journal.crashed(kernel.identity, key, dtypes) == {}


def test_a_note_whose_config_no_space_can_hold_is_not_one_of_ours_and_the_call_tunes_and_clears_it(monkeypatch):
    kernel, args, key, dtypes = _kernel_and_call(9)
    monkeypatch.setattr(kernel, "configs", [Config(BLOCK=64, MODE=0), Config(BLOCK=128, MODE=0)])  # no segfault
    _note_of_a_dead_process(kernel.identity, key, dtypes, {"1B": 32})  # decodes as a note: no config has "1B"
    assert journal.crashed(kernel.identity, key, dtypes) == {}
    kernel(*args)  # tunes as if there were no note (raised SpaceError on every call before)
    assert torch.allclose(args[2], args[0] + args[1])
    clear_autotune_cache(kernel)
    assert not any(notes_dir().iterdir())


def test_a_noted_crash_is_recorded_without_running_the_config_and_force_retries_it(monkeypatch):
    kernel, args, key, dtypes = _kernel_and_call(7)
    # A dead process's note for a config that works here: were it run, its trial would be ok.
    _note_of_a_dead_process(kernel.identity, key, dtypes, {"BLOCK": 64, "MODE": 0})
    monkeypatch.setattr(kernel, "configs", [Config(BLOCK=64, MODE=0), Config(BLOCK=128, MODE=0)])  # no segfault
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel(*args)
    assert len([w for w in caught if issubclass(w.category, CrashWarning)]) == 1
    assert kernel.record(key).trial_for(Config(BLOCK=64, MODE=0)).status is TrialStatus.CRASHED

    monkeypatch.setenv("AUTOTUNE_FORCE", "1")  # read when a process meets a key: as a new process would
    kernel.cache.forget(key)  # memory only: the disk entry and the note stay
    _note_of_a_dead_process(kernel.identity, key, dtypes, {"BLOCK": 64, "MODE": 0})
    _note_of_a_dead_process(kernel.identity, key, dtypes, {"BLOCK": 64, "MODE": 0})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel(*args)
    assert not [w for w in caught if issubclass(w.category, CrashWarning)]
    assert kernel.record(key).trial_for(Config(BLOCK=64, MODE=0)).status is TrialStatus.OK
    assert journal.crashed(kernel.identity, key, dtypes) == {}


@triton.jit
def noted_add(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


def test_every_in_process_path_notes_what_it_measures_and_leaves_no_note(monkeypatch):
    """Blocking, the triton.autotune drop-in and online tuning each note a config in the journal while it runs
    (distributed tuning measures through the blocking path's tuner)."""
    from autotune import autotune, compat

    noted: list[tuple[str, int]] = []
    real = journal.measuring

    def spy(kernel_id, key, dtypes, config):
        noted.append((kernel_id.rpartition(":")[2], config["BLOCK"]))
        return real(kernel_id, key, dtypes, config)

    monkeypatch.setattr(journal, "measuring", spy)
    x, y, out = torch.rand(64), torch.rand(64), torch.empty(64)
    space, fast = {"BLOCK": [32, 64]}, {"compile_workers": 0, "warmup": 0, "reps": 1, "refine_topk": 0}
    autotune(space=space, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning=fast)(noted_add)(x, y, out, 64)
    assert sorted(noted) == [("noted_add", 32), ("noted_add", 64)]

    del noted[:]
    drop_in = compat.autotune(configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})], key=["n"])(
        noted_add
    )
    x, y, out = torch.rand(65), torch.rand(65), torch.empty(65)  # a key of its own
    drop_in[lambda meta: (triton.cdiv(65, meta["BLOCK"]),)](x, y, out, 65)
    assert set(noted) == {("noted_add", 32), ("noted_add", 64)}  # its re-measurement of the two noted too

    del noted[:]
    online = autotune(space=space, key=["n"], grid="(cdiv(n, $BLOCK),)", tuning={**fast, "mode": "online", "reps": 2})(
        noted_add
    )
    x, y, out = torch.rand(66), torch.rand(66), torch.empty(66)
    for _ in range(20):
        online(x, y, out, 66)
        torch.testing.assert_close(out, x + y)
        if online.cache.in_memory((66,), ("torch.float32",) * 3) is not None:
            break
    assert {b for _, b in noted} == {32, 64} and online.record().where == "in-process"
    assert list(notes_dir().iterdir()) == []


REFINE_CHILD = """
import json, sys
sys.path.insert(0, {tests!r})
import torch
from isolation_kernels import crashes_in_refine
n = 100
x, y, out, launches = torch.rand(n), torch.rand(n), torch.empty(n), torch.zeros(1, dtype=torch.int64)
crashes_in_refine(x, y, out, launches, n)
print(json.dumps({{str(t.config["BLOCK"]): t.status.value for t in crashes_in_refine.record()}}))
"""


def test_a_config_that_ends_the_process_in_the_re_measurement_is_noted_too():
    """The re-measurement of the best configs (refine) runs each config again in this process: a crash there is
    noted as one in the first measurement is, so the next process records it crashed instead of dying again."""

    def child() -> subprocess.CompletedProcess:
        code = REFINE_CHILD.format(tests=str(TESTS))
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)

    first = child()
    assert first.returncode == -11, first.stderr[-2000:]  # SIGSEGV: BLOCK 128's fourth launch, in refine
    assert len(list(notes_dir().iterdir())) == 1
    second = child()
    assert second.returncode == 0, second.stderr[-2000:]
    assert json.loads(second.stdout.strip().splitlines()[-1]) == {"32": "ok", "64": "ok", "128": "crashed"}


ONLINE_CHILD = """
import sys
sys.path.insert(0, {tests!r})
import torch
from isolation_kernels import all_crashing_online
n = 100
x, y, out = torch.rand(n), torch.rand(n), torch.empty(n)
for _ in range(8):
    all_crashing_online(x, y, out, n)
"""


def test_online_tuning_whose_every_config_crashed_raises_instead_of_crashing_on_every_restart():
    """Online mode launches its start config at once: with the fallback and every candidate noted as crashed by
    earlier processes, a restart raises NoValidConfigError, as a blocking tuning does, instead of dying again."""
    code = ONLINE_CHILD.format(tests=str(TESTS))
    ends = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300) for _ in range(4)]
    assert [end.returncode for end in ends[:3]] == [-11, -11, -11]  # the fallback, then each config, measured
    assert ends[3].returncode == 1 and "NoValidConfigError" in ends[3].stderr, ends[3].stderr[-2000:]
    assert "every config ended a process that measured it" in ends[3].stderr


POISON_CHILD = """
import json, sys, warnings
sys.path.insert(0, {tests!r})
import torch
from autotune import DeviceError
from isolation_kernels import poisoning_add_in_process as kernel
x, y, out = torch.rand(100), torch.rand(100), torch.empty(100)
try:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel(x, y, out, 100)
except DeviceError as exc:
    print(json.dumps({{"raised": str(exc)}}))
else:
    assert torch.allclose(out, x + y)
    print(json.dumps({{
        "trials": {{str(t.config["WRONG"]): [t.status.value, t.error] for t in kernel.record()}},
        "warnings": [str(w.message) for w in caught],
    }}))
"""


def test_a_config_that_leaves_the_device_unusable_is_noted_so_the_restarted_process_tunes_the_others():
    """A sticky device error (an illegal memory access) raises DeviceError instead of ending the process; its note
    stays, naming the error, so the restart the error asks for records the config crashed instead of looping."""

    def child() -> dict:
        code = POISON_CHILD.format(tests=str(TESTS))
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    first = child()
    assert "left the GPU unusable" in first["raised"] and "Restart the process" in first["raised"], first
    (note,) = notes_dir().iterdir()
    assert "illegal memory access" in json.loads(note.read_bytes())["error"]

    second = child()
    status, error = second["trials"]["1"]
    assert status == "crashed" and "left the GPU unusable" in error and "illegal memory access" in error, error
    assert second["trials"]["0"][0] == "ok"
    assert len(second["warnings"]) == 1 and "left the GPU unusable" in second["warnings"][0]
    assert list(notes_dir().iterdir()) == []  # the crash is in the record now


def test_a_device_lost_in_the_re_measurement_raises_device_error_and_keeps_its_note():
    from autotune import DeviceError, Tuning
    from autotune.engine.compilers import FunctionCompiler
    from autotune.engine.in_process import InProcessRunner
    from autotune.engine.timing import WallClockTimer

    def run_config(config: Config) -> None:
        if config["BLOCK"] == 64:
            raise RuntimeError("CUDA error: an illegal memory access was encountered (simulated)")

    def noted(config: Config):
        return journal.measuring("m:refined", (5,), ("float32",), config)

    runner = InProcessRunner(
        run_config=run_config,
        compiler=FunctionCompiler(lambda config: None),
        timer=WallClockTimer(),
        tuning=Tuning(warmup=0, reps=1),
        kernel_name="refined",
        noted=noted,
    )
    with pytest.raises(DeviceError, match=r"refined config \{'BLOCK': 64\} left the GPU unusable"):
        runner.refine([Config(BLOCK=32), Config(BLOCK=64)], reps=2)
    (note,) = notes_dir().iterdir()  # this process is alive: not yet a crash, but the note outlives it
    assert json.loads(note.read_bytes())["config"] == {"BLOCK": 64}
    assert journal.crashed("m:refined", (5,), ("float32",)) == {}


def test_a_new_set_of_calls_keeps_the_noted_crashes_and_a_forced_warmup_tries_them_again(monkeypatch):
    """A multi-shape entry tuned again because its set of calls changed keeps the journal's notes (a service whose
    calls changed would otherwise try a crashing config at every restart); AUTOTUNE_FORCE tries them again."""
    import sweep_kernels as sk

    import autotune

    kernel = sk.shape_tagged("geomean")
    autotune.warmup(kernel, sk.shape_calls([1, 2]))
    dtypes = tuple(kernel.record(()).dtypes)
    _note_of_a_dead_process(kernel.identity, (), dtypes, {"TAG": 3})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert [k.key for k in autotune.warmup(kernel, sk.shape_calls([2])).tuned] == [()]
    assert [w for w in caught if issubclass(w.category, CrashWarning)]
    assert kernel.record(()).trial_for(Config(TAG=3)).status is TrialStatus.CRASHED

    _note_of_a_dead_process(kernel.identity, (), dtypes, {"TAG": 3})
    monkeypatch.setenv("AUTOTUNE_FORCE", "1")
    assert [k.key for k in autotune.warmup(kernel, sk.shape_calls([2])).tuned] == [()]
    assert kernel.record(()).trial_for(Config(TAG=3)).status is TrialStatus.OK
    assert journal.crashed(kernel.identity, (), dtypes) == {}


def test_an_earlier_launch_s_device_error_is_not_noted_against_the_next_config():
    """CUDA reports a launch's error at a later call: the runner waits for earlier launches before noting a
    config, so an error they left stops the tuning without blaming (and keeping a note for) that config."""
    from autotune import DeviceError, Tuning
    from autotune.engine.compilers import FunctionCompiler
    from autotune.engine.in_process import InProcessRunner
    from autotune.engine.timing import WallClockTimer

    def synchronize() -> None:
        raise RuntimeError("CUDA error: an illegal memory access was encountered (an earlier launch's)")

    runner = InProcessRunner(
        run_config=lambda config: None,
        compiler=FunctionCompiler(lambda config: None),
        timer=WallClockTimer(),
        tuning=Tuning(warmup=0, reps=1),
        synchronize=synchronize,
        kernel_name="innocent",
        noted=lambda config: journal.measuring("m:innocent", (5,), ("float32",), config),
    )
    with pytest.raises(DeviceError, match="unusable before innocent's next config ran.*CUDA_LAUNCH_BLOCKING"):
        runner.measure(Config(BLOCK=32))
    assert not notes_dir().exists() or list(notes_dir().iterdir()) == []


def test_a_clear_by_a_key_that_needs_normalising_forgets_its_crashes():
    """A clear's key is matched as a call's key is stored (an IntEnum as `Type.NAME`): the journal's notes of that
    key go too, not only its entries."""
    import enum

    from autotune.keys import normalise_key
    from autotune.storage import KernelCache

    class Mode(enum.IntEnum):
        A = 1

    key = normalise_key((Mode.A,))
    _note_of_a_dead_process("m:mode", key, ("torch.float32",), {"BLOCK": 64})
    assert set(journal.crashed("m:mode", key, ("torch.float32",))) == {Config(BLOCK=64)}
    KernelCache("add", "src", "space", lambda c: True, identity="m:mode", key_fields=("mode",)).clear((Mode.A,))
    assert journal.crashed("m:mode", key, ("torch.float32",)) == {}


def test_a_clear_forgets_every_dead_note_not_only_the_first_ones_read():
    """Reads stop at MAX_NOTES notes per key; a clear removes them all (300 here, from one crashed process)."""
    code = (
        f"import os, sys, contextlib; sys.path.insert(0, {str(TESTS.parent)!r}); from autotune.storage import journal\n"
        "with contextlib.ExitStack() as stack:\n"
        "    for k in range(300):\n"
        "        stack.enter_context(journal.measuring('m:many', (k,), ('torch.float32',), {'BLOCK': 64}))\n"
        "    os._exit(3)\n"
    )
    assert subprocess.run([sys.executable, "-c", code], env=dict(os.environ), timeout=120).returncode == 3
    assert len(list(notes_dir().iterdir())) == 300 > journal.MAX_NOTES
    clear_autotune_cache()
    assert list(notes_dir().iterdir()) == []


def test_a_single_candidate_that_crashed_a_process_is_not_launched_but_refused():
    """With one config left (prune=, or a one-config space) nothing is compared, but a config the journal saw end
    a process is still never launched: the tuning raises NoValidConfigError naming the crash, and keeps the note."""
    from autotune import NoValidConfigError

    kernel, args, key, dtypes = _kernel_and_call(7)
    only = {"BLOCK": 64, "MODE": 0}
    _note_of_a_dead_process(kernel.identity, key, dtypes, only)
    original = kernel.configs
    kernel.configs = [Config(**only)]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CrashWarning)
            with pytest.raises(NoValidConfigError, match="crashed: the process ended while measuring it"):
                kernel(*args)
    finally:
        kernel.configs = original
    assert set(journal.crashed(kernel.identity, key, dtypes)) == {Config(**only)}


def test_notes_in_finds_a_processes_note_past_hundreds_of_others(tmp_path):
    """A sweep slot's journal keeps every crashed config's note for the sweep: the dying worker's own note must be
    found whatever sorts before it (it once was cut at the first 256 names)."""
    import socket

    from autotune.storage import journal

    def note(pid: int, key: str, block: int) -> journal.Note:
        return journal.Note(
            kernel="m:k",
            key=key,
            dtypes=["f32"],
            config={"BLOCK": block},
            pid=pid,
            start=None,
            boot=None,
            host=socket.gethostname(),
            since=0.0,
        )

    notes = [(f"{i:032x}.host.{100000 + i}.0.json", note(100000 + i, f"[{i}]", 4096)) for i in range(300)]
    notes.append(("f" * 32 + ".host.4242.0.json", note(4242, "[999]", 64)))
    journal.keep_notes(notes, tmp_path)
    found = journal.notes_in(tmp_path, 4242)
    assert [n.config for _, n in found] == [{"BLOCK": 64}]
    assert len(journal.notes_in(tmp_path)) == journal.MAX_NOTES  # every process's: bounded
    (tmp_path / ".journal" / ("e" * 32 + ".host.4242.1.json")).write_text("[" * 8000 + "]" * 8000)
    assert [n.config for _, n in journal.notes_in(tmp_path, 4242)] == [{"BLOCK": 64}]  # a hostile note skipped
