"""Optional SASS evidence from `cuobjdump -sass` (pip: nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm).

Counts the instructions worth watching in an attention kernel (HGMMA, QGMMA, UTMALDG, UTMASTG) and
the local-memory traffic that betrays register spills (LDL, STL, with their static bytes).
Returns None when the tools are not installed; the build does not depend on them.
"""

from __future__ import annotations

import bisect
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

WATCHED = {"HGMMA": "hgmma", "UTMALDG": "utmaldg", "UTMASTG": "utmastg", "LDL": "ldl", "STL": "stl",
           "QGMMA": "qgmma",  # QGMMA: the SASS name of an FP8 (e4m3/e5m2) warpgroup MMA
           # SM100: tcgen05 MMA (UTCHMMA, 16-bit inputs) and the TMEM loads and stores
           "UTCHMMA": "utchmma", "LDTM": "ldtm", "STTM": "sttm",
           # WARPGROUP.ARRIVE / .DEPBAR (one opcode): a pipelined kernel has a few a loop, a
           # kernel whose wgmma ptxas serialized has one of each per MMA (serialized_wgmma).
           "WARPGROUP": "warpgroup"}
# SM100 TMEM allocation as ptxas lowers it: tcgen05.alloc is an atomic find-and-set on the
# SM's column bitmap (retried after NANOSLEEP), tcgen05.dealloc an atomic AND clearing it.
WATCHED_MODS = {("UTCATOMSWS", "FIND_AND_SET"): "tmem_alloc", ("UTCATOMSWS", "AND"): "tmem_dealloc"}
_INSTR = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)((?:\.[A-Z0-9_]+)*)")
_WIDTH = {"64": 8, "128": 16, "U8": 1, "S8": 1, "U16": 2, "S16": 2}


def serialized_wgmma(counts: dict) -> bool:
    """Whether ptxas serialized the kernel's warpgroup MMAs (its remarks C7510-C7520, e.g. an
    accumulator defined on one branch only): each MMA then waits for the one before, and the
    kernel has a WARPGROUP.ARRIVE and a DEPBAR per MMA. Pipelined sm_90a kernels have far fewer:
    at most 0.72 a MMA over the 523 cubins checked on 2026-12-02 (check11/NOTES.md), 2.0 where
    serialized."""
    mma = counts.get("hgmma", 0) + counts.get("qgmma", 0)
    return mma > 0 and counts.get("warpgroup", 0) >= mma


def find_cuobjdump() -> str | None:
    found = shutil.which("cuobjdump")
    if found:
        return found
    for base in sys.path:
        for sub in ("nvidia/cu13/bin", "nvidia/cuda_cuobjdump/bin", "nvidia/cu12/bin"):
            p = Path(base) / sub / "cuobjdump"
            if p.is_file() and os.access(p, os.X_OK):
                return str(p)
    return None


def cuobjdump(args: list[str], cubin: bytes, timeout: float = 120) -> str | None:
    """Run cuobjdump on the cubin bytes; None when it is not installed or fails."""
    exe = find_cuobjdump()
    if exe is None:
        return None
    env = dict(os.environ)
    env["PATH"] = f"{Path(exe).parent}{os.pathsep}{env.get('PATH', '')}"  # nvdisasm sits beside it
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        try:
            out = subprocess.run([exe, *args, str(path)], capture_output=True, text=True, env=env, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired):
            return None
    return out.stdout if out.returncode == 0 else None


def sass_counts(cubin: bytes) -> dict | None:
    text = cuobjdump(["-sass"], cubin)
    return None if text is None else counts_of(text)


def counts_of(text: str) -> dict:
    """sass_counts of SASS text already disassembled."""
    return _count((m.group(1), m.group(2)) for m in _INSTR.finditer(text))


def _count(instructions) -> dict:
    """The counts of (opcode, ".MOD.MOD") pairs, as sass_counts returns them."""
    return _count_many((op, mods, 1) for op, mods in instructions)


def _count_many(instructions) -> dict:
    """_count of (opcode, ".MOD.MOD", how many) triples: one per distinct instruction."""
    counts: Counter = Counter()
    for op, mod_text, n in instructions:
        mods = mod_text.split(".")[1:]
        counts["instructions"] += n
        if op in WATCHED:
            counts[WATCHED[op]] += n
        for (wop, mod), key in WATCHED_MODS.items():
            if op == wop and mod in mods:
                counts[key] += n
        if op in ("LDL", "STL"):
            width = next((_WIDTH[x] for x in mods if x in _WIDTH), 4)
            counts["spill_load_bytes" if op == "LDL" else "spill_store_bytes"] += width * n
    return {k: counts[k] for k in (*WATCHED.values(), *WATCHED_MODS.values(), "instructions", "spill_load_bytes",
                                   "spill_store_bytes")}


# nvdisasm takes ~0.5 s CPU to start whatever it reads, then ~25 us an instruction: one run per
# cubin was ~0.6 s of a ~5 s variant build. A batch is disassembled in one run per arch, as raw
# code (nvdisasm -b SMxy over the cubins' executable sections, end to end; on SM90 every 16-byte
# slot prints as one instruction, so each line's offset names its cubin).
_SLOT = 16
_RAW_INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)((?:\.[A-Z0-9_]+)*)")


def find_nvdisasm() -> str | None:
    """nvdisasm: beside cuobjdump (the pip wheels put them together), else on PATH."""
    cuobj = find_cuobjdump()
    beside = Path(cuobj).parent / "nvdisasm" if cuobj else None
    if beside is not None and beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("nvdisasm")


def sass_counts_many(cubins: list[bytes]) -> list[dict | None]:
    """sass_counts of each cubin (the same dicts). An SM90 cubin whose opcodes sass_sm90 names is
    counted from its bytes (where nvdisasm is installed); the others are disassembled together, one nvdisasm run per arch.
    Where a batch cannot be read that way (no nvdisasm, an error, a code section whose
    instructions do not all come back), each of its cubins goes through sass_counts alone."""
    from .cubin_elf import code_of
    from .sass_sm90 import mnemonics

    out: list[dict | None] = [None] * len(cubins)
    by_arch: dict[str, list[tuple[int, bytes]]] = {}
    for i, cubin in enumerate(cubins):
        try:
            arch, code = code_of(cubin)
        except Exception:  # not an ELF we can read: cuobjdump says what it makes of it
            out[i] = sass_counts(cubin)
            continue
        # Only beside the disassembler, so that a cubin's counts never depend on which one read it.
        named = mnemonics(arch, code) if find_nvdisasm() is not None else None
        if named is not None:
            out[i] = _count_many((op, "", n) for op, n in named.items())
        else:
            by_arch.setdefault(arch, []).append((i, code))
    for arch, items in by_arch.items():
        counted = _raw_counts(arch, [code for _, code in items])
        for n, (i, _) in enumerate(items):
            out[i] = counted[n] if counted is not None else sass_counts(cubins[i])
    return out


def _raw_counts(arch: str, codes: list[bytes], timeout: float = 300) -> list[dict] | None:
    """Counts of each code blob, from one raw nvdisasm run; None where that run cannot be trusted."""
    if any(len(c) % _SLOT for c in codes):
        return None
    starts, end = [], 0
    for code in codes:
        starts.append(end)
        end += len(code)
    instructions = raw_instructions(arch, b"".join(codes), timeout)
    if instructions is None:
        return None
    per: list[list[tuple[str, str]]] = [[] for _ in codes]
    for offset, op, mods in instructions:
        per[bisect.bisect_right(starts, offset) - 1].append((op, mods))
    return [_count(instrs) for instrs in per]


def raw_instructions(arch: str, code: bytes, timeout: float = 300) -> list[tuple[int, str, str]] | None:
    """(byte offset, opcode, ".MOD.MOD") of each slot of a code blob, from one raw nvdisasm run;
    None where that run cannot be trusted (no nvdisasm, an error, a slot printed twice or not at all)."""
    exe = find_nvdisasm()
    if exe is None or not arch.startswith("sm_") or len(code) % _SLOT:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "code.bin"
        path.write_bytes(code)
        try:
            run = subprocess.run([exe, "-b", arch.replace("sm_", "SM"), str(path)], capture_output=True, text=True,
                                 timeout=timeout)
        except (OSError, subprocess.TimeoutExpired):
            return None
    if run.returncode != 0:
        return None
    out = [(int(m.group(1), 16), m.group(2), m.group(3)) for m in _RAW_INSTR.finditer(run.stdout)]
    if len(out) != len(code) // _SLOT or any(offset >= len(code) for offset, _, _ in out):
        return None  # the split by offset would be off
    return out


_LINE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+([^;]*);")


def pv_wait_windows(cubin: bytes) -> list[dict] | None:
    """Where the softmax sits relative to the PV GEMM's wait, per overlapped key-block loop.

    In the FA3 loop a warpgroup issues QK^T then PV, waits for QK^T (WARPGROUP.DEPBAR.LE
    gsb0, 0x1), runs the softmax, and waits for PV (... 0x0). Softmax work placed before the
    second wait overlaps the PV GEMM; work after it does not. For each such window: the
    instructions, MUFU (exp2) and FFMA between the two waits, and the instructions and MUFU
    after the second wait up to the next warpgroup sync or GEMM.
    """
    text = cuobjdump(["-sass"], cubin)
    if text is None:
        return None
    ops = [m.group(1).strip() for m in _LINE.finditer(text)]
    ops = [re.sub(r"^@!?U?P\w+\s+", "", o) for o in ops]  # drop predicates

    def count(seq, prefix):
        return sum(1 for o in seq if o.startswith(prefix))

    windows, i = [], 0
    while i < len(ops):
        if ops[i].startswith("WARPGROUP.DEPBAR.LE gsb0, 0x1"):
            j = i + 1
            while j < len(ops) and not ops[j].startswith("WARPGROUP.DEPBAR.LE gsb0, 0x0"):
                j += 1
            between = ops[i + 1:j]
            k = j + 1
            while k < len(ops) and not ops[k].startswith(("WARPGROUP.", "HGMMA")):
                k += 1
            after = ops[j + 1:k]
            windows.append({
                "between": len(between), "mufu_between": count(between, "MUFU"), "ffma_between": count(between, "FFMA"),
                "after": len(after), "mufu_after": count(after, "MUFU"),
            })
            i = j
        i += 1
    return windows
