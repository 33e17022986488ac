"""Uniform random configs of a filtered Cartesian space, without listing the space.

Rejection alone (draw a config of the product, redraw while a filter refuses it) fails on a filter that keeps a
small share of the product, such as `$B == $C and $C == $D` over three 100-value axes (one config in 10^4). So for a
space whose filters keep under 1% of its product (`for_space` decides, by a probe with its own seed), the
`$X` filters are split into the clauses their top-level `and` joins, each clause reads known fields, and the axes
read together form groups; each group's valid value combinations are listed once, by backtracking that checks a
clause as soon as the fields it reads are chosen (20,000 checks for that example instead of 10^6). A config is
then a uniform pick of each listed group's combinations and a uniform value of every other axis; the filters not
covered that way (a callable, whose fields are unknown, or a group too large to list) are checked by rejection.
The result is uniform over the configs that pass every filter.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from ..config import Config
from .expressions import WhereString

__all__ = ["FactorizedSampler", "GROUP_CHECKS_LIMIT", "GROUP_KEEP_LIMIT", "PROBE_DRAWS"]

PROBE_DRAWS = 1_000  # configs of the product a space tries once to choose how it samples
GROUP_CHECKS_LIMIT = 200_000  # clause checks a group's listing may take before it is left to rejection
GROUP_KEEP_LIMIT = 100_000  # valid combinations a listed group may keep


class _TooLarge(Exception):
    """A group's listing passed a limit: its filters are checked by rejection instead."""


class FactorizedSampler:
    """Samples `CartesianSpace` configs uniformly: listed groups of axes for the `$X` clauses, rejection for the
    rest. Built once per space, on its first sample (`for_space`)."""

    @classmethod
    def for_space(
        cls, names: Sequence[str], values: Sequence[Sequence[Any]], preds: Sequence[Callable[[Config], bool]]
    ) -> FactorizedSampler:
        """The sampler a space of these axes and filters uses: plain rejection where at least 1% of `PROBE_DRAWS`
        configs of the product, drawn with a fixed seed of their own (not the caller's), pass the filters; else
        factorized. The choice depends on the space alone, so a seed draws the same configs whatever the space drew
        before."""
        if not preds:
            return cls(names, values, preds, factorize=False)
        probe = random.Random(0)
        passed = sum(
            all(p(config) for p in preds)
            for config in (_product_draw(names, values, probe) for _ in range(PROBE_DRAWS))
        )
        return cls(names, values, preds, factorize=passed < PROBE_DRAWS // 100)

    def __init__(
        self,
        names: Sequence[str],
        values: Sequence[Sequence[Any]],
        preds: Sequence[Callable[[Config], bool]],
        *,
        factorize: bool = True,
    ) -> None:
        """`factorize=False`: plain rejection over the whole product (the filters keep enough of it)."""
        self.names, self.values = tuple(names), tuple(tuple(v) for v in values)
        clauses = [(p, c) for p in preds if isinstance(p, WhereString) for c in p.clauses()] if factorize else []
        self.empty = False  # a clause that reads no field is false, or a group has no combination
        self.groups: list[tuple[tuple[str, ...], list[tuple]]] = []  # (axis names, their valid combinations)
        uncovered = [p for p in preds if not isinstance(p, WhereString) or not factorize]
        for p, clause in clauses:
            if not clause.fields_read:  # reads no field: true or false for every config alike
                try:
                    self.empty = self.empty or not clause({})
                except Exception:
                    uncovered += [p] if p not in uncovered else []
        for group, group_clauses in _groups(self.names, [c for _, c in clauses if c.fields_read]):
            try:
                combos = self._list(group, group_clauses)
            except _TooLarge:
                uncovered += [p for p, c in clauses if c in group_clauses and p not in uncovered]
                continue
            if not combos:
                self.empty = True
            self.groups.append((group, combos))
        self.rejected_by = uncovered  # the filters a drawn config must still pass
        self.uncovered_strings = factorize and any(isinstance(p, WhereString) for p in uncovered)
        grouped = {name for group, _ in self.groups for name in group}
        self.free = [(n, v) for n, v in zip(self.names, self.values) if n not in grouped]

    def draw(self, rng: Any, tries: int) -> Config | None:
        """A uniform config of the space, or None when `tries` draws were all refused (or the space is empty)."""
        if self.empty:
            return None
        for _ in range(tries):
            fields: dict[str, Any] = {}
            if self.groups:
                for group, combos in self.groups:
                    fields.update(zip(group, combos[rng.randrange(len(combos))]))
                fields.update((n, v[rng.randrange(len(v))]) for n, v in self.free)
                config = Config({n: fields[n] for n in self.names})  # the space's field order
            else:  # the same draws as plain rejection always made: a seed picks the same configs
                config = _product_draw(self.names, self.values, rng)
            if all(p(config) for p in self.rejected_by):
                return config
        return None

    def _list(self, group: tuple[str, ...], clauses: list[WhereString]) -> list[tuple]:
        """The group's value combinations that pass its clauses, by backtracking in the space's axis order."""
        values = [self.values[self.names.index(n)] for n in group]
        depth_of = {n: i for i, n in enumerate(group)}
        at_depth: list[list[WhereString]] = [[] for _ in group]
        for clause in clauses:  # checked once the last field it reads is chosen, in the filter's own order
            at_depth[max(depth_of[f] for f in clause.fields_read)].append(clause)
        out: list[tuple] = []
        partial: dict[str, Any] = {}
        checks = 0

        def extend(depth: int) -> None:
            nonlocal checks
            if depth == len(group):
                out.append(tuple(partial[n] for n in group))
                if len(out) > GROUP_KEEP_LIMIT:
                    raise _TooLarge
                return
            for value in values[depth]:
                partial[group[depth]] = value
                checks += len(at_depth[depth])
                if checks > GROUP_CHECKS_LIMIT:
                    raise _TooLarge
                try:
                    passed = all(clause(partial) for clause in at_depth[depth])
                except Exception:  # e.g. a clause its `and` guarded: the whole filter decides, by rejection
                    raise _TooLarge from None
                if passed:
                    extend(depth + 1)
            del partial[group[depth]]

        extend(0)
        return out


def _product_draw(names: Sequence[str], values: Sequence[Sequence[Any]], rng: Any) -> Config:
    """A uniform config of the unfiltered product: one value per axis, in axis order."""
    return Config({n: v[rng.randrange(len(v))] for n, v in zip(names, values)})


def _groups(names: tuple[str, ...], clauses: list[WhereString]) -> list[tuple[tuple[str, ...], list[WhereString]]]:
    """The axes read together by some clause, joined (union-find), each group with its clauses, in axis order."""
    parent = {n: n for n in names}

    def root(n: str) -> str:
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for clause in clauses:
        read = [f for f in names if f in clause.fields_read]
        for other in read[1:]:
            parent[root(other)] = root(read[0])
    by_root: dict[str, list[str]] = {}
    for n in names:
        by_root.setdefault(root(n), []).append(n)
    out = []
    for members in by_root.values():
        mine = [c for c in clauses if c.fields_read and root(next(iter(c.fields_read))) == root(members[0])]
        if mine:
            out.append((tuple(members), mine))
    return out
