"""Search spaces and what checks them: the spaces (`spaces`), their `$X` expression language (`expressions`),
what `space=` accepts (`spaces.as_space`, `triton_config`), checks against a kernel at decoration (`checks`), checksums (`checksum`) and
uniform sampling of filtered spaces (`sampling`)."""

from .spaces import LIST_LIMIT, CartesianSpace, Config, FixedSpace, SearchSpace, UnionSpace, as_space, configs_checksum

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
