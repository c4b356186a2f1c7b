#!/usr/bin/env bash
# A new user's first pool on `basalt up` (one host): created with every default, it must
# serve I/O at once; a pool the cluster cannot place (failure domain host, one host) is
# refused with the reason, or made with --allow-unplaceable and then explained by
# `basalt status`. No sleeps, no retries: every write is bounded, so a hang fails.
#
# Environment: BASALT (the binary; default `basalt`), NBD_BASE (nbd://HOST:PORT serving
# every volume), BASALT_CONTROL (the control socket of `basalt up`).
set -euo pipefail

basalt=${BASALT:-basalt}
pool=q$$
vol=q-vol$$

# Defaults only: the failure domain fits the one-host cluster.
out=$("$basalt" pool create "$pool")
echo "$out"
case "$out" in *"failure domain osd"*) ;; *) echo "default failure domain is not osd: $out" >&2; exit 1 ;; esac
"$basalt" volume create "$vol" --size 64M --pool "$pool"
out=$(timeout 60 qemu-io -f raw -c "write -P 0x5a 0 1M" -c "read -P 0x5a 0 1M" "$NBD_BASE/$vol" 2>&1) \
    || { echo "I/O to a volume of the default pool failed or hung: $out" >&2; exit 1; }
case "$out" in *"wrote 1048576/1048576"*) ;; *) echo "qemu-io did not write: $out" >&2; exit 1 ;; esac

# Three replicas on distinct hosts of a one-host cluster: refused, saying why.
code=0
err=$("$basalt" pool create "${pool}h" --failure-domain host 2>&1 >/dev/null) || code=$?
[ "$code" -eq 1 ] || { echo "an unplaceable pool was not refused (exit $code): $err" >&2; exit 1; }
case "$err" in *"needs 3 hosts"*"has 1"*) ;; *) echo "the refusal does not say why: $err" >&2; exit 1 ;; esac
code=0
"$basalt" pool ls | grep -q "${pool}h" && code=1
[ "$code" -eq 0 ] || { echo "the refused pool exists" >&2; exit 1; }

# Made anyway on request; status then says why its PGs are inactive.
"$basalt" pool create "${pool}h" --failure-domain host --allow-unplaceable --pgs 8
status=$("$basalt" status --interval 0 || true)
echo "$status"
case "$status" in *"placement: pool \"${pool}h\" needs 3 hosts"*) ;; *)
    echo "status does not explain the unplaceable pool" >&2; exit 1 ;; esac
"$basalt" pool rm "${pool}h"

"$basalt" volume rm "$vol"
"$basalt" pool rm "$pool"
echo "a one-host pool with defaults serves I/O; an unplaceable one is refused or explained"
