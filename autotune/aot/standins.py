"""Stand-in arguments for a `signature=` precompile: values that Triton's JIT specializes exactly as the
signature describes (a 16-byte aligned pointer of a dtype, an i32 divisible by 16, a literal constexpr).

Why: a build machine may have no GPU and no real tensors; the specialization (and so Triton's cache key)
is decided by the JIT's own binder from these values, as it would be from a launch's arguments.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..errors import PrecompileError

__all__ = ["parse_signature", "scalar_standins", "StandInPointer", "wrap_dtype"]

# Triton type name -> torch dtype name, for stand-in pointer arguments.
_TORCH_DTYPES = {
    "fp16": "float16",
    "bf16": "bfloat16",
    "fp32": "float32",
    "fp64": "float64",
    "i8": "int8",
    "i16": "int16",
    "i32": "int32",
    "i64": "int64",
    "u8": "uint8",
    "u16": "uint16",
    "u32": "uint32",
    "u64": "uint64",
    "u1": "bool",
    "i1": "bool",
    "fp8e4nv": "float8_e4m3fn",
    "fp8e5": "float8_e5m2",
    "fp8e4b8": "float8_e4m3fnuz",
    "fp8e5b16": "float8_e5m2fnuz",
}
# Scalar type -> a Python value that Triton's JIT specializes to exactly that type (and no divisibility);
# ":16" variants -> one divisible by 16.
_SCALAR_STANDINS: dict[str, Any] = {
    "i32": 3,
    "i32:16": 16,
    "i64": 2**31 + 3,
    "i64:16": 2**32,
    "u64": 2**63 + 3,
    "u64:16": 2**63 + 16,
    "fp32": 1.5,
    "u1": True,
    "i1": True,
}

# Other values the JIT specializes exactly like each stand-in (same type, same divisibility by 16, not 1): a
# value computed from an argument (triton.heuristics, derive=) that differs between them depends on the value
# a signature gave only by type.
_SCALAR_ALTERNATIVES: dict[str, tuple[Any, ...]] = {
    "i32": (1001, 2**20 + 3),
    "i32:16": (4096, 2**20),
    "i64": (2**40 + 3, 2**33 + 1001),
    "i64:16": (2**40, 2**36 * 3),
    "u64": (2**63 + 1001,),
    "u64:16": (2**63 + 2**20,),
    "fp32": (0.25, 1000.5),
    "u1": (False,),
    "i1": (False,),
}


class StandInPointer:
    """Stands for a tensor in a `signature=` precompile: the JIT specializes it by `dtype` and `data_ptr()`."""

    def __init__(self, dtype: Any, type_name: str, aligned: bool = True) -> None:
        self.dtype = dtype
        self.type_name = type_name
        self._ptr = 256 if aligned else 8

    def data_ptr(self) -> int:
        return self._ptr

    def ptr_range(self) -> int:
        """Bytes addressed: small, as for a tensor under 2 GiB (the AMD backend's buffer-ops specialization)."""
        return 1 << 20

    def __repr__(self) -> str:
        return f"<stand-in *{self.type_name}>"


def _pointer_standin(type_name: str, aligned: bool) -> StandInPointer:
    torch_name = _TORCH_DTYPES.get(type_name)
    dtype: Any = None
    if torch_name is not None:
        import torch

        dtype = getattr(torch, torch_name, None)
    if dtype is None:
        import triton.language as tl

        try:
            dtype = tl.dtype(type_name)
        except Exception:
            raise PrecompileError(
                f"signature type '*{type_name}': unknown element type; use one of {sorted(_TORCH_DTYPES)}"
            ) from None
    return StandInPointer(dtype, type_name, aligned)


def wrap_dtype(arg: Any) -> Any:
    """An example argument given as a torch dtype stands for an aligned tensor of that dtype (as in Triton's
    `kernel.warmup(torch.float16, ...)`)."""
    if type(arg).__name__ == "dtype" and type(arg).__module__ == "torch":
        return StandInPointer(arg, str(arg).replace("torch.", ""))
    return arg


def parse_signature(signature: Mapping[str, Any] | str) -> dict[str, Any]:
    """Turn a `signature=` into stand-in argument values by name, which Triton's JIT specializes as described.

    A dict `{name: entry}` or a string `"name=entry, name=entry"` (entries as below; a JSON object works too):

    - `"*fp16"`, `"*bf16"`, `"*fp32"`, `"*i32"`, `"*fp8e4nv"`, ...: a pointer, 16-byte aligned as torch
      allocations are (`tt.divisibility=16`), into a buffer under 2 GiB (AMD's buffer-ops specialization);
      `"*fp16:1"` for one that may not be aligned (a view at an odd offset);
    - `"i32"`, `"i64"`, `"u64"`: an integer not divisible by 16; `"i32:16"` (`"i64:16"`): divisible by 16,
      as the JIT specializes sizes and strides that are multiples of 16;
    - `"fp32"`, `"u1"`: a float, a bool;
    - a literal value (`1`, `0.5`, `None`, `true`): passed as is: the JIT makes the integer 1 and None
      compile-time constants, and constexpr parameters that are not tuned take their value this way.

    Constexpr meta-parameters tuned by the space come from each config and must not be given here.
    """
    return {name: _standin(name, entry) for name, entry in _entries(signature).items()}


def scalar_standins(signature: Mapping[str, Any] | str) -> dict[str, tuple[str, Any, tuple[Any, ...]]]:
    """The arguments `signature` gives only by a scalar type (`"i32:16"`): {name: (type, the stand-in value,
    other values the JIT specializes the same way)}. A value computed from such an argument is computed from
    the stand-in, not from what production launches with."""
    out = {}
    for name, entry in _entries(signature).items():
        key = entry.strip().replace(" ", "") if isinstance(entry, str) else None
        if key in _SCALAR_STANDINS:
            out[name] = (key, _SCALAR_STANDINS[key], _SCALAR_ALTERNATIVES[key])
    return out


def _entries(signature: Mapping[str, Any] | str) -> dict[str, Any]:
    """The signature's entries by argument name, as written (a type string or a literal value)."""
    if isinstance(signature, str):
        text = signature.strip()
        if text.startswith("{"):
            try:
                signature = json.loads(text)
            except ValueError as exc:
                raise PrecompileError(f"signature {text!r}: not valid JSON ({exc})") from None
        else:
            pairs: dict[str, Any] = {}
            for part in filter(None, (p.strip() for p in text.split(","))):
                name, eq, value = part.partition("=")
                if not eq or not name.strip():
                    raise PrecompileError(f"signature entry {part!r}: write name=type, e.g. 'x=*fp32, n=i32'")
                value = value.strip()
                try:
                    pairs[name.strip()] = json.loads(value)
                except ValueError:
                    pairs[name.strip()] = value
            signature = pairs
    if not isinstance(signature, Mapping):
        raise PrecompileError(f"signature={signature!r}: give a dict {{arg name: type}} or 'name=type, ...'")
    for name in signature:
        if not isinstance(name, str) or not name.isidentifier():
            raise PrecompileError(f"signature key {name!r}: keys are the kernel's argument names")
    return dict(signature)


def _standin(name: str, entry: Any) -> Any:
    if not isinstance(entry, str):
        return entry  # a literal value: the JIT specializes it itself
    text = entry.strip()
    if text.startswith("*"):
        base, _, hint = text[1:].partition(":")
        if hint not in ("", "16", "1"):
            raise PrecompileError(f"signature {name}={entry!r}: a pointer takes ':16' (aligned, the default) or ':1'")
        return _pointer_standin(base.strip(), aligned=hint != "1")
    key = text.replace(" ", "")
    if key in _SCALAR_STANDINS:
        return _SCALAR_STANDINS[key]
    if key in ("constexpr", "tl.constexpr"):
        raise PrecompileError(
            f"signature {name}={entry!r}: give the constexpr's value (e.g. {name}=64), "
            "or leave it out when the space tunes it"
        )
    raise PrecompileError(
        f"signature {name}={entry!r}: unknown type; use a pointer ('*fp16', '*fp32', ...), "
        f"one of {sorted(_SCALAR_STANDINS)}, or a literal value"
    )
