#!/bin/sh
# /init of the real-LVM test VM (busybox ash, PID 1): mount the pseudo
# filesystems, load the virtio, 9p, device-mapper and filesystem modules,
# mount the control share (/ctl) and the binaries share (/share), bring up
# eth0, run /ctl/cmd, write its exit code to /ctl/rc and power off.
export PATH=/usr/sbin:/usr/bin HOME=/root TERM=dumb
# A real node's containers are started with pivot_root, which cannot leave
# the initramfs (rootfs), and without it a container's root moved over / of
# a shared mount tree lands on the node's own /. With lvmvm.tmpfsroot on the
# kernel command line PID 1 first copies the root into a tmpfs and
# switches to it (about 60 MB).
if [ "$$" = 1 ] && [ ! -e /.tmpfsroot ]; then
  mount -t proc proc /proc
  if grep -q lvmvm.tmpfsroot /proc/cmdline; then
    mkdir -p /newroot && mount -t tmpfs -o mode=755 tmpfs /newroot
    for f in /*; do case $f in /newroot|/proc|/sys|/dev) ;; *) cp -a "$f" /newroot/ ;; esac; done
    mkdir -p /newroot/proc /newroot/sys /newroot/dev && : > /newroot/.tmpfsroot
    umount /proc
    exec switch_root /newroot /init
  fi
  umount /proc
fi
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm /run /tmp /ctl /share /root /mnt
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
ln -sf /proc/self/fd /dev/fd
ln -sf /proc/self/mounts /etc/mtab
mkdir -p /run/lvm /run/lock/lvm /etc/lvm/backup /etc/lvm/archive
hostname lvmvm
modprobe -a virtio_pci virtio_blk virtio_net 9pnet_virtio 9p
# busybox mount does not autoload filesystem modules: load them all here.
modprobe -a crc32c-intel dm-mod dm-bufio dm-bio-prison dm-persistent-data \
    dm-thin-pool dm-snapshot dm-zero ext4 xfs loop
o=trans=virtio,version=9p2000.L,msize=262144
mount -t 9p -o $o ctl /ctl || { echo "LVMVM: cannot mount the control share"; poweroff -f; }
if grep -qs share /sys/bus/virtio/drivers/9pnet_virtio/*/mount_tag; then
  mount -t 9p -o $o share /share; fi
ip link set lo up
if [ -d /sys/class/net/eth0 ]; then
  ip addr add 10.0.2.15/24 dev eth0 && ip link set eth0 up
fi
n=0; while [ $n -lt 50 ] && [ "$(ls /sys/block | grep -c '^vd')" -lt "$(cat /ctl/ndisks 2>/dev/null || echo 0)" ]; do
  sleep 0.1; n=$((n + 1)); done
echo "LVMVM_READY uptime=$(cut -d' ' -f1 /proc/uptime)"
cd /share 2>/dev/null || cd /
sh /ctl/cmd < /dev/null
rc=$?
echo "$rc" > /ctl/rc
echo "LVMVM_EXIT=$rc"
cd /
sync
umount /share /ctl 2>/dev/null
poweroff -f
