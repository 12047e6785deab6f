package cluster

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestBuildStep(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		line string
		want *Progress // nil: no step
	}{
		{
			name: "a Kubernetes binary starts",
			line: "build: kube-apiserver (k8s.io/kubernetes/cmd/kube-apiserver) into /root/.cache/thinlvm/k8s/bin-x ...",
			want: &Progress{Step: "building kube-apiserver", N: 2, Of: 12, Since: now},
		},
		{
			name: "the last one",
			line: "build: snapshot-controller (github.com/kubernetes-csi/external-snapshotter/v8/cmd/snapshot-controller) into /c ...",
			want: &Progress{Step: "building snapshot-controller", N: 10, Of: 12, Since: now},
		},
		{
			name: "a binary Start does not ask for is a step without a count",
			line: "build: other (example.com/other) into /c ...",
			want: &Progress{Step: "building other", Since: now},
		},
		{name: "a build's end", line: "build: kube-apiserver in 712s"},
		{name: "an error", line: "build: unknown binary foo"},
		{name: "go's output", line: "go: downloading k8s.io/kubernetes v1.37.2"},
		{name: "empty", line: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := buildStep(tc.line, now)
			if ok != (tc.want != nil) {
				t.Fatalf("buildStep(%q) = %+v, %v; want a step: %v", tc.line, got, ok, tc.want != nil)
			}
			if tc.want != nil {
				if d := cmp.Diff(*tc.want, got); d != "" {
					t.Errorf("buildStep(%q) (-want +got):\n%s", tc.line, d)
				}
			}
		})
	}
}

// TestBuildLog: build.sh's output reaches the log byte for byte, however
// it is split into writes, and each binary's start is reported once.
func TestBuildLog(t *testing.T) {
	out := "build: etcd (.) into /c ...\ngo: downloading x\nbuild: etcd in 80s\nbuild: kwok (sigs.k8s.io/kwok/cmd/kwok) into /c ...\nbuild: kwok in 9s\npartial"
	for _, size := range []int{1, 7, len(out)} {
		var log bytes.Buffer
		var steps []string
		w := &buildLog{log: &log, progress: func(p Progress) { steps = append(steps, fmt.Sprintf("%s %d/%d", p.Step, p.N, p.Of)) }}
		for b := []byte(out); len(b) > 0; {
			n := min(size, len(b))
			if m, err := w.Write(b[:n]); m != n || err != nil {
				t.Fatalf("Write = %d, %v; want %d, nil", m, err, n)
			}
			b = b[n:]
		}
		if log.String() != out {
			t.Errorf("writes of %d bytes: log %q, want %q", size, log.String(), out)
		}
		if d := cmp.Diff([]string{"building etcd 1/12", "building kwok 6/12"}, steps); d != "" {
			t.Errorf("writes of %d bytes: steps (-want +got):\n%s", size, d)
		}
	}
}
