package node

import (
	"context"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/e2e/cluster"
)

// TestJoined: the kubelet joined as itself, found thinlvm's plugin through
// its plugin watcher (the agent's registration socket) and wrote what a
// driver's registration makes: the CSINode entry with the topology key,
// and the node's topology label from NodeGetInfo.
func TestJoined(t *testing.T) {
	ctx := context.Background()
	csiNode := &storagev1.CSINode{}
	if err := k.Client.Get(ctx, client.ObjectKey{Name: Node}, csiNode); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(csiNode.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == thinlvmv1.DriverName })
	if i < 0 {
		t.Fatalf("CSINode %s has no %s driver: %+v", Node, thinlvmv1.DriverName, csiNode.Spec.Drivers)
	}
	if d := csiNode.Spec.Drivers[i]; d.NodeID != Node || !slices.Contains(d.TopologyKeys, thinlvmv1.TopologyKey) {
		t.Errorf("CSINode driver %+v: want node ID %s and topology key %s", d, Node, thinlvmv1.TopologyKey)
	}
	node := &corev1.Node{}
	if err := k.Client.Get(ctx, client.ObjectKey{Name: Node}, node); err != nil {
		t.Fatal(err)
	}
	if node.Labels[thinlvmv1.TopologyKey] != Node {
		t.Errorf("node label %s = %q, want %q (from NodeGetInfo)", thinlvmv1.TopologyKey, node.Labels[thinlvmv1.TopologyKey], Node)
	}
	if _, fake := node.Annotations["kwok.x-k8s.io/node"]; fake {
		t.Errorf("node %s is kwok's", Node)
	}
	if v := node.Status.NodeInfo.ContainerRuntimeVersion; !strings.HasPrefix(v, "containerd://2.") {
		t.Errorf("container runtime %q, want containerd 2", v)
	}
	// The DaemonSet's pod runs there, every container ready, as the
	// kubelet reports it.
	pods := &corev1.PodList{}
	if err := k.Client.List(ctx, pods, client.InNamespace(cluster.Namespace), client.MatchingFields{"spec.nodeName": Node}); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 || pods.Items[0].Status.Phase != corev1.PodRunning {
		t.Fatalf("thinlvm's pods on %s: %+v", Node, podPhases(pods.Items))
	}
	for _, cs := range pods.Items[0].Status.ContainerStatuses {
		if !cs.Ready {
			t.Errorf("container %s of %s not ready: %+v", cs.Name, pods.Items[0].Name, cs.State)
		}
	}
	// What a failing test prints of the node: its processes, containerd's
	// tasks and the thin pool.
	state := guestState()
	for _, want := range []string{"kubelet --config=", "RUNNING", "thin-pool", "pool0"} {
		if !strings.Contains(state, want) {
			t.Errorf("the node's state for failure messages lacks %q:%s", want, state)
		}
	}
}

// TestFilesystemVolume: on xfs and ext4 (one claim each, both in each
// pod), a pod writes, is deleted, and the next pods on the node read the
// same bytes; the pod's fsGroup owns the volumes' roots; a subPath is a
// directory of the volume; a readOnly claim refuses writes.
func TestFilesystemVolume(t *testing.T) {
	ctx := context.Background()
	ext4 := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "thinlvm-ext4"}, Provisioner: thinlvmv1.DriverName,
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer), AllowVolumeExpansion: ptr.To(true),
		Parameters: map[string]string{thinlvmv1.DeviceClassParameter: "ssd", "csi.storage.k8s.io/fstype": "ext4"}}
	if err := cluster.IgnoreAlreadyExists(k.Client.Create(ctx, ext4)); err != nil {
		t.Fatal(err)
	}
	// /v0 is xfs, /v1 ext4.
	fs := []string{"xfs", "ext4"}
	newClaim(t, "fs-xfs", cluster.FilesystemClass, "1Gi", false)
	newClaim(t, "fs-ext4", ext4.Name, "1Gi", false)
	claims := []string{"fs-xfs", "fs-ext4"}
	writer := workload("fs-writer", false, "for d in /v0 /v1; do dd if=/dev/urandom of=$d/data bs=1M count=8 2>/dev/null && "+
		"mkdir -p $d/sub && echo in-sub > $d/sub/f && sync && echo $(sha256sum $d/data | cut -c1-64) $(stat -c %g $d) "+
		"$(awk -v d=$d '$2 == d {print $3}' /proc/mounts) || exit 1; done", claims...)
	writer.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: ptr.To(int64(4321))}
	out, err := tryPod(t, writer)
	if err != nil {
		t.Fatal(err)
	}
	var sums []string
	for i, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if i > 1 || len(f) != 3 || f[1] != "4321" || f[2] != fs[i] {
			t.Fatalf("writer printed %q: want per volume the data's sha256, the volume root's group 4321 (fsGroup), xfs then ext4", out)
		}
		sums = append(sums, f[0])
	}
	if len(sums) != 2 {
		t.Fatalf("writer printed %q: want a line per volume", out)
	}
	// A subPath is a directory of the volume: the pod sees sub/ as its
	// mount, and writes there.
	sub := workload("fs-subpath", false, "cat /v0/f /v1/f && echo from-subpath > /v0/g && echo from-subpath > /v1/g", claims...)
	for i := range sub.Spec.Containers[0].VolumeMounts {
		sub.Spec.Containers[0].VolumeMounts[i].SubPath = "sub"
	}
	if out, err := tryPod(t, sub); err != nil || out != "in-sub\nin-sub" {
		t.Errorf("subPath sub: %q (%v)", out, err)
	}
	// The next pod, with the claims readOnly, reads the writer's bytes and
	// the subPath pod's files, and cannot write.
	ro := workload("fs-ro", false, "for d in /v0 /v1; do sha256sum $d/data | cut -c1-64 && cat $d/sub/g && "+
		"if touch $d/x; then echo WROTE; fi; done", claims...)
	for i := range ro.Spec.Volumes {
		ro.Spec.Volumes[i].PersistentVolumeClaim.ReadOnly = true
	}
	out, err = tryPod(t, ro)
	want := []string{sums[0], "from-subpath", sums[1], "from-subpath"}
	var got []string
	for _, l := range strings.Split(out, "\n") {
		if !strings.Contains(l, "Read-only file system") {
			got = append(got, l)
		}
	}
	if err != nil || !slices.Equal(got, want) || strings.Count(out, "Read-only file system") != 2 {
		t.Errorf("the next pod (readOnly) printed %q (%v): want per volume the data's sha256 (%v), what the subPath pod wrote, "+
			"and the write refused", out, err, sums)
	}
}

// TestBlockVolume: a pod sees its raw block volume at its devicePath,
// writes a pattern and reads it back; the next pod reads the same.
func TestBlockVolume(t *testing.T) {
	newClaim(t, "blk", cluster.BlockClass, "256Mi", true)
	out := runPod(t, "blk-writer", true, "test -b /dev/v0 && blockdev --getsize64 /dev/v0 && "+
		"dd if=/dev/urandom of=/tmp/p bs=1M count=4 2>/dev/null && dd if=/tmp/p of=/dev/v0 bs=1M seek=100 conv=fsync 2>/dev/null && "+
		"sha256sum /tmp/p | cut -c1-64 && dd if=/dev/v0 bs=1M skip=100 count=4 2>/dev/null | sha256sum | cut -c1-64", "blk")
	f := strings.Fields(out)
	if len(f) != 3 || f[0] != strconv.Itoa(256<<20) || f[1] != f[2] {
		t.Fatalf("block pod printed %q: want the size 256 MiB and the pattern read back", out)
	}
	if again := runPod(t, "blk-reader", true, "dd if=/dev/v0 bs=1M skip=100 count=4 2>/dev/null | sha256sum | cut -c1-64", "blk"); again != f[1] {
		t.Errorf("the next pod read %s, want %s", again, f[1])
	}
}

// TestOnlineExpansion: a claim grows while its pod runs (the first
// steady pod's, xfs); the kubelet's NodeExpandVolume grows the file
// system, and the pod sees the new size.
func TestOnlineExpansion(t *testing.T) {
	p := sharedSteady(t)[0]
	df := func(s string) int64 { return sizeKiB(t, strings.Fields(s)[1]) }
	twoFields := func(s string) bool { return len(strings.Fields(s)) == 2 }
	before := df(lastLine(t, p.pod, "df=", twoFields))
	growClaim(t, p.claim, "1Gi")
	after := df(lastLine(t, p.pod, "df=", func(s string) bool { return twoFields(s) && df(s) > before+(256<<10) }))
	if after < 900<<10 {
		t.Errorf("the pod sees %d KiB after growing to 1Gi (was %d)", after, before)
	}
	waitGrown(t, p.claim, "1Gi")
}

func sizeKiB(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		t.Fatalf("size %q: %v", s, err)
	}
	return n
}

// TestVolumeStats: the kubelet's kubelet_volume_stats_* of a claim come
// from NodeGetVolumeStats and follow what the pod wrote: they equal what
// df in the pod reports of the same file system (the first steady pod's,
// 4 MiB written and synced).
func TestVolumeStats(t *testing.T) {
	p := sharedSteady(t)[0]
	var used, capacity, dfUsed, dfSize float64
	// The kubelet refreshes its volume stats every 30 s here
	// (volumeStatsAggPeriod): wait until they and df agree (the pod
	// prints df every 10 s).
	err := k.WaitFor(context.Background(), "the kubelet's stats of claim "+p.claim+" to match df in the pod", 4*time.Minute, func() (bool, error) {
		df := strings.Fields(lastPrinted(podLog(t, p.pod), "df="))
		if len(df) != 2 {
			return false, nil
		}
		dfUsed, dfSize = float64(sizeKiB(t, df[0])<<10), float64(sizeKiB(t, df[1])<<10)
		m := kubeletMetrics(t)
		used = metric(m, "kubelet_volume_stats_used_bytes", p.claim)
		capacity = metric(m, "kubelet_volume_stats_capacity_bytes", p.claim)
		// Within 1 MiB: the file system's own writes (its log) between df
		// and the kubelet's last NodeGetVolumeStats.
		return used >= 4<<20 && math.Abs(used-dfUsed) <= 1<<20 && capacity == dfSize, nil
	})
	if err != nil {
		t.Errorf("%v: kubelet_volume_stats: used %v bytes, capacity %v; df in the pod: used %v, size %v", err, used, capacity, dfUsed, dfSize)
	}
}

// metric is the value of a sample of name for claim in "default".
func metric(text, name, claim string) float64 {
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, name+"{") && strings.Contains(l, `persistentvolumeclaim="`+claim+`"`) && strings.Contains(l, `namespace="default"`) {
			f := strings.Fields(l)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			return v
		}
	}
	return -1
}

// TestReadWriteOncePod: a second pod for a ReadWriteOncePod claim in use
// (the first steady pod's) is refused by the scheduler and never mounted.
func TestReadWriteOncePod(t *testing.T) {
	ctx := context.Background()
	p := sharedSteady(t)[0]
	before := mounts(t, p.claim)
	second := workload("rwop-2", false, "sleep 100000", p.claim)
	if err := k.Client.Create(ctx, second); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deletePod(t, second) })
	err := k.WaitFor(ctx, "the scheduler to refuse rwop-2", 2*time.Minute, func() (bool, error) {
		if err := k.Client.Get(ctx, client.ObjectKeyFromObject(second), second); err != nil {
			return false, err
		}
		for _, c := range second.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := mounts(t, p.claim); second.Spec.NodeName != "" || n != before {
		t.Errorf("rwop-2 placed on %q; the volume is mounted %d times, %d before", second.Spec.NodeName, n, before)
	}
}
