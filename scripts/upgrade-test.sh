#!/usr/bin/env bash
# The rolling-upgrade test (crates/cli/tests/upgrade.rs): build an earlier Basalt in a
# worktree of its own, then run the test, which starts a 3-host cluster on that build and
# upgrades it host by host to this tree's under fio verify.
#
#   scripts/upgrade-test.sh            # from the last commit before issue 31's changes
#   scripts/upgrade-test.sh COMMIT     # from another commit, tag or branch
#
# The earlier build takes a target directory of its own, kept for the next run under
# target/upgrade-from-COMMIT (~10 minutes on 2 cores the first time, ~3 GB); the worktree
# is removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
from=${1:-b44d0fe}
build="$PWD/target/upgrade-from-$(git rev-parse --short "$from")"
# The same source path every time, so that cargo's build of it is reused.
work="$build/tree"
mkdir -p "$build"
cleanup() {
    git worktree remove --force "$work/src" 2>/dev/null || true
}
trap cleanup EXIT
git worktree add --detach "$work/src" "$from" >/dev/null
echo "== building $(git -C "$work/src" log -1 --format='%h %s' | cut -c1-72)"
CARGO_TARGET_DIR="$build" cargo build --quiet -p basalt-cli \
    --manifest-path "$work/src/Cargo.toml"
echo "== upgrading from $("$build/debug/basalt" --version)"
BASALT_UPGRADE_FROM="$build/debug/basalt" \
    cargo test -p basalt-cli --test upgrade -- --ignored --nocapture
