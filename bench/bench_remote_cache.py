"""The added latency of a remote (Redis) hit against a local-disk hit: a new process's first lookup of a key.

Each lookup uses a fresh `KernelCache` (nothing in memory, as in a new process) and a record the size of a real
one (64 trials). Variants, interleaved round by round in one run:
  - `disk hit`: the entry is in the local disk cache;
  - `remote hit`: the local disk is empty (a new directory per lookup), the entry is in Redis; the lookup reads
    Redis, validates the record and writes it to the local disk (fsync'd), as a node of a fleet does on its
    first call;
  - `remote read only`: Redis as the only tier (no disk write), to split the cost.
Redis is a real `redis-server` started on a free loopback port (skipped when none is installed); a LAN adds
its round trip (typically 0.1-0.5 ms) to every remote hit.

    python bench/bench_remote_cache.py [--lookups N] [--rounds R]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

common.prepare()
sys.path.insert(0, str(common.ROOT / "tests"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lookups", type=int, default=200, help="lookups per variant per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    from redis_process import RedisProcess, redis_server_path

    if redis_server_path() is None:
        print("bench_remote_cache: redis-server is not installed (apt-get install redis-server); skipped")
        return 0
    from autotune.record import Trial, TrialStatus
    from autotune.space import Config
    from autotune.storage import DiskCache, EntryRef, KernelCache, fingerprint
    from autotune.storage.redis_tier import RedisCache

    work = Path(common.scratch_dir("autotune-bench-remote-"))
    server = RedisProcess(work / "redis")
    try:
        space = [
            Config(BLOCK=b, num_warps=w)
            for b in (16, 32, 64, 128, 256, 512, 1024, 2048)
            for w in (1, 2, 4, 8, 16, 32, 64, 128)
        ]
        contains = set(space).__contains__

        def new_cache(tiers):
            return KernelCache("bench", "src", "space", contains, identity="bench:bench", tiers=tiers)

        seed = new_cache([])
        trials = [
            Trial(config=c, status=TrialStatus.OK, median_ms=1.0 + i / 100, min_ms=1.0, samples_ms=[1.0 + i / 100] * 20)
            for i, c in enumerate(space)
        ]
        key, dtypes = (4096,), ("torch.float32",)
        record = seed.new_record(key, dtypes, winner=space[0], trials=trials, tuning_s=1.0, candidates=None)
        entry = EntryRef.of(record)
        disk_dir = work / "disk"
        DiskCache(disk_dir).put(entry, record)
        remote = RedisCache(server.url)
        remote.put(entry, record)
        assert fingerprint.device_fingerprint() == record.device

        def disk_hit(i: int) -> str:
            return new_cache([DiskCache(disk_dir)]).get_or_tune(key, dtypes, _no_tuning)[1]

        def remote_hit(i: int) -> str:
            return new_cache([DiskCache(work / f"empty-{i}-{time.perf_counter_ns()}"), remote]).get_or_tune(
                key, dtypes, _no_tuning
            )[1]

        def remote_read(i: int) -> str:
            return new_cache([remote]).get_or_tune(key, dtypes, _no_tuning)[1]

        variants = {"disk hit": disk_hit, "remote hit": remote_hit, "remote read only": remote_read}
        per_round: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(args.rounds):
            for name, fn in variants.items():
                start = time.perf_counter()
                for i in range(args.lookups):
                    how = fn(i)
                assert how == name.split()[0], how
                per_round[name].append((time.perf_counter() - start) / args.lookups * 1e3)
        disk_ms = common.median(per_round["disk hit"])
        rows = [[name, f"{common.median(v):.3f}", f"{common.median(v) / disk_ms:.2f}"] for name, v in per_round.items()]
        print(
            f"first lookup of a key in a new process ({len(trials)}-trial record, {args.lookups} lookups x "
            f"{args.rounds} rounds, medians)"
        )
        print(common.table(["variant", "ms/lookup", "x disk hit"], rows))
        print(
            f"\na remote hit costs {common.median(per_round['remote hit']) - disk_ms:.3f} ms more than a disk hit "
            f"on loopback ({common.median(per_round['remote hit']) / disk_ms:.2f}x)"
        )
        common.write_results(
            "bench_remote_cache",
            {
                "lookups": args.lookups,
                "rounds": args.rounds,
                "ms_per_lookup": per_round,
                "ratio_remote_over_disk": common.median(per_round["remote hit"]) / disk_ms,
            },
        )
    finally:
        server.stop()
    return 0


def _no_tuning():
    raise AssertionError("a hit must not tune")


if __name__ == "__main__":
    sys.exit(main())
