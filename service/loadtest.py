"""A small HTTP/1.1 keep-alive load generator (asyncio, raw sockets), for blob downloads or a mix.

An HTTP library would cost more CPU than the server under test on a 2-core machine, so
each simulated client is one keep-alive connection issuing requests back to back and parsing
just the status line, Content-Length and body.

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


async def _client(host, port, reqs, n, expect_len, lat, errors, offset):
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError as e:
        errors.append(f"connect: {e}")
        return
    try:
        for i in range(n):
            kind, req, _ = reqs[(i + offset) % len(reqs)]
            t0 = time.perf_counter()
            writer.write(req)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            body = await reader.readexactly(length)
            lat.setdefault(kind, []).append(time.perf_counter() - t0)
            if status != 200 or (kind == "blob" and len(body) != expect_len):
                errors.append(f"{kind}: status {status}, {len(body)} bytes: {body[:120]!r}")
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as e:
        errors.append(f"{type(e).__name__}: {e}")
    finally:
        writer.close()


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
