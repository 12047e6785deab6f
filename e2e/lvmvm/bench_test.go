package lvmvm

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	pb "github.com/thinlvm/thinlvm/lvmd/proto"
)

// BenchmarkLVMD measures, in one run on real lvm2 in the VM, for each of
// lvmd's runners (--lvm-runner=exec, one process per command, and shell, one
// long-lived lvm shell):
//
//	(a) lvmd CreateLV, CreateSnapshot and RemoveLV time over the bare lvm
//	    command doing the same work (goal: exec <= 1.1, shell <= 0.6),
//	(b) CreateSnapshot time of a written 4 GiB origin over that of a written
//	    256 MiB origin (goal <= 1.2: O(1) in size; shell runner),
//	(c) lvm commands and processes lvmd starts for 20 creates while 3
//	    watchers and 100 GetCapacity calls run (goal: at most one report per
//	    mutation).
//
// Run it with -benchtime 1x: every figure is a median over its own samples.
func BenchmarkLVMD(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	const class, vg = "bench", "vgbench"
	const samples = 15
	for range b.N {
		w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintf(w, "\n| measure | runner | lvmd | baseline | ratio | goal |\n|---|---|---|---|---|---|\n")
		for _, runner := range []string{"exec", "shell"} {
			// lvmd as deployed: the default idle refresh (30s), not the
			// tests' 2s, whose reports would land in the middle of samples.
			if err := testVM.StopLVMD(ctx, syscall.SIGTERM); err != nil {
				b.Fatal(err)
			}
			if err := testVM.StartLVMD(ctx, lvmdConfig, "--lvm-runner", runner); err != nil {
				b.Fatal(err)
			}
			r := benchRunner(b, ctx, runner, class, vg, samples)
			goal := "<= 1.1"
			if runner == "shell" {
				goal = "<= 0.6"
				b.ReportMetric(r.ratio("create"), "shell-create/bare")
				b.ReportMetric(r.ratio("snapshot"), "shell-snapshot/bare")
				b.ReportMetric(r.ratio("remove"), "shell-remove/bare")
			} else {
				b.ReportMetric(r.ratio("create"), "exec-create/bare")
				b.ReportMetric(r.ratio("snapshot"), "exec-snapshot/bare")
				b.ReportMetric(r.ratio("remove"), "exec-remove/bare")
			}
			for _, op := range []struct{ key, what string }{
				{"create", "CreateLV vs bare lvcreate --thin"},
				{"snapshot", "CreateSnapshot vs bare lvcreate --snapshot"},
				{"remove", "RemoveLV vs bare lvremove"},
			} {
				fmt.Fprintf(w, "| (a) %s (median of %d) | %s | %s | %s | %.2f | %s |\n", op.what, samples, runner,
					median(r.lvmd[op.key]), median(r.bare[op.key]), r.ratio(op.key), goal)
			}
			if runner == "shell" {
				ratioSize := ratio(r.snapLarge, r.snapSmall)
				b.ReportMetric(ratioSize, "snap4G/snap256M")
				fmt.Fprintf(w, "| (b) CreateSnapshot of a written 4 GiB vs 256 MiB origin | %s | %s | %s | %.2f | <= 1.2 |\n",
					runner, median(r.snapLarge), median(r.snapSmall), ratioSize)
			}
			fmt.Fprintf(w, "| (c) for 20 creates, 3 watchers, 100 GetCapacity: lvm commands (processes) | %s | %.0f (%.0f) of which %.0f fullreport | 20 mutations | %.2f reports/mutation | <= 1 |\n",
				runner, r.commands, r.processes, r.reports, r.reports/20)
			fmt.Fprintf(w, "| (c) the 20 creates took | %s | %s | | | |\n", runner, r.burst.Round(time.Millisecond))
			b.ReportMetric(r.reports/20, runner+"-reports/mutation")
		}
		fmt.Fprintf(w, "\nVM boot took %.1fs.\n", testVM.BootSeconds)
		w.Flush()
	}
	// The suite's lvmd again, for anything that runs after.
	if err := testVM.StopLVMD(ctx, syscall.SIGTERM); err != nil {
		b.Fatal(err)
	}
	if err := startLVMD(ctx, "--refresh-interval", "2s"); err != nil {
		b.Fatal(err)
	}
}

// runnerFigures are BenchmarkLVMD's samples for one runner.
type runnerFigures struct {
	lvmd, bare                   map[string][]time.Duration
	snapSmall, snapLarge         []time.Duration
	commands, processes, reports float64
	burst                        time.Duration
}

func (f *runnerFigures) ratio(op string) float64 { return ratio(f.lvmd[op], f.bare[op]) }

// benchRunner measures one runner with lvmd started with it.
func benchRunner(b *testing.B, ctx context.Context, runner, class, vg string, samples int) *runnerFigures {
	f := &runnerFigures{lvmd: map[string][]time.Duration{}, bare: map[string][]time.Duration{}}
	// Each sample starts with lvmd idle (its coalesced refresh done: 200ms
	// debounce and one report), so that both sides measure the command, not
	// a queue.
	idle := func() { time.Sleep(time.Second) }
	timeIt := func(fn func() error) time.Duration {
		start := time.Now()
		if err := fn(); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	bare := func(argv ...string) func() error {
		return func() error { _, err := testVM.Run(ctx, argv...); return err }
	}
	p := runner[:1] + "-" // names of this runner's LVs

	// (a) create, snapshot and remove against the bare commands, interleaved.
	if _, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: p + "origin", DeviceClass: class, SizeBytes: 64 * mib}); err != nil {
		b.Fatal(err)
	}
	for i := range samples {
		idle()
		f.lvmd["create"] = append(f.lvmd["create"], timeIt(func() error {
			_, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: fmt.Sprintf("%slv%d", p, i), DeviceClass: class, SizeBytes: 64 * mib})
			return err
		}))
		idle()
		f.bare["create"] = append(f.bare["create"], timeIt(bare("lvm", "lvcreate", "--yes", "--thin", vg+"/pool", "--virtualsize", "64m",
			"--name", fmt.Sprintf("%sbare%d", p, i), "--addtag", "thinlvm")))
		idle()
		f.lvmd["snapshot"] = append(f.lvmd["snapshot"], timeIt(func() error {
			_, err := lvs.CreateSnapshot(ctx, &pb.CreateSnapshotRequest{Name: fmt.Sprintf("%ssnap%d", p, i), DeviceClass: class, SourceName: p + "origin"})
			return err
		}))
		idle()
		f.bare["snapshot"] = append(f.bare["snapshot"], timeIt(bare("lvm", "lvcreate", "--yes", "--snapshot", vg+"/"+p+"origin", "--name", fmt.Sprintf("%sbaresnap%d", p, i),
			"--setactivationskip", "n", "--activate", "y", "--addtag", "thinlvm")))
	}
	for i := range samples {
		idle()
		f.lvmd["remove"] = append(f.lvmd["remove"], timeIt(func() error {
			_, err := lvs.RemoveLV(ctx, &pb.RemoveLVRequest{Name: fmt.Sprintf("%slv%d", p, i), DeviceClass: class})
			return err
		}))
		idle()
		f.bare["remove"] = append(f.bare["remove"], timeIt(bare("lvm", "lvremove", "--yes", "--force", fmt.Sprintf("%s/%sbare%d", vg, p, i))))
	}

	// (b) snapshot time against origin size, both origins fully written.
	if runner == "shell" {
		origins := []struct {
			name string
			mib  int
		}{{p + "small", 256}, {p + "large", 4096}}
		for _, o := range origins {
			if _, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: o.name, DeviceClass: class, SizeBytes: uint64(o.mib) * mib}); err != nil {
				b.Fatal(err)
			}
			if _, err := testVM.Run(ctx, "dd", "if=/dev/zero", "of=/dev/"+vg+"/"+o.name, "bs=4M", fmt.Sprintf("count=%d", o.mib/4), "oflag=direct", "status=none"); err != nil {
				b.Fatal(err)
			}
		}
		for i := range samples {
			for j, o := range origins {
				idle()
				d := timeIt(func() error {
					_, err := lvs.CreateSnapshot(ctx, &pb.CreateSnapshotRequest{Name: fmt.Sprintf("%s-s%d", o.name, i), DeviceClass: class, SourceName: o.name})
					return err
				})
				if j == 0 {
					f.snapSmall = append(f.snapSmall, d)
				} else {
					f.snapLarge = append(f.snapLarge, d)
				}
			}
		}
	}

	// (c) commands and processes per mutation with watchers and queries
	// running.
	idle()
	before, err := testVM.LVMCommands(ctx)
	if err != nil {
		b.Fatal(err)
	}
	startsBefore := shellStarts(b, ctx)
	wctx, wcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 3 {
		stream, err := vgs.Watch(wctx, &pb.WatchRequest{})
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if _, err := stream.Recv(); err != nil {
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 100 {
			_, _ = vgs.GetCapacity(wctx, &pb.GetCapacityRequest{})
			time.Sleep(50 * time.Millisecond)
		}
	}()
	f.burst = timeIt(func() error {
		for i := range 20 {
			if _, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: fmt.Sprintf("%sburst%d", p, i), DeviceClass: class, SizeBytes: 16 * mib}); err != nil {
				return err
			}
		}
		return nil
	})
	time.Sleep(3 * time.Second) // the last coalesced refresh
	wcancel()
	wg.Wait()
	after, err := testVM.LVMCommands(ctx)
	if err != nil {
		b.Fatal(err)
	}
	for cmd, n := range after {
		f.commands += n - before[cmd]
	}
	f.reports = after["fullreport"] - before["fullreport"]
	f.processes = f.commands
	if runner == "shell" {
		// The shell's commands are lines, not processes; dmsetup and
		// thin_delta (none here) would be processes of their own.
		f.processes = shellStarts(b, ctx) - startsBefore + (after["dmsetup"] - before["dmsetup"]) + (after["thin_delta"] - before["thin_delta"])
	}

	// Clean up (the bare commands' LVs carry lvmd's tag too), so that the
	// next runner and -count N start from the same pool.
	list, err := lvs.ListLVs(ctx, &pb.ListLVsRequest{DeviceClass: class})
	if err != nil {
		b.Fatal(err)
	}
	for _, v := range list.GetVolumes() {
		if _, err := lvs.RemoveLV(ctx, &pb.RemoveLVRequest{Name: v.GetName(), DeviceClass: class}); err != nil {
			b.Fatal(err)
		}
	}
	return f
}

// shellStarts is lvmd's thinlvm_lvmd_lvm_shell_starts_total.
func shellStarts(b *testing.B, ctx context.Context) float64 {
	fams, err := testVM.LVMDMetrics(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var n float64
	if f, ok := fams["thinlvm_lvmd_lvm_shell_starts_total"]; ok {
		for _, m := range f.GetMetric() {
			n += m.GetCounter().GetValue()
		}
	}
	return n
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2].Round(time.Millisecond)
}

func ratio(a, b []time.Duration) float64 {
	return float64(median(a)) / float64(median(b))
}
