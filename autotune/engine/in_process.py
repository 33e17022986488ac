"""Trials in this process, on the caller's thread and CUDA stream: the default `TrialRunner`, and what a worker
process runs for each trial it is sent.

Argument safety lives here because it wraps every run: `restore_value` and `reset_to_zero` arguments are put
back before each run, `setup=` runs before each, and `verify=` checks the first run of each config.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from ..errors import DeviceError, FailureKind, VerificationError, classify, warn_verification_failed
from ..options import Tuning
from ..record import Trial, TrialStatus, Where
from ..reference import Reference, check_verified, run_hook
from ..space.spaces import Config
from .measuring import measuring
from .pipeline import Compiler
from .timing import Timer, summarize

RUN_FAILURE_STATUS = {  # a config's own failure of a run, as its trial's status (online mode too)
    FailureKind.CONFIG: TrialStatus.RUNTIME_ERROR,
    FailureKind.OUT_OF_RESOURCES: TrialStatus.OUT_OF_RESOURCES,
}


class ArgumentGuard:
    """Snapshots the `restore_value` and `reset_to_zero` tensors so every trial, and the final launch,
    sees the caller's arguments exactly as passed."""

    def __init__(
        self,
        named_args: Mapping[str, Any],
        restore_value: Sequence[str],
        reset_to_zero: Sequence[str],
        poisoned_outputs: Sequence[str] = (),
    ) -> None:
        self.named_args = named_args
        self.restore_value = [n for n in restore_value if named_args.get(n) is not None]
        self.reset_to_zero = [n for n in reset_to_zero if named_args.get(n) is not None]
        guarded = {*self.restore_value, *self.reset_to_zero}
        # Outputs checked by a Reference are filled with a sentinel before each checked run, so a config that
        # leaves part of an output unwritten cannot pass on the previous trial's values; restored at the end.
        self.poisoned = [n for n in poisoned_outputs if named_args.get(n) is not None and n not in guarded]
        self._snapshots = {n: named_args[n].clone() for n in {*guarded, *self.poisoned}}

    def poison_outputs(self) -> None:
        """Fill the checked outputs with NaN (floats) or the dtype's largest value (integers)."""
        import torch

        for name in self.poisoned:
            tensor = self.named_args[name]
            if tensor.dtype.is_floating_point or tensor.dtype.is_complex:
                tensor.fill_(float("nan"))
            elif tensor.dtype != torch.bool:
                tensor.fill_(torch.iinfo(tensor.dtype).max)

    def before_run(self) -> None:
        """Restore `restore_value` arguments and zero `reset_to_zero` ones, before each trial run."""
        for name in self.restore_value:
            self.named_args[name].copy_(self._snapshots[name])
        for name in self.reset_to_zero:
            self.named_args[name].zero_()

    def restore_all(self) -> None:
        """Put every guarded argument back as the caller passed it."""
        for name, snapshot in self._snapshots.items():
            self.named_args[name].copy_(snapshot)


@dataclass(frozen=True)
class CallGuards:
    """What wraps each run of a call's trials: the arguments to put back, the setup= hook and the verify= check."""

    restore_value: Sequence[str] = ()
    reset_to_zero: Sequence[str] = ()
    setup: Callable[..., Any] | None = None
    verify: Callable[..., Any] | Reference | None = None


class InProcessRunner:
    """Measures each config on the calling thread: `run_config(config)` launches it once on the caller's stream."""

    compile_timeout_s: float | None
    where: Where = "in-process"

    def __init__(
        self,
        *,
        run_config: Callable[[Config], Any],
        compiler: Compiler,
        timer: Timer,
        tuning: Tuning,
        named_args: Mapping[str, Any] | None = None,
        guards: CallGuards = CallGuards(),
        synchronize: Callable[[], None] = lambda: None,
        kernel_name: str = "kernel",
        noted: Callable[[Config], AbstractContextManager[Any]] | None = None,
    ) -> None:
        self.run_config = run_config
        self._compiler = compiler
        self.timer = timer
        self.tuning = tuning
        self.named_args = named_args if named_args is not None else {}
        self.guards = guards
        self.synchronize = synchronize
        self.kernel_name = kernel_name
        # around each measurement: the crash journal notes the config while it runs (None: nothing notes it)
        self.noted = noted if noted is not None else lambda config: contextlib.nullcontext()
        self.journaled = noted is not None
        self.compile_timeout_s = tuning.compile_timeout_s
        self.errors: dict[Config, BaseException] = {}
        self.device_lost = False  # a DeviceError was raised: nothing more can run on the device, not even a copy
        with measuring():  # the copies and the reference's kernels: GPU work, as a trial's
            self._guard_and_reference()

    def _guard_and_reference(self) -> None:
        verify = self.guards.verify
        checked = verify.outputs if isinstance(verify, Reference) else ()
        self.guard = ArgumentGuard(self.named_args, self.guards.restore_value, self.guards.reset_to_zero, checked)
        try:
            self.expected = verify.expected(self.named_args) if isinstance(verify, Reference) else None
        except BaseException:
            self.guard.restore_all()
            raise

    def compiler(self) -> Compiler:
        return self._compiler

    def measure(self, config: Config) -> Trial:
        """Check and time `config`, holding the device's measuring lock (no other tuning of this process measures
        meanwhile; the earlier holder's launches are settled first)."""
        with measuring():
            self._settle_earlier_launches()
            with self.noted(config):
                return self._measure(config)

    def _measure(self, config: Config) -> Trial:
        trial = Trial(config=config)
        try:
            self._checked_run(config)
        except VerificationError as exc:
            warn_verification_failed(self.kernel_name, config, exc)
            return self._failed(trial, TrialStatus.VERIFY_FAILED, exc)
        except Exception as exc:
            return self._failed(trial, self._status_of(config, exc, "run"), exc)
        try:
            samples = self.timer.measure(
                lambda: self.run_config(config), warmup=self.tuning.warmup, reps=self.tuning.reps, before=self._before
            )
        except Exception as exc:
            return self._failed(trial, self._status_of(config, exc, "measure"), exc)
        trial.samples_ms = samples
        trial.median_ms, trial.min_ms = summarize(samples)
        trial.status = TrialStatus.OK
        return trial

    def refine(self, configs: Sequence[Config], reps: int) -> dict[Config, list[float]]:
        """A config that fails when run again (its own error, in `errors`) is left out of the rounds."""
        rounds: dict[Config, list[float]] = {c: [] for c in configs}
        for _ in range(reps):
            for config in [c for c in configs if c in rounds]:
                self._refine_run(config, rounds)
        return rounds

    def _refine_run(self, config: Config, rounds: dict[Config, list[float]]) -> None:
        """One timed run of `config` in a round, holding the measuring lock for that run (another tuning's trial
        may come between two runs, never during one); a config failing on its own leaves `rounds`."""
        run = functools.partial(self.run_config, config)
        with measuring():
            self._settle_earlier_launches()
            with self.noted(config):  # a run that ends the process here is the config's crash too
                try:
                    rounds[config] += self.timer.measure(run, warmup=0, reps=1, before=self._before)
                except Exception as exc:
                    self._status_of(config, exc, "measure")  # raised unless the config's own failure
                    self.errors[config] = exc
                    del rounds[config]

    def close(self) -> None:
        """Put the guarded arguments back, unless the device was lost (the copy would raise CUDA's raw error in
        place of the DeviceError saying what to do; the arguments are unusable with the device anyway)."""
        if not self.device_lost:
            with measuring():
                self.guard.restore_all()

    def _before(self) -> None:
        self.guard.before_run()
        if self.guards.setup is not None:
            run_hook("setup=", self.guards.setup, self.named_args)

    def _checked_run(self, config: Config) -> None:
        """One run whose output is as one untuned launch would leave it, checked by verify= when given. The checked
        outputs are filled before setup= runs, so what setup= writes to them (a zeroed accumulator) is what the
        kernel sees."""
        verify = self.guards.verify
        if verify is not None:
            self.guard.poison_outputs()
        self._before()
        self.run_config(config)
        if verify is not None:
            self.synchronize()
            check_verified(verify, self.named_args, self.expected)

    def _status_of(self, config: Config, exc: Exception, stage: str) -> TrialStatus:
        """The config's own failure as a status; a poisoned device ends the tuning; a mistake of the call is raised."""
        kind = classify(exc, stage)
        if kind in RUN_FAILURE_STATUS:
            return RUN_FAILURE_STATUS[kind]
        if kind is FailureKind.STICKY_DEVICE:
            raise self._device_lost(config, exc) from exc
        raise exc

    def _device_lost(self, config: Config, exc: Exception) -> DeviceError:
        self.device_lost = True
        restart = (
            "Restart the process: the crash journal noted the config, so the next tuning of this key records it "
            "as crashed and tunes the others."
            if self.journaled
            else "Restart the process (nothing notes the config here: a new tuning would try it again)."
        )
        return DeviceError(
            f"{self.kernel_name} config {dict(config)} left the GPU unusable ({type(exc).__name__}: {exc}); "
            f"every later launch in this process would fail, so the tuning stops here. {restart} Tune with "
            "Tuning(isolate='process') (the kernel defined at the top level of an importable module) to have "
            "such a config cost only itself; or fix that config or prune= it away."
        )

    def _settle_earlier_launches(self) -> None:
        """Wait for what ran before a config is noted: CUDA reports a launch's error at a later call, and an
        earlier launch's error is not the config's to be noted for."""
        try:
            self.synchronize()
        except Exception as exc:
            if classify(exc, "run") is not FailureKind.STICKY_DEVICE:
                raise
            self.device_lost = True
            raise DeviceError(
                f"the GPU was unusable before {self.kernel_name}'s next config ran ({type(exc).__name__}: {exc}): "
                "an earlier launch left it so (CUDA reports an error at a later call). Restart the process; "
                "CUDA_LAUNCH_BLOCKING=1 makes the launch that fails raise at once."
            ) from exc

    def _failed(self, trial: Trial, status: TrialStatus, exc: BaseException) -> Trial:
        self.errors[trial.config] = exc
        trial.status = status
        trial.error = f"{type(exc).__name__}: {exc}"
        return trial
