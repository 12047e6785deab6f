package cluster_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
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
	if err := k.Client.Get(ctx, client.ObjectKey{Name: vmNode}, csiNode); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(csiNode.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == thinlvmv1.DriverName })
	if i < 0 {
		t.Fatalf("CSINode %s has no %s driver: %+v", vmNode, thinlvmv1.DriverName, csiNode.Spec.Drivers)
	}
	if d := csiNode.Spec.Drivers[i]; d.NodeID != vmNode || !slices.Contains(d.TopologyKeys, thinlvmv1.TopologyKey) {
		t.Errorf("CSINode driver %+v: want node ID %s and topology key %s", d, vmNode, thinlvmv1.TopologyKey)
	}
	node := &corev1.Node{}
	if err := k.Client.Get(ctx, client.ObjectKey{Name: vmNode}, node); err != nil {
		t.Fatal(err)
	}
	if node.Labels[thinlvmv1.TopologyKey] != vmNode {
		t.Errorf("node label %s = %q, want %q (from NodeGetInfo)", thinlvmv1.TopologyKey, node.Labels[thinlvmv1.TopologyKey], vmNode)
	}
	if _, fake := node.Annotations["kwok.x-k8s.io/node"]; fake {
		t.Errorf("node %s is kwok's", vmNode)
	}
	if v := node.Status.NodeInfo.ContainerRuntimeVersion; !strings.HasPrefix(v, "containerd://2.") {
		t.Errorf("container runtime %q, want containerd 2", v)
	}
	// The DaemonSet's pod runs there, every container ready, as the
	// kubelet reports it.
	pods := &corev1.PodList{}
	if err := k.Client.List(ctx, pods, client.InNamespace(cluster.Namespace), client.MatchingFields{"spec.nodeName": vmNode}); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 || pods.Items[0].Status.Phase != corev1.PodRunning {
		t.Fatalf("thinlvm's pods on %s: %+v", vmNode, podPhases(pods.Items))
	}
	for _, cs := range pods.Items[0].Status.ContainerStatuses {
		if !cs.Ready {
			t.Errorf("container %s of %s not ready: %+v", cs.Name, pods.Items[0].Name, cs.State)
		}
	}
	// What a failing test prints of the node: its processes, containerd's
	// tasks and the thin pool. (Not whether ctr answered: loaded from the
	// 9p share under a busy emulated CPU, it once took over 20 s, and a
	// test failed on its diagnostics alone.)
	state := guestState()
	for _, want := range []string{"kubelet --config=", "== containerd's tasks", "thin-pool", "pool0"} {
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

// The disruptive tests, in this order and after the others: the kubelet,
// the node plugin and the whole node go away under running pods. (The
// suite's tests run one at a time, docs/conformance.md.)

// A steady pod writes 4 MiB once and then prints the checksum of what its
// volume holds every 10 s: "sum=<sha256>"; a Filesystem one also prints
// what df reports of its volume: "df=<used KiB> <size KiB>". (Five pods
// hashing 8 MiB every 2 s kept the node's emulated CPU busy, and starved
// containerd's handling of other containers' exits, docs/conformance.md.)
func steady(name string, block bool, claim string) *corev1.Pod {
	target, read := "/v0/data", "cat /v0/data"
	if block {
		target, read = "/dev/v0", "dd if=/dev/v0 bs=1M count=4 2>/dev/null"
	}
	script := fmt.Sprintf("if [ ! -e /v0/.written ]; then dd if=/dev/urandom of=%s bs=1M count=4 conv=fsync 2>/dev/null; fi; ", target)
	if block {
		script = fmt.Sprintf("dd if=/dev/v0 bs=1 count=7 2>/dev/null | grep -q written || { dd if=/dev/urandom of=/tmp/p bs=1M count=4 2>/dev/null; "+
			"printf written | dd of=/tmp/p conv=notrunc 2>/dev/null; dd if=/tmp/p of=%s bs=1M conv=fsync 2>/dev/null; }; ", target)
	} else {
		script += "touch /v0/.written; sync; "
	}
	df := ""
	if !block {
		df = "; echo df=$(df -P -k /v0 | awk 'NR==2 {print $3, $2}')"
	}
	script += "while :; do echo sum=$(" + read + " | sha256sum | cut -c1-64)" + df + "; sleep 10; done"
	return workload(name, block, script, claim)
}

type steadyPod struct {
	pod   *corev1.Pod
	claim string
	sum   string
}

// steadyPods is how many steady pods the tests share: five, Filesystem
// and Block (every other one), each on its own claim; the first claim is
// ReadWriteOncePod.
const steadyPods = 5

// steadySet is the steady pods once started; steadyFailed tells that
// their start failed (the tests run one at a time).
var (
	steadySet    []*steadyPod
	steadyFailed bool
)

// sharedSteady returns the steady pods, started by the first test that
// asks and left until the test bed ends: the tests grow, measure and
// disrupt the node under the same pods, as a node's life does, instead of
// starting and deleting their own (under TCG a pod takes half a minute
// or more to start, and again to go).
func sharedSteady(t *testing.T) []*steadyPod {
	t.Helper()
	if steadyFailed {
		t.Fatal("the steady pods did not start (see the first test that asked for them)")
	}
	if steadySet != nil {
		return steadySet
	}
	steadyFailed = true // until they all print their checksums
	var out []*steadyPod
	for i := range steadyPods {
		block := i%2 == 1
		name := fmt.Sprintf("steady-%d", i)
		class := cluster.FilesystemClass
		if block {
			class = cluster.BlockClass
		}
		p := &steadyPod{pod: steady(name, block, name), claim: name}
		claim := cluster.Claim(name, class, "512Mi", block)
		if i == 0 {
			claim.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod}
		}
		for _, o := range []client.Object{claim, p.pod} {
			if err := k.Client.Create(context.Background(), o); err != nil {
				t.Fatal(err)
			}
		}
		out = append(out, p)
	}
	for _, p := range out {
		waitRunning(t, p.pod)
		p.sum = lastLine(t, p.pod, "sum=", func(s string) bool { return len(s) == 64 })
	}
	steadySet, steadyFailed = out, false
	return out
}

// checkSteady: each pod prints the checksum it printed first, again.
func checkSteady(t *testing.T, pods []*steadyPod) {
	t.Helper()
	for _, p := range pods {
		// A line printed after now: the log's last line, once it changes
		// or repeats.
		before := strings.Count(podLog(t, p.pod), "sum=")
		var got string
		err := k.WaitFor(context.Background(), "pod "+p.pod.Name+" to print its checksum again", 3*time.Minute, func() (bool, error) {
			log := podLog(t, p.pod)
			if strings.Count(log, "sum=") <= before {
				return false, nil
			}
			got = strings.TrimSpace(lastPrinted(log, "sum="))
			return len(got) == 64, nil
		})
		if err != nil {
			t.Fatal(err, guestState())
		}
		if got != p.sum {
			t.Errorf("pod %s reads %s, wrote %s", p.pod.Name, got, p.sum)
		}
	}
}

// containerIDs are the pod's containers' IDs and restart counts.
func containerIDs(t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	if err := k.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), pod); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, cs := range pod.Status.ContainerStatuses {
		ids = append(ids, fmt.Sprintf("%s:%d", cs.ContainerID, cs.RestartCount))
	}
	return strings.Join(ids, ",")
}

// kubeletLogHas tells whether a line of the kubelet's log holds every one
// of parts.
func kubeletLogHas(parts ...string) bool {
	data, _ := os.ReadFile(filepath.Join(vm.ShareDir(), "log", "kubelet.log"))
	for _, l := range strings.Split(string(data), "\n") {
		if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(l, p) }) {
			return true
		}
	}
	return false
}

// kubeletLines returns the last 40 lines of the kubelet's log that hold
// any of keys.
func kubeletLines(keys ...string) string {
	data, _ := os.ReadFile(filepath.Join(vm.ShareDir(), "log", "kubelet.log"))
	var lines []string
	for _, l := range strings.Split(string(data), "\n") {
		if slices.ContainsFunc(keys, func(k string) bool { return strings.Contains(l, k) }) {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines[max(0, len(lines)-40):], "\n")
}

// guestPID is the PID of a node service (node-init.sh's /run/NAME.pid).
func guestPID(t *testing.T, service string) string {
	t.Helper()
	out, err := vm.Run(context.Background(), "cat", "/run/"+service+".pid")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

// TestKubeletRestart: five pods (Filesystem and Block) run; the kubelet is
// killed and starts again (it re-issues NodePublishVolume for every mounted
// volume). Afterwards each volume is mounted as often as before (no
// stacked bind mounts), the pods kept running in the same containers, and
// the data is intact.
func TestKubeletRestart(t *testing.T) {
	ctx := context.Background()
	pods := sharedSteady(t)
	before := map[string]int{}
	ids := map[string]string{}
	for _, p := range pods {
		before[p.claim] = mounts(t, p.claim)
		ids[p.pod.Name] = containerIDs(t, p.pod)
	}
	old := guestPID(t, "kubelet")
	if _, err := vm.Run(ctx, "kill", "-9", old); err != nil {
		t.Fatal(err)
	}
	if err := k.WaitFor(ctx, "the kubelet to start again", 2*time.Minute, func() (bool, error) {
		out, err := vm.Run(ctx, "cat", "/run/kubelet.pid")
		return err == nil && strings.TrimSpace(out) != old, nil
	}); err != nil {
		t.Fatal(err)
	}
	// The restarted kubelet's volume manager has reconstructed and
	// re-published every mounted volume once its pods' volumes report
	// mounted again: wait for its next status of each pod.
	waitReadySince(t, time.Now())
	checkSteady(t, pods) // a sync period or more after the restart
	for _, p := range pods {
		if n := mounts(t, p.claim); n != before[p.claim] {
			t.Errorf("claim %s mounted %d times after the kubelet's restart, %d before", p.claim, n, before[p.claim])
		}
		if now := containerIDs(t, p.pod); now != ids[p.pod.Name] {
			t.Errorf("pod %s's containers %s, before the restart %s", p.pod.Name, now, ids[p.pod.Name])
		}
	}
}

// nodePluginPod is thinlvm's pod on the real node.
func nodePluginPod(t testing.TB) *corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	if err := k.Client.List(context.Background(), pods, client.InNamespace(cluster.Namespace), client.MatchingFields{"spec.nodeName": vmNode}); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 {
		t.Fatalf("thinlvm's pods on %s: %v", vmNode, podPhases(pods.Items))
	}
	return &pods.Items[0]
}

// pluginContainer is the containerd ID and restart count of a container
// of thinlvm's pod on the node: thinlvm-node (the agent and CSI node
// plugin) or lvmd.
func pluginContainer(t *testing.T, name string) (id string, restarts int32) {
	t.Helper()
	for _, cs := range nodePluginPod(t).Status.ContainerStatuses {
		if cs.Name == name {
			return strings.TrimPrefix(cs.ContainerID, "containerd://"), cs.RestartCount
		}
	}
	t.Fatalf("no %s container", name)
	return "", 0
}

// ctr runs containerd's ctr in the guest, in the kubelet's namespace.
func ctr(t *testing.T, args ...string) {
	t.Helper()
	argv := append([]string{"/usr/local/bin/ctr", "--address", "/run/containerd/containerd.sock", "-n", "k8s.io"}, args...)
	if _, err := vm.Run(context.Background(), argv...); err != nil {
		t.Fatal(err)
	}
}

// waitRestarted waits for the kubelet to run a container of thinlvm's
// pod again after it was killed, ready.
func waitRestarted(t *testing.T, name string, restarts int32) {
	t.Helper()
	err := k.WaitFor(context.Background(), "the kubelet to run "+name+" again", 3*time.Minute, func() (bool, error) {
		for _, cs := range nodePluginPod(t).Status.ContainerStatuses {
			if cs.Name == name {
				return cs.RestartCount > restarts && cs.Ready, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestNodePluginRestart: the node plugin's container and lvmd's are
// killed by the runtime while pods use their volumes. The mounts are
// unaffected; once the kubelet has run both again, a new claim is made
// and a new pod mounts it, and a volume in use grows online (its device
// found again: TopoLVM issue 143).
func TestNodePluginRestart(t *testing.T) {
	pods := sharedSteady(t)
	before := map[string]int{}
	for _, p := range pods {
		before[p.claim] = mounts(t, p.claim)
	}
	restarts := map[string]int32{}
	for _, name := range []string{"thinlvm-node", "lvmd"} {
		var id string
		id, restarts[name] = pluginContainer(t, name)
		ctr(t, "task", "kill", "--signal", "SIGKILL", id)
	}
	for name, n := range restarts {
		waitRestarted(t, name, n)
	}
	for _, p := range pods {
		if n := mounts(t, p.claim); n != before[p.claim] {
			t.Errorf("claim %s mounted %d times after the plugin's restart, %d before", p.claim, n, before[p.claim])
		}
	}
	checkSteady(t, pods)
	newClaim(t, "pr-new", cluster.FilesystemClass, "256Mi", false)
	if out := runPod(t, "pr-new", false, "echo ok > /v0/f && cat /v0/f", "pr-new"); out != "ok" {
		t.Errorf("a new volume after the plugin's restart: %q", out)
	}
	// Grow the Filesystem volume in use (pods[0]) once more (TestOnlineExpansion
	// grew it to 1Gi).
	growClaim(t, pods[0].claim, "2Gi")
	waitGrown(t, pods[0].claim, "2Gi")
}

// TestPodDeletedWhilePluginDown: a pod is deleted while the node plugin
// does not answer (its container frozen). The kubelet cannot unmount and
// keeps the pod; once the plugin answers again the mount is gone, the pod
// too, the claim is deleted and its LV removed: nothing orphaned.
func TestPodDeletedWhilePluginDown(t *testing.T) {
	ctx := context.Background()
	claim := newClaim(t, "down", cluster.FilesystemClass, "256Mi", false)
	pod := startPod(t, workload("down", false, "echo x > /v0/f; sleep 100000", "down"))
	if err := k.Client.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil {
		t.Fatal(err)
	}
	lvName := claim.Spec.VolumeName
	id, _ := pluginContainer(t, "thinlvm-node")
	ctr(t, "task", "pause", id)
	resumed := false
	defer func() {
		if !resumed {
			ctr(t, "task", "resume", id)
		}
	}()
	if err := k.Client.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	// The kubelet's volume manager starts the unmount (NodeUnpublishVolume
	// to the frozen plugin, which it waits on for up to 2 minutes).
	// (The pod's other volume, its projected token, goes at once: the
	// kubelet's lines are matched by the claim's volume too.)
	uid, volume := string(pod.UID), "thinlvm.io^"+lvName
	if err := k.WaitFor(ctx, "the kubelet to start unmounting the pod's volume", 2*time.Minute, func() (bool, error) {
		return kubeletLogHas("operationExecutor.UnmountVolume started", uid, volume), nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := k.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
		t.Fatalf("pod gone while its volume could not be unmounted: %v", err)
	}
	if n := mounts(t, "down"); n == 0 || kubeletLogHas("UnmountVolume.TearDown succeeded", uid, volume) {
		t.Errorf("the volume was unmounted while the plugin was down (%d mounts left)", n)
	}
	ctr(t, "task", "resume", id)
	resumed = true
	if err := k.WaitGone(ctx, 4*time.Minute, pod); err != nil {
		t.Fatal(err)
	}
	if n := mounts(t, "down"); n != 0 {
		t.Errorf("claim down still mounted %d times after its pod is gone", n)
	}
	if err := k.Client.Delete(ctx, claim); err != nil {
		t.Fatal(err)
	}
	lv := &thinlvmv1.LogicalVolume{}
	lv.Name = lvName
	if err := k.WaitGone(ctx, 3*time.Minute, claim, lv); err != nil {
		t.Fatal(err)
	}
	if out, err := vm.Run(ctx, "lvm", "lvs", "--noheadings", "-o", "lv_name", "vg0"); err != nil || strings.Contains(out, lvName) {
		t.Errorf("LV of %s still there (%v): %s", lvName, err, out)
	}
}

// waitReadySince waits for the kubelet to report the node Ready with a
// heartbeat after since: a kubelet started again has sent its status (the
// Node's old Ready condition says nothing of the new kubelet).
func waitReadySince(t *testing.T, since time.Time) {
	t.Helper()
	ctx := context.Background()
	if err := k.WaitFor(ctx, "the kubelet's node status after "+since.Format("15:04:05"), 6*time.Minute, func() (bool, error) {
		node := &corev1.Node{}
		if err := k.Client.Get(ctx, client.ObjectKey{Name: vmNode}, node); err != nil {
			return false, err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue && c.LastHeartbeatTime.After(since) {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestNodeReboot: the node is rebooted with its disks while pods run. Its
// LVs are active again and their device nodes present; the kubelet starts
// the pods again, and they read their data back.
func TestNodeReboot(t *testing.T) {
	ctx := context.Background()
	pods := sharedSteady(t)
	ids := map[string]string{}
	for _, p := range pods {
		ids[p.pod.Name] = containerIDs(t, p.pod)
	}
	since := time.Now()
	if err := vm.Reboot(ctx); err != nil {
		t.Fatal(err)
	}
	// The node's boot activates the LVs before it starts the kubelet
	// (node-init.sh): once the new kubelet reports, they must be active.
	waitReadySince(t, since)
	for _, p := range pods {
		claim := &corev1.PersistentVolumeClaim{}
		if err := k.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: p.claim}, claim); err != nil {
			t.Fatal(err)
		}
		out, err := vm.Run(ctx, "lvm", "lvs", "--noheadings", "-o", "lv_attr", "vg0/"+claim.Spec.VolumeName)
		if err != nil || len(strings.TrimSpace(out)) < 5 || strings.TrimSpace(out)[4] != 'a' {
			t.Errorf("LV of %s after the reboot: attr %q (%v), want active", p.claim, out, err)
		}
		if _, err := vm.Run(ctx, "test", "-b", "/dev/vg0/"+claim.Spec.VolumeName); err != nil {
			t.Errorf("no device node for %s after the reboot: %v", p.claim, err)
		}
	}
	// Every pod's sandbox and container start again, and its volume is
	// staged and published again, on a node that may share the host with
	// another lane: 10 minutes bound a hang (6 ran out once beside the
	// golden-image suite's two VMs).
	for _, p := range pods {
		err := k.WaitFor(ctx, "pod "+p.pod.Name+" to run again after the reboot", 10*time.Minute, func() (bool, error) {
			return containerIDs(t, p.pod) != ids[p.pod.Name] && p.pod.Status.Phase == corev1.PodRunning, nil
		})
		if err != nil {
			t.Fatal(err, guestState())
		}
	}
	checkSteady(t, pods)
}
