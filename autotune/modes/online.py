"""Online tuning: a key with no winner never makes a call wait. Each call is a real, useful launch: the first
ones run the best config known without measuring (the nearest tuned key's winner, else `fallback=` where prune=
keeps it for the call, else the first config kept) while the candidates compile in the background; later calls each launch one compiled
candidate once on the real arguments and time it; when every candidate has its samples, the winner is decided,
stored like any winner, and launched from then on at the ordinary hot-path cost. The nearest tuned key is found
among the records in memory and the driver thread's listing of the persistent tiers, never read on a call. When
every candidate fails, the key is given up: a failed tuning is counted and warned once with each config's error,
and its calls go on launching the config they ran so far until clear_autotune_cache().

How a winner is decided (inputs vary between calls, so noise is real): candidates are sampled round-robin, one
launch per call, so every candidate sees the same mix of inputs over the same stretch of time; each gets
`Tuning.reps` samples; the winner has the lowest median. On a GPU a launch is timed with CUDA events that are
read on a later call (`Event.query()`), never with a synchronize; in the interpreter with the wall clock.

With `verify=`, a candidate's first launch is checked before its output is trusted; a failing config is dropped
and the call is run again with the current best config (after restoring `restore_value` arguments), so the
caller never sees a wrong result. During CUDA-graph capture the current best config is launched, untimed.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import statistics
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import msgspec

from ..compiled.capture import capturing
from ..decorator.tune_key import search_strategy, unrecorded_crashes, with_lowering
from ..engine.in_process import RUN_FAILURE_STATUS
from ..engine.pipeline import compile_in_order_of_completion
from ..engine.thread_pool import DaemonThreadPool, exiting
from ..errors import FailureKind, NoValidConfigError, VerificationError, classify, warn_at_caller
from ..fork_safety import reset_in_forked_child
from ..kernel.call import How
from ..kernel.pruning import untuned_config
from ..record import Trial, TrialStatus, TuningRecord
from ..reference import Reference, check_verified
from ..space.spaces import Config
from ..storage.counters import count

if TYPE_CHECKING:
    from ..decorator.autotuned import Autotuned

__all__ = ["OnlineSession", "OnlineTuner"]

logger = logging.getLogger("autotune")

Launch = Callable[[Config], Any]  # launches one config once on the call's arguments, returns Triton's result
Note = Callable[[Config], AbstractContextManager[Any]]  # the crash journal's note around a config's launch


def no_note(config: Config) -> AbstractContextManager[Any]:
    """No crash journal (a cache without tiers): nothing noted."""
    return contextlib.nullcontext()


_TUNERS: weakref.WeakSet[OnlineTuner] = weakref.WeakSet()


class OnlineSession:
    """One key being tuned across real calls. Thread-safe; owned by the decorated kernel until decided."""

    def __init__(
        self,
        *,
        kernel_name: str,
        candidates: Sequence[Config],
        start: Config,
        samples: int,
        on_gpu: bool,
        verify: Any,
        restore_value: Sequence[str],
        reset_to_zero: Sequence[str] = (),
        decide: Callable[[Config, list[Trial], float], None],
        crashed: Mapping[Config, str] | None = None,
        failed: Callable[[Config, list[Trial]], None] | None = None,
        key: tuple = (),
        dtypes: tuple = (),
    ) -> None:
        self.kernel_name = kernel_name
        self.key, self.dtypes = key, dtypes
        self.candidates = list(dict.fromkeys(candidates))
        self.best = start
        self.samples_wanted = max(1, samples)
        self.verify = verify
        self.guarded = tuple(dict.fromkeys((*restore_value, *reset_to_zero)))  # put back before a re-run
        self.on_gpu = on_gpu
        # the caller's CUDA device: the driver thread compiles for it (a thread starts on device 0, and Triton files
        # a compile under the current device: a rank on another GPU would compile again on its hot path)
        self.cuda_device = current_cuda_device() if on_gpu else None
        self._decide = decide
        self._failed_all = failed  # every candidate failed: told (best known, trials) once
        self._lock = threading.Lock()
        self._ready: list[Config] = []  # compiled, in compile order
        self._samples: dict[Config, list[float]] = {c: [] for c in self.candidates}
        # configs that ended a process measuring them (the crash journal): recorded crashed, never launched
        self._failed: dict[Config, tuple[TrialStatus, str]] = {
            c: (TrialStatus.CRASHED, why) for c, why in (crashed or {}).items() if c in self._samples
        }
        if self.best in self._failed or self.best in (crashed or {}):  # a fallback outside the space, crashed too
            self.best = self._first_alive(kernel_name)
        self._compile_s: dict[Config, float | None] = {}
        self._checked: set[Config] = set()
        self._pending: list[tuple[Config, Any, Any]] = []  # (config, start event, end event) not read yet
        self._turn = 0
        self._first = True
        self.launches = 0
        self.decided = False
        self._started = time.perf_counter()
        self._compiled = threading.Event()  # set once every candidate compiled or failed

    def _first_alive(self, kernel_name: str) -> Config:
        """The first candidate the crash journal has not seen end a process; none left is a NoValidConfigError, as
        a blocking tuning's (launching one would end this process too)."""
        alive = [c for c in self.candidates if c not in self._failed]
        if not alive:
            raise NoValidConfigError(
                f"{kernel_name}: every config ended a process that measured it (the crash journal), so none is "
                "launched; fix the kernel or the space, then AUTOTUNE_FORCE=1 or clear_autotune_cache() tries them "
                "again",
                [Trial(config=c, status=status, error=why) for c, (status, why) in self._failed.items()],
            )
        return alive[0]

    # -- background compile ---------------------------------------------------------------------------

    def compile_all(
        self, compiler: Any, workers: int, pool: DaemonThreadPool | None, timeout_s: float | None = None
    ) -> None:
        """Compile every candidate (on the kernel's shared `pool`, or inline with `workers=0`); called by the
        kernel's driver thread (`OnlineTuner`). `compile_timeout_s` applies, so a hung compile does not keep the
        kernel's later keys from compiling."""
        try:
            with compile_in_order_of_completion(
                self.candidates, compiler, workers=workers, pool=pool, timeout_s=timeout_s
            ) as outcomes:
                for outcome in outcomes:
                    with self._lock:
                        self._compile_s[outcome.config] = outcome.compile_s
                        if outcome.status is TrialStatus.OK:
                            self._ready.append(outcome.config)
                        else:
                            self._failed[outcome.config] = (outcome.status, f"{outcome.error}")
        except Exception as exc:  # a broken pool: the calls go on with the best known config
            if not exiting():  # at exit the queued compiles are cancelled on purpose
                logger.warning("autotune: background compiles of %s stopped: %s", self.kernel_name, exc)
                self.stop_compiles(f"never compiled: the background compiles stopped ({type(exc).__name__}: {exc})")
        finally:
            self._compiled.set()

    def stop_compiles(self, why: str) -> None:
        """No more candidate compiles: the ones neither compiled nor failed are failed with `why` (so the session
        can still decide, on what did compile, or give up)."""
        with self._lock:
            for config in self.candidates:
                if config not in self._ready and config not in self._failed:
                    self._failed[config] = (TrialStatus.COMPILE_ERROR, why)
        self._compiled.set()

    def offer_start(self, config: Config) -> None:
        """A better start config found after the first call (the driver's listing of stored winners): the best
        known until a candidate is timed, if it is a candidate that has not failed."""
        with self._lock:
            timed = any(self._samples.values())
            if not (self.decided or timed) and config in self._samples and config not in self._failed:
                self.best = config

    # -- progress -------------------------------------------------------------------------------------

    @property
    def measured(self) -> int:
        """Candidates with all their samples (or dropped as failed)."""
        return sum(1 for c in self.candidates if len(self._samples[c]) >= self.samples_wanted or c in self._failed)

    def progress(self) -> str:
        return f"{self.measured} of {len(self.candidates)} candidates measured"

    # -- a call ---------------------------------------------------------------------------------------

    def launch(self, named: dict, launch: Launch, capturing: bool, noted: Note = no_note) -> Any:
        """Run this call: a candidate that still needs samples (timed), else the best known config. Each launch
        is inside the crash journal's note `noted(config)`, taken outside the timed region."""
        if capturing:  # CUDA-graph capture: the best known, untimed, and no event is queried
            with noted(self.best):
                return launch(self.best)
        self._read_events()
        with self._lock:
            first, self._first = self._first, False
        if first:  # the call that met the key: the best known, untimed (checked first under verify=)
            return self._trusted(self.best, named, launch, noted, timed=False)
        config = self._next()
        if config is None:
            self._maybe_decide()
            return self._trusted(self.best, named, launch, noted, timed=False)
        return self._trusted(config, named, launch, noted, timed=True)

    def _next(self) -> Config | None:
        with self._lock:
            waiting = [
                c
                for c in self._ready
                if c not in self._failed and len(self._samples[c]) + self._in_flight(c) < self.samples_wanted
            ]
            if not waiting:
                return None
            self._turn += 1
            return waiting[self._turn % len(waiting)]

    def _in_flight(self, config: Config) -> int:
        return sum(1 for c, _, _ in self._pending if c == config)

    def _trusted(self, config: Config, named: dict, launch: Launch, noted: Note, *, timed: bool) -> Any:
        """Launch `config` for this call; if it fails (an error of its own, or verify= on its first launch), put
        the arguments back and run the call with another config (`_replacement`), so the caller only ever gets a
        correct result. A config is blamed for its failure only once another config has run this call. A run error
        of a second config is the call's (a tensor on the wrong device): the first such error is raised, blaming
        none; after a run error of a config that ran this key before only a compiled config is tried, so a bad call
        compiles at most one config on the caller's thread. Errors of the call itself, and of verify='s reference,
        are raised."""
        failures: dict[Config, tuple[TrialStatus, str]] = {}
        first_error: Exception | None = None  # the first run error (not out of resources nor verify=): maybe the call's
        first_failure: Exception | None = None
        ambiguous = 0  # run errors, and failures after one
        no_compile = False  # a config that ran the key failed so: only compiled configs are tried
        expected: Any = _UNSET
        while True:
            needs_check = self.verify is not None and config not in self._checked
            snapshot = (
                {n: named[n].clone() for n in self.guarded if named.get(n) is not None}
                if (needs_check or config not in self._checked)
                else {}
            )
            if needs_check and expected is _UNSET:  # once per call, outside the try: the reference is the user's
                expected = self.verify.expected(named) if isinstance(self.verify, Reference) else None
            try:
                if needs_check:
                    result = self._checked_launch(config, named, launch, noted, expected)
                elif timed:
                    result = self._timed(config, launch, noted)
                else:
                    with noted(config):
                        result = launch(config)
            except Exception as exc:
                kind = classify(exc, "run")
                if kind is FailureKind.CALL or kind is FailureKind.STICKY_DEVICE:
                    raise
                status = TrialStatus.VERIFY_FAILED if isinstance(exc, VerificationError) else RUN_FAILURE_STATUS[kind]
                failures[config] = (status, f"{type(exc).__name__}: {exc}")
                for name, value in snapshot.items():
                    named[name].copy_(value)
                first_failure = first_failure or exc
                if status is TrialStatus.RUNTIME_ERROR or first_error is not None:
                    ambiguous += 1  # a run error then any failure: the call's error (a bad call launches two configs)
                if status is TrialStatus.RUNTIME_ERROR:
                    first_error = first_error or exc
                    no_compile |= config in self._checked
                replacement = None if ambiguous > 1 else self._replacement(set(failures), not no_compile)
                if replacement is None:
                    self._blame_own(failures)
                    raise (first_error or first_failure) from None
                config, timed = replacement, False
                continue
            self._ran(config, failures)
            self._maybe_decide()
            return result

    def _ran(self, config: Config, failures: dict[Config, tuple[TrialStatus, str]]) -> None:
        """`config` ran this call: it is checked, and the configs that failed before it on this call are blamed
        (never launched again); the best known is one that works."""
        with self._lock:
            self._checked.add(config)
            self._failed.update(failures)
            if self.best in self._failed:
                self.best = config
        self._warn_blamed(failures, f"the call is run with {dict(config)}")

    def _blame_own(self, failures: dict[Config, tuple[TrialStatus, str]]) -> None:
        """A call that raises still blames the failures that are a config's whatever the call: out of resources,
        `verify=` (a run error may be the call's: not blamed)."""
        own = {c: f for c, f in failures.items() if f[0] is not TrialStatus.RUNTIME_ERROR}
        with self._lock:
            self._failed.update(own)
        self._warn_blamed(own, "not launched again")

    def _warn_blamed(self, failures: dict[Config, tuple[TrialStatus, str]], then: str) -> None:
        for failed, (status, _) in failures.items():
            logger.warning(
                "autotune: %s config %s failed during online tuning (%s); %s",
                self.kernel_name,
                dict(failed),
                status.value,
                then,
            )

    def _replacement(self, tried: set[Config], compile_ok: bool) -> Config | None:
        """The config a failed launch is re-run with: the best known that works, else one already compiled (no
        compile on the caller's thread), else (`compile_ok`) the next candidate; None when there is none."""
        with self._lock:
            best = self.best  # the start config may be a fallback= outside the candidates
            compiled_best = best in self._checked or best in self._ready
            if best not in self._failed and best not in tried and (compile_ok or compiled_best):
                return best
            usable = [c for c in self.candidates if c not in self._failed and c not in tried]
            compiled = [c for c in usable if c in self._checked] + [c for c in usable if c in self._ready]
            return next(iter(compiled or (usable if compile_ok else [])), None)

    def _timed(self, config: Config, launch: Launch, noted: Note) -> Any:
        """Launch `config` once, timed; the crash journal's note is written and removed outside the timing."""
        if self.on_gpu:
            import torch

            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with noted(config):
                start.record()
                result = launch(config)
                end.record()
            with self._lock:
                self._pending.append((config, start, end))
                self.launches += 1
            return result
        with noted(config):
            began = time.perf_counter()
            result = launch(config)
            elapsed_ms = (time.perf_counter() - began) * 1e3
        self._sample(config, elapsed_ms)
        return result

    def _checked_launch(self, config: Config, named: dict, launch: Launch, noted: Note, expected: Any) -> Any:
        """The first launch of a config under verify=: its output is checked before the caller gets it; raises
        VerificationError when it is wrong."""
        with noted(config):  # the synchronize too: a config that ends the process there is known to the next one
            result = launch(config)
            if self.on_gpu:
                import torch

                torch.cuda.synchronize()
        check_verified(self.verify, named, expected)
        return result

    def _sample(self, config: Config, ms: float) -> None:
        with self._lock:
            self._samples[config].append(ms)
            self.launches += 1
            enough = min(3, self.samples_wanted)  # the best so far, launched while candidates compile or fail
            timed = [c for c in self.candidates if c not in self._failed and len(self._samples[c]) >= enough]
            if timed:
                self.best = min(timed, key=lambda c: statistics.median(self._samples[c]))

    def _read_events(self) -> None:
        """Read the CUDA events of earlier launches that have finished (never waits)."""
        if not self._pending:
            return
        with self._lock:
            finished = [p[2].query() for p in self._pending]  # one query per event: none is lost
            done = [p for p, ok in zip(self._pending, finished) if ok]
            self._pending = [p for p, ok in zip(self._pending, finished) if not ok]
        for config, start, end in done:
            self._sample(config, float(start.elapsed_time(end)))
        if done:
            self._maybe_decide()

    # -- the decision ---------------------------------------------------------------------------------

    def _maybe_decide(self) -> None:
        """Once every candidate has its samples or failed: decide the winner (`decide`), or, when every one
        failed, tell `failed` (the best known, the trials) so the kernel gives the key up instead of waiting."""
        with self._lock:
            if self.decided or not self._compiled.is_set() or self._pending:
                return
            if any(c not in self._failed and len(self._samples[c]) < self.samples_wanted for c in self.candidates):
                return
            self.decided = True
            ok = [c for c in self.candidates if c not in self._failed and self._samples[c]]
            if ok:
                self.best = min(ok, key=lambda c: (statistics.median(self._samples[c]), self.candidates.index(c)))
            trials = [self._trial(c) for c in self.candidates]
        if ok:
            self._decide(self.best, trials, time.perf_counter() - self._started)
        elif self._failed_all is not None:
            self._failed_all(self.best, trials)

    def _trial(self, config: Config) -> Trial:
        compile_s = self._compile_s.get(config)
        if config in self._failed:
            status, error = self._failed[config]
            return Trial(config=config, status=status, error=error, compile_s=compile_s)
        samples = self._samples[config]
        return Trial(
            config=config,
            status=TrialStatus.OK,
            samples_ms=samples,
            median_ms=statistics.median(samples),
            min_ms=min(samples),
            compile_s=compile_s,
        )


_UNSET: Any = object()  # verify='s expected output, not computed yet on this call


def current_cuda_device() -> int:
    import torch

    return torch.cuda.current_device()


def use_cuda_device(device: int | None) -> None:
    """Make `device` this thread's current CUDA device (None: leave it)."""
    if device is not None:
        import torch

        torch.cuda.set_device(device)


class OnlineTuner:
    """The online sessions of one decorated kernel, one per key in progress.

    Their compiles are bounded per kernel, however many keys are new: one driver thread (started while sessions
    wait to compile, gone when none does) takes the sessions in the order their keys were met and compiles each
    one's candidates through the pipeline on one pool of `compile_workers` daemon threads shared by all of them
    (idle threads end; queued compiles are cancelled at exit)."""

    IDLE_TIMEOUT_S = 5.0  # a shared pool thread with nothing to compile for this long ends
    # Keys in progress kept per kernel: a key seen once never decides, and its session (candidates, samples, the
    # compiles queued with its first call's arguments) would otherwise stay for the life of the process. A new key
    # past this many drops the least recently called one, which starts over if it is called again.
    MAX_SESSIONS = 64
    # The stored winners a new key starts from (the nearest one) are listed by the driver thread, at most this
    # often: a listing reads every entry of the kernel, far too slow for the call that met the key.
    LISTING_TTL_S = 30.0

    def __init__(self, kernel: Autotuned) -> None:
        self.kernel = kernel
        self._sessions: dict[tuple, OnlineSession] = {}
        # keys whose every candidate failed: (the config their calls launch, the cache's clears() then); a clear
        # of the cache tunes them again. At most MAX_SESSIONS, the oldest dropped first.
        self._given_up: dict[tuple, tuple[Config, int]] = {}
        self._listing: list[TuningRecord] = []  # the kernel's stored records, as the driver last listed them
        self._listed_at: float | None = None
        self._noted: dict[tuple, Note] = {}  # (key, dtypes) -> the crash journal's note
        self._lock = threading.Lock()
        self._to_compile: collections.deque[tuple[OnlineSession, Any, int]] = collections.deque()
        self._driver: threading.Thread | None = None
        self._pool: DaemonThreadPool | None = None
        _TUNERS.add(self)

    def after_fork(self) -> None:
        """In a forked child: the driver and pool threads did not survive the fork, so the sessions in progress
        would never compile there. The child starts afresh: no session, a new driver and pool when a key needs one."""
        self._lock = threading.Lock()
        self._sessions, self._to_compile, self._noted, self._given_up = {}, collections.deque(), {}, {}
        self._driver, self._pool = None, None

    def select(self, key: tuple, dtypes: tuple, bound: Any, grid: Any) -> tuple[Config, TuningRecord | None, How]:
        """A stored winner when there is one, else the session's best config known (how = "online")."""
        kernel = self.kernel
        with self._lock:
            session = self._sessions.pop((key, dtypes), None)
            if session is not None:
                self._sessions[(key, dtypes)] = session  # the most recently called, last to be dropped
            given_up = self._given_up.get((key, dtypes))
        if session is not None:
            return session.best, None, "online"
        if given_up is not None:
            if given_up[1] == kernel.cache.clears():
                return given_up[0], None, "online"
            with self._lock:  # the cache was cleared since: tuned again
                self._given_up.pop((key, dtypes), None)
        kept, checksum = kernel.candidates(bound)
        since = kernel.cache.clears()  # a clear of the key before the decision: the winner is not kept
        record = kernel.cache.peek(key, dtypes, checksum, judge_search=True)
        if record is not None:
            return record.winner, record, "cache"
        # before a search replaces the candidates; None for a lazy space without fallback=
        untuned = untuned_config(kernel.fallback, kept, checksum, kernel.space.contains)
        if kernel.strategy != "exhaustive":  # a searched space: the strategy's first proposals are the candidates
            kept = search_strategy(kernel, key, kept, dtypes).ask(kernel.tuning.max_configs)
        start = self._nearest_stored(key, dtypes, kept) or untuned or kept[0]

        journaled, crashed = kernel.cache.crash_journal(key, dtypes, force=False)  # forced tunings never come online
        candidates = set(kept)  # only these are recorded crashed (a fallback outside them is never launched)
        kernel.cache.warn_crashes(key, dtypes, {c: w for c, w in crashed.items() if c in candidates}, isolated=False)
        noted = journaled if journaled is not None else no_note

        made: list[OnlineSession] = []  # the session these callbacks belong to, once made

        def decide(winner: Config, trials: list[Trial], tuning_s: float) -> None:
            self._decided(made[0], key, dtypes, checksum, winner, trials, tuning_s, since, crashed)

        def failed(best: Config, trials: list[Trial]) -> None:
            self._gave_up(made[0], key, dtypes, best, trials, since)

        def prepare(config: Config) -> tuple:
            return kernel.launch_args(config, bound, grid)

        with self._lock:
            session = self._sessions.get((key, dtypes))
            if session is None:
                self._drop_oldest_past(self.MAX_SESSIONS - 1)
                session = self._sessions[(key, dtypes)] = OnlineSession(
                    kernel_name=kernel.name,
                    candidates=kept,
                    start=start,
                    samples=kernel.tuning.reps,
                    on_gpu=not kernel.interpreted,
                    verify=kernel.verify,
                    restore_value=kernel.restore_value,
                    reset_to_zero=kernel.reset_to_zero,
                    decide=decide,
                    crashed=crashed,
                    failed=failed,
                    key=key,
                    dtypes=dtypes,
                )
                made.append(session)
                self._noted[(key, dtypes)] = noted
                self._to_compile.append((session, kernel.compiler_for(prepare), kernel.tuning.compile_workers))
                if self._driver is None:
                    self._driver = threading.Thread(
                        target=self._drive, name=f"autotune-online-{kernel.name}", daemon=True
                    )
                    self._driver.start()
        return session.best, None, "online"

    def _nearest_stored(self, key: tuple, dtypes: tuple, kept: Sequence[Config]) -> Config | None:
        """The winner of the nearest other key that is a candidate, from what costs the caller nothing: the
        records in memory and the driver thread's last listing of the persistent tiers (never read here)."""
        from ..engine.search import nearest_winners

        with self._lock:
            listed = list(self._listing)
        known = [*self.kernel.cache.memory.records().values(), *listed]
        return next((c for c in nearest_winners(key, known, dtypes=dtypes) if c in kept), None)

    def _drop_oldest_past(self, kept: int) -> None:
        """Drop the least recently called sessions (and their queued compiles) until `kept` remain; holding the
        lock."""
        while len(self._sessions) > kept:
            (key, dtypes), dropped = next(iter(self._sessions.items()))
            self._drop((key, dtypes))
            logger.info(
                "autotune: online tuning of %s keeps at most %d keys in progress; dropped key %s (%s), the least "
                "recently called: it starts over if called again",
                self.kernel.name,
                self.MAX_SESSIONS,
                key,
                dropped.progress(),
            )

    def _drop(self, key: tuple) -> None:
        """Forget the session of `key` ((key, dtypes)) and its queued compiles; holding the lock."""
        dropped = self._sessions.pop(key, None)
        self._noted.pop(key, None)
        self._to_compile = collections.deque(item for item in self._to_compile if item[0] is not dropped)

    def _drive(self) -> None:
        """The driver thread: compile the waiting sessions' candidates one session after another (each on the
        shared pool, so that pool is what bounds the compiles), then end. A session whose compiles cannot start
        has its candidates failed (it gives up), and the next one is taken: one bad session stops no other key."""
        me = threading.current_thread()
        try:
            while True:
                with self._lock:
                    if not self._to_compile or exiting():
                        self._driver = None
                        return
                    session, compiler, workers = self._to_compile.popleft()
                try:
                    self._compile_session(session, compiler, workers)
                except Exception as exc:
                    logger.warning("autotune: background compiles of %s stopped: %s", self.kernel.name, exc)
                    session.stop_compiles(f"never compiled: {type(exc).__name__}: {exc}")
        finally:  # ended by anything else (a BaseException): the next new key starts a new driver
            with self._lock:
                if self._driver is me:
                    self._driver = None

    def _compile_session(self, session: OnlineSession, compiler: Any, workers: int) -> None:
        """Compile one session's candidates on the caller's CUDA device, after offering it the nearest stored
        winner as its start (the listing is read here, off the calls' path)."""
        use_cuda_device(session.cuda_device)
        try:  # a better start is an optimisation: a listing that fails must not fail the key's tuning
            self._refresh_listing()
            start = self._nearest_stored(session.key, session.dtypes, session.candidates) if session.key else None
        except Exception as exc:
            logger.warning("autotune: listing the stored winners of %s failed: %s", self.kernel.name, exc)
            self._listed_at = time.monotonic()  # not tried again at every key
            start = None
        if start is not None:
            session.offer_start(start)
        with self._lock:
            if workers > 0 and (self._pool is None or self._pool.max_workers != workers):
                self._pool = DaemonThreadPool(
                    workers,
                    f"autotune-compile-online-{self.kernel.name}",
                    idle_timeout_s=self.IDLE_TIMEOUT_S,
                    cancel_at_exit=True,
                )
            pool = self._pool if workers > 0 else None
        session.compile_all(compiler, workers, pool, self.kernel.tuning.compile_timeout_s)

    def _refresh_listing(self) -> None:
        """List the kernel's stored records (every persistent tier but the remote one) when the last listing is
        older than LISTING_TTL_S; on the driver thread only."""
        now = time.monotonic()
        if self._listed_at is not None and now - self._listed_at < self.LISTING_TTL_S:
            return
        # without their trials: only the key, dtypes and winner are read, and the listing lives as long as the tuner
        listing = [msgspec.structs.replace(r, trials=[]) for r in self.kernel.cache.tuned_records()]
        with self._lock:
            self._listing, self._listed_at = listing, now

    def launch(self, key: tuple, dtypes: tuple, bound: Any, launch: Launch) -> Any:
        """Run one call of a key in progress (`launch(config)` launches a config on this call's arguments)."""
        with self._lock:
            session, noted = self._sessions.get((key, dtypes)), self._noted.get((key, dtypes))
        if session is None or noted is None:  # decided (or given up) by another thread meanwhile
            record = self.kernel.cache.in_memory(key, dtypes)
            if record is not None:
                return launch(record.winner)
            with self._lock:
                given_up = self._given_up.get((key, dtypes))
            if given_up is not None:
                return launch(given_up[0])
            kept, checksum = self.kernel.candidates(bound)
            return launch(self.kernel.untuned_among(kept, checksum))
        # each launch is noted, so a config that ends the process is known to the next one
        return session.launch(bound.named, launch, capturing=capturing(), noted=noted)

    def best_in_progress(self, key: tuple, dtypes: tuple) -> Config | None:
        """The best config known of the key's session, None when no session is in progress."""
        with self._lock:
            session = self._sessions.get((key, dtypes))
        return None if session is None else session.best

    def progress(self) -> dict[str, str]:
        """Keys in progress: "[1024] float32,float32" -> "3 of 8 candidates measured". A key whose winner another
        path stored meanwhile (a warm-up, a sweep) is no longer in progress: its session is dropped."""
        from ..format import format_dtypes, format_key

        with self._lock:
            keys = list(self._sessions)
        over = [k for k in keys if self.kernel.cache.in_memory(*k) is not None]
        with self._lock:
            for key in over:
                self._drop(key)
            return {f"{format_key(list(k))} {format_dtypes(d)}": s.progress() for (k, d), s in self._sessions.items()}

    def _gave_up(
        self, session: OnlineSession, key: tuple, dtypes: tuple, best: Config, trials: list[Trial], since: int
    ) -> None:
        """Every candidate of the key failed: a failed tuning is counted, its session dropped and the reason
        warned once (each config's error, as a blocking tuning's NoValidConfigError gives it). The key's calls go
        on launching `best`, the config they ran so far, until a clear of the cache tunes it again. A session
        dropped from its slot (MAX_SESSIONS) that gives up late leaves the key's newer session alone."""
        from ..format import format_dtypes, format_key

        failed = [t for t in trials if t.status is not TrialStatus.SKIPPED]
        count(self.kernel.name, misses=1, failed_tunings=1, failed_configs=len(failed))
        with self._lock:
            if self._sessions.get((key, dtypes), session) is session:  # no newer session of the key goes on
                self._drop((key, dtypes))
                self._given_up.pop((key, dtypes), None)
                self._given_up[(key, dtypes)] = (best, since)
                while len(self._given_up) > self.MAX_SESSIONS:
                    del self._given_up[next(iter(self._given_up))]
        errors = "\n".join(f"  {dict(t.config)}: {t.status.value}: {t.error}" for t in failed)
        warn_at_caller(
            f"autotune: online tuning of {self.kernel.name} key {format_key(list(key))} {format_dtypes(dtypes)} "
            f"found no config that runs; each failed:\n{errors}\nIts calls go on launching {dict(best)}, untuned "
            "(the config they ran so far). Fix the kernel or the search space; clear_autotune_cache() in this "
            "process, or a new process, tunes the key again."
        )

    def _decided(
        self,
        session: OnlineSession,
        key: tuple,
        dtypes: tuple,
        checksum: str | None,
        winner: Config,
        trials: list[Trial],
        tuning_s: float,
        since: int,
        crashed: Mapping[Config, str],
    ) -> None:
        from ..reporting.lines import emit

        kernel = self.kernel
        record = kernel.cache.new_record(
            key,
            dtypes,
            winner=winner,
            trials=with_lowering(kernel, trials),
            tuning_s=tuning_s,
            candidates=checksum,
            strategy="online",
            space_size=kernel.space_size,
            where="in-process",
        )
        kernel.cache.store_tuned(key, dtypes, record, since=since)
        if not unrecorded_crashes(kernel, crashed, trials):  # a crash noted of a config not tried stays noted
            kernel.cache.forget_crashes(key, dtypes)
        with self._lock:
            if self._sessions.get((key, dtypes)) is session:  # a session dropped from its slot leaves a newer one
                del self._sessions[(key, dtypes)]
                self._noted.pop((key, dtypes), None)
        emit(record, cache_hit=False)


@reset_in_forked_child
def _after_fork_in_child() -> None:
    for tuner in list(_TUNERS):
        tuner.after_fork()
