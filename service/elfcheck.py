"""What the service checks in a cubin before accepting it: ELF header, arch, kernel symbols.

A plain struct reader rather than pyelftools: the server must not depend on the build
extra, and every offset in an uploaded file is untrusted, so each one is bounds-checked
and any inconsistency is a CubinError (a 4xx), never an exception from deep in a parser.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

EM_CUDA = 190
ELFOSABI_CUDA_V8 = 0x41  # cubins from CUDA 12.8+ for sm_100 and later use the new e_flags layout
STT_FUNC = 2


class CubinError(ValueError):
    """The uploaded bytes are not a usable cubin; the message says why."""


@dataclass
class CubinInfo:
    arch: str                      # e.g. "sm_90a"
    functions: set[str] = field(default_factory=set)   # global FUNC symbols (kernel entries)
    text_sections: set[str] = field(default_factory=set)  # names after ".text."

    def has_entry(self, name: str) -> bool:
        return name in self.functions or name in self.text_sections


def arch_from_flags(e_flags: int, osabi: int, abiversion: int) -> str:
    """The SM target encoded in a cubin's e_flags.

    Checked against real cubins from the CuTe DSL: sm_90a -> 0x5a0d5a (OSABI 0x33, ABI 7: SM in
    bits 0-7, 0x800 = arch-specific "a"); sm_100a -> 0x0600640a (OSABI 0x41, ABI 8: SM in bits
    8-15, 0x8 = "a").
    """
    if osabi == ELFOSABI_CUDA_V8 or abiversion >= 8:
        sm, accel = (e_flags >> 8) & 0xFF, bool(e_flags & 0x8)
    else:
        sm, accel = e_flags & 0xFF, bool(e_flags & 0x800)
    return f"sm_{sm}{'a' if accel else ''}"


def _cstr(buf: bytes, off: int) -> str:
    if not 0 <= off < len(buf):
        raise CubinError(f"string offset {off} is outside its string table")
    end = buf.find(b"\0", off)
    if end < 0:
        raise CubinError("unterminated string in a string table")
    return buf[off:end].decode("utf-8", "replace")


def inspect_cubin(data: bytes) -> CubinInfo:
    if len(data) < 64 or data[:4] != b"\x7fELF":
        raise CubinError("not an ELF file (the cubin must start with the bytes 7f 45 4c 46)")
    if data[4] != 2 or data[5] != 1:
        raise CubinError("not a 64-bit little-endian ELF; cubins for sm_90a/sm_100a are ELF64 LE")
    (e_machine,) = struct.unpack_from("<H", data, 18)
    if e_machine != EM_CUDA:
        raise CubinError(f"ELF machine is {e_machine}, not EM_CUDA ({EM_CUDA}): this is not a cubin")
    e_shoff, = struct.unpack_from("<Q", data, 40)
    e_flags, = struct.unpack_from("<I", data, 48)
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", data, 58)
    info = CubinInfo(arch=arch_from_flags(e_flags, data[7], data[8]))
    if e_shnum == 0:
        return info
    if e_shentsize < 64 or e_shoff + e_shnum * e_shentsize > len(data):
        raise CubinError("section header table lies outside the file (truncated cubin?)")

    sections = []
    for i in range(e_shnum):
        (name, stype, _flags, _addr, off, size, link, _info, _align, entsize) = struct.unpack_from(
            "<IIQQQQIIQQ", data, e_shoff + i * e_shentsize)
        if stype != 8 and off + size > len(data):  # SHT_NOBITS occupies no file bytes
            raise CubinError(f"section {i} lies outside the file (truncated cubin?)")
        sections.append((name, stype, off, size, link, entsize))
    if e_shstrndx >= e_shnum:
        raise CubinError("section-name table index is out of range")
    _, _, so, ss, _, _ = sections[e_shstrndx]
    shstr = data[so:so + ss]

    for name, stype, off, size, link, entsize in sections:
        sname = _cstr(shstr, name) if name else ""
        if sname.startswith(".text."):
            info.text_sections.add(sname[len(".text."):])
        if stype == 2:  # SHT_SYMTAB
            if link >= e_shnum or entsize < 24:
                raise CubinError("malformed symbol table")
            _, _, sto, sts, _, _ = sections[link]
            strtab = data[sto:sto + sts]
            for j in range(size // entsize):
                st_name, st_info, _o, st_shndx = struct.unpack_from("<IBBH", data, off + j * entsize)
                if st_info & 0xF == STT_FUNC and st_shndx != 0 and st_name:
                    info.functions.add(_cstr(strtab, st_name))
    return info
