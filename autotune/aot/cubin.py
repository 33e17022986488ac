"""Reads the register count and stack frame of a kernel from a CUDA cubin (an ELF), without a GPU.

Why: Triton reports registers (`n_regs`) only after loading the kernel on a GPU; an explicit-target
precompile has only the cubin, whose `.nv.info` sections carry them.
"""

from __future__ import annotations

import struct

__all__ = ["cubin_resource_usage"]


def cubin_resource_usage(cubin: bytes) -> dict[str, int | None]:
    """`{"n_regs", "frame_bytes"}` of the kernel in a CUDA cubin (an ELF), read without a GPU.

    From the `.nv.info` sections: EIATTR_REGCOUNT (0x2f) and EIATTR_FRAME_SIZE (0x11), each an
    (symbol index, value) pair; the largest over the functions in the cubin (a Triton cubin holds one
    kernel plus any noinline device functions). A stack frame larger than 0 in a Triton kernel means
    register spills. Values are None when the cubin does not carry them.
    """
    out: dict[str, int | None] = {"n_regs": None, "frame_bytes": None}
    if len(cubin) < 64 or cubin[:4] != b"\x7fELF" or cubin[4] != 2 or cubin[5] != 1:
        return out  # not a little-endian ELF64
    try:
        e_shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
        e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
        sections = []
        for i in range(e_shnum):
            name, _typ, _flags, _addr, offset, size = struct.unpack_from("<IIQQQQ", cubin, e_shoff + i * e_shentsize)
            sections.append((name, offset, size))
        strtab = sections[e_shstrndx][1]
        wanted = {0x2F: "n_regs", 0x11: "frame_bytes"}
        for name_off, offset, size in sections:
            end_name = cubin.index(b"\0", strtab + name_off)
            if not cubin[strtab + name_off : end_name].startswith(b".nv.info"):
                continue
            pos, end = offset, offset + size
            while pos + 4 <= end:
                fmt, attr = cubin[pos], cubin[pos + 1]
                if fmt == 4:  # EIFMT_SVAL: u16 size, then that many bytes
                    length = struct.unpack_from("<H", cubin, pos + 2)[0]
                    if attr in wanted and length == 8:
                        value = struct.unpack_from("<I", cubin, pos + 8)[0]
                        key = wanted[attr]
                        out[key] = max(out[key] or 0, value)
                    pos += 4 + length
                else:  # EIFMT_NVAL / BVAL / HVAL: 4 bytes in all
                    pos += 4
    except (struct.error, ValueError, IndexError):
        return {"n_regs": None, "frame_bytes": None}
    return out
