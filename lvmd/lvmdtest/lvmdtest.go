// Package lvmdtest runs the real lvmd in memory for other packages' tests:
// lvmd's gRPC services (lvmd/server) on the simulated lvm (lvmd/lvm/fake),
// reached over an in-process connection. A test meets lvmd's own rules,
// codes and capacity arithmetic, and can still make calls fail, hold them
// and count them, at the client's side of the connection.
package lvmdtest

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"os"
	"path"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/thinlvm/thinlvm/lvmd/config"
	"github.com/thinlvm/thinlvm/lvmd/lvm/fake"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
	"github.com/thinlvm/thinlvm/lvmd/server"
)

const gib = uint64(1) << 30

// Options configure Start. The zero value is one device class, "ssd", the
// default, on thin pool vg0/pool0 of 100 GiB.
type Options struct {
	// Config is lvmd's configuration; nil for the one class above.
	Config *config.Config
	// Runner is the simulated lvm; nil for one holding the VG and pool of
	// the default Config. Its DevDir is set to DevDir.
	Runner *fake.Runner
	// DevDir, when set, backs every LV by a file there (fake.Runner.DevDir),
	// which lvmd reports as the LV's device path.
	DevDir string
	// RefreshInterval is how often lvmd re-reads lvm when nothing changed
	// through it; 0 for the package's RefreshInterval.
	RefreshInterval time.Duration
	// BufferSize is the in-process connection's buffer each way; 0 for
	// 1 MiB. Thousands of lvmds in one process want less.
	BufferSize int
}

// LVMD is a running lvmd and a client of it; its client methods go through
// SetFail, Hold and Calls. The node agent's lvmd.Client is satisfied by it.
type LVMD struct {
	pb.LVServiceClient
	pb.VGServiceClient
	// LVM is the simulated lvm under lvmd: a test changes the pools' use
	// there, and lvmd sees it at its next refresh (RefreshInterval).
	LVM *fake.Runner

	// inspect and inspectVG are not counted and never failed.
	inspect   pb.LVServiceClient
	inspectVG pb.VGServiceClient

	mu      sync.Mutex
	fail    map[string]error
	gate    chan struct{}
	calls   []string
	streams map[*watchStream]struct{}
}

// RefreshInterval is how often the test lvmd re-reads lvm when nothing
// changed there through it.
const RefreshInterval = 20 * time.Millisecond

// Start runs lvmd until the test ends.
func Start(t testing.TB, o Options) *LVMD {
	t.Helper()
	l, stop, err := Run(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return l
}

// Run runs lvmd until stop is called: for a TestMain, which has no
// testing.TB; a test calls Start.
func Run(o Options) (l *LVMD, stop func(), err error) {
	cfg := o.Config
	if cfg == nil {
		cfg = &config.Config{DeviceClasses: []config.DeviceClass{{Name: "ssd", VolumeGroup: "vg0", ThinPool: "pool0", Default: true}}}
		cfg.Default()
	}
	if err := cfg.Validate(); err != nil {
		return nil, nil, fmt.Errorf("lvmd test config: %w", err)
	}
	r := o.Runner
	if r == nil {
		r = &fake.Runner{
			VGs:   []fake.VG{{Name: "vg0", UUID: "vg0-uuid", Size: 104 * gib, Free: 4 * gib}},
			Pools: []fake.Pool{{VG: "vg0", Name: "pool0", UUID: "pool0-uuid", Size: 100 * gib}},
		}
	}
	r.DevDir = o.DevDir
	d := server.New(cfg, r, server.NewMetrics(prometheus.NewRegistry()),
		server.Options{CommandTimeout: 20 * time.Second, RefreshInterval: cmp.Or(o.RefreshInterval, RefreshInterval), DevDir: o.DevDir}, logr.Discard())
	var stops []func()
	stop = func() {
		for _, f := range slices.Backward(stops) {
			f()
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	stops = append(stops, cancel)
	if err := d.Start(ctx); err != nil {
		stop()
		return nil, nil, fmt.Errorf("start lvmd: %w", err)
	}
	lis := bufconn.Listen(cmp.Or(o.BufferSize, 1<<20))
	s := grpc.NewServer(grpc.UnaryInterceptor(d.UnaryInterceptor), grpc.StreamInterceptor(d.StreamInterceptor))
	d.Register(s)
	go func() { _ = s.Serve(lis) }()
	stops = append(stops, s.Stop)

	l = &LVMD{LVM: r, fail: map[string]error{}, streams: map[*watchStream]struct{}{}}
	dial := func(opts ...grpc.DialOption) (*grpc.ClientConn, error) {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
		conn, err := grpc.NewClient("passthrough:///lvmd", opts...)
		if err != nil {
			return nil, fmt.Errorf("connect to lvmd: %w", err)
		}
		stops = append(stops, func() { _ = conn.Close() })
		return conn, nil
	}
	conn, err := dial(grpc.WithUnaryInterceptor(l.unary), grpc.WithStreamInterceptor(l.stream))
	if err != nil {
		stop()
		return nil, nil, err
	}
	direct, err := dial()
	if err != nil {
		stop()
		return nil, nil, err
	}
	l.LVServiceClient, l.VGServiceClient = pb.NewLVServiceClient(conn), pb.NewVGServiceClient(conn)
	l.inspect, l.inspectVG = pb.NewLVServiceClient(direct), pb.NewVGServiceClient(direct)
	return l, stop, nil
}

// SetPoolUsage sets the data and metadata use of a thin pool in the
// simulated lvm and waits until lvmd's report shows it.
func (l *LVMD) SetPoolUsage(t testing.TB, vg, pool string, data, metadata float64) {
	t.Helper()
	l.LVM.SetPoolUsage(vg, pool, data, metadata)
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := l.inspectVG.GetCapacity(context.Background(), &pb.GetCapacityRequest{})
		if err != nil {
			t.Fatalf("lvmd capacity: %v", err)
		}
		for _, c := range resp.GetDeviceClasses() {
			if c.GetVolumeGroup() == vg && c.GetThinPool() == pool && c.GetDataPercent() == data && c.GetMetadataPercent() == metadata {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("lvmd's report never showed pool %s/%s at %.2f%% data, %.2f%% metadata", vg, pool, data, metadata)
		}
		time.Sleep(RefreshInterval)
	}
}

// SetFail makes calls of method (e.g. "CreateLV") fail with err before
// they reach lvmd; nil lets them through again. Failing "Watch" also breaks
// the watches open now, as an lvmd restart does.
func (l *LVMD) SetFail(method string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fail[method] = err
	if method == "Watch" && err != nil {
		for s := range l.streams {
			s.breakWith(err)
		}
	}
}

// Hold makes CreateLV and CreateSnapshot wait before they reach lvmd, until
// release is called (or their context ends): a test acts in the middle of a
// create.
func (l *LVMD) Hold() (release func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	gate := make(chan struct{})
	l.gate = gate
	var once sync.Once
	return func() { once.Do(func() { close(gate) }) }
}

// Calls returns the methods called through the client, in order.
func (l *LVMD) Calls() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

// Count returns how often method was called through the client.
func (l *LVMD) Count(method string) int {
	n := 0
	for _, c := range l.Calls() {
		if c == method {
			n++
		}
	}
	return n
}

// LV returns lvmd's view of the LV named name, in any device class. It is
// not counted in Calls.
func (l *LVMD) LV(t testing.TB, name string) (*pb.LogicalVolume, bool) {
	t.Helper()
	for _, lv := range l.LVs(t) {
		if lv.GetName() == name {
			return lv, true
		}
	}
	return nil, false
}

// Data returns the bytes of the LV named name: its backing file, with
// Options.DevDir. It is not counted in Calls.
func (l *LVMD) Data(t testing.TB, name string) []byte {
	t.Helper()
	lv, ok := l.LV(t, name)
	if !ok {
		t.Fatalf("lvmd has no LV %s", name)
	}
	b, err := os.ReadFile(lv.GetDevicePath())
	if err != nil {
		t.Fatalf("read LV %s: %v", name, err)
	}
	return b
}

// LVs returns lvmd's view of all its LVs, by name. It is not counted in
// Calls.
func (l *LVMD) LVs(t testing.TB) []*pb.LogicalVolume {
	t.Helper()
	resp, err := l.inspect.ListLVs(context.Background(), &pb.ListLVsRequest{})
	if err != nil {
		t.Fatalf("list lvmd's LVs: %v", err)
	}
	return resp.GetVolumes()
}

// LVNames returns the names of lvmd's LVs, sorted.
func (l *LVMD) LVNames(t testing.TB) []string {
	t.Helper()
	var names []string
	for _, lv := range l.LVs(t) {
		names = append(names, lv.GetName())
	}
	slices.Sort(names)
	return names
}

// begin records a call and returns the failure set for it, after waiting
// at the gate for a create.
func (l *LVMD) begin(ctx context.Context, fullMethod string) error {
	method := path.Base(fullMethod)
	l.mu.Lock()
	l.calls = append(l.calls, method)
	err, gate := l.fail[method], l.gate
	l.mu.Unlock()
	if err != nil {
		return err
	}
	if gate != nil && (method == "CreateLV" || method == "CreateSnapshot") {
		select {
		case <-gate:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
	return nil
}

func (l *LVMD) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if err := l.begin(ctx, method); err != nil {
		return err
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (l *LVMD) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if err := l.begin(ctx, method); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		cancel()
		return nil, err
	}
	s := &watchStream{ClientStream: cs, cancel: cancel}
	l.mu.Lock()
	l.streams[s] = struct{}{}
	l.mu.Unlock()
	context.AfterFunc(ctx, func() {
		l.mu.Lock()
		delete(l.streams, s)
		l.mu.Unlock()
	})
	return s, nil
}

// watchStream is a client stream a test can break.
type watchStream struct {
	grpc.ClientStream
	cancel context.CancelFunc

	mu     sync.Mutex
	broken error
}

func (s *watchStream) breakWith(err error) {
	s.mu.Lock()
	s.broken = err
	s.mu.Unlock()
	s.cancel()
}

func (s *watchStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken != nil {
		return s.broken
	}
	return err
}
