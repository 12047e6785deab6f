#!/bin/sh
# node-init.sh — the real node's boot, run by the test VM's init at every
# boot (lvmvm.Options.Init): what a distribution's init and its units do
# on a Kubernetes node. It prepares the kernel (modules, sysctls, cgroup v2,
# shared mounts), mounts the node's system disk at /var/lib, activates the
# volume groups, and starts containerd, then the kubelet and kube-proxy,
# each started again when it exits (systemd's Restart=always). Its files
# are in /ctl/node (written by e2e/cluster/realnode.go); the binaries in
# /share/bin (those run per container copied into /usr/local/bin); the
# images to import in /share/node-images.tar. Logs go to /share/log/, which
# the host reads.
set -u
N=/ctl/node
mkdir -p /share/log
log() { echo "node-init: $(cut -d' ' -f1 /proc/uptime)s $*"; }
# What containerd executes for every container's start, kill, exec and
# delete (the runc shim, runc) and ctr live in the guest's own root, as a
# distribution installs them: the share is mounted without a cache, so
# each exec of a file on it reads the binary again through qemu. runc took
# 1.0 s that way against 0.1 s from the root on a quiet host, and 5 to 7 s
# against 0.4 to 1.9 s under load, which made a container's delete outlast
# containerd's fixed 10 s for handling its exit (docs/conformance.md).
mkdir -p /usr/local/bin
for b in containerd-shim-runc-v2 runc ctr; do
  cp /share/bin/$b /usr/local/bin/$b.tmp && mv /usr/local/bin/$b.tmp /usr/local/bin/$b ||
    { log "cannot copy $b into the root"; exit 1; }
done
export PATH=/usr/local/bin:/share/bin:/usr/sbin:/usr/bin

modprobe -a $(cat /etc/node-modules) || log "some modules did not load"
echo 1 > /proc/sys/net/ipv4/ip_forward
echo 1 > /proc/sys/net/bridge/bridge-nf-call-iptables
echo 1 > /proc/sys/net/bridge/bridge-nf-call-ip6tables
mkdir -p /sys/fs/cgroup
mount -t cgroup2 cgroup2 /sys/fs/cgroup
echo "+cpu +cpuset +memory +pids +io" > /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null ||
  echo "+cpu +memory +pids" > /sys/fs/cgroup/cgroup.subtree_control
: > /etc/resolv.conf                  # no DNS: nothing here resolves names
printf '127.0.0.1 localhost\n::1 localhost\n' > /etc/hosts   # containerd copies it into pods
echo "$(cat $N/name)" > /etc/hostname
hostname "$(cat $N/name)"
[ -s /etc/machine-id ] || cat /proc/sys/kernel/random/uuid | tr -d - > /etc/machine-id

# The system disk: formatted on the first boot, kept across reboots.
DISK=$(cat $N/disk)
blkid "$DISK" >/dev/null 2>&1 || mkfs.ext4 -q -F -E lazy_itable_init=1,lazy_journal_init=1 "$DISK"
mkdir -p /var/lib && mount -t ext4 "$DISK" /var/lib || { log "cannot mount $DISK"; exit 1; }
mkdir -p /var/lib/kubelet /var/lib/containerd /var/log/pods /etc/cni/net.d /run/containerd
# Mount propagation (Bidirectional mounts of the node plugin) needs shared
# mounts, as systemd makes them.
mount --make-rshared /
cp $N/cni.conflist /etc/cni/net.d/10-thinlvm-test.conflist
# What leaves the node from a pod leaves with the node's address (the VM
# network's gateway answers only that), as a CNI's masquerade does.
nft -f - <<EOF || log "pod masquerade not set"
table ip thinlvm-test-nat {
  chain postrouting {
    type nat hook postrouting priority srcnat;
    ip saddr $(cat $N/pod-cidr) oifname "eth0" masquerade
  }
}
EOF
# LVs come back active after a reboot, as lvm2's boot activation does.
lvm vgchange -ay >/dev/null 2>&1 || true
# The node's provisioning (RealNodeOptions.Prepare): e.g. the VG, once.
sh $N/prepare.sh || { log "prepare.sh failed"; exit 1; }

# service NAME ARGV...: run it, and again 1 s after it exits.
service() {
  name=$1; shift
  ( while :; do
      log "$name starting"
      "$@" >> /share/log/$name.log 2>&1 &
      echo $! > /run/$name.pid
      wait $!
      log "$name exited ($?)"
      sleep 1
    done ) &
}

service containerd containerd --config $N/containerd.toml
n=0; until ctr --address /run/containerd/containerd.sock version >/dev/null 2>&1; do
  n=$((n + 1)); [ $n -lt 600 ] || { log "containerd did not start"; exit 1; }; sleep 0.1; done
log "containerd ready"
# The images, once per content: containerd keeps them on the system disk.
want=$(cat $N/images.sum)
if [ "$(cat /var/lib/node-images.sum 2>/dev/null)" != "$want" ]; then
  ctr --address /run/containerd/containerd.sock -n k8s.io images import --local /share/node-images.tar >> /share/log/import.log 2>&1 ||
    { log "image import failed"; exit 1; }
  echo "$want" > /var/lib/node-images.sum
  log "images imported"
fi
service kubelet kubelet --config=$N/kubelet.yaml --kubeconfig=$N/kubelet.kubeconfig \
  --hostname-override="$(cat $N/name)" --node-ip=10.0.2.15 --node-labels="$(cat $N/labels)" --v=2
service kube-proxy kube-proxy --config=$N/kube-proxy.yaml --hostname-override="$(cat $N/name)" --v=1
log "services started"
wait
