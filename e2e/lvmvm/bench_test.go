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

// BenchmarkLVMD measures, in one run on real lvm2 in the VM:
//
//	(a) lvmd CreateLV and CreateSnapshot time over the bare lvcreate doing
//	    the same work (goal <= 1.1),
//	(b) CreateSnapshot time of a written 4 GiB origin over that of a written
//	    256 MiB origin (goal <= 1.2: O(1) in size),
//	(c) lvm processes lvmd starts for 20 creates while 3 watchers and 100
//	    GetCapacity calls run (goal: at most one report per mutation).
//
// Run it with -benchtime 1x: every figure is a median over its own samples.
func BenchmarkLVMD(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	const class, vg = "bench", "vgbench"
	const samples = 15
	// lvmd as deployed: the default idle refresh (30s), not the tests' 2s,
	// whose reports would land in the middle of samples.
	if err := testVM.StopLVMD(ctx, syscall.SIGTERM); err != nil {
		b.Fatal(err)
	}
	if err := testVM.StartLVMD(ctx, lvmdConfig); err != nil {
		b.Fatal(err)
	}
	for range b.N {
		// Each sample starts with lvmd idle (its coalesced refresh done:
		// 200ms debounce and one report), so that both sides measure the
		// command, not a queue.
		idle := func() { time.Sleep(time.Second) }
		timeIt := func(f func() error) time.Duration {
			start := time.Now()
			if err := f(); err != nil {
				b.Fatal(err)
			}
			return time.Since(start)
		}
		bare := func(argv ...string) func() error {
			return func() error { _, err := testVM.Run(ctx, argv...); return err }
		}

		// (a) create and snapshot against the bare commands.
		if _, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: "b-origin", DeviceClass: class, SizeBytes: 64 * mib}); err != nil {
			b.Fatal(err)
		}
		var lvmdCreate, bareCreate, lvmdSnap, bareSnap []time.Duration
		for i := range samples {
			idle()
			lvmdCreate = append(lvmdCreate, timeIt(func() error {
				_, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: fmt.Sprintf("b-lv%d", i), DeviceClass: class, SizeBytes: 64 * mib})
				return err
			}))
			idle()
			bareCreate = append(bareCreate, timeIt(bare("lvm", "lvcreate", "--yes", "--thin", vg+"/pool", "--virtualsize", "64m",
				"--name", fmt.Sprintf("b-bare%d", i), "--addtag", "thinlvm")))
			idle()
			lvmdSnap = append(lvmdSnap, timeIt(func() error {
				_, err := lvs.CreateSnapshot(ctx, &pb.CreateSnapshotRequest{Name: fmt.Sprintf("b-snap%d", i), DeviceClass: class, SourceName: "b-origin"})
				return err
			}))
			idle()
			bareSnap = append(bareSnap, timeIt(bare("lvm", "lvcreate", "--yes", "--snapshot", vg+"/b-origin", "--name", fmt.Sprintf("b-baresnap%d", i),
				"--setactivationskip", "n", "--activate", "y", "--addtag", "thinlvm")))
		}

		// (b) snapshot time against origin size, both origins fully written.
		origins := []struct {
			name string
			mib  int
		}{{"b-small", 256}, {"b-large", 4096}}
		snapTimes := map[string][]time.Duration{}
		for _, o := range origins {
			if _, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: o.name, DeviceClass: class, SizeBytes: uint64(o.mib) * mib}); err != nil {
				b.Fatal(err)
			}
			if _, err := testVM.Run(ctx, "dd", "if=/dev/zero", "of=/dev/"+vg+"/"+o.name, "bs=4M", fmt.Sprintf("count=%d", o.mib/4), "oflag=direct", "status=none"); err != nil {
				b.Fatal(err)
			}
		}
		for i := range samples {
			for _, o := range origins {
				idle()
				snapTimes[o.name] = append(snapTimes[o.name], timeIt(func() error {
					_, err := lvs.CreateSnapshot(ctx, &pb.CreateSnapshotRequest{Name: fmt.Sprintf("%s-s%d", o.name, i), DeviceClass: class, SourceName: o.name})
					return err
				}))
			}
		}

		// (c) processes per mutation with watchers and queries running.
		idle()
		before, err := testVM.LVMCommands(ctx)
		if err != nil {
			b.Fatal(err)
		}
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
		burst := timeIt(func() error {
			for i := range 20 {
				if _, err := lvs.CreateLV(ctx, &pb.CreateLVRequest{Name: fmt.Sprintf("b-burst%d", i), DeviceClass: class, SizeBytes: 16 * mib}); err != nil {
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
		var total float64
		for cmd, n := range after {
			total += n - before[cmd]
		}
		reports := after["fullreport"] - before["fullreport"]

		ratioCreate := ratio(lvmdCreate, bareCreate)
		ratioSnap := ratio(lvmdSnap, bareSnap)
		ratioSize := ratio(snapTimes["b-large"], snapTimes["b-small"])
		b.ReportMetric(ratioCreate, "create/bare")
		b.ReportMetric(ratioSnap, "snapshot/bare")
		b.ReportMetric(ratioSize, "snap4G/snap256M")
		b.ReportMetric(reports/20, "reports/mutation")

		w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintf(w, "\n| measure | lvmd | baseline | ratio | goal |\n|---|---|---|---|---|\n")
		fmt.Fprintf(w, "| (a) CreateLV vs bare lvcreate (median of %d) | %s | %s | %.2f | <= 1.1 |\n", samples, median(lvmdCreate), median(bareCreate), ratioCreate)
		fmt.Fprintf(w, "| (a) CreateSnapshot vs bare lvcreate -s (median of %d) | %s | %s | %.2f | <= 1.1 |\n", samples, median(lvmdSnap), median(bareSnap), ratioSnap)
		fmt.Fprintf(w, "| (b) CreateSnapshot of a written 4 GiB vs 256 MiB origin | %s | %s | %.2f | <= 1.2 |\n", median(snapTimes["b-large"]), median(snapTimes["b-small"]), ratioSize)
		fmt.Fprintf(w, "| (c) lvm processes for 20 creates, 3 watchers, 100 GetCapacity | %.0f (%.0f lvcreate, %.0f fullreport) | 20 mutations | %.2f reports/mutation | <= 1 |\n",
			total, after["lvcreate"]-before["lvcreate"], reports, reports/20)
		fmt.Fprintf(w, "\n20 creates took %s with the watchers and queries running; VM boot took %.1fs.\n", burst.Round(time.Millisecond), testVM.BootSeconds)
		w.Flush()

		// Clean up, so that -count N starts from the same pool.
		list, err := lvs.ListLVs(ctx, &pb.ListLVsRequest{DeviceClass: class})
		if err != nil {
			b.Fatal(err)
		}
		for _, v := range list.GetVolumes() {
			if _, err := lvs.RemoveLV(ctx, &pb.RemoveLVRequest{Name: v.GetName(), DeviceClass: class}); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2].Round(time.Millisecond)
}

func ratio(a, b []time.Duration) float64 {
	return float64(median(a)) / float64(median(b))
}
