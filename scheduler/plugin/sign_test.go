//go:build !k8s1.34

package plugin

import (
	"context"
	"fmt"
	"testing"
)

// SignPod exists from Kubernetes 1.35 on (framework_k8s135.go).
func TestSignPod(t *testing.T) {
	f := newFake()
	f.addClaim("a", "thin", "1Gi")
	f.addClaim("b", "thin", "1Gi")
	f.addClaim("c", "thin", "2Gi")
	p := NewWithLister(defaultArgs(), f)
	sign := func(claim string) string {
		frags, st := p.SignPod(context.Background(), podWith("p-"+claim, claim))
		if !st.IsSuccess() || len(frags) != 1 {
			t.Fatalf("SignPod: %v %v", frags, st)
		}
		return fmt.Sprintf("%+v", frags[0].Value)
	}
	if sign("a") != sign("b") {
		t.Error("pods with the same demand sign differently: no batching")
	}
	if sign("a") == sign("c") {
		t.Error("pods with different demands sign alike: batching would reuse a wrong ranking")
	}
}
