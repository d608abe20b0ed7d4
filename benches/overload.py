#!/usr/bin/env python3
"""Overload of `corrflow serve` with large bodies (issue 28): N clients on loopback each send
embed requests with a body of BODY_MB MiB (a valid request padded with whitespace), for SECONDS;
reports the 429 latency percentiles, status counts, and the server's RSS (peak, and 10 s after
the load) from /proc. Bounded in time and count; loopback only.

Usage: benches/overload.py CORRFLOW MODEL.onnx [CLIENTS=64] [BODY_MB=16] [SECONDS=30] [MAX_QUEUE=16]
"""
import http.client
import json
import subprocess
import sys
import threading
import time

corrflow, model = sys.argv[1], sys.argv[2]
clients = int(sys.argv[3]) if len(sys.argv) > 3 else 64
body_mb = int(sys.argv[4]) if len(sys.argv) > 4 else 16
seconds = float(sys.argv[5]) if len(sys.argv) > 5 else 30
max_queue = sys.argv[6] if len(sys.argv) > 6 else "16"

server = subprocess.Popen(
    [corrflow, "serve", "--model", model, "--addr", "127.0.0.1:0", "--max-queue", max_queue,
     "--max-body-bytes", str((body_mb + 1) << 20)],
    stderr=subprocess.PIPE, text=True)
addr = None
for line in server.stderr:
    if "listening on http://" in line:
        addr = line.strip().split("http://")[1]
        break
host, port = addr.split(":")
threading.Thread(target=lambda: [None for _ in server.stderr], daemon=True).start()


def rss_mb():
    with open(f"/proc/{server.pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


while True:
    try:
        c = http.client.HTTPConnection(host, int(port), timeout=5)
        c.request("GET", "/health")
        if c.getresponse().status == 200:
            break
    except OSError:
        pass
    time.sleep(0.2)
idle = rss_mb()
cell = json.dumps({"cells": [{"genes": ["CD74", "HLA-DRA", "MS4A1"], "counts": [12, 7, 3]}]})
body = (cell + " " * ((body_mb << 20) - len(cell))).encode()
stop = time.time() + seconds
lock = threading.Lock()
statuses, refusals, errors = {}, [], 0


def client():
    global errors
    while time.time() < stop:
        t = time.time()
        try:
            c = http.client.HTTPConnection(host, int(port), timeout=60)
            c.request("POST", "/v1/embed", body=body, headers={"Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            dt = time.time() - t
            with lock:
                statuses[r.status] = statuses.get(r.status, 0) + 1
                if r.status == 429:
                    refusals.append(dt)
            c.close()
        except OSError:
            # A refused large body may be answered before it is sent whole: the connection
            # closes under the sender. Counted, not retried at once.
            dt = time.time() - t
            with lock:
                errors += 1
                refusals.append(dt)


peak = idle
threads = [threading.Thread(target=client) for _ in range(clients)]
for th in threads:
    th.start()
while any(th.is_alive() for th in threads):
    peak = max(peak, rss_mb())
    time.sleep(0.05)
time.sleep(10)
after = rss_mb()
server.terminate()
server.wait(timeout=30)
refusals.sort()
pct = lambda p: refusals[min(len(refusals) - 1, int(p * len(refusals)))] * 1e3 if refusals else float("nan")
print(json.dumps({
    "clients": clients, "body_mib": body_mb, "seconds": seconds, "max_queue": int(max_queue),
    "statuses": statuses, "closed_before_answer": errors,
    "refusal_ms": {"p50": round(pct(0.5), 1), "p90": round(pct(0.9), 1), "p99": round(pct(0.99), 1)},
    "rss_mb": {"idle": round(idle), "peak": round(peak), "10s_after": round(after)},
}))
