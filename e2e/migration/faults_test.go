package migration_test

import (
	"crypto/tls"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/e2e/cluster"
	"github.com/thinlvm/thinlvm/node/transfer"
	transferpb "github.com/thinlvm/thinlvm/node/transfer/proto"
)

// publish plays the kubelet: it publishes a Filesystem volume (xfs) on a
// node at a target path in its VM and returns it with an unpublish func.
func publish(t testing.TB, node string, lv *thinlvmv1.LogicalVolume, pod string) (string, func()) {
	t.Helper()
	conn, err := tb.VMs[node].DialCSI()
	if err != nil {
		t.Fatal(err)
	}
	ns := csi.NewNodeClient(conn)
	target := "/var/lib/kubelet/pods/" + pod + "/volumes/kubernetes.io~csi/" + lv.Name + "/mount"
	inVM(t, node, "mkdir", "-p", target)
	capability := &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "xfs"}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}
	if _, err := ns.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: lv.Name, TargetPath: target, VolumeCapability: capability,
		VolumeContext: map[string]string{thinlvmv1.DeviceClassParameter: lv.Spec.DeviceClass}}); err != nil {
		conn.Close()
		t.Fatalf("publish %s on %s: %v", lv.Name, node, err)
	}
	return target, func() {
		defer conn.Close()
		if _, err := ns.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: lv.Name, TargetPath: target}); err != nil {
			t.Errorf("unpublish %s on %s: %v", lv.Name, node, err)
		}
	}
}

// A VolumeSnapshot of a Filesystem volume restored on the other node: the
// restore mounts there and shows the file written before the snapshot.
func TestRestoreOnAnotherNode(t *testing.T) {
	c := cluster.Claim("fs-src", cluster.FilesystemClass, "1Gi", false)
	for _, o := range []client.Object{c, cluster.Pod("fs-src", false, cluster.OnNode(nodeA), "fs-src")} {
		if err := tb.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	src := bound(t, "fs-src", 3*time.Minute)
	dir, unpublish := publish(t, nodeA, src, "fs-src")
	inVM(t, nodeA, "dd", "if=/dev/urandom", "of="+dir+"/data", "bs=1M", "count=32", "conv=fsync", "status=none")
	want := inVM(t, nodeA, "sha256sum", dir+"/data")
	want, _, _ = strings.Cut(want, " ")
	unpublish()

	snap := cluster.VolumeSnapshot("fs-snap", "fs-src")
	if err := tb.Client.Create(ctx, snap); err != nil {
		t.Fatal(err)
	}
	if err := tb.WaitFor(ctx, "the snapshot to be ready", 3*time.Minute, func() (bool, error) {
		err := tb.Client.Get(ctx, client.ObjectKeyFromObject(snap), snap)
		ready, _, _ := unstructured.NestedBool(snap.Object, "status", "readyToUse")
		return err == nil && ready, err
	}); err != nil {
		t.Fatal(err)
	}
	r := cluster.Claim("fs-restored", cluster.FilesystemClass, "1Gi", false)
	r.Spec.DataSource = &corev1.TypedLocalObjectReference{APIGroup: ptr.To("snapshot.storage.k8s.io"), Kind: "VolumeSnapshot", Name: "fs-snap"}
	for _, o := range []client.Object{r, cluster.Pod("fs-restored", false, cluster.OnNode(nodeB), "fs-restored")} {
		if err := tb.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	lv := bound(t, "fs-restored", 5*time.Minute)
	if lv.Spec.NodeName != nodeB || lv.Status.Transfer == nil || lv.Status.Transfer.Mode != thinlvmv1.TransferMapped {
		t.Fatalf("restore on %s with transfer %+v, want a Mapped copy on %s", lv.Spec.NodeName, lv.Status.Transfer, nodeB)
	}
	dir, unpublish = publish(t, nodeB, lv, "fs-restored")
	got, _, _ := strings.Cut(inVM(t, nodeB, "sha256sum", dir+"/data"), " ")
	unpublish()
	if got != want {
		t.Errorf("the restored file's checksum %s differs from the original's %s", got, want)
	}
	if err := tb.Client.Delete(ctx, snap); err != nil {
		t.Error(err)
	}
	remove(t, "fs-restored", "fs-src")
}

// The target's agent killed in the middle of a copy: its kubelet starts it
// again, it removes the half-filled LV and copies again; the claim binds to
// an identical volume, and nothing is left of the first attempt.
func TestCopyInterruptedByAgentKill(t *testing.T) {
	disk(t, "kill-src", aloneClass, "1Gi", nodeA, nil)
	src := bound(t, "kill-src", 3*time.Minute)
	write(t, nodeA, src.Status.VolumeID, 0, 96) // long enough a copy to be seen under way
	want := checksum(t, nodeA, src.Status.VolumeID)

	disk(t, "kill-copy", aloneClass, "1Gi", nodeB, fromClaim("kill-src"))
	var name string
	if err := tb.WaitFor(ctx, "the copy to be under way", 5*time.Minute, func() (bool, error) {
		list := &thinlvmv1.LogicalVolumeList{}
		if err := tb.Client.List(ctx, list); err != nil {
			return false, err
		}
		for _, lv := range list.Items {
			if st := lv.Status.Transfer; lv.Spec.NodeName == nodeB && st != nil && st.BytesDone > 0 && st.BytesDone < st.BytesTotal {
				name = lv.Name
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := tb.KillContainer(ctx, tb.NodeProcess(nodeB, "thinlvm-node")); err != nil {
		t.Fatal(err)
	}
	lv := bound(t, "kill-copy", 10*time.Minute)
	if lv.Name != name || lv.Status.Transfer.Attempts < 2 {
		t.Errorf("the copy %s took %d attempts, want a second one after the kill", lv.Name, lv.Status.Transfer.Attempts)
	}
	if got := checksum(t, nodeB, lv.Status.VolumeID); got != want {
		t.Errorf("the copy's checksum %s differs from the source's %s", got, want)
	}
	remove(t, "kill-copy", "kill-src")
}

// transferClient dials node's transfer endpoint, pinning its published
// certificate, and presents own (none when own has no certificate).
func transferClient(t testing.TB, node string, own tls.Certificate) transferpb.TransferClient {
	t.Helper()
	ln := &thinlvmv1.LVMNode{}
	if err := tb.Client.Get(ctx, types.NamespacedName{Name: node}, ln); err != nil {
		t.Fatal(err)
	}
	ep := ln.Status.Transfer
	if ep == nil {
		t.Fatalf("%s publishes no transfer endpoint", node)
	}
	pin := ep.CertificateSHA256
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS13, InsecureSkipVerify: true, // the pin below is the check
		VerifyConnection: func(cs tls.ConnectionState) error {
			if got := transfer.Fingerprint(cs.PeerCertificates[0].Raw); got != pin {
				return fmt.Errorf("certificate %s, want %s", got, pin)
			}
			return nil
		}}
	if len(own.Certificate) > 0 {
		cfg.Certificates = []tls.Certificate{own}
	}
	conn, err := grpc.NewClient("passthrough:///"+tb.VMs[node].Addr(9443), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return transferpb.NewTransferClient(conn)
}

// A node's endpoint serves a copy only to the agent of the node the copy
// is made on, which proves it with the key its LVMNode pins: a caller
// with no certificate, or with a key of its own under either node's name
// (a tenant's pod, whatever its ServiceAccount), is refused before
// anything is read. That the right agent is served, every copy in this
// suite shows.
func TestTransferRefusesOtherCallers(t *testing.T) {
	disk(t, "tok-src", aloneClass, "1Gi", nodeA, nil)
	bound(t, "tok-src", 3*time.Minute)
	disk(t, "tok-copy", aloneClass, "1Gi", nodeB, fromClaim("tok-src"))
	target := bound(t, "tok-copy", 5*time.Minute)
	for _, tc := range []struct {
		name, as string // as: the node a certificate of the test's own key names; "" none
		code     codes.Code
	}{
		{"no certificate", "", codes.Unavailable},
		{"a key of its own as the target's node", nodeB, codes.Unauthenticated},
		{"a key of its own as the source's node", nodeA, codes.Unauthenticated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var own tls.Certificate
			if tc.as != "" {
				var err error
				if own, _, err = transfer.NewCertificate(tc.as); err != nil {
					t.Fatal(err)
				}
			}
			_, err := transferClient(t, nodeA, own).Open(ctx, &transferpb.OpenRequest{Target: target.Name})
			if status.Code(err) != tc.code {
				t.Errorf("open: %v, want %v", err, tc.code)
			}
		})
	}
	remove(t, "tok-copy", "tok-src")
}

// The source's node has no room for the clone: the scheduler sends the
// clone's pod to the other node, and the claim binds there.
func TestSchedulerMovesACloneOffAFullNode(t *testing.T) {
	c := cluster.Claim("full-src", cluster.BlockClass, "1Gi", true)
	for _, o := range []client.Object{c, cluster.Pod("full-src", true, cluster.OnNode(nodeA), "full-src")} {
		if err := tb.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	src := bound(t, "full-src", 3*time.Minute)
	write(t, nodeA, src.Status.VolumeID, 0, 64)
	want := checksum(t, nodeA, src.Status.VolumeID)
	// A volume that takes all of nodeA's room but 512 MiB.
	ln := &thinlvmv1.LVMNode{}
	if err := tb.Client.Get(ctx, types.NamespacedName{Name: nodeA}, ln); err != nil {
		t.Fatal(err)
	}
	room := ln.Status.DeviceClasses[0].Available.Value()
	filler := cluster.Claim("full-filler", cluster.BlockClass, "1Gi", true)
	filler.Spec.Resources.Requests[corev1.ResourceStorage] = *resource.NewQuantity(room-512*mib, resource.BinarySI)
	for _, o := range []client.Object{filler, cluster.Pod("full-filler", true, cluster.OnNode(nodeA), "full-filler")} {
		if err := tb.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	bound(t, "full-filler", 3*time.Minute)
	if err := tb.WaitFor(ctx, nodeA+" to report it is full", time.Minute, func() (bool, error) {
		err := tb.Client.Get(ctx, types.NamespacedName{Name: nodeA}, ln)
		return err == nil && ln.Status.DeviceClasses[0].Available.Value() < 1<<30, err
	}); err != nil {
		t.Fatal(err)
	}
	clone := cluster.Claim("full-copy", cluster.BlockClass, "1Gi", true)
	clone.Spec.DataSource = fromClaim("full-src")
	for _, o := range []client.Object{clone, cluster.Pod("full-copy", true, nil, "full-copy")} {
		if err := tb.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	lv := bound(t, "full-copy", 5*time.Minute)
	p := &corev1.Pod{}
	if err := tb.WaitFor(ctx, "the clone's pod to be bound to its node", time.Minute, func() (bool, error) {
		err := tb.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: "full-copy"}, p)
		return err == nil && p.Spec.NodeName != "", err
	}); err != nil {
		t.Fatal(err)
	}
	if lv.Spec.NodeName != nodeB || p.Spec.NodeName != nodeB {
		t.Errorf("the clone is on %s and its pod on %s, want both on %s", lv.Spec.NodeName, p.Spec.NodeName, nodeB)
	}
	if got := checksum(t, nodeB, lv.Status.VolumeID); got != want {
		t.Errorf("the clone's checksum %s differs from the source's %s", got, want)
	}
	remove(t, "full-copy", "full-filler", "full-src")
}
