#!/usr/bin/env python3
"""Writes fuzz/seeds/<target>/ from tests/vectors/ (and pending-bindings/).

schema: each response body with its status as 2 big-endian bytes in front;
retry_after: each Retry-After value; scenario, events, leases: each vector file.
Seeds are regenerated on every run (fuzz/seeds/ is not committed)."""
import glob, hashlib, json, os, shutil, struct

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
out = os.path.join(root, "fuzz", "seeds")
shutil.rmtree(out, ignore_errors=True)
seeds = {t: set() for t in ["schema", "retry_after", "scenario", "events", "leases"]}
files = sorted(glob.glob(os.path.join(root, "tests/vectors/*.json"))
               + glob.glob(os.path.join(root, "tests/vectors/pending-bindings/*.json")))

def recvs(steps):
    for s in steps:
        if "recv" in s:
            yield s["recv"]
        a = s.get("adopt") or {}
        if "recv" in a:
            yield a["recv"]

for f in files:
    raw = open(f, "rb").read()
    for t in ["scenario", "events", "leases"]:
        seeds[t].add(raw)
    v = json.loads(raw)
    for r in recvs(v.get("steps", [])):
        if "raw" in r:
            body = r["raw"].encode()
        elif "body" in r:
            body = json.dumps(r["body"], separators=(",", ":")).encode()
        else:
            body = b""
        seeds["schema"].add(struct.pack(">H", (r.get("status", 200) - 100) % 65536) + body)
        for name, value in (r.get("headers") or {}).items():
            if name.lower() == "retry-after":
                vals = value if isinstance(value, list) else [value]
                seeds["retry_after"].add(b"\xff".join(x.encode() for x in vals))
for t, items in seeds.items():
    d = os.path.join(out, t)
    os.makedirs(d, exist_ok=True)
    for item in items:
        open(os.path.join(d, hashlib.sha1(item).hexdigest()), "wb").write(item)
    print(f"fuzz seeds: {t}: {len(items)}")
