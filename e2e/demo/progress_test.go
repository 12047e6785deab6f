package main

import (
	"testing"
	"time"

	"github.com/thinlvm/thinlvm/e2e/cluster"
)

func TestProgressLine(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		p        cluster.Progress
		now      time.Time
		describe string
		line     string
	}{
		{
			name:     "a binary being built",
			p:        cluster.Progress{Step: "building kube-apiserver", N: 2, Of: 11, Since: t0},
			now:      t0.Add(3*time.Minute + 12*time.Second + 900*time.Millisecond),
			describe: "building kube-apiserver (2 of 11)",
			line:     "building kube-apiserver (2 of 11), 3m12s",
		},
		{
			name:     "a step that builds nothing has no count",
			p:        cluster.Progress{Step: "starting etcd and kube-apiserver", Since: t0},
			now:      t0.Add(4 * time.Second),
			describe: "starting etcd and kube-apiserver",
			line:     "starting etcd and kube-apiserver, 4s",
		},
		{
			name:     "just begun",
			p:        cluster.Progress{Step: "building thinlvm", N: 11, Of: 11, Since: t0},
			now:      t0.Add(300 * time.Millisecond),
			describe: "building thinlvm (11 of 11)",
			line:     "building thinlvm (11 of 11), 0s",
		},
		{
			name:     "a clock behind the report's shows no negative time",
			p:        cluster.Progress{Step: "building etcd", N: 1, Of: 11, Since: t0},
			now:      t0.Add(-2 * time.Second),
			describe: "building etcd (1 of 11)",
			line:     "building etcd (1 of 11), 0s",
		},
		{
			name:     "over an hour",
			p:        cluster.Progress{Step: "building kube-controller-manager", N: 3, Of: 11, Since: t0},
			now:      t0.Add(time.Hour + 2*time.Minute + 5*time.Second),
			describe: "building kube-controller-manager (3 of 11)",
			line:     "building kube-controller-manager (3 of 11), 1h2m5s",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := describe(tc.p); got != tc.describe {
				t.Errorf("describe = %q, want %q", got, tc.describe)
			}
			got := progressLine(tc.p, tc.now)
			if got != tc.line {
				t.Errorf("progressLine = %q, want %q", got, tc.line)
			}
			if n := len([]rune(got)); n > labelWidth {
				t.Errorf("progressLine is %d characters, more than the spinner's %d", n, labelWidth)
			}
		})
	}
}

func TestFit(t *testing.T) {
	for _, tc := range []struct {
		name, s string
		n       int
		want    string
	}{
		{name: "short", s: "building etcd", n: 20, want: "building etcd"},
		{name: "exact", s: "abcde", n: 5, want: "abcde"},
		{name: "cut", s: "abcdefgh", n: 5, want: "abcd…"},
		{name: "runes, not bytes", s: "ééééééé", n: 4, want: "ééé…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fit(tc.s, tc.n); got != tc.want {
				t.Errorf("fit(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
			}
		})
	}
}
