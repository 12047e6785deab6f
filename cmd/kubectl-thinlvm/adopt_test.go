package main

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/internal/testutil"
)

// The adoption itself (TopoLVM's lvmd making the LVs on real lvm2, the
// claims bound again, the bytes read through thinlvm) runs in
// e2e/migration; here, what adopt refuses and what a dry run prints.

// seedAdoptions makes namespace adopting's claims of TopoLVM's, as
// TopoLVM leaves them, on node-t (thinlvm runs there: thin class ssd,
// thick class thick) and node-x (no thinlvm), and the StorageClasses.
func seedAdoptions(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	c := env.Client
	data, err := os.ReadFile(filepath.Join("testdata", "topolvm-crds.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crd := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(data, &crd.Object); err != nil {
		t.Fatal(err)
	}
	if err := client.IgnoreAlreadyExists(c.Create(ctx, crd)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "TopoLVM's LogicalVolume to be served", func() bool {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(topoLogicalVolume.GroupVersion().WithKind("LogicalVolumeList"))
		return pluginClient(t).List(ctx, l) == nil
	})
	var made []client.Object
	create := func(o client.Object) {
		t.Helper()
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		made = append(made, o)
	}
	t.Cleanup(func() {
		for _, o := range made {
			forceDelete(t, o)
		}
	})
	if err := client.IgnoreAlreadyExists(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "adopting"}})); err != nil {
		t.Fatal(err)
	}
	q := resource.MustParse
	ln := &thinlvmv1.LVMNode{ObjectMeta: metav1.ObjectMeta{Name: "node-t"}}
	create(ln)
	ln.Status.DeviceClasses = []thinlvmv1.DeviceClassStatus{
		{Name: "ssd", Default: true, VolumeGroup: "vg0", ThinPool: "pool0", PoolSize: q("80Gi"), Available: q("40Gi"), OverprovisionRatio: "2"},
		{Name: "thick", Type: thinlvmv1.DeviceClassThick, VolumeGroup: "vg0", VGSize: q("200Gi"), VGFree: q("100Gi"), Available: q("90Gi")},
	}
	if err := c.Status().Update(ctx, ln); err != nil {
		t.Fatal(err)
	}
	create(&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "thinlvm-thick"}, Provisioner: thinlvmv1.DriverName,
		Parameters: map[string]string{thinlvmv1.DeviceClassParameter: "thick"}})
	create(&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "not-thinlvm"}, Provisioner: "other.example"})
	for _, v := range []struct{ claim, class, node string }{
		{"db", "topolvm-provisioner", "node-t"},
		{"used", "topolvm-provisioner", "node-t"},
		{"unmapped", "topolvm-ssd", "node-t"},
		{"away", "topolvm-provisioner", "node-x"},
	} {
		pvName := "pvc-topo-" + v.claim
		lv := &unstructured.Unstructured{}
		lv.SetGroupVersionKind(topoLogicalVolume)
		lv.SetName(pvName)
		lv.SetFinalizers([]string{topoFinalizer})
		_ = unstructured.SetNestedMap(lv.Object, map[string]any{"name": pvName, "nodeName": v.node, "deviceClass": "hdd", "size": "8Gi"}, "spec")
		create(lv)
		id := string(lv.GetUID())
		_ = unstructured.SetNestedMap(lv.Object, map[string]any{"volumeID": id, "currentSize": "8Gi"}, "status")
		if err := c.Status().Update(ctx, lv); err != nil {
			t.Fatal(err)
		}
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: v.claim, Namespace: "adopting"}, Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(v.class), AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeName: pvName,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: q("8Gi")}}}}
		create(pvc)
		pvc.Status.Phase = corev1.ClaimBound
		if err := c.Status().Update(ctx, pvc); err != nil {
			t.Fatal(err)
		}
		create(&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pvName}, Spec: corev1.PersistentVolumeSpec{
			Capacity: corev1.ResourceList{corev1.ResourceStorage: q("8Gi")}, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: v.class, PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			ClaimRef:               &corev1.ObjectReference{Namespace: "adopting", Name: v.claim},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: topoDriver, VolumeHandle: id, FSType: "xfs"}}}})
	}
	create(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "user", Namespace: "adopting"}, Spec: podTemplate("used").Spec})
}

func TestAdoptRefusals(t *testing.T) {
	seedAdoptions(t)
	before := versions(t)
	m := "--storage-class=topolvm-provisioner=thinlvm-thick"
	for _, c := range []struct{ args, want string }{
		{"adopt -n adopting db " + m, "--from-topolvm is required"},
		{"adopt --from-topolvm -A db " + m, "-A takes no names"},
		{"adopt --from-topolvm -n adopting db --storage-class=topolvm-provisioner", `--storage-class "topolvm-provisioner": want TOPOLVM=THINLVM`},
		{"adopt --from-topolvm -n adopting nothere " + m, "claim adopting/nothere not found"},
		{"adopt --from-topolvm -n adopting db", "claim adopting/db is of TopoLVM's storageclass \"topolvm-provisioner\": say which thinlvm StorageClass takes it (--storage-class topolvm-provisioner=THINLVM)"},
		{"adopt --from-topolvm -n adopting db --storage-class=topolvm-provisioner=not-thinlvm", "storageclass/not-thinlvm is other.example's, not thinlvm's"},
		{"adopt --from-topolvm -n adopting db --storage-class=topolvm-provisioner=nothere", "reading storageclass/nothere"},
		{"adopt --from-topolvm -n adopting away " + m, "node node-x does not run thinlvm (no LVMNode node-x)"},
		{"adopt --from-topolvm -n adopting used " + m, "claim adopting/used is in use by pod(s) user: stop them first"},
		{"adopt --from-topolvm -n adopting " + m, "3 of 4 claims not adopted: adopting/away, adopting/unmapped, adopting/used"},
	} {
		t.Run(c.args, func(t *testing.T) {
			out, _, err := kubectl(t, append(strings.Fields(c.args), "--dry-run")...)
			if !strings.Contains(c.args, "adopting "+m) {
				out, _, err = kubectl(t, strings.Fields(c.args)...)
			}
			if err == nil || !strings.Contains(err.Error()+out, c.want) {
				t.Errorf("%v\n%s\nwant an error with %q", err, out, c.want)
			}
		})
	}
	if after := versions(t); !maps.Equal(before, after) {
		t.Errorf("a refused adoption changed objects: %v, then %v", before, after)
	}
}

// A dry run prints each step it would take, and changes nothing.
func TestAdoptDryRun(t *testing.T) {
	seedAdoptions(t)
	before := versions(t)
	out, errOut, err := kubectl(t, "adopt", "--from-topolvm", "-n", "adopting", "db", "--storage-class", "topolvm-provisioner=thinlvm-thick", "--dry-run")
	if err != nil {
		t.Fatal(err)
	}
	// The LV's name is the TopoLVM LogicalVolume's UID: made anew each run.
	lv := &unstructured.Unstructured{}
	lv.SetGroupVersionKind(topoLogicalVolume)
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "pvc-topo-db"}, lv); err != nil {
		t.Fatal(err)
	}
	golden(t, "adopt-dry-run", strings.ReplaceAll(out+"--- stderr\n"+errOut, string(lv.GetUID()), "<uid>"))
	if after := versions(t); !maps.Equal(before, after) {
		t.Errorf("a dry run changed objects: %v, then %v", before, after)
	}
}
