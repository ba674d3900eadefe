"""What ptxas gave a kernel, read from its cubin: registers per thread and
the stack frame (local memory per thread, which grows with spills), from
the ELF's `.nv.info` attributes. Pure Python (no CUDA, no MLIR), so the
compiler records it in an artifact's metadata and anyone can read a cubin
with `cubin_resources(path_or_bytes, entry)`."""

from __future__ import annotations

import struct
from pathlib import Path

#: `.nv.info` attribute ids (EIATTR_*) read here; each is a (symbol, value)
#: pair of u32 under format EIFMT_SVAL (a u16 size, then the value); every
#: other format is 4 bytes in all.
_REGCOUNT, _FRAME_SIZE = 0x2F, 0x11
_SVAL = 0x04


class CubinError(ValueError):
    """Not a cubin this reader understands (a message says what is wrong)."""


def _sections(data: bytes):
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise CubinError("not a little-endian ELF64 file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]

    def name(offset: int) -> str:
        end = data.index(b"\0", names_at + offset)
        return data[names_at + offset:end].decode()

    return {name(h[0]): h for h in headers}, headers


def _symbols(data: bytes, sections: dict, headers: list) -> list[str]:
    """Symbol names of `.symtab`, by index."""
    symtab = sections.get(".symtab")
    if symtab is None:
        raise CubinError("no .symtab section")
    strtab_at = headers[symtab[6]][4]  # sh_link: the string table
    names = []
    for i in range(symtab[5] // 24):
        name_off, = struct.unpack_from("<I", data, symtab[4] + 24 * i)
        end = data.index(b"\0", strtab_at + name_off)
        names.append(data[strtab_at + name_off:end].decode())
    return names


def cubin_resources(cubin: bytes | str | Path, entry: str) -> dict:
    """{"registers": N, "frame_bytes": F} of function `entry` in `cubin`
    (bytes or a path): the registers per thread ptxas allocated and the
    bytes of its stack frame per thread. Raises CubinError when the file
    is not a cubin or has no such attributes for `entry`."""
    data = cubin if isinstance(cubin, bytes) else Path(cubin).read_bytes()
    sections, headers = _sections(data)
    info = sections.get(".nv.info")
    if info is None:
        raise CubinError("no .nv.info section")
    symbols = _symbols(data, sections, headers)
    found = {}
    at, end = info[4], info[4] + info[5]
    while at + 4 <= end:
        fmt, attr = data[at], data[at + 1]
        if fmt == _SVAL:
            size, = struct.unpack_from("<H", data, at + 2)
            if attr in (_REGCOUNT, _FRAME_SIZE) and size == 8:
                symbol, value = struct.unpack_from("<II", data, at + 4)
                if symbol < len(symbols) and symbols[symbol] == entry:
                    found[attr] = value
            at += 4 + size
        else:
            at += 4
    if _REGCOUNT not in found:
        raise CubinError(f"no register count for {entry!r}")
    return {"registers": found[_REGCOUNT], "frame_bytes": found.get(_FRAME_SIZE, 0)}
