"""A build flags a kernel whose warpgroup MMAs ptxas serialized (check11: a wgmma issued on one
branch of a runtime `if` took an hd128 kernel from 682 to 415 TFLOPS, and three shipped hd256
split pack-GQA decode forms were found serialized, ptxas remark C7520): the SASS counts carry
the WARPGROUP arrive/wait count, the metadata a flag, the build summary a warning."""

from __future__ import annotations

from cubinforge.generator import build, sass
from cubinforge.generator.metadata import with_sass

# Two HGMMAs and the warpgroup fence/wait around them, as nvdisasm prints SM90 SASS.
_SASS = """
        /*0100*/                   WARPGROUP.ARRIVE ;
        /*0110*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT, gsb0 ;
        /*0120*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], R24, gsb0 ;
        /*0130*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
"""


def _counts(hgmma=0, qgmma=0, warpgroup=0):
    return {"hgmma": hgmma, "qgmma": qgmma, "warpgroup": warpgroup, "utmaldg": 0, "utmastg": 0, "ldl": 0,
            "stl": 0, "instructions": 100, "spill_store_bytes": 0, "spill_load_bytes": 0}


def test_sass_counts_the_warpgroup_arrives_and_waits():
    counts = sass.counts_of(_SASS)
    assert counts["hgmma"] == 2 and counts["warpgroup"] == 2


def test_serialized_means_a_warpgroup_arrive_or_wait_per_mma():
    assert not sass.serialized_wgmma(_counts(hgmma=48, warpgroup=12))   # the shipped hd128 causal form
    assert sass.serialized_wgmma(_counts(hgmma=90, warpgroup=180))      # check11/a1's trimmed form
    assert sass.serialized_wgmma(_counts(qgmma=20, warpgroup=40))       # e4m3 counts too
    assert not sass.serialized_wgmma(_counts())                         # no MMA at all (the combine)


def _meta():
    return {"registers": 168, "stack_frame_bytes": 0, "dynamic_smem_bytes": 0, "static_smem_bytes": 1024}


def test_metadata_flags_it_and_the_build_summary_warns():
    bad = with_sass(_meta(), _counts(hgmma=63, warpgroup=126))
    good = with_sass(_meta(), _counts(hgmma=48, warpgroup=12))
    assert bad["wgmma_serialized"] is True and "wgmma_serialized" not in good
    assert bad["sass"]["warpgroup"] == 126
    assert "wgmma_serialized" not in with_sass(bad, None)  # no SASS, no claim about it
    outcomes = [build._outcome_from_record("v-bad", "built", 1.0, bad),
                build._outcome_from_record("v-good", "built", 1.0, good)]
    text = build.summary(outcomes)
    assert "WARNING v-bad: ptxas serialized its wgmma (126 WARPGROUP arrives/waits for 63 MMAs)" in text
    assert "v-good:" not in text and outcomes[1].warning is None
    assert "2 built, 0 skipped, 0 failed" in text  # a warning, not a failure
