package migration_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/e2e/cluster"
)

// topoBuild is TopoLVM's module directory and where its lvmd and the
// test's client of it (guesthelper create) were built.
type topoBuild struct{ module, bin string }

// buildTopoLVM builds them in the TopoLVM benchmark's module, at the
// TopoLVM version it requires (v0.41.0), once.
var buildTopoLVM = sync.OnceValues(func() (topoBuild, error) {
	here, err := filepath.Abs(filepath.Join("..", "bench", "topolvm"))
	if err != nil {
		return topoBuild{}, err
	}
	run := func(dir string, args ...string) (string, error) {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output() // stdout alone: go list's answer, without go's download lines
		if err != nil {
			return "", fmt.Errorf("go %s in %s: %w\n%s", strings.Join(args, " "), dir, err, stderr.String())
		}
		return strings.TrimSpace(string(out)), nil
	}
	if _, err := run(here, "mod", "download", "github.com/topolvm/topolvm"); err != nil {
		return topoBuild{}, err
	}
	topo, err := run(here, "list", "-m", "-f", "{{.Dir}}", "github.com/topolvm/topolvm")
	if err != nil {
		return topoBuild{}, err
	}
	bin, err := os.MkdirTemp("", "topolvm-bin")
	if err != nil {
		return topoBuild{}, err
	}
	if _, err := run(topo, "build", "-trimpath", "-o", filepath.Join(bin, "topolvm-lvmd"), "./cmd/lvmd"); err != nil {
		return topoBuild{}, err
	}
	if _, err := run(here, "build", "-trimpath", "-o", filepath.Join(bin, "guesthelper"), "./guesthelper"); err != nil {
		return topoBuild{}, err
	}
	return topoBuild{module: topo, bin: bin}, nil
})

const topoSocket = "/run/topolvm-lvmd.sock"

// TopoLVM's lvmd on nodeA, beside thinlvm's on the same VG: a thick class
// and a thin class in thinlvm's pool0, as an operator running both for the
// switch would configure it.
const topoConfig = `socket-name: ` + topoSocket + `
lvm-command-prefix: ["/usr/sbin/lvm"]
device-classes:
- name: topo-thick
  volume-group: vg0
  default: true
  spare-gb: 0
- name: topo-thin
  volume-group: vg0
  spare-gb: 0
  type: thin
  thin-pool:
    name: pool0
    overprovision-ratio: 10
`

var topoLV = schema.GroupVersionKind{Group: "topolvm.io", Version: "v1", Kind: "LogicalVolume"}

// startTopoLVM starts TopoLVM's lvmd on node and stops it when t ends.
func startTopoLVM(t *testing.T, node string) {
	t.Helper()
	built, err := buildTopoLVM()
	if err != nil {
		t.Fatalf("building TopoLVM's lvmd: %v", err)
	}
	vm := tb.VMs[node]
	bin := filepath.Join(vm.ShareDir(), "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"topolvm-lvmd", "guesthelper"} {
		data, err := os.ReadFile(filepath.Join(built.bin, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bin, f), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(vm.ShareDir(), "topolvm-lvmd.yaml"), []byte(topoConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	pid, err := vm.SpawnPID(ctx, "topolvm-lvmd", "/share/topolvm-lvmd.log",
		"/share/bin/topolvm-lvmd", "--config", "/share/topolvm-lvmd.yaml", "--metrics-bind-address=")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = vm.Run(ctx, "kill", strconv.Itoa(pid)) })
	if err := tb.WaitFor(ctx, "TopoLVM's lvmd to serve", time.Minute, func() (bool, error) {
		_, err := vm.Run(ctx, "test", "-S", topoSocket)
		return err == nil, nil
	}); err != nil {
		log, _ := os.ReadFile(filepath.Join(vm.ShareDir(), "topolvm-lvmd.log"))
		t.Fatalf("%v\n%s", err, log)
	}
	if err := tb.Apply(ctx, filepath.Join(built.module, "config", "crd", "bases", "topolvm.io_logicalvolumes.yaml")); err != nil {
		t.Fatalf("TopoLVM's LogicalVolume CRD: %v", err)
	}
	if err := tb.WaitFor(ctx, "TopoLVM's LogicalVolume to be served", time.Minute, func() (bool, error) {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(topoLV.GroupVersion().WithKind("LogicalVolumeList"))
		return tb.Client.List(ctx, l) == nil, nil
	}); err != nil {
		t.Fatal(err)
	}
}

// topoVolume makes a claim of TopoLVM's as TopoLVM v0.41 makes one: its
// LogicalVolume (finalizer, label), the LV through TopoLVM's lvmd named
// after the object's UID, the volume's status, the PersistentVolume (the
// provisioner's annotation and finalizer, TopoLVM's topology) and the
// claim, Bound. It writes 32 MiB into the LV and returns its name.
func topoVolume(t *testing.T, node, claim, class, deviceClass string) string {
	t.Helper()
	pvName := "pvc-" + claim
	lv := &unstructured.Unstructured{}
	lv.SetGroupVersionKind(topoLV)
	lv.SetName(pvName)
	lv.SetFinalizers([]string{"topolvm.io/logicalvolume"})
	lv.SetLabels(map[string]string{"app.kubernetes.io/created-by": "topolvm-controller"})
	_ = unstructured.SetNestedMap(lv.Object, map[string]any{"name": pvName, "nodeName": node, "deviceClass": deviceClass, "size": "64Mi"}, "spec")
	if err := tb.Client.Create(ctx, lv); err != nil {
		t.Fatal(err)
	}
	id := string(lv.GetUID())
	inVM(t, node, "/share/bin/guesthelper", "create", "-socket", topoSocket, "-class", deviceClass, "-name", id, "-size", strconv.Itoa(64<<20))
	_ = unstructured.SetNestedMap(lv.Object, map[string]any{"volumeID": id, "currentSize": "64Mi"}, "status")
	if err := tb.Client.Status().Update(ctx, lv); err != nil {
		t.Fatal(err)
	}
	write(t, node, id, 0, 32)
	c := cluster.Claim(claim, class, "64Mi", true)
	c.Spec.VolumeName = pvName
	c.Annotations = map[string]string{"volume.kubernetes.io/selected-node": node, "volume.kubernetes.io/storage-provisioner": "topolvm.io"}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName, Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": "topolvm.io"},
			Finalizers: []string{"external-provisioner.volume.kubernetes.io/finalizer"}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:    corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("64Mi")},
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeMode: ptr.To(corev1.PersistentVolumeBlock),
			StorageClassName: class, PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: "default", Name: claim},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "topolvm.io", VolumeHandle: id,
				VolumeAttributes: map[string]string{"storage.kubernetes.io/csiProvisionerIdentity": "1-topolvm.io"}}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "topology.topolvm.io/node", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}},
		},
	}
	for _, o := range []client.Object{c, pv} {
		if err := tb.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	if err := tb.WaitFor(ctx, "TopoLVM's claim "+claim+" to bind", time.Minute, func() (bool, error) {
		err := tb.Client.Get(ctx, client.ObjectKeyFromObject(c), c)
		return err == nil && c.Status.Phase == corev1.ClaimBound, err
	}); err != nil {
		t.Fatal(err)
	}
	return id
}

// readThroughThinLVM publishes a Block volume through thinlvm's CSI node
// service on node, as the kubelet would for a pod, and returns the XXH64
// of what the pod would read.
func readThroughThinLVM(t *testing.T, node, volumeID, class string) string {
	t.Helper()
	conn, err := tb.VMs[node].DialCSI()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ns := csi.NewNodeClient(conn)
	dir := "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/publish/" + volumeID
	inVM(t, node, "mkdir", "-p", dir)
	target := dir + "/adopt-reader"
	capability := &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}
	if _, err := ns.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: volumeID, TargetPath: target, VolumeCapability: capability,
		VolumeContext: map[string]string{thinlvmv1.DeviceClassParameter: class}}); err != nil {
		t.Fatalf("publish %s on %s through thinlvm: %v", volumeID, node, err)
	}
	defer func() {
		if _, err := ns.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: volumeID, TargetPath: target}); err != nil {
			t.Errorf("unpublish %s: %v", volumeID, err)
		}
	}()
	sum, n, err := tb.VMs[node].Checksum(ctx, target)
	if err != nil || n != 64<<20 {
		t.Fatalf("reading %s published on %s: %v (%d bytes)", volumeID, node, err, n)
	}
	return sum
}

// Claims of TopoLVM's, thin and thick, made by TopoLVM's own lvmd on
// nodeA's real lvm2, taken over by `kubectl thinlvm adopt --from-topolvm`:
// refused while a pod uses one, a dry run changes nothing, then the LVs
// stay where they are, the claims keep their names and are thinlvm's, a
// reader through thinlvm sees the same bytes, and nothing of TopoLVM's
// objects remains.
func TestAdoptFromTopoLVM(t *testing.T) {
	startTopoLVM(t, nodeA)
	for _, sc := range []*storagev1.StorageClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "topolvm-thin"}, Provisioner: "topolvm.io", Parameters: map[string]string{"topolvm.io/device-class": "topo-thin"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "topolvm-thick"}, Provisioner: "topolvm.io", Parameters: map[string]string{"topolvm.io/device-class": "topo-thick"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "adopt-thin"}, Provisioner: thinlvmv1.DriverName, Parameters: map[string]string{thinlvmv1.DeviceClassParameter: "ssd"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "adopt-thick"}, Provisioner: thinlvmv1.DriverName, Parameters: map[string]string{thinlvmv1.DeviceClassParameter: thickDeviceClass}},
	} {
		sc.VolumeBindingMode = ptr.To(storagev1.VolumeBindingWaitForFirstConsumer)
		sc.ReclaimPolicy = ptr.To(corev1.PersistentVolumeReclaimDelete)
		if err := tb.Client.Create(ctx, sc); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tb.Client.Delete(ctx, sc) })
	}
	ids := map[string]string{
		"topo-thin":  topoVolume(t, nodeA, "topo-thin", "topolvm-thin", "topo-thin"),
		"topo-thick": topoVolume(t, nodeA, "topo-thick", "topolvm-thick", "topo-thick"),
	}
	want := map[string]string{}
	for claim, id := range ids {
		want[claim] = checksum(t, nodeA, id)
	}
	if attr := lvField(t, nodeA, ids["topo-thin"], "lv_attr"); !strings.HasPrefix(attr, "Vwi") || lvField(t, nodeA, ids["topo-thin"], "pool_lv") != "pool0" {
		t.Fatalf("TopoLVM's thin LV: lv_attr %q, want a thin LV of pool0", attr)
	}
	if attr := lvField(t, nodeA, ids["topo-thick"], "lv_attr"); !strings.HasPrefix(attr, "-wi") {
		t.Fatalf("TopoLVM's thick LV: lv_attr %q, want a linear LV", attr)
	}
	args := []string{"adopt", "--from-topolvm", "topo-thin", "topo-thick", "--storage-class", "topolvm-thin=adopt-thin",
		"--storage-class", "topolvm-thick=adopt-thick", "--timeout", "3m"}

	// Refused while a pod uses a claim, naming it; the other claim is
	// adopted all the same, and a run again after the pod is gone does the
	// rest.
	if err := tb.Client.Create(ctx, cluster.Pod("topo-user", true, cluster.OnNode(nodeA), "topo-thin")); err != nil {
		t.Fatal(err)
	}
	if out, err := kubectlThinLVM(t, append(args, "--dry-run")...); err == nil || !strings.Contains(out, "in use by pod(s) topo-user") {
		t.Fatalf("a dry run with a pod using the claim: %v\n%s", err, out)
	} else if !strings.Contains(out, "would create logicalvolume/"+ids["topo-thick"]) {
		t.Errorf("the dry run does not say it would take the thick LV over:\n%s", out)
	}
	list := &thinlvmv1.LogicalVolumeList{}
	if err := tb.Client.List(ctx, list); err != nil {
		t.Fatal(err)
	}
	for _, lv := range list.Items {
		if lv.Name == ids["topo-thin"] || lv.Name == ids["topo-thick"] {
			t.Errorf("the dry run made logicalvolume/%s", lv.Name)
		}
	}
	deletePod(t, "topo-user")
	out, err := kubectlThinLVM(t, args...)
	if err != nil {
		t.Fatalf("adopt: %v\n%s", err, out)
	}
	t.Logf("adopt:\n%s", out)

	for claim, id := range ids {
		lv := bound(t, claim, time.Minute)
		if lv.Name != id || lv.Spec.NodeName != nodeA || !lv.Spec.Adopt || !meta.IsStatusConditionTrue(lv.Status.Conditions, thinlvmv1.ConditionReady) {
			t.Errorf("claim %s is bound to logicalvolume/%s on %s (adopt %t): want %s on %s, Ready", claim, lv.Name, lv.Spec.NodeName, lv.Spec.Adopt, id, nodeA)
		}
		if len(lv.Annotations) > 0 && lv.Annotations["thinlvm.io/adopt-of"] != "" {
			t.Errorf("logicalvolume/%s keeps the adoption's record", lv.Name)
		}
		pvc := &corev1.PersistentVolumeClaim{}
		if err := tb.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: claim}, pvc); err != nil {
			t.Fatal(err)
		}
		pv := &corev1.PersistentVolume{}
		if err := tb.Client.Get(ctx, types.NamespacedName{Name: pvc.Spec.VolumeName}, pv); err != nil {
			t.Fatal(err)
		}
		if pv.Name != "pvc-"+claim || pv.Spec.CSI.Driver != thinlvmv1.DriverName || pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete ||
			pv.Spec.StorageClassName != strings.Replace(*pvc.Spec.StorageClassName, "topolvm", "adopt", 1) || !strings.HasPrefix(pv.Spec.StorageClassName, "adopt-") {
			t.Errorf("claim %s's volume: %s of %s, reclaim %s, class %s: want pvc-%s, thinlvm's, Delete, adopt-*", claim, pv.Name, pv.Spec.CSI.Driver,
				pv.Spec.PersistentVolumeReclaimPolicy, pv.Spec.StorageClassName, claim)
		}
		if tags := lvField(t, nodeA, id, "lv_tags"); !strings.Contains(tags, "thinlvm") || !strings.Contains(tags, "lv:"+id) {
			t.Errorf("the LV of %s has tags %q: want thinlvm's", claim, tags)
		}
		if got := checksum(t, nodeA, id); got != want[claim] {
			t.Errorf("the LV of %s changed: checksum %s, was %s", claim, got, want[claim])
		}
		if got := readThroughThinLVM(t, nodeA, id, lv.Spec.DeviceClass); got != want[claim] {
			t.Errorf("claim %s read through thinlvm: checksum %s, TopoLVM's volume had %s", claim, got, want[claim])
		}
		topo := &unstructured.Unstructured{}
		topo.SetGroupVersionKind(topoLV)
		if err := tb.Client.Get(ctx, types.NamespacedName{Name: "pvc-" + claim}, topo); !apierrors.IsNotFound(err) {
			t.Errorf("TopoLVM's logicalvolume/pvc-%s is still there (%v)", claim, err)
		}
	}
	if out, err := kubectlThinLVM(t, args...); err != nil || !strings.Contains(out, "thinlvm's already") {
		t.Errorf("adopt again: %v\n%s", err, out)
	}
	// thinlvm owns them now: deleting the claims deletes the LVs.
	for claim, id := range ids {
		if err := tb.Client.Delete(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: claim}}); err != nil {
			t.Error(err)
		}
		if err := tb.WaitFor(ctx, "the LV of "+claim+" to go with its claim", 2*time.Minute, func() (bool, error) {
			return !hasLV(t, nodeA, id), nil
		}); err != nil {
			t.Error(err)
		}
	}
	noLeftovers(t)
}
