#!/usr/bin/env bash
# Runs every test suite, fail-fast, in the order: fmt+clippy, Rust, C, Python, Node, JVM,
# the recovery conformance (the official runner over the six runners: scripts/test-recovery.sh),
# fuzzing (about 20 s per cargo-fuzz target) and the SDK integrations (each SDK's own suite
# on leasebeat, integrations/*/run.sh).
# Each stage is its own script under scripts/ so it can also be run alone.
#
# First it installs what the stages need (scripts/setup/*.sh: apt packages when missing,
# rustfmt/clippy, node/ dev dependencies); each setup script is idempotent and quick when
# everything is present. LEASEBEAT_SKIP_SETUP=1 skips that step.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${LEASEBEAT_SKIP_SETUP:-0}" != 1 ]; then
  for setup in scripts/setup/*.sh; do
    echo "==> setup $setup"
    bash "$setup"
  done
fi
stages=(lint rust c python node jvm recovery fuzz integrations realserver)

# The summary at the end (and after a failing stage): stage, time, tests passed and failed
# (summed over the closing lines each stage's runners print: cargo's `test result:`, the C
# tests' and pytest's `N passed, M failed`, node's `# pass`/`# fail`, Maven's totals), and the
# expected failures (the SDK integrations' listed ones: `integrations: N passed, M failed
# (E expected)`).
summary_rows=()
count_tests() { # $1 = stage, $2 = its log -> "passed failed expected" ("-" when none found)
  sed 's/\x1b\[[0-9;]*m//g' "$2" | awk -v stage="$1" '
    function add(line,   n, a, i) {
      n = split(line, a, /[ ,;=]+/)
      for (i = 1; i < n; i++) {
        if (a[i] !~ /^[0-9]+$/) continue
        if (a[i+1] ~ /^passed/) p += a[i]
        else if (a[i+1] ~ /^failed/ || a[i+1] ~ /^errors?$/) f += a[i]
      }
      seen = 1
    }
    # Stages whose own closing line sums everything they ran.
    stage == "integrations" || stage == "realserver" || stage == "recovery" {
      if (index($0, stage ": ") == 1 && $0 ~ /^[a-z]+: [0-9]+ passed, [0-9]+ failed/) {
        last = $0
      }
      next
    }
    /^test result: / { add($0); next }
    /^[0-9]+ passed, [0-9]+ failed$/ { add($0); next }
    /^=* *([0-9]+ (failed|passed|errors?|skipped|warnings?)(, )?)+ in [0-9.]+s/ { add($0); next }
    /^# pass [0-9]+$/ { p += $3; seen = 1; next }
    /^# fail [0-9]+$/ { f += $3; seen = 1; next }
    /Tests run: [0-9]+, Failures: [0-9]+, Errors: [0-9]+, Skipped: [0-9]+ *$/ {
      match($0, /Tests run: [0-9]+, Failures: [0-9]+, Errors: [0-9]+, Skipped: [0-9]+/)
      split(substr($0, RSTART, RLENGTH), a, /[^0-9]+/)
      p += a[2] - a[3] - a[4] - a[5]; f += a[3] + a[4]; seen = 1; next
    }
    END {
      if ((stage == "integrations" || stage == "realserver" || stage == "recovery") && last != "") {
        n = split(last, a, /[^0-9]+/)
        e = 0
        if (match(last, /\([0-9]+ expected\)/)) e = substr(last, RSTART + 1, RLENGTH - 11) + 0
        print a[2], a[3], e
      } else if (seen) print p + 0, f + 0, 0
      else print "- - -"
    }'
}
print_summary() {
  echo "==> summary"
  printf '%-14s %7s %8s %8s %18s\n' stage "time s" passed failed "expected failures"
  local row
  for row in ${summary_rows[@]+"${summary_rows[@]}"}; do
    # shellcheck disable=SC2086
    printf '%-14s %7s %8s %8s %18s\n' $row
  done
}
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
for stage in "${stages[@]}"; do
  script="scripts/test-$stage.sh"
  if [ -x "$script" ]; then
    echo "==> stage $stage ($script)"
    t0=$SECONDS
    set +e
    "$script" 2>&1 | tee "$logs/$stage.log"
    rc="${PIPESTATUS[0]}"
    set -e
    summary_rows+=("$stage $((SECONDS - t0)) $(count_tests "$stage" "$logs/$stage.log")")
    if [ "$rc" -ne 0 ]; then
      echo "==> stage $stage FAILED (exit $rc) after $((SECONDS - t0)) s"
      print_summary
      exit "$rc"
    fi
    echo "==> stage $stage passed in $((SECONDS - t0)) s"
  fi
done
print_summary
echo "==> all stages passed"
