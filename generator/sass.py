"""Optional SASS evidence from `cuobjdump -sass` (pip: nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm).

Counts the instructions worth watching in an attention kernel (HGMMA, QGMMA, UTMALDG, UTMASTG) and
the local-memory traffic that betrays register spills (LDL, STL, with their static bytes).
Returns None when the tools are not installed; the build does not depend on them.
"""

from __future__ import annotations

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
           "UTCHMMA": "utchmma", "LDTM": "ldtm", "STTM": "sttm"}
# SM100 TMEM allocation as ptxas lowers it: tcgen05.alloc is an atomic find-and-set on the
# SM's column bitmap (retried after NANOSLEEP), tcgen05.dealloc an atomic AND clearing it.
WATCHED_MODS = {("UTCATOMSWS", "FIND_AND_SET"): "tmem_alloc", ("UTCATOMSWS", "AND"): "tmem_dealloc"}
_INSTR = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)((?:\.[A-Z0-9_]+)*)")
_WIDTH = {"64": 8, "128": 16, "U8": 1, "S8": 1, "U16": 2, "S16": 2}


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
    counts: Counter = Counter()
    for m in _INSTR.finditer(text):
        op, mods = m.group(1), m.group(2).split(".")[1:]
        counts["instructions"] += 1
        if op in WATCHED:
            counts[WATCHED[op]] += 1
        for (wop, mod), key in WATCHED_MODS.items():
            if op == wop and mod in mods:
                counts[key] += 1
        if op in ("LDL", "STL"):
            width = next((_WIDTH[x] for x in mods if x in _WIDTH), 4)
            counts["spill_load_bytes" if op == "LDL" else "spill_store_bytes"] += width
    return {k: counts[k] for k in (*WATCHED.values(), *WATCHED_MODS.values(), "instructions", "spill_load_bytes",
                                   "spill_store_bytes")}


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
