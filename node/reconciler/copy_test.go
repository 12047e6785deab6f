package reconciler_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/internal/testutil"
	"github.com/thinlvm/thinlvm/lvmd/config"
	"github.com/thinlvm/thinlvm/lvmd/lvm/fake"
	"github.com/thinlvm/thinlvm/lvmd/lvmdtest"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
	"github.com/thinlvm/thinlvm/node/lvmd"
	"github.com/thinlvm/thinlvm/node/reconciler"
	"github.com/thinlvm/thinlvm/node/transfer"
	transferpb "github.com/thinlvm/thinlvm/node/transfer/proto"
	"github.com/thinlvm/thinlvm/node/transfer/transfertest"
)

// serveTransfer runs node's transfer endpoint on loopback and publishes it
// in node's LVMNode.
func serveTransfer(t *testing.T, node string, l *lvmdtest.LVMD, opts ...grpc.ServerOption) {
	t.Helper()
	publishEndpoint(t, node, transfertest.Serve(t, node, k8sClient, l, opts...))
}

func publishEndpoint(t *testing.T, node string, ep *thinlvmv1.TransferEndpoint) {
	t.Helper()
	ctx := context.Background()
	ln := &thinlvmv1.LVMNode{ObjectMeta: metav1.ObjectMeta{Name: node}}
	if err := k8sClient.Create(ctx, ln); err != nil {
		t.Fatal(err)
	}
	ln.Status.Transfer = ep
	if err := k8sClient.Status().Update(ctx, ln); err != nil {
		t.Fatal(err)
	}
}

// makeBase makes a sealed golden base of gi holding data.
func makeBase(t *testing.T, l *lvmdtest.LVMD, gi *thinlvmv1.GoldenImage, data []byte) {
	t.Helper()
	ctx := context.Background()
	resp, err := l.CreateLV(ctx, &pb.CreateLVRequest{Name: thinlvmv1.BaseLVName(gi), SizeBytes: uint64(gi.Spec.Size.Value()),
		Tags: []string{thinlvmv1.BaseTagPrefix + gi.Name}})
	if err != nil {
		t.Fatal(err)
	}
	writeAt(t, resp.GetVolume().GetDevicePath(), 0, data)
	if _, err := l.ChangeLV(ctx, &pb.ChangeLVRequest{Name: thinlvmv1.BaseLVName(gi), ReadOnly: new(true), Active: new(false)}); err != nil {
		t.Fatal(err)
	}
}

func writeAt(t *testing.T, path string, off int64, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, off); err != nil {
		t.Fatal(err)
	}
}

// A clone made on another node than its source's is copied from there:
// only what differs from the golden base when the target holds the same
// base, else what the source maps. It is byte-identical, the source's
// transfer snapshot is removed after, and no caller but the target
// node's agent is served.
func TestCopyFromAnotherNode(t *testing.T) {
	ctx := context.Background()
	src, dst, bare := newNodeName(), newNodeName(), newNodeName()
	// lvmd on the simulated lvm, whose thin_delta compares the LVs'
	// backing files block by block.
	la := lvmdtest.Start(t, lvmdtest.Options{DevDir: t.TempDir()})
	lb := lvmdtest.Start(t, lvmdtest.Options{DevDir: t.TempDir()})
	lc := lvmdtest.Start(t, lvmdtest.Options{DevDir: t.TempDir()})
	serveTransfer(t, src, la)
	serveTransfer(t, dst, lb)
	serveTransfer(t, bare, lc)

	gi := &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: "copy-img"}, Spec: thinlvmv1.GoldenImageSpec{
		Source: thinlvmv1.ImageSource{HTTP: &thinlvmv1.HTTPSource{URL: "http://127.0.0.1:9/img", SHA256: strings.Repeat("a", 64)}},
		Size:   resource.MustParse("16Mi")}}
	if err := k8sClient.Create(ctx, gi); err != nil {
		t.Fatal(err)
	}
	image := bytes.Repeat([]byte("golden!"), 4<<20/7) // the first 4 MiB
	makeBase(t, la, gi, image)
	makeBase(t, lb, gi, image)

	// The source: a VM disk of the base that wrote 1 MiB over the image,
	// 2 MiB past it, and discarded 256 KiB of the image.
	origin := newLV("pvc-move-src", src, "16Mi")
	origin.Spec.Source = &thinlvmv1.VolumeSource{Kind: thinlvmv1.SourceGoldenImage, Name: gi.Name}
	if err := k8sClient.Create(ctx, origin); err != nil {
		t.Fatal(err)
	}
	resp, err := la.CreateSnapshot(ctx, &pb.CreateSnapshotRequest{Name: "pvc-move-src", SourceName: thinlvmv1.BaseLVName(gi), Tags: []string{"lv:pvc-move-src"}})
	if err != nil {
		t.Fatal(err)
	}
	path := resp.GetVolume().GetDevicePath()
	writeAt(t, path, 1<<20, bytes.Repeat([]byte{0x5a}, 1<<20))
	writeAt(t, path, 8<<20, bytes.Repeat([]byte{0xa5}, 2<<20))
	writeAt(t, path, 3<<20, make([]byte, 256<<10))
	want := la.Data(t, "pvc-move-src")

	startAgentWith(t, dst, lb, agentOptions{copier: transfertest.Copier(dst, k8sClient)})
	startAgentWith(t, bare, lc, agentOptions{copier: &transfer.Copier{Reader: k8sClient, Certificate: transfertest.Identity(bare), Uncompressed: true}})

	for _, tc := range []struct {
		name, node string
		l          *lvmdtest.LVMD
		mode       thinlvmv1.TransferMode
		copied     int64
	}{
		{"pvc-move-delta", dst, lb, thinlvmv1.TransferDelta, 1<<20 + 2<<20 + 256<<10},
		{"pvc-move-full", bare, lc, thinlvmv1.TransferMapped, 4<<20 - 256<<10 + 2<<20}, // the image less the discard, and the 2 MiB past it
	} {
		t.Run(tc.name, func(t *testing.T) {
			clone := newLV(tc.name, tc.node, "16Mi")
			clone.Spec.Source = &thinlvmv1.VolumeSource{Kind: thinlvmv1.SourceVolume, Name: origin.Name}
			if err := k8sClient.Create(ctx, clone); err != nil {
				t.Fatal(err)
			}
			got := readyLV(t, tc.name)
			st := got.Status.Transfer
			if st == nil || st.Mode != tc.mode || st.SourceNode != src || st.BytesDone != tc.copied || st.BytesTotal != tc.copied || st.CompletionTime == nil || st.Attempts != 1 {
				t.Errorf("transfer status %+v, want mode %s, %d bytes copied from %s", st, tc.mode, tc.copied, src)
			}
			if !bytes.Equal(tc.l.Data(t, tc.name), want) {
				t.Error("the copy differs from the source")
			}
			lv, err := tc.l.GetLV(ctx, &pb.GetLVRequest{Name: tc.name})
			if err != nil || slices.Contains(lv.GetVolume().GetTags(), thinlvmv1.IncompleteTag) {
				t.Errorf("the copy's LV %v (%v) is still marked incomplete", lv, err)
			}
			if tc.mode == thinlvmv1.TransferDelta && lv.GetVolume().GetOrigin() != thinlvmv1.BaseLVName(gi) {
				t.Errorf("the delta copy's origin is %q, want the local base", lv.GetVolume().GetOrigin())
			}
			if _, err := la.GetLV(ctx, &pb.GetLVRequest{Name: thinlvmv1.TransferLVName(tc.name)}); status.Code(err) != codes.NotFound {
				t.Errorf("the transfer snapshot on the source's node: %v, want it removed", err)
			}
		})
	}

	// The node a clone is made on may read it; no other node may, and
	// nobody but a node's agent is a node.
	clone := newLV("pvc-move-stolen", dst, "16Mi")
	clone.Spec.Source = &thinlvmv1.VolumeSource{Kind: thinlvmv1.SourceVolume, Name: origin.Name}
	clone.Spec.DeviceClass = "no-such-class" // dst's agent never copies it
	if err := k8sClient.Create(ctx, clone); err != nil {
		t.Fatal(err)
	}
	t.Run("another node's agent", func(t *testing.T) {
		_, _, err := transfertest.Copier(bare, k8sClient).Open(ctx, src, clone.Name)
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("open as node %s: %v, want PermissionDenied", bare, err)
		}
	})
	// A tenant's pod (whatever its ServiceAccount and namespace) claiming
	// to be dst's agent with a key of its own: no LVMNode publishes it.
	t.Run("a certificate no LVMNode publishes", func(t *testing.T) {
		own, _, err := transfer.NewCertificate(dst)
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = (&transfer.Copier{Reader: k8sClient, Certificate: own}).Open(ctx, src, clone.Name)
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("open with a certificate naming %s that its LVMNode does not publish: %v, want Unauthenticated", dst, err)
		}
	})
	t.Run("no certificate", func(t *testing.T) {
		if _, _, err := (&transfer.Copier{Reader: k8sClient}).Open(ctx, src, clone.Name); err == nil {
			t.Error("open without a client certificate succeeded")
		}
	})
	// What a node receives of a caller is its certificate, which is
	// public: a node that replays dst's certificate to another node's
	// endpoint cannot prove it holds its key, and is refused there, as it
	// is everywhere (src and bare here; bare's own endpoint too).
	t.Run("replayed certificate", func(t *testing.T) {
		stolenKey, _, err := transfer.NewCertificate(bare)
		if err != nil {
			t.Fatal(err)
		}
		replay := tls.Certificate{Certificate: transfertest.Identity(dst).Certificate, PrivateKey: stolenKey.PrivateKey}
		c := &transfer.Copier{Reader: k8sClient, Certificate: replay}
		for _, node := range []string{src, bare} {
			if _, _, err := c.Open(ctx, node, clone.Name); err == nil || status.Code(err) == codes.PermissionDenied {
				t.Errorf("open at %s with %s's certificate and another key: %v, want the handshake refused", node, dst, err)
			}
		}
	})

	// A server that does not hold the pinned certificate's key is sent
	// no request: the client gives up in the handshake.
	t.Run("pinned certificate", func(t *testing.T) {
		other, _, err := transfer.NewCertificate("impostor")
		if err != nil {
			t.Fatal(err)
		}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer lis.Close()
		seen := make(chan string, 1)
		go func() {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{other}, NextProtos: []string{"h2"}, ClientAuth: tls.RequestClientCert})
			if err := tc.Handshake(); err != nil {
				seen <- ""
				return
			}
			buf := make([]byte, 4096)
			n, _ := tc.Read(buf)
			seen <- string(buf[:n])
		}()
		ln := &thinlvmv1.LVMNode{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Name: src}, ln); err != nil {
			t.Fatal(err)
		}
		impostor := newNodeName()
		publishEndpoint(t, impostor, &thinlvmv1.TransferEndpoint{Address: lis.Addr().String(), CertificateSHA256: ln.Status.Transfer.CertificateSHA256})
		if _, _, err := transfertest.Copier(dst, k8sClient).Open(ctx, impostor, "pvc-move-delta"); err == nil {
			t.Error("open against a certificate other than the pinned one succeeded")
		}
		if got := <-seen; got != "" {
			t.Errorf("a server with another certificate read %q of the request", got)
		}
	})
}

// breakingStream breaks the first Read after a few chunks, as a cut
// connection or a restarted source agent would, and records where each
// Read starts.
type breakingStream struct {
	grpc.ServerStream
	sent  int
	broke *atomic.Bool
	froms chan<- uint64
}

func (s *breakingStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if req, ok := m.(*transferpb.ReadRequest); ok && err == nil {
		s.froms <- req.GetFromOffset()
	}
	return err
}

func (s *breakingStream) SendMsg(m any) error {
	if s.sent++; s.sent > 4 && s.broke.CompareAndSwap(false, true) {
		return status.Error(codes.Unavailable, "connection reset (test)")
	}
	return s.ServerStream.SendMsg(m)
}

// A Read that breaks in the middle is resumed from the end of the last
// chunk written, not started over, and the copy is identical.
func TestCopyResumesABrokenRead(t *testing.T) {
	ctx := context.Background()
	src, dst := newNodeName(), newNodeName()
	la := lvmdtest.Start(t, lvmdtest.Options{DevDir: t.TempDir()})
	lb := lvmdtest.Start(t, lvmdtest.Options{DevDir: t.TempDir()})
	var broke atomic.Bool
	froms := make(chan uint64, 16)
	serveTransfer(t, src, la, grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		return h(srv, &breakingStream{ServerStream: ss, broke: &broke, froms: froms})
	}))
	serveTransfer(t, dst, lb)

	origin := newLV("pvc-resume-src", src, "16Mi")
	if err := k8sClient.Create(ctx, origin); err != nil {
		t.Fatal(err)
	}
	resp, err := la.CreateLV(ctx, &pb.CreateLVRequest{Name: origin.Name, SizeBytes: 16 << 20, Tags: []string{"lv:" + origin.Name}})
	if err != nil {
		t.Fatal(err)
	}
	writeAt(t, resp.GetVolume().GetDevicePath(), 0, bytes.Repeat([]byte("resume me "), 12<<20/10))
	want := la.Data(t, origin.Name)

	startAgentWith(t, dst, lb, agentOptions{copier: transfertest.Copier(dst, k8sClient)})
	clone := newLV("pvc-resume-copy", dst, "16Mi")
	clone.Spec.Source = &thinlvmv1.VolumeSource{Kind: thinlvmv1.SourceVolume, Name: origin.Name}
	if err := k8sClient.Create(ctx, clone); err != nil {
		t.Fatal(err)
	}
	got := readyLV(t, clone.Name)
	if !broke.Load() {
		t.Fatal("the Read was never broken")
	}
	if first, second := <-froms, <-froms; first != 0 || second != 3<<20 {
		t.Errorf("Reads from %d and then %d, want 0 and then the end of the third chunk (%d)", first, second, 3<<20)
	}
	if st := got.Status.Transfer; st.Attempts != 1 || st.BytesDone != 12<<20 {
		t.Errorf("transfer %+v, want one attempt that copied 12 MiB", st)
	}
	if !bytes.Equal(lb.Data(t, clone.Name), want) {
		t.Error("the resumed copy differs from the source")
	}
}

// startThickLVMD runs lvmd with one device class, "ssd" (the default),
// thick on volume group vg0 (1 GiB, all free): no thin pool. Its LVs are
// backed by files in a test directory.
func startThickLVMD(t *testing.T) *lvmdtest.LVMD {
	t.Helper()
	cfg := &config.Config{DeviceClasses: []config.DeviceClass{{Name: "ssd", Type: config.Thick, VolumeGroup: "vg0", Default: true}}}
	cfg.Default()
	return lvmdtest.Start(t, lvmdtest.Options{Config: cfg, DevDir: t.TempDir(),
		Runner: &fake.Runner{VGs: []fake.VG{{Name: "vg0", UUID: "vg0-uuid", Size: 1 << 30, Free: 1 << 30}}}})
}

// snapshotRecorder records the CreateSnapshot requests an agent sends
// lvmd; the transfer endpoint's own (its transient snapshot) go past it.
type snapshotRecorder struct {
	lvmd.Client
	mu   sync.Mutex
	reqs []*pb.CreateSnapshotRequest
}

func (r *snapshotRecorder) CreateSnapshot(ctx context.Context, req *pb.CreateSnapshotRequest, opts ...grpc.CallOption) (*pb.CreateSnapshotResponse, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	return r.Client.CreateSnapshot(ctx, req, opts...)
}

func (r *snapshotRecorder) requests() []*pb.CreateSnapshotRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reqs)
}

// A thick LV has no thin snapshot: a clone of one on its own node is made
// by the copy path, through the node's own transfer endpoint, as from
// another node, and is byte-identical; the agent asks lvmd for no
// snapshot. A VolumeSnapshot of a thick volume is refused for good
// (Unsupported), and nothing is made for it.
func TestThickSourceIsCopiedOnItsOwnNode(t *testing.T) {
	ctx := context.Background()
	node := newNodeName()
	l := startThickLVMD(t)
	serveTransfer(t, node, l)
	rec := &snapshotRecorder{}
	startAgentWith(t, node, l, agentOptions{copier: transfertest.Copier(node, k8sClient),
		wrapLVMD: func(c lvmd.Client) lvmd.Client { rec.Client = c; return rec }})

	origin := newLV("pvc-thick-src", node, "16Mi")
	if err := k8sClient.Create(ctx, origin); err != nil {
		t.Fatal(err)
	}
	readyLV(t, origin.Name)
	src, ok := l.LV(t, origin.Name)
	if !ok || !src.GetThick() {
		t.Fatalf("the source's LV %v: want a thick LV", src)
	}
	writeAt(t, src.GetDevicePath(), 0, bytes.Repeat([]byte("thick! "), 3<<20/7))
	writeAt(t, src.GetDevicePath(), 10<<20, bytes.Repeat([]byte{0x5a}, 1<<20))
	want := l.Data(t, origin.Name)

	clone := newLV("pvc-thick-clone", node, "16Mi")
	clone.Spec.Source = &thinlvmv1.VolumeSource{Kind: thinlvmv1.SourceVolume, Name: origin.Name}
	if err := k8sClient.Create(ctx, clone); err != nil {
		t.Fatal(err)
	}
	got := readyLV(t, clone.Name)
	st := got.Status.Transfer
	if st == nil || st.Mode != thinlvmv1.TransferMapped || st.SourceNode != node || st.BytesTotal != 16<<20 || st.BytesDone != st.BytesTotal ||
		st.CompletionTime == nil || st.Attempts != 1 {
		t.Errorf("transfer status %+v, want all 16 MiB copied (mapped) from the node itself, %s", st, node)
	}
	if !bytes.Equal(l.Data(t, clone.Name), want) {
		t.Error("the copy differs from the source")
	}
	lv, ok := l.LV(t, clone.Name)
	if !ok || !lv.GetThick() || lv.GetOrigin() != "" || slices.Contains(lv.GetTags(), thinlvmv1.IncompleteTag) {
		t.Errorf("the clone's LV %v: want a complete thick LV of no origin", lv)
	}
	if _, ok := l.LV(t, thinlvmv1.TransferLVName(clone.Name)); ok {
		t.Error("the transfer snapshot of the source is left")
	}

	snap := newLV("snapshot-thick", node, "16Mi")
	snap.Spec.Role = thinlvmv1.RoleSnapshot
	snap.Spec.AccessType = thinlvmv1.AccessReadOnly
	snap.Spec.Source = &thinlvmv1.VolumeSource{Kind: thinlvmv1.SourceVolume, Name: origin.Name}
	if err := k8sClient.Create(ctx, snap); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the snapshot to fail with Unsupported", func() bool {
		c := meta.FindStatusCondition(get(t, snap.Name).Status.Conditions, thinlvmv1.ConditionFailed)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == thinlvmv1.ReasonUnsupported
	})
	s := get(t, snap.Name)
	if c := meta.FindStatusCondition(s.Status.Conditions, thinlvmv1.ConditionFailed); !strings.Contains(c.Message, "thick: its volumes have no snapshots") {
		t.Errorf("Failed condition %+v: want it to say the class is thick", c)
	}
	if meta.IsStatusConditionTrue(s.Status.Conditions, thinlvmv1.ConditionReady) || s.Status.Transfer != nil {
		t.Errorf("the refused snapshot's status %+v: want not Ready, no copy", s.Status)
	}
	if _, ok := l.LV(t, thinlvmv1.LVName(s)); ok {
		t.Error("an LV was made for a snapshot of a thick volume")
	}
	if reqs := rec.requests(); len(reqs) != 0 {
		t.Errorf("the agent asked lvmd for snapshots of a thick class: %v", reqs)
	}

	for _, name := range []string{snap.Name, clone.Name, origin.Name} {
		if err := k8sClient.Delete(ctx, get(t, name)); err != nil {
			t.Fatal(err)
		}
		gone(t, name)
	}
	if names := l.LVNames(t); len(names) != 0 {
		t.Errorf("LVs left: %v", names)
	}
}

// An agent that copies from no node (no transfer endpoint) refuses a
// clone of a thick volume of its own node, saying why: a thick LV has no
// snapshot to make it from. No agent runs: the test
// reconciles the clone itself.
func TestThickSourceWithoutCopierIsUnsupported(t *testing.T) {
	ctx := context.Background()
	node := newNodeName()
	l := startThickLVMD(t)
	rec := &snapshotRecorder{Client: l}
	if _, err := l.CreateLV(ctx, &pb.CreateLVRequest{Name: "pvc-thick-alone", SizeBytes: 16 << 20, Tags: []string{reconciler.OwnerTagPrefix + "pvc-thick-alone"}}); err != nil {
		t.Fatal(err)
	}
	src := newLV("pvc-thick-alone", node, "16Mi")
	clone := newLV("pvc-thick-alone-clone", node, "16Mi")
	clone.Spec.Source = &thinlvmv1.VolumeSource{Kind: thinlvmv1.SourceVolume, Name: src.Name}
	for _, o := range []*thinlvmv1.LogicalVolume{src, clone} {
		if err := k8sClient.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	r := &reconciler.LogicalVolumeReconciler{Client: k8sClient, LVMD: rec, NodeName: node}
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: clone.Name}}); err != nil {
		t.Fatal(err) // Unsupported waits for a change of the spec: no error to retry
	}
	c := meta.FindStatusCondition(get(t, clone.Name).Status.Conditions, thinlvmv1.ConditionFailed)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != thinlvmv1.ReasonUnsupported || !strings.Contains(c.Message, "is thick, and this agent has no transfer endpoint") {
		t.Errorf("Failed condition %+v: want Unsupported, as the copy path refuses without a transfer endpoint", c)
	}
	if reqs := rec.requests(); len(reqs) != 0 {
		t.Errorf("the agent asked lvmd for a snapshot of a thick LV: %v", reqs)
	}
	if _, ok := l.LV(t, clone.Name); ok {
		t.Error("an LV was made for the refused clone")
	}
	forceDelete(t, clone.Name, src.Name)
}

// A class thick on this node and thin on the source's is refused a copy:
// it would write only what the thin source maps into an LV that reads
// what its extents held. Nothing is made.
func TestCopyFromThinIntoThickIsRefused(t *testing.T) {
	ctx := context.Background()
	node, srcNode := newNodeName(), newNodeName()
	l := startThickLVMD(t)
	for n, typ := range map[string]thinlvmv1.DeviceClassType{node: thinlvmv1.DeviceClassThick, srcNode: ""} {
		ln := &thinlvmv1.LVMNode{ObjectMeta: metav1.ObjectMeta{Name: n}}
		if err := k8sClient.Create(ctx, ln); err != nil {
			t.Fatal(err)
		}
		ln.Status.DeviceClasses = []thinlvmv1.DeviceClassStatus{{Name: "ssd", Type: typ, Default: true, VolumeGroup: "vg0"}}
		if err := k8sClient.Status().Update(ctx, ln); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), ln) })
	}
	src := newLV("pvc-thin-elsewhere", srcNode, "16Mi")
	clone := newLV("pvc-thin-elsewhere-clone", node, "16Mi")
	clone.Spec.Source = &thinlvmv1.VolumeSource{Kind: thinlvmv1.SourceVolume, Name: src.Name}
	for _, o := range []*thinlvmv1.LogicalVolume{src, clone} {
		if err := k8sClient.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	r := &reconciler.LogicalVolumeReconciler{Client: k8sClient, LVMD: l, NodeName: node}
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: clone.Name}}); err != nil {
		t.Fatal(err)
	}
	c := meta.FindStatusCondition(get(t, clone.Name).Status.Conditions, thinlvmv1.ConditionFailed)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != thinlvmv1.ReasonSourceMismatch || !strings.Contains(c.Message, "is thick on node "+node+" and thin on node "+srcNode) {
		t.Errorf("Failed condition %+v: want SourceMismatch, thick here and thin there", c)
	}
	if _, ok := l.LV(t, clone.Name); ok {
		t.Error("an LV was made for the refused copy")
	}
	forceDelete(t, clone.Name, src.Name)
}
