#!/usr/bin/env bash
# Build Basalt and run a local one-process cluster (`basalt up`). Extra arguments go to `up`.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo not found: install Rust with rustup (https://rustup.rs), then re-run" >&2
  exit 1
fi
# The etcd client library is generated from etcd's protobuf definitions at build time.
if ! command -v protoc >/dev/null 2>&1; then
  echo "installing protobuf-compiler (protoc, needed to build the etcd client)"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq protobuf-compiler >/dev/null
fi
cargo build --release --bin basalt
exec ./target/release/basalt up "$@"
