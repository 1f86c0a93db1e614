#!/usr/bin/env python3
"""Writes fuzz/seeds/<target>/ from tests/vectors/ (and pending-bindings/).

schema: each response body with its status as 2 big-endian bytes in front;
retry_after: each Retry-After value; scenario, events, leases: each vector file;
settlement: each settlement vector's commit body and restart record, in the target's
input layout (a kind byte, a length byte in units of 4, the text), followed by its
responses as events.
Seeds are regenerated on every run (fuzz/seeds/ is not committed)."""
import glob, hashlib, json, os, shutil, struct

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
out = os.path.join(root, "fuzz", "seeds")
shutil.rmtree(out, ignore_errors=True)
seeds = {t: set() for t in ["schema", "retry_after", "scenario", "events", "leases", "settlement"]}
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
def settlement_seed(kind, text, steps):
    text = text[: 255 * 4]
    text = text + b" " * (-len(text) % 4)
    out = bytes([kind, len(text) // 4]) + text
    for st in steps:
        if "persisted" in st:
            out += bytes([0x20, 1, 0x00])
        elif "send" in st:
            out += bytes([0x20, 1, 0x02])
        elif "recv" in st:
            r = st["recv"]
            body = json.dumps(r.get("body"), separators=(",", ":")).encode() if "body" in r else r.get("raw", "").encode()
            body = body[:510]
            body = body + b" " * (len(body) % 2)
            ra = str((r.get("headers") or {}).get("Retry-After", ""))[:15].encode()
            out += bytes([0x23, 1]) + struct.pack(">Q", r.get("status", 200)) + bytes([len(ra)]) + ra + bytes([len(body) // 2]) + body
        elif "fail" in st:
            out += bytes([0x25, 1, 2])
    return out

for f in sorted(glob.glob(os.path.join(root, "tests/vectors/settlement/*.json"))):
    v = json.loads(open(f, "rb").read())
    cfg = v.get("config") or {}
    steps = v.get("steps", [])
    if cfg.get("commit"):
        seeds["settlement"].add(settlement_seed(1, json.dumps(cfg["commit"], separators=(",", ":")).encode(), steps))
    for st in steps:
        if isinstance(st.get("record"), dict):
            seeds["settlement"].add(settlement_seed(0, json.dumps(st["record"], separators=(",", ":")).encode(), steps))

for t, items in seeds.items():
    d = os.path.join(out, t)
    os.makedirs(d, exist_ok=True)
    for item in items:
        open(os.path.join(d, hashlib.sha1(item).hexdigest()), "wb").write(item)
    print(f"fuzz seeds: {t}: {len(items)}")
