#!/usr/bin/env bash
# Profile `basalt up` under one fio profile and draw a flamegraph of where its CPU goes.
#
#   scripts/flamegraph.sh rw32            # 4k random writes at QD32 -> target/flamegraph-rw32.svg
#   scripts/flamegraph.sh sw8 --dwarf     # 1M sequential writes, DWARF call graphs (slower, deeper)
#
# Profiles (as in `basalt bench nbd --profiles`): rr1 rr32 rw1 rw32 sr8 sw8.
# The stores live on tmpfs (/dev/shm), so the graph shows software cost, not the disk.
# Needs: a release build (cargo build --release --bin basalt), fio, perf (Debian:
# linux-perf), and inferno (cargo install inferno) for the SVG; without inferno the folded
# stacks and `perf report` text are still written.
set -euo pipefail

profile=${1:-}
dwarf=${2:-}
case "$profile" in
  rr1) rw=randread bs=4k qd=1 ;;
  rr32) rw=randread bs=4k qd=32 ;;
  rw1) rw=randwrite bs=4k qd=1 ;;
  rw32) rw=randwrite bs=4k qd=32 ;;
  sr8) rw=read bs=1M qd=8 ;;
  sw8) rw=write bs=1M qd=8 ;;
  *) echo "usage: $0 rr1|rr32|rw1|rw32|sr8|sw8 [--dwarf]" >&2; exit 2 ;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
basalt="$root/target/release/basalt"
[ -x "$basalt" ] || { echo "no release build: cargo build --release --bin basalt" >&2; exit 1; }
for tool in fio perf; do
  command -v "$tool" >/dev/null || { echo "$tool is not installed" >&2; exit 1; }
done

scratch=$(mktemp -d /dev/shm/basalt-flame.XXXXXX)
out="$root/target/flamegraph-$profile"
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$scratch"
}
trap cleanup EXIT

port=$((20000 + RANDOM % 20000))
"$basalt" up --data-dir "$scratch/data" --osd-size 4G --default-volume-size 512M \
  --nbd-listen "127.0.0.1:$port" --s3-listen off \
  >"$scratch/up.log" 2>&1 &
pid=$!
for _ in $(seq 100); do
  grep -q "Press Ctrl-C" "$scratch/up.log" 2>/dev/null && break
  sleep 0.2
done
grep -q "Press Ctrl-C" "$scratch/up.log" || { echo "basalt up did not start:" >&2; cat "$scratch/up.log" >&2; exit 1; }
uri="nbd://127.0.0.1:$port/vol0"
echo "preconditioning $uri (512 MiB)"
fio --name=fill --ioengine=nbd --uri="$uri" --rw=write --bs=1M --iodepth=8 --size=512M >/dev/null
echo "fio $rw bs=$bs QD$qd for 12 s, perf records 6 s of it"
fio --name=p --ioengine=nbd --uri="$uri" --rw="$rw" --bs="$bs" --iodepth="$qd" --size=512M \
  --runtime=12 --time_based --output="$out.fio.txt" &
fio_pid=$!
sleep 3
if [ "$dwarf" = "--dwarf" ]; then
  perf record -F 999 --call-graph dwarf,16384 -p "$pid" -o "$scratch/perf.data" -- sleep 6 2>/dev/null
else
  perf record -F 1999 -g -p "$pid" -o "$scratch/perf.data" -- sleep 6 2>/dev/null
fi
wait "$fio_pid"
perf report -i "$scratch/perf.data" --no-children --sort symbol --stdio -g none 2>/dev/null \
  | grep '%' | head -60 >"$out.top.txt"
perf script -i "$scratch/perf.data" 2>/dev/null >"$scratch/perf.txt"
if command -v inferno-collapse-perf >/dev/null; then
  inferno-collapse-perf <"$scratch/perf.txt" >"$out.folded"
  inferno-flamegraph --title "basalt up, fio $rw $bs QD$qd (tmpfs)" <"$out.folded" >"$out.svg"
  echo "flamegraph: $out.svg"
else
  echo "inferno is not installed (cargo install inferno): no SVG" >&2
fi
echo "top symbols: $out.top.txt; fio: $out.fio.txt"
