"""A tuning's call arguments as plain data for a worker process, and their copies rebuilt there: the encoding
both sides of `Tuning(isolate="process")` share (the runner encodes, the worker decodes). Tensors travel as
(shape, dtype, strides, the bytes of the storage span the view covers, device, address mod 16) and come back as
copies, so the caller's tensors are never written by a worker."""

from __future__ import annotations

from typing import Any

__all__ = [
    "UNREADABLE_REQUEST",
    "encode_call",
    "decode_call",
    "encode_args",
    "decode_args",
    "span_of",
    "copies_bytes",
]

# How a worker answers a request it cannot decode (its grid names a module it cannot import): the parent reads it
UNREADABLE_REQUEST = "the worker could not read the request"


def encode_call(args: tuple, kwargs: dict, data: bool = True) -> tuple[dict, dict]:
    """A call's positional and keyword arguments as plain data (see `encode_args`), positions as keys."""
    return encode_args(dict(enumerate(args)), data), encode_args(kwargs, data)


def decode_call(encoded: tuple[dict, dict]) -> tuple[tuple, dict]:
    """The call's (args, kwargs), rebuilt as copies in this process."""
    positional = decode_args(encoded[0])
    return tuple(positional[i] for i in range(len(positional))), decode_args(encoded[1])


def span_of(shape: tuple, strides: tuple) -> int:
    """How many elements of its storage a view covers, from its first element to its last (a zero stride, as
    `expand` gives, or overlapping rows cover fewer than `numel`; gaps between rows count)."""
    return 0 if 0 in shape else 1 + sum((size - 1) * stride for size, stride in zip(shape, strides))


def copies_bytes(encoded_calls: list) -> int:
    """The bytes the tensors of `encoded_calls` (each `encode_call`'s) take once a worker rebuilt them (with or
    without their data: a compile worker allocates them too)."""
    import torch

    total = 0
    for encoded in encoded_calls:
        for part in encoded:
            for item in part.values():
                if item[0] == "tensor":
                    dt = getattr(torch, item[2].removeprefix("torch."))
                    total += span_of(item[1], item[3]) * torch.empty(0, dtype=dt).element_size()
    return total


def encode_args(named: dict, data: bool = True) -> dict:
    """Arguments as plain data: tensors as (shape, dtype, strides, bytes, device, address mod 16), the bytes
    being the storage span the view covers (so a broadcast or overlapping view is rebuilt as itself, over a copy
    of that span). Without `data` (a compile worker: compiling reads shapes, dtypes and alignment, never values)
    no bytes travel."""
    out: dict[str, tuple] = {}
    for name, value in named.items():
        if hasattr(value, "data_ptr") and hasattr(value, "dtype"):
            payload = None
            if data:
                span = span_of(tuple(value.shape), tuple(value.stride()))
                flat = value.detach().as_strided((span,), (1,)).to("cpu").contiguous()
                payload = flat.view(_byte_dtype()).numpy().tobytes() if span else b""
            out[name] = (
                "tensor",
                tuple(value.shape),
                str(value.dtype),
                tuple(value.stride()),
                payload,
                str(value.device),
                value.data_ptr() % 16,
            )
        else:
            out[name] = ("value", value)
    return out


def _byte_dtype() -> Any:
    import torch

    return torch.uint8


def decode_args(encoded: dict) -> dict:
    """Rebuild the arguments in this process: fresh tensors of the same shape, dtype, strides and device, at an
    address of the same alignment (Triton specialises a pointer on 16-byte alignment, so the copy compiles and
    runs the variant the caller's launch will use)."""
    import torch

    named = {}
    for name, item in encoded.items():
        if item[0] == "value":
            named[name] = item[1]
            continue
        _, shape, dtype, strides, data, device, align = item
        dt = getattr(torch, dtype.removeprefix("torch."))
        itemsize = torch.empty(0, dtype=dt).element_size()
        span = span_of(shape, strides)
        offset = align // itemsize if align % itemsize == 0 else 0  # a fresh allocation is 16-byte aligned
        storage = torch.empty(span + offset, dtype=dt, device=device)
        if data and span:
            storage[offset:].copy_(torch.frombuffer(bytearray(data), dtype=dt))
        named[name] = storage.as_strided(shape, strides, offset)
    return named
