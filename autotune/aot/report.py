"""What `precompile` did: per (config, target), compiled (`CompiledConfig`) or failed (`FailedConfig`), with
the wall time and the throughput (`PrecompileReport`), as text, a table or a dict for JSON.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..kernel.occupancy import describe
from ..space.spaces import Config
from .targets import Target, parse_target

__all__ = ["CompiledConfig", "FailedConfig", "PrecompileReport"]


@dataclass(frozen=True)
class CompiledConfig:
    """One config compiled for one target (or found already compiled in Triton's cache: `cached`)."""

    config: Config
    target: str
    cached: bool | None  # True: Triton's cache already had it; None: could not be told
    compile_s: float
    hash: str | None = None  # Triton's cache key (sha256 hex)
    shared_bytes: int | None = None
    num_warps: int | None = None
    n_regs: int | None = None
    n_spills: int | None = None  # from the loaded kernel, on a GPU only
    frame_bytes: int | None = None  # stack frame from the cubin: > 0 means register spills
    path: str | None = None  # the directory of Triton's cache holding it
    # what the config's occupancy became ({"maxnreg": 128}; {"maxnreg": None}: met uncapped); None: no occupancy
    lowered: dict[str, int | None] | None = None

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["config"] = dict(self.config)
        return out


@dataclass(frozen=True)
class FailedConfig:
    """One config that did not compile for one target, or compiled to a kernel the target cannot launch."""

    config: Config
    target: str
    error: str
    kind: str = "compile_error"  # "compile_error" | "out_of_resources" | "timeout" | "crashed" (its helper died)

    def to_dict(self) -> dict[str, Any]:
        return {"config": dict(self.config), "target": self.target, "error": self.error, "kind": self.kind}


@dataclass
class PrecompileReport:
    """What `precompile` did: per (config, target), compiled or failed; the wall time and the throughput."""

    kernel: str
    targets: list[str]
    compiled: list[CompiledConfig] = field(default_factory=list)
    failed: list[FailedConfig] = field(default_factory=list)
    wall_s: float = 0.0
    workers: int = 0
    processes: bool = False
    triton_cache_dir: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.compiled) + len(self.failed)

    @property
    def cache_hits(self) -> int:
        """Configs that Triton's cache already held (nothing compiled)."""
        return sum(1 for c in self.compiled if c.cached)

    @property
    def fresh(self) -> int:
        """Configs compiled now."""
        return sum(1 for c in self.compiled if not c.cached)

    @property
    def configs_per_s(self) -> float:
        return self.total / self.wall_s if self.wall_s > 0 else float("inf")

    @property
    def ok(self) -> bool:
        return not self.failed

    def for_target(self, target: str | Target) -> tuple[list[CompiledConfig], list[FailedConfig]]:
        name = str(parse_target(target))
        return ([c for c in self.compiled if c.target == name], [f for f in self.failed if f.target == name])

    def summary(self) -> str:
        return (
            f"precompile {self.kernel} for {', '.join(self.targets)}: {len(self.compiled)} compiled "
            f"({self.fresh} now, {self.cache_hits} already in Triton's cache), {len(self.failed)} failed, "
            f"{self.wall_s:.2f} s, {self.configs_per_s:.1f} configs/s, " + self._where_compiled()
        )

    def _where_compiled(self) -> str:
        if self.workers == 0:  # one config at a time: on this thread, or in one helper process
            return "1 helper process" if self.processes else "on the calling thread"
        return f"{self.workers} {'helper processes' if self.processes else 'workers'}"

    def __str__(self) -> str:
        from ..format import format_config, format_table

        rows = []
        for c in sorted(self.compiled, key=lambda c: (c.target, c.compile_s)):
            regs = "-" if c.n_regs is None else str(c.n_regs)
            rows.append(
                [
                    c.target,
                    format_config(c.config, sep=" ") + describe(c.lowered),
                    "cached" if c.cached else "compiled",
                    f"{c.compile_s:.2f}",
                    "-" if c.shared_bytes is None else c.shared_bytes,
                    regs,
                    "",
                ]
            )
        for f in self.failed:
            lines = f.error.strip().splitlines() or [""]
            first = lines[-1] if f.kind == "compile_error" else lines[0]  # a crash's first line: the stderr follows
            rows.append(
                [
                    f.target,
                    format_config(f.config, sep=" "),
                    f.kind,
                    "-",
                    "-",
                    "-",
                    first if len(first) <= 90 else first[:87] + "...",
                ]
            )
        table = format_table(
            ["TARGET", "CONFIG", "STATUS", "SECONDS", "SHARED_B", "REGS", "ERROR"], rows, right={3, 4, 5}
        )
        return "\n".join([table, "", self.summary(), *self.notes])

    def to_dict(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "targets": self.targets,
            "wall_s": self.wall_s,
            "workers": self.workers,
            "processes": self.processes,
            "configs_per_s": self.configs_per_s,
            "cache_hits": self.cache_hits,
            "fresh": self.fresh,
            "triton_cache_dir": self.triton_cache_dir,
            "notes": self.notes,
            "compiled": [c.to_dict() for c in self.compiled],
            "failed": [f.to_dict() for f in self.failed],
        }
