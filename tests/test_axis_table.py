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

    # HTTP: the list filter, the OpenAPI schema and select (the service serves the same store)
    _http_sees_the_axis(home)

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


# A fresh process, as a server is: the table gains the axis before the service is imported,
# and nothing else is edited. (The service's schemas are built from the table at import.)
_HTTP_CHECK = r"""
import json, sys
from cubinforge.runtime import axes
axes.AXES["fake"] = axes.Axis("fake", (False, True), False, "fake")
from fastapi.testclient import TestClient
from cubinforge.service.app import create_app
from cubinforge.service.config import Settings

with TestClient(create_app(Settings(home=sys.argv[1]))) as c:
    spec = c.get("/openapi.json").json()
    params = {p["name"]: p for p in spec["paths"]["/v1/variants"]["get"]["parameters"]}
    schemas = spec["components"]["schemas"]
    listed = [i["variant"] for i in c.get("/v1/variants", params={"fake": True}).json()["items"]]
    plain = [i["variant"] for i in c.get("/v1/variants", params={"fake": False}).json()["items"]]
    # select is for attention problems (head_dim and the sizes are part of one): two published
    # fa3_fwd variants that differ only in the new axis.
    from cubinforge.service.testing import make_cubin, make_manifest
    st = c.app.state
    for fake in (False, True):
        name = "fa3_fwd-sm_90a-bf16-hd128" + ("-fake" if fake else "")
        cubin = make_cubin(payload=name.encode())
        with st.db.sessions() as s:
            assert st.store.publish(s, make_manifest(name, cubin, causal=False, fake=fake), cubin, [], "t")[0]
    problem = {"arch": "sm_90a", "dtype": "bf16", "head_dim": 128, "causal": False, "seqlen_q": 128, "heads_q": 1}
    print(json.dumps({
        "filter": params.get("fake", {}).get("schema"),
        "select_schema": schemas["SelectRequest"]["properties"].get("fake"),
        "axes_schema": schemas["Axes"]["properties"].get("fake"),
        "listed": listed, "plain": plain,
        "bad": c.get("/v1/variants", params={"fake": "maybe"}).status_code,
        "chosen": c.post("/v1/select", json={**problem, "fake": True}).json().get("variant"),
        "chosen_plain": c.post("/v1/select", json=problem).json().get("variant"),
    }))
"""


def _http_sees_the_axis(home: Path) -> None:
    import subprocess
    import sys

    pytest.importorskip("fastapi")
    out = subprocess.run([sys.executable, "-c", _HTTP_CHECK, str(home)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert "boolean" in json.dumps(got["filter"]), got          # GET /v1/variants?fake=
    assert "boolean" in json.dumps(got["select_schema"]), got   # POST /v1/select's schema
    assert "boolean" in json.dumps(got["axes_schema"]), got     # the manifest's axes
    assert got["listed"] == ["demo-fakeaxis-sm_90a-bf16-fake"] and got["plain"] == ["demo-fakeaxis-sm_90a-bf16"]
    assert got["bad"] == 422
    assert got["chosen"] == "fa3_fwd-sm_90a-bf16-hd128-fake" and got["chosen_plain"] == "fa3_fwd-sm_90a-bf16-hd128"
