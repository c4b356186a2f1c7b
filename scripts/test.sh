#!/usr/bin/env bash
# The whole test suite: install test dependencies, check formatting and lints, run every test,
# then a short fuzz run of every fuzz target.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-test-deps.sh
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets -- -D warnings
echo "== cargo test"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace --no-fail-fast 2>&1 | tee "$log" || status=$?
# Every fuzz target for a few seconds each; its targets count as tests in the closing line.
echo "== fuzz smoke"
./scripts/fuzz-smoke.sh 2>&1 | tee -a "$log" || status=$?
# One closing line for the whole run (cargo prints one per test binary).
passed=$(awk '/^test result:/ {s += $4} /^fuzz: [0-9]+ passed/ {s += $2} END {print s + 0}' "$log")
failed=$(awk '/^test result:/ {s += $6} /^fuzz: [0-9]+ passed/ {s += $4} END {print s + 0}' "$log")
ignored=$(awk '/^test result:/ {s += $8} END {print s + 0}' "$log")
echo
echo "${passed} passed, ${failed} failed, ${ignored} skipped"
exit "$status"
