"""The figures issue 14 asks of the service, measured on loopback with 2 workers.

    python -m cubinforge.service.loadbench mixed  --backend sqlite --clients 100 --requests 1000
    python -m cubinforge.service.loadbench mixed  --backend postgresql     # needs CUBINFORGE_TEST_PG_URL
    python -m cubinforge.service.loadbench bodies --backend sqlite --clients 12 --mb 90
    python -m cubinforge.service.loadbench fuzz   --backend sqlite --cases 5000

mixed: a fresh registry with a dozen fa3_fwd variants; N keep-alive clients each issue M
requests cycling list / select / blob (loadtest.py); errors, p50/p99, and each worker's
peak RSS. bodies: N concurrent clients each POST an unauthenticated body of --mb MB (the
cubin limit raised so the size check alone does not refuse it); each worker's peak RSS.
fuzz: fuzzpublish.py's mutated artifacts (true digests) in process; statuses, 0 >= 500.
Everything runs on 127.0.0.1 and stops by itself; the JSON result goes to stdout (and --out).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import platform
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import httpx

from .loadtest import run as run_load
from .testing import backend_url, live_server, make_cubin, make_manifest, seed_token


def _workers_rss(server_pid: int) -> list[dict]:
    """Peak and current RSS (MiB) of the server's child processes (the uvicorn workers)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            status = (d / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if fields.get("PPid", "").strip() == str(server_pid) and "python" in fields.get("Name", ""):
            mib = lambda k: round(int(fields[k].split()[0]) / 1024, 1)  # noqa: E731
            out.append({"pid": int(d.name), "peak_rss_mib": mib("VmHWM"), "rss_mib": mib("VmRSS")})
    return sorted(out, key=lambda w: w["pid"])


SERVER_ENV: dict[str, str] = {}  # --server-env K=V: e.g. run the server from another checkout, for a before/after


def _cpu_s(pids) -> float:
    """User + system CPU seconds used so far by these processes."""
    tick, total = os.sysconf("SC_CLK_TCK"), 0
    for pid in pids:
        try:
            f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(f[11]) + int(f[12])
    return total / tick


def _connections(pids, port: int) -> dict[int, int]:
    """Established TCP connections on the server's port held by each of these processes."""
    established = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] == "01" and int(f[1].rsplit(":", 1)[1], 16) == port:
                established.add(f[9])  # the socket's inode
    out = {}
    for pid in pids:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        n = 0
        for fd in fds:
            try:
                link = os.readlink(fd)
            except OSError:
                continue
            n += link.startswith("socket:[") and link[8:-1] in established
        out[pid] = n
    return out


def _env(tmp: Path, url: str, **more) -> dict:
    return {"CUBINFORGE_HOME": str(tmp / "home"), "CUBINFORGE_DATABASE_URL": url, **SERVER_ENV, **more}


def mixed(backend: str, clients: int, requests: int, tmp: Path, client: str = "python") -> dict:
    url = backend_url(backend, tmp)
    token = seed_token(url)
    info: dict = {}
    with live_server(_env(tmp, url), workers=2, log=tmp / "server.log", info=info) as base:
        h = {"Authorization": f"Bearer {token}"}
        first = None
        for i in range(12):
            cubin = make_cubin("kernel_test", payload=os.urandom(128 * 1024) + bytes([i]))
            m = make_manifest(f"fa3_fwd-sm_90a-bf16-hd128-causal-t{i}", cubin, head_dim=128 if i == 0 else 64 + i)
            httpx.post(base + "/v1/artifacts", headers=h, timeout=60,
                       json={"manifest": m, "cubin_b64": base64.b64encode(cubin).decode()}).raise_for_status()
            first = first or (m["cubin"]["sha256"], len(cubin))
        pids = [w["pid"] for w in _workers_rss(info["pid"])]
        port = int(base.rsplit(":", 1)[1])
        spread: dict = {}
        probe = threading.Timer(1.0, lambda: spread.update(_connections(pids, port)))
        load0 = os.getloadavg()
        cpu0, t0 = _cpu_s(pids), os.times()
        probe.start()
        if client == "wrk":
            from .wrkload import run as run_wrk
            result = run_wrk(base, first[0], clients, requests, first[1], tmp)
        else:
            result = run_load(base, first[0], clients=clients, requests=requests, expect_len=first[1], mix=True)
        t1 = os.times()
        probe.cancel()
        result["workers_rss"] = _workers_rss(info["pid"])
        # Which worker holds how many of the clients' connections (1 s in): the kernel hands
        # the shared listening socket's connections to whichever worker accepts first.
        result["connections_per_worker"] = [n for pid in pids if (n := spread.get(pid, 0))]  # not the resource tracker
        result["nice"] = os.nice(0)
        result["load_average_before"] = load0
        # CPU per request, server and load generator apart: on a shared machine the latency
        # figures depend on what else runs; these do not.
        result["server_cpu_us_per_request"] = round((_cpu_s(pids) - cpu0) / max(result["completed"], 1) * 1e6, 1)
        client_s = (t1.user + t1.system - t0.user - t0.system
                    + t1.children_user + t1.children_system - t0.children_user - t0.children_system)  # wrk
        server_s = _cpu_s(pids) - cpu0
        result["client_cpu_us_per_request"] = round(client_s / max(result["completed"], 1) * 1e6, 1)
        # The generator shares the cores: its part of the CPU this run used, and of one core.
        result["client_cpu_share"] = round(client_s / max(client_s + server_s, 1e-9), 3)
        result["client_cpu_percent_of_one_core"] = round(100 * client_s / max(result["seconds"], 1e-9), 1)
        result["load_average_after"] = os.getloadavg()
    return result


async def _send_body(host: str, port: int, mb: int) -> str:
    reader, writer = await asyncio.open_connection(host, port)
    total = mb * 1_000_000
    writer.write(f"POST /v1/artifacts HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {total}\r\n\r\n".encode())
    chunk, sent, status = b"x" * (1 << 20), 0, "no answer"
    reply = asyncio.ensure_future(reader.readuntil(b"\r\n\r\n"))
    try:
        while sent < total and not reply.done():
            n = min(len(chunk), total - sent)
            writer.write(chunk[:n])
            await writer.drain()
            sent += n
        head = await asyncio.wait_for(reply, 60)
        status = head[:12].decode()
    except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError) as e:
        status = reply.result()[:12].decode() if reply.done() and not reply.exception() else type(e).__name__
    finally:
        writer.close()
    return f"{status} after {sent // 1_000_000} MB sent"


def bodies(backend: str, clients: int, mb: int, tmp: Path) -> dict:
    url = backend_url(backend, tmp)  # no token: every body here is unauthenticated
    info: dict = {}
    env = _env(tmp, url, CUBINFORGE_MAX_CUBIN_BYTES=str((mb + 8) << 20))
    with live_server(env, workers=2, log=tmp / "server.log", info=info) as base:
        before = _workers_rss(info["pid"])
        host, port = base.split("//")[1].split(":")

        async def all_of_them():
            return await asyncio.gather(*(_send_body(host, int(port), mb) for _ in range(clients)))
        t0 = time.perf_counter()
        answers = asyncio.run(all_of_them())
        seconds = time.perf_counter() - t0
        after = _workers_rss(info["pid"])
        health = httpx.get(base + "/healthz").status_code
    return {"clients": clients, "body_mb": mb, "answers": dict(Counter(answers)), "seconds": round(seconds, 2),
            "workers_rss_before": before, "workers_rss_after": after, "healthz_after": health,
            "target": "each worker's peak RSS < 300 MiB"}


def fuzz(backend: str, cases_n: int, tmp: Path) -> dict:
    from .fuzzpublish import publish_all
    statuses, errors = Counter(), Counter()
    for _, r in publish_all(backend, tmp, cases_n, seed=11):
        statuses[r.status_code] += 1
        if r.status_code >= 400:
            errors[r.json().get("error", "?") if r.headers.get("content-type", "").startswith("application/json")
                   else "not json"] += 1
    return {"cases": cases_n, "statuses": dict(sorted(statuses.items())), "errors": dict(errors.most_common()),
            "responses_5xx": sum(n for s, n in statuses.items() if s >= 500)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["mixed", "bodies", "fuzz"])
    p.add_argument("--backend", choices=["sqlite", "postgresql"], default="sqlite")
    p.add_argument("--clients", type=int, default=100)
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--mb", type=int, default=90)
    p.add_argument("--cases", type=int, default=2000)
    p.add_argument("--client", choices=["python", "wrk"], default="python",
                   help="mixed: the load generator (loadtest.py, or wrk if installed: wrkload.py)")
    p.add_argument("--out", help="also write the JSON here")
    p.add_argument("--server-env", action="append", default=[], metavar="K=V",
                   help="extra environment for the server process (repeatable)")
    a = p.parse_args(argv)
    SERVER_ENV.update(kv.split("=", 1) for kv in a.server_env)
    with tempfile.TemporaryDirectory(prefix="cubinforge-loadbench-") as d:
        tmp = Path(d)
        if a.what == "mixed":
            result = mixed(a.backend, a.clients, a.requests, tmp, a.client)
        elif a.what == "bodies":
            result = bodies(a.backend, 12 if a.clients == 100 else a.clients, a.mb, tmp)
        else:
            result = fuzz(a.backend, a.cases, tmp)
    result = {"what": a.what, "argv": sys.argv[1:], "backend": a.backend, "server_env": SERVER_ENV or None, "cpus": os.cpu_count(), "python": platform.python_version(),
              "when": datetime.now(timezone.utc).isoformat(timespec="seconds"), **result}
    text = json.dumps(result, indent=2)
    print(text)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
