package reconciler_test

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	thinlvmv1 "github.com/thinlvm/thinlvm/api/v1alpha1"
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
	eventually(t, "Ready=False with no node", func() bool {
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
	eventually(t, "1 ready, 1 populating, 1 failed", func() bool {
		st := get().Status
		return st.ReadyNodes == 1 && st.PopulatingNodes == 1 && st.FailedNodes == 1
	})
	st := get().Status
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
	eventually(t, "2 ready, not degraded", func() bool {
		st := get().Status
		return st.ReadyNodes == 2 && st.FailedNodes == 0 && meta.IsStatusConditionFalse(st.Conditions, thinlvmv1.ConditionImageDegraded)
	})
	if get().Status.LastError == "" {
		t.Error("the last error was forgotten")
	}
}
