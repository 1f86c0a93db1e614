#!/usr/bin/env bash
# Docs that must work when pasted (issue 29), checked so they cannot rot.
#
#   scripts/check-docs.sh                  static checks (part of the lint stage):
#       every relative link in a tracked Markdown file resolves; no `example.invalid`
#       URL and no reference to the project's private `shared/design/` folder; every
#       rule id cited in code and docs is defined in docs/heartbeat-contract.md or
#       docs/settlement-contract.md; the wheel file names in the READMEs are written
#       in the order maturin writes them (manylinux2014_<arch>.manylinux_2_17_<arch>)
#       for the workspace's version; ffi-c/README does not call the release after a
#       cancel optional; the root README and jvm/README show the same `mvn install`
#       command.
#   scripts/check-docs.sh c PREFIX         (C stage) the root README's C commands, run
#       as written against a tarball made from an `ffi-c/install.sh PREFIX` tree:
#       the program must run without LD_LIBRARY_PATH.
#   scripts/check-docs.sh node DIR BIN     (Node stage) node/README's runner example,
#       run as written in DIR (where the leasebeat package is installed) against
#       `BIN serve`: it must end by itself with the lease released.
set -euo pipefail
# One mode per run: its clean-up (temporary files, the server) is an EXIT trap, so it
# also runs when a check fails.
cd "$(dirname "$0")/.."
root="$(pwd)"
fail() { echo "check-docs: $*" >&2; exit 1; }
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)"
[ -n "$version" ] || fail "no workspace version in Cargo.toml"

# block FILE HEADING: the first ```sh (or ```js) block after the line HEADING.
block() {
  awk -v h="$2" '
    $0 == h { found = 1; next }
    found && !inb && /^```(sh|js)$/ { inb = 1; next }
    inb && /^```$/ { exit }
    inb { print }' "$1"
}

static_checks() {
  local n=0
  # 1. Relative links.
  while IFS= read -r f; do
    local dir
    dir="$(dirname "$f")"
    while IFS= read -r link; do
      local target="${link%%#*}"
      [ -n "$target" ] || continue
      if [ ! -e "$dir/$target" ]; then
        echo "check-docs: $f: the link ($link) leads nowhere" >&2
        n=$((n + 1))
      fi
    done < <(grep -oE '\]\([^) ]+\)' "$f" | sed -E 's/^\]\((.*)\)$/\1/' \
      | grep -vE '^(https?:|mailto:|#)' || true)
  done < <(git ls-files '*.md' | grep -vE '^(notes/|NOTES\.md)' \
    | grep -vE '^integrations/.*/(runcycles|tests)/' || true)
  # 2. Placeholder URLs and the private design folder.
  if git grep -nE 'example\.invalid|shared/design/|\(shared-protocol\)' -- . ':!notes' ':!NOTES.md' \
    ':!scripts/check-docs.sh'; then
    echo "check-docs: the lines above name example.invalid, shared/design/ or a broken link" >&2
    n=$((n + 1))
  fi
  # 3. Every cited rule id is defined in the contracts.
  local defined cited missing
  defined="$(grep -ohE '\b(HB|FB|D|P|S|ST|SP|J|HP)-[0-9]+\b' docs/heartbeat-contract.md \
    docs/settlement-contract.md | sort -u)"
  cited="$(git grep -ohE '\b(HB|FB|D|P|S|ST|SP|J|HP)-[0-9]+\b' -- '*.rs' '*.md' '*.py' '*.pyi' '*.js' \
    '*.mjs' '*.cjs' '*.ts' '*.java' '*.c' '*.h' '*.cpp' '*.json' ':!notes' ':!NOTES.md' \
    ':!integrations/*/*.patch' ':!node/package-lock.json' | sort -u)"
  missing="$(comm -23 <(echo "$cited") <(echo "$defined") | grep -vxF 'D-7' || true)"
  if [ -n "$missing" ]; then
    echo "check-docs: rule ids cited but not defined in docs/*-contract.md: $(echo $missing)" >&2
    n=$((n + 1))
  fi
  # 4. Wheel names as maturin writes them.
  local bad
  bad="$(git grep -ohE "leasebeat-[0-9][0-9.]*-cp310-abi3-manylinux[^ \`]*\.whl" -- '*.md' ':!notes' ':!NOTES.md' \
    | grep -vE "^leasebeat-$version-cp310-abi3-manylinux2014_(x86_64|aarch64)\.manylinux_2_17_(x86_64|aarch64)\.whl$" || true)"
  if [ -n "$bad" ]; then
    echo "check-docs: wheel names not in maturin's order or not version $version: $bad" >&2
    n=$((n + 1))
  fi
  # 5. A cancel does not release.
  if grep -nE 'lb_driver_release.*optional' ffi-c/README.md; then
    echo "check-docs: ffi-c/README.md calls the release optional (a cancel does not release)" >&2
    n=$((n + 1))
  fi
  # 6. One `mvn install` command, the same in both READMEs.
  local a b
  a="$(grep -E '^mvn .* install -DskipTests$' README.md || true)"
  b="$(grep -E '^mvn .* install -DskipTests$' jvm/README.md || true)"
  if [ -z "$a" ] || [ "$a" != "$b" ]; then
    echo "check-docs: README.md and jvm/README.md must show the same 'mvn ... install -DskipTests' ('$a' vs '$b')" >&2
    n=$((n + 1))
  fi
  [ "$n" -eq 0 ] || fail "$n problem(s)"
  echo "check-docs: links, URLs, rule ids, wheel names, release wording, mvn command: ok"
}

c_check() {
  local prefix="$1" arch name
  arch="$(uname -m)"
  name="leasebeat-$version-$arch-linux-gnu"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp/pack/$name"
  cp -a "$prefix/include" "$prefix/lib" "$tmp/pack/$name/"
  tar -czf "$tmp/$name.tar.gz" -C "$tmp/pack" "$name"
  cp tests/c/consumer/consumer.c "$tmp/app.c"
  # The README's commands, as written (x86_64 replaced by this machine's arch).
  local cmds
  cmds="$(block README.md '### C' | grep -vE '^\s*#' | sed "s/x86_64/$arch/g")"
  [ -n "$cmds" ] || fail "no sh block under '### C' in README.md"
  echo "$cmds" | sed 's/^/  $ /'
  # The README runs ./a.out; so does this check, whatever the README says.
  (cd "$tmp" && env -u LD_LIBRARY_PATH -u PKG_CONFIG_PATH bash -euo pipefail -c "$cmds
./a.out >/dev/null") \
    || fail "the root README's C commands failed (above)"
  echo "check-docs: the root README's C commands build a program that runs without LD_LIBRARY_PATH"
}

node_check() {
  local dir="$1" bin="$2" url
  tmp="$(mktemp -d)"
  "$bin" serve --api-key docs-key --log "$tmp/serve.jsonl" >"$tmp/serve.out" 2>&1 &
  serve_pid=$!
  trap 'kill "$serve_pid" 2>/dev/null || true; rm -rf "$tmp"' EXIT
  for _ in $(seq 100); do
    url="$(sed -n 's/^listening on //p' "$tmp/serve.out")"
    [ -n "$url" ] && break
    sleep 0.05
  done
  [ -n "$url" ] || fail "leasebeat serve did not start"
  local example
  example="$(block node/README.md '## Use: the runner')"
  [ -n "$example" ] || fail "no js block under '## Use: the runner' in node/README.md"
  # The example as written, with the names it leaves to the reader defined first
  # (the first decision arms an unref'd 1.5 s timer that aborts, as a user's Ctrl-C
  # would: it does not keep the process alive, the example must) and the URL and
  # key of this server.
  {
    cat <<'JS'
const subject = { tenant: 'docs' }
const action = { kind: 'docs.check', name: 'readme' }
const estimate = { unit: 'TOKENS', amount: 1 }
let decisions = 0
const log = () => { if (++decisions === 1) setTimeout(() => ac.abort(), 1500).unref() }
const alert = () => {}
JS
    echo "$example" | sed -e "s#'http://127.0.0.1:7878'#'$url'#" -e "s#process.env.CYCLES_API_KEY#'docs-key'#"
    echo "if (stop.reason !== 'cancelled') { console.error('stop', stop.reason); process.exit(1) }"
  } >"$dir/readme-runner.mjs"
  (cd "$dir" && timeout 60 node readme-runner.mjs) || fail "node/README's runner example failed (exit $?)"
  grep -q '"endpoint":"release"' "$tmp/serve.jsonl" \
    || fail "node/README's runner example ended without releasing its lease"
  echo "check-docs: node/README's runner example ran to its end and released its lease"
}

case "${1:-static}" in
  static) static_checks ;;
  c) [ $# -eq 2 ] || fail "usage: $0 c PREFIX"; c_check "$2" ;;
  node) [ $# -eq 3 ] || fail "usage: $0 node DIR LEASEBEAT_BIN"; node_check "$2" "$3" ;;
  *) fail "usage: $0 [static | c PREFIX | node DIR LEASEBEAT_BIN]" ;;
esac
