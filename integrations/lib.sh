# Sourced by integrations/*/run.sh: where the SDKs' released sources are, and
# the closing line of an SDK that cannot run here.
#
# LEASEBEAT_PEERS_DIR  the folder holding the SDKs as released (the project's
#   `../shared/peers/`). Default: `shared/peers` beside the repository, or
#   beside its parent (a git worktree). Set it to a missing path to run as a
#   clone of the public repository does, without it.

# peers_dir ROOT: the peers folder (it may not exist).
peers_dir() {
    if [ -n "${LEASEBEAT_PEERS_DIR+x}" ]; then
        echo "$LEASEBEAT_PEERS_DIR"
        return
    fi
    local d
    for d in "$1/../shared/peers" "$1/../../shared/peers"; do
        if [ -d "$d" ]; then (cd "$d" && pwd); return; fi
    done
    echo "$1/../shared/peers"
}

# skip NAME REASON: the SDK cannot run here; say why in the closing line
# (scripts/test-integrations.sh counts it as skipped) and end with status 0.
skip() {
    echo "$1: 0 passed, 0 failed, 1 skipped ($2)"
    exit 0
}
