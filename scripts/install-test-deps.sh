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
# S3 clients the gateway is tested with (boto3 and the aws CLI come from PyPI below).
have s3cmd || need+=(s3cmd)
have rclone || need+=(rclone)
have python3 || need+=(python3 python3-pip)

if [ ${#need[@]} -gt 0 ]; then
  echo "installing test dependencies: ${need[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

# boto3 (the AWS SDK for Python) and the aws CLI, from PyPI when the system lacks them.
py_need=()
python3 -c 'import boto3' >/dev/null 2>&1 || py_need+=(boto3)
have aws || py_need+=(awscli)
if [ ${#py_need[@]} -gt 0 ]; then
  echo "installing Python test dependencies: ${py_need[*]}"
  python3 -m pip install --quiet "${py_need[@]}" 2>/dev/null \
    || python3 -m pip install --quiet --break-system-packages "${py_need[@]}"
fi

if ! have cargo; then
  echo "cargo not found: install Rust with rustup (https://rustup.rs), then re-run" >&2
  exit 1
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true
