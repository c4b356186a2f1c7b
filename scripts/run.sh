#!/usr/bin/env bash
# Build Basalt and run a local one-process cluster (`basalt up`). Extra arguments go to `up`.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo not found: install Rust with rustup (https://rustup.rs), then re-run" >&2
  exit 1
fi
cargo build --release --bin basalt
exec ./target/release/basalt up "$@"
