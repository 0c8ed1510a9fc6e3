"""Named hardware barrier ids (0 is __syncthreads)."""

import enum


class Barrier(enum.IntEnum):
    EPILOGUE = 1  # the consumer warpgroups before and after writing O to smem
    SCHEDULE_WG1 = 2  # ping-pong: consumer warpgroup 1 may issue its GEMMs
    SCHEDULE_WG2 = 3
    SCHEDULE_WG3 = 4
