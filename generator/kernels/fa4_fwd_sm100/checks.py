"""Static checks of one SM100 cubin: what a CPU can prove about a kernel no GPU here can run.

`problems(cubin, cfg)` lists every way the cubin departs from the design (an empty list: all
checks passed). The build runs it (compile_variant fails on a problem) and CI runs it again
on the built variants (tests/test_fa4_static.py). cutlass-free: ELF reader and cuobjdump only.

What is checked, per cubin:
- the SASS holds tcgen05 MMAs: hd/16 UTCHMMA with both operands in shared memory (S = Q K^T)
  and tile_n/16 with A in TMEM (O += P V, P read from TMEM);
- TMEM is allocated and freed (UTCATOMSWS find-and-set / and), and read and written (LDTM,
  STTM); TMA loads (UTMALDG: Q, K, V, one per 64-column box) and the TMA store of O (UTMASTG);
- no local memory: no LDL/STL and a zero stack frame;
- registers <= 255 and <= 64K / threads, the setmaxnreg split as configured (and within a
  sub-partition's 16K registers), shared memory <= 227 KiB, TMEM columns <= 512 and a
  power of two >= 32;
- the cubin is sm_100a and requires exactly the contract's block; it reads blockIdx.x/y/z (the
  contract's grid: m blocks, heads, batch) and no cluster rank (the contract's 1x1x1 cluster).
The contract's parameter layout is checked against EIATTR_KPARAM_INFO by the pipeline
(generator/contract.py), for every variant of every family.
"""

from __future__ import annotations

import re

from cubinforge.generator.cubin_elf import read_cubin
from cubinforge.generator.sass import counts_of, cuobjdump

from .config import REGISTER_LIMIT, REGISTER_SPLIT, REGISTERS_PER_SM, SMEM_LIMIT, TMEM_COLUMNS, FwdConfig

# UTCHMMA's first operand: gdesc[...] (A in shared memory) or tmem[...] (A in TMEM).
_UTCHMMA = re.compile(r"UTCHMMA(?:\.[A-Z0-9_]+)*\s+(gdesc|tmem)\[")
# setmaxnreg as ptxas lowers it: DEALLOC (decrease) and TRY_ALLOC (increase) with the count.
_SETMAXREG = re.compile(r"USETMAXREG\.(DEALLOC|TRY_ALLOC)(?:\.[A-Z0-9_]+)*\s+(?:U?P\w+,\s*)?(0x[0-9a-f]+)")


def umma_operands(sass: str) -> dict[str, int]:
    """UTCHMMA instructions by where their A operand lives: {"smem": n, "tmem": m}."""
    found = _UTCHMMA.findall(sass)
    return {"smem": found.count("gdesc"), "tmem": found.count("tmem")}


def problems(cubin: bytes, cfg: FwdConfig, dynamic_smem_bytes: int, block: tuple[int, int, int]) -> list[str]:
    info = read_cubin(cubin)
    if len(info.kernels) != 1:
        return [f"expected one kernel in the cubin, found {len(info.kernels)}"]
    k = next(iter(info.kernels.values()))
    out: list[str] = []
    if info.arch != "sm_100a":
        out.append(f"cubin arch is {info.arch}, not sm_100a")
    if k.reqntid is not None and tuple(k.reqntid) != tuple(block):
        out.append(f"cubin requires {k.reqntid} threads, the contract launches {block}")
    threads = block[0] * block[1] * block[2]
    reg_cap = min(REGISTER_LIMIT, REGISTERS_PER_SM // threads)
    if k.registers > reg_cap:
        out.append(f"{k.registers} registers per thread > {reg_cap} (255, and 64K over {threads} threads)")
    smem = dynamic_smem_bytes + k.static_smem_bytes
    if smem > SMEM_LIMIT:
        out.append(f"{smem} B of shared memory > {SMEM_LIMIT} B")
    cols = cfg.tmem_columns
    if cols > TMEM_COLUMNS or cols < 32 or cols & (cols - 1):
        out.append(f"TMEM allocation of {cols} columns is not a power of two in [32, {TMEM_COLUMNS}]")
    if cfg.tmem_columns_used > cols:
        out.append(f"the TMEM map uses {cfg.tmem_columns_used} columns, {cols} allocated")
    if k.stack_frame_bytes:
        out.append(f"stack frame of {k.stack_frame_bytes} B (local memory)")
    sass = cuobjdump(["-sass"], cubin)
    if sass is None:
        return out + ["cuobjdump is not installed (pip: nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm)"]
    c = counts_of(sass)
    if c["ldl"] or c["stl"]:
        out.append(f"local-memory traffic: {c['ldl']} LDL, {c['stl']} STL (register spills)")
    ops = umma_operands(sass)
    want = {"smem": cfg.head_dim // 16, "tmem": cfg.tile_n // 16}
    if ops != want:
        out.append(f"UTCHMMA by A operand {ops}, expected {want} (Q K^T from smem, P V with P in TMEM)")
    softmax_regs, correction_regs, other_regs = REGISTER_SPLIT
    if softmax_regs + correction_regs + other_regs > 512 or max(REGISTER_SPLIT) > 256:
        out.append(f"register split {REGISTER_SPLIT} exceeds a sub-partition (sum <= 512, each <= 256)")
    if correction_regs > k.registers:
        out.append(f"the correction warpgroup keeps the launch's {k.registers} registers, not {correction_regs}")
    setmax = sorted({(kind, int(n, 16)) for kind, n in _SETMAXREG.findall(sass)})
    if setmax != sorted({("DEALLOC", other_regs), ("TRY_ALLOC", softmax_regs)}):
        out.append(f"setmaxnreg in the SASS {setmax}, expected decrease to {other_regs}, increase to {softmax_regs}")
    if c["hgmma"]:
        out.append(f"{c['hgmma']} HGMMA (SM90 warpgroup MMA) in an SM100 kernel")
    boxes = cfg.head_dim // 64  # 64-column boxes per tile (128-byte swizzle)
    if c["utmaldg"] != 3 * boxes:
        out.append(f"{c['utmaldg']} UTMALDG, expected {3 * boxes} (Q, K, V at {boxes} box(es) each)")
    if c["utmastg"] != boxes:
        out.append(f"{c['utmastg']} UTMASTG, expected {boxes} (O)")
    # Grid and cluster as the contract says: the tile comes from blockIdx.x/y/z (m block, head,
    # batch) and nothing reads a cluster rank (cluster 1x1x1, no multicast, no 2-CTA MMA).
    special = set(re.findall(r"\bSR_[A-Za-z_]+(?:\.[XYZ])?", sass))
    missing = {"SR_CTAID.X", "SR_CTAID.Y", "SR_CTAID.Z"} - special
    if missing:
        out.append(f"the kernel never reads {sorted(missing)}: its grid is not (m blocks, heads, batch)")
    # (SR_CgaCtaId is read by every kernel that forms shared-memory window addresses; not a cluster use.)
    cluster = sorted(r for r in special if "CLUSTER" in r.upper())
    if cluster or ".2CTA" in sass:
        out.append(f"cluster use in a 1x1x1-cluster kernel: {cluster or '2-CTA instructions'}")
    for key, what in (("tmem_alloc", "TMEM allocation"), ("tmem_dealloc", "TMEM release"),
                      ("ldtm", "TMEM load"), ("sttm", "TMEM store")):
        if not c[key]:
            out.append(f"no {what} ({key}) in the SASS")
    return out
