"""Replay: run the real tuner and the real search strategies over a brute-force landscape measured on a GPU.

A landscape (kernel_tuner's cache format, gzip JSON or plain JSON) records, for every valid config of a kernel,
its mean `time` in ms, its per-repetition `times` and its `compile_time` in ms, or a failure string
("CompilationFailedConfig", "RuntimeFailedConfig"). The space is the Cartesian product of `tune_params`
restricted to the recorded configs. "Compiling" a config takes its recorded compile time and "measuring" it
draws samples from its recorded `times` (so the noise is the GPU's), both on a simulated clock with `workers`
compile workers, so a 10^4-config replay takes seconds. JSON only: nothing read is unpickled or evaluated.
"""

from __future__ import annotations

import gzip
import heapq
import json
import random
import statistics
import zlib
from concurrent.futures import Executor, Future
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from ..config import value_identity
from ..engine.in_process import InProcessRunner
from ..engine.search.prior import Prior
from ..engine.tuner import TuneJob, tune
from ..errors import AutotuneError, NoValidConfigError
from ..options import Strategy, Tuning
from ..record import Trial, TrialStatus
from ..space.spaces import CartesianSpace, Config, FixedSpace, SearchSpace
from .export import open_regular

__all__ = [
    "Landscape",
    "load_landscape",
    "landscape_prior",
    "replay_once",
    "replay",
    "prior_problem",
    "MAX_LANDSCAPE_BYTES",
    "MIN_TIME_MS",
    "MAX_TIME_MS",
]

# Decompressed JSON: about 6x the largest shared landscape (~40 MB); parsed, a landscape takes about 15x its JSON.
MAX_LANDSCAPE_BYTES = 256 << 20
# A recorded time (ms) outside these is no GPU's; within them every ratio and the simulated clock stay finite.
MIN_TIME_MS, MAX_TIME_MS = 1e-9, 1e9


@dataclass
class Landscape:
    """One kernel's brute-force results on one GPU."""

    path: str
    device: str
    kernel: str
    axes: dict[str, tuple]
    entries: dict[Config, dict]  # config -> {"time": ms or failure string, "times": [...], "compile_time"}
    problem_size: tuple | None = None  # the shape it was measured at, where the file says (`problem_size`)
    best_ms: float = field(init=False)

    def __post_init__(self) -> None:
        times = [e["time"] for e in self.entries.values() if isinstance(e["time"], (int, float))]
        if not times:
            raise AutotuneError(f"landscape {self.path} has no config that ran")
        self.best_ms = float(min(times))

    @property
    def valid_configs(self) -> int:
        return len(self.entries)

    def space(self) -> SearchSpace:
        """The product of the axes, restricted to the recorded configs: a filtered CartesianSpace (neighbours one
        axis, one step away) while the product can be listed (LIST_LIMIT), else a FixedSpace of the recorded
        configs (neighbours: recorded configs that differ in one field), since a lazy space's filter must have a
        checksum and a sparse one could not be sampled by rejection."""
        product = CartesianSpace(**self.axes)
        if product.lazy:
            return FixedSpace(list(self.entries))
        recorded = frozenset(self.entries)
        return product.where(recorded.__contains__)

    def time_of(self, config: Config) -> float | None:
        value = self.entries[config]["time"]
        return float(value) if isinstance(value, (int, float)) else None


def load_landscape(path: str | Path) -> Landscape:
    """Read a landscape file (gzip or plain JSON, a regular file of at most MAX_LANDSCAPE_BYTES decompressed),
    checking its shape; AutotuneError names what is wrong."""
    path = Path(path)
    data = _landscape_bytes(path)
    try:
        doc = json.loads(data)
        axes = {str(k): tuple(v) for k, v in doc["tune_params"].items()}
        if not axes:
            raise AutotuneError(f"landscape {path} has empty tune_params: a landscape names at least one axis")
        entries = _entries(path, axes, doc["cache"])
        size = doc.get("problem_size")
        problem_size = tuple(size) if isinstance(size, list) else (size,) if isinstance(size, int) else None
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError, OverflowError) as exc:
        raise AutotuneError(
            f"{path} is not a landscape in kernel_tuner's cache format (tune_params, cache): "
            f"{exc.__class__.__name__}: {exc}"
        ) from None
    return Landscape(
        str(path),
        str(doc.get("device_name", "unknown")),
        str(doc.get("kernel_name", path.stem)),
        axes,
        entries,
        problem_size,
    )


def _landscape_bytes(path: Path) -> bytes:
    """The JSON bytes of a landscape file, gunzipped where it is gzip: a regular file only (a FIFO would block,
    /dev/zero never ends) and at most MAX_LANDSCAPE_BYTES of JSON."""
    try:
        with open_regular(path, "landscape") as fh:
            gzipped = fh.read(2) == b"\x1f\x8b"
            fh.seek(0)
            with gzip.GzipFile(fileobj=fh, mode="rb") if gzipped else nullcontext(fh) as stream:
                data = stream.read(MAX_LANDSCAPE_BYTES + 1)
    except (OSError, EOFError) as exc:  # EOFError: a gzip file cut short
        raise AutotuneError(f"cannot read landscape {path}: {exc}") from None
    except zlib.error as exc:
        raise AutotuneError(
            f"{path} is not a landscape in kernel_tuner's cache format: its gzip data is corrupt ({exc})"
        ) from None
    if len(data) > MAX_LANDSCAPE_BYTES:
        raise AutotuneError(
            f"landscape {path} is over {MAX_LANDSCAPE_BYTES} bytes of JSON (the largest real one is about 40 MB); "
            "give a landscape file, not a larger document"
        )
    return data


def _entries(path: Path, axes: dict[str, tuple], cache: dict) -> dict[Config, dict]:
    """The recorded configs of a landscape's `cache`, each checked (`_entry_problem`); a config recorded twice is
    refused, naming both entries (keeping either would change the best or a ratio)."""
    entries: dict[Config, dict] = {}
    names: dict[Config, str] = {}
    on_axis = {name: {value_identity(v) for v in values} for name, values in axes.items()}
    for name, raw in cache.items():
        config = Config({axis: raw[axis] for axis in axes})
        if config in entries:
            raise AutotuneError(
                f"landscape {path} records {dict(config)} twice, as cache entries {names[config]!r} and {name!r}; "
                "remove one of them"
            )
        names[config] = name
        entries[config] = {
            "time": raw["time"],
            "times": [float(t) for t in raw.get("times") or []],
            "compile_time": float(raw.get("compile_time") or 0.0),
        }
        problem = _entry_problem(axes, on_axis, config, entries[config])
        if problem:
            raise AutotuneError(f"landscape {path} records {dict(config)}: {problem}; fix or remove that entry")
    return entries


def _entry_problem(axes: dict[str, tuple], on_axis: dict[str, set], config: Config, entry: dict) -> str | None:
    """What makes one recorded config unusable (None: nothing): a value off its axis (no search could reach it,
    so no run could match the best), a time outside MIN_TIME_MS..MAX_TIME_MS, or a repetition or compile time
    that is not a finite number of ms within 0..MAX_TIME_MS (a NaN best made every ratio NaN and the JSON invalid;
    a time of 1e-300 against one of 1e300 made a ratio infinite)."""
    for name, values in axes.items():
        if value_identity(config[name]) not in on_axis[name]:
            return f"{name}={config[name]!r} is not one of tune_params[{name!r}] {list(values)}"
    time = entry["time"]
    if isinstance(time, str):
        numbers = entry["times"] + [entry["compile_time"]]
    elif isinstance(time, (int, float)) and not isinstance(time, bool):
        numbers = [float(time), *entry["times"], entry["compile_time"]]
        if not MIN_TIME_MS <= time <= MAX_TIME_MS:
            return f"its time {time!r} is not a positive number of ms within {MIN_TIME_MS:g}..{MAX_TIME_MS:g}"
    else:
        return f"its time {time!r} is neither a number of ms nor a failure string"
    bad = next((v for v in numbers if not 0 <= v <= MAX_TIME_MS), None)
    return None if bad is None else f"it has {bad!r} among its times or compile time (0..{MAX_TIME_MS:g} ms only)"


class _SimClock:
    """Simulated seconds; `workers` compile slots, each config's compile scheduled on the first free one."""

    def __init__(self, workers: int) -> None:
        self.now = 0.0
        self.free = [0.0] * max(1, workers)
        self.compiled_at: dict[Config, float] = {}

    def schedule(self, config: Config, seconds: float) -> None:
        start = max(self.now, heapq.heappop(self.free))
        heapq.heappush(self.free, start + seconds)
        self.compiled_at[config] = start + seconds

    def wait_for(self, config: Config) -> None:
        self.now = max(self.now, self.compiled_at.get(config, self.now))


class _ReplayCompiler:
    """Compiles nothing: schedules the recorded compile time of each config as it is proposed, and fails the
    recorded compile failures."""

    def __init__(self, landscape: Landscape, clock: _SimClock) -> None:
        self.landscape, self.clock = landscape, clock

    def begin_batch(self, configs: list[Config]) -> None:
        for config in configs:
            self.clock.schedule(config, self.landscape.entries[config]["compile_time"] / 1e3)

    def session(self, executor: Executor) -> AbstractContextManager[Any]:
        return nullcontext()

    def submit(self, config: Config, executor: Executor) -> Future:
        future: Future = Future()
        if self.landscape.entries[config]["time"] == "CompilationFailedConfig":
            future.set_exception(RuntimeError("CompilationFailedConfig (recorded in the landscape)"))
        else:
            future.set_result(None)
        return future

    def finalize(self, config: Config, result: Any) -> Any:
        return result


class _ReplayRunner:
    """`run_config` and the timer: a run fails as recorded; a measurement draws the recorded repetitions."""

    def __init__(self, landscape: Landscape, clock: _SimClock, rng: random.Random) -> None:
        self.landscape, self.clock, self.rng = landscape, clock, rng
        self.current: Config | None = None
        self.reached_3pct_s: float | None = None

    def run_config(self, config: Config) -> None:
        self.clock.wait_for(config)
        self.current = config
        value = self.landscape.entries[config]["time"]
        if not isinstance(value, (int, float)):
            raise RuntimeError(f"{value} (recorded in the landscape)")

    def measure(self, fn: Any, *, warmup: int, reps: int, before: Any = None) -> list[float]:
        fn()  # names the config (run_config) and fails as recorded
        assert self.current is not None  # run_config set it
        entry = self.landscape.entries[self.current]
        pool = entry["times"] or [float(entry["time"])]
        samples = [self.rng.choice(pool) for _ in range(reps)]
        self.clock.now += (sum(samples) + warmup * statistics.fmean(pool)) / 1e3
        if self.reached_3pct_s is None and float(entry["time"]) <= 1.03 * self.landscape.best_ms:
            self.reached_3pct_s = self.clock.now
        return samples


def landscape_prior(landscape: Landscape) -> Prior:
    """Another landscape of the same kernel as a prior: it stands in for another device kind's record."""
    return Prior.from_times(((c, landscape.time_of(c)) for c in landscape.entries), landscape.device, landscape.path)


def prior_problem(landscape: Landscape, prior: Landscape) -> str | None:
    """Why `prior` cannot be `landscape`'s prior (None: it can): none of the configs that ran in it is recorded
    in `landscape` (other axes or values), so the search would propose none of them and the prior would do nothing."""
    if any(config in landscape.entries for config in landscape_prior(prior).configs_ranked):
        return None
    return (
        f"the prior {prior.path} shares no config that ran with {landscape.path} (their axes or axis values "
        "differ): give a landscape of the same tune_params"
    )


def replay_once(
    landscape: Landscape,
    strategy: str,
    budget: int,
    seed: int,
    workers: int = 8,
    space: SearchSpace | None = None,
    prior: Prior | None = None,
) -> dict[str, Any]:
    """One tuning of the landscape with `strategy` ("exhaustive", "random", "local", "model") and a budget of
    `budget` configs: the chosen config, its recorded time over the best, evaluations, simulated seconds, the
    configs evaluated; with `prior` (model only), the winner's rank in the prior's order. A run whose budget drew
    only recorded failures chose nothing: its `chosen`, `chosen_ms` and `ratio` are None (the other runs of a
    `replay` still count)."""
    from ..engine.search import make_strategy

    space = space if space is not None else landscape.space()
    clock = _SimClock(min(workers, max(1, budget)))  # a slot per config at most: more would never be used
    runner = _ReplayRunner(landscape, clock, random.Random(seed))
    tuning = Tuning(
        compile_workers=0,
        seed=seed,
        strategy=cast(Strategy, strategy),  # Tuning checks the name
        max_configs=budget,
    )
    searcher = (
        None
        if strategy == "exhaustive"
        else make_strategy(strategy, space, seed=seed, seeds=(), budget=budget, prior=prior)
    )
    trials = InProcessRunner(
        run_config=runner.run_config,
        compiler=_ReplayCompiler(landscape, clock),
        timer=runner,
        tuning=tuning,
        kernel_name=landscape.kernel,
    )
    job = TuneJob(
        configs=space.configs() if searcher is None else [],
        tuning=tuning,
        runner=trials,
        kernel_name=landscape.kernel,
        strategy=searcher,
        clock=lambda: clock.now,
        batch_size=2 * max(1, workers),
    )
    try:
        outcome = tune(job)
    except NoValidConfigError as exc:  # the budget drew only recorded failures: this run chose nothing
        return _run_summary(landscape, seed, None, exc.trials, runner, prior)
    return _run_summary(landscape, seed, outcome.winner, outcome.trials, runner, prior)


def _run_summary(
    landscape: Landscape,
    seed: int,
    winner: Config | None,
    trials: list[Trial],
    runner: _ReplayRunner,
    prior: Prior | None,
) -> dict[str, Any]:
    """One run as `replay_once` returns it; `winner` None (and so `chosen`, `chosen_ms`, `ratio` and `prior_rank`)
    where every config the run measured had failed as recorded."""
    chosen_ms = landscape.time_of(winner) if winner is not None else None
    evaluated = [dict(t.config) for t in trials if t.status is not TrialStatus.SKIPPED]
    return {
        "seed": seed,
        "chosen": dict(winner) if winner is not None else None,
        "chosen_ms": chosen_ms,
        "ratio": chosen_ms / landscape.best_ms if chosen_ms is not None else None,
        "evaluations": len(evaluated),
        "tuning_s": runner.clock.now,
        "reached_3pct_s": runner.reached_3pct_s,
        "prior_rank": prior.rank_of(winner) if prior is not None and winner is not None else None,
        "evaluated": evaluated,
    }


def replay(
    landscape: Landscape,
    strategy: str,
    budget: int,
    seeds: int,
    workers: int = 8,
    prior: Landscape | None = None,
) -> dict[str, Any]:
    """`seeds` replays (seeds 0..seeds-1), in the JSON layout `autotune replay --json` writes; `prior`, another
    landscape of the kernel, is the prior of every run (and adds `prior` and each run's `prior_rank`). The median
    and worst ratio are over the runs that chose a config (None where none did)."""
    problem = prior_problem(landscape, prior) if prior is not None else None
    if problem:
        raise AutotuneError(problem)
    space = landscape.space()
    fields: tuple[str, ...] = ("seed", "chosen", "chosen_ms", "ratio", "evaluations", "tuning_s")
    fields += ("prior_rank",) if prior is not None else ()
    given = landscape_prior(prior) if prior is not None else None
    runs = [
        {k: run[k] for k in fields}
        for run in (replay_once(landscape, strategy, budget, seed, workers, space, given) for seed in range(seeds))
    ]
    ratios = [r["ratio"] for r in runs if r["ratio"] is not None]
    extra = {"prior": {"path": prior.path, "device": prior.device}} if prior is not None else {}
    return {
        **extra,
        "landscape": {
            "path": landscape.path,
            "device": landscape.device,
            "kernel": landscape.kernel,
            "valid_configs": landscape.valid_configs,
            "best_ms": landscape.best_ms,
        },
        "strategy": strategy,
        "budget": budget,
        "workers": workers,  # simulated compile workers: each run's tuning_s depends on them
        "runs": runs,
        "median_ratio": statistics.median(ratios) if ratios else None,
        "worst_ratio": max(ratios) if ratios else None,
    }
