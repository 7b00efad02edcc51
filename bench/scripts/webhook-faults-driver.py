#!/usr/bin/env python3
"""Webhook faults beside approval-bench (issue #7); see webhook-faults-server.sh.

Runs a receiver on 127.0.0.1:$HOOK_PORT (default 47999) that reads each request and then
never answers (HOOK_MODE=hang) or answers 200 after HOOK_TIMEOUT - 2 s (HOOK_MODE=slow200,
the control: the same time in flight, answered). Once the bench's server is up, SLOTS
loops (default 16) each prepare a `fault.hook` proposal, approve it as the bench's alice
and bob (their deterministic seeds, signed here with `cryptography`), execute it (it
stays in flight until the receiver answers or the server's time-out) and execute it
again, until DURATION seconds (default 40) have passed. Then it prints what every
execute ended as, whether the receiver saw each request exactly once, and how many
requests it held, sampled every 0.5 s until the last execute returned. When the bench
stops the server while executes are still in flight (a short run), those are counted as
errors here ("Connection refused"), not as outcomes.
"""
import base64, json, os, socket, sys, threading, time, urllib.request
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

PORT = int(os.environ.get("HOOK_PORT", "47999"))
SLOTS = int(os.environ.get("SLOTS", "16"))
DURATION = float(os.environ.get("DURATION", "40"))
FAULT_DIR = os.environ["FAULT_DIR"]
MODE = os.environ.get("HOOK_MODE", "hang")  # hang | slow200 (a 2xx after HOOK_TIMEOUT - 2 s: same in-flight time, answered)
HOOK_TIMEOUT = float(os.environ.get("HOOK_TIMEOUT", "10"))

hits = {}
open_conns = [0]
lock = threading.Lock()

def serve(conn):
    buf = b""
    with lock:
        open_conns[0] += 1
    try:
        while b"\r\n\r\n" not in buf:
            d = conn.recv(65536)
            if not d:
                return
            buf += d
        head, _, body = buf.partition(b"\r\n\r\n")
        hdrs = {}
        for l in head.decode("latin-1").split("\r\n")[1:]:
            k, _, v = l.partition(":")
            hdrs[k.strip().lower()] = v.strip()
        key = hdrs.get("idempotency-key", "")
        with lock:
            hits[key] = hits.get(key, 0) + 1
        if MODE == "slow200":
            time.sleep(HOOK_TIMEOUT - 2)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            return
        # never answer; hold the socket until the sender gives up
        while conn.recv(65536):
            pass
    finally:
        with lock:
            open_conns[0] -= 1
        conn.close()

def receiver():
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", PORT))
    s.listen(256)
    while True:
        c, _ = s.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()

threading.Thread(target=receiver, daemon=True).start()

# The bench's deterministic keys (bench/src/server.rs: seed [i+1; 32]); signed here,
# in-process, as approval-core signs: Ed25519 over "approval-v1\n<decision>\n<hash>\n<reason>".
keys = {name: Ed25519PrivateKey.from_private_bytes(bytes([i + 1]) * 32) for i, name in enumerate(["alice", "bob"])}

def approve(pid, h, name):
    sig = keys[name].sign(("approval-v1\napprove\n%s\n" % h).encode())
    body = json.dumps({"approver": name, "decision": "approve", "reason": "", "signature": base64.b64encode(sig).decode()}).encode()
    req = urllib.request.Request(api + "/v1/proposals/%s/decisions" % pid, body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)

print("driver: receiver on 127.0.0.1:%d; waiting for the server" % PORT, flush=True)
ep = os.path.join(FAULT_DIR, "endpoints")
mcp = api = None
while not (mcp and api):
    try:
        for l in open(ep):
            if l.startswith("MCP endpoint: "): mcp = l.split(": ", 1)[1].strip()
            if l.startswith("Approver API: "): api = l.split(": ", 1)[1].strip()
    except FileNotFoundError:
        pass
    time.sleep(0.05)
print("driver: server at", mcp, flush=True)

def call(tool, args, timeout=120):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": args}}).encode()
    req = urllib.request.Request(mcp, body, {"Content-Type": "application/json", "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        v = json.load(r)
    res = v["result"]
    return res.get("isError", False), res["structuredContent"]

results = {"executes": 0, "outcomes": {}, "second": {}, "errors": []}
start = time.time()
stop_at = start + DURATION

def slot(n):
    i = 0
    while time.time() < stop_at:
        try:
            err, out = call("approval_prepare", {"kind": "fault.hook", "payload": {"slot": n, "i": i}, "summary": "hang"})
            pid, h = out["proposal_id"], out["preview_sha256"]
            for name in ["alice", "bob"]:
                v = approve(pid, h, name)
            assert v["proposal"]["status"] == "APPROVED", v
            err, out = call("approval_execute", {"proposal_id": pid, "preview_sha256": h})
            err2, out2 = call("approval_execute", {"proposal_id": pid, "preview_sha256": h})
            with lock:
                results["executes"] += 1
                results["outcomes"][out["code"]] = results["outcomes"].get(out["code"], 0) + 1
                results["second"][out2["code"]] = results["second"].get(out2["code"], 0) + 1
                results.setdefault("ids", []).append(pid)
        except Exception as e:
            with lock:
                results["errors"].append("%.1fs %r" % (time.time() - start, e))
            time.sleep(0.5)
        i += 1

samples = []
slots_done = threading.Event()
def sampler():
    while not slots_done.is_set():
        with lock:
            samples.append((round(time.time() - start, 1), open_conns[0]))
        time.sleep(0.5)

ts = [threading.Thread(target=slot, args=(n,)) for n in range(SLOTS)]
for t in ts: t.start()
threading.Thread(target=sampler, daemon=True).start()
for t in ts: t.join()
slots_done.set()
with lock:
    ids = results.pop("ids", [])
    multi = {k: v for k, v in hits.items() if v != 1}
    missing = [i for i in ids if hits.get(i, 0) != 1]
inflight = [c for (_, c) in samples]
print("driver: executes finished:", results["executes"], "outcomes:", results["outcomes"], "second execute:", results["second"])
print("driver: receiver requests:", sum(hits.values()), "distinct keys:", len(hits), "keys seen != 1 time:", multi, "executed ids not seen exactly once:", len(missing))
print("driver: hanging requests held by the receiver, sampled every 0.5 s: min %d, max %d, mean %.1f" % (min(inflight), max(inflight), sum(inflight) / len(inflight)))
print("driver: samples:", samples)
print("driver: errors:", len(results["errors"]), results["errors"][:8])
