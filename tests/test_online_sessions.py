"""Online tuning: a session evicted from the MAX_SESSIONS slots that decides (or gives up) late never removes the
key's newer session."""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

import pytest
from test_online import call, slow_add

from autotune import Tuning, autotune, clear_autotune_cache

REPO = Path(__file__).resolve().parents[1]
KEY_A, KEY_B = 512, 256
IN_PROGRESS_A = f"[{KEY_A}] float32,float32,float32"
DTYPES = ("torch.float32",) * 3


def one_candidate_kernel():
    """One candidate (SLOW=0) and a start config outside the space (SLOW=1): a launch with SLOW=0 is always the
    candidate's timed launch, the one that completes the key's samples (reps=1)."""
    return autotune(
        space={"BLOCK": [128], "SLOW": [0], "BAD": [0]},
        key=["n"],
        grid="(cdiv(n, $BLOCK),)",
        fallback={"BLOCK": 128, "SLOW": 1, "BAD": 0},
        tuning=Tuning(mode="online", compile_workers=0, reps=1),
    )(slow_add)


def wait_for(condition, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def no_driver_thread() -> bool:
    return not any(t.name == "autotune-online-slow_add" for t in threading.enumerate())


@pytest.mark.parametrize("outcome", ["decides", "gives up"])
def test_a_session_evicted_then_deciding_late_leaves_the_keys_new_session(monkeypatch, outcome):
    """Key A's session times its only candidate on a call held inside the launch; meanwhile a new key evicts A's
    session (MAX_SESSIONS=1), the cache is cleared and A is called again (a new session). When the held call ends
    the old session decides (or gives up: the candidate fails): A's new session stays in progress and decides."""
    from autotune.modes.online import OnlineTuner

    monkeypatch.setattr(OnlineTuner, "MAX_SESSIONS", 1)
    kernel = one_candidate_kernel()
    entered, release, held, failed = threading.Event(), threading.Event(), [], []
    real_journal, real_run = kernel.cache.crash_journal, kernel.fn.run

    def crash_journal(key, dtypes, *, force):
        note, crashed = real_journal(key, dtypes, force=force)

        @contextlib.contextmanager
        def held_note(config):  # ends after the launch (the launch lock let go), before its sample is taken
            try:
                with note(config):
                    yield
            finally:
                if config["SLOW"] == 0 and not held:  # the old session's timed launch of its candidate
                    held.append(threading.current_thread())
                    entered.set()
                    assert release.wait(60)

        return held_note, crashed

    def run(*args, **kwargs):
        if kwargs.get("SLOW") == 0 and outcome == "gives up" and not failed:  # the old session's launch only
            failed.append(True)
            raise RuntimeError("out of resources: shared memory")
        return real_run(*args, **kwargs)

    monkeypatch.setattr(kernel.cache, "crash_journal", crash_journal)
    monkeypatch.setattr(kernel.fn, "run", run)  # the jitted function is shared: put back after the test

    def calls_of_a() -> None:
        while not entered.is_set():
            call(kernel, KEY_A)

    first = threading.Thread(target=calls_of_a)
    first.start()
    assert entered.wait(60)
    wait_for(no_driver_thread, "the driver to finish compiling key A")
    call(kernel, KEY_B)  # evicts A's session
    clear_autotune_cache()
    call(kernel, KEY_A)  # A's new session (evicting B's)
    assert list(kernel.cache_info()["online"]) == [IN_PROGRESS_A]
    release.set()
    first.join(60)
    assert not first.is_alive()
    assert kernel.cache.in_memory((KEY_A,), DTYPES) is None  # cleared after the old session began: not kept
    assert list(kernel.cache_info().get("online", {})) == [IN_PROGRESS_A], "A's new session was lost"
    wait_for(no_driver_thread, "the driver to finish compiling A's new session")
    call(kernel, KEY_A)  # the new session times its candidate and decides
    wait_for(lambda: kernel.cache.in_memory((KEY_A,), DTYPES) is not None, "A's new session to store its winner")
    assert kernel.record((KEY_A,)).winner["SLOW"] == 0
