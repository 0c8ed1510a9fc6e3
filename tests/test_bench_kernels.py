"""bench kernels: the resource/SASS table is built from the registry's manifests."""

import json

from cubinforge.bench.kernel_table import kernel_table


def test_kernel_table_lists_each_variant_with_its_sass_counts(tmp_path):
    (tmp_path / "manifests").mkdir()
    md = {"registers": 168, "dynamic_smem_bytes": 164864, "max_threads": 384, "stack_frame_bytes": 0,
          "sass": {"hgmma": 32, "utmaldg": 10, "utmastg": 2, "ldl": 1, "stl": 2},
          "kernel": {"tile_m": 128, "tile_n": 128, "pingpong": True, "rescale_o_early": False}}
    for name in ("fa3-fwd-sm_90a-bf16-hd128-noncausal", "fa3-fwd-sm_90a-fp16-hd64-causal"):
        (tmp_path / "manifests" / f"{name}.json").write_text(json.dumps({"variant": name, "metadata": md}))
    rows = kernel_table(tmp_path).splitlines()
    assert len(rows) == 4
    assert rows[2].startswith("| fa3-fwd-sm_90a-bf16-hd128-noncausal | 168 | 164864 | 384 | 128x128 | True | False | 32 | 10 | 2 | 3 |")
