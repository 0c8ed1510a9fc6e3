"""The read hot path's parts: one send() per answer (h1.py), the deferred request metrics, the
generation counter, and the fast path's cache moving with every write (publish, yank, unyank)."""

import asyncio
import base64
import time

import pytest

from cubinforge.service.testing import make_cubin, make_manifest, seed_token


class _Recorder:
    def __init__(self):
        self.calls, self.closing = [], False

    def write(self, data):
        self.calls.append(("write", bytes(data)))

    def writelines(self, chunks):
        self.calls.append(("writelines", tuple(bytes(c) for c in chunks)))

    def close(self):
        self.calls.append(("close",))
        self.closing = True

    def is_closing(self):
        return self.closing

    def get_extra_info(self, name):
        return ("127.0.0.1", 1) if name == "peername" else None


def test_held_transport_joins_header_and_body_and_never_strands_a_write():
    pytest.importorskip("httptools")
    from cubinforge.service.h1 import _HeldTransport

    async def go():
        rec = _Recorder()
        t = _HeldTransport(rec, asyncio.get_running_loop())
        t.write(b"HTTP/1.1 200 OK\r\n\r\n")
        t.write(b"body")
        assert rec.calls == [("writelines", (b"HTTP/1.1 200 OK\r\n\r\n", b"body"))]  # one writev
        t.write(b"")  # nothing to hold
        t.write(b"head only")  # a streamed answer's header: its body comes on a later loop turn
        assert rec.calls[1:] == []
        await asyncio.sleep(0)
        assert rec.calls[1:] == [("write", b"head only")]
        t.write(b"last")
        t.close()  # what is held goes out before the close
        assert rec.calls[2:] == [("write", b"last"), ("close",)]
        assert t.get_extra_info("peername") == ("127.0.0.1", 1)
        await asyncio.sleep(0)
        assert rec.calls[4:] == []  # the scheduled flush finds nothing left
    asyncio.run(go())


def test_generation_read_sees_every_bump(tmp_path):
    from cubinforge.registry.generation import Generation
    g = Generation(tmp_path)
    assert g.read() == b"0"  # no file yet
    seen = {g.read()}
    for _ in range(20):
        g.bump()
        assert g.read() not in seen
        seen.add(g.read())


def test_request_metrics_reach_prometheus_totals(tmp_path):
    """Counts are summed per worker and flushed later; /metrics flushes its worker's first, and
    the timer flushes the rest within FLUSH_S."""
    from fastapi.testclient import TestClient

    from cubinforge.service import metrics
    from cubinforge.service.app import create_app
    from cubinforge.service.config import Settings

    def count(text):
        line = [x for x in text.splitlines()
                if x.startswith('cubinforge_http_requests_total{method="GET",route="/healthz",status="200"}')]
        return float(line[0].split()[-1]) if line else 0.0

    def hist_count():
        return sum(b.get() for b in metrics.LATENCY.labels("/healthz")._buckets)
    url = f"sqlite:///{tmp_path / 'r.db'}"
    app = create_app(Settings(home=tmp_path / "home", database_url=url, db_pool_size=4))
    with TestClient(app) as c:
        before, h0 = count(c.get("/metrics").text), hist_count()
        for _ in range(7):
            assert c.get("/healthz").status_code == 200
        assert count(c.get("/metrics").text) == before + 7
        assert hist_count() == h0 + 7  # the histogram got every one, each in one bucket
        c.get("/healthz")
        time.sleep(metrics.FLUSH_S + 0.3)  # no /metrics call: the timer flushes it
        assert hist_count() == h0 + 8


def test_every_write_moves_the_cached_answers(tmp_path):
    """Publish, yank and unyank each bump the generation the fast path keys on, so the next
    list/select/detail is recomputed; between writes the database is not asked again."""
    from fastapi.testclient import TestClient

    from cubinforge.service.app import create_app
    from cubinforge.service.config import Settings
    url = f"sqlite:///{tmp_path / 'r.db'}"
    token = seed_token(url)
    h = {"Authorization": f"Bearer {token}"}
    app = create_app(Settings(home=tmp_path / "home", database_url=url, db_pool_size=4))
    problem = {"arch": "sm_90a", "dtype": "bf16", "head_dim": 128, "causal": True, "seqlen_q": 256, "heads_q": 8}
    cubin = make_cubin("kernel_test", payload=b"hot")
    m = make_manifest("hot-sm_90a-bf16-hd128-causal", cubin)
    with TestClient(app) as c:
        reads = []
        for fn in ("list", "candidates", "get"):
            real = getattr(app.state.store, fn)
            setattr(app.state.store, fn, lambda *a, _r=real, _n=fn: reads.append(_n) or _r(*a))

        def state():
            return ([i["variant"] for i in c.get("/v1/variants").json()["items"]],
                    c.post("/v1/select", json=problem).status_code,
                    c.get(f"/v1/variants/{m['variant']}").json().get("yanked"))
        gen = app.state.generation.read
        assert state() == ([], 404, None)
        n = len(reads)
        assert state() == ([], 404, None) and len(reads) == n  # served from the cache
        g0 = gen()
        r = c.post("/v1/artifacts", headers=h,
                   json={"manifest": m, "cubin_b64": base64.b64encode(cubin).decode()})
        assert r.status_code == 201 and gen() != g0
        assert state() == ([m["variant"]], 200, False)
        g1 = gen()
        assert c.post(f"/v1/variants/{m['variant']}/yank", headers=h, json={"reason": "bad"}).status_code == 200
        assert gen() != g1
        assert state() == ([], 404, True)
        g2 = gen()
        assert c.post(f"/v1/variants/{m['variant']}/unyank", headers=h).status_code == 200
        assert gen() != g2
        n = len(reads)
        assert state() == ([m["variant"]], 200, False) and len(reads) > n
        n = len(reads)
        assert state() == ([m["variant"]], 200, False) and len(reads) == n
