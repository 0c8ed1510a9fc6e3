"""A new axis is one entry in runtime/axes.py: the spec and its names, the CLI's filters, the
manifests, the dispatcher and the C++ bundle all see it with no other edit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cubinforge.generator import families, spec
from cubinforge.generator.families import Family
from cubinforge.runtime import axes as axis_table


@pytest.fixture
def fake_axis(monkeypatch):
    # The one edit: an axis in the table (plus, as for any axis, a family that builds it).
    monkeypatch.setitem(axis_table.AXES, "fake", axis_table.Axis("fake", (False, True), False, "fake"))
    fam = Family(name="demo_fakeaxis", template="demo_scale_variant.py.j2", package="fixture_kernels.fake_axis",
                 config_class="FakeAxisConfig", supported={"arch": ("sm_90a",), "dtype": ("bf16",), "fake": (False, True)},
                 config_axes=("arch", "dtype"), in_all=False)
    monkeypatch.setitem(families.FAMILIES, fam.name, fam)
    monkeypatch.setitem(spec.SETS, fam.name, [(fam.name, {"arch": spec.ALL, "dtype": spec.ALL, "fake": spec.ALL})])
    return fam


def test_a_new_axis_reaches_every_consumer(fake_axis, tmp_path, capsys):
    from cubinforge.cli import main
    from cubinforge.generator.cpp_bundle import load_home, render_cpp_bundle
    from cubinforge.runtime import VariantNotFound
    from cubinforge.runtime.registry_source import LocalSource, select

    # spec: a name token and a round trip
    v = spec.make_variant("demo_fakeaxis", arch="sm_90a", dtype="bf16", fake=True)
    assert v.name == "demo-fakeaxis-sm_90a-bf16-fake" and spec.parse_name(v.name) == v
    assert spec.make_variant("demo_fakeaxis", arch="sm_90a", dtype="bf16").axes["fake"] is False

    # CLI: the filter option exists and filters
    home = tmp_path / "home"
    assert main(["--home", str(home), "build", "--set", "demo_fakeaxis", "--fake", "1", "--list"]) == 0
    assert capsys.readouterr().out.split() == ["demo-fakeaxis-sm_90a-bf16-fake"]
    assert main(["--home", str(home), "build", "--set", "demo_fakeaxis", "--jobs", "1"]) == 0
    capsys.readouterr()

    # manifests carry it
    manifest = json.loads((home / "manifests" / "demo-fakeaxis-sm_90a-bf16-fake.json").read_text())
    assert manifest["axes"]["fake"] is True

    # dispatcher: an exact axis with a default, never substituted
    src = LocalSource(home)
    want = {"arch": "sm_90a", "dtype": "bf16"}
    assert select("demo_fakeaxis", want, src).variant == "demo-fakeaxis-sm_90a-bf16"
    assert select("demo_fakeaxis", {**want, "fake": True}, src).variant == "demo-fakeaxis-sm_90a-bf16-fake"
    (home / "manifests" / "demo-fakeaxis-sm_90a-bf16-fake.json").unlink()
    with pytest.raises(VariantNotFound, match="No demo_fakeaxis variant has fake=True"):
        select("demo_fakeaxis", {**want, "fake": True}, src)

    # C++ bundle: the variant's axes and the generated default-axis table
    manifests, blobs = load_home(home)
    header = render_cpp_bundle(manifests, blobs, tmp_path / "bundle")[-1].read_text()
    assert '{"fake", "false"}' in header
    defaults = header[header.index("kDefaultAxes[] = {"):]
    assert '{"fake", "false"}' in defaults[:defaults.index("};")]
    assert Path(tmp_path / "bundle").is_dir()
