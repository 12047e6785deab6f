package server

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
	f.OnRun = func(_ context.Context, args []string) {
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
	stream := e.watching(t, ctx)
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
	f.OnRun = func(_ context.Context, args []string) {
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
	f.OnRun = func(_ context.Context, args []string) {
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

// gate holds one fake lvm command, once armed, until release is closed, as
// a slow lvm would hold it; it logs the start of every command and the end
// of the held one, in order.
type gate struct {
	held    chan context.Context // gets the held command's context
	release chan struct{}

	mu     sync.Mutex
	match  func(args []string) bool
	events []string
}

// newGate sets f's OnRun; the gate holds nothing until armed.
func newGate(f *fake.Runner) *gate {
	g := &gate{held: make(chan context.Context, 1), release: make(chan struct{})}
	f.OnRun = g.onRun
	return g
}

// arm holds the next command that match accepts.
func (g *gate) arm(match func(args []string) bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.match = match
}

func (g *gate) onRun(ctx context.Context, args []string) {
	name := label(args)
	g.mu.Lock()
	g.events = append(g.events, "start "+name)
	hold := g.match != nil && g.match(args)
	if hold {
		g.match = nil
	}
	g.mu.Unlock()
	if !hold {
		return
	}
	g.held <- ctx
	<-g.release
	g.mu.Lock()
	g.events = append(g.events, "end "+name)
	g.mu.Unlock()
}

// log returns the events so far.
func (g *gate) log() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.events)
}

// label names a command in a gate's log: its subcommand, and for lvcreate
// the new LV's name.
func label(args []string) string {
	if i := slices.Index(args, "--name"); i >= 0 && i+1 < len(args) {
		return args[0] + " " + args[i+1]
	}
	return args[0]
}

func command(want string) func(args []string) bool {
	return func(args []string) bool { return label(args) == want }
}

// A mutation whose command outlasts lvmd's wait: the caller gets an error
// at once, the command is not killed and keeps the lock until it ends, the
// next mutation starts only then, and decides on what lvm holds.
func TestMutationOutlastingItsWait(t *testing.T) {
	tests := []struct {
		name           string
		commandTimeout time.Duration
		// cancel cancels the caller's context once the command has started.
		cancel   bool
		wantCode codes.Code
		// wantReread: lvmd stopped waiting, so nothing amended the view: the
		// report must be read between the end of the first command and the
		// second.
		wantReread bool
	}{
		{name: "lvmd stops waiting", commandTimeout: 300 * time.Millisecond, wantCode: codes.DeadlineExceeded, wantReread: true},
		{name: "caller goes away", cancel: true, wantCode: codes.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := testRunner()
			g := newGate(f)
			e := newEnv(t, testConfig(), f, envOptions{commandTimeout: tt.commandTimeout})
			g.arm(command("lvcreate a"))
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			first := make(chan error, 1)
			go func() {
				_, err := e.lv.CreateLV(ctx, &pb.CreateLVRequest{Name: "a", SizeBytes: gib})
				first <- err
			}()
			<-g.held
			if tt.cancel {
				cancel()
			}
			select {
			case err := <-first:
				wantCode(t, err, tt.wantCode)
			case <-time.After(10 * time.Second):
				t.Fatal("the caller still waits for the held lvcreate")
			}

			second := make(chan error, 1)
			go func() {
				_, err := e.lv.CreateLV(t.Context(), &pb.CreateLVRequest{Name: "b", SizeBytes: gib})
				second <- err
			}()
			eventually(t, "the second mutation to wait for the lock", func() bool { return e.d.store.pending.Load() >= 2 })
			time.Sleep(50 * time.Millisecond) // time for the second lvcreate to start, were the lock free
			if slices.Contains(g.log(), "start lvcreate b") {
				t.Fatalf("a second lvcreate started while the first one ran: %q", g.log())
			}
			close(g.release)
			if err := <-second; err != nil {
				t.Fatal(err)
			}

			log := g.log()
			end, next := slices.Index(log, "end lvcreate a"), slices.Index(log, "start lvcreate b")
			if end < 0 || next < end {
				t.Fatalf("command log %q: the second lvcreate must start after the first ended", log)
			}
			if tt.wantReread && !slices.Contains(log[end:next], "start fullreport") {
				t.Errorf("command log %q: no report read between the first lvcreate's end and the second", log)
			}
			lv, want := e.d.store.current().report.LV("vg0", "a"), fakeLV(t, f, "a")
			if lv == nil || tt.wantReread && lv.UUID != want.UUID {
				t.Errorf("view after the second mutation has lv a %+v; lvm has %+v", lv, want)
			}
			e.settle(t)
			diffNames(t, []string{"vg0/a", "vg0/b"}, f)
			for _, name := range []string{"a", "b"} {
				if _, err := e.lv.GetLV(t.Context(), &pb.GetLVRequest{Name: name}); err != nil {
					t.Errorf("GetLV(%s): %v", name, err)
				}
			}
		})
	}
}

func fakeLV(t *testing.T, f *fake.Runner, name string) fake.LV {
	t.Helper()
	lv, ok := f.GetLV("vg0", name)
	if !ok {
		t.Fatalf("lvm has no LV vg0/%s", name)
	}
	return lv
}

// A caller whose context ends while it waits for the lock, or has ended when
// it gets it, gets the context's error and never runs its command.
func TestLockWaitEndsWithCaller(t *testing.T) {
	create := func(ctx context.Context, s *lvService) error {
		_, err := s.CreateLV(ctx, &pb.CreateLVRequest{Name: "b", SizeBytes: gib})
		return err
	}
	snapshot := func(ctx context.Context, s *lvService) error {
		_, err := s.CreateSnapshot(ctx, &pb.CreateSnapshotRequest{Name: "b", SourceName: "x", SizeBytes: 2 * gib})
		return err
	}
	resize := func(ctx context.Context, s *lvService) error {
		_, err := s.ResizeLV(ctx, &pb.ResizeLVRequest{Name: "x", SizeBytes: 2 * gib})
		return err
	}
	remove := func(ctx context.Context, s *lvService) error {
		_, err := s.RemoveLV(ctx, &pb.RemoveLVRequest{Name: "x"})
		return err
	}
	tests := []struct {
		name string
		op   func(ctx context.Context, s *lvService) error
		// held: another mutation holds the lock while op waits; otherwise
		// the lock is free and op's context has ended before the call, which
		// is tried often enough to meet both of select's choices.
		held bool
		// timeout ends op's context by deadline, otherwise it is cancelled.
		timeout time.Duration
		want    codes.Code
	}{
		{name: "create cancelled while waiting", op: create, held: true, want: codes.Canceled},
		{name: "snapshot past its deadline while waiting", op: snapshot, held: true, timeout: 50 * time.Millisecond, want: codes.DeadlineExceeded},
		{name: "remove cancelled while waiting", op: remove, held: true, want: codes.Canceled},
		{name: "resize cancelled, lock free", op: resize, want: codes.Canceled},
		{name: "create cancelled, lock free", op: create, want: codes.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := testRunner()
			f.LVs = []fake.LV{{VG: "vg0", Name: "x", Pool: "pool", Size: gib, Tags: []string{"thinlvm"}}}
			g := newGate(f)
			e := newEnv(t, testConfig(), f, envOptions{})
			s := &lvService{d: e.d}
			holder := make(chan error, 1)
			if tt.held {
				g.arm(command("lvcreate a"))
				go func() {
					_, err := s.CreateLV(t.Context(), &pb.CreateLVRequest{Name: "a", SizeBytes: gib})
					holder <- err
				}()
				<-g.held
			}
			before := len(g.log())

			ctx, cancel := context.WithCancel(t.Context())
			if tt.timeout > 0 {
				ctx, cancel = context.WithTimeout(t.Context(), tt.timeout)
			}
			defer cancel()
			tries := 1
			if !tt.held {
				cancel()
				tries = 20
			}
			for range tries {
				done := make(chan error, 1)
				go func() { done <- tt.op(ctx, s) }()
				if tt.held && tt.timeout == 0 {
					eventually(t, "the call to wait for the lock", func() bool { return e.d.store.pending.Load() >= 2 })
					cancel()
				}
				var err error
				select {
				case err = <-done:
				case <-time.After(10 * time.Second):
					t.Fatal("the call still waits for the lock after its context ended")
				}
				if code := status.Code(toStatus(err)); code != tt.want {
					t.Fatalf("error %v, code %v; want %v", err, code, tt.want)
				}
			}
			if tt.held {
				close(g.release)
				if err := <-holder; err != nil {
					t.Fatal(err)
				}
			}
			e.settle(t)
			for _, ev := range g.log()[before:] {
				if ev != "end lvcreate a" && ev != "start fullreport" {
					t.Errorf("a call whose context ended ran lvm: %q", g.log()[before:])
					break
				}
			}
			if lv := fakeLV(t, f, "x"); lv.Size != gib {
				t.Errorf("lv x is %d bytes, want it untouched at %d", lv.Size, gib)
			}
			if _, ok := f.GetLV("vg0", "b"); ok {
				t.Error("lv b was created")
			}
			if got := e.d.store.pending.Load(); got != 0 {
				t.Errorf("%d callers counted as waiting for or holding the lock, want 0", got)
			}
		})
	}
}

// Background work does not wait for lvm with the bare process context:
// every command that Start, the refresher and the pool autoextend run has a
// deadline, no later than the command timeout.
func TestBackgroundWaitsBounded(t *testing.T) {
	const timeout = time.Minute
	tests := []struct {
		name string
		// setup changes the fake before Start; the commands Start runs are
		// checked only when startToo.
		setup    func(f *fake.Runner)
		startToo bool
		interval time.Duration
		// trigger makes the background work run after Start.
		trigger func(t *testing.T, e *env)
		want    []string
	}{
		{
			name:     "Start and its autoextend",
			setup:    func(f *fake.Runner) { f.Pools[1].DataPercent = 85 },
			startToo: true,
			want:     []string{"fullreport", "lvextend"},
		},
		{
			name:     "periodic refresh and its autoextend",
			interval: 10 * time.Millisecond,
			trigger: func(t *testing.T, e *env) {
				e.fake.SetPoolUsage("vg1", "tp", 81, 0)
				eventually(t, "the pool to be extended", func() bool { return e.fake.Count("lvextend") > 0 })
			},
			want: []string{"fullreport", "lvextend"},
		},
		{
			name: "refresh after a mutation",
			trigger: func(t *testing.T, e *env) {
				if _, err := e.lv.CreateLV(t.Context(), &pb.CreateLVRequest{Name: "a", SizeBytes: gib}); err != nil {
					t.Fatal(err)
				}
				e.settle(t)
			},
			want: []string{"fullreport", "lvcreate"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := testRunner()
			if tt.setup != nil {
				tt.setup(f)
			}
			type run struct {
				sub       string
				remaining time.Duration
				bounded   bool
			}
			var mu sync.Mutex
			var runs []run
			f.OnRun = func(ctx context.Context, args []string) {
				deadline, ok := ctx.Deadline()
				mu.Lock()
				defer mu.Unlock()
				runs = append(runs, run{sub: args[0], remaining: time.Until(deadline), bounded: ok})
			}
			e := newEnv(t, testConfig(), f, envOptions{commandTimeout: timeout, interval: tt.interval})
			if !tt.startToo {
				mu.Lock()
				runs = nil
				mu.Unlock()
			}
			if tt.trigger != nil {
				tt.trigger(t, e)
			}
			mu.Lock()
			defer mu.Unlock()
			var subs []string
			for _, r := range runs {
				if !r.bounded || r.remaining <= 0 || r.remaining > timeout {
					t.Errorf("lvm %s ran with deadline %t, %v left; want at most %v", r.sub, r.bounded, r.remaining, timeout)
				}
				if !slices.Contains(subs, r.sub) {
					subs = append(subs, r.sub)
				}
			}
			for _, sub := range tt.want {
				if !slices.Contains(subs, sub) {
					t.Errorf("no lvm %s ran (ran %q): the test proves nothing", sub, subs)
				}
			}
		})
	}
}

// A background command that outlasts its wait is not killed: the refresher
// stops waiting at its deadline, no other command starts until the held one
// ends, and the report is read again after it.
func TestBackgroundCommandOutlastingItsWait(t *testing.T) {
	tests := []struct {
		name    string
		hold    string
		trigger func(f *fake.Runner)
		// check runs on the settled env after the command ended.
		check func(t *testing.T, e *env)
	}{
		{name: "periodic report", hold: "fullreport"},
		{
			name:    "autoextend",
			hold:    "lvextend",
			trigger: func(f *fake.Runner) { f.SetPoolUsage("vg1", "tp", 81, 0) },
			check: func(t *testing.T, e *env) {
				resp, err := e.vg.GetCapacity(t.Context(), &pb.GetCapacityRequest{DeviceClass: "hdd"})
				if err != nil {
					t.Fatal(err)
				}
				if got := resp.GetDeviceClasses()[0].GetThinPoolSizeBytes(); got != hddPoolGrown {
					t.Errorf("pool size %d in the report, want %d after the extend", got, hddPoolGrown)
				}
				if got := e.fake.Count("lvextend"); got != 1 {
					t.Errorf("%d lvextend commands, want 1", got)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := testRunner()
			g := newGate(f)
			e := newEnv(t, testConfig(), f, envOptions{commandTimeout: 200 * time.Millisecond, interval: 10 * time.Millisecond})
			g.arm(command(tt.hold))
			if tt.trigger != nil {
				tt.trigger(f)
			}
			ctx := <-g.held
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
				t.Fatalf("the held %s's context never ended", tt.hold)
			}
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				t.Errorf("held %s's context: %v, want its deadline passed", tt.hold, ctx.Err())
			}
			held := len(g.log())
			// Long enough for the refresher to give up its next wait for the
			// lock too (200ms).
			time.Sleep(300 * time.Millisecond)
			if after := g.log()[held:]; len(after) > 0 {
				t.Errorf("commands started while the %s ran on: %q", tt.hold, after)
			}
			reports := f.Count("fullreport")
			close(g.release)
			e.settle(t)
			if f.Count("fullreport") == reports {
				t.Error("no report read after the held command ended")
			}
			if tt.check != nil {
				tt.check(t, e)
			}
		})
	}
}

// Drain, lvmd's last act, waits for a command lvmd stopped waiting for and
// starts nothing after it.
func TestDrainWaitsForRunningCommands(t *testing.T) {
	f := testRunner()
	g := newGate(f)
	e := newEnv(t, testConfig(), f, envOptions{commandTimeout: 200 * time.Millisecond})
	g.arm(command("lvcreate a"))
	first := make(chan error, 1)
	go func() {
		_, err := e.lv.CreateLV(t.Context(), &pb.CreateLVRequest{Name: "a", SizeBytes: gib})
		first <- err
	}()
	<-g.held
	wantCode(t, <-first, codes.DeadlineExceeded) // lvmd stopped waiting; lvcreate runs on
	drained := make(chan error, 1)
	go func() { drained <- e.d.Drain(t.Context()) }()
	select {
	case err := <-drained:
		t.Fatalf("Drain returned (%v) while lvcreate ran", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(g.release)
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err := e.lv.CreateLV(ctx, &pb.CreateLVRequest{Name: "b", SizeBytes: gib})
	wantCode(t, err, codes.DeadlineExceeded)
	if slices.Contains(g.log(), "start lvcreate b") {
		t.Errorf("a command started after Drain: %q", g.log())
	}
}

// An lvm shell that dies under a command leaves its outcome unknown: the
// caller gets Unavailable, never a wrong answer, lvmd re-reads the report
// before the next mutation, and the retry returns what lvm really did.
func TestOutcomeUnknown(t *testing.T) {
	f := testRunner()
	e := newEnv(t, testConfig(), f, envOptions{})
	e.settle(t)
	f.FailNext(fake.Failure{Subcommand: "lvcreate", OutcomeUnknown: true})
	// Counted before the call: the re-read may run in the background as
	// soon as the outcome is unknown, before the caller has its answer.
	reports := f.Count("fullreport")
	_, err := e.lv.CreateLV(t.Context(), &pb.CreateLVRequest{Name: "a", SizeBytes: gib})
	wantCode(t, err, codes.Unavailable)
	resp, err := e.lv.CreateLV(t.Context(), &pb.CreateLVRequest{Name: "a", SizeBytes: gib})
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	if lv := resp.GetVolume(); lv.GetSizeBytes() != gib || lv.GetUuid() != fakeLV(t, f, "a").UUID {
		t.Errorf("retry returned %v, want the LV lvm made", lv)
	}
	if n := f.Count("lvcreate"); n != 1 {
		t.Errorf("%d lvcreate ran, want 1: the retry found the LV the first one made", n)
	}
	if f.Count("fullreport") == reports {
		t.Error("no report read between the unknown outcome and the retry")
	}
}
