package cluster_test

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/e2e/cluster"
	"github.com/thinlvm/thinlvm/e2e/imageserver"
)

// bigImage makes a raw ext4 image of size bytes holding hello.txt and data
// bytes of random content, and returns it zstd-compressed (the file system's
// free space is zeros and compresses away) with its raw size.
func bigImage(b *testing.B, size, data int64) []byte {
	b.Helper()
	dir := b.TempDir()
	src := filepath.Join(dir, "root")
	if err := os.MkdirAll(src, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "hello.txt"), []byte(helloText), 0o644); err != nil {
		b.Fatal(err)
	}
	f, err := os.Create(filepath.Join(src, "data.bin"))
	if err == nil {
		_, err = io.CopyN(f, rand.Reader, data)
		f.Close()
	}
	if err != nil {
		b.Fatal(err)
	}
	img := filepath.Join(dir, "disk.raw")
	err = os.WriteFile(img, nil, 0o644)
	if err == nil {
		err = os.Truncate(img, size)
	}
	if err != nil {
		b.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-d", src, img).CombinedOutput(); err != nil {
		b.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	in, err := os.Open(img)
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err == nil {
		_, err = io.Copy(zw, in)
	}
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}

// prewarm makes a GoldenImage whose base the VM node makes at once, and
// waits until it is Ready; it returns the population's duration.
func prewarm(b *testing.B, images *imageserver.Server, name string, body []byte, size string) time.Duration {
	b.Helper()
	gi := goldenImage(name, images.Add("/"+name+".raw.zst", body), sum(body), thinlvmv1.FormatRaw, size)
	gi.Spec.Prewarm = &thinlvmv1.Prewarm{NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"thinlvm.io/test-vm": "true"}}}
	start := time.Now()
	create(b, gi)
	b.Cleanup(func() { _ = k.Client.Delete(ctx, gi) })
	waitFor(b, "base "+name+" Ready", 20*time.Minute, func() (bool, error) {
		got := &thinlvmv1.GoldenImage{}
		err := k.Client.Get(ctx, client.ObjectKeyFromObject(gi), got)
		if err == nil && got.Status.FailedNodes > 0 {
			return false, fmt.Errorf("population failed: %s", got.Status.LastError)
		}
		return err == nil && got.Status.ReadyNodes == 1, err
	})
	return time.Since(start)
}

// timeToBound creates VM-disk claims (with pods on the VM node) at once
// and returns each one's time from creation to Bound.
func timeToBound(b *testing.B, class, size string, names ...string) []time.Duration {
	b.Helper()
	created := map[string]time.Time{}
	for _, n := range names {
		created[n] = time.Now()
		vmDisk(b, n, class, size)
	}
	var out []time.Duration
	done := map[string]bool{}
	waitFor(b, fmt.Sprintf("%d claims Bound", len(names)), 10*time.Minute, func() (bool, error) {
		for _, n := range names {
			if done[n] {
				continue
			}
			c := &corev1.PersistentVolumeClaim{}
			if err := k.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: n}, c); err != nil {
				return false, err
			}
			if c.Status.Phase == corev1.ClaimBound {
				done[n] = true
				out = append(out, time.Since(created[n]))
			}
		}
		return len(done) == len(names), nil
	})
	return out
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func poolData(b *testing.B) string {
	b.Helper()
	out, err := vm.LVS(ctx, "vg0", "data_percent")
	if err != nil {
		b.Fatal(err)
	}
	return strings.TrimSpace(out["pool0"][0])
}

// BenchmarkGoldenImage measures VM disks from golden bases on real lvm2 in
// the VM: (a) creation to Bound from a local Ready base of 4 GiB vs 256 MiB
// (median of 3 each, interleaved); (b) the 4 GiB disk made by a full copy
// (a blank claim, then dd of the whole device, what a host-assisted clone
// does) vs from the base; (c) 20 disks from one base at once: total time
// and the thin pool's data% before and after, with lvmd's lvm shell and
// with a process per lvm command (two rounds each, interleaved). Run with
// -benchtime 1x.
func BenchmarkGoldenImage(b *testing.B) {
	images := imageserver.Start(b)
	small, large := bigImage(b, 256<<20, 64<<20), bigImage(b, 4<<30, 256<<20)
	popSmall := prewarm(b, images, "bench-256m", small, "256Mi")
	popLarge := prewarm(b, images, "bench-4g", large, "4Gi")
	goldenClass(b, "bench-256m", "bench-256m")
	goldenClass(b, "bench-4g", "bench-4g")
	for range b.N {
		// (a)
		// Disks are deleted as they go: the VM's pool (8 GiB, overprovision
		// 4) holds 32 GiB of virtual size, and the copy writes 4 GiB.
		var dSmall, dLarge []time.Duration
		for i := range 3 {
			s, l := fmt.Sprintf("bench-s-%d", i), fmt.Sprintf("bench-l-%d", i)
			dSmall = append(dSmall, timeToBound(b, "bench-256m", "256Mi", s)...)
			dLarge = append(dLarge, timeToBound(b, "bench-4g", "4Gi", l)...)
			cleanupDisks(b, s)
			if i < 2 {
				cleanupDisks(b, l)
			}
		}
		ms, ml := median(dSmall), median(dLarge)

		// (b) a blank 4 GiB disk, then the whole device copied into it
		// from a disk of the 4 GiB base.
		start := time.Now()
		timeToBound(b, blockClass, "4Gi", "bench-copy")
		dst, src := lvOf(b, "bench-copy"), lvOf(b, "bench-l-2")
		inGuest(b, "dd", "if=/dev/vg0/"+src, "of=/dev/vg0/"+dst, "bs=4M", "oflag=direct")
		copyTime := time.Since(start)
		cleanupDisks(b, "bench-copy", "bench-l-2")

		// (c) twice with each of lvmd's runners, interleaved: the shell
		// (the DaemonSet's) and a process per command.
		before := poolData(b)
		totals := map[string][]time.Duration{}
		var d []time.Duration // the shell's disks
		var after string
		for round := range 2 {
			for _, runner := range []string{"shell", "exec"} {
				restartLVMD(b, "--lvm-runner="+runner)
				var many []string
				for i := range 20 {
					many = append(many, fmt.Sprintf("bench-many-%s%d-%02d", runner, round, i))
				}
				start = time.Now()
				got := timeToBound(b, "bench-256m", "256Mi", many...)
				totals[runner] = append(totals[runner], time.Since(start))
				if runner == "shell" {
					d = append(d, got...)
					after = poolData(b)
				}
				cleanupDisks(b, many...)
			}
		}
		restartLVMD(b)
		total := slices.Min(totals["shell"])
		runnerRatio := total.Seconds() / slices.Min(totals["exec"]).Seconds()

		b.ReportMetric(ml.Seconds()/ms.Seconds(), "4g/256m")
		b.ReportMetric(copyTime.Seconds()/ml.Seconds(), "copy/base")
		b.ReportMetric(total.Seconds(), "20-disks-s")
		b.ReportMetric(runnerRatio, "20-disks-shell/exec")
		fmt.Printf("\n| golden base populated (prewarm): 256 MiB base (64 MiB data) %s, 4 GiB base (256 MiB data) %s |\n",
			popSmall.Round(time.Millisecond), popLarge.Round(time.Millisecond))
		fmt.Printf("| (a) VM disk to Bound from a local Ready base, median of 3 | 4 GiB base %s | 256 MiB base %s | ratio %.2f |\n",
			ml.Round(time.Millisecond), ms.Round(time.Millisecond), ml.Seconds()/ms.Seconds())
		fmt.Printf("| (b) 4 GiB VM disk by full copy (blank claim + dd) vs from the base | %s | %s | %.1fx |\n",
			copyTime.Round(time.Millisecond), ml.Round(time.Millisecond), copyTime.Seconds()/ml.Seconds())
		fmt.Printf("| (c) 20 VM disks (256 MiB) from one base at once, lvmd's lvm shell | total %s (best of 2), p50 %s, max %s | pool data %s%% -> %s%% |\n",
			total.Round(time.Millisecond), median(d).Round(time.Millisecond), slices.Max(d).Round(time.Millisecond), before, after)
		fmt.Printf("| (c) the same with a process per lvm command (--lvm-runner=exec) | total %s (best of 2) | shell/exec %.2f | goal <= 0.5 |\n",
			slices.Min(totals["exec"]).Round(time.Millisecond), runnerRatio)
	}
}

// BenchmarkDisksWaitingForBase makes ten VM disks from a GoldenImage whose
// base the VM node has not made yet (its download is held to about ten
// seconds), and prints the API writes per disk from creation to Bound: the
// cost of the disks' wait for their base. Run with -benchtime 1x.
func BenchmarkDisksWaitingForBase(b *testing.B) {
	images := imageserver.Start(b)
	body := bigImage(b, 64<<20, 4<<20)
	for i := range b.N {
		name := fmt.Sprintf("bench-wait-%d", i)
		path := "/" + name + ".raw.zst"
		gi := goldenImage(name, images.Add(path, body), sum(body), thinlvmv1.FormatRaw, "64Mi")
		images.Limit(path, len(body)/10+1)
		goldenClass(b, name, name)
		writes := apiWrites(b)
		create(b, gi)
		var disks []string
		for j := range 10 {
			disks = append(disks, fmt.Sprintf("%s-%02d", name, j))
		}
		d := timeToBound(b, name, "64Mi", disks...)
		perVolume, lvWrites, detail := writesPerVolume(writes, apiWrites(b), len(disks))
		b.ReportMetric(perVolume, "writes/volume")
		fmt.Printf("\n| 10 VM disks waiting for a base (download ~10 s) | p50 to Bound %s | API writes per disk %.1f | of them LogicalVolume %.1f | %s |\n",
			median(d).Round(time.Millisecond), perVolume, lvWrites, detail)
		cleanupDisks(b, disks...)
		_ = k.Client.Delete(ctx, gi)
	}
}

// lvmdArgs are the node DaemonSet's lvmd args as installed.
var lvmdArgs []string

// restartLVMD gives the real node's lvmd extra args after the installed
// ones (none: the installed ones again), as an operator would: the node
// DaemonSet updated OnDelete, so that only the real node's pod is
// replaced (the simulated nodes' pods are the harness's, started once),
// then that pod deleted and its successor waited for, ready.
func restartLVMD(b *testing.B, extra ...string) {
	b.Helper()
	ds := &appsv1.DaemonSet{}
	if err := k.Client.Get(ctx, types.NamespacedName{Namespace: cluster.Namespace, Name: "thinlvm-node"}, ds); err != nil {
		b.Fatal(err)
	}
	spec := &ds.Spec.Template.Spec
	i := slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == "lvmd" })
	if i < 0 {
		b.Fatal("no lvmd container in the node DaemonSet")
	}
	if lvmdArgs == nil {
		lvmdArgs = slices.Clone(spec.Containers[i].Args)
	}
	spec.Containers[i].Args = append(slices.Clone(lvmdArgs), extra...)
	ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
	if err := k.Client.Update(ctx, ds); err != nil {
		b.Fatal(err)
	}
	old := nodePluginPod(b)
	if err := k.Client.Delete(ctx, old); err != nil {
		b.Fatal(err)
	}
	waitFor(b, "the real node's thinlvm pod replaced, ready", 5*time.Minute, func() (bool, error) {
		pods := &corev1.PodList{}
		if err := k.Client.List(ctx, pods, client.InNamespace(cluster.Namespace), client.MatchingFields{"spec.nodeName": vmNode}); err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.UID != old.UID && p.DeletionTimestamp.IsZero() && podReady(&p) {
				return true, nil
			}
		}
		return false, nil
	})
}

// podReady: every container of the pod is ready.
func podReady(p *corev1.Pod) bool {
	for _, cs := range p.Status.ContainerStatuses {
		if !cs.Ready {
			return false
		}
	}
	return p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) > 0
}
