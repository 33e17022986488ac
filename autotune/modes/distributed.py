"""Agreement across `torch.distributed` ranks: every rank launches the same config, tuning is shared.

`Tuning(distributed=...)` picks how the ranks of a job agree on a key's winner:

- ``"shard"``: the candidate configs (the space after `prune=`) are dealt round-robin to the ranks
  (candidate ``i`` goes to rank ``i % world_size``); each rank compiles and measures only its own,
  every rank's trials are gathered with `all_gather_object`, and each rank takes the lowest median
  of the merged trials, so all ranks pick the same winner from the same data.
- ``"rank0"``: rank 0 tunes every config alone; the others wait for its winner
  (`broadcast_object_list`).
- ``"off"``: every rank tunes on its own, as a single process does (winners may differ).
- ``None`` (the default): ``"rank0"`` when a process group is initialised with more than one rank,
  else off. An explicit mode without a process group (or with one rank) tunes locally, so the same
  script runs with and without `torchrun`.

What happens when a key misses this rank's memory (a memory hit is local and costs nothing)::

    1. arrival     gloo: monitored_barrier(timeout=the group's timeout), so that a rank that never
                   reaches this call is named (rank 0's error lists the missing ranks); other
                   backends skip this step.
    2. handshake   all_gather_object of (kernel, key, dtypes, mode, space, source): ranks at
                   different keys (or kernels, or spaces) raise at once, all of them, rather than
                   pairing unrelated collectives.
    3. decision    rank 0 alone consults the disk cache, through the ordinary single flight
                   (`KernelCache.get_or_tune`: memory, disk, the entry's file lock, disk again).
                   A cached winner is broadcast to the others. On a miss, rank 0 tunes while it
                   holds the file lock: in "rank0" mode it tunes everything, then broadcasts the
                   winner; in "shard" mode it broadcasts "tune", and all ranks run step 4.
                   Rank 0's failure is broadcast too, so the others raise instead of waiting.
    4. shard       (shard mode) each rank tunes its shard; all_gather_object of the trials (or of
                   the rank's error); every rank merges them the same way and takes the winner,
                   or raises the same NoValidConfigError / DistributedTuningError.

Why this shape:

- The decision "use the cache or tune" must be common: with per-rank caches, rank 0 could hit
  while rank 1 misses and enters a collective that rank 0 never joins. Only rank 0's cache decides.
- Only rank 0 reads and writes the disk cache in a distributed mode. The collective *is* the single
  flight among the job's ranks; the file lock (held by rank 0 only, for the whole tuning) is the
  single flight against other processes and jobs sharing the directory. The other ranks never touch
  the file lock, so they cannot block on it outside the collective (no lock/collective deadlock: a
  rank 0 waiting for another job's lock only delays its own job's collective, and that job's rank 0
  does not wait on this job). Non-zero ranks keep the agreed record in memory only, even when their
  cache directory is another one: a later distributed run asks rank 0's cache anyway, and a single
  writer keeps entries from diverging; move winners to other machines with export/import.
- Hangs are not silent: each collective runs under the process group's timeout (the one given to
  `init_process_group(timeout=...)`), and its failure is raised as a `DistributedTuningError` naming
  this rank, the kernel, the key, the mode and the step. The timeout must exceed the longest tuning
  (the others wait while rank 0 or the slowest shard tunes).

Backends: gloo works on CPUs (the interpreter) and GPUs. On nccl, object collectives travel through
the current CUDA device, so every rank must call `torch.cuda.set_device(local_rank)` before its first
kernel call (a warning says so when the current device differs from LOCAL_RANK). For CPU-side
agreement and named missing ranks on a GPU job, give autotune a gloo group:
`autotune.distributed.set_process_group(dist.new_group(backend="gloo"))`.

Shard mode compares medians measured by different ranks, so it assumes identical devices; use
"rank0" when the ranks' devices or their load differ.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ..engine.process_group import Mode, active_mode, chosen_group, group_timeout, set_process_group
from ..engine.shards import merge_shards, no_valid_message, shard, shard_winner
from ..errors import AutotuneError, DistributedTuningError, NoValidConfigError
from ..fork_safety import reset_in_forked_child
from ..kernel.call import Found
from ..record import Trial, TrialStatus, TuningRecord, Where
from ..space.spaces import Config
from ..storage.counters import count, count_tuning
from ..storage.entries import key_text
from ..storage.kernel_cache import ForceBaseline, KernelCache

__all__ = [
    "DistributedTuningError",
    "Agreement",
    "active_mode",
    "shard",
    "agree",
    "agree_offline",
    "agreements",
    "set_process_group",
]

logger = logging.getLogger("autotune")

# The decorator's tuning callback: `tune(select)` tunes the configs `select(candidates)` keeps (all when
# `select` is None) and returns the record, or raises NoValidConfigError when every one of them failed.
Selector = Callable[[list[Config]], Sequence[Config]]
TuneFn = Callable[[Selector | None], TuningRecord]


@dataclass(frozen=True)
class Agreement:
    """How the ranks agreed on one key's winner (see `agreements()`); for logs and tests.

    `source` is how rank 0 found the winner: "memory", "disk", "remote" or "tuned". `measured_by` maps each
    config measured in this agreement to the rank that measured it (empty when the winner came from
    rank 0's cache).
    """

    kernel: str
    key: tuple
    dtypes: tuple
    mode: str
    rank: int
    world_size: int
    source: str
    winner: Config
    measured_by: dict[Config, int] = field(default_factory=dict)
    seconds: float = 0.0


# ------------------------------------------------------------------------------------------ settings

_AGREE_LOCK = threading.Lock()  # one agreement at a time per process: collectives must pair up


@reset_in_forked_child
def _free_agreement_lock_in_child() -> None:  # held by a thread that did not survive the fork
    global _AGREE_LOCK
    _AGREE_LOCK = threading.Lock()


_TLS = threading.local()
_AGREEMENTS: dict[tuple, Agreement] = {}
_AGREEMENTS_LOCK = threading.Lock()
_warned_device = False


def agreements(kernel: object = None) -> list[Agreement]:
    """The latest agreement of each (kernel, key, dtypes) made by this process, oldest first;
    `kernel` (a decorated kernel or its name) keeps that kernel's."""
    name = kernel if isinstance(kernel, str) or kernel is None else getattr(kernel, "name", kernel)
    with _AGREEMENTS_LOCK:
        return [a for a in _AGREEMENTS.values() if name is None or a.kernel == name]


# ------------------------------------------------------------------------------------------ the agreement


def agree(
    cache: KernelCache,
    key: tuple,
    dtypes: tuple,
    mode: Mode,
    tune: TuneFn,
    *,
    force: bool = False,
    candidates: str | None = None,
    lock_timeout_s: float | None = None,
    prune_error: BaseException | None = None,
    calls: list[str] | None = None,
    baseline: ForceBaseline | None = None,
) -> tuple[TuningRecord, Found]:
    """The record every rank launches for (key, dtypes), and how rank 0 found it ("memory", "disk",
    "tuned"). Every rank of the group must call this for the same key (see the module docstring).
    `lock_timeout_s` bounds rank 0's wait for another process's lock on the entry, as without a group.
    `prune_error`: what this rank's prune= raised; told at the handshake, so every rank raises together (this rank
    its own error, the others a DistributedTuningError naming it), in "rank0" mode as in "shard".
    `calls`: a `Tuning.objective` tuning's calls as the record lists them; the ranks must give the same set.
    `baseline`: with `force`, what memory held when the call began (`KernelCache.force_baseline`, read before
    prune=), else read here, before this call waits for the process's round: a winner another thread agreed on
    meanwhile is then fresh (taken), not one to tune again, as without a group.

    A hit in this rank's memory returns at once without communicating (`force` skips it). Raises
    NoValidConfigError on every rank when no config ran on any rank, and DistributedTuningError when
    the ranks cannot agree.
    """
    dtypes = tuple(dtypes)
    if force and baseline is None:
        baseline = cache.force_baseline(key, dtypes)  # before the wait for the round (another thread's agreement)
    if not force:
        record = cache.in_memory(key, dtypes)
        if record is not None:
            count(cache.kernel_name, hits=1)
            return record, "memory"
    with _one_round(cache, key, dtypes, mode, candidates, lock_timeout_s, prune_error, calls) as rnd:
        if not force:
            record = cache.in_memory(key, dtypes)
            if record is not None:  # another thread of this process agreed on it meanwhile
                count(cache.kernel_name, hits=1)
                return record, "memory"
        rnd.baseline = baseline
        return rnd.run(tune, force)


def agree_offline(
    cache: KernelCache,
    key: tuple,
    dtypes: tuple,
    mode: Mode,
    *,
    candidates: str | None = None,
    prune_error: BaseException | None = None,
    winner_among: Sequence[Config] | None = None,
) -> TuningRecord | None:
    """Under AUTOTUNE_OFFLINE=1 (never tune): rank 0's stored record for (key, dtypes), sent to every rank, or None
    on every rank when rank 0 has none, so all launch the same config (the winner, else the same fallback) even
    when only some nodes hold the entry. Every rank of the group must call this for the same key. `prune_error`:
    as `agree`'s, told at the handshake. `winner_among`: rank 0's, as `KernelCache.peek`'s (a `Tuning.objective`
    kernel's launch: rank 0's prune= must keep the entry's winner)."""
    dtypes = tuple(dtypes)
    record = cache.in_memory(key, dtypes)
    if record is not None:
        return record
    with _one_round(cache, key, dtypes, mode, candidates, prune_error=prune_error) as rnd:
        return rnd.run_offline(winner_among)


@contextmanager
def _one_round(
    cache: KernelCache,
    key: tuple,
    dtypes: tuple,
    mode: Mode,
    candidates: str | None,
    lock_timeout_s: float | None = None,
    prune_error: BaseException | None = None,
    calls: list[str] | None = None,
) -> Iterator[_Round]:
    """The process's one agreement in progress (collectives must pair up across ranks), known to this thread so
    that an agreement started from inside it (a setup=, verify= or prune= calling another kernel) is refused."""
    outer = getattr(_TLS, "round", None)
    if outer is not None:
        raise AutotuneError(
            f"{cache.kernel_name} key {key} needs a distributed agreement while {outer.kernel} key {outer.key} is "
            f"being agreed on this thread (called from its setup=, verify= or prune=?). Call {cache.kernel_name} "
            "once before, or give it Tuning(distributed='off')."
        )
    with _AGREE_LOCK:
        rnd = _Round(cache, key, dtypes, mode, candidates, lock_timeout_s)
        rnd.prune_error = prune_error
        rnd.calls = calls
        _TLS.round = rnd
        try:
            yield rnd
        finally:
            _TLS.round = None


_PHASES = {
    "arrival": "waiting for every rank to reach this kernel call",
    "handshake": "comparing what each rank is about to tune",
    "decision": "waiting for rank 0's decision or winner",
    "shard": "gathering every rank's shard of trials",
}


class _Round:
    """One agreement on one key: who this rank is, the group, and the steps of the protocol."""

    def __init__(
        self,
        cache: KernelCache,
        key: tuple,
        dtypes: tuple,
        mode: Mode,
        candidates: str | None = None,
        lock_timeout_s: float | None = None,
    ) -> None:
        self.candidates = candidates  # checksum of the configs prune= kept (None without prune=)
        self.prune_error: BaseException | None = None  # what this rank's prune= raised
        self.calls: list[str] | None = None  # a Tuning.objective tuning's calls (the record's `calls`)
        self.baseline: ForceBaseline | None = None  # a forced round's: what memory held when its call began
        self.offline = False  # an AUTOTUNE_OFFLINE round (`run_offline`): read rank 0's record, never tune
        self.lock_timeout_s = lock_timeout_s
        import torch.distributed as dist

        self.dist = dist
        self.cache = cache
        self.kernel = cache.kernel_name
        self.key = key
        self.dtypes = dtypes
        self.mode = mode
        self.group = chosen_group()
        self.rank = dist.get_rank(self.group)
        self.world = dist.get_world_size(self.group)
        self.backend = str(dist.get_backend(self.group))
        self.timeout = group_timeout(dist, self.group)
        self.src = 0 if self.group is None else dist.get_global_rank(self.group, 0)
        self.started = time.perf_counter()

    # -- the protocol ---------------------------------------------------------------------------------

    def _meet(self) -> None:
        """The steps every round begins with: the device check, every rank's arrival, the handshake."""
        self._check_device()
        self._arrive()
        self._handshake()

    def run(self, tune: TuneFn, force: bool) -> tuple[TuningRecord, Found]:
        self._meet()
        if self.rank == 0:
            record, how, measured_by = self._lead(tune, force)
        else:
            record, how, measured_by = self._follow(tune)
        self._note(record, how, measured_by)
        return record, how

    def run_offline(self, winner_among: Sequence[Config] | None = None) -> TuningRecord | None:
        """`agree_offline`'s round: rank 0 reads its tiers without tuning and sends what it found, or a miss."""
        self.offline = True
        self._meet()
        if self.rank == 0:
            record = self.cache.peek(self.key, self.dtypes, self.candidates, winner_among=winner_among)
            self._broadcast(
                {"kind": "record", "record": record, "how": "cache"} if record is not None else {"kind": "offline-miss"}
            )
        else:
            decision = self._broadcast(None)
            kind = decision.get("kind") if isinstance(decision, dict) else None
            if kind not in ("record", "offline-miss"):
                raise DistributedTuningError(self._where() + f": unexpected decision from rank 0: {decision!r}")
            record = decision["record"] if kind == "record" else None
            if record is not None:
                self.cache.remember(self.key, self.dtypes, record)
        if record is not None:
            self._note(record, "cache", {})
        return record

    def _lead(self, tune: TuneFn, force: bool) -> tuple[TuningRecord, Found, dict]:
        """Rank 0: decide through the cache's single flight, tune (alone or with the others), tell them."""
        told = False
        measured_by: dict[Config, int] = {}

        def tune_for_cache() -> TuningRecord:
            nonlocal told, measured_by
            if self.mode == "rank0":
                record = tune(None)
                measured_by = {t.config: 0 for t in record.trials if t.status is not TrialStatus.SKIPPED}
                return record
            told = True
            self._broadcast({"kind": "tune"})
            record, measured_by = self._shard_round(tune)
            return record

        try:
            record, how = self.cache.get_or_tune(
                self.key,
                self.dtypes,
                tune_for_cache,
                force=force,
                candidates=self.candidates,
                lock_timeout_s=self.lock_timeout_s,
                baseline=self.baseline,
            )
        except BaseException as exc:
            if not told:  # the others wait for a decision: give them this failure instead of a timeout
                try:
                    self._broadcast(_error_payload(exc))
                except Exception:
                    pass
            raise
        if not told:
            self._broadcast({"kind": "record", "record": record, "how": how})
        return record, how, measured_by

    def _follow(self, tune: TuneFn) -> tuple[TuningRecord, Found, dict]:
        """Ranks other than 0: do what rank 0 decided; keep the agreed record in memory."""
        decision = self._broadcast(None)
        kind = decision.get("kind") if isinstance(decision, dict) else None
        if kind == "record":
            record, how = decision["record"], decision["how"]
            self.cache.remember(self.key, self.dtypes, record)
            counter = {"memory": "hits", "disk": "disk_hits", "remote": "remote_hits"}.get(how, "misses")
            count(self.kernel, **{counter: 1})
            measured_by = (
                {t.config: 0 for t in record.trials if t.status is not TrialStatus.SKIPPED} if how == "tuned" else {}
            )
            return record, how, measured_by
        if kind == "tune":
            record, measured_by = self._shard_round(tune)
            self.cache.remember(self.key, self.dtypes, record)
            count_tuning(self.kernel, record)
            return record, "tuned", measured_by
        if kind == "error":
            if decision.get("trials") is not None:
                raise NoValidConfigError(decision["message"], decision["trials"])
            raise DistributedTuningError(
                self._where() + f": rank 0 failed before the ranks could agree: {decision['message']}"
            )
        raise DistributedTuningError(self._where() + f": unexpected decision from rank 0: {decision!r}")

    def _shard_round(self, tune: TuneFn) -> tuple[TuningRecord, dict[Config, int]]:
        """Every rank: tune this rank's shard, gather all shards, merge, pick the same winner everywhere."""
        started = time.perf_counter()
        payload, local_error, where = self._tune_own_shard(tune)
        gathered = self._all_gather(payload, "shard")
        self._check_shards(gathered, local_error)
        merged, measured_by = merge_shards(gathered)
        ok = [t for t in merged if t.ok]
        if not ok:
            raise NoValidConfigError(no_valid_message(self.kernel, merged, measured_by, self.world), merged)
        winner = shard_winner(merged, gathered)  # the fastest of the ranks' own winners, the same on every rank
        record = self.cache.new_record(
            self.key,
            self.dtypes,
            winner=winner,
            trials=merged,
            tuning_s=time.perf_counter() - started,
            candidates=self.candidates,
            where=where,
            calls=self.calls,
        )
        if self.rank == 0:
            from ..reporting.lines import emit

            emit(record, cache_hit=False)
        return record, measured_by

    def _tune_own_shard(self, tune: TuneFn) -> tuple[dict[str, Any], BaseException | None, Where | None]:
        """(what this rank sends the others: its trials, winner, candidates and error; that error; where its
        trials ran, as the other ranks' did: one Tuning)."""
        assigned: list[Config] = []
        seen: list[Config] = []

        def select(candidates: list[Config]) -> list[Config]:
            seen[:] = candidates
            assigned[:] = shard(candidates, self.rank, self.world)
            return assigned

        trials: list[Trial] | None = None
        own_winner: Config | None = None
        where = None
        local_error: BaseException | None = None
        try:
            shard_record = tune(select)
            trials, own_winner, where = list(shard_record.trials), shard_record.winner, shard_record.where
        except NoValidConfigError as exc:  # every config of this shard failed: still part of the agreement
            trials = list(exc.trials)
        except Exception as exc:
            local_error = exc
        payload = {
            "rank": self.rank,
            "trials": trials,
            "winner": own_winner,
            "candidates": list(seen),
            "error": None if local_error is None else f"{type(local_error).__name__}: {local_error}",
        }
        return payload, local_error, where

    def _check_shards(self, gathered: list[dict[str, Any]], local_error: BaseException | None) -> None:
        """Raise when any rank's tuning raised (this rank's own error as itself); warn when prune= kept different
        configs on different ranks."""
        failed = [p for p in gathered if p["error"] is not None]
        if failed:
            if local_error is not None:
                raise local_error
            detail = "; ".join(f"rank {p['rank']}: {p['error']}" for p in failed)
            raise DistributedTuningError(self._where() + f": tuning raised on another rank: {detail}")
        if any(p["candidates"] != gathered[0]["candidates"] for p in gathered):
            # prune= kept different configs on different ranks (it looked at rank-specific data?): the shards
            # overlap or miss configs. The merge is still the same on every rank, so they still agree.
            warnings.warn(
                self._where()
                + ": prune= kept different configs on different ranks ("
                + "; ".join(f"rank {p['rank']}: {len(p['candidates'])}" for p in gathered)
                + "); some configs were measured twice or not at all",
                stacklevel=3,  # the caller of _shard_round
            )

    # -- steps ------------------------------------------------------------------------------------------

    def _check_device(self) -> None:
        """nccl object collectives use the current CUDA device: warn once if it is not LOCAL_RANK's."""
        global _warned_device
        if "nccl" not in self.backend or _warned_device:
            return
        local = os.environ.get("LOCAL_RANK")
        try:
            import torch

            if local is None or not torch.cuda.is_available() or int(local) >= torch.cuda.device_count():
                return
            current = torch.cuda.current_device()
        except Exception:
            return
        if current != int(local):
            _warned_device = True
            warnings.warn(
                f"autotune: rank {self.rank} agrees over nccl with cuda:{current} current but "
                f"LOCAL_RANK={local}; nccl object collectives need each rank on its own device: call "
                f"torch.cuda.set_device({local}) before launching autotuned kernels",
                stacklevel=5,
            )

    def _arrive(self) -> None:
        if self.backend != "gloo":
            return
        with self._guard("arrival"):
            self.dist.monitored_barrier(group=self.group, timeout=self.timeout, wait_all_ranks=True)

    def _handshake(self) -> None:
        mine = {
            "kernel": self.kernel,
            "key": key_text(self.key),
            "dtypes": [str(d) for d in self.dtypes],
            "mode": self.mode,
            "space": self.cache.space_checksum,
            "source": self.cache.source_hash,
            "calls": None if self.calls is None else sorted(self.calls),
            "offline": self.offline,
        }
        error = self.prune_error
        hellos = self._all_gather(
            {**mine, "pruned": None if error is None else f"{type(error).__name__}: {error}"}, "handshake"
        )
        pruned = [f"rank {r}: {text}" for r, text in enumerate([h.pop("pruned") for h in hellos]) if text is not None]
        offline = [r for r, h in enumerate(hellos) if h["offline"]]
        if offline and len(offline) < len(hellos):
            raise DistributedTuningError(
                self._where() + f": AUTOTUNE_OFFLINE=1 on rank(s) {', '.join(map(str, offline))} only, not on "
                f"rank(s) {', '.join(str(r) for r in range(len(hellos)) if r not in offline)}: the ones offline never "
                "tune, the others would. Set AUTOTUNE_OFFLINE the same on every rank of the job."
            )
        differing = [r for r, h in enumerate(hellos) if h != hellos[0]]
        if differing:
            other_calls = any(hellos[r]["calls"] != hellos[0]["calls"] for r in differing)
            lines = "; ".join(
                f"rank {r}: {h['kernel']} key {h['key']} {h['dtypes']} mode {h['mode']}"
                + ("" if h["space"] == hellos[0]["space"] else " (another search space)")
                + ("" if h["source"] == hellos[0]["source"] else " (another kernel source)")
                + (f" calls {h['calls']}" if other_calls else "")
                for r, h in enumerate(hellos)
                if r == 0 or r in differing
            )
            fix = (
                "A Tuning(objective=...) kernel is tuned for one set of calls: give every rank's warmup or "
                "tune_calls the same calls"
                if other_calls
                else "Every rank must call an autotuned kernel with the same key in the same order"
            )
            raise DistributedTuningError(
                self._where() + f": the ranks are not tuning the same thing ({lines}). {fix}; where shapes differ "
                "per rank use Tuning(distributed='off')."
            )
        if error is not None:
            raise error
        if pruned:  # another rank's prune= raised: no rank tunes this key, each says why
            raise DistributedTuningError(self._where() + f": prune= raised on another rank: {'; '.join(pruned)}")

    # -- collectives --------------------------------------------------------------------------------------

    def _all_gather(self, obj: Any, phase: str) -> list[Any]:
        out: list[Any] = [None] * self.world
        with self._guard(phase):
            self.dist.all_gather_object(out, obj, group=self.group)
        return out

    def _broadcast(self, obj: Any) -> Any:
        box = [obj]
        with self._guard("decision"):
            self.dist.broadcast_object_list(box, src=self.src, group=self.group)
        return box[0]

    @contextmanager
    def _guard(self, phase: str) -> Iterator[None]:
        """Turn a collective's failure or timeout into a DistributedTuningError that says who and where."""
        try:
            yield
        except AutotuneError:
            raise
        except Exception as exc:
            raise DistributedTuningError(self._explain(phase, exc)) from exc

    def _where(self) -> str:
        return (
            f"autotune: rank {self.rank} of {self.world}, {self.kernel} key {self.key} {list(self.dtypes)}, "
            f"distributed={self.mode!r}"
        )

    def _explain(self, phase: str, exc: BaseException) -> str:
        text = str(exc).strip()
        seconds = self.timeout.total_seconds()
        head = (
            f"{self._where()}: {_PHASES[phase]} failed after {time.perf_counter() - self.started:.1f} s "
            f"(the process group's timeout is {seconds:g} s)"
        )
        missing = re.search(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier", text)
        if missing:
            hint = (
                f"rank(s) {missing.group(1).strip()} did not reach this call: every rank must call the kernel "
                "with the same key in the same order (a rank that skips the call, has it cached in memory "
                "when the others do not, hung or died, leaves the others here)"
            )
        elif phase == "arrival":
            hint = (
                "rank 0 did not answer: it did not reach this call, hung or died, or it found another rank "
                "missing (rank 0's error names the missing ranks)"
            )
        elif phase == "decision":
            hint = (
                "rank 0 did not send its decision in time: it may be tuning (or waiting for another process's "
                "tuning of this key through the cache lock) longer than the timeout, or it hung or died; "
                "raise init_process_group(timeout=...) above the longest tuning"
            )
        elif phase == "shard":
            hint = (
                "a rank did not deliver its shard in time: its tuning may take longer than the timeout, or it "
                "hung or died"
            )
        else:
            hint = "a rank did not take part: it hung, died, or is at another call"
        return f"{head}: {hint}. ({type(exc).__name__}: {text.splitlines()[0] if text else ''})"

    def _note(self, record: TuningRecord, how: str, measured_by: dict[Config, int]) -> None:
        agreement = Agreement(
            kernel=self.kernel,
            key=self.key,
            dtypes=self.dtypes,
            mode=self.mode,
            rank=self.rank,
            world_size=self.world,
            source=how,
            winner=record.winner,
            measured_by=dict(measured_by),
            seconds=time.perf_counter() - self.started,
        )
        with _AGREEMENTS_LOCK:
            _AGREEMENTS.pop((self.kernel, self.key, self.dtypes), None)
            _AGREEMENTS[(self.kernel, self.key, self.dtypes)] = agreement
        counts: dict[int, int] = {}
        for r in measured_by.values():
            counts[r] = counts.get(r, 0) + 1
        logger.info(
            "autotune: %s key %s: ranks agree on %s (distributed=%r, %d ranks, %s%s)",
            self.kernel,
            self.key,
            dict(record.winner),
            self.mode,
            self.world,
            how,
            "; measured " + ", ".join(f"{n} on rank {r}" for r, n in sorted(counts.items())) if counts else "",
        )


def _error_payload(exc: BaseException) -> dict:
    """What rank 0 sends when it failed before a decision: NoValidConfigError keeps its trials."""
    if isinstance(exc, NoValidConfigError):
        return {"kind": "error", "message": str(exc), "trials": list(exc.trials)}
    return {"kind": "error", "message": f"{type(exc).__name__}: {exc}", "trials": None}
