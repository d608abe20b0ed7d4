#!/usr/bin/env python3
"""Overload of `corrflow serve` with large bodies (issues 28 and 43): N clients on loopback each
send embed requests with a body of BODY_MB MiB (a valid request padded with whitespace) for
SECONDS, as `http.client` and `requests` do: the whole body first, then the answer is read.
Reports per outcome (200, a readable 429, other statuses, transport errors: a reset or broken
pipe), the 429 latency (request start to the answer read, and from the body's last byte sent to
the answer), the server's RSS (idle, peak, 10 s after the load) from /proc, and the latency of a
4-cell request sent right after the load. Bounded in time; loopback only.

With --busy N, N processes spin on the CPU for the whole run (the machine kept busy, as by a
parallel build); they are stopped at the end.

Usage: benches/overload.py CORRFLOW MODEL.onnx [CLIENTS=64] [BODY_MB=16] [SECONDS=30] [MAX_QUEUE=16] [--busy N]
"""
import argparse
import http.client
import json
import multiprocessing
import subprocess
import threading
import time

p = argparse.ArgumentParser()
p.add_argument("corrflow")
p.add_argument("model")
p.add_argument("clients", nargs="?", type=int, default=64)
p.add_argument("body_mb", nargs="?", type=int, default=16)
p.add_argument("seconds", nargs="?", type=float, default=30)
p.add_argument("max_queue", nargs="?", default="16")
p.add_argument("--busy", type=int, default=0, help="CPU-spinning processes during the run")
a = p.parse_args()


def spin(stop):
    while not stop.is_set():
        pass


busy_stop = multiprocessing.Event()
busy = [multiprocessing.Process(target=spin, args=(busy_stop,), daemon=True) for _ in range(a.busy)]
for b in busy:
    b.start()

server = subprocess.Popen(
    [a.corrflow, "serve", "--model", a.model, "--addr", "127.0.0.1:0", "--max-queue", a.max_queue,
     "--max-body-bytes", str((a.body_mb + 1) << 20)],
    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
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
cell = {"genes": ["CD74", "HLA-DRA", "MS4A1"], "counts": [12, 7, 3]}
one = json.dumps({"cells": [cell]})
body = (one + " " * ((a.body_mb << 20) - len(one))).encode()
stop = time.time() + a.seconds
lock = threading.Lock()
statuses, refusals, after_body, errors = {}, [], [], {}


def client():
    while time.time() < stop:
        t = time.time()
        c = http.client.HTTPConnection(host, int(port), timeout=60)
        try:
            c.request("POST", "/v1/embed", body=body, headers={"Content-Type": "application/json"})
            sent = time.time()
            r = c.getresponse()
            r.read()
            now = time.time()
            with lock:
                statuses[r.status] = statuses.get(r.status, 0) + 1
                if r.status == 429:
                    refusals.append(now - t)
                    after_body.append(now - sent)
        except (OSError, http.client.HTTPException) as e:
            with lock:
                errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1
        finally:
            c.close()


peak = idle
threads = [threading.Thread(target=client) for _ in range(a.clients)]
for th in threads:
    th.start()
while any(th.is_alive() for th in threads):
    peak = max(peak, rss_mb())
    time.sleep(0.05)
# A small request right after the load: answered at once, not after queued work of clients
# that are gone.
t = time.time()
c = http.client.HTTPConnection(host, int(port), timeout=120)
c.request("POST", "/v1/embed", body=json.dumps({"cells": [cell] * 4}), headers={"Content-Type": "application/json"})
r = c.getresponse()
r.read()
small = {"status": r.status, "ms": round((time.time() - t) * 1e3, 1)}
c.close()
for _ in range(200):
    peak = max(peak, rss_mb())
    time.sleep(0.05)
after = rss_mb()
busy_stop.set()
for b in busy:
    b.join()
server.terminate()
server.wait(timeout=60)


def pct(xs, q):
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))] * 1e3, 1) if xs else float("nan")


print(json.dumps({
    "clients": a.clients, "body_mib": a.body_mb, "seconds": a.seconds, "max_queue": int(a.max_queue),
    "busy": a.busy, "statuses": statuses, "transport_errors": errors,
    "refusal_ms": {"p50": pct(refusals, 0.5), "p90": pct(refusals, 0.9), "p99": pct(refusals, 0.99)},
    "refusal_after_body_ms": {"p50": pct(after_body, 0.5), "p99": pct(after_body, 0.99)},
    "rss_mb": {"idle": round(idle), "peak": round(peak), "10s_after": round(after)},
    "four_cells_after_load": small,
}))
