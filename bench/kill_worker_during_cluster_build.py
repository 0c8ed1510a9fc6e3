"""Kill one Dask worker (SIGKILL) in the middle of a cluster build; Dask reruns its task elsewhere."""
import os, signal, sys, threading, time
from distributed import Client, LocalCluster
from cubinforge.generator import build, spec
from cubinforge.registry import Registry

if __name__ == "__main__":
    reg = Registry(home=sys.argv[1])
    variants = spec.select("default", {"head_dim": [64, 96, 128], "dtype": ["bf16"]})
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, Client(cluster) as client:
        pids = client.run(os.getpid)
        def killer():
            while True:
                busy = {w: ts for w, ts in client.processing().items() if ts}
                if len(busy) == 2 and time.time() - t0 > 8:
                    w = sorted(busy)[0]
                    print(f"killing worker {w} pid {pids[w]} while it runs {busy[w]}", flush=True)
                    os.kill(pids[w], signal.SIGKILL)
                    return
                time.sleep(0.5)
        t0 = time.time()
        threading.Thread(target=killer, daemon=True).start()
        out = build.build(variants, reg, client=client, progress=False)
        print(build.summary(out, time.time() - t0))
