"""The exceptions autotune raises: one base class, and one class per kind of problem."""
from __future__ import annotations


class AutotuneError(Exception):
    """Base class of every error autotune raises on purpose."""


class SpaceError(AutotuneError, ValueError):
    """A search space or config is malformed (raised when decorating where possible)."""


class ExpressionError(AutotuneError, ValueError):
    """A `$X` expression string is malformed or names something that does not exist."""


class OptionError(AutotuneError, ValueError):
    """Options conflict or are invalid (e.g. a static option that is also a space field)."""


class NoValidConfigError(AutotuneError, RuntimeError):
    """Every config of the space failed; the message lists each config's error."""

    def __init__(self, message: str, trials: list | None = None) -> None:
        super().__init__(message)
        self.trials = list(trials or [])


class VerificationError(AutotuneError, AssertionError):
    """A config's output did not match the reference given to `verify=`."""
