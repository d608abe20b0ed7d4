#!/usr/bin/env python3
"""A slow-upload attack on `corrflow serve` (issue 51, item 9), bounded and on loopback only.

ATTACKERS connections each send a request head declaring a body (half of them LARGE_BYTES, half
SMALL_BYTES), then one byte every DRIP_S seconds; whenever the server answers or closes one, the
attacker waits RECONNECT_S and opens it again (one client with a loop). Once every connection has
sent its head, PROBES normal requests (4 cells of raw counts, ~300 bytes, a fresh connection
each, sent as `http.client` sends them) go out one after another, PROBE_GAP_S apart, while the
attack goes on. Reported per server: the probes' statuses and latency (p50, p99, max, and of the
200s alone), and what the attack saw (answers by status, connections closed without one).

Each --server NAME=BINARY[,FLAG,VALUE...] is started in turn, round after round (interleaved,
so that a machine's slow periods fall on every server alike), and stopped after its probes.

Usage: benches/slow_uploads.py MODEL.onnx --server new=target/release/corrflow \
         [--server old=/tmp/corrflow-old] [--rounds 2] [--attackers 600] [--probes 50] [--max-queue 256]
"""
import argparse
import http.client
import json
import selectors
import socket
import subprocess
import threading
import time

p = argparse.ArgumentParser()
p.add_argument("model")
p.add_argument("--server", action="append", required=True, help="NAME=BINARY[,EXTRA,FLAGS]")
p.add_argument("--rounds", type=int, default=2)
p.add_argument("--attackers", type=int, default=600)
p.add_argument("--large-bytes", type=int, default=1 << 20)
p.add_argument("--small-bytes", type=int, default=2000)
p.add_argument("--drip-s", type=float, default=1.0)
p.add_argument("--reconnect-s", type=float, default=0.1)
p.add_argument("--probes", type=int, default=50)
p.add_argument("--probe-gap-s", type=float, default=0.1)
p.add_argument("--max-queue", default="256")
a = p.parse_args()

CELL = {"genes": ["CD74", "HLA-DRA", "MS4A1"], "counts": [12, 7, 3]}
PROBE = json.dumps({"cells": [CELL] * 4})


def start(binary, extra):
    server = subprocess.Popen(
        [binary, "serve", "--model", a.model, "--addr", "127.0.0.1:0", "--max-queue", a.max_queue, *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in server.stderr:
        if "listening on http://" in line:
            host, port = line.strip().split("http://")[1].split(":")
            break
    threading.Thread(target=lambda: [None for _ in server.stderr], daemon=True).start()
    while True:
        try:
            c = http.client.HTTPConnection(host, int(port), timeout=5)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return server, host, int(port)
        except OSError:
            pass
        time.sleep(0.2)


class Attack(threading.Thread):
    """The attackers, driven by one selector thread."""

    def __init__(self, host, port):
        super().__init__(daemon=True)
        self.host, self.port = host, port
        self.stop = threading.Event()
        self.answers, self.closed, self.heads_sent = {}, 0, 0
        self.ready = threading.Event()

    def open(self, sel, k):
        declared = a.large_bytes if k % 2 == 0 else a.small_bytes
        s = socket.create_connection((self.host, self.port))
        s.sendall((f"POST /v1/embed HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {declared}\r\n\r\n").encode())
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, k)
        self.heads_sent += 1
        return s

    def run(self):
        sel = selectors.DefaultSelector()
        socks = {k: self.open(sel, k) for k in range(a.attackers)}
        self.ready.set()
        reopen = []  # (when, k)
        next_drip = time.time() + a.drip_s
        while not self.stop.is_set():
            for key, _ in sel.select(timeout=0.05):
                s, k = key.fileobj, key.data
                try:
                    data = s.recv(4096)
                except OSError:
                    data = b""
                if data.startswith(b"HTTP/1.1 "):
                    status = data[9:12].decode()
                    self.answers[status] = self.answers.get(status, 0) + 1
                elif not data:
                    self.closed += 1
                sel.unregister(s)
                s.close()
                del socks[k]
                reopen.append((time.time() + a.reconnect_s, k))
            now = time.time()
            for when, k in [r for r in reopen if r[0] <= now]:
                reopen.remove((when, k))
                try:
                    socks[k] = self.open(sel, k)
                except OSError:
                    reopen.append((now + a.reconnect_s, k))
            if now >= next_drip:
                next_drip = now + a.drip_s
                for k, s in list(socks.items()):
                    try:
                        s.send(b" ")
                    except OSError:
                        pass
        for s in socks.values():
            s.close()


def probe(host, port):
    t = time.time()
    c = http.client.HTTPConnection(host, port, timeout=30)
    try:
        c.request("POST", "/v1/embed", body=PROBE, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        return r.status, time.time() - t
    except (OSError, http.client.HTTPException) as e:
        return type(e).__name__, time.time() - t
    finally:
        c.close()


def pct(xs, q):
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))] * 1e3, 1) if xs else None


results = {}
for rnd in range(a.rounds):
    for spec in a.server:
        name, rest = spec.split("=", 1)
        binary, *extra = rest.split(",")
        server, host, port = start(binary, extra)
        attack = Attack(host, port)
        attack.start()
        attack.ready.wait()
        time.sleep(2 * a.drip_s)
        probes = []
        for _ in range(a.probes):
            probes.append(probe(host, port))
            time.sleep(a.probe_gap_s)
        attack.stop.set()
        attack.join()
        server.terminate()
        server.wait(timeout=60)
        statuses = {}
        for s, _ in probes:
            statuses[str(s)] = statuses.get(str(s), 0) + 1
        ok = [t for s, t in probes if s == 200]
        all_t = [t for _, t in probes]
        row = {"round": rnd, "statuses": statuses,
               "ms": {"p50": pct(all_t, 0.5), "p99": pct(all_t, 0.99), "max": pct(all_t, 1.0)},
               "ms_200": {"p50": pct(ok, 0.5), "p99": pct(ok, 0.99), "max": pct(ok, 1.0)},
               "attack": {"heads_sent": attack.heads_sent, "answers": attack.answers,
                          "closed_without_answer": attack.closed}}
        results.setdefault(name, []).append(row)
        print(json.dumps({"server": name, **row}), flush=True)

print(json.dumps({"attackers": a.attackers, "large_bytes": a.large_bytes, "small_bytes": a.small_bytes,
                  "drip_s": a.drip_s, "probes": a.probes, "max_queue": int(a.max_queue), "results": results}))
