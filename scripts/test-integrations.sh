#!/usr/bin/env bash
# Every SDK integration: runs integrations/*/run.sh (each takes its SDK as
# released, applies leasebeat's adapter and runs the SDK's own test suite, see
# integrations/<sdk>/README.md), sums their closing `<sdk>: N passed, M failed`
# lines, and prints `integrations: N passed, M failed` last (`, K skipped` added
# when an SDK could not run here: a run.sh says `<sdk>: 0 passed, 0 failed,
# 1 skipped (reason)` at once when its sources or a JDK 21+ are missing, see
# integrations/lib.sh). Exit status 1 if any run.sh failed (an unexpected test
# failure or a build error).
set -uo pipefail
cd "$(dirname "$0")/.."
# The SDKs and leasebeat's runners journal settlements by default under
# ~/.runcycles/commit-journal: the suites get a scratch directory instead.
CYCLES_JOURNAL_DIR="$(mktemp -d "${TMPDIR:-/tmp}/leasebeat-integrations-journal.XXXXXX")"
export CYCLES_JOURNAL_DIR
trap 'rm -rf "$CYCLES_JOURNAL_DIR"' EXIT

total_passed=0
total_failed=0
total_skipped=0
total_expected=0
skipped_lines=()
status=0
shopt -s nullglob
scripts=(integrations/*/run.sh)
if [ "${#scripts[@]}" -eq 0 ]; then
    echo "integrations: no integrations/*/run.sh found" >&2
    exit 1
fi
for script in "${scripts[@]}"; do
    name="$(basename "$(dirname "$script")")"
    echo "== $name ($script)"
    out="$(mktemp)"
    bash "$script" 2>&1 | tee "$out"
    rc="${PIPESTATUS[0]}"
    line="$(grep -E '^[A-Za-z0-9_.-]+: [0-9]+ passed, [0-9]+ failed' "$out" | tail -n 1)"
    rm -f "$out"
    if [ -z "$line" ]; then
        echo "== $name: no closing 'N passed, M failed' line (exit $rc)"
        total_failed=$((total_failed + 1))
        status=1
        continue
    fi
    passed="$(sed -E 's/.*: ([0-9]+) passed, ([0-9]+) failed.*/\1/' <<<"$line")"
    failed="$(sed -E 's/.*: ([0-9]+) passed, ([0-9]+) failed.*/\2/' <<<"$line")"
    if [[ "$line" =~ ,\ ([0-9]+)\ skipped ]]; then
        total_skipped=$((total_skipped + BASH_REMATCH[1]))
        skipped_lines+=("$line")
    fi
    total_passed=$((total_passed + passed))
    total_failed=$((total_failed + failed))
    if [ "$rc" -ne 0 ]; then
        echo "== $name: run.sh exited $rc"
        status=1
    else
        # run.sh passed: every failure it counted is one of its listed expected ones.
        total_expected=$((total_expected + failed))
    fi
done
if [ "$status" -eq 0 ] && [ "$total_failed" -gt 0 ]; then
    echo "(every failure above is one of the SDKs' own tests that pins its divergent arithmetic;"
    echo " each is listed, with the contract rule and the vector that decide otherwise, in"
    echo " integrations/<sdk>/README.md and expected by its run.sh)"
fi
for l in ${skipped_lines[@]+"${skipped_lines[@]}"}; do
    echo "skipped: $l"
done
closing="integrations: $total_passed passed, $total_failed failed"
[ "$total_failed" -gt 0 ] && closing="$closing ($total_expected expected)"
[ "$total_skipped" -gt 0 ] && closing="$closing, $total_skipped skipped"
echo "$closing"
exit "$status"
