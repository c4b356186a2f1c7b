#!/usr/bin/env bash
# The test suite: install test dependencies, check formatting and lints, run the tests.
#
#   scripts/test.sh          # everything (what CI runs), then a short fuzz run of every target
#   scripts/test.sh --fast   # unit, property, library-level and simulation tests: no
#                            # end-to-end tests of the basalt binary (crates/cli/tests), no fuzz
set -euo pipefail
cd "$(dirname "$0")/.."

fast=0
case "${1:-}" in
    "") ;;
    --fast) fast=1 ;;
    -h|--help) sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "test.sh: unknown argument $1 (try --fast or --help)" >&2; exit 2 ;;
esac

./scripts/install-test-deps.sh
# The build and the tests' clusters need disk; say how much there is, so that a run that
# fails with ENOSPC is recognised for what it is (the debug build takes about 3 GB).
avail_kb=$(df -Pk . | awk 'NR == 2 {print $4}')
echo "== free disk here: $((avail_kb / 1024 / 1024)) GiB"
if [ "$avail_kb" -lt $((6 * 1024 * 1024)) ]; then
    echo "test.sh: warning: under 6 GiB free; the build and tests may fail with ENOSPC" >&2
fi
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets -- -D warnings
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
if [ "$fast" = 1 ]; then
    echo "== cargo test (fast tier)"
    { cargo test --workspace --exclude basalt-cli --no-fail-fast \
        && cargo test -p basalt-cli --bins --no-fail-fast; } 2>&1 | tee "$log" || status=$?
else
    echo "== cargo test"
    cargo test --workspace --no-fail-fast 2>&1 | tee "$log" || status=$?
    # Every fuzz target for a few seconds each; its targets count as tests in the closing line.
    echo "== fuzz smoke"
    ./scripts/fuzz-smoke.sh 2>&1 | tee -a "$log" || status=$?
fi
# One closing line for the whole run (cargo prints one per test binary).
passed=$(awk '/^test result:/ {s += $4} /^fuzz: [0-9]+ passed/ {s += $2} END {print s + 0}' "$log")
failed=$(awk '/^test result:/ {s += $6} /^fuzz: [0-9]+ passed/ {s += $4} END {print s + 0}' "$log")
ignored=$(awk '/^test result:/ {s += $8} END {print s + 0}' "$log")
echo
echo "${passed} passed, ${failed} failed, ${ignored} skipped"
exit "$status"
