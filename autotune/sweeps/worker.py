"""One worker's side of a sweep (a local worker process or a Ray actor): it imports the kernel by module and
qualified name, builds one key's arguments from its maker on its own device, and tunes that key there with the
ordinary blocking path. Configs are measured under the kernel's isolation (`Tuning.isolate`; "auto" in a sweep
worker when neither the kernel nor AUTOTUNE_ISOLATE says):
a config that crashes or hangs costs itself (`crashed` / `timeout` in the record), not this worker.

The worker keeps no winner: its cache is a private temporary directory and the remote tier is off, so single
flight and every write happen in the driver (`api.py`), which files the record this worker returns (msgspec
JSON bytes) under this worker's device fingerprint.
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec

from ..config import Config
from ..errors import AutotuneError, NoValidConfigError
from ..kernel.call import made_args, need_grid
from ..kernel.identity import heuristic_kwargs
from ..options import Tuning
from ..record import Search, Trial
from ..storage.remote_config import set_remote_cache
from .scratch import claim_worker_dir

if TYPE_CHECKING:
    from ..decorator.autotuned import Autotuned

__all__ = [
    "WorkerSpec",
    "SweepWorker",
    "KeyInfo",
    "Maker",
    "MakerSet",
    "Share",
    "ShareResult",
    "WORKER_ENV",
    "tuned_search",
]

Maker = Callable[[], tuple[Sequence[Any], dict[str, Any]]]
"""An argument maker: a picklable callable returning (args, kwargs) for one shape, built on the current device."""

MakerSet = tuple[Maker, ...]
"""The makers of every call one config is tuned for (`Tuning.objective`): one sweep job."""


class KeyInfo(NamedTuple):
    """What the cache files one call (or set of calls) under, as `Autotuned.key_of` and `candidates` say; for a set
    (`Tuning.objective`), each call described (`describe_call`): an entry tuned for other calls is tuned again."""

    key: tuple
    dtypes: tuple[str, ...]
    candidates: str | None
    calls: tuple[str, ...] | None = None


Share = tuple[int, int] | list[dict[str, Any]]
"""One worker's share of a key split over several: (index, count), the candidates index, index + count, ...
(`shards.shard`), or the finalists (configs as dicts) to measure and refine side by side on this one device."""


class ShareResult(msgspec.Struct, kw_only=True):
    """What a share's tuning found: its trials (the configs of other shares `skipped`), and its own winner (None
    when every config of the share failed)."""

    trials: list[Trial]
    winner: Config | None = None


# What a worker's own environment must say whatever the driver's does: no progress bar of its own (the driver
# draws one for the sweep), no remote tier and no shared disk cache (the driver writes every winner).
WORKER_ENV = {"AUTOTUNE_PROGRESS": "0"}
# AUTOTUNE_MODE too: a serving deployment's "online" would have the worker not tune (the driver passes a blocking
# Tuning when the kernel's own says online).
_DROPPED_ENV = ("AUTOTUNE_REMOTE_CACHE", "AUTOTUNE_OFFLINE", "AUTOTUNE_DISABLE", "AUTOTUNE_FORCE", "AUTOTUNE_MODE")


@dataclass(frozen=True)
class WorkerSpec:
    """What every worker of one sweep is given: the kernel by name, the sweep's Tuning, the driver's sys.path."""

    module: str
    qualname: str
    file: str | None  # the kernel's source file: how a script's `__main__` is imported (`kernel_ref.import_object`)
    tuning: Tuning | None
    sys_path: tuple[str, ...]


class SweepWorker:
    """Tunes the keys a driver hands it, one at a time: `prepare(maker)` then `tune()`. `directory`: its private
    cache directory, kept by the driver for the slot (a replacement worker finds its crash journal there), else one
    of its own (`claim_worker_dir`)."""

    def __init__(self, spec: WorkerSpec, directory: str | None = None) -> None:
        for name in _DROPPED_ENV:
            os.environ.pop(name, None)
        os.environ.update(WORKER_ENV)
        # A sweep's configs run under isolation unless the kernel or the environment says otherwise: a config that
        # crashes then costs itself (`crashed`), not this worker and its key (the in-process default is a serving
        # process's, which must not double its memory; a sweep worker builds its own arguments).
        os.environ.setdefault("AUTOTUNE_ISOLATE", "auto")
        self.directory = directory or claim_worker_dir()
        os.environ["AUTOTUNE_CACHE_DIR"] = self.directory
        _follow_path(list(spec.sys_path))
        self.kernel, self.layers = _import_kernel(spec.module, spec.qualname, spec.file)
        if spec.tuning is not None:
            _retune(self.kernel, spec.tuning)
        # The driver forces (its `get_or_tune(force=...)`); this worker's cache is its slot's own, so a forced tuning
        # here would only skip the slot's crash journal, and a config that killed the worker would kill each
        # replacement too.
        self.kernel.tuning = self.kernel.tuning.replace(force=False)
        _no_remote_tier()
        self._bound: Any = None

    def fingerprint(self) -> str:
        """The device fingerprint this worker's winners are filed under (`storage.fingerprint`)."""
        from ..storage.fingerprint import device_fingerprint

        return device_fingerprint()

    def prepare(self, maker: Maker | MakerSet) -> KeyInfo:
        """Build one call's arguments from `maker` (every call's, for a set) on this worker's device; the key,
        dtypes and candidates (a set's: the configs prune= keeps for every call, which must all fall in one key)."""
        from ..engine.multi_call import describe_call

        if isinstance(maker, tuple):
            calls = [self._bind(m) for m in maker]
            bounds = [bound for bound, _ in calls]
            key, dtypes = self.kernel.key_of_calls(bounds)  # one key, or a CallError before the driver's lease
            self._bound = calls
            described: tuple[str, ...] | None = tuple(describe_call(bound.named) for bound in bounds)
            candidates = self.kernel.candidates_of_calls(bounds)[1]
        else:
            self._bound = self._bind(maker)
            key, dtypes = self.kernel.key_of(self._bound[0])
            described = None
            candidates = self.kernel.candidates(self._bound[0])[1]
        return KeyInfo(tuple(key), tuple(dtypes), candidates, described)

    def _bind(self, maker: Maker) -> tuple[Any, Any]:
        """(the bound call, its grid): a maker may return the launch grid in its kwargs (`grid=`), as for a kernel
        decorated without one."""
        said = f"sweep({self.kernel.name}, calls)"
        args, kwargs = made_args(maker, said)
        grid = kwargs.pop("grid", None)
        need_grid(self.kernel.name, self.kernel.recipe.get("grid"), grid, said)
        return self.kernel.bind(args, heuristic_kwargs(self.layers, args, kwargs), strict=True), grid

    def tune(self) -> bytes:
        """Tune the prepared key here; its TuningRecord as the JSON bytes of a cache entry."""
        from ..storage.entries import record_json

        if self._bound is None:
            raise AutotuneError("the sweep worker was asked to tune before any arguments were prepared")
        _no_remote_tier()  # a maker's module, imported since, may have set one
        bound, self._bound = self._bound, None
        if isinstance(bound, list):  # one config for every call (Tuning.objective)
            return record_json(self.kernel.tune_calls(bound)[0])
        _, record, how = self.kernel.select(*bound)
        if record is None:
            raise AutotuneError(
                f"{self.kernel.name} was not tuned in the sweep worker ({how}): a sweep tunes with the blocking "
                "path; give tuning=Tuning(mode='blocking') if the kernel's Tuning says mode='online'"
            )
        return record_json(record)

    def tune_share(self, share: Share) -> bytes:
        """Tune only this worker's `share` of the prepared key (a within-key split), writing no cache; its
        `ShareResult` as JSON. The prepared arguments stay, for the refinement of the finalists that may follow."""
        from .. import codec
        from ..engine.shards import shard

        if self._bound is None:
            raise AutotuneError("the sweep worker was asked to tune before any arguments were prepared")
        _no_remote_tier()
        if isinstance(share, tuple):
            index, count = share
            select: Callable[[list[Config]], Sequence[Config]] = lambda c: shard(c, index, count)  # noqa: E731
        else:
            finalists = [Config(c) for c in share]
            select = lambda c: [x for x in c if x in finalists]  # noqa: E731
        try:
            record = self.kernel.tune_selected(*self._bound, select=select)
            result = ShareResult(trials=list(record.trials), winner=record.winner)
        except NoValidConfigError as exc:
            result = ShareResult(trials=list(exc.trials))
        return codec.to_json(result)


def _no_remote_tier() -> None:
    """Turn the remote tier off in this worker: a script, kernel package or maker module may call set_remote_cache
    at its top level, run again here as it is imported, and the driver holds each key's Redis lease while this
    worker tunes it (and files the winner itself)."""
    set_remote_cache(None)


def _follow_path(parent_path: list[str]) -> None:
    """The driver's sys.path first, so the kernel's module and the makers import as they do in the driver."""
    if parent_path and sys.path[: len(parent_path)] != parent_path:
        sys.path[:] = parent_path + [p for p in sys.path if p not in parent_path]
        importlib.invalidate_caches()


def _import_kernel(module: str, qualname: str, file: str | None) -> tuple[Any, list[Any]]:
    """The autotuned kernel the driver's kernel names, and the `triton.heuristics` layers above it."""
    from ..kernel.identity import KernelRef, import_object, tuned_under

    with warnings.catch_warnings():  # what decorating warns of, the driver already said
        warnings.simplefilter("ignore")
        obj = import_object(KernelRef(module=module, qualname=qualname, file=file, line=None))
    found = tuned_under(obj)
    if found is None:
        raise AutotuneError(
            f"{module}.{qualname} is not an @autotune kernel: decorate the kernel where it is defined "
            "(@autotune above @triton.jit) so that its name holds the autotuned object"
        )
    return found


def _retune(kernel: Autotuned, tuning: Tuning) -> None:
    """Tune with the sweep's `tuning` instead of the kernel's own, checked as decorating checks it (its records
    keep that tuning's search)."""
    kernel.strategy, kernel.cache.search = tuned_search(kernel, tuning)
    kernel.tuning = tuning


def tuned_search(kernel: Any, tuning: Tuning) -> tuple[str, Search]:
    """The strategy `kernel` tunes with under `tuning` (an error as at decoration when it cannot), and the search
    its records keep (`record.search`), as decorating with `tuning` makes them."""
    from ..engine.search import check_strategy, search_of

    strategy = check_strategy(tuning, kernel.space, kernel.space_size, kernel.name, prune=kernel.prune is not None)
    return strategy, search_of(strategy, tuning)
