#!/usr/bin/env bash
# Install what Basalt's tests need on Debian: real NBD clients, fio, filesystem tools, etcd.
# Idempotent: does nothing when everything is present.
set -euo pipefail

need=()
have() { command -v "$1" >/dev/null 2>&1; }
have fio || need+=(fio)
# `basalt bench storage` measures the network baseline with iperf3 (loopback).
have iperf3 || need+=(iperf3)
have qemu-img || need+=(qemu-utils)
have nbdinfo || need+=(libnbd-bin)
# nbdsh is the Python shell of libnbd; it needs the system python3 module.
[ -e /usr/bin/nbdsh ] || need+=(python3-libnbd)
have nbdfuse || need+=(nbdfuse)
have nbdkit || need+=(nbdkit)
have mkfs.ext4 || need+=(e2fsprogs)
have fusermount3 || need+=(fuse3)
have losetup || need+=(mount)
# The test-cluster harness cuts hosts off with nftables rules inside network namespaces.
have nft || need+=(nftables)
[ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || have ip || need+=(iproute2)
have protoc || need+=(protobuf-compiler)
# basalt-meta's etcd tests start a real etcd from /usr/bin/etcd (etcdctl comes with etcd-client).
[ -x /usr/bin/etcd ] || need+=(etcd-server)
have etcdctl || need+=(etcd-client)

if [ ${#need[@]} -gt 0 ]; then
  echo "installing test dependencies: ${need[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! have cargo; then
  echo "cargo not found: install Rust with rustup (https://rustup.rs), then re-run" >&2
  exit 1
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true
