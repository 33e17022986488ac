"""`autotune.warmup(kernel, calls)`: tune the keys a model will meet, before it serves or is captured into a CUDA
graph, so that no request pays for tuning (and a serving process may run with `AUTOTUNE_OFFLINE=1`).

Each of `calls` is an argument maker: a picklable callable returning `(args, kwargs)` for one call of the kernel
(`kwargs` holds `grid=` for a kernel decorated without one, such as an `autotune.compat` kernel). A key already
stored in a tier (memory, disk, Redis) is read into memory and skipped, unless a weaker search than the Tuning's
found it; any other is tuned in this process on the blocking path, as a first call would tune it (isolation,
distributed agreement and the cache tiers as usual).
`autotune.sweep` takes the same makers to worker processes and Ray actors; this is its in-process form.

A kernel tuned with `Tuning(objective=...)` gets one config per key for all the calls of that key, each config
measured on every one of them (`Autotuned.tune_calls`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from multiprocessing.reduction import ForkingPickler
from typing import Any, TypeVar

from ..compat import Autotuner as CompatAutotuner
from ..decorator.autotuned import Autotuned
from ..engine.multi_call import check_objective
from ..engine.process_group import active_mode
from ..errors import CallError, OptionError, UserCodeError
from ..kernel.call import Found, argument_makers, made_args, need_grid
from ..kernel.identity import heuristic_kwargs, wrapper_layers
from ..kernel.pruning import MAX_RERUNS, RerunCall
from ..modes.distributed import Agreement, agreements
from ..options import Tuning, env_disable, env_force, env_offline, online_mode
from ..record import TuningRecord
from ..storage.kernel_cache import KernelCache

__all__ = ["ArgumentMaker", "WarmedKey", "WarmupReport", "warmup"]

ArgumentMaker = Callable[[], tuple[tuple, dict[str, Any]]]
_T = TypeVar("_T")


@dataclasses.dataclass(frozen=True)
class WarmedKey:
    """One key a warm-up met: its values, the dtypes of its tensor arguments, and the seconds it took."""

    key: tuple
    dtypes: tuple[str, ...]
    seconds: float


@dataclasses.dataclass(frozen=True)
class WarmupReport:
    """What `warmup` did: the keys it tuned, those already cached, and those launched untuned because a single
    config was left to them (an `autotune.compat` kernel's one config: nothing to tune, nothing stored); each
    distinct key once, in call order."""

    kernel: str
    tuned: tuple[WarmedKey, ...]
    cached: tuple[WarmedKey, ...]
    seconds: float
    untuned: tuple[WarmedKey, ...] = ()

    def __str__(self) -> str:
        untuned = f", {len(self.untuned)} untuned (one config)" if self.untuned else ""
        return (
            f"{self.kernel}: {len(self.tuned)} key{'s' * (len(self.tuned) != 1)} tuned, {len(self.cached)} "
            f"already cached{untuned} ({self.seconds:.3g} s)"
        )


def warmup(
    kernel: object,
    calls: Iterable[ArgumentMaker],
    *,
    tuning: Tuning | str | dict | None = None,
    in_process: bool | None = None,
) -> WarmupReport:
    """Tune `kernel` (an `@autotune` or `autotune.compat` kernel) for the key of each call that `calls` makes,
    skipping keys already cached; `tuning=` tunes under other settings than the kernel's (native kernels), always
    on the blocking path. Where GPUs are visible, the keys are tuned by `autotune.sweep` with the local executor,
    one worker process per GPU; `in_process=True` tunes them in this process instead (no second CUDA context, no
    copies: the choice for a serving process short of memory), as on a machine without a GPU; an autotune.compat
    kernel of one config is always launched here, untuned. Returns a `WarmupReport`."""
    launcher, engine, layers = _engine_of(kernel)
    if env_offline() or env_disable():
        switch = "AUTOTUNE_OFFLINE" if env_offline() else "AUTOTUNE_DISABLE"
        raise OptionError(
            f"autotune.warmup({engine.name}, ...) tunes, and {switch}=1 forbids tuning in this process: run the "
            f"warm-up in a process without {switch} (and serve with it), or unset it before warming up"
        )
    if in_process is not None and not isinstance(in_process, bool):
        raise OptionError(f"autotune.warmup({engine.name}, ...): in_process={in_process!r}: give True, False or None")
    calls = argument_makers(calls, f"autotune.warmup({engine.name}, calls)")
    if type(engine) is not Autotuned and (tuning is not None or online_mode(engine.tuning)):
        raise _compat_refusal(engine)  # on every route: a warm-up refused without a GPU is refused with one
    if not (in_process if in_process is not None else visible_gpus() == 0) and not _one_config(launcher):
        return _warm_up_over_gpus(kernel, engine, calls, tuning)
    force = env_force() or (tuning is not None and Tuning.coerce(tuning).force) or engine.tuning.force
    given = Tuning.coerce(tuning).objective if tuning is not None else engine.tuning.objective
    if given is not None or engine.tuning.objective is not None:
        check_objective(engine.name, engine.tuning.objective, given, f"autotune.warmup({engine.name}, ...)")
        return _warm_up_together(kernel, engine, layers, calls, tuning, force)
    tune, judge = _tuner_for(launcher, engine, tuning)
    # Under a process group only rank 0's tiers decide (modes/distributed.py): every rank takes the kernel's path
    # to the agreement, where a rank that skipped a key its own disk holds would leave the others waiting.
    agreeing = active_mode(engine.tuning.distributed) is not None
    began, seen = time.perf_counter(), set()
    tuned: list[WarmedKey] = []
    cached: list[WarmedKey] = []
    untuned: list[WarmedKey] = []
    for maker in calls:
        args, kwargs = made_args(maker, f"autotune.warmup({engine.name}, calls)")
        grid = kwargs.pop("grid", None)
        kwargs = heuristic_kwargs(layers, args, kwargs)
        bound = engine.bind(args, kwargs)
        key, dtypes = engine.key_of(bound)
        if (key, dtypes) in seen:
            continue
        seen.add((key, dtypes))
        start = time.perf_counter()
        if agreeing:
            agreed = _latest_agreement(engine, key, dtypes)
            tune(args, kwargs, grid, key, dtypes)
            now = _latest_agreement(engine, key, dtypes)
            now_tuned = now is not agreed and now is not None and now.source == "tuned"
        else:
            checksum = None
            if not force:
                as_call = functools.partial(_as_call, launcher, args, kwargs, grid)
                engine, checksum = _settled(kernel, functools.partial(_checksum_of, bound, as_call))
            held = engine.cache.memory.lookup(key, dtypes)
            # judge_search: an entry of a weaker search than the Tuning's is tuned again, as a first call tunes it
            stored = None if force else (judge or engine.cache).peek(key, dtypes, checksum, judge_search=True)
            if stored is not None and judge is not None:
                engine.cache.remember(key, dtypes, stored)
            if stored is None:
                tune(args, kwargs, grid, key, dtypes)
            # tuned when memory holds a new record: AUTOTUNE_FORCE set after this process met the key serves its
            # winner
            holds = engine.cache.memory.lookup(key, dtypes)
            now_tuned = stored is None and holds is not held
            if stored is None and holds is None:  # launched without tuning (one config): no tier holds the key
                untuned.append(WarmedKey(key, tuple(dtypes), time.perf_counter() - start))
                continue
        (tuned if now_tuned else cached).append(WarmedKey(key, tuple(dtypes), time.perf_counter() - start))
    return WarmupReport(engine.name, tuple(tuned), tuple(cached), time.perf_counter() - began, tuple(untuned))


def _settled(kernel: object, step: Callable[[Autotuned], _T]) -> tuple[Autotuned, _T]:
    """(the engine, `step(engine)`), where `step` runs the kernel's prune outside a launch. An `autotune.compat`
    kernel's early_config_prune that changed a config in place asks for the call again (`RerunCall`), as Triton's
    matmul_perf_model does: the configs are indexed anew (compat's `reindex`) and `step` runs again on the
    rebuilt engine, as compat's own `run` does."""
    for _ in range(MAX_RERUNS):
        launcher, engine, _ = _engine_of(kernel)
        try:
            return engine, step(engine)
        except RerunCall:
            if type(engine) is Autotuned:  # asked only by compat's prune, whose kernel re-indexes
                raise
            launcher.reindex()  # compat's: the configs indexed anew and its engine rebuilt over them
        except UserCodeError as exc:  # compat's hooks raise their own error, as triton.autotune does
            if type(engine) is Autotuned:
                raise
            raise exc.original from None
    raise OptionError(
        f"autotune.warmup({engine.name}, ...): early_config_prune changed the configs in place on each of "
        f"{MAX_RERUNS} runs, so they never settle; return a subset of the configs unchanged, and set the values "
        "you want on kernel.configs once, before the warm-up"
    )


def _as_call(launcher: Any, args: tuple, kwargs: dict[str, Any], grid: Any) -> AbstractContextManager[Any]:
    """Where the kernel's prune runs outside a launch: an `autotune.compat` kernel's prune sees this call's
    arguments as its `run` gives them (Triton's nargs and kwargs); a native kernel's needs nothing."""
    return launcher.as_call(args, kwargs, grid) if isinstance(launcher, CompatAutotuner) else contextlib.nullcontext()


def _checksum_of(bound: Any, as_call: Callable[[], AbstractContextManager[Any]], engine: Autotuned) -> str | None:
    with as_call():
        return engine.candidates(bound)[1]


def _tune_together(
    group: list[tuple[Any, Any]],
    force: bool,
    as_calls: list[Callable[[], AbstractContextManager[Any]]],
    engine: Autotuned,
) -> tuple[TuningRecord, Found]:
    """Tune one key's calls together, in the first call's context (an autotune.compat kernel's configs copied by its
    prune keep their pre_hook in the trials, as before); prune= runs on each call in that call's (`as_calls`)."""
    with as_calls[0]():
        pruning_as = [contextlib.nullcontext, *as_calls[1:]]  # the first call's prune sets what its context holds
        return engine.tune_calls(group, force=force, pruning_as=pruning_as)


def _latest_agreement(engine: Autotuned, key: tuple, dtypes: tuple) -> Agreement | None:
    found = [a for a in agreements(engine.name) if a.key == key and a.dtypes == tuple(dtypes)]
    return found[-1] if found else None


def _warm_up_together(
    kernel: object,
    engine: Autotuned,
    layers: list[Any],
    calls: Iterable[ArgumentMaker],
    tuning: Tuning | str | dict | None,
    force: bool,
) -> WarmupReport:
    """`Tuning.objective`: the calls grouped by key, and one config tuned for each key's calls together."""
    began = time.perf_counter()
    tuner = engine if tuning is None else _blocking_copy(engine, tuning)
    launcher = _engine_of(kernel)[0]
    groups: dict[tuple, list[tuple[Any, Any]]] = {}
    as_calls: dict[tuple, list[Callable[[], AbstractContextManager[Any]]]] = {}
    for maker in calls:
        args, kwargs = made_args(maker, f"autotune.warmup({engine.name}, calls)")
        grid = kwargs.pop("grid", None)
        _need_grid(engine, grid)
        kwargs = heuristic_kwargs(layers, args, kwargs)
        bound = engine.bind(args, kwargs)
        ident = engine.key_of(bound)
        groups.setdefault(ident, []).append((bound, grid))
        as_calls.setdefault(ident, []).append(functools.partial(_as_call, launcher, args, kwargs, grid))
    tuned: list[WarmedKey] = []
    cached: list[WarmedKey] = []
    for (key, dtypes), group in groups.items():
        start = time.perf_counter()
        if tuner is engine:  # a compat kernel's engine is rebuilt when its prune changed a config in place
            step = functools.partial(_tune_together, group, force, as_calls[(key, dtypes)])
            engine, (record, how) = _settled(kernel, step)
            tuner = engine
        else:
            record, how = tuner.tune_calls(group, force=force)
        if tuner is not engine:
            engine.cache.remember(key, dtypes, record)
        (tuned if how == "tuned" else cached).append(WarmedKey(key, tuple(dtypes), time.perf_counter() - start))
    return WarmupReport(engine.name, tuple(tuned), tuple(cached), time.perf_counter() - began)


def _blocking_copy(engine: Autotuned, tuning: Tuning | str | dict) -> Autotuned:
    """A copy of a native kernel decorated with `tuning` on the blocking path (warm-up's `tuning=`)."""
    if type(engine) is not Autotuned:
        raise OptionError(
            f"autotune.warmup({engine.name}, ..., tuning=...): an autotune.compat kernel is warmed up with its own "
            "Tuning; give tuning= to autotune.compat.autotune(...)"
        )
    return Autotuned(engine.fn, **{**engine.recipe, "tuning": Tuning.coerce(tuning).replace(mode="blocking")})


def _one_config(launcher: Any) -> bool:
    """Whether `launcher` is an `autotune.compat` kernel whose list holds one config, which its `run` launches
    without tuning or storing anything: warmed up in this process whatever the GPUs (a sweep worker would tune and
    file it), so both routes report its keys `untuned`."""
    if not isinstance(launcher, CompatAutotuner):
        return False
    index = launcher.tuner.index
    return len(index.natives) == 1 and not index.list_changed()


def visible_gpus() -> int:
    """The GPUs a local sweep would start a worker on (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _warm_up_over_gpus(kernel: object, engine: Autotuned, calls: Iterable[ArgumentMaker], tuning: Any) -> WarmupReport:
    """`autotune.sweep` with the local executor over every visible GPU, on the blocking path, as a `WarmupReport`;
    the winners are kept in the kernel's memory too. A key that failed is an error (a warm-up that left keys
    untuned would leave them to a request); one whose lease another process held is warmed up in this process
    afterwards, waiting for that process's winner as the in-process warm-up does."""
    from ..errors import AutotuneError
    from ..sweeps.api import warmup_sweep

    began, name, makers, given = time.perf_counter(), engine.name, list(calls), tuning
    _check_picklable(makers, name)
    if tuning is not None or online_mode(engine.tuning):  # an online kernel's worker would not tune
        tuning = Tuning.coerce(tuning if tuning is not None else engine.tuning).replace(mode="blocking")
    report = warmup_sweep(kernel, makers, tuning)

    failed = [k for k in report.keys if k.status not in ("tuned", "cached", "leased")]
    if failed:
        raise AutotuneError(
            f"autotune.warmup({name}, ...): {len(failed)} of {len(report.keys)} keys were not tuned: "
            + "; ".join(f"key {k.key} on {k.device}: {k.status} ({k.error})" for k in failed)
        )
    tuned: dict[tuple, WarmedKey] = {}  # each distinct key once: tuned, else cached (calls of one key share it)
    cached: dict[tuple, WarmedKey] = {}
    for k in report.keys:
        if k.status != "leased":
            key = (tuple(k.key or ()), tuple(k.dtypes or ()))
            (tuned if k.status == "tuned" else cached).setdefault(key, WarmedKey(*key, k.seconds))
    # every call of a leased key: under an objective a job is a set of calls (`calls`), tuned together
    leased = sorted({i for k in report.keys if k.status == "leased" for i in (k.calls or [k.job])})
    waited = _wait_for_leased(kernel, [makers[i] for i in leased], given)
    for w in waited.tuned:
        tuned.setdefault((w.key, w.dtypes), w)
    for w in waited.cached:
        cached.setdefault((w.key, w.dtypes), w)
    kept = tuple(w for key, w in cached.items() if key not in tuned)
    return WarmupReport(name, tuple(tuned.values()), kept, time.perf_counter() - began, waited.untuned)


def _wait_for_leased(kernel: object, makers: list[ArgumentMaker], tuning: Any) -> WarmupReport:
    """The keys of `makers`, whose lease another process held during the sweep, warmed up in this process as
    without a GPU: each waits for that process's winner (or tunes the key if it gave the lease up without one), so
    no key is reported cached that no tier holds, and the kernel's memory holds each key as after any warm-up."""
    return warmup(kernel, makers, tuning=tuning, in_process=True) if makers else WarmupReport("", (), (), 0.0)


def _check_picklable(makers: list[ArgumentMaker], name: str) -> None:
    """Each maker goes to a worker process: one that cannot be pickled (a lambda, a local function) is refused now."""
    for maker in makers:
        try:
            ForkingPickler.dumps(maker)  # as the local executor's pipe sends it
        except Exception as exc:
            raise CallError(
                f"autotune.warmup({name}, calls): the maker {maker!r} cannot be sent to a worker process "
                f"({type(exc).__name__}: {exc}); give module-level functions, or functools.partial of one "
                "(functools.partial(make_args, n)), or pass in_process=True to tune in this process"
            ) from None


def _engine_of(kernel: object) -> tuple[Any, Autotuned, list[Any]]:
    """(the autotuner to launch, the native kernel that tunes, the `triton.heuristics` layers above them, outermost
    first): an `@autotune` kernel is its own engine, an `autotune.compat` kernel's is its `tuner`."""
    layers: list[Any] = []
    for layer in wrapper_layers(kernel):
        engine = layer if isinstance(layer, Autotuned) else getattr(layer, "tuner", None)
        if isinstance(engine, Autotuned):
            return layer, engine, layers
        layers.append(layer)
    raise CallError(
        f"autotune.warmup(kernel, calls) takes an @autotune or autotune.compat kernel; got {kernel!r} (for a "
        "torch_op wrapper, warm up each kernel it launches)"
    )


Tune = Callable[[tuple, dict, Any, tuple, tuple], None]


def _tuner_for(launcher: Any, engine: Autotuned, tuning: Tuning | str | dict | None) -> tuple[Tune, KernelCache | None]:
    """How one missing key is tuned: the kernel's own blocking path (compiling the winner without launching it
    where the kernel is native), or, for `tuning=` or an online kernel, a copy of the kernel decorated with that
    Tuning on the blocking path, whose winner the kernel then keeps in memory. With it, for `tuning=`, the cache
    whose search judges a stored entry (one of a weaker search than `tuning`'s is tuned again); else None."""
    native = type(engine) is Autotuned
    if tuning is None and not online_mode(engine.tuning):

        def own_path(args: tuple, kwargs: dict, grid: Any, key: tuple, dtypes: tuple) -> None:
            _need_grid(engine, grid)
            launcher.run(*args, grid=grid, warmup=native, **kwargs)

        return own_path, None
    if not native:
        raise _compat_refusal(engine)
    blocking = Tuning.coerce(tuning if tuning is not None else engine.tuning).replace(mode="blocking")
    copy = Autotuned(engine.fn, **{**engine.recipe, "tuning": blocking})

    def copy_path(args: tuple, kwargs: dict, grid: Any, key: tuple, dtypes: tuple) -> None:
        _need_grid(engine, grid)
        record: TuningRecord | None = copy.select_and_launch(args, kwargs, grid, True).record
        if record is not None:
            engine.cache.remember(key, dtypes, record)

    return copy_path, (copy.cache if tuning is not None else None)


def _compat_refusal(engine: Autotuned) -> OptionError:
    return OptionError(
        f"autotune.warmup({engine.name}, ..., tuning=...) or online mode: an autotune.compat kernel is warmed up "
        "with its own Tuning on the blocking path; give tuning= to autotune.compat.autotune(...) and unset "
        "AUTOTUNE_MODE for the warm-up"
    )


def _need_grid(engine: Autotuned, grid: Any) -> None:
    need_grid(engine.name, engine.recipe.get("grid"), grid, f"autotune.warmup({engine.name}, calls)")
