package server

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"

	"github.com/thinlvm/thinlvm/lvmd/lvm"
	"github.com/thinlvm/thinlvm/lvmd/lvm/fake"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
)

const autoExtendArg = "activation{thin_pool_autoextend_threshold=80 thin_pool_autoextend_percent=20}"

// hddPoolGrown is vg1/tp's size after one autoextend by 20%: 4 GiB / 5
// rounded up to 4 MiB extents (205 of them).
const hddPoolGrown = 4*gib + 205*4*mib

func TestAutoExtendAtStart(t *testing.T) {
	f := testRunner()
	f.Pools[1].DataPercent = 85
	f.Pools[0].DataPercent = 85 // ssd has no autoextend
	e := newEnv(t, testConfig(), f, envOptions{})
	var extends [][]string
	for _, c := range f.Calls() {
		if c[0] == "lvextend" {
			extends = append(extends, c)
		}
	}
	want := [][]string{{"lvextend", "--use-policies", "--config", autoExtendArg, "vg1/tp"}}
	if diff := cmp.Diff(want, extends); diff != "" {
		t.Errorf("lvextend commands (-want +got):\n%s", diff)
	}
	if p, _ := f.GetPool("vg1", "tp"); p.Size != hddPoolGrown {
		t.Errorf("pool size %d, want %d", p.Size, hddPoolGrown)
	}
	// The published report is the one read after the extend.
	resp, err := e.vg.GetCapacity(t.Context(), &pb.GetCapacityRequest{DeviceClass: "hdd"})
	if err != nil {
		t.Fatal(err)
	}
	c := resp.GetDeviceClasses()[0]
	if c.GetThinPoolSizeBytes() != hddPoolGrown || c.GetVgFreeBytes() != 3*gib-205*4*mib || c.GetDataPercent() >= 80 {
		t.Errorf("capacity after autoextend: %v", c)
	}
	if got := f.Count("fullreport"); got != 2 {
		t.Errorf("%d reports, want 2: before and after the extend", got)
	}
}

// A pool that fills up is extended on the next periodic refresh.
func TestAutoExtendOnRefresh(t *testing.T) {
	f := testRunner()
	e := newEnv(t, testConfig(), f, envOptions{interval: 10 * time.Millisecond})
	f.SetPoolUsage("vg1", "tp", 10, 81) // metadata over the threshold
	eventually(t, "the pool to be extended", func() bool { return f.Count("lvextend") > 0 })
	eventually(t, "the extended pool in the report", func() bool {
		resp, err := e.vg.GetCapacity(t.Context(), &pb.GetCapacityRequest{DeviceClass: "hdd"})
		return err == nil && resp.GetDeviceClasses()[0].GetThinPoolSizeBytes() == hddPoolGrown
	})
	calls := f.Calls()
	for _, c := range calls {
		if c[0] == "lvextend" {
			if diff := cmp.Diff([]string{"lvextend", "--use-policies", "--config", autoExtendArg, "vg1/tp"}, c); diff != "" {
				t.Errorf("lvextend (-want +got):\n%s", diff)
			}
		}
	}
}

// An autoextend that failed is not retried, before a create or at a
// refresh, while the VG's free space is what it was: it would fail again.
func TestAutoExtendFailureNotRetried(t *testing.T) {
	f := testRunner()
	f.Pools[1].DataPercent = 85
	f.Failures = []fake.Failure{{Subcommand: "lvextend", Stderr: "  Insufficient free space: 256 extents needed, but only 10 available"}}
	e := newEnv(t, testConfig(), f, envOptions{})
	if got := f.Count("lvextend"); got != 1 {
		t.Fatalf("%d lvextend commands at Start, want the one that failed", got)
	}
	if _, err := e.lv.CreateLV(t.Context(), &pb.CreateLVRequest{Name: "a", DeviceClass: "hdd", SizeBytes: gib}); err != nil {
		t.Fatal(err)
	}
	if got := f.Count("lvextend"); got != 1 {
		t.Errorf("%d lvextend commands, want no retry of the failed one", got)
	}
	if _, ok := f.GetLV("vg1", "a"); !ok {
		t.Error("LV not created")
	}
}

func TestNoAutoExtend(t *testing.T) {
	tests := []struct {
		name  string
		setup func(f *fake.Runner)
	}{
		{name: "under the threshold", setup: func(f *fake.Runner) { f.Pools[1].DataPercent, f.Pools[1].MetadataPercent = 79.99, 79.99 }},
		{name: "no room in the VG", setup: func(f *fake.Runner) { f.Pools[1].DataPercent, f.VGs[1].Free = 85, 0 }},
		{name: "device class without autoextend", setup: func(f *fake.Runner) { f.Pools[0].DataPercent, f.Pools[0].MetadataPercent = 99, 99 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := testRunner()
			tt.setup(f)
			e := newEnv(t, testConfig(), f, envOptions{})
			_, err := e.lv.CreateLV(t.Context(), &pb.CreateLVRequest{Name: "a", DeviceClass: "hdd", SizeBytes: 4 * mib})
			if err != nil {
				t.Fatal(err)
			}
			e.settle(t)
			if got := f.Count("lvextend"); got != 0 {
				t.Errorf("%d lvextend commands, want none", got)
			}
		})
	}
}

// A mutation is followed by a report read from lvm, which replaces the
// amended view.
func TestRefreshAfterMutation(t *testing.T) {
	f := testRunner()
	var hold atomic.Bool
	release := make(chan struct{})
	f.OnRun = func(args []string) {
		if args[0] == "fullreport" && hold.Load() {
			<-release
		}
	}
	e := newEnv(t, testConfig(), f, envOptions{})
	hold.Store(true) // the refresh waits in lvm until released
	reports := f.Count("fullreport")
	if _, err := e.lv.CreateLV(t.Context(), &pb.CreateLVRequest{Name: "a", SizeBytes: gib}); err != nil {
		t.Fatal(err)
	}
	if v := e.d.store.current(); v.fresh || v.report.LV("vg0", "a") == nil {
		t.Errorf("view after CreateLV: fresh %t, lv %+v; want an amended view with the LV", v.fresh, v.report.LV("vg0", "a"))
	}
	close(release)
	e.settle(t)
	if got := f.Count("fullreport") - reports; got != 1 {
		t.Errorf("%d reports after one mutation, want 1", got)
	}
	lv := e.d.store.current().report.LV("vg0", "a")
	want, _ := f.GetLV("vg0", "a")
	if lv == nil || lv.UUID != want.UUID || lv.UUID == "" {
		t.Errorf("refreshed view has %+v, lvm %+v", lv, want)
	}
}

// A failed refresh is retried; the amended view serves meanwhile.
func TestRefreshRetried(t *testing.T) {
	e := newEnv(t, testConfig(), testRunner(), envOptions{})
	e.fake.FailNext(fake.Failure{Subcommand: "fullreport", Stderr: "  Device or resource busy"})
	reports := e.fake.Count("fullreport")
	if _, err := e.lv.CreateLV(t.Context(), &pb.CreateLVRequest{Name: "a", SizeBytes: gib}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.lv.GetLV(t.Context(), &pb.GetLVRequest{Name: "a"}); err != nil {
		t.Errorf("GetLV while the refresh fails: %v", err)
	}
	e.settle(t)
	if got := e.fake.Count("fullreport") - reports; got != 2 {
		t.Errorf("%d reports, want the failed one and its retry", got)
	}
}

// A periodic refresh picks up what changes without lvmd: data written.
func TestIntervalRefresh(t *testing.T) {
	e := newEnv(t, testConfig(), testRunner(), envOptions{interval: 10 * time.Millisecond})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	stream, err := e.vg.Watch(ctx, &pb.WatchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	e.fake.SetPoolUsage("vg0", "pool", 33, 7)
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if c := resp.GetDeviceClasses()[0]; c.GetDataPercent() != 33 || c.GetMetadataPercent() != 7 {
		t.Errorf("watch after data was written: %v", c)
	}
}

// Reads never wait for a running lvm command.
func TestReadsDoNotWaitForMutations(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	f := testRunner()
	f.OnRun = func(args []string) {
		if args[0] == "lvcreate" {
			close(started)
			<-release
		}
	}
	e := newEnv(t, testConfig(), f, envOptions{})
	created := make(chan error, 1)
	go func() {
		_, err := e.lv.CreateLV(t.Context(), &pb.CreateLVRequest{Name: "a", SizeBytes: gib})
		created <- err
	}()
	<-started
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := e.vg.GetCapacity(ctx, &pb.GetCapacityRequest{}); err != nil {
		t.Errorf("GetCapacity during lvcreate: %v", err)
	}
	if _, err := e.lv.ListLVs(ctx, &pb.ListLVsRequest{}); err != nil {
		t.Errorf("ListLVs during lvcreate: %v", err)
	}
	_, err := e.lv.GetLV(ctx, &pb.GetLVRequest{Name: "a"})
	wantCode(t, err, codes.NotFound)
	close(release)
	if err := <-created; err != nil {
		t.Fatal(err)
	}
}

// A mutation whose caller goes away runs to the end, so that no LV is left
// half-made.
func TestMutationOutlivesCaller(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f := testRunner()
	f.LVs = []fake.LV{{VG: "vg0", Name: "src", Pool: "pool", Size: gib, Tags: []string{"thinlvm"}}}
	f.OnRun = func(args []string) {
		if args[0] == "lvcreate" {
			once.Do(func() { close(started) })
			<-release
		}
	}
	e := newEnv(t, testConfig(), f, envOptions{})
	ctx, cancel := context.WithCancel(t.Context())
	created := make(chan error, 1)
	go func() {
		_, err := e.lv.CreateSnapshot(ctx, &pb.CreateSnapshotRequest{Name: "s", SourceName: "src", SizeBytes: 2 * gib})
		created <- err
	}()
	<-started
	cancel()
	wantCode(t, <-created, codes.Canceled)
	close(release)
	eventually(t, "the snapshot created and extended", func() bool {
		lv, ok := f.GetLV("vg0", "s")
		return ok && lv.Size == 2*gib
	})
}

// countingRunner records how many lvm commands run at once.
type countingRunner struct {
	inner         lvm.Runner
	running, most atomic.Int32
}

func (r *countingRunner) Run(ctx context.Context, args ...string) ([]byte, error) {
	n := r.running.Add(1)
	defer r.running.Add(-1)
	for {
		m := r.most.Load()
		if n <= m || r.most.CompareAndSwap(m, n) {
			break
		}
	}
	runtime.Gosched() // give another command the chance to start
	return r.inner.Run(ctx, args...)
}

// lvm commands never run concurrently, whatever the callers do.
func TestCommandsSerialised(t *testing.T) {
	f := testRunner()
	f.LVs = []fake.LV{{VG: "vg0", Name: "src", Pool: "pool", Size: gib, Tags: []string{"thinlvm"}}}
	r := &countingRunner{inner: f}
	cfg := testConfig()
	cfg.DeviceClasses[0].OverprovisionRatio = 10
	d := New(cfg, r, nil, Options{}, logr.Discard())
	d.store.debounce, d.store.maxStale, d.store.interval = time.Millisecond, 10*time.Millisecond, 5*time.Millisecond
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	s := &lvService{d: d}
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			name := string(rune('a' + i))
			if _, err := s.CreateLV(ctx, &pb.CreateLVRequest{Name: name, SizeBytes: 8 * mib}); err != nil {
				t.Error(err)
			}
			if _, err := s.CreateSnapshot(ctx, &pb.CreateSnapshotRequest{Name: name + "s", SourceName: "src", SizeBytes: 2 * gib}); err != nil {
				t.Error(err)
			}
			if _, err := s.RemoveLV(ctx, &pb.RemoveLVRequest{Name: name}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got := r.most.Load(); got != 1 {
		t.Errorf("%d lvm commands ran at once, want 1", got)
	}
	if got, want := len(f.ListLVs()), 17; got != want {
		t.Errorf("%d LVs, want %d", got, want)
	}
}
