// Command demo is thinlvm's main job on one machine: it starts a local
// control plane, installs thinlvm from deploy/ as a user would (kubectl
// apply -k, every component with its own ServiceAccount's token), boots
// the real-LVM VM as a real node (its kubelet, containerd and runc run
// thinlvm's node DaemonSet), makes a GoldenImage from an image it builds,
// provisions ten VM disks (Block) and two Filesystem volumes with pods, and
// prints where each landed, how long it took, what the real node's pods
// read back, the thin pool's use, and the same disk made by a full copy.
// `make demo` runs it; Ctrl-C cleans up.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/e2e/cluster"
	"github.com/thinlvm/thinlvm/e2e/imageserver"
	"github.com/thinlvm/thinlvm/e2e/lvmvm"
)

const (
	node       = "demo-node"
	vmDisks    = 10
	diskSize   = "10Gi"
	imageSize  = 1 << 30 // the golden image: a 1 GiB ext4 disk
	imageData  = 256 << 20
	goldenName = "demo-ubuntu"
	// headMiB is how much of its disk a VM disk's pod reads back and
	// checks against the image: the ext4 superblock, group descriptors,
	// inode tables and the first files' blocks.
	headMiB = 16
)

// prepare makes the node's VG and thin pool on its disk at its first
// boot, as a node's provisioning would before the kubelet starts.
const prepare = `lvm vgs vg0 >/dev/null 2>&1 || {
  lvm pvcreate --yes /dev/vda && lvm vgcreate vg0 /dev/vda &&
  lvm lvcreate --yes --type thin-pool --size 40G --poolmetadatasize 256M --name pool0 vg0; }
`

// fakeNodes run lvmd on the simulated lvm: they show the scheduler's choice
// (capacity vs golden-base locality); their volumes are not real.
var fakeNodes = []string{"kwok-1", "kwok-2"}

var spinner = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

// step runs f, showing a spinner with the elapsed time while it works (on a
// terminal; a line per step otherwise), then the time and f's detail.
func step(what string, f func() (string, error)) error {
	return stepProgress(what, func(func(cluster.Progress)) (string, error) { return f() })
}

// stepProgress is step for work that reports its progress (the control
// plane's build): on a terminal the spinner's line shows the latest report
// and its time in place of what; otherwise each report is a line.
func stepProgress(what string, f func(report func(cluster.Progress)) (string, error)) error {
	start := time.Now()
	tty := isTerminal()
	var last atomic.Pointer[cluster.Progress]
	report := func(p cluster.Progress) {
		if tty {
			last.Store(&p)
			return
		}
		fmt.Printf("      %s\n", describe(p))
	}
	done, stopped := make(chan struct{}), make(chan struct{})
	if tty {
		go func() {
			defer close(stopped)
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				case <-t.C:
					label := what
					if p := last.Load(); p != nil {
						label = fit(progressLine(*p, time.Now()), labelWidth)
					}
					fmt.Printf("\r  %s %-*s %6.1fs", spinner[i%len(spinner)], labelWidth, label, time.Since(start).Seconds())
				}
			}
		}()
	} else {
		close(stopped)
		fmt.Printf("  … %s\n", what)
	}
	detail, err := f(report)
	close(done)
	<-stopped // the spinner's last line is drawn before it is cleared
	mark := "✓"
	if err != nil {
		mark = "✗"
	}
	if tty {
		fmt.Print("\r\033[K")
	}
	fmt.Printf("  %s %-52s %6.1fs  %s\n", mark, what, time.Since(start).Seconds(), detail)
	return err
}

func isTerminal() bool {
	fi, err := os.Stdout.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		if ctx.Err() != nil {
			fmt.Println("\ninterrupted: cleaned up")
		} else {
			fmt.Printf("\ndemo failed: %v\n", err)
		}
		os.Exit(1)
	}
}

// claim is one provisioned volume of the report.
type claim struct {
	name, mode, class string
	created, bound    time.Time
	node, lv          string
	// pod is the claim's pod; read is what it printed of its volume (on
	// the real node).
	pod  *corev1.Pod
	read string
}

func run(ctx context.Context) (err error) {
	begin := time.Now()
	fmt.Println("thinlvm demo: a local control plane, thinlvm installed from its Helm chart, a real node on real lvm2 in a VM")
	fmt.Println()
	var k *cluster.Cluster
	var vm *lvmvm.VM
	defer func() {
		// Runs on success, failure and Ctrl-C: nothing is left behind.
		if vm != nil {
			vm.Stop()
		}
		if k != nil {
			k.Stop()
		}
	}()
	if err := stepProgress("build (cached) and start the control plane", func(report func(cluster.Progress)) (string, error) {
		k, err = cluster.Start(ctx, cluster.Options{Progress: report})
		if err != nil {
			return "", err
		}
		return "etcd, kube-apiserver, controller-manager, kube-scheduler, kwok", nil
	}); err != nil {
		return err
	}
	if err := step("helm install thinlvm deploy/chart and run its pods", func() (string, error) {
		if err := k.Install(ctx); err != nil {
			return "", err
		}
		return "controller + sidecars, thinlvm-scheduler: 2 replicas each, own ServiceAccounts", nil
	}); err != nil {
		return err
	}
	if err := step("boot the VM as real node "+node+" (kubelet, containerd)", func() (string, error) {
		vm, err = k.StartRealNode(ctx, node, cluster.RealNodeOptions{Disks: []string{"64G"}, Prepare: prepare,
			Labels: map[string]string{"thinlvm.io/vm-node": "true"}})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("Ready; guest booted in %.1fs, a 64 GiB sparse disk, VG vg0, thin pool pool0 of 40 GiB", vm.BootSeconds), nil
	}); err != nil {
		return err
	}
	if err := step("its kubelet runs thinlvm's node DaemonSet", func() (string, error) {
		if err := k.WaitLVMNode(ctx, node); err != nil {
			return "", fmt.Errorf("%w\n%s", err, k.RealNodeLogs(vm))
		}
		ln := &thinlvmv1.LVMNode{}
		if err := k.Client.Get(ctx, types.NamespacedName{Name: node}, ln); err != nil {
			return "", err
		}
		dc := ln.Status.DeviceClasses[0]
		return fmt.Sprintf("LVMNode: class %s, pool %s, %s available (overprovision %s)", dc.Name, dc.PoolSize.String(), dc.Available.String(), dc.OverprovisionRatio), nil
	}); err != nil {
		return err
	}

	if err := step("add two kwok nodes with simulated lvm (100 GiB pools)", func() (string, error) {
		for _, n := range fakeNodes {
			if err := k.AddNode(ctx, cluster.Node{Name: n}); err != nil {
				return "", err
			}
			if err := k.WaitLVMNode(ctx, n); err != nil {
				return "", err
			}
		}
		return strings.Join(fakeNodes, ", ") + ": more room than the VM, no golden base", nil
	}); err != nil {
		return err
	}

	var url, sum, head string
	var populate time.Duration
	if err := step("build a 1 GiB ext4 image (256 MiB of data), serve it", func() (string, error) {
		url, sum, head, err = serveImage(ctx)
		return "qcow2 on http://" + lvmvm.HostAddress + " (the host, seen from the VM)", err
	}); err != nil {
		return err
	}
	if err := step("GoldenImage "+goldenName+": the node populates its base", func() (string, error) {
		gi := &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: goldenName}, Spec: thinlvmv1.GoldenImageSpec{
			Source: thinlvmv1.ImageSource{HTTP: &thinlvmv1.HTTPSource{URL: url, SHA256: sum}}, Format: thinlvmv1.FormatQCOW2,
			Size:    resource.MustParse("1Gi"),
			Prewarm: &thinlvmv1.Prewarm{NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"thinlvm.io/vm-node": "true"}}}}}
		t := time.Now()
		if err := k.Client.Create(ctx, gi); err != nil {
			return "", err
		}
		if err := k.WaitFor(ctx, "the base Ready", 10*time.Minute, func() (bool, error) {
			err := k.Client.Get(ctx, client.ObjectKeyFromObject(gi), gi)
			if err == nil && gi.Status.FailedNodes > 0 {
				return false, errors.New(gi.Status.LastError)
			}
			return err == nil && gi.Status.ReadyNodes == 1, err
		}); err != nil {
			return "", err
		}
		populate = time.Since(t)
		return "downloaded, converted by qemu-img, checksum verified, sealed read-only", nil
	}); err != nil {
		return err
	}
	if err := step("StorageClasses: kubectl apply -k deploy/examples/storageclasses", func() (string, error) {
		if err := kubectl(ctx, k, "apply", "-k", "deploy/examples/storageclasses"); err != nil {
			return "", err
		}
		sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "thinlvm-" + goldenName}, Provisioner: thinlvmv1.DriverName,
			VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer), AllowVolumeExpansion: ptr.To(true),
			Parameters: map[string]string{thinlvmv1.GoldenImageParameter: goldenName}}
		if err := k.Client.Create(ctx, sc); err != nil {
			return "", err
		}
		for _, c := range []string{sc.Name, "thinlvm-ext4", "thinlvm-xfs", "thinlvm-block"} {
			for _, n := range append([]string{node}, fakeNodes...) {
				if err := k.WaitCapacityFor(ctx, n, c); err != nil {
					return "", err
				}
			}
		}
		return "thinlvm-ext4, thinlvm-xfs, thinlvm-block, thinlvm-" + goldenName, nil
	}); err != nil {
		return err
	}

	var claims []*claim
	for i := range vmDisks {
		claims = append(claims, &claim{name: fmt.Sprintf("vm-%02d-root", i), mode: "Block", class: "thinlvm-" + goldenName})
	}
	// The databases' pods are pinned to the real node (a nodeSelector, as
	// a database's often is): there they write and read real files.
	claims = append(claims, &claim{name: "db-ext4", mode: "Filesystem", class: "thinlvm-ext4", node: node},
		&claim{name: "db-xfs", mode: "Filesystem", class: "thinlvm-xfs", node: node})
	if err := step(fmt.Sprintf("%d VM disks (Block, %s, from the base) + 2 volumes, with pods", vmDisks, diskSize), func() (string, error) {
		return provision(ctx, k, claims)
	}); err != nil {
		return err
	}
	if err := step("the pods on "+node+" read their volumes", func() (string, error) {
		return readBack(ctx, k, vm, claims, head)
	}); err != nil {
		return err
	}
	alone := &claim{name: "vm-10-root", mode: "Block", class: "thinlvm-" + goldenName}
	if err := step("one more VM disk from the base, alone", func() (string, error) {
		_, err := provision(ctx, k, []*claim{alone})
		return fmt.Sprintf("%s from claim to Bound, on %s", alone.bound.Sub(alone.created).Round(time.Millisecond), alone.node), err
	}); err != nil {
		return err
	}
	var copyTime time.Duration
	if err := step("the same disk by a full copy, on the VM node", func() (string, error) {
		c := &claim{name: "vm-copy-root", mode: "Block", class: "thinlvm-block", node: node}
		if _, err := provision(ctx, k, []*claim{c}); err != nil {
			return "", err
		}
		t := time.Now()
		if _, err := vm.Run(ctx, "dd", "if=/dev/vg0/"+alone.lv, "of=/dev/vg0/"+c.lv, "bs=4M", "count=256", "oflag=direct"); err != nil {
			return "", err
		}
		copyTime = c.bound.Sub(c.created) + time.Since(t)
		return fmt.Sprintf("a blank %s disk, then dd of the 1 GiB image into it", diskSize), nil
	}); err != nil {
		return err
	}

	report(ctx, k, vm, claims, populate, alone.bound.Sub(alone.created), copyTime)
	if err := step("clean up: delete pods, claims, the GoldenImage", func() (string, error) {
		return "", cleanup(ctx, k, append(claims, alone, &claim{name: "vm-copy-root"}))
	}); err != nil {
		return err
	}
	fmt.Printf("\ndone in %s; the VM and the control plane stop now.\n", time.Since(begin).Round(time.Second))
	return nil
}

// serveImage builds the demo's image (mkfs.ext4 -d, then qemu-img convert
// to qcow2) and serves it on 127.0.0.1; it returns the URL the VM uses,
// the qcow2 file's sha256 and the sha256 of the disk's first headMiB.
func serveImage(ctx context.Context) (url, sum, head string, err error) {
	dir, err := os.MkdirTemp("", "thinlvm-demo-")
	if err != nil {
		return "", "", "", err
	}
	context.AfterFunc(ctx, func() { os.RemoveAll(dir) })
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		return "", "", "", err
	}
	if err := os.WriteFile(filepath.Join(root, "etc", "os-release"), []byte("NAME=\"thinlvm demo image\"\n"), 0o644); err != nil {
		return "", "", "", err
	}
	data := bytes.Repeat([]byte("the golden image's data\n"), imageData/24)
	if err := os.WriteFile(filepath.Join(root, "data.bin"), data, 0o644); err != nil {
		return "", "", "", err
	}
	raw, qcow := filepath.Join(dir, "disk.raw"), filepath.Join(dir, "disk.qcow2")
	if err := os.WriteFile(raw, nil, 0o644); err != nil {
		return "", "", "", err
	}
	if err := os.Truncate(raw, imageSize); err != nil {
		return "", "", "", err
	}
	for _, argv := range [][]string{{"mkfs.ext4", "-q", "-F", "-d", root, raw}, {"qemu-img", "convert", "-f", "raw", "-O", "qcow2", raw, qcow}} {
		if out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput(); err != nil {
			return "", "", "", fmt.Errorf("%s: %w: %s", argv[0], err, out)
		}
	}
	disk, err := os.ReadFile(raw)
	if err != nil {
		return "", "", "", err
	}
	h := sha256.Sum256(disk[:headMiB<<20])
	body, err := os.ReadFile(qcow)
	if err != nil {
		return "", "", "", err
	}
	s := sha256.Sum256(body)
	srv := imageserver.New()
	context.AfterFunc(ctx, srv.Close)
	return srv.Add("/disk.qcow2", body), hex.EncodeToString(s[:]), hex.EncodeToString(h[:]), nil
}

// provision creates each claim with a pod (thinlvm-scheduler's profile,
// no node named: the scheduler picks it) and waits until all are Bound.
func provision(ctx context.Context, k *cluster.Cluster, claims []*claim) (string, error) {
	for _, c := range claims {
		size := diskSize
		if c.mode == "Filesystem" {
			size = "1Gi"
		}
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: "default"},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName: ptr.To(c.class), VolumeMode: ptr.To(corev1.PersistentVolumeMode(c.mode)),
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}}}}
		// On the real node the pod reads its volume back (kwok only
		// pretends to run the pods on its nodes).
		ct := corev1.Container{Name: "app", Image: cluster.BusyboxImage, Command: []string{"/bin/sh", "-c", readScript(c.mode) + "; exec sleep 1000000"}}
		if c.mode == "Block" {
			ct.VolumeDevices = []corev1.VolumeDevice{{Name: "disk", DevicePath: "/dev/disk"}}
		} else {
			ct.VolumeMounts = []corev1.VolumeMount{{Name: "disk", MountPath: "/data"}}
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: "default"}, Spec: corev1.PodSpec{
			SchedulerName: "thinlvm-scheduler", Containers: []corev1.Container{ct}, NodeSelector: pin(c.node),
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			Tolerations:                   []corev1.Toleration{{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Volumes:                       []corev1.Volume{{Name: "disk", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c.name}}}}}}
		c.created, c.pod = time.Now(), pod
		if err := k.Client.Create(ctx, pvc); err != nil {
			return "", err
		}
		if err := k.Client.Create(ctx, pod); err != nil {
			return "", err
		}
	}
	err := k.WaitFor(ctx, fmt.Sprintf("%d claims Bound", len(claims)), 10*time.Minute, func() (bool, error) {
		pending := 0
		for _, c := range claims {
			if !c.bound.IsZero() {
				continue
			}
			pvc := &corev1.PersistentVolumeClaim{}
			if err := k.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: c.name}, pvc); err != nil {
				return false, err
			}
			if pvc.Status.Phase != corev1.ClaimBound {
				pending++
				continue
			}
			c.bound = time.Now()
			pv := &corev1.PersistentVolume{}
			if err := k.Client.Get(ctx, types.NamespacedName{Name: pvc.Spec.VolumeName}, pv); err != nil {
				return false, err
			}
			lv := &thinlvmv1.LogicalVolume{}
			if err := k.Client.Get(ctx, types.NamespacedName{Name: pv.Spec.CSI.VolumeHandle}, lv); err != nil {
				return false, err
			}
			c.node, c.lv = lv.Spec.NodeName, lv.Status.VolumeID
		}
		return pending == 0, nil
	})
	if err != nil {
		return "", err
	}
	var d []time.Duration
	for _, c := range claims {
		d = append(d, c.bound.Sub(c.created))
	}
	slices.Sort(d)
	return fmt.Sprintf("all %d Bound; median %s, slowest %s", len(d), d[len(d)/2].Round(time.Millisecond), d[len(d)-1].Round(time.Millisecond)), nil
}

// readScript is what a pod does with its volume: a VM disk's prints the
// sha256 of its first headMiB ("head=<sha256>"); a Filesystem volume's
// copies 8 MiB of random data onto it, syncs, reads the file back and
// prints both checksums, the file system and its size in KiB
// ("wrote=<sha256> read=<sha256> fs=<type> kib=<n>").
func readScript(mode string) string {
	if mode == "Block" {
		return fmt.Sprintf("echo head=$(dd if=/dev/disk bs=1M count=%d 2>/dev/null | sha256sum | cut -c1-64)", headMiB)
	}
	return "dd if=/dev/urandom of=/tmp/d bs=1M count=8 2>/dev/null && cp /tmp/d /data/d && sync && " +
		"echo wrote=$(sha256sum /tmp/d | cut -c1-64) read=$(sha256sum /data/d | cut -c1-64) " +
		"fs=$(awk '$2 == \"/data\" {print $3}' /proc/mounts) kib=$(df -P -k /data | awk 'NR==2 {print $2}')"
}

// readBack waits until every pod on the real node has printed what it
// read of its volume (readScript), from the log the kubelet keeps of it,
// and checks it: a VM disk's first headMiB are the image's (head), a
// Filesystem volume gave back what was written, on its class's file
// system.
func readBack(ctx context.Context, k *cluster.Cluster, vm *lvmvm.VM, claims []*claim, head string) (string, error) {
	var mine []*claim
	for _, c := range claims {
		if c.node == node {
			mine = append(mine, c)
		}
	}
	err := k.WaitFor(ctx, fmt.Sprintf("%d pods on %s to read their volumes", len(mine), node), 15*time.Minute, func() (bool, error) {
		left := 0
		for _, c := range mine {
			if c.read != "" {
				continue
			}
			if err := k.Client.Get(ctx, client.ObjectKeyFromObject(c.pod), c.pod); err != nil {
				return false, err
			}
			// Not yet there while the container has not started.
			if log, err := cluster.RealNodePodLog(ctx, vm, c.pod, ""); err == nil && strings.TrimSpace(log) != "" {
				lines := strings.Split(strings.TrimSpace(log), "\n")
				c.read = strings.TrimSpace(lines[len(lines)-1])
			}
			if c.read == "" {
				left++
			}
		}
		return left == 0, nil
	})
	if err != nil {
		return "", err
	}
	disks, vols := 0, 0
	for _, c := range mine {
		f := map[string]string{}
		for _, kv := range strings.Fields(c.read) {
			if key, v, ok := strings.Cut(kv, "="); ok {
				f[key] = v
			}
		}
		switch {
		case c.mode == "Block" && f["head"] == head:
			disks++
		case c.mode == "Block":
			return "", fmt.Errorf("pod %s read %q of its VM disk, the image's first %d MiB are %s", c.name, c.read, headMiB, head)
		case len(f["wrote"]) == 64 && f["wrote"] == f["read"] && "thinlvm-"+f["fs"] == c.class:
			vols++
		default:
			return "", fmt.Errorf("pod %s printed %q: want what it wrote read back, on the class's file system (%s)", c.name, c.read, c.class)
		}
	}
	return fmt.Sprintf("%d VM disks: the image's first %d MiB; %d volumes: 8 MiB written and read back", disks, headMiB, vols), nil
}

// pin is a node selector for node ("" for none: the scheduler chooses).
func pin(node string) map[string]string {
	if node == "" {
		return nil
	}
	return map[string]string{"kubernetes.io/hostname": node}
}

func kubectl(ctx context.Context, k *cluster.Cluster, args ...string) error {
	out, err := exec.CommandContext(ctx, filepath.Join(k.K8sBin, "kubectl"), append([]string{"--kubeconfig=" + k.Kubeconfig}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

func report(ctx context.Context, k *cluster.Cluster, vm *lvmvm.VM, claims []*claim, populate, alone, copyTime time.Duration) {
	lvs, _ := vm.LVS(ctx, "vg0", "origin,lv_size,data_percent")
	fmt.Println()
	fmt.Println("The nodes, as the scheduler's ThinLVM plugin saw them (LVMNode status):")
	w := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "  NODE\tLVM\tPOOL\tAVAILABLE NOW\tGOLDEN BASE\tCLAIMS PLACED")
	per := map[string][]string{}
	for _, c := range claims {
		per[c.node] = append(per[c.node], c.name)
	}
	for _, n := range append([]string{node}, fakeNodes...) {
		ln := &thinlvmv1.LVMNode{}
		if err := k.Client.Get(ctx, types.NamespacedName{Name: n}, ln); err != nil || len(ln.Status.DeviceClasses) == 0 {
			continue
		}
		kind, base := "simulated (kwok)", "none"
		if n == node {
			kind = "real node, real lvm2 (VM)"
		}
		for _, b := range ln.Status.GoldenBases {
			if b.Name == goldenName {
				base = string(b.State)
			}
		}
		dc := ln.Status.DeviceClasses[0]
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\t%d\n", n, kind, dc.PoolSize.String(), dc.Available.String(), base, len(per[n]))
	}
	w.Flush()
	fmt.Println()
	fmt.Println("Where each volume landed: VM disks need the golden base (locality outweighs the kwok nodes' larger room);")
	fmt.Println("the two database volumes' pods are pinned to " + node + " (a nodeSelector):")
	w = tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "  CLAIM\tMODE\tNODE\tLV\tMADE AS\tCLAIM → BOUND\tITS POD READ")
	var vmTimes []time.Duration
	for _, c := range claims {
		made := "thin LV (simulated)"
		if c.node == node {
			made = "new thin LV"
			if f := lvs[c.lv]; len(f) > 0 && f[0] != "" {
				made = "thin snapshot of " + f[0]
			}
		}
		d := c.bound.Sub(c.created)
		if c.mode == "Block" {
			vmTimes = append(vmTimes, d)
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.name, c.mode, c.node, c.lv, made, d.Round(time.Millisecond), podRead(c))
	}
	w.Flush()
	slices.Sort(vmTimes)
	pool := lvs["pool0"]
	ln := &thinlvmv1.LVMNode{}
	_ = k.Client.Get(ctx, types.NamespacedName{Name: node}, ln)
	fmt.Println()
	fmt.Println("Summary:")
	fmt.Printf("  golden base populated once on %s in %s (1 GiB qcow2 image, 256 MiB of data)\n", node, populate.Round(100*time.Millisecond))
	fmt.Printf("  %d VM disks of %s created at once: all Bound after %s (median %s; lvmd makes them one at a time)\n",
		len(vmTimes), diskSize, vmTimes[len(vmTimes)-1].Round(time.Millisecond), vmTimes[len(vmTimes)/2].Round(time.Millisecond))
	fmt.Printf("  one VM disk from the base, alone: %s from claim to Bound\n", alone.Round(time.Millisecond))
	fmt.Printf("  the same disk by a full copy (blank disk + 1 GiB copied): %s, %.1fx as long\n", copyTime.Round(100*time.Millisecond), copyTime.Seconds()/alone.Seconds())
	if len(ln.Status.DeviceClasses) > 0 && len(pool) > 2 {
		dc := ln.Status.DeviceClasses[0]
		fmt.Printf("  the VM's thin pool: %s of virtual size carved from %s real; data %s%%, metadata %s%%\n", dc.Virtual.String(), dc.PoolSize.String(), strings.TrimSpace(pool[2]), dc.MetadataPercent)
	}
}

// podRead is what the report says of what the claim's pod read.
func podRead(c *claim) string {
	switch {
	case c.node != node:
		return "- (kwok runs no container)"
	case c.mode == "Block":
		return fmt.Sprintf("the image's first %d MiB", headMiB)
	}
	for _, kv := range strings.Fields(c.read) {
		if v, ok := strings.CutPrefix(kv, "kib="); ok {
			return "8 MiB back, of " + v + " KiB"
		}
	}
	return c.read
}

// cleanup deletes the pods and claims (the node agent removes their LVs)
// and the GoldenImage (its base goes too), and waits for them.
func cleanup(ctx context.Context, k *cluster.Cluster, claims []*claim) error {
	var objs []client.Object
	for _, c := range claims {
		objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: "default"}},
			&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: "default"}})
	}
	objs = append(objs, &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: goldenName}})
	for _, o := range objs {
		if err := k.Client.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return k.WaitFor(ctx, "the LogicalVolumes gone", 10*time.Minute, func() (bool, error) {
		list := &thinlvmv1.LogicalVolumeList{}
		err := k.Client.List(ctx, list)
		return err == nil && len(list.Items) == 0, err
	})
}
