#!/usr/bin/env bash
# Provision a volume the way an operator scripts it: no sleeps and no retries, because every
# basalt command returns once its change is usable. Create a pool and a volume in it, write
# it with qemu-io, grow it, read it back, check `volume info --json`, the exit codes of
# "not found" and "exists", then remove the volume.
#
# Environment: BASALT (the binary; default `basalt`), NBD_BASE (nbd://HOST:PORT of a gateway
# serving every volume), FAILURE_DOMAIN (of the new pool: `osd` on `basalt up`, default
# `host`), and the cluster as every basalt command reads it: BASALT_CONTROL for `basalt up`,
# or BASALT_META and BASALT_KEYRING for a multi-host cluster.
set -euo pipefail

basalt=${BASALT:-basalt}
pool=ops$$
vol=ops-vol$$

# The pool is usable the moment the command returns: the volume goes in at once.
"$basalt" pool create "$pool" --size 2 --pgs 8 --failure-domain "${FAILURE_DOMAIN:-host}"
"$basalt" volume create "$vol" --size 64M --pool "$pool"

out=$(qemu-io -f raw -c "write -P 0x5a 0 1M" -c "write -P 0xa5 63M 1M" "$NBD_BASE/$vol" 2>&1) \
    || { echo "$out" >&2; exit 1; }
echo "$out"
case "$out" in *"wrote 1048576/1048576"*) ;; *) echo "qemu-io did not write" >&2; exit 1 ;; esac

"$basalt" volume resize "$vol" 128M

# A new connection sees the new size and the data written before it.
out=$(qemu-io -f raw -c "read -P 0x5a 0 1M" -c "read -P 0xa5 63M 1M" -c "read -P 0 64M 1M" \
    -c "length" "$NBD_BASE/$vol" 2>&1) || { echo "$out" >&2; exit 1; }
echo "$out"
case "$out" in *"failed"* | *"rror"*) echo "qemu-io read back wrong data" >&2; exit 1 ;; esac
case "$out" in *"128 MiB"*) ;; *) echo "qemu-io does not see 128 MiB" >&2; exit 1 ;; esac

"$basalt" volume info "$vol" --json | python3 -c '
import json, sys
vol, pool = sys.argv[1], sys.argv[2]
info = json.load(sys.stdin)
assert info["name"] == vol, info
assert info["size"] == 128 << 20, info
assert info["pool_name"] == pool, info
assert info["created_utc"].endswith("Z"), info
assert info["usage"]["total_bytes"] >= 2 << 20, info
print("info ok:", info["name"], info["size"], info["pool_name"], info["created_utc"])
' "$vol" "$pool"

# Scripts branch on exit codes: 3 not found, 4 exists.
code=0
"$basalt" volume info "no-such-$vol" 2>/dev/null || code=$?
[ "$code" -eq 3 ] || { echo "volume info of a missing volume exited $code, not 3" >&2; exit 1; }
code=0
"$basalt" volume create "$vol" --size 1M --pool "$pool" 2>/dev/null || code=$?
[ "$code" -eq 4 ] || { echo "volume create of an existing name exited $code, not 4" >&2; exit 1; }
code=0
"$basalt" pool create "$pool" --size 2 --failure-domain "${FAILURE_DOMAIN:-host}" 2>/dev/null \
    || code=$?
[ "$code" -eq 4 ] || { echo "pool create of an existing name exited $code, not 4" >&2; exit 1; }

"$basalt" volume rm "$vol"
code=0
"$basalt" --json volume info "$vol" 2>/dev/null || code=$?
[ "$code" -eq 3 ] || { echo "volume info after rm exited $code, not 3" >&2; exit 1; }

# A pool that holds a volume is not removed (4, naming the volume); an empty one is, at
# once out of the map: a volume can no longer be made in it (3), nor the pool removed (3).
"$basalt" volume create "$vol" --size 1M --pool "$pool"
code=0
err=$("$basalt" pool rm "$pool" 2>&1 >/dev/null) || code=$?
[ "$code" -eq 4 ] || { echo "pool rm of a pool in use exited $code, not 4: $err" >&2; exit 1; }
case "$err" in *"\"$vol\""*) ;; *) echo "pool rm did not name $vol: $err" >&2; exit 1;; esac
"$basalt" volume rm "$vol"
"$basalt" pool rm "$pool"
code=0
"$basalt" volume create "$vol" --size 1M --pool "$pool" 2>/dev/null || code=$?
[ "$code" -eq 3 ] || { echo "volume create in a removed pool exited $code, not 3" >&2; exit 1; }
code=0
"$basalt" pool rm "$pool" 2>/dev/null || code=$?
[ "$code" -eq 3 ] || { echo "pool rm of a removed pool exited $code, not 3" >&2; exit 1; }
echo "provisioned, used and removed $vol in pool $pool, then the pool"
