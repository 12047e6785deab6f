package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/internal/envtest"
	"github.com/thinlvm/thinlvm/internal/testutil"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden with what the commands print")

// kubeconfig is the test API server's, as the plugin's user has one; env
// is that API server.
var (
	kubeconfig string
	env        *envtest.Env
)

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "kubectl-thinlvm")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	kubeconfig = filepath.Join(dir, "kubeconfig")
	envtest.Main(m, func(e *envtest.Env) {
		env = e
		err := e.WriteKubeconfig(kubeconfig)
		if err == nil {
			err = seed(context.Background(), e.Client)
		}
		if err != nil {
			_ = e.Stop()
			fmt.Fprintln(os.Stderr, "FAIL: the test cluster:", err)
			os.Exit(1)
		}
	})
}

// kubectl runs the plugin as kubectl would, with the test API server's
// kubeconfig, and returns what it printed on standard output and error.
func kubectl(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return kubectlWith(t, kubeconfig, args...)
}

// kubectlWith is kubectl with another user's kubeconfig.
func kubectlWith(t *testing.T, config string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := newRootCommand(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	cmd.SetArgs(append([]string{"--kubeconfig", config}, args...))
	err = cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

// golden compares got with testdata/name.golden (-update writes it).
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run %s -args -update writes it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("%s differs from %s:\n--- got\n%s--- want\n%s", t.Name(), path, got, want)
	}
}

// seed makes a cluster as thinlvm leaves it: two nodes (one with a pool
// over its high-water mark and a failed base), a golden image held on one
// node and populating on the other, a channel, and claims made empty, from
// the image, cloned, copied from the other node, and one pending.
func seed(ctx context.Context, c client.Client) error {
	q := resource.MustParse
	gi := &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: "ubuntu-24.04"}, Spec: thinlvmv1.GoldenImageSpec{
		Source: thinlvmv1.ImageSource{HTTP: &thinlvmv1.HTTPSource{URL: "https://user:secret@images.example/ubuntu.img?sig=x", SHA256: strings.Repeat("ab", 32)}}, Size: q("4Gi")}}
	old := &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: "ubuntu-22.04"}, Spec: thinlvmv1.GoldenImageSpec{
		Source: thinlvmv1.ImageSource{Registry: &thinlvmv1.RegistrySource{Image: "registry.example/disks/ubuntu@sha256:" + strings.Repeat("cd", 32)}}, Size: q("2Gi")}}
	for _, o := range []*thinlvmv1.GoldenImage{gi, old} {
		if err := c.Create(ctx, o); err != nil {
			return err
		}
	}
	gi.Status.Conditions = []metav1.Condition{{Type: thinlvmv1.ConditionImageReady, Status: metav1.ConditionTrue, Reason: thinlvmv1.ReasonBaseReady, LastTransitionTime: metav1.Now()}}
	if err := c.Status().Update(ctx, gi); err != nil {
		return err
	}
	ch := &thinlvmv1.GoldenImageChannel{ObjectMeta: metav1.ObjectMeta{Name: "ubuntu"}, Spec: thinlvmv1.GoldenImageChannelSpec{GoldenImage: gi.Name}}
	if err := c.Create(ctx, ch); err != nil {
		return err
	}
	ch.Status.Versions = []thinlvmv1.ChannelVersion{{GoldenImage: gi.Name, Current: true}, {GoldenImage: old.Name}}
	if err := c.Status().Update(ctx, ch); err != nil {
		return err
	}
	base := func(im *thinlvmv1.GoldenImage, state thinlvmv1.GoldenBaseState, msg string) thinlvmv1.GoldenBaseStatus {
		return thinlvmv1.GoldenBaseStatus{Name: im.Name, LV: thinlvmv1.BaseLVName(im), DeviceClass: "ssd", Size: im.Spec.Size, State: state, Message: msg}
	}
	class := func(available, data, meta string, lvs int32) thinlvmv1.DeviceClassStatus {
		return thinlvmv1.DeviceClassStatus{Name: "ssd", Default: true, VolumeGroup: "vg0", ThinPool: "pool0", VGSize: q("100Gi"), VGFree: q("10Gi"),
			PoolSize: q("80Gi"), DataUsed: q("20Gi"), DataPercent: data, MetadataPercent: meta, Virtual: q("120Gi"), OverprovisionRatio: "2",
			Available: q(available), LVCount: lvs, VGMetadata: &thinlvmv1.VGMetadataStatus{Size: q("1Mi"), Free: q("512Ki"), LVsLeft: 400}}
	}
	full := class("0", "91.20", "40.00", 12)
	full.OverHighWatermark = true
	full.VGMetadata.LVsLeft = 40
	nodes := map[string]thinlvmv1.LVMNodeStatus{
		"node-a": {DeviceClasses: []thinlvmv1.DeviceClassStatus{class("40Gi", "25.00", "5.10", 6)},
			GoldenBases: []thinlvmv1.GoldenBaseStatus{base(gi, thinlvmv1.GoldenBaseReady, "")}},
		"node-b": {DeviceClasses: []thinlvmv1.DeviceClassStatus{full},
			GoldenBases: []thinlvmv1.GoldenBaseStatus{base(gi, thinlvmv1.GoldenBasePopulating, ""), base(old, thinlvmv1.GoldenBaseFailed, "fetch: 404 Not Found")}},
	}
	for name, st := range nodes {
		ln := &thinlvmv1.LVMNode{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := c.Create(ctx, ln); err != nil {
			return err
		}
		ln.Status = st
		ln.Status.UpdateTime = &metav1.Time{Time: time.Now()}
		if err := c.Status().Update(ctx, ln); err != nil {
			return err
		}
	}
	for _, sc := range []*storagev1.StorageClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "thinlvm"}, Provisioner: thinlvmv1.DriverName},
		{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Provisioner: "other.example"},
	} {
		if err := c.Create(ctx, sc); err != nil {
			return err
		}
	}
	// Claims, each with its PV and LogicalVolume when bound.
	type vol struct {
		claim, ns, class, node string
		source                 *thinlvmv1.VolumeSource
		transfer               *thinlvmv1.TransferStatus
		ready                  bool
	}
	for _, v := range []vol{
		{claim: "data", ns: "default", class: "thinlvm", node: "node-a", ready: true},
		{claim: "vm-1-disk", ns: "vms", class: "thinlvm", node: "node-a", source: &thinlvmv1.VolumeSource{Kind: thinlvmv1.SourceGoldenImage, Name: gi.Name}, ready: true},
		{claim: "vm-2-disk", ns: "vms", class: "thinlvm", node: "node-a", source: &thinlvmv1.VolumeSource{Kind: thinlvmv1.SourceGoldenImage, Name: gi.Name}, ready: true},
		{claim: "vm-1-clone", ns: "vms", class: "thinlvm", node: "node-b", source: &thinlvmv1.VolumeSource{Kind: thinlvmv1.SourceVolume, Name: "pv-vms-vm-1-disk"},
			transfer: &thinlvmv1.TransferStatus{SourceNode: "node-a", Mode: thinlvmv1.TransferDelta, Base: "gi-ubuntu-24-04", BytesDone: 1 << 29, BytesTotal: 1 << 30}},
		{claim: "waiting", ns: "default", class: "thinlvm"},
		{claim: "elsewhere", ns: "default", class: "other"},
	} {
		if v.ns != "default" {
			if err := client.IgnoreAlreadyExists(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: v.ns}})); err != nil {
				return err
			}
		}
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: v.claim, Namespace: v.ns}, Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(v.class), AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: q("8Gi")}}}}
		if v.node != "" {
			pvc.Spec.VolumeName = "pv-" + v.ns + "-" + v.claim
		}
		if err := c.Create(ctx, pvc); err != nil {
			return err
		}
		if v.node == "" {
			continue
		}
		pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pvc.Spec.VolumeName}, Spec: corev1.PersistentVolumeSpec{
			Capacity: corev1.ResourceList{corev1.ResourceStorage: q("8Gi")}, AccessModes: pvc.Spec.AccessModes, StorageClassName: v.class,
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: thinlvmv1.DriverName, VolumeHandle: pvc.Spec.VolumeName}}}}
		if err := c.Create(ctx, pv); err != nil {
			return err
		}
		lv := &thinlvmv1.LogicalVolume{ObjectMeta: metav1.ObjectMeta{Name: pv.Name}, Spec: thinlvmv1.LogicalVolumeSpec{
			Name: pv.Name, NodeName: v.node, DeviceClass: "ssd", Size: q("8Gi"), Source: v.source}}
		if err := c.Create(ctx, lv); err != nil {
			return err
		}
		status, reason := metav1.ConditionTrue, thinlvmv1.ReasonCreated
		if !v.ready {
			status, reason = metav1.ConditionFalse, thinlvmv1.ReasonCopying
		}
		lv.Status.Conditions = []metav1.Condition{{Type: thinlvmv1.ConditionReady, Status: status, Reason: reason, LastTransitionTime: metav1.Now()}}
		lv.Status.Transfer = v.transfer
		if err := c.Status().Update(ctx, lv); err != nil {
			return err
		}
	}
	return nil
}

func TestNodes(t *testing.T) {
	for _, c := range []struct{ name, args string }{
		{"nodes", "nodes"},
		{"nodes-wide", "nodes -o wide"},
		{"nodes-one", "nodes node-a"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, err := kubectl(t, strings.Fields(c.args)...)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, c.name, out+"--- stderr\n"+errOut)
		})
	}
	out, _, err := kubectl(t, "nodes", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var got itemList[NodeClass]
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Items) != 2 || got.Items[1].Health != "OverHighWatermark" || len(got.Items[1].Warnings) != 5 || got.Items[0].Warnings != nil {
		t.Errorf("nodes -o json: %+v", got.Items)
	}
	if _, _, err := kubectl(t, "nodes", "node-x"); err == nil || !strings.Contains(err.Error(), "node-x has no LVMNode") {
		t.Errorf("an unknown node: %v", err)
	}
	if _, _, err := kubectl(t, "nodes", "-o", "name"); err == nil || !strings.Contains(err.Error(), `unknown output format "name"`) {
		t.Errorf("-o name: %v", err)
	}
}

func TestVolumes(t *testing.T) {
	for _, c := range []struct{ name, args string }{
		{"volumes", "volumes"},
		{"volumes-all", "volumes -A"},
		{"volumes-all-wide", "volumes -A -o wide"},
		{"volumes-node-b", "volumes -A --node node-b"},
		{"volumes-yaml", "volumes -n vms vm-1-clone -o yaml"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, err := kubectl(t, strings.Fields(c.args)...)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, c.name, out+"--- stderr\n"+errOut)
		})
	}
	if _, _, err := kubectl(t, "volumes", "elsewhere"); err == nil || !strings.Contains(err.Error(), "claim default/elsewhere is not thinlvm's") {
		t.Errorf("another driver's claim: %v", err)
	}
	if _, _, err := kubectl(t, "volumes", "nothere"); err == nil || !strings.Contains(err.Error(), "claim default/nothere not found") {
		t.Errorf("a missing claim: %v", err)
	}
	if out, _, err := kubectl(t, "volumes", "-A", "--node", "node-x", "-o", "json"); err != nil || strings.TrimSpace(out) != "{\n    \"items\": []\n}" {
		t.Errorf("no volume on node-x, -o json: %q, %v", out, err)
	}
	if _, _, err := kubectl(t, "volumes", "-A", "data"); err == nil {
		t.Error("-A with a claim's name: no error")
	}
}

func TestImages(t *testing.T) {
	for _, c := range []struct{ name, args string }{
		{"images", "images"},
		{"images-wide", "images -o wide"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, err := kubectl(t, strings.Fields(c.args)...)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, c.name, out+"--- stderr\n"+errOut)
		})
	}
	if _, _, err := kubectl(t, "images", "debian"); err == nil || !strings.Contains(err.Error(), "GoldenImage debian not found") {
		t.Errorf("an unknown image: %v", err)
	}
}

// TestViewerRole runs every command as a user bound to nothing but the
// read-only ClusterRole deploy/ ships for the plugin (thinlvm-viewer,
// generated from the plugin's RBAC markers): each prints what it prints
// for an administrator. A user bound to nothing is refused, so the
// comparison would fail if the role lacked a read.
func TestViewerRole(t *testing.T) {
	ctx := context.Background()
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "rbac", "viewer", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(data, role); err != nil {
		t.Fatal(err)
	}
	for _, r := range role.Rules {
		for _, v := range r.Verbs {
			if v != "get" && v != "list" && v != "watch" {
				t.Errorf("thinlvm-viewer may %s %v: not read-only", v, r.Resources)
			}
		}
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "viewer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "viewer"}}}
	for _, o := range []client.Object{role, binding} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	viewer, nobody := filepath.Join(dir, "viewer"), filepath.Join(dir, "nobody")
	if err := env.WriteUserKubeconfig(viewer, "viewer"); err != nil {
		t.Fatal(err)
	}
	if err := env.WriteUserKubeconfig(nobody, "nobody"); err != nil {
		t.Fatal(err)
	}
	commands := []string{"nodes -o wide", "volumes -A -o wide", "volumes -n vms vm-1-clone -o yaml", "images -o wide"}
	// The authorizer sees the new binding within moments.
	testutil.Eventually(t, "nodes to run as thinlvm-viewer (its binding in effect)", func() bool {
		_, _, err := kubectlWith(t, viewer, "nodes")
		return err == nil
	})
	for _, args := range commands {
		want, _, err := kubectl(t, strings.Fields(args)...)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := kubectlWith(t, viewer, strings.Fields(args)...)
		if err != nil {
			t.Errorf("%s as thinlvm-viewer: %v", args, err)
		} else if got != want {
			t.Errorf("%s as thinlvm-viewer:\n%s\nas an administrator:\n%s", args, got, want)
		}
		if _, _, err := kubectlWith(t, nobody, strings.Fields(args)...); err == nil || !strings.Contains(err.Error(), "forbidden") {
			t.Errorf("%s as a user bound to nothing: %v, want forbidden", args, err)
		}
	}
}
