#!/usr/bin/env bash
# build-image.sh — build the kernel + initramfs of the real-LVM test VM from
# Debian packages: Debian's kernel (dm-thin-pool and friends as modules),
# lvm2, thin-provisioning-tools, e2fsprogs, xfsprogs, qemu-img (run under
# prlimit) and busybox.
#
# Output: $LVMVM_DIR/image/{vmlinux|vmlinuz,initrd.img,MANIFEST}
#         (default $HOME/.cache/thinlvm/lvmvm). The project's own binaries are
#         not in the image: the harness passes them in through a 9p share.
# Idempotent: rebuilt only when this script, guest-init.sh or a package
# version changed (or with --force). Installs missing host packages (root).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=${LVMVM_DIR:-$HOME/.cache/thinlvm/lvmvm}
CACHE=$WORK/cache IMG=$WORK/image
FORCE=0; [ "${1:-}" = "--force" ] && FORCE=1

# Host tools, and the userspace copied into the guest (same Debian release:
# the guest reuses the host's binaries and the libraries ldd finds).
HOST_PKGS="qemu-system-x86 qemu-utils lvm2 dmeventd thin-provisioning-tools busybox-static
  xfsprogs e2fsprogs kmod cpio coreutils bash util-linux xz-utils binutils
  nftables containernetworking-plugins"
"$HERE/../ensure-packages.sh" $HOST_PKGS

# Kernel: the ABI package that linux-image-amd64 currently depends on (the
# mirror keeps only the current one). LVMVM_KPKG pins one while it is served.
mkdir -p "$CACHE" "$IMG"
kpkg() { apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}'; }
KPKG=${LVMVM_KPKG:-$(kpkg)}
if [ -z "$KPKG" ]; then apt-get update -qq; KPKG=$(kpkg); fi
[ -n "$KPKG" ] || { echo "build-image: cannot find the linux-image-amd64 kernel package" >&2; exit 1; }
KVER=${KPKG#linux-image-}
DEB=$(ls "$CACHE/${KPKG}_"*.deb 2>/dev/null | head -1 || true)
if [ -z "$DEB" ]; then
  (cd "$CACHE" && apt-get download "$KPKG" >/dev/null)
  DEB=$(ls "$CACHE/${KPKG}_"*.deb | head -1)
fi

KEY=$( { cat "$0" "$HERE/guest-init.sh"; basename "$DEB"; dpkg-query -W $HOST_PKGS; } | sha256sum | cut -c1-16)
if [ $FORCE = 0 ] && [ "$(cat "$IMG/.key" 2>/dev/null)" = "$KEY" ]; then
  echo "build-image: up to date ($IMG)"; exit 0; fi

START=$(date +%s.%N)
KX=$CACHE/kernel-$KVER
if [ ! -d "$KX/lib/modules/$KVER" ]; then
  rm -rf "$KX.tmp"; dpkg-deb -x "$DEB" "$KX.tmp"
  depmod -b "$KX.tmp" "$KVER"      # the .deb ships no modules.dep
  mv "$KX.tmp" "$KX"
fi

R=$WORK/rootfs; rm -rf "$R"        # staging root, merged-/usr
mkdir -p "$R"/usr/{bin,sbin,lib/x86_64-linux-gnu,lib64} "$R"/{etc/lvm,proc,sys,dev,run,tmp}
for d in bin sbin lib lib64; do ln -s usr/$d "$R/$d"; done

put() { local src=$1 dst=${2:-$1}; dst=/usr${dst#/usr}
  install -D -m 755 "$(readlink -f "$src")" "$R$dst"; }
putbin() { local f; put "$1"
  for f in $(ldd "$(readlink -f "$1")" 2>/dev/null | grep -o '/[^ ]*'); do
    [ -e "$R/usr${f#/usr}" ] || put "$f"; done; }

put /usr/bin/busybox
for a in $(/usr/bin/busybox --list-full); do
  a=usr/${a#usr/}; [ -e "$R/$a" ] || ln -s /usr/bin/busybox "$R/$a"; done
for b in /usr/sbin/lvm /usr/sbin/dmsetup /usr/sbin/dmeventd /usr/sbin/mke2fs \
    /usr/sbin/e2fsck /usr/sbin/resize2fs /usr/sbin/tune2fs /usr/sbin/dumpe2fs /usr/sbin/mkfs.xfs \
    /usr/sbin/xfs_growfs /usr/sbin/xfs_repair /usr/sbin/xfs_db /usr/sbin/xfs_io /usr/sbin/pdata_tools \
    /usr/bin/date /usr/bin/dd /usr/bin/sha256sum /usr/bin/stat /usr/sbin/blkdiscard \
    /usr/sbin/blkid /usr/sbin/blockdev /usr/bin/mount /usr/bin/umount /usr/bin/bash /usr/bin/qemu-img /usr/bin/prlimit \
    /usr/sbin/nft /usr/bin/findmnt /usr/bin/nsenter /usr/sbin/losetup; do
  [ -e "$b" ] || continue
  rm -f "$R$b"; putbin "$b"; done
for f in /usr/lib/x86_64-linux-gnu/device-mapper/*.so /usr/lib/x86_64-linux-gnu/libdevmapper-event-lvm2*.so*; do
  putbin "$f"; done                # dmeventd plugins are dlopen'ed
for l in $(find /usr/sbin -maxdepth 1 -type l \( -lname lvm -o -lname pdata_tools -o -lname mke2fs -o -lname e2fsck \)); do
  rm -f "$R$l"; ln -s "$(readlink "$l")" "$R$l"; done

# The real node's (a kubelet, containerd and kube-proxy in nftables mode):
# container root filesystems, the pod network, services.
NODE_MODS="overlay bridge br_netfilter veth nf_conntrack nf_nat nf_tables nft_ct nft_nat
  nft_chain_nat nft_masq nft_numgen nft_fib nft_fib_inet nft_fib_ipv4 nft_fib_ipv6
  nft_reject nft_reject_inet nft_reject_ipv4 nft_reject_ipv6 nft_limit nft_hash nft_redir
  nf_reject_ipv4 nf_reject_ipv6"
MODS="virtio_pci virtio_blk virtio_net 9pnet_virtio 9p crc32c-intel crc32c_generic
  dm-mod dm-bufio dm-bio-prison dm-persistent-data dm-thin-pool dm-snapshot dm-zero
  ext4 xfs loop $NODE_MODS"
for m in $(modprobe -d "$KX" -S "$KVER" --show-depends -a $MODS | awk '/^insmod/{print $2}' | sort -u); do
  install -D -m 644 "$m" "$R/usr/lib/modules/$KVER/${m#*/lib/modules/$KVER/}"; done
cp "$KX/lib/modules/$KVER"/modules.{order,builtin,builtin.modinfo} "$R/usr/lib/modules/$KVER/"
depmod -b "$R" "$KVER"

# No udev and no systemd in the guest: lvm creates /dev nodes itself and
# never waits for udev.
cat > "$R/etc/lvm/lvm.conf" <<'CONF'
devices {
    obtain_device_list_from_udev = 0
    external_device_info_source = "none"
    use_devicesfile = 0
    multipath_component_detection = 0
    md_component_detection = 0
}
activation {
    udev_sync = 0
    udev_rules = 0
    monitoring = 0
}
global {
    thin_check_executable = "/usr/sbin/thin_check"
    use_lvmlockd = 0
    event_activation = 0
}
CONF
# The CNI plugins of a real node's pod network (static Go programs).
for f in bridge host-local loopback; do install -D -m 755 /usr/lib/cni/$f "$R/opt/cni/bin/$f"; done
echo "$NODE_MODS" > "$R/etc/node-modules"
printf 'root:x:0:0:root:/root:/bin/sh\n' > "$R/etc/passwd"
printf 'root:x:0:\ndisk:x:6:\n' > "$R/etc/group"
install -m 755 "$HERE/guest-init.sh" "$R/init"

cp "$KX/boot/vmlinuz-$KVER" "$IMG/vmlinuz"
# qemu boots the plain ELF vmlinux through its PVH entry, which skips the
# in-guest decompression (~2.5 s under TCG).
rm -f "$IMG/vmlinux"
off=$(grep -abo $'\xfd7zXZ\x00' "$IMG/vmlinuz" | head -1 | cut -d: -f1 || true)
if [ -n "$off" ]; then
  { tail -c +$((off + 1)) "$IMG/vmlinuz" | xz -dc > "$IMG/vmlinux" 2>/dev/null; } || true
  readelf -n "$IMG/vmlinux" 2>/dev/null | grep -q 'note type: (0x00000012)' || rm -f "$IMG/vmlinux"
fi
# Uncompressed: under TCG the guest's gunzip costs more than the copy.
(cd "$R" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet) > "$IMG/initrd.img"
{ echo "kernel: $KPKG ($(basename "$DEB"))"; dpkg-query -W $HOST_PKGS; } > "$IMG/MANIFEST"
echo "$KEY" > "$IMG/.key"
echo "build-image: built $IMG in $(awk -v a="$START" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s"
