"""The mixed load of loadtest.py driven by wrk (a C load generator, Debian's `wrk` package), as
a cross-check on the Python generator. Measured here, wrk is not cheaper per request (its Lua
response() gets every 128 KiB body as a Lua string): 30-47 us against 35-51 us.

Same load: N keep-alive connections, each issuing requests back to back, thirds of list,
select and blob, N x M requests in all. Unlike loadtest.py, wrk has no per-connection state in
Lua: the request kinds cycle over the whole thread (still thirds), and it stops once N x M
answers have arrived rather than after exactly M per connection. Every answer must be a 200;
blob answers are counted by their size.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

from .loadtest import requests_for

LUA = r"""
-- response() runs in the thread's Lua state and done() in the main one: the counts are the
-- thread's globals, read back through thread:get().
local reqs = {%(reqs)s}
local total, blob_len = %(total)d, %(blob_len)d
local threads = {}
i, n, bad, blobs, sample = 0, 0, 0, 0, ""
setup = function(thread) threads[#threads + 1] = thread end
request = function()
  i = i + 1
  return reqs[(i %% #reqs) + 1]
end
response = function(status, headers, body)
  n = n + 1
  if status ~= 200 then
    bad = bad + 1
    if sample == "" then sample = status .. ": " .. string.sub(body, 1, 120) end
  elseif #body == blob_len then
    blobs = blobs + 1
  end
  if n == total then
    wrk.thread:stop()
    io.stderr:write("WRKDONE\n")  -- wrk waits out -d otherwise: the caller interrupts it now
  end
end
done = function(summary, latency, requests)
  local bad_, blobs_, samples = 0, 0, {}
  for _, t in ipairs(threads) do
    bad_, blobs_ = bad_ + t:get("bad"), blobs_ + t:get("blobs")
    if t:get("sample") ~= "" then samples[#samples + 1] = string.format("%%q", t:get("sample")) end
  end
  local sock = summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout
  io.write(string.format('WRKJSON {"completed": %%d, "errors": %%d, "non_200": %%d, "blob_answers": %%d, ' ..
    '"socket_errors": %%d, "seconds": %%.3f, "p50_ms": %%.3f, "p99_ms": %%.3f, "max_ms": %%.3f, ' ..
    '"error_samples": [%%s]}\n',
    summary.requests, bad_ + sock, bad_, blobs_, sock, summary.duration / 1e6,
    latency:percentile(50) / 1e3, latency:percentile(99) / 1e3, latency.max / 1e3, table.concat(samples, ", ")))
end
"""


def _lua_string(b: bytes) -> str:
    return '"' + "".join(f"\\{c:03d}" for c in b) + '"'


def run(url: str, sha: str, clients: int, requests: int, expect_len: int, workdir: Path) -> dict:
    wrk = shutil.which("wrk")
    if wrk is None:
        raise SystemExit("wrk is not installed: apt-get install wrk (Debian), or use --client python")
    u = urlsplit(url)
    reqs = requests_for(u.hostname, sha, mix=True)
    script = workdir / "mixed.lua"
    script.write_text(LUA % {"reqs": ", ".join(_lua_string(r) for _, r, _ in reqs),
                             "total": clients * requests, "blob_len": expect_len})
    # One thread: wrk then uses one core at most, like the Python generator's one event loop.
    proc = subprocess.Popen([wrk, "-t1", f"-c{clients}", "-d600s", "--timeout", "30s", "-s", str(script), url],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for err in proc.stderr:  # wrk's SIGINT handler stops the run and still reports (done())
        if err.startswith("WRKDONE"):
            proc.send_signal(signal.SIGINT)
            break
    stdout, stderr = proc.communicate(timeout=60)
    line = next((x for x in stdout.splitlines() if x.startswith("WRKJSON ")), None)
    if line is None:
        raise RuntimeError(f"wrk gave no result (exit {proc.returncode}): {stdout[-400:]} {stderr[-400:]}")
    out = json.loads(line[len("WRKJSON "):])
    out.update({"clients": clients, "requests_total": clients * requests, "generator": "wrk -t1",
                "mix": [k for k, _, _ in reqs], "blob_bytes": expect_len,
                "requests_per_s": round(out["completed"] / max(out["seconds"], 1e-9), 1)})
    return out
