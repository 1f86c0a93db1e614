#!/usr/bin/env bash
# SDK integrations (issue 17): runs every integrations/*/run.sh; each ends
# with `<sdk>: N passed, M failed` over that SDK's own tests. Prints
# `integrations: N passed, M failed` (integration scripts that passed/failed).
set -uo pipefail
cd "$(dirname "$0")/.."
pass=0 fail=0
for run in integrations/*/run.sh; do
  [ -x "$run" ] || continue
  echo "==> integrations: $run"
  if "$run"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "integrations: $run FAILED"; fi
done
echo "integrations: $pass passed, $fail failed"
[ "$fail" = 0 ]
