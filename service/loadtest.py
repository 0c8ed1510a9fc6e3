"""A small HTTP/1.1 keep-alive load generator for blob downloads (asyncio, raw sockets).

An HTTP library would cost more CPU than the server under test on a 2-core machine, so
each simulated client is one keep-alive connection issuing GETs back to back and parsing
just the status line, Content-Length and body.

    python -m cubinforge.service.loadtest URL SHA256 --clients 64 --requests 200
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from urllib.parse import urlsplit


async def _client(host: str, port: int, path: str, n: int, expect_len: int, lat: list, errors: list):
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError as e:
        errors.append(f"connect: {e}")
        return
    req = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: */*\r\n\r\n".encode()
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            writer.write(req)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            body = await reader.readexactly(length)
            lat.append(time.perf_counter() - t0)
            if status != 200 or len(body) != expect_len:
                errors.append(f"status {status}, {len(body)} bytes")
    except (OSError, asyncio.IncompleteReadError, ValueError) as e:
        errors.append(f"{type(e).__name__}: {e}")
    finally:
        writer.close()


async def _run(url: str, sha: str, clients: int, requests: int, expect_len: int) -> dict:
    u = urlsplit(url)
    lat: list[float] = []
    errors: list[str] = []
    t0 = time.perf_counter()
    await asyncio.gather(*(_client(u.hostname, u.port, f"/v1/blobs/{sha}", requests, expect_len, lat, errors)
                           for _ in range(clients)))
    wall = time.perf_counter() - t0
    lat.sort()

    def pct(p):
        return lat[min(len(lat) - 1, int(p / 100 * len(lat)))] * 1000 if lat else float("nan")
    return {"clients": clients, "requests_per_client": requests, "completed": len(lat), "errors": len(errors),
            "error_samples": errors[:5], "seconds": round(wall, 3), "requests_per_s": round(len(lat) / wall, 1),
            "p50_ms": round(pct(50), 3), "p99_ms": round(pct(99), 3), "max_ms": round(lat[-1] * 1000, 3) if lat else None,
            "blob_bytes": expect_len}


def run(url: str, sha: str, clients: int = 64, requests: int = 200, expect_len: int = 0) -> dict:
    try:
        import uvloop
        return uvloop.run(_run(url, sha, clients, requests, expect_len))
    except ImportError:
        return asyncio.run(_run(url, sha, clients, requests, expect_len))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("url")
    p.add_argument("sha256")
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--size", type=int, required=True, help="expected blob size in bytes")
    a = p.parse_args(argv)
    print(json.dumps(run(a.url, a.sha256, a.clients, a.requests, a.size), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
