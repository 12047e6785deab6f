package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/thinlvm/thinlvm/lvmd/config"
	"github.com/thinlvm/thinlvm/lvmd/lvm"
	"github.com/thinlvm/thinlvm/lvmd/lvm/fake"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
)

const (
	mib = uint64(1) << 20
	gib = uint64(1) << 30
)

// testConfig has two device classes: ssd (default, vg0/pool, ratio 2, 1 GiB
// spare) and hdd (vg1/tp, autoextend at 80% by 20%).
func testConfig() *config.Config {
	c := &config.Config{DeviceClasses: []config.DeviceClass{
		{Name: "ssd", VolumeGroup: "vg0", ThinPool: "pool", Default: true, OverprovisionRatio: 2, SpareGB: 1},
		{Name: "hdd", VolumeGroup: "vg1", ThinPool: "tp", AutoExtend: &config.AutoExtend{ThresholdPercent: 80, Percent: 20}},
	}}
	c.Default()
	return c
}

// testRunner holds the VGs and pools of testConfig, and no thin LV.
func testRunner() *fake.Runner {
	return &fake.Runner{
		VGs: []fake.VG{
			{Name: "vg0", Size: 20 * gib, Free: 10 * gib},
			{Name: "vg1", Size: 8 * gib, Free: 3 * gib},
		},
		Pools: []fake.Pool{
			// As lvmd sets them: ssd errors when full, hdd (autoextend, room
			// in its VG) queues.
			{VG: "vg0", Name: "pool", Size: 8 * gib, WhenFull: "error"},
			{VG: "vg1", Name: "tp", Size: 4 * gib, WhenFull: "queue"},
		},
	}
}

// env is a started Daemon serving on an in-process connection.
type env struct {
	fake *fake.Runner
	d    *Daemon
	lv   pb.LVServiceClient
	vg   pb.VGServiceClient
	// stop ends the context the Daemon was started with, as lvmd's
	// SIGTERM does; srv serves it.
	stop context.CancelFunc
	srv  *grpc.Server
}

// envOptions tune the store before the Daemon starts.
type envOptions struct {
	debounce, maxStale, interval time.Duration
	// commandTimeout is Options.CommandTimeout; 0 for the default.
	commandTimeout time.Duration
	// devDir is Options.DevDir; "" for /dev.
	devDir string
}

// newEnv starts a Daemon for cfg over f and connects to it. The store
// refreshes 5ms after the last mutation (or 200ms after the first), and
// only after mutations unless o.interval is set.
func newEnv(t *testing.T, cfg *config.Config, f *fake.Runner, o envOptions) *env {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("test config: %v", err)
	}
	d := New(cfg, f, NewMetrics(prometheus.NewRegistry()), Options{CommandTimeout: o.commandTimeout, DevDir: o.devDir}, logr.Discard())
	d.store.debounce, d.store.maxStale, d.store.interval = 5*time.Millisecond, 200*time.Millisecond, time.Hour
	if o.debounce > 0 {
		d.store.debounce = o.debounce
	}
	if o.maxStale > 0 {
		d.store.maxStale = o.maxStale
	}
	if o.interval > 0 {
		d.store.interval = o.interval
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := d.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	lis := bufconn.Listen(1 << 20)
	s := grpc.NewServer(grpc.UnaryInterceptor(d.UnaryInterceptor), grpc.StreamInterceptor(d.StreamInterceptor))
	d.Register(s)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &env{fake: f, d: d, lv: pb.NewLVServiceClient(conn), vg: pb.NewVGServiceClient(conn), stop: cancel, srv: s}
}

// watching opens a Watch with ctx and takes its first report.
func (e *env) watching(t *testing.T, ctx context.Context) pb.VGService_WatchClient {
	t.Helper()
	stream, err := e.vg.Watch(ctx, &pb.WatchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	return stream
}

// mutations counts the lvm commands that change something.
func (e *env) mutations() int {
	return e.fake.Count("lvcreate") + e.fake.Count("lvextend") + e.fake.Count("lvremove")
}

// settle waits until the store has published a fresh report read after
// every mutation so far.
func (e *env) settle(t *testing.T) {
	t.Helper()
	eventually(t, "a fresh report after the mutations", func() bool {
		s := e.d.store
		// A fresh view, no refresh queued, no mutation or refresh running.
		if !s.current().fresh || len(s.dirty) > 0 || s.pending.Load() > 0 {
			return false
		}
		select {
		case s.sem <- struct{}{}:
			<-s.sem
			return true
		default:
			return false
		}
	})
}

// eventually polls cond until it holds, failing the test after 10s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func wantCode(t *testing.T, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("code %v (%v), want %v", got, err, want)
	}
}

func TestStart(t *testing.T) {
	tests := []struct {
		name   string
		modify func(f *fake.Runner)
		// wantErr is the sentinel Start's error must match; nil for success.
		wantErr error
		// unavailable is why hdd is unavailable after Start; "" for not.
		unavailable string
		// commands is how many lvm commands Start runs.
		commands int
	}{
		{name: "ok", modify: func(*fake.Runner) {}, commands: 1},
		// lvm refuses the report of vg0 and vg1: lvmd lists the VGs and
		// reports vg0.
		{name: "volume group missing", modify: func(f *fake.Runner) { f.VGs = f.VGs[:1]; f.Pools = f.Pools[:1] },
			unavailable: "volume group vg1 not found", commands: 3},
		{name: "thin pool missing", modify: func(f *fake.Runner) { f.Pools = f.Pools[:1] },
			unavailable: "thin pool vg1/tp not found", commands: 1},
		{
			name: "thin pool is a thin LV",
			modify: func(f *fake.Runner) {
				f.Pools = f.Pools[:1]
				f.LVs = []fake.LV{{VG: "vg1", Name: "tp", Pool: "pool", Size: gib}}
			},
			unavailable: "vg1/tp is not a thin pool", commands: 1,
		},
		{
			name: "lvm fails",
			modify: func(f *fake.Runner) {
				f.Failures = []fake.Failure{{Subcommand: "fullreport", Stderr: "  Device or resource busy"}}
			},
			wantErr:  &lvm.CommandError{},
			commands: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := testRunner()
			tt.modify(f)
			d := New(testConfig(), f, nil, Options{}, logr.Discard())
			err := d.Start(t.Context())
			switch want := tt.wantErr.(type) { //nolint:errorlint // the table's wanted error, not a returned one
			case nil:
				if err != nil {
					t.Fatalf("Start: %v", err)
				}
				resp, err := d.report(d.store.current(), "")
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range resp.GetDeviceClasses() {
					want := ""
					if c.GetDeviceClass() == "hdd" {
						want = tt.unavailable
					}
					if c.GetUnavailable() != want {
						t.Errorf("%s: unavailable %q, want %q", c.GetDeviceClass(), c.GetUnavailable(), want)
					}
					if want != "" && c.GetAvailableBytes() != 0 {
						t.Errorf("%s: %d bytes available while unavailable", c.GetDeviceClass(), c.GetAvailableBytes())
					}
				}
			case *lvm.CommandError:
				if !errors.As(err, &want) {
					t.Fatalf("Start: %v, want a *lvm.CommandError", err)
				}
			default:
				if !errors.Is(err, want) {
					t.Fatalf("Start: %v, want %v", err, want)
				}
			}
			if got := f.Total(); got != tt.commands {
				t.Errorf("Start ran %d commands (%q), want %d", got, f.Calls(), tt.commands)
			}
		})
	}
}

// A device class whose volume group is missing serves nothing
// (FailedPrecondition, no lvm command) while the other serves; once an
// administrator makes the VG and pool, a refresh finds them and the class
// serves, without a restart.
func TestDeviceClassAppears(t *testing.T) {
	f := testRunner()
	f.VGs, f.Pools = f.VGs[:1], f.Pools[:1]
	e := newEnv(t, testConfig(), f, envOptions{})
	ctx := t.Context()
	available := func() float64 { return metricValue(t, e.d.metrics.available.WithLabelValues("hdd")) }
	if got := available(); got != 0 {
		t.Errorf("hdd available gauge %v before its VG, want 0", got)
	}
	before := f.Count("lvcreate")
	_, err := e.lv.CreateLV(ctx, &pb.CreateLVRequest{Name: "a", DeviceClass: "hdd", SizeBytes: gib})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "volume group vg1 not found") {
		t.Fatalf("CreateLV in hdd without its VG: %v, want FailedPrecondition naming the VG", err)
	}
	if got := f.Count("lvcreate"); got != before {
		t.Errorf("%d lvcreate for a class without its VG", got-before)
	}
	if _, err := e.lv.CreateLV(ctx, &pb.CreateLVRequest{Name: "b", DeviceClass: "ssd", SizeBytes: gib}); err != nil {
		t.Fatalf("CreateLV in ssd: %v", err)
	}

	f.AddVGAndPool(fake.VG{Name: "vg1", Size: 8 * gib, Free: 3 * gib}, fake.Pool{VG: "vg1", Name: "tp", Size: 4 * gib, WhenFull: "queue"})
	if err := e.d.store.refresh(ctx); err != nil {
		t.Fatal(err)
	}
	resp, err := e.vg.GetCapacity(ctx, &pb.GetCapacityRequest{DeviceClass: "hdd"})
	if err != nil {
		t.Fatal(err)
	}
	if c := resp.GetDeviceClasses()[0]; c.GetUnavailable() != "" || c.GetAvailableBytes() == 0 {
		t.Fatalf("hdd after its VG was made: unavailable %q, %d bytes available", c.GetUnavailable(), c.GetAvailableBytes())
	}
	if got := available(); got != 1 {
		t.Errorf("hdd available gauge %v after its VG was made, want 1", got)
	}
	if _, err := e.lv.CreateLV(ctx, &pb.CreateLVRequest{Name: "a", DeviceClass: "hdd", SizeBytes: gib}); err != nil {
		t.Fatalf("CreateLV in hdd once its VG is there: %v", err)
	}
}

func TestToStatus(t *testing.T) {
	cmdErr := &lvm.CommandError{Args: []string{"lvs"}, ExitCode: 5, Stderr: "  Device or resource busy"}
	tests := []struct {
		name string
		err  error
		want codes.Code
		// reason is the ErrorInfo lvmd attaches.
		reason pb.ErrorReason
	}{
		{"nil", nil, codes.OK, pb.ErrorReason_ERROR_REASON_UNSPECIFIED},
		{"invalid", fmt.Errorf("%w: x", lvm.ErrInvalid), codes.InvalidArgument, pb.ErrorReason_ERROR_REASON_INVALID},
		{"invalid name", fmt.Errorf("validate: %w", lvm.ErrInvalidName), codes.InvalidArgument, pb.ErrorReason_ERROR_REASON_INVALID},
		{"no space", fmt.Errorf("%w: x", lvm.ErrInsufficientSpace), codes.ResourceExhausted, pb.ErrorReason_ERROR_REASON_INSUFFICIENT_SPACE},
		{"lvm no space", fmt.Errorf("create: %w", lvm.ErrInsufficientSpace), codes.ResourceExhausted, pb.ErrorReason_ERROR_REASON_INSUFFICIENT_SPACE},
		{"conflict", fmt.Errorf("%w: x", lvm.ErrConflict), codes.AlreadyExists, pb.ErrorReason_ERROR_REASON_CONFLICT},
		{"lvm exists", fmt.Errorf("create: %w", lvm.ErrExists), codes.AlreadyExists, pb.ErrorReason_ERROR_REASON_EXISTS},
		{"conflict with an unmanaged LV", fmt.Errorf("%w: %w", lvm.ErrConflict, fmt.Errorf("%w: x", lvm.ErrNotManaged)), codes.AlreadyExists, pb.ErrorReason_ERROR_REASON_CONFLICT},
		{"shrink", fmt.Errorf("%w: x", lvm.ErrShrink), codes.OutOfRange, pb.ErrorReason_ERROR_REASON_SHRINK},
		{"lvm shrink", fmt.Errorf("extend: %w", lvm.ErrShrink), codes.OutOfRange, pb.ErrorReason_ERROR_REASON_SHRINK},
		{"not managed", fmt.Errorf("%w: x", lvm.ErrNotManaged), codes.FailedPrecondition, pb.ErrorReason_ERROR_REASON_NOT_MANAGED},
		{"pool not active", fmt.Errorf("%w: x", lvm.ErrNotActive), codes.FailedPrecondition, pb.ErrorReason_ERROR_REASON_POOL_NOT_ACTIVE},
		{"metadata snapshot held", fmt.Errorf("%w: x", lvm.ErrMetadataSnapHeld), codes.FailedPrecondition, pb.ErrorReason_ERROR_REASON_METADATA_SNAPSHOT_HELD},
		{"VG missing", fmt.Errorf("%w: x", lvm.ErrUnavailable), codes.FailedPrecondition, pb.ErrorReason_ERROR_REASON_DEVICE_CLASS_UNAVAILABLE},
		{"not found", fmt.Errorf("%w: x", lvm.ErrNotFound), codes.NotFound, pb.ErrorReason_ERROR_REASON_NOT_FOUND},
		{"lvm not found", fmt.Errorf("remove: %w", lvm.ErrNotFound), codes.NotFound, pb.ErrorReason_ERROR_REASON_NOT_FOUND},
		{"deadline", fmt.Errorf("lvm: %w", context.DeadlineExceeded), codes.DeadlineExceeded, pb.ErrorReason_ERROR_REASON_UNSPECIFIED},
		{"cancelled", fmt.Errorf("lvm: %w", context.Canceled), codes.Canceled, pb.ErrorReason_ERROR_REASON_UNSPECIFIED},
		{"lvm shell died", fmt.Errorf("create: %w", lvm.ErrOutcomeUnknown), codes.Unavailable, pb.ErrorReason_ERROR_REASON_OUTCOME_UNKNOWN},
		{"lvm failure", fmt.Errorf("create: %w", cmdErr), codes.Internal, pb.ErrorReason_ERROR_REASON_UNSPECIFIED},
		{"plain", errors.New("boom"), codes.Internal, pb.ErrorReason_ERROR_REASON_UNSPECIFIED},
		{"status kept", status.Error(codes.Unavailable, "x"), codes.Unavailable, pb.ErrorReason_ERROR_REASON_UNSPECIFIED},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := toStatus(tt.err)
			if code := status.Code(got); code != tt.want {
				t.Errorf("toStatus(%v) = %v, want %v", tt.err, code, tt.want)
			}
			if reason := pb.ReasonOf(got); reason != tt.reason {
				t.Errorf("toStatus(%v) has reason %v, want %v", tt.err, reason, tt.reason)
			}
			if _, isStatus := status.FromError(tt.err); !isStatus && !strings.Contains(status.Convert(got).Message(), tt.err.Error()) {
				t.Errorf("toStatus(%v) message %q lost the error", tt.err, status.Convert(got).Message())
			}
		})
	}
}

// Every handler error reaches the client as a status with its code, never
// as codes.Unknown.
func TestInterceptorMakesStatus(t *testing.T) {
	e := newEnv(t, testConfig(), testRunner(), envOptions{})
	_, err := e.lv.GetLV(t.Context(), &pb.GetLVRequest{Name: "nosuch"})
	wantCode(t, err, codes.NotFound)
	stream, err := e.vg.Watch(t.Context(), &pb.WatchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	_, err = e.lv.CreateLV(t.Context(), &pb.CreateLVRequest{Name: "a", DeviceClass: "nvme", SizeBytes: gib})
	wantCode(t, err, codes.InvalidArgument)
	if !strings.Contains(status.Convert(err).Message(), `unknown device class "nvme"`) {
		t.Errorf("message %q does not name the device class", status.Convert(err).Message())
	}
	// The reason crosses the wire in the status's details.
	if r := pb.ReasonOf(err); r != pb.ErrorReason_ERROR_REASON_INVALID {
		t.Errorf("reason at the client = %v, want %v", r, pb.ErrorReason_ERROR_REASON_INVALID)
	}
}

// lvNames returns the names of the LVs the fake holds, as vg/name.
func lvNames(f *fake.Runner) []string {
	var out []string
	for _, lv := range f.ListLVs() {
		out = append(out, lv.VG+"/"+lv.Name)
	}
	return out
}

func diffNames(t *testing.T, want []string, f *fake.Runner) {
	t.Helper()
	if diff := cmp.Diff(want, lvNames(f)); diff != "" {
		t.Errorf("LVs in lvm (-want +got):\n%s", diff)
	}
}

// lvmd keeps each pool's errorwhenfull as its class wants: error without
// autoextend, queue while autoextend has VG room to grow into, error again
// once it has none, and the administrator's setting with errorWhenFull: false.
func TestWhenFull(t *testing.T) {
	tests := []struct {
		name   string
		modify func(cfg *config.Config, f *fake.Runner)
		// want is each pool's lv_when_full after Start; calls the lvchange
		// commands Start ran.
		want  map[string]string
		calls [][]string
	}{
		{
			name:   "as wanted already: nothing run",
			modify: func(*config.Config, *fake.Runner) {},
			want:   map[string]string{"pool": "error", "tp": "queue"},
		},
		{
			name: "lvm2's default queue made error; an autoextend pool made queue",
			modify: func(_ *config.Config, f *fake.Runner) {
				f.Pools[0].WhenFull, f.Pools[1].WhenFull = "queue", "error"
			},
			want:  map[string]string{"pool": "error", "tp": "queue"},
			calls: [][]string{{"lvchange", "--errorwhenfull", "y", "vg0/pool"}, {"lvchange", "--errorwhenfull", "n", "vg1/tp"}},
		},
		{
			name:   "autoextend with no room left in the VG: error",
			modify: func(_ *config.Config, f *fake.Runner) { f.VGs[1].Free = 0 },
			want:   map[string]string{"pool": "error", "tp": "error"},
			calls:  [][]string{{"lvchange", "--errorwhenfull", "y", "vg1/tp"}},
		},
		{
			name: "errorWhenFull false: left as the administrator set it",
			modify: func(cfg *config.Config, f *fake.Runner) {
				off := false
				cfg.DeviceClasses[0].ErrorWhenFull = &off
				f.Pools[0].WhenFull = "queue"
			},
			want: map[string]string{"pool": "queue", "tp": "queue"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, f := testConfig(), testRunner()
			tt.modify(cfg, f)
			d := New(cfg, f, nil, Options{}, logr.Discard())
			if err := d.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			var calls [][]string
			for _, c := range f.Calls() {
				if c[0] == "lvchange" {
					calls = append(calls, c)
				}
			}
			if diff := cmp.Diff(tt.calls, calls); diff != "" {
				t.Errorf("lvchange commands (-want +got):\n%s", diff)
			}
			resp, err := d.report(d.store.current(), "")
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, c := range resp.GetDeviceClasses() {
				got[c.GetThinPool()] = c.GetWhenFull()
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("when_full served (-want +got):\n%s", diff)
			}
		})
	}
}

// A failed lvchange is not retried at every refresh.
func TestWhenFullFailureNotRetried(t *testing.T) {
	f := testRunner()
	f.Pools[0].WhenFull = "queue"
	f.FailNext(fake.Failure{Subcommand: "lvchange", Stderr: "  Device or resource busy"})
	d := New(testConfig(), f, nil, Options{}, logr.Discard())
	if err := d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := d.store.refresh(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.Count("lvchange"); n != 1 {
		t.Errorf("%d lvchange commands, want 1: a failed one is not retried", n)
	}
}
