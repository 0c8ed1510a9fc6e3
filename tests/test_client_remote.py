"""The runtime's remote source against a live server: verification, cache, ETag, offline,
concurrency, retries; and `cubinforge` keygen/token/push/pull/bundle/import-bundle."""

from __future__ import annotations

import argparse
import base64
import http.server
import json
import multiprocessing as mp
import os
import threading
from pathlib import Path

import httpx
import pytest

from cubinforge.runtime import signing
from cubinforge.runtime.cache import Cache
from cubinforge.runtime.errors import IntegrityError, VariantNotFound
from cubinforge.runtime.remote import RemoteError, RemoteSource
from cubinforge.service.publisher import Signer, keygen
from cubinforge.service.testing import backend_url, free_port, live_server, make_cubin, make_manifest, seed_token

SIGNED = "fa3_fwd-sm_90a-bf16-hd128-causal"
UNSIGNED = "fa3_fwd-sm_90a-bf16-hd64"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("client")
    url = backend_url("sqlite", tmp)
    token = seed_token(url)
    key, pub, kid = keygen(tmp / "publisher")
    other_key, other_pub, _ = keygen(tmp / "stranger")
    signer = Signer(key)
    with live_server({"CUBINFORGE_HOME": str(tmp / "home"), "CUBINFORGE_DATABASE_URL": url},
                     log=tmp / "server.log") as base:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}) as c:
            arts = {}
            for name, hd, sign in ((SIGNED, 128, signer), (UNSIGNED, 64, None)):
                cubin = make_cubin("kernel_test", payload=name.encode())
                m = make_manifest(name, cubin, head_dim=hd)
                m = sign.sign(m) if sign else m
                r = c.post("/v1/artifacts", json={"manifest": m, "cubin_b64": base64.b64encode(cubin).decode()})
                assert r.status_code == 201, r.text
                arts[name] = (m, cubin)
        yield argparse.Namespace(base=base, token=token, tmp=tmp, pub=pub, key=key, kid=kid, other_pub=other_pub,
                                 other_key=other_key, arts=arts, db_url=url)


def source(env, tmp_path, keys=None, **kw):
    trusted = signing.load_trusted_keys(str(keys)) if keys else {}
    return RemoteSource(env.base, cache=Cache(tmp_path / "cache"), trusted_keys=trusted, backoff=0.01, **kw)


def test_fetch_verifies_and_caches(env, tmp_path):
    src = source(env, tmp_path, keys=env.pub)
    assert SIGNED in src.list() and UNSIGNED not in src.list()  # only trusted-signed variants are listed
    assert UNSIGNED in source(env, tmp_path).list()
    manifest, data = src.fetch(SIGNED)
    assert data == env.arts[SIGNED][1]
    assert manifest["signatures"][0]["key_id"] == env.kid
    sha = manifest["cubin"]["sha256"]
    assert (tmp_path / "cache" / "blobs" / "sha256" / sha[:2] / sha).read_bytes() == data
    # With trusted keys configured, an unsigned manifest is refused...
    with pytest.raises(signing.SignatureError, match="not signed"):
        src.get(UNSIGNED)
    # ...and so is one signed only by a key we do not trust.
    with pytest.raises(signing.SignatureError, match="untrusted"):
        source(env, tmp_path, keys=env.other_pub).get(SIGNED)


def test_no_trusted_keys_checks_sha_only(env, tmp_path):
    src = source(env, tmp_path)
    with pytest.warns(UserWarning, match="sha256 only"):
        _, data = src.fetch(UNSIGNED)
    assert data == env.arts[UNSIGNED][1]
    with pytest.raises(signing.SignatureError):
        source(env, tmp_path, require_signature=True).get(UNSIGNED)


def test_etag_revalidation(env, tmp_path, monkeypatch):
    src = source(env, tmp_path, keys=env.pub)
    seen = []
    real = src._request

    def spy(path, headers=None, method="GET"):
        r = real(path, headers, method)
        seen.append((path, r[0], dict(headers or {})))
        return r
    monkeypatch.setattr(src, "_request", spy)
    src.fetch(SIGNED)
    src.fetch(SIGNED)
    metas = [s for s in seen if s[0].startswith("/v1/variants/")]
    assert [s[1] for s in metas] == [200, 304] and "If-None-Match" in metas[1][2]
    assert len([s for s in seen if s[0].startswith("/v1/blobs/")]) == 1  # blobs are immutable: cached


def test_tampered_cache_is_refused_or_refetched(env, tmp_path):
    src = source(env, tmp_path, keys=env.pub)
    manifest, data = src.fetch(SIGNED)
    sha = manifest["cubin"]["sha256"]
    blob = tmp_path / "cache" / "blobs" / "sha256" / sha[:2] / sha
    blob.write_bytes(b"corrupted" + data[9:])
    assert src.blob(sha) == data          # detected, fetched again
    assert blob.read_bytes() == data
    # A cached manifest edited on disk no longer matches the digest kept beside it: it is
    # fetched again (not revalidated into reuse by a 304), and the cache is mended.
    meta = src.cache.meta_path(env.base, SIGNED)
    doc = json.loads(meta.read_text())
    doc["body"]["manifest"]["contract"]["dynamic_smem_bytes"] = 1 << 20
    meta.write_text(json.dumps(doc))
    with pytest.warns(UserWarning, match="does not match its digest"):
        assert src.get(SIGNED) == env.arts[SIGNED][0]
    assert json.loads(meta.read_text())["body"]["manifest"] == env.arts[SIGNED][0]
    # Unreadable metadata is just a cache miss.
    meta.write_text("{not json")
    assert src.get(SIGNED)["variant"] == SIGNED


def test_offline_uses_only_the_cache(env, tmp_path):
    source(env, tmp_path, keys=env.pub).fetch(SIGNED)
    off = RemoteSource("http://127.0.0.1:9", cache=Cache(tmp_path / "cache"), offline=True, trusted_keys={})
    off_same = source(env, tmp_path, keys=env.pub, offline=True)
    manifest, data = off_same.fetch(SIGNED)
    assert data == env.arts[SIGNED][1]
    with pytest.raises(VariantNotFound, match="OFFLINE"):
        off_same.get(UNSIGNED)
    with pytest.raises(IntegrityError, match="OFFLINE"):
        off.blob("ab" * 32)


def test_offline_from_env(env, tmp_path, monkeypatch):
    monkeypatch.setenv("CUBINFORGE_OFFLINE", "1")
    src = source(env, tmp_path)
    assert src.offline
    with pytest.raises(VariantNotFound):
        src.get(SIGNED)


def _fetch_in_child(args):
    base, cache_dir, sha = args
    data = RemoteSource(base, cache=Cache(cache_dir), trusted_keys={}).blob(sha)
    return len(data)


def test_many_processes_share_the_cache(env, tmp_path):
    sha = env.arts[SIGNED][0]["cubin"]["sha256"]
    with mp.get_context("spawn").Pool(6) as pool:
        sizes = pool.map(_fetch_in_child, [(env.base, str(tmp_path / "cache"), sha)] * 12)
    assert set(sizes) == {len(env.arts[SIGNED][1])}
    d = tmp_path / "cache" / "blobs" / "sha256" / sha[:2]
    assert sorted(p.name for p in d.iterdir() if not p.name.endswith(".lock")) == [sha]  # no temp files left


def test_yanked_variant_is_not_served_to_the_runtime(env, tmp_path):
    cubin = make_cubin("kernel_test", payload=b"to be yanked")
    m = make_manifest("fa3_fwd-sm_90a-bf16-hd256", cubin, head_dim=256)
    h = {"Authorization": f"Bearer {env.token}"}
    httpx.post(env.base + "/v1/artifacts", headers=h,
               json={"manifest": m, "cubin_b64": base64.b64encode(cubin).decode()}).raise_for_status()
    src = source(env, tmp_path)
    with pytest.warns(UserWarning):
        src.get(m["variant"])
    httpx.post(env.base + f"/v1/variants/{m['variant']}/yank", headers=h, json={"reason": "bad"}).raise_for_status()
    with pytest.raises(VariantNotFound, match="yanked"):
        src.get(m["variant"])
    assert m["variant"] not in src.list()


def test_runtime_select_over_remote_source(env, tmp_path):
    from cubinforge.runtime.registry_source import fetch_cubin, select
    src = source(env, tmp_path, keys=env.pub)
    # Only the signed variant is usable with keys configured; select() skips none silently:
    m = select("fa3_fwd", {"arch": "sm_90a", "dtype": "bf16", "head_dim": 128, "causal": True}, source=src)
    assert m.variant == SIGNED
    assert fetch_cubin(m, src) == env.arts[SIGNED][1]
    choice = src.select({"arch": "sm_90a", "dtype": "bf16", "head_dim": 128, "causal": True, "seqlen_q": 512,
                         "heads_q": 16})
    assert choice["variant"] == SIGNED
    with pytest.raises(VariantNotFound, match="head_dim=96"):
        src.select({"arch": "sm_90a", "dtype": "bf16", "head_dim": 96, "seqlen_q": 1, "heads_q": 1})


# ------------------------------------------------------------------ retries
class _Flaky(http.server.BaseHTTPRequestHandler):
    failures = 2
    calls = 0

    def do_GET(self):
        cls = type(self)
        cls.calls += 1
        if cls.calls <= cls.failures:
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = b"payload"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def test_retries_with_backoff(tmp_path):
    import hashlib
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        src = RemoteSource(f"http://127.0.0.1:{srv.server_address[1]}", cache=Cache(tmp_path), trusted_keys={},
                           backoff=0.01)
        assert src.blob(hashlib.sha256(b"payload").hexdigest()) == b"payload"
        assert _Flaky.calls == 3
    finally:
        srv.shutdown()
    dead = RemoteSource(f"http://127.0.0.1:{free_port()}", cache=Cache(tmp_path), trusted_keys={}, retries=2,
                        backoff=0.01)
    with pytest.raises(RemoteError, match="after 3 attempts"):
        dead.list()


# ------------------------------------------------------------------ the commands
def run_cli(*argv) -> int:
    from cubinforge.commands_service import add_subcommands
    p = argparse.ArgumentParser(prog="cubinforge")
    p.add_argument("--home")
    add_subcommands(p.add_subparsers(dest="command", required=True))
    args = p.parse_args(argv)
    return args.func(args)


def test_cli_keygen_push_pull_bundle_import(env, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CUBINFORGE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CUBINFORGE_HOME", raising=False)
    assert run_cli("keygen", "--out", str(tmp_path / "ci")) == 0
    assert (tmp_path / "ci.key").stat().st_mode & 0o777 == 0o600
    # A local registry home with one build in it (manifests + blobs), pushed signed.
    home = tmp_path / "local"
    cubin = make_cubin("kernel_test", payload=b"cli push")
    m = make_manifest("fa3_fwd-sm_90a-fp16-hd128", cubin, dtype="fp16")
    (home / "manifests").mkdir(parents=True)
    (home / "manifests" / f"{m['variant']}.json").write_text(json.dumps(m))
    sha = m["cubin"]["sha256"]
    (home / "blobs" / "sha256" / sha[:2]).mkdir(parents=True)
    (home / "blobs" / "sha256" / sha[:2] / sha).write_bytes(cubin)
    args = ("--server", env.base)
    monkeypatch.setenv("CUBINFORGE_TOKEN", env.token)
    assert run_cli("--home", str(home), "push", "--all", "--sign-key", str(tmp_path / "ci.key"), *args) == 0
    assert run_cli("--home", str(home), "push", m["variant"], *args) == 0  # unsigned copy: same content, no-op
    assert "no change" in capsys.readouterr().out
    monkeypatch.setenv("CUBINFORGE_TOKEN", "cf_bad")
    assert run_cli("--home", str(home), "push", m["variant"], *args) == 1
    monkeypatch.delenv("CUBINFORGE_TOKEN")
    # pull verifies against the key and fills the cache
    monkeypatch.setenv("CUBINFORGE_TRUSTED_KEYS", str(tmp_path / "ci.pub"))
    assert run_cli("pull", m["variant"], "--server", env.base) == 0
    assert (tmp_path / "cache" / "blobs" / "sha256" / sha[:2] / sha).read_bytes() == cubin
    # bundle from the server, then import it into a fresh registry database
    bundle = tmp_path / "bundle"
    assert run_cli("bundle", str(bundle), m["variant"], "--server", env.base,
                   "--include-keys", str(tmp_path / "ci.pub")) == 0
    assert json.loads((bundle / "bundle.json").read_text())["variants"][0]["variant"] == m["variant"]
    assert (bundle / "contracts" / f"{m['variant']}.json").is_file()
    assert list((bundle / "keys").glob("*.pub"))
    fresh = tmp_path / "airgapped"
    monkeypatch.setenv("CUBINFORGE_DATABASE_URL", f"sqlite:///{fresh / 'registry.db'}")
    capsys.readouterr()
    assert run_cli("--home", str(fresh), "import-bundle", str(bundle), "--trusted-keys", str(bundle / "keys")) == 0
    assert "created" in capsys.readouterr().out
    assert run_cli("--home", str(fresh), "import-bundle", str(bundle)) == 0  # again: unchanged
    # a tampered bundle is refused
    mp_ = bundle / "manifests" / f"{m['variant']}.json"
    doc = json.loads(mp_.read_text())
    doc["axes"]["tile_m"] = 64
    mp_.write_text(json.dumps(doc))
    assert run_cli("--home", str(tmp_path / "other"), "import-bundle", str(bundle),
                   "--trusted-keys", str(bundle / "keys")) == 1
    # The runtime reads a bundle directly, too: it has the registry-home layout.
    from cubinforge.runtime.registry_source import LocalSource
    assert LocalSource(bundle).blob(sha) == cubin


def test_edited_cached_manifest_is_refetched_without_trusted_keys(env, tmp_path):
    src = source(env, tmp_path)
    with pytest.warns(UserWarning, match="sha256 only"):
        assert src.get(UNSIGNED) == env.arts[UNSIGNED][0]
    meta = src.cache.meta_path(env.base, UNSIGNED)
    doc = json.loads(meta.read_text())
    doc["body"]["manifest"]["contract"]["block"] = [1024, 1, 1]
    meta.write_text(json.dumps(doc))
    # Not used silently: the server's copy comes back.
    with pytest.warns(UserWarning, match="digest"):
        assert src.get(UNSIGNED)["contract"]["block"] == env.arts[UNSIGNED][0]["contract"]["block"]
    # Offline, an edited entry cannot be refetched: an error, never the edited manifest.
    meta.write_text(json.dumps(doc))
    off = source(env, tmp_path, offline=True)
    with pytest.warns(UserWarning, match="digest"), pytest.raises(IntegrityError, match="pull"):
        off.get(UNSIGNED)


# ------------------------------------------------------------------ secrets stay out of argv and output
def test_tokens_come_from_env_or_stdin_never_argv(env, tmp_path, monkeypatch, capsys):
    import io
    monkeypatch.delenv("CUBINFORGE_TOKEN", raising=False)
    home = tmp_path / "local"
    cubin = make_cubin("kernel_test", payload=b"stdin push")
    m = make_manifest("fa3_fwd-sm_90a-fp16-hd64", cubin, dtype="fp16", head_dim=64)
    (home / "manifests").mkdir(parents=True)
    (home / "manifests" / f"{m['variant']}.json").write_text(json.dumps(m))
    sha = m["cubin"]["sha256"]
    (home / "blobs" / "sha256" / sha[:2]).mkdir(parents=True)
    (home / "blobs" / "sha256" / sha[:2] / sha).write_bytes(cubin)
    with pytest.raises(ValueError, match="process list"):
        run_cli("--home", str(home), "push", "--all", "--server", env.base, "--token", env.token)
    with pytest.raises(ValueError, match="CUBINFORGE_TOKEN"):
        run_cli("--home", str(home), "push", "--all", "--server", env.base)
    monkeypatch.setattr("sys.stdin", io.StringIO(env.token + "\n"))
    assert run_cli("--home", str(home), "push", "--all", "--server", env.base, "--token-stdin") == 0
    assert "published" in capsys.readouterr().out


def test_urls_are_redacted():
    from cubinforge.runtime.remote import redact_url
    from cubinforge.service.config import redact_db_url
    assert redact_db_url("postgresql+psycopg://ci:s3cret@db:5432/reg") == "postgresql+psycopg://ci:***@db:5432/reg"
    assert redact_db_url("sqlite:////x/registry.db") == "sqlite:////x/registry.db"
    assert redact_url("https://bot:s3cret@reg.example/x") == "https://bot:***@reg.example/x"
    assert redact_url("https://t0ken@reg.example") == "https://***@reg.example"
    assert redact_url("http://127.0.0.1:8000") == "http://127.0.0.1:8000"
    src = RemoteSource(f"http://bot:s3cret@127.0.0.1:{free_port()}", trusted_keys={}, retries=0, backoff=0.01)
    assert "s3cret" not in repr(src) and "s3cret" not in str(src.cache.server_dir(src.shown))
    with pytest.raises(RemoteError) as e:
        src.list()
    assert "s3cret" not in str(e.value)


def test_db_upgrade_does_not_print_the_password(tmp_path, monkeypatch, capsys):
    base = os.environ.get("CUBINFORGE_TEST_PG_URL")
    if not base:
        pytest.skip("needs the test PostgreSQL (.ci/postgres.sh), whose URL has a password")
    url = backend_url("postgresql", tmp_path)
    password = url.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]
    monkeypatch.setenv("CUBINFORGE_DATABASE_URL", url)
    assert run_cli("--home", str(tmp_path), "db", "upgrade") == 0
    out = capsys.readouterr()
    assert f":{password}@" not in out.out + out.err and ":***@" in out.out
