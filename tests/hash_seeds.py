"""Run a snippet in fresh Python processes under several PYTHONHASHSEEDs: what must be the same in every process
(checksums, cache identities) is checked that way, since a set's order or an address differs between them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def printed_under_hash_seeds(code: str, seeds: tuple[str, ...], **env_extra: str) -> list[str]:
    """What `python -c code` prints in a fresh process per PYTHONHASHSEED."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), **env_extra)
    return [
        subprocess.run(
            [sys.executable, "-c", code],
            env={**env, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout.strip()
        for seed in seeds
    ]
