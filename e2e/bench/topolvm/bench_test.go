package topolvm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/thinlvm/thinlvm/e2e/lvmvm"
	pb "github.com/thinlvm/thinlvm/lvmd/proto"
	tpb "github.com/topolvm/topolvm/pkg/lvmd/proto"
)

// Guest ports of the benchmark's lvmds (forwarded besides the harness's own).
const (
	execPort         = 7101
	execMetricsPort  = 7102
	shellPort        = 7103
	shellMetricsPort = 7104
	// topoPort is guesthelper's TCP proxy to TopoLVM's lvmd, which serves
	// a unix socket only.
	topoPort = 7105
)

// The same layout on every volume group: one sparse disk each, a thin pool
// of the same size, metadata and chunk size.
const (
	diskSize     = "4G"
	poolSize     = "2G"
	metadataSize = "64M"
	chunkSize    = "64k"
	// overprovisionRatio is the same in both lvmds' device classes.
	overprovisionRatio = 10
	lvSize             = 64 << 20
	samples            = 15
	// idle is the quiet time before every timed call, as in BenchmarkLVMD:
	// the previous call's coalesced refresh (200 ms debounce and one report)
	// is over, so that every side measures its command, not a queue.
	idle = time.Second
)

// op is one operation every contender does the same way.
type op struct {
	name string
	// unit names it in b.ReportMetric units.
	unit string
	// bare is the lvm command line that does the same work.
	bare string
	// goal is the shell runner's goal, its median over bare's; 0 for none.
	goal float64
}

var (
	opCreate   = op{"create thin LV (64 MiB)", "create", "lvcreate --thin --virtualsize 64m", 0.6}
	opSnapshot = op{"thin snapshot", "snapshot", "lvcreate --snapshot -kn -ay", 0.6}
	opRemove   = op{"remove LV", "remove", "lvremove --yes --force", 0.6}
	opCapacity = op{"capacity read, 3 Watch streams open", "capacity", "lvs <vg>/pool (size, data%, metadata%)", 0}
	ops        = []op{opCreate, opSnapshot, opRemove, opCapacity}
)

// contender is one side of the comparison: an lvmd (or the bare commands)
// on its own volume group.
type contender struct {
	name     string
	vg       string
	create   func(ctx context.Context, name string) error
	snapshot func(ctx context.Context, name, source string) error
	remove   func(ctx context.Context, name string) error
	capacity func(ctx context.Context) error
	// watch opens one watch stream and returns once its first message came.
	watch func(ctx context.Context) (next func() error, err error)
	// started is the cumulative count of processes the contender started,
	// from the source this contender is counted by (how is its name);
	// recs are the process accounting records so far.
	started func(ctx context.Context, recs []acctRecord) (float64, error)
	how     string
	// exited counts, from process accounting, the contender's lvm (or
	// tool) processes that exited: the same figure as started for the
	// contenders that start a process per command.
	exited func(recs []acctRecord) float64

	times map[string][]time.Duration
	// procs and exits are per-sample counts: from one read before a call
	// to the next read before the contender's next call, so that a
	// refresh that follows a call counts with it.
	procs, exits           map[string][]float64
	pending                string
	lastStarted, lastExits float64
}

// mark closes the counting window of the previous call (if any) and opens
// one for next ("" for none).
func (c *contender) mark(ctx context.Context, recs []acctRecord, next string) error {
	s, err := c.started(ctx, recs)
	if err != nil {
		return fmt.Errorf("%s: count processes: %w", c.name, err)
	}
	e := c.exited(recs)
	if c.pending != "" {
		c.procs[c.pending] = append(c.procs[c.pending], s-c.lastStarted)
		c.exits[c.pending] = append(c.exits[c.pending], e-c.lastExits)
	}
	c.lastStarted, c.lastExits, c.pending = s, e, next
	return nil
}

// BenchmarkLVMDBesideTopoLVM measures, in one VM boot on real lvm2, thinlvm's
// lvmd with each lvm runner (exec: a process per command; shell: one
// persistent `lvm` shell), TopoLVM's lvmd v0.41.0 and the bare lvm commands,
// each on its own volume group of the same layout: create, thin snapshot,
// remove, and a capacity read while three Watch streams are open. Calls
// are interleaved round-robin (the order rotating each sample), each after
// a second of quiet. It reports every median, its ratio to the bare
// command's, and the processes each side starts per call.
//
// Run it with -benchtime 1x: every figure is a median over its own samples.
func BenchmarkLVMDBesideTopoLVM(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 35*time.Minute)
	defer cancel()

	here, err := os.Getwd()
	if err != nil {
		b.Fatal(err)
	}
	bin := b.TempDir()
	buildGuestBinaries(ctx, b, here, bin)
	// lvmvm.Start builds the thinlvm binaries with `go build ./cmd/...` in
	// the module that `go env GOMOD` names: run it from thinlvm's root.
	b.Chdir(goList(ctx, b, here, "github.com/thinlvm/thinlvm"))

	vm, err := lvmvm.Start(ctx, lvmvm.Options{
		Disks:      []string{diskSize, diskSize, diskSize, diskSize},
		GuestPorts: []int{execPort, execMetricsPort, shellPort, shellMetricsPort, topoPort},
		Log:        os.Stderr,
	})
	if err != nil {
		b.Fatalf("boot the real-LVM VM: %v", err)
	}
	defer vm.Stop()
	for _, f := range []string{"topolvm-lvmd", "guesthelper"} {
		if err := copyFile(filepath.Join(bin, f), filepath.Join(vm.ShareDir(), "bin", f)); err != nil {
			b.Fatal(err)
		}
	}
	const acctFile = "/tmp/bench.acct"
	if _, err := vm.Run(ctx, "/share/bin/guesthelper", "acct", acctFile); err != nil {
		b.Fatal(err)
	}
	readAcct := func() []acctRecord {
		out, err := vm.Run(ctx, "cat", acctFile)
		if err != nil {
			b.Fatal(err)
		}
		recs, err := parseAcct([]byte(out))
		if err != nil {
			b.Fatal(err)
		}
		return recs
	}
	out, err := vm.Run(ctx, "pidof", "guestagent")
	if err != nil {
		b.Fatal(err)
	}
	agentPID, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		b.Fatalf("guest agent pid %q: %v", out, err)
	}

	vgs := map[string]string{"exec": "vgexec", "shell": "vgshell", "topolvm": "vgtopo", "bare": "vgbare"}
	for i, vg := range []string{"vgexec", "vgshell", "vgtopo", "vgbare"} {
		disk := fmt.Sprintf("/dev/vd%c", 'a'+i)
		for _, argv := range [][]string{
			{"lvm", "pvcreate", "--yes", disk},
			{"lvm", "vgcreate", vg, disk},
			{"lvm", "lvcreate", "--yes", "--type", "thin-pool", "--size", poolSize, "--poolmetadatasize", metadataSize,
				"--chunksize", chunkSize, "--name", "pool", vg},
		} {
			if _, err := vm.Run(ctx, argv...); err != nil {
				b.Fatal(err)
			}
		}
	}

	execC, execConn := startThinLVMD(ctx, b, vm, "exec", vgs["exec"], execPort, execMetricsPort)
	defer execConn.Close()
	shellC, shellConn := startThinLVMD(ctx, b, vm, "shell", vgs["shell"], shellPort, shellMetricsPort)
	defer shellConn.Close()
	topoC, topoConn := startTopoLVM(ctx, b, vm, vgs["topolvm"])
	defer topoConn.Close()
	bareC := bareContender(vm, vgs["bare"], agentPID)
	contenders := []*contender{execC, shellC, topoC, bareC}
	for _, c := range contenders {
		c.times, c.procs, c.exits = map[string][]time.Duration{}, map[string][]float64{}, map[string][]float64{}
	}

	for iter := range b.N {
		for _, c := range contenders {
			if err := c.create(ctx, fmt.Sprintf("i%d-origin", iter)); err != nil {
				b.Fatal(err)
			}
		}
		// step runs one timed call of c after the quiet time, its counting
		// window opening just before.
		step := func(c *contender, o op, call func() error) {
			if err := c.mark(ctx, readAcct(), o.name); err != nil {
				b.Fatal(err)
			}
			time.Sleep(idle)
			start := time.Now()
			if err := call(); err != nil {
				b.Fatalf("%s: %s: %v", c.name, o.name, err)
			}
			c.times[o.name] = append(c.times[o.name], time.Since(start))
		}
		closeWindows := func() {
			time.Sleep(idle)
			recs := readAcct()
			for _, c := range contenders {
				if err := c.mark(ctx, recs, ""); err != nil {
					b.Fatal(err)
				}
			}
		}

		// Mutations, no watcher open.
		closeWindows()
		for i := range samples {
			lv, snap := fmt.Sprintf("i%d-lv%d", iter, i), fmt.Sprintf("i%d-snap%d", iter, i)
			for _, c := range rotate(contenders, i) {
				step(c, opCreate, func() error { return c.create(ctx, lv) })
			}
			for _, c := range rotate(contenders, i) {
				step(c, opSnapshot, func() error { return c.snapshot(ctx, snap, fmt.Sprintf("i%d-origin", iter)) })
			}
			for _, c := range rotate(contenders, i) {
				step(c, opRemove, func() error { return c.remove(ctx, lv) })
			}
		}
		closeWindows()

		// Capacity reads with three watchers on every lvmd.
		wctx, wcancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for _, c := range contenders {
			if c.watch == nil {
				continue
			}
			for range 3 {
				next, err := c.watch(wctx)
				if err != nil {
					b.Fatalf("%s: watch: %v", c.name, err)
				}
				wg.Go(func() {
					for {
						if next() != nil {
							return // canceled at the end
						}
					}
				})
			}
		}
		closeWindows()
		for i := range samples {
			for _, c := range rotate(contenders, i) {
				step(c, opCapacity, func() error { return c.capacity(ctx) })
			}
		}
		closeWindows()
		wcancel()
		wg.Wait()
	}

	// The transport: TopoLVM's lvmd is reached through guesthelper's proxy,
	// thinlvm's directly; a health check (no lvm) on each shows the hop.
	var hcDirect, hcProxy []time.Duration
	for range samples {
		for _, hc := range []struct {
			conn *grpc.ClientConn
			d    *[]time.Duration
		}{{execConn, &hcDirect}, {topoConn, &hcProxy}} {
			start := time.Now()
			if _, err := healthpb.NewHealthClient(hc.conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
				b.Fatal(err)
			}
			*hc.d = append(*hc.d, time.Since(start))
		}
	}

	report(b, contenders, vm.BootSeconds, median(hcDirect), median(hcProxy))
}

func report(b *testing.B, contenders []*contender, bootSeconds float64, hcDirect, hcProxy time.Duration) {
	bare := contenders[len(contenders)-1]
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n| operation | contender | median | ratio to bare | processes per call: median (mean) | goal |\n|---|---|---|---|---|---|\n")
	for _, o := range ops {
		for _, c := range contenders {
			r := ratio(c.times[o.name], bare.times[o.name])
			goal := ""
			if c.name == "thinlvm shell runner" && o.goal > 0 {
				verdict := "met"
				if r > o.goal {
					verdict = "NOT met"
				}
				goal = fmt.Sprintf("<= %.1fx (%s)", o.goal, verdict)
			}
			name := c.name
			if c == bare {
				name = "bare `lvm " + o.bare + "`"
			}
			fmt.Fprintf(&sb, "| %s | %s | %s | %.2fx | %s (%s) | %s |\n", o.name, name, median(c.times[o.name]), r,
				fmtCount(medianF(c.procs[o.name])), fmtCount(mean(c.procs[o.name])), goal)
		}
	}
	fmt.Fprintf(&sb, "\nProcesses counted: ")
	for i, c := range contenders {
		if i > 0 {
			sb.WriteString("; ")
		}
		fmt.Fprintf(&sb, "%s by %s", c.name, c.how)
	}
	fmt.Fprintf(&sb, ".\nProcess accounting (processes that exited, children of each side), mean per call:")
	for _, o := range ops {
		fmt.Fprintf(&sb, "\n  %s:", o.name)
		for _, c := range contenders {
			fmt.Fprintf(&sb, " %s %s;", c.name, fmtCount(mean(c.exits[o.name])))
		}
	}
	fmt.Fprintf(&sb, "\n%d samples per operation and contender, each after %s of quiet, round-robin; VM boot %.1fs.\n", samples, idle, bootSeconds)
	fmt.Fprintf(&sb, "gRPC health check, median: thinlvm lvmd direct %s, TopoLVM's lvmd through the guest proxy %s.\n", hcDirect, hcProxy)
	fmt.Fprint(os.Stdout, sb.String())

	// The counts must agree where both count the same processes.
	for _, c := range contenders {
		var started, exited float64
		for _, o := range ops {
			started += sum(c.procs[o.name])
			exited += sum(c.exits[o.name])
		}
		switch c.name {
		case "thinlvm shell runner":
			// A shell exits only when it is replaced: never more exits than starts.
			if exited > started {
				b.Errorf("%s: %v processes exited but its metrics count %v started", c.name, exited, started)
			}
		default:
			if exited != started {
				b.Errorf("%s: process accounting counts %v processes, %s %v", c.name, exited, c.how, started)
			}
		}
	}
	for _, o := range ops {
		for _, n := range bare.procs[o.name] {
			if n != 1 {
				b.Errorf("bare %s: %v lvm processes in one sample, want 1: the counting is off", o.name, n)
			}
		}
	}

	shell := contenders[1]
	for _, o := range ops {
		b.ReportMetric(ratio(shell.times[o.name], bare.times[o.name]), "shell-"+o.unit+"/bare")
	}
}

// startThinLVMD starts a thinlvm lvmd with the given lvm runner on vg.
func startThinLVMD(ctx context.Context, b *testing.B, vm *lvmvm.VM, runner, vg string, port, metricsPort int) (*contender, *grpc.ClientConn) {
	class := "bench"
	cfg := fmt.Sprintf("deviceClasses:\n- name: %s\n  volumeGroup: %s\n  thinPool: pool\n  overprovisionRatio: %d\n  default: true\n",
		class, vg, overprovisionRatio)
	// The deployed defaults otherwise: 30 s idle refresh, -v 0.
	in, err := vm.StartLVMDInstance(ctx, "lvmd-"+runner, port, metricsPort, cfg, "--lvm-runner="+runner)
	if err != nil {
		b.Fatal(err)
	}
	conn, err := in.Dial()
	if err != nil {
		b.Fatal(err)
	}
	lvs, vgs := pb.NewLVServiceClient(conn), pb.NewVGServiceClient(conn)
	c := &contender{
		name: "thinlvm " + runner + " runner",
		vg:   vg,
		create: func(ctx context.Context, name string) error {
			_, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: name, DeviceClass: class, SizeBytes: lvSize})
			return err
		},
		snapshot: func(ctx context.Context, name, source string) error {
			_, err := lvs.CreateSnapshot(ctx, &pb.CreateSnapshotRequest{Name: name, DeviceClass: class, SourceName: source})
			return err
		},
		remove: func(ctx context.Context, name string) error {
			_, err := lvs.RemoveLV(ctx, &pb.RemoveLVRequest{Name: name, DeviceClass: class})
			return err
		},
		capacity: func(ctx context.Context) error {
			_, err := vgs.GetCapacity(ctx, &pb.GetCapacityRequest{DeviceClass: class})
			return err
		},
		watch: func(ctx context.Context) (func() error, error) {
			s, err := vgs.Watch(ctx, &pb.WatchRequest{})
			if err != nil {
				return nil, err
			}
			if _, err := s.Recv(); err != nil {
				return nil, err
			}
			return func() error { _, err := s.Recv(); return err }, nil
		},
		exited: func(recs []acctRecord) float64 { return children(recs, in.PID, "") },
	}
	// Each lvm command of the exec runner is a process, and so is every
	// dmsetup or thin_delta of either runner; the shell runner's lvm
	// commands run in shells it starts (and counts).
	commands := func(ctx context.Context, only ...string) (float64, error) {
		fams, err := in.Metrics(ctx)
		if err != nil {
			return 0, err
		}
		var n float64
		for _, m := range fams["thinlvm_lvmd_lvm_commands_total"].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "command" && (len(only) == 0 || slices.Contains(only, l.GetValue())) {
					n += m.GetCounter().GetValue()
				}
			}
		}
		if len(only) > 0 {
			f, ok := fams["thinlvm_lvmd_lvm_shell_starts_total"]
			if !ok {
				return 0, errors.New("no metric thinlvm_lvmd_lvm_shell_starts_total")
			}
			for _, m := range f.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
		return n, nil
	}
	switch runner {
	case "exec":
		c.how = "its metrics (thinlvm_lvmd_lvm_commands_total: one process each)"
		c.started = func(ctx context.Context, _ []acctRecord) (float64, error) { return commands(ctx) }
	case "shell":
		c.how = "its metrics (thinlvm_lvmd_lvm_shell_starts_total plus the dmsetup and thin_delta commands of thinlvm_lvmd_lvm_commands_total)"
		c.started = func(ctx context.Context, _ []acctRecord) (float64, error) {
			return commands(ctx, "dmsetup", "thin_delta")
		}
	default:
		b.Fatalf("unknown lvm runner %q", runner)
	}
	return c, conn
}

// startTopoLVM starts TopoLVM's lvmd on vg, running the guest's lvm
// directly (its default prefix nsenters PID 1's namespaces to run the
// host's /sbin/lvm from a container), behind guesthelper's TCP proxy.
func startTopoLVM(ctx context.Context, b *testing.B, vm *lvmvm.VM, vg string) (*contender, *grpc.ClientConn) {
	const class, socket = "bench", "/run/topolvm-lvmd.sock"
	// spare-gb 0: TopoLVM keeps 10 GiB aside by default.
	cfg := fmt.Sprintf(`socket-name: %s
lvm-command-prefix: ["/usr/sbin/lvm"]
device-classes:
- name: %s
  volume-group: %s
  default: true
  spare-gb: 0
  type: thin
  thin-pool:
    name: pool
    overprovision-ratio: %d
`, socket, class, vg, overprovisionRatio)
	if err := os.WriteFile(filepath.Join(vm.ShareDir(), "topolvm-lvmd.yaml"), []byte(cfg), 0o644); err != nil {
		b.Fatal(err)
	}
	logf := func() string {
		l, _ := os.ReadFile(filepath.Join(vm.ShareDir(), "topolvm-lvmd.log"))
		p, _ := os.ReadFile(filepath.Join(vm.ShareDir(), "topolvm-proxy.log"))
		return string(l) + "\n--- proxy ---\n" + string(p)
	}
	// Its defaults otherwise (zap's info level), metrics off.
	pid, err := vm.SpawnPID(ctx, "topolvm-lvmd", "/share/topolvm-lvmd.log",
		"/share/bin/topolvm-lvmd", "--config", "/share/topolvm-lvmd.yaml", "--metrics-bind-address=")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := vm.SpawnPID(ctx, "topolvm-proxy", "/share/topolvm-proxy.log",
		"/share/bin/guesthelper", "proxy", "-listen", fmt.Sprintf(":%d", topoPort), "-socket", socket); err != nil {
		b.Fatal(err)
	}
	if err := vm.WaitServing(ctx, topoPort, logf); err != nil {
		b.Fatalf("TopoLVM's lvmd: %v", err)
	}
	conn, err := vm.DialGuest(topoPort)
	if err != nil {
		b.Fatal(err)
	}
	lvs, vgs := tpb.NewLVServiceClient(conn), tpb.NewVGServiceClient(conn)
	return &contender{
		name: "TopoLVM lvmd",
		vg:   vg,
		create: func(ctx context.Context, name string) error {
			_, err := lvs.CreateLV(ctx, &tpb.CreateLVRequest{Name: name, DeviceClass: class, SizeBytes: lvSize})
			return err
		},
		// As topolvm-node asks: read-write, the source's size.
		snapshot: func(ctx context.Context, name, source string) error {
			_, err := lvs.CreateLVSnapshot(ctx, &tpb.CreateLVSnapshotRequest{Name: name, DeviceClass: class, SourceVolume: source,
				AccessType: "rw", SizeBytes: lvSize})
			return err
		},
		remove: func(ctx context.Context, name string) error {
			_, err := lvs.RemoveLV(ctx, &tpb.RemoveLVRequest{Name: name, DeviceClass: class})
			return err
		},
		capacity: func(ctx context.Context) error {
			_, err := vgs.GetFreeBytes(ctx, &tpb.GetFreeBytesRequest{DeviceClass: class})
			return err
		},
		watch: func(ctx context.Context) (func() error, error) {
			s, err := vgs.Watch(ctx, &tpb.Empty{})
			if err != nil {
				return nil, err
			}
			if _, err := s.Recv(); err != nil {
				return nil, err
			}
			return func() error { _, err := s.Recv(); return err }, nil
		},
		how:     "process accounting (its lvm children that exited)",
		started: func(_ context.Context, recs []acctRecord) (float64, error) { return children(recs, pid, ""), nil },
		exited:  func(recs []acctRecord) float64 { return children(recs, pid, "") },
	}, conn
}

// bareContender runs the lvm commands through the guest agent.
func bareContender(vm *lvmvm.VM, vg string, agentPID int) *contender {
	run := func(ctx context.Context, argv ...string) error { _, err := vm.Run(ctx, argv...); return err }
	count := func(recs []acctRecord) float64 { return children(recs, agentPID, "lvm") }
	return &contender{
		name: "bare lvm",
		vg:   vg,
		create: func(ctx context.Context, name string) error {
			return run(ctx, "lvm", "lvcreate", "--yes", "--thin", vg+"/pool", "--virtualsize", "64m", "--name", name, "--addtag", "thinlvm")
		},
		snapshot: func(ctx context.Context, name, source string) error {
			return run(ctx, "lvm", "lvcreate", "--yes", "--snapshot", vg+"/"+source, "--name", name,
				"--setactivationskip", "n", "--activate", "y", "--addtag", "thinlvm")
		},
		remove: func(ctx context.Context, name string) error {
			return run(ctx, "lvm", "lvremove", "--yes", "--force", vg+"/"+name)
		},
		capacity: func(ctx context.Context) error {
			return run(ctx, "lvm", "lvs", "--reportformat", "json", "--units", "b", "--nosuffix",
				"-o", "lv_size,data_percent,metadata_percent", vg+"/pool")
		},
		how:     "process accounting (the agent's lvm children)",
		started: func(_ context.Context, recs []acctRecord) (float64, error) { return count(recs), nil },
		exited:  count,
	}
}

// buildGuestBinaries builds TopoLVM's lvmd, in TopoLVM's own module (the
// version this module requires, with the dependency versions of its
// release), and guesthelper, statically into dir.
func buildGuestBinaries(ctx context.Context, b *testing.B, here, dir string) {
	topoDir := goList(ctx, b, here, "github.com/topolvm/topolvm")
	for _, bld := range []struct{ dir, pkg, out string }{
		{topoDir, "./cmd/lvmd", "topolvm-lvmd"},
		{here, "./guesthelper", "guesthelper"},
	} {
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", filepath.Join(dir, bld.out), bld.pkg)
		cmd.Dir = bld.dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("build %s in %s: %v\n%s", bld.pkg, bld.dir, err, out)
		}
	}
}

// goList returns the directory of module mod as the module in dir sees it.
func goList(ctx context.Context, b *testing.B, dir, mod string) string {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", mod)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("go list -m %s: %v", mod, err)
	}
	d := strings.TrimSpace(string(out))
	if d == "" {
		b.Fatalf("module %s has no directory: run 'go mod download' in %s", mod, dir)
	}
	return d
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// rotate returns s starting at its i-th element (mod len), so that no
// contender always goes first.
func rotate[T any](s []T, i int) []T {
	i %= len(s)
	return append(slices.Clone(s[i:]), s[:i]...)
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2].Round(time.Millisecond)
}

func ratio(a, b []time.Duration) float64 { return float64(median(a)) / float64(median(b)) }

func medianF(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func mean(v []float64) float64 { return sum(v) / float64(len(v)) }

func sum(v []float64) float64 {
	var n float64
	for _, x := range v {
		n += x
	}
	return n
}

// fmtCount prints a count with at most two decimals and no trailing zeros.
func fmtCount(v float64) string {
	s := strconv.FormatFloat(v, 'f', 2, 64)
	return strings.TrimSuffix(strings.TrimRight(s, "0"), ".")
}
