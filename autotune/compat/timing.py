"""How `autotune.compat` measures a config as `triton.autotune` would: the choice of Triton's benchmark function
(`do_bench=`, or the deprecated `warmup`/`rep`/`use_cuda_graph`), its call with Triton's quantiles, and the
`configs_timings` values built from it. Split from compat/__init__.py, which maps Triton's decorator onto the engine.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import AutotuneError, UserCodeError
from ..format import CANNOT_RUN_MS
from ..record import TrialStatus, TuningRecord

__all__ = ["CANNOT_RUN_MS", "QUANTILES", "QuantileBench", "choose_do_bench", "timing_from_samples", "timings_of"]

QUANTILES = (0.5, 0.2, 0.8)  # what Triton's Autotuner asks do_bench for
TimingValue = float | list[float]


def call_user(what: str, kernel: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call the user's `fn`; an exception it raises becomes a UserCodeError naming it (so the tuner does not
    record it as the config's failure)."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        raise UserCodeError(f"the {what} of {kernel} raised {type(exc).__name__}: {exc}", exc) from exc


def choose_do_bench(
    do_bench: Callable[..., Any] | None, warmup: int | None, rep: int | None, use_cuda_graph: bool, *, interpreted: bool
) -> Callable[..., Any] | None:
    """Triton's choice of benchmark function, or None for the native timers (also in the interpreter, where
    triton.testing's benchmarkers cannot run and the wall clock stands in for them)."""
    if warmup is not None or rep is not None or use_cuda_graph:
        warnings.warn(
            "warmup, rep, and use_cuda_graph parameters are deprecated. See "
            "https://github.com/triton-lang/triton/pull/4496 for details.",
            DeprecationWarning,
            stacklevel=4,
        )
        if interpreted:
            return None
        import triton.testing

        reps = rep if rep is not None else 100
        if use_cuda_graph:
            return lambda kernel_call, quantiles: triton.testing.do_bench_cudagraph(
                kernel_call, rep=reps, quantiles=quantiles
            )
        warmups = warmup if warmup is not None else 25
        return lambda kernel_call, quantiles: triton.testing.do_bench(
            kernel_call, warmup=warmups, rep=reps, quantiles=quantiles
        )
    if do_bench is None:
        return None
    if interpreted:
        from triton.testing import do_bench as triton_do_bench
        from triton.testing import do_bench_cudagraph

        if do_bench in (triton_do_bench, do_bench_cudagraph):
            return None
    return do_bench


class QuantileBench:
    """Adapts Triton's `do_bench(kernel_call, quantiles)` to the native `CallableTimer` (`do_bench(fn)`).

    Called once per config; returns the median (the first quantile Triton asks for) as the config's one
    sample, and hands the raw return value to `record` so `configs_timings` shows what do_bench returned.
    A median of +inf (Triton's time for a config that cannot run) is `CANNOT_RUN_MS`: ranked last, as Triton
    ranks inf, and launched when every config has it (the first, as in Triton), not a failed config.
    An exception of the kernel's run (`kernel_failed(exc)`) is the config's failure; any other that do_bench
    raises, or a result that is not a time, is the user's (a UserCodeError), as in triton.autotune.
    """

    def __init__(
        self,
        bench: Callable[..., Any],
        record: Callable[[Any], None],
        kernel: str,
        kernel_failed: Callable[[BaseException], bool],
    ) -> None:
        self.bench = bench
        self.record = record
        self.kernel = kernel
        self.kernel_failed = kernel_failed

    def __call__(self, kernel_call: Callable[[], Any]) -> list[float]:
        try:
            result = self.bench(kernel_call, quantiles=QUANTILES)
        except AutotuneError:
            raise
        except Exception as exc:
            if self.kernel_failed(exc):
                raise
            raise UserCodeError(f"the do_bench of {self.kernel} raised {type(exc).__name__}: {exc}", exc) from exc
        try:
            median = float(result[0] if isinstance(result, (list, tuple)) else result)
        except (TypeError, ValueError, IndexError) as exc:
            problem = TypeError(
                f"the do_bench of {self.kernel} returned {result!r}; it must return a time in ms, "
                "or a list of times for the quantiles it is given (the median first)"
            )
            problem.__cause__ = exc
            raise UserCodeError(str(problem), problem) from exc
        self.record(result)
        return [CANNOT_RUN_MS if median == math.inf else median]


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of sorted values (what torch.quantile computes)."""
    if not sorted_values:
        return float("inf")
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return float(sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo))


def timing_from_samples(samples: Sequence[float]) -> list[float]:
    """[median, p20, p80] in ms, the shape of a `configs_timings` value under Triton's default benchmarker."""
    ordered = sorted(samples)
    return [math.inf if value >= CANNOT_RUN_MS else value for value in (_quantile(ordered, q) for q in QUANTILES)]


def timings_of(record: TuningRecord, triton_of: Mapping[Any, Any], raw: Mapping[Any, Any]) -> dict[Any, TimingValue]:
    """`configs_timings` of a record tuned or loaded from disk: {triton.Config: do_bench's result (`raw`, by native
    config) or the quantiles of the samples}; a failed config inf, a skipped one or one not in `triton_of` left out."""
    timings: dict[Any, TimingValue] = {}
    for trial in record.trials:
        config = triton_of.get(trial.config)
        if config is None or trial.status is TrialStatus.SKIPPED:
            continue
        if trial.status is TrialStatus.OK:
            # a record trimmed to fit an entry keeps a loser's median, not its samples
            samples = trial.samples_ms or ([trial.median_ms] if trial.median_ms is not None else [])
            timings[config] = raw.get(trial.config, timing_from_samples(samples))
        else:
            timings[config] = [float("inf")] * len(QUANTILES)
    return timings
