#!/usr/bin/env bash
# Issue 15's benchmark table. Runs every scripts/bench-<lang>.sh that exists, in the order
# rust, c, python, node, jvm (a missing script is "not measured"; a failing one is reported
# and the others still run), collects their `BENCH {...}` lines and prints
#   what | measured | floor or peer | ratio | target
# then one line per target: met, NOT met, or not measured.
# Usage: scripts/bench-all.sh              run the benches, then print the table
#        scripts/bench-all.sh --from FILE  only print the table from saved BENCH lines
# The collected lines are kept in $BENCH_OUT when that is set. Not part of the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
lines="$tmp/bench.lines"
: > "$lines"
failed=()
if [ "${1:-}" = "--from" ]; then
  cp "$2" "$lines"
else
  echo "== uptime: $(uptime)"
  for lang in rust c python node jvm; do
    script="scripts/bench-$lang.sh"
    if [ ! -x "$script" ] && [ ! -f "$script" ]; then
      echo "== $script: missing (not measured)"
      continue
    fi
    echo "== $script"
    # Human output goes to the terminal (stderr); BENCH lines are collected.
    if bash "$script" > "$tmp/$lang.out" 2> >(cat >&2); then
      :
    else
      echo "== $script FAILED (exit $?); its figures are not measured" >&2
      failed+=("$lang")
    fi
    cat "$tmp/$lang.out" >&2
    grep '^BENCH {' "$tmp/$lang.out" >> "$lines" || true
  done
  echo "== uptime: $(uptime)"
fi
if [ -n "${BENCH_OUT:-}" ]; then cp "$lines" "$BENCH_OUT"; fi
python3 - "$lines" "${failed[@]+"${failed[@]}"}" <<'PY'
import json, sys

values = {}
for line in open(sys.argv[1], encoding="utf-8"):
    if not line.startswith("BENCH {"):
        continue
    try:
        b = json.loads(line[len("BENCH "):])
        values[b["id"]] = (float(b["value"]), b.get("unit", "ns"))
    except (ValueError, KeyError) as e:
        print(f"ignored a malformed BENCH line ({e}): {line.strip()}", file=sys.stderr)

def fmt(id_):
    if id_ not in values:
        return "not measured"
    v, unit = values[id_]
    return f"{v:.0f} {unit}" if unit == "bytes" else f"{v:.1f} {unit}"

def get(id_):
    return values[id_][0] if id_ in values else None

rows = []   # (what, measured, peer, ratio text, target text, met: True/False/None)

def ratio_row(what, m, p, limit):
    a, b = get(m), get(p)
    if a is None or b is None:
        rows.append((what, fmt(m), fmt(p), "-", f"<= {limit}x", None))
    else:
        r = a / b
        rows.append((what, fmt(m), fmt(p), f"{r:.3f}x", f"<= {limit}x", r <= limit))

def above_row(what, m, p, limit_ns):
    a, b = get(m), get(p)
    if a is None or b is None:
        rows.append((what, fmt(m), fmt(p), "-", f"<= +{limit_ns} ns", None))
    else:
        d = a - b
        rows.append((what, fmt(m), fmt(p), f"{a / b:.2f}x ({d:+.1f} ns)", f"<= +{limit_ns} ns", d <= limit_ns))

ratio_row("rust primary decision vs serde_json Value parse", "rust.primary", "rust.floor_value", 0.35)
ratio_row("rust full beat, UUIDv4 keys vs serde_json Value parse", "rust.beat_uuid", "rust.floor_value", 1.0)
# The C figure's reference is the Rust one taken in runs alternating with it (bench-c.sh).
above_row("C ABI primary decision vs rust primary", "c.primary",
          "c.rust_primary" if get("c.rust_primary") is not None else "rust.primary", 50)

d, rc = get("py.decision"), get("py.runcycles")
if d is None or rc is None:
    rows.append(("python decision vs runcycles 0.5.3", fmt("py.decision"), fmt("py.runcycles"), "-", ">= 10x faster", None))
else:
    rows.append(("python decision vs runcycles 0.5.3", fmt("py.decision"), fmt("py.runcycles"),
                 f"{rc / d:.1f}x faster", ">= 10x faster", rc / d >= 10))

d, jp = get("node.decision"), get("node.json_parse")
rows.append(("node decision (beside JSON.parse)", fmt("node.decision"), fmt("node.json_parse"),
             f"{d / jp:.2f}x" if d is not None and jp else "-", "<= 1000 ns",
             None if d is None else d <= 1000))

# The JVM's Rust figure is the same core work timed inside the same JVM process with the
# same cache treatment (a full GC between set-up and timing, like the Java batches):
# rust.primary times warm caches, which would charge cache temperature to the binding
# (notes/jvm15.md). Older BENCH files without it fall back to rust.primary.
if get("jvm.core_same_process") is not None:
    above_row("jvm decision vs the core in the same JVM", "jvm.decision", "jvm.core_same_process", 300)
else:
    above_row("jvm decision vs rust primary", "jvm.decision", "rust.primary", 300)
# Informational (no target of its own): both loops visiting the heartbeats in one shuffled
# order, as timers do in a service, so neither side's walk is helped by the prefetcher.
if get("jvm.core_shuffled") is not None:
    above_row("jvm decision vs the core, shuffled order (info)", "jvm.decision_shuffled",
              "jvm.core_shuffled", 300)
    rows[-1] = rows[-1][:4] + ("info: no target", "info")

b = get("rust.lease_bytes")
rows.append(("rust per-lease state after create + 1,000 beats", fmt("rust.lease_bytes"), "-", "-",
             "<= 1024 bytes", None if b is None else b <= 1024))

header = ("what", "measured", "floor or peer", "ratio", "target")
widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(5)]
def line(cells):
    return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"
print()
print(line(header))
print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
for r in rows:
    print(line(r[:5]))
print()
for r in rows:
    if r[5] == "info":
        continue
    verdict = {True: "met", False: "NOT met", None: "not measured"}[r[5]]
    print(f"{verdict}: {r[0]} ({r[4]})")
failed = sys.argv[2:]
if failed:
    print(f"bench scripts that failed: {', '.join(failed)}")
PY
