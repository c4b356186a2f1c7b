#!/bin/busybox sh
# /init of the NVMe/TCP test guest (scripts/build-guest-image.sh puts it in
# nvmf-initrd.cpio). The guest's kernel is the initiator; the target runs on the host,
# reached at 10.0.2.2 through QEMU user networking. Kernel command line:
#   basalt.port=PORT   the target's port on the host
#   basalt.vol=NAME    the volume (subsystem nqn.2026-01.io.basalt:NAME)
#   basalt.fio=SECONDS fio run length (needs the guest image as /dev/vda; 0: none)
#   basalt.grow=BYTES  wait for the namespace to grow to this size (the host resizes)
#   basalt.paths=2     during fio verify, a second controller (path) to the subsystem;
#                      both must report ANA optimized, and it is removed mid-fio
#   basalt.addr=IP     the target's address (default 10.0.2.2, the host)
#   basalt.addr2=IP    with paths=2: the second path goes to another gateway at this
#                      address, and the host kills the first one mid-fio instead
#   basalt.guarded=NAME a volume whose access list names only host
#                      nqn.2014-08.org.nvmexpress:uuid:basalt-guest-allowed: a connect
#                      as ...:basalt-guest-denied must fail, one as the allowed host work
#   basalt.nbd=PORT    with fio: IOPS over NVMe/TCP and over the kernel NBD client (the
#                      host's NBD PORT), same volume, alternating (the issue's comparison)
# Every step prints a "basalt-guest:" line the host test looks for.
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in $(cat /lib/modules/order); do
  insmod /lib/modules/$m.ko || echo "basalt-guest: insmod $m failed"
done
echo "basalt-guest: init"
fail() { echo "basalt-guest: FAILED: $*"; poweroff -f; sleep 10; }
arg() { sed -n "s/.*basalt\.$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
port=$(arg port); vol=$(arg vol); fio_s=$(arg fio); grow=$(arg grow); nbd=$(arg nbd); paths=$(arg paths); addr=$(arg addr); addr2=$(arg addr2)
guarded=$(arg guarded)
[ -n "$addr" ] || addr=10.0.2.2
ip link set lo up; ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0; ip route add default via 10.0.2.2
[ -c /dev/nvme-fabrics ] || fail "no /dev/nvme-fabrics (nvme-fabrics not loaded)"

# Discovery: the kernel connects a discovery controller and identifies it.
echo "transport=tcp,traddr=$addr,trsvcid=$port,nqn=nqn.2014-08.org.nvmexpress.discovery" \
  > /dev/nvme-fabrics || fail "connect the discovery controller"
disc=$(for c in /sys/class/nvme/nvme*; do
  grep -q discovery "$c/subsysnqn" 2>/dev/null && echo "$c"; done | head -1)
[ -n "$disc" ] || fail "no discovery controller in sysfs"
echo "basalt-guest: discovery $(cat "$disc/subsysnqn") model $(cat "$disc/model")"
echo 1 > "$disc/delete_controller"

# A volume with an access list: the host it does not name is refused at connect.
if [ -n "$guarded" ]; then
  gnqn="nqn.2026-01.io.basalt:$guarded"
  host="nqn.2014-08.org.nvmexpress:uuid:basalt-guest"
  if echo "transport=tcp,traddr=$addr,trsvcid=$port,nqn=$gnqn,hostnqn=$host-denied" \
      > /dev/nvme-fabrics 2>/dev/null; then
    fail "a host outside the access list of $guarded attached it"
  fi
  echo "basalt-guest: guarded refused $host-denied"
  echo "transport=tcp,traddr=$addr,trsvcid=$port,nqn=$gnqn,hostnqn=$host-allowed" \
    > /dev/nvme-fabrics || fail "the allowed host could not attach $guarded"
  for c in /sys/class/nvme/nvme*; do
    [ "$(cat "$c/subsysnqn")" = "$gnqn" ] && echo 1 > "$c/delete_controller"
  done
  echo "basalt-guest: guarded allowed $host-allowed"
fi

# The volume, with header and data digests.
nqn="nqn.2026-01.io.basalt:$vol"
echo "transport=tcp,traddr=$addr,trsvcid=$port,nqn=$nqn,hdr_digest,data_digest" \
  > /dev/nvme-fabrics || fail "connect $nqn"
dev=""
i=0; while [ -z "$dev" ] && [ $i -lt 100 ]; do
  dev=$(ls /sys/block | grep -E '^nvme[0-9]+n[0-9]+$' | head -1); [ -n "$dev" ] || sleep 0.1; i=$((i+1))
done
[ -n "$dev" ] || fail "no nvme block device"
ctrl=$(for c in /sys/class/nvme/nvme*; do
  [ "$(cat "$c/subsysnqn")" = "$nqn" ] && echo "$c"; done | head -1)
sectors=$(cat /sys/block/$dev/size)
echo "basalt-guest: connected $dev $(cat "$ctrl/transport") $(cat "$ctrl/model") size $((sectors * 512)) lbs $(cat /sys/block/$dev/queue/logical_block_size)"
echo "basalt-guest: uuid $(cat /sys/block/$dev/uuid 2>/dev/null || cat /sys/block/$dev/device/uuid 2>/dev/null)"

# A pattern: 4 MiB of 0xa5 at 0, 4 MiB of random bytes at 4 MiB; read back with O_DIRECT.
dd if=/dev/zero bs=1M count=4 2>/dev/null | tr '\000' '\245' > /tmp/a5
dd if=/dev/urandom of=/tmp/rnd bs=1M count=4 2>/dev/null
dd if=/tmp/a5 of=/dev/$dev bs=1M oflag=direct 2>/dev/null || fail "write the 0xa5 pattern"
dd if=/tmp/rnd of=/dev/$dev bs=1M seek=4 oflag=direct 2>/dev/null || fail "write the random pattern"
dd if=/dev/$dev of=/tmp/back bs=1M count=8 iflag=direct 2>/dev/null || fail "read back"
cat /tmp/a5 /tmp/rnd | cmp - /tmp/back || fail "data read back differs"
echo "basalt-guest: pattern ok sha256 $(sha256sum /tmp/rnd | cut -d' ' -f1)"
rm -f /tmp/a5 /tmp/rnd /tmp/back

# Trim: 1 MiB of ones at 16 MiB, then discarded.
dd if=/dev/zero bs=1M count=1 2>/dev/null | tr '\000' '\377' | dd of=/dev/$dev bs=1M seek=16 oflag=direct 2>/dev/null
blkdiscard -o $((16 << 20)) -l $((1 << 20)) /dev/$dev || fail "blkdiscard"
dd if=/dev/$dev bs=1M skip=16 count=1 iflag=direct 2>/dev/null | cmp - /dev/zero 2>&1 | grep -q EOF \
  || fail "a discarded range does not read as zeroes"
echo "basalt-guest: trim ok"

if [ "${fio_s:-0}" -gt 0 ]; then
  i=0; while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
  mount -t ext4 /dev/vda /mnt || fail "mount the guest image (fio)"
  mount -t proc proc /mnt/proc; mount -o bind /dev /mnt/dev; mount -t sysfs sys /mnt/sys
  # nvme-cli reads the discovery log through a discovery controller of its own.
  chroot /mnt /usr/sbin/nvme discover -t tcp -a "$addr" -s "$port" \
    -q nqn.2014-08.org.nvmexpress:uuid:basalt-guest > /tmp/disc.out 2>&1 \
    || { cat /tmp/disc.out; fail "nvme discover"; }
  echo "basalt-guest: nvme discover lists $(sed -n 's/^subnqn: *//p' /tmp/disc.out | tr '\n' ' ')"
  # Verified random writes (crc32c per block, read back and checked by fio) away from the
  # pattern.
  if [ "$paths" = 2 ]; then
    # A second path: another controller of the same subsystem. The kernel's native
    # multipath puts both under /dev/$dev and reads each one's ANA state.
    if [ -n "$addr2" ]; then second="traddr=$addr2,trsvcid=$port"
    else second="traddr=$addr,trsvcid=$port,duplicate_connect"; fi
    echo "transport=tcp,$second,nqn=$nqn" > /dev/nvme-fabrics || fail "connect a second path"
    i=0; while [ "$(ls /sys/block/$dev/slaves 2>/dev/null | wc -l)" -lt 2 ] \
      && [ "$(ls -d /sys/block/nvme*c*n1 2>/dev/null | wc -l)" -lt 2 ] && [ $i -lt 100 ]; do
      sleep 0.1; i=$((i+1)); done
    states=$(cat /sys/block/nvme*c*n1/ana_state 2>/dev/null | tr '\n' ' ')
    echo "basalt-guest: paths $(ls -d /sys/block/nvme*c*n1 | wc -l) ana $states"
    ctrl2=$(for c in /sys/class/nvme/nvme*; do
      [ "$(cat "$c/subsysnqn")" = "$nqn" ] && [ "$c" != "$ctrl" ] && echo "$c"; done | head -1)
    [ -n "$ctrl2" ] || fail "no second controller"
  fi
  chroot /mnt /usr/bin/fio --name=verify --filename=/dev/$dev --offset=64m --size=32m \
    --bs=4k --iodepth=16 --ioengine=libaio --direct=1 --rw=randwrite --verify=crc32c \
    --do_verify=1 --verify_fatal=1 > /tmp/fio.out 2>&1 &
  fio_pid=$!
  if [ "$paths" = 2 ] && [ -n "$addr2" ]; then
    echo "basalt-guest: fio running on two gateways"
  elif [ "$paths" = 2 ]; then
    sleep 2
    echo 1 > "$ctrl2/delete_controller" || fail "remove the second path"
    echo "basalt-guest: removed a path mid-fio"
  fi
  wait $fio_pid || { cat /tmp/fio.out; fail "fio verify"; }
  echo "basalt-guest: fio verify ok"
  if [ "$paths" = 2 ] && [ -n "$addr2" ]; then
    # The killed gateway's controller is reconnecting, the other one live.
    echo "basalt-guest: controller states $(cat /sys/class/nvme/nvme*/state | tr '\n' ' ')"
  fi
  umount /mnt/sys; umount /mnt/dev; umount /mnt/proc; umount /mnt
fi

if [ -n "$grow" ]; then
  echo "basalt-guest: waiting for size $grow"
  i=0
  while [ $(( $(cat /sys/block/$dev/size) * 512 )) -ne "$grow" ] && [ $i -lt 300 ]; do
    sleep 0.1; i=$((i+1))
  done
  size=$(( $(cat /sys/block/$dev/size) * 512 ))
  [ "$size" -eq "$grow" ] || fail "the namespace did not grow (size $size)"
  echo "basalt-guest: grew to $size"
fi

echo 1 > "$ctrl/delete_controller" || fail "disconnect"
echo "basalt-guest: disconnected"

# IOPS, NVMe/TCP (reconnected without digests, as a host would run) against the kernel NBD
# client, same volume, same VM, alternating: 4k random writes then reads, QD16.
if [ "${fio_s:-0}" -gt 0 ] && [ -n "$nbd" ]; then
  mount -t ext4 /dev/vda /mnt || fail "mount the guest image (fio)"
  mount -t proc proc /mnt/proc; mount -o bind /dev /mnt/dev
  # Terse v3: field 8 is read IOPS, field 49 write IOPS.
  iops() { # iops LABEL DEVICE: 64 MiB at 128 MiB
    for rw in randwrite randread; do
      chroot /mnt /usr/bin/fio --name=iops --filename=$2 --offset=128m --size=64m \
        --bs=4k --iodepth=16 --ioengine=libaio --direct=1 --rw=$rw --runtime=$fio_s --time_based \
        --output-format=terse --terse-version=3 > /tmp/fio.out 2>&1 || { cat /tmp/fio.out; fail "fio $1 $rw"; }
      if [ $rw = randwrite ]; then field=49; else field=8; fi
      echo "basalt-guest: fio $1 $rw iops=$(cut -d';' -f$field /tmp/fio.out)"
    done
  }
  # One attachment at a time: the NVMe host and the NBD client are two clients to the
  # volume's writer lock (the target cannot tell they are one machine).
  for round in 1 2; do
    echo "transport=tcp,traddr=$addr,trsvcid=$port,nqn=$nqn" > /dev/nvme-fabrics || fail "reconnect $nqn"
    i=0; dev=""; while [ -z "$dev" ] && [ $i -lt 100 ]; do
      dev=$(ls /sys/block | grep -E '^nvme[0-9]+n[0-9]+$' | head -1); [ -n "$dev" ] || sleep 0.1; i=$((i+1))
    done
    [ -n "$dev" ] || fail "no nvme block device after reconnecting"
    iops nvmf /dev/$dev
    for c in /sys/class/nvme/nvme*; do echo 1 > "$c/delete_controller"; done
    chroot /mnt /usr/sbin/nbd-client 10.0.2.2 "$nbd" /dev/nbd0 -N "$vol" > /tmp/nbd.out 2>&1 \
      || { cat /tmp/nbd.out; fail "nbd-client"; }
    iops nbd /dev/nbd0
    chroot /mnt /usr/sbin/nbd-client -d /dev/nbd0 > /dev/null 2>&1
  done
  umount /mnt/dev; umount /mnt/proc; umount /mnt
fi
echo "basalt-guest: done"
poweroff -f
