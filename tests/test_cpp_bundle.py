"""generator/cpp_bundle.py: a bundle's contracts rendered as C++ tables, checked on the way."""

from __future__ import annotations

import copy
import hashlib
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime" / "cpp" / "tests"))
from sample_manifests import manifest, sample_bundle  # noqa: E402

from cubinforge.generator import cpp_bundle  # noqa: E402
from cubinforge.generator.cpp_bundle import BundleError, render_cpp_bundle  # noqa: E402


def test_renders_header_and_cubin_files(tmp_path: Path):
    manifests, blobs = sample_bundle()
    written = render_cpp_bundle(manifests, blobs, tmp_path, embed=False)
    header = (tmp_path / "cubinforge_bundle.h").read_text()
    assert tmp_path / "cubinforge_bundle.h" in written
    assert not (tmp_path / "cubinforge_bundle_cubins.h").exists()
    for sha, data in blobs.items():
        assert (tmp_path / f"{sha}.cubin").read_bytes() == data
        assert f'"{sha}", {len(data)}, nullptr' in header
    # Sorted by name, names resolved to indices, the recipe spelled as enums.
    names = [m["variant"] for m in manifests]
    positions = [header.index(f'{{"{n}", "fa3_fwd"') for n in names]
    assert [n for _, n in sorted(zip(positions, names))] == sorted(names)
    assert '{cf::Op::Symbol, 0, 0.0, 1, -1, "seqlen_q"}' in header
    assert '{cf::Op::TensorStride, 0, 0.0, 4, 1, "lse.stride.1"}' in header
    assert "cf::Swizzle::b128, cf::L2Promotion::b128, cf::OobFill::none" in header
    assert '{"varlen", "false"}' in header and '{"head_dim", "128"}' in header
    from cubinforge.runtime.dispatch import PREFERENCES

    assert f"inline constexpr cf::Bundle kBundle = {{kVariants, 7, kPreferences, {len(PREFERENCES)}," in header
    assert '{"seqlen_q", nullptr, false, 0, true, 3072}' in header  # the dispatcher's rules, generated


def test_embed_writes_byte_arrays(tmp_path: Path):
    manifests, blobs = sample_bundle()
    render_cpp_bundle(manifests, blobs, tmp_path, embed=True)
    cubins = (tmp_path / "cubinforge_bundle_cubins.h").read_text()
    header = (tmp_path / "cubinforge_bundle.h").read_text()
    assert '#include "cubinforge_bundle_cubins.h"' in header
    for sha, data in blobs.items():
        assert f"alignas(64) inline constexpr unsigned char kCubin_{sha[:16]}[]" in cubins
        assert f"kCubin_{sha[:16]}, &v" in header
    assert "0x7f,0x45,0x4c,0x46," in cubins  # \x7fELF


def test_bundle_and_runtime_refuse_the_same_nested_recipe(tmp_path: Path):
    """One validator: a tensormap recipe nested under "tensormap" (the doc puts it on the param)
    is refused by the C++ lowering with the Python runtime's own message."""
    from cubinforge.runtime import ContractError, load_contract

    m, blob = manifest()
    nested = copy.deepcopy(m)
    for p in nested["contract"]["params"]:
        if p["kind"] == "tensormap":
            keys = ("tensor", "dtype", "dims", "box", "element_strides", "interleave", "swizzle", "l2_promotion", "oob_fill")
            p["tensormap"] = {k: p.pop(k) for k in keys}
    with pytest.raises(ContractError) as runtime_err:
        load_contract(nested["contract"])
    with pytest.raises(BundleError) as bundle_err:
        render_cpp_bundle([nested], {m["cubin"]["sha256"]: blob}, tmp_path / "nested")
    assert str(runtime_err.value) in str(bundle_err.value)
    assert "belongs at the param's top level" in str(bundle_err.value)


def _broken(edit) -> tuple[list, dict]:
    m, blob = manifest()
    edit(m)
    return [m], {m["cubin"]["sha256"]: blob}


@pytest.mark.parametrize("edit, message", [
    (lambda m: m["contract"]["grid"].__setitem__(0, ["seqlen_q", "tile", "ceil_div"]), "unknown token 'tile'"),
    (lambda m: m["contract"]["grid"].__setitem__(0, ["seqlen_q", "ceil_div"]), "stack underflow at 'ceil_div'"),
    (lambda m: m["contract"]["grid"].__setitem__(1, ["heads_q", 2]), "leaves 2 values on the stack"),
    (lambda m: m["contract"]["grid"].__setitem__(1, ["heads_q", True, "*"]), "is not a number or a name"),
    (lambda m: m["contract"]["params"][4].__setitem__("offset", 40), "offset 40 overlaps the previous parameter"),
    (lambda m: m["contract"]["params"][5].__setitem__("swizzle", "256B"), "swizzle is '256B'"),
    (lambda m: m["contract"]["params"][5].__setitem__("box", [128, 128, 1, 1]), "exceeds the 128B swizzle span"),
    (lambda m: m["contract"]["params"][5].__setitem__("tensor", "x"), "names unknown tensor 'x'"),
    (lambda m: m["contract"]["params"][9].__setitem__("size", 8), "scalar f32 is 4 bytes, size says 8"),
    (lambda m: m["contract"]["params"][4]["fields"][5].__setitem__("offset", 36), "does not fit in the parameter's 40 bytes"),
    (lambda m: m["contract"]["params"][3].__setitem__("ordinal", 7), "ordinal 7 out of order"),
    (lambda m: m["contract"]["tensors"]["q"].__setitem__("dtype", "fp8"), "dtype 'fp8' is not one of"),
    (lambda m: m["contract"]["tensors"]["lse"].__setitem__("align_bytes", 12), "must be a power of two"),
    (lambda m: m["contract"]["symbols"]["seqlen_k"].__setitem__("dim", 2), "k dimension 2 is 'heads_kv', not 'seqlen_k'"),
    (lambda m: m["contract"].__setitem__("contract_version", 2), "contract_version 2 is not supported"),
    (lambda m: m["contract"].pop("entry"), "missing key 'entry'"),
])
def test_bad_contracts_fail_at_render_time(tmp_path: Path, edit, message):
    manifests, blobs = _broken(edit)
    with pytest.raises(BundleError) as e:
        render_cpp_bundle(manifests, blobs, tmp_path)
    assert message in str(e.value)
    assert manifests[0]["variant"] in str(e.value)


def test_cubin_bytes_must_match_the_manifest(tmp_path: Path):
    m, blob = manifest()
    with pytest.raises(BundleError, match="do not match sha256"):
        render_cpp_bundle([m], {m["cubin"]["sha256"]: blob + b"x"}, tmp_path)
    with pytest.raises(BundleError, match="no cubin bytes for sha256"):
        render_cpp_bundle([m], {}, tmp_path)


def test_default_axes_are_generated_from_the_axis_table(tmp_path: Path):
    from cubinforge.runtime.axes import default_axes

    DEFAULT_AXES = default_axes()

    manifests, blobs = _broken(lambda m: None)
    header = render_cpp_bundle(manifests, blobs, tmp_path)[-1].read_text()
    table = header[header.index("kDefaultAxes[] = {"):header.index("};", header.index("kDefaultAxes[] = {"))]
    assert table.count("{\"") == len(DEFAULT_AXES)
    for k, v in DEFAULT_AXES.items():
        assert f'{{"{k}", "{cpp_bundle.axis_text(v)}"}}' in table
    assert f"kDefaultAxes, {len(DEFAULT_AXES)}, kDerivedAxes," in header


def test_derived_and_form_axes_and_decode_plan_are_generated(tmp_path: Path):
    """The C++ select's head_dim_v rule, form axes and decode split constants are data from
    runtime/axes.py and runtime/decode_plan.py (issue 9), not hand-written C++."""
    from cubinforge.runtime import decode_plan
    from cubinforge.runtime.axes import derived_axes, form_axes

    manifests, blobs = _broken(lambda m: None)
    header = render_cpp_bundle(manifests, blobs, tmp_path)[-1].read_text()
    for k, src in derived_axes().items():
        assert f'{{"{k}", "{src}"}}' in header[header.index("kDerivedAxes[] = {"):]
    forms = header[header.index("kFormAxes[] = {"):].split("};")[0]
    assert sorted(forms.count(f'"{k}"') for k in form_axes()) == [1] * len(form_axes())
    assert (f"kDecodePlan = {{{float(decode_plan.FILL_FRACTION)!r}, {decode_plan.MIN_BLOCKS_PER_SPLIT}, "
            f"{decode_plan.MAX_SPLITS}, {float(decode_plan.EFFICIENCY_SLACK)!r}, {decode_plan.DECODE_TILE_M}, "
            f"{decode_plan.DECODE_TILE_N}}}") in header
    assert 'kParams0[] = {  // launch parameter <- derived value\n    {"num_splits", "decode_splits"},' in header
    src = (Path(cpp_bundle.__file__).resolve().parents[1] / "runtime" / "cpp" / "include" / "cubinforge"
           / "select.h").read_text()
    assert '"head_dim_v"' not in src   # no hand-coded value-head-dim rule


def test_cli_reads_a_cubinforge_home(tmp_path: Path, capsys):
    home = tmp_path / "home"
    manifests, blobs = sample_bundle()
    (home / "manifests").mkdir(parents=True)
    for m in manifests:
        (home / "manifests" / f"{m['variant']}.json").write_text(json.dumps(m))
        sha = m["cubin"]["sha256"]
        blob = home / "blobs" / "sha256" / sha[:2] / sha
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(blobs[sha])
    assert cpp_bundle.main(["--home", str(home), "--out", str(tmp_path / "out"), "--embed"]) == 0
    assert "wrote 7 variants" in capsys.readouterr().out
    assert (tmp_path / "out" / "cubinforge_bundle_cubins.h").is_file()
    # A missing blob is an error with the variant's name, not a traceback.
    sha = manifests[0]["cubin"]["sha256"]
    (home / "blobs" / "sha256" / sha[:2] / sha).unlink()
    assert cpp_bundle.main(["--home", str(home), "--out", str(tmp_path / "out2")]) == 1
    assert manifests[0]["variant"] in capsys.readouterr().err
    assert hashlib.sha256(blobs[sha]).hexdigest() == sha
