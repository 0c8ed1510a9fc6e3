"""A small HTTP/1.1 keep-alive load generator (asyncio, raw sockets), for blob downloads or a mix.

An HTTP library would cost more CPU than the server under test on a 2-core machine, so
each simulated client is one keep-alive connection (an asyncio Protocol) issuing requests
back to back and parsing just the status line, Content-Length and body.

    python -m cubinforge.service.loadtest URL SHA256 --size N --clients 64 --requests 200
    python -m cubinforge.service.loadtest URL SHA256 --size N --mix --clients 100 --requests 1000

--mix: each client cycles through list, select and blob requests (thirds); every answer must
be 200 (blob: exactly --size bytes). The figures are those issue 14 asks of the service:
errors, p50/p99 per kind and overall.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from urllib.parse import urlsplit

SELECT = {"arch": "sm_90a", "dtype": "bf16", "head_dim": 128, "causal": True, "seqlen_q": 4096, "heads_q": 32,
          "batch": 2}


def requests_for(host: str, sha: str, mix: bool) -> list[tuple[str, bytes, int | None]]:
    """(kind, raw request, expected body length or None) cycled by each client."""
    blob = ("blob", f"GET /v1/blobs/{sha} HTTP/1.1\r\nHost: {host}\r\nAccept: */*\r\n\r\n".encode(), None)
    if not mix:
        return [blob]
    body = json.dumps(SELECT).encode()
    select = ("select", (f"POST /v1/select HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {len(body)}\r\n\r\n").encode() + body, None)
    listing = ("list", f"GET /v1/variants?limit=50 HTTP/1.1\r\nHost: {host}\r\n\r\n".encode(), None)
    return [listing, select, blob]


class _Client(asyncio.Protocol):
    """One keep-alive connection issuing n requests back to back (the next one is written when
    the last byte of the previous answer arrives). A Protocol rather than asyncio streams: no
    readuntil/readexactly futures and no copy of the body into a buffer, so the generator,
    which shares the cores with the server, spends ~half the CPU per request it did."""

    def __init__(self, reqs, n, offset, expect_len, lat, errors, done):
        self.reqs, self.n, self.i, self.offset, self.expect_len = reqs, n, 0, offset, expect_len
        self.lat, self.errors, self.done = lat, errors, done
        self.head = b""  # the answer's bytes up to the end of its headers
        self.need = -1  # body bytes still to come; -1 while the headers are incomplete
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport
        self._send()

    def _send(self):
        kind, req, _ = self.reqs[(self.i + self.offset) % len(self.reqs)]
        self.kind, self.t0 = kind, time.perf_counter()
        self.transport.write(req)

    def data_received(self, data):
        while data:
            if self.need < 0:
                self.head += data
                end = self.head.find(b"\r\n\r\n")
                if end < 0:
                    if len(self.head) > 65536:
                        return self._fail("headers over 64 KiB")
                    return
                head, data = self.head[:end], memoryview(self.head)[end + 4:]  # the body is not copied
                self.head = b""
                self.status, length = int(head[9:12]), 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                self.length = self.need = length
                self.sample = bytes(data[:120])
            take = min(self.need, len(data))
            self.need -= take
            data = data[take:]
            if self.need > 0:
                return
            self._answered()
            if data:
                return self._fail(f"{len(data)} bytes after the answer")

    def _answered(self):
        self.lat.setdefault(self.kind, []).append(time.perf_counter() - self.t0)
        self.need = -1
        if self.status != 200 or (self.kind == "blob" and self.length != self.expect_len):
            self.errors.append(f"{self.kind}: status {self.status}, {self.length} bytes: {self.sample!r}")
        self.i += 1
        if self.i < self.n:
            self._send()
        else:
            self._close()

    def _fail(self, why):
        self.errors.append(why)
        self._close()

    def _close(self):
        if not self.done.done():
            self.done.set_result(None)
            self.transport.close()

    def connection_lost(self, exc):
        if not self.done.done():
            self.errors.append(f"connection lost after {self.i} answers: {exc!r}")
            self.done.set_result(None)


async def _client(host, port, reqs, n, expect_len, lat, errors, offset):
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    try:
        await loop.create_connection(lambda: _Client(reqs, n, offset, expect_len, lat, errors, done), host, port)
    except OSError as e:
        errors.append(f"connect: {e}")
        return
    await done


def _pct(values: list[float], p: float) -> float:
    return round(values[min(len(values) - 1, int(p / 100 * len(values)))] * 1000, 3) if values else float("nan")


async def _run(url, sha, clients, requests, expect_len, mix):
    u = urlsplit(url)
    reqs = requests_for(u.hostname, sha, mix)
    lat: dict[str, list[float]] = {}
    errors: list[str] = []
    t0 = time.perf_counter()
    await asyncio.gather(*(_client(u.hostname, u.port, reqs, requests, expect_len, lat, errors, i)
                           for i in range(clients)))
    wall = time.perf_counter() - t0
    every = sorted(x for v in lat.values() for x in v)
    out = {"clients": clients, "requests_per_client": requests, "mix": [k for k, _, _ in reqs],
           "completed": len(every), "errors": len(errors), "error_samples": errors[:5], "seconds": round(wall, 3),
           "requests_per_s": round(len(every) / wall, 1), "p50_ms": _pct(every, 50), "p99_ms": _pct(every, 99),
           "max_ms": round(every[-1] * 1000, 3) if every else None, "blob_bytes": expect_len}
    if mix:
        out["by_kind"] = {k: {"n": len(v), "p50_ms": _pct(sorted(v), 50), "p99_ms": _pct(sorted(v), 99)}
                          for k, v in sorted(lat.items())}
    return out


def run(url: str, sha: str, clients: int = 64, requests: int = 200, expect_len: int = 0, mix: bool = False) -> dict:
    try:
        import uvloop
        return uvloop.run(_run(url, sha, clients, requests, expect_len, mix))
    except ImportError:
        return asyncio.run(_run(url, sha, clients, requests, expect_len, mix))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("url")
    p.add_argument("sha256")
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--size", type=int, required=True, help="expected blob size in bytes")
    p.add_argument("--mix", action="store_true", help="thirds of list, select and blob requests")
    a = p.parse_args(argv)
    print(json.dumps(run(a.url, a.sha256, a.clients, a.requests, a.size, a.mix), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
