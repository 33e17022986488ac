"""The entry point: `precompile(kernel, *example_args | signature=, targets=[...])`, and `load_kernel`.

Each (config, target) is a job on the compile thread pool of `autotune.engine.pipeline`: specialized in this
process (`specialize.Plan`), compiled here or in a helper process (`helpers`), checked against the
target's limits (`targets.over_limits`) and reported (`report`). `targets=None` compiles for the active GPU
through the kernel's own JIT instead, so this process's later launches compile nothing.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ..engine.compilers import FunctionCompiler
from ..errors import PrecompileError, did_you_mean, warn_at_caller
from ..kernel.identity import base_kernel, is_interpreted
from ..kernel.occupancy import OccupancyUnreachable
from ..space.spaces import Config, as_space
from .call_checks import check_arguments, check_space, check_timeout, standin_notes
from .events import LISTENER
from .report import CompiledConfig, FailedConfig, PrecompileReport
from .specialize import Plan, check_triton
from .standins import parse_signature, scalar_standins, wrap_dtype
from .subprocess_compilers import (
    HELPERS,
    HelperDied,
    HelperTimeout,
    RemoteCompileError,
    compile_in_helper,
    encode_constant,
    is_compilation_error,
    unimportable_constant,
)
from .targets import Target, active_target, over_limits, parse_target
from .triton_compile import compile_source, describe_compiled, triton_cache_dir

if TYPE_CHECKING:
    from ..decorator.autotuned import Autotuned

__all__ = ["precompile", "load_kernel"]

logger = logging.getLogger("autotune")


@dataclass(frozen=True)
class _Job:
    """One unit of work on the pool: a config for a target. (Passed where the pipeline expects a Config.)"""

    config: Config
    target: Target


class _OutOfResources(Exception):
    """A config compiled to a kernel over the target's limits (reported as `kind="out_of_resources"`)."""


def _run_job(plan: Plan, job: _Job) -> CompiledConfig:
    """Compile one (config, target) on a pool thread: here, or through a helper process under the interpreter
    (`plan.helper_timeout_s` bounds a helper's compile once the helper is ready)."""
    from ..engine.pipeline import CompileFailed
    from ..record import TrialStatus

    try:
        result = _compiled(plan, job)
    except HelperTimeout as exc:
        raise CompileFailed(TrialStatus.TIMEOUT, str(exc)) from None
    except HelperDied as exc:
        raise CompileFailed(TrialStatus.CRASHED, str(exc)) from None
    except Exception as exc:
        if isinstance(exc, RemoteCompileError) or is_compilation_error(exc):  # the config's, whatever its text says
            raise CompileFailed(TrialStatus.COMPILE_ERROR, _error_text(exc)) from None
        raise
    problem = over_limits(
        job.target,
        shared=result["shared"],
        n_regs=result["n_regs"],
        num_warps=result["num_warps"],
        warp_size=result["warp_size"],
    )
    if problem is not None:
        raise _OutOfResources(problem)
    return CompiledConfig(
        config=job.config,
        target=str(job.target),
        cached=result["cached"],
        compile_s=result["seconds"],
        hash=result["hash"],
        shared_bytes=result["shared"],
        num_warps=result["num_warps"],
        n_regs=result["n_regs"],
        frame_bytes=result["frame_bytes"],
        path=result["path"],
        lowered=plan.kernel.lowered(job.config, job.target),
    )


class _JobCompiler(FunctionCompiler):
    """The precompile's jobs on the pool. A job given up on (past `timeout_s`), and every job in flight when the
    precompile is interrupted, has its helper process killed: its thread returns at once, and no compile runs on."""

    def __init__(self, compile_fn: Callable[[Any], Any], jobs: list[_Job]) -> None:
        super().__init__(compile_fn)
        self.jobs = jobs

    def abandon(self, job: Any) -> None:
        HELPERS.kill_busy(job)

    @contextlib.contextmanager
    def session(self, executor: Any) -> Iterator[None]:
        try:
            yield
        except BaseException:
            for job in self.jobs:
                HELPERS.kill_busy(job)
            raise


def _compiled(plan: Plan, job: _Job) -> dict[str, Any]:
    """Compile one (config, target): through a helper process under the interpreter, else here."""
    signature, constexprs, attrs, options = plan.specialize(job.config, job.target)
    if not plan.processes:
        return compile_source(plan.jit_fn, job.target, signature, constexprs, attrs, options)
    return compile_in_helper(
        {
            **plan.location,
            "target": (job.target.backend, job.target.arch, job.target.warp_size),
            "signature": signature,
            "constexprs": {k: encode_constant(v) for k, v in constexprs.items()},
            "attrs": attrs,
            "options": options,
            "cache_dir": plan.cache_dir,
        },
        owner=job,
        timeout_s=plan.helper_timeout_s,
    )


def _error_text(exc: BaseException) -> str:
    from ..engine.pipeline import CompileFailed

    texts = (RemoteCompileError, _OutOfResources, OccupancyUnreachable, CompileFailed)
    if isinstance(exc, texts) or is_compilation_error(exc):
        return str(exc)
    return f"{exc.__class__.__name__}: {exc}"


def _failure(job: _Job, status: Any, error: BaseException | None, timeout_s: float | None) -> FailedConfig:
    """A failed job as the report says it: "timeout", "crashed" (its helper process died), "out_of_resources" or
    "compile_error"; a timeout in the words of precompile's own `timeout_s`."""
    value = getattr(status, "value", status)
    if value in ("timeout", "crashed"):
        kind = value
    else:
        kind = "out_of_resources" if isinstance(error, (_OutOfResources, OccupancyUnreachable)) else "compile_error"
    text = _error_text(error) if error else kind
    if kind == "timeout" and isinstance(error, TimeoutError) and timeout_s is not None:  # the pipeline's words
        text = f"compiling took longer than timeout_s={timeout_s:g} (--timeout)"
    return FailedConfig(config=job.config, target=str(job.target), error=text, kind=kind)


def _resolve_kernel(kernel: object, space: Any) -> Autotuned:
    from triton.runtime.autotuner import Autotuner as TritonAutotuner

    from ..decorator.autotuned import Autotuned
    from ..kernel.option_checks import inner_autotuner

    named = kernel if isinstance(kernel, str) else None
    if named is not None:
        kernel = load_kernel(named)
    engine = getattr(kernel, "tuner", None)
    if isinstance(engine, Autotuned):  # autotune.compat's Autotuner: its native engine
        kernel = engine
    if isinstance(kernel, Autotuned):
        return kernel
    if space is not None and hasattr(base_kernel(kernel), "arg_names"):
        return Autotuned(kernel, space=space)
    what = named or repr(kernel)
    inner = inner_autotuner(kernel, None, Autotuned)  # under a wrapper: the kernel itself was taken above
    if isinstance(inner, TritonAutotuner):
        raise PrecompileError(
            f"{what} is autotuned by triton.autotune: decorate it with autotune.compat.autotune "
            "(a one-import change) and precompile that"
        )
    if inner is not None:
        raise PrecompileError(
            f"{what} wraps an @autotune kernel (a triton.heuristics above it): precompile the "
            "@autotune kernel itself, giving the values the wrapper sets as arguments"
        )
    if hasattr(base_kernel(kernel), "arg_names"):
        fix = "pass space= as well" if named is None else "name the @autotune-decorated object instead"
        raise PrecompileError(f"{what} is a @triton.jit kernel without a search space (not @autotune-decorated): {fix}")
    raise PrecompileError(
        f"precompile() takes an @autotune-decorated kernel (autotune.autotune or "
        f"autotune.compat.autotune; or 'module:kernel'); got {what}, a "
        f"{type(kernel).__module__}.{type(kernel).__name__}"
    )


def _listed_configs(kernel: Autotuned, space: Any) -> list[Config]:
    """Every config to compile: `space=`'s, else the kernel's; refused for a space too large to list."""
    if space is None and kernel.configs is not None:  # listed when the kernel was decorated
        return list(kernel.configs)
    chosen = as_space(space) if space is not None else kernel.space
    if chosen.lazy:
        raise PrecompileError(
            f"the space of {kernel.name}{' given as space=' if space is not None else ''} has "
            f"{chosen.unfiltered_len():,} configs before its where() filters, too many to list "
            "and precompile: pass winners_only=True (the cached winners) or space= a smaller "
            "space"
        )
    return chosen.configs()


def _winner_configs(kernel: Autotuned, target: Target | None) -> tuple[list[Config], str | None]:
    """The kernel's cached winners valid for its current source and space, preferring those tuned on `target`'s
    architecture; and a note when none was tuned on it."""
    from ..options import cache_dir
    from ..storage import disk_entries

    records = [
        e.record
        for e in disk_entries(kernel.name)
        if e.record is not None and e.record.kernel_id == kernel.cache.identity
    ]
    records += list(kernel.cache.records().values())
    valid = [
        r
        for r in records
        if r.source_hash == kernel.cache.source_hash
        and r.space_checksum == kernel.cache.space_checksum
        and kernel.space.contains(r.winner)
    ]
    if not valid:
        stale = len(records)
        raise PrecompileError(
            f"winners_only=True: no cached winner of {kernel.name} in {cache_dir()} matches the "
            f"kernel's current source and space ({stale} stale or other entries). Tune it first "
            f"(call it on a GPU, or in the interpreter), import an archive, or drop winners_only."
        )
    matching = valid
    note = None
    if target is not None:
        from .archive import record_fits_targets

        matching = [r for r in valid if record_fits_targets(r.device, [f"{target.backend}:{target.arch}"])]
        if not matching:
            devices = sorted({r.device for r in valid})
            note = (
                f"note: no winner of {kernel.name} was tuned on {target}; compiled the winners tuned on "
                f"{', '.join(devices)}"
            )
            matching = valid
    return list(dict.fromkeys(r.winner for r in matching)), note


def _refuse_custom_pipeline() -> None:
    """Refuse explicit targets while `knobs.runtime.add_stages_inspection_hook` is set: what the JIT does with it
    cannot be reproduced here (Triton 3.9 adds the custom pipeline to every JIT cache key, so a launch would not
    find these binaries; on 3.6 helper processes would compile without the custom passes under the JIT's key)."""
    from triton import knobs

    if getattr(knobs.runtime, "add_stages_inspection_hook", None) is not None:
        raise PrecompileError(
            "triton.knobs.runtime.add_stages_inspection_hook is set: a compile for an explicit "
            "target cannot reproduce the JIT's custom pipeline (Triton 3.9 adds it to every "
            "kernel's cache key, so launches would never find these binaries; helper processes "
            "would compile without it). Unset the hook to precompile, or precompile with "
            "targets=None (through the JIT) on the GPU"
        )


def precompile(
    kernel: object,
    *example_args: Any,
    signature: Mapping[str, Any] | str | None = None,
    targets: Sequence[str | Target | Any] | None = None,
    space: Any = None,
    winners_only: bool = False,
    workers: int | None = None,
    timeout_s: float | None = None,
    processes: bool | None = None,
) -> PrecompileReport:
    """Compile every config of `kernel`'s space (or only its cached winners) for each target, ahead of time.

    - `kernel`: an `@autotune` kernel (or one decorated with `autotune.compat.autotune`: its native engine is
      compiled), or `"module:kernel"` (a bare @triton.jit kernel needs `space=`).
    - `*example_args`: arguments as a launch passes them (tensors, sizes, strides; a torch dtype stands for a
      tensor of that dtype); or `signature=` instead: a dict / string of argument types, see `parse_signature`.
      The compiled kernels are found by launches whose arguments specialize the same way.
    - `targets`: `["cuda:90", "cuda:80", "hip:gfx942"]` (or one): no GPU needed. None: the active GPU, through the
      kernel's JIT, so this process's later launches compile nothing.
    - `space`: another space to compile instead of the kernel's; `winners_only`: only the winners in the
      tuning cache (for each target, those tuned on that architecture where there are any).
    - `workers`: compile threads (default `Tuning.compile_workers`; 0 compiles serially on this thread);
      `timeout_s`: per compile (in a helper process, counted once the helper is ready: its start-up is not the
      config's; a compile past it is killed, ptxas included, and reported `kind="timeout"`); `processes`:
      compile in helper processes (default: only under TRITON_INTERPRET=1, where it is required).

    A config that fails to compile, or compiles to a kernel over the target's shared memory / register /
    thread limits, is reported in `.failed` with its error; it does not stop the others. Returns a
    `PrecompileReport`.
    """
    check_triton()
    tuned = _resolve_kernel(kernel, space)
    args, kwargs, scalars = _example_call(tuned, example_args, signature)
    check_space(tuned, space)
    check_arguments(tuned, args, kwargs, space)
    workers = _compile_workers(workers)
    check_timeout(timeout_s, workers)
    interpreted = is_interpreted(tuned.base_fn)
    if targets is None:
        _refuse_jit_when_interpreted(interpreted)
        return _precompile_jit(tuned, args, kwargs, scalars, space, winners_only, workers, timeout_s)
    target_list = _target_list(targets)
    _refuse_custom_pipeline()
    use_processes = _use_processes(processes, interpreted)
    # in helper processes each helper times its compile from when it is ready: a cold helper's start-up is not the
    # config's (the pipeline's clock, started with the job, would count it)
    plan = Plan(tuned, args, kwargs, use_processes, helper_timeout_s=timeout_s if use_processes else None)
    report = PrecompileReport(
        kernel=tuned.name,
        targets=[str(t) for t in target_list],
        workers=workers,
        processes=use_processes,
        triton_cache_dir=plan.cache_dir,
    )
    jobs = _jobs(tuned, target_list, space, winners_only, report)
    if use_processes:  # a @jit function passed as a constexpr: can the helpers import it? Said once, here
        _refuse_unimportable_constants(tuned, args, kwargs, jobs)
    _note_standins(report, standin_notes(tuned, kwargs, scalars, list(dict.fromkeys(job.config for job in jobs))))
    _compile_jobs(plan, jobs, report, workers, timeout_s)
    logger.info("%s", report.summary())
    return report


def _compile_workers(workers: int | None) -> int:
    from ..options import MAX_COMPILE_WORKERS, Tuning

    workers = Tuning().compile_workers if workers is None else int(workers)
    if not 0 <= workers <= MAX_COMPILE_WORKERS:
        raise PrecompileError(
            f"workers={workers}: use 0 (serial) to {MAX_COMPILE_WORKERS} (each is a compile thread, or with "
            "processes a helper process); leave it unset for Tuning's compile_workers default"
        )
    return workers


def _refuse_jit_when_interpreted(interpreted: bool) -> None:
    if interpreted:
        raise PrecompileError(
            "targets=None compiles for the active GPU through Triton's JIT, but this process "
            "runs Triton's interpreter (TRITON_INTERPRET=1): name the targets instead, e.g. "
            "precompile(..., targets=['cuda:90']) or `autotune precompile ... --target cuda:90` "
            "(several: --target cuda:90 --target cuda:80); no GPU is needed for that"
        )


def _use_processes(processes: bool | None, interpreted: bool) -> bool:
    if processes is False and interpreted:
        raise PrecompileError(
            "processes=False cannot compile under TRITON_INTERPRET=1: this process's Triton is "
            "the interpreter; leave processes unset"
        )
    return interpreted if processes is None else bool(processes)


def _refuse_unimportable_constants(tuned: Autotuned, args: tuple, kwargs: dict, jobs: list[_Job]) -> None:
    problem = unimportable_constant(
        [*zip(tuned.arg_names, args), *kwargs.items(), *((k, v) for job in jobs for k, v in job.config.items())]
    )
    if problem is not None:
        raise PrecompileError(problem)


def _example_call(tuned: Autotuned, example_args: tuple, signature: Mapping[str, Any] | str | None) -> tuple:
    """(args, kwargs, scalar stand-ins) of the call to specialize for: the example arguments, or the signature's."""
    if signature is not None and example_args:
        raise PrecompileError("precompile(): give example arguments or signature=, not both")
    if signature is None and not example_args:
        raise PrecompileError(
            f"precompile({tuned.name}): give example arguments (as for a launch) or signature= "
            f"(e.g. {{'x': '*fp32', 'n': 'i32'}}); the arguments decide the specialization"
        )
    if signature is not None:
        return (), parse_signature(signature), scalar_standins(signature)
    args = tuple(wrap_dtype(a) for a in example_args)
    if len(args) > len(tuned.arg_names):
        raise PrecompileError(
            f"{tuned.name} takes {len(tuned.arg_names)} arguments ({tuned.arg_names}); "
            f"got {len(args)} example arguments"
        )
    return args, {}, {}


def _target_list(targets: Any) -> list[Target]:
    if isinstance(targets, (str, Target)) or hasattr(targets, "warp_size"):
        targets = [targets]  # one target given bare
    target_list = list(dict.fromkeys(parse_target(t) for t in targets))
    if not target_list:
        raise PrecompileError("targets=[] names no target; give e.g. ['cuda:90'], or None for the active GPU")
    return target_list


def _jobs(
    tuned: Autotuned, targets: list[Target], space: Any, winners_only: bool, report: PrecompileReport
) -> list[_Job]:
    """One job per (config, target): every config of the space, or the winners tuned for each target."""
    jobs: list[_Job] = []
    for target in targets:
        if winners_only:
            configs, notes = _winners_within(tuned, target, space)
            report.notes.extend(notes)
        else:
            configs = _listed_configs(tuned, space)
        jobs.extend(_Job(c, target) for c in configs)
    return jobs


def _winners_within(tuned: Autotuned, target: Target, space: Any) -> tuple[list[Config], list[str]]:
    """The cached winners to compile for `target`, only those within `space=` when one is given; and the notes
    on them (none tuned on `target`; winners left out as outside `space=`). Used for explicit targets and the JIT."""
    configs, note = _winner_configs(tuned, target)
    notes = [note] if note else []
    if space is not None:  # the winners of that space only
        within = as_space(space)
        outside = [c for c in configs if not within.contains(c)]
        configs = [c for c in configs if within.contains(c)]
        if outside:
            notes.append(
                f"note: {len(outside)} winner(s) for {target} left out, not in space=: "
                + ", ".join(str(dict(c)) for c in outside[:5])
            )
    return configs, notes


def _compile_jobs(
    plan: Plan, jobs: list[_Job], report: PrecompileReport, workers: int, timeout_s: float | None
) -> None:
    from ..engine.pipeline import compile_in_order_of_completion

    started = time.perf_counter()
    # the pipeline only hashes its items and hands them back: a _Job goes through it in place of a Config
    pipeline_timeout = None if plan.processes else timeout_s
    compiler = _JobCompiler(lambda job: _run_job(plan, cast(_Job, job)), jobs)
    with compile_in_order_of_completion(
        cast("list[Config]", jobs), compiler, workers=workers, timeout_s=pipeline_timeout
    ) as outcomes:
        for outcome in outcomes:
            job: _Job = outcome.config  # type: ignore[assignment]
            if outcome.status.value == "ok":
                report.compiled.append(outcome.result)
            else:
                report.failed.append(_failure(job, outcome.status, outcome.error, timeout_s))
    report.wall_s = time.perf_counter() - started


def _note_standins(report: PrecompileReport, notes: list[str]) -> None:
    """Notes on values computed from stand-ins go into the report (the CLI prints them) and are warned."""
    for note in notes:
        report.notes.append(note)
        warn_at_caller(note.removeprefix("note: "))


def _precompile_jit(
    tuned: Autotuned,
    args: tuple,
    kwargs: dict,
    scalars: dict,
    space: Any,
    winners_only: bool,
    workers: int,
    timeout_s: float | None,
) -> PrecompileReport:
    """targets=None: compile through the kernel's JIT for the active GPU (fills the JIT's in-memory cache)."""
    from ..engine.compilers import JitCompiler
    from ..engine.pipeline import compile_in_order_of_completion

    target = active_target()
    bound = tuned.bind(args, kwargs)
    if winners_only:
        configs, notes = _winners_within(tuned, target, space)
    else:
        configs, notes = _listed_configs(tuned, space), []
    report = PrecompileReport(
        kernel=tuned.name,
        targets=[str(target)],
        workers=workers,
        triton_cache_dir=triton_cache_dir(),
        notes=notes,
    )
    _note_standins(report, standin_notes(tuned, kwargs, scalars, configs))

    def prepare(config: Config) -> tuple:
        return tuned.launch_args(config, bound, (1,))

    listening = LISTENER.install()
    session = LISTENER.session()
    started = time.perf_counter()
    try:
        with compile_in_order_of_completion(
            configs, JitCompiler(tuned.fn, prepare), workers=workers, timeout_s=timeout_s
        ) as outcomes:
            for outcome in outcomes:
                if outcome.status.value != "ok":
                    report.failed.append(
                        _failure(_Job(outcome.config, target), outcome.status, outcome.error, timeout_s)
                    )
                    continue
                # No compile event for its hash: triton.compile was not called, the JIT's memory had it.
                cached = session.get(outcome.result.hash, True) if listening else None
                _add_loaded(report, tuned, outcome.config, target, outcome.result, outcome.compile_s or 0.0, cached)
    finally:
        LISTENER.close(session)
    report.wall_s = time.perf_counter() - started
    logger.info("%s", report.summary())
    return report


def _add_loaded(
    report: PrecompileReport,
    tuned: Autotuned,
    config: Config,
    target: Target,
    compiled: Any,
    seconds: float,
    cached: bool | None,
) -> None:
    """Load a kernel the JIT compiled (Triton's own shared memory and thread checks) and report it, or its failure."""
    try:
        compiled._init_handles()
    except Exception as exc:  # noqa: BLE001 - OutOfResources and load errors are per config
        kind = "out_of_resources" if type(exc).__name__ == "OutOfResources" else "compile_error"
        report.failed.append(FailedConfig(config, str(target), _error_text(exc), kind))
        return
    info = describe_compiled(compiled, target, seconds, cached)
    n_regs = getattr(compiled, "n_regs", None)
    problem = over_limits(target, shared=None, n_regs=n_regs, num_warps=info["num_warps"], warp_size=info["warp_size"])
    if problem is not None:
        report.failed.append(FailedConfig(config, str(target), problem, "out_of_resources"))
        return
    report.compiled.append(
        CompiledConfig(
            config=config,
            target=str(target),
            cached=info["cached"],
            compile_s=info["seconds"],
            hash=info["hash"],
            shared_bytes=info["shared"],
            num_warps=info["num_warps"],
            n_regs=n_regs if n_regs is not None else info["n_regs"],
            n_spills=getattr(compiled, "n_spills", None),
            frame_bytes=info["frame_bytes"],
            path=info["path"],
            lowered=tuned.lowered(config, target),
        )
    )


def load_kernel(spec: str) -> Any:
    """The object named by `"package.module:attr"` (or `"path/to/file.py:attr"`; `"module:factory()"` calls
    a no-argument factory), as the CLI takes kernels."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise PrecompileError(
            f"kernel {spec!r}: write it as module:kernel (e.g. kernels.matmul:matmul_kernel) or path/to/file.py:kernel"
        )
    call = attr.endswith("()")
    attr = attr[:-2] if call else attr
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        if module_name.endswith(".py") or os.sep in module_name:
            path = Path(module_name).resolve()
            if not path.is_file():
                raise PrecompileError(
                    f"kernel {spec!r}: there is no file {path}; give the kernel's .py file (relative "
                    f"to {os.getcwd()}) or its module, as path/to/file.py:kernel or module:kernel"
                )
            if str(path.parent) not in sys.path:  # as running the file would; helper processes import it by name
                sys.path.insert(0, str(path.parent))
            spec_obj = importlib.util.spec_from_file_location(path.stem, path)
            if spec_obj is None or spec_obj.loader is None:
                raise PrecompileError(f"kernel {spec!r}: cannot load {path}")
            module = importlib.util.module_from_spec(spec_obj)
            sys.modules[path.stem] = module
            try:
                spec_obj.loader.exec_module(module)
            except BaseException:  # a half-run module is not left in sys.modules (as importlib does for its own)
                if sys.modules.get(path.stem) is module:
                    del sys.modules[path.stem]
                raise
        else:
            module = importlib.import_module(module_name)
    except ImportError as exc:
        raise PrecompileError(
            f"kernel {spec!r}: cannot import {module_name} ({exc}); run from the directory that "
            f"contains it or set PYTHONPATH"
        ) from None
    except OSError as exc:
        raise PrecompileError(f"kernel {spec!r}: cannot read {module_name} ({exc.strerror or exc})") from None
    except Exception as exc:  # noqa: BLE001 - the module's own code failed (a SyntaxError, an error at import)
        raise PrecompileError(
            f"kernel {spec!r}: importing {module_name} failed ({exc.__class__.__name__}: {exc}); fix the module "
            "(import it in Python to see the traceback)"
        ) from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            public = [n for n in dir(obj) if not n.startswith("_")]
            raise PrecompileError(
                f"kernel {spec!r}: {module_name} has no attribute {attr!r}.{did_you_mean(part, public)}"
            )
        obj = getattr(obj, part)
    return obj() if call else obj


# ================================================================================================ archives
