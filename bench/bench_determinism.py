"""Determinism of cold tuning: do two cold tunings of the same matmul keys pick equally fast configs? (GPU only)

Two runs, A then B, each in a fresh process with a fresh autotune cache dir and a fresh TRITON_CACHE_DIR, tune
kernels/matmul.py (its full SPACE, the default Tuning, as a user gets it) for every key (an fp16 shape) in turn,
so every key is tuned cold in both runs. (One process per run, not per key: a key may reuse that run's compiled
binaries of an earlier key with the same specialization, which changes the compile time, never the choice.)
Then this process re-measures both runs' winners of each key side by side: `--rounds` rounds alternating
which config goes first, each a `triton.testing.do_bench` median (L2 flushed before each rep); a key's ratio is
the slower winner's median over the faster's (exactly 1 when both runs chose the same config). The table
also gives each run's own view (the tuner's median of its winner).

Target (issue 17): ratio <= 1.02 on at least 95% of the keys.

    python bench/bench_determinism.py [--keys 512,512,512 4096,4096,4096 ...] [--rounds 10] [--rep-ms 20]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))
import common  # noqa: E402

# Twenty fp16 shapes (M, N, K): square, skinny-M (decode-like), tall, wide, deep-K, and one that is not a
# multiple of 16 (its own specialization). 20 keys make the 95% target mean "at most one key off".
KEYS: list[tuple[int, int, int]] = [
    (512, 512, 512),
    (1024, 1024, 1024),
    (2048, 2048, 2048),
    (4096, 4096, 4096),
    (1000, 1000, 1000),
    (16, 4096, 4096),
    (64, 4096, 4096),
    (256, 4096, 4096),
    (8192, 1024, 1024),
    (1024, 8192, 1024),
    (1024, 1024, 8192),
    (4096, 1024, 4096),
    (4096, 4096, 1024),
    (3072, 3072, 768),
    (768, 3072, 3072),
    (2048, 8192, 2048),
    (8192, 2048, 2048),
    (6144, 1536, 1536),
    (1536, 6144, 1536),
    (2048, 2048, 8192),
]
TOLERANCE = 0.02
TARGET_SHARE = 0.95
RUNS = ("A", "B")


def parse_key(text: str) -> tuple[int, int, int]:
    """'M,N,K' -> (M, N, K); 'S' -> (S, S, S)."""
    parts = [int(p) for p in text.replace("x", ",").split(",") if p.strip()]
    if len(parts) == 1:
        parts *= 3
    if len(parts) != 3 or min(parts) <= 0:
        raise argparse.ArgumentTypeError(f"a key is M,N,K (positive ints); got {text!r}")
    return parts[0], parts[1], parts[2]


def describe(config: dict[str, Any]) -> str:
    """A matmul config in one short word: '128x64x32 g8 w4 s3'."""
    return (
        f"{config['BLOCK_M']}x{config['BLOCK_N']}x{config['BLOCK_K']} g{config['GROUP_M']} "
        f"w{config['num_warps']} s{config['num_stages']}"
    )


def pair_ratio(ms_a: float | None, ms_b: float | None) -> float | None:
    """The slower time over the faster (>= 1), or None when either is missing."""
    if not ms_a or not ms_b:
        return None
    return max(ms_a, ms_b) / min(ms_a, ms_b)


def share_within(ratios: Sequence[float | None], tolerance: float = TOLERANCE) -> float:
    """The share of keys whose ratio is within `tolerance` (a missing ratio counts as outside)."""
    if not ratios:
        return float("nan")
    return sum(1 for r in ratios if r is not None and r <= 1.0 + tolerance + 1e-12) / len(ratios)


def child(keys: list[tuple[int, int, int]]) -> None:
    """One cold run in this (fresh) process: tune every key in turn; prints a KEY line with each key's winner.
    (Without a GPU it tunes the interpreter's CPU_SPACE on the CPU, so that this path is tested there.)"""
    gpu = common.prepare()
    import torch

    from kernels.matmul import CPU_SPACE, make_matmul, matmul

    dev = "cuda" if gpu else "cpu"
    kernel = make_matmul() if gpu else make_matmul(space=CPU_SPACE)
    torch.matmul(torch.ones(64, 64, device=dev), torch.ones(64, 64, device=dev))  # CUDA context, cuBLAS handle
    if gpu:
        torch.cuda.synchronize()
    for M, N, K in keys:
        name = f"{M},{N},{K}"
        torch.manual_seed(0)
        a = torch.randn((M, K), device=dev, dtype=torch.float16)
        b = torch.randn((K, N), device=dev, dtype=torch.float16)
        started = time.perf_counter()
        try:
            matmul(a, b, kernel=kernel)
            if gpu:
                torch.cuda.synchronize()
            record = kernel.record()
        except Exception as exc:  # noqa: BLE001 - a key that fails to tune is reported, the others go on
            print("KEY " + json.dumps({name: {"error": f"{type(exc).__name__}: {exc}"[:500]}}), flush=True)
            continue
        tuner_ms = {describe(dict(t.config)): t.median_ms for t in record.trials if t.ok}
        print(
            "KEY "
            + json.dumps(
                {
                    name: {
                        "winner": dict(record.winner),
                        "tuning_s": record.tuning_s,
                        "wall_s": time.perf_counter() - started,
                        "tuner_ms": tuner_ms,
                    }
                }
            ),
            flush=True,
        )


def spawn(run: str, keys: list[tuple[int, int, int]], tmp: str, timeout_s: float) -> dict[str, Any]:
    """Run one cold tuning of `keys` in a fresh process with fresh Triton and autotune cache dirs; the keys it
    tuned (all of them, or those done when `timeout_s` cut it off)."""
    env = common.child_env(tmp, run)
    cmd = [sys.executable, str(HERE), "--child", "--keys", *(f"{m},{n},{k}" for m, n, k in keys)]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
        stdout = proc.stdout
        if proc.returncode != 0:
            print(
                f"!! run {run} failed (rc {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}", flush=True
            )
    except subprocess.TimeoutExpired as exc:
        raw = exc.stdout or b""
        stdout = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
        print(f"!! run {run} stopped after {timeout_s:.0f} s; keeping the keys it tuned", flush=True)
    out: dict[str, Any] = {}
    for line in stdout.splitlines():
        if line.startswith("KEY "):
            out.update(json.loads(line[len("KEY ") :]))
    return out


def measure_pair(
    shape: tuple[int, int, int], configs: tuple[dict[str, Any], dict[str, Any]], rounds: int, rep_ms: int
) -> tuple[float, float]:
    """Median over `rounds` of do_bench's median for each config, alternating which goes first."""
    from record_landscape import launcher, operands

    a, b, c = operands(shape, "cuda")
    ms_a, ms_b = common.interleaved_medians([launcher(a, b, c, dict(cfg)) for cfg in configs], rounds, rep_ms)
    return ms_a, ms_b


def main() -> None:
    """Two cold runs in fresh processes, then the side-by-side re-measurement; print the table, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=parse_key, nargs="+", default=KEYS, help="M,N,K shapes (fp16)")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved re-measurement rounds per key")
    parser.add_argument("--rep-ms", type=int, default=20, help="do_bench time budget per config per round")
    parser.add_argument("--run-timeout-s", type=float, default=420.0, help="limit for each cold run's process")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.keys)
        return
    common.skip_without_gpu("bench_determinism")

    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-determinism-") as tmp:
        for run in RUNS:
            print(f"  cold run {run}: {len(args.keys)} keys in a fresh process ...", flush=True)
            started = time.perf_counter()
            runs[run] = spawn(run, args.keys, tmp, args.run_timeout_s)
            print(f"  cold run {run}: {time.perf_counter() - started:.0f} s", flush=True)
        # Re-measure with run A's Triton cache: both runs compiled every config of SPACE, so nothing compiles.
        os.environ["TRITON_CACHE_DIR"] = os.path.join(tmp, "triton-A")
        common.prepare()
        rows: list[list[Any]] = []
        cases: dict[str, dict[str, Any]] = {}
        ratios: list[float | None] = []
        for shape in args.keys:
            name = f"{shape[0]},{shape[1]},{shape[2]}"
            got = {run: runs[run].get(name, {"error": "missing"}) for run in RUNS}
            errors = {run: g["error"] for run, g in got.items() if "error" in g}
            if errors:
                ratios.append(None)
                cases[name] = {"errors": errors}
                rows.append(
                    [
                        name,
                        *(describe(g["winner"]) if "winner" in g else "error" for g in got.values()),
                        "-",
                        None,
                        None,
                        None,
                        "NO (error)",
                    ]
                )
                continue
            cfg_a, cfg_b = got["A"]["winner"], got["B"]["winner"]
            same = cfg_a == cfg_b
            ms_a, ms_b = measure_pair(shape, (cfg_a, cfg_b), args.rounds, args.rep_ms)
            ratio = 1.0 if same else pair_ratio(ms_a, ms_b)
            ratios.append(ratio)
            ok = ratio is not None and ratio <= 1.0 + TOLERANCE
            rows.append(
                [
                    name,
                    describe(cfg_a),
                    describe(cfg_b),
                    "yes" if same else "no",
                    ms_a * 1e3,
                    ms_b * 1e3,
                    ratio,
                    "yes" if ok else "NO",
                ]
            )
            cases[name] = {
                "winner_A": cfg_a,
                "winner_B": cfg_b,
                "same": same,
                "ms_A": ms_a,
                "ms_B": ms_b,
                "ratio": ratio,
                "within": ok,
                "tuning_s": {run: got[run]["tuning_s"] for run in RUNS},
                "tuner_ms": {run: got[run]["tuner_ms"] for run in RUNS},
            }
            print(
                f"  {name}: {describe(cfg_a)} | {describe(cfg_b)}  ratio {ratio if ratio is None else round(ratio, 4)}",
                flush=True,
            )

    share = share_within(ratios)
    same_share = sum(1 for c in cases.values() if c.get("same")) / max(1, len(cases))
    print(
        f"\ndeterminism of cold tuning, matmul fp16, {len(args.keys)} keys, on {common.device_name()} "
        f"(re-measured side by side: {args.rounds} interleaved rounds x do_bench median, {args.rep_ms} ms)"
    )
    print(
        common.table(
            [
                "key M,N,K",
                "run A winner",
                "run B winner",
                "same",
                "A us",
                "B us",
                "slower/faster",
                f"within {TOLERANCE:.0%}",
            ],
            rows,
        )
    )
    print(
        f"keys within {TOLERANCE:.0%}: {share:.0%} (target >= {TARGET_SHARE:.0%}: "
        f"{'met' if share >= TARGET_SHARE else 'NOT met'}); same config chosen on {same_share:.0%}"
    )
    common.write_results(
        "bench_determinism",
        {
            "keys": [list(k) for k in args.keys],
            "rounds": args.rounds,
            "rep_ms": args.rep_ms,
            "tolerance": TOLERANCE,
            "share_within": share,
            "target_share": TARGET_SHARE,
            "met": share >= TARGET_SHARE,
            "same_share": same_share,
            "cases": cases,
        },
    )


if __name__ == "__main__":
    main()
