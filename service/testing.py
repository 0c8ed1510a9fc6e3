"""Helpers for tests and benchmarks of the service: tiny valid cubins and a live server.

`make_cubin` builds a minimal ELF64 with EM_CUDA, the e_flags a real cubin of that arch has
(see elfcheck.arch_from_flags) and one kernel symbol in `.text.<entry>`: enough for every
check the server makes, in microseconds and without the CUDA toolchain.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path


def _eflags(arch: str) -> tuple[int, int, int]:
    m = re.fullmatch(r"sm_(\d+)(a?)", arch)
    if not m:
        raise ValueError(arch)
    sm, accel = int(m.group(1)), bool(m.group(2))
    if sm >= 100:  # new layout: OSABI 0x41, ABI version 8
        return 0x41, 8, 0x06000002 | (sm << 8) | (0x8 if accel else 0)
    return 0x33, 7, (sm << 16) | 0x0500 | (0x800 if accel else 0) | sm


def make_cubin(entry: str = "kernel_test", arch: str = "sm_90a", payload: bytes = b"") -> bytes:
    osabi, abiver, flags = _eflags(arch)
    text = (payload or hashlib.sha256(entry.encode()).digest()) + b"\0" * 8
    shstr = b"\0.shstrtab\0.strtab\0.symtab\0.text." + entry.encode() + b"\0"
    strtab = b"\0" + entry.encode() + b"\0"
    # Symbols: the null one, then the kernel (GLOBAL FUNC in section 4).
    sym = b"\0" * 24 + struct.pack("<IBBHQQ", 1, (1 << 4) | 2, 0, 4, 0, len(text))
    body = bytearray(b"\0" * 64)
    offs = []
    for blob in (shstr, strtab, sym, text):
        while len(body) % 8:
            body.append(0)
        offs.append(len(body))
        body += blob
    while len(body) % 8:
        body.append(0)
    shoff = len(body)
    names = [0, 1, 11, 19, 27]
    shdrs = [b"\0" * 64]
    shdrs.append(struct.pack("<IIQQQQIIQQ", names[1], 3, 0, 0, offs[0], len(shstr), 0, 0, 1, 0))
    shdrs.append(struct.pack("<IIQQQQIIQQ", names[2], 3, 0, 0, offs[1], len(strtab), 0, 0, 1, 0))
    shdrs.append(struct.pack("<IIQQQQIIQQ", names[3], 2, 0, 0, offs[2], len(sym), 2, 1, 8, 24))
    shdrs.append(struct.pack("<IIQQQQIIQQ", names[4], 1, 6, 0, offs[3], len(text), 0, 0, 128, 0))
    body += b"".join(shdrs)
    ident = b"\x7fELF" + bytes([2, 1, 1, osabi, abiver]) + b"\0" * 7
    hdr = ident + struct.pack("<HHIQQQIHHHHHH", 2, 190, 1, 0, 0, shoff, flags, 64, 56, 0, 64, 5, 1)
    body[:64] = hdr
    return bytes(body)


def make_manifest(variant: str, cubin: bytes, *, family: str = "fa3_fwd", arch: str = "sm_90a",
                  dtype: str = "bf16", head_dim: int = 128, causal: bool = True, entry: str = "kernel_test",
                  **axes) -> dict:
    ax = {"arch": arch, "dtype": dtype, "head_dim": head_dim, "causal": causal, "varlen": False,
          "paged_kv": False, "pack_gqa": False, "split_kv": False, "scheduler": "single",
          "tile_m": 128, "tile_n": 128}
    ax.update(axes)
    return {
        "manifest_version": 1, "variant": variant, "family": family, "axes": ax,
        "cubin": {"sha256": hashlib.sha256(cubin).hexdigest(), "size": len(cubin)},
        "contract": {"contract_version": 1, "variant": variant, "arch": arch, "entry": entry,
                     "block": [384, 1, 1], "cluster": [1, 1, 1], "dynamic_smem_bytes": 0,
                     "static_smem_bytes": 0, "grid": [[1], [1], [1]], "symbols": {}, "tensors": {},
                     "scalars": {}, "checks": [], "params": []},
        "metadata": {"entry": entry},
        "provenance": {"generator": "tests"},
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def live_server(env: dict[str, str], workers: int = 1, log: Path | None = None, info: dict | None = None):
    """`cubinforge serve` as a subprocess on a random loopback port; yields its base URL
    (and puts the server's pid in `info["pid"]` when given, for measurements)."""
    port = free_port()
    full_env = {**os.environ, **env}
    cmd = [sys.executable, "-m", "cubinforge.service.serve", "--host", "127.0.0.1", "--port", str(port),
           "--workers", str(workers), "--log-level", "warning"]
    out = open(log, "wb") if log else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, env=full_env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    if info is not None:
        info["pid"] = proc.pid
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                tail = log.read_text()[-3000:] if log else ""
                raise RuntimeError(f"server exited with {proc.returncode}\n{tail}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
                    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    if s.recv(64).startswith(b"HTTP/1.1 200"):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("server did not become healthy within 60 s")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log:
            out.close()


# ------------------------------------------------------------------ backends for tests
def backends() -> list[str]:
    """'sqlite' always; 'postgresql' when CUBINFORGE_TEST_PG_URL names a server (.ci/postgres.sh)."""
    return ["sqlite", "postgresql"]


def backend_url(kind: str, tmp: Path) -> str:
    """A fresh, empty database of `kind`: a new SQLite file, or a new schema on the test PostgreSQL."""
    import pytest

    if kind == "sqlite":
        return f"sqlite:///{tmp / 'registry.db'}"
    base = os.environ.get("CUBINFORGE_TEST_PG_URL")
    if not base:
        pytest.skip("CUBINFORGE_TEST_PG_URL is not set (.ci/postgres.sh starts a PostgreSQL and sets it)")
    import secrets

    from sqlalchemy import create_engine, text

    schema = "t_" + secrets.token_hex(6)
    eng = create_engine(base)
    with eng.begin() as c:
        c.execute(text(f"CREATE SCHEMA {schema}"))
    eng.dispose()
    sep = "&" if "?" in base else "?"
    # Every connection of this URL (server, migrations, test) sees only this schema.
    return f"{base}{sep}options=-csearch_path%3D{schema}"


def seed_token(url: str, name: str = "ci", scopes=("admin",)) -> str:
    from .auth import create_token
    from cubinforge.registry.db import Database
    from cubinforge.registry.migrate import upgrade

    upgrade(url)
    db = Database(url)
    try:
        with db.sessions() as s:
            return create_token(s, name, scopes)
    finally:
        db.dispose()


# ------------------------------------------------------------------ the tests' server and helpers
TEST_MAX_CUBIN = 64 * 1024  # the test servers' publish limit (small, so 413 is cheap to reach)


def server_fixture(prefix: str):
    """A module-scoped pytest fixture `server`, once per backend: a live server on a fresh
    database with an admin token, as an httpx client with `.token`, `.auth_headers`, `.home`,
    `.db_url` and `.tmp`. A test module takes it with `server = server_fixture("svc")`."""
    import httpx
    import pytest

    @pytest.fixture(scope="module", params=backends())
    def server(request, tmp_path_factory):
        tmp = tmp_path_factory.mktemp(f"{prefix}-{request.param}")
        url = backend_url(request.param, tmp)
        token = seed_token(url)
        env = {"CUBINFORGE_HOME": str(tmp / "home"), "CUBINFORGE_DATABASE_URL": url,
               "CUBINFORGE_MAX_CUBIN_BYTES": str(TEST_MAX_CUBIN)}
        with live_server(env, log=tmp / "server.log") as base:
            with httpx.Client(base_url=base, timeout=30) as client:
                client.token, client.auth_headers = token, {"Authorization": f"Bearer {token}"}
                client.home, client.db_url, client.tmp = tmp / "home", url, tmp
                yield client

    return server


def artifact(name: str, entry: str = "kernel_test", arch: str = "sm_90a", payload: bytes = b"",
             family: str = "misc", **axes) -> tuple[dict, bytes]:
    """A (manifest, cubin) pair; family "misc" keeps it out of the fa3_fwd catalogue selects use."""
    cubin = make_cubin(entry, arch, payload or name.encode())
    return make_manifest(name, cubin, arch=arch, entry=entry, family=family, **axes), cubin


def publish(client, manifest: dict, cubin: bytes, headers: dict | None = None):
    import base64

    body = {"manifest": manifest, "cubin_b64": base64.b64encode(cubin).decode()}
    return client.post("/v1/artifacts", json=body, headers=client.auth_headers if headers is None else headers)


def assert_error(r, status: int, code: str | None = None) -> dict:
    """The response is the JSON error the API promises: this status, a message, this code."""
    assert r.status_code == status, r.text
    body = r.json()
    assert isinstance(body.get("message"), str) and body["message"], body
    if code:
        assert body["error"] == code, body
    return body
