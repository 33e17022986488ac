"""The front door: `@autotune` and `Autotuned` (`autotuned`), the functional form `autotune_launch`
(`functional`), and what a decorated kernel tells of its tunings (`inspection`)."""

from .autotuned import Autotuned, autotune

__all__ = ["Autotuned", "autotune"]
