#!/usr/bin/env bash
# The rolling-upgrade test (crates/cli/tests/upgrade.rs): build an earlier Basalt in a
# worktree of its own, then run the test, which starts a 3-host cluster on that build and
# upgrades it host by host to this tree's under fio verify.
#
#   scripts/upgrade-test.sh            # from the last commit before issue 31's changes
#   scripts/upgrade-test.sh COMMIT     # from another commit, tag or branch
#
# The earlier build takes a target directory of its own (~10 minutes on 2 cores, ~3 GB);
# both are removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
from=${1:-b44d0fe}
work=$(mktemp -d /tmp/basalt-upgrade-XXXXXX)
cleanup() {
    git worktree remove --force "$work/src" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
git worktree add --detach "$work/src" "$from" >/dev/null
echo "== building $(git -C "$work/src" log -1 --format='%h %s' | cut -c1-72)"
CARGO_TARGET_DIR="$work/target" cargo build --quiet -p basalt-cli \
    --manifest-path "$work/src/Cargo.toml"
echo "== upgrading from $("$work/target/debug/basalt" --version)"
BASALT_UPGRADE_FROM="$work/target/debug/basalt" \
    cargo test -p basalt-cli --test upgrade -- --ignored --nocapture
