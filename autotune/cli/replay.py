"""`autotune replay LANDSCAPE --strategy NAME (--budget N | --budget-fraction F) --seeds K [--workers W]
[--prior OTHER_LANDSCAPE] [--json OUT]`: the real tuner and strategies over a brute-force GPU landscape, on a
simulated clock; `--prior` gives the model search another device kind's landscape of the kernel as its prior."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..format import format_table, safe_text
from .arguments import add_command, output_file_problem

if TYPE_CHECKING:
    from ..reporting.replay import Landscape

__all__ = ["register"]

MAX_WORKERS = 4096  # simulated compile workers: more than any build machine has, and each is a slot in a list


def _run(args: argparse.Namespace) -> int:
    from ..errors import AutotuneError
    from ..reporting.replay import replay

    if args.prior and args.strategy != "model":  # a usage mistake, said before any file is read
        print(
            f"autotune replay: --prior is used by --strategy model only, not {args.strategy}; add --strategy model "
            "or drop --prior",
            file=sys.stderr,
        )
        return 2
    problem = output_file_problem("json", args.json, "replay.json") if args.json else None
    if problem:  # before the runs: a path that cannot be written would lose them all
        print(f"autotune replay: {safe_text(problem)}", file=sys.stderr)
        return 2
    try:
        landscape, prior = _load(args)
    except AutotuneError as exc:  # a file that is not a landscape, or a prior that is not one of it
        print(f"autotune replay: {safe_text(exc)}", file=sys.stderr)
        return 2
    try:
        budget = _budget(args, landscape.valid_configs)
        result = replay(landscape, args.strategy, budget, args.seeds, args.workers, prior=prior)
    except AutotuneError as exc:
        print(f"autotune replay: {safe_text(exc)}", file=sys.stderr)
        return 1
    _print_runs(result, args, budget, prior)
    if args.json:
        try:
            Path(args.json).write_text(json.dumps(result, indent=1, allow_nan=False) + "\n")
        except OSError as exc:
            print(f"autotune replay: cannot write --json {safe_text(args.json)}: {exc}", file=sys.stderr)
            return 1
        print(f"wrote {safe_text(args.json)}")
    return 0


def _load(args: argparse.Namespace) -> tuple[Landscape, Landscape | None]:
    """The landscape and the prior's; AutotuneError where one is not a landscape, or the prior is of another
    kernel or shares no config with the landscape."""
    from ..errors import AutotuneError
    from ..reporting.replay import load_landscape, prior_problem

    landscape = load_landscape(args.landscape)
    prior = load_landscape(args.prior) if args.prior else None
    if prior is not None and prior.kernel != landscape.kernel:
        raise AutotuneError(
            f"--prior {args.prior} records kernel {prior.kernel!r}, and {args.landscape} {landscape.kernel!r}: a "
            "prior is a landscape of the same kernel on another device kind"
        )
    problem = prior_problem(landscape, prior) if prior is not None else None
    if problem:
        raise AutotuneError(f"--prior: {problem}")
    return landscape, prior


def _budget(args: argparse.Namespace, valid_configs: int) -> int:
    """The configs a run may try: --budget (or --budget-fraction of the landscape), at most every config it
    recorded (a larger budget has nothing more to try); exhaustive: every config."""
    if args.strategy == "exhaustive" or args.budget is None:
        asked = valid_configs if args.strategy == "exhaustive" else round(args.budget_fraction * valid_configs)
    else:
        asked = args.budget
    return max(1, min(asked, valid_configs))


def _print_runs(result: dict[str, Any], args: argparse.Namespace, budget: int, prior: Landscape | None) -> None:
    """The summary line, a row per run and the median: the landscape's names and paths escaped (`safe_text`), as
    they are its file's. A run that chose nothing (its budget drew only recorded failures) shows `-`."""
    landscape = result["landscape"]
    rows = [
        [
            r["seed"],
            f"{r['ratio']:.3f}" if r["ratio"] is not None else "-",
            r["evaluations"],
            f"{r['tuning_s']:.1f}",
            *([r["prior_rank"] if r["prior_rank"] is not None else "-"] if prior is not None else []),
            json.dumps(r["chosen"], separators=(",", ":")) if r["chosen"] is not None else "- (every config failed)",
        ]
        for r in result["runs"]
    ]
    print(
        safe_text(
            f"{landscape['kernel']} on {landscape['device']}: {landscape['valid_configs']} valid configs, best "
            f"{landscape['best_ms']:.4g} ms; strategy {args.strategy}, budget {budget}, {args.workers} compile "
            "workers" + (f"; prior {prior.path} ({prior.device})" if prior is not None else "")
        )
    )
    header = ["SEED", "RATIO", "EVALS", "SIM_S", *(["PRIOR_RANK"] if prior is not None else []), "CHOSEN"]
    print(format_table(header, rows, right=set(range(len(header) - 1))))
    if result["median_ratio"] is not None:
        print(f"\nmedian ratio {result['median_ratio']:.3f}, worst {result['worst_ratio']:.3f}")
    chose_nothing = sum(1 for r in result["runs"] if r["chosen"] is None)
    if chose_nothing:
        print(f"{chose_nothing} of {len(result['runs'])} runs measured only recorded failures (not in the ratios)")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number; give one of 1 or more") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


def _workers(text: str) -> int:
    value = _positive(text)
    if value > MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"{text} simulated compile workers is over {MAX_WORKERS}")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number; give a fraction in (0, 1], e.g. 0.02") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not a fraction in (0, 1]")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `autotune replay`."""
    from ..engine.search import STRATEGIES

    p = add_command(
        subparsers,
        "replay",
        _run,
        help="run a search strategy over a recorded GPU landscape",
        description="Run the real tuner and a real search strategy over a brute-force tuning "
        "landscape (kernel_tuner's cache format, gzip or plain JSON): compiles take "
        "their recorded time and measurements draw from the recorded repetitions, "
        "on a simulated clock. Prints each seed's chosen config over the best.",
    )
    p.add_argument("landscape", metavar="LANDSCAPE")
    p.add_argument("--strategy", choices=STRATEGIES, required=True)
    budget = p.add_mutually_exclusive_group(required=True)
    budget.add_argument("--budget", type=_positive, metavar="N", help="configs to try (exhaustive: all)")
    budget.add_argument(
        "--budget-fraction",
        type=_fraction,
        metavar="F",
        help="configs to try, as a fraction of the valid configs (0.02: 2%%)",
    )
    p.add_argument("--seeds", type=_positive, default=10, metavar="K", help="runs, with seeds 0..K-1 (default 10)")
    p.add_argument("--workers", type=_workers, default=8, metavar="W", help="simulated compile workers (default 8)")
    p.add_argument(
        "--prior",
        metavar="OTHER_LANDSCAPE",
        help="another device kind's landscape of the same kernel, the model search's prior (as a record of that "
        "device in the cache would be); PRIOR_RANK is the winner's rank in its order",
    )
    p.add_argument("--json", metavar="OUT", help="write the runs and their summary as JSON")
