"""Search spaces: the Cartesian, fixed and union spaces of `Config`s (`config.py`) that a kernel is tuned over."""

from __future__ import annotations

import hashlib
import itertools
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..config import Config, check_json_value, value_identity
from ..errors import SpaceError
from .checksum import configs_checksum, filter_identity
from .triton_config import config_from_triton, is_triton_config

if TYPE_CHECKING:
    from .sampling import FactorizedSampler

__all__ = [
    "Config",
    "SearchSpace",
    "CartesianSpace",
    "FixedSpace",
    "UnionSpace",
    "as_space",
    "configs_checksum",
    "LIST_LIMIT",
]

LIST_LIMIT = 100_000  # a space with more configs than this (before filtering) is never listed: it is searched
_CACHE_LIMIT = LIST_LIMIT  # a space keeps its configs once listed (decorating reads them three times)
_SAMPLE_TRIES = 10_000  # rejection sampling gives up after this many draws that a filter refused


class SearchSpace(ABC):
    """An immutable, lazily iterated, ordered set of `Config`s, optionally filtered by `where` predicates.

    Subclasses yield the unfiltered configs from `_iter_all` and name their fields in `_declared_fields`.
    """

    _preds: tuple[Callable[[Config], bool], ...] = ()
    _pred_sources: tuple[str, ...] = ()
    # each filter in a lazy space's checksum: a $X string's text, or the callable (its identity is taken at the first
    # checksum(), so a global set after where(), e.g. from a command-line flag, is hashed as the filter reads it)
    _pred_ids: tuple[str | Callable[..., Any] | None, ...] = ()  # None: an eager space's
    _exact_len = True  # whether `_len_all` counts the configs exactly (a union's is a bound)
    _cache: list[Config] | None = None
    _checksum: str | None = None

    # -- subclass hooks -------------------------------------------------------------------------
    @abstractmethod
    def _iter_all(self) -> Iterator[Config]:
        """The configs before `where` filtering, in order, without duplicates."""

    @abstractmethod
    def _declared_fields(self) -> frozenset[str]:
        """The union of the fields of the unfiltered configs (no predicate is called)."""

    def _len_all(self) -> int:
        """The number of configs before filtering."""
        return sum(1 for _ in self._iter_all())

    @abstractmethod
    def _describe(self) -> str:
        """A short repr of the unfiltered space."""

    def _structure(self) -> str:
        """What a lazy space's checksum hashes besides its filters: everything its unfiltered configs depend on."""
        return self._describe()

    # -- immutability ---------------------------------------------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable; where() and + return new spaces")

    def _set(self, **attrs: Any) -> None:
        for name, value in attrs.items():
            object.__setattr__(self, name, value)

    def _derived(self, **attrs: Any) -> SearchSpace:
        new = object.__new__(type(self))
        for name, value in self.__dict__.items():
            if name not in ("_member_set", "_sampler"):  # built for this space's filters, not the new space's
                object.__setattr__(new, name, value)
        new._set(_cache=None, _checksum=None, **attrs)
        return new

    # -- public API -----------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Config]:
        """Yield the configs lazily, in order; predicates run only as configs are reached."""
        if self._cache is not None:
            return iter(self._cache)
        if not self._preds:
            return self._iter_all()
        preds = self._preds
        return (c for c in self._iter_all() if all(p(c) for p in preds))

    def __len__(self) -> int:
        """The number of configs left after filtering. A lazy space raises SpaceError (also a TypeError, so that
        `list(space)` still works) when that number is not known without listing it: filtered, or a union."""
        if self._cache is not None:
            return len(self._cache)
        if not self._preds and self._exact_len:
            return self._len_all()
        if self.lazy:
            raise _UnknownLength(
                f"len() of a lazy {type(self).__name__} (over {LIST_LIMIT:,} configs, never listed): "
                "how many configs its filters keep (or a union's parts share) is not known without "
                f"listing them all; unfiltered_len() is {self._len_all():,}, the count before that"
            )
        return len(self.configs())

    def __bool__(self) -> bool:
        return next(iter(self), None) is not None

    def configs(self) -> list[Config]:
        """The configs as a list (a fresh list; the materialised configs are cached when not huge)."""
        if self._cache is not None:
            return list(self._cache)
        out = list(iter(self))
        if len(out) <= _CACHE_LIMIT:
            self._set(_cache=out)
        return list(out)

    def first(self) -> Config:
        """The first config; SpaceError when the space is empty."""
        for config in self:
            return config
        raise SpaceError(f"search space {self.outline()} is empty; it has no first config")

    def fields(self) -> frozenset[str]:
        """The union of the field names over the space's configs (as declared, before `where` filtering)."""
        return self._declared_fields()

    def common_fields(self) -> frozenset[str]:
        """The fields every config of the space sets (as declared, before `where` filtering; never lists a lazy
        space): a config without a field the kernel needs cannot launch."""
        return self._declared_fields()

    def where(self, pred: str | Callable[[Config], bool]) -> SearchSpace:
        """A new space keeping the configs for which `pred` (a callable or a `$X` string) holds; chains."""
        from .expressions import compile_predicate

        fn = compile_predicate(pred, config_fields=self._declared_fields())
        source = pred if isinstance(pred, str) else getattr(pred, "__name__", None) or repr(pred)
        ident: str | Callable[..., Any] | None = None
        if self.lazy:  # its checksum hashes the filter: one with no stable identity fails here, not at tuning
            # A $X string is what it computes (the expression language has no free names): its text, the same under
            # every Python version (bytecode is not), so a fleet or a deployment on another Python finds its entries.
            if isinstance(pred, str):
                ident = f"string {pred}"
            else:
                filter_identity(pred)  # raises now for a filter with no stable text; hashed at the first checksum()
                ident = pred
        return self._derived(
            _preds=self._preds + (fn,),
            _pred_sources=self._pred_sources + (source,),
            _pred_ids=self._pred_ids + (ident,),
        )

    def __add__(self, other: Any) -> SearchSpace:
        """The union: this space's configs, then the other's, duplicates dropped."""
        return self._union(other, self_first=True)

    def __radd__(self, other: Any) -> SearchSpace:
        return self._union(other, self_first=False)

    def _union(self, other: Any, *, self_first: bool) -> SearchSpace:
        if not isinstance(other, (SearchSpace, Mapping, list, tuple)):
            return NotImplemented  # Python then tries the other operand, else raises its TypeError
        other_space = as_space(other)  # a list with a bad item: its SpaceError names the item
        return UnionSpace(self, other_space) if self_first else UnionSpace(other_space, self)

    def checksum(self) -> str:
        """sha256 hex of the ordered configs' canonical JSON: stable across processes and hash seeds. A lazy
        space is not listed: its checksum is that of its structure (axes; a FixedSpace's configs; a union's parts'
        checksums) and the identities of its filters (`filter_identity`)."""
        if self._checksum is None:
            self._set(_checksum=self._structural_checksum() if self.lazy else configs_checksum(self))
        return self._checksum  # type: ignore[return-value]

    def _structural_checksum(self) -> str:
        h = hashlib.sha256(self._structure().encode())
        for ident in self._pred_ids:
            text = ident if ident is None or isinstance(ident, str) else f"callable {filter_identity(ident)}"
            h.update(b"\nwhere " + str(text).encode())
        return h.hexdigest()

    @property
    def is_filtered(self) -> bool:
        """Whether `where` predicates apply to this space."""
        return bool(self._preds)

    @property
    def filters(self) -> tuple[Callable[[Config], bool], ...]:
        """The where() filters applied to this space itself (not those of a union's parts), in order: a `$X`
        string's is a `WhereString`, a callable's the callable."""
        return self._preds

    def unfiltered_len(self) -> int:
        """The number of configs before any `where` filtering."""
        return self._len_all()

    # -- search: what a strategy needs, without listing a large space ---------------------------------
    @property
    def lazy(self) -> bool:
        """Whether the space is too large to list (over LIST_LIMIT configs before filtering): decorating and
        searching it never enumerate it; only a strategy's samples and neighbours are built."""
        return self._len_all() > LIST_LIMIT

    def contains(self, config: Config) -> bool:
        """Whether `config` is one of the space's configs (its filters included). 1, 1.0 and True are three
        values, as in `Config`'s ==."""
        return (config if isinstance(config, Config) else Config(config)) in self._members()

    def _members(self) -> frozenset[Config]:
        members = self.__dict__.get("_member_set")
        if members is None:
            members = frozenset(self)
            self._set(_member_set=members)
        return members

    def sample(self, rng: Any) -> Config:
        """A uniformly random config of the space (`rng` is a `random.Random`)."""
        configs = self._listed()
        if not configs:
            raise SpaceError(f"search space {self.outline()} is empty")
        return configs[rng.randrange(len(configs))]

    def _known_empty(self) -> bool:
        """Whether the space is known to have no config without listing it: here, only when already listed (a
        subclass knows more); sampling asks it of each union part, and a space is never listed to learn it."""
        return self._cache is not None and not self._cache

    def neighbours(self, config: Config) -> list[Config]:
        """The configs that differ from `config` in one field only (a FixedSpace's rule; a Cartesian space's
        are one axis, one step away, and a union's are its parts')."""
        mine = {k: value_identity(v) for k, v in config.items()}  # once, not once per listed config
        return [
            c
            for c in self._listed()
            if c.keys() == mine.keys() and sum(1 for k in c if value_identity(c[k]) != mine[k]) == 1
        ]

    def _listed(self) -> list[Config]:
        if self._cache is not None:
            return self._cache
        return self.configs()

    def __repr__(self) -> str:
        return self._describe() + self._filters_text()

    def outline(self) -> str:
        """The space in a line, for an error message: a Cartesian axis shows its size and first values (repr
        shows them all), and the filters as written."""
        return repr(self)

    def _filters_text(self) -> str:
        """The `.where(...)` calls that made this space from its unfiltered one, as written."""
        return "".join(f".where({s!r})" if isinstance(s, str) else f".where({s})" for s in self._pred_sources)


class _UnknownLength(SpaceError, TypeError):
    """len() of a lazy space whose count is not known without listing it. A TypeError too: `list(space)` asks
    len() for a size hint and goes on without one only after a TypeError."""


def _dedup(configs: Iterable[Config]) -> Iterator[Config]:
    """Drop repeated configs, keeping the first (`Config`'s ==: 1, 1.0 and True stay distinct)."""
    seen: set[Config] = set()
    for config in configs:
        if config not in seen:
            seen.add(config)
            yield config


def _in_stable_order(values: set | frozenset) -> list[Any]:
    """A set's values sorted (by type, then value; by text where values do not compare), so that the configs, their
    order and the space's checksum are the same in every process: a set of strings iterates in hash order."""
    try:
        return sorted(values, key=lambda v: (type(v).__name__, v))
    except TypeError:
        return sorted(values, key=lambda v: (type(v).__name__, repr(v)))


def _materialise_axis(name: str, values: Any) -> tuple[Any, ...]:
    if isinstance(values, (str, bytes)) or isinstance(values, Mapping) or not isinstance(values, Iterable):
        raise SpaceError(
            f"axis {name!r} = {values!r} is a single value, not an iterable of values; wrap it in a "
            f"tuple: {name}=({values!r},)"
        )
    if isinstance(values, (set, frozenset)):  # its order follows PYTHONHASHSEED: the same in every process
        values = _in_stable_order(values)
    out: list[Any] = []
    seen: set[Any] = set()
    for v in values:
        clean = check_json_value(name, v)
        key = value_identity(clean)
        if key not in seen:
            seen.add(key)
            out.append(clean)
    if not out:
        raise SpaceError(f"axis {name!r} has no values; give it at least one, e.g. {name}=(64,)")
    return tuple(out)


class CartesianSpace(SearchSpace):
    """The product of named axes, in `itertools.product` order (last axis fastest).

    Each axis is any iterable of JSON-friendly values (tuple, list, range), materialised at construction.
    """

    _axes: dict[str, tuple[Any, ...]]  # set once in __init__ (`_set`: a space is immutable)
    _names: tuple[str, ...]
    _values: tuple[tuple[Any, ...], ...]

    def __init__(self, **axes: Iterable[Any]) -> None:
        if not axes:
            raise SpaceError(
                "the search space has no axes (space={} or CartesianSpace()); give at least one axis, "
                "e.g. space={'BLOCK': [64, 128]}"
            )
        clean: dict[str, tuple[Any, ...]] = {}
        for name, values in axes.items():
            if not name.isidentifier():
                raise SpaceError(f"axis name {name!r} is not a Python identifier")
            clean[name] = _materialise_axis(name, values)
        self._set(_axes=clean, _names=tuple(clean), _values=tuple(clean.values()))

    @property
    def axes(self) -> dict[str, tuple[Any, ...]]:
        """The axes as a fresh dict name -> tuple of values."""
        return dict(self._axes)

    def _iter_all(self) -> Iterator[Config]:
        names = self._names
        # Each axis's values were checked when the space was made: each config only pairs them with their identities.
        pairs = [[(v, (name, value_identity(v))) for v in values] for name, values in zip(names, self._values)]
        from_checked = Config.from_checked
        for combo in itertools.product(*pairs):
            yield from_checked(dict(zip(names, [v for v, _ in combo])), frozenset([i for _, i in combo]))

    def _len_all(self) -> int:
        return math.prod(len(v) for v in self._values)

    def _declared_fields(self) -> frozenset[str]:
        return frozenset(self._names)

    def _describe(self) -> str:
        return "CartesianSpace(" + ", ".join(f"{k}={v!r}" for k, v in self._axes.items()) + ")"

    def _positions(self, config: Config) -> tuple[int, ...] | None:
        """Each axis's index of `config`'s value, or None when a field or a value is not the space's."""
        if config.keys() != set(self._names):
            return None
        index = self.__dict__.get("_index")
        if index is None:
            index = tuple({value_identity(v): i for i, v in enumerate(values)} for values in self._values)
            self._set(_index=index)
        out = []
        for name, axis in zip(self._names, index):
            i = axis.get(value_identity(config[name]))
            if i is None:
                return None
            out.append(i)
        return tuple(out)

    def _passes(self, config: Config) -> bool:
        return all(p(config) for p in self._preds)

    def contains(self, config: Config) -> bool:
        return self._positions(config) is not None and self._passes(config)

    def sample(self, rng: Any) -> Config:
        """A uniformly random config that passes the filters, without listing the space (space_sampling): plain
        rejection (a config of the product, redrawn while a filter refuses it) where the filters keep at least 1%
        of the product, else the axes that `$X` clauses read together are drawn from their listed valid
        combinations, the rest uniformly, and a draw is redrawn while a filter not covered that way (a callable)
        refuses it. Both are uniform over the configs that pass; which one a space uses depends on the space alone
        (a probe with its own seed), so a seed draws the same configs whatever the space drew before."""
        sampler = self._sampler_of()
        config = sampler.draw(rng, _SAMPLE_TRIES)
        if config is not None:
            return config
        if not self.lazy:
            return super().sample(rng)
        if sampler.empty:
            raise SpaceError(
                f"the where() filters of {self.outline()} keep none of its {self._len_all():,} configs; loosen them"
            )
        fix = (
            "split each $X filter into conditions joined by `and` that read fewer axes each (a condition's axes are "
            "sampled from their valid combinations when listing those takes at most 200,000 checks)"
            if sampler.uncovered_strings
            else "write them as $X strings (the axes a string reads are then sampled from their valid combinations)"
        )
        raise SpaceError(
            f"{_SAMPLE_TRIES} random configs of {self.outline()} were all refused by its filters: they "
            f"keep too small a part of the product to sample by rejection. To sample it, {fix}, or "
            "tighten the axes instead of filtering"
        )

    def _sampler_of(self) -> FactorizedSampler:
        """The space's sampler, built on first use (a probe of the filters: see `sample`)."""
        sampler = self.__dict__.get("_sampler")
        if sampler is None:
            from .sampling import FactorizedSampler

            sampler = FactorizedSampler.for_space(self._names, self._values, self._preds)
            self._set(_sampler=sampler)
        return sampler

    def _known_empty(self) -> bool:
        """Whether its filters keep no config, by its sampler's probe (a `$X` clause that no combination passes),
        lazy or not: never listed for it."""
        return self._sampler_of().empty or super()._known_empty()

    def outline(self) -> str:
        """The space in a line: each axis's size and first values, and its filters (an error message's view)."""
        axes = ", ".join(
            f"{n}=({', '.join(map(repr, v[:3]))}{', ...' if len(v) > 3 else ''}: {len(v)} values)"
            for n, v in self._axes.items()
        )
        return f"CartesianSpace({axes})" + self._filters_text()

    def neighbours(self, config: Config) -> list[Config]:
        """The configs one step away along one axis (the previous or next value), that pass the filters; none for
        a config off the axes. A config the filters refuse has them too (a union's part that filters out a config
        of another part still offers its moves around it)."""
        positions = self._positions(config)
        if positions is None:
            return []
        out = []
        for name, values, i in zip(self._names, self._values, positions):
            for j in (i - 1, i + 1):
                if 0 <= j < len(values):
                    candidate = config.replace(**{name: values[j]})
                    if self._passes(candidate):
                        out.append(candidate)
        return out


class FixedSpace(SearchSpace):
    """An explicit list of configs (mappings or `Config`s), which may differ in fields; duplicates dropped."""

    _items: tuple[Config, ...]  # set once in __init__ (`_set`: a space is immutable)
    _fields: frozenset[str]

    def __init__(self, configs: Iterable[Mapping[str, Any] | Config]) -> None:
        if isinstance(configs, (str, bytes, Mapping)) or not isinstance(configs, Iterable):
            raise SpaceError(f"FixedSpace takes a list of mappings, got {type(configs).__name__}: {configs!r}")
        items: list[Config] = []
        for i, c in enumerate(configs):
            if isinstance(c, Config):
                items.append(c)
            elif isinstance(c, Mapping):
                items.append(Config(c))
            else:
                raise SpaceError(
                    f"FixedSpace item {i} is {type(c).__name__} {c!r}; each config must be a mapping "
                    "of field -> value (or an autotune.Config)"
                )
        unique = tuple(_dedup(items))
        fields: frozenset[str] = frozenset().union(*(c.keys() for c in unique)) if unique else frozenset()
        self._set(_items=unique, _fields=fields)

    def _iter_all(self) -> Iterator[Config]:
        return iter(self._items)

    def _len_all(self) -> int:
        return len(self._items)

    def _declared_fields(self) -> frozenset[str]:
        return self._fields

    def common_fields(self) -> frozenset[str]:
        return frozenset.intersection(*(frozenset(c) for c in self._items)) if self._items else frozenset()

    def _describe(self) -> str:
        shown = ", ".join(repr(c) for c in self._items[:3])
        more = f", ... ({len(self._items)} configs)" if len(self._items) > 3 else ""
        return f"FixedSpace([{shown}{more}])"

    def _structure(self) -> str:
        return "FixedSpace " + configs_checksum(self._items)  # all its configs: `_describe` shows three

    def _known_empty(self) -> bool:
        """No configs given, or listed with none (its filters are not run to find out)."""
        return not self._items or super()._known_empty()

    def sample(self, rng: Any) -> Config:
        """A uniformly random config: one of the list, without copying it (a replayed landscape's recorded
        configs can be more than a space keeps listed). A lazy filtered one draws items until one passes the
        filters (uniform over those that do), and lists itself only after `_SAMPLE_TRIES` refused draws: a list
        of its size is never kept, so listing it at every draw would run its filters over all its items each time."""
        if not self._items or (self._preds and (self._cache is not None or not self.lazy)):
            return super().sample(rng)
        if not self._preds:
            return self._items[rng.randrange(len(self._items))]
        for _ in range(_SAMPLE_TRIES):
            config = self._items[rng.randrange(len(self._items))]
            if self._passes(config):
                return config
        return super().sample(rng)  # filters that keep few items: listed (and kept, being few)

    def _passes(self, config: Config) -> bool:
        return all(p(config) for p in self._preds)

    def neighbours(self, config: Config) -> list[Config]:
        """The configs that differ from `config` in one field only, in the list's order, that pass the filters. A
        lazy one looks them up in an index built on first use (the items by field and the other fields' values),
        instead of listing itself at each call."""
        if not self.lazy or self._cache is not None:
            return super().neighbours(config)
        index = self._neighbour_index()
        mine = {k: value_identity(v) for k, v in config.items()}
        found = sorted({i for k in mine for i in index.get(_others(k, mine), ())})
        out = [self._items[i] for i in found if self._items[i] != config]
        return [c for c in out if self._passes(c)]

    def _neighbour_index(self) -> dict[tuple[str, frozenset], list[int]]:
        """(a field, the identities of the other fields' values) -> the positions of the items so: two items under
        one entry differ in that field alone. Built once (a space is immutable)."""
        index = self.__dict__.get("_neighbour_index_of")
        if index is None:
            index = {}
            for i, item in enumerate(self._items):
                ids = {k: value_identity(v) for k, v in item.items()}
                for k in ids:
                    index.setdefault(_others(k, ids), []).append(i)
            self._set(_neighbour_index_of=index)
        return index


def _others(field: str, identities: dict[str, Any]) -> tuple[str, frozenset]:
    """A `FixedSpace` neighbour index's key: the field, and the identities of the other fields' values."""
    return field, frozenset((k, v) for k, v in identities.items() if k != field)


class UnionSpace(SearchSpace):
    """`a + b`: the configs of `a`, then those of `b`, duplicates dropped."""

    _exact_len = False  # `_len_all` counts a config in both parts twice
    _parts: tuple[SearchSpace, SearchSpace]  # set once in __init__ (`_set`: a space is immutable)

    def __init__(self, first: SearchSpace, second: SearchSpace) -> None:
        self._set(_parts=(first, second))

    @property
    def parts(self) -> tuple[SearchSpace, SearchSpace]:
        """The two spaces joined (each may itself be a union); the union's own filters apply on top of them."""
        return self._parts

    def _iter_all(self) -> Iterator[Config]:
        return _dedup(itertools.chain(*self._parts))

    def _declared_fields(self) -> frozenset[str]:
        return self._parts[0].fields() | self._parts[1].fields()

    def common_fields(self) -> frozenset[str]:
        return self._parts[0].common_fields() & self._parts[1].common_fields()

    def _len_all(self) -> int:
        """At most this many configs (duplicates across the parts counted twice): never lists the parts. Counted
        once and kept (`lazy` asks it at every level of a union of many parts)."""
        total = self.__dict__.get("_total")
        if total is None:
            total = self._parts[0].unfiltered_len() + self._parts[1].unfiltered_len()
            self._set(_total=total)
        return total

    def _draw_sizes(self) -> tuple[int, int]:
        """Each part's weight when sampling: its unfiltered size, 0 for a part known to be empty (never listed to
        learn it: `_known_empty`). Found on the first draw and kept: a space is immutable."""
        sizes = self.__dict__.get("_sizes")
        if sizes is None:
            first, second = (0 if p._known_empty() else p.unfiltered_len() for p in self._parts)
            sizes = (first, second)
            self._set(_sizes=sizes)
        return sizes

    def contains(self, config: Config) -> bool:
        return any(p.contains(config) for p in self._parts) and all(pred(config) for pred in self._preds)

    def sample(self, rng: Any) -> Config:
        """A random config: a part drawn in proportion to its size (never a part whose filters keep none), then a
        config of it, kept if it passes."""
        if not self.lazy:
            return super().sample(rng)
        sizes = self._draw_sizes()
        total = sum(sizes)
        if not total:
            raise SpaceError(f"every part of {self.outline()} is empty: loosen a part's where() filters")
        for _ in range(_SAMPLE_TRIES):
            part = self._parts[0] if rng.randrange(total) < sizes[0] else self._parts[1]
            config = part.sample(rng)
            if all(pred(config) for pred in self._preds):
                return config
        raise SpaceError(
            f"{_SAMPLE_TRIES} random configs of {self.outline()} were all refused by its filters: they keep too "
            "small a part of the union to sample by rejection. To sample it, apply the filter to each part "
            "(`a.where(f) + b.where(f)`), whose `$X` clauses are then sampled from their valid combinations"
        )

    def _known_empty(self) -> bool:
        """Listed with no config, or each part known to be empty (its own filters are not known without listing)."""
        return super()._known_empty() or not any(self._draw_sizes())

    def neighbours(self, config: Config) -> list[Config]:
        """Each part's neighbours of `config` (none from a Cartesian part that lacks it), duplicates dropped,
        that pass the union's filters: the same rule whether or not the union is listed."""
        around = _dedup(c for p in self._parts for c in p.neighbours(config))
        return [c for c in around if all(pred(c) for pred in self._preds)]

    def _describe(self) -> str:
        return f"({self._parts[0]!r} + {self._parts[1]!r})"

    def _structure(self) -> str:
        return f"union {self._parts[0].checksum()} {self._parts[1].checksum()}"  # a part's repr misses its filters

    def outline(self) -> str:
        return f"({self._parts[0].outline()} + {self._parts[1].outline()})" + self._filters_text()


def as_space(obj: Any) -> SearchSpace:
    """Turn what `space=` accepts into a SearchSpace: a space, a dict of axes, or a list of mappings/triton.Configs."""
    if isinstance(obj, SearchSpace):
        return obj
    if isinstance(obj, Mapping) and not isinstance(obj, Config):
        return CartesianSpace(**obj)
    if isinstance(obj, (list, tuple)):
        items: list[Any] = []
        for i, item in enumerate(obj):
            if is_triton_config(item):
                items.append(config_from_triton(item, f"triton.Config {i}"))
            elif isinstance(item, Mapping):
                items.append(item)
            else:
                raise SpaceError(
                    f"space item {i} is {type(item).__name__} {item!r}; a list space holds mappings, "
                    "autotune.Configs or triton.Configs"
                )
        return FixedSpace(items)
    raise SpaceError(
        f"space must be a SearchSpace, a dict of axes (CartesianSpace), or a list of configs "
        f"(FixedSpace); got {type(obj).__name__}: {obj!r}"
    )
