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
# Object-backed volumes: the EROFS images Basalt writes are checked with fsck.erofs.
have fsck.erofs || need+=(erofs-utils)
# VM tests boot a tiny Debian guest (scripts/build-guest-image.sh) under QEMU (TCG).
have qemu-system-x86_64 || need+=(qemu-system-x86)
dpkg -s busybox-static >/dev/null 2>&1 || need+=(busybox-static)
have fusermount3 || need+=(fuse3)
have losetup || need+=(mount)
# The test-cluster harness cuts hosts off with nftables rules inside network namespaces.
have nft || need+=(nftables)
[ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || have ip || need+=(iproute2)
have protoc || need+=(protobuf-compiler)
# The CSI spec's proto imports protobuf's well-known types (descriptor, timestamp, wrappers).
[ -f /usr/include/google/protobuf/descriptor.proto ] || need+=(libprotobuf-dev)
# NBD over TLS with PSK links the system's OpenSSL (headers found through pkg-config); the
# TLS tests make their certificates with the openssl command.
have pkg-config || need+=(pkg-config)
dpkg -s libssl-dev >/dev/null 2>&1 || need+=(libssl-dev)
have openssl || need+=(openssl)
# https S3 endpoints are checked against the system's roots (an objvol unit test reads them).
[ -f /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
# basalt-meta's etcd tests start a real etcd from /usr/bin/etcd (etcdctl comes with etcd-client).
[ -x /usr/bin/etcd ] || need+=(etcd-server)
have etcdctl || need+=(etcd-client)
# Certificates for the TLS tests (etcd over TLS, NBD over TLS) are made with openssl.
have openssl || need+=(openssl)
# S3 clients the gateway is tested with (boto3 and the aws CLI come from PyPI below).
have s3cmd || need+=(s3cmd)
have rclone || need+=(rclone)
# python3 may be present without pip (Debian's python3 comes without it; s3cmd pulls it in).
have python3 || need+=(python3)
python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
# md5sum (coreutils) checks the ETags the S3 clients get back.
have md5sum || need+=(coreutils)
# The observability tests scrape Basalt with a real Prometheus server and check the alert
# rules in contrib/ with promtool (both come with Debian's prometheus package).
{ have prometheus && have promtool; } || need+=(prometheus)
# The units in contrib/systemd are checked with systemd-analyze verify.
have systemd-analyze || need+=(systemd)
# libfuzzer-sys compiles libFuzzer (C++) for the fuzz smoke run.
have c++ || need+=(g++)

if [ ${#need[@]} -gt 0 ]; then
  echo "installing test dependencies: ${need[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

# boto3 (the AWS SDK for Python; its botocore signs the raw requests of the S3 bad-input
# test) and the aws CLI, from PyPI when the system lacks either. Installed together, so pip
# picks one botocore that both accept.
if ! python3 -c 'import boto3' >/dev/null 2>&1 || ! have aws; then
  echo "installing Python test dependencies: boto3 awscli"
  python3 -m pip install --quiet boto3 awscli 2>/dev/null \
    || python3 -m pip install --quiet --break-system-packages boto3 awscli
  hash -r
fi

# Every client the end-to-end tests drive must now be on PATH (pip run as a user may have
# put aws in ~/.local/bin).
missing=()
for tool in fio qemu-io nbdinfo nbdcopy s3cmd rclone aws python3 md5sum; do
  have "$tool" || missing+=("$tool")
done
python3 -c 'import boto3, botocore' >/dev/null 2>&1 || missing+=("python3 module boto3")
if [ ${#missing[@]} -gt 0 ]; then
  echo "still missing after installing: ${missing[*]} (is ~/.local/bin on PATH?)" >&2
  exit 1
fi

# A second S3 implementation (scripts/test-s3: gofakes3, the engine of `rclone serve s3`)
# for objvols built from an endpoint other than Basalt's own gateway; built with Go from
# the Go module proxy. Without Go that test is skipped and says so.
GO=$(command -v go || { [ -x /usr/local/go/bin/go ] && echo /usr/local/go/bin/go; } || true)
TEST_S3_SRC="$(cd "$(dirname "$0")" && pwd)/test-s3"
TEST_S3=/usr/local/bin/basalt-test-s3
[ "$(id -u)" -eq 0 ] || TEST_S3="$HOME/.local/bin/basalt-test-s3"
if [ -n "$GO" ] && { [ ! -x "$TEST_S3" ] || [ "$TEST_S3_SRC/main.go" -nt "$TEST_S3" ]; }; then
  echo "building the test S3 server (scripts/test-s3) into $TEST_S3"
  mkdir -p "$(dirname "$TEST_S3")"
  (cd "$TEST_S3_SRC" && "$GO" build -o "$TEST_S3" .)
elif [ -z "$GO" ]; then
  echo "no Go toolchain: the objvol test against a second S3 implementation will be skipped" >&2
fi

# csi-sanity (kubernetes-csi/csi-test) checks the CSI driver (crates/cli/tests/csi.rs), built
# with Go from the Go module proxy. Without Go that test fails, saying how to get it.
CSI_SANITY_VERSION=v5.4.0
CSI_SANITY=/usr/local/bin/csi-sanity
[ "$(id -u)" -eq 0 ] || CSI_SANITY="$HOME/.local/bin/csi-sanity"
if [ -n "$GO" ] && [ ! -x "$CSI_SANITY" ]; then
  echo "building csi-sanity $CSI_SANITY_VERSION into $CSI_SANITY"
  mkdir -p "$(dirname "$CSI_SANITY")"
  GOBIN="$(dirname "$CSI_SANITY")" "$GO" install \
    "github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity@$CSI_SANITY_VERSION"
elif [ -z "$GO" ]; then
  echo "no Go toolchain: csi-sanity cannot be built and the CSI test will fail" >&2
fi

# --- basalt-k8s-validate: the Kubernetes manifests' offline check -------------------------
# scripts/k8s-validate decodes contrib/kubernetes strictly into k8s.io/api's types (the
# manifests test in crates/cli/tests/systemd.rs runs it), built with Go from the Go module
# proxy (its go.mod and go.sum pin the versions). Rebuilt on every run rather than when the
# sources look newer: with Go's build cache an unchanged rebuild takes a second or two, and
# a stale validator would check the manifests against rules that are no longer in the tree.
K8S_VALIDATE_SRC="$(cd "$(dirname "$0")" && pwd)/k8s-validate"
K8S_VALIDATE=/usr/local/bin/basalt-k8s-validate
[ "$(id -u)" -eq 0 ] || K8S_VALIDATE="$HOME/.local/bin/basalt-k8s-validate"
if [ -n "$GO" ]; then
  echo "building the manifest validator (scripts/k8s-validate) into $K8S_VALIDATE"
  mkdir -p "$(dirname "$K8S_VALIDATE")"
  # No VCS stamp: the tree may be a copy without .git, or one git calls dubious.
  (cd "$K8S_VALIDATE_SRC" && "$GO" build -buildvcs=false -o "$K8S_VALIDATE" .)
else
  echo "no Go toolchain: basalt-k8s-validate cannot be built and the manifests test will fail" >&2
fi
# --- end basalt-k8s-validate ---------------------------------------------------------------

if ! have cargo; then
  echo "cargo not found: install Rust with rustup (https://rustup.rs), then re-run" >&2
  exit 1
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true

# The fuzz smoke run (scripts/fuzz-smoke.sh): cargo-fuzz builds the targets with nightly's
# sanitizer and coverage flags. Any nightly will do, so one already present is kept as it
# is (no update on every run); cargo-fuzz builds from crates.io in about a minute and a half.
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  echo "installing the nightly Rust toolchain (for cargo fuzz)"
  rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi
