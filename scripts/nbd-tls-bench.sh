#!/usr/bin/env bash
# NBD TLS cost: one `basalt up` (tmpfs data dir) offering TLS (x509, not required); fio's
# nbd engine with nbd:// and nbds:// URIs on the same server, 4k randread/randwrite QD32,
# interleaved plain/TLS in every round. Prints IOPS and the server's CPU per IO.
# usage: scripts/nbd-tls-bench.sh BASALT_BIN [ROUNDS] [RUNTIME_S]
#        scripts/nbd-tls-bench.sh BASALT_BIN ROUNDS RUNTIME_S plain-only BEFORE_BIN
#        (the second form: plaintext only, BASALT_BIN against an earlier build, two servers)
set -euo pipefail
BIN=$1; ROUNDS=${2:-3}; RT=${3:-15}
# Pause before each run, so the background work a write run leaves (store flushes) is not
# charged to the next run; and the order of the pair alternates (ABBA) every round.
SETTLE=3
D=$(mktemp -d /dev/shm/tlsbench.XXXX)
UP=
trap '[ -n "$UP" ] && kill $UP 2>/dev/null; wait 2>/dev/null; rm -rf "$D"' EXIT
mkdir -p "$D/tls"; cd "$D/tls"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 -keyout ca-key.pem -out ca-cert.pem -subj /CN=ca 2>/dev/null
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout server-key.pem -out s.csr -subj /CN=localhost 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > s.ext
openssl x509 -req -in s.csr -CA ca-cert.pem -CAkey ca-key.pem -CAcreateserial -days 30 -extfile s.ext -out server-cert.pem 2>/dev/null
cd - >/dev/null
start() { # bin port tlsargs...
  local bin=$1 port=$2; shift 2
  rm -rf "$D/data-$port"
  RUST_LOG=info,basalt_nbd::tls=debug "$bin" up --data-dir "$D/data-$port" --nbd-listen 127.0.0.1:$port \
    --control-listen 127.0.0.1:0 --s3-listen off --osd-size 4G --default-volume-size 1G "$@" \
    > "$D/up-$port.log" 2>&1 &
  echo $!
}
wait_up() { for _ in $(seq 600); do grep -q 'Press Ctrl-C' "$1" && return; sleep 0.1; done; cat "$1"; exit 1; }
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
run() { # pid uri rw -> "iops cpu_us_per_io"
  local c0 c1; sleep "$SETTLE"; c0=$(cpu "$1")
  fio --name=b --ioengine=nbd --uri="$2" --rw="$3" --bs=4k --iodepth=32 --size=512M \
      --runtime="$RT" --time_based --output-format=json --output="$D/fio.json" >/dev/null
  c1=$(cpu "$1")
  python3 -c '
import json,sys; j=json.load(open(sys.argv[1]))["jobs"][0]
ios=j["read"]["total_ios"]+j["write"]["total_ios"]; iops=j["read"]["iops"]+j["write"]["iops"]
print(int(iops), round((int(sys.argv[3])-int(sys.argv[2]))*10000/ios, 1))' "$D/fio.json" "$c0" "$c1"
}
fill() { fio --name=fill --ioengine=nbd --uri="$1" --rw=write --bs=1M --iodepth=8 --size=512M >/dev/null 2>&1; }
if [ "${4:-}" = "plain-only" ]; then
  BEFORE=$5
  A=$(start "$BEFORE" 10997); B=$(start "$BIN" 10998); UP="$A $B"
  wait_up "$D/up-10997.log"; wait_up "$D/up-10998.log"
  fill nbd://127.0.0.1:10997/vol0; fill nbd://127.0.0.1:10998/vol0
  echo "round rw before_iops before_cpu_us after_iops after_cpu_us ratio"
  for r in $(seq "$ROUNDS"); do for rw in randread randwrite; do
    if [ $((r % 2)) -eq 1 ]; then
      a=$(run "$A" nbd://127.0.0.1:10997/vol0 "$rw"); b=$(run "$B" nbd://127.0.0.1:10998/vol0 "$rw")
    else
      b=$(run "$B" nbd://127.0.0.1:10998/vol0 "$rw"); a=$(run "$A" nbd://127.0.0.1:10997/vol0 "$rw")
    fi
    echo "$r $rw $a $b $(python3 -c "print(round(${b%% *}/${a%% *},3))")"
  done; done
  exit 0
fi
UP=$(start "$BIN" 10998 --nbd-tls-cert "$D/tls"); wait_up "$D/up-10998.log"
PLAIN="nbd://127.0.0.1:10998/vol0"
# fio's nbd engine refuses URIs naming local files (tls-certificates): the server is not
# verified, which changes nothing to the cost of the session once established.
TLS="nbds://127.0.0.1:10998/vol0?tls-verify-peer=false"
fill "$PLAIN"
echo "round rw plain_iops plain_cpu_us tls_iops tls_cpu_us ratio"
for r in $(seq "$ROUNDS"); do for rw in randread randwrite; do
  if [ $((r % 2)) -eq 1 ]; then
    a=$(run "$UP" "$PLAIN" "$rw"); b=$(run "$UP" "$TLS" "$rw")
  else
    b=$(run "$UP" "$TLS" "$rw"); a=$(run "$UP" "$PLAIN" "$rw")
  fi
  echo "$r $rw $a $b $(python3 -c "print(round(${b%% *}/${a%% *},3))")"
done; done
grep -m1 'nbd TLS session' "$D/up-10998.log" || true
