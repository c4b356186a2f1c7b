#!/usr/bin/env bash
# The whole test suite: install test dependencies, check formatting and lints, run every test.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-test-deps.sh
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets -- -D warnings
echo "== cargo test"
cargo test --workspace 2>&1 | tee /tmp/basalt-test.log
