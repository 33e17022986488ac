"""`autotune.sweep`: tune every key a list of argument makers produces, on a pool of workers (local processes or
Ray actors), once per device kind in the pool, with every winner written through the driver's cache tiers.

One job is one key on one device kind; a driver thread per worker takes the next job of its worker's kind,
asks the worker for the key (`prepare`), and tunes it inside the driver's `KernelCache.get_or_tune` for that
kind (the same single flight and tiers, disk and Redis, as a tuning in a serving process), the worker doing the
measuring (`tune`). A key whose entry would be reused, or whose disk lease a live process holds, is skipped; a
job whose worker died is retried once on another worker (the worker is replaced), and again on the slot's new
worker each time the death names a config not seen before for the job (a local worker measuring in its own
process, isolate="off": the new worker finds that config in the slot's crash journal and records it crashed);
Ctrl-C stops every worker.
"""

from __future__ import annotations

import contextlib
import difflib
import logging
import re
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..engine.multi_call import check_objective
from ..errors import AutotuneError, CallError, NoValidConfigError, OptionError
from ..kernel.call import Found, argument_makers
from ..options import Tuning, env_force, env_print_level, env_progress, online_mode
from ..record import Search, TrialStatus, TuningRecord
from ..storage.kernel_cache import KernelCache
from .jobs import Job, JobQueue
from .report import KeyOutcome, Status, SweepInterrupted, SweepReport, WorkerStats
from .slots import Executor, JobFailed, Slot, WorkerLost
from .split import SplitTuning, groups, split_tune
from .worker import Maker, MakerSet, WorkerSpec, tuned_search

if TYPE_CHECKING:
    from ..kernel.identity import KernelRef

__all__ = ["sweep", "warmup_sweep"]

logger = logging.getLogger("autotune")

_KeyId = tuple[str, str, tuple[str, ...]]  # (device kind, repr(key), dtypes): one key of a sweep
_INTERRUPTED = "the sweep was interrupted"
MAX_LOCAL_WORKERS = 256  # worker processes of a local sweep, each an interpreter importing torch
MAX_RAY_WORKERS = 4096  # Ray actors, one per GPU of a cluster
_CRASH_RERUNS = 32  # at most this many reruns of one job past configs that ended its worker (each a new config)


def sweep(
    kernel: object,
    calls: Iterable[Maker],
    *,
    executor: str = "local",
    workers: int | None = None,
    tuning: Tuning | str | dict | None = None,
    device_kinds: Sequence[str] | None = None,
    worker_env: Sequence[Mapping[str, str]] = (),
    progress: bool | None = None,
) -> SweepReport:
    """Tune every key `calls` produces on a pool of workers and return what happened (`SweepReport`).

    `calls`: argument makers, each a picklable callable returning `(args, kwargs)` for one shape, building its
    tensors on the worker's current device (tensors are never shipped). `executor`: "local" (worker processes,
    one per visible GPU), "ray" (one actor per GPU of the running Ray cluster, or of `RAY_ADDRESS`), or a Ray
    address ("ray://head:10001", "auto", "HOST:PORT"). `workers`: how many (default one per GPU; 1 without one).
    `tuning`: the Tuning to tune with (default the kernel's). `device_kinds`: tune only for these device
    fingerprints (default every kind in the pool). `worker_env`: environment variables for worker i, cycling
    (`[{"AUTOTUNE_DEVICE_KIND": "a"}, {"AUTOTUNE_DEVICE_KIND": "b"}]` simulates a pool of two kinds).
    `progress`: a tqdm bar on stderr (default: when stderr is a terminal). A kernel tuned with
    `Tuning(objective=...)` gets one job per key: the makers grouped by the key their call falls in (one job for
    all of them with key=None), one config measured on every call of the key. AUTOTUNE_FORCE=1 (or
    `Tuning(force=True)`) tunes keys already cached again. Ctrl-C stops every worker and raises `SweepInterrupted`,
    a KeyboardInterrupt whose `report` says what finished.
    """
    kinds = _checked_device_kinds(device_kinds)
    options = _Options(executor, workers, tuning, kinds, _checked_worker_env(worker_env), progress)
    return _sweep(kernel, calls, options)


def warmup_sweep(kernel: object, calls: Iterable[Maker], tuning: Tuning | str | dict | None) -> SweepReport:
    """`autotune.warmup` over this machine's GPUs: a local sweep whose errors speak of warmup, and whose winners for
    this process's device are also kept in the kernel's own memory (so they serve it where no tier can store them)."""
    return _sweep(kernel, calls, _Options(tuning=tuning, warming=True))


@dataclass(frozen=True)
class _Options:
    executor: str = "local"
    workers: int | None = None
    tuning: Tuning | str | dict | None = None
    device_kinds: Sequence[str] | None = None
    worker_env: Sequence[Mapping[str, str]] = ()
    progress: bool | None = None
    warming: bool = False  # autotune.warmup's sweep

    def said(self, name: str) -> str:
        return f"autotune.warmup({name}, ...)" if self.warming else f"sweep({name}, ...)"

    def instead(self) -> str:
        return "; or pass in_process=True to tune in this process" if self.warming else ""


def _sweep(kernel: object, calls: Iterable[Maker], options: _Options) -> SweepReport:
    _check_executor(options.executor)
    _check_workers(options.workers, options.executor)
    tuned = _autotuned(kernel)
    own = None if options.tuning is None else Tuning.coerce(options.tuning)  # the sweep's own Tuning, if given
    effective = tuned.tuning if own is None else own
    if online_mode(effective):  # Tuning(mode="online") or AUTOTUNE_MODE=online: a sweep tunes on the blocking path
        own = effective = effective.replace(mode="blocking")
    spec = _spec(tuned, own, options)
    given = argument_makers(calls, options.said(tuned.name))
    makers: list[Maker | MakerSet] = list(given)
    together = effective.objective is not None or tuned.tuning.objective is not None
    if together:  # one job per key, each measuring one config on every call of that key
        check_objective(tuned.name, tuned.tuning.objective, effective.objective, options.said(tuned.name))
    strategy, search = tuned_search(tuned, effective)
    # a key may be split over workers only where its configs are listed and all measured (a strategy proposes its
    # configs one batch at a time, in one process) and each is measured on one call
    exhaustive = strategy == "exhaustive" and tuned.configs is not None and effective.objective is None
    pool = _executor(options.executor, spec, options.workers, options.worker_env)
    started = time.perf_counter()
    positions: list[list[int]] = []  # under an objective: each set's makers, by their position in `calls`
    try:
        try:
            slots = pool.start()
        except (WorkerLost, JobFailed) as exc:
            said = options.said(tuned.name)
            raise AutotuneError(f"{said}: the workers could not start: {exc}{options.instead()}") from None
        start_s = time.perf_counter() - started
        kinds = _kinds(slots, options.device_kinds)
        if together:
            sets = _sets_by_key(next(s for s in slots if s.kind == kinds[0]), given, options.said(tuned.name))
            positions, makers = [p for p, _ in sets], [m for _, m in sets]
        run = _Run(
            tuned,
            makers,
            kinds,
            slots,
            force=effective.force or env_force(),  # as any tuning's: AUTOTUNE_FORCE=1 too
            progress=options.progress,
            split_topk=effective.refine_topk if exhaustive else None,
            search=search,
            keep=tuned.cache if options.warming else None,
        )
        interrupted = run.drive()
    finally:
        pool.stop()
    report = run.report(tuned.name, pool.name, time.perf_counter() - started, start_s)
    for outcome in report.keys if positions else ():
        outcome.calls = positions[outcome.job]
    if env_print_level() >= 1:
        print(report, file=sys.stderr)
    if interrupted:
        raise SweepInterrupted(report)
    return report


def _autotuned(kernel: object) -> Any:
    """The @autotune kernel `kernel` is, or holds (a compat Autotuner's `tuner`, under `triton.heuristics`)."""
    from ..kernel.identity import tuned_under

    found = tuned_under(kernel)
    if found is None or not (hasattr(found[0], "cache") and hasattr(found[0], "base_fn")):
        raise OptionError(f"sweep() tunes an @autotune kernel; got {kernel!r}")
    return found[0]


def _check_workers(workers: object, executor: str) -> None:
    if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool) or workers < 1):
        raise OptionError(f"sweep(workers={workers!r}): give a positive number of workers, or None for the default")
    most = MAX_LOCAL_WORKERS if executor == "local" else MAX_RAY_WORKERS
    if workers is not None and workers > most:
        where = "worker processes on this machine" if executor == "local" else "Ray actors"
        raise OptionError(
            f"sweep(workers={workers}): at most {most} {where}; give a number from 1 to {most}, or None for one per GPU"
        )


def _checked_worker_env(worker_env: object) -> tuple[Mapping[str, str], ...]:
    """`worker_env` as a tuple of environments, refused before any worker starts unless it is a list of dicts of
    strings (a worker's environment variables are strings)."""
    example = '[{"AUTOTUNE_DEVICE_KIND": "a"}, {"AUTOTUNE_DEVICE_KIND": "b"}]'
    if worker_env is None:
        return ()
    if isinstance(worker_env, (str, bytes, Mapping)) or not isinstance(worker_env, Sequence):
        raise OptionError(
            f"sweep(worker_env={worker_env!r}): give a list of dicts, one environment per worker (cycling), "
            f"e.g. {example}; for one environment for every worker, [{{...}}]"
        )
    for index, env in enumerate(worker_env):
        bad = (
            "not a dict"
            if not isinstance(env, Mapping)
            else next(
                (f"{k!r}: {v!r}" for k, v in env.items() if not isinstance(k, str) or not isinstance(v, str)), None
            )
        )
        if bad is not None:
            raise OptionError(
                f"sweep(worker_env=...): worker_env[{index}] = {env!r}: {bad}: a worker's environment variables "
                f"are strings, names and values (e.g. {{'OMP_NUM_THREADS': '1'}}), one dict per worker as in {example}"
            )
    return tuple(worker_env)


def _checked_device_kinds(device_kinds: object) -> tuple[str, ...] | None:
    """`device_kinds` as a tuple of fingerprints (None: every kind of the pool), refused before any worker starts
    unless it is a non-empty list of strings."""
    if device_kinds is None:
        return None
    if isinstance(device_kinds, str) or not isinstance(device_kinds, Sequence):
        hint = f"[{device_kinds!r}]" if isinstance(device_kinds, str) else "['<fingerprint>', ...]"
        raise OptionError(f"sweep(device_kinds={device_kinds!r}): give a list of device fingerprints, e.g. {hint}")
    if not device_kinds or not all(isinstance(k, str) and k for k in device_kinds):
        raise OptionError(
            f"sweep(device_kinds={list(device_kinds)!r}): give at least one device fingerprint (a non-empty "
            "string, as a worker's `device_fingerprint()` says), or None to tune for every kind in the pool"
        )
    return tuple(device_kinds)


def _spec(tuned: Any, tuning: Tuning | None, options: _Options) -> WorkerSpec:
    from ..kernel.identity import kernel_ref

    ref = kernel_ref(tuned.base_fn)
    if ref.importable_reason is not None:
        raise OptionError(
            f"{options.said(tuned.name)}: a worker process cannot import the kernel ({ref.importable_reason}); "
            f"define it at the top level of a module{options.instead()}"
        )
    if _plain_under_its_name(ref):
        raise OptionError(
            f"{options.said(tuned.name)}: a worker imports the kernel by its name, {ref.module}.{ref.qualname}, "
            "and that name holds the plain @triton.jit function (as after `add = autotune(...)(add_raw)`): decorate "
            f"the kernel where it is defined, @autotune above @triton.jit{options.instead()}"
        )
    return WorkerSpec(ref.module, ref.qualname, ref.file, tuning, tuple(sys.path))


def _plain_under_its_name(ref: KernelRef) -> bool:
    """Whether the kernel's module, as imported here (nothing is imported to see), holds something other than an
    @autotune kernel under the kernel's name: what a worker would import."""
    from ..kernel.identity import imported_object, tuned_under

    found = imported_object(ref)
    return found is not None and tuned_under(found) is None


_EXECUTORS = ("local", "ray", "auto")
_HOST_PORT = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[^\s/:\[\]]+):\d+")  # a Ray cluster's head, as RAY_ADDRESS gives it


def _check_executor(executor: object) -> None:
    """Refuse an executor that is neither ours nor a Ray address, before any worker starts ("locl" is no host)."""
    if isinstance(executor, str) and (executor in _EXECUTORS or "://" in executor or _HOST_PORT.fullmatch(executor)):
        return
    close = difflib.get_close_matches(executor, _EXECUTORS, n=1) if isinstance(executor, str) else []
    raise OptionError(
        f"sweep(executor={executor!r}): give 'local' (worker processes here), 'ray' (the running Ray cluster, else "
        "RAY_ADDRESS's), 'auto', or a Ray address: 'ray://head:10001' or HOST:PORT of the cluster's head"
        + (f"; did you mean {close[0]!r}?" if close else "")
    )


def _executor(executor: str, spec: WorkerSpec, workers: int | None, env: Sequence[Mapping[str, str]]) -> Executor:
    if executor == "local":
        from .local import LocalExecutor

        return LocalExecutor(spec, workers, env)
    from .ray_executor import RayExecutor

    address = None if executor == "ray" else executor  # "ray": the running runtime, else RAY_ADDRESS, else local
    return RayExecutor(spec, workers, env, address)


def _sets_by_key(slot: Slot, makers: Sequence[Maker], said: str) -> list[tuple[list[int], MakerSet]]:
    """A sweep under `Tuning.objective`: the makers grouped by the key their call falls in (as warmup groups
    them), each set with its makers' positions in `makers`, keyed by building each call once on `slot`. A maker that fails stops the sweep before any tuning: the
    set it belonged to is unknown, and one tuned without it would be filed as the whole set's."""
    groups: dict[object, list[tuple[int, Maker]]] = {}
    for index, maker in enumerate(makers):
        try:
            info = slot.prepare(maker)
        except JobFailed as exc:
            raise CallError(
                f"{said}: call {index} of the set could not be built ({exc}); the calls are tuned together as one "
                "set per key (Tuning.objective), and a set missing one would file its winner as the whole set's: "
                "fix that maker; nothing was tuned"
            ) from None
        except WorkerLost as exc:
            raise AutotuneError(f"the sweep's worker died while reading the key of each call: {exc}") from None
        groups.setdefault((repr(info.key), info.dtypes), []).append((index, maker))
    return [([i for i, _ in group], tuple(m for _, m in group)) for group in groups.values()]


def _kinds(slots: Sequence[Slot], wanted: Sequence[str] | None) -> list[str]:
    present = sorted({slot.kind for slot in slots})
    if wanted is None:
        return present
    missing = [k for k in wanted if k not in present]
    if missing:
        raise OptionError(
            f"sweep(device_kinds={list(wanted)!r}): no worker has {', '.join(map(repr, missing))}; the pool's "
            f"workers are {', '.join(map(repr, present))}"
        )
    return list(dict.fromkeys(wanted))


class _Run:
    """One sweep's driver: a thread per worker, the outcomes, the progress bar."""

    def __init__(
        self,
        tuned: Any,
        makers: list[Maker | MakerSet],
        kinds: list[str],
        slots: list[Slot],
        *,
        force: bool,
        progress: bool | None,
        split_topk: int | None,
        search: Search | None,
        keep: KernelCache | None,
    ) -> None:
        self.tuned, self.slots, self.force = tuned, [s for s in slots if s.kind in kinds], force
        self.split_topk = split_topk
        self.keep = keep  # the kernel's own cache: its memory also gets the winners of this process's device kind
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.outcomes: dict[tuple[int, str], KeyOutcome] = {}
        self.stats = {s.index: WorkerStats(index=s.index, device=s.kind) for s in self.slots}
        self.caches = {kind: _cache_for(tuned, kind, search) for kind in kinds}
        self.key_locks: dict[_KeyId, threading.Lock] = {}  # the jobs of one key (its calls) run one at a time
        self.tuned_here: set[_KeyId] = set()  # keys a job of this sweep has tuned, or found cached
        self.crashes: dict[tuple[int, str], list[dict[str, Any]]] = {}  # per job: configs that ended its worker
        self.reruns: dict[tuple[int, str], int] = {}  # per job: how often it ran again past one of them
        self.queues = {
            kind: JobQueue(
                [Job(i, m, kind) for i, m in enumerate(makers)],
                sum(1 for s in self.slots if s.kind == kind),
                self.stopping,
            )
            for kind in kinds
        }
        self.bar = _progress_bar(len(makers) * len(kinds), progress)
        self.busy = 0

    def drive(self) -> bool:
        """Run every job on the workers; True when Ctrl-C stopped it (every worker stopped, what finished stored)."""
        threads = []
        for kind, queue in self.queues.items():
            slots = [s for s in self.slots if s.kind == kind]
            if self.split_topk is not None and 0 < len(queue.jobs) < len(slots):  # fewer keys than workers: split
                for group, job in zip(groups(slots, len(queue.jobs)), queue.claim_all()):
                    threads.append(threading.Thread(target=self._work_group, args=(group, job), daemon=True))
            else:
                threads += [threading.Thread(target=self._work, args=(slot,), daemon=True) for slot in slots]
        for thread in threads:
            thread.start()
        try:
            for thread in threads:
                while thread.is_alive():
                    thread.join(0.2)
        except KeyboardInterrupt:  # stop every worker; what finished is stored already
            self.stopping.set()
            for slot in self.slots:
                slot.stop()
            deadline = time.monotonic() + 10  # for all of them: a thread may be waiting on another process's lease
            for thread in threads:
                thread.join(max(0.0, deadline - time.monotonic()))
            return True
        finally:
            if self.bar is not None:
                self.bar.close()
        return False

    def report(self, kernel: str, executor: str, wall_s: float, start_s: float) -> SweepReport:
        for kind, queue in self.queues.items():  # never run: interrupted, or no worker of the kind left
            for job in list(queue.jobs):
                self._record(job, KeyOutcome(job=job.index, device=kind, status="interrupted", attempts=job.attempts))
        keys = [self.outcomes[k] for k in sorted(self.outcomes)]
        return SweepReport(
            kernel=kernel,
            executor=executor,
            wall_s=wall_s,
            start_s=start_s,
            keys=keys,
            workers=list(self.stats.values()),
        )

    # -- one worker's thread ------------------------------------------------------------------------

    def _work(self, slot: Slot) -> None:
        queue = self.queues[slot.kind]
        rerun: Job | None = None
        while True:
            job, rerun = rerun or queue.take(slot.index), None
            if job is None:
                return
            job.attempts += 1
            self._busy(+1)
            try:
                outcome = self._run(slot, job)
            except WorkerLost as exc:
                self._busy(-1)
                if self._past_crash(slot, job, exc):
                    rerun = job
                elif not self._lost(slot, job, queue, exc):
                    return
                continue
            self._record(job, outcome)
            queue.finish(job)
            self._busy(-1)

    def _work_group(self, group: list[Slot], job: Job) -> None:
        """One key split over `group`. A worker lost meanwhile: the group's workers are replaced and the key is
        tuned once more, unsplit, on the first of them."""
        job.attempts += 1
        self._busy(+len(group))
        try:
            outcome = self._run(group[0], job, group)
        except WorkerLost as exc:
            given_up = _INTERRUPTED if self.stopping.is_set() else self._replace_all(group)
            if given_up is not None:
                status: Status = "interrupted" if given_up == _INTERRUPTED else "failed"
                outcome = KeyOutcome(job=job.index, device=job.kind, status=status, error=f"{exc}; {given_up}")
                outcome.attempts = job.attempts
            else:
                outcome = self._unsplit(group[0], job)
        finally:
            self._busy(-len(group))
        self._record(job, outcome)

    def _unsplit(self, slot: Slot, job: Job) -> KeyOutcome:
        """A split key tuned once more on `slot` alone, past each config that ends its worker as `_work` tunes a key
        (the config that ended a worker of the split is in that worker's journal, not this slot's: it costs this
        worker once more, then its replacement records it crashed)."""
        while True:
            job.attempts += 1
            try:
                return self._run(slot, job)
            except WorkerLost as again:
                if self._past_crash(slot, job, again):
                    continue
                status: Status = "interrupted" if self.stopping.is_set() else "failed"
                with self.lock:  # cleared if a later job of this slot starts a new worker (`_replace`)
                    self.stats[slot.index].lost = f"{again}; not replaced: the split key it was tuning failed"
                return KeyOutcome(
                    job=job.index, device=job.kind, status=status, error=str(again), attempts=job.attempts
                )

    def _past_crash(self, slot: Slot, job: Job, exc: WorkerLost) -> bool:
        """Whether `job` runs again on `slot`'s new worker (started here): its worker died measuring a config in its
        own process that no earlier death of the job named; the new worker finds that config in the slot's crash
        journal and records it `crashed`, so each such config costs a worker, not the key (bounded)."""
        seen = self.crashes.setdefault((job.index, job.kind), [])
        if exc.config is None or exc.config in seen or len(seen) >= _CRASH_RERUNS or self.stopping.is_set():
            return False
        seen.append(exc.config)
        if self._replace(slot) is not None:
            return False
        self.reruns[(job.index, job.kind)] = self.reruns.get((job.index, job.kind), 0) + 1
        return True

    def _lost(self, slot: Slot, job: Job, queue: JobQueue, exc: WorkerLost) -> bool:
        """`slot`'s worker died under `job`: the job goes back for another worker (once, reruns past a crashing
        config aside), the worker is replaced. False when this slot is given up (interrupted, or no new worker)."""
        stopping = self.stopping.is_set()
        retry = job.attempts - self.reruns.get((job.index, job.kind), 0) < 2 and not stopping
        if not retry:
            status: Status = "interrupted" if stopping else "failed"
            outcome = KeyOutcome(job=job.index, device=slot.kind, status=status, worker=slot.index, error=str(exc))
            outcome.attempts = job.attempts
            self._record(job, outcome)
        job.lost_on = slot.index
        queue.finish(job, again=retry)
        given_up: str | None = "no job was left for a new worker"
        if not retry and not stopping and not queue.pending():  # none is started (the kind's other workers take
            slot.stop()  # what their own lost workers hand back)
            with self.lock:
                self.stats[slot.index].lost = f"{exc}; {given_up}"
        else:
            given_up = _INTERRUPTED if stopping else self._replace(slot)
            if given_up is None:
                return True
        status = "interrupted" if given_up == _INTERRUPTED else "failed"
        for left in queue.leave():
            error = f"no worker of this kind is left ({exc}; {given_up})"
            outcome = KeyOutcome(job=left.index, device=slot.kind, status=status, error=error, attempts=left.attempts)
            self._record(left, outcome)
        return False

    def _run(self, slot: Slot, job: Job, group: Sequence[Slot] = ()) -> KeyOutcome:
        """Tune `job`'s key on `slot` (split over `group` when it has several workers) through the kind's cache."""
        started = time.perf_counter()
        outcome = KeyOutcome(job=job.index, device=slot.kind, status="failed", worker=slot.index, attempts=job.attempts)
        split = SplitTuning()
        try:
            found = self._tune(slot, job, group, outcome, split)
        except (JobFailed, NoValidConfigError) as exc:  # the job's own failure (NoValidConfigError: a split key's)
            outcome.error = str(exc)
            return outcome
        except WorkerLost:
            raise
        except Exception as exc:  # the driver's fault (a tier, a bug): this key fails, saying why; the others go on
            logger.error("autotune sweep: job %d on %s failed in the driver", job.index, slot.kind, exc_info=True)
            outcome.error = f"{type(exc).__name__}: {exc}"
            return outcome
        finally:
            outcome.seconds = time.perf_counter() - started
        if found is not None:
            self._done(slot, outcome, *found, split=split)
        return outcome

    def _tune(
        self, slot: Slot, job: Job, group: Sequence[Slot], outcome: KeyOutcome, split: SplitTuning
    ) -> tuple[TuningRecord, Found, bool] | None:
        """The key's record, where it came from (`get_or_tune`'s answer) and whether another job of this sweep had
        the key first (calls of one key run one at a time: a later one finds the first one's winner, or tunes the
        key itself when the first one failed), or None when another process holds its lease (`outcome` then says
        who)."""
        key, dtypes, candidates, calls = slot.prepare(job.maker)
        outcome.key, outcome.dtypes = _jsonable_key(key), list(dtypes)
        cache = self.caches[slot.kind]
        mine = (slot.kind, repr(key), tuple(dtypes))
        with self._one_job_of(mine):
            again = mine in self.tuned_here
            holder = None if again else _lease_holder(cache, key, dtypes)
            if holder is not None:  # leased elsewhere: each job of the key asks, and is `leased` too
                outcome.status, outcome.error = "leased", f"being tuned by {holder}"
                return None
            for other in group[1:]:
                other.prepare(job.maker)

            def tune() -> TuningRecord:
                if len(group) < 2:
                    return _record_of(slot.tune())
                return split_tune(group, cache, key, dtypes, candidates, self.split_topk or 0, split)

            force = (self.force and not again) or (
                calls is not None and cache.calls_changed(key, dtypes, candidates, calls)
            )
            record, how = cache.get_or_tune(key, dtypes, tune, force=force, candidates=candidates)
            with self.lock:
                self.tuned_here.add(mine)
        if self.keep is not None and slot.kind == self.keep.device_fingerprint():
            self.keep.remember(key, dtypes, record)
        return record, how, again

    @contextlib.contextmanager
    def _one_job_of(self, key: _KeyId) -> Iterator[None]:
        """Hold `key`'s lock (a job of another call of the key may be tuning it); given up on Ctrl-C."""
        with self.lock:
            lock = self.key_locks.setdefault(key, threading.Lock())
        while not lock.acquire(timeout=0.2):
            if self.stopping.is_set():
                raise WorkerLost(_INTERRUPTED)
        try:
            yield
        finally:
            lock.release()

    def _done(
        self, slot: Slot, outcome: KeyOutcome, record: TuningRecord, how: str, again: bool, split: SplitTuning
    ) -> None:
        outcome.winner = dict(record.winner)
        if how != "tuned":
            why = (
                "the key of another call of this sweep" if again or how == "memory" else f"a usable {how} entry exists"
            )
            outcome.status, outcome.error = "cached", why
            return
        outcome.status = "tuned"
        outcome.configs_measured = sum(1 for t in record.trials if t.status is not TrialStatus.SKIPPED)
        measured = split.measured or {slot.index: outcome.configs_measured}
        if split.measured:
            outcome.split_over, outcome.refined_on = sorted(split.measured), split.refined_on
        busy = split.busy_s or {slot.index: outcome.seconds}  # split: each worker's own share's time
        with self.lock:
            self.stats[slot.index].jobs += 1
            for index, count in measured.items():
                self.stats[index].configs_measured += count
            for index, seconds in busy.items():
                self.stats[index].busy_s += seconds

    def _replace(self, slot: Slot) -> str | None:
        """Start a new worker in place of `slot`'s dead one: None when it started, else why the slot is given up
        (also when the sweep is stopping, or the new worker is of another device kind: a Ray actor placed on another
        node, while the slot's thread serves one kind)."""
        kind = slot.kind
        try:
            slot.restart()
            given_up = None if slot.kind == kind else f"its new worker is a {slot.kind!r} device"
        except Exception as exc:  # WorkerLost, JobFailed, or the launch's own (OSError: fork out of memory)
            given_up = f"a new worker could not start: {type(exc).__name__}: {exc}"
        if self.stopping.is_set():
            given_up = _INTERRUPTED
        if given_up is not None:
            slot.stop()  # whatever started is not used
        with self.lock:
            if given_up is None:
                self.stats[slot.index].restarts += 1
                self.stats[slot.index].lost = None  # an earlier try to replace it failed; this one started
            else:
                self.stats[slot.index].lost = given_up
        return given_up

    def _replace_all(self, group: Sequence[Slot]) -> str | None:
        """`_replace` each worker of a split key's group: None when all started, else the first reason not."""
        reasons = [self._replace(slot) for slot in group]
        return next((why for why in reasons if why is not None), None)

    def _record(self, job: Job, outcome: KeyOutcome) -> None:
        with self.lock:
            self.outcomes[(job.index, job.kind)] = outcome
            if self.bar is not None:
                self.bar.update(1)
                done = {k: sum(1 for (_, kind) in self.outcomes if kind == k) for k in self.queues}
                counts = " | ".join(f"{k}: {n}" for k, n in done.items())
                self.bar.set_postfix_str(f"{counts} | busy {self.busy}/{len(self.slots)}")

    def _busy(self, change: int) -> None:
        with self.lock:
            self.busy += change


def _cache_for(tuned: Any, kind: str, search: Search | None) -> KernelCache:
    """A KernelCache of the kernel whose entries are filed under the device `kind` (the driver's tiers; none for a
    kernel that keeps its winners in memory only, compat's cache_results=False); `search` is the sweep's, so an entry
    of a weaker search is tuned again as a serving process with that Tuning would."""
    source = tuned.cache
    return KernelCache(
        tuned.name,
        lambda: source.source_hash,
        source.space_checksum,
        source.space_contains,
        identity=source.identity,
        key_fields=source.key_fields,
        device=kind,
        search=search,
        objective=source.objective,
        tiers=None if source.tiers else [],
    )


def _record_of(data: bytes) -> TuningRecord:
    from ..storage.entries import parse_record

    return parse_record(data, "the sweep worker's record")


def _lease_holder(cache: KernelCache, key: tuple, dtypes: tuple[str, ...]) -> str | None:
    """Who holds this entry's lease in a persistent tier now (another sweep, a serving process, another node),
    or None when every lease is free. A killed holder's lease is free (the OS released its lock; a Redis lease
    expires)."""
    entry = cache.entry(key, dtypes)
    for tier in cache.tiers:
        holder = tier.lease_holder(entry)
        if holder is not None:
            return f"{holder} (its {tier.name} lease)"
    return None


def _jsonable_key(key: tuple) -> list[Any]:
    import json

    from ..storage.entries import key_text

    return json.loads(key_text(key))


def _progress_bar(total: int, wanted: bool | None) -> Any:
    if wanted is None:
        wanted = sys.stderr.isatty() and env_progress()
    if not wanted:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc="autotune sweep", unit="key", file=sys.stderr)
