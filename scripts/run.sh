#!/usr/bin/env bash
# Build Basalt and run a local one-process cluster (`basalt up`). Extra arguments go to `up`.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo not found: install Rust with rustup (https://rustup.rs), then re-run" >&2
  exit 1
fi
# Build dependencies from Debian: protoc (the etcd client library and the CSI driver are
# generated from protobuf definitions) and OpenSSL's headers with pkg-config (NBD over TLS with PSK).
need=()
command -v protoc >/dev/null 2>&1 || need+=(protobuf-compiler)
# The CSI driver's proto imports protobuf's well-known types.
[ -f /usr/include/google/protobuf/descriptor.proto ] || need+=(libprotobuf-dev)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
pkg-config --exists openssl 2>/dev/null || need+=(libssl-dev)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing build dependencies: ${need[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
cargo build --release --bin basalt
exec ./target/release/basalt up "$@"
