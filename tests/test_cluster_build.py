"""`build --cluster`: the same registry as a local build, no shared filesystem, failures named."""

from __future__ import annotations

import concurrent.futures
from types import SimpleNamespace

import pytest

pytest.importorskip("sqlalchemy", reason="the registry needs the server extra")
pytest.importorskip("distributed", reason="needs the cluster extra (dask distributed)")

from cubinforge.generator import build, spec  # noqa: E402
from cubinforge.registry import Registry  # noqa: E402


def _untimed(d):
    """A record part without its timings (`*_seconds`): two builds of one variant differ only there."""
    if isinstance(d, dict):
        return {k: _untimed(v) for k, v in d.items() if not k.endswith("_seconds")}
    return d


def _same_artifacts(a: Registry, b: Registry, names: list[str]) -> None:
    for name in names:
        ra, rb = a.get(name), b.get(name)
        assert ra and rb, name
        assert ra["cubin"] == rb["cubin"], f"{name}: cubin differs between the local and the cluster build"
        assert ra["content_key"] == rb["content_key"]
        assert ra["contract"] == rb["contract"] and _untimed(ra["metadata"]) == _untimed(rb["metadata"])
        assert a.read_blob(ra["cubin"]["sha256"]) == b.read_blob(rb["cubin"]["sha256"])


@pytest.fixture(scope="module")
def smoke_local(tmp_path_factory):
    reg = Registry(home=tmp_path_factory.mktemp("smoke-local"))
    out = build.build(spec.select("smoke"), reg, jobs=1, progress=False)
    assert all(o.status == "built" for o in out), build.summary(out)
    return reg


def test_local_cluster_build_equals_the_local_build(demo_registry, smoke_local, tmp_path):
    """demo (both archs) + smoke on a LocalCluster of 2 worker processes whose HOME, TMPDIR and
    CUBINFORGE_HOME are elsewhere: the same cubins, contracts and metadata as the local builds,
    written by the client only."""
    from distributed import Client, LocalCluster

    worker = tmp_path / "worker"
    (worker / "tmp").mkdir(parents=True)
    env = {"HOME": str(worker), "TMPDIR": str(worker / "tmp"), "CUBINFORGE_HOME": str(worker / "registry")}
    variants = spec.select("demo") + spec.select("smoke")
    names = [v.name for v in variants]
    reg = Registry(home=tmp_path / "client")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                      env=env) as cluster, Client(cluster) as client:
        out = build.build(variants, reg, client=client, progress=False)
        assert [o.status for o in out] == ["built"] * len(variants), build.summary(out)
        # the compile children live in the workers' own temporary folders
        servers = sorted(p.name.split("-")[1] for p in (worker / "tmp").glob("cubinforge-sm_*"))
        assert set(servers) == {"sm_90a", "sm_100a"}, servers
        again = build.build(variants, reg, client=client, progress=False)
        assert [o.status for o in again] == ["skipped"] * len(variants)
    _same_artifacts(demo_registry, reg, [n for n in names if n.startswith("demo-")])
    _same_artifacts(smoke_local, reg, [n for n in names if n.startswith("fa3-")])
    assert not (worker / "registry").exists(), "a worker wrote a registry"
    assert not (reg.home / "build").exists(), "a cluster build must not rely on rendered files on the client"


class _FakeCluster(concurrent.futures.Executor):
    """An Executor that loses one variant as Dask does when its workers keep dying, and runs the
    rest in this process (compile_remote without Dask)."""

    def __init__(self, lost: str):
        self.lost, self.seen = lost, []

    def submit(self, fn, job):
        from distributed.scheduler import KilledWorker

        self.seen.append(job)
        fut: concurrent.futures.Future = concurrent.futures.Future()
        if job.variant == self.lost:
            fut.set_exception(KilledWorker(task=f"compile_remote-{job.variant}", allowed_failures=3,
                                           last_worker=SimpleNamespace(address="tcp://10.0.0.7:4242")))
        else:
            fut.set_result(fn(job))
        return fut


def test_a_killed_worker_names_the_variant_and_why(home, capsys):
    reg = Registry()
    variants = spec.select("demo", {"arch": ["sm_90a"]})
    fake = _FakeCluster(lost="demo-scale-sm_90a-fp16")
    assert build.run(variants, reg, client=fake, progress=False) == 1
    text = capsys.readouterr().out
    assert "1 built, 0 skipped, 1 failed" in text
    assert "FAILED demo-scale-sm_90a-fp16:" in text and "KilledWorker" in text
    assert "4 tries, the last on tcp://10.0.0.7:4242" in text
    assert reg.get("demo-scale-sm_90a-bf16") and reg.get("demo-scale-sm_90a-fp16") is None
    job = fake.seen[0]
    assert "def build()" in job.source and job.package == "cubinforge.generator.kernels.demo_scale"
    assert job.toolchain.startswith("nvidia-cutlass-dsl==") and len(job.library) == 64


def test_a_compile_child_that_dies_fails_only_its_variant():
    from cubinforge.generator.cluster import RemoteJob, compile_remote

    crash = RemoteJob("demo-crash", "sm_90a", "cubinforge_variant_crash",
                      "import os\n\ndef build():\n    print('about to crash')\n    os._exit(3)\n")
    result = compile_remote(crash)
    assert not result.ok
    assert "exited with status 3 while compiling demo-crash" in result.error and "about to crash" in result.error
    broken = RemoteJob("demo-raise", "sm_90a", "cubinforge_variant_raise",
                       "def build():\n    raise RuntimeError('kernel bug stand-in')\n")
    result = compile_remote(broken)  # a fresh child replaced the dead one
    assert not result.ok and "RuntimeError: kernel bug stand-in" in result.error


def test_a_worker_with_another_toolchain_refuses():
    from cubinforge.generator.cluster import RemoteJob, compile_remote

    job = RemoteJob("demo-scale-sm_90a-bf16", "sm_90a", "m", "", "cubinforge.generator.kernels.demo_scale",
                    toolchain="nvidia-cutlass-dsl==0.0.1", library="0" * 64)
    result = compile_remote(job)
    assert not result.ok and "nvidia-cutlass-dsl==0.0.1" in result.error and "same versions" in result.error
    job = RemoteJob("demo-scale-sm_90a-bf16", "sm_90a", "m", "", "cubinforge.generator.kernels.demo_scale",
                    library="0" * 64)
    result = compile_remote(job)
    assert not result.ok and "has a different cubinforge.generator.kernels.demo_scale" in result.error


def test_cli_cluster_address_errors(capsys):
    from cubinforge.cli import main

    assert main(["build", "--set", "demo", "--cluster", "scheduler:8786"]) == 2
    assert "expected tcp://HOST:PORT (a running Dask scheduler) or local:N" in capsys.readouterr().err
    assert main(["build", "--set", "demo", "--cluster", "local:0"]) == 2
    assert "at least 1 worker" in capsys.readouterr().err
    assert main(["build", "--set", "demo", "--publish", "http://127.0.0.1:9", "--token", ""]) == 2
    assert "--publish needs a token" in capsys.readouterr().err


def test_cli_exact_names_one_variant_even_outside_the_sets(capsys):
    from cubinforge.cli import main

    assert main(["build", "--exact", "--family", "fa3_fwd", "--arch", "sm90", "--dtype", "bf16", "--head-dim", "96",
                 "--causal", "1", "--varlen", "0", "--scheduler", "lpt", "--list"]) == 0
    assert capsys.readouterr().out.split() == ["fa3-fwd-sm_90a-bf16-hd96-causal-lpt"]
    assert main(["build", "--exact", "--family", "fa3_fwd", "--arch", "sm90", "--dtype", "bf16", "--head-dim", "128",
                 "--causal", "0", "--list"]) == 0
    assert capsys.readouterr().out.split() == ["fa3-fwd-sm_90a-bf16-hd128-noncausal-persistent"]  # the default set's
    assert main(["build", "--exact", "--family", "demo_scale", "--arch", "sm90", "--dtype", "bf16",
                 "--head-dim", "128", "--list"]) == 2
    assert "demo_scale has no axis head_dim" in capsys.readouterr().err
    assert main(["build", "--exact", "--arch", "sm90", "--list"]) == 2
    assert "exactly one --family" in capsys.readouterr().err


@pytest.mark.filterwarnings("ignore:cubinforge. no trusted keys")
def test_publish_sends_each_stored_artifact(smoke_local, tmp_path, capsys):
    """`build --publish`: every variant current in the registry reaches the server; a refused
    token fails the build naming each variant."""
    from cubinforge.runtime.cache import Cache
    from cubinforge.runtime.remote import RemoteSource
    from cubinforge.service.publish_queue import StreamingPublisher
    from cubinforge.service.testing import backend_url, live_server, seed_token

    url = backend_url("sqlite", tmp_path)
    token = seed_token(url)
    variants = spec.select("smoke")
    with live_server({"CUBINFORGE_HOME": str(tmp_path / "server"), "CUBINFORGE_DATABASE_URL": url}) as base:
        bad = StreamingPublisher(base, "not-a-token", smoke_local.home)
        assert build.run(variants, smoke_local, publisher=bad, progress=False) == 1
        text = capsys.readouterr().out
        assert f"FAILED {variants[0].name}" in text and "publishing failed" in text and "HTTP 401" in text
        assert "0 built, 0 skipped, 1 failed" in text

        pub = StreamingPublisher(base, token, smoke_local.home)
        assert build.run(variants, smoke_local, publisher=pub, progress=False) == 0
        assert "0 built, 1 skipped, 0 failed" in capsys.readouterr().out
        assert "1 variants (1 new, 0 already there)" in pub.report()
        remote = RemoteSource(base, cache=Cache(tmp_path / "cache"), trusted_keys={}, require_signature=False)
        for v in variants:
            manifest, cubin = remote.fetch(v.name)
            assert manifest["cubin"] == smoke_local.get(v.name)["cubin"]
            assert cubin == smoke_local.read_blob(manifest["cubin"]["sha256"])


def test_publish_retries_transient_failures_only(tmp_path, monkeypatch):
    from cubinforge.service import publish_queue
    from cubinforge.service.publisher import PublishError

    calls = []

    def flaky(server, token, manifest, cubin):
        calls.append(manifest["variant"])
        if manifest["variant"] == "refused":
            raise PublishError("refused: HTTP 409: conflict", 409)
        if calls.count(manifest["variant"]) < 3:
            raise PublishError("cannot reach the server" if len(calls) % 2 else "HTTP 503: busy",
                               None if len(calls) % 2 else 503)
        return {"created": True, "sha256": "0" * 64}

    monkeypatch.setattr(publish_queue, "publish", flaky)
    monkeypatch.setattr(publish_queue, "read_local", lambda home, name: ({"variant": name}, b"x"))
    pub = publish_queue.StreamingPublisher("http://x", "t", tmp_path, backoff=0.0, attempts=4)
    pub.submit("ok")
    pub.submit("refused")
    assert pub.wait() == {"refused": "refused: HTTP 409: conflict"}
    assert calls.count("ok") == 3 and calls.count("refused") == 1
    assert pub.results == {"ok": {"created": True, "sha256": "0" * 64}}
