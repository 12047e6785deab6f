package reconciler_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
	"github.com/thinlvm/thinlvm/internal/testutil"
)

func TestGoldenImageStatusSumsTheNodes(t *testing.T) {
	ctx := context.Background()
	gi := &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: "debian"}, Spec: thinlvmv1.GoldenImageSpec{
		Source: thinlvmv1.ImageSource{HTTP: &thinlvmv1.HTTPSource{URL: "http://127.0.0.1:1/d.img", SHA256: strings.Repeat("b", 64)}},
		Size:   resource.MustParse("1Gi")}}
	if err := k8s.Create(ctx, gi); err != nil {
		t.Fatal(err)
	}
	get := func() *thinlvmv1.GoldenImage {
		out := &thinlvmv1.GoldenImage{}
		if err := k8s.Get(ctx, types.NamespacedName{Name: "debian"}, out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	testutil.Eventually(t, "Ready=False with no node", func() bool {
		return meta.IsStatusConditionFalse(get().Status.Conditions, thinlvmv1.ConditionImageReady)
	})
	base := thinlvmv1.BaseLVName(gi)
	states := map[string]thinlvmv1.GoldenBaseStatus{
		"gi-a": {Name: "debian", LV: base, Size: resource.MustParse("1Gi"), State: thinlvmv1.GoldenBaseReady},
		"gi-b": {Name: "debian", LV: base, Size: resource.MustParse("1Gi"), State: thinlvmv1.GoldenBasePopulating, BytesDone: 1, BytesTotal: 2},
		"gi-c": {Name: "debian", LV: base, Size: resource.MustParse("1Gi"), State: thinlvmv1.GoldenBaseFailed, Message: "sha256 mismatch"},
		// A base of an older GoldenImage of the same name does not count.
		"gi-d": {Name: "debian", LV: "gi-old", Size: resource.MustParse("1Gi"), State: thinlvmv1.GoldenBaseReady},
	}
	for node, b := range states {
		ln := &thinlvmv1.LVMNode{ObjectMeta: metav1.ObjectMeta{Name: node}}
		if err := k8s.Create(ctx, ln); err != nil {
			t.Fatal(err)
		}
		ln.Status.GoldenBases = []thinlvmv1.GoldenBaseStatus{b}
		if err := k8s.Status().Update(ctx, ln); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, "1 ready, 1 populating, 1 failed", func() bool {
		st := get().Status
		return st.ReadyNodes == 1 && st.PopulatingNodes == 1 && st.FailedNodes == 1
	})
	st := get().Status
	if diff := cmp.Diff([]string{"gi-a"}, st.Nodes); diff != "" {
		t.Errorf("nodes (-want +got):\n%s", diff)
	}
	if !meta.IsStatusConditionTrue(st.Conditions, thinlvmv1.ConditionImageReady) || !meta.IsStatusConditionTrue(st.Conditions, thinlvmv1.ConditionImageDegraded) {
		t.Errorf("conditions %+v, want Ready and Degraded", st.Conditions)
	}
	if st.LastError != "node gi-c: sha256 mismatch" {
		t.Errorf("last error %q", st.LastError)
	}
	// The failed node recovers: Degraded goes False, the last error stays.
	ln := &thinlvmv1.LVMNode{}
	if err := k8s.Get(ctx, types.NamespacedName{Name: "gi-c"}, ln); err != nil {
		t.Fatal(err)
	}
	ln.Status.GoldenBases[0].State, ln.Status.GoldenBases[0].Message = thinlvmv1.GoldenBaseReady, ""
	if err := k8s.Status().Update(ctx, ln); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "2 ready, not degraded", func() bool {
		st := get().Status
		return st.ReadyNodes == 2 && st.FailedNodes == 0 && meta.IsStatusConditionFalse(st.Conditions, thinlvmv1.ConditionImageDegraded)
	})
	st = get().Status
	if st.LastError == "" {
		t.Error("the last error was forgotten")
	}
	if diff := cmp.Diff([]string{"gi-a", "gi-c"}, st.Nodes); diff != "" {
		t.Errorf("nodes (-want +got):\n%s", diff)
	}
	if len(st.Channels) != 0 || st.SourceVolume != nil {
		t.Errorf("channels %v, source volume %+v: want none", st.Channels, st.SourceVolume)
	}
	// The base leaves gi-a: the node names the image no more, and the
	// image is told by the node's update (its old object names it).
	setBases(t, "gi-a")
	testutil.Eventually(t, "1 ready, on gi-c", func() bool {
		st := get().Status
		return st.ReadyNodes == 1 && cmp.Diff([]string{"gi-c"}, st.Nodes) == ""
	})
}

// Status.nodes names the first 100 nodes with a Ready base, sorted;
// readyNodes counts them all.
func TestGoldenImageStatusNodesAreCapped(t *testing.T) {
	ctx := context.Background()
	gi := httpImage("capped")
	if err := k8s.Create(ctx, gi); err != nil {
		t.Fatal(err)
	}
	const n = 103
	var want []string
	for i := n - 1; i >= 0; i-- { // made in reverse: the order is the controller's
		node := fmt.Sprintf("cap-%03d", i)
		setBases(t, node, thinlvmv1.GoldenBaseStatus{Name: gi.Name, LV: thinlvmv1.BaseLVName(gi), Size: gi.Spec.Size, State: thinlvmv1.GoldenBaseReady})
	}
	for i := range 100 {
		want = append(want, fmt.Sprintf("cap-%03d", i))
	}
	testutil.Eventually(t, "103 ready nodes", func() bool { return getImage(t, gi.Name).Status.ReadyNodes == n })
	if diff := cmp.Diff(want, getImage(t, gi.Name).Status.Nodes); diff != "" {
		t.Errorf("nodes (-want +got):\n%s", diff)
	}
}

// httpImage is a GoldenImage of an HTTP source (nothing downloads it here).
func httpImage(name string) *thinlvmv1.GoldenImage {
	return &thinlvmv1.GoldenImage{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: thinlvmv1.GoldenImageSpec{
		Source: thinlvmv1.ImageSource{HTTP: &thinlvmv1.HTTPSource{URL: "http://127.0.0.1:1/" + name + ".img", SHA256: strings.Repeat("c", 64)}},
		Size:   resource.MustParse("1Gi")}}
}

// create creates objs.
func create(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := k8s.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
}

// getImage reads a GoldenImage; it fails the test when there is none.
func getImage(t *testing.T, name string) *thinlvmv1.GoldenImage {
	t.Helper()
	gi := &thinlvmv1.GoldenImage{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Name: name}, gi); err != nil {
		t.Fatal(err)
	}
	return gi
}

// setBases makes the LVMNode node (if missing) and sets its bases.
func setBases(t *testing.T, node string, bases ...thinlvmv1.GoldenBaseStatus) {
	t.Helper()
	ctx := context.Background()
	ln := &thinlvmv1.LVMNode{}
	if err := k8s.Get(ctx, types.NamespacedName{Name: node}, ln); apierrors.IsNotFound(err) {
		ln = &thinlvmv1.LVMNode{ObjectMeta: metav1.ObjectMeta{Name: node}}
		if err := k8s.Create(ctx, ln); err != nil {
			t.Fatal(err)
		}
	} else if err != nil {
		t.Fatal(err)
	}
	ln.Status.GoldenBases = bases
	if err := k8s.Status().Update(ctx, ln); err != nil {
		t.Fatal(err)
	}
}

// readyReason is the reason of the GoldenImage's Ready condition, "" when
// it has none.
func readyReason(gi *thinlvmv1.GoldenImage) string {
	if c := meta.FindStatusCondition(gi.Status.Conditions, thinlvmv1.ConditionImageReady); c != nil {
		return c.Reason
	}
	return ""
}
