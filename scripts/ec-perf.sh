#!/bin/bash
# Quick write/read figures of one `basalt up` configuration on tmpfs, for comparing pools
# or builds side by side (docs/benchmarks.md, "Erasure-coded pools").
#
#   scripts/ec-perf.sh BASALT_BINARY LABEL [basalt up arguments...]
#   scripts/ec-perf.sh target/release/basalt "EC 2+1" --ec 2+1
#   scripts/ec-perf.sh target/release/basalt "3 replicas"
#
# Starts `basalt up` on /dev/shm (ports 10897/10896, no S3), writes 256 MiB of its 512 MiB
# volume once, then runs fio over NBD: 4k random write (2 jobs x QD32), 1 MiB sequential
# write (QD8), 4k random read (2 jobs x QD32), 8 s each; prints one line; stops the cluster.
set -euo pipefail
BIN=$1; LABEL=$2; shift 2
D=/dev/shm/basalt-ec-perf-$$
LOG=$(mktemp)
rm -rf "$D"
setsid "$BIN" up --data-dir "$D" --osd-size 2G --nbd-listen 127.0.0.1:10897 \
    --control-listen 127.0.0.1:10896 --s3-listen off --default-volume-size 512M "$@" >"$LOG" 2>&1 &
cleanup() { pkill -TERM -f "data-dir $D" || true; sleep 1; rm -rf "$D" "$LOG"; }
trap cleanup EXIT
for _ in $(seq 1 150); do grep -q "Press Ctrl-C" "$LOG" && break; sleep 0.2; done
grep -q "Press Ctrl-C" "$LOG" || { echo "basalt up did not start:"; cat "$LOG"; exit 1; }
U=nbd://127.0.0.1:10897/vol0
json() { sed -n '/^{/,$p'; }
fio --name=fill --ioengine=nbd --uri=$U --rw=write --bs=1m --iodepth=4 --size=256m \
    --output-format=terse >/dev/null 2>&1
w=$(fio --name=w --ioengine=nbd --uri=$U --rw=randwrite --bs=4k --iodepth=32 --numjobs=2 \
    --size=256m --runtime=8 --time_based --group_reporting --output-format=json 2>/dev/null | json |
    python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]["write"]; print("%.0f IOPS (%.1f ms)" % (j["iops"], j["lat_ns"]["mean"]/1e6))')
s=$(fio --name=s --ioengine=nbd --uri=$U --rw=write --bs=1m --iodepth=8 --size=256m --runtime=8 \
    --time_based --output-format=json 2>/dev/null | json |
    python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]["write"]; print("%.0f MiB/s" % (j["bw_bytes"]/1048576))')
r=$(fio --name=r --ioengine=nbd --uri=$U --rw=randread --bs=4k --iodepth=32 --numjobs=2 \
    --size=256m --runtime=8 --time_based --group_reporting --output-format=json 2>/dev/null | json |
    python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]["read"]; print("%.0f IOPS" % j["iops"])')
echo "$LABEL: 4k random write $w; 1 MiB sequential write $s; 4k random read $r"
