"""Facts read from a cubin's ELF with no GPU: entries, registers, stack, smem, threads, params, arch.

The `.nv.info` sections are lists of records `(u8 format, u8 attribute, ...)`. EIFMT_SVAL (4)
records carry a u16 size and that many bytes; the other formats are 4 bytes in all. The
attribute codes below were checked against `cuobjdump -elf` / `--dump-resource-usage` on
cubins cross-compiled here by the DSL's ptxas (12.9) for sm_90a and sm_100a:

    0x2f REGCOUNT, 0x11 FRAME_SIZE, 0x12 MIN_STACK_SIZE   (global .nv.info: u32 symbol, u32 value)
    0x17 KPARAM_INFO (u32 index, u16 ordinal, u16 offset, u32 flags: size = (flags >> 18) & 0x3fff)
    0x10 REQNTID (3 x u32), 0x0a PARAM_CBANK (u32 symbol, u16 offset, u16 size), 0x19 CBANK_PARAM_SIZE
    0x23 MAX_STACK_SIZE and 0x05 MAX_THREADS are read the same way (not seen in these cubins).

Arch: ABI version 7 (sm_90a) keeps the SM in `e_flags & 0xff` and the `a` suffix in bit 0x800;
ABI version 8 (sm_100a) keeps it in `(e_flags >> 8) & 0xff` and the `a` suffix in bit 0x8.
"""

from __future__ import annotations

import io
import re
import struct
from dataclasses import asdict, dataclass, field

from elftools.elf.constants import SH_FLAGS
from elftools.elf.elffile import ELFFile

EIFMT_SVAL = 0x04
EIATTR_MAX_THREADS = 0x05
EIATTR_PARAM_CBANK = 0x0A
EIATTR_REQNTID = 0x10
EIATTR_FRAME_SIZE = 0x11
EIATTR_MIN_STACK_SIZE = 0x12
EIATTR_KPARAM_INFO = 0x17
EIATTR_CBANK_PARAM_SIZE = 0x19
EIATTR_MAX_STACK_SIZE = 0x23
EIATTR_REGCOUNT = 0x2F

_PER_SYMBOL = {
    EIATTR_REGCOUNT: "registers",
    EIATTR_FRAME_SIZE: "stack_frame_bytes",
    EIATTR_MIN_STACK_SIZE: "min_stack_bytes",
    EIATTR_MAX_STACK_SIZE: "max_stack_bytes",
}


@dataclass(frozen=True)
class KParam:
    ordinal: int
    offset: int
    size: int


@dataclass
class KernelInfo:
    entry: str
    registers: int | None = None
    stack_frame_bytes: int = 0
    min_stack_bytes: int = 0
    max_stack_bytes: int | None = None
    static_smem_bytes: int = 0
    reserved_smem_bytes: int = 0
    reqntid: tuple[int, int, int] | None = None
    max_threads_dims: tuple[int, int, int] | None = None
    params: list[KParam] = field(default_factory=list)  # in ordinal order
    param_bytes: int | None = None

    @property
    def max_threads(self) -> int | None:
        dims = self.reqntid or self.max_threads_dims
        return dims[0] * dims[1] * dims[2] if dims else None


@dataclass
class CubinInfo:
    arch: str  # e.g. "sm_90a"
    abi_version: int
    toolkit: str | None  # ptxas release, e.g. "12.9"
    ptxas_version: str | None  # the full line when the cubin records it (.note.nv.tkinfo)
    kernels: dict[str, KernelInfo]

    @property
    def entries(self) -> list[str]:
        return list(self.kernels)

    def kernel(self, entry: str) -> KernelInfo:
        if entry not in self.kernels:
            raise KeyError(f"cubin has no entry {entry!r} (entries: {', '.join(self.kernels) or 'none'})")
        return self.kernels[entry]


def _records(data: bytes):
    """Yield (attribute, format, payload) for each record of a .nv.info section."""
    i = 0
    while i + 4 <= len(data):
        fmt, attr = data[i], data[i + 1]
        if fmt == EIFMT_SVAL:
            (size,) = struct.unpack_from("<H", data, i + 2)
            yield attr, fmt, data[i + 4 : i + 4 + size]
            i += 4 + size
        else:
            yield attr, fmt, data[i + 2 : i + 4]
            i += 4


def _arch(header) -> tuple[str, int]:
    abi = header.e_ident["EI_ABIVERSION"]
    flags = header.e_flags
    if abi >= 8:
        sm, accel = (flags >> 8) & 0xFF, bool(flags & 0x8)
    else:
        sm, accel = flags & 0xFF, bool(flags & 0x800)
    return f"sm_{sm}{'a' if accel else ''}", abi


def _toolkit(elf: ELFFile) -> tuple[str | None, str | None]:
    note = elf.get_section_by_name(".note.nv.tkinfo")
    if note is not None:
        m = re.search(rb"release (\d+\.\d+), (V[\d.]+)", note.data())
        if m:
            return m.group(1).decode(), f"{m.group(1).decode()} ({m.group(2).decode()})"
    version = elf.header.e_version
    if isinstance(version, int) and version > 1:  # ABI 7 keeps major*10+minor here
        return f"{version // 10}.{version % 10}", None
    return None, None


def read_cubin(data: bytes) -> CubinInfo:
    elf = ELFFile(io.BytesIO(data))
    arch, abi = _arch(elf.header)
    toolkit, ptxas = _toolkit(elf)
    symtab = elf.get_section_by_name(".symtab")
    symbols = list(symtab.iter_symbols()) if symtab is not None else []
    kernels: dict[str, KernelInfo] = {}
    for sym in symbols:
        if sym["st_info"]["type"] != "STT_FUNC" or sym["st_info"]["bind"] != "STB_GLOBAL":
            continue
        shndx = sym["st_shndx"]
        if isinstance(shndx, int) and elf.get_section(shndx).name == f".text.{sym.name}":
            kernels[sym.name] = KernelInfo(entry=sym.name)

    info = elf.get_section_by_name(".nv.info")
    for attr, _, payload in _records(info.data() if info is not None else b""):
        if attr in _PER_SYMBOL and len(payload) >= 8:
            index, value = struct.unpack_from("<II", payload)
            name = symbols[index].name if index < len(symbols) else None
            if name in kernels:
                setattr(kernels[name], _PER_SYMBOL[attr], value)

    for name, k in kernels.items():
        section = elf.get_section_by_name(f".nv.info.{name}")
        params: list[KParam] = []
        for attr, _, payload in _records(section.data() if section is not None else b""):
            if attr == EIATTR_KPARAM_INFO:
                _, ordinal, offset, flags = struct.unpack_from("<IHHI", payload)
                params.append(KParam(ordinal, offset, (flags >> 18) & 0x3FFF))
            elif attr == EIATTR_REQNTID:
                k.reqntid = struct.unpack_from("<III", payload)
            elif attr == EIATTR_MAX_THREADS:
                k.max_threads_dims = struct.unpack_from("<III", payload)
            elif attr == EIATTR_PARAM_CBANK:
                _, _, k.param_bytes = struct.unpack_from("<IHH", payload)
            elif attr == EIATTR_CBANK_PARAM_SIZE and k.param_bytes is None:
                (k.param_bytes,) = struct.unpack_from("<H", payload)
        k.params = sorted(params, key=lambda p: p.ordinal)
        shared = elf.get_section_by_name(f".nv.shared.{name}")
        k.static_smem_bytes = shared["sh_size"] if shared is not None else 0
        k.reserved_smem_bytes = sum(
            s["sh_size"] for s in elf.iter_sections() if s.name.startswith(".nv.shared.reserved.")
        )
    return CubinInfo(arch=arch, abi_version=abi, toolkit=toolkit, ptxas_version=ptxas, kernels=kernels)


def param_table(k: KernelInfo) -> list[dict]:
    return [asdict(p) for p in k.params]


def code_of(data: bytes) -> tuple[str, bytes]:
    """(arch, machine code): the cubin's executable sections, in section order, as one blob
    (what `cuobjdump -sass` disassembles; sass.sass_counts_many hands it to nvdisasm raw)."""
    elf = ELFFile(io.BytesIO(data))
    code = b"".join(s.data() for s in elf.iter_sections() if s["sh_flags"] & SH_FLAGS.SHF_EXECINSTR
                    and s["sh_type"] != "SHT_NOBITS")
    return _arch(elf.header)[0], code
