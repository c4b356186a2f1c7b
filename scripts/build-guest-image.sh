#!/usr/bin/env bash
# Build a tiny Linux guest from Debian packages, for tests and benchmarks that boot VMs from
# Basalt volumes (see ../shared/VM-GUEST.md for why each piece is as it is):
#   OUT/vmlinux      the Debian kernel, uncompressed (QEMU boots it through PVH, fast)
#   OUT/initrd.cpio  busybox and the virtio/ext4 modules; its /init mounts /dev/vda as the
#                    root image, runs the test the kernel command line asks for, powers off
#   OUT/disk.raw     the VM image: 256 MiB, an ext4 root (busybox, fio and its libraries)
#                    in the first 192 MiB; the last 64 MiB are a raw area guests write to
#   OUT/disk.qcow2   the same image as qcow2
#   OUT/nvmf-initrd.cpio  busybox, virtio-net, NVMe/TCP and ext4 modules; its /init
#                    (scripts/guest-nvmf-init.sh) attaches a volume over NVMe/TCP from the
#                    host and tests it (crates/cli/tests/nvmf.rs)
# Usage: scripts/build-guest-image.sh [OUT]   (default target/guest; kept when up to date)
# Needs: apt-get (to download the kernel, nbd-client and nvme-cli), busybox-static, fio, e2fsprogs, qemu-utils, python3.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/guest}
mkdir -p "$out"
out=$(cd "$out" && pwd)
# Tests that run at once (the NVMe/TCP tests, vm_boot) all ask for the image: one builds
# it, the others wait here and then find it up to date.
exec 9>"$out/.lock"
flock 9
stamp="$out/.built-by-$(cat scripts/build-guest-image.sh scripts/guest-nvmf-init.sh | sha256sum | cut -c1-16)"
if [ -e "$stamp" ] && [ -e "$out/disk.qcow2" ] && [ -e "$out/nvmf-initrd.cpio" ]; then
  echo "guest image up to date in $out"
  exit 0
fi
if ldd "$(command -v busybox || echo /bin/busybox)" >/dev/null 2>&1; then
  echo "build-guest-image: busybox is not the static one (install busybox-static)" >&2; exit 1
fi
for tool in busybox fio mke2fs qemu-img python3 apt-get dpkg-deb; do
  command -v "$tool" >/dev/null || { echo "build-guest-image: $tool is missing (run scripts/install-test-deps.sh)" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The kernel package linux-image-amd64 points at, downloaded and unpacked (not installed).
kpkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
[ -n "$kpkg" ] || { echo "build-guest-image: cannot tell which kernel linux-image-amd64 is" >&2; exit 1; }
(cd "$work" && apt-get download "$kpkg" >/dev/null 2>&1) || { echo "build-guest-image: apt-get download $kpkg failed" >&2; exit 1; }
dpkg-deb -x "$work"/"$kpkg"_*.deb "$work/k"
kver=${kpkg#linux-image-}
# vmlinuz is an xz-compressed kernel behind a boot stub; QEMU boots the uncompressed ELF
# through its PVH note, which skips the stub's slow decompression under TCG.
/usr/bin/python3 - "$work/k/boot/vmlinuz-$kver" "$out/vmlinux" <<'EOF'
import lzma, sys
data = open(sys.argv[1], 'rb').read()
start = data.find(b'\xfd7zXZ')
if start < 0:
    sys.exit('no xz stream in the kernel image')
elf = lzma.LZMADecompressor().decompress(data[start:])
if elf[:4] != b'\x7fELF':
    sys.exit('the kernel did not decompress to an ELF file')
open(sys.argv[2], 'wb').write(elf)
EOF

# An initramfs tree in DIR: busybox, devices, and the kernel modules MODS (in load order).
initramfs_tree() { # DIR MODS
  mkdir -p "$1"/{bin,dev,proc,sys,mnt,tmp,lib/modules}
  cp "$(command -v busybox)" "$1/bin/busybox"
  mknod -m 600 "$1/dev/console" c 5 1 2>/dev/null || true
  mknod -m 666 "$1/dev/null" c 1 3 2>/dev/null || true
  for m in $2; do
    f=$(find "$work/k/lib/modules/$kver" -name "$m.ko" | head -1)
    [ -n "$f" ] || { echo "build-guest-image: module $m not in $kpkg" >&2; exit 1; }
    cp "$f" "$1/lib/modules/"
  done
}

# Initramfs: busybox, the modules, /init.
init="$work/initrd"
mods="virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci virtio_blk crc16 crc32c_generic mbcache jbd2 ext4"
initramfs_tree "$init" "$mods"
cat > "$init/init" <<EOF
#!/bin/busybox sh
# Basalt test guest. Kernel command line: basalt.name=NAME (what this VM writes as its own
# data) and basalt.fio=SECONDS (0: no fio run).
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in $mods; do insmod /lib/modules/\$m.ko || echo "basalt-guest: insmod \$m failed"; done
echo "basalt-guest: init"
fail() { echo "basalt-guest: FAILED: \$*"; poweroff -f; }
name=\$(sed -n 's/.*basalt\.name=\([^ ]*\).*/\1/p' /proc/cmdline)
fio_s=\$(sed -n 's/.*basalt\.fio=\([0-9]*\).*/\1/p' /proc/cmdline)
i=0; while [ ! -b /dev/vda ] && [ \$i -lt 100 ]; do sleep 0.1; i=\$((i+1)); done
[ -b /dev/vda ] || fail "no /dev/vda"
mount -t ext4 /dev/vda /mnt || fail "mount the root image"
echo "basalt-guest: root image \$(cat /mnt/etc/basalt-guest)"
echo "\$name" > /mnt/vmdata || fail "write /vmdata"
# The raw area after the file system: this VM's name, 1 MiB of it, at 200 MiB.
yes "\$name" | head -c 1048576 > /tmp/raw
dd if=/tmp/raw of=/dev/vda bs=1M seek=200 || fail "write the raw area"
sync
if [ "\${fio_s:-0}" -gt 0 ]; then
  mount -t proc proc /mnt/proc; mount -o bind /dev /mnt/dev
  # 4k random writes then reads, QD16, direct, on a file of the root image; terse v3
  # field 8 is read IOPS, field 49 write IOPS.
  for rw in randwrite randread; do
    chroot /mnt /usr/bin/fio --name=guest --filename=/fio.dat --size=32m --bs=4k --iodepth=16 \\
      --ioengine=libaio --direct=1 --rw=\$rw --runtime=\$fio_s --time_based \\
      --output-format=terse --terse-version=3 > /tmp/fio.out 2>&1 || { cat /tmp/fio.out; fail "fio \$rw"; }
    if [ \$rw = randwrite ]; then field=49; else field=8; fi
    echo "basalt-guest: fio \$rw iops=\$(cut -d';' -f\$field /tmp/fio.out)"
  done
  echo "basalt-guest: fio ok"
  rm -f /mnt/fio.dat
  umount /mnt/dev; umount /mnt/proc
fi
umount /mnt || fail "unmount"
echo "basalt-guest: done"
poweroff -f
EOF
chmod +x "$init/init"
(cd "$init" && find . | busybox cpio -o -H newc -R 0:0 > "$out/initrd.cpio" 2>/dev/null)

# The NVMe/TCP guest's initramfs: the same busybox, the initiator's modules in load order.
nvinit="$work/nvmf-initrd"
nvmods="$mods failover net_failover virtio_net crct10dif_common crct10dif_generic crc-t10dif crc64 crc64_rocksoft_generic crc64-rocksoft t10-pi nvme-core nvme-fabrics nvme-tcp nbd"
initramfs_tree "$nvinit" "$nvmods"
echo "$nvmods" > "$nvinit/lib/modules/order"
cp scripts/guest-nvmf-init.sh "$nvinit/init"
chmod +x "$nvinit/init"
(cd "$nvinit" && find . | busybox cpio -o -H newc -R 0:0 > "$out/nvmf-initrd.cpio" 2>/dev/null)

# The VM image's root file system: busybox, fio with every library it loads.
root="$work/root"
mkdir -p "$root"/{bin,etc,proc,sys,dev,tmp,usr/bin}
cp "$(command -v busybox)" "$root/bin/busybox"
cp "$(command -v fio)" "$root/usr/bin/fio"
for lib in $(ldd "$(command -v fio)" | grep -o '/[^ ]*'); do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done
# A tool from Debian packages into the root image as /usr/sbin/NAME, with every library it
# loads (those the host lacks come from the same packages).
add_tool() { # NAME PACKAGE...
  local name=$1 dir="$work/pkg-$1" bin libpath lib dest
  shift
  (cd "$work" && apt-get download "$@" >/dev/null 2>&1) \
    || { echo "build-guest-image: apt-get download $* failed" >&2; exit 1; }
  for p in "$@"; do dpkg-deb -x "$work/$p"_*.deb "$dir"; done
  bin=$(find "$dir" -path "*bin/$name" -type f | head -1)
  [ -n "$bin" ] || { echo "build-guest-image: no $name in $*" >&2; exit 1; }
  mkdir -p "$root/usr/sbin"
  cp "$bin" "$root/usr/sbin/$name"
  libpath=$(find "$dir" -name '*.so*' -printf '%h\n' | sort -u | tr '\n' ':')
  for lib in $(LD_LIBRARY_PATH="$libpath" ldd "$bin" | grep -o '/[^ ]*'); do
    case "$lib" in "$dir"/*) dest="/usr/lib/x86_64-linux-gnu/$(basename "$lib")" ;; *) dest="$lib" ;; esac
    mkdir -p "$root$(dirname "$dest")"
    cp -L "$lib" "$root$dest"
  done
}
# The kernel NBD client's tool (the NVMe/TCP test compares the two initiators in one VM)
# and nvme-cli (the test's `nvme discover`).
add_tool nbd-client nbd-client libnl-3-200 libnl-genl-3-200
add_tool nvme nvme-cli libnvme1
echo "basalt-test-image-v1" > "$root/etc/basalt-guest"
rm -f "$out/disk.raw"
truncate -s 256M "$out/disk.raw"
mke2fs -q -t ext4 -L basalt-guest -d "$root" -F "$out/disk.raw" 192M
qemu-img convert -f raw -O qcow2 "$out/disk.raw" "$out/disk.qcow2"
rm -f "$out"/.built-by-*
touch "$stamp"
echo "guest image built in $out ($kpkg)"
