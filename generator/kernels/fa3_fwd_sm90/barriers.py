"""Named hardware barrier ids (0 is __syncthreads)."""

import enum


class Barrier(enum.IntEnum):
    EPILOGUE = 1  # the consumer warpgroups before and after writing O to smem
    SCHEDULE_WG1 = 2  # ping-pong: consumer warpgroup 1 may issue its GEMMs
    SCHEDULE_WG2 = 3
    SCHEDULE_WG3 = 4
    EPILOGUE_WG1 = 5  # wg_epilogue: one consumer warpgroup around its own O store
    EPILOGUE_WG2 = 6
    EPILOGUE_WG3 = 7
    P_WG1 = 8  # p_smem: one consumer warpgroup after writing its P slab, before its PV GEMM
    P_WG2 = 9
    P_WG3 = 10
