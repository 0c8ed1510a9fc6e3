"""SM90 instructions named from their opcode bits, so a build can count them without nvdisasm.

On SM90 every instruction is one 16-byte slot whose low 12 bits are its opcode: the low 9 bits
name the operation and the next 3 its operand form (FFMA is 0x223, 0x423, 0x823 and 0xc23).
OPCODES lists every code nvdisasm printed for the 224 sm_90a cubins of the default, fp8,
inference and model-variant sets (787k instructions; no code named two mnemonics). nvdisasm
takes ~28 us of CPU an instruction: ~8 CPU-s of the default set's ~340 s build, for counts this
reads in microseconds. sass.py counts the mnemonics `mnemonics` returns and sends a code blob
to nvdisasm whenever this gives up: a code the table does not have, or LDL/STL, whose byte
widths are modifiers. So a kernel with a new instruction costs nvdisasm time, never a wrong
count; `learn` gives the table's entries from nvdisasm's reading, to add them.
"""

from __future__ import annotations

import sys
from array import array
from collections import Counter

ARCHES = ("sm_90", "sm_90a")
SLOT = 16
_CODE_MASK = 0xFFF
# Mnemonics whose counts depend on modifiers that the opcode bits do not give here.
NEEDS_DISASSEMBLER = frozenset({"LDL", "STL"})

_BY_MNEMONIC = {
    "BAR": (0x51d, 0xb1d), "BRA": (0x947,), "BREAK": (0x942,), "BSSY": (0x945,), "BSYNC": (0x941,),
    "CALL": (0x944,), "CS2R": (0x805,), "DEPBAR": (0x91a,), "ELECT": (0x82f,), "EXIT": (0x94d,),
    "F2FP": (0x23e,), "F2I": (0x305,), "FADD": (0x221, 0x421), "FCHK": (0x302, 0x902),
    "FENCE": (0x3c6,), "FFMA": (0x223, 0x423, 0x823, 0xc23), "FMNMX": (0x209, 0x809),
    "FMUL": (0x220, 0x820, 0xc20), "FSEL": (0x208, 0x808), "FSETP": (0x20b, 0x80b), "HADD2": (0x230,),
    "HFMA2": (0x435,), "HGMMA": (0x9f0, 0xdf0), "I2F": (0x306, 0xd06), "I2FP": (0x245,),
    "IABS": (0x213, 0xc13), "IADD3": (0x210, 0x810, 0xc10),
    "IMAD": (0x224, 0x225, 0x227, 0x424, 0x824, 0x825, 0x827, 0xc24, 0xc25, 0xe24, 0xe25),
    "ISETP": (0x20c, 0x80c, 0xc0c), "LDC": (0xb82,), "LDG": (0x981,), "LDL": (0x983,), "LDS": (0x984,),
    "LDSM": (0x83b,), "LEA": (0x211, 0x811, 0xc11), "LOP3": (0x212, 0x812, 0xc12), "MEMBAR": (0x992,),
    "MOV": (0x202, 0x802, 0xc02), "MUFU": (0x308, 0x908), "NANOSLEEP": (0x95d,), "NOP": (0x918,),
    "P2R": (0x803,), "PLOP3": (0x81c,), "POPC": (0x309,), "PRMT": (0x216, 0x816),
    "QGMMA": (0x9f3, 0xdf3), "R2P": (0x804,), "R2UR": (0x2ca,), "REDUX": (0x3c4,), "RET": (0x950,),
    "S2R": (0x919,), "S2UR": (0x9c3,), "SEL": (0x207, 0x807, 0xc07), "SHF": (0x219, 0x819),
    "SHFL": (0x589, 0x989, 0xf89), "STG": (0x986,), "STL": (0x387,), "STS": (0x388,), "STSM": (0x844,),
    "SYNCS": (0x5a7, 0x5b2, 0x9a7), "UIADD3": (0x290, 0x297, 0x890, 0x897),
    "UIMAD": (0x2a4, 0x2a5, 0x4a4, 0x8a4, 0x8a5), "UISETP": (0x28c, 0x88c), "ULDC": (0xab9,),
    "ULEA": (0x291, 0x891), "ULOP3": (0x292, 0x892), "UMOV": (0x882, 0xc82), "USEL": (0x287, 0x887),
    "USETMAXREG": (0x9c8,), "USHF": (0x899,), "UTMACCTL": (0x9b9,), "UTMACMDFLUSH": (0x9b7,),
    "UTMALDG": (0x5b4,), "UTMASTG": (0x3b5,), "VIADD": (0x836, 0xc36),
    "VIADDMNMX": (0x246, 0x446, 0x846, 0xc46, 0xe46), "VIMNMX": (0x248, 0x848, 0xc48),
    "VIMNMX3": (0x20f, 0xc0f), "VOTE": (0x806,), "VOTEU": (0x886,), "WARPGROUP": (0x9c5,),
    "WARPSYNC": (0x948,),
}
OPCODES: dict[int, str] = {code: name for name, codes in _BY_MNEMONIC.items() for code in codes}


def opcodes(code: bytes) -> Counter:
    """How many slots of a code blob carry each 12-bit opcode."""
    words = array("H", code)  # 8 little-endian halfwords a slot; the first holds the opcode
    if sys.byteorder == "big":
        words.byteswap()
    return Counter(w & _CODE_MASK for w in words[:: SLOT // 2])


def mnemonics(arch: str, code: bytes) -> Counter | None:
    """Mnemonic -> instructions of an SM90 code blob (every slot is one), or None where
    nvdisasm must read it: another arch, a partial slot, a code not in OPCODES, or LDL/STL."""
    if arch not in ARCHES or len(code) % SLOT:
        return None
    out: Counter = Counter()
    for op, n in opcodes(code).items():
        name = OPCODES.get(op)
        if name is None or name in NEEDS_DISASSEMBLER:
            return None
        out[name] += n
    return out


def learn(code: bytes, slot_mnemonics: dict[int, str]) -> dict[int, str]:
    """opcode -> mnemonic as a disassembler read `code` (`slot_mnemonics`: byte offset of each
    slot -> its mnemonic); raises where one opcode carries two mnemonics (the table's premise)."""
    seen: dict[int, str] = {}
    for offset, name in slot_mnemonics.items():
        op = int.from_bytes(code[offset:offset + 2], "little") & _CODE_MASK
        if seen.setdefault(op, name) != name:
            raise ValueError(f"opcode {op:#05x} is both {seen[op]} and {name} (at byte {offset:#x})")
    return seen
