package golden_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/internal/envtest"
	"github.com/thinlvm/thinlvm/internal/testutil"
	"github.com/thinlvm/thinlvm/lvmd/lvmdtest"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
	"github.com/thinlvm/thinlvm/node/diskimage"
	"github.com/thinlvm/thinlvm/node/golden"
	"github.com/thinlvm/thinlvm/node/reconciler"
	"github.com/thinlvm/thinlvm/node/transfer/transfertest"
)

const node = "gn1"

// The reconcilers run against a real API server over lvmd on the simulated
// lvm, whose LVs are files, so the population really writes.
var (
	k8s        client.Client
	restConfig *rest.Config
	lvmd       *lvmdtest.LVMD
	image      = bytes.Repeat([]byte("golden!\n"), 64<<10) // 512 KiB
	requests   atomic.Int32
	// metricsRegistry holds the agent's golden-base metrics.
	metricsRegistry = prometheus.NewRegistry()
	imageURL        string
	// agentClient is the agent's cached client, to wait until it sees a
	// change.
	agentClient client.Client
)

func TestMain(m *testing.M) {
	envtest.MainWithManager(m, envtest.Options{}, setup)
}

// setup makes the fixtures (lvmd on the simulated lvm, an image server, the
// node's Node and LVMNode) and registers the reconcilers.
func setup(ctx context.Context, env *envtest.Env, mgr ctrl.Manager) error {
	k8s, restConfig, agentClient = env.Client, env.Config, mgr.GetClient()
	dir, err := os.MkdirTemp("", "golden-test")
	if err != nil {
		return err
	}
	env.Defer(func() { os.RemoveAll(dir) })
	var stopLVMD func()
	if lvmd, stopLVMD, err = lvmdtest.Run(lvmdtest.Options{DevDir: dir}); err != nil {
		return err
	}
	env.Defer(stopLVMD)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		time.Sleep(300 * time.Millisecond) // long enough for concurrent volumes to pile up
		http.ServeContent(w, r, "img", time.Unix(1e9, 0), bytes.NewReader(image))
	}))
	env.Defer(srv.Close)
	imageURL = srv.URL + "/img"

	if err := k8s.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{"pool": "vm"}}}); err != nil {
		return err
	}
	if err := k8s.Create(ctx, &thinlvmv1.LVMNode{ObjectMeta: metav1.ObjectMeta{Name: node}}); err != nil {
		return err
	}
	// Retries an hour apart: only the LVMNode's report of a base wakes the
	// volumes waiting for it.
	if err := (&reconciler.LogicalVolumeReconciler{Client: mgr.GetClient(), LVMD: lvmd, NodeName: node, RetryAfter: time.Hour}).SetupWithManager(mgr); err != nil {
		return err
	}
	// Copies from peers on: a node downloads from the origin only when it
	// holds the image's Lease (peers_test.go).
	if err := (&golden.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), LVMD: lvmd, NodeName: node,
		Writer: &diskimage.Writer{Attempts: 1}, Recorder: mgr.GetEventRecorder("thinlvm-node"), RetryAfter: time.Hour,
		ProgressInterval: 50 * time.Millisecond, Metrics: golden.NewMetrics(metricsRegistry),
		Copier: transfertest.Copier(node, mgr.GetAPIReader()), Namespace: "default", WaitInterval: 100 * time.Millisecond}).SetupWithManager(mgr); err != nil {
		return err
	}
	return nil
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func newImage(t *testing.T, name, sha string, prewarm *thinlvmv1.Prewarm) *thinlvmv1.GoldenImage {
	t.Helper()
	gi := &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: thinlvmv1.GoldenImageSpec{
		Source: thinlvmv1.ImageSource{HTTP: &thinlvmv1.HTTPSource{URL: imageURL, SHA256: sha}},
		Size:   resource.MustParse("1Mi"), Prewarm: prewarm}}
	if err := k8s.Create(context.Background(), gi); err != nil {
		t.Fatal(err)
	}
	return gi
}

func newVolume(t *testing.T, name, image string) {
	t.Helper()
	lv := &thinlvmv1.LogicalVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: thinlvmv1.LogicalVolumeSpec{
		Name: name, NodeName: node, Size: resource.MustParse("4Mi"),
		Source: &thinlvmv1.VolumeSource{Kind: thinlvmv1.SourceGoldenImage, Name: image}}}
	if err := k8s.Create(context.Background(), lv); err != nil {
		t.Fatal(err)
	}
}

func baseState(name string) (thinlvmv1.GoldenBaseStatus, bool) {
	ln := &thinlvmv1.LVMNode{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Name: node}, ln); err != nil {
		return thinlvmv1.GoldenBaseStatus{}, false
	}
	for _, b := range ln.Status.GoldenBases {
		if b.Name == name {
			return b, true
		}
	}
	return thinlvmv1.GoldenBaseStatus{}, false
}

func volume(t *testing.T, name string) *thinlvmv1.LogicalVolume {
	t.Helper()
	lv := &thinlvmv1.LogicalVolume{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Name: name}, lv); err != nil {
		t.Fatal(err)
	}
	return lv
}

// Five volumes of one image on a node without its base: one population,
// five snapshots of the sealed base, each holding the image.
func TestConcurrentVolumesShareOnePopulation(t *testing.T) {
	gi := newImage(t, "ubuntu", sum(image), nil)
	before := requests.Load()
	for i := range 5 {
		newVolume(t, fmt.Sprintf("vm-disk-%d", i), "ubuntu")
	}
	base := thinlvmv1.BaseLVName(gi)
	for i := range 5 {
		name := fmt.Sprintf("vm-disk-%d", i)
		testutil.Eventually(t, name+" Ready", func() bool {
			return meta.IsStatusConditionTrue(volume(t, name).Status.Conditions, thinlvmv1.ConditionReady)
		})
		lv, ok := lvmd.LV(t, name)
		if !ok || lv.GetOrigin() != base || lv.GetReadOnly() || lv.GetSizeBytes() != 4<<20 {
			t.Errorf("%s: LV %v, want a writable 4Mi snapshot of %s", name, lv, base)
			continue
		}
		data, err := os.ReadFile(lv.GetDevicePath())
		if err != nil || !bytes.Equal(data[:len(image)], image) {
			t.Errorf("%s does not hold the image (%v)", name, err)
		}
	}
	if got := requests.Load() - before; got != 1 {
		t.Errorf("%d downloads, want 1", got)
	}
	if got := populations(t, "success"); got < 1 {
		t.Errorf("thinlvm_node_golden_populations_total{result=success} is %v after a population", got)
	}
	b, ok := lvmd.LV(t, base)
	if !ok || !b.GetReadOnly() || b.GetActive() || !slices.Contains(b.GetTags(), thinlvmv1.BaseTagPrefix+"ubuntu") {
		t.Errorf("base %v, want read-only, inactive, tagged", b)
	}
	st, _ := baseState("ubuntu")
	if st.State != thinlvmv1.GoldenBaseReady || st.LV != base {
		t.Errorf("LVMNode base %+v, want Ready", st)
	}
	testutil.Eventually(t, "a Populated event", func() bool {
		list := &eventsv1.EventList{}
		if err := k8s.List(context.Background(), list); err != nil {
			return false
		}
		for _, e := range list.Items {
			if e.Regarding.Name == "ubuntu" && e.Reason == "Populated" && strings.Contains(e.Note, node) {
				return true
			}
		}
		return false
	})

	// A GoldenImage that a channel points at (its finalizer, which the
	// controller keeps) stays usable while Terminating: its base stays.
	controllerutil.AddFinalizer(gi, thinlvmv1.GoldenImageChannelFinalizer)
	if err := k8s.Update(context.Background(), gi); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(context.Background(), gi); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the reconciler sees the Terminating image
	if _, ok := lvmd.LV(t, base); !ok {
		t.Fatal("the base was removed while a channel still holds the image")
	}
	if st, _ := baseState("ubuntu"); st.State != thinlvmv1.GoldenBaseReady {
		t.Errorf("LVMNode base %+v while a channel holds the image, want Ready", st)
	}

	// Deleting the GoldenImage removes the base; the volumes stay.
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(gi), gi); err != nil {
		t.Fatal(err)
	}
	controllerutil.RemoveFinalizer(gi, thinlvmv1.GoldenImageChannelFinalizer)
	if err := k8s.Update(context.Background(), gi); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the base removed", func() bool {
		_, ok := lvmd.LV(t, base)
		_, reported := baseState("ubuntu")
		return !ok && !reported
	})
	if lv, ok := lvmd.LV(t, "vm-disk-0"); !ok {
		t.Error("a volume went with the base")
	} else if data, _ := os.ReadFile(lv.GetDevicePath()); !bytes.Equal(data[:len(image)], image) {
		t.Error("a volume lost its data with the base")
	}
}

// populations is the node agent's count of populations that ended with
// result.
func populations(t *testing.T, result string) float64 {
	t.Helper()
	return counter(t, "thinlvm_node_golden_populations_total", "result", result)
}

// counter is the value of the node agent's counter name{label=value}.
func counter(t *testing.T, name, label, value string) float64 {
	t.Helper()
	families, err := metricsRegistry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{%s=%q}", name, label, value)
	return 0
}

// A checksum mismatch leaves no base, reports Failed, and fails the
// waiting volume with BaseFailed (the controller then retries).
func TestChecksumMismatchLeavesNoBase(t *testing.T) {
	failed := populations(t, "failure")
	gi := newImage(t, "corrupt", strings.Repeat("0", 64), nil)
	newVolume(t, "corrupt-disk", "corrupt")
	testutil.Eventually(t, "the base Failed", func() bool {
		st, ok := baseState("corrupt")
		return ok && st.State == thinlvmv1.GoldenBaseFailed && strings.Contains(st.Message, "sha256 mismatch")
	})
	if _, ok := lvmd.LV(t, thinlvmv1.BaseLVName(gi)); ok {
		t.Error("a half-written base is left")
	}
	if got := populations(t, "failure"); got <= failed {
		t.Errorf("thinlvm_node_golden_populations_total{result=failure} is %v, was %v: the failure was not counted", got, failed)
	}
	testutil.Eventually(t, "the volume Failed with BaseFailed", func() bool {
		c := meta.FindStatusCondition(volume(t, "corrupt-disk").Status.Conditions, thinlvmv1.ConditionFailed)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == thinlvmv1.ReasonBaseFailed && strings.Contains(c.Message, "sha256 mismatch")
	})
	if _, ok := lvmd.LV(t, "corrupt-disk"); ok {
		t.Error("the volume has an LV")
	}
}

// A prewarm selector matching the node makes the base with no volume.
func TestPrewarm(t *testing.T) {
	other := newImage(t, "elsewhere", sum(image), &thinlvmv1.Prewarm{NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"pool": "db"}}})
	gi := newImage(t, "prewarmed", sum(image), &thinlvmv1.Prewarm{NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"pool": "vm"}}})
	testutil.Eventually(t, "the prewarmed base Ready", func() bool {
		st, ok := baseState("prewarmed")
		return ok && st.State == thinlvmv1.GoldenBaseReady
	})
	if _, ok := lvmd.LV(t, thinlvmv1.BaseLVName(gi)); !ok {
		t.Error("no base LV")
	}
	if _, ok := lvmd.LV(t, thinlvmv1.BaseLVName(other)); ok {
		t.Error("a base for a selector that does not match the node")
	}
}

// A writable base with nobody writing it (the agent died mid-population)
// is removed and made again.
func TestHalfWrittenBaseIsRemade(t *testing.T) {
	gi := &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: "interrupted"}, Spec: thinlvmv1.GoldenImageSpec{
		Source: thinlvmv1.ImageSource{HTTP: &thinlvmv1.HTTPSource{URL: imageURL, SHA256: sum(image)}}, Size: resource.MustParse("1Mi")}}
	if err := k8s.Create(context.Background(), gi); err != nil {
		t.Fatal(err)
	}
	base := thinlvmv1.BaseLVName(gi)
	// Until the volume needs it, the agent would remove the base as
	// unneeded before the test wrote into it: it cannot, for now.
	lvmd.SetFail("RemoveLV", status.Error(codes.Unavailable, "held by the test"))
	if _, err := lvmd.CreateLV(context.Background(), &pb.CreateLVRequest{Name: base, SizeBytes: 1 << 20, Tags: []string{thinlvmv1.BaseTagPrefix + "interrupted"}}); err != nil {
		t.Fatal(err)
	}
	// What the dead agent wrote, past the image's end: a base made again
	// reads zeros there.
	f, err := os.OpenFile(mustLV(t, base).GetDevicePath(), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("garbage"), int64(len(image))+4096); err != nil {
		t.Fatal(err)
	}
	f.Close()
	newVolume(t, "interrupted-disk", "interrupted")
	lvmd.SetFail("RemoveLV", nil)
	testutil.Eventually(t, "the volume Ready", func() bool {
		return meta.IsStatusConditionTrue(volume(t, "interrupted-disk").Status.Conditions, thinlvmv1.ConditionReady)
	})
	data, _ := os.ReadFile(mustLV(t, "interrupted-disk").GetDevicePath())
	if !bytes.Equal(data[:len(image)], image) {
		t.Error("the volume does not hold the image")
	}
	if bytes.Contains(data, []byte("garbage")) {
		t.Error("the volume holds what the interrupted population left")
	}
}

// A golden image in a thick device class fails for good before lvmd is
// asked for a base: its disks would be thin snapshots, which a thick class
// has not.
func TestThickDeviceClassFailsTheBase(t *testing.T) {
	ctx := context.Background()
	// The node reports a thick class beside its default thin one.
	ln := &thinlvmv1.LVMNode{}
	if err := k8s.Get(ctx, types.NamespacedName{Name: node}, ln); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(ln.DeepCopy())
	ln.Status.DeviceClasses = []thinlvmv1.DeviceClassStatus{{Name: "ssd", Default: true}, {Name: "hdd", Type: thinlvmv1.DeviceClassThick}}
	if err := k8s.Status().Patch(ctx, ln, patch); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ln := &thinlvmv1.LVMNode{}
		if err := k8s.Get(context.Background(), types.NamespacedName{Name: node}, ln); err != nil {
			t.Error(err)
			return
		}
		patch := client.MergeFrom(ln.DeepCopy())
		ln.Status.DeviceClasses = nil
		if err := k8s.Status().Patch(context.Background(), ln, patch); err != nil {
			t.Error(err)
		}
	})
	if dc := ln.Status.DeviceClass("hdd"); dc == nil || dc.Type != thinlvmv1.DeviceClassThick {
		t.Fatal("the API server dropped the device class's type: the CRDs under test (deploy/crds) lack it")
	}
	testutil.Eventually(t, "the agent's cache to see the thick class", func() bool {
		got := &thinlvmv1.LVMNode{}
		if err := agentClient.Get(ctx, types.NamespacedName{Name: node}, got); err != nil {
			return false
		}
		dc := got.Status.DeviceClass("hdd")
		return dc != nil && dc.Type == thinlvmv1.DeviceClassThick
	})

	creates := lvmd.Count("CreateLV") + lvmd.Count("CreateSnapshot")
	before := requests.Load()
	gi := &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: "thick"}, Spec: thinlvmv1.GoldenImageSpec{
		Source: thinlvmv1.ImageSource{HTTP: &thinlvmv1.HTTPSource{URL: imageURL, SHA256: sum(image)}}, Size: resource.MustParse("1Mi"),
		DeviceClass: "hdd", Prewarm: &thinlvmv1.Prewarm{NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"pool": "vm"}}}}}
	if err := k8s.Create(ctx, gi); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), gi) })
	testutil.Eventually(t, "the base Failed", func() bool {
		st, ok := baseState("thick")
		return ok && st.State == thinlvmv1.GoldenBaseFailed && strings.Contains(st.Message, "needs a thin device class")
	})
	if got := lvmd.Count("CreateLV") + lvmd.Count("CreateSnapshot"); got != creates {
		t.Errorf("lvmd was asked to create %d LVs, want none", got-creates)
	}
	if _, ok := lvmd.LV(t, thinlvmv1.BaseLVName(gi)); ok {
		t.Error("a base LV was made in the thick class")
	}
	if got := requests.Load() - before; got != 0 {
		t.Errorf("%d downloads of the image, want none", got)
	}
	deleteImage(t, gi, node)
}

func mustLV(t *testing.T, name string) *pb.LogicalVolume {
	t.Helper()
	lv, ok := lvmd.LV(t, name)
	if !ok {
		t.Fatalf("no LV %s", name)
	}
	return lv
}
