"""Triton's compile cache as `export_archive` reads it: the complete entries of a kernel name.

Why its own module: what an entry is (its group file, metadata and artifacts) is Triton's format, read in one
place; nothing read is evaluated (JSON only).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

from .archive_checks import ARTIFACT_NAME

__all__ = ["CacheEntry", "triton_entries"]


@dataclass(frozen=True)
class CacheEntry:
    """One complete entry of Triton's cache directory: its kernel (function) name, directory, metadata, files."""

    kernel: str
    dir: Path
    metadata: Mapping[str, Any]
    files: tuple[str, ...]

    @property
    def target(self) -> str:
        """"cuda:90", "hip:gfx942", or "unknown"."""
        target = self.metadata.get("target") or {}
        if isinstance(target, Mapping) and "backend" in target:
            return f"{target['backend']}:{target.get('arch')}"
        return "unknown"


def triton_entries(triton_dir: Path, names: Optional[set[str]]) -> list[CacheEntry]:
    """Complete entries of Triton's cache directory whose kernel is in `names` (None: all), in directory order."""
    out: list[CacheEntry] = []
    try:
        subdirs = sorted(p for p in triton_dir.iterdir() if p.is_dir())
    except OSError:
        return out
    for d in subdirs:
        try:
            groups = [p for p in d.iterdir() if p.name.startswith("__grp__") and p.name.endswith(".json")]
        except OSError:
            continue
        for grp in groups:
            kernel = grp.name[len("__grp__"):-len(".json")]
            if names is not None and kernel not in names:
                continue
            try:
                children = json.loads(grp.read_text())["child_paths"]
                metadata = json.loads((d / f"{kernel}.json").read_text())
            except (OSError, ValueError, KeyError, TypeError):
                continue
            files = sorted({os.path.basename(p) for p in children.values()} | {os.path.basename(c) for c in children})
            if (isinstance(metadata, dict) and all((d / f).is_file() for f in files)
                    and all(ARTIFACT_NAME.match(f) for f in files)):
                out.append(CacheEntry(kernel, d, metadata, tuple(files)))
    return out
