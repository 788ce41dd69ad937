"""A bounded load generator for `zoo serve`, loopback only: N requests at each concurrency, req/s and p50/p99.

    python scripts/evidence/loadtest.py --port 8000 --task vision --requests 2000 --concurrency 1 8 32
    python scripts/evidence/loadtest.py --port 8000 --task nlp --requests 2000 --concurrency 1 8 32

The request is fixed per task (vision: a 32x32 PNG of a scikit-learn digit; nlp: one review sentence), so the
numbers measure the server and the model, not the payload. Any non-200 answer is counted as a failure.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import threading
import time
import urllib.error
import urllib.request


def payload(task: str) -> tuple[bytes, str]:
    if task == "vision":
        import numpy as np
        from PIL import Image
        from sklearn.datasets import load_digits

        img = (load_digits().images[0] / 16 * 255).astype(np.uint8)
        buf = io.BytesIO()
        Image.fromarray(img).resize((32, 32)).save(buf, format="PNG")
        return buf.getvalue(), "image/png"
    if task == "nlp":
        return json.dumps({"texts": ["a gorgeous, witty movie with a plot that keeps you guessing."]}).encode(), \
            "application/json"
    raise SystemExit(f"unknown --task {task}: vision or nlp")


def run(port: int, body: bytes, ctype: str, requests: int, concurrency: int) -> dict:
    url = f"http://127.0.0.1:{port}/predict"  # loopback only, by construction
    latencies: list[float] = []
    failures = [0]
    lock = threading.Lock()
    counter = iter(range(requests))

    def worker() -> None:
        while True:
            with lock:
                if next(counter, None) is None:
                    return
            t = time.perf_counter()
            try:
                req = urllib.request.Request(url, data=body, headers={"content-type": ctype}, method="POST")
                with urllib.request.urlopen(req, timeout=60) as r:
                    r.read()
                    ok = r.status == 200
            except (urllib.error.URLError, OSError):
                ok = False
            dt = time.perf_counter() - t
            with lock:
                latencies.append(dt)
                failures[0] += not ok

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    start = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - start
    q = statistics.quantiles(latencies, n=100)
    return {"concurrency": concurrency, "requests": len(latencies), "failed": failures[0],
            "req_per_s": round(len(latencies) / wall, 1), "p50_ms": round(1000 * q[49], 1),
            "p99_ms": round(1000 * q[98], 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--task", default="vision")
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    args = p.parse_args()
    if args.requests > 20_000:
        raise SystemExit("--requests is capped at 20000 (a bounded local test)")
    body, ctype = payload(args.task)
    run(args.port, body, ctype, 20, 1)  # warm-up
    for c in args.concurrency:
        print(json.dumps(run(args.port, body, ctype, args.requests, c)), flush=True)


if __name__ == "__main__":
    main()
