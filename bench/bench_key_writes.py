"""The cost of filing a new key's entry as a kernel's directory fills up: flat, not growing with the keys there.

Each key is filed as a tuning files it on disk (`DiskCache`: take the key's lock, look the entry up, write it,
release), into one kernel's directory, in a fresh scratch directory; the record is the size of a real one (64
trials). Printed: the mean cost per key over windows of keys (the first, the ones after 250, 1,000, 2,000 ...
keys, the last), and the ratio of the last window's cost to the first's. Before issue 40 every write listed the
kernel's whole directory (the stale-`.tmp` sweep): 30.7 ms per key at 250 keys, 143 ms after 2,000.

    python bench/bench_key_writes.py [--keys N] [--window W]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

common.prepare()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=10_000, help="keys to file into one kernel's directory")
    parser.add_argument("--window", type=int, default=200, help="keys per measured window")
    args = parser.parse_args()
    from autotune.record import Trial, TrialStatus
    from autotune.space import Config
    from autotune.storage import DiskCache, EntryRef, KernelCache

    work = Path(common.scratch_dir("autotune-bench-writes-"))
    space = [Config(BLOCK=b, num_warps=w) for b in (16, 32, 64, 128, 256, 512, 1024, 2048) for w in (1, 2, 4, 8)]
    space += [Config(BLOCK=b, num_warps=w) for b in (16, 32, 64, 128, 256, 512, 1024, 2048) for w in (16, 32, 64, 128)]
    seed = KernelCache("bench", "src", "space", set(space).__contains__, identity="bench:bench", tiers=[])
    trials = [
        Trial(config=c, status=TrialStatus.OK, median_ms=1.0 + i / 100, min_ms=1.0, samples_ms=[1.0 + i / 100] * 20)
        for i, c in enumerate(space)
    ]
    disk = DiskCache(work / "cache")
    per_key_ms: list[float] = []
    for n in range(args.keys):
        record = seed.new_record(
            (n,), ("torch.float32",), winner=space[0], trials=trials, tuning_s=1.0, candidates=None
        )
        entry = EntryRef.of(record)
        start = time.perf_counter()
        lease = disk.lock(entry, timeout_s=None)
        assert lease is not None and disk.get(entry) is None
        assert disk.put(entry, record)
        lease.release()
        per_key_ms.append((time.perf_counter() - start) * 1e3)
    w = args.window
    marks = sorted({0, *(m for m in (250, 1000, 2000, 5000) if m + w <= args.keys), args.keys - w})
    rows = [[f"{m:,}-{m + w:,}", f"{sum(per_key_ms[m : m + w]) / w:.3f}"] for m in marks]
    first, last = (sum(per_key_ms[m : m + w]) / w for m in (0, args.keys - w))
    print(f"filing {args.keys:,} keys into one kernel's directory ({len(trials)}-trial records), mean per key")
    print(common.table(["keys", "ms/key"], rows))
    print(f"\nlast {w} keys / first {w} keys: {last / first:.2f}x")
    common.write_results(
        "bench_key_writes",
        {
            "keys": args.keys,
            "window": w,
            "ms_per_key": {r[0]: float(r[1]) for r in rows},
            "ratio_last_over_first": last / first,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
