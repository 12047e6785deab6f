//go:build !k8s1.34

package plugin

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// SignPod exists from Kubernetes 1.35 on (framework_k8s135.go). It signs
// the pod's claims and reads nothing: the plugin here has no lister, and
// any read would panic.
func TestSignPod(t *testing.T) {
	p := NewWithLister(defaultArgs(), nil)
	sign := func(pod *corev1.Pod) string {
		frags, st := p.SignPod(context.Background(), pod)
		if !st.IsSuccess() || len(frags) != 1 {
			t.Fatalf("SignPod: %v %v", frags, st)
		}
		return fmt.Sprintf("%+v", frags[0].Value)
	}
	if sign(podWith("p1", "a", "b")) != sign(podWith("p2", "b", "a")) {
		t.Error("pods with the same claims sign differently: no batching")
	}
	if sign(podWith("p1", "a")) == sign(podWith("p2", "c")) {
		t.Error("pods with different claims sign alike: batching would reuse a wrong ranking")
	}
	other := podWith("p3", "a")
	other.Namespace = "other"
	if sign(podWith("p1", "a")) == sign(other) {
		t.Error("claims of one name in two namespaces sign alike")
	}
	e1, e2 := ephemeralPod("vm-1", "disk"), ephemeralPod("vm-2", "disk")
	if sign(e1) == sign(e2) {
		t.Error("two pods' generic ephemeral volumes (claims vm-1-disk, vm-2-disk) sign alike")
	}
}
